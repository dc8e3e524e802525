/* Waiting for a flag of the segment to reach a value: a short spin, then
 * yielding the CPU for a while (a peer sharing our CPU gets to run), then
 * blocking in the notifier, ending early on abort, peer death or deadline. */
#ifndef SHMESH_SHM_WAIT_H
#define SHMESH_SHM_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "notify.h"
#include "segment.h"

struct seg_waiter {
    struct seg *seg;
    struct notify *notify;
    int self;
    int64_t spin_ns;    /* spin this long (no system call)... */
    int64_t yield_ns;   /* ...then sched_yield() between checks this long... */
    int64_t timeout_ns; /* a single wait longer than this fails; 0: none */
    int64_t slice_ns;   /* longest single sleep; liveness is re-checked after it */
    /* Asleep, held on the CPU it fell asleep on (its CPUs as they were
     * once awake): unpinned ranks are otherwise woken where the scheduler
     * chooses, at times on a peer's CPU, and then take turns with it, a
     * switch per call, until the scheduler spreads them again (tens of
     * milliseconds: docs/performance.md).  Awake, it may move as before. */
    bool hold;
};

/* Waits until `f` reaches `target` (wrapping comparison); the flag is a
 * counter, which only grows.  `owner` is the rank whose post is awaited, or
 * -1 for a word anyone may post.
 * Returns 0, or
 *   -ECANCELED   the job was aborted (seg_aborted() says why),
 *   -EOWNERDEAD  rank *culprit exited without shmesh_finalize,
 *   -ESHUTDOWN   the owner *culprit finalized: it will never post,
 *   -ETIMEDOUT   timeout_ns passed,
 *   -EBADMSG     the counter went back: something else wrote it (*culprit
 *                is the owner),
 *   another negative errno from the notifier. */
int seg_wait_flag(struct seg_waiter *w, struct seg_flag *f, uint32_t target, int owner,
                  int *culprit);

/* The same outcomes, waiting until progress `p` (owned by rank `owner`) is at
 * least `target`; -EBADMSG when it goes back during the wait. */
int seg_wait_progress(struct seg_waiter *w, struct seg_progress *p, uint64_t target, int owner,
                      int *culprit);

/* The same outcomes, waiting until ready(arg) returns 1, sleeping on the
 * bell of progress `p` (owned by `owner`): ready() may look at anything the
 * owner's posts change (its slot tags as well as its progress).  ready()
 * returns 1 (done), 0 (not yet) or a negative errno, which ends the wait
 * with *culprit = owner: what it read cannot be right.  It is called again
 * after every wake-up and every slice, and once more before a failure. */
int seg_wait_until(struct seg_waiter *w, struct seg_progress *p, int (*ready)(void *arg),
                   void *arg, int owner, int *culprit);

/* The spin and yield phases alone: true once ready(arg) holds, false when
 * the budget is spent (then block).  A wait over within 16 checks reads no
 * clock. */
bool seg_spin(const struct seg_waiter *w, bool (*ready)(const void *arg), const void *arg);

/* Any rank seen to have exited without finalizing, or -1 (no system call). */
int seg_dead_peer(struct seg_waiter *w);

#endif
