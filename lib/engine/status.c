/* What a call shows: status words and trace events (see status.h). */
#include <string.h>

#include "engine/path.h"
#include "engine/status.h"

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
