/* devices_psum: the time of one psum over every device of the job, for
 * comparing layouts of the same devices (ranks x devices per rank):
 *
 *   shmesh-run -n 4 -- build/bench/devices-psum [FLOATS]
 *   shmesh-run -n 2 --devices-per-rank 2 -- build/bench/devices-psum [FLOATS]
 *   shmesh-run -n 1 --devices-per-rank 4 -- build/bench/devices-psum [FLOATS]
 *   ... devices-psum FLOATS --check-traffic
 *
 * A 1-D mesh "i" over every device; each device's input holds FLOATS
 * float32 (default 2).  Three repetitions of 2000 calls (fewer for large
 * arrays: about 256 MiB of input per device and repetition, at least 5)
 * after a twentieth as many warm-up calls (at least 1); rank 0 prints the median repetition's time per call, the bytes
 * a rank received from other processes per call (the most of any rank:
 * shmesh_traffic_get) beside the least a psum in device order needs with
 * R ranks of k devices of S bytes each, (R - 1) / R (k + 1) S: its slice
 * of the other ranks' k inputs each, then their reduced slices (with k = 1
 * the 2 (R - 1) / R S of a reduce-scatter and all-gather), and
 * checks the sums of the last call (every device's input is its id + 1).
 * With --check-traffic it also fails (exit 1) when a rank received more
 * than 1% over that least (FLOATS a multiple of 64 R splits evenly).
 * With --scatter it times psum_scatter (tiled, along the only axis) instead,
 * beside its least, (N - K) K S / N with N devices: each local device's
 * block of every device of the other ranks. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define CALLS_MAX 2000
#define CALLS_BYTES (256L << 20) /* input per device and repetition */
#define MAXLOCAL 64

#define fail(ctx, what, rc) bench_fail("devices-psum", ctx, what, rc)

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) : 2;
    bool check_traffic = false, scatter = false;
    for (int a = 2; a < argc; a++) {
        check_traffic |= !strcmp(argv[a], "--check-traffic");
        scatter |= !strcmp(argv[a], "--scatter");
    }
    shmesh_ctx *ctx;
    if (count < 1 || shmesh_init(&ctx)) {
        fprintf(stderr, "usage: shmesh-run ... -- %s [FLOATS >= 1] [--check-traffic] [--scatter] (%s)\n",
                argv[0], shmesh_last_error(NULL));
        return 2;
    }
    int devices = shmesh_device_count(ctx), k = shmesh_local_device_count(ctx), rc;
    const char *names[] = {"i"};
    shmesh_mesh *mesh;
    if (k > MAXLOCAL || (rc = shmesh_mesh_create(ctx, 1, names, &devices, NULL, &mesh)))
        return fail(ctx, "shmesh_mesh_create", k > MAXLOCAL ? SHMESH_ERR_INVALID : rc);
    if (scatter && count % devices)
        return fail(ctx, "--scatter: FLOATS must be a multiple of the devices", SHMESH_ERR_INVALID);
    long out_count = scatter ? count / devices : count;
    int ids[MAXLOCAL];
    shmesh_mesh_local_devices(mesh, ids, MAXLOCAL);
    float *in = malloc(sizeof *in * (size_t)count * (size_t)k);
    float *out = malloc(sizeof *out * (size_t)count * (size_t)k);
    if (!in || !out)
        return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    shmesh_array a_in[MAXLOCAL], a_out[MAXLOCAL];
    for (int l = 0; l < k; l++) {
        for (long i = 0; i < count; i++)
            in[l * count + i] = (float)(ids[l] + 1);
        a_in[l] = (shmesh_array){.data = in + l * count, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {count}};
        a_out[l] = (shmesh_array){.data = out + l * count, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {out_count}};
    }
    long calls = CALLS_BYTES / (count * (long)sizeof(float));
    calls = calls > CALLS_MAX ? CALLS_MAX : calls < 5 ? 5 : calls;
    for (long i = 0; i < calls / 20 + 1; i++)
        if ((rc = scatter ? shmesh_psum_scatter(mesh, "i", NULL, 0, true, a_in, a_out)
                          : shmesh_psum(mesh, "i", NULL, a_in, a_out)))
            return fail(ctx, scatter ? "shmesh_psum_scatter" : "shmesh_psum", rc);
    double t[3];
    shmesh_traffic tr0, tr1;
    shmesh_traffic_get(ctx, &tr0);
    for (int rep = 0; rep < 3; rep++) {
        if ((rc = shmesh_barrier(ctx)))
            return fail(ctx, "shmesh_barrier", rc);
        double t0 = (bench_now_us() / 1e6);
        for (long i = 0; i < calls; i++)
            if ((rc = scatter ? shmesh_psum_scatter(mesh, "i", NULL, 0, true, a_in, a_out)
                              : shmesh_psum(mesh, "i", NULL, a_in, a_out)))
                return fail(ctx, scatter ? "shmesh_psum_scatter" : "shmesh_psum", rc);
        t[rep] = ((bench_now_us() / 1e6) - t0) / (double)calls * 1e6;
    }
    shmesh_traffic_get(ctx, &tr1);
    /* The barriers add a little: left in, as every layout has them. */
    int world = shmesh_world_size(ctx), me = shmesh_rank(ctx);
    int64_t *got = calloc((size_t)world, sizeof *got);
    if (!got)
        return fail(ctx, "calloc", SHMESH_ERR_NOMEM);
    got[me] = (int64_t)(tr1.received - tr0.received);
    if ((rc = shmesh_world_sum(ctx, got, (size_t)world, SHMESH_INT64)))
        return fail(ctx, "shmesh_world_sum", rc);
    int64_t most = 0;
    for (int r = 0; r < world; r++)
        most = got[r] > most ? got[r] : most;
    free(got);
    double per_call = (double)most / (3.0 * (double)calls);
    /* The least a psum that keeps device order receives: its slice of the
     * other ranks' k inputs each, then the other ranks' reduced slices. */
    double floor_bytes = (double)(world - 1) / world * (k + 1) * (double)count * sizeof(float);
    if (scatter) /* each local device's block of every other rank's device */
        floor_bytes = (double)(devices - k) * k * (double)out_count * sizeof(float);
    float want = (float)devices * (float)(devices + 1) / 2;
    long wrong = 0;
    for (int l = 0; l < k; l++)
        for (long i = 0; i < out_count; i++)
            wrong += out[l * count + i] != want;
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    double median = t[2] < lo ? lo : t[2] > hi ? hi : t[2];
    bool too_much = check_traffic && per_call > floor_bytes * 1.01;
    if (shmesh_rank(ctx) == 0)
        printf("devices %d (%d ranks x %d), %ld float32: %s %.2f us per call (median of 3 x "
               "%ld); received %.0f bytes per call and rank (most), least %s = %.0f%s\n",
               devices, world, k, count, scatter ? "psum_scatter" : "psum", median, calls,
               per_call, scatter ? "(N-K) K S/N" : "(R-1)/R (K+1) S", floor_bytes,
               wrong ? ", WRONG SUMS" : too_much ? ", TOO MUCH TRAFFIC" : "");
    free(in);
    free(out);
    shmesh_mesh_destroy(mesh);
    return shmesh_finalize(ctx) || wrong || too_much ? 1 : 0;
}
