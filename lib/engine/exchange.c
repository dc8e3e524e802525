/* The window engine every collective runs on (see internal.h).
 *
 * Windows are named by (call << 32 | index): every rank agrees on call
 * numbers, and within a call the members of a group agree on the number of
 * windows, so groups that never meet may run different numbers of windows
 * without confusing anyone.  A slot buffer is reused two windows later, and
 * only once every rank that could read its last contents has posted a later
 * window (a rank reads a window's data before it posts its next one). */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "engine/exchange.h"
#include "memory/heap.h"

static uint64_t tag_of(const shmesh_ctx *c, uint32_t window)
{
    return (c->calls << 32) | window;
}

static int wait_failed(shmesh_ctx *c, int rc, int r, int culprit)
{
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    return sync_wait_failed(c, rc, culprit, who);
}

/* Before buffer b is written again, its last readers must have moved on.
 * Usually this rank already saw them do so (they posted the window it read
 * last), and nothing shared is read. */
static int reclaim(shmesh_ctx *c, int b)
{
    uint64_t old = c->buf_tag[b];
    for (int i = 0; i < c->buf_nreaders[b]; i++) {
        int r = c->buf_readers[b][i];
        if (r == c->rank || c->seen[r] > old)
            continue;
        struct seg_ctrl *pc = seg_ctrl(c->seg, r);
        int culprit = r;
        int rc = seg_wait_progress(&c->waiter, &pc->progress, old + 1, r, &culprit);
        if (rc)
            return wait_failed(c, rc, r, culprit);
        c->seen[r] = atomic_load_explicit(&pc->progress.value, memory_order_acquire);
    }
    return 0;
}

static struct seg_slot_hdr *holding(shmesh_ctx *c, int r, uint64_t tag)
{
    for (int b = 0; b < 2; b++) {
        struct seg_slot_hdr *h = seg_slot(c->seg, r, b);
        if (atomic_load_explicit(&h->tag, memory_order_acquire) == tag)
            return h;
    }
    return NULL;
}

struct window_wait {
    shmesh_ctx *c;
    int r;
    uint64_t tag;
    struct seg_slot_hdr *h;
};

static bool window_ready(const void *arg)
{
    struct window_wait *ww = (struct window_wait *)arg;
    return (ww->h = holding(ww->c, ww->r, ww->tag)) != NULL;
}

/* Rank r's buffer holding window `tag`.  The tag shares a cache line with
 * the payload's start, so spinning on it brings small windows over in one
 * transfer; after the spin, block on r's progress.  The buffer cannot be
 * reused under us: r reuses it only after this rank posts a later window.
 * *h is NULL when r's window is gone (it formed another group: a mismatch). */
static int await_window(shmesh_ctx *c, int r, uint64_t tag, struct seg_slot_hdr **h)
{
    struct window_wait ww = {c, r, tag, NULL};
    if (seg_spin(&c->waiter, window_ready, &ww)) {
        *h = ww.h;
        goto found;
    }
    struct seg_waiter w = c->waiter;
    w.spin_ns = w.yield_ns = 0; /* spun already */
    int culprit = r;
    int rc = seg_wait_progress(&w, &seg_ctrl(c->seg, r)->progress, tag, r, &culprit);
    if (rc)
        return wait_failed(c, rc, r, culprit);
    if (!(*h = holding(c, r, tag)))
        return 0;
found:
    /* Posting this window means r has read everything before it. */
    if (c->seen[r] < tag)
        c->seen[r] = tag;
    return 0;
}

uint64_t xchg_no_bytes(const struct xchg *x, int from, int to) { return 0; }

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Stream layout of every member, as every member computes it alike. */
static void plan(struct xchg *x)
{
    shmesh_ctx *c = x->c;
    int n = x->g.n, me = x->g.me;
    for (int q = 0; q < n; q++) {
        if (x->broadcast) {
            c->xtotal[q] = x->bytes(x, q, -1);
            c->xoff_from[q] = 0;
            c->xlen_from[q] = c->xtotal[q];
            continue;
        }
        uint64_t off = 0;
        for (int j = 0; j < n; j++) {
            uint64_t len = x->bytes(x, q, j);
            if (j == me) {
                c->xoff_from[q] = off;
                c->xlen_from[q] = len;
            }
            if (q == me) {
                c->xoff_to[j] = off;
                c->xlen_to[j] = len;
            }
            off += len;
        }
        c->xtotal[q] = off;
    }
}

static void pack_window(struct xchg *x, uint64_t lo, uint64_t hi, unsigned char *dst)
{
    shmesh_ctx *c = x->c;
    if (x->broadcast) {
        x->pack(x, -1, lo, hi - lo, dst);
        return;
    }
    for (int j = 0; j < x->g.n; j++) {
        uint64_t a = max_u64(lo, c->xoff_to[j]), b = min_u64(hi, c->xoff_to[j] + c->xlen_to[j]);
        if (a < b)
            x->pack(x, j, a - c->xoff_to[j], b - a, dst + (a - lo));
    }
}

static void deliver(struct xchg *x, uint64_t lo, uint64_t hi)
{
    shmesh_ctx *c = x->c;
    int n = x->g.n;
    if (x->reduce) {
        /* Every member's segment for this device sits at the same place of
         * its stream (the reductions send alike), so one range serves all. */
        uint64_t off = c->xoff_from[0], len = c->xlen_from[0];
        uint64_t a = max_u64(lo, off), b = min_u64(hi, off + len);
        if (a >= b)
            return;
        for (int p = 0; p < n; p++)
            c->srcs[p] = (const unsigned char *)seg_payload(c->hdrs[p]) + (a - lo);
        x->reduce(x, a - off, c->srcs, b - a);
        return;
    }
    for (int p = 0; p < n; p++) {
        uint64_t off = c->xoff_from[p], len = c->xlen_from[p];
        uint64_t a = max_u64(lo, off), b = min_u64(hi, off + len);
        if (a < b)
            x->recv(x, p, a - off,
                    (const unsigned char *)seg_payload(c->hdrs[p]) + (a - lo), b - a);
    }
}

static int run_windows(struct xchg *x, const struct call_desc *desc);

/* The handshake before a zero-copy or single-copy call: every member
 * publishes where its buffers are. */
struct where {
    uint64_t in, out;           /* segment offsets, or UINT64_MAX when not in the heap */
    uint64_t in_addr, out_addr; /* addresses in the member's own process */
    uint64_t cma_ok;            /* it may read every peer's memory */
};

static uint64_t where_bytes(const struct xchg *x, int from, int to) { return sizeof(struct where); }

static void where_pack(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct xchg *z = x->op;
    struct where w = {UINT64_MAX, UINT64_MAX, (uint64_t)(uintptr_t)z->zin,
                      (uint64_t)(uintptr_t)z->zout, z->c->cma_ok};
    heap_offset(&z->c->heap, z->zin, z->zin_bytes, &w.in);
    if (z->zout)
        heap_offset(&z->c->heap, z->zout, z->zout_bytes, &w.out);
    memcpy(dst, (const unsigned char *)&w + off, len);
}

static void where_recv(const struct xchg *x, int from, uint64_t off, const void *src,
                       uint64_t len)
{
    shmesh_ctx *c = x->c;
    const struct xchg *z = x->op;
    struct where w;
    memcpy((unsigned char *)&w + off, src, len);
    /* Never trust a peer's offset: it must name a range inside the heap.
     * (Addresses are only ever handed to the kernel, which checks them.) */
    c->zin[from] = heap_at(&c->heap, w.in, z->zin_bytes);
    c->zout[from] = heap_at(&c->heap, w.out, z->zout_bytes);
    c->cin[from] = w.in_addr;
    c->cout[from] = w.out_addr;
    c->peer_cma[from] = w.cma_ok == 1;
}

/* Returns 1 when the data moved with zero or a single copy, 0 when the
 * staged windows must run, or an error.  Every member decides alike, from
 * the same published handshake. */
static int try_direct(struct xchg *x, const struct call_desc *desc, uint64_t size)
{
    shmesh_ctx *c = x->c;
    struct xchg hs = {.c = c, .g = x->g, .broadcast = true, .unit = sizeof(struct where),
                      .bytes = where_bytes, .pack = where_pack, .recv = where_recv, .op = x};
    int rc = run_windows(&hs, desc);
    if (rc)
        return rc;
    bool heap = x->direct && size >= c->zc_min, cma = x->cma && size >= c->cma_min;
    for (int p = 0; p < x->g.n; p++) {
        heap &= !(x->zin_bytes && !c->zin[p]) &&
                !(x->zout_shared && x->zout_bytes && !c->zout[p]);
        cma &= c->peer_cma[p];
    }
    if (heap)
        x->direct(x, c->zin, c->zout);
    else if (cma)
        rc = x->cma(x, c->cin, c->cout);
    else
        return 0;
    if (rc)
        return rc;
    /* Nobody leaves (and reuses its buffers) before everyone is done. */
    struct xchg done = {.c = c, .g = x->g, .broadcast = true, .bytes = xchg_no_bytes};
    rc = run_windows(&done, NULL);
    return rc ? rc : 1;
}

int xchg_run(struct xchg *x, const struct call_desc *desc)
{
    /* The sizes are the same on every member, so is this choice. */
    uint64_t size = max_u64(x->zin_bytes, x->zout_bytes);
    if ((x->direct && size >= x->c->zc_min) || (x->cma && size >= x->c->cma_min)) {
        int rc = try_direct(x, desc, size);
        if (rc)
            return rc < 0 ? rc : 0;
        desc = NULL; /* the handshake carried it */
    }
    return x->staged ? x->staged(x, desc) : run_windows(x, desc);
}

uint64_t win_capacity(const shmesh_ctx *c) { return seg_payload_bytes(c->seg) / 64 * 64; }

unsigned char *win_open(shmesh_ctx *c, int *rc)
{
    *rc = reclaim(c, c->next_buf);
    return *rc ? NULL : seg_payload(seg_slot(c->seg, c->rank, c->next_buf));
}

int win_exchange(shmesh_ctx *c, const struct group *g, const struct call_desc *desc)
{
    int b = c->next_buf;
    struct seg_slot_hdr *mine = seg_slot(c->seg, c->rank, b);
    uint64_t tag = tag_of(c, c->window++);
    uint64_t hash = desc ? call_hash(desc) ^ c->tuning : 0;
    if (desc) {
        mine->call_hash = hash;
        struct call_desc *d = seg_call_desc(c->seg, mine);
        memcpy(d, desc, sizeof *desc);
        d->tuning = c->tuning;
    }
    /* Release: payload, hash and description before the tag. */
    atomic_store_explicit(&mine->tag, tag, memory_order_release);
    c->buf_tag[b] = tag;
    memcpy(c->buf_readers[b], g->ranks, sizeof *g->ranks * (size_t)g->n);
    c->buf_nreaders[b] = g->n;
    c->next_buf = b ^ 1;
    seg_progress_post(&c->me->progress, tag); /* for sleepers and reclaimers */

    for (int p = 0; p < g->n; p++) {
        int r = g->ranks[p];
        if (r == c->rank) {
            c->hdrs[p] = mine;
            continue;
        }
        int rc = await_window(c, r, tag, &c->hdrs[p]);
        if (rc)
            return rc;
        if (!c->hdrs[p]) {
            struct call_desc none = {0};
            return sync_mismatch(c, desc ? desc : &none, r, NULL);
        }
        if (desc && c->hdrs[p]->call_hash != hash) {
            struct call_desc theirs, ours = *desc;
            memcpy(&theirs, seg_call_desc(c->seg, c->hdrs[p]), sizeof theirs);
            ours.tuning = c->tuning;
            return sync_mismatch(c, &ours, r, &theirs);
        }
    }
    return 0;
}

/* The staged path: every member's stream through the slot buffers. */
static int run_windows(struct xchg *x, const struct call_desc *desc)
{
    shmesh_ctx *c = x->c;
    const struct group *g = &x->g;
    uint64_t unit = x->unit ? x->unit : 1;
    uint64_t window = win_capacity(c) / unit * unit;
    plan(x);
    uint64_t longest = 0;
    for (int q = 0; q < g->n; q++)
        longest = max_u64(longest, c->xtotal[q]);
    uint64_t nwin = longest ? (longest + window - 1) / window : 1;

    for (uint64_t w = 0; w < nwin; w++) {
        int rc;
        unsigned char *payload = win_open(c, &rc);
        if (!payload)
            return rc;
        uint64_t lo = w * window, hi = min_u64(lo + window, c->xtotal[g->me]);
        if (lo < hi)
            pack_window(x, lo, hi, payload);
        if ((rc = win_exchange(c, g, w == 0 ? desc : NULL)))
            return rc;
        deliver(x, lo, lo + window);
    }
    return 0;
}
