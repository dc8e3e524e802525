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

/* The flags of this rank's place in its call's group. */
static inline uint8_t group_flags(const struct group *g, int rank)
{
    return g->n > 0 ? (uint8_t)((g->ranks[0] == rank ? SEG_TEV_FIRST : 0) |
                                (g->ranks[g->n - 1] == rank ? SEG_TEV_LAST : 0))
                    : 0;
}

/* The rank of its call group's first member (a call number and a leader
 * name one collective). */
static inline int group_leader(const struct group *g, int rank)
{
    return g->n > 0 ? g->ranks[0] : rank;
}

/* Whether a call's axes text (longer) starts with the 11 characters an
 * event holds: a word and three bytes, not a call of memcmp. */
static inline bool same_axes(const char *call, const char *event)
{
    uint64_t a, b;
    memcpy(&a, call, sizeof a);
    memcpy(&b, event, sizeof b);
    return a == b && call[8] == event[8] && call[9] == event[9] && call[10] == event[10];
}
_Static_assert(sizeof(((struct seg_trace_event *)0)->axes) == 12, "same_axes reads 11 characters");

/* Whether call k, finished at t1, is a repeat of t's last call record
 * (shm/layout.h): read off the call, not built into an event first (most
 * calls of a loop of small calls are). */
static inline bool repeats(const struct tracer *t, const shmesh_ctx *c, const struct call *k,
                           uint64_t t1)
{
    const struct seg_trace_event *l = &t->last;
    const struct group *g = &k->g;
    return t->calls && k->seq == l->call + 1 && k->path == t->last_path && k->rc == l->rc &&
           k->size == l->bytes && k->sent == t->last_sent && k->received == t->last_received &&
           g->n == l->members && (uint8_t)k->d.op == l->op &&
           (uint8_t)k->d.dtype == l->dtype && group_leader(g, c->rank) == l->leader &&
           group_flags(g, c->rank) == l->flags && t1 >= k->t_enter &&
           t1 - k->t_enter <= UINT32_MAX && t->head - t->run < SEG_TRACE_REPEAT_SPAN(t->mask + 1) &&
           same_axes(k->d.axes, l->axes);
}

void trace_call(shmesh_ctx *c, const struct call *k)
{
    struct tracer *t = c->trace;
    uint64_t t1 = trace_now(t);
    if (repeats(t, c, k, t1)) { /* a quarter of a line: the loop of small calls */
        struct seg_trace_repeat r = {.kind = SEG_TEV_REPEAT, .dt = (uint32_t)(t1 - k->t_enter),
                                     .t0 = k->t_enter};
        memcpy(t->units + (t->head & t->mask) * SEG_TRACE_UNIT, &r, sizeof r);
        t->last.call = k->seq;
        trace_commit(t, 1);
        return;
    }
    const struct group *g = &k->g;
    struct seg_trace_event e;
    e.kind = SEG_TEV_CALL;
    e.op = (uint8_t)k->d.op;
    e.path = (uint8_t)path_index(k->path);
    e.flags = group_flags(g, c->rank);
    e.rc = k->rc;
    e.call = k->seq;
    e.t0 = k->t_enter;
    e.t1 = t1;
    e.bytes = k->size;
    e.leader = group_leader(g, c->rank);
    e.members = g->n;
    e.dtype = (uint8_t)k->d.dtype;
    memset(e.pad, 0, sizeof e.pad);
    memcpy(e.axes, k->d.axes, sizeof e.axes - 1); /* axes is longer and terminated */
    e.axes[sizeof e.axes - 1] = '\0';
    uint64_t from = t->head + (SEG_TRACE_EVENT_UNITS - t->head % SEG_TRACE_EVENT_UNITS) %
                                  SEG_TRACE_EVENT_UNITS; /* where the event goes, after pads */
    trace_put_event(t, &e, k->sent, k->received);
    t->last = e;
    t->last_path = k->path;
    t->last_sent = k->sent;
    t->last_received = k->received;
    t->run = from;
    t->calls = true;
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
    struct seg_trace_event e = {
        .kind = SEG_TEV_WAIT,
        .op = (uint8_t)k->d.op,
        .peer = wf->rank,
        .call = k->seq,
        .t0 = wf->t_trace,
        .t1 = end,
        .tag = wf->window ? wf->target : wf->target - 1,
    };
    trace_put_event(t, &e, 0, 0);
}
