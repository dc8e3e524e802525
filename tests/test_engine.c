/* Description: the engine through its internal interfaces, each mode of
 * shmesh-test-engine under shmesh-run — three calls on different groups in
 * flight on one context, completed in order with right results, and
 * call_progress returning at once while peers are late (held at a gate);
 * buffers a device backend claims (an inaccessible range) refused with a
 * clear error and never copied; a single copy the kernel refuses failing that call on both
 * ranks, not the job; a second thread using a context while the first is
 * inside refused with its own explanation; SHMESH_DEBUG's lines (a path per
 * exchange, a line per call and per wait, what single copy did to ptrace),
 * and none without it; and shmesh-test-traffic, what each collective sends
 * and receives between processes against its algorithm's figures, on 1 to
 * 4 ranks, on the staged, rsag, zero-copy and single-copy paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* Runs a mode on n ranks, which must pass `checks` checks in all; true when
 * it was skipped. */
static bool run_mode(const char *mode, const char *n, int checks)
{
    const char *prog = getenv("SHMESH_TEST_ENGINE");
    assert_non_null(prog);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", (char *)n, "--", (char *)prog,
                    (char *)mode, NULL};
    /* Where ranks must be late, they wait for rank 0 to create this file. */
    char dir[] = "/tmp/shmesh-test-engine-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char gate[sizeof dir + 32];
    snprintf(gate, sizeof gate, "SHMESH_TEST_GATE=%s/open", dir);
    char *env[] = {"SHMESH_TIMEOUT=20", gate, NULL};
    struct run r;
    run_cmd(argv, env, 120, &r);
    unlink(strchr(gate, '=') + 1);
    rmdir(dir);
    if (r.timed_out)
        fail_msg("%s: timed out (a rank hung)\n%s\n%s", mode, r.out, r.err);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("%s: segment %s left in /dev/shm", mode, name);
    if (r.code == 77 && strstr(r.out, "skip:")) {
        printf("%s", r.out);
        run_free(&r);
        return true;
    }
    if (r.code != 0 || count_lines(r.out, "FAILED", NULL) ||
        count_lines(r.out, ": ok: ", NULL) != checks)
        fail_msg("%s: exit %d, expected %d checks to pass:\n%s\n%s", mode, r.code, checks,
                 r.out, r.err);
    run_free(&r);
    return false;
}

/* shmesh-test-traffic on n ranks (`heap`: its buffers in the shared heap),
 * with extra environment entries; skipped when `need` (not NULL) is in no
 * line of its output (SHMESH_DEBUG=paths: the path a case needs was not
 * taken). */
static void run_traffic(const char *n, bool heap, char *const extra[], const char *need)
{
    char *argv[] = {(char *)launcher_path(), "-v", "-n", (char *)n, "--",
                    (char *)need_env("SHMESH_TEST_TRAFFIC"), heap ? "heap" : NULL, NULL};
    char *env[8] = {"SHMESH_TIMEOUT=20"};
    for (int i = 0; extra && extra[i] && i < 6; i++)
        env[i + 1] = extra[i];
    struct run r;
    run_cmd(argv, env, 120, &r);
    if (r.timed_out)
        fail_msg("traffic on %s ranks: timed out (a rank hung)\n%s\n%s", n, r.out, r.err);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("traffic on %s ranks: segment %s left in /dev/shm", n, name);
    if (need && !strstr(r.out, need) && !strstr(r.err, need)) {
        printf("skip: no line says '%s' (single copy not allowed here?)\n", need);
        run_free(&r);
        skip();
    }
    if (r.code != 0 || count_lines(r.out, "FAILED", NULL) ||
        count_lines(r.out, ": traffic ok", NULL) != atoi(n))
        fail_msg("traffic on %s ranks%s: exit %d\n%s\n%s", n, heap ? ", heap" : "", r.code,
                 r.out, r.err);
    run_free(&r);
}

static void traffic_staged(void **state)
{
    static const char *const ns[] = {"1", "2", "3", "4"};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        run_traffic(ns[i], false, NULL, NULL);
}

static void traffic_zero_copy(void **state)
{
    run_traffic("2", true, NULL, NULL);
    run_traffic("3", true, NULL, NULL);
}

/* Single copy from 4 KiB for every op (where the kernel refuses it, the
 * moves go staged and the figures are the same); then for the 1 MiB psum
 * too, instead of rsag (skipped where it cannot be). */
static void traffic_single_copy(void **state)
{
    char *env[] = {"SHMESH_CMA_MIN=4096", "SHMESH_CMA_BCAST_REDUCE_MIN=4096", NULL};
    run_traffic("2", false, env, NULL);
    run_traffic("3", false, env, NULL);
    char *psum[] = {"SHMESH_CMA_MIN=4096", "SHMESH_CMA_BCAST_REDUCE_MIN=4096",
                    "SHMESH_RSAG_MIN=1T", "SHMESH_DEBUG=paths", NULL};
    run_traffic("3", false, psum, "shmesh_psum: 1048608 B among 3, path single-copy");
}

static void calls_in_flight(void **state)
{
    /* 7 checks a round, 3 rounds, one more in the last, one more on rank 0 */
    run_mode("inflight", "4", 4 * (3 * 7 + 1) + 1);
}

static void device_pointers_refused(void **state) { run_mode("device", "2", 2 * 9); }

static void failed_single_copy(void **state)
{
    if (run_mode("cma-fault", "2", 2 * 4))
        skip();
}

static void second_thread_refused(void **state) { run_mode("threads", "2", 4 + 2); }

/* Zero copy's handshake with the ranks' buffers in the heap or not, in
 * every arrangement, and a mismatch between members that collect it late. */
static void heap_mix(void **state) { run_mode("heap-mix", "2", 2 * 6); }

/* Lines of `text` from rank 0 or 1 of the debug output that hold `what`. */
static int debug_lines(const char *text, const char *what)
{
    return count_lines(text, "shmesh rank ", what);
}

static void debug_lines_when_asked(void **state)
{
    const char *bench = getenv("SHMESH_BENCH");
    assert_non_null(bench);
    /* A 8-byte psum (staged) and a 256 KiB one on heap buffers (zero copy),
     * two iterations each after none for warm-up. */
    char *argv[] = {(char *)launcher_path(), "-n", "2", "--", (char *)bench, "-o", "psum", "-b",
                    "8", "-e", "256K", "-f", "32768", "-w", "0", "-n", "2", "--heap", NULL};
    char *quiet[] = {"SHMESH_TIMEOUT=20", NULL};
    char *loud[] = {"SHMESH_TIMEOUT=20", "SHMESH_DEBUG=paths,calls,waits", NULL};
    struct run r;
    run_cmd(argv, quiet, 60, &r);
    assert_int_equal(r.code, 0);
    if (debug_lines(r.err, ""))
        fail_msg("debug lines without SHMESH_DEBUG:\n%s", r.err);
    run_free(&r);
    run_cmd(argv, loud, 60, &r);
    assert_int_equal(r.code, 0);
    /* Each rank: at least the 2 timed psums of each size (the bench adds a
     * checked one), every call with its line, and some waits. */
    int staged = debug_lines(r.err, "shmesh_psum: 8 B among 2, path staged");
    int zero = debug_lines(r.err, "shmesh_psum: 262144 B among 2, path zero-copy (after the "
                                  "handshake)");
    int calls = count_lines(r.err, "shmesh_psum(\"i\", float32[", "path zero-copy, ");
    int waits = debug_lines(r.err, " waited ");
    if (staged < 4 || zero < 4 || calls != zero || waits < 1)
        fail_msg("expected at least 4 staged and 4 zero-copy path lines, a call line for each "
                 "zero-copy one and some waits, got %d, %d, %d, %d:\n%s",
                 staged, zero, calls, waits, r.err);
    /* Single copy may be used: each rank says what it did to ptrace. */
    if (debug_lines(r.err, "single copy: ") != 2)
        fail_msg("expected one 'single copy:' line per rank:\n%s", r.err);
    run_free(&r);
    /* With single copy refused nothing is lifted, so nothing is said. */
    char *refused[] = {"SHMESH_TIMEOUT=20", "SHMESH_DEBUG=paths", "SHMESH_CMA=0", NULL};
    run_cmd(argv, refused, 60, &r);
    assert_int_equal(r.code, 0);
    if (debug_lines(r.err, "single copy: "))
        fail_msg("SHMESH_CMA=0, yet ptrace was looked at:\n%s", r.err);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(traffic_staged),
        cmocka_unit_test(traffic_zero_copy),
        cmocka_unit_test(traffic_single_copy),
        cmocka_unit_test(calls_in_flight),
        cmocka_unit_test(device_pointers_refused),
        cmocka_unit_test(failed_single_copy),
        cmocka_unit_test(second_thread_refused),
        cmocka_unit_test(heap_mix),
        cmocka_unit_test(debug_lines_when_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
