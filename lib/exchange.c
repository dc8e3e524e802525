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

#include "internal.h"

static uint64_t tag_of(const shmesh_ctx *c, uint32_t window)
{
    return (c->calls << 32) | window;
}

static int wait_for_rank(shmesh_ctx *c, int r, uint64_t target)
{
    struct seg_ctrl *pc = seg_ctrl(c->seg, r);
    if (atomic_load_explicit(&pc->progress.value, memory_order_acquire) >= target)
        return 0;
    int culprit = r;
    int rc = seg_wait_progress(&c->waiter, &pc->progress, target, r, &culprit);
    if (!rc)
        return 0;
    char who[32];
    snprintf(who, sizeof who, "rank %d", r);
    return sync_wait_failed(c, rc, culprit, who);
}

/* Before buffer b is written again, its last readers must have moved on. */
static int reclaim(shmesh_ctx *c, int b)
{
    for (int i = 0; i < c->buf_nreaders[b]; i++) {
        int r = c->buf_readers[b][i];
        if (r == c->rank)
            continue;
        int rc = wait_for_rank(c, r, c->buf_tag[b] + 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* Which of a member's buffers holds window `tag` (-1: neither).  It cannot
 * have been reused, since this rank has not posted a later window. */
static int find_window(const struct seg_ctrl *pc, uint64_t tag)
{
    for (int b = 0; b < 2; b++)
        if (atomic_load_explicit(&pc->buf_tag[b], memory_order_relaxed) == tag)
            return b;
    return -1;
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

int xchg_run(struct xchg *x, const struct call_desc *desc)
{
    shmesh_ctx *c = x->c;
    const struct group *g = &x->g;
    uint64_t unit = x->unit ? x->unit : 1;
    uint64_t window = seg_payload_bytes(c->seg) / 64 * 64 / unit * unit;
    plan(x);
    uint64_t longest = 0;
    for (int q = 0; q < g->n; q++)
        longest = max_u64(longest, c->xtotal[q]);
    uint64_t nwin = longest ? (longest + window - 1) / window : 1;
    uint64_t hash = desc ? hash_bytes(desc, sizeof *desc, 0) : 0;

    for (uint64_t w = 0; w < nwin; w++) {
        int b = c->next_buf;
        int rc = reclaim(c, b);
        if (rc)
            return rc;
        struct seg_slot_hdr *mine = seg_slot(c->seg, c->rank, b);
        uint64_t lo = w * window, hi = min_u64(lo + window, c->xtotal[g->me]);
        if (lo < hi)
            pack_window(x, lo, hi, seg_payload(mine));
        uint64_t tag = tag_of(c, c->window++);
        bool first = desc && w == 0;
        if (first) {
            c->me->buf_call_hash[b] = hash;
            memcpy(mine->call_desc, desc, sizeof *desc);
        }
        atomic_store_explicit(&c->me->buf_tag[b], tag, memory_order_relaxed);
        c->buf_tag[b] = tag;
        memcpy(c->buf_readers[b], g->ranks, sizeof *g->ranks * (size_t)g->n);
        c->buf_nreaders[b] = g->n;
        c->next_buf = b ^ 1;
        seg_progress_post(&c->me->progress, tag); /* release: header and payload */

        for (int p = 0; p < g->n; p++) {
            int r = g->ranks[p];
            if (r == c->rank) {
                c->hdrs[p] = mine;
                continue;
            }
            rc = wait_for_rank(c, r, tag);
            if (rc)
                return rc;
            const struct seg_ctrl *pc = seg_ctrl(c->seg, r);
            int pb = find_window(pc, tag);
            if (pb < 0) {
                struct call_desc none = {0};
                return sync_mismatch(c, desc ? desc : &none, r, NULL);
            }
            if (first && pc->buf_call_hash[pb] != hash) {
                struct call_desc theirs;
                memcpy(&theirs, seg_slot(c->seg, r, pb)->call_desc, sizeof theirs);
                return sync_mismatch(c, desc, r, &theirs);
            }
            c->hdrs[p] = seg_slot(c->seg, r, pb);
        }
        deliver(x, lo, lo + window);
    }
    return 0;
}
