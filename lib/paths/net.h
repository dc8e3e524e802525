/* Across nodes: a call whose group spans nodes (k->net, net/job.h), its
 * transfers carried over MPI by the network plugin.  Only such calls, and
 * every one of them (device buffers staged to host first). */
#ifndef SHMESH_PATHS_NET_H
#define SHMESH_PATHS_NET_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_net;

#endif
