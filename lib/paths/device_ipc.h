/* Device IPC: every member's buffers are device memory, moved device to
 * device through the runtime's IPC handles (device/gpu.h). */
#ifndef SHMESH_PATHS_DEVICE_IPC_H
#define SHMESH_PATHS_DEVICE_IPC_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_device_ipc;

#endif
