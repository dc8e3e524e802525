/* blocking_after_async: what a blocking psum costs once the context's
 * dispatcher has its progress thread (docs/effects.md, "The progress
 * thread"; docs/performance.md).
 *
 *   shmesh-run -n 2 -- build/bench/blocking-after-async [-n ITERS] [-r ROUNDS] [-q QUEUED] [-b BYTES]
 *
 * A 1-D mesh "i" over every device; each device's buffer holds BYTES of
 * float32 (default 8: two floats).  Times, after a barrier, ROUNDS rounds
 * (default 7) of ITERS calls (default 20000) of each row:
 *   (a) before   shmesh_psum, before any asynchronous dispatch (no
 *                progress thread: the caller runs each call itself)
 *   (b) idle     shmesh_psum after one shmesh_psum_async and its wait: the
 *                progress thread exists and the dispatch queue is idle, so
 *                the caller runs the call itself, and should pay what (a)
 *                does
 *   (c) queued   groups of QUEUED shmesh_psum_async (default 4) followed by
 *                one blocking shmesh_psum, which finds the queue busy and
 *                waits while the progress thread runs all QUEUED + 1 calls
 *                in order: the time of a group over its QUEUED + 1 calls,
 *                i.e. a call's cost when the progress thread executes it
 *                (queueing, the hand-over, the wait on the dispatch queue's
 *                finished count)
 *   (d) async    shmesh_psum_async and shmesh_token_wait on its token, one
 *                call at a time: what an asynchronous call costs when the
 *                caller has nothing to overlap it with
 *   (e) dispatch groups of QUEUED shmesh_psum_async, then a wait for the
 *                last: the time spent inside shmesh_psum_async alone, per
 *                call (the caller's cost of handing a call over)
 * and, once, the first shmesh_psum_async of the job (the one that starts
 * the progress thread) and its wait.
 * A job cannot make a second context (the segment is gone once every rank
 * attached) and a context never loses its progress thread, so the rounds
 * of (a) come first, then one psum_async, then the rounds of (b) and (c) in
 * turn.  Run it a few times to see how far a shared machine drifts.  The
 * table gives, per row, the median over the rounds of rank 0's
 * microseconds per call, the fastest and slowest round, and the ratio to
 * (a).  Every device's input is its id + 1; the sums are exact and checked
 * after every timed blocking call (the last line: the elements that
 * differed, over every rank and row; the exit status is 1 if any did). */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define MAXLOCAL 64
#define MAXQUEUED 64
#define WARMUP 200
/* The rows apart, for a profiler (callgrind --toggle-collect=time_queued). */
#define NOINLINE __attribute__((noinline))

enum { R_BEFORE, R_IDLE, R_QUEUED, R_ROUNDTRIP, R_DISPATCH, R_N };

#define fail(ctx, what, rc) bench_fail("blocking-after-async", ctx, what, rc)

static int usage(shmesh_ctx *ctx, const char *msg)
{
    return bench_usage(
        ctx, "blocking-after-async", msg,
        "usage: shmesh-run -n N -- blocking-after-async [-n ITERS] [-r ROUNDS] [-q QUEUED] "
        "[-b BYTES]\n"
        "  -n ITERS   timed calls per row and round, 1 to 10000000 (default 20000)\n"
        "  -r ROUNDS  rounds of each row, 1 to 1000 (default 7)\n"
        "  -q QUEUED  psum_async calls queued before each blocking one in row (c), "
        "1 to " BENCH_STR(MAXQUEUED) " (default 4)\n"
        "  -b BYTES   each device's psum buffer, a multiple of 4 up to 1048576 (default 8)\n");
}

struct bench {
    shmesh_ctx *ctx;
    shmesh_mesh *mesh;
    int k; /* local devices */
    size_t count;
    float *in, *out, want;
    shmesh_array a_in[MAXLOCAL], a_out[MAXLOCAL];
    double wrong;
};

static void check(struct bench *b)
{
    for (size_t i = 0; i < b->count * (size_t)b->k; i++) {
        b->wrong += b->out[i] != b->want;
        b->out[i] = 0;
    }
}

static int psum(struct bench *b)
{
    return shmesh_psum(b->mesh, "i", NULL, b->a_in, b->a_out);
}

static int psum_async(struct bench *b)
{
    return shmesh_psum_async(b->mesh, "i", NULL, b->a_in, b->a_out, NULL);
}

#define TRY(what, call)                                                                        \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_)                                                                               \
            return fail(b->ctx, what, rc_);                                                    \
    } while (0)

/* ITERS blocking calls after a barrier: us per call. */
static NOINLINE int time_blocking(struct bench *b, int iters, double *us)
{
    TRY("shmesh_barrier", shmesh_barrier(b->ctx));
    double t0 = bench_now_us();
    for (int i = 0; i < iters; i++) {
        TRY("shmesh_psum", psum(b));
        check(b);
    }
    *us = (bench_now_us() - t0) / iters;
    return 0;
}

/* Groups of `queued` async calls and a blocking one: us per call. */
static NOINLINE int time_queued(struct bench *b, int iters, int queued, double *us)
{
    int groups = iters / (queued + 1);
    groups = groups ? groups : 1;
    TRY("shmesh_barrier", shmesh_barrier(b->ctx));
    double t0 = bench_now_us();
    for (int g = 0; g < groups; g++) {
        for (int q = 0; q < queued; q++)
            TRY("shmesh_psum_async", psum_async(b));
        TRY("shmesh_psum", psum(b)); /* runs after them, in dispatch order */
        check(b);
    }
    *us = (bench_now_us() - t0) / ((double)groups * (queued + 1));
    return 0;
}

/* An async call and its wait, one at a time: us per call. */
static NOINLINE int time_roundtrip(struct bench *b, int iters, double *us)
{
    TRY("shmesh_barrier", shmesh_barrier(b->ctx));
    double t0 = bench_now_us();
    for (int i = 0; i < iters; i++) {
        shmesh_token t;
        TRY("shmesh_psum_async", shmesh_psum_async(b->mesh, "i", NULL, b->a_in, b->a_out, &t));
        TRY("shmesh_token_wait", shmesh_token_wait(t));
        check(b);
    }
    *us = (bench_now_us() - t0) / iters;
    return 0;
}

/* Groups of `queued` async calls, then a wait for the last: us per call
 * spent in shmesh_psum_async. */
static NOINLINE int time_dispatch(struct bench *b, int iters, int queued, double *us)
{
    int groups = iters / queued;
    groups = groups ? groups : 1;
    TRY("shmesh_barrier", shmesh_barrier(b->ctx));
    double inside = 0;
    for (int g = 0; g < groups; g++) {
        shmesh_token t;
        double t0 = bench_now_us();
        for (int q = 0; q < queued; q++)
            TRY("shmesh_psum_async", shmesh_psum_async(b->mesh, "i", NULL, b->a_in, b->a_out, &t));
        inside += bench_now_us() - t0;
        TRY("shmesh_token_wait", shmesh_token_wait(t));
        check(b);
    }
    *us = inside / ((double)groups * queued);
    return 0;
}

static int warm(struct bench *b)
{
    for (int i = 0; i < WARMUP; i++)
        TRY("shmesh_psum", psum(b));
    check(b);
    return 0;
}

int main(int argc, char **argv)
{
    struct bench b = {0};
    if (shmesh_init(&b.ctx)) {
        fprintf(stderr, "blocking-after-async: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    shmesh_ctx *ctx = b.ctx;
    int iters = 20000, rounds = 7, queued = 4;
    size_t bytes = 8;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help"))
            return usage(ctx, NULL);
        if (strcmp(opt, "-n") && strcmp(opt, "-r") && strcmp(opt, "-q") && strcmp(opt, "-b"))
            BENCH_BAD_ARG("unknown option '%s'", opt);
        if (!val)
            BENCH_BAD_ARG("option %s needs a value", opt);
        i++;
        errno = 0;
        long v = strtol(val, &end, 10);
        bool ok = end != val && !*end && !errno;
        if (!strcmp(opt, "-n")) {
            if (!ok || v < 1 || v > 10000000)
                BENCH_BAD_ARG("-n expects a whole number from 1 to 10000000, got '%s'", val);
            iters = (int)v;
        } else if (!strcmp(opt, "-r")) {
            if (!ok || v < 1 || v > 1000)
                BENCH_BAD_ARG("-r expects a whole number from 1 to 1000, got '%s'", val);
            rounds = (int)v;
        } else if (!strcmp(opt, "-q")) {
            if (!ok || v < 1 || v > MAXQUEUED)
                BENCH_BAD_ARG("-q expects a whole number from 1 to %d, got '%s'", MAXQUEUED, val);
            queued = (int)v;
        } else {
            if (!ok || v < 4 || v > (1 << 20) || v % 4)
                BENCH_BAD_ARG("-b expects a multiple of 4 from 4 to 1048576, got '%s'", val);
            bytes = (size_t)v;
        }
    }

    double *us = calloc((size_t)rounds * R_N, sizeof *us);
    if (!us)
        return fail(ctx, "calloc", SHMESH_ERR_NOMEM);
    int world = shmesh_world_size(ctx), devices = shmesh_device_count(ctx), rank = shmesh_rank(ctx);
    int rc;
    b.k = shmesh_local_device_count(ctx);
    const char *names[] = {"i"};
    if (b.k > MAXLOCAL || (rc = shmesh_mesh_create(ctx, 1, names, &devices, NULL, &b.mesh)))
        return fail(ctx, "shmesh_mesh_create", b.k > MAXLOCAL ? SHMESH_ERR_INVALID : rc);
    int ids[MAXLOCAL];
    shmesh_mesh_local_devices(b.mesh, ids, MAXLOCAL);
    b.count = bytes / sizeof(float);
    b.in = malloc(bytes * (size_t)b.k);
    b.out = calloc(b.count * (size_t)b.k, sizeof(float));
    if (!b.in || !b.out)
        return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    for (int l = 0; l < b.k; l++) {
        for (size_t i = 0; i < b.count; i++)
            b.in[l * b.count + i] = (float)(ids[l] + 1);
        b.a_in[l] = (shmesh_array){.data = b.in + l * b.count, .dtype = SHMESH_FLOAT32,
                                   .ndim = 1, .shape = {(int64_t)b.count}};
        b.a_out[l] = (shmesh_array){.data = b.out + l * b.count, .dtype = SHMESH_FLOAT32,
                                    .ndim = 1, .shape = {(int64_t)b.count}};
    }
    b.want = (float)devices * (float)(devices + 1) / 2;

    /* (a): no progress thread yet. */
    if ((rc = warm(&b)))
        return rc;
    for (int r = 0; r < rounds; r++)
        if ((rc = time_blocking(&b, iters, &us[(size_t)r * R_N + R_BEFORE])))
            return rc;
    /* The first asynchronous dispatch starts the progress thread. */
    shmesh_token t;
    if ((rc = shmesh_barrier(ctx)))
        return fail(ctx, "shmesh_barrier", rc);
    double t0 = bench_now_us();
    if ((rc = shmesh_psum_async(b.mesh, "i", NULL, b.a_in, b.a_out, &t)))
        return fail(ctx, "shmesh_psum_async", rc);
    double first_dispatch = bench_now_us() - t0;
    if ((rc = shmesh_token_wait(t)))
        return fail(ctx, "shmesh_token_wait", rc);
    double first_done = bench_now_us() - t0;
    check(&b);
    /* (b) and (c), in turn. */
    if ((rc = warm(&b)))
        return rc;
    for (int r = 0; r < rounds; r++)
        if ((rc = time_blocking(&b, iters, &us[(size_t)r * R_N + R_IDLE])) ||
            (rc = time_queued(&b, iters, queued, &us[(size_t)r * R_N + R_QUEUED])) ||
            (rc = time_roundtrip(&b, iters, &us[(size_t)r * R_N + R_ROUNDTRIP])) ||
            (rc = time_dispatch(&b, iters, queued, &us[(size_t)r * R_N + R_DISPATCH])))
            return rc;
    double wrong = b.wrong;
    rc = shmesh_world_sum(ctx, &wrong, 1, SHMESH_FLOAT64);
    if (rc)
        return fail(ctx, "shmesh_world_sum", rc);

    if (rank == 0) {
        printf("# blocking-after-async: psum of %zu B (%zu float32) per device over %d devices "
               "(%d ranks x %d), %d calls per row and round, %d rounds, (c) %d queued\n",
               b.count * sizeof(float), b.count, devices, world, b.k, iters, rounds, queued);
        printf("# us per call on rank 0: the median over the rounds, the fastest and slowest "
               "round; ratio: median / (a)'s median\n#\n");
        printf("# %-28s %9s %9s %9s %7s\n", "row", "median", "min", "max", "ratio");
        static const char *rows[R_N] = {"(a) before any async", "(b) idle queue, thread",
                                         "(c) behind queued async",
                                         "(d) psum_async + wait", "(e) psum_async alone"};
        double col[1000], med[R_N];
        for (int s = 0; s < R_N; s++) {
            for (int r = 0; r < rounds; r++)
                col[r] = us[(size_t)r * R_N + s];
            med[s] = median(col, rounds);
            printf("  %-28s %9.3f %9.3f %9.3f %7.2f\n", rows[s], med[s], col[0],
                   col[rounds - 1], med[s] / med[R_BEFORE]);
        }
        printf("# first psum_async of the job (starts the progress thread): %.1f us, "
               "and its wait: %.1f us in all\n",
               first_dispatch, first_done);
        printf("# wrong elements: %.0f\n", wrong);
    }
    free(us);
    free(b.in);
    free(b.out);
    return shmesh_finalize(ctx) || wrong ? 1 : 0;
}
