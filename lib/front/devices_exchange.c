/* Several devices per rank: only what groups need between ranks (see
 * devices_exchange.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "engine/exchange.h"
#include "engine/window.h"
#include "front/devices_exchange.h"
#include "front/state.h"
#include "kernels/reduce.h"
#include "ops/ops.h"
#include "ops/prologue.h"
#include "paths/peer.h"

struct dev_groups {
    int n;       /* devices in the largest group */
    int ngroups;
    int per;     /* devices per rank: device id / per is its rank */
    int *first;  /* ngroups + 1: where each group starts in ids and ranks */
    int *ids;    /* each group's device ids, in group order, group after group */
    int *ranks;  /* each group's ranks, first-device order (at first[j]) */
    int *nranks; /* ngroups: how many */
    bool scatter; /* psum_scatter: member i keeps block i of the reduction */
    bool move;    /* FLOW_MOVE: the parts flow_part() names go where it says */
    bool shared;  /* a move whose receivers all get the same part of a sender */
};

/* How many pieces of a reduction's part each device of a rank may send:
 * one per other rank (a whole-array reduction) or per other device
 * (psum_scatter). */
static uint64_t part_fan(const struct dev_groups *g, int world)
{
    int fan = g->scatter ? g->n - 1 : world - 1;
    return fan > 0 ? (uint64_t)fan : 1; /* (groups of one device send nothing) */
}

/* Group j's size, and its member i's device id. */
static int gsize(const struct dev_groups *g, int j) { return g->first[j + 1] - g->first[j]; }
static int gid(const struct dev_groups *g, int j, int i) { return g->ids[g->first[j] + i]; }

/* Subgroup s of gs: its size, and where its list starts in gs->indices. */
static int sub_size(const shmesh_groups *gs, int s)
{
    return gs->group_sizes ? gs->group_sizes[s] : gs->group_size;
}

/* Whether every subgroup of gs has the same size. */
static bool equal_subgroups(const shmesh_groups *gs)
{
    for (int s = 1; s < gs->ngroups; s++)
        if (sub_size(gs, s) != sub_size(gs, 0))
            return false;
    return true;
}

/* The groups over the call's axes (each n devices, ids), with
 * axis_index_groups cut into their subgroups, each in its list's order (a
 * device's index in its subgroup is its place in the list): g->first,
 * g->ngroups and g->n.  0, or -1 when out of memory. */
static int lay_groups(struct dev_groups *g, const shmesh_mesh *m, const shmesh_groups *gs, int n)
{
    int axis_groups = m->size / n, subs = gs ? gs->ngroups : 1;
    g->ngroups = axis_groups * subs;
    g->first = malloc(sizeof *g->first * (size_t)(g->ngroups + 1));
    int *whole = gs ? malloc(sizeof *whole * (size_t)m->size) : NULL;
    if (!g->first || (gs && !whole)) {
        free(whole);
        return -1;
    }
    if (gs)
        memcpy(whole, g->ids, sizeof *whole * (size_t)m->size);
    int at = 0;
    g->n = 0;
    for (int G = 0, j = 0; G < axis_groups; G++) {
        for (int s = 0, from = 0; s < subs; s++, j++) {
            int size = gs ? sub_size(gs, s) : n;
            g->first[j] = at;
            for (int i = 0; i < size; i++)
                g->ids[at++] = gs ? whole[G * n + gs->indices[from + i]] : g->ids[G * n + i];
            from += size;
            g->n = size > g->n ? size : g->n;
        }
    }
    g->first[g->ngroups] = at;
    free(whole);
    return 0;
}

struct dev_groups *dev_groups_make(const shmesh_mesh *m, const struct call *k0,
                                   const shmesh_groups *gs)
{
    const struct flow *f = &k0->f;
    shmesh_ctx *c = m->ctx;
    /* Subgroups of different sizes: only whole-array reductions take them
     * (the others refuse them before this). */
    if (m->process_local || !c || c->world < 2 || k0->local || k0->then ||
        (f->kind != FLOW_REDUCE && f->kind != FLOW_MOVE) || !f->in_bytes ||
        (gs && (gs->ngroups < 1 || (!equal_subgroups(gs) && !flow_allreduce(f)))) ||
        call_on_device(k0) || mesh_axes_in_rank((shmesh_mesh *)m, k0->d.naxes, k0->d.axis))
        return NULL;

    struct dev_groups *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->ids = malloc(sizeof *g->ids * (size_t)m->size);
    g->ranks = malloc(sizeof *g->ranks * (size_t)m->size);
    if (!g->ids || !g->ranks ||
        lay_groups(g, m, gs, mesh_groups_all(m, k0->d.naxes, k0->d.axis, g->ids))) {
        dev_groups_free(g);
        return NULL;
    }
    g->move = f->kind == FLOW_MOVE;
    g->scatter = !g->move && !flow_allreduce(f);
    g->shared = g->move && flow_shared(f);
    g->per = m->per;
    /* A reduction's part (reduce_by_parts) must hold an element of each
     * piece a rank sends in one window: else the gather serves it. */
    if (!g->move && (uint64_t)g->per * part_fan(g, c->world) * f->in_esz > win_capacity(c)) {
        dev_groups_free(g);
        return NULL;
    }
    if (!(g->nranks = calloc((size_t)g->ngroups, sizeof *g->nranks))) {
        dev_groups_free(g);
        return NULL;
    }
    for (int j = 0; j < g->ngroups; j++) {
        int *rs = g->ranks + g->first[j];
        for (int i = 0; i < gsize(g, j); i++) {
            int r = gid(g, j, i) / g->per, s = 0;
            while (s < g->nranks[j] && rs[s] != r)
                s++;
            if (s == g->nranks[j])
                rs[g->nranks[j]++] = r;
        }
    }
    return g;
}

void dev_groups_free(struct dev_groups *g)
{
    if (!g)
        return;
    free(g->first);
    free(g->ids);
    free(g->ranks);
    free(g->nranks);
    free(g);
}

/* One run: the exchanges' state (struct call's op_state). */
struct run {
    const struct dev_groups *g;
    int me, world;
    struct call *ks;
    const int *ids;
    int nlocal;
    uint64_t count; /* elements: of the array (a whole-array reduction), of a
                       block (psum_scatter), of the largest part (a move) */
    size_t in_esz, out_esz;
    struct transfers st; /* dr_transfers, with the input's element as unit */
    int phase;      /* 1: inputs' shares to their owners; 2: results back */
    /* Per rank: where the part it sent this one in phase 1 lies, in its
     * window (a whole-array reduction's phase 2 goes straight into the
     * outputs, a move into its receivers'). */
    unsigned char **rbuf;
    /* This rank's shares' results, group after group (a whole-array
     * reduction); scratch for blocks or parts that are not one run (psum_scatter,
     * a move). */
    unsigned char *reduced;
    uint64_t *red_off;      /* per group: where its result is in `reduced` */
    /* A whole-array reduction's phase 1 (and a psum_scatter's exchange)
     * runs part by part: part p is elements [p * part_elems, (p + 1) *
     * part_elems) of every share (of every block), so that each rank
     * reduces its own at once, few enough that every rank's transfer fits
     * one window; each part is reduced straight out of the windows when the
     * last rank sending this one something (last_sender, -1: none) has
     * delivered (rbuf then points into the windows).  part_elems 0: whole
     * shares and blocks (moves, phase 2). */
    uint64_t part, part_elems;
    int last_sender;
    bool part_done;
    const void **srcs; /* g->n: the sources of one reduction */
};

/* Rank r's position among group j's ranks, or -1. */
static int slot(const struct dev_groups *g, int j, int r)
{
    const int *rs = g->ranks + g->first[j];
    for (int s = 0; s < g->nranks[j]; s++)
        if (rs[s] == r)
            return s;
    return -1;
}

/* Share s of group j: elements [lo, hi). */
static uint64_t share(const struct run *x, int j, int s, uint64_t *lo)
{
    uint64_t hi;
    peer_share(x->count, x->g->nranks[j], s, lo, &hi);
    return hi - *lo;
}

/* psum_scatter: the elements of a block this part covers, from *first. */
static uint64_t block_part(const struct run *x, uint64_t *first)
{
    *first = x->part * x->part_elems;
    if (!x->part_elems)
        return x->count;
    if (*first >= x->count)
        return 0;
    return x->count - *first < x->part_elems ? x->count - *first : x->part_elems;
}

/* The part of share s of group j that this phase-1 part covers. */
static uint64_t share_part(const struct run *x, int j, int s, uint64_t *lo)
{
    uint64_t len = share(x, j, s, lo), a = x->part * x->part_elems;
    if (!x->part_elems)
        return len;
    if (a >= len)
        return 0;
    *lo += a;
    return len - a < x->part_elems ? len - a : x->part_elems;
}

/* Local device `id`'s call. */
static struct call *local_call(const struct run *x, int id)
{
    for (int l = 0; l < x->nlocal; l++)
        if (x->ids[l] == id)
            return &x->ks[l];
    return NULL;
}

/* Member i of group j's rank. */
static int rank_at(const struct dev_groups *g, int j, int i)
{
    return gid(g, j, i) / g->per;
}

typedef void piece_fn(const struct run *x, int j, int i, int t, uint64_t at, uint64_t len,
                      void *arg);

/* A move's pieces from rank `from` to rank `to` in group j, from `at` on:
 * for each of `from`'s members i (group order), the part flow_part() sends
 * each of `to`'s members t, or (shared: the same part for every receiver)
 * once, with the first such t.  Returns where the next piece starts. */
static uint64_t walk_moves(const struct run *x, int j, int from, int to, uint64_t at,
                           piece_fn *each, void *arg)
{
    const struct dev_groups *g = x->g;
    const struct call *k = &x->ks[0]; /* every local call has the same flow */
    for (int i = 0; i < gsize(g, j); i++) {
        if (rank_at(g, j, i) != from)
            continue;
        for (int t = 0; t < gsize(g, j); t++) {
            struct box bs, bd;
            if (rank_at(g, j, t) != to || !flow_part(k, i, t, &bs, &bd))
                continue;
            uint64_t len = box_elems(&bs) * bs.esz;
            if (each)
                each(x, j, i, t, at, len, arg);
            at += len;
            if (g->shared)
                break;
        }
    }
    return at;
}

/* What rank `from` sends rank `to` in this phase, piece by piece in the
 * order both sides walk: for each group holding both (in group order),
 *   phase 1 of a whole-array reduction: the share `to` owns of each of
 *     `from`'s member devices there (in group order);
 *   phase 1 of a psum_scatter: for each of `from`'s member devices there,
 *     block i of its input for each of `to`'s members i (group order);
 *   phase 2: the share `from` owns, reduced.
 * each(piece) gets the group, the sending and the receiving member (-1
 * where the piece is not one member's; in phase 2, the sending member is -1
 * and the receiving one is from's slot in the group, whose share it is) and
 * the piece's place; returns the total. */
static uint64_t walk(const struct run *x, int from, int to, piece_fn *each, void *arg)
{
    const struct dev_groups *g = x->g;
    uint64_t at = 0, lo;
    if (from == to)
        return 0;
    for (int j = 0; j < g->ngroups; j++) {
        int sf = slot(g, j, from), st = slot(g, j, to);
        if (sf < 0 || st < 0)
            continue;
        if (x->phase == 2) {
            uint64_t len = share(x, j, sf, &lo) * x->out_esz;
            if (each)
                each(x, j, -1, sf, at, len, arg);
            at += len;
            continue;
        }
        if (g->move) {
            at = walk_moves(x, j, from, to, at, each, arg);
            continue;
        }
        uint64_t len = (g->scatter ? block_part(x, &lo) : share_part(x, j, st, &lo)) * x->in_esz;
        for (int i = 0; i < gsize(g, j); i++) {
            if (rank_at(g, j, i) != from)
                continue;
            for (int t = 0; t < gsize(g, j); t++) {
                if (g->scatter ? rank_at(g, j, t) != to : t > 0)
                    continue;
                if (each)
                    each(x, j, i, g->scatter ? t : -1, at, len, arg);
                at += len;
            }
        }
    }
    return at;
}

static uint64_t dr_bytes(const struct call *k, int from, int to)
{
    return walk(k->op_state, from, to, NULL, NULL);
}

struct pack_arg {
    int to;
    uint64_t off, len;
    unsigned char *dst;
};

/* The part of one piece inside [off, off + len) of the transfer. */
static void pack_piece(const struct run *x, int j, int i, int t, uint64_t at, uint64_t len,
                       void *arg)
{
    struct pack_arg *p = arg;
    uint64_t a, b;
    if (!xpiece_meet(at, len, p->off, p->len, &a, &b))
        return;
    const unsigned char *src;
    uint64_t lo;
    if (x->phase == 2) {
        src = x->reduced + x->red_off[j];
    } else if (x->g->scatter || x->g->move) {
        /* Block t of member i's input (a move: the part it sends t): a box
         * of it (whole elements: the transfers' unit is the element). */
        const struct call *k = local_call(x, gid(x->g, j, i));
        struct box bs, bd;
        uint64_t first = 0;
        if (x->g->scatter) /* this part of the block */
            block_part(x, &first);
        flow_part(k, i, t, &bs, &bd);
        box_read(&bs, k->f.in.data, first + (a - at) / x->in_esz, (b - a) / x->in_esz,
                 p->dst + (a - p->off));
        return;
    } else {
        share_part(x, j, slot(x->g, j, p->to), &lo);
        const struct call *k = local_call(x, gid(x->g, j, i));
        src = (const unsigned char *)k->f.in.data + lo * x->in_esz;
    }
    memcpy(p->dst + (a - p->off), src + (a - at), (size_t)(b - a));
}

static void dr_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct run *x = k->op_state;
    struct pack_arg p = {to, off, len, dst};
    walk(x, x->me, to, pack_piece, &p);
}

struct recv_arg {
    uint64_t off, len;
    const unsigned char *src;
};

/* A move's piece, the part of it inside [off, off + len) of the transfer:
 * into the output of its receiver t, or (shared) of every member of the
 * group here that gets member i's part. */
static void recv_piece(const struct run *x, int j, int i, int t, uint64_t at, uint64_t len,
                       void *arg)
{
    const struct recv_arg *r = arg;
    uint64_t a, b;
    if (!xpiece_meet(at, len, r->off, r->len, &a, &b))
        return;
    const struct dev_groups *g = x->g;
    for (int u = g->shared ? 0 : t; u < (g->shared ? gsize(g, j) : t + 1); u++) {
        struct box bs, bd;
        if (rank_at(g, j, u) != x->me)
            continue;
        const struct call *k = local_call(x, gid(g, j, u));
        if (!flow_part(k, i, u, &bs, &bd))
            continue;
        box_write(&bd, k->f.out.data, (a - at) / x->in_esz, (b - a) / x->in_esz,
                  r->src + (a - r->off));
    }
}

/* Phase 2's piece: group j's share of rank `from`, the part of it inside
 * [off, off + len) of the transfer, straight into the output of each of
 * this rank's devices in the group. */
static void result_piece(const struct run *x, int j, int i, int t, uint64_t at, uint64_t len,
                         void *arg)
{
    const struct recv_arg *r = arg;
    const struct dev_groups *g = x->g;
    uint64_t a, b, lo;
    (void)i;
    if (!xpiece_meet(at, len, r->off, r->len, &a, &b))
        return;
    share(x, j, t, &lo);
    for (int u = 0; u < gsize(g, j); u++) {
        int id = gid(g, j, u);
        if (id / g->per == x->me)
            memcpy((unsigned char *)local_call(x, id)->f.out.data + lo * x->out_esz + (a - at),
                   r->src + (a - r->off), (size_t)(b - a));
    }
}

static void reduce_part(struct run *x);

static void dr_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    struct run *x = k->op_state; /* a reduction's part notes where pieces are */
    struct recv_arg r = {off, len, src};
    if (x->g->move)
        walk(x, from, x->me, recv_piece, &r);
    else if (x->phase == 2)
        walk(x, from, x->me, result_piece, &r);
    else { /* the whole transfer is in this window (off 0): reduced from there */
        x->rbuf[from] = (unsigned char *)(uintptr_t)src - off; /* only read */
        if (from == x->last_sender)
            reduce_part(x);
    }
}

static const struct transfers dr_transfers = {.unit = 1, .bytes = dr_bytes, .pack = dr_pack,
                                              .recv = dr_recv};

/* This rank's results (a whole-array reduction's shares) or scratch (blocks
 * or parts that are not one run): one buffer the context keeps (the
 * several-devices gather's, front/state.h), so that calls after the first
 * take no page faults for it; the pieces other ranks send are read where
 * they lie, in the windows.  0 or SHMESH_ERR_NOMEM. */
static int lay_out(struct run *x, shmesh_ctx *c, uint64_t mine)
{
    x->phase = 1;
    if (mine > front_of(c)->dev_buf_bytes) {
        unsigned char *b = mine <= SIZE_MAX ? realloc(front_of(c)->dev_buf, (size_t)mine) : NULL;
        if (!b)
            return SHMESH_ERR_NOMEM;
        front_of(c)->dev_buf = b;
        front_of(c)->dev_buf_bytes = (size_t)mine;
    }
    x->reduced = front_of(c)->dev_buf;
    return 0;
}

/* Phase 1's pieces from other ranks, as sources of a reduction: member i
 * of group j sits at `at` of its rank's transfer. */
struct src_arg {
    const void **srcs;
    int j, t; /* the group, and (psum_scatter) the receiving member, else -1 */
};

static void src_piece(const struct run *x, int j, int i, int t, uint64_t at, uint64_t len,
                      void *arg)
{
    struct src_arg *s = arg;
    (void)len;
    if (j == s->j && t == s->t)
        s->srcs[i] = x->rbuf[rank_at(x->g, j, i)] + at;
}

/* This rank's share of each group it is in, the part this exchange
 * covered, over every member in group order: the others' pieces read
 * where rbuf points (into the windows). */
static void scatter_part(struct run *x);

static void reduce_part(struct run *x)
{
    const struct dev_groups *g = x->g;
    const struct flow *f = &x->ks[0].f;
    const void **srcs = x->srcs;
    x->part_done = true;
    if (g->scatter) { /* each local device's block */
        scatter_part(x);
        return;
    }
    for (int j = 0; j < g->ngroups; j++) {
        int s = slot(g, j, x->me);
        uint64_t lo, cnt = s < 0 ? 0 : share_part(x, j, s, &lo);
        if (!cnt)
            continue;
        struct src_arg a = {srcs, j, -1};
        for (int r = 0; r < x->world; r++)
            if (r != x->me)
                walk(x, r, x->me, src_piece, &a);
        /* pmean divides by the group's size: a call of a device here in
         * group j knows it (subgroups may differ in size). */
        int mean_n = f->mean_n;
        for (int i = 0; i < gsize(g, j); i++) {
            int id = gid(g, j, i);
            if (id / g->per != x->me)
                continue;
            const struct call *k = local_call(x, id);
            srcs[i] = (const unsigned char *)k->f.in.data + lo * x->in_esz;
            mean_n = k->f.mean_n;
        }
        reduce_run(f->red, f->in.dtype, f->out.dtype,
                   x->reduced + x->red_off[j] + x->part * x->part_elems * x->out_esz, srcs,
                   gsize(g, j),
                   (size_t)cnt, mean_n);
    }
}

/* Device id's group j and position t in it. */
static void place_of(const struct dev_groups *g, int id, int *j, int *t)
{
    int p = 0;
    while (g->ids[p] != id)
        p++;
    for (*j = 0; g->first[*j + 1] <= p; (*j)++)
        ;
    *t = p - g->first[*j];
}

/* psum_scatter: each local device's block of every member's input (its
 * own rank's read in place, or packed into `bounce` where the block is not
 * one run), reduced in group order into its output. */
static void scatter_part(struct run *x)
{
    const struct dev_groups *g = x->g;
    const struct flow *f = &x->ks[0].f;
    const void **srcs = x->srcs;
    unsigned char *bounce = x->reduced;
    uint64_t first, cnt = block_part(x, &first);
    for (int l = 0; l < x->nlocal && cnt; l++) {
        int j, t;
        place_of(g, x->ids[l], &j, &t);
        struct src_arg a = {srcs, j, t};
        for (int r = 0; r < x->world; r++)
            if (r != x->me)
                walk(x, r, x->me, src_piece, &a);
        for (int i = 0; i < gsize(g, j); i++) {
            if (rank_at(g, j, i) != x->me)
                continue;
            const struct call *k = local_call(x, gid(g, j, i));
            struct box bs, bd;
            uint64_t off;
            flow_part(k, i, t, &bs, &bd);
            if (box_contiguous(&bs, &off)) {
                srcs[i] = (const unsigned char *)k->f.in.data + (off + first) * x->in_esz;
            } else {
                unsigned char *b = bounce + (size_t)i * x->count * x->in_esz;
                box_read(&bs, k->f.in.data, first, cnt, b);
                srcs[i] = b;
            }
        }
        reduce_run(f->red, f->in.dtype, f->out.dtype,
                   (unsigned char *)x->ks[l].f.out.data + first * x->out_esz, srcs, gsize(g, j),
                   (size_t)cnt, f->mean_n);
    }
}

/* A move's parts between this rank's own devices: each part its member i
 * sends its member t, through `bounce` where either side is not one run. */
static void local_moves(struct run *x, unsigned char *bounce)
{
    const struct dev_groups *g = x->g;
    for (int l = 0; l < x->nlocal; l++) {
        int j, t;
        place_of(g, x->ids[l], &j, &t);
        struct call *kt = &x->ks[l];
        for (int i = 0; i < gsize(g, j); i++) {
            struct box bs, bd;
            if (rank_at(g, j, i) != x->me || !flow_part(kt, i, t, &bs, &bd))
                continue;
            const struct call *ki = local_call(x, gid(g, j, i));
            uint64_t n = box_elems(&bs), so, doff;
            if (box_contiguous(&bs, &so) && box_contiguous(&bd, &doff)) {
                memcpy((unsigned char *)kt->f.out.data + doff * bd.esz,
                       (const unsigned char *)ki->f.in.data + so * bs.esz, (size_t)(n * bs.esz));
                continue;
            }
            box_read(&bs, ki->f.in.data, 0, n, bounce);
            box_write(&bd, kt->f.out.data, 0, n, bounce);
        }
    }
}

/* This rank's own shares' results into each of its devices in their
 * groups (the other ranks' went there as they came: dr_recv). */
static void write_own_shares(const struct run *x)
{
    const struct dev_groups *g = x->g;
    for (int j = 0; j < g->ngroups; j++) {
        int s = slot(g, j, x->me);
        uint64_t lo, len = s < 0 ? 0 : share(x, j, s, &lo) * x->out_esz;
        if (!len) /* an empty share: `reduced` may be NULL */
            continue;
        for (int i = 0; i < gsize(g, j); i++) {
            int id = gid(g, j, i);
            if (id / g->per == x->me)
                memcpy((unsigned char *)local_call(x, id)->f.out.data + lo * x->out_esz,
                       x->reduced + x->red_off[j], (size_t)len);
        }
    }
}

bool dev_groups_apart(const struct call *ks, int nlocal)
{
    for (int l = 0; l < nlocal; l++)
        for (int m = 0; m < nlocal; m++)
            if (m != l && bytes_overlap(ks[m].f.in.data, ks[m].f.in_bytes, ks[l].f.out.data,
                                       ks[l].f.out_bytes))
                return false;
    return true;
}

/* A whole-array reduction's phase 1 (a psum_scatter's exchange), part
 * after part: each part of E elements of every share (block), where a
 * rank's transfer (its `per` devices' pieces, part_fan each) fits one
 * window, so every piece of the part is in the windows at once when the
 * last sender's arrives (dr_recv), and is reduced there: no copy out of the
 * windows.  Every rank cuts the same parts. */
static int reduce_by_parts(struct run *x, shmesh_ctx *c, const struct call *k0)
{
    const struct dev_groups *g = x->g;
    uint64_t longest = g->scatter ? x->count : 0, lo;
    for (int j = 0; j < g->ngroups && !g->scatter; j++)
        for (int s = 0; s < g->nranks[j]; s++) {
            uint64_t len = share(x, j, s, &lo);
            longest = len > longest ? len : longest;
        }
    /* A rank sends each of its devices' piece of every other rank's part
     * (psum_scatter: of every other device's block). */
    x->part_elems = win_capacity(c) / ((uint64_t)g->per * part_fan(g, x->world) * x->in_esz);
    /* (at least 1: dev_groups_make sends larger jobs to the gather) */
    uint64_t parts = longest ? (longest + x->part_elems - 1) / x->part_elems : 1;
    int rc = 0;
    for (x->part = 0; !rc && x->part < parts; x->part++) {
        x->last_sender = -1;
        for (int r = 0; r < x->world; r++)
            if (r != x->me && walk(x, r, x->me, NULL, NULL))
                x->last_sender = r;
        x->part_done = false;
        rc = op_world_transfers(c, k0->name, &k0->d, &x->st, x, NULL, 0);
        if (!rc && !x->part_done) /* nothing came: this rank's own devices only */
            reduce_part(x);
    }
    return rc;
}

int dev_groups_run(shmesh_ctx *c, const struct dev_groups *g, struct call *ks,
                   const int *ids, int nlocal)
{
    struct call *k0 = &ks[0];
    struct run x = {.g = g, .me = c->rank, .world = c->world, .ks = ks, .ids = ids,
                    .nlocal = nlocal, .in_esz = k0->f.in_esz, .out_esz = k0->f.out_esz,
                    .st = dr_transfers};
    x.st.unit = x.in_esz;
    x.count = k0->f.in_bytes / x.in_esz;
    if (g->scatter) { /* a block's elements */
        struct box bs, bd;
        flow_part(k0, 0, 0, &bs, &bd);
        x.count = box_elems(&bs);
    }
    if (g->move) { /* room for the largest part, for local moves */
        x.count = 0;
        for (int i = 0; i < g->n; i++)
            for (int t = 0; t < g->n; t++) {
                struct box bs, bd;
                if (flow_part(k0, i, t, &bs, &bd) && box_elems(&bs) > x.count)
                    x.count = box_elems(&bs);
            }
    }
    x.rbuf = calloc((size_t)c->world, sizeof *x.rbuf);
    x.red_off = calloc((size_t)g->ngroups, sizeof *x.red_off);
    const void **srcs = malloc(sizeof *srcs * (size_t)g->n);
    x.srcs = srcs;
    uint64_t mine = 0, lo;
    for (int j = 0; j < g->ngroups; j++) {
        int s = slot(g, j, x.me);
        x.red_off[j] = mine;
        if (s >= 0)
            mine += g->scatter ? 0 : share(&x, j, s, &lo) * x.out_esz;
    }
    /* psum_scatter: room to pack this rank's members' blocks that are not
     * one run. */
    if (g->scatter)
        mine = (uint64_t)g->n * x.count * x.in_esz;
    if (g->move)
        mine = x.count * x.in_esz;
    int rc = 0;
    if (!x.rbuf || !x.red_off || !srcs || lay_out(&x, c, mine))
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory for %d local devices' shares",
                      k0->name, nlocal);
    if (!rc && g->move) /* one exchange */
        rc = op_world_transfers(c, k0->name, &k0->d, &x.st, &x, NULL, 0);
    if (!rc && g->move) {
        local_moves(&x, x.reduced);
    } else if (!rc && g->scatter) {
        rc = reduce_by_parts(&x, c, k0);
    } else if (!rc) {
        rc = reduce_by_parts(&x, c, k0);
        x.part = x.part_elems = 0;
        x.phase = 2;
        if (!rc)
            rc = op_world_transfers(c, k0->name, &k0->d, &x.st, &x, NULL, 0);
        if (!rc)
            write_own_shares(&x);
    }
    free(x.rbuf);
    free(x.red_off);
    free(srcs);
    return rc;
}
