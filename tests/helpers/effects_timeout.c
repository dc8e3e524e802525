/* shmesh-test-effects-timeout: (2 ranks, SHMESH_TIMEOUT=T) rank 1 stays
 * outside any call until rank 0's token wait has ended, with TIMEOUT after
 * about T s.
 *
 *   SHMESH_TIMEOUT=T shmesh-run -n 2 -- shmesh-test-effects-timeout
 *       [psum|shardable|effects-barrier]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_board.h"

/* WHAT: psum (a psum's token), shardable (the token of an
 * ORDERED_SHARDABLE effect's point 2, which waits for rank 1's point 1), or
 * effects-barrier (shmesh_effects_barrier after point 1, which waits for
 * rank 1's part of it). */
static int timeout_wait(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "psum";
    if (world != 2) {
        printf("rank %d: FAIL: timeout needs 2 ranks\n", rank);
        return 2;
    }
    const char *limit_s = getenv("SHMESH_TIMEOUT");
    double limit_ms = limit_s ? atof(limit_s) * 1000 : 0;
    if (limit_ms <= 0) {
        printf("rank %d: FAIL: timeout needs SHMESH_TIMEOUT > 0\n", rank);
        return 2;
    }
    board_setup();
    shmesh_mesh *m = line_mesh();
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &e));
    if (rank == 1) {
        /* Outside any call until rank 0's wait is over (120 s at most). */
        for (int i = 0; i < 120000 && !atomic_load(&board->flag); i++)
            sleep_us(1000);
        printf("rank 1: waited outside any call until rank 0's wait ended\n");
        shmesh_mesh_destroy(m);
        return -1; /* rank 0 is gone: finalize's result does not matter */
    }
    float v[16] = {0}, w[16];
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 16), out = arr1(w, SHMESH_FLOAT32, 16);
    shmesh_token tok;
    int64_t t0 = now_ns();
    int rc;
    if (!strcmp(what, "psum")) {
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
        rc = shmesh_token_wait(tok);
    } else if (!strcmp(what, "shardable")) {
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, NULL));
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, &tok));
        rc = shmesh_token_wait(tok);
    } else if (!strcmp(what, "effects-barrier")) {
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, NULL));
        rc = shmesh_effects_barrier(ctx);
    } else {
        return 2;
    }
    double ms = ms_since(t0);
    atomic_store(&board->flag, 1); /* rank 1 may go */
    printf("rank 0: wait %s -> %s after %.0f ms: %s\n", what, shmesh_error_name(rc), ms,
           rc ? why() : "");
    if (rc != SHMESH_ERR_TIMEOUT)
        bad("the wait returned %s, expected SHMESH_ERR_TIMEOUT", shmesh_error_name(rc));
    else /* docs/environment.md: the error names the rank it waited for */
        expect_in_message("the timed-out wait", "rank 1");
    /* Not before the limit; after it, within seconds (a busy machine may
     * be late by some, a wait that ignored the limit would last for ever). */
    if (ms < limit_ms - 100 || ms > limit_ms + 25000)
        bad("the wait ended after %.0f ms; SHMESH_TIMEOUT is %s s", ms, limit_s);
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(timeout_wait(argc, argv));
}
