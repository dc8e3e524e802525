/* Groups: the devices a collective runs among, as this device sees them. */
#ifndef SHMESH_ENGINE_GROUP_H
#define SHMESH_ENGINE_GROUP_H

/* Members by position (group index).  Each is a device: a rank and its
 * local device index there (mesh/device.h). */
struct group {
    int n;
    int me; /* this device's position */
    const int *ranks;
    const int *locals;
};

#endif
