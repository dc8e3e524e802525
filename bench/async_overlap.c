/* async_overlap: how much of a psum hides behind the caller's computation
 * when it is dispatched asynchronously (docs/effects.md, "Overlap").
 *
 *   shmesh-run -n 4 -- build/bench/async-overlap [-n ITERS] [-b BYTES] [-c MS]
 *
 * A 1-D mesh "i" over every device; each device's buffer holds BYTES of
 * float32 (default 16M).  Every iteration times, one after the other and
 * each after a barrier:
 *   psum       shmesh_psum alone
 *   compute    the computation alone
 *   blocking   shmesh_psum, then the computation
 *   async      shmesh_psum_async, the computation, shmesh_token_wait
 * for two computations of MS milliseconds (default 20): "busy", a loop
 * over 4 MiB of this rank's memory, its work calibrated at start (one
 * rank at a time) to take MS alone, then fixed, so that a computation
 * slowed by the progress thread or another rank shows as a longer time, and "sleep", clock_nanosleep, which
 * leaves the core to the progress thread.  Each time is the job's: from the
 * first rank out of the barrier to the last one done (CLOCK_MONOTONIC is
 * the same clock in every process; with more ranks than cores, a rank's own
 * time would hide that it started late); the table gives the median over
 * ITERS iterations (default 10, after 2 warm-up ones, which also start the
 * progress thread: the blocking psum is timed as it runs once the thread
 * exists).
 * async/blocking is 1 without overlap; perfect overlap (async taking the
 * longer of psum and compute alone) makes it max(psum, compute) /
 * blocking, the `ideal` column.  Every
 * device's input is its id + 1, so the sums are exact and checked after
 * every blocking and async run (#wrong: the elements that differ). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "shmesh.h"

#define MAXLOCAL 64
#define WARMUP 2
#define WORK_FLOATS (1u << 20) /* the busy computation's 4 MiB */

enum { T_PSUM, T_BUSY, T_BLOCK_BUSY, T_ASYNC_BUSY, T_SLEEP, T_BLOCK_SLEEP, T_ASYNC_SLEEP, T_N };

static double now_ms(void) { return bench_now_us() / 1e3; }

#define fail(ctx, what, rc) bench_fail("async-overlap", ctx, what, rc)

static int usage(shmesh_ctx *ctx, const char *msg)
{
    return bench_usage(ctx, "async-overlap", msg,
                       "usage: shmesh-run -n N -- async-overlap [-n ITERS] [-b BYTES] [-c MS]\n"
                       "  -n ITERS  timed iterations, 1 to 100000 (default 10)\n"
                       "  -b BYTES  each device's psum buffer, K, M, G suffixes (default 16M)\n"
                       "  -c MS     the computation's milliseconds (default 20)\n");
}

/* 16M, 64K, 1G, 100: bytes; 0 when not a size. */
static size_t parse_bytes(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-')
        return 0;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end || v > (1ull << 40) >> shift)
        return 0;
    return (size_t)(v << shift);
}

/* The busy computation: `passes` read-modify-write sweeps over `work`. */
static float work[WORK_FLOATS];
static void compute(long passes)
{
    for (long p = 0; p < passes; p++)
        for (unsigned i = 0; i < WORK_FLOATS; i++)
            work[i] = work[i] * 0.999f + 1.0f;
    __asm__ volatile("" : : "r"(work) : "memory"); /* the sweeps are not dead code */
}

static void sleep_ms(double ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(ms * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static double time_compute(long passes)
{
    double t0 = now_ms();
    compute(passes);
    return now_ms() - t0;
}

/* Sweeps that take `ms` alone: a first guess from short runs, then scaled
 * by the fastest of three runs of the guess (the least disturbed). */
static long calibrate(double ms)
{
    compute(1); /* the pages, faulted in */
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        double t = time_compute(4) / 4;
        best = t < best ? t : best;
    }
    long passes = (long)(ms / best + 0.5);
    passes = passes < 1 ? 1 : passes;
    best = 1e30;
    for (int k = 0; k < 3; k++) {
        double t = time_compute(passes);
        best = t < best ? t : best;
    }
    passes = (long)((double)passes * ms / best + 0.5);
    return passes < 1 ? 1 : passes;
}

int main(int argc, char **argv)
{
    shmesh_ctx *ctx;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "async-overlap: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int iters = 10;
    size_t bytes = 16u << 20;
    double ms = 20;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help"))
            return usage(ctx, NULL);
        if (strcmp(opt, "-n") && strcmp(opt, "-b") && strcmp(opt, "-c"))
            BENCH_BAD_ARG("unknown option '%s'", opt);
        if (!val)
            BENCH_BAD_ARG("option %s needs a value", opt);
        i++;
        if (!strcmp(opt, "-n")) {
            long v = strtol(val, &end, 10);
            if (end == val || *end || v < 1 || v > 100000)
                BENCH_BAD_ARG("-n expects a whole number from 1 to 100000, got '%s'", val);
            iters = (int)v;
        } else if (!strcmp(opt, "-b")) {
            bytes = parse_bytes(val);
            if (bytes < 4)
                BENCH_BAD_ARG("-b expects a size in bytes of at least 4 (64K, 16M), got '%s'", val);
        } else {
            ms = strtod(val, &end);
            if (end == val || *end || !(ms > 0) || ms > 60000)
                BENCH_BAD_ARG("-c expects milliseconds, more than 0 (20, 0.5), got '%s'", val);
        }
    }

    int devices = shmesh_device_count(ctx), k = shmesh_local_device_count(ctx), rc;
    const char *names[] = {"i"};
    shmesh_mesh *mesh;
    if (k > MAXLOCAL || (rc = shmesh_mesh_create(ctx, 1, names, &devices, NULL, &mesh)))
        return fail(ctx, "shmesh_mesh_create", k > MAXLOCAL ? SHMESH_ERR_INVALID : rc);
    int ids[MAXLOCAL];
    shmesh_mesh_local_devices(mesh, ids, MAXLOCAL);
    size_t count = bytes / sizeof(float);
    float *in = malloc(bytes * (size_t)k), *out = malloc(bytes * (size_t)k);
    int total = WARMUP + iters;
    /* Per iteration and timing: when this rank left the barrier (negated,
     * so that one pmax gives the earliest) and when it finished. */
    size_t nt = (size_t)total * T_N * 2;
    double *t = calloc(nt, sizeof *t);
    double *tmax = malloc(sizeof *tmax * nt * (size_t)k);
    if (!in || !out || !t || !tmax)
        return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
    shmesh_array a_in[MAXLOCAL], a_out[MAXLOCAL], a_t[MAXLOCAL], a_tmax[MAXLOCAL];
    for (int l = 0; l < k; l++) {
        for (size_t i = 0; i < count; i++)
            in[l * count + i] = (float)(ids[l] + 1);
        a_in[l] = (shmesh_array){.data = in + l * count, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}};
        a_out[l] = (shmesh_array){.data = out + l * count, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}};
        /* the times, the same for each local device, pmax'd over the ranks */
        a_t[l] = (shmesh_array){.data = t, .dtype = SHMESH_FLOAT64, .ndim = 1, .shape = {(int64_t)nt}};
        a_tmax[l] = (shmesh_array){.data = tmax + (size_t)l * nt, .dtype = SHMESH_FLOAT64, .ndim = 1, .shape = {(int64_t)nt}};
    }
    memset(out, 0, bytes * (size_t)k); /* every page touched before timing */
    /* One rank at a time, so that no rank calibrates on a core another
     * one is using. */
    long passes = 0;
    for (int r = 0; r < shmesh_world_size(ctx); r++) {
        if (r == shmesh_rank(ctx))
            passes = calibrate(ms);
        if ((rc = shmesh_barrier(ctx)))
            return fail(ctx, "shmesh_barrier", rc);
    }

    float want = (float)devices * (float)(devices + 1) / 2;
    double wrong[2] = {0, 0}; /* busy, sleep */
    for (int it = 0; it < total; it++) {
        double *ti = t + (size_t)it * T_N * 2;
        shmesh_token tok;
#define TIMED(slot, body)                                                                      \
    do {                                                                                       \
        if ((rc = shmesh_barrier(ctx)))                                                        \
            return fail(ctx, "shmesh_barrier", rc);                                            \
        ti[2 * (slot)] = -now_ms();                                                            \
        body;                                                                                  \
        ti[2 * (slot) + 1] = now_ms();                                                         \
    } while (0)
#define PSUM()                                                                                 \
    if ((rc = shmesh_psum(mesh, "i", NULL, a_in, a_out)))                                      \
    return fail(ctx, "shmesh_psum", rc)
#define PSUM_ASYNC()                                                                           \
    if ((rc = shmesh_psum_async(mesh, "i", NULL, a_in, a_out, &tok)))                          \
    return fail(ctx, "shmesh_psum_async", rc)
#define WAIT()                                                                                 \
    if ((rc = shmesh_token_wait(tok)))                                                         \
    return fail(ctx, "shmesh_token_wait", rc)
        TIMED(T_PSUM, PSUM());
        TIMED(T_BUSY, compute(passes));
        TIMED(T_BLOCK_BUSY, PSUM(); compute(passes));
        for (size_t i = 0; i < count * (size_t)k; i++)
            wrong[0] += out[i] != want;
        memset(out, 0, bytes * (size_t)k);
        TIMED(T_ASYNC_BUSY, PSUM_ASYNC(); compute(passes); WAIT());
        for (size_t i = 0; i < count * (size_t)k; i++)
            wrong[0] += out[i] != want;
        TIMED(T_SLEEP, sleep_ms(ms));
        TIMED(T_BLOCK_SLEEP, PSUM(); sleep_ms(ms));
        for (size_t i = 0; i < count * (size_t)k; i++)
            wrong[1] += out[i] != want;
        memset(out, 0, bytes * (size_t)k);
        TIMED(T_ASYNC_SLEEP, PSUM_ASYNC(); sleep_ms(ms); WAIT());
        for (size_t i = 0; i < count * (size_t)k; i++)
            wrong[1] += out[i] != want;
    }
    if ((rc = shmesh_pmax(mesh, "i", NULL, a_t, a_tmax)))
        return fail(ctx, "shmesh_pmax", rc);
    if ((rc = shmesh_world_sum(ctx, wrong, 2, SHMESH_FLOAT64)))
        return fail(ctx, "shmesh_world_sum", rc);

    if (shmesh_rank(ctx) == 0) {
        double med[T_N], *col = malloc(sizeof *col * (size_t)iters);
        if (!col)
            return fail(ctx, "malloc", SHMESH_ERR_NOMEM);
        for (int s = 0; s < T_N; s++) {
            for (int it = 0; it < iters; it++) {
                const double *ti = tmax + (size_t)(WARMUP + it) * T_N * 2;
                col[it] = ti[2 * s + 1] + ti[2 * s]; /* the last end - the first start */
            }
            med[s] = median(col, iters);
        }
        printf("# async-overlap: psum of %zu B (%zu float32) per device over %d devices (%d "
               "ranks x %d), compute %.1f ms, %d iterations after %d warm-up\n",
               count * sizeof(float), count, devices, shmesh_world_size(ctx), k, ms, iters,
               WARMUP);
        cpu_set_t cpus;
        int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) ? 0 : CPU_COUNT(&cpus);
        int world = shmesh_world_size(ctx);
        if (ncpu == 1)
            printf("# rank 0 runs on one CPU (--bind-to core?), which its progress thread "
                   "shares: the busy row cannot overlap\n");
        else if (ncpu && ncpu < 2 * world)
            printf("# %d CPUs for %d ranks: the busy row wants one for each rank and one for its "
                   "progress thread (%d), so it measures cores shared more than overlap\n",
                   ncpu, world, 2 * world);
        printf("# times in ms, medians over the iterations of the job's time (from the first "
               "rank out of the barrier to the last one done); busy: %ld sweeps over 4 MiB\n#\n",
               passes);
        printf("# %7s %12s %9s %9s %9s %9s %15s %7s %7s\n", "compute", "bytes", "psum",
               "compute", "blocking", "async", "async/blocking", "ideal", "#wrong");
        static const struct {
            const char *name;
            int c, b, a;
        } rows[] = {{"busy", T_BUSY, T_BLOCK_BUSY, T_ASYNC_BUSY},
                    {"sleep", T_SLEEP, T_BLOCK_SLEEP, T_ASYNC_SLEEP}};
        for (int r = 0; r < 2; r++) {
            double p = med[T_PSUM], c = med[rows[r].c], b = med[rows[r].b], a = med[rows[r].a];
            printf("  %7s %12zu %9.4f %9.4f %9.4f %9.4f %15.2f %7.2f %7.0f\n", rows[r].name,
                   count * sizeof(float), p, c, b, a, a / b, (p > c ? p : c) / b, wrong[r]);
        }
        free(col);
    }
    free(tmax);
    free(t);
    free(in);
    free(out);
    shmesh_mesh_destroy(mesh);
    return shmesh_finalize(ctx) || wrong[0] || wrong[1] ? 1 : 0;
}
