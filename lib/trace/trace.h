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
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/context.h"
#include "shm/trace_clock.h"

struct tracer {
    struct seg_trace_ring *ring;
    unsigned char *units; /* the ring's SEG_TRACE_UNIT-byte units */
    uint64_t mask;        /* units in the ring, less one */
    uint64_t head;        /* this rank's copy of ring->head */
    uint64_t records;     /* and of ring->records */
    enum trace_clock_kind clock;
    /* The last call record (shm/layout.h): a repeat of it is one unit.
     * `run` is the unit its event starts at; `calls` is false until one. */
    struct seg_trace_event last;
    const void *last_path; /* its path (struct path, engine/path.h) */
    uint64_t last_sent, last_received; /* its traffic */
    uint64_t run;
    bool calls;
};

/* At init, once the segment is mapped: the status block's constant parts,
 * and the ring's header when the launcher made rings (but the path names,
 * which init writes: trace sits below the engine).  0, or
 * SHMESH_ERR_NOMEM. */
int trace_open(shmesh_ctx *c);
void trace_close(shmesh_ctx *c);

/* The record just stored is published: `units` more (release), one more
 * record. */
static inline void trace_commit(struct tracer *t, uint64_t units)
{
    t->head += units;
    atomic_store_explicit(&t->ring->head, t->head, memory_order_release);
    atomic_store_explicit(&t->ring->records, ++t->records, memory_order_relaxed);
}

/* Appends event e (4 units, after pad units up to a multiple of 4) and,
 * when sent or received is not 0, its traffic unit, as one record. */
static inline void trace_put_event(struct tracer *t, const struct seg_trace_event *e,
                                   uint64_t sent, uint64_t received)
{
    while (t->head % SEG_TRACE_EVENT_UNITS) {
        t->units[(t->head & t->mask) * SEG_TRACE_UNIT] = SEG_TEV_PAD;
        t->head++;
    }
    memcpy(t->units + (t->head & t->mask) * SEG_TRACE_UNIT, e, sizeof *e);
    uint64_t units = SEG_TRACE_EVENT_UNITS;
    if (sent | received) {
        struct seg_trace_traffic x = {SEG_TEV_TRAFFIC | sent << 8, received};
        memcpy(t->units + ((t->head + units) & t->mask) * SEG_TRACE_UNIT, &x, sizeof x);
        units++;
    }
    trace_commit(t, units);
}

static inline uint64_t trace_now(const struct tracer *t) { return trace_ticks(t->clock); }

/* Back to being in the call after blocking on a peer (engine/status.h). */
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

#endif
