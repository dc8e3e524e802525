/* Description: a hostile process of the same user maps a running job's
 * segment and scribbles over it (shmesh-test-hostile): the header's layout
 * fields (while ranks run, and after they finalized, before the launcher
 * reaped them), the heap's bounds, progress words (low, high), pids, probe
 * words, rank states, slot tags, heap offsets published in zero-copy
 * handshakes, call hashes and descriptions, and the abort record; and
 * words of progress forged at the moment a wait would end early on them (a
 * dispatch queue's `done` count, an effect's point): those must be
 * SHMESH_ERR_BAD_SEGMENT on every rank.  Every
 * rank must end with an error or with right results: never a fault, a
 * wrong result, an overrun, or a wait that lasts until SHMESH_TIMEOUT; the
 * launcher never crashes.  Scribbles the ranks must not even notice (the
 * header's layout, read once at attach) must leave every result right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

enum expect {
    RIGHT,          /* every rank gets every result right; the job succeeds */
    RIGHT_OR_ERROR, /* each rank gets right results or an error */
    CORRUPT,        /* every rank ends with SHMESH_ERR_BAD_SEGMENT */
};

/* blocking: waits neither spin nor yield, so that every one sleeps on the
 * progress word's bell. */
static void run(const char *scenario, const char *iters, enum expect expect, bool blocking)
{
    const char *prog = getenv("SHMESH_TEST_HOSTILE");
    assert_non_null(prog);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--timeout", "60", "--",
                    (char *)prog, (char *)scenario, (char *)iters, NULL};
    /* A wait that does not notice what happened ends here, as an error the
     * checks below count as a hang.  (20 s: no wait of a rank that noticed
     * lasts that long, however busy the machine; start-up included.) */
    char *env[] = {"SHMESH_TIMEOUT=20", "SHMESH_SPIN_NS=0", "SHMESH_YIELD_NS=0", NULL};
    if (!blocking)
        env[1] = NULL;
    struct run r;
    run_cmd(argv, env, 90, &r);
    const char *why = NULL;
    if (r.timed_out)
        why = "the job hung";
    else if (strstr(r.err, "AddressSanitizer") || strstr(r.err, "runtime error:"))
        why = "a sanitizer found an error";
    else if (r.code >= 128 || strstr(r.err, "killed by"))
        why = "a rank or the launcher was killed by a signal";
    else if (count_lines(r.out, "hostile rank ", "WRONG"))
        why = "a rank got a wrong result";
    else if (count_lines(r.out, "hostile rank ", "SHMESH_ERR_TIMEOUT"))
        why = "a rank waited until SHMESH_TIMEOUT";
    else if (count_lines(r.out, "hostile rank ", ": end ") != 2)
        why = "a rank did not finish";
    else if (expect == RIGHT && (count_lines(r.out, "hostile rank ", ": end ok ") != 2 ||
                                 r.code != 0))
        why = "a rank failed where it should not have noticed";
    else if (expect == CORRUPT &&
             count_lines(r.out, "hostile rank ", ": end SHMESH_ERR_BAD_SEGMENT ") != 2)
        why = "a rank did not end with SHMESH_ERR_BAD_SEGMENT";
    char name[128];
    if (!why && segment_left_behind(&r, name, sizeof name))
        why = "the segment was left in /dev/shm";
    if (why)
        fail_msg("%s%s: %s (exit %d, %.1f s)\n--- stdout\n%s--- stderr\n%s", scenario,
                 blocking ? " (blocking)" : "", why, r.code, r.secs, r.out, r.err);
    printf("%s%s: %.1f s, exit %d\n%s", scenario, blocking ? " (blocking)" : "", r.secs, r.code,
           r.out);
    run_free(&r);
}

static void hostile(const char *scenario, const char *iters, enum expect expect)
{
    run(scenario, iters, expect, false);
}

/* The header's layout, read once at attach: nothing may change. */
static void layout_fields(void **state) { hostile("layout", "40", RIGHT); }
static void slot_size(void **state) { hostile("slot-bytes", "40", RIGHT); }
static void heap_bounds(void **state) { hostile("heap", "40", RIGHT); }
/* After every rank finalized: the launcher reaps them with its own layout. */
static void layout_at_exit(void **state) { hostile("exit", "20", RIGHT); }
/* Probe words scribbled while ranks start: single copy is not used. */
static void probe_words(void **state) { hostile("probe", "30", RIGHT); }

/* Words peers publish: right results or an error, never a hang. */
static void progress_low(void **state)
{
    hostile("progress-low", "200", RIGHT_OR_ERROR);
    run("progress-low", "200", RIGHT_OR_ERROR, true);
}
static void progress_high(void **state) { hostile("progress-high", "200", RIGHT_OR_ERROR); }
/* Pids are read once, when every rank has joined: single copy and the
 * notifier never see what is written there later. */
static void pids(void **state) { hostile("pid", "30", RIGHT); }
static void rank_states(void **state) { hostile("state", "30", RIGHT_OR_ERROR); }
static void slot_tags(void **state)
{
    hostile("tags", "200", RIGHT_OR_ERROR);
    run("tags", "200", RIGHT_OR_ERROR, true);
}
static void heap_offsets(void **state) { hostile("handshake", "200", RIGHT_OR_ERROR); }
static void call_descriptions(void **state) { hostile("desc", "200", RIGHT_OR_ERROR); }
static void abort_record(void **state) { hostile("abort", "30", RIGHT_OR_ERROR); }

/* Words no rank can have written, at the moment they would end a wait
 * early (issue 24): more of a dispatch queue done than was dispatched (the
 * token of a psum still held up behind a callback), an effect's point past
 * any dispatched (rank 1's token of a callback placed on rank 0's device,
 * and its shmesh_effects_barrier, while rank 0 runs its part). */
static void forged_done(void **state) { hostile("done-high", "20", CORRUPT); }
static void forged_point_placed(void **state) { hostile("point-placed", "20", CORRUPT); }
static void forged_point_barrier(void **state) { hostile("point-barrier", "20", CORRUPT); }

/* A rank that leaves a call early while its peer still reads its buffer in
 * place (single copy): the peer must not return what it read.  The trap
 * needs the peer stopped before its read ended; a run where it got past
 * first says "missed" and is tried again (5 runs at most). */
static void left_while_read(void **state)
{
    const char *prog = getenv("SHMESH_TEST_HOSTILE");
    assert_non_null(prog);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--timeout", "60", "--",
                    (char *)prog, "left-reading", "12", NULL};
    char *env[] = {"SHMESH_TIMEOUT=20", NULL};
    for (int tries = 0; tries < 5; tries++) {
        struct run r;
        run_cmd(argv, env, 90, &r);
        if (r.timed_out || count_lines(r.out, "hostile rank ", "WRONG") ||
            count_lines(r.out, "hostile rank ", ": end ") != 2 || r.code >= 128 ||
            strstr(r.err, "AddressSanitizer") || strstr(r.err, "runtime error:"))
            fail_msg("left-reading: exit %d, %.1f s\n--- stdout\n%s--- stderr\n%s", r.code, r.secs,
                     r.out, r.err);
        bool fired = count_lines(r.out, "scribbler: fired", NULL) == 1;
        if (fired && count_lines(r.out, "hostile rank ", ": end ok ") != 0)
            fail_msg("left-reading: a rank ended ok although rank 0 left the call:\n%s", r.out);
        printf("left-reading: %.1f s, exit %d\n%s", r.secs, r.code, r.out);
        run_free(&r);
        if (fired)
            return;
    }
    fail_msg("left-reading: the trap missed 5 times (rank 1 read through before it was stopped)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layout_fields),
        cmocka_unit_test(slot_size),
        cmocka_unit_test(heap_bounds),
        cmocka_unit_test(layout_at_exit),
        cmocka_unit_test(probe_words),
        cmocka_unit_test(progress_low),
        cmocka_unit_test(progress_high),
        cmocka_unit_test(pids),
        cmocka_unit_test(rank_states),
        cmocka_unit_test(slot_tags),
        cmocka_unit_test(heap_offsets),
        cmocka_unit_test(call_descriptions),
        cmocka_unit_test(abort_record),
        cmocka_unit_test(forged_done),
        cmocka_unit_test(forged_point_placed),
        cmocka_unit_test(forged_point_barrier),
        cmocka_unit_test(left_while_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
