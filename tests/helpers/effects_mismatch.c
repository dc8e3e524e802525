/* shmesh-test-effects-mismatch: rank 0 dispatches psum_async, the others
 * pmax_async (WHAT "async"), a blocking pmax ("blocking"), or a callback
 * ("callback": every device; "callback-shardable": an ORDERED_SHARDABLE
 * effect's first point; "callback-placed": on rank 0's device): MISMATCH
 * naming both.
 *
 *   shmesh-run -n P -- shmesh-test-effects-mismatch [WHAT]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

static int mismatch(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "async";
    shmesh_mesh *m = line_mesh();
    float v[8], w[8];
    for (int i = 0; i < 8; i++)
        v[i] = (float)(rank * 8 + i);
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 8), out = arr1(w, SHMESH_FLOAT32, 8);
    shmesh_token tok;
    int rc;
    /* What rank 1 calls, which every message must name besides psum. */
    const char *other = strncmp(what, "callback", 8) ? "pmax" : "shmesh_callback";
    shmesh_effect *e = NULL;
    if (!strcmp(what, "callback-shardable"))
        MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &e));
    if (rank == 0) {
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
        rc = expect("wait psum_async", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else if (!strcmp(what, "async")) {
        MUST(shmesh_pmax_async(m, "i", NULL, &in, &out, &tok));
        rc = expect("wait pmax_async", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else if (!strcmp(what, "blocking")) {
        rc = expect("pmax", shmesh_pmax(m, "i", NULL, &in, &out), SHMESH_ERR_MISMATCH);
    } else if (!strncmp(what, "callback", 8)) {
        /* callback: no effect, every device; callback-shardable: an
         * ORDERED_SHARDABLE effect's first point; callback-placed: no
         * effect, on rank 0's device. */
        /* A collective callback is compared as any call is, before it
         * runs: its own token fails. */
        int place = !strcmp(what, "callback-placed") ? 0 : SHMESH_PLACE_ALL;
        MUST(shmesh_callback(ctx, e, place, noop_cb, NULL, &tok));
        rc = expect("wait callback", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else {
        return 2;
    }
    if (rc == SHMESH_ERR_MISMATCH) {
        expect_in_message("the mismatch", "psum");
        expect_in_message("the mismatch", other);
    }
    /* Poisoned: a later wait fails at once, with the same error. */
    rc = shmesh_effects_barrier(ctx);
    if (rc != SHMESH_ERR_MISMATCH)
        bad("shmesh_effects_barrier after the mismatch -> %s", shmesh_error_name(rc));
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(mismatch(argc, argv));
}
