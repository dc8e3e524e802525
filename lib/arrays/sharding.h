/* Partition specs and named shardings (jax.sharding.PartitionSpec,
 * NamedSharding): a mesh and, per array dimension, the mesh axes that
 * split it. */
#ifndef SHMESH_ARRAYS_SHARDING_H
#define SHMESH_ARRAYS_SHARDING_H

#include "mesh/mesh.h"
#include "shmesh.h"

struct shmesh_sharding {
    shmesh_mesh *mesh; /* borrowed */
    shmesh_pspec spec; /* the caller's, copied */
    /* spec.entry[i]'s axes resolved once, at creation: mesh dimensions in
     * the spec's order (the first varies slowest), and the product of their
     * sizes, the number of ways the dimension is split. */
    struct axes entry[SHMESH_MAX_NDIM];
};

#endif
