/* The front door's part of the context (core/context.h): the last of the
 * context's block (front/init.c, CTX_BYTES). */
#ifndef SHMESH_FRONT_STATE_H
#define SHMESH_FRONT_STATE_H

#include <stddef.h>

#include "core/context.h"
#include "effects/state.h"
#include "shm/op_numbers.h"

struct plan;

struct front_state {
    /* Several devices per rank (front/local_devices.c): the gathered inputs
     * of the last such call, kept for the next (calls mostly repeat). */
    unsigned char *dev_buf;
    size_t dev_buf_bytes;
    /* Each op's plan (front/plan.h), or NULL. */
    struct plan *plans[OP_COUNT];
};

/* After the effects' part. */
#define FRONT_STATE_AT CTX_STATE_AFTER(EFFECTS_STATE_AT, struct effects_state, struct front_state)

static inline struct front_state *front_of(const shmesh_ctx *c) { return CTX_STATE(c, FRONT_STATE_AT); }

#endif
