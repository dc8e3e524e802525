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
