/* Meshes and groups, shared by the collectives. */
#ifndef SHMESH_MESH_MESH_H
#define SHMESH_MESH_MESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/group.h"
#include "shmesh.h"

/* Named axes, resolved: mesh dimensions in the order given (their text is
 * mesh_axes_text's). */
struct axes {
    int n;
    int dim[SHMESH_MAX_MESH_DIMS];
    int size; /* product of their sizes: the group size */
};

struct shmesh_mesh {
    shmesh_ctx *ctx; /* NULL for an abstract mesh */
    bool abstract;
    /* Collectives on it run inside this process (a local mesh): nothing is
     * exchanged with other ranks. */
    bool process_local;
    int id;
    int ndim;
    char names[SHMESH_MAX_MESH_DIMS][SHMESH_MAX_AXIS_NAME + 1];
    int sizes[SHMESH_MAX_MESH_DIMS];
    int size;  /* devices: the product of sizes */
    uint64_t hash; /* shmesh_mesh_hash: names, shape, device order */
    /* Concrete meshes.  Mesh position (row-major) -> the device there: its
     * id, rank and local device index (mesh/device.h). */
    int *ids, *pos_rank, *pos_local;
    /* This rank's devices in the mesh: how many, and their positions in
     * mesh order (the order collectives take their buffers in). */
    int nlocal;
    int *local_pos;
    /* A batched mesh (shmesh_mesh_batch): its last dimension, of size
     * `batch`, lives inside each device's arrays (lib/batch/batch.h).  The
     * engine sees every position as a device of its own: ids count
     * positions (device id * batch + k), a rank holds `per` of them (its
     * devices times batch), and nlocal, local_pos and pos_local count
     * positions too.  Without one: batch_dim -1, batch 1, per the
     * context's devices per rank. */
    int batch_dim;
    int batch;
    int per;
    /* mesh_axes_in_rank's last question (a bit set of dimensions, 0 for
     * none yet) and its answer. */
    uint32_t in_rank_key;
    bool in_rank;
    /* The device a collective is being prepared for (mesh_select): its
     * coordinates. */
    int cur;
    int coords[SHMESH_MAX_MESH_DIMS];
    /* The last axes string resolved, and its group (calls mostly repeat). */
    char last_spec[64];
    struct axes last_axes;
    int last_index;  /* this device's index in axis_group for last_axes */
    bool last_valid;
    /* Scratch, size entries each. */
    int *axis_group; /* the group over some axes, by axis index */
    int *sub;        /* this device's subgroup, by position */
    int *seen;
};

/* Whether a call on m runs as a call per local device of this rank
 * (front/local_devices.c): several devices here, or a local mesh. */
static inline bool mesh_calls_per_device(const shmesh_mesh *m)
{
    return m && !m->abstract && (m->nlocal != 1 || m->process_local);
}

/* Records why a mesh function failed: in the mesh's context, or for an
 * abstract mesh (or NULL) on the calling thread (shmesh_last_error(NULL)).
 * Returns SHMESH_ERR_INVALID. */
int mesh_fail(const shmesh_mesh *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The coordinates of mesh position `pos` (row-major), into coords[ndim]. */
void mesh_coords(const shmesh_mesh *m, int pos, int *coords);
/* 0 for a concrete mesh; SHMESH_ERR_INVALID for NULL or an abstract mesh,
 * explained as "fn: ... is abstract (names and sizes only) and has no
 * <what>". */
int mesh_concrete(const shmesh_mesh *m, const char *fn, const char *what);
/* 0 for a mesh without a batched axis; SHMESH_ERR_INVALID explaining that
 * fn's `what` is not built on batched meshes. */
int mesh_unbatched(const shmesh_mesh *m, const char *fn, const char *what);
/* Explains on this thread that fn was given a NULL mesh with none pushed;
 * returns SHMESH_ERR_INVALID. */
int mesh_none_pushed(const char *fn);
/* The mesh a call was given, or the innermost pushed one when NULL; NULL
 * (and mesh_fail explaining, naming fn) when there is none. */
shmesh_mesh *mesh_or_current(shmesh_mesh *m, const char *fn);
/* The sub-block [lo[d], hi[d]] of m's positions, as a mesh of the same
 * context (its devices row-major); NULL when out of memory. */
shmesh_mesh *mesh_block(const shmesh_mesh *m, const int *lo, const int *hi);
/* Prepares collectives for this rank's local device `l` of the mesh
 * (0..nlocal-1): the coordinates group resolution uses. */
void mesh_select(shmesh_mesh *m, int l);

/* The mesh of m's axes and a batched axis `name` of size `batch` (the
 * last dimension), into *out; the names and sizes follow every mesh's
 * rules (else SHMESH_ERR_INVALID explained as fn's). */
int mesh_batched(const shmesh_mesh *m, const char *fn, const char *name, int batch,
                 shmesh_mesh **out);

/* Parses "x,y"; an unknown or repeated name is SHMESH_ERR_INVALID naming it. */
int mesh_axes(shmesh_mesh *m, const char *op, const char *spec, struct axes *a);
/* The canonical text of `a`: its names, in order, joined by commas; every
 * name in full when len >= SHMESH_MAX_MESH_DIMS * (SHMESH_MAX_AXIS_NAME + 1). */
void mesh_axes_text(const shmesh_mesh *m, const struct axes *a, char *buf, size_t len);
/* Whether every group over the named mesh dimensions dims[0..n) lies in
 * one rank: moving along them never leaves a rank's devices.  The same
 * answer on every rank (it is the mesh's, not this rank's). */
bool mesh_axes_in_rank(shmesh_mesh *m, int n, const uint8_t *dims);
/* Every group over the named mesh dimensions dims[0..n), without
 * axis_index_groups: into ids (m->size entries), group after group (by the
 * unnamed dimensions' coordinates, row-major), each group's device ids by
 * axis index (the order in which a collective combines them).  Returns the
 * group size.  The same answer on every rank (it is the mesh's). */
int mesh_groups_all(const shmesh_mesh *m, int n, const uint8_t *dims, int *ids);
/* The index over `a` of the device (position) at mesh position pos. */
int mesh_index_at(const shmesh_mesh *m, const struct axes *a, int pos);
/* Fills ids[0..a->size) with the device ids of the group over `a`, by axis
 * index; returns this device's axis index. */
int mesh_axis_group(const shmesh_mesh *m, const struct axes *a, int *ids);
/* The (sub)group this device runs `op` in, after validating axis_index_groups
 * (`equal_sizes`: all subgroups the same size): g->ranks holds the members'
 * device ids (call_group turns them into ranks and local devices).
 * *groups_hash identifies the subgrouping for call descriptions (0 without
 * one). */
int mesh_group(shmesh_mesh *m, const char *op, const struct axes *a, const shmesh_groups *gs,
               bool equal_sizes, struct group *g, uint64_t *groups_hash);

#endif
