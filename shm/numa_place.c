#include "numa_place.h"

#include <errno.h>

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
