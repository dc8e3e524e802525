/* The staged reduction for large arrays: reduce-scatter, then all-gather. */
#ifndef SHMESH_PATHS_RSAG_H
#define SHMESH_PATHS_RSAG_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/reduce.h"
#include "mesh/group.h"
#include "ops/op.h"

/* `in` may be `out` when the dtypes have the same size. */
int rsag_run(shmesh_ctx *c, const struct group *g, const struct call_desc *desc, enum red_op op,
             shmesh_dtype in_dt, shmesh_dtype out_dt, const unsigned char *in, unsigned char *out,
             uint64_t count, int mean_n);
/* Which staged reduction a call of `bytes` among `n` members uses. */
bool use_rsag(const shmesh_ctx *c, uint64_t bytes, int n);

#endif
