/* Meshes and groups, shared by the collectives. */
#ifndef SHMESH_MESH_MESH_H
#define SHMESH_MESH_MESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mesh/group.h"
#include "shmesh.h"

/* Named axes, resolved: mesh dimensions in the order given (their text is
 * mesh_axes_text's). */
struct axes {
    int n;
    int dim[SHMESH_MAX_MESH_DIMS];
    int size; /* product of their sizes: the group size */
};

struct shmesh_mesh {
    shmesh_ctx *ctx;
    int id;
    int ndim;
    char names[SHMESH_MAX_MESH_DIMS][SHMESH_MAX_AXIS_NAME + 1];
    int sizes[SHMESH_MAX_MESH_DIMS];
    int coords[SHMESH_MAX_MESH_DIMS]; /* this device's */
    /* Mesh position (row-major) -> the device there: its rank and local
     * device index (mesh/device.h). */
    int *pos_rank, *pos_local;
    /* The last axes string resolved, and its group (calls mostly repeat). */
    char last_spec[64];
    struct axes last_axes;
    int last_index;  /* this device's index in axis_group for last_axes */
    bool last_valid;
    /* Scratch, world entries each. */
    int *axis_group; /* the group over some axes, by axis index */
    int *sub;        /* this device's subgroup, by position */
    int *seen;
};


/* Parses "x,y"; an unknown or repeated name is SHMESH_ERR_INVALID naming it. */
int mesh_axes(shmesh_mesh *m, const char *op, const char *spec, struct axes *a);
/* The canonical text of `a`: its names, in order, joined by commas; every
 * name in full when len >= SHMESH_MAX_MESH_DIMS * (SHMESH_MAX_AXIS_NAME + 1). */
void mesh_axes_text(const shmesh_mesh *m, const struct axes *a, char *buf, size_t len);
/* Fills ranks[0..a->size) with the ranks of the group over `a`, by axis
 * index; returns this device's axis index. */
int mesh_axis_group(const shmesh_mesh *m, const struct axes *a, int *ranks);
/* The (sub)group this device runs `op` in, after validating axis_index_groups
 * (`equal_sizes`: all subgroups the same size).  *groups_hash identifies the
 * subgrouping for call descriptions (0 without one). */
int mesh_group(shmesh_mesh *m, const char *op, const struct axes *a, const shmesh_groups *gs,
               bool equal_sizes, struct group *g, uint64_t *groups_hash);

#endif
