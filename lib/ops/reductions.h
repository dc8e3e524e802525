/* The reductions' zero-copy and single-copy algorithms, shared by the mesh
 * reductions and world_sum. */
#ifndef SHMESH_OPS_REDUCTIONS_H
#define SHMESH_OPS_REDUCTIONS_H

#include <stdint.h>

#include "engine/exchange.h"
#include "kernels/reduce.h"

/* Zero copy: this member reduces its share of the elements from every
 * member's input and writes it into every member's output. */
void direct_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
                   uint64_t count, int mean_n, unsigned char *const *in, unsigned char *const *out);
/* Single copy (process_vm_readv). */
int cma_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
               uint64_t count, int mean_n, const unsigned char *in, unsigned char *out,
               const uint64_t *in_addr, const uint64_t *out_addr);

#endif
