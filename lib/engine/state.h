/* The engine's part of the context (core/context.h): the calls in flight,
 * their windows and scratch, the dispatcher. */
#ifndef SHMESH_ENGINE_STATE_H
#define SHMESH_ENGINE_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/context.h"
#include "engine/path.h"
#include "engine/window.h"
#include "memory/state.h"

struct call;
struct call_scratch;
struct dispatcher;

/* Dispatched calls' blocks kept: a blocking call behind a few queued
 * `_async` ones (each 1.3 KB, past glibc's per-thread cache) allocates
 * nothing. */
#define ENGINE_SPARE_WORKS 8

struct engine_state {
    /* The dispatcher (engine/dispatch.c): NULL until the first async
     * dispatch. */
    struct dispatcher *dispatcher;
    uint64_t calls;       /* calls submitted; the last one's number */
    struct windows win;   /* this rank's slot buffers */
    /* Calls submitted and not finished, in order; the first is the one
     * moving through the segment. */
    struct call *queue_head, *queue_tail;
    struct call_scratch *spare; /* scratch of finished calls, for the next */
    atomic_flag spare_lock;     /* with a dispatcher (engine/call.c) */
    /* Dispatched calls' blocks, kept for the next dispatches (engine/call.c):
     * taken by exchange and given back by compare-and-swap, from either
     * thread. */
    _Atomic(void *) spare_work[ENGINE_SPARE_WORKS];
    /* Someone blocks until a call is done (call_wait): a window not there
     * yet is spun for in place rather than returned as a wait. */
    bool blocking;
    /* This rank may read every peer's memory: paths/single_copy.c finds out
     * at init, the handshake (engine/path.c) tells the peers. */
    bool cma_ok;
    /* The most members a call's group may have: every device of the job,
     * or every position of the largest batched mesh made (batch/axis.c
     * raises it); calls' scratch is sized for it. */
    int scratch_members;
    unsigned kinds_taken;       /* memory kinds some path takes (engine/path.h) */
    int64_t dispatch_poll_ns;   /* SHMESH_DISPATCH_POLL_NS (engine/dispatch.c) */
    uint64_t eager_max;         /* SHMESH_EAGER_MAX (engine/window.h) */
    struct path_memo path_memo; /* the last exchange's candidates (engine/path.c) */
};

/* After the memory layer's part. */
#define ENGINE_STATE_AT CTX_STATE_AFTER(MEMORY_STATE_AT, struct memory_state, struct engine_state)

static inline struct engine_state *engine_of(const shmesh_ctx *c) { return CTX_STATE(c, ENGINE_STATE_AT); }

#endif
