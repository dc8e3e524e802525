/* NUMA placement of each rank's data region (libnuma when built with it). */
#ifndef SHMESH_SHM_NUMA_PLACE_H
#define SHMESH_SHM_NUMA_PLACE_H

#include <stddef.h>

/* Nodes with memory that libnuma reports; 0 when built without libnuma or
 * when the kernel has no NUMA support. */
int numa_place_nodes(void);

/* Ranks are spread over nodes in contiguous blocks, so neighbouring ranks
 * (which talk most in rings and meshes) share a node. */
int numa_place_node_of_rank(int rank, int world, int nnodes);

/* Prefers `node` for the pages of [addr, addr+len) not yet allocated.  The
 * range must be page-aligned.  Returns 0 or -errno. */
int numa_place_bind(void *addr, size_t len, int node);

/* Runs the calling process on `node`'s CPUs (launcher children, before exec). */
int numa_place_run_on(int node);

#endif
