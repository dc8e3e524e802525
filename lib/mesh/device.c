/* Device ids and the (rank, local device) they name. */
#include "core/context.h"
#include "mesh/device.h"

int device_count(const shmesh_ctx *c) { return c->job_size * c->local_devices; }

struct device device_of(const shmesh_ctx *c, int id)
{
    return (struct device){id / c->local_devices, id % c->local_devices};
}

int shmesh_local_device_count(const shmesh_ctx *c) { return c ? c->local_devices : 0; }

int shmesh_device_count(const shmesh_ctx *c) { return c ? device_count(c) : 0; }

int shmesh_device_id(const shmesh_ctx *c, int local)
{
    if (!c || local < 0 || local >= c->local_devices)
        return -1;
    return c->job_rank * c->local_devices + local;
}

int shmesh_device_process(const shmesh_ctx *c, int id)
{
    if (!c || id < 0 || id >= device_count(c))
        return -1;
    return device_of(c, id).rank;
}
