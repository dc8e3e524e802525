/* What a call shows: the status block's call and wait words and the trace
 * ring's call and wait events (trace/trace.h keeps the ring and the block;
 * this is the part that reads struct call, so that trace sits below the
 * engine). */
#ifndef SHMESH_ENGINE_STATUS_H
#define SHMESH_ENGINE_STATUS_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/context.h"
#include "engine/call.h"
#include "trace/trace.h"

/* The status's current call: k, now the one moving through the segment.
 * Status and trace name a call by its description's op: the caller's
 * (psum) where the engine carries it out as another (the world gather of
 * a mesh with several devices per rank, front/local_devices.c). */
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
    /* Only this rank writes them: no atomic read-modify-write needed. */
    atomic_store_explicit(&s->bytes, atomic_load_explicit(&s->bytes, memory_order_relaxed) + k->size,
                          memory_order_relaxed);
    if (k->sent | k->received) {
        atomic_store_explicit(&s->sent, atomic_load_explicit(&s->sent, memory_order_relaxed) + k->sent,
                              memory_order_relaxed);
        atomic_store_explicit(&s->received,
                              atomic_load_explicit(&s->received, memory_order_relaxed) + k->received,
                              memory_order_relaxed);
    }
    if (next)
        status_call(c, next);
    else
        atomic_store_explicit(&s->activity, SEG_ACT_IDLE, memory_order_release);
}

/* Blocking on a peer begins, and ends (back to being in the call). */
void status_block(shmesh_ctx *c, const struct wait_for *wf);

/* The ring's events: a call at its end, a wait at its end (if it was not
 * shorter than TRACE_WAIT_MIN_TICKS). */
void trace_call(shmesh_ctx *c, const struct call *k);
void trace_wait(shmesh_ctx *c, const struct call *k);

#endif
