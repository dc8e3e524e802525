/* Description: waiting must block, not spin — 8 ranks on this machine's
 * cores run 20 000 barriers and 20 000 world sums under each notifier and
 * finish; a rank waiting 3 s for a late peer (1 s under SHMESH_TEST_SAMPLE)
 * uses under 5% of a core (getrusage), with 2 ranks and with more ranks
 * than cores. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* SHMESH_NOTIFY=notifier into buf; skips the test where uring is refused. */
static char *notifier_env(const char *notifier, char *buf, size_t len)
{
    if (!strcmp(notifier, "uring") && !uring_available())
        skip();
    snprintf(buf, len, "SHMESH_NOTIFY=%s", notifier);
    return buf;
}

static void stress(const char *notifier)
{
    char buf[32];
    char *env[] = {notifier_env(notifier, buf, sizeof buf), NULL};
    struct run r;
    run_launcher(&r, env, 240, "-v", "-n", "8", "--", "@rank", "stress", "20000", NULL);
    if (r.timed_out || r.code != 0)
        fail_msg("exit %d%s after %.1f s\n%s\n%s", r.code, r.timed_out ? " (timed out)" : "",
                 r.secs, r.out, r.err);
    char want[64];
    snprintf(want, sizeof want, "iterations ok in");
    assert_int_equal(count_lines(r.out, want, notifier), 8);
    print_message("8 ranks, 20000 barriers + world sums, %s: %.2f s\n", notifier, r.secs);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm", name);
    run_free(&r);
}

static void stress_futex(void **state) { stress("futex"); }
static void stress_uring(void **state) { stress("uring"); }

static void idle(const char *notifier, const char *np)
{
    char buf[32];
    char *env[] = {notifier_env(notifier, buf, sizeof buf), NULL};
    /* 3 s; 1 s when SHMESH_TEST_SAMPLE shortens the suites (the sanitize
     * setup: nothing is measured differently, it only waits less). */
    int ms = test_scaled(3000) < 1000 ? 1000 : test_scaled(3000);
    char mss[16];
    snprintf(mss, sizeof mss, "%d", ms);
    struct run r;
    run_launcher(&r, env, 60, "-v", "-n", np, "--", "@rank", "idle", mss, NULL);
    assert_int_equal(r.code, 0);
    int waiters = atoi(np) - 1, found = 0;
    const char *p = r.out;
    while ((p = strstr(p, "idle wait "))) {
        double wall, cpu, pct;
        if (sscanf(p, "idle wait %lf ms wall, %lf ms cpu (%lf%%", &wall, &cpu, &pct) != 3)
            fail_msg("unreadable line in:\n%s", r.out);
        print_message("%s, %s ranks: waited %.0f ms using %.1f ms of CPU (%.2f%%)\n", notifier,
                      np, wall, cpu, pct);
        /* It waited for the sleeper (less than the whole sleep only by
         * however late this rank woke from the barrier before it, which a
         * busy machine may make a sizeable part of a second). */
        if (wall < ms / 2)
            fail_msg("the wait lasted %.0f ms, the peer slept %d", wall, ms);
        if (pct >= 5.0)
            fail_msg("a blocked rank used %.2f%% of a core", pct);
        found++;
        p++;
    }
    assert_int_equal(found, waiters);
    run_free(&r);
}

static void idle_futex_2(void **state) { idle("futex", "2"); }
static void idle_uring_2(void **state) { idle("uring", "2"); }
static void idle_futex_5(void **state) { idle("futex", "5"); }
static void idle_uring_5(void **state) { idle("uring", "5"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stress_futex), cmocka_unit_test(stress_uring),
        cmocka_unit_test(idle_futex_2), cmocka_unit_test(idle_uring_2),
        cmocka_unit_test(idle_futex_5), cmocka_unit_test(idle_uring_5),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
