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

/* The queue of work handed to the progress thread, in dispatch order, as a
 * chain of chunks of slots.  It takes no lock: one thread appends (the
 * dispatching thread, which uses the context) and one at a time takes from
 * the front (whoever holds `executing`: the progress thread, or a caller
 * running what it waits for).  The appender links the next chunk before it
 * fills a chunk's last slot, and the taker lets a chunk go after taking
 * that slot, so neither touches a chunk the other may have let go. */
#define QUEUE_CHUNK 32
struct queue_chunk {
    struct work *slot[QUEUE_CHUNK];
    struct queue_chunk *next;
};

struct dispatcher {
    struct dispatch_idle idle; /* first: dispatch.h reads it through engine_of(c)->dispatcher */
    /* The thread's sleep and wake-ups, results, the callers' notifier. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    /* The appender's end: its chunk, and the count of work ever queued
     * (release: the slot is written). */
    struct queue_chunk *tail;
    _Atomic uint64_t queued;
    /* The taker's end, the holder of `executing`'s: its chunk, and the count
     * of work ever taken (read by anyone). */
    struct queue_chunk *head;
    _Atomic uint64_t taken;
    _Atomic(struct queue_chunk *) spare_chunk; /* one let go of, for the next link */
    /* The last position handed out.  Written by the dispatching thread
     * only (the one that uses the context); atomic for the readers of
     * other threads (a token checked there). */
    _Atomic uint64_t dispatched;
    /* The last position finished: the truth, in private memory.  The
     * segment's `done` word follows it, to wake sleepers and show
     * observers; a word above it was written by someone else. */
    _Atomic uint64_t finished;
    /* idle.quiet (dispatch.h) equal to `dispatched`: nothing is queued or
     * running and the progress thread touches nothing of the context until
     * work is queued again, so the dispatching thread may run a blocking
     * call's work itself without a word to the thread. */
    _Atomic bool executing; /* held by whoever takes and runs work (the thread or a caller) */
    /* The thread waits on `cond` or is about to (set under the lock before
     * its last look at the queue): whoever queues work or leaves some
     * behind looks at it after its own write, and wakes the thread (under
     * the lock) unless it is `polling`, asleep for one look only. */
    _Atomic bool sleeping, polling;
    _Atomic bool stop;
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

/* Whether work is queued and not taken yet (anyone may ask). */
static inline bool queue_empty(struct dispatcher *s)
{
    return atomic_load_explicit(&s->taken, memory_order_acquire) ==
           atomic_load_explicit(&s->queued, memory_order_acquire);
}

/* The appender, before it hands out a position: room for one more work
 * (the chunk its last slot links to, when the next one is that slot), or
 * false (out of memory). */
static bool queue_room(struct dispatcher *s)
{
    uint64_t q = atomic_load_explicit(&s->queued, memory_order_relaxed);
    if (q % QUEUE_CHUNK != QUEUE_CHUNK - 1 || s->tail->next)
        return true;
    struct queue_chunk *next =
        atomic_exchange_explicit(&s->spare_chunk, NULL, memory_order_acquire);
    if (!next && !(next = malloc(sizeof *next)))
        return false;
    next->next = NULL;
    s->tail->next = next;
    return true;
}

/* The appender: w queued (queue_room said yes). */
static inline void queue_push(struct dispatcher *s, struct work *w)
{
    uint64_t q = atomic_load_explicit(&s->queued, memory_order_relaxed);
    struct queue_chunk *t = s->tail, *next = t->next;
    t->slot[q % QUEUE_CHUNK] = w;
    atomic_store_explicit(&s->queued, q + 1, memory_order_release);
    if (q % QUEUE_CHUNK == QUEUE_CHUNK - 1)
        s->tail = next; /* read before the release: the taker may let t go now */
}

/* The holder of `executing`: the first queued work, or NULL. */
static inline struct work *queue_peek(struct dispatcher *s)
{
    uint64_t t = atomic_load_explicit(&s->taken, memory_order_relaxed);
    if (t == atomic_load_explicit(&s->queued, memory_order_acquire))
        return NULL;
    return s->head->slot[t % QUEUE_CHUNK];
}

/* The holder of `executing`: the work queue_peek gave taken off. */
static inline void queue_pop(struct dispatcher *s)
{
    uint64_t t = atomic_load_explicit(&s->taken, memory_order_relaxed);
    if (t % QUEUE_CHUNK == QUEUE_CHUNK - 1) { /* its chunk is over */
        struct queue_chunk *over = s->head, *none = NULL;
        s->head = over->next;
        if (!atomic_compare_exchange_strong_explicit(&s->spare_chunk, &none, over,
                                                     memory_order_release, memory_order_relaxed))
            free(over);
    }
    atomic_store_explicit(&s->taken, t + 1, memory_order_release);
}

/* Whether this thread now holds `executing` (no one else did). */
static inline bool claim(struct dispatcher *s)
{
    bool no = false;
    return !atomic_load_explicit(&s->executing, memory_order_relaxed) &&
           atomic_compare_exchange_strong_explicit(&s->executing, &no, true,
                                                   memory_order_acquire, memory_order_relaxed);
}

static inline void unclaim(struct dispatcher *s)
{
    atomic_store_explicit(&s->executing, false, memory_order_release);
}

/* Wakes the thread from its sleep (a spurious wake-up costs a look). */
static void wake(struct dispatcher *s)
{
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* After this thread queued work or let go of `executing` with work left: the
 * thread is woken when it sleeps until woken, or when it is `urgent` (a
 * host callback, which only the thread runs).  The fence orders this
 * thread's write before its look at `sleeping`, as the thread's orders its
 * `sleeping` before its look at the queue: one of them sees the other's. */
static inline void nudge(struct dispatcher *s, bool urgent)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleeping, memory_order_relaxed) &&
        (urgent || !atomic_load_explicit(&s->polling, memory_order_relaxed)))
        wake(s);
}

/* The runtime token: per thread, the last position it dispatched on each
 * context it used lately (a process has one context at a time; a few
 * slots serve one made after another).  Written at every dispatch: the
 * initial-exec model spares each access a call of __tls_get_addr (six
 * such calls were 5% of an `_async` call's instructions), for 68 bytes of
 * the static TLS that glibc keeps spare (core/error.h: CTX_TLS_FAST). */
#define RUNTIME_SLOTS 4
static _Thread_local struct {
    const shmesh_ctx *c;
    uint64_t seq;
} last_dispatch[RUNTIME_SLOTS] CTX_TLS_FAST;
static _Thread_local unsigned last_next CTX_TLS_FAST;

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
    atomic_store_explicit(&s->dispatched, seq, memory_order_release);
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

/* Runs w, taken from the queue by the holder of `executing`, on this
 * thread, then records its result, drops it and publishes its position as
 * done (its bell rung: a token's waiter may sleep on it). */
static int run_one(shmesh_ctx *c, struct dispatcher *s, struct work *w)
{
    int rc = execute(c, w);
    uint64_t seq = w->seq;
    if (__builtin_expect(rc != 0, 0)) {
        pthread_mutex_lock(&s->lock);
        record(c, s, seq, rc);
        pthread_mutex_unlock(&s->lock);
    }
    w->drop(w);
    publish(c, s, seq, true);
    return rc;
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
/* A look that finds the caller running work (positions finished since the
 * previous look) leaves the queue to it and doubles its period, up to this
 * many times SHMESH_DISPATCH_POLL_NS: on a machine with no core to spare,
 * each look takes the core from a rank whose peers then wait for it. */
#define POLL_BACKOFF 8
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

/* Under s->lock: one look's sleep of the polling thread, `ns` long;
 * whether it was woken before its time. */
static bool poll_once(struct dispatcher *s, int64_t ns)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ns += t.tv_nsec;
    t.tv_sec += ns / 1000000000;
    t.tv_nsec = ns % 1000000000;
    atomic_store_explicit(&s->polling, true, memory_order_relaxed);
    int rc = pthread_cond_timedwait(&s->cond, &s->lock, &t);
    atomic_store_explicit(&s->polling, false, memory_order_relaxed);
    return rc != ETIMEDOUT;
}

/* The progress thread, holding `executing`: runs every queued work. */
static void run_queued(shmesh_ctx *c, struct dispatcher *s)
{
    struct work *w;
    while ((w = queue_peek(s))) {
        queue_pop(s);
        run_one(c, s, w);
    }
}

static void *progress_main(void *arg)
{
    shmesh_ctx *c = arg;
    struct dispatcher *s = engine_of(c)->dispatcher;
    ctx_worker = c;
    int looks = 0;
    /* The polling thread's period, and what it saw finished at its last
     * look: a caller that finished work since runs what it queued itself,
     * so the thread leaves it to it (`defer`) and looks again later. */
    int64_t period = s->poll_ns;
    uint64_t seen = 0;
    bool defer = false;
    for (;;) {
        if (!defer && !queue_empty(s) && claim(s)) {
            run_queued(c, s);
            unclaim(s);
            looks = 0;
            period = s->poll_ns;
            seen = atomic_load_explicit(&s->finished, memory_order_relaxed);
            continue; /* work queued meanwhile is looked at again */
        }
        pthread_mutex_lock(&s->lock);
        atomic_store_explicit(&s->sleeping, true, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst); /* see nudge() */
        bool stop = atomic_load_explicit(&s->stop, memory_order_relaxed);
        bool waiting = !queue_empty(s);
        if (waiting && (!defer || stop || !is_lazy(s)) &&
            !atomic_load_explicit(&s->executing, memory_order_relaxed)) {
            defer = false; /* work came, or was left behind: take it */
        } else if (stop && !waiting && !atomic_load_explicit(&s->executing, memory_order_relaxed)) {
            atomic_store_explicit(&s->sleeping, false, memory_order_relaxed);
            pthread_mutex_unlock(&s->lock);
            break; /* stopping, and drained */
        } else if (is_lazy(s) && looks < POLL_LOOKS) {
            uint64_t before = atomic_load_explicit(&s->dispatched, memory_order_relaxed);
            bool woken = poll_once(s, period);
            uint64_t now = atomic_load_explicit(&s->finished, memory_order_relaxed);
            defer = !woken && now != seen && is_lazy(s);
            period = defer && period < POLL_BACKOFF * s->poll_ns ? 2 * period : s->poll_ns;
            seen = now;
            if (atomic_load_explicit(&s->dispatched, memory_order_relaxed) == before)
                looks++;
            else
                looks = 0;
        } else {
            pthread_cond_wait(&s->cond, &s->lock);
            looks = 0;
            defer = false;
        }
        atomic_store_explicit(&s->sleeping, false, memory_order_relaxed);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

static int start(shmesh_ctx *c)
{
    struct dispatcher *s = calloc(1, sizeof *s);
    struct queue_chunk *first = calloc(1, sizeof *first);
    if (!s || !first) {
        free(s);
        free(first);
        return ctx_fail(c, SHMESH_ERR_NOMEM, "out of memory for the context's dispatcher");
    }
    s->head = s->tail = first;
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
        free(first);
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
    if (!rc && !queue_room(s = engine_of(c)->dispatcher))
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "out of memory for the dispatch queue");
    if (rc) {
        w->drop(w);
        return rc;
    }
    w->seq = next_position(s);
    note_dispatch(c, w->seq);
    if (!tok && queue_empty(s) && claim(s)) {
        /* Idle (what was running is over, nothing is queued: only this
         * thread queues): the caller runs it, as without a dispatcher. */
        rc = run_one(c, s, w);
        unclaim(s);
        return rc;
    }
    w->t_queued = s->poll_ns && w->seq % LAZY_SAMPLE == 0 ? trace_mono_ns() : 0;
    s->idle.handed = w->seq;
    uint64_t seq = w->seq;
    bool urgent = w->thread_only;
    queue_push(s, w); /* w is the taker's from here on */
    /* A polling thread looks soon enough; a host callback runs on the
     * thread only, so no caller takes it: wake. */
    nudge(s, urgent);
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
    uint64_t dispatched =
        atomic_load_explicit(&engine_of(c)->dispatcher->dispatched, memory_order_acquire);
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
    if (atomic_load_explicit(&s->polling, memory_order_relaxed) && !queue_empty(s))
        wake(s);
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
    if (was == c || !claim(s))
        return;
    ctx_worker = c;
    bool first = true, callback = false;
    struct work *w;
    while ((w = queue_peek(s)) && w->seq <= seq && !(callback = w->thread_only)) {
        queue_pop(s);
        if (first && w->t_queued) /* the oldest: was the caller elsewhere meanwhile? */
            set_lazy(s, trace_mono_ns() - w->t_queued < LAZY_AGE_NS);
        first = false;
        run_one(c, s, w);
    }
    ctx_worker = was;
    unclaim(s);
    /* The thread, which may have found the queue taken and gone to sleep
     * meanwhile, is woken for what is left, unless it looks by itself soon
     * (host callbacks aside: only it runs them). */
    bool stop = atomic_load_explicit(&s->stop, memory_order_relaxed);
    if (!queue_empty(s) || stop)
        nudge(s, callback || stop);
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
    for (struct queue_chunk *q = s->head, *next; q; q = next) {
        next = q->next;
        free(q);
    }
    free(atomic_load_explicit(&s->spare_chunk, memory_order_relaxed));
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
    atomic_store_explicit(&s->stop, true, memory_order_relaxed);
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
