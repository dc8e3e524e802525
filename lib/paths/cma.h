/* Single copy: reading straight out of another rank's private memory
 * (process_vm_readv), where the kernel allows it. */
#ifndef SHMESH_PATHS_CMA_H
#define SHMESH_PATHS_CMA_H

#include <stdint.h>

#include "kernels/box.h"
#include "shmesh.h"

void cma_publish(shmesh_ctx *c); /* before joining */
void cma_probe(shmesh_ctx *c);   /* after every rank joined */
/* `len` bytes at address `addr` of rank r into dst.  A failure poisons the
 * context and tells the job (its peers would otherwise wait for it). */
int cma_read(shmesh_ctx *c, int r, uint64_t addr, void *dst, uint64_t len);
/* Elements [first, first+count) of block `b` of the array at `addr` in rank
 * r, packed into dst. */
int cma_read_box(shmesh_ctx *c, int r, uint64_t addr, const struct box *b, uint64_t first,
                 uint64_t count, void *dst);

#endif
