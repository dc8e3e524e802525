/* shmesh-test-effects-finalize-pending: shmesh_finalize with work still
 * queued (a sleeping callback, a psum): the work runs first.
 *
 *   shmesh-run -n P -- shmesh-test-effects-finalize-pending
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

static struct sleeper pending_cb;
static int32_t pending_in[64], pending_out[64];

static int finalize_pending(void)
{
    shmesh_mesh *m = line_mesh();
    pending_cb.us = 200000;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &pending_cb, NULL));
    for (int i = 0; i < 64; i++)
        pending_in[i] = rank + i;
    shmesh_array in = arr1(pending_in, SHMESH_INT32, 64), out = arr1(pending_out, SHMESH_INT32, 64);
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, NULL));
    shmesh_mesh_destroy(m);
    int64_t t0 = now_ns();
    int rc = shmesh_finalize(ctx);
    double ms = ms_since(t0);
    ctx = NULL;
    if (rc)
        bad("shmesh_finalize with work queued -> %s: %s", shmesh_error_name(rc),
            shmesh_last_error(NULL));
    if (!atomic_load(&pending_cb.done))
        bad("shmesh_finalize returned before the callback dispatched before it ran");
    for (int i = 0; i < 64; i++)
        if (pending_out[i] != world * i + world * (world - 1) / 2) {
            bad("the psum queued before shmesh_finalize: element %d = %d, expected %d", i,
                pending_out[i], world * i + world * (world - 1) / 2);
            break;
        }
    if (!failures)
        printf("rank %d: finalize after queued work ok (%.0f ms)\n", rank, ms);
    return failures ? 4 : 0;
}

int main(void)
{
    effects_start();
    return finalize_pending(); /* finalizes itself */
}
