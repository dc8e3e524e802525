#include "numa_place.h"

#include <errno.h>
#include <sched.h>

#include "shmesh_config.h"

#if SHMESH_HAVE_NUMA
#include <numa.h>
#include <numaif.h>

int numa_place_nodes(void)
{
    if (numa_available() < 0)
        return 0;
    return numa_num_configured_nodes();
}

int numa_place_bind(void *addr, size_t len, int node)
{
    unsigned long mask[16] = {0};
    if (node < 0 || node >= (int)(sizeof mask * 8))
        return -EINVAL;
    mask[node / (8 * sizeof mask[0])] |= 1ul << (node % (8 * sizeof mask[0]));
    /* Preferred, not bound: a full node falls back instead of failing. */
    if (mbind(addr, len, MPOL_PREFERRED, mask, sizeof mask * 8, 0) < 0)
        return -errno;
    return 0;
}

int numa_place_run_on(int node)
{
    if (numa_available() < 0)
        return -ENOSYS;
    return numa_run_on_node(node) < 0 ? -errno : 0;
}
#else
int numa_place_nodes(void) { return 0; }
int numa_place_bind(void *addr, size_t len, int node) { return -ENOSYS; }
int numa_place_run_on(int node) { return -ENOSYS; }
#endif

int numa_place_node_of_rank(int rank, int world, int nnodes)
{
    if (nnodes < 1 || world < 1)
        return 0;
    return (int)((long long)rank * nnodes / world);
}

int numa_place_start_cpu(int rank)
{
    cpu_set_t set;
    if (rank < 0 || sched_getaffinity(0, sizeof set, &set) < 0)
        return -1;
    int n = CPU_COUNT(&set);
    if (n < 2)
        return -1;
    for (int cpu = 0, i = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set) && i++ == rank % n)
            return cpu;
    return -1;
}

int numa_place_start_on(int cpu)
{
    cpu_set_t was, one;
    if (sched_getaffinity(0, sizeof was, &was) < 0)
        return -errno;
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &was))
        return -EINVAL;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    /* The kernel moves the thread before this returns. */
    if (sched_setaffinity(0, sizeof one, &one) < 0)
        return -errno;
    int ran = sched_getcpu();
    if (sched_setaffinity(0, sizeof was, &was) < 0)
        return -errno; /* not reached: the mask it had is allowed */
    return ran < 0 ? -errno : ran;
}
