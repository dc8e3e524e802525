#include "wait.h"

#include <errno.h>
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

int seg_wait_flag(struct seg_waiter *w, struct seg_flag *f, uint32_t target, int owner,
                  int *culprit)
{
    for (uint32_t i = 0; i < w->spin; i++) {
        if (seg_reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
            return 0;
        notify_cpu_relax();
    }

    int64_t deadline = w->timeout_ns > 0 ? now_ns() + w->timeout_ns : 0;
    bool thorough = true; /* look at peers on entry, then after each full slice */
    for (;;) {
        if (seg_reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
            return 0;
        if (atomic_load_explicit(&w->seg->hdr->abort.value, memory_order_acquire))
            return -ECANCELED;
        if (owner >= 0 && atomic_load_explicit(&seg_ctrl(w->seg, owner)->state,
                                               memory_order_acquire) == SEG_RANK_FINALIZED) {
            /* Its last post precedes its state change: look once more. */
            if (seg_reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
                return 0;
            *culprit = owner;
            return -ESHUTDOWN;
        }
        notify_check_peers(w->notify, thorough);
        int dead = seg_dead_peer(w);
        if (dead >= 0) {
            if (seg_reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
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

        /* Announce, then re-check: pairs with seg_flag_post's store-then-load. */
        atomic_fetch_add_explicit(&f->waiters, 1, memory_order_seq_cst);
        uint32_t v = atomic_load_explicit(&f->value, memory_order_seq_cst);
        int rc = 0;
        if (!seg_reached(v, target))
            rc = notify_wait(w->notify, &f->value, v, slice);
        atomic_fetch_sub_explicit(&f->waiters, 1, memory_order_relaxed);
        if (rc < 0 && rc != -ETIMEDOUT)
            return rc;
        thorough = rc == -ETIMEDOUT;
    }
}
