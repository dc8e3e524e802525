/* The dispatcher: queue, progress thread, tokens (see dispatch.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "core/fail.h"
#include "core/registry.h"
#include "engine/dispatch.h"
#include "engine/state.h"
#include "shm/notify.h"
#include "trace/trace.h"


/* A failure that left the context usable. */
struct failed {
    uint64_t seq;
    int rc;
    char *why;
};

struct dispatcher {
    struct dispatch_idle idle; /* first: dispatch.h reads it through engine_of(c)->dispatcher */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    struct work *head, *tail; /* queued, not taken yet */
    /* The last position handed out.  Written by the dispatching thread
     * only (the one that uses the context), under the lock except on the
     * idle path (run_idle); atomic for the readers under the lock (a token
     * checked on another thread). */
    _Atomic uint64_t dispatched;
    /* The last position finished: the truth, in private memory.  The
     * segment's `done` word follows it, to wake sleepers and show
     * observers; a word above it was written by someone else. */
    _Atomic uint64_t finished;
    /* idle.quiet (dispatch.h) equal to `dispatched`: nothing is queued or
     * running and the progress thread touches nothing of the context until
     * work is queued again, so the dispatching thread may run a blocking
     * call's work itself without the lock or a word to the thread. */
    bool executing;           /* someone runs work now (the thread or a caller) */
    bool stop;
    /* Lazy wakes (SHMESH_DISPATCH_POLL_NS, poll_ns > 0).  Waking the thread
     * at a dispatch is a system call and a hand-over, for nothing when the
     * caller waits for the work at once and runs it itself (run_waited).
     * `lazy` says the caller did so lately: the idle thread then looks at
     * its queue every poll_ns (`polling`: a dispatch wakes no one) rather
     * than sleep until woken.  The caller's waits decide it (on the work
     * that carries its time, one in LAZY_SAMPLE): it runs work queued
     * under LAZY_AGE_NS ago (lazy on), or work older than that, or
     * finds what it waits for finished (it had other things to do: the
     * work should start at once, lazy off).  After POLL_LOOKS looks with
     * nothing dispatched the thread sleeps until woken. */
    _Atomic bool lazy;
    bool polling;
    int64_t poll_ns;
    /* Results (under lock).  `recorded` is set (release) once anything is:
     * a position seen finished (acquire) and `recorded` clear succeeded,
     * with no lock taken. */
    _Atomic bool recorded;
    struct failed *failed;
    size_t nfailed, cap;
    uint64_t poison_seq; /* the first position that failed with the poison, or 0 */
    /* The callers' own notifier: the progress thread's ring is not shared. */
    struct notify *notify;
    struct seg_waiter waiter;
};

/* The runtime token: per thread, the last position it dispatched on each
 * context it used lately. */
#define RUNTIME_SLOTS 8
static _Thread_local struct {
    const shmesh_ctx *c;
    uint64_t seq;
} last_dispatch[RUNTIME_SLOTS];
static _Thread_local unsigned last_next;

static void note_dispatch(const shmesh_ctx *c, uint64_t seq)
{
    for (int i = 0; i < RUNTIME_SLOTS; i++)
        if (last_dispatch[i].c == c) {
            last_dispatch[i].seq = seq;
            return;
        }
    unsigned i = last_next++ % RUNTIME_SLOTS;
    last_dispatch[i].c = c;
    last_dispatch[i].seq = seq;
}

shmesh_token shmesh_runtime_token(shmesh_ctx *c)
{
    /* A slot at or below the base is a finalized context's that sat at c's
     * address. */
    for (int i = 0; c && i < RUNTIME_SLOTS; i++)
        if (last_dispatch[i].c == c && engine_of(c)->dispatcher && last_dispatch[i].seq > c->seq_base)
            return (shmesh_token){c, last_dispatch[i].seq};
    return (shmesh_token){c, 0};
}

/* Under s->lock: the outcome of position seq. */
static void record(shmesh_ctx *c, struct dispatcher *s, uint64_t seq, int rc)
{
    if (!rc)
        return;
    atomic_store_explicit(&s->recorded, true, memory_order_release);
    if (c->poison) {
        if (!s->poison_seq)
            s->poison_seq = seq;
        return;
    }
    if (s->nfailed == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct failed *f = realloc(s->failed, cap * sizeof *f);
        if (!f) { /* no room to keep it: the job cannot be trusted to go on */
            ctx_poison(c, SHMESH_ERR_NOMEM, "out of memory for the result of dispatch position "
                       "%" PRIu64 " (%s)", seq, shmesh_error_name(rc));
            if (!s->poison_seq)
                s->poison_seq = seq;
            return;
        }
        s->failed = f;
        s->cap = cap;
    }
    s->failed[s->nfailed++] = (struct failed){seq, rc, strdup(ctx_err_buf(c))};
}

/* The next position (the dispatching thread is the one writer). */
static inline uint64_t next_position(struct dispatcher *s)
{
    uint64_t seq = atomic_load_explicit(&s->dispatched, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->dispatched, seq, memory_order_relaxed);
    return seq;
}

/* Runs w on this thread, marked as executing c's dispatcher: its result. */
static inline int execute(shmesh_ctx *c, struct work *w)
{
    const shmesh_ctx *was = ctx_executing;
    ctx_executing = c;
    int rc = c->poison; /* a poisoned context drops work without running it */
    if (!rc)
        rc = w->run(w);
    ctx_executing = was;
    return rc;
}

/* Position seq is over and its work dropped: counted, then its word posted
 * (with `ring`, its bell rung: waiters wake), then let go of (`quiet`). */
static inline void publish(shmesh_ctx *c, struct dispatcher *s, uint64_t seq, bool ring)
{
    atomic_store_explicit(&s->finished, seq, memory_order_release);
    if (ring)
        seg_progress_post(&c->me->done, seq);
    else
        atomic_store_explicit(&c->me->done.value, seq, memory_order_release);
    atomic_store_explicit(&s->idle.quiet, seq, memory_order_release);
}

/* Runs w, taken from the queue by the caller with s->executing set, on
 * this thread, then records its result, drops it and publishes its
 * position as done.  s->lock is held on entry and on return, not while the
 * work runs.  Only the progress thread waits on s->cond, and only for
 * queued work or a stop: it is not woken for every position. */
static int run_one(shmesh_ctx *c, struct dispatcher *s, struct work *w)
{
    pthread_mutex_unlock(&s->lock);
    int rc = execute(c, w);
    pthread_mutex_lock(&s->lock);
    uint64_t seq = w->seq;
    record(c, s, seq, rc);
    s->executing = false;
    w->drop(w);
    publish(c, s, seq, true);
    return rc;
}

/* Under s->lock, after a caller ran work: the progress thread, which may
 * have found the queue busy and gone to sleep meanwhile, is woken for
 * what is left, unless it looks by itself soon (host callbacks aside:
 * only it runs them). */
static void hand_back(struct dispatcher *s)
{
    if (s->stop || (s->head && (!s->polling || s->head->thread_only)))
        pthread_cond_broadcast(&s->cond);
}

/* A blocking dispatch on a quiet dispatcher (everything dispatched is over and
 * let go of): the caller runs w itself, as without a dispatcher, taking no lock
 * and waking no one.  Nothing can be queued meanwhile (the context is this
 * thread's, and engine work made while it executes runs directly), so the
 * progress thread, asleep or about to be, finds nothing to take. */
static int run_idle(shmesh_ctx *c, struct dispatcher *s, struct work *w)
{
    uint64_t seq = w->seq = next_position(s);
    note_dispatch(c, seq);
    int rc = execute(c, w);
    if (__builtin_expect(rc != 0, 0)) {
        pthread_mutex_lock(&s->lock);
        record(c, s, seq, rc);
        pthread_mutex_unlock(&s->lock);
    }
    w->drop(w);
    /* The word only written, its bell not rung: no one can sleep on
     * position seq (no token names it before this returns, and every
     * sleeper on an earlier one was woken by that one's post). */
    publish(c, s, seq, false);
    return rc;
}

/* Looks of a polling thread with nothing dispatched before it sleeps until
 * woken: with the default period, 40 ms after the last dispatch. */
#define POLL_LOOKS 40
/* Work a caller waits for and runs itself this soon after dispatching it
 * cost it nothing to leave queued: no need to wake the thread for it. */
#define LAZY_AGE_NS 50000
/* One queued work in this many carries its time (the rest 0) and decides
 * `lazy` when a caller runs it: two clock readings for every `_async` call
 * and its wait were a fifth of their time. */
#define LAZY_SAMPLE 8

static inline bool is_lazy(struct dispatcher *s)
{
    return atomic_load_explicit(&s->lazy, memory_order_relaxed);
}

static inline void set_lazy(struct dispatcher *s, bool on)
{
    if (is_lazy(s) != on)
        atomic_store_explicit(&s->lazy, on, memory_order_relaxed);
}

/* Under s->lock: one look's sleep of the polling thread. */
static void poll_once(struct dispatcher *s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    int64_t ns = t.tv_nsec + s->poll_ns;
    t.tv_sec += ns / 1000000000;
    t.tv_nsec = ns % 1000000000;
    s->polling = true;
    pthread_cond_timedwait(&s->cond, &s->lock, &t);
    s->polling = false;
}

static void *progress_main(void *arg)
{
    shmesh_ctx *c = arg;
    struct dispatcher *s = engine_of(c)->dispatcher;
    ctx_worker = c;
    int looks = 0;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->head && !s->executing) {
            struct work *w = s->head;
            if (!(s->head = w->next))
                s->tail = NULL;
            s->executing = true;
            run_one(c, s, w);
            looks = 0;
        } else if (s->stop && !s->head && !s->executing) {
            break; /* stopping, and drained */
        } else if (is_lazy(s) && looks < POLL_LOOKS) {
            uint64_t before = atomic_load_explicit(&s->dispatched, memory_order_relaxed);
            poll_once(s);
            if (atomic_load_explicit(&s->dispatched, memory_order_relaxed) == before)
                looks++;
            else
                looks = 0;
        } else {
            pthread_cond_wait(&s->cond, &s->lock);
            looks = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int start(shmesh_ctx *c)
{
    struct dispatcher *s = calloc(1, sizeof *s);
    if (!s)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "out of memory for the context's dispatcher");
    /* The callers' notifier is opened by the first token wait that sleeps
     * (callers_notifier): most waits end while spinning, and opening it
     * (a ring, a pidfd per peer) was most of the first dispatch's time. */
    s->waiter = c->waiter;
    s->waiter.notify = NULL;
    /* A wait of the dispatcher's own work fails first, saying whom it waited
     * for; a token wait outlives it a little, and gives up by itself only
     * when the work waits for nothing shmesh knows (a callback). */
    if (s->waiter.timeout_ns) {
        int64_t grace = s->waiter.timeout_ns / 4;
        s->waiter.timeout_ns += grace > 100000000 ? grace : 100000000;
    }
    s->poll_ns = engine_of(c)->dispatch_poll_ns;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the looks' deadlines */
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    /* Positions count on from the context's base (core/registry.h). */
    atomic_store_explicit(&s->dispatched, c->seq_base, memory_order_relaxed);
    atomic_store_explicit(&s->finished, c->seq_base, memory_order_relaxed);
    atomic_store_explicit(&s->idle.quiet, c->seq_base, memory_order_relaxed);
    s->idle.handed = c->seq_base;
    if (c->seq_base)
        seg_progress_post(&c->me->done, c->seq_base);
    /* The thread takes no signals: the program's handlers run where it
     * expects them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    engine_of(c)->dispatcher = s;
    int rc = pthread_create(&s->thread, NULL, progress_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        engine_of(c)->dispatcher = NULL;
        free(s);
        return ctx_fail(c, SHMESH_ERR_SYSTEM, "cannot start the progress thread: %s",
                        strerror(rc));
    }
    return 0;
}

/* Whether everything dispatched on s is over and let go of.  Acquire pairs
 * with publish()'s release: what the last executor did to the context is
 * seen by the caller that goes on without the lock. */
static inline bool quiet(struct dispatcher *s)
{
    return atomic_load_explicit(&s->idle.quiet, memory_order_acquire) ==
           atomic_load_explicit(&s->dispatched, memory_order_relaxed);
}

bool dispatch_run_quiet(shmesh_ctx *c, struct work *w, int *rc)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    if (!s || !quiet(s))
        return false;
    *rc = run_idle(c, s, w);
    return true;
}

int dispatch_submit(shmesh_ctx *c, struct work *w, shmesh_token *tok)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    if (__builtin_expect(s && !tok, 1) && quiet(s)) /* the common blocking call */
        return run_idle(c, s, w);
    int rc = s ? 0 : start(c);
    if (rc) {
        w->drop(w);
        return rc;
    }
    s = engine_of(c)->dispatcher;
    pthread_mutex_lock(&s->lock);
    w->seq = next_position(s);
    note_dispatch(c, w->seq);
    if (!tok && !s->head && !s->executing) {
        /* Idle: the caller runs it, as without a dispatcher. */
        s->executing = true;
        rc = run_one(c, s, w);
        hand_back(s);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    w->next = NULL;
    w->t_queued = s->poll_ns && w->seq % LAZY_SAMPLE == 0 ? trace_mono_ns() : 0;
    s->idle.handed = w->seq;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    /* A polling thread looks soon enough; a host callback runs on the
     * thread only, so no caller takes it: wake. */
    if (!s->polling || w->thread_only)
        pthread_cond_broadcast(&s->cond);
    uint64_t seq = w->seq;
    pthread_mutex_unlock(&s->lock);
    if (tok) {
        *tok = (shmesh_token){c, seq};
        return 0;
    }
    return dispatch_wait(c, seq);
}

/* How far the dispatcher got, read as a waiter does: the segment's word (what
 * a sleeper is woken by), then the private count.  Work is counted before
 * its word is posted, so a word above the count is not this rank's. */
struct finish_look {
    shmesh_ctx *c;
    uint64_t seq;         /* the position awaited */
    uint64_t word, count; /* what was read */
};

static int finish_ready(void *arg)
{
    struct finish_look *f = arg;
    f->word = atomic_load_explicit(&f->c->me->done.value, memory_order_acquire);
    f->count = atomic_load_explicit(&engine_of(f->c)->dispatcher->finished, memory_order_acquire);
    if (__builtin_expect(f->word > f->count, 0))
        return -EOVERFLOW;
    return f->count >= f->seq;
}

static bool finish_spun(const void *arg) { return finish_ready((void *)arg) != 0; }

/* The word was found above the count. */
static int forged_done(shmesh_ctx *c, const char *fn, const struct finish_look *f)
{
    struct engine_state *engine = engine_of(c);
    uint64_t dispatched;
    pthread_mutex_lock(&engine->dispatcher->lock);
    dispatched = engine->dispatcher->dispatched;
    pthread_mutex_unlock(&engine->dispatcher->lock);
    return fail_corrupt(c, fn, f->seq, c->rank,
                        "the count of rank %d's finished dispatched work in the segment reads "
                        "%" PRIu64 " while waiting for position %" PRIu64 ", but %" PRIu64
                        " of the %" PRIu64 " dispatched have finished",
                        c->rank, f->word, f->seq, f->count, dispatched);
}

/* 1 when position seq is finished, 0 when not yet, or an error. */
static int finished(shmesh_ctx *c, const char *fn, uint64_t seq)
{
    struct finish_look f = {c, seq, 0, 0};
    int rc = finish_ready(&f);
    return rc < 0 ? forged_done(c, fn, &f) : rc;
}

/* The result of a finished position (its sentence becomes the context's). */
static int result(shmesh_ctx *c, uint64_t seq)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    int rc = 0;
    if (!atomic_load_explicit(&s->recorded, memory_order_acquire))
        return 0; /* nothing failed yet (record precedes the publish the caller saw) */
    pthread_mutex_lock(&s->lock);
    if (s->poison_seq && seq >= s->poison_seq) {
        rc = c->poison;
        snprintf(c->err, sizeof c->err, "%s", c->poison_err);
    } else {
        size_t lo = 0, hi = s->nfailed;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (s->failed[mid].seq < seq)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < s->nfailed && s->failed[lo].seq == seq) {
            rc = s->failed[lo].rc;
            snprintf(c->err, sizeof c->err, "%s", s->failed[lo].why ? s->failed[lo].why : "");
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The live context a token names (NULL: a done token), and a position it
 * handed out. */
static int token_check(const shmesh_token *t, const char *fn, shmesh_ctx **out)
{
    int rc = registry_token(t, fn, out);
    shmesh_ctx *c = *out;
    if (rc || !c)
        return rc;
    uint64_t last = c->seq_base;
    struct dispatcher *s = engine_of(c)->dispatcher;
    if (s) /* only grows: a token handed out before this read is below it */
        last = atomic_load_explicit(&s->dispatched, memory_order_acquire);
    if (t->seq > last)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: the token names position %" PRIu64
                        " of the context's dispatcher, but only %" PRIu64
                        " were dispatched (a token of another context, or not from shmesh)",
                        fn, t->seq - c->seq_base, last - c->seq_base);
    return 0;
}

/* The waiter callers sleep with: the dispatcher's own notifier (the
 * executor's ring is not shared), opened at the first need; 0, or an error
 * explained as `fn`'s. */
static int callers_notifier(shmesh_ctx *c, struct dispatcher *s, const char *fn)
{
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    char err[200] = "";
    if (!s->notify) {
        struct notify *n = NULL;
        rc = notify_open(notify_kind_of(c->notify), c->world, &n, err, sizeof err);
        for (int r = 0; !rc && r < c->world; r++)
            if (r != c->rank && (rc = notify_watch(n, r, c->pids[r])) < 0)
                snprintf(err, sizeof err, "cannot watch rank %d (pid %d) for exit: %s", r,
                         c->pids[r], strerror(-rc));
        if (rc)
            notify_close(n);
        else
            s->waiter.notify = s->notify = n;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        return ctx_fail(c, SHMESH_ERR_SYSTEM, "%s: cannot open a notifier for token waits: %s",
                        fn, err);
    return 0;
}

/* Blocks until position seq is finished: 0, or an error. */
static int wait_finished(shmesh_ctx *c, const char *fn, uint64_t seq)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    struct finish_look f = {c, seq, 0, 0};
    if (seg_spin(&s->waiter, finish_spun, &f)) /* the common wait: short, nothing shown */
        return finish_ready(&f) < 0 ? forged_done(c, fn, &f) : 0;
    if (c->poison) { /* what is left fails with it */
        snprintf(c->err, sizeof c->err, "%s", c->poison_err);
        return c->poison;
    }
    /* About to sleep: work it waits for that sits behind something it could
     * not take starts now, not at the thread's next look. */
    pthread_mutex_lock(&s->lock);
    if (s->polling && s->head)
        pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    int rc = callers_notifier(c, s, fn);
    if (rc)
        return rc;
    struct seg_waiter w = s->waiter;
    w.spin_ns = w.yield_ns = 0; /* spun already */
    int culprit = -1;
    status_token(c, seq);
    rc = seg_wait_until(&w, &c->me->done, finish_ready, &f, -1, &culprit);
    status_token(c, 0);
    if (!rc)
        return 0;
    if (rc == -EOVERFLOW)
        return forged_done(c, fn, &f);
    if (rc == -EOWNERDEAD || rc == -ECANCELED || rc == -ETIMEDOUT || rc == -ESHUTDOWN) {
        char what[64];
        snprintf(what, sizeof what, "dispatch position %" PRIu64, seq);
        return fail_wait(c, fn, seq, rc, culprit, what);
    }
    return fail_wait(c, fn, seq, rc, culprit, "its own dispatch queue");
}

/* A thread about to wait for position seq runs the queued work up to it
 * itself, in order, while no one else executes and the work may run on
 * any thread (not a host callback): it would otherwise sleep while the
 * progress thread wakes up to run exactly that, and pay two hand-overs.
 * It runs the work as the progress thread does, explaining failures into
 * the dispatcher's buffer (ctx_worker), so a thread inside the context
 * meanwhile is not disturbed. */
static void run_waited(shmesh_ctx *c, struct dispatcher *s, uint64_t seq)
{
    const shmesh_ctx *was = ctx_worker;
    if (was == c)
        return;
    pthread_mutex_lock(&s->lock);
    ctx_worker = c;
    bool first = true;
    while (s->head && !s->executing && s->head->seq <= seq && !s->head->thread_only) {
        struct work *w = s->head;
        if (!(s->head = w->next))
            s->tail = NULL;
        if (first && w->t_queued) /* the oldest: was the caller elsewhere meanwhile? */
            set_lazy(s, trace_mono_ns() - w->t_queued < LAZY_AGE_NS);
        first = false;
        s->executing = true;
        run_one(c, s, w);
    }
    hand_back(s);
    ctx_worker = was;
    pthread_mutex_unlock(&s->lock);
}

int dispatch_wait(shmesh_ctx *c, uint64_t seq)
{
    if (ctx_in_callback == c)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "a host callback waited for a token of its own context: the callback "
                        "runs inside the dispatcher, so the token cannot be done before it returns");
    int rc = finished(c, "shmesh_token_wait", seq);
    if (rc < 0)
        return rc;
    if (rc) /* done before the caller needed it: the work overlaps, wake at once */
        set_lazy(engine_of(c)->dispatcher, false);
    else {
        run_waited(c, engine_of(c)->dispatcher, seq);
        if ((rc = finished(c, "shmesh_token_wait", seq)) < 0)
            return rc;
    }
    if (!rc && (rc = wait_finished(c, "shmesh_token_wait", seq)))
        return rc;
    return result(c, seq);
}

int dispatch_waiter(shmesh_ctx *c, const char *fn, struct seg_waiter **w)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    int rc = s ? callers_notifier(c, s, fn) : 0;
    *w = s ? &s->waiter : &c->waiter;
    return rc;
}

/* Frees what the dispatcher holds; its thread has ended (or, in a fork child,
 * was never there). */
static void dispatch_free(shmesh_ctx *c)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    for (size_t i = 0; i < s->nfailed; i++)
        free(s->failed[i].why);
    free(s->failed);
    notify_close(s->notify);
    free(s);
    engine_of(c)->dispatcher = NULL;
    for (int i = 0; i < RUNTIME_SLOTS; i++)
        if (last_dispatch[i].c == c)
            last_dispatch[i].c = NULL;
}

uint64_t dispatch_stop(shmesh_ctx *c)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    if (!s)
        return c->seq_base;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    uint64_t last = s->dispatched;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    dispatch_free(c);
    return last;
}

uint64_t dispatch_forget(shmesh_ctx *c)
{
    struct dispatcher *s = engine_of(c)->dispatcher;
    if (!s)
        return c->seq_base;
    /* The parent's thread may have held the lock at the fork: not taken.
     * Work queued then is left (dropping it would release calls). */
    uint64_t last = s->dispatched;
    dispatch_free(c);
    return last;
}

/* ---- Tokens ---------------------------------------------------------- */

int shmesh_token_test(shmesh_token t)
{
    shmesh_ctx *c;
    int rc = token_check(&t, "shmesh_token_test", &c);
    if (rc || !c)
        return rc ? rc : 1;
    if ((rc = finished(c, "shmesh_token_test", t.seq)) <= 0)
        return rc < 0 ? rc : c->poison;
    rc = result(c, t.seq);
    return rc ? rc : 1;
}

int shmesh_token_wait(shmesh_token t)
{
    shmesh_ctx *c;
    int rc = token_check(&t, "shmesh_token_wait", &c);
    if (rc || !c)
        return rc;
    return dispatch_wait(c, t.seq);
}

/* The tokens' one context (NULL when all are done ones), or an error. */
static int one_context(int n, const shmesh_token *t, const char *fn, shmesh_ctx **out)
{
    *out = NULL;
    if (n < 0 || (n > 0 && !t)) {
        init_error("%s: expected n >= 0 tokens in a non-NULL array, got n = %d%s", fn, n,
                   t ? "" : " and NULL");
        return SHMESH_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        shmesh_ctx *c;
        int rc = token_check(&t[i], fn, &c);
        if (rc)
            return rc;
        if (!c)
            continue;
        if (*out && *out != c)
            return ctx_fail(*out, SHMESH_ERR_INVALID,
                            "%s: tokens %d and earlier ones belong to different contexts "
                            "(wait on each context's tokens separately)",
                            fn, i);
        *out = c;
    }
    return 0;
}

int shmesh_token_wait_all(int n, const shmesh_token tokens[])
{
    shmesh_ctx *c;
    int rc = one_context(n, tokens, "shmesh_token_wait_all", &c);
    if (rc || !c)
        return rc;
    uint64_t last = 0, first_bad = UINT64_MAX;
    for (int i = 0; i < n; i++)
        if (tokens[i].ctx && tokens[i].seq > last)
            last = tokens[i].seq;
    rc = dispatch_wait(c, last);
    if (rc && atomic_load_explicit(&engine_of(c)->dispatcher->finished, memory_order_acquire) < last)
        return rc; /* the wait itself failed */
    /* Every one finished: the first failure in dispatch order. */
    int first_rc = 0;
    for (int i = 0; i < n; i++) {
        if (!tokens[i].ctx || !tokens[i].seq || tokens[i].seq >= first_bad)
            continue;
        int r = result(c, tokens[i].seq);
        if (r) {
            first_bad = tokens[i].seq;
            first_rc = r;
        }
    }
    return first_rc; /* its sentence was the last one result() set */
}

int shmesh_token_wait_any(int n, const shmesh_token tokens[], int *index)
{
    shmesh_ctx *c;
    int rc = one_context(n, tokens, "shmesh_token_wait_any", &c);
    if (!rc && (!index || n == 0)) {
        if (c)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "shmesh_token_wait_any: expected at least one token and an index "
                            "pointer, got n = %d and index %s",
                            n, index ? "set" : "NULL");
        init_error("shmesh_token_wait_any: expected at least one token and an index pointer, "
                   "got n = %d and index %s",
                   n, index ? "set" : "NULL");
        return SHMESH_ERR_INVALID;
    }
    if (rc)
        return rc;
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (!tokens[i].ctx || !tokens[i].seq) { /* done already */
            *index = i;
            return 0;
        }
        if (tokens[i].seq < tokens[best].seq)
            best = i;
    }
    *index = best;
    return dispatch_wait(c, tokens[best].seq);
}
