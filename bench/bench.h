/* What the bench programs built with the project share: the clock, a
 * failure that ends the job, and the median of their rounds. */
#ifndef SHMESH_BENCH_BENCH_H
#define SHMESH_BENCH_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "shmesh.h"

/* CLOCK_MONOTONIC in microseconds. */
static inline double bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Says on stderr which call of program `prog` failed on this rank, with
 * the error and its explanation (the context's, else the thread's), and
 * ends the job.  Typed int so that a function can return it. */
static inline SHMESH_NORETURN int bench_fail(const char *prog, shmesh_ctx *ctx, const char *what,
                                             int rc)
{
    const char *why = shmesh_last_error(ctx);
    fprintf(stderr, "%s: rank %d: %s: %s: %s\n", prog, shmesh_rank(ctx), what,
            shmesh_strerror(rc), why && *why ? why : shmesh_last_error(NULL));
    char said[128];
    snprintf(said, sizeof said, "%s failed", prog);
    shmesh_abort(ctx, 1, said);
}

/* An argument error (msg), or the help (msg NULL): said once, by rank 0,
 * as "prog: msg" and then `text`; the context is finalized.  Returns what
 * the program exits with: 2 after an error, 0 after the help. */
static inline int bench_usage(shmesh_ctx *ctx, const char *prog, const char *msg,
                              const char *text)
{
    FILE *f = msg ? stderr : stdout;
    if (shmesh_rank(ctx) == 0) {
        if (msg)
            fprintf(f, "%s: %s\n", prog, msg);
        fputs(text, f);
        fflush(f);
    }
    shmesh_finalize(ctx);
    return msg ? 2 : 0;
}

/* In main, where `ctx` and the program's usage(ctx, msg) are in scope: the
 * argument error, formatted, and the return from main. */
#define BENCH_BAD_ARG(...)                                                                     \
    do {                                                                                       \
        char msg_[256];                                                                        \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                              \
        return usage(ctx, msg_);                                                               \
    } while (0)

#define BENCH_STR_(x) #x
#define BENCH_STR(x) BENCH_STR_(x)

/* The median of n doubles, sorted in place (median_cmp orders them). */
static inline int median_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, median_cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
