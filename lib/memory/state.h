/* The memory layer's part of the context (core/context.h): the segment's
 * heap and the registered memory backends. */
#ifndef SHMESH_MEMORY_STATE_H
#define SHMESH_MEMORY_STATE_H

#include "core/context.h"
#include "memory/heap.h"
#include "memory/kind.h"

struct memory_state {
    struct heap heap;
    struct mem_backends backends;
};

/* First after the core's part. */
#define MEMORY_STATE_AT CTX_STATE_AFTER(0, struct shmesh_ctx, struct memory_state)

static inline struct memory_state *memory_of(const shmesh_ctx *c) { return CTX_STATE(c, MEMORY_STATE_AT); }

#endif
