/* The mesh layer's part of the context (core/context.h). */
#ifndef SHMESH_MESH_STATE_H
#define SHMESH_MESH_STATE_H

#include "core/context.h"
#include "paths/state.h"

struct mesh_state {
    int next_mesh_id;
};

/* After the paths' part. */
#define MESH_STATE_AT CTX_STATE_AFTER(PATHS_STATE_AT, struct paths_state, struct mesh_state)

static inline struct mesh_state *mesh_of(const shmesh_ctx *c) { return CTX_STATE(c, MESH_STATE_AT); }

#endif
