/* shmesh-test-effects-devices: several devices per rank: async collectives
 * equal blocking ones; callbacks run once per device, with its id.
 *
 *   shmesh-run -n P --devices-per-rank K -- shmesh-test-effects-devices
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

static atomic_int device_seen[MAXDEV];

static void device_cb(void *arg, int device)
{
    (void)arg;
    if (device >= 0 && device < MAXDEV)
        atomic_fetch_add(&device_seen[device], 1);
}

static int devices(void)
{
    if (ndev > MAXDEV || nlocal > 16)
        return 2;
    shmesh_mesh *m = line_mesh();
    int ids[16];
    MUST(shmesh_mesh_local_devices(m, ids, 16));
    enum { N = 1000 };
    static float x[16][N], a[16][N], b[16][N], ga[16][64 * N], gb[16][64 * N];
    shmesh_array in[16], oa[16], ob[16], gin[16], gxa[16], gxb[16];
    for (int l = 0; l < nlocal; l++) {
        fill_random(x[l], N, 300 + (uint64_t)ids[l]);
        in[l] = arr1(x[l], SHMESH_FLOAT32, N);
        oa[l] = arr1(a[l], SHMESH_FLOAT32, N);
        ob[l] = arr1(b[l], SHMESH_FLOAT32, N);
        gin[l] = in[l];
        gxa[l] = (shmesh_array){.data = ga[l], .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {ndev, N}};
        gxb[l] = (shmesh_array){.data = gb[l], .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {ndev, N}};
    }
    if (ndev > 64)
        return 2;
    shmesh_token t[2];
    MUST(shmesh_psum_async(m, "i", NULL, in, oa, &t[0]));
    MUST(shmesh_all_gather_async(m, "i", NULL, 0, false, gin, gxa, &t[1]));
    MUST(shmesh_psum(m, "i", NULL, in, ob));
    MUST(shmesh_all_gather(m, "i", NULL, 0, false, gin, gxb));
    MUST(shmesh_token_wait_all(2, t));
    for (int l = 0; l < nlocal; l++) {
        if (memcmp(a[l], b[l], sizeof a[l]))
            bad("device %d: psum_async differs from psum", ids[l]);
        if (memcmp(ga[l], gb[l], (size_t)ndev * N * sizeof(float)))
            bad("device %d: all_gather_async differs from all_gather", ids[l]);
    }
    /* Callbacks: every device runs its part once, with its id; this rank's
     * devices alone; a device of this rank. */
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_ALL, device_cb, NULL, NULL));
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, device_cb, NULL, NULL));
    MUST(shmesh_callback(ctx, NULL, ndev - 1, device_cb, NULL, NULL));
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_token_wait(shmesh_runtime_token(ctx)));
    for (int d = 0; d < ndev; d++) {
        int want = shmesh_device_process(ctx, d) == rank ? 2 : 0;
        if (d == ndev - 1 && shmesh_device_process(ctx, d) == rank)
            want++;
        if (atomic_load(&device_seen[d]) != want)
            bad("device %d's callbacks ran %d times here, expected %d", d,
                atomic_load(&device_seen[d]), want);
    }
    shmesh_mesh_destroy(m);
    if (!failures)
        printf("rank %d: %d local devices: async equals blocking, callbacks per device ok\n",
               rank, nlocal);
    return failures ? 4 : 0;
}

int main(void)
{
    effects_start();
    return effects_end(devices());
}
