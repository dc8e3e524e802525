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

/* What is awaited: a 32-bit flag reaching a wrapping target, or a 64-bit
 * progress value reaching a target.  Sleepers block on `word`, which changes
 * whenever the awaited value does. */
struct awaited {
    const _Atomic uint32_t *flag;
    uint32_t flag_target;
    const _Atomic uint64_t *progress;
    uint64_t progress_target;
    _Atomic uint32_t *word;
    _Atomic uint32_t *waiters;
};

static bool reached(const struct awaited *a)
{
    if (a->flag)
        return seg_reached(atomic_load_explicit(a->flag, memory_order_acquire), a->flag_target);
    return atomic_load_explicit(a->progress, memory_order_acquire) >= a->progress_target;
}

/* A `pause` lasts from a few to over a hundred cycles depending on the CPU,
 * so the phases are measured in time, the clock read every few checks. */
bool seg_spin(const struct seg_waiter *w, bool (*ready)(const void *arg), const void *arg)
{
    if (ready(arg))
        return true;
    if (w->spin_ns <= 0 && w->yield_ns <= 0)
        return false;
    int64_t start = now_ns(), spin_end = start + w->spin_ns, end = spin_end + w->yield_ns;
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return true;
        if (i % 16 == 0) {
            int64_t t = now_ns();
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

static bool awaited_ready(const void *a) { return reached(a); }

static int wait_for(struct seg_waiter *w, const struct awaited *a, int owner, int *culprit)
{
    if (seg_spin(w, awaited_ready, a))
        return 0;

    int64_t deadline = w->timeout_ns > 0 ? now_ns() + w->timeout_ns : 0;
    bool thorough = true; /* look at peers on entry, then after each full slice */
    for (;;) {
        if (reached(a))
            return 0;
        if (atomic_load_explicit(&w->seg->hdr->abort.value, memory_order_acquire))
            return -ECANCELED;
        if (owner >= 0 && atomic_load_explicit(&seg_ctrl(w->seg, owner)->state,
                                               memory_order_acquire) == SEG_RANK_FINALIZED) {
            /* Its last post precedes its state change: look once more. */
            if (reached(a))
                return 0;
            *culprit = owner;
            return -ESHUTDOWN;
        }
        notify_check_peers(w->notify, thorough);
        int dead = seg_dead_peer(w);
        if (dead >= 0) {
            if (reached(a))
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
        int rc = 0;
        if (!reached(a))
            rc = notify_wait(w->notify, a->word, v, slice);
        atomic_fetch_sub_explicit(a->waiters, 1, memory_order_relaxed);
        if (rc < 0 && rc != -ETIMEDOUT)
            return rc;
        thorough = rc == -ETIMEDOUT;
    }
}

int seg_wait_flag(struct seg_waiter *w, struct seg_flag *f, uint32_t target, int owner,
                  int *culprit)
{
    struct awaited a = {.flag = &f->value, .flag_target = target, .word = &f->value,
                        .waiters = &f->waiters};
    return wait_for(w, &a, owner, culprit);
}

int seg_wait_progress(struct seg_waiter *w, struct seg_progress *p, uint64_t target, int owner,
                      int *culprit)
{
    struct awaited a = {.progress = &p->value, .progress_target = target,
                        .word = &p->bell.value, .waiters = &p->bell.waiters};
    return wait_for(w, &a, owner, culprit);
}
