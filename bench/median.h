/* The median of n doubles (sorted in place), for the bench programs built
 * with the project. */
#ifndef SHMESH_BENCH_MEDIAN_H
#define SHMESH_BENCH_MEDIAN_H

#include <stdlib.h>

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
