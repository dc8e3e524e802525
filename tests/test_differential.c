/* Description: differential test of the collectives — shmesh-test-diff runs
 * thousands of random cases (meshes of 1-3 axes with random device orders,
 * axis subsets, axis_index_groups, every dtype, shapes with zero-size
 * dimensions, negative axes, tiled and untiled, permutations, ragged
 * offsets, deliberately refused arguments) through libshmesh on 1 to 8
 * ranks and compares every rank's output bit for bit with the
 * single-process reference model in tests/reference.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* Cases per launch (SHMESH_TEST_SAMPLE=N runs every launch with 1/N of
 * them); every launch also replays under a deadline. */
#define CASES test_scaled(500)
#define OP_CASES test_scaled(200)
#define DEADLINE 180.0

static char *env_vars[] = {"SHMESH_TIMEOUT=30", NULL};
/* The smallest slot buffers: big cases then move in many chunks. */
static char *small_slots[] = {"SHMESH_TIMEOUT=30", "SHMESH_SLOT_BYTES=4096", NULL};
/* Buffers in the shared heap (-H), zero-copy from the first byte or from
 * 4 KiB on: every op that can go zero-copy does, on either side of the
 * switch, and must give the very same bits. */
static char *heap_always[] = {"SHMESH_TIMEOUT=30", "SHMESH_ZC_MIN=0", NULL};
static char *heap_from_4k[] = {"SHMESH_TIMEOUT=30", "SHMESH_ZC_MIN=4096", "SHMESH_SLOT_BYTES=8192",
                               NULL};

/* The staged reduce-scatter + all-gather for every reduction, and around
 * its switch with small slots so arrays span many chunks. */
static char *rsag_always[] = {"SHMESH_TIMEOUT=30", "SHMESH_RSAG_MIN=0", NULL};
static char *rsag_from_4k[] = {"SHMESH_TIMEOUT=30", "SHMESH_RSAG_MIN=4096", "SHMESH_SLOT_BYTES=8192",
                               NULL};

/* Single copy (process_vm_readv) forced, and around its switch. */
static char *cma_always[] = {"SHMESH_TIMEOUT=30", "SHMESH_CMA_MIN=0", "SHMESH_CMA_BCAST_REDUCE_MIN=0",
                             NULL};
static char *cma_from_4k[] = {"SHMESH_TIMEOUT=30", "SHMESH_CMA_MIN=4096",
                              "SHMESH_CMA_BCAST_REDUCE_MIN=4096", "SHMESH_RSAG_MIN=0", NULL};

/* "A=1 B=2 " for a replay command (SHMESH_TIMEOUT left out). */
static void env_prefix(char *const env[], char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; env && env[i] && o < len; i++)
        if (strncmp(env[i], "SHMESH_TIMEOUT=", 15))
            o += (size_t)snprintf(buf + o, len - o, "%s ", env[i]);
}

static const char *diff_path(void)
{
    const char *p = getenv("SHMESH_TEST_DIFF");
    if (!p)
        fail_msg("SHMESH_TEST_DIFF is not set (run the tests through meson test)");
    return p;
}

/* The first lines of `text` that contain `word`, for failure messages. */
static void first_lines(const char *text, const char *word, char *buf, size_t len)
{
    size_t o = 0;
    int n = 0;
    buf[0] = '\0';
    for (const char *line = text; line && *line && n < 8;) {
        const char *end = strchr(line, '\n');
        size_t l = end ? (size_t)(end - line) : strlen(line);
        if (memmem(line, l, word, strlen(word)) && o + l + 2 < len) {
            memcpy(buf + o, line, l);
            o += l;
            buf[o++] = '\n';
            buf[o] = '\0';
            n++;
        }
        line = end ? end + 1 : NULL;
    }
}

/* Runs `shmesh-run -v -n W [--devices-per-rank K] -- shmesh-test-diff -q
 * [-o OP] SEED COUNT` and checks that every rank agreed with the model on
 * every case and that the segment is gone. */
static void launch_env(char *const env[], int world, int per, const char *op, unsigned long seed,
                       int count)
{
    bool heap = env == heap_always || env == heap_from_4k;
    char pre[160];
    env_prefix(env, pre, sizeof pre);
    char ws[16], ss[32], cs[16], ks[32], dev[48] = "";
    snprintf(ws, sizeof ws, "%d", world);
    snprintf(ks, sizeof ks, "--devices-per-rank=%d", per);
    /* Several devices per rank: CPU ones, even where the machine has fewer
     * GPUs than a rank would hold (the launcher refuses that). */
    if (per > 1)
        snprintf(dev, sizeof dev, "%s --gpus none ", ks);
    snprintf(ss, sizeof ss, "%lu", seed);
    snprintf(cs, sizeof cs, "%d", count);
    char *argv[20];
    int n = 0;
    argv[n++] = (char *)launcher_path();
    argv[n++] = "-v";
    argv[n++] = "-n";
    argv[n++] = ws;
    if (per > 1) {
        argv[n++] = ks;
        argv[n++] = "--gpus";
        argv[n++] = "none";
    }
    argv[n++] = "--";
    argv[n++] = (char *)diff_path();
    argv[n++] = "-q";
    if (heap)
        argv[n++] = "-H";
    if (op) {
        argv[n++] = "-o";
        argv[n++] = (char *)op;
    }
    argv[n++] = ss;
    argv[n++] = cs;
    argv[n] = NULL;

    struct run r;
    assert_int_equal(run_cmd(argv, env, DEADLINE, &r), 0);
    char repro[320];
    snprintf(repro, sizeof repro, "%sshmesh-run -n %d %s-- shmesh-test-diff %s%s%s%s%lu %d", pre,
             world, dev, heap ? "-H " : "", op ? "-o " : "", op ? op : "", op ? " " : "", seed,
             count);
    /* cmocka cuts long messages: the details go to stderr first. */
    if (r.timed_out) {
        fprintf(stderr, "%s: still running after %.0f s\nstdout:\n%.4000s\nstderr:\n%.4000s\n",
                repro, DEADLINE, r.out, r.err);
        fail_msg("%s: timed out", repro);
    }
    char want[64];
    snprintf(want, sizeof want, ": %d cases ok", count);
    int agreed = count_lines(r.out, want, NULL);
    if (r.code != 0 || agreed != world) {
        char bad[8192];
        first_lines(r.out, "MISMATCH", bad, sizeof bad);
        if (!bad[0])
            first_lines(r.out, "FAIL", bad, sizeof bad);
        fprintf(stderr,
                "%s: exit %d, %d of %d ranks agreed on all %d cases\n%s\nstderr:\n%.3000s\n"
                "replay one case with: %sshmesh-run -n %d %s-- shmesh-test-diff %s%s%s%s-f INDEX "
                "%lu 1\n",
                repro, r.code, agreed, world, count, bad[0] ? bad : r.out, r.err, pre, world, dev,
                heap ? "-H " : "", op ? "-o " : "", op ? op : "", op ? " " : "", seed);
        fail_msg("%s: exit %d, %d of %d ranks agreed (details above)", repro, r.code, agreed,
                 world);
    }
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("%s: segment %s left in /dev/shm\nstderr:\n%s", repro, name, r.err);
    run_free(&r);
}

static void launch(int world, const char *op, unsigned long seed, int count)
{
    launch_env(env_vars, world, 1, op, seed, count);
}

/* Several devices per rank: every rank calls for its K devices, and each
 * device's output must be the model's (the bits of one device per rank). */
static void devices(int world, int per)
{
    char *env[] = {"SHMESH_TIMEOUT=30", NULL};
    launch_env(env, world, per, NULL, 2000 + 10 * (unsigned long)(world * per) + per, CASES);
}
static void devices_1x4(void **state) { devices(1, 4); }
static void devices_2x2(void **state) { devices(2, 2); }
static void devices_3x2(void **state) { devices(3, 2); }
static void devices_2x3(void **state) { devices(2, 3); }

/* Random cases over every collective, two seeds per world size (one under
 * SHMESH_TEST_SAMPLE). */
static void random_world(int world)
{
    for (unsigned long s = 0; s < (unsigned long)(test_sample() > 1 ? 1 : 2); s++)
        launch(world, NULL, 1000 + 10 * (unsigned long)world + s, CASES);
}

static void world_1(void **state) { random_world(1); }
static void world_2(void **state) { random_world(2); }
static void world_3(void **state) { random_world(3); }
static void world_4(void **state) { random_world(4); }
static void world_5(void **state) { random_world(5); }
static void world_6(void **state) { random_world(6); }
static void world_7(void **state) { random_world(7); }
static void world_8(void **state) { random_world(8); }

/* Each collective on its own, at world sizes that give meshes with several
 * axes (4, 6, 8) and a prime one (5). */
static void each_op(void **state)
{
    static const char *const ops[] = {
        "psum",       "pmax",         "pmin",       "pmean",     "pargmax",
        "pargmin",    "all_gather",   "psum_scatter", "all_to_all", "pswapaxes",
        "ragged_all_to_all", "ppermute", "pshuffle", "pbroadcast"};
    static const int worlds[] = {4, 6, 8, 5};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        launch(worlds[i % 4], ops[i], 77 + i, OP_CASES);
}

/* 4 KiB slots: arrays of a few thousand elements take many steps. */
static void small_slot_buffers(void **state)
{
    static const int worlds[] = {2, 3, 4, 5, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
        launch_env(small_slots, worlds[i], 1, NULL, 5000 + i, CASES);
}

/* Zero-copy through the shared heap, forced and around its threshold. */
static void heap_buffers(void **state)
{
    static const int worlds[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        launch_env(heap_always, worlds[i], 1, NULL, 7000 + i, CASES);
        launch_env(heap_from_4k, worlds[i], 1, NULL, 7100 + i, CASES);
    }
    static const char *const zc_ops[] = {"psum", "pmean", "pargmax", "all_gather",
                                         "psum_scatter", "all_to_all", "ppermute", "pbroadcast"};
    for (size_t i = 0; i < sizeof zc_ops / sizeof *zc_ops; i++)
        launch_env(heap_always, 2 + (int)(i % 3) * 2, 1, zc_ops[i], 7200 + i, OP_CASES);
}

static void staged_reductions(void **state)
{
    static const int worlds[] = {2, 3, 5, 8};
    static const char *const red_ops[] = {"psum", "pmax", "pmin", "pmean", "pargmax", "pargmin"};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        launch_env(rsag_always, worlds[i], 1, NULL, 8000 + i, CASES);
        launch_env(rsag_from_4k, worlds[i], 1, NULL, 8100 + i, CASES);
    }
    for (size_t i = 0; i < sizeof red_ops / sizeof *red_ops; i++)
        launch_env(rsag_from_4k, 2 + (int)i, 1, red_ops[i], 8200 + i, OP_CASES);
}

static void single_copy(void **state)
{
    static const int worlds[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++) {
        launch_env(cma_always, worlds[i], 1, NULL, 9000 + i, CASES);
        launch_env(cma_from_4k, worlds[i], 1, NULL, 9100 + i, CASES);
    }
    /* Reductions whose output elements are wider than their input's (bool
     * psum gives int32, integer pmean float32 or float64, pargmax int32), in
     * groups of 2, 3 and 5, where blocks in the bounce buffer fall unaligned
     * unless placed with care (the sanitize setup reports a misaligned
     * store). */
    static const char *const widening[] = {"psum", "pmean", "pargmax", "pargmin"};
    for (size_t i = 0; i < sizeof widening / sizeof *widening; i++)
        for (int w = 2; w <= 5; w += 1 + (w == 3))
            launch_env(cma_always, w, 1, widening[i], 9300 + i * 10 + (unsigned long)w, OP_CASES);
}

/* One rank refuses single copy (SHMESH_CMA=0): every member must see it in
 * the handshake and take the staged path together. */
static void single_copy_refused_by_one(void **state)
{
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "3", "--", "/bin/sh", "-c",
                    "if [ \"$RANK\" = 1 ]; then export SHMESH_CMA=0; fi; exec \"$0\" -q 9200 300",
                    (char *)diff_path(), NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, cma_always, DEADLINE, &r), 0);
    if (r.timed_out || r.code != 0 || count_lines(r.out, ": 300 cases ok", NULL) != 3)
        fail_msg("exit %d%s\n%.4000s\n%.2000s", r.code, r.timed_out ? " (timed out)" : "", r.out,
                 r.err);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm", name);
    run_free(&r);
}

/* The per-case lines: without -q every rank reports every case. */
static void one_line_per_case(void **state)
{
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "3", "--", (char *)diff_path(), "9",
                    "40", NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, env_vars, DEADLINE, &r), 0);
    if (r.code != 0)
        fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    for (int rank = 0; rank < 3; rank++) {
        char who[32];
        snprintf(who, sizeof who, "rank %d: case 9/", rank);
        int n = count_lines(r.out, who, "-> ok");
        if (n != 40)
            fail_msg("rank %d reported %d ok cases of 40\n%s", rank, n, r.out);
    }
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm", name);
    run_free(&r);
}

/* Without the launcher the program is a job of one rank. */
static void without_launcher(void **state)
{
    char *argv[] = {(char *)diff_path(), "-q", "4242", "200", NULL};
    char *env[] = {"SHMESH_SEGMENT=", "SHMESH_TIMEOUT=30", NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, env, DEADLINE, &r), 0);
    if (r.code != 0 || count_lines(r.out, "rank 0: 200 cases ok", NULL) != 1)
        fail_msg("exit %d\n%.4000s\n%.2000s", r.code, r.out, r.err);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(without_launcher),
        cmocka_unit_test(one_line_per_case),
        cmocka_unit_test(heap_buffers),
        cmocka_unit_test(staged_reductions),
        cmocka_unit_test(single_copy),
        cmocka_unit_test(single_copy_refused_by_one),
        cmocka_unit_test(world_1),
        cmocka_unit_test(world_2),
        cmocka_unit_test(world_3),
        cmocka_unit_test(world_4),
        cmocka_unit_test(world_5),
        cmocka_unit_test(world_6),
        cmocka_unit_test(world_7),
        cmocka_unit_test(world_8),
        cmocka_unit_test(each_op),
        cmocka_unit_test(small_slot_buffers),
        cmocka_unit_test(devices_1x4),
        cmocka_unit_test(devices_2x2),
        cmocka_unit_test(devices_3x2),
        cmocka_unit_test(devices_2x3),
    };
    if (test_sample() > 1)
        print_message("SHMESH_TEST_SAMPLE=%d: every launch runs %d of its 500 random cases (%d "
                      "of 200 for one op), world_N one seed of 2\n",
                      test_sample(), CASES, OP_CASES);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
