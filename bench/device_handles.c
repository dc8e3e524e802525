/* device-handles: what the IPC handles of device buffers cost a call, on
 * the GPU runtime the library loads (docs/devices.md, "Measurements"):
 *
 *   shmesh-run -n N --gpus none -- build/bench/device-handles [ROUNDS]
 *
 * An 8-byte float32 psum over every rank (one-shot: each rank maps every
 * peer's input), timed on every rank, in three phases:
 *
 *   first    ROUNDS calls, each on buffers allocated just before it and
 *            kept: every rank exports its new allocation and opens each
 *            peer's (N - 1 opens per rank and call)
 *   cached   200 calls, three times, on the last of those buffers: every
 *            peer's mapping found in the cache
 *   reopen   ROUNDS calls, each after every rank freed its input and
 *            allocated it again: the stale mappings closed, the new ones
 *            opened
 *
 * Rank 0 prints the slowest rank's median per phase, the library's handle
 * counters (summed over ranks) per phase, and the first and reopen medians
 * less the cached one per open.  Exit 77 (skip) without a GPU runtime. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define MAX_ROUNDS 64
#define CACHED_CALLS 200

static shmesh_ctx *ctx;
static shmesh_mesh *mesh;

static void die(const char *what, int rc)
{
    fprintf(stderr, "device-handles: rank %d: %s: %s: %s\n", shmesh_rank(ctx), what,
            shmesh_error_name(rc), shmesh_last_error(ctx));
    shmesh_abort(ctx, 1, "device-handles failed");
    exit(1);
}

/* The largest of every rank's values (host buffers: a host psum path). */
static void slowest(double *v, int n)
{
    shmesh_array a = {.data = v, .dtype = SHMESH_FLOAT64, .ndim = 1, .shape = {n}};
    int rc = shmesh_pmax(mesh, "i", NULL, &a, &a);
    if (rc)
        die("shmesh_pmax", rc);
}

static void counters(uint64_t c[4])
{
    shmesh_device_stats s;
    shmesh_device_stats_get(ctx, &s);
    c[0] = s.ipc_exports;
    c[1] = s.ipc_opens;
    c[2] = s.ipc_hits;
    c[3] = s.ipc_closes;
}

/* The counters' growth over a phase, summed over the ranks, into d. */
static void counted(const uint64_t before[4], double d[4])
{
    uint64_t after[4];
    counters(after);
    for (int i = 0; i < 4; i++)
        d[i] = (double)(after[i] - before[i]);
    shmesh_array a = {.data = d, .dtype = SHMESH_FLOAT64, .ndim = 1, .shape = {4}};
    int rc = shmesh_psum(mesh, "i", NULL, &a, &a);
    if (rc)
        die("shmesh_psum of the counters", rc);
}

static void *device_buffer(const float *host)
{
    void *p;
    int rc = shmesh_device_alloc(ctx, 0, 2 * sizeof(float), &p);
    if (rc || (rc = shmesh_device_copy(ctx, p, host, 2 * sizeof(float))))
        die("a device buffer", rc);
    return p;
}

/* One psum on device buffers, timed alone (a barrier first). */
static double timed_psum(void *in, void *out)
{
    shmesh_array a = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {2}};
    shmesh_array b = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {2}};
    int rc = shmesh_barrier(ctx);
    if (rc)
        die("shmesh_barrier", rc);
    double t0 = bench_now_us();
    if ((rc = shmesh_psum(mesh, "i", NULL, &a, &b)))
        die("shmesh_psum", rc);
    return bench_now_us() - t0;
}

static void print_phase(const char *name, double us, const double d[4])
{
    printf("  %-7s %10.2f us   exports %5.0f  opens %5.0f  hits %6.0f  closes %5.0f\n", name, us,
           d[0], d[1], d[2], d[3]);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 12;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: shmesh-run -n N -- %s [ROUNDS, 1 to %d]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    int rc = shmesh_init(&ctx);
    if (rc) {
        fprintf(stderr, "device-handles: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int rank = shmesh_rank(ctx), n = shmesh_world_size(ctx);
    shmesh_device_stats st;
    shmesh_device_stats_get(ctx, &st);
    if (!strcmp(st.backend, "none") || n < 2) {
        if (rank == 0)
            printf("device-handles: skip: %s\n",
                   n < 2 ? "needs 2 ranks or more" : "no GPU runtime (SHMESH_DEVICE)");
        shmesh_finalize(ctx);
        return 77;
    }
    const char *names[] = {"i"};
    if ((rc = shmesh_mesh_create(ctx, 1, names, &n, NULL, &mesh)))
        die("shmesh_mesh_create", rc);
    float host[2] = {(float)rank, 1}, got[2];
    void *in[MAX_ROUNDS], *out[MAX_ROUNDS];
    double t[3 * CACHED_CALLS], first[MAX_ROUNDS], reopen[MAX_ROUNDS], m[3], d[3][4];
    uint64_t before[4];

    counters(before);
    for (int r = 0; r < rounds; r++) {
        in[r] = device_buffer(host);
        out[r] = device_buffer(host);
        first[r] = timed_psum(in[r], out[r]);
    }
    counted(before, d[0]);

    counters(before);
    for (int rep = 0; rep < 3; rep++) {
        if ((rc = shmesh_barrier(ctx)))
            die("shmesh_barrier", rc);
        for (int i = 0; i < CACHED_CALLS; i++) {
            double t0 = bench_now_us();
            shmesh_array a = {.data = in[rounds - 1], .dtype = SHMESH_FLOAT32, .ndim = 1,
                              .shape = {2}};
            shmesh_array b = {.data = out[rounds - 1], .dtype = SHMESH_FLOAT32, .ndim = 1,
                              .shape = {2}};
            if ((rc = shmesh_psum(mesh, "i", NULL, &a, &b)))
                die("shmesh_psum", rc);
            t[rep * CACHED_CALLS + i] = bench_now_us() - t0;
        }
    }
    counted(before, d[1]);

    counters(before);
    for (int r = 0; r < rounds; r++) {
        if ((rc = shmesh_device_free(ctx, in[r])))
            die("shmesh_device_free", rc);
        in[r] = device_buffer(host);
        reopen[r] = timed_psum(in[r], out[r]);
    }
    counted(before, d[2]);

    /* The last call's sums: every rank's rank, and n. */
    if ((rc = shmesh_device_copy(ctx, got, out[rounds - 1], sizeof got)))
        die("copying the result back", rc);
    int wrong = got[0] != (float)(n * (n - 1) / 2) || got[1] != (float)n;

    m[0] = median(first, rounds);
    m[1] = median(t, 3 * CACHED_CALLS);
    m[2] = median(reopen, rounds);
    slowest(m, 3);
    double bad = wrong;
    slowest(&bad, 1);
    if (rank == 0) {
        printf("# device-handles: %d ranks, %s backend, 8-byte float32 psum on device buffers; "
               "the slowest rank's median per call; handle counters summed over ranks\n",
               n, st.backend);
        print_phase("first", m[0], d[0]);
        print_phase("cached", m[1], d[1]);
        print_phase("reopen", m[2], d[2]);
        double opens_first = d[0][1] / rounds / n, opens_re = d[2][1] / rounds / n;
        printf("# per open: first %.1f us (%.1f opens per rank and call), reopen after free "
               "%.1f us (%.1f opens per rank and call)%s\n",
               opens_first > 0 ? (m[0] - m[1]) / opens_first : 0, opens_first,
               opens_re > 0 ? (m[2] - m[1]) / opens_re : 0, opens_re,
               bad ? "; WRONG SUMS" : "");
    }
    for (int r = 0; r < rounds; r++) {
        shmesh_device_free(ctx, in[r]);
        shmesh_device_free(ctx, out[r]);
    }
    shmesh_mesh_destroy(mesh);
    rc = shmesh_finalize(ctx);
    return rc || bad ? 1 : 0;
}
