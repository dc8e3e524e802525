/* Description: a context belongs to one process and one lifetime (issue 24,
 * shmesh-test-context) — a fork child using its parent's context after an
 * async call is refused saying why, its finalize returns without a
 * collective, and the ranks' next psum is right; shmesh_finalize from a
 * host callback, or from a second thread while the first is inside a
 * blocking psum, is refused with its reason and frees nothing; a token of
 * a finalized context is refused, also once a new context sits at the old
 * one's address; a poisoned context keeps the sentence that poisoned it.
 * Each job runs under a deadline: a hang fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* Runs a mode on n ranks (0: without the launcher, one rank); every rank's
 * checks must pass, `oks` in all. */
static void run_mode(const char *mode, int n, int oks)
{
    const char *prog = need_env("SHMESH_TEST_CONTEXT");
    char ns[16];
    snprintf(ns, sizeof ns, "%d", n);
    char *with_launcher[] = {(char *)launcher_path(), "-v", "-n", ns, "--timeout", "60", "--",
                             (char *)prog, (char *)mode, NULL};
    char *alone[] = {(char *)prog, (char *)mode, NULL};
    /* A wait that goes wrong ends as an error, not a hang. */
    char *env[] = {"SHMESH_TIMEOUT=30", n ? NULL : "SHMESH_SEGMENT=", NULL};
    struct run r;
    run_cmd(n ? with_launcher : alone, env, 90, &r);
    if (r.timed_out)
        fail_msg("%s: still running after 90 s (a rank hung)\nstdout:\n%s\nstderr:\n%s", mode,
                 r.out, r.err);
    char name[128];
    if (n && segment_left_behind(&r, name, sizeof name))
        fail_msg("%s: segment %s left in /dev/shm\nstderr:\n%s", mode, name, r.err);
    if (r.code != 0 || count_lines(r.out, "FAIL", NULL) || count_lines(r.out, ": ok: ", NULL) != oks)
        fail_msg("%s: exit %d, expected %d checks to pass:\nstdout:\n%s\nstderr:\n%s", mode, r.code,
                 oks, r.out, r.err);
    printf("%s", r.out);
    run_free(&r);
}

/* Rank 0's child: 5 checks; each rank: async psum, psum after, finalize;
 * rank 0: the child's exit. */
static void fork_child_refused(void **state) { run_mode("fork", 2, 5 + 2 * 3 + 1); }

static void finalize_in_callback(void **state)
{
    run_mode("finalize-in-callback", 1, 5);
    run_mode("finalize-in-callback", 2, 2 * 5);
}

static void finalize_from_second_thread(void **state)
{
    run_mode("finalize-other-thread", 1, 8);
    run_mode("finalize-other-thread", 2, 2 * 8);
}

static void token_after_finalize(void **state) { run_mode("token-after-finalize", 0, 10); }

static void poison_sentence_kept(void **state) { run_mode("poison-kept", 2, 2 * 4); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fork_child_refused),
        cmocka_unit_test(finalize_in_callback),
        cmocka_unit_test(finalize_from_second_thread),
        cmocka_unit_test(token_after_finalize),
        cmocka_unit_test(poison_sentence_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
