/* Description: mesh values — devices, accessors, equality and hashes,
 * abstract meshes, the mesh stack, local meshes and their refusal — checked
 * by shmesh-test-mesh in one process of 8 devices and in 2 ranks of 4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define DEADLINE 60.0

static const char *mesh_prog(void)
{
    const char *p = getenv("SHMESH_TEST_MESH");
    if (!p)
        fail_msg("SHMESH_TEST_MESH is not set (run through meson test)");
    return p;
}

static void expect_ok(struct run *r, int ranks, const char *what)
{
    if (r->timed_out || r->code != 0 || count_lines(r->out, " checks ok", NULL) != ranks)
        fail_msg("%s: exit %d%s\nstdout:\n%.6000s\nstderr:\n%.3000s", what, r->code,
                 r->timed_out ? " (timed out)" : "", r->out, r->err);
}

static void one_process_of_8(void **state)
{
    char *argv[] = {(char *)mesh_prog(), "values", NULL};
    char *env[] = {"SHMESH_SEGMENT=", "SHMESH_LOCAL_DEVICES=8", NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, env, DEADLINE, &r), 0);
    expect_ok(&r, 1, "shmesh-test-mesh values");
    run_free(&r);
}

static void two_ranks_of_4(void **state)
{
    struct run r;
    /* CPU devices even on a machine with fewer than 4 GPUs. */
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--devices-per-rank", "4",
                    "--gpus", "none", "--", (char *)mesh_prog(), "local", NULL};
    assert_int_equal(run_cmd(argv, NULL, DEADLINE, &r), 0);
    expect_ok(&r, 2, "shmesh-run -n 2 --devices-per-rank 4 -- shmesh-test-mesh local");
    /* Each rank names a device of the other inside its block. */
    assert_int_equal(count_lines(r.out, "also holds device", NULL), 2);
    assert_int_equal(count_lines(r.out, "columns: local mesh Mesh('x': 4, 'y': 1)", NULL), 2);
    assert_int_equal(count_lines(r.out, "pbroadcast in place over 2 x 4 devices ok", NULL), 2);
    char name[128];
    if (segment_left_behind(&r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm", name);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_process_of_8),
        cmocka_unit_test(two_ranks_of_4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
