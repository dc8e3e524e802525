/* The paths' part of the context (core/context.h): the thresholds that
 * choose among them and what single copy set up. */
#ifndef SHMESH_PATHS_STATE_H
#define SHMESH_PATHS_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/context.h"
#include "engine/state.h"

struct paths_state {
    /* SHMESH_ZC_MIN, _CMA_MIN, _CMA_BCAST_REDUCE_MIN, _RSAG_MIN,
     * _DEVICE_TWO_SHOT_MIN: each read by its path alone (ranks agree on
     * them: core's tuning hash). */
    uint64_t zc_min, cma_min, cma_bcast_reduce_min, rsag_min, device_two_shot_min;
    /* SHMESH_NET_HIERARCHICAL: whole-array reductions across nodes reduce
     * inside each node first (paths/net.c). */
    bool net_hierarchical;
    uint64_t probe_word;  /* what peers read to prove single copy works (single_copy.c) */
    int ptracer;          /* the pid PR_SET_PTRACER names, 0 when not lifted */
};

/* After the engine's part. */
#define PATHS_STATE_AT CTX_STATE_AFTER(ENGINE_STATE_AT, struct engine_state, struct paths_state)

static inline struct paths_state *paths_of(const shmesh_ctx *c) { return CTX_STATE(c, PATHS_STATE_AT); }

#endif
