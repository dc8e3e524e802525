/* Description: both notifiers — a wait ends on a wake from another process,
 * on a word that already changed, on a deadline, and on a watched peer's
 * exit; the waits' outcomes (abort, peer dead, owner finalized,
 * timeout); a wait that looks at a slot tag as well as the progress word
 * ends when the tag arrives though the progress word was overwritten, and
 * a progress value or counter that goes back ends a wait with -EBADMSG.  Each case runs under "uring" (skipped where the kernel refuses
 * it) and "futex". */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "notify.h"
#include "segment.h"
#include "wait.h"

static struct notify *open_kind(enum notify_kind k)
{
    struct notify *n = NULL;
    char err[256];
    int rc = notify_open(k, 4, &n, err, sizeof err);
    if (rc == -EOPNOTSUPP && k == NOTIFY_URING)
        return NULL;
    if (rc)
        fail_msg("notify_open: %s", err);
    assert_int_equal(notify_kind_of(n), k);
    return n;
}

static _Atomic uint32_t *shared_word(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

/* A child that sleeps `ms`, stores `v` into *word and wakes it; or just exits. */
static pid_t child_after(int ms, _Atomic uint32_t *word, uint32_t v)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sleep_secs(ms / 1000.0);
        if (word) {
            atomic_store(word, v);
            notify_wake(word);
        }
        _exit(0);
    }
    return pid;
}

static void wake_timeout_and_death(enum notify_kind k)
{
    struct notify *n = open_kind(k);
    if (!n)
        skip();
    _Atomic uint32_t *w = shared_word();

    /* Deadlines here are long (30 s) and what ends each wait is told by
     * its result, not by how long it took: a busy machine may delay any of
     * these processes by a second or more. */
    const int64_t long_ns = 30000000000LL;

    /* Already different: no sleep (a sleep would be the whole 30 s). */
    atomic_store(w, 5);
    double t0 = mono_secs();
    assert_int_equal(notify_wait(n, w, 4, long_ns), 0);
    assert_true(mono_secs() - t0 < 10);

    /* Nobody posts: the deadline, not before it, and not for ever. */
    t0 = mono_secs();
    assert_int_equal(notify_wait(n, w, 5, 60000000), -ETIMEDOUT);
    double took = mono_secs() - t0;
    if (took < 0.05 || took > 20)
        fail_msg("a 60 ms wait took %.3f s", took);

    /* Another process posts and wakes: the wake ends the wait, not the
     * deadline. */
    pid_t pid = child_after(100, w, 6);
    int rc = 0;
    while (atomic_load(w) == 5 && rc >= 0)
        rc = notify_wait(n, w, 5, long_ns);
    if (rc < 0)
        fail_msg("waiting for another process's wake: %d (%s)", rc,
                 rc == -ETIMEDOUT ? "the 30 s deadline: no wake arrived" : strerror(-rc));
    assert_int_equal(atomic_load(w), 6);
    waitpid(pid, NULL, 0);

    /* A watched process exits while we sleep on a word nobody touches.
     * uring hears of it in the wait itself (the wait ends before its
     * deadline); futex looks at the peers after each slice that timed out. */
    pid = child_after(100, NULL, 0);
    assert_int_equal(notify_watch(n, 1, pid), 0);
    t0 = mono_secs();
    while (!notify_peer_exited(n, 1) && mono_secs() - t0 < 30) {
        rc = notify_wait(n, w, 6, k == NOTIFY_URING ? long_ns : 200000000);
        assert_true(rc == 0 || rc == 1 || rc == -ETIMEDOUT);
        if (k == NOTIFY_URING && rc == -ETIMEDOUT)
            fail_msg("uring: a peer's exit did not end a 30 s wait");
        notify_check_peers(n, rc == -ETIMEDOUT);
    }
    assert_true(notify_peer_exited(n, 1));
    took = mono_secs() - t0;
    if (took > 20)
        fail_msg("death noticed after %.3f s", took);
    waitpid(pid, NULL, 0);

    /* A process already gone counts as exited at once. */
    pid = child_after(0, NULL, 0);
    waitpid(pid, NULL, 0);
    assert_int_equal(notify_watch(n, 2, pid), 0);
    notify_check_peers(n, true);
    assert_true(notify_peer_exited(n, 2));
    assert_false(notify_peer_exited(n, 3));

    notify_close(n);
    munmap((void *)w, 4096);
}

static void uring_wake_timeout_and_death(void **state) { wake_timeout_and_death(NOTIFY_URING); }
static void futex_wake_timeout_and_death(void **state) { wake_timeout_and_death(NOTIFY_FUTEX); }

/* Rank 0 of a private segment of 3 ranks, waiting with notifier k: spins
 * and yields spin_ns each, gives up after timeout_ns (0: never).  Skips the
 * test when the notifier is missing. */
static struct seg_waiter rank0_of_3(enum notify_kind k, int64_t spin_ns, int64_t timeout_ns,
                                    struct seg **s, struct notify **n)
{
    if (!(*n = open_kind(k)))
        skip();
    char err[256];
    assert_int_equal(seg_create_private(3, 0, 0, s, err, sizeof err), 0);
    return (struct seg_waiter){.seg = *s, .notify = *n, .self = 0, .spin_ns = spin_ns,
                               .yield_ns = spin_ns, .timeout_ns = timeout_ns,
                               .slice_ns = 100000000};
}

/* The number of CPUs process pid may run on (its main thread's). */
static int cpus_of(pid_t pid)
{
    char list[512];
    if (!cpus_allowed_list(pid, list, sizeof list))
        return -1;
    /* "0-3,8": count the CPUs of each range. */
    int n = 0;
    for (char *p = list; *p;) {
        long a = strtol(p, &p, 10), b = a;
        if (*p == '-')
            b = strtol(p + 1, &p, 10);
        n += (int)(b - a + 1);
        if (*p == ',')
            p++;
    }
    return n;
}

/* With `hold` (shmesh-run's default placement), a waiter asleep runs on
 * the one CPU it fell asleep on, and awake on all it had; without, on all
 * of them throughout.  A child looks at the parent while it sleeps. */
static void held_while_asleep(void **state)
{
    cpu_set_t mine;
    int all = usable_cpus(&mine);
    if (all < 2)
        skip();
    assert_int_equal(cpus_of(getpid()), all);
    for (int hold = 1; hold >= 0; hold--) {
        struct seg *s;
        struct notify *n;
        struct seg_waiter w = rank0_of_3(NOTIFY_FUTEX, 2000, 0, &s, &n);
        w.hold = hold;
        struct seg_progress *f1 = &seg_ctrl(s, 1)->progress;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t parent = getpid(), pid = fork();
        if (pid == 0) {
            sleep_secs(0.2); /* the parent asleep by then */
            int seen = cpus_of(parent);
            if (write(fds[1], &seen, sizeof seen) != sizeof seen)
                _exit(1);
            seg_progress_post(f1, 1);
            _exit(0);
        }
        int culprit = -1;
        assert_int_equal(seg_wait_progress(&w, f1, 1, 1, &culprit), 0);
        int seen = 0;
        assert_int_equal(read(fds[0], &seen, sizeof seen), sizeof seen);
        waitpid(pid, NULL, 0);
        close(fds[0]);
        close(fds[1]);
        assert_int_equal(seen, hold ? 1 : all);
        assert_int_equal(cpus_of(getpid()), all); /* awake: as it was */
        notify_close(n);
        seg_close(s);
    }
}

static void wait_flag_outcomes(enum notify_kind k)
{
    struct seg *s;
    struct notify *n;
    struct seg_waiter w = rank0_of_3(k, 2000, 0, &s, &n);
    struct seg_progress *f1 = &seg_ctrl(s, 1)->progress, *f2 = &seg_ctrl(s, 2)->progress;
    int culprit = -1;

    atomic_store(&f1->value, 3);
    assert_int_equal(seg_wait_progress(&w, f1, 3, 1, &culprit), 0);
    /* 32-bit flags compare with wrap-around: 0x00000002 is "after" 0xfffffffe. */
    struct seg_flag *att = &s->hdr->attached;
    atomic_store(&att->value, 2);
    assert_int_equal(seg_wait_flag(&w, att, 0xfffffffeu, -1, &culprit), 0);
    atomic_store(&f1->value, UINT64_C(5) << 32);
    assert_int_equal(seg_wait_progress(&w, f1, (UINT64_C(4) << 32) | 7, 1, &culprit), 0);

    /* Posted later from another process. */
    pid_t pid = fork();
    if (pid == 0) {
        sleep_secs(0.1);
        seg_progress_post(f1, UINT64_C(6) << 32);
        _exit(0);
    }
    assert_int_equal(seg_wait_progress(&w, f1, UINT64_C(6) << 32, 1, &culprit), 0);
    waitpid(pid, NULL, 0);
    assert_int_equal(atomic_load(&f1->bell.waiters), 0);

    /* Deadline. */
    w.timeout_ns = 50000000;
    assert_int_equal(seg_wait_progress(&w, f1, UINT64_C(7) << 32, 1, &culprit), -ETIMEDOUT);
    w.timeout_ns = 0;

    /* The owner finalized: it will never post again. */
    atomic_store(&seg_ctrl(s, 2)->state, SEG_RANK_FINALIZED);
    assert_int_equal(seg_wait_progress(&w, f2, 1, 2, &culprit), -ESHUTDOWN);
    assert_int_equal(culprit, 2);
    atomic_store(&seg_ctrl(s, 2)->state, SEG_RANK_ATTACHED);

    /* Rank 2 dies (a real process we watch) while we wait for rank 1: the
     * death ends the wait, not its (30 s) deadline. */
    pid = child_after(100, NULL, 0);
    assert_int_equal(notify_watch(n, 2, pid), 0);
    culprit = -1;
    w.timeout_ns = 30000000000LL;
    assert_int_equal(seg_wait_progress(&w, f1, UINT64_C(7) << 32, 1, &culprit), -EOWNERDEAD);
    assert_int_equal(culprit, 2);
    w.timeout_ns = 0;
    waitpid(pid, NULL, 0);
    /* A dead peer that had finalized is no failure. */
    atomic_store(&seg_ctrl(s, 2)->state, SEG_RANK_FINALIZED);
    w.timeout_ns = 20000000;
    assert_int_equal(seg_wait_progress(&w, f1, UINT64_C(7) << 32, 1, &culprit), -ETIMEDOUT);
    w.timeout_ns = 0;

    /* The job is aborted from another process while we wait: the abort
     * ends the wait, not its (30 s) deadline. */
    pid = fork();
    if (pid == 0) {
        sleep_secs(0.1);
        seg_abort(s, SEG_CAUSE_SIGNAL, -1, 0, "test");
        _exit(0);
    }
    w.timeout_ns = 30000000000LL;
    assert_int_equal(seg_wait_progress(&w, f1, UINT64_C(7) << 32, 1, &culprit), -ECANCELED);
    waitpid(pid, NULL, 0);

    seg_close(s);
    notify_close(n);
}

static void uring_wait_flag_outcomes(void **state) { wait_flag_outcomes(NOTIFY_URING); }
static void futex_wait_flag_outcomes(void **state) { wait_flag_outcomes(NOTIFY_FUTEX); }

/* What seg_wait_until's callback looks at: a word standing for a slot tag. */
struct tag_wait {
    const _Atomic uint64_t *tag, *progress;
    uint64_t target;
};

static int tag_or_progress(void *arg)
{
    const struct tag_wait *t = arg;
    return atomic_load(t->tag) >= t->target || atomic_load(t->progress) >= t->target;
}

/* Posted from another process after a while: `post` runs in the child. */
static pid_t later(void (*post)(struct seg *s), struct seg *s)
{
    pid_t pid = fork();
    if (pid == 0) {
        sleep_secs(0.1);
        post(s);
        _exit(0);
    }
    return pid;
}

/* Rank 1 posts its window, and its progress is overwritten with 0 before
 * the waiter looks: what the waiter sees is the tag and the bell. */
static void tag_then_progress_lost(struct seg *s)
{
    struct seg_progress *p = &seg_ctrl(s, 1)->progress;
    atomic_store(&seg_slot(s, 1, 0)->tag, UINT64_C(8) << 32);
    atomic_fetch_add(&p->bell.value, 1);
    notify_wake(&p->bell.value);
}

static void progress_back(struct seg *s) { seg_progress_post(&seg_ctrl(s, 1)->progress, 1); }
static void counter_back(struct seg *s) { seg_flag_post(&s->hdr->attached, 1); }

/* Waits look at what they wait for after every wake-up, and a word that
 * goes back (no rank can have written it) ends the wait.  Each wait's
 * result tells what ended it: its deadline (30 s) is -ETIMEDOUT. */
static void wait_sees_corruption(enum notify_kind k)
{
    struct seg *s;
    struct notify *n;
    struct seg_waiter w = rank0_of_3(k, 0, 30000000000LL, &s, &n);
    struct seg_progress *p1 = &seg_ctrl(s, 1)->progress;
    int culprit = -1;

    /* The tag arrives; the progress word says nothing. */
    struct tag_wait tw = {&seg_slot(s, 1, 0)->tag, &p1->value, UINT64_C(8) << 32};
    pid_t pid = later(tag_then_progress_lost, s);
    assert_int_equal(seg_wait_until(&w, p1, tag_or_progress, &tw, 1, &culprit), 0);
    waitpid(pid, NULL, 0);
    /* Without the tag, the same wait on the progress word alone would hang
     * (here: until its deadline). */
    w.timeout_ns = 200000000;
    assert_int_equal(seg_wait_progress(&w, p1, UINT64_C(8) << 32, 1, &culprit), -ETIMEDOUT);
    w.timeout_ns = 30000000000LL;

    /* Progress that goes back during a wait. */
    atomic_store(&p1->value, UINT64_C(9) << 32);
    culprit = -1;
    pid = later(progress_back, s);
    assert_int_equal(seg_wait_progress(&w, p1, UINT64_C(10) << 32, 1, &culprit), -EBADMSG);
    assert_int_equal(culprit, 1);
    waitpid(pid, NULL, 0);

    /* A counter that goes back. */
    atomic_store(&s->hdr->attached.value, 2);
    pid = later(counter_back, s);
    assert_int_equal(seg_wait_flag(&w, &s->hdr->attached, 3, -1, &culprit), -EBADMSG);
    waitpid(pid, NULL, 0);

    seg_close(s);
    notify_close(n);
}

static void uring_wait_sees_corruption(void **state) { wait_sees_corruption(NOTIFY_URING); }
static void futex_wait_sees_corruption(void **state) { wait_sees_corruption(NOTIFY_FUTEX); }

static void parse_kinds(void **state)
{
    enum notify_kind k;
    assert_int_equal(notify_parse_kind(NULL, &k), 0);
    assert_int_equal(k, NOTIFY_AUTO);
    assert_int_equal(notify_parse_kind("uring", &k), 0);
    assert_int_equal(k, NOTIFY_URING);
    assert_int_equal(notify_parse_kind("futex", &k), 0);
    assert_int_equal(k, NOTIFY_FUTEX);
    assert_int_equal(notify_parse_kind("epoll", &k), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_kinds),
        cmocka_unit_test(uring_wake_timeout_and_death),
        cmocka_unit_test(futex_wake_timeout_and_death),
        cmocka_unit_test(uring_wait_flag_outcomes),
        cmocka_unit_test(futex_wait_flag_outcomes),
        cmocka_unit_test(held_while_asleep),
        cmocka_unit_test(uring_wait_sees_corruption),
        cmocka_unit_test(futex_wait_sees_corruption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
