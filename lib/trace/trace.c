/* The status block and the event ring (see trace.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fail.h"
#include "shm/notify.h"
#include "shm/op_numbers.h"
#include "trace/trace.h"

int trace_open(shmesh_ctx *c)
{
    struct seg_status *s = &c->me->status;
    snprintf(s->notifier, sizeof s->notifier, "%s", notify_name(c->notify));
    const struct seg *g = c->seg;
    if (!g->lay.trace_events)
        return 0;
    struct tracer *t = calloc(1, sizeof *t);
    if (!t)
        return SHMESH_ERR_NOMEM;
    t->ring = seg_trace_ring(g, c->rank);
    t->units = seg_trace_units(g, c->rank);
    t->mask = seg_trace_unit_count(g) - 1;
    t->clock = trace_clock_pick();
    /* The launcher reads the ring from the start of the job: its header is
     * written before the first event, and head is still 0. */
    t->ring->clock_kind = t->clock;
    t->ring->pid = (int32_t)getpid();
    trace_clock_pair(t->clock, &t->ring->clock_ticks, &t->ring->clock_ns);
    t->head = atomic_load_explicit(&t->ring->head, memory_order_relaxed);
    t->records = atomic_load_explicit(&t->ring->records, memory_order_relaxed);
    /* Now, not inside calls: each first touch of the ring's first lap was a
     * page fault, for every 64 events (most of a traced 8-byte call's cost:
     * docs/performance.md). */
    seg_populate(t->units, (size_t)(t->mask + 1) * SEG_TRACE_UNIT);
    c->trace = t;
    return 0;
}

void trace_close(shmesh_ctx *c)
{
    free(c->trace);
    c->trace = NULL;
}

void status_callback(shmesh_ctx *c, uint64_t call)
{
    struct seg_status *s = &c->me->status;
    atomic_store_explicit(&s->call, SEG_STATUS_CALL(call, OP_CALLBACK), memory_order_relaxed);
    atomic_store_explicit(&s->activity, SEG_ACT_CALL, memory_order_release);
}

void status_block_point(shmesh_ctx *c, int rank, uint64_t call, uint64_t point,
                        const char *effect)
{
    struct seg_status *s = &c->me->status;
    atomic_store_explicit(&s->call, SEG_STATUS_CALL(call, OP_CALLBACK), memory_order_relaxed);
    atomic_store_explicit(&s->wait_rank, rank, memory_order_relaxed);
    atomic_store_explicit(&s->wait_tag, call << 32, memory_order_relaxed);
    atomic_store_explicit(&s->wait_point, point, memory_order_relaxed);
    /* Byte by byte: an observer reads it while it may change (it copies
     * and terminates it). */
    size_t i = 0;
    for (; effect[i] && i + 1 < sizeof s->wait_effect; i++)
        s->wait_effect[i] = effect[i];
    s->wait_effect[i] = '\0';
    atomic_store_explicit(&s->wait_since, trace_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->wait_kind, SEG_WAIT_POINT, memory_order_relaxed);
    atomic_store_explicit(&s->activity, SEG_ACT_WAIT, memory_order_release);
}

void status_token(shmesh_ctx *c, uint64_t seq)
{
    struct seg_status *s = &c->me->status;
    if (seq)
        atomic_store_explicit(&s->token_since, trace_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->token_seq, seq, memory_order_release);
}

