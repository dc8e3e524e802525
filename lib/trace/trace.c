/* The status block and the event ring (see trace.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fail.h"
#include "engine/path.h"
#include "shm/notify.h"
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
    t->ev = seg_trace_events(g, c->rank);
    t->mask = g->lay.trace_events - 1;
    t->clock = trace_clock_pick();
    /* The launcher reads the ring from the start of the job: its header is
     * written before the first event, and head is still 0. */
    t->ring->clock_kind = t->clock;
    t->ring->pid = (int32_t)getpid();
    path_names(t->ring->path_names, SEG_TRACE_PATHS);
    trace_clock_pair(t->clock, &t->ring->clock_ticks, &t->ring->clock_ns);
    t->head = atomic_load_explicit(&t->ring->head, memory_order_relaxed);
    c->trace = t;
    return 0;
}

void trace_close(shmesh_ctx *c)
{
    free(c->trace);
    c->trace = NULL;
}

void status_block(shmesh_ctx *c, const struct wait_for *wf)
{
    struct seg_status *s = &c->me->status;
    atomic_store_explicit(&s->wait_rank, wf->rank, memory_order_relaxed);
    /* A window's tag, or for a reclaim the tag it must pass. */
    atomic_store_explicit(&s->wait_tag, wf->window ? wf->target : wf->target - 1,
                          memory_order_relaxed);
    atomic_store_explicit(&s->wait_since, trace_mono_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->wait_kind, SEG_WAIT_WINDOW, memory_order_relaxed);
    atomic_store_explicit(&s->activity, SEG_ACT_WAIT, memory_order_release);
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

void trace_call(shmesh_ctx *c, const struct call *k)
{
    struct tracer *t = c->trace;
    struct seg_trace_event *e = trace_next(t);
    const struct group *g = &k->g;
    /* Field by field into the ring (no clearing of the whole line first):
     * every byte the reader looks at is written. */
    e->kind = SEG_TEV_CALL;
    e->op = (uint8_t)k->d.op;
    e->path = (uint8_t)path_index(k->path);
    e->flags = g->n > 0 ? (uint8_t)((g->ranks[0] == c->rank ? SEG_TEV_FIRST : 0) |
                                    (g->ranks[g->n - 1] == c->rank ? SEG_TEV_LAST : 0))
                        : 0;
    e->rc = k->rc;
    e->call = k->seq;
    e->t0 = k->t_enter;
    e->t1 = trace_now(t);
    e->bytes = k->size;
    e->leader = g->n > 0 ? g->ranks[0] : c->rank;
    e->members = g->n;
    e->dtype = (uint8_t)k->d.dtype;
    memcpy(e->axes, k->d.axes, sizeof e->axes - 1); /* axes is longer and terminated */
    e->axes[sizeof e->axes - 1] = '\0';
    trace_commit(t);
}

void trace_wait(shmesh_ctx *c, const struct call *k)
{
    struct tracer *t = c->trace;
    const struct wait_for *wf = &k->wait;
    uint64_t end = trace_now(t);
    /* A wait shorter than a call's own work is noise in a picture of the
     * job, and in a loop of small calls it would double the events the ring
     * and the launcher's drain must carry: left out. */
    if (end - wf->t_trace < TRACE_WAIT_MIN_TICKS)
        return;
    struct seg_trace_event *e = trace_next(t);
    *e = (struct seg_trace_event){
        .kind = SEG_TEV_WAIT,
        .op = (uint8_t)k->d.op,
        .peer = wf->rank,
        .call = k->seq,
        .t0 = wf->t_trace,
        .t1 = end,
        .tag = wf->window ? wf->target : wf->target - 1,
    };
    trace_commit(t);
}
