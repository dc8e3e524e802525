/* batched_psum: the time of one psum on a batched mesh (docs/batching.md),
 * against the same positions as processes:
 *
 *   shmesh-run -n 2 -- build/bench/batched-psum 4 FLOATS b     (inside each rank)
 *   shmesh-run -n 2 -- build/bench/batched-psum 4 FLOATS x,b   (across the ranks)
 *   shmesh-run -n 8 -- build/bench/batched-psum 1 FLOATS x     (one position per rank)
 *
 * Mesh x = the ranks, then a batched axis b of size B (the first argument;
 * B = 1 with axes "x" runs on the plain mesh).  Each position's input holds
 * FLOATS float32, its global position + 1 everywhere.  300 timed calls
 * after 20 warm-up calls; rank 0 prints the median time per call and the
 * bytes it received from other processes per call (shmesh_traffic_get),
 * and checks the last call's sums. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define CALLS 300
#define WARMUP 20

#define fail(ctx, what, rc) bench_fail("batched-psum", ctx, what, rc)

int main(int argc, char **argv)
{
    int B = argc > 1 ? atoi(argv[1]) : 4;
    long n = argc > 2 ? atol(argv[2]) : 256;
    const char *axes = argc > 3 ? argv[3] : "x,b";
    shmesh_ctx *ctx;
    if (B < 1 || n < 1 || shmesh_init(&ctx)) {
        fprintf(stderr, "usage: shmesh-run ... -- %s [B >= 1] [FLOATS >= 1] [AXES] (%s)\n",
                argv[0], shmesh_last_error(NULL));
        return 2;
    }
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx), rc;
    bool batched = strchr(axes, 'b') != NULL;
    shmesh_mesh *mesh, *bm = NULL;
    if ((rc = shmesh_mesh_create(ctx, 1, (const char *[]){"x"}, (int[]){world}, NULL, &mesh)))
        fail(ctx, "shmesh_mesh_create", rc);
    if (batched && (rc = shmesh_mesh_batch(mesh, "b", B, &bm)))
        fail(ctx, "shmesh_mesh_batch", rc);
    int per = batched ? B : 1;
    float *in = malloc(sizeof *in * (size_t)(n * per)), *out = malloc(sizeof *out * (size_t)n);
    if (!in || !out)
        fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    for (int k = 0; k < per; k++)
        for (long i = 0; i < n; i++)
            in[k * n + i] = (float)(rank * per + k + 1);
    shmesh_array a = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = batched ? 2 : 1};
    a.shape[0] = batched ? B : n;
    a.shape[1] = n;
    /* A psum naming b is the same at every position of a batch. */
    shmesh_array o = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {n},
                      .bdim = SHMESH_NOT_MAPPED};
    double t[CALLS];
    shmesh_traffic tr0 = {0}, tr1 = {0};
    for (int i = 0; i < WARMUP + CALLS; i++) {
        if (i == WARMUP)
            shmesh_traffic_get(ctx, &tr0);
        double t0 = bench_now_us();
        if ((rc = shmesh_psum(batched ? bm : mesh, axes, NULL, &a, &o)))
            fail(ctx, "shmesh_psum", rc);
        if (i >= WARMUP)
            t[i - WARMUP] = bench_now_us() - t0;
    }
    shmesh_traffic_get(ctx, &tr1);
    /* Over every position: the sum of 1..positions; over b alone: this
     * rank's batch. */
    int positions = world * per;
    double want = strcmp(axes, "b") ? positions * (positions + 1) / 2.0
                                    : per * (2.0 * rank * per + per + 1) / 2;
    int bad = out[n - 1] != (float)want;
    qsort(t, CALLS, sizeof *t, median_cmp);
    if (rank == 0)
        printf("batched-psum: %d ranks, B %d, axes %s, %ld floats per position: median %.1f us "
               "per call, rank 0 received %.0f bytes per call%s\n",
               world, per, axes, n, t[CALLS / 2], (double)(tr1.received - tr0.received) / CALLS,
               bad ? " (WRONG SUM)" : "");
    shmesh_mesh_destroy(bm);
    shmesh_mesh_destroy(mesh);
    free(in);
    free(out);
    shmesh_finalize(ctx);
    return bad;
}
