/* Entering the library: the checks every public function makes first (see
 * entry.h). */
#include <stdatomic.h>
#include <unistd.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/error.h"

static _Thread_local int self CTX_TLS_FAST; /* this thread's id, once looked up */

/* NULL, or another thread inside: SHMESH_ERR_INVALID with its explanation. */
static int thread_check(shmesh_ctx *c, const char *op)
{
    if (!c) {
        init_error("%s: the context (or mesh) is NULL", op);
        return SHMESH_ERR_INVALID;
    }
    if (ctx_executing == c) { /* running the dispatcher's work: the caller may be inside */
        if (ctx_in_callback != c)
            return 0;
        /* Its work would run in the middle of the dispatcher's. */
        ctx_fail(c, SHMESH_ERR_INVALID,
                 "%s called from a host callback with the callback's own context: a callback "
                 "runs inside the context's dispatcher and may not use the context (nothing was "
                 "done)",
                 op);
        return SHMESH_ERR_INVALID;
    }
    if (!self)
        self = (int)gettid();
    /* Relaxed: this catches a second thread while the first is inside (it
     * mostly is: calls wait), not every race; it costs no atomic
     * read-modify-write on the hot path. */
    int inside = atomic_load_explicit(&c->busy, memory_order_relaxed);
    if (inside && inside != self) {
        if (inside == CTX_BUSY_FORKED) /* this process is a fork child of the context's */
            return fail_forked(c, op);
        error_refused_ctx = c;
        init_error("rank %d: %s called from thread %d while thread %d is inside the library "
                   "with the same context: a context may be used by one thread at a time "
                   "(serialize the calls, or hand the context over between calls)",
                   c->job_rank, op, self, inside);
        return SHMESH_ERR_INVALID;
    }
    if (error_refused_ctx == c)
        error_refused_ctx = NULL;
    return 0;
}

void ctx_thread_forked(void)
{
    self = 0; /* the parent's thread id: this thread has its own */
}

/* Out of line: inlined, it would cost thread_check a saved register on
 * every call. */
__attribute__((cold, noinline)) int fail_forked(shmesh_ctx *c, const char *op)
{
    if (error_refused_ctx == c) /* the explanation is the context's (this process's copy) */
        error_refused_ctx = NULL;
    return ctx_fail(c, SHMESH_ERR_INVALID,
                    "%s called in process %d, but this context was made by process %d (rank %d "
                    "of the job), whose fork child this is: a context belongs to the process "
                    "that made it, and calls here would be made in rank %d's name; nothing "
                    "was done",
                    op, (int)getpid(), c->pid, c->job_rank, c->job_rank);
}

int ctx_check(shmesh_ctx *c, const char *op)
{
    int rc = thread_check(c, op);
    return rc ? rc : c->poison;
}

int ctx_enter(shmesh_ctx *c, const char *op)
{
    int rc = ctx_check(c, op);
    if (!rc && ctx_executing != c)
        atomic_store_explicit(&c->busy, self, memory_order_relaxed);
    return rc;
}

int ctx_enter_local(shmesh_ctx *c, const char *op)
{
    int rc = thread_check(c, op);
    if (!rc)
        atomic_store_explicit(&c->busy, self, memory_order_relaxed);
    return rc;
}

void ctx_leave(shmesh_ctx *c)
{
    if (ctx_executing != c)
        atomic_store_explicit(&c->busy, 0, memory_order_relaxed);
}
