/* Transfers through windows (see exchange.h). */
#include <string.h>

#include "core/context.h"
#include "engine/exchange.h"
#include "engine/state.h"
#include "engine/traffic.h"
#include "engine/window.h"

uint64_t transfers_no_bytes(const struct call *k, int from, int to) { return 0; }

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

void xrun_plan(struct call *k, const struct transfers *st)
{
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me;
    for (int q = 0; q < n; q++) {
        if (st->broadcast) {
            s->xtotal[q] = st->bytes(k, q, -1);
            s->xoff_from[q] = 0;
            s->xlen_from[q] = s->xtotal[q];
            continue;
        }
        uint64_t off = 0;
        for (int j = 0; j < n; j++) {
            uint64_t len = st->bytes(k, q, j);
            if (j == me) {
                s->xoff_from[q] = off;
                s->xlen_from[q] = len;
            }
            if (q == me) {
                s->xoff_to[j] = off;
                s->xlen_to[j] = len;
            }
            off += len;
        }
        s->xtotal[q] = off;
    }
}

/* What the exchange moves between processes: each other member reads this
 * one's transfer for it (a broadcast's whole transfer), and this one
 * theirs. */
static void count_traffic(struct call *k, const struct transfers *st)
{
    const struct call_scratch *s = k->s;
    uint64_t sent = 0, received = 0;
    for (int q = 0; q < k->g.n; q++) {
        if (!call_other_process(k, q))
            continue;
        sent += st->broadcast ? s->xtotal[k->g.me] : s->xlen_to[q];
        received += st->broadcast ? s->xtotal[q] : s->xlen_from[q];
    }
    call_moved(k, sent, received);
}

void xrun_start(struct call *k, struct xrun *xr, const struct transfers *st)
{
    uint64_t unit = st->unit ? st->unit : k->f.in_esz ? k->f.in_esz : 1;
    xrun_plan(k, st);
    if (!st->control && k->g.n > 1)
        count_traffic(k, st);
    uint64_t longest = 0;
    int senders = 0;
    for (int q = 0; q < k->g.n; q++) {
        longest = max_u64(longest, k->s->xtotal[q]);
        senders += k->s->xtotal[q] != 0;
    }
    xr->st = st;
    /* A control exchange of a few bytes (a handshake, a barrier) goes through
     * the control slots, one window: the slot buffers' turns stay the data's. */
    xr->control = st->control && longest <= SEG_CONTROL_PAYLOAD;
    uint64_t cap = win_capacity(k->c);
    /* Element sizes are powers of two: no division for them. */
    xr->window = xr->control                  ? SEG_CONTROL_PAYLOAD
                 : (unit & (unit - 1)) == 0 ? cap & ~(unit - 1)
                                            : cap / unit * unit;
    xr->nwin = longest <= xr->window ? 1 : (longest + xr->window - 1) / xr->window;
    /* One sender (a broadcast) over several windows: windows of equal size,
     * so that its copy into each and its receivers' out of the one before
     * take about as long (600 KiB: two of 300, not 512 and 88; a 600 KiB
     * pbroadcast a sixth faster, docs/performance.md). */
    if (xr->nwin > 1 && senders == 1) {
        uint64_t align = unit < 64 && (unit & (unit - 1)) == 0 ? 64 : unit;
        uint64_t even = (longest + xr->nwin - 1) / xr->nwin;
        even = (even + align - 1) / align * align;
        if (even < xr->window) {
            xr->window = even;
            xr->nwin = (longest + even - 1) / even;
        }
    }
    xr->w = 0;
    xr->phase = 0;
    /* A call's one small window of one member's data for all goes through
     * eager windows when its flow lets the source run ahead (window.h).  A
     * barrier, where nobody sends, still meets everyone. */
    xr->from = -1;
    if (k->f.run_ahead && st->broadcast && !st->reduce && k->desc_pending && k->g.n > 1 &&
        longest <= EAGER_PAYLOAD && longest <= engine_of(k->c)->eager_max)
        for (int q = 0; q < k->g.n; q++)
            if (k->s->xtotal[q]) {
                if (xr->from >= 0) {
                    xr->from = -1;
                    break;
                }
                xr->from = q;
            }
}

void xrun_pack(struct call *k, const struct transfers *st, uint64_t lo, uint64_t hi,
               unsigned char *dst)
{
    const struct call_scratch *s = k->s;
    if (st->broadcast) {
        st->pack(k, -1, lo, hi - lo, dst);
        return;
    }
    for (int j = 0; j < k->g.n; j++) {
        uint64_t a, b;
        if (xpiece_meet(s->xoff_to[j], s->xlen_to[j], lo, hi - lo, &a, &b))
            st->pack(k, j, a - s->xoff_to[j], b - a, dst + (a - lo));
    }
}

static void deliver(struct call *k, const struct transfers *st, uint64_t lo, uint64_t hi)
{
    struct call_scratch *s = k->s;
    int n = k->g.n;
    if (st->reduce) {
        /* Every member's segment for this device sits at the same place of
         * its transfer (the reductions send alike), so one range serves all. */
        uint64_t off = s->xoff_from[0], a, b;
        if (!xpiece_meet(off, s->xlen_from[0], lo, hi - lo, &a, &b))
            return;
        for (int p = 0; p < n; p++)
            s->srcs[p] = (const unsigned char *)seg_payload(s->hdrs[p]) + (a - lo);
        st->reduce(k, a - off, s->srcs, b - a);
        return;
    }
    for (int p = 0; p < n; p++) {
        uint64_t off = s->xoff_from[p], a, b;
        if (xpiece_meet(off, s->xlen_from[p], lo, hi - lo, &a, &b))
            st->recv(k, p, a - off, (const unsigned char *)seg_payload(s->hdrs[p]) + (a - lo),
                     b - a);
    }
}

/* What deliver does for an eager exchange: the source's is the one
 * transfer, whole in its window (xrun_start). */
static inline void eager_deliver(struct call *k, const struct transfers *st, int from)
{
    const struct call_scratch *s = k->s;
    st->recv(k, from, 0, seg_payload(s->hdrs[from]), s->xtotal[from]);
}

/* An eager exchange: the source posts and goes on; a receiver reads the
 * source's window, then posts its own. */
static int eager_step(struct call *k, struct xrun *xr)
{
    const struct transfers *st = xr->st;
    int rc, me = k->g.me;
    if (xr->from == me) {
        if (xr->phase == 0) {
            unsigned char *payload = win_eager_open(k, &rc);
            if (!payload)
                return rc;
            st->pack(k, -1, 0, k->s->xtotal[me], payload); /* xrun_pack's broadcast */
            win_eager_post(k, me);
            xr->phase = 1;
        }
        eager_deliver(k, st, me);
        return 0;
    }
    if (xr->phase == 0) {
        if ((rc = win_eager_collect(k, xr->from)))
            return rc;
        eager_deliver(k, st, xr->from);
        xr->phase = 1;
    }
    if (!win_eager_open(k, &rc))
        return rc;
    win_eager_post(k, xr->from);
    return 0;
}

/* The current window opened, filled and posted (phase 0 to 1): 0, or
 * win_open's CALL_WAIT or error.  Inlined into xrun_step, where every
 * window of every call passes. */
static inline __attribute__((always_inline)) int post_window(struct call *k, struct xrun *xr)
{
    if (xr->phase != 0)
        return 0;
    int rc;
    unsigned char *payload = xr->control ? win_open_control(k, &rc) : win_open(k, &rc);
    if (!payload)
        return rc;
    uint64_t lo = xr->w * xr->window, hi = min_u64(lo + xr->window, k->s->xtotal[k->g.me]);
    if (lo < hi)
        xrun_pack(k, xr->st, lo, hi, payload);
    if (xr->control)
        win_post_control(k);
    else
        win_post(k);
    xr->phase = 1;
    return 0;
}

int xrun_post(struct call *k, struct xrun *xr) { return post_window(k, xr); }

/* The window collected late (call.h: late_st), with its hash checked as a
 * call's first window's, each member's part delivered whole, then checked:
 * 0, CALL_WAIT (called again, it goes on) or an error. */
static __attribute__((noinline)) int collect_late(struct call *k)
{
    uint64_t tag = k->tag;
    bool check = k->check_hash;
    k->tag = k->late_tag;
    k->check_hash = true;
    int rc = win_collect(k);
    k->tag = tag;
    k->check_hash = check;
    if (rc)
        return rc;
    const struct transfers *st = k->late_st;
    k->late_st = NULL;
    for (int p = 0; p < k->g.n; p++)
        st->recv(k, p, 0, seg_payload(k->s->hdrs[p]), st->unit);
    return k->late_check ? k->late_check(k) : 0;
}

int xrun_step(struct call *k, struct xrun *xr)
{
    const struct transfers *st = xr->st;
    if (xr->from >= 0)
        return eager_step(k, xr);
    for (;;) {
        uint64_t lo = xr->w * xr->window;
        int rc = post_window(k, xr);
        if (rc)
            return rc;
        if (__builtin_expect(k->late_st != NULL, 0) && (rc = collect_late(k)))
            return rc;
        rc = win_collect(k);
        if (rc)
            return rc;
        deliver(k, st, lo, lo + xr->window);
        xr->phase = 0;
        if (++xr->w == xr->nwin)
            return 0;
    }
}
