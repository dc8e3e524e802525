/* Phases: the step every collective is built from, and what becomes of a
 * failed wait (abort, peer death, mismatch, timeout). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static void describe(const struct seg_sig *s, char *buf, size_t len)
{
    switch (s->op) {
    case SIG_OP_BARRIER:
        snprintf(buf, len, "shmesh_barrier (call #%" PRIu64 ")", s->call);
        break;
    case SIG_OP_FINALIZE:
        snprintf(buf, len, "shmesh_finalize (call #%" PRIu64 ")", s->call);
        break;
    case SIG_OP_WORLD_SUM:
        snprintf(buf, len, "shmesh_world_sum(count=%" PRIu64 ", %s) (call #%" PRIu64 ")",
                 s->count, shmesh_dtype_name((shmesh_dtype)s->dtype), s->call);
        break;
    default:
        snprintf(buf, len, "an unknown collective (op %u, call #%" PRIu64 ")", s->op, s->call);
    }
}

static int aborted(shmesh_ctx *c, const struct seg_abort_info *ai)
{
    switch (ai->cause) {
    case SEG_CAUSE_RANK_DIED:
        if (ai->rank < 0)
            return ctx_poison(c, SHMESH_ERR_PEER_DEAD, "a peer failed during %s (call #%" PRIu64
                              "): %s", c->op, c->calls, ai->reason);
        return ctx_poison(c, SHMESH_ERR_PEER_DEAD,
                          "peer rank %d failed during %s (call #%" PRIu64 "): %s", ai->rank,
                          c->op, c->calls, ai->reason);
    case SEG_CAUSE_RANK_ABORT:
        return ctx_poison(c, SHMESH_ERR_ABORTED,
                          "job aborted during %s (call #%" PRIu64 "): %s", c->op, c->calls,
                          ai->reason);
    default:
        return ctx_poison(c, SHMESH_ERR_ABORTED,
                          "job aborted by the launcher during %s (call #%" PRIu64 "): %s", c->op,
                          c->calls, ai->reason[0] ? ai->reason : "no reason recorded");
    }
}

int sync_enter(shmesh_ctx *c, const char *op)
{
    if (!c)
        return SHMESH_ERR_INVALID;
    if (c->poison)
        return c->poison;
    c->op = op;
    return 0;
}

int sync_begin(shmesh_ctx *c)
{
    c->calls++;
    struct seg_abort_info ai;
    if (atomic_load_explicit(&c->seg->hdr->abort.value, memory_order_acquire) &&
        seg_aborted(c->seg, &ai))
        return aborted(c, &ai);
    return 0;
}

int sync_wait_failed(shmesh_ctx *c, int rc, int culprit, const char *waiting_for)
{
    struct seg_abort_info ai;
    switch (rc) {
    case -ECANCELED:
        seg_aborted(c->seg, &ai);
        return aborted(c, &ai);
    case -EOWNERDEAD: {
        /* Recorded for the other ranks and the launcher unless someone was
         * first; the launcher's record, when it won, knows the exit status. */
        char reason[SEG_REASON_MAX];
        snprintf(reason, sizeof reason,
                 "rank %d (pid %d) exited without calling shmesh_finalize (seen by rank %d "
                 "while waiting for %s)",
                 culprit, (int)atomic_load(&seg_ctrl(c->seg, culprit)->pid), c->rank, waiting_for);
        seg_abort(c->seg, SEG_CAUSE_RANK_DIED, culprit, 0, reason);
        seg_aborted(c->seg, &ai);
        return aborted(c, &ai);
    }
    case -ESHUTDOWN:
        return ctx_poison(c, SHMESH_ERR_MISMATCH,
                          "rank %d already called shmesh_finalize but this rank called %s "
                          "(call #%" PRIu64 "): ranks made different numbers of collective calls",
                          culprit, c->op, c->calls);
    case -ETIMEDOUT:
        return ctx_poison(c, SHMESH_ERR_TIMEOUT,
                          "%s (call #%" PRIu64 ") waited longer than SHMESH_TIMEOUT (%.3f s) "
                          "for %s",
                          c->op, c->calls, (double)c->waiter.timeout_ns / 1e9, waiting_for);
    default:
        return ctx_poison(c, SHMESH_ERR_SYSTEM, "%s (call #%" PRIu64 ") could not wait for %s: %s",
                          c->op, c->calls, waiting_for, strerror(-rc));
    }
}

static bool same_call(const struct seg_sig *a, const struct seg_sig *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->count == b->count && a->call == b->call &&
           a->detail == b->detail;
}

int sync_phase(shmesh_ctx *c, const struct seg_sig *sig)
{
    uint32_t p = c->phase + 1;
    int par = (int)(p & 1);
    if (sig)
        c->me->sig[par] = *sig;
    c->phase = p;
    seg_flag_post(&c->me->seq, p);

    for (int j = 0; j < c->world; j++) {
        if (j == c->rank)
            continue;
        struct seg_ctrl *peer = seg_ctrl(c->seg, j);
        if (seg_reached(atomic_load_explicit(&peer->seq.value, memory_order_acquire), p))
            continue;
        int culprit = j;
        int rc = seg_wait_flag(&c->waiter, &peer->seq, p, j, &culprit);
        if (rc) {
            char who[32];
            snprintf(who, sizeof who, "rank %d", j);
            return sync_wait_failed(c, rc, culprit, who);
        }
    }
    if (!sig)
        return 0;
    for (int j = 0; j < c->world; j++) {
        const struct seg_sig *theirs = &seg_ctrl(c->seg, j)->sig[par];
        if (j == c->rank || same_call(sig, theirs))
            continue;
        char mine[160], other[160];
        describe(sig, mine, sizeof mine);
        describe(theirs, other, sizeof other);
        return ctx_poison(c, SHMESH_ERR_MISMATCH, "called %s but rank %d called %s", mine, j,
                          other);
    }
    return 0;
}
