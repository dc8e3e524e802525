/* shmesh-test-traffic: what each collective moves between processes
 * (shmesh_traffic_get, lib/engine/traffic.h) against what its algorithm
 * must move, for every rank of a job of any size.
 *
 *   shmesh-test-traffic [heap]
 *
 * Buffers are the caller's own memory, or with `heap` the shared heap
 * (shmesh_alloc: the zero-copy path from 64 KiB).  Each case runs one call
 * on a one-axis mesh over the whole job, takes this rank's sent and
 * received bytes around it, and checks them against the op's figures; then
 * the ranks add up their numbers, and what was sent must equal what was
 * received.  With n ranks and S bytes of input per rank:
 *   psum, small         (n - 1) S each way (one-shot: every member reads
 *                       every other's whole input)
 *   psum, 1 MiB         2 (n - 1) S over the job, each rank within 1% of
 *                       2 (n - 1) / n S (a reduce-scatter then an
 *                       all-gather, through the slots or in place)
 *   all_gather          (n - 1) S each way
 *   psum_scatter,
 *   all_to_all          (n - 1) S / n each way
 *   pbroadcast          the source sends (n - 1) S, the others receive S
 *   ppermute (a ring)   S each way
 *   ppermute (one pair) the first sends S, the last receives it
 *   psum_async          as psum, counted once its token is done
 * Prints "rank R: CASE ok" per case, "rank R: FAILED CASE: ..." otherwise,
 * and "rank R: traffic ok" at the end; exit 0, or 1 when a case failed. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

static shmesh_ctx *ctx;
static shmesh_mesh *mesh;
static int rank, n, failed;
static bool heap;

#define SMALL 96      /* float32 elements: 384 bytes, divisible by 2, 3 and 4 */
#define LARGE 262152  /* about 1 MiB, divisible by 2, 3 and 4 */
#define MAX_RANKS 8

static shmesh_array arr(void *data, int64_t count)
{
    return (shmesh_array){.data = data, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {count},
                          .bdim = SHMESH_NOT_MAPPED};
}

static float *buffer(size_t count)
{
    size_t bytes = count * sizeof(float);
    float *p = heap ? shmesh_alloc(ctx, bytes) : malloc(bytes);
    if (!p) {
        printf("rank %d: FAILED allocating %zu bytes\n", rank, bytes);
        exit(1);
    }
    for (size_t i = 0; i < count; i++)
        p[i] = (float)(rank + 1);
    return p;
}

static void release(float *p)
{
    if (heap)
        shmesh_free(ctx, p);
    else
        free(p);
}

/* A check failed: says which, and what was found against what was wanted. */
static void fail(const char *what, const char *quantity, uint64_t found, uint64_t want,
                 const char *how)
{
    failed = 1;
    printf("rank %d: FAILED %s: %s %" PRIu64 " bytes, want %" PRIu64 "%s\n", rank, what, quantity,
           found, want, how);
}

/* One case's numbers: what this rank must send and receive (exact), or
 * `near` for the two-phase psum's (each within 1% of its value, and the
 * job's totals exact). */
struct want {
    uint64_t sent, received;
    bool near;
    uint64_t total; /* over the job, each way */
};

typedef int (*op_fn)(float *in, float *out, int64_t count);

static void run_case(const char *name, op_fn op, int64_t count, int64_t out_count,
                     struct want w)
{
    float *in = buffer((size_t)count), *out = buffer((size_t)out_count);
    shmesh_traffic t0, t1;
    if (shmesh_traffic_get(ctx, &t0) || op(in, out, count) || shmesh_traffic_get(ctx, &t1)) {
        failed = 1;
        printf("rank %d: FAILED %s: %s\n", rank, name, shmesh_last_error(ctx));
        exit(1);
    }
    int64_t d[2] = {(int64_t)(t1.sent - t0.sent), (int64_t)(t1.received - t0.received)};
    int before = failed;
    uint64_t sent = (uint64_t)d[0], received = (uint64_t)d[1];
    if (w.near) {
        uint64_t slack = w.sent / 100;
        if (sent + slack < w.sent || sent > w.sent + slack)
            fail(name, "sent", sent, w.sent, " within 1%");
        if (received + slack < w.received || received > w.received + slack)
            fail(name, "received", received, w.received, " within 1%");
    } else {
        if (sent != w.sent)
            fail(name, "sent", sent, w.sent, "");
        if (received != w.received)
            fail(name, "received", received, w.received, "");
    }
    if (shmesh_world_sum(ctx, d, 2, SHMESH_INT64)) {
        printf("rank %d: FAILED %s: world_sum: %s\n", rank, name, shmesh_last_error(ctx));
        exit(1);
    }
    if (d[0] != d[1])
        fail(name, "the job sent", (uint64_t)d[0], (uint64_t)d[1], " (what it received)");
    if (w.total != UINT64_MAX && (uint64_t)d[0] != w.total)
        fail(name, "the job sent", (uint64_t)d[0], w.total, "");
    if (failed == before)
        printf("rank %d: %s ok\n", rank, name);
    release(in);
    release(out);
}

static int op_psum(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count);
    return shmesh_psum(mesh, "i", NULL, &a, &b);
}

static int op_psum_async(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count);
    shmesh_token tok;
    int rc = shmesh_psum_async(mesh, "i", NULL, &a, &b, &tok);
    return rc ? rc : shmesh_token_wait(tok);
}

static int op_all_gather(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count * n);
    return shmesh_all_gather(mesh, "i", NULL, 0, true, &a, &b);
}

static int op_psum_scatter(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count / n);
    return shmesh_psum_scatter(mesh, "i", NULL, 0, true, &a, &b);
}

static int op_all_to_all(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count);
    return shmesh_all_to_all(mesh, "i", NULL, 0, 0, true, &a, &b);
}

static int op_pbroadcast(float *in, float *out, int64_t count)
{
    shmesh_array a = arr(in, count), b = arr(out, count);
    return shmesh_pbroadcast(mesh, "i", 0, &a, &b);
}

static int op_ppermute(float *in, float *out, int64_t count)
{
    int perm[MAX_RANKS][2];
    for (int i = 0; i < n; i++) {
        perm[i][0] = i;
        perm[i][1] = (i + 1) % n;
    }
    shmesh_array a = arr(in, count), b = arr(out, count);
    return shmesh_ppermute(mesh, "i", (const int(*)[2])perm, n, &a, &b);
}

/* One pair only: group index 0 sends to the last; the others get zeros. */
static int op_ppermute_pair(float *in, float *out, int64_t count)
{
    int perm[1][2] = {{0, n - 1}};
    shmesh_array a = arr(in, count), b = arr(out, count);
    return shmesh_ppermute(mesh, "i", (const int(*)[2])perm, 1, &a, &b);
}

static struct want each(uint64_t bytes)
{
    return (struct want){bytes, bytes, false, bytes * (uint64_t)n};
}

int main(int argc, char **argv)
{
    heap = argc > 1 && !strcmp(argv[1], "heap");
    if (shmesh_init(&ctx)) {
        printf("FAILED shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    n = shmesh_world_size(ctx);
    const char *names[] = {"i"};
    int sizes[] = {n};
    if (n > MAX_RANKS || shmesh_mesh_create(ctx, 1, names, sizes, NULL, &mesh)) {
        printf("rank %d: FAILED mesh: %s\n", rank, shmesh_last_error(ctx));
        return 1;
    }
    shmesh_traffic t;
    if (shmesh_traffic_get(NULL, &t) != SHMESH_ERR_INVALID ||
        shmesh_traffic_get(ctx, NULL) != SHMESH_ERR_INVALID)
        fail("traffic_get", "a NULL argument was taken: got", 0, 0, "");

    uint64_t m = (uint64_t)(n - 1), nn = (uint64_t)n;
    for (int large = 0; large < 2; large++) {
        int64_t count = large ? LARGE : SMALL;
        uint64_t s = (uint64_t)count * sizeof(float);
        char name[64];
#define CASE(op, out_count, want)                                                              \
    do {                                                                                       \
        snprintf(name, sizeof name, "%s %" PRIu64 " B", #op, s);                              \
        run_case(name, op_##op, count, out_count, want);                                       \
    } while (0)
        struct want two_phase = {2 * m * s / nn, 2 * m * s / nn, true, 2 * m * s};
        CASE(psum, count, large ? two_phase : each(m * s));
        CASE(psum_async, count, large ? two_phase : each(m * s));
        CASE(all_gather, count * n, each(m * s));
        CASE(psum_scatter, count / n, each(m * s / nn));
        CASE(all_to_all, count, each(m * s / nn));
        struct want bcast = rank == 0 ? (struct want){m * s, 0, false, m * s}
                                      : (struct want){0, s, false, m * s};
        CASE(pbroadcast, count, bcast);
        if (n > 1) {
            CASE(ppermute, count, each(s));
            struct want pair = {rank == 0 ? s : 0, rank == n - 1 ? s : 0, false, s};
            CASE(ppermute_pair, count, pair);
        }
#undef CASE
    }
    printf("rank %d: traffic %s\n", rank, failed ? "FAILED" : "ok");
    shmesh_mesh_destroy(mesh);
    shmesh_finalize(ctx);
    return failed;
}
