/* The dispatcher: a context's work, executed in the order it was dispatched.
 *
 * Until the first asynchronous dispatch a context has no dispatcher and the
 * blocking functions run their calls on the caller's thread, as always.
 * The first `_async` function or callback starts the progress thread; from
 * then on every piece of work (an engine call, a call per local device, a
 * callback) is a `struct work` queued here and executed in order: by the
 * progress thread, or, for a blocking function that finds the queue empty
 * and the thread idle, by the caller itself (no hand-over for the common
 * blocking call: no lock, no wake-up, and for an engine call no copy, see
 * dispatch_run_quiet).  The queue takes no lock either: the dispatching
 * thread appends, and whoever executes takes from the front.  Whoever
 * executes work marks itself in ctx_executing, so the engine calls it makes
 * run directly instead of being queued again.
 *
 * Tokens are dispatch positions.  Work finishes in order, so a token is done
 * when the count of finished work, a word of the segment (seg_ctrl's
 * `done`), reaches it; waiting on it is a notifier wait, which also ends on
 * a peer's death, an abort or SHMESH_TIMEOUT.  Results: work that failed
 * without poisoning the context is recorded (position, error, sentence);
 * from the first poisoned position on, every result is the poison. */
#ifndef SHMESH_ENGINE_DISPATCH_H
#define SHMESH_ENGINE_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/context.h"
#include "core/error.h"
#include "engine/state.h"
#include "shmesh.h"

struct work {
    uint64_t seq; /* its dispatch position */
    /* Executes it (0 or an error); then drop frees it.  A poisoned context
     * drops work without running it. */
    int (*run)(struct work *w);
    void (*drop)(struct work *w);
    /* Runs on the progress thread only (a host callback: it may wait for
     * whatever the program's threads hold); other work may also be run by
     * a thread waiting for it (dispatch_wait). */
    bool thread_only;
    int64_t t_queued; /* CLOCK_MONOTONIC ns when queued for the thread, or 0 (lazy wakes) */
};

/* What the thread using a context reads of its dispatcher without the lock;
 * engine/dispatch.c's struct dispatcher begins with it. */
struct dispatch_idle {
    /* The last position whose executor has let go of it: its result
     * recorded, the work dropped (its scratch back in the context's pool),
     * its position published (release). */
    _Atomic uint64_t quiet;
    /* The last position queued for the progress thread (written and read by
     * the dispatching thread only). */
    uint64_t handed;
};

/* On the thread using c (never its progress thread): whether the progress
 * thread holds nothing of c, every position queued for it let go of.  It
 * stays so until this thread queues work; the thread's last touches of the
 * context are seen here (acquire). */
static inline bool dispatch_thread_idle(const shmesh_ctx *c)
{
    const struct dispatch_idle *i = (const struct dispatch_idle *)engine_of(c)->dispatcher;
    return atomic_load_explicit(&i->quiet, memory_order_acquire) >= i->handed;
}

/* Whether engine work of c made on this thread goes through the dispatcher:
 * when c has one or the work is an `_async` form's (`async`: where its
 * token goes), unless this thread is executing c's work already. */
static inline bool dispatch_wanted(const shmesh_ctx *c, const shmesh_token *async)
{
    return (engine_of(c)->dispatcher || async) && ctx_executing != c;
}

/* Queues w (taking it: it is dropped on every path).  With a token (an
 * async request) the token is written and 0 returned; with NULL the caller
 * waits for w (or runs it, the dispatcher being idle) and gets its result. */
int dispatch_submit(shmesh_ctx *c, struct work *w, shmesh_token *token);
/* For a blocking function whose work may live on its stack: when c's
 * dispatcher is quiet (everything dispatched is over and let go of), runs w on
 * the calling thread at the dispatcher's next position, drops it and returns
 * true with *rc its result, as dispatch_submit(c, w, NULL) would; else
 * returns false having done nothing (dispatch a work of the heap then: a
 * queued one may outlive a failed wait). */
bool dispatch_run_quiet(shmesh_ctx *c, struct work *w, int *rc);
/* Waits for position seq of c's dispatcher: its result. */
int dispatch_wait(shmesh_ctx *c, uint64_t seq);
/* The waiter callers wait with, into *w (the dispatcher's own notifier,
 * opened at the first need; the context's when there is no dispatcher):
 * 0, or an error explained as `fn`'s. */
int dispatch_waiter(shmesh_ctx *c, const char *fn, struct seg_waiter **w);
/* Drains the dispatcher and stops its thread (shmesh_finalize); returns the
 * last position it handed out. */
uint64_t dispatch_stop(shmesh_ctx *c);
/* In a fork child: frees this process's copy of the dispatcher, whose thread
 * is not here (nothing is joined, drained or locked); the same return. */
uint64_t dispatch_forget(shmesh_ctx *c);

#endif
