#include "wait.h"

#include <errno.h>
#include <sched.h>
#include <time.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int seg_dead_peer(struct seg_waiter *w)
{
    for (int r = 0; r < w->seg->world; r++) {
        if (r == w->self || !notify_peer_exited(w->notify, r))
            continue;
        /* Exit after finalize is how a job ends, not a failure. */
        if (atomic_load_explicit(&seg_ctrl(w->seg, r)->state, memory_order_acquire) !=
            SEG_RANK_FINALIZED)
            return r;
    }
    return -1;
}

/* What is awaited: ready() says whether it happened (1), not yet (0), or
 * that what it read cannot be right (a negative errno).  Sleepers block on
 * `word`, which changes whenever what ready() reads may have. */
struct awaited {
    int (*ready)(void *arg);
    void *arg;
    _Atomic uint32_t *word;
    _Atomic uint32_t *waiters;
};

/* A `pause` lasts from a few to over a hundred cycles depending on the CPU,
 * so the phases are measured in time, the clock read every few checks. */
bool seg_spin(const struct seg_waiter *w, bool (*ready)(const void *arg), const void *arg)
{
    if (ready(arg))
        return true;
    if (w->spin_ns <= 0 && w->yield_ns <= 0)
        return false;
    /* The budget counts from the first look at the clock, after 16 looks
     * at `ready`: a wait that ends sooner (a peer's window a cache-line
     * transfer away) reads no clock, which was a twentieth of a small
     * call's time. */
    int64_t spin_end = 0, end = 0;
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return true;
        if (i % 16 == 0) {
            int64_t t = now_ns();
            if (!end) {
                spin_end = t + w->spin_ns;
                end = spin_end + w->yield_ns;
            }
            if (t >= end)
                return false;
            if (t >= spin_end) {
                /* A peer that shares our CPU runs now rather than at the end
                 * of our time slice; with nobody else runnable this returns
                 * at once. */
                sched_yield();
                continue;
            }
        }
        notify_cpu_relax();
    }
}

struct spin_arg {
    const struct awaited *a;
    int rc;
};

static bool spin_ready(const void *arg)
{
    struct spin_arg *sa = (struct spin_arg *)arg;
    return (sa->rc = sa->a->ready(sa->a->arg)) != 0;
}

static int wait_asleep(struct seg_waiter *w, const struct awaited *a, int owner, int *culprit);

static int wait_for(struct seg_waiter *w, const struct awaited *a, int owner, int *culprit)
{
    struct spin_arg sa = {a, 0};
    if (seg_spin(w, spin_ready, &sa))
        return sa.rc > 0 ? 0 : (*culprit = owner, sa.rc);
    if (!w->hold)
        return wait_asleep(w, a, owner, culprit);
    /* Held where it falls asleep (wait.h), then as it was. */
    cpu_set_t was, one;
    int cpu = sched_getcpu();
    bool held = false;
    if (cpu >= 0 && sched_getaffinity(0, sizeof was, &was) == 0 && CPU_COUNT(&was) > 1) {
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        held = sched_setaffinity(0, sizeof one, &one) == 0;
    }
    int rc = wait_asleep(w, a, owner, culprit);
    if (held)
        sched_setaffinity(0, sizeof was, &was);
    return rc;
}

/* wait_for past its spin: sleeps in slices, checking liveness between. */
static int wait_asleep(struct seg_waiter *w, const struct awaited *a, int owner, int *culprit)
{
    int64_t deadline = w->timeout_ns > 0 ? now_ns() + w->timeout_ns : 0;
    bool thorough = true; /* look at peers on entry, then after each full slice */
    int rc;
    for (;;) {
        if ((rc = a->ready(a->arg)))
            return rc > 0 ? 0 : (*culprit = owner, rc);
        if (atomic_load_explicit(&w->seg->hdr->abort.value, memory_order_acquire))
            return -ECANCELED;
        if (owner >= 0 && atomic_load_explicit(&seg_ctrl(w->seg, owner)->state,
                                               memory_order_acquire) == SEG_RANK_FINALIZED) {
            /* Its last post precedes its state change: look once more. */
            if (a->ready(a->arg) > 0)
                return 0;
            *culprit = owner;
            return -ESHUTDOWN;
        }
        notify_check_peers(w->notify, thorough);
        int dead = seg_dead_peer(w);
        if (dead >= 0) {
            if (a->ready(a->arg) > 0)
                return 0;
            *culprit = dead;
            return -EOWNERDEAD;
        }
        int64_t slice = w->slice_ns;
        if (deadline) {
            int64_t left = deadline - now_ns();
            if (left <= 0)
                return -ETIMEDOUT;
            if (left < slice)
                slice = left;
        }

        /* Announce, then re-check: pairs with the poster's store, then load
         * of `waiters` (seg_flag_post, seg_progress_post). */
        atomic_fetch_add_explicit(a->waiters, 1, memory_order_seq_cst);
        uint32_t v = atomic_load_explicit(a->word, memory_order_seq_cst);
        int now = a->ready(a->arg);
        rc = 0;
        if (!now)
            rc = notify_wait(w->notify, a->word, v, slice);
        atomic_fetch_sub_explicit(a->waiters, 1, memory_order_relaxed);
        if (now)
            return now > 0 ? 0 : (*culprit = owner, now);
        if (rc < 0 && rc != -ETIMEDOUT)
            return rc;
        thorough = rc == -ETIMEDOUT;
    }
}

/* A counter that only grows (wrapping): a value behind the first one read
 * was not written by the counter's posters. */
struct flag_wait {
    const _Atomic uint32_t *flag;
    uint32_t target, first;
    bool seen;
};

static int flag_ready(void *arg)
{
    struct flag_wait *f = arg;
    uint32_t v = atomic_load_explicit(f->flag, memory_order_acquire);
    if (!f->seen) {
        f->first = v;
        f->seen = true;
    } else if (!seg_reached(v, f->first)) {
        return -EBADMSG;
    }
    return seg_reached(v, f->target);
}

int seg_wait_flag(struct seg_waiter *w, struct seg_flag *f, uint32_t target, int owner,
                  int *culprit)
{
    struct flag_wait fw = {.flag = &f->value, .target = target};
    struct awaited a = {.ready = flag_ready, .arg = &fw, .word = &f->value,
                        .waiters = &f->waiters};
    return wait_for(w, &a, owner, culprit);
}

/* Progress only grows: a value below the first one read is not the owner's. */
struct progress_wait {
    const _Atomic uint64_t *value;
    uint64_t target, first;
    bool seen;
};

static int progress_ready(void *arg)
{
    struct progress_wait *p = arg;
    uint64_t v = atomic_load_explicit(p->value, memory_order_acquire);
    if (!p->seen) {
        p->first = v;
        p->seen = true;
    } else if (v < p->first) {
        return -EBADMSG;
    }
    return v >= p->target;
}

int seg_wait_progress(struct seg_waiter *w, struct seg_progress *p, uint64_t target, int owner,
                      int *culprit)
{
    struct progress_wait pw = {.value = &p->value, .target = target};
    struct awaited a = {.ready = progress_ready, .arg = &pw, .word = &p->bell.value,
                        .waiters = &p->bell.waiters};
    return wait_for(w, &a, owner, culprit);
}

int seg_wait_until(struct seg_waiter *w, struct seg_progress *p, int (*ready)(void *arg),
                   void *arg, int owner, int *culprit)
{
    struct awaited a = {.ready = ready, .arg = arg, .word = &p->bell.value,
                        .waiters = &p->bell.waiters};
    return wait_for(w, &a, owner, culprit);
}
