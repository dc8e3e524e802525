/* The context: one rank's membership of a job. */
#ifndef SHMESH_CORE_CONTEXT_H
#define SHMESH_CORE_CONTEXT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/settings.h"
#include "engine/path.h"
#include "engine/window.h"
#include "memory/heap.h"
#include "memory/kind.h"
#include "shm/segment.h"
#include "shm/wait.h"
#include "shmesh.h"

/* ctx->busy in a fork child: no thread of this process may use it. */
#define CTX_BUSY_FORKED (-1)

struct call;
struct call_scratch;
struct dispatcher;
struct tracer;

struct shmesh_ctx {
    int rank;
    int world;
    int pid;              /* the process that made it: a fork child's copy is refused */
    int local_devices; /* devices this rank holds (mesh/device.h) */
    /* The most members a call's group may have: every device of the job,
     * or every position of the largest batched mesh made (batch/batch.h);
     * calls' scratch is sized for it. */
    int scratch_members;
    struct seg *seg;
    struct notify *notify;
    struct seg_waiter waiter;
    struct seg_ctrl *me;
    _Atomic int poison;   /* 0, or the error every later call returns */
    /* The sentence of the poison, kept for the tokens that fail with it. */
    char poison_err[CTX_ERR_MAX];
    _Atomic bool poison_said;
    /* The dispatcher (lib/engine/dispatch.c): NULL until the first async
     * dispatch.  Its thread explains failures in worker_err. */
    struct dispatcher *dispatcher;
    char worker_err[CTX_ERR_MAX];
    /* Effects (lib/effects/effect.c), by id. */
    struct shmesh_effect *effects[SHMESH_MAX_EFFECTS];
    int neffects;
    /* Callbacks without an effect that were placed collectively: their
     * program points (their segment word is the last effect slot). */
    uint64_t plain_points;
    uint64_t calls;       /* calls submitted; the last one's number */
    struct windows win;   /* this rank's slot buffers */
    /* Calls submitted and not finished, in order; the first is the one
     * moving through the segment. */
    struct call *queue_head, *queue_tail;
    struct call_scratch *spare; /* scratch of finished calls, for the next */
    atomic_flag spare_lock;     /* with a dispatcher (engine/call.c) */
    /* Several devices per rank (mesh/local_devices.c): the gathered inputs of
     * the last such call, kept for the next (calls mostly repeat). */
    unsigned char *dev_buf;
    size_t dev_buf_bytes;
    /* Someone blocks until a call is done (call_wait): a window not there
     * yet is spun for in place rather than returned as a wait. */
    bool blocking;
    int *all_ranks;       /* 0..world-1 */
    /* Every rank's pid, read from the segment once, when all had joined:
     * what single copy reads from and the notifier watches, whatever is
     * written into the segment later. */
    int *pids;
    int next_mesh_id;
    struct heap heap;
    struct mem_backends backends;
    bool cma_ok;          /* this rank may read every peer's memory (paths/single_copy.c) */
    uint64_t probe_word;
    int ptracer;          /* the pid PR_SET_PTRACER names, 0 when not lifted */
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
    /* Thresholds that choose paths (SHMESH_ZC_MIN, _CMA_MIN, _RSAG_MIN,
     * _DEVICE_TWO_SHOT_MIN); the values of every hashed setting (the settings
     * table's column: these and the slot size), published in the control
     * block too, and their hash: ranks must agree on them. */
    uint64_t zc_min, cma_min, rsag_min, device_two_shot_min, tuning;
    uint64_t tuning_values[SETTINGS_HASHED];
    /* The GPU runtime and its caches (lib/device/gpu.h); NULL: none. */
    struct device_layer *dev;
    unsigned debug;       /* SHMESH_DEBUG: enum debug_what bits */
    struct tracer *trace; /* the event ring (lib/trace/trace.h); NULL: not tracing */
    unsigned kinds_taken; /* memory kinds some path takes (engine/path.h) */
    struct path_memo path_memo; /* the last exchange's candidates (engine/path.c) */
    /* Appended to every refusal (SHMESH_ERR_INVALID) while set: what the
     * arguments refused are, when a layer passes on arrays it made
     * (batch/batch.c: the positions' arrays). */
    const char *fail_note;
    char err[CTX_ERR_MAX];
};

#endif
