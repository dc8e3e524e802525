/* The context: one rank's membership of a job. */
#ifndef SHMESH_CORE_CONTEXT_H
#define SHMESH_CORE_CONTEXT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/settings.h"
#include "shm/segment.h"
#include "shm/wait.h"
#include "shmesh.h"

/* ctx->busy in a fork child: no thread of this process may use it. */
#define CTX_BUSY_FORKED (-1)

struct tracer;
struct device_layer;

/* The context is one block: this struct, the core's part, then each layer's
 * own state in the order of the layers (memory, engine, paths, mesh,
 * effects), each at a fixed offset after the state of the layer below it.
 * A layer reaches its part with its X_of(c) (memory/state.h,
 * engine/state.h, ...), which names only the sizes of the layers below it:
 * no header names a layer above it, and reaching a layer's state costs no
 * load.  front/init.c, the composition root, allocates the block
 * (CTX_BYTES) and starts each layer.  Layers whose state exists only while
 * they are on (the tracer, the GPU runtime) are pointers to their own
 * struct here, NULL when off. */
struct shmesh_ctx {
    int rank;  /* on this node's segment: what shared memory is addressed by */
    int world; /* the segment's ranks */
    /* The job's: MPI's rank and size in a job of several nodes (c->job,
     * net/job.h); else rank and world.  Device ids and the public API
     * count in them. */
    int job_rank, job_size;
    struct job *job; /* NULL for a job of one node */
    const int *job_of_seg; /* by the node's rank: its rank in the job (NULL: the same) */
    int pid;              /* the process that made it: a fork child's copy is refused */
    int local_devices; /* devices this rank holds (mesh/device.h) */
    struct seg *seg;
    struct notify *notify;
    struct seg_waiter waiter;
    struct seg_ctrl *me;
    _Atomic int poison;   /* 0, or the error every later call returns */
    /* The sentence of the poison, kept for the tokens that fail with it. */
    char poison_err[CTX_ERR_MAX];
    _Atomic bool poison_said;
    /* What the dispatcher's thread (engine/dispatch.c) says of a failure
     * (core/error.c: each thread explains into its own buffer). */
    char worker_err[CTX_ERR_MAX];
    int *all_ranks;       /* 0..world-1 */
    /* Every rank's pid, read from the segment once, when all had joined:
     * what single copy reads from and the notifier watches, whatever is
     * written into the segment later. */
    int *pids;
    /* The thread inside the library with this context (its tid), 0 when
     * none: a second thread entering meanwhile is refused (core/fail.c).
     * CTX_BUSY_FORKED in a fork child's copy: every call is refused there,
     * by the check every call makes anyway (core/registry.c). */
    _Atomic int busy;
    /* Dispatch positions (tokens) count from seq_base + 1: past every one a
     * context of this process finalized before handed out, so an old token
     * is never taken for this one's (core/registry.c). */
    uint64_t seq_base;
    struct shmesh_ctx *live_next; /* the process's live contexts (core/registry.c) */
    /* The values of every hashed setting (the settings table's column),
     * published in the control block too, and their hash: ranks must agree
     * on them. */
    uint64_t tuning;
    uint64_t tuning_values[SETTINGS_HASHED];
    /* The GPU runtime and its caches (lib/device/gpu.h); NULL: none. */
    struct device_layer *dev;
    unsigned debug;       /* SHMESH_DEBUG: enum debug_what bits */
    struct tracer *trace; /* the event ring (lib/trace/trace.h); NULL: not tracing */
    /* Appended to every refusal (SHMESH_ERR_INVALID) while set: what the
     * arguments refused are, when a layer passes on arrays it made
     * (batch/batch.c: the positions' arrays). */
    const char *fail_note;
    char err[CTX_ERR_MAX];
};

/* The job's rank of the node's rank r (messages name the job's ranks). */
static inline int ctx_job_rank_of(const shmesh_ctx *c, int r)
{
    return c->job_of_seg && r >= 0 && r < c->world ? c->job_of_seg[r] : r;
}

/* Where a layer's state starts: `below_at`, the offset of the state of the
 * layer below, past its size, rounded up to the alignment of `type`. */
#define CTX_STATE_AFTER(below_at, below_type, type) \
    (((below_at) + sizeof(below_type) + _Alignof(type) - 1) / _Alignof(type) * _Alignof(type))
/* The state at offset `at` of context c (const or not: the block itself
 * is never const).  Through char *, not an integer: the compiler keeps
 * knowing what the result points into (through uintptr_t a psum took 13
 * more instructions). */
#define CTX_STATE(c, at) ((void *)((char *)(c) + (at)))

#endif
