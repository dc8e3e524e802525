/* The effects layer's part of the context (core/context.h). */
#ifndef SHMESH_EFFECTS_STATE_H
#define SHMESH_EFFECTS_STATE_H

#include <stdint.h>

#include "core/context.h"
#include "mesh/state.h"

struct effects_state {
    /* Effects (effects/effect.c), by id. */
    struct shmesh_effect *effects[SHMESH_MAX_EFFECTS];
    int neffects;
    /* Callbacks without an effect that were placed collectively: their
     * program points (their segment word is the last effect slot). */
    uint64_t plain_points;
};

/* After the mesh layer's part. */
#define EFFECTS_STATE_AT CTX_STATE_AFTER(MESH_STATE_AT, struct mesh_state, struct effects_state)

static inline struct effects_state *effects_of(const shmesh_ctx *c) { return CTX_STATE(c, EFFECTS_STATE_AT); }

#endif
