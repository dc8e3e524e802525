/* Joining and leaving a job: shmesh_init, shmesh_finalize, shmesh_abort,
 * shmesh_finalize_at_exit. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrays/shard_memory.h"
#include "core/context.h"
#include "core/entry.h"
#include "core/debug.h"
#include "core/fail.h"
#include "core/registry.h"
#include "core/settings.h"
#include "device/gpu.h"
#include "effects/effect.h"
#include "effects/state.h"
#include "front/plan.h"
#include "front/state.h"
#include "engine/dispatch.h"
#include "engine/call.h"
#include "engine/path.h"
#include "engine/state.h"
#include "memory/state.h"
#include "mesh/state.h"
#include "net/boot.h"
#include "net/job.h"
#include "ops/ops.h"
#include "paths/single_copy.h"
#include "paths/state.h"
#include "shm/notify.h"
#include "shm/numa_place.h"
#include "trace/trace.h"

_Static_assert(SETTINGS_HASHED <= SEG_TUNING_MAX, "a control block holds the hashed settings");

/* How long one sleep lasts before liveness is looked at again.  The uring
 * notifier hears of a peer's death at once, so its slice is only a backstop. */
#define SLICE_URING_NS 1000000000LL
#define SLICE_FUTEX_NS 100000000LL

static int seg_error_code(int rc)
{
    switch (rc) {
    case -EBADMSG:
    case -ENOENT:
        return SHMESH_ERR_BAD_SEGMENT;
    case -EINVAL:
    case -EBUSY:
        return SHMESH_ERR_INVALID;
    case -ENOMEM:
    case -ENOSPC:
        return SHMESH_ERR_NOMEM;
    default:
        return SHMESH_ERR_SYSTEM;
    }
}

/* Frees the context; `forked`: in a fork child, whose copy it is (the
 * progress thread is not there, and the GPU runtime, which does not
 * survive fork, is not called: its part is left). */
static void release(shmesh_ctx *c, bool forked)
{
    if (forked)
        dispatch_forget(c);
    else
        dispatch_stop(c);
    effects_free(c);
    plan_free_all(c);
    call_scratch_free_all(c);
    if (!forked)
        device_close(c);
    free(front_of(c)->dev_buf);
    windows_fini(&engine_of(c)->win);
    heap_fini(&memory_of(c)->heap);
    trace_close(c);
    notify_close(c->notify);
    seg_close(c->seg);
    free(c->all_ranks);
    free(c->pids);
    job_close(c);
    free(c);
}

static int alloc_engine(shmesh_ctx *c)
{
    c->all_ranks = malloc(sizeof *c->all_ranks * (size_t)c->world);
    c->pids = calloc((size_t)c->world, sizeof *c->pids);
    if (!c->all_ranks || !c->pids || windows_init(&engine_of(c)->win, c->world))
        return SHMESH_ERR_NOMEM;
    for (int r = 0; r < c->world; r++)
        c->all_ranks[r] = r;
    return 0;
}

/* Spinning pays when the peer runs on another core: it answers within a
 * microsecond or two.  With more ranks than cores the peer we wait for may
 * need our core, so spin briefly and yield to it.  Then block. */
static void default_spin(int world, int64_t *spin_ns)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    bool crowded = cpus > 0 && world > cpus;
    if (*spin_ns < 0)
        *spin_ns = crowded ? 500 : 3000;
}

/* The context's block (core/context.h): the core's part, then each layer's
 * state in turn; the front door's part is the last.  calloc's alignment serves
 * every part. */
#define CTX_BYTES (FRONT_STATE_AT + sizeof(struct front_state))
_Static_assert(_Alignof(struct memory_state) <= _Alignof(max_align_t) &&
                   _Alignof(struct engine_state) <= _Alignof(max_align_t) &&
                   _Alignof(struct paths_state) <= _Alignof(max_align_t) &&
                   _Alignof(struct mesh_state) <= _Alignof(max_align_t) &&
                   _Alignof(struct effects_state) <= _Alignof(max_align_t) &&
                   _Alignof(struct front_state) <= _Alignof(max_align_t),
               "a layer's state needs more than calloc's alignment");

/* A context with what the environment says of this rank; NULL without
 * memory. */
static shmesh_ctx *ctx_new(const struct settings *e)
{
    shmesh_ctx *c = calloc(1, CTX_BYTES);
    if (!c)
        return NULL;
    c->rank = c->job_rank = e->rank;
    c->world = c->job_size = e->world;
    c->pid = (int)getpid();
    c->local_devices = e->local_devices;
    engine_of(c)->scratch_members = c->world * c->local_devices;
    c->debug = e->debug;
    engine_of(c)->kinds_taken = path_kinds();
    return c;
}

/* The paths' thresholds, and their hash that calls compare across ranks. */
static void set_tuning(shmesh_ctx *c, const struct settings *env)
{
    struct paths_state *paths = paths_of(c);
    paths->zc_min = env->zc_min;
    paths->rsag_min = env->rsag_min;
    paths->net_hierarchical = env->net_hierarchical;
    paths->cma_min = env->cma_min;
    paths->cma_bcast_reduce_min = env->cma_bcast_reduce_min;
    paths->device_two_shot_min = env->device_two_shot_min;
    /* The hashed settings: the table's column, with the slot size the
     * segment has (the launcher's, not this rank's environment), published
     * so that a peer can name the ones that differ. */
    struct settings e = *env;
    e.slot_bytes = c->seg->lay.slot_bytes;
    settings_hashed_values(&e, c->tuning_values);
    c->tuning = settings_hashed_hash(c->tuning_values);
    memcpy(c->me->tuning, c->tuning_values, sizeof c->tuning_values);
}

/* How this rank waits for its peers: spin, yield, then sleep in slices. */
static void set_waiter(shmesh_ctx *c, const struct settings *e)
{
    c->waiter = (struct seg_waiter){
        .seg = c->seg,
        .notify = c->notify,
        .self = c->rank,
        .spin_ns = e->spin_ns, /* default filled in below */
        .yield_ns = e->yield_ns,
        .timeout_ns = e->timeout_ns,
        .slice_ns = notify_kind_of(c->notify) == NOTIFY_URING ? SLICE_URING_NS : SLICE_FUTEX_NS,
    };
    default_spin(e->world, &c->waiter.spin_ns);
    /* shmesh-run's default placement (numa_place.h): asleep, held where it
     * fell asleep, so that it wakes there (shm/wait.h). */
    c->waiter.hold = e->start_cpu >= 0;
    engine_of(c)->dispatch_poll_ns = e->dispatch_poll_ns;
    engine_of(c)->eager_max = e->eager_max;
}

/* Until every rank joined the segment; the error said (init_error) if
 * one never does. */
static int wait_for_ranks(shmesh_ctx *c)
{
    int culprit = -1;
    int rc = seg_wait_flag(&c->waiter, &c->seg->hdr->attached, (uint32_t)c->world, -1, &culprit);
    if (!rc)
        return 0;
    char waiting[64];
    snprintf(waiting, sizeof waiting, "all %d ranks to join (%u joined)", c->world,
             atomic_load(&c->seg->hdr->attached.value));
    rc = fail_wait(c, "shmesh_init", 0, rc, culprit, waiting);
    init_error("%s", c->err);
    return rc;
}

/* Each rank's pid, and the notifier watching every peer for its exit. */
static int watch_peers(shmesh_ctx *c)
{
    for (int j = 0; j < c->world; j++) {
        int pid = c->pids[j] =
            atomic_load_explicit(&seg_ctrl(c->seg, j)->pid, memory_order_relaxed);
        if (j == c->rank)
            continue;
        int rc = notify_watch(c->notify, j, pid);
        if (rc < 0) {
            init_error("rank %d: cannot watch rank %d (pid %d) for exit: %s", c->rank, j, pid,
                       strerror(-rc));
            return SHMESH_ERR_SYSTEM;
        }
    }
    return 0;
}

int shmesh_init(shmesh_ctx **out)
{
    if (out)
        *out = NULL;
    struct settings e; /* the environment */
    char bad[CTX_ERR_MAX];
    if (settings_read_library(&e, bad, sizeof bad)) {
        init_error("%s", bad);
        return SHMESH_ERR_INVALID;
    }
    if (!out) {
        init_error("rank %d: shmesh_init: the ctx argument must not be NULL", e.rank);
        return SHMESH_ERR_INVALID;
    }
    /* A job an MPI launcher started: this node's segment and ranks
     * (net/boot.h); any other job as it is. */
    struct net_boot nb;
    int rc = net_boot(&e, &nb, bad, sizeof bad);
    if (rc) {
        if (nb.active)
            init_error("rank %d: %s", nb.w.rank, bad);
        else
            init_error("%s", bad);
        net_joined(&nb);
        return rc;
    }
    int who = nb.active ? nb.w.rank : e.rank; /* the job's rank, which messages name */
    shmesh_ctx *c = ctx_new(&e);
    if (!c) {
        init_error("rank %d: out of memory", who);
        net_joined(&nb);
        return SHMESH_ERR_NOMEM;
    }
    /* From here on every failure says why (init_error) and goes to fail:. */
    char why[CTX_ERR_MAX - 32] = "";
    if ((rc = job_open(c, &nb, why, sizeof why)))
        goto fail_why;
    if (c->job && c->local_devices > 1) {
        snprintf(why, sizeof why, "shmesh_init: several devices per rank (%d) in a job of "
                 "several nodes are not built yet (docs/multinode.md)", c->local_devices);
        rc = SHMESH_ERR_INVALID;
        goto fail_why;
    }
    /* A call's per-member scratch holds every device of the job. */
    engine_of(c)->scratch_members = c->job_size * c->local_devices;
    if (alloc_engine(c))
        goto nomem;
    rc = e.segment ? seg_attach(e.segment, e.world, e.rank, &c->seg, why, sizeof why)
                   : seg_create_private(1, 0, e.shm_size, &c->seg, why, sizeof why);
    if (rc) {
        rc = seg_error_code(rc);
        goto fail_why;
    }
    /* Its faults (and first accesses) now rather than in the first calls. */
    seg_populate_hot(c->seg, e.segment ? e.rank : 0);
    rc = notify_open(e.notify, e.world, &c->notify, why, sizeof why);
    if (rc) {
        rc = rc == -EOPNOTSUPP ? SHMESH_ERR_INVALID : SHMESH_ERR_SYSTEM;
        goto fail_why;
    }
    c->me = seg_ctrl(c->seg, c->rank);
    if (trace_open(c))
        goto nomem;
    if (c->trace) /* before any event: the launcher reads them with the first */
        path_names(c->trace->ring->path_names, SEG_TRACE_PATHS);
    set_tuning(c, &e);
    shard_memory_budget((size_t)e.array_cache);
    if (heap_init(&memory_of(c)->heap, c->seg, c->rank))
        goto nomem;
    set_waiter(c, &e);
    cma_publish(c, e.cma);
    if ((rc = device_open(c, e.device, why, sizeof why)))
        goto fail_why;
    if ((rc = seg_join(c->seg, c->rank, getpid(), why, sizeof why))) {
        rc = seg_error_code(rc);
        goto fail_why;
    }
    if ((rc = wait_for_ranks(c)) || (rc = watch_peers(c)))
        goto fail;
    net_joined(&nb); /* every rank attached: the creator's own handle goes */
    cma_probe(c, e.cma);
    if (registry_add(c)) {
        init_error("rank %d: cannot install the fork handler (pthread_atfork)", c->rank);
        rc = SHMESH_ERR_SYSTEM;
        goto fail;
    }
    /* Where shmesh-run starts it (numa_place.h): now, as its first calls
     * begin, since a wait above may have woken it on a peer's CPU. */
    if (e.start_cpu >= 0)
        numa_place_start_on((int)e.start_cpu);
    *out = c;
    return 0;

nomem:
    init_error("rank %d: out of memory", who);
    rc = SHMESH_ERR_NOMEM;
    goto fail;
fail_why:
    init_error("rank %d: %s", who, why);
fail:
    release(c, false);
    net_joined(&nb);
    return rc;
}

/* shmesh_finalize in a fork child on its parent's context: nothing in the
 * job's name; this process's copy is released. */
static int finalize_forked(shmesh_ctx *c)
{
    int rc = fail_forked(c, "shmesh_finalize");
    init_error("%s; this process's copy of the context was released", c->err);
    uint64_t last = dispatch_forget(c);
    registry_remove(c, last);
    release(c, true);
    return rc;
}

int shmesh_finalize(shmesh_ctx *c)
{
    if (!c)
        return 0;
    if (!registry_live(c)) {
        init_error("shmesh_finalize: %p is no live context of this process (finalized "
                   "already?): expected a context from shmesh_init",
                   (void *)c);
        return SHMESH_ERR_INVALID;
    }
    /* Refused, leaving the context as it was: from a host callback (the
     * dispatcher it would drain is running the callback), or while another
     * thread is inside (it would free what that thread uses).  The thread
     * is inside from here on, which keeps others out. */
    int rc = ctx_enter_local(c, "shmesh_finalize");
    if (rc && atomic_load_explicit(&c->busy, memory_order_relaxed) == CTX_BUSY_FORKED)
        return finalize_forked(c);
    if (rc) {
        if (error_refused_ctx != c) /* a callback: the explanation is the context's */
            init_error("%s", ctx_err_buf(c));
        return rc;
    }
    /* Work still in flight finishes first (it was dispatched before this). */
    uint64_t last = dispatch_stop(c);
    struct call k;
    rc = call_finish(&k, call_world_step(&k, c, OP_FINALIZE));
    /* Only a clean finalize makes this rank's exit harmless to the others. */
    if (!rc)
        atomic_store_explicit(&c->me->state, SEG_RANK_FINALIZED, memory_order_release);
    else
        init_error("%s", c->err); /* the context goes; its explanation stays */
    ctx_leave(c);
    registry_remove(c, last);
    release(c, false);
    shard_memory_release(); /* the freed shards global arrays kept */
    return rc;
}

void shmesh_abort(shmesh_ctx *c, int code, const char *why)
{
    if (code < 1 || code > 255)
        code = 1;
    /* A fork child's copy of its parent's context aborts nothing: the
     * process just exits. */
    if (c && c->seg &&
        atomic_load_explicit(&c->busy, memory_order_relaxed) != CTX_BUSY_FORKED) {
        char reason[SEG_REASON_MAX];
        snprintf(reason, sizeof reason, "rank %d (pid %d) called shmesh_abort(%d): %s", c->job_rank,
                 (int)getpid(), code, why ? why : "");
        seg_abort(c->seg, SEG_CAUSE_RANK_ABORT, c->rank, code, reason);
    }
    fflush(NULL);
    _exit(code);
}

/* The context shmesh_finalize_at_exit was given, for exit's handler. */
static struct {
    shmesh_ctx *ctx;
    pid_t pid;
    char why[SEG_REASON_MAX];
} at_exit;

static void leave_at_exit(int status, void *arg)
{
    shmesh_ctx *c = arg;
    if (c != at_exit.ctx || getpid() != at_exit.pid)
        return; /* a fork child of the process that asked */
    status &= 0xff; /* what the parent sees */
    if (status == 0) {
        at_exit.ctx = NULL;
        shmesh_finalize(c);
        return;
    }
    /* Not a collective: the others may be anywhere.  They hear of it as
     * of a rank that died, and the launcher blames this rank.  The context
     * is not freed (nor lost: at_exit keeps it) as the process ends. */
    char reason[SEG_REASON_MAX];
    snprintf(reason, sizeof reason, "rank %d (pid %d) exited with status %d%s%.*s", c->job_rank,
             (int)at_exit.pid, status, at_exit.why[0] ? ": " : "", (int)sizeof reason - 64,
             at_exit.why);
    seg_abort(c->seg, SEG_CAUSE_RANK_DIED, c->rank, status, reason);
}

int shmesh_finalize_at_exit(shmesh_ctx *c, const char *why)
{
    if (!c) {
        init_error("shmesh_finalize_at_exit: the context is NULL");
        return SHMESH_ERR_INVALID;
    }
    if (at_exit.ctx)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_finalize_at_exit: a context (rank %d) is already left to this "
                        "process's exit; a process leaves a job once",
                        at_exit.ctx->rank);
#ifdef __GLIBC__
    snprintf(at_exit.why, sizeof at_exit.why, "%s", why ? why : "");
    at_exit.ctx = c;
    at_exit.pid = getpid();
    if (on_exit(leave_at_exit, c)) {
        at_exit.ctx = NULL;
        return ctx_fail(c, SHMESH_ERR_SYSTEM,
                        "shmesh_finalize_at_exit: on_exit refused the handler: %s",
                        strerror(errno));
    }
    return 0;
#else
    (void)why;
    return ctx_fail(c, SHMESH_ERR_SYSTEM,
                    "shmesh_finalize_at_exit: this C library has no on_exit, which tells a "
                    "handler the exit status: call shmesh_finalize (or shmesh_abort) instead");
#endif
}

int shmesh_rank(const shmesh_ctx *c) { return c ? c->job_rank : SHMESH_ERR_INVALID; }

int shmesh_world_size(const shmesh_ctx *c) { return c ? c->job_size : SHMESH_ERR_INVALID; }

const char *shmesh_notifier(const shmesh_ctx *c) { return c ? notify_name(c->notify) : ""; }

int shmesh_traffic_get(const shmesh_ctx *c, shmesh_traffic *t)
{
    if (!c || !t)
        return SHMESH_ERR_INVALID;
    const struct seg_status *s = &c->me->status;
    t->bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
    t->sent = atomic_load_explicit(&s->sent, memory_order_relaxed);
    t->received = atomic_load_explicit(&s->received, memory_order_relaxed);
    return 0;
}

int shmesh_traffic_nodes_get(const shmesh_ctx *c, shmesh_traffic *t)
{
    int rc = shmesh_traffic_get(c, t);
    if (rc)
        return rc;
    t->sent = c->job ? c->job->sent : 0;
    t->received = c->job ? c->job->received : 0;
    return 0;
}
