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

/* The start CPU of an unpinned rank (shmesh-run's default placement): the
 * (rank mod n)-th of the n CPUs the calling thread may run on, or -1 when
 * it may run on one only (or its mask cannot be read). */
int numa_place_start_cpu(int rank);

/* Moves the calling thread onto `cpu` now, then lets it run wherever it
 * could before: it starts there, and the scheduler may move it later.
 * Ranks forked from one parent otherwise sometimes start on one CPU
 * and take turns on it until the scheduler spreads them, tens of
 * milliseconds later (docs/performance.md).  Returns the CPU it ran on
 * while held there (cpu), or -errno: -EINVAL when `cpu` is not one it may
 * run on (nothing changes). */
int numa_place_start_on(int cpu);

#endif
