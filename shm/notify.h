/* Blocking and waking on 32-bit words of the segment, and peer liveness.
 *
 * Two notifiers share one interface:
 *   uring  one io_uring per rank; a wait is a FUTEX_WAIT SQE linked to a
 *          timeout, and a POLL_ADD armed once per peer pidfd completes when
 *          that peer exits, so a death ends the wait at once;
 *   futex  futex(FUTEX_WAIT_BITSET) with a short deadline, peers' pidfds
 *          polled whenever the deadline passes.
 * Wakers always use futex(FUTEX_WAKE): both notifiers sleep on the same
 * (shared, never PRIVATE) futex key. */
#ifndef SHMESH_SHM_NOTIFY_H
#define SHMESH_SHM_NOTIFY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"

enum notify_kind {
    NOTIFY_AUTO = 0, /* uring where the kernel allows it, else futex */
    NOTIFY_URING,
    NOTIFY_FUTEX,
};

struct notify;

/* `nslots` bounds the rank numbers later given to notify_watch().  Returns
 * -EOPNOTSUPP when NOTIFY_URING is asked for and not available here. */
int notify_open(enum notify_kind kind, int nslots, struct notify **out, char *err,
                size_t errlen);
void notify_close(struct notify *n);
const char *notify_name(const struct notify *n); /* "uring" or "futex" */
enum notify_kind notify_kind_of(const struct notify *n);
/* Parses "uring", "futex", "auto" or NULL/"" (auto). */
int notify_parse_kind(const char *s, enum notify_kind *out);

/* Starts watching process `pid` as `rank`.  A process already gone is
 * recorded as exited at once. */
int notify_watch(struct notify *n, int rank, pid_t pid);

/* Blocks while *word == expected, for at most timeout_ns.  Returns 0 when woken
 * (or the word differed, or a signal arrived: re-check), 1 when a watched peer
 * was seen to exit, -ETIMEDOUT, or another negative errno. */
int notify_wait(struct notify *n, _Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);

/* Collects exit events; `thorough` lets the futex notifier make its poll()
 * system call (the uring one reads its completion queue either way). */
void notify_check_peers(struct notify *n, bool thorough);
/* True once `rank`'s exit has been observed. */
bool notify_peer_exited(const struct notify *n, int rank);

/* Without a pidfd: a process gone, or a zombie nobody reaped yet, has exited. */
bool notify_pid_exited(pid_t pid);

/* Wakes every process blocked on `word`. */
void notify_wake(_Atomic uint32_t *word);

static inline void notify_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Publishes a new value; wakes sleepers only if one announced itself.  The
 * store and the load of `waiters` are sequentially consistent, pairing with
 * the waiter's increment-then-recheck (seg_wait_flag), so a wake-up is never
 * missed and the uncontended path makes no system call. */
static inline void seg_flag_post(struct seg_flag *f, uint32_t v)
{
    atomic_store_explicit(&f->value, v, memory_order_seq_cst);
    if (atomic_load_explicit(&f->waiters, memory_order_seq_cst))
        notify_wake(&f->value);
}

/* Publishes a rank's progress.  The bell's increment is a full barrier
 * between the store of the value and the load of `waiters`, pairing with
 * the waiter's increment-then-recheck as for seg_flag_post. */
static inline void seg_progress_post(struct seg_progress *p, uint64_t v)
{
    atomic_store_explicit(&p->value, v, memory_order_release);
    atomic_fetch_add_explicit(&p->bell.value, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->bell.waiters, memory_order_seq_cst))
        notify_wake(&p->bell.value);
}

/* Rings the progress bell without a new value: sleepers re-check what they
 * wait for (a word the owner wrote just before). */
static inline void seg_progress_ring(struct seg_progress *p)
{
    atomic_fetch_add_explicit(&p->bell.value, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->bell.waiters, memory_order_seq_cst))
        notify_wake(&p->bell.value);
}

/* Wrapping comparison: has a counter that started below `target` reached it? */
static inline bool seg_reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

#endif
