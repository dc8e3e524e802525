/* Trace and status: what each call and wait of this rank did, for the
 * launcher's trace (shmesh-run --trace, launcher/trace.c) and for
 * observers of a live job (shmesh-top, tools/top.c).
 *
 * The status block (struct seg_status in shm/layout.h) is always kept: a
 * few stores per call to a line of the rank's own control block that no
 * peer reads.  The event ring exists only when the launcher made one;
 * without it every hook below is one test of c->trace. */
#ifndef SHMESH_TRACE_TRACE_H
#define SHMESH_TRACE_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/context.h"
#include "engine/call.h"
#include "trace/clock.h"

struct tracer {
    struct seg_trace_ring *ring;
    struct seg_trace_event *ev;
    uint64_t mask; /* events in the ring, less one */
    uint64_t head; /* this rank's copy of ring->head */
    enum trace_clock_kind clock;
};

/* At init, once the segment is mapped: the status block's constant parts,
 * and the ring's header when the launcher made rings.  0, or
 * SHMESH_ERR_NOMEM. */
int trace_open(shmesh_ctx *c);
void trace_close(shmesh_ctx *c);

/* The ring's next slot, to fill; trace_commit publishes it. */
static inline struct seg_trace_event *trace_next(struct tracer *t)
{
    return &t->ev[t->head & t->mask];
}

static inline void trace_commit(struct tracer *t)
{
    atomic_store_explicit(&t->ring->head, ++t->head, memory_order_release);
}

static inline uint64_t trace_now(const struct tracer *t) { return trace_ticks(t->clock); }

/* The status's current call: k, now the one moving through the segment.
 * Status and trace name a call by its description's op: the caller's
 * (psum) where the engine carries it out as another (the world gather of
 * a mesh with several devices per rank, engine/local_devices.c). */
static inline void status_call(shmesh_ctx *c, const struct call *k)
{
    struct seg_status *s = &c->me->status;
    atomic_store_explicit(&s->call, SEG_STATUS_CALL(k->seq, k->d.op), memory_order_relaxed);
    if (c->trace)
        atomic_store_explicit(&s->call_since, k->t_enter, memory_order_relaxed);
    atomic_store_explicit(&s->activity, SEG_ACT_CALL, memory_order_release);
}

/* Call k is over; `next` (or NULL) moves on. */
static inline void status_done(shmesh_ctx *c, const struct call *k, const struct call *next)
{
    struct seg_status *s = &c->me->status;
    /* Only this rank writes it: no atomic read-modify-write needed. */
    atomic_store_explicit(&s->bytes, atomic_load_explicit(&s->bytes, memory_order_relaxed) + k->size,
                          memory_order_relaxed);
    if (next)
        status_call(c, next);
    else
        atomic_store_explicit(&s->activity, SEG_ACT_IDLE, memory_order_release);
}

/* Blocking on a peer begins, and ends (back to being in the call). */
void status_block(shmesh_ctx *c, const struct wait_for *wf);
static inline void status_unblock(shmesh_ctx *c)
{
    atomic_store_explicit(&c->me->status.activity, SEG_ACT_CALL, memory_order_release);
}

/* A collective callback after its call (lib/effects/effect.c): it runs
 * here as call `call`, or blocks until rank `rank` passed program point
 * `point` of effect `effect`; then the rank is outside any call. */
void status_callback(shmesh_ctx *c, uint64_t call);
void status_block_point(shmesh_ctx *c, int rank, uint64_t call, uint64_t point,
                        const char *effect);
static inline void status_idle(shmesh_ctx *c)
{
    atomic_store_explicit(&c->me->status.activity, SEG_ACT_IDLE, memory_order_release);
}

/* A thread of the rank blocks on a token, for dispatch position seq; 0 when
 * it stops. */
void status_token(shmesh_ctx *c, uint64_t seq);

/* Waits shorter than this many ticks of the event clock are not recorded:
 * 1 us with CLOCK_MONOTONIC, 0.25 to 0.5 us with a 2 to 4 GHz TSC. */
#define TRACE_WAIT_MIN_TICKS 1000

/* The ring's events: a call at its end, a wait at its end (if it was not
 * shorter than TRACE_WAIT_MIN_TICKS). */
void trace_call(shmesh_ctx *c, const struct call *k);
void trace_wait(shmesh_ctx *c, const struct call *k);

#endif
