/* Element-wise reductions over several sources, always combined in source
 * order, so every rank computes the bitwise-identical result. */
#ifndef SHMESH_KERNELS_REDUCE_H
#define SHMESH_KERNELS_REDUCE_H

#include <stddef.h>

#include "shmesh.h"

enum red_op { RED_SUM, RED_MAX, RED_MIN, RED_MEAN, RED_ARGMAX, RED_ARGMIN };

/* dst = src[0] op src[1] op ... op src[nsrc-1], element-wise, n elements.
 * in_dt: the sources' dtype; out_dt: dst's (it differs for bool sums, means
 * of integers, and arg reductions, which write int32 indices 0..nsrc-1 or
 * INT32_MAX).  `mean_n` divides for RED_MEAN.  dst must not overlap a
 * source. */
void reduce_run(enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt, void *dst,
                const void *const *src, int nsrc, size_t n, int mean_n);
/* The sum alone, dst and sources of one dtype (bool sums bytes). */
void reduce_sum(shmesh_dtype dt, void *dst, const void *const *src, int nsrc, size_t n);

#endif
