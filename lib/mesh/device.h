/* Devices.  A device is (process, local device): rank r holds
 * local_devices of them, and device ids count them rank by rank,
 * id = r * local_devices + local (shmesh-run --devices-per-rank). */
#ifndef SHMESH_MESH_DEVICE_H
#define SHMESH_MESH_DEVICE_H

#include "shmesh.h"

struct device {
    int rank;
    int local;
};

/* Devices in the job. */
int device_count(const shmesh_ctx *c);
/* Device `id` (0..device_count-1). */
struct device device_of(const shmesh_ctx *c, int id);

#endif
