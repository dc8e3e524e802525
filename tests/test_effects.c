/* Description: asynchronous dispatch, tokens and effects across processes
 * (issue 10) — tokens tested, waited on (one, all, any), the runtime token
 * (per thread) and the done token; every async collective bit for bit its
 * blocking form, in program order with blocking calls and callbacks, with
 * several devices per rank, thousands in flight, meshes freed after
 * dispatch, shmesh_finalize behind queued work; work failing alike on
 * every rank fails its own token only; 10 000 ORDERED callbacks per rank
 * among async psums, logged in program order; an ORDERED_SHARDABLE effect
 * whose parts sleep at random, never starting point k+1 anywhere before
 * point k finished everywhere (and the same checks catching an UNORDERED
 * one); an ORDERED effect refused on several devices and run exactly once
 * when placed on one; a rank dying or aborting while others wait on tokens
 * (the error within seconds, under both notifiers); SHMESH_TIMEOUT ending
 * token waits; async calls, callbacks and effect registrations that differ
 * between ranks (MISMATCH naming both); collective callbacks that differ
 * between ranks in placement, effect or kind (MISMATCH from the callback's
 * own token on every rank, naming both, the callback run nowhere, never a
 * hang); a callback calling the library with its own context; refused
 * arguments and forged tokens. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* The helper program of one behaviour: shmesh-test-effects-NAME
 * (tests/helpers/effects_NAME.c), from SHMESH_TEST_EFFECTS_NAME. */
static const char *effects_path(const char *name)
{
    char var[64] = "SHMESH_TEST_EFFECTS_";
    size_t n = strlen(var);
    for (const char *c = name; *c && n + 1 < sizeof var; c++)
        var[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
    var[n] = '\0';
    const char *p = getenv(var);
    if (!p)
        fail_msg("%s is not set (run the suite through meson test)", var);
    return p;
}

static void assert_clean(const struct run *r)
{
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm\nstderr:\n%s", name, r->err);
}


/* Runs the helper of `mode` (effects_path) under shmesh-run -v: `np`
 * processes of `k` CPU devices
 * (--gpus none: whatever GPUs the machine has), with
 * `extra` in the environment (may be NULL).  Fails on a deadline passed, a
 * FAIL line or a segment left behind; the caller checks the exit code. */
static void run_job_env(struct run *r, const char *extra, int np, int k, double timeout,
                        const char *mode, const char *a1, const char *a2)
{
    char nps[16], ks[16];
    snprintf(nps, sizeof nps, "%d", np);
    snprintf(ks, sizeof ks, "%d", k);
    char *env[] = {(char *)extra, NULL};
    run_launcher(r, env, timeout, "-v", "-n", nps, "--devices-per-rank", ks, "--gpus", "none", "--",
                 effects_path(mode), a1, a2, NULL);
    if (r->timed_out)
        fail_msg("%d processes x %d devices, %s %s %s: still running after %.0f s\nstdout:\n%s"
                 "\nstderr:\n%s",
                 np, k, mode, a1 ? a1 : "", a2 ? a2 : "", timeout, r->out, r->err);
    if (count_lines(r->out, "FAIL:", NULL))
        fail_msg("%d processes x %d devices, %s %s %s: exit %d\nstdout:\n%s\nstderr:\n%s", np, k,
                 mode, a1 ? a1 : "", a2 ? a2 : "", r->code, r->out, r->err);
    assert_clean(r);
}

/* The same, and it must exit 0. */
static void run_job(struct run *r, int np, int k, double timeout, const char *mode,
                    const char *a1, const char *a2)
{
    run_job_env(r, NULL, np, k, timeout, mode, a1, a2);
    if (r->code != 0)
        fail_msg("%d processes x %d devices, %s %s %s: exit %d\nstdout:\n%s\nstderr:\n%s", np, k,
                 mode, a1 ? a1 : "", a2 ? a2 : "", r->code, r->out, r->err);
}

/* Tokens (test, wait, wait_all, wait_any, the runtime token per thread, the
 * done token), async results against blocking ones for every collective,
 * program order between async work, callbacks and blocking calls, a
 * callback calling the library with its own context, refusals; with 1, 2
 * and 4 ranks. */
static void basics(int np)
{
    struct run r;
    run_job(&r, np, 1, 60, "basics", NULL, NULL);
    expect_lines(&r, "tokens ok", NULL, np);
    expect_lines(&r, "async results equal blocking ones", NULL, np);
    expect_lines(&r, "every async form equals its blocking form", NULL, np);
    expect_lines(&r, "runtime tokens per thread ok", NULL, np);
    expect_lines(&r, "meshes freed after dispatch ok", NULL, np);
    expect_lines(&r, "3000 psums in flight ok", NULL, np);
    expect_lines(&r, "program order ok", NULL, np);
    expect_lines(&r, "in a callback, shmesh_barrier -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "in a callback, shmesh_token_wait(its own token) -> SHMESH_ERR_INVALID",
                 NULL, np);
    expect_lines(&r, "effect_create(empty name) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "effect_create(long name) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "effect_create(kind 7) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "callback(NULL fn) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "callback(placement -5) -> SHMESH_ERR_INVALID", "-5", np);
    expect_lines(&r, "callback(placement ndev) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "psum_async(out of 3 for 4) -> SHMESH_ERR_INVALID", NULL, np);
    expect_lines(&r, "effect_create(one too many) -> SHMESH_ERR_INVALID", "32", np);
    if (np > 1)
        expect_lines(&r, "failed work fails its own token only", NULL, np);
    expect_lines(&r, "blocking calls on a quiet dispatch queue ok", NULL, np);
    expect_lines(&r, "waited-for work ok", NULL, np);
    expect_lines(&r, "work never waited for ok", NULL, np);
    expect_lines(&r, "token_wait(forged) -> SHMESH_ERR_INVALID", "only", np);
    expect_lines(&r, "errors: job usable", NULL, np);
    expect_lines(&r, "basics ok", NULL, np);
    run_free(&r);
}

static void basics_1(void **state) { basics(1); }
static void basics_2(void **state) { basics(2); }
static void basics_4(void **state) { basics(4); }

/* Outside the launcher a program is a job of one rank, and async work
 * runs there too. */
static void basics_without_launcher(void **state)
{
    char *argv[] = {(char *)effects_path("basics"), NULL};
    char *env[] = {"SHMESH_SEGMENT=", NULL};
    struct run r;
    run_cmd(argv, env, 30, &r);
    if (r.timed_out || r.code != 0 || count_lines(r.out, "FAIL:", NULL))
        fail_msg("exit %d%s\nstdout:\n%s\nstderr:\n%s", r.code, r.timed_out ? " (timed out)" : "",
                 r.out, r.err);
    expect_lines(&r, "rank 0: basics ok", NULL, 1);
    run_free(&r);
}

/* Several devices per rank: async collectives equal blocking ones, and
 * callbacks run once per device with its id. */
static void several_devices_per_rank(void **state)
{
    static const int splits[][2] = {{1, 3}, {2, 2}};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        int np = splits[i][0], k = splits[i][1];
        struct run r;
        run_job(&r, np, k, 60, "devices", NULL, NULL);
        char want[96];
        snprintf(want, sizeof want,
                 "%d local devices: async equals blocking, callbacks per device ok", k);
        expect_lines(&r, want, NULL, np);
        run_free(&r);
    }
}

/* shmesh_finalize with a sleeping callback and a psum still queued: it
 * returns 0 after both ran. */
static void finalize_after_queued_work(void **state)
{
    static const int nps[] = {1, 3};
    for (size_t i = 0; i < sizeof nps / sizeof *nps; i++) {
        struct run r;
        run_job(&r, nps[i], 1, 30, "finalize-pending", NULL, NULL);
        expect_lines(&r, "finalize after queued work ok", NULL, nps[i]);
        run_free(&r);
    }
}

/* 10 000 ORDERED callbacks on each of 4 ranks, among 100 async psums. */
static void ordered_log(void **state)
{
    struct run r;
    run_job(&r, 4, 1, 60, "ordered-log", "10000", NULL);
    expect_lines(&r, "ordered log of 10000 callbacks with 100 psums: in program order", NULL, 4);
    const char *p = strstr(r.out, "rank 0: ordered log");
    if (p) {
        const char *nl = strchr(p, '\n');
        print_message("%.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
    }
    run_free(&r);
}

/* Parts of point k+1 never start before every part of point k finished:
 * five seeds on 4 ranks, 3 ranks, 2 ranks of 2 devices, 300 points each;
 * and runs where every seventh point is placed on one device. */
static void shardable(void **state)
{
    static const struct {
        int np, k;
        const char *seed, *variant;
    } runs[] = {{4, 1, "1", NULL},    {4, 1, "2", NULL},    {4, 1, "3", NULL},
                {4, 1, "4", NULL},    {4, 1, "5", NULL},    {3, 1, "6", NULL},
                {2, 2, "7", NULL},    {4, 1, "8", "mixed"}, {2, 2, "9", "mixed"}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int np = runs[i].np;
        const char *v = runs[i].variant;
        char nps[16], ks[16];
        snprintf(nps, sizeof nps, "%d", np);
        snprintf(ks, sizeof ks, "%d", runs[i].k);
        struct run r;
        run_launcher(&r, NULL, 60, "-v", "-n", nps, "--devices-per-rank", ks, "--gpus", "none",
                     "--", effects_path("shardable"), runs[i].seed, "300", v, NULL);
        if (r.timed_out || r.code != 0 || count_lines(r.out, "FAIL:", NULL))
            fail_msg("%d x %d, seed %s%s%s: exit %d%s\nstdout:\n%s\nstderr:\n%s", np,
                     runs[i].k, runs[i].seed, v ? " " : "", v ? v : "", r.code,
                     r.timed_out ? " (timed out)" : "", r.out, r.err);
        assert_clean(&r);
        char want[96];
        snprintf(want, sizeof want, "shardable%s%s seed %s: 300 points x %d devices, 0 violations",
                 v ? " " : "", v ? v : "", runs[i].seed, np * runs[i].k);
        expect_lines(&r, want, NULL, np);
        print_message("%d ranks x %d devices, seed %s%s%s: %.1f s\n", np, runs[i].k,
                      runs[i].seed, v ? " " : "", v ? v : "", r.secs);
        run_free(&r);
    }
}

/* The same checks on an UNORDERED effect dispatched on each rank's own
 * devices (nothing orders them across ranks): they must see violations. */
static void shardable_checks_can_fail(void **state)
{
    char nps[] = "4";
    struct run r;
    run_launcher(&r, NULL, 60, "-v", "-n", nps, "--gpus", "none", "--",
                 effects_path("shardable"), "9", "300", "unordered", NULL);
    if (r.timed_out || r.code != 0)
        fail_msg("exit %d%s\nstdout:\n%s\nstderr:\n%s", r.code, r.timed_out ? " (timed out)" : "",
                 r.out, r.err);
    expect_lines(&r, "unordered seed 9: 300 points x 4 devices, ", NULL, 4);
    if (count_lines(r.out, "unordered seed 9:", " 0 violations"))
        fail_msg("an unordered effect showed no violation: the checks cannot see one\n%s", r.out);
    assert_clean(&r);
    run_free(&r);
}

/* An ORDERED effect on every device: refused where that is several
 * devices, on every rank, naming the effect; placed on one device, it runs
 * once there and every rank's token waits for it. */
static void ordered_on_all_or_one(void **state)
{
    static const int splits[][2] = {{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}};
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        int np = splits[i][0], k = splits[i][1], ndev = np * k;
        struct run r;
        run_job(&r, np, k, 60, "ordered-all", NULL, NULL);
        if (ndev > 1)
            expect_lines(&r, "ordered on every device -> SHMESH_ERR_INVALID", "metrics", np);
        else
            expect_lines(&r, "ordered on the only device -> SHMESH_OK", NULL, 1);
        expect_lines(&r, "usable after the refusal", NULL, np);
        if (k > 1)
            expect_lines(&r, "ordered on this rank's devices -> SHMESH_ERR_INVALID", "metrics",
                         np);
        else
            expect_lines(&r, "ordered on this rank's device -> SHMESH_OK", NULL, np);
        int target = ndev > 1 ? 1 : 0;
        char want[96];
        snprintf(want, sizeof want, "ordered on device %d: ran once, on rank %d", target,
                 target / k);
        expect_lines(&r, want, NULL, np);
        if (ndev - 1 > 1) {
            snprintf(want, sizeof want, "ordered on device %d: ran once, on rank %d", ndev - 1,
                     np - 1);
            expect_lines(&r, want, NULL, np);
        }
        run_free(&r);
    }
}

/* Each "wait NAME -> SHMESH_ERR_X after N ms" line's N. */
static int wait_times(const char *out, const char *err_name, double *ms, int max)
{
    char key[64];
    snprintf(key, sizeof key, "-> %s after ", err_name);
    int n = 0;
    for (const char *p = out; n < max && (p = strstr(p, key)); p += strlen(key))
        if (sscanf(p + strlen(key), "%lf ms", &ms[n]) == 1)
            n++;
    return n;
}

/* Rank 2 dies while ranks 0 and 1 wait on tokens (three psums, a barrier,
 * an ordered callback; and first, for `what` shardable, point 2 of an
 * ORDERED_SHARDABLE effect whose point 1 rank 2 never finishes, or for
 * placed, a callback placed on rank 2's device): every wait returns
 * PEER_DEAD (ABORTED when rank 2 calls shmesh_abort) naming rank 2 within
 * 10 s of the death (milliseconds when all is well; without SHMESH_TIMEOUT
 * a death nobody noticed is a wait for ever), and later calls fail at once. */
static void peer_death(const char *what, const char *notifier)
{
    char notify[32] = "";
    if (notifier) {
        if (!strcmp(notifier, "uring") && !uring_available())
            skip();
        snprintf(notify, sizeof notify, "SHMESH_NOTIFY=%s", notifier);
    }
    bool aborts = !strcmp(what, "abort");
    int waits = !strcmp(what, "shardable") || !strcmp(what, "placed") ? 6 : 5;
    const char *err = aborts ? "SHMESH_ERR_ABORTED" : "SHMESH_ERR_PEER_DEAD";
    struct run r;
    run_job_env(&r, notifier ? notify : NULL, 3, 1, 60, "peer-death", what, NULL);
    assert_int_equal(r.code, aborts ? 7 : 137);
    if (!count_lines(r.err, "rank 2 (pid", aborts ? "exited with status 7" : "killed by SIGKILL"))
        fail_msg("the launcher did not name rank 2 and how it ended:\n%s", r.err);
    double ms[16];
    int n = wait_times(r.out, err, ms, 16);
    if (n != 2 * waits)
        fail_msg("%d waits ended with %s, expected %d:\n%s", n, err, 2 * waits, r.out);
    double worst = 0;
    for (int i = 0; i < n; i++)
        worst = ms[i] > worst ? ms[i] : worst;
    if (worst > 10000)
        fail_msg("a wait ended %.0f ms after the death:\n%s", worst, r.out);
    char want[64];
    snprintf(want, sizeof want, "peer death (%s) seen by %d waits", what, waits);
    expect_lines(&r, want, NULL, 2);
    print_message("%s%s%s: the slowest wait ended %.0f ms after rank 2 died\n", what,
                  notifier ? ", " : "", notifier ? notifier : "", worst);
    run_free(&r);
}

static void peer_killed_futex(void **state) { peer_death("kill", "futex"); }
static void peer_killed_uring(void **state) { peer_death("kill", "uring"); }
static void peer_aborts(void **state) { peer_death("abort", NULL); }
static void peer_killed_in_shardable_point(void **state) { peer_death("shardable", NULL); }
static void peer_killed_before_placed_callback(void **state) { peer_death("placed", NULL); }

/* SHMESH_TIMEOUT=5: rank 0 waits while rank 1 stays outside any call
 * until rank 0's wait is over — on a psum's token, on an
 * ORDERED_SHARDABLE point that needs rank 1's previous one, in
 * shmesh_effects_barrier for rank 1's part of the last point; each wait
 * ends with TIMEOUT after 5 s or a little more, naming rank 1.  (5 s, not
 * 1: the limit holds for every wait, the ranks' start-up included, which a
 * busy machine may spread over more than a second.) */
static void timeout(const char *what)
{
    struct run r;
    run_job_env(&r, "SHMESH_TIMEOUT=5", 2, 1, 60, "timeout", what, NULL);
    double ms[2];
    int n = wait_times(r.out, "SHMESH_ERR_TIMEOUT", ms, 2);
    if (n != 1)
        fail_msg("%s: %d waits ended with TIMEOUT, expected 1 (exit %d):\n%s\n%s", what,
                 n, r.code, r.out, r.err);
    print_message("%s: the wait ended after %.0f ms\n", what, ms[0]);
    if (ms[0] < 4900 || ms[0] > 30000)
        fail_msg("%s: the wait ended after %.0f ms, SHMESH_TIMEOUT is 5 s", what, ms[0]);
    if (r.code != 0)
        fail_msg("%s: exit %d\n%s\n%s", what, r.code, r.out, r.err);
    run_free(&r);
}

static void timeout_psum(void **state) { timeout("psum"); }
static void timeout_shardable_point(void **state) { timeout("shardable"); }
static void timeout_effects_barrier(void **state) { timeout("effects-barrier"); }

/* Rank 0 dispatches psum_async; rank 1 pmax_async, a blocking pmax, or a
 * callback on every device: both fail with MISMATCH, naming both calls. */
static void mismatch(void **state)
{
    static const char *whats[] = {"async", "blocking", "callback-placed"};
    for (size_t i = 0; i < sizeof whats / sizeof *whats; i++) {
        struct run r;
        run_job(&r, 2, 1, 30, "mismatch", whats[i], NULL);
        expect_lines(&r, "-> SHMESH_ERR_MISMATCH", "psum", 2);
        expect_lines(&r, "-> SHMESH_ERR_MISMATCH",
                     strncmp(whats[i], "callback", 8) ? "pmax" : "shmesh_callback", 2);
        run_free(&r);
    }
}

/* A callback on every device is collective too (shmesh.h), with no effect
 * and as an ORDERED_SHARDABLE effect's first point.  It is compared as any
 * collective call, before it runs: its own token and the psum against it
 * fail with MISMATCH naming both. */
static void mismatch_callback(const char *what)
{
    struct run r;
    run_job(&r, 2, 1, 30, "mismatch", what, NULL);
    expect_lines(&r, "wait callback -> SHMESH_ERR_MISMATCH", "psum", 1);
    expect_lines(&r, "-> SHMESH_ERR_MISMATCH", "shmesh_callback", 2);
    run_free(&r);
}

static void mismatch_callback_on_all(void **state) { mismatch_callback("callback"); }
static void mismatch_shardable_first_point(void **state)
{
    mismatch_callback("callback-shardable");
}

/* Ranks registering different effects: MISMATCH on every rank. */
static void effect_mismatch(void **state)
{
    struct run r;
    run_job(&r, 2, 1, 30, "effect-mismatch", "name", NULL);
    expect_lines(&r, "effect_create -> SHMESH_ERR_MISMATCH", "alpha", 2);
    expect_lines(&r, "effect_create -> SHMESH_ERR_MISMATCH", "beta", 2);
    run_free(&r);
    run_job(&r, 3, 1, 30, "effect-mismatch", "kind", NULL);
    expect_lines(&r, "effect_create -> SHMESH_ERR_MISMATCH", "gamma", 3);
    run_free(&r);
}

/* Ranks that dispatch different collective callbacks (issue 24): an
 * ORDERED effect placed on device 1 by rank 0 and device 0 by rank 1
 * (both used to wait for each other until SHMESH_TIMEOUT), effect "a"
 * against "b", each rank on its own device (the ORDERED callback ran on
 * two devices), every device against device 0 (a part went unrun), an
 * UNORDERED effect against an ORDERED_SHARDABLE one.  Compared like any
 * collective: the callback's own token is MISMATCH on both ranks, the
 * sentence names both callbacks, and the callback runs nowhere. */
static void callback_mismatch(void **state)
{
    static const char *const whats[] = {"device", "name", "own", "all-vs-one", "kind"};
    for (size_t i = 0; i < sizeof whats / sizeof *whats; i++) {
        struct run r;
        /* A hang ends with SHMESH_TIMEOUT, well before the test's deadline. */
        run_job_env(&r, "SHMESH_TIMEOUT=10", 2, 1, 60, "callback-mismatch", whats[i], NULL);
        char want[96];
        snprintf(want, sizeof want, "callback-mismatch %s: the callback's token -> ", whats[i]);
        expect_lines(&r, want, "SHMESH_ERR_MISMATCH", 2);
        snprintf(want, sizeof want, "callback-mismatch %s done", whats[i]);
        expect_lines(&r, want, NULL, 2);
        if (r.code != 0)
            fail_msg("callback-mismatch %s: exit %d\nstdout:\n%s\nstderr:\n%s", whats[i],
                     r.code, r.out, r.err);
        run_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(basics_1),
        cmocka_unit_test(basics_2),
        cmocka_unit_test(basics_4),
        cmocka_unit_test(basics_without_launcher),
        cmocka_unit_test(several_devices_per_rank),
        cmocka_unit_test(finalize_after_queued_work),
        cmocka_unit_test(ordered_log),
        cmocka_unit_test(shardable),
        cmocka_unit_test(shardable_checks_can_fail),
        cmocka_unit_test(ordered_on_all_or_one),
        cmocka_unit_test(peer_killed_futex),
        cmocka_unit_test(peer_killed_uring),
        cmocka_unit_test(peer_aborts),
        cmocka_unit_test(peer_killed_in_shardable_point),
        cmocka_unit_test(peer_killed_before_placed_callback),
        cmocka_unit_test(timeout_psum),
        cmocka_unit_test(timeout_shardable_point),
        cmocka_unit_test(timeout_effects_barrier),
        cmocka_unit_test(mismatch),
        cmocka_unit_test(mismatch_callback_on_all),
        cmocka_unit_test(mismatch_shardable_first_point),
        cmocka_unit_test(effect_mismatch),
        cmocka_unit_test(callback_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
