/* Groups: the devices a collective runs among, as this device sees them. */
#ifndef SHMESH_MESH_GROUP_H
#define SHMESH_MESH_GROUP_H

/* Members by position (group index); each is a device: a rank and its local
 * device index (always 0 while a process holds one device). */
struct group {
    int n;
    int me; /* this device's position */
    const int *ranks;
};

#endif
