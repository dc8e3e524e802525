/* The mesh layer's part of the context (core/context.h). */
#ifndef SHMESH_MESH_STATE_H
#define SHMESH_MESH_STATE_H

#include <stddef.h>

#include "core/context.h"
#include "paths/state.h"

struct mesh_state {
    int next_mesh_id;
    /* Several devices per rank (mesh/local_devices.c): the gathered inputs
     * of the last such call, kept for the next (calls mostly repeat). */
    unsigned char *dev_buf;
    size_t dev_buf_bytes;
};

/* After the paths' part. */
#define MESH_STATE_AT CTX_STATE_AFTER(PATHS_STATE_AT, struct paths_state, struct mesh_state)

static inline struct mesh_state *mesh_of(const shmesh_ctx *c) { return CTX_STATE(c, MESH_STATE_AT); }

#endif
