/* shmesh-test-rank: the program the multi-process tests start under
 * shmesh-run.  Each mode exercises one behaviour and prints one line per rank
 * that the tests read:
 *
 *   rank R: OP -> ERROR_NAME (N ms): last error
 *
 * Exit status: 0 when every call succeeded, 3 when one returned an error,
 * 4 when a computed result was wrong, 2 for bad usage. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kernels/half.h"
#include "shmesh.h"

static shmesh_ctx *ctx;
static int rank, world;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void report(const char *op, int rc, double t0)
{
    printf("rank %d: %s -> %s (%.0f ms): %s\n", rank, op, shmesh_error_name(rc), now_ms() - t0,
           rc ? shmesh_last_error(ctx) : ""); /* ctx NULL after finalize: its message */
    fflush(stdout);
}

/* Runs `call`, reports it, and exits 3 on failure. */
#define DO(op, call)                                                                           \
    do {                                                                                       \
        double t0_ = now_ms();                                                                 \
        int rc_ = (call);                                                                      \
        report(op, rc_, t0_);                                                                  \
        if (rc_)                                                                               \
            exit(3);                                                                           \
    } while (0)

/* Like DO but returns the code instead of exiting. */
static int attempt(const char *op, int rc, double t0)
{
    report(op, rc, t0);
    return rc;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int dtype_by_name(const char *s)
{
    for (int d = 0; d < SHMESH_DTYPE_COUNT; d++)
        if (!strcmp(shmesh_dtype_name((shmesh_dtype)d), s))
            return d;
    fprintf(stderr, "unknown dtype %s\n", s);
    exit(2);
}

/* Rank r's i-th input in iteration it: small multiples of 1/4, exact in
 * float16; integers spread over the whole width so sums wrap. */
static double fval(int r, size_t i, int it)
{
    return (double)((r * 7 + (long)i * 13 + it * 5) % 1001) * 0.25 - 125.0;
}

static uint64_t ival(int r, size_t i, int it)
{
    return (uint64_t)(r + 1) * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull +
           (uint64_t)it;
}

static void fill(int dt, void *buf, size_t n, int r, int it)
{
    for (size_t i = 0; i < n; i++) {
        double f = fval(r, i, it);
        uint64_t u = ival(r, i, it);
        switch (dt) {
        case SHMESH_INT8: case SHMESH_UINT8: ((uint8_t *)buf)[i] = (uint8_t)u; break;
        case SHMESH_INT16: case SHMESH_UINT16: ((uint16_t *)buf)[i] = (uint16_t)u; break;
        case SHMESH_INT32: case SHMESH_UINT32: ((uint32_t *)buf)[i] = (uint32_t)u; break;
        case SHMESH_INT64: case SHMESH_UINT64: ((uint64_t *)buf)[i] = u; break;
        case SHMESH_FLOAT32: ((float *)buf)[i] = (float)f; break;
        case SHMESH_FLOAT64: ((double *)buf)[i] = f; break;
        case SHMESH_FLOAT16: ((uint16_t *)buf)[i] = float_to_half((float)f); break;
        case SHMESH_BFLOAT16: ((uint16_t *)buf)[i] = float_to_bf16((float)f); break;
        default: break;
        }
    }
}

/* The expected sum of element i, added in rank order as the contract says. */
static int check(int dt, const void *buf, size_t n, int it)
{
    size_t esz = shmesh_dtype_size((shmesh_dtype)dt);
    for (size_t i = 0; i < n; i++) {
        unsigned char want[8] = {0};
        uint64_t u = 0;
        double d = 0;
        float f = 0;
        for (int r = 0; r < world; r++) {
            double v = fval(r, i, it);
            if (dt == SHMESH_FLOAT16)
                f = r ? f + half_to_float(float_to_half((float)v)) : half_to_float(float_to_half((float)v));
            else if (dt == SHMESH_BFLOAT16)
                f = r ? f + bf16_to_float(float_to_bf16((float)v)) : bf16_to_float(float_to_bf16((float)v));
            else if (dt == SHMESH_FLOAT32)
                f = r ? f + (float)v : (float)v;
            d = r ? d + v : v;
            u += ival(r, i, it);
        }
        uint16_t h;
        switch (dt) {
        case SHMESH_FLOAT32: memcpy(want, &f, 4); break;
        case SHMESH_FLOAT64: memcpy(want, &d, 8); break;
        case SHMESH_FLOAT16: h = float_to_half(f); memcpy(want, &h, 2); break;
        case SHMESH_BFLOAT16: h = float_to_bf16(f); memcpy(want, &h, 2); break;
        default: memcpy(want, &u, esz); break; /* little-endian truncation wraps */
        }
        if (memcmp(want, (const unsigned char *)buf + i * esz, esz)) {
            printf("rank %d: world_sum %s element %zu of %zu wrong in iteration %d\n", rank,
                   shmesh_dtype_name((shmesh_dtype)dt), i, n, it);
            return -1;
        }
    }
    return 0;
}

static int mode_sum(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int dt = dtype_by_name(argv[2]);
    size_t n = (size_t)strtoull(argv[3], NULL, 10);
    int iters = atoi(argv[4]);
    size_t esz = shmesh_dtype_size((shmesh_dtype)dt);
    void *buf = malloc(n * esz + 1);
    for (int it = 0; it < iters; it++) {
        fill(dt, buf, n, rank, it);
        DO("shmesh_world_sum", shmesh_world_sum(ctx, buf, n, (shmesh_dtype)dt));
        if (check(dt, buf, n, it))
            return 4;
    }
    free(buf);
    printf("rank %d: sum %s count %zu x %d ok\n", rank, argv[2], n, iters);
    return 0;
}

static int mode_stress(int argc, char **argv)
{
    int iters = argc > 2 ? atoi(argv[2]) : 20000;
    double t0 = now_ms();
    for (int it = 0; it < iters; it++) {
        int rc = shmesh_barrier(ctx);
        if (rc)
            return attempt("shmesh_barrier", rc, t0) ? 3 : 0;
        int64_t v = rank + it;
        rc = shmesh_world_sum(ctx, &v, 1, SHMESH_INT64);
        if (rc)
            return attempt("shmesh_world_sum", rc, t0) ? 3 : 0;
        int64_t want = (int64_t)world * it + (int64_t)world * (world - 1) / 2;
        if (v != want) {
            printf("rank %d: iteration %d: sum %" PRId64 ", expected %" PRId64 "\n", rank, it, v,
                   want);
            return 4;
        }
    }
    printf("rank %d: stress %d iterations ok in %.0f ms (%s)\n", rank, iters, now_ms() - t0,
           shmesh_notifier(ctx));
    return 0;
}

/* Every rank learns every pid through a world sum. */
static int64_t *all_pids(void)
{
    int64_t *pids = calloc((size_t)world, sizeof *pids);
    pids[rank] = getpid();
    DO("shmesh_world_sum", shmesh_world_sum(ctx, pids, (size_t)world, SHMESH_INT64));
    return pids;
}

/* Rank 0 kills `victim` while the victim and the others wait in a barrier. */
static int mode_kill_in_barrier(int argc, char **argv)
{
    int victim = argc > 2 ? atoi(argv[2]) : 1;
    int64_t *pids = all_pids();
    if (rank == 0) {
        sleep_ms(300); /* everyone else is now blocked in the barrier */
        kill((pid_t)pids[victim], SIGKILL);
        sleep_ms(50);
    }
    free(pids);
    double t0 = now_ms();
    int rc = attempt("shmesh_barrier", shmesh_barrier(ctx), t0);
    if (rc) {
        /* Poisoned: later calls fail at once with the same code (50 of
         * them, timed together). */
        double t1 = now_ms();
        int again = rc;
        for (int i = 0; i < 50 && again == rc; i++)
            again = shmesh_barrier(ctx);
        report("shmesh_barrier (again, 50 times)", again, t1);
    }
    return rc ? 3 : 0;
}

static int mode_exit_after_barrier(int argc, char **argv)
{
    int who = atoi(argv[2]), code = atoi(argv[3]);
    free(all_pids()); /* a collective before the exit */
    if (rank == who)
        exit(code);
    printf("rank %d: sleeping, pid %d\n", rank, (int)getpid());
    fflush(stdout);
    sleep_ms(60000);
    return 0;
}

static int mode_abort(int argc, char **argv)
{
    int who = argc > 2 ? atoi(argv[2]) : 1;
    const char *why = argc > 3 ? argv[3] : "test abort";
    DO("shmesh_barrier", shmesh_barrier(ctx));
    if (rank == who) {
        sleep_ms(100);
        shmesh_abort(ctx, 7, why);
    }
    return attempt("shmesh_barrier", shmesh_barrier(ctx), now_ms()) ? 3 : 0;
}

/* Every rank leaves the job to its exit (shmesh_finalize_at_exit) and
 * returns from main without finalize; rank WHO first exits with CODE. */
static int mode_leave_at_exit(int argc, char **argv)
{
    int who = atoi(argv[2]), code = atoi(argv[3]);
    DO("shmesh_barrier", shmesh_barrier(ctx));
    DO("shmesh_finalize_at_exit", shmesh_finalize_at_exit(ctx, "rank_prog leaves"));
    if (rank == who)
        exit(code);
    if (who >= 0 && who < world) {
        sleep_ms(100); /* after WHO's exit */
        attempt("shmesh_barrier", shmesh_barrier(ctx), now_ms());
    }
    exit(0); /* the context is the exit's now: no shmesh_finalize */
}

static int mode_mismatch_op(void)
{
    int32_t v[4] = {1, 2, 3, 4};
    double t0 = now_ms();
    int rc = rank == 0 ? attempt("shmesh_barrier", shmesh_barrier(ctx), t0)
                       : attempt("shmesh_world_sum", shmesh_world_sum(ctx, v, 4, SHMESH_INT32), t0);
    return rc ? 3 : 0;
}

static int mode_mismatch_count(void)
{
    float v[4] = {1, 2, 3, 4};
    double t0 = now_ms();
    int rc = attempt("shmesh_world_sum",
                     shmesh_world_sum(ctx, v, rank == 1 ? 3 : 4, SHMESH_FLOAT32), t0);
    return rc ? 3 : 0;
}

static int mode_finalize_early(void)
{
    DO("shmesh_barrier", shmesh_barrier(ctx));
    double t0 = now_ms();
    if (rank == 1) {
        int rc = shmesh_finalize(ctx);
        ctx = NULL;
        attempt("shmesh_finalize", rc, t0);
        exit(rc ? 3 : 0);
    }
    return attempt("shmesh_barrier", shmesh_barrier(ctx), t0) ? 3 : 0;
}

static int mode_leave_early(void)
{
    DO("shmesh_barrier", shmesh_barrier(ctx));
    if (rank == 1)
        exit(0); /* no finalize */
    return attempt("shmesh_barrier", shmesh_barrier(ctx), now_ms()) ? 3 : 0;
}

/* Rank 1 leaves with _exit(0) while ranks 0 and 2 wait for it in a
 * barrier, having stopped the launcher first (SIGSTOP): ranks 0 and 2 see
 * it gone and record it before the launcher can, as they do when they
 * notice first, and rank 2 exits at once.  Rank 0 lets the launcher go on
 * (SIGCONT) a moment later, so that it finds the exits together. */
static int mode_leave_early_unseen(void)
{
    DO("shmesh_barrier", shmesh_barrier(ctx));
    if (rank == 1) {
        kill(getppid(), SIGSTOP);
        _exit(0);
    }
    int rc = attempt("shmesh_barrier", shmesh_barrier(ctx), now_ms());
    if (rank == 0) {
        sleep_ms(300);
        kill(getppid(), SIGCONT);
    }
    return rc ? 3 : 0;
}

static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static int mode_idle(int argc, char **argv)
{
    long ms = argc > 2 ? atol(argv[2]) : 3000;
    DO("shmesh_barrier", shmesh_barrier(ctx));
    if (rank == 1)
        sleep_ms(ms);
    double c0 = cpu_ms(), t0 = now_ms();
    DO("shmesh_barrier", shmesh_barrier(ctx));
    double cpu = cpu_ms() - c0, wall = now_ms() - t0;
    if (rank != 1)
        printf("rank %d: idle wait %.0f ms wall, %.1f ms cpu (%.2f%% of a core, %s)\n", rank, wall,
               cpu, 100.0 * cpu / wall, shmesh_notifier(ctx));
    return 0;
}

static int mode_bad_args(void)
{
    int32_t v[2] = {rank, 1};
    unsigned char b[2] = {1, 0};
    double t0 = now_ms();
    attempt("shmesh_world_sum(bool)", shmesh_world_sum(ctx, b, 2, SHMESH_BOOL), t0);
    attempt("shmesh_world_sum(NULL)", shmesh_world_sum(ctx, NULL, 2, SHMESH_INT32), t0);
    /* Refused arguments touch no shared state and are no call: one rank
     * alone may make one, and the job goes on. */
    if (rank == 0)
        attempt("shmesh_world_sum(dtype 99)", shmesh_world_sum(ctx, v, 2, (shmesh_dtype)99), t0);
    DO("shmesh_world_sum", shmesh_world_sum(ctx, v, 2, SHMESH_INT32));
    if (v[0] != world * (world - 1) / 2 || v[1] != world)
        return 4;
    DO("shmesh_world_sum(count 0)", shmesh_world_sum(ctx, NULL, 0, SHMESH_FLOAT32));
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE [ARGS]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    double t0 = now_ms();
    cpu_set_t before, after; /* "placement": shmesh_init leaves the rank as free as it was */
    sched_getaffinity(0, sizeof before, &before);
    int rc = shmesh_init(&ctx);
    if (rc) {
        printf("rank ?: shmesh_init -> %s (%.0f ms): %s\n", shmesh_error_name(rc), now_ms() - t0,
               shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);

    if (!strcmp(mode, "info")) {
        printf("rank %d of %d: notifier %s, segment %s, LOCAL_RANK %s\n", rank, world,
               shmesh_notifier(ctx), getenv("SHMESH_SEGMENT") ? getenv("SHMESH_SEGMENT") : "-",
               getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "-");
        rc = 0;
    } else if (!strcmp(mode, "placement")) {
        sched_getaffinity(0, sizeof after, &after);
        printf("rank %d start %s: %s\n", rank,
               getenv("SHMESH_START_CPU") ? getenv("SHMESH_START_CPU") : "unset",
               CPU_EQUAL(&before, &after) ? "as free as before" : "its CPUs changed");
        rc = 0;
    } else if (!strcmp(mode, "sum"))
        rc = mode_sum(argc, argv);
    else if (!strcmp(mode, "stress"))
        rc = mode_stress(argc, argv);
    else if (!strcmp(mode, "kill-in-barrier"))
        rc = mode_kill_in_barrier(argc, argv);
    else if (!strcmp(mode, "exit-after-barrier") && argc > 3)
        rc = mode_exit_after_barrier(argc, argv);
    else if (!strcmp(mode, "abort"))
        rc = mode_abort(argc, argv);
    else if (!strcmp(mode, "leave-at-exit") && argc > 3)
        rc = mode_leave_at_exit(argc, argv);
    else if (!strcmp(mode, "mismatch-op"))
        rc = mode_mismatch_op();
    else if (!strcmp(mode, "mismatch-count"))
        rc = mode_mismatch_count();
    else if (!strcmp(mode, "finalize-early"))
        rc = mode_finalize_early();
    else if (!strcmp(mode, "leave-early"))
        rc = mode_leave_early();
    else if (!strcmp(mode, "leave-early-unseen"))
        rc = mode_leave_early_unseen();
    else if (!strcmp(mode, "idle"))
        rc = mode_idle(argc, argv);
    else if (!strcmp(mode, "bad-args"))
        rc = mode_bad_args();
    else if (!strcmp(mode, "sleep")) {
        printf("rank %d: sleeping, pid %d\n", rank, (int)getpid());
        sleep_ms(60000);
        rc = 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    if (rc)
        return rc; /* a failed job exits without finalize: the launcher stops the rest */
    t0 = now_ms();
    rc = shmesh_finalize(ctx);
    if (rc) {
        printf("rank %d: shmesh_finalize -> %s: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 3;
    }
    return 0;
}
