/* Description: global arrays (jax.Array, GlobalDeviceArray) across
 * processes holding several devices each — the GlobalDeviceArray docstring
 * examples on 8 devices split 1x8, 2x4, 4x2 and 8x1; the calls the
 * per-block callback gets; random meshes, device orders, specs, shapes and
 * dtypes checked against the test's own slicing (every constructor,
 * gather, scatter, reshard there and back) with 1 to 4 processes of 1 to 4
 * devices; refused arguments and failing callbacks, which leave nothing
 * behind and the job usable; arrays over a process-local mesh, which
 * involve no other rank; ranks gathering different arrays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static const char *garray_path(void)
{
    const char *p = getenv("SHMESH_TEST_GARRAY");
    if (!p)
        fail_msg("SHMESH_TEST_GARRAY is not set (run the suite through meson test)");
    return p;
}


/* Runs the helper under shmesh-run: `np` processes of `k` devices each.
 * It must exit 0 and leave no segment behind. */
static void run_job_env(struct run *r, char *const env[], int np, int k, double timeout,
                        const char *mode, const char *arg1, const char *arg2)
{
    char nps[16], ks[16];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(ks, sizeof ks, "%d", k);
    /* CPU devices, as many per rank as asked, whatever GPUs the machine has
     * (global arrays live in host memory). */
    run_launcher(r, env, timeout, "-v", "-n", nps, "--devices-per-rank", ks, "--gpus", "none",
                 "--", garray_path(), mode, arg1, arg2, NULL);
    if (r->timed_out || r->code != 0)
        fail_msg("%d processes x %d devices, %s %s %s: exit %d%s\nstdout:\n%s\nstderr:\n%s", np,
                 k, mode, arg1 ? arg1 : "", arg2 ? arg2 : "", r->code,
                 r->timed_out ? " (timed out)" : "", r->out, r->err);
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm\nstderr:\n%s", name, r->err);
}

static void run_job(struct run *r, int np, int k, double timeout, const char *mode,
                    const char *arg1, const char *arg2)
{
    run_job_env(r, NULL, np, k, timeout, mode, arg1, arg2);
}

/* The docstring examples: the class's (8, 2) over 4x2 with P('x', 'y'),
 * from_callback's (8, 8) over 2x4, from_batched_callback's P('x') and
 * with_devices' P(('x', 'y')), whatever the split of the 8 devices into
 * processes. */
static void docstring_examples(void **state)
{
    static const int splits[][2] = {{1, 8}, {2, 4}, {4, 2}, {8, 1}};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        int np = splits[i][0];
        struct run r;
        run_job(&r, np, splits[i][1], 60, "examples", NULL, NULL);
        expect_lines(&r,
                     "rank 0: gda.shape (8, 2); local_shards[0]: data [[0], [2]], shape (2, 1), "
                     "index (slice(0, 2), slice(0, 1))",
                     NULL, 1);
        expect_lines(&r, "from_callback x,y: local_data(0).shape (2, 1)", NULL, np);
        expect_lines(&r, "from_callback x,y: local_data(0).shape (4, 2)", NULL, np);
        expect_lines(&r, "from_batched_callback x: local_data(0).shape (2, 2)", NULL, np);
        expect_lines(&r, "from_callback_with_devices (x,y): local_data(0).shape (1, 2)", NULL,
                     np);
        run_free(&r);
    }
}

/* (8, 2) over a 4x2 mesh with P('x'): the two devices of a mesh row share
 * a block, so the callback gets each row's block once with both devices. */
static void with_devices_groups_blocks(void **state)
{
    struct run r;
    run_job(&r, 1, 8, 30, "with-devices", NULL, NULL);
    expect_lines(&r, "rank 0: with_devices call 0: block [0:2, 0:2] devices 0 1", NULL, 1);
    expect_lines(&r, "rank 0: with_devices call 3: block [6:8, 0:2] devices 6 7", NULL, 1);
    expect_lines(&r, "rank 0: with_devices 4 calls for 8 local devices", NULL, 1);
    run_free(&r);
    run_job(&r, 2, 4, 30, "with-devices", NULL, NULL);
    expect_lines(&r, "rank 1: with_devices call 0: block [4:6, 0:2] devices 4 5", NULL, 1);
    expect_lines(&r, "rank 1: with_devices call 1: block [6:8, 0:2] devices 6 7", NULL, 1);
    expect_lines(&r, "with_devices 2 calls for 4 local devices", NULL, 2);
    run_free(&r);
    /* Three processes of two devices: mesh 3x2, one call each. */
    run_job(&r, 3, 2, 30, "with-devices", NULL, NULL);
    expect_lines(&r, "rank 2: with_devices call 0: block [4:6, 0:2] devices 4 5", NULL, 1);
    expect_lines(&r, "with_devices 1 calls for 2 local devices", NULL, 3);
    run_free(&r);
}

/* Random cases over every split of 1 to 4 processes and 1 to 4 devices
 * each (the helper checks; a seed per split, so a failure reruns alike). */
static void random_arrays(void **state)
{
    unsigned runs = 0, ran = 0;
    for (int np = 1; np <= 4; np++)
        for (int k = 1; k <= 4; k++) {
            if (!test_sampled(runs++))
                continue;
            ran++;
            char seed[16], cases[16];
            snprintf(seed, sizeof seed, "%d", 100 + np * 10 + k);
            snprintf(cases, sizeof cases, "%d", np * k > 8 ? 15 : 25);
            struct run r;
            run_job(&r, np, k, 60, "prop", seed, cases);
            char want[96];
            snprintf(want, sizeof want, "cases ok (%d ranks, %d devices)", np, np * k);
            expect_lines(&r, want, NULL, np);
            run_free(&r);
        }
    test_sample_note("splits of processes x devices", ran, runs);
}

/* Random cases again with single copy at every size: a reshard's ranks
 * read the parts they need out of the senders' old shards themselves (the
 * transfers' rows), checked as above, traffic included.  Skipped where the
 * kernel refuses process_vm_readv between the ranks (nothing then says the
 * reshard took single copy). */
static void random_arrays_single_copy(void **state)
{
    static const int splits[][2] = {{2, 1}, {2, 3}, {3, 2}, {4, 1}};
    char *env[] = {"SHMESH_CMA_MIN=0", "SHMESH_DEBUG=paths", NULL};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        int np = splits[i][0], k = splits[i][1];
        char seed[16], want[96];
        snprintf(seed, sizeof seed, "%d", 500 + np * 10 + k);
        struct run r;
        run_job_env(&r, env, np, k, 90, "prop", seed, "12");
        snprintf(want, sizeof want, "cases ok (%d ranks, %d devices)", np, np * k);
        expect_lines(&r, want, NULL, np);
        if (!count_lines(r.err, "shmesh_global_array_reshard: ", "path single-copy")) {
            printf("skip: no reshard took single copy (process_vm_readv refused here?)\n");
            run_free(&r);
            skip();
        }
        run_free(&r);
    }
}

/* Once with 8 processes (slow on two cores: a few cases). */
static void random_arrays_8_processes(void **state)
{
    struct run r;
    run_job(&r, 8, 1, 120, "prop", "801", "8");
    expect_lines(&r, "cases ok (8 ranks, 8 devices)", NULL, 8);
    run_free(&r);
}

/* Without the launcher: a job of one process, SHMESH_LOCAL_DEVICES devices. */
static void one_process_without_launcher(void **state)
{
    char *argv[] = {(char *)garray_path(), "prop", "7", "8", NULL};
    char *env[] = {"SHMESH_SEGMENT=", "SHMESH_LOCAL_DEVICES=3", NULL};
    struct run r;
    run_cmd(argv, env, 30, &r);
    if (r.code != 0)
        fail_msg("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err);
    expect_lines(&r, "rank 0: prop seed 7: 8 cases ok (1 ranks, 3 devices)", NULL, 1);
    run_free(&r);
}

/* Every refusal explained, and the job still works (the sanitized suite
 * checks that nothing leaked). */
static void refusals(void **state)
{
    static const int splits[][2] = {{1, 2}, {2, 2}, {3, 1}};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        int np = splits[i][0];
        struct run r;
        run_job(&r, np, splits[i][1], 30, "errors", NULL, NULL);
        expect_lines(&r, ": abstract -> SHMESH_ERR_INVALID", "must be concrete", np);
        expect_lines(&r, ": callback -> SHMESH_ERR_INVALID", "the callback returned 7 for device ",
                     np);
        expect_lines(&r, ": batched-callback -> SHMESH_ERR_INVALID", "returned -2 for device", np);
        expect_lines(&r, ": with-devices-callback -> SHMESH_ERR_INVALID", "returned 5 for device",
                     np);
        expect_lines(&r, ": null-callback -> SHMESH_ERR_INVALID", "the callback is NULL", np);
        expect_lines(&r, ": indivisible -> SHMESH_ERR_INVALID", NULL, np);
        expect_lines(&r, ": negative -> SHMESH_ERR_INVALID", "sizes must be >= 0", np);
        expect_lines(&r, ": ndim -> SHMESH_ERR_INVALID", "ndim 9", np);
        expect_lines(&r, ": dtype -> SHMESH_ERR_INVALID", "dtype 99", np);
        expect_lines(&r, ": too-large -> SHMESH_ERR_INVALID", "more than 2^62 bytes", np);
        expect_lines(&r, ": null-shape -> SHMESH_ERR_INVALID", "shape is NULL but ndim is 2", np);
        expect_lines(&r, ": null-out -> SHMESH_ERR_INVALID", "out must not be NULL", np);
        expect_lines(&r, ": null-sharding -> SHMESH_ERR_INVALID", "the sharding is NULL", np);
        expect_lines(&r, ": null-buffers -> SHMESH_ERR_INVALID", "buffers is NULL", np);
        expect_lines(&r, ": scatter-root -> SHMESH_ERR_INVALID", "root must be a rank 0..", np);
        expect_lines(&r, ": gather-root -> SHMESH_ERR_INVALID",
                     "root must be -1 (every rank) or a rank 0..", np);
        expect_lines(&r, ": gather-null-out -> SHMESH_ERR_INVALID", "out is NULL", np);
        expect_lines(&r, ": reshard-null -> SHMESH_ERR_INVALID", "the sharding is NULL", np);
        expect_lines(&r, ": accessor-null -> SHMESH_ERR_INVALID", "the array is NULL", np);
        expect_lines(&r, "errors: job usable", NULL, np);
        if (np == 1)
            expect_lines(&r, ": scatter-null-data -> SHMESH_ERR_INVALID", "data is NULL on the root",
                         1);
        run_free(&r);
    }
}

/* Arrays over a process-local mesh move nothing between ranks: rank 0
 * gathers, scatters and reshards alone, then meets the others. */
static void local_mesh_arrays(void **state)
{
    struct run r;
    run_job(&r, 3, 2, 30, "local-mesh", NULL, NULL);
    expect_lines(&r, "rank 0: local mesh: gather, scatter and reshard without the other ranks ok",
                 NULL, 1);
    expect_lines(&r, ": local-scatter-root -> SHMESH_ERR_INVALID", "root must be this rank", 1);
    expect_lines(&r, ": local-reshard-to-job -> SHMESH_ERR_INVALID", "expected both", 1);
    run_free(&r);
}

/* Ranks gathering different arrays of the same bytes: every one fails,
 * naming both arrays. */
static void mismatched_gather_and_scatter(void **state)
{
    struct run r;
    run_job(&r, 3, 2, 30, "mismatch", NULL, NULL);
    expect_lines(&r, ": gather -> SHMESH_ERR_MISMATCH", "int32[6,2]", 3);
    expect_lines(&r, ": gather -> SHMESH_ERR_MISMATCH", "float32[6,2]", 3);
    expect_lines(&r, ": gather -> SHMESH_ERR_MISMATCH", "shmesh_global_array_gather", 3);
    run_free(&r);
    run_job(&r, 3, 2, 30, "mismatch-scatter", NULL, NULL);
    expect_lines(&r, ": scatter -> SHMESH_ERR_MISMATCH", "int32[6,2]", 3);
    expect_lines(&r, ": scatter -> SHMESH_ERR_MISMATCH", "shmesh_global_array_scatter", 3);
    run_free(&r);
}

/* One array built as P() on rank 0 and P('x') on the others: the first
 * gather or reshard of it fails on every rank, naming both shardings, even
 * though rank 0 needs nothing from the others; and ranks resharding one
 * array to different shardings fail alike. */
static void mismatched_shardings(void **state)
{
    static const int splits[][2] = {{2, 1}, {3, 2}};
    static const struct {
        const char *what, *line, *mine, *theirs;
    } cases[] = {
        {"gather", ": gather-A -> SHMESH_ERR_MISMATCH", "\"P()\"", "\"P('x')\""},
        {"gather-root", ": gather-root -> SHMESH_ERR_MISMATCH", "\"P()\"", "\"P('x')\""},
        {"reshard", ": reshard -> SHMESH_ERR_MISMATCH", "\"P() -> P('x')\"",
         "\"P('x') -> P('x')\""},
        {"reshard-target", ": reshard-target -> SHMESH_ERR_MISMATCH", "\"P('x') -> P()\"",
         "\"P('x') -> P('x')\""},
    };
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++)
        for (size_t j = 0; j < sizeof cases / sizeof *cases; j++) {
            int np = splits[i][0];
            struct run r;
            run_job(&r, np, splits[i][1], 30, "mismatch-sharding", cases[j].what, NULL);
            expect_lines(&r, cases[j].line, NULL, np);
            expect_lines(&r, cases[j].line, cases[j].mine, np);
            expect_lines(&r, cases[j].line, cases[j].theirs, np);
            if (!strcmp(cases[j].what, "gather"))
                expect_lines(&r, ": gather-B -> SHMESH_ERR_MISMATCH", NULL, np);
            run_free(&r);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(docstring_examples),
        cmocka_unit_test(with_devices_groups_blocks),
        cmocka_unit_test(refusals),
        cmocka_unit_test(local_mesh_arrays),
        cmocka_unit_test(mismatched_gather_and_scatter),
        cmocka_unit_test(mismatched_shardings),
        cmocka_unit_test(one_process_without_launcher),
        cmocka_unit_test(random_arrays),
        cmocka_unit_test(random_arrays_8_processes),
        cmocka_unit_test(random_arrays_single_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
