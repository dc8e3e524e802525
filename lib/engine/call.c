/* Calls: preparing, queueing, progressing and finishing them (see call.h). */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/context.h"
#include "core/entry.h"
#include "core/debug.h"
#include "core/fail.h"
#include "engine/dispatch.h"
#include "engine/state.h"
#include "memory/state.h"
#include "shm/notify.h"
#include "engine/call.h"
#include "engine/path.h"
#include "engine/window.h"
#include "engine/status.h"
#include "net/job.h"
#include "trace/trace.h"

/* The pool of scratch is shared with the progress thread once there is
 * one (a call is prepared by the caller and released by the thread), but
 * not while that thread holds no work (it touches the pool only then, and
 * gets work only from this thread).  Returns whether it locked. */
static inline bool scratch_lock(shmesh_ctx *c)
{
    if (!engine_of(c)->dispatcher || (ctx_worker != c && dispatch_thread_idle(c)))
        return false;
    while (atomic_flag_test_and_set_explicit(&engine_of(c)->spare_lock, memory_order_acquire))
        notify_cpu_relax();
    return true;
}

static inline void scratch_unlock(shmesh_ctx *c, bool locked)
{
    if (locked)
        atomic_flag_clear_explicit(&engine_of(c)->spare_lock, memory_order_release);
}

/* Every per-member array of a call, for the whole world, in one block. */
static struct call_scratch *scratch_new(int world)
{
    size_t w = (size_t)world;
    size_t bytes = sizeof(struct call_scratch) + BOUNCE_BYTES +
                   w * (4 * sizeof(int) + 4 * sizeof(void *) + 9 * sizeof(uint64_t) +
                        sizeof(uint32_t) + 2 * sizeof(int32_t)) +
                   64;
    unsigned char *p = calloc(1, bytes);
    if (!p)
        return NULL;
    struct call_scratch *s = (struct call_scratch *)p;
    s->members = world;
    p += sizeof *s;
    p = (unsigned char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    s->bounce = p;
    p += BOUNCE_BYTES;
    void **ptrs[] = {(void **)&s->srcs, (void **)&s->hdrs, (void **)&s->zin, (void **)&s->zout};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++, p += w * sizeof(void *))
        *ptrs[i] = p;
    uint64_t **u64[] = {&s->xoff_to, &s->xlen_to, &s->xoff_from, &s->xlen_from,
                        &s->xtotal, &s->cin, &s->cout, &s->hin, &s->hout};
    for (size_t i = 0; i < sizeof u64 / sizeof *u64; i++, p += w * sizeof(uint64_t))
        *u64[i] = (uint64_t *)p;
    int **ints[] = {&s->ranks, &s->locals, &s->dest, &s->src_of};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++, p += w * sizeof(int))
        *ints[i] = (int *)p;
    s->status = (int32_t *)p;
    p += 2 * w * sizeof(int32_t);
    s->flags = (uint32_t *)p;
    return s;
}

void call_scratch_free_all(shmesh_ctx *c)
{
    struct engine_state *engine = engine_of(c);
    for (int i = 0; i < ENGINE_SPARE_WORKS; i++)
        free(atomic_exchange(&engine->spare_work[i], NULL));
    while (engine->spare) {
        struct call_scratch *s = engine->spare;
        engine->spare = s->next;
        free(s);
    }
}

int call_init(struct call *k, shmesh_ctx *c, enum call_op op)
{
    bytes_zero(&k->op_state, offsetof(struct call, g) - offsetof(struct call, op_state));
    k->c = NULL;
    k->s = NULL;
    call_desc_clear(&k->d);
    k->op = op;
    k->name = op_name(op);
    k->state = CALL_PREPARED;
    int rc = ctx_enter(c, k->name);
    if (rc)
        return rc;
    k->c = c;
    k->d.op = op;
    k->d.mesh = -1;
    struct engine_state *engine = engine_of(c);
    bool locked = scratch_lock(c);
    if ((k->s = engine->spare))
        engine->spare = k->s->next;
    scratch_unlock(c, locked);
    if (k->s && k->s->members < engine->scratch_members) { /* made before a larger batched mesh */
        free(k->s);
        k->s = NULL;
    }
    if (!k->s && !(k->s = scratch_new(engine->scratch_members))) {
        return ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory for a call's scratch", k->name);
    }
    return 0;
}

/* Every member's local device is 0 with one device per rank: the array is
 * zeroed when made and again only after a mesh with several per rank wrote
 * it. */
static inline void locals_zero(struct call_scratch *s)
{
    if (__builtin_expect(s->locals_written, 0)) {
        memset(s->locals, 0, sizeof *s->locals * (size_t)s->members);
        s->locals_written = false;
    }
}

/* call_group in a job of several nodes: the members' job ranks become
 * this node's ranks, unless one lives on another node. */
static __attribute__((noinline)) void group_of_job(struct call *k, int n, int me, const int *ids,
                                                   int per)
{
    const struct job *j = k->c->job;
    bool here = true;
    for (int p = 0; p < n && here; p++)
        here = j->seg_rank[ids[p] / per] >= 0;
    for (int p = 0; p < n; p++) {
        int r = ids[p] / per;
        k->s->ranks[p] = here ? j->seg_rank[r] : r;
        k->s->locals[p] = ids[p] % per;
    }
    k->s->locals_written = per > 1;
    k->net = !here;
    k->g = (struct group){.n = n, .me = me, .ranks = k->s->ranks, .locals = k->s->locals};
}

void call_group_kept(struct call *k, int n, int me, const int *ranks, bool net)
{
    for (int p = 0; p < n; p++) /* mostly a few: no memcpy call */
        k->s->ranks[p] = ranks[p];
    locals_zero(k->s);
    k->net = net;
    k->g = (struct group){.n = n, .me = me, .ranks = k->s->ranks, .locals = k->s->locals};
}

void call_group(struct call *k, int n, int me, const int *ids, int per)
{
    if (__builtin_expect(k->c->job != NULL, 0)) {
        group_of_job(k, n, me, ids, per);
        return;
    }
    if (per == 1) { /* device ids are ranks */
        call_group_kept(k, n, me, ids, false);
        return;
    }
    for (int p = 0; p < n; p++) {
        k->s->ranks[p] = ids[p] / per;
        k->s->locals[p] = ids[p] % per;
    }
    k->s->locals_written = true;
    k->g = (struct group){.n = n, .me = me, .ranks = k->s->ranks, .locals = k->s->locals};
}

void call_group_world(struct call *k)
{
    shmesh_ctx *c = k->c;
    locals_zero(k->s);
    if (__builtin_expect(c->job != NULL, 0)) { /* the job's ranks, across nodes */
        for (int r = 0; r < c->job_size; r++)
            k->s->ranks[r] = r;
        k->g = (struct group){.n = c->job_size, .me = c->job_rank, .ranks = k->s->ranks,
                              .locals = k->s->locals};
        k->net = true;
        return;
    }
    k->g = (struct group){.n = c->world, .me = c->rank, .ranks = c->all_ranks,
                          .locals = k->s->locals};
}

int call_world_step(struct call *k, shmesh_ctx *c, enum call_op op)
{
    int rc = call_init(k, c, op);
    if (rc)
        return rc;
    call_group_world(k);
    flow_init(&k->f, FLOW_NONE, NULL, NULL);
    return 0;
}

static int refuse_kind(struct call *k, const char *what, const void *p, uint64_t len,
                       enum mem_kind kind, const char *backend)
{
    return ctx_fail(k->c, SHMESH_ERR_INVALID,
                    "%s: %s (%p, %" PRIu64 " bytes) is %s memory%s%s%s, and no data path takes "
                    "it%s",
                    k->name, what, p, len, mem_kind_name(kind), backend ? " (claimed by the '" : "",
                    backend ? backend : "", backend ? "' backend)" : "",
                    kind != MEM_DEVICE     ? ""
                    : !k->c->dev           ? " (no GPU runtime is loaded: SHMESH_DEVICE)"
                                           : " with several devices per rank (not built yet: "
                                             "one device per rank takes device buffers)");
}

/* The kinds of k's buffers (and their heap offsets), and the backends that
 * claimed them. */
static inline void classify(struct call *k, const char **in_backend, const char **out_backend)
{
    const struct flow *f = &k->f;
    const struct memory_state *memory = memory_of(k->c);
    k->in_kind = mem_kind_of(&memory->backends, &memory->heap, f->in.data, f->in_bytes, &k->in_heap,
                             in_backend);
    if (f->out.data == f->in.data && f->out_bytes == f->in_bytes) { /* in place */
        k->out_kind = k->in_kind;
        k->out_heap = k->in_heap;
        *out_backend = *in_backend;
    } else {
        k->out_kind = mem_kind_of(&memory->backends, &memory->heap, f->out.data, f->out_bytes,
                                  &k->out_heap, out_backend);
    }
}

int call_buffers(struct call *k)
{
    const struct flow *f = &k->f;
    const char *in_backend = NULL, *out_backend = NULL;
    const shmesh_ctx *c = k->c;
    classify(k, &in_backend, &out_backend);
    if (!((k->in_kind | k->out_kind) & MEM_DEVICE))
        return 0; /* host and shared-heap memory: every path's kinds */
    /* Device buffers need the device layer (a backend registered without it
     * only classifies) and, for now, one device per rank. */
    unsigned taken = engine_of(c)->kinds_taken;
    if (!c->dev || c->local_devices > 1)
        taken &= ~(unsigned)MEM_DEVICE;
    if (k->in_kind & ~taken)
        return refuse_kind(k, "in", f->in.data, f->in_bytes, k->in_kind, in_backend);
    if (k->out_kind & ~taken)
        return refuse_kind(k, "out", f->out.data, f->out_bytes, k->out_kind, out_backend);
    /* The device path or host staging is chosen by the path table when the
     * call starts (the op may set its device hooks after this). */
    k->d.in_device = k->in_kind == MEM_DEVICE;
    k->d.out_device = k->out_kind == MEM_DEVICE;
    return 0;
}

/* call_submit's body, inlined where the blocking API calls it. */
static inline __attribute__((always_inline)) int submit(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct engine_state *engine = engine_of(c);
    k->seq = ++engine->calls;
    k->desc_pending = true;
    if (c->debug)
        k->t_start = debug_now();
    if (c->trace)
        k->t_enter = trace_now(c->trace);
    int rc = fail_if_aborted(c, k->name, k->seq);
    if (rc) {
        k->state = CALL_DONE;
        k->rc = rc;
        return rc;
    }
    k->state = CALL_QUEUED;
    k->next = NULL;
    if (engine->queue_tail) {
        engine->queue_tail->next = k;
    } else {
        engine->queue_head = k;
        status_call(c, k); /* the one moving now */
    }
    engine->queue_tail = k;
    return 0;
}

int call_submit(struct call *k) { return submit(k); }

/* The call's exchanges, one after the other. */
static int call_step(struct call *k)
{
    for (;;) {
        int rc = path_step(k);
        if (rc || !k->then)
            return rc;
        if ((rc = k->then(k)) <= 0)
            return rc;
        path_again(k); /* another exchange */
    }
}

static void debug_done(const struct call *k)
{
    const shmesh_ctx *c = k->c;
    char what[400];
    call_describe(&k->d, k->seq, what, sizeof what);
    debug_line(c, "%s: %" PRIu64 " B, path %s, %.1f us: %s", what, flow_size(&k->f),
               k->path ? k->path->name : "none", (double)(debug_now() - k->t_start) / 1e3,
               k->rc ? shmesh_error_name(k->rc) : "ok");
}

/* The queue's first call is over: dequeue it. */
static inline void finish_one(shmesh_ctx *c, int rc)
{
    struct engine_state *engine = engine_of(c);
    struct call *k = engine->queue_head;
    engine->queue_head = k->next;
    if (!engine->queue_head)
        engine->queue_tail = NULL;
    k->next = NULL;
    /* The path's state for the call (host staging: the output goes back). */
    if (__builtin_expect(k->path_end != NULL, 0))
        rc = k->path_end(k, rc);
    k->state = CALL_DONE;
    k->rc = rc;
    status_done(c, k, engine->queue_head);
    if (c->trace)
        trace_call(c, k);
    if (c->debug & DEBUG_CALLS)
        debug_done(k);
}

/* The same; a poisoned context fails the calls behind it too (they can no
 * longer move). */
static inline void finish_head(shmesh_ctx *c, int rc)
{
    finish_one(c, rc);
    if (__builtin_expect(c->poison != 0, 0))
        while (engine_of(c)->queue_head)
            finish_one(c, c->poison);
}

int call_progress(shmesh_ctx *c)
{
    struct call *k;
    while ((k = engine_of(c)->queue_head)) {
        int rc = call_step(k);
        if (rc == CALL_WAIT)
            return CALL_WAIT;
        finish_head(c, rc);
    }
    return 0;
}

int call_wait(struct call *k)
{
    shmesh_ctx *c = k->c;
    struct engine_state *engine = engine_of(c);
    engine->blocking = true;
    while (k->state != CALL_DONE) {
        if (call_progress(c) != CALL_WAIT)
            continue;
        int rc = win_wait(engine->queue_head);
        if (rc)
            finish_head(c, rc);
    }
    engine->blocking = false;
    return k->rc;
}

void call_release(struct call *k)
{
    if (__builtin_expect(k->path_end != NULL, 0))
        k->path_end(k, SHMESH_ERR_ABORTED); /* a call that never finished: nothing copied back */
    if (k->op_free) {
        k->op_free(k);
        k->op_free = NULL;
    }
    if (k->s) {
        bool locked = scratch_lock(k->c);
        k->s->next = engine_of(k->c)->spare;
        engine_of(k->c)->spare = k->s;
        scratch_unlock(k->c, locked);
        k->s = NULL;
    }
}

/* A call as dispatched work (engine/dispatch.h). */
struct call_work {
    struct work w;
    shmesh_ctx *c; /* whose spare it is (k.c is NULL when k's call_init failed) */
    struct call k;
};

/* A prepared call run on this thread: numbered and queued, then waited for. */
static inline __attribute__((always_inline)) int submit_wait(struct call *k)
{
    int rc = submit(k);
    return rc ? rc : call_wait(k);
}

static int call_work_run(struct work *w) { return submit_wait(&((struct call_work *)w)->k); }

/* The block goes back among the context's spares, for the next dispatches
 * (freed when they are all taken). */
static void call_work_keep(struct call_work *cw)
{
    _Atomic(void *) *spare = engine_of(cw->c)->spare_work;
    for (int i = 0; i < ENGINE_SPARE_WORKS; i++) {
        void *none = NULL;
        if (!atomic_load_explicit(&spare[i], memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&spare[i], &none, cw, memory_order_acq_rel,
                                                    memory_order_relaxed))
            return;
    }
    free(cw);
}

static void call_work_drop(struct work *w)
{
    struct call_work *cw = (struct call_work *)w;
    call_release(&cw->k);
    call_work_keep(cw);
}

/* A block for a dispatch: a spare, else a new one. */
static struct call_work *call_work_take(shmesh_ctx *c)
{
    _Atomic(void *) *spare = engine_of(c)->spare_work;
    for (int i = 0; i < ENGINE_SPARE_WORKS; i++) {
        void *w;
        if (atomic_load_explicit(&spare[i], memory_order_relaxed) &&
            (w = atomic_exchange_explicit(&spare[i], NULL, memory_order_acq_rel)))
            return w;
    }
    struct call_work *cw = malloc(sizeof *cw);
    if (cw)
        cw->c = c;
    return cw;
}

/* A blocking call run by its caller on a quiet dispatcher: k stays where the
 * API function made it, as without a dispatcher (no copy, nothing allocated). */
struct call_here {
    struct work w;
    struct call *k;
};

static int call_here_run(struct work *w) { return submit_wait(((struct call_here *)w)->k); }

static void call_here_drop(struct work *w) { call_release(((struct call_here *)w)->k); }

/* Work w, a block with its call prepared, goes to c's dispatcher (which
 * owns it from now on, and runs and drops it so); the call leaves the
 * context. */
static int dispatch_work(shmesh_ctx *c, struct work *w, int (*run)(struct work *),
                         void (*drop)(struct work *), shmesh_token *async)
{
    *w = (struct work){.run = run, .drop = drop};
    int rc = dispatch_submit(c, w, async);
    ctx_leave(c);
    return rc;
}

static int dispatch_block(struct call_work *cw, shmesh_token *async)
{
    return dispatch_work(cw->k.c, &cw->w, call_work_run, call_work_drop, async);
}

/* The prepared call k goes to the dispatcher (which owns it from now on);
 * with `async` the token goes there and nothing is waited for. */
static int call_dispatch(struct call *k, shmesh_token *async)
{
    shmesh_ctx *c = k->c;
    int rc;
    if (!async) { /* blocking: run here if the dispatcher is quiet */
        struct call_here here = {{.run = call_here_run, .drop = call_here_drop}, k};
        if (dispatch_run_quiet(c, &here.w, &rc)) {
            ctx_leave(c);
            return rc;
        }
    }
    struct call_work *cw = call_work_take(c);
    if (cw) {
        bytes_copy(&cw->k, k, sizeof *k); /* not rep movsq: core/bytes.h */
        return dispatch_block(cw, async);
    }
    rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory to dispatch the call", k->name);
    call_release(k);
    ctx_leave(c);
    return rc;
}

static inline __attribute__((always_inline)) int finish(struct call *k, int rc,
                                                       shmesh_token *async)
{
    if (!rc && dispatch_wanted(k->c, async))
        return call_dispatch(k, async);
    if (!rc)
        rc = submit_wait(k);
    if (k->c) {
        call_release(k);
        ctx_leave(k->c);
    }
    return rc;
}

int call_finish(struct call *k, int rc) { return finish(k, rc, NULL); }

int call_finish_async(struct call *k, int rc, shmesh_token *async)
{
    return finish(k, rc, async);
}

struct call *call_block_take(shmesh_ctx *c)
{
    struct call_work *cw = c ? call_work_take(c) : NULL;
    return cw ? &cw->k : NULL;
}

int call_finish_block(struct call *k, int rc, shmesh_token *async)
{
    struct call_work *cw = (struct call_work *)((unsigned char *)k - offsetof(struct call_work, k));
    if (!rc && dispatch_wanted(k->c, async)) /* the common case: dispatched as it is */
        return dispatch_block(cw, async);
    rc = finish(k, rc, async); /* refused, or run at once */
    call_work_keep(cw);
    return rc;
}

/* k ran its one exchange on a path that can run it again. */
static bool replayable(const struct call *k)
{
    return k->path && k->path->replay && !k->handshaken && !k->then && !k->path_end &&
           !k->op_free;
}

/* A kept call's block: dispatched as it is, run by whichever thread takes
 * it, given back to its plan through `state` (enum call_kept_state). */
struct kept_work {
    struct work w;
    _Atomic int state;
    bool ran; /* since it was last dispatched */
    int rc;   /* its run's result */
    struct call k;
};

static struct kept_work *kept_of(struct call *k)
{
    return (struct kept_work *)((unsigned char *)k - offsetof(struct kept_work, k));
}

struct call *call_kept_new(void)
{
    struct kept_work *kw = malloc(sizeof *kw);
    if (!kw)
        return NULL;
    atomic_init(&kw->state, KEPT_SPENT);
    kw->k.s = NULL;
    return &kw->k;
}

enum call_kept_state call_kept_state(struct call *k)
{
    return atomic_load_explicit(&kept_of(k)->state, memory_order_acquire);
}

void call_kept_free(struct call *k)
{
    struct kept_work *kw = kept_of(k);
    int s = KEPT_BUSY;
    /* In flight: whoever runs it frees it. */
    if (atomic_compare_exchange_strong_explicit(&kw->state, &s, KEPT_ORPHAN, memory_order_acq_rel,
                                                memory_order_acquire))
        return;
    if (s == KEPT_IDLE)
        call_release(k);
    free(kw);
}

/* A kept call's run: numbered and queued, then waited for. */
static int run_kept(struct call *k)
{
    bool again = k->path != NULL; /* call_again's: its path is chosen already */
    int rc = submit(k);
    if (rc)
        return rc;
    if (again && (k->c->debug & DEBUG_PATHS))
        path_debug(k); /* as when it was chosen */
    return call_wait(k);
}

/* The run is over (or never happened): kept for the next, or its scratch
 * released; given back to the plan, or freed when the plan gave it up. */
static void settle(struct kept_work *kw)
{
    struct call *k = &kw->k;
    int next = KEPT_IDLE;
    if (!kw->ran || kw->rc || !replayable(k)) {
        next = kw->ran && !kw->rc ? KEPT_NEVER : KEPT_SPENT;
        call_release(k);
    }
    int busy = KEPT_BUSY;
    if (!atomic_compare_exchange_strong_explicit(&kw->state, &busy, next, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        if (next == KEPT_IDLE) /* given up while in flight */
            call_release(k);
        free(kw);
    }
}

static int kept_work_run(struct work *w)
{
    struct kept_work *kw = (struct kept_work *)w;
    kw->ran = true;
    return kw->rc = run_kept(&kw->k);
}

static void kept_work_drop(struct work *w) { settle((struct kept_work *)w); }

int call_finish_kept(struct call *k, int rc, shmesh_token *async)
{
    struct kept_work *kw = kept_of(k);
    shmesh_ctx *c = k->c;
    kw->ran = false;
    kw->rc = rc;
    atomic_store_explicit(&kw->state, KEPT_BUSY, memory_order_relaxed);
    if (rc) {
        settle(kw); /* released (k->c is NULL when call_init failed) */
        if (c)
            ctx_leave(c);
        return rc;
    }
    if (!dispatch_wanted(c, async)) {
        rc = kept_work_run(&kw->w); /* at once, as call_finish would */
        settle(kw);
        ctx_leave(c);
        return rc;
    }
    /* As a prepared call's block, itself. */
    return dispatch_work(c, &kw->w, kept_work_run, kept_work_drop, async);
}

int call_again(struct call *k, void *in, void *out)
{
    shmesh_ctx *c = k->c;
    int rc = ctx_enter(c, k->name);
    if (rc)
        return rc;
    enum mem_kind in_kind = k->in_kind, out_kind = k->out_kind;
    const char *in_backend = NULL, *out_backend = NULL;
    k->f.in.data = in;
    k->f.out.data = out;
    classify(k, &in_backend, &out_backend);
    if (k->in_kind != in_kind || k->out_kind != out_kind) {
        ctx_leave(c);
        return CALL_NOT_AGAIN;
    }
    /* What its run moved on from; the rest (its description and hash, group,
     * flow, path, exchange plan, size and traffic) is what the run did. */
    k->state = CALL_PREPARED;
    k->window = 0;
    k->check_hash = false;
    k->at = 0;
    k->err = k->err_peer = 0;
    k->path->replay(k);
    return 0;
}
