/* shmesh-test-effects-peer-death: (3 ranks) rank 2 dies while ranks 0 and 1
 * wait on tokens: every wait ends with PEER_DEAD (ABORTED when it calls
 * shmesh_abort).
 *
 *   shmesh-run -n 3 -- shmesh-test-effects-peer-death [kill|abort|shardable|placed]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_board.h"

static void sleepy_cb(void *arg, int device)
{
    (void)device;
    sleep_us(*(const long *)arg);
}

/* WHAT: kill (rank 2 dies of SIGKILL) or abort (it calls shmesh_abort);
 * shardable (killed inside its part of an ORDERED_SHARDABLE effect's point
 * 1, while the others' first wait is point 2), placed (killed before the
 * callback the others placed on its device). */
static int peer_death(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "kill";
    bool abort_it = !strcmp(what, "abort"), shard = !strcmp(what, "shardable"),
         placed = !strcmp(what, "placed");
    if (!abort_it && !shard && !placed && strcmp(what, "kill"))
        return 2;
    if (world != 3) {
        printf("rank %d: FAIL: peer-death needs 3 ranks\n", rank);
        return 2;
    }
    int want = abort_it ? SHMESH_ERR_ABORTED : SHMESH_ERR_PEER_DEAD;
    board_setup();
    shmesh_effect *e, *steps;
    MUST(shmesh_effect_create(ctx, "journal", SHMESH_EFFECT_ORDERED, &e));
    MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &steps));
    shmesh_mesh *m = line_mesh();
    /* One async psum that completes: the progress thread is running. */
    float one = 1.0f, sum = 0;
    shmesh_array in = {.data = &one, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}}, out = {.data = &sum, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
    shmesh_token tok;
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
    MUST(shmesh_token_wait(tok));
    if (sum != 3.0f)
        bad("warm-up psum = %g, expected 3", sum);
    static long part_us;
    if (shard) {
        /* Point 1 everywhere; rank 2's part outlives rank 2. */
        part_us = rank == 2 ? 5000000 : 0;
        MUST(shmesh_callback(ctx, steps, SHMESH_PLACE_ALL, sleepy_cb, &part_us, NULL));
    }
    if (rank == 2) {
        /* Until the others dispatched their work (60 s at most): they are
         * waiting now, or about to. */
        for (int i = 0; i < 60000 && atomic_load(&board->ready) < 2; i++)
            sleep_us(1000);
        atomic_store(&board->kill_ns, now_ns());
        if (abort_it)
            shmesh_abort(ctx, 7, "test abort");
        raise(SIGKILL);
    }
    enum { NT = 6 };
    static float bins[3][256], bouts[3][256];
    shmesh_token toks[NT];
    const char *names[NT] = {"first", "psum #1", "psum #2", "psum #3", "barrier", "callback"};
    int first = 1;
    if (shard) {
        names[0] = "shardable point 2";
        MUST(shmesh_callback(ctx, steps, SHMESH_PLACE_ALL, noop_cb, NULL, &toks[0]));
        first = 0;
    } else if (placed) {
        names[0] = "callback on device 2";
        MUST(shmesh_callback(ctx, e, 2, noop_cb, NULL, &toks[0]));
        first = 0;
    }
    for (int i = 0; i < 3; i++) {
        shmesh_array a = arr1(bins[i], SHMESH_FLOAT32, 256),
                     b = arr1(bouts[i], SHMESH_FLOAT32, 256);
        MUST(shmesh_psum_async(m, "i", NULL, &a, &b, &toks[1 + i]));
    }
    MUST(shmesh_barrier_async(ctx, &toks[4]));
    MUST(shmesh_callback(ctx, e, SHMESH_PLACE_SELF, noop_cb, NULL, &toks[5]));
    atomic_fetch_add(&board->ready, 1);
    for (int i = first; i < NT; i++) {
        int rc = shmesh_token_wait(toks[i]);
        int64_t kill = atomic_load(&board->kill_ns);
        double after = kill ? (double)(now_ns() - kill) / 1e6 : -1;
        printf("rank %d: wait %s -> %s after %.0f ms: %s\n", rank, names[i],
               shmesh_error_name(rc), after, rc ? why() : "");
        if (rc != want)
            bad("wait %s returned %s, expected %s", names[i], shmesh_error_name(rc),
                shmesh_error_name(want));
        else if (!strstr(why(), "rank 2"))
            bad("wait %s: the message does not name rank 2: %s", names[i], why());
        /* No SHMESH_TIMEOUT: a death nobody noticed is a wait for ever
         * (the suite's deadline); noticed, it takes milliseconds. */
        if (after < 0 || after > 10000)
            bad("wait %s ended %.0f ms after rank 2 died, expected within 10 s", names[i],
                after);
    }
    /* Poisoned: everything fails at once with the same error.  Fifty
     * times: calls that waited to learn of the death again (a slice: 0.1 s,
     * 1 s with io_uring) would take 10 s or more. */
    int64_t t0 = now_ns();
    for (int i = 0; i < 50; i++) {
        int rc = shmesh_token_test(toks[first]);
        if (rc != want)
            bad("token_test after the death -> %s", shmesh_error_name(rc));
        rc = shmesh_effects_barrier(ctx);
        if (rc != want)
            bad("shmesh_effects_barrier after the death -> %s", shmesh_error_name(rc));
        rc = shmesh_psum_async(m, "i", NULL, &in, &out, &tok);
        if (rc == 0)
            rc = shmesh_token_wait(tok);
        if (rc != want)
            bad("an async psum after the death -> %s", shmesh_error_name(rc));
        if (failures)
            break;
    }
    double ms = ms_since(t0);
    if (ms > 5000)
        bad("50 rounds of calls after the death took %.0f ms: they waited", ms);
    printf("rank %d: peer death (%s) seen by %d waits%s\n", rank, what, NT - first,
           failures ? " (with failures)" : "");
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(peer_death(argc, argv));
}
