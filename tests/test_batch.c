/* Description: batched (process-local) axes against the seed's batching
 * rules, with hand-computed results (shmesh-test-batch-rules): one
 * process, two ranks, a batch of 6 (where a sum of copies and the seed's
 * product differ in float32), and two devices per rank. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define DEADLINE 60.0

static const char *rules_prog(void)
{
    const char *p = getenv("SHMESH_TEST_BATCH_RULES");
    if (!p)
        fail_msg("SHMESH_TEST_BATCH_RULES is not set (run through meson test)");
    return p;
}

/* shmesh-run -n RANKS [--devices-per-rank K] -- prog B: every rank ends
 * with "checks ok", and nothing is left in /dev/shm. */
static void run_rules_mode(int ranks, int per, const char *batch, const char *mode)
{
    char n[8], k[8];
    snprintf(n, sizeof n, "%d", ranks);
    snprintf(k, sizeof k, "%d", per);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", n, "--devices-per-rank", k, "--gpus", "none",
                    "--timeout", "50", "--", (char *)rules_prog(), (char *)batch, (char *)mode,
                    NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, NULL, DEADLINE, &r), 0);
    if (r.timed_out || r.code != 0 || count_lines(r.out, "checks ok", NULL) != ranks ||
        count_lines(r.out, ": ok: ", NULL) < ranks * (mode ? 1 : 3))
        fail_msg("shmesh-run -n %d --devices-per-rank %d -- shmesh-test-batch-rules %s: exit "
                 "%d%s\nstdout:\n%.8000s\nstderr:\n%.3000s",
                 ranks, per, batch, r.code, r.timed_out ? " (timed out)" : "", r.out, r.err);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm", name);
    run_free(&r);
}

static void run_rules(int ranks, int per, const char *batch)
{
    run_rules_mode(ranks, per, batch, NULL);
}

static void one_rank(void **state) { run_rules(1, 1, "3"); }
static void two_ranks(void **state) { run_rules(2, 1, "3"); }
static void batch_of_one(void **state) { run_rules(2, 1, "1"); }
static void batch_of_six(void **state) { run_rules(2, 1, "6"); }
static void two_devices_per_rank(void **state) { run_rules(2, 2, "3"); }
static void batches_differ(void **state) { run_rules_mode(2, 1, "2", "differ"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_rank),
        cmocka_unit_test(two_ranks),
        cmocka_unit_test(batch_of_one),
        cmocka_unit_test(batch_of_six),
        cmocka_unit_test(two_devices_per_rank),
        cmocka_unit_test(batches_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
