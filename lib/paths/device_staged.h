/* Device staged: host staging of device buffers, for every device call the
 * device path (paths/device_ipc.h) does not take: the call runs on the host
 * paths over host copies of its device buffers. */
#ifndef SHMESH_PATHS_DEVICE_STAGED_H
#define SHMESH_PATHS_DEVICE_STAGED_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_device_staged;

#endif
