/* Failure: a failed wait, an abort, ranks that made different calls. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "core/fail.h"

static int aborted(shmesh_ctx *c, const char *op, uint64_t seq, const struct seg_abort_info *ai)
{
    switch (ai->cause) {
    case SEG_CAUSE_RANK_DIED:
        if (ai->rank < 0)
            return ctx_poison(c, SHMESH_ERR_PEER_DEAD,
                              "a peer failed during %s (call #%" PRIu64 "): %s", op, seq,
                              ai->reason);
        return ctx_poison(c, SHMESH_ERR_PEER_DEAD,
                          "peer rank %d failed during %s (call #%" PRIu64 "): %s",
                          ctx_job_rank_of(c, ai->rank), op, seq, ai->reason);
    case SEG_CAUSE_RANK_ABORT:
        return ctx_poison(c, SHMESH_ERR_ABORTED, "job aborted during %s (call #%" PRIu64 "): %s",
                          op, seq, ai->reason);
    case SEG_CAUSE_MISMATCH:
        return ctx_poison(c, SHMESH_ERR_MISMATCH,
                          "ranks made different calls, seen during %s (call #%" PRIu64 "): %s",
                          op, seq, ai->reason);
    case SEG_CAUSE_CORRUPT:
        return ctx_poison(c, SHMESH_ERR_BAD_SEGMENT,
                          "the segment was found corrupt during %s (call #%" PRIu64 "): %s", op,
                          seq, ai->reason);
    default:
        return ctx_poison(c, SHMESH_ERR_ABORTED,
                          "job aborted by the launcher during %s (call #%" PRIu64 "): %s", op,
                          seq, ai->reason[0] ? ai->reason : "no reason recorded");
    }
}

int fail_if_aborted(shmesh_ctx *c, const char *op, uint64_t seq)
{
    struct seg_abort_info ai;
    if (atomic_load_explicit(&c->seg->hdr->abort.value, memory_order_acquire) &&
        seg_aborted(c->seg, &ai))
        return aborted(c, op, seq, &ai);
    return 0;
}

int fail_left_in_place(shmesh_ctx *c, int rc)
{
    if (rc >= 0 || atomic_load_explicit(&c->seg->hdr->abort.value, memory_order_acquire))
        return rc; /* a step still waiting, or the job knows already */
    int cause = rc == SHMESH_ERR_MISMATCH      ? SEG_CAUSE_MISMATCH
                : rc == SHMESH_ERR_BAD_SEGMENT ? SEG_CAUSE_CORRUPT
                                               : SEG_CAUSE_RANK_ABORT;
    char reason[SEG_REASON_MAX];
    snprintf(reason, sizeof reason, "%.*s", (int)sizeof reason - 1, ctx_err_buf(c));
    seg_abort(c->seg, cause, c->rank, rc, reason);
    return rc;
}

int fail_corrupt(shmesh_ctx *c, const char *op, uint64_t seq, int culprit, const char *fmt, ...)
{
    /* Found corrupt before (the segment truncated by another process,
     * shm/guard.h): that record says why this value is what it is. */
    struct seg_abort_info ai;
    if (seg_aborted(c->seg, &ai) && ai.cause == SEG_CAUSE_CORRUPT && ai.reason[0])
        return aborted(c, op, seq, &ai);
    char what[CTX_ERR_MAX], reason[SEG_REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (culprit >= 0)
        ctx_poison(c, SHMESH_ERR_BAD_SEGMENT,
                   "%s (call #%" PRIu64 "): %s, which rank %d cannot have written: the shared "
                   "segment is corrupt (another process wrote into it)",
                   op, seq, what, culprit);
    else
        ctx_poison(c, SHMESH_ERR_BAD_SEGMENT,
                   "%s (call #%" PRIu64 "): %s: the shared segment is corrupt (another process "
                   "wrote into it)",
                   op, seq, what);
    /* Tell the whole job: nothing read from the segment can be trusted.  The
     * sentence is where ctx_poison wrote it (the progress thread's own
     * buffer when it found the corruption). */
    snprintf(reason, sizeof reason, "%.*s", (int)sizeof reason - 1, ctx_err_buf(c));
    seg_abort(c->seg, SEG_CAUSE_CORRUPT, culprit, 0, reason);
    return SHMESH_ERR_BAD_SEGMENT;
}

int fail_job(shmesh_ctx *c, int code, const char *fmt, ...)
{
    char what[CTX_ERR_MAX], reason[SEG_REASON_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ctx_poison(c, code, "%s", what);
    snprintf(reason, sizeof reason, "%.*s", (int)sizeof reason - 1, ctx_err_buf(c));
    seg_abort(c->seg, SEG_CAUSE_RANK_ABORT, c->rank, code, reason);
    return code;
}

int fail_wait(shmesh_ctx *c, const char *op, uint64_t seq, int rc, int culprit,
              const char *waiting_for)
{
    struct seg_abort_info ai;
    switch (rc) {
    case -ECANCELED:
        seg_aborted(c->seg, &ai);
        return aborted(c, op, seq, &ai);
    case -EOWNERDEAD: {
        /* Recorded for the other ranks and the launcher unless someone was
         * first; the launcher's record, when it won, knows the exit status. */
        char reason[SEG_REASON_MAX];
        snprintf(reason, sizeof reason,
                 "rank %d (pid %d) exited without calling shmesh_finalize (seen by rank %d "
                 "while waiting for %s)",
                 ctx_job_rank_of(c, culprit), (int)atomic_load(&seg_ctrl(c->seg, culprit)->pid),
                 c->job_rank, waiting_for);
        seg_abort(c->seg, SEG_CAUSE_RANK_DIED, culprit, 0, reason);
        seg_aborted(c->seg, &ai);
        return aborted(c, op, seq, &ai);
    }
    case -ESHUTDOWN:
        return ctx_poison(c, SHMESH_ERR_MISMATCH,
                          "rank %d already called shmesh_finalize but this rank called %s "
                          "(call #%" PRIu64 "): ranks made different numbers of collective calls",
                          ctx_job_rank_of(c, culprit), op, seq);
    case -EBADMSG:
        return fail_corrupt(c, op, seq, culprit, "%s went back while this rank waited for it",
                            waiting_for);
    case -ETIMEDOUT:
        return ctx_poison(c, SHMESH_ERR_TIMEOUT,
                          "%s (call #%" PRIu64 ") waited longer than SHMESH_TIMEOUT (%.3f s) "
                          "for %s",
                          op, seq, (double)c->waiter.timeout_ns / 1e9, waiting_for);
    default:
        return ctx_poison(c, SHMESH_ERR_SYSTEM, "%s (call #%" PRIu64 ") could not wait for %s: %s",
                          op, seq, waiting_for, strerror(-rc));
    }
}
