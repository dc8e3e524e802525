/* Device IPC: every member's buffers are device memory.  Members publish
 * IPC handles of their buffers in a window, each maps the peers' it needs
 * (device/gpu.c caches the mappings), and the data moves device to
 * device, by the runtime's copies and the reduction kernels
 * (device/kernels.h), queued on the context's transfer:
 *
 *   moves          each member copies the parts meant for it out of the
 *                  senders' mapped inputs into its output
 *   psum_scatter   each member reduces its block of every input
 *   whole-array    one-shot: each member reduces every element of every
 *   reductions     input into its output; two-shot (large, or any member in
 *                  place): each member reduces its share and writes it into
 *                  every member's output
 *
 * Members combine in group order with the host's arithmetic, so every
 * member, and every path, gives the same bits.  Before publishing, a member
 * waits for its transfer (its inputs are then complete); after its part, it
 * waits again, then publishes its status (paths/peer.h): the status window
 * keeps every member from leaving while others still read or write its
 * buffers, and fails the call alike on every member when one could not map
 * or copy.  A peer's buffer that runs past its allocation as the runtime
 * maps it here is another matter: a published size that cannot be right,
 * caught before anything is queued, poisons the context and tells the job
 * (SHMESH_ERR_BAD_SEGMENT, as check_pubs does).  The cross-process order is
 * the segment's windows; no flag in device memory is needed (the kernels
 * wait for nothing). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "device/gpu.h"
#include "engine/exchange.h"
#include "paths/device_ipc.h"
#include "paths/peer.h"
#include "paths/state.h"

/* A failure's words, at most. */
#define WHY_MAX 192

/* What each member publishes. */
struct dev_pub {
    struct dev_buf in, out;
    uint64_t gen;     /* its generation (device/gpu.h) */
    int32_t status;   /* 0, or the rt_status of exporting `which` */
    int32_t which;    /* 0: the input, 1: the output */
    char why[WHY_MAX];
};

/* The call's own state (k->path_state), in host memory from the device
 * layer's pool: this member's failure, in its words, for after the status
 * window, and every member's publication. */
struct dev_state {
    char why[WHY_MAX];
    struct dev_pub pubs[];
};

static struct dev_pub *pubs(const struct call *k)
{
    return ((struct dev_state *)k->path_state)->pubs;
}

static uint64_t pub_bytes(const struct call *k, int from, int to) { return sizeof(struct dev_pub); }

static void pub_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    memcpy(dst, (const unsigned char *)&pubs(k)[k->g.me] + off, len);
}

static void pub_recv(const struct call *k, int from, uint64_t off, const void *src, uint64_t len)
{
    memcpy((unsigned char *)&pubs(k)[from] + off, src, len);
}

static const struct transfers publish = {.broadcast = true,
                                       .control = true,
                                       .unit = sizeof(struct dev_pub),
                                       .bytes = pub_bytes,
                                       .pack = pub_pack,
                                       .recv = pub_recv};

/* Whether this path takes every exchange of the call that moves its arrays
 * (its kinds, flow, op and dtype, the group's size: facts every member
 * shares); else host staging does (paths/device_staged.c).  An exchange of
 * the op's own host data (ragged's offsets) of a call it takes goes to the
 * host paths (arrays_only). */
static bool dev_candidate(const struct call *k)
{
    const shmesh_ctx *c = k->c;
    const struct flow *f = &k->f;
    if (!c->dev || k->in_kind != MEM_DEVICE || (f->out_bytes && k->out_kind != MEM_DEVICE))
        return false;
    if (f->kind == FLOW_MOVE)
        return true;
    if (f->kind == FLOW_TRANSFERS)
        return k->dev_rows != NULL;
    return f->kind == FLOW_REDUCE && f->in.dtype == f->out.dtype && k->g.n <= RT_MAX_SRC &&
           (int)f->red <= RT_MEAN && c->dev->rt->takes((int)f->red, f->in.dtype);
}

/* Stage 0: this member's buffers, published. */
static void publish_own(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct device_layer *d = c->dev;
    const struct flow *f = &k->f;
    struct dev_pub *me = &pubs(k)[k->g.me];
    memset(me, 0, sizeof *me);
    me->gen = d->gen;
    if (d->rt->sync(d->stream)) { /* the stream's earlier work made the inputs */
        me->status = RT_ERR;
        snprintf(me->why, sizeof me->why, "waiting for its stream: %s", d->rt->last_error());
        return;
    }
    int rc = f->in_bytes ? device_export(c, f->in.data, f->in_bytes, &me->in, me->why,
                                         sizeof me->why)
                         : 0;
    if (!rc && f->out_bytes) {
        rc = device_export(c, f->out.data, f->out_bytes, &me->out, me->why, sizeof me->why);
        me->which = 1;
    }
    me->status = rc;
    me->gen = d->gen; /* an export may have found a freed allocation */
}

/* After the publication window: a member that could not export fails the
 * call on every member alike; what a member published must fit the call. */
static int check_pubs(struct call *k)
{
    const struct flow *f = &k->f;
    for (int q = 0; q < k->g.n; q++) {
        struct dev_pub *p = &pubs(k)[q];
        int r = k->g.ranks[q];
        p->why[WHY_MAX - 1] = 0;
        for (char *ch = p->why; *ch; ch++) /* a peer's words: printable only */
            if (*ch < 0x20 || *ch == 0x7f)
                *ch = '?';
        if (p->status == RT_ERR_POOL || p->status == RT_ERR)
            return ctx_fail(k->c, p->status == RT_ERR_POOL ? SHMESH_ERR_INVALID : SHMESH_ERR_SYSTEM,
                            "%s (call #%" PRIu64 "): rank %d's %s cannot be shared with the "
                            "other ranks: %s; the call failed on every member of its group",
                            k->name, k->seq, r, p->which ? "output" : "input", p->why);
        bool ok = p->status == 0 && p->in.bytes == f->in_bytes && p->out.bytes == f->out_bytes &&
                  p->in.off <= p->in.size && p->in.bytes <= p->in.size - p->in.off &&
                  p->out.off <= p->out.size && p->out.bytes <= p->out.size - p->out.off;
        if (!ok)
            return fail_corrupt(k->c, k->name, k->seq, r,
                                "rank %d published device buffers of %" PRIu64 " and %" PRIu64
                                " bytes (status %d) for a call of %" PRIu64 " and %" PRIu64,
                                r, p->in.bytes, p->out.bytes, (int)p->status, f->in_bytes,
                                f->out_bytes);
    }
    return 0;
}

/* Whether a member's output is its input (two-shot then: one-shot would
 * read an input its owner is overwriting). */
static bool in_place(const struct dev_pub *p)
{
    return p->in.bytes && p->in.base == p->out.base && p->in.id == p->out.id &&
           p->in.off < p->out.off + p->out.bytes && p->out.off < p->in.off + p->in.bytes;
}

/* The failed step's explanation, on this member (its peers know the errno
 * and whose buffer). */
struct dev_run {
    struct call *k;
    const struct rt_ops *rt;
    void *stream;
    int device;
    char why[WHY_MAX];
};

/* A member's buffer mapped here: 0; an errno when the runtime could not
 * map it (the status window tells the others); or, when the buffer runs
 * past the allocation as the runtime maps it here, the context poisoned
 * and the job told, as for any published value that cannot be right: a
 * negative error code. */
static int map_peer(struct dev_run *x, int q, bool output, unsigned char **at)
{
    struct call *k = x->k;
    const struct dev_pub *p = &pubs(k)[q];
    int r = k->g.ranks[q];
    void *m;
    int rc = device_import(k->c, r, output ? &p->out : &p->in, output ? "output" : "input",
                           p->gen, x->device, &m, x->why, sizeof x->why);
    if (rc == DEVICE_PAST_END)
        return fail_corrupt(k->c, k->name, k->seq, r, "%s", x->why);
    if (rc) {
        k->err_peer = r;
        return ENXIO;
    }
    *at = m;
    return 0;
}

/* Maps what this member reads (and, two-shot, writes) of its peers. */
static int map_peers(struct dev_run *x, bool outputs)
{
    struct call *k = x->k;
    for (int q = 0; q < k->g.n; q++) {
        if (q == k->g.me) {
            k->s->zin[q] = k->f.in.data;
            k->s->zout[q] = k->f.out.data;
            continue;
        }
        int err = 0;
        if (k->f.in_bytes)
            err = map_peer(x, q, false, &k->s->zin[q]);
        if (!err && outputs && k->f.out_bytes)
            err = map_peer(x, q, true, &k->s->zout[q]);
        if (err)
            return err;
    }
    return 0;
}

static int rt_failed(struct dev_run *x, const char *what)
{
    snprintf(x->why, sizeof x->why, "%s: %s", what, x->rt->last_error());
    x->k->err_peer = x->k->c->rank;
    return EIO;
}

/* A box's runs, copied between the array and packed scratch. */
struct runs_copy {
    struct dev_run *x;
    unsigned char *array, *packed;
    size_t esz;
    bool to_packed;
    int rc;
};

static void run_copy(void *arg, uint64_t array_off, uint64_t packed_off, uint64_t len)
{
    struct runs_copy *r = arg;
    if (r->rc)
        return;
    unsigned char *a = r->array + array_off * r->esz, *p = r->packed + packed_off * r->esz;
    size_t n = (size_t)(len * r->esz);
    r->rc = r->to_packed ? r->x->rt->copy(p, a, n, r->x->stream)
                         : r->x->rt->copy(a, p, n, r->x->stream);
}

static int dev_box_copy(struct dev_run *x, const struct box *b, void *array, void *packed,
                    bool to_packed)
{
    struct runs_copy r = {x, array, packed, b->esz, to_packed, 0};
    box_runs(b, 0, box_elems(b), run_copy, &r);
    return r.rc ? rt_failed(x, "copying a block") : 0;
}

static int dev_move(struct dev_run *x)
{
    struct call *k = x->k;
    const struct flow *f = &k->f;
    unsigned char *out = f->out.data;
    if (f->zero_out) { /* nothing comes here: zeros, from host memory the layer keeps */
        const void *z = device_zeros(k->c);
        for (uint64_t at = 0; at < f->out_bytes; at += DEVICE_ZEROS_BYTES) {
            uint64_t len = f->out_bytes - at < DEVICE_ZEROS_BYTES ? f->out_bytes - at
                                                                  : DEVICE_ZEROS_BYTES;
            if (!z || x->rt->copy(out + at, z, (size_t)len, x->stream))
                return rt_failed(x, "zeroing its output");
        }
    }
    for (int q = 0; q < k->g.n; q++) {
        struct box src, dst;
        if (!flow_part(k, q, k->g.me, &src, &dst))
            continue;
        uint64_t count = box_elems(&src), so, dof;
        if (!count)
            continue;
        unsigned char *in = k->s->zin[q];
        if (box_contiguous(&src, &so) && box_contiguous(&dst, &dof)) {
            if (x->rt->copy(out + dof * dst.esz, in + so * src.esz, (size_t)(count * src.esz),
                            x->stream))
                return rt_failed(x, "copying a block");
            continue;
        }
        void *tmp = device_scratch(k->c, count * src.esz, x->device);
        if (!tmp)
            return rt_failed(x, "allocating device scratch");
        int err = dev_box_copy(x, &src, in, tmp, true);
        if (!err)
            err = dev_box_copy(x, &dst, out, tmp, false);
        if (err)
            return err;
    }
    return 0;
}

/* FLOW_TRANSFERS: the op walks what each member sends this one. */
static int rows_copy(void *arg, void *dst, const void *src, uint64_t n)
{
    struct dev_run *x = arg;
    return n && x->rt->copy(dst, src, (size_t)n, x->stream) ? rt_failed(x, "copying rows") : 0;
}

static int dev_rows(struct dev_run *x)
{
    struct call *k = x->k;
    for (int q = 0; q < k->g.n; q++) {
        int err = k->dev_rows(k, q, k->s->zin[q], rows_copy, x);
        if (err)
            return err;
    }
    return 0;
}

static int kernel(struct dev_run *x, void *dst, unsigned char *const *srcs, uint64_t at,
                  uint64_t n)
{
    const struct flow *f = &x->k->f;
    struct rt_reduce r = {.op = (int)f->red, .dtype = f->in.dtype, .dst = dst,
                          .nsrc = x->k->g.n, .n = n, .mean_n = f->mean_n};
    for (int q = 0; q < r.nsrc; q++)
        r.src[q] = srcs[q] + at * f->in_esz;
    return x->rt->reduce(&r, x->stream) ? rt_failed(x, "the reduction kernel") : 0;
}

/* psum_scatter: this member's block of every input, reduced into its output. */
static int dev_scatter(struct dev_run *x)
{
    struct call *k = x->k;
    const struct flow *f = &k->f;
    int n = k->g.n;
    struct box src, dst;
    flow_part(k, k->g.me, k->g.me, &src, &dst);
    uint64_t count = box_elems(&src), so;
    if (!count)
        return 0;
    unsigned char *srcs[RT_MAX_SRC];
    if (box_contiguous(&src, &so)) {
        for (int q = 0; q < n; q++)
            srcs[q] = k->s->zin[q] + so * f->in_esz;
    } else { /* each member's block packed into scratch first */
        unsigned char *tmp = device_scratch(k->c, (uint64_t)n * count * f->in_esz, x->device);
        if (!tmp)
            return rt_failed(x, "allocating device scratch");
        for (int q = 0; q < n; q++) {
            srcs[q] = tmp + (uint64_t)q * count * f->in_esz;
            int err = dev_box_copy(x, &src, k->s->zin[q], srcs[q], true);
            if (err)
                return err;
        }
    }
    return kernel(x, f->out.data, srcs, 0, count);
}

static int dev_allreduce(struct dev_run *x, bool two_shot)
{
    struct call *k = x->k;
    const struct flow *f = &k->f;
    uint64_t count = f->in_bytes / f->in_esz;
    if (!two_shot)
        return kernel(x, f->out.data, k->s->zin, 0, count);
    uint64_t lo, hi;
    peer_share(count, k->g.n, k->g.me, &lo, &hi);
    if (lo == hi)
        return 0;
    unsigned char *mine = (unsigned char *)f->out.data + lo * f->out_esz;
    int err = kernel(x, mine, k->s->zin, lo, hi - lo);
    for (int q = 0; !err && q < k->g.n; q++)
        if (q != k->g.me &&
            x->rt->copy(k->s->zout[q] + lo * f->out_esz, mine, (size_t)((hi - lo) * f->out_esz),
                        x->stream))
            err = rt_failed(x, "writing its share into a peer's output");
    return err;
}

/* Stage 2: this member's part of the data, queued and waited for: 0, an
 * errno whose sentence is kept in the device layer for after the status
 * window, or a negative error code when the context is poisoned (a peer's
 * buffer past its allocation: nothing was queued). */
static int run_part(struct call *k)
{
    struct device_layer *d = k->c->dev;
    struct dev_run x = {.k = k, .rt = d->rt, .stream = d->stream};
    x.device = device_home(k->c, k->f.in.data);
    bool allreduce = flow_allreduce(&k->f);
    bool two_shot = false;
    if (allreduce) {
        two_shot = k->size >= paths_of(k->c)->device_two_shot_min;
        for (int q = 0; q < k->g.n; q++)
            two_shot |= in_place(&pubs(k)[q]);
    }
    int err = map_peers(&x, two_shot);
    if (err < 0)
        return err;
    if (!err)
        peer_count(k, k->f.kind == FLOW_MOVE        ? PEER_MOVE
                      : k->f.kind == FLOW_TRANSFERS ? PEER_ROWS
                      : !allreduce                  ? PEER_SCATTER
                      : two_shot                    ? PEER_PUSH
                                                    : PEER_WHOLE);
    if (!err)
        err = k->f.kind == FLOW_MOVE      ? dev_move(&x)
              : k->f.kind == FLOW_TRANSFERS ? dev_rows(&x)
              : allreduce                 ? dev_allreduce(&x, two_shot)
                                          : dev_scatter(&x);
    if (!err && d->rt->sync(d->stream))
        err = rt_failed(&x, "waiting for its stream");
    if (err)
        snprintf(((struct dev_state *)k->path_state)->why, WHY_MAX, "%s", x.why);
    if (!err && (k->c->debug & DEBUG_PATHS))
        debug_line(k->c, "call #%" PRIu64 " %s: device to device%s", k->seq, k->name,
                   allreduce ? (two_shot ? ", two-shot" : ", one-shot") : "");
    return err;
}

/* The call's end: its state back to the pool. */
static int dev_end(struct call *k, int rc)
{
    device_host_give(k->c, DEVICE_POOL_TABLE, k->path_state);
    k->path_state = NULL;
    k->path_end = NULL;
    return rc;
}

static int dev_step(struct call *k)
{
    shmesh_ctx *c = k->c;
    if (k->stage == 0) {
        if (!k->path_state) {
            k->path_state = device_host_take(
                c, DEVICE_POOL_TABLE,
                sizeof(struct dev_state) + (uint64_t)k->g.n * sizeof(struct dev_pub));
            if (!k->path_state)
                return ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory for %d members' handles",
                                k->name, k->g.n);
            k->path_end = dev_end;
        }
        publish_own(k);
        xrun_start(k, &k->xr, &publish);
        k->stage = 1;
    }
    int rc;
    if (k->stage == 1) {
        /* A failed wait leaves a call whose peers may map this member's
         * buffers: fail_left_in_place tells the job first. */
        if ((rc = xrun_step(k, &k->xr)) < 0)
            return fail_left_in_place(c, rc);
        if (rc || (rc = check_pubs(k)))
            return rc;
        int err = run_part(k);
        if (err < 0) /* poisoned, the job told: the others fail too */
            return err;
        k->err = err;
        xrun_start(k, &k->xr, &peer_status);
        k->stage = 2;
    }
    if ((rc = xrun_step(k, &k->xr)))
        return fail_left_in_place(c, rc);
    if (k->err) /* this member's own failure, in its own words */
        return ctx_fail(c, SHMESH_ERR_SYSTEM,
                        "%s (call #%" PRIu64 "): device path: %s; the call failed on "
                        "every member of its group and its outputs are undefined",
                        k->name, k->seq, ((struct dev_state *)k->path_state)->why);
    if ((rc = peer_status_check(k, "the device runtime's IPC")) ||
        (rc = fail_if_aborted(c, k->name, k->seq))) /* a member that left early said so */
        return rc;
    c->dev->stats.device_calls++;
    return 0;
}

const struct path path_device_ipc = {
    .name = "device-ipc",
    .kinds = MEM_DEVICE,
    .in_place = true,
    .arrays_only = true,
    .candidate = dev_candidate,
    .step = dev_step,
};
