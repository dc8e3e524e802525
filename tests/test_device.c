/* Description: collectives on device buffers (shmesh-test-device under
 * shmesh-run), with the fake GPU runtime (tests/fake_gpu) or, when
 * SHMESH_TEST_DEVICE names one (tools/gpu-check.sh: cuda), a real one:
 * every op over several dtypes and sizes bit for bit as on host buffers,
 * through the device path and through host staging; handles opened once
 * per peer buffer and reopened, never stale, after a free; pool memory and
 * failing opens refused on every rank with the context still usable; a
 * peer's buffer past its real allocation refused on every rank; async
 * dispatch; device buffers on one rank only a mismatch, and with several
 * devices per rank refused; the local device functions' refusals naming
 * the rank once; SHMESH_DEBUG=paths saying which path each call
 * took (ragged_all_to_all's rows device to device); a runtime that cannot
 * be loaded failing init with the reason; nothing left in /dev/shm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* SHMESH_DEVICE for the ranks: the real runtime asked for, else the fake. */
static const char *device_env(void)
{
    static char env[4200];
    const char *real = getenv("SHMESH_TEST_DEVICE");
    snprintf(env, sizeof env, "SHMESH_DEVICE=%s", real && *real ? real : FAKE_GPU_PATH);
    return env;
}

/* Runs a mode on n ranks: exit 0, no FAILED line, at least `checks` checks
 * passed; stdout and stderr in *r (freed by the caller).  False when the
 * mode skipped. */
static bool run_mode(const char *mode, const char *n, int checks, const char *debug,
                     struct run *r)
{
    const char *prog = getenv("SHMESH_TEST_DEVICE_PROG");
    assert_non_null(prog);
    char gpus[64];
    snprintf(gpus, sizeof gpus, "SHMESH_FAKE_GPUS=1");
    char *argv[] = {(char *)launcher_path(), "-v", "-n", (char *)n, "--gpus", "none", "--",
                    (char *)prog, (char *)mode, NULL};
    char *env[] = {(char *)device_env(), "SHMESH_TIMEOUT=30", gpus, (char *)debug, NULL};
    run_cmd(argv, env, 120, r);
    if (r->timed_out)
        fail_msg("%s: timed out (a rank hung)\n%s\n%s", mode, r->out, r->err);
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("%s: segment %s left in /dev/shm", mode, name);
    if (r->code == 77 && strstr(r->out, "skip:")) {
        printf("%s", r->out);
        return false;
    }
    int ok = count_lines(r->out, ": ok: ", NULL);
    if (r->code != 0 || count_lines(r->out, "FAILED", NULL) || ok < checks)
        fail_msg("%s: exit %d, %d checks passed, expected at least %d and none failed:\n%s\n%s",
                 mode, r->code, ok, checks, r->out, r->err);
    return true;
}

static void mode(const char *name, const char *n, int checks)
{
    struct run r;
    if (!run_mode(name, n, checks, NULL, &r)) {
        run_free(&r);
        skip();
    }
    run_free(&r);
}

static void every_op_as_on_host(void **state) { mode("ops", "3", 3 * 183); }
static void every_op_two_ranks(void **state) { mode("ops", "2", 2 * 183); }
static void handles_cached(void **state) { mode("cache", "3", 3 * 12); }
/* Four checks a rank on any runtime, a fifth on the fake (where the new
 * allocation lies). */
static void freed_buffers_reopened(void **state) { mode("realloc", "2", 2 * 4); }
/* As CUDA did on an H100: the freed address is not given out again, and
 * the peers' mappings of the freed allocation are closed all the same. */
static void freed_buffers_reopened_elsewhere(void **state)
{
    struct run r;
    if (!run_mode("realloc", "3", 3 * 4, "SHMESH_FAKE_ADDRESS_REUSE=0", &r)) {
        run_free(&r);
        skip();
    }
    run_free(&r);
}
static void pool_memory_refused(void **state) { mode("pool", "2", 2 * 2); }
static void failed_open_fails_the_call(void **state) { mode("openfail", "2", 2 * 2); }
/* A peer's device buffer that runs past its real allocation (a size the
 * exporter's runtime lied about) is refused before any copy, on every rank,
 * whether the peers open the allocation for it or mapped it before. */
static void lying_size_refused(void **state) { mode("lie", "3", 3 + 2); }
static void lying_size_refused_cached(void **state) { mode("liecached", "2", 2 * 2 + 1); }
static void async_on_device(void **state) { mode("async", "2", 2); }
static void device_on_one_rank_is_a_mismatch(void **state) { mode("mixed", "2", 2); }
/* The local device functions' refusals name the rank once, as the prefix
 * ("rank 0: shmesh_device_alloc: rank 0: expected ..." before). */
static void refusals_say_the_rank_once(void **state) { mode("refusals", "2", 2 * 5); }

/* Several devices per rank with device buffers: not built, and said so. */
static void several_devices_per_rank_refused(void **state)
{
    const char *prog = getenv("SHMESH_TEST_DEVICE_PROG");
    assert_non_null(prog);
    char *argv[] = {(char *)launcher_path(), "-n", "2", "--devices-per-rank", "2", "--gpus",
                    "none", "--", (char *)prog, "local2", NULL};
    char *env[] = {(char *)device_env(), "SHMESH_TIMEOUT=30", "SHMESH_FAKE_GPUS=1", NULL};
    struct run r;
    run_cmd(argv, env, 60, &r);
    if (r.timed_out || r.code || count_lines(r.out, "FAILED", NULL) ||
        count_lines(r.out, ": ok: ", NULL) != 4)
        fail_msg("local2: exit %d, expected 4 checks to pass:\n%s\n%s", r.code, r.out, r.err);
    run_free(&r);
}

/* SHMESH_DEBUG=paths names the device path, the one-shot or two-shot
 * algorithm, the handles opened, and each staged call with its reason. */
static void paths_said(void **state)
{
    struct run r;
    if (!run_mode("cache", "2", 2 * 12, "SHMESH_DEBUG=paths", &r)) {
        run_free(&r);
        skip();
    }
    const char *want[] = {"device to device, one-shot", "device to device, two-shot",
                          "device: opened rank 1's allocation", "device: opened rank 0's allocation"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!count_lines(r.err, want[i], NULL))
            fail_msg("no line saying '%s':\n%s", want[i], r.err);
    run_free(&r);
    if (!run_mode("ops", "2", 2 * 183, "SHMESH_DEBUG=paths", &r)) {
        run_free(&r);
        skip();
    }
    const char *staged[] = {
        "staged through host memory (no device kernel for this reduction and dtype)",
        "shmesh_ragged_all_to_all: device to device"};
    for (size_t i = 0; i < sizeof staged / sizeof *staged; i++)
        if (!count_lines(r.err, staged[i], NULL))
            fail_msg("no line saying '%s':\n%s", staged[i], r.err);
    run_free(&r);
}

/* A runtime that cannot be loaded fails shmesh_init with the reason. */
static void bad_device_setting(void **state)
{
    const char *prog = getenv("SHMESH_TEST_DEVICE_PROG");
    assert_non_null(prog);
    const struct {
        const char *env, *want;
    } cases[] = {
        {"SHMESH_DEVICE=/nonexistent/libshmesh-device-x.so",
         "SHMESH_DEVICE=/nonexistent/libshmesh-device-x.so: /nonexistent/libshmesh-device-x.so: "
         "cannot open shared object file"},
        {"SHMESH_DEVICE=quantum", "SHMESH_DEVICE=quantum: no libshmesh-device-quantum.so beside "
                                  "libshmesh"},
        {"SHMESH_DEVICE=/lib/x86_64-linux-gnu/libc.so.6", "not a shmesh device plugin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (strstr(cases[i].env, "libc.so.6") && access("/lib/x86_64-linux-gnu/libc.so.6", R_OK))
            continue;
        char *argv[] = {(char *)launcher_path(), "-n", "1", "--gpus", "none", "--", (char *)prog,
                        "ops", NULL};
        char *env[] = {(char *)cases[i].env, NULL};
        struct run r;
        run_cmd(argv, env, 60, &r);
        if (r.timed_out || r.code == 0 || !count_lines(r.out, cases[i].want, NULL))
            fail_msg("%s: exit %d, expected a failed init saying '%s':\n%s\n%s", cases[i].env,
                     r.code, cases[i].want, r.out, r.err);
        run_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_op_as_on_host),
        cmocka_unit_test(every_op_two_ranks),
        cmocka_unit_test(handles_cached),
        cmocka_unit_test(freed_buffers_reopened),
        cmocka_unit_test(freed_buffers_reopened_elsewhere),
        cmocka_unit_test(pool_memory_refused),
        cmocka_unit_test(failed_open_fails_the_call),
        cmocka_unit_test(lying_size_refused),
        cmocka_unit_test(lying_size_refused_cached),
        cmocka_unit_test(async_on_device),
        cmocka_unit_test(device_on_one_rank_is_a_mismatch),
        cmocka_unit_test(refusals_say_the_rank_once),
        cmocka_unit_test(several_devices_per_rank_refused),
        cmocka_unit_test(paths_said),
        cmocka_unit_test(bad_device_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
