/* The peer algorithms (see peer.h). */
#include <inttypes.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "engine/exchange.h"
#include "engine/traffic.h"
#include "kernels/nontemporal.h"
#include "paths/peer.h"

bool peer_flow(const struct call *k)
{
    return k->f.kind == FLOW_MOVE || k->f.kind == FLOW_REDUCE ||
           (k->f.kind == FLOW_TRANSFERS && k->f.transfers->rows);
}

/* Elements of member q's input block into dst (this member's from its own). */
static int get_box(struct call *k, const struct peer_access *pa, int q, const struct box *b,
                   uint64_t first, uint64_t count, void *dst)
{
    if (q == k->g.me) {
        box_read(b, k->f.in.data, first, count, dst);
        return 0;
    }
    int err = pa->read_box(k, q, b, first, count, dst);
    if (err)
        k->err_peer = k->g.ranks[q];
    return err;
}

/* Member q's input block when it can be read in place: one run, here. */
static const unsigned char *in_place(const struct call *k, const struct peer_access *pa, int q,
                                     const struct box *b)
{
    uint64_t off;
    const unsigned char *base = q == k->g.me ? k->f.in.data : pa->mapped ? k->s->zin[q] : NULL;
    if (!base || !box_contiguous(b, &off))
        return NULL;
    return base + off * b->esz;
}

static int move(struct call *k, const struct peer_access *pa)
{
    const struct flow *f = &k->f;
    unsigned char *bounce = k->s->bounce, *out = f->out.data;
    uint64_t block = BOUNCE_BYTES / f->out_esz;
    for (int q = 0; q < k->g.n; q++) {
        struct box src, dst;
        if (!flow_part(k, q, k->g.me, &src, &dst))
            continue;
        uint64_t count = box_elems(&src), off;
        int err;
        if (box_contiguous(&dst, &off)) { /* straight into the output */
            if ((err = get_box(k, pa, q, &src, 0, count, out + off * dst.esz)))
                return err;
            continue;
        }
        const unsigned char *p = in_place(k, pa, q, &src);
        if (p) {
            box_write(&dst, out, 0, count, p);
            continue;
        }
        for (uint64_t i = 0; i < count; i += block) {
            uint64_t cnt = count - i < block ? count - i : block;
            if ((err = get_box(k, pa, q, &src, i, cnt, bounce)))
                return err;
            box_write(&dst, out, i, cnt, bounce);
        }
    }
    return 0;
}

/* psum_scatter: this member's block of every input, reduced into its output. */
static int scatter(struct call *k, const struct peer_access *pa)
{
    const struct flow *f = &k->f;
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me;
    struct box src, dst; /* the same block of every member's input */
    flow_part(k, me, me, &src, &dst);
    uint64_t count = box_elems(&src), block = BOUNCE_BYTES / (uint64_t)n / f->in_esz;
    for (uint64_t i = 0; i < count; i += block) {
        uint64_t cnt = count - i < block ? count - i : block;
        for (int q = 0; q < n; q++) {
            const unsigned char *p = in_place(k, pa, q, &src);
            if (p) {
                s->srcs[q] = p + i * f->in_esz;
                continue;
            }
            unsigned char *bq = s->bounce + (size_t)q * block * f->in_esz;
            int err = get_box(k, pa, q, &src, i, cnt, bq);
            if (err)
                return err;
            s->srcs[q] = bq;
        }
        reduce_run(f->red, f->in.dtype, f->out.dtype,
                   (unsigned char *)f->out.data + i * f->out_esz, s->srcs, n, (size_t)cnt,
                   f->mean_n);
    }
    return 0;
}

/* Whole-array reductions: position p owns elements [p * per, (p + 1) * per),
 * whole cache lines. */
static uint64_t share_per(uint64_t count, int n)
{
    uint64_t per = (count + (uint64_t)n - 1) / (uint64_t)n;
    return (per + 63) / 64 * 64;
}

static void share(uint64_t count, uint64_t per, int p, uint64_t *lo, uint64_t *hi)
{
    *lo = (uint64_t)p * per < count ? (uint64_t)p * per : count;
    *hi = *lo + per < count ? *lo + per : count;
}

void peer_share(uint64_t count, int n, int p, uint64_t *lo, uint64_t *hi)
{
    share(count, share_per(count, n), p, lo, hi);
}

/* Mapped: reduce this member's share from every input (through private
 * memory: an output may be its member's input) into every output. */
static int reduce_push(struct call *k)
{
    const struct flow *f = &k->f;
    struct call_scratch *s = k->s;
    int n = k->g.n;
    uint64_t count = f->in_bytes / f->in_esz, lo, hi;
    share(count, share_per(count, n), k->g.me, &lo, &hi);
    uint64_t block = BOUNCE_BYTES / (f->in_esz > f->out_esz ? f->in_esz : f->out_esz);
    bool nt = count * f->out_esz >= NT_MIN;
    for (uint64_t i = lo; i < hi; i += block) {
        uint64_t cnt = hi - i < block ? hi - i : block;
        for (int q = 0; q < n; q++)
            s->srcs[q] = s->zin[q] + i * f->in_esz;
        reduce_run(f->red, f->in.dtype, f->out.dtype, s->bounce, s->srcs, n, (size_t)cnt,
                   f->mean_n);
        for (int q = 0; q < n; q++)
            if (nt)
                nt_copy(s->zout[q] + i * f->out_esz, s->bounce, (size_t)(cnt * f->out_esz));
            else
                memcpy(s->zout[q] + i * f->out_esz, s->bounce, (size_t)(cnt * f->out_esz));
    }
    if (nt)
        nt_fence(); /* the lines written around the cache are visible before the status window */
    return 0;
}

/* Not mapped, stage 0: this member's share reduced from every input into its
 * own output.  The bounce buffer holds the result and n inputs' blocks, so an
 * output may be its member's input.  The result comes first and the inputs
 * start at the next multiple of 8 bytes: every block is aligned for its
 * dtype even when the output's elements are wider than the input's (bool
 * psum gives int32, integer pmean float64, pargmax int32). */
static int reduce_own_share(struct call *k, const struct peer_access *pa)
{
    const struct flow *f = &k->f;
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me;
    size_t esz = f->in_esz > f->out_esz ? f->in_esz : f->out_esz;
    uint64_t count = f->in_bytes / f->in_esz, lo, hi;
    share(count, share_per(count, n), me, &lo, &hi);
    uint64_t block = (BOUNCE_BYTES - 8) / (uint64_t)(n + 1) / esz;
    unsigned char *result = s->bounce;
    unsigned char *inputs = s->bounce + ((size_t)block * f->out_esz + 7) / 8 * 8;
    const unsigned char *in = f->in.data;
    for (uint64_t i = lo; i < hi; i += block) {
        uint64_t cnt = hi - i < block ? hi - i : block;
        for (int q = 0; q < n; q++) {
            unsigned char *b = inputs + (size_t)q * block * f->in_esz;
            if (q == me) {
                s->srcs[q] = in + i * f->in_esz;
                continue;
            }
            int err = pa->read(k, q, false, i * f->in_esz, b, cnt * f->in_esz);
            if (err) {
                k->err_peer = k->g.ranks[q];
                return err;
            }
            s->srcs[q] = b;
        }
        reduce_run(f->red, f->in.dtype, f->out.dtype, result, s->srcs, n, (size_t)cnt, f->mean_n);
        memcpy((unsigned char *)f->out.data + i * f->out_esz, result, (size_t)(cnt * f->out_esz));
    }
    return 0;
}

/* Not mapped, stage 1: the other shares, out of their owners' outputs. */
static int copy_shares(struct call *k, const struct peer_access *pa)
{
    const struct flow *f = &k->f;
    int n = k->g.n;
    uint64_t count = f->in_bytes / f->in_esz, per = share_per(count, n), lo, hi;
    for (int q = 0; q < n; q++) {
        share(count, per, q, &lo, &hi);
        if (q == k->g.me || lo == hi)
            continue;
        int err = pa->read(k, q, true, lo * f->out_esz,
                           (unsigned char *)f->out.data + lo * f->out_esz, (hi - lo) * f->out_esz);
        if (err) {
            k->err_peer = k->g.ranks[q];
            return err;
        }
    }
    return 0;
}

/* Each sender's transfer to this member, read by its rows. */
static int transfers_rows(struct call *k, const struct peer_access *pa)
{
    const struct transfers *st = flow_transfers(&k->f);
    for (int q = 0; q < k->g.n; q++) {
        if (q == k->g.me || !st->bytes(k, q, k->g.me))
            continue;
        int err = pa->rows(k, q);
        if (err) {
            k->err_peer = k->g.ranks[q];
            return err;
        }
    }
    return 0;
}

/* Bytes member `to` takes of member `from`'s data (peer.h). */
static uint64_t pair_bytes(const struct call *k, enum peer_traffic how, int from, int to)
{
    const struct flow *f = &k->f;
    struct box src, dst;
    uint64_t count = f->in_esz ? f->in_bytes / f->in_esz : 0, lo, hi, flo, fhi;
    switch (how) {
    case PEER_MOVE:
        return flow_part(k, from, to, &src, &dst) ? box_elems(&src) * src.esz : 0;
    case PEER_SCATTER:
        return flow_part(k, to, to, &src, &dst) ? box_elems(&src) * f->in_esz : 0;
    case PEER_WHOLE:
        return f->in_bytes;
    case PEER_ROWS:
        return flow_transfers(f)->bytes(k, from, to);
    default:
        break;
    }
    peer_share(count, k->g.n, to, &lo, &hi);
    peer_share(count, k->g.n, from, &flo, &fhi);
    uint64_t in = (hi - lo) * f->in_esz, out = (fhi - flo) * f->out_esz;
    return how == PEER_PUSH ? in + out : how == PEER_OWN_SHARE ? in : out;
}

void peer_count(struct call *k, enum peer_traffic how)
{
    int me = k->g.me;
    for (int q = 0; q < k->g.n; q++)
        if (call_other_process(k, q))
            call_moved(k, pair_bytes(k, how, me, q), pair_bytes(k, how, q, me));
}

static int stages(const struct call *k, const struct peer_access *pa)
{
    return flow_allreduce(&k->f) && !pa->mapped ? 2 : 1;
}

/* 0, or SHMESH_ERR_SYSTEM after a failed read (k->err and k->err_peer say
 * which, for the status window). */
static int run_stage(struct call *k, const struct peer_access *pa, int stage)
{
    if (k->f.kind == FLOW_MOVE) {
        peer_count(k, PEER_MOVE);
        return move(k, pa);
    }
    if (k->f.kind == FLOW_TRANSFERS) {
        peer_count(k, PEER_ROWS);
        return transfers_rows(k, pa);
    }
    if (!flow_allreduce(&k->f)) {
        peer_count(k, PEER_SCATTER);
        return scatter(k, pa);
    }
    if (pa->mapped) {
        peer_count(k, PEER_PUSH);
        return reduce_push(k);
    }
    peer_count(k, stage == 0 ? PEER_OWN_SHARE : PEER_SHARES);
    return stage == 0 ? reduce_own_share(k, pa) : copy_shares(k, pa);
}

/* The status window: every member's errno (0: fine) and the rank it could
 * not read. */
static uint64_t status_bytes(const struct call *k, int from, int to) { return 8; }

static void status_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    int32_t v[2] = {k->err, k->err_peer};
    memcpy(dst, (const unsigned char *)v + off, len);
}

static void status_recv(const struct call *k, int from, uint64_t off, const void *src,
                        uint64_t len)
{
    memcpy((unsigned char *)&k->s->status[2 * from] + off, src, len);
}

const struct transfers peer_status = {.broadcast = true,
                                     .control = true,
                                     .unit = 8,
                                     .bytes = status_bytes,
                                     .pack = status_pack,
                                     .recv = status_recv};

int peer_status_check(struct call *k, const char *how)
{
    for (int q = 0; q < k->g.n; q++) {
        const int32_t *st = &k->s->status[2 * q];
        /* An errno and one of the job's ranks, or nothing. */
        if (st[0] < 0 || (st[0] && (st[1] < 0 || st[1] >= k->c->world)))
            return fail_corrupt(k->c, k->name, k->seq, k->g.ranks[q],
                                "rank %d published status %d for a read of rank %d",
                                k->g.ranks[q], st[0], st[1]);
        /* Every member fails alike: the context stays usable. */
        if (st[0])
            return ctx_fail(k->c, SHMESH_ERR_SYSTEM,
                            "%s (call #%" PRIu64 "): rank %d could not read rank %d's buffer "
                            "with %s (%s); the call failed on every member of its group and "
                            "its outputs are undefined",
                            k->name, k->seq, k->g.ranks[q], st[1], how, strerror(st[0]));
    }
    return 0;
}

int peer_step(struct call *k, const struct peer_access *pa)
{
    int n = stages(k, pa);
    for (;;) {
        if (k->stage % 2 == 0) {
            /* A member that failed goes on through the windows, reading no
             * more, so that nobody waits for it in vain. */
            k->err = 0; /* a failed read leaves its errno there, and whose in err_peer */
            (void)run_stage(k, pa, k->stage / 2);
            xrun_start(k, &k->xr, &peer_status);
            k->stage++;
        }
        int rc = xrun_step(k, &k->xr);
        if (rc < 0) /* peers may still be reading this member's buffers */
            return fail_left_in_place(k->c, rc);
        if (rc || (rc = peer_status_check(k, pa->how)))
            return rc;
        /* Every member said it is done with the others' buffers, but one
         * that left a window early (a wait failed) may have taken its
         * buffers back while this one still read them: it told the job
         * first. */
        if (++k->stage == 2 * n)
            return fail_if_aborted(k->c, k->name, k->seq);
    }
}

/* Reads of members' buffers mapped here (k->s->zin, zout). */
static int mapped_read(struct call *k, int q, bool output, uint64_t off, void *dst, uint64_t len)
{
    memcpy(dst, (output ? k->s->zout[q] : k->s->zin[q]) + off, len);
    return 0;
}

static int mapped_read_box(struct call *k, int q, const struct box *b, uint64_t first,
                           uint64_t count, void *dst)
{
    box_read(b, k->s->zin[q], first, count, dst);
    return 0;
}

const struct peer_access peer_mapped = {
    .how = "shared-heap mapping",
    .mapped = true,
    .read = mapped_read,
    .read_box = mapped_read_box,
};

/* Whole-array reductions, alone: every element from every input. */
static void reduce_all(struct call *k)
{
    const struct flow *f = &k->f;
    struct call_scratch *s = k->s;
    uint64_t count = f->in_bytes / f->in_esz;
    uint64_t block = BOUNCE_BYTES / (f->in_esz > f->out_esz ? f->in_esz : f->out_esz);
    for (uint64_t i = 0; i < count; i += block) {
        uint64_t cnt = count - i < block ? count - i : block;
        for (int q = 0; q < k->g.n; q++)
            s->srcs[q] = s->zin[q] + i * f->in_esz;
        reduce_run(f->red, f->in.dtype, f->out.dtype, (unsigned char *)f->out.data + i * f->out_esz,
                   s->srcs, k->g.n, (size_t)cnt, f->mean_n);
    }
}

int peer_local(struct call *k)
{
    if (k->f.kind == FLOW_MOVE)
        return move(k, &peer_mapped);
    if (k->f.kind != FLOW_REDUCE)
        return 0;
    if (!flow_allreduce(&k->f))
        return scatter(k, &peer_mapped);
    if (k->f.in_bytes)
        reduce_all(k);
    return 0;
}
