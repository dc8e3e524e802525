/* Device ids and the (rank, local device) they name. */
#include "core/context.h"
#include "mesh/device.h"

int device_count(const shmesh_ctx *c) { return c->world * c->local_devices; }

struct device device_of(const shmesh_ctx *c, int id)
{
    return (struct device){id / c->local_devices, id % c->local_devices};
}
