/* Joining and leaving a job: shmesh_init, shmesh_finalize, shmesh_abort. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "core/hash.h"
#include "engine/call.h"
#include "ops/ops.h"
#include "paths/single_copy.h"
#include "shm/notify.h"

/* How long one sleep lasts before liveness is looked at again.  The uring
 * notifier hears of a peer's death at once, so its slice is only a backstop. */
#define SLICE_URING_NS 1000000000LL
#define SLICE_FUTEX_NS 100000000LL

struct init_env {
    const char *segment;
    int rank, world;
    enum notify_kind notify;
    int64_t timeout_ns;
    int64_t spin_ns, yield_ns; /* -1: choose */
    uint64_t shm_size; /* a world of one's own segment; 0: default */
    uint64_t zc_min, rsag_min, cma_min;
    bool cma;       /* SHMESH_CMA: this rank may use single copy */
    unsigned debug; /* SHMESH_DEBUG */
};

static int env_int(const char *name, long min, long max, long *out, bool *present)
{
    const char *s = getenv(name);
    *present = s && *s;
    if (!*present)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) {
        init_error("%s must be an integer in [%ld, %ld], found '%s'", name, min, max, s);
        return SHMESH_ERR_INVALID;
    }
    *out = v;
    return 0;
}

static int read_env(struct init_env *e)
{
    memset(e, 0, sizeof *e);
    e->world = 1;
    e->spin_ns = e->yield_ns = -1;
    bool have;
    long v;
    e->segment = getenv("SHMESH_SEGMENT");
    if (e->segment && !*e->segment)
        e->segment = NULL;
    if (e->segment) {
        int rc = env_int("SHMESH_WORLD_SIZE", 1, SEG_MAX_WORLD, &v, &have);
        if (rc)
            return rc;
        if (!have) {
            init_error("SHMESH_SEGMENT is set but SHMESH_WORLD_SIZE is not: start the program "
                       "with shmesh-run, or unset SHMESH_SEGMENT to run as a single rank");
            return SHMESH_ERR_INVALID;
        }
        e->world = (int)v;
        rc = env_int("SHMESH_RANK", 0, e->world - 1, &v, &have);
        if (rc)
            return rc;
        if (!have) {
            init_error("SHMESH_SEGMENT is set but SHMESH_RANK is not: start the program with "
                       "shmesh-run, or unset SHMESH_SEGMENT to run as a single rank");
            return SHMESH_ERR_INVALID;
        }
        e->rank = (int)v;
    }
    const char *notify = getenv("SHMESH_NOTIFY");
    if (notify_parse_kind(notify, &e->notify) < 0) {
        init_error("rank %d: SHMESH_NOTIFY must be uring, futex or auto, found '%s'", e->rank,
                   notify);
        return SHMESH_ERR_INVALID;
    }
    const char *t = getenv("SHMESH_TIMEOUT");
    if (t && *t) {
        char *end;
        errno = 0;
        double secs = strtod(t, &end);
        if (errno || *end || !(secs >= 0) || secs > 1e9) {
            init_error("rank %d: SHMESH_TIMEOUT must be a number of seconds >= 0, found '%s'",
                       e->rank, t);
            return SHMESH_ERR_INVALID;
        }
        e->timeout_ns = (int64_t)(secs * 1e9);
    }
    const char *size = getenv("SHMESH_SHM_SIZE");
    if (size && *size && !e->segment && !(e->shm_size = seg_parse_size(size))) {
        init_error("rank %d: SHMESH_SHM_SIZE must be a size such as 64M or 1G, found '%s'",
                   e->rank, size);
        return SHMESH_ERR_INVALID;
    }
    struct {
        const char *name;
        uint64_t *value, dflt;
    } sizes[] = {{"SHMESH_ZC_MIN", &e->zc_min, 64u << 10},
                 {"SHMESH_RSAG_MIN", &e->rsag_min, 256u << 10},
                 {"SHMESH_CMA_MIN", &e->cma_min, 64u << 10}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const char *val = getenv(sizes[i].name);
        *sizes[i].value = sizes[i].dflt;
        if (!val || !*val)
            continue;
        *sizes[i].value = strcmp(val, "0") ? seg_parse_size(val) : 0;
        if (*sizes[i].value == 0 && strcmp(val, "0")) {
            init_error("rank %d: %s must be a size in bytes such as 0, 4096 or 1M, found '%s'",
                       e->rank, sizes[i].name, val);
            return SHMESH_ERR_INVALID;
        }
    }
    const char *cma = getenv("SHMESH_CMA"); /* "0" turns it off for this rank */
    e->cma = !(cma && !strcmp(cma, "0"));
    const char *dbg = getenv("SHMESH_DEBUG");
    if (dbg && *dbg)
        e->debug = (strstr(dbg, "paths") || strstr(dbg, "all") ? DEBUG_PATHS : 0) |
                   (strstr(dbg, "waits") || strstr(dbg, "all") ? DEBUG_WAITS : 0) |
                   (strstr(dbg, "calls") || strstr(dbg, "all") ? DEBUG_CALLS : 0);
    int rc = env_int("SHMESH_SPIN_NS", 0, INT_MAX, &v, &have);
    if (rc)
        return rc;
    if (have)
        e->spin_ns = v;
    rc = env_int("SHMESH_YIELD_NS", 0, INT_MAX, &v, &have);
    if (rc)
        return rc;
    if (have)
        e->yield_ns = v;
    return 0;
}

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

static void release(shmesh_ctx *c)
{
    call_scratch_free_all(c);
    windows_fini(&c->win);
    heap_fini(&c->heap);
    notify_close(c->notify);
    seg_close(c->seg);
    free(c->all_ranks);
    free(c);
}

static int alloc_engine(shmesh_ctx *c)
{
    c->all_ranks = malloc(sizeof *c->all_ranks * (size_t)c->world);
    if (!c->all_ranks || windows_init(&c->win, c->world))
        return -1;
    for (int r = 0; r < c->world; r++)
        c->all_ranks[r] = r;
    return 0;
}

/* Spinning pays when the peer runs on another core: it answers within a
 * microsecond or two.  With more ranks than cores the peer we wait for may
 * need our core, so spin briefly and yield to it.  Then block. */
static void default_spin(int world, int64_t *spin_ns, int64_t *yield_ns)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    bool crowded = cpus > 0 && world > cpus;
    if (*spin_ns < 0)
        *spin_ns = crowded ? 500 : 3000;
    if (*yield_ns < 0)
        *yield_ns = 100000;
}

int shmesh_init(shmesh_ctx **out)
{
    if (!out) {
        init_error("shmesh_init: the ctx argument must not be NULL");
        return SHMESH_ERR_INVALID;
    }
    *out = NULL;
    struct init_env e;
    int rc = read_env(&e);
    if (rc)
        return rc;

    shmesh_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        init_error("rank %d: out of memory", e.rank);
        return SHMESH_ERR_NOMEM;
    }
    c->rank = e.rank;
    c->world = e.world;
    c->local_devices = 1;
    c->debug = e.debug;
    char why[CTX_ERR_MAX - 32] = "";
    if (alloc_engine(c)) {
        release(c);
        init_error("rank %d: out of memory", e.rank);
        return SHMESH_ERR_NOMEM;
    }
    rc = e.segment ? seg_attach(e.segment, e.world, e.rank, &c->seg, why, sizeof why)
                   : seg_create_private(1, 0, e.shm_size, &c->seg, why, sizeof why);
    if (rc) {
        release(c);
        init_error("rank %d: %s", e.rank, why);
        return seg_error_code(rc);
    }
    rc = notify_open(e.notify, e.world, &c->notify, why, sizeof why);
    if (rc) {
        release(c);
        init_error("rank %d: %s", e.rank, why);
        return rc == -EOPNOTSUPP ? SHMESH_ERR_INVALID : SHMESH_ERR_SYSTEM;
    }
    c->me = seg_ctrl(c->seg, c->rank);
    c->zc_min = e.zc_min;
    c->rsag_min = e.rsag_min;
    c->cma_min = e.cma_min;
    uint64_t knobs[] = {c->zc_min, c->rsag_min, c->cma_min, c->seg->hdr->slot_bytes};
    c->tuning = hash_bytes(knobs, sizeof knobs, 2);
    if (heap_init(&c->heap, c->seg, c->rank)) {
        release(c);
        init_error("rank %d: out of memory", e.rank);
        return SHMESH_ERR_NOMEM;
    }
    c->waiter = (struct seg_waiter){
        .seg = c->seg,
        .notify = c->notify,
        .self = c->rank,
        .spin_ns = e.spin_ns,
        .yield_ns = e.yield_ns, /* defaults filled in below */
        .timeout_ns = e.timeout_ns,
        .slice_ns = notify_kind_of(c->notify) == NOTIFY_URING ? SLICE_URING_NS : SLICE_FUTEX_NS,
    };
    default_spin(e.world, &c->waiter.spin_ns, &c->waiter.yield_ns);
    cma_publish(c);
    rc = seg_join(c->seg, c->rank, getpid(), why, sizeof why);
    if (rc) {
        release(c);
        init_error("rank %d: %s", e.rank, why);
        return seg_error_code(rc);
    }

    int culprit = -1;
    rc = seg_wait_flag(&c->waiter, &c->seg->hdr->attached, (uint32_t)c->world, -1, &culprit);
    if (rc) {
        char waiting[64];
        snprintf(waiting, sizeof waiting, "all %d ranks to join (%u joined)", c->world,
                 atomic_load(&c->seg->hdr->attached.value));
        rc = fail_wait(c, "shmesh_init", 0, rc, culprit, waiting);
        init_error("%s", c->err);
        release(c);
        return rc;
    }
    cma_probe(c, e.cma);
    for (int j = 0; j < c->world; j++) {
        if (j == c->rank)
            continue;
        int pid = atomic_load_explicit(&seg_ctrl(c->seg, j)->pid, memory_order_relaxed);
        rc = notify_watch(c->notify, j, pid);
        if (rc < 0) {
            init_error("rank %d: cannot watch rank %d (pid %d) for exit: %s", c->rank, j, pid,
                       strerror(-rc));
            release(c);
            return SHMESH_ERR_SYSTEM;
        }
    }
    *out = c;
    return 0;
}

int shmesh_finalize(shmesh_ctx *c)
{
    if (!c)
        return 0;
    /* Calls still in flight finish first (they were made before this one). */
    struct call k;
    int rc = call_finish(&k, op_world_step_prepare(&k, c, OP_FINALIZE));
    /* Only a clean finalize makes this rank's exit harmless to the others. */
    if (!rc)
        atomic_store_explicit(&c->me->state, SEG_RANK_FINALIZED, memory_order_release);
    else
        init_error("%s", c->err); /* the context goes; its explanation stays */
    release(c);
    return rc;
}

void shmesh_abort(shmesh_ctx *c, int code, const char *why)
{
    if (code < 1 || code > 255)
        code = 1;
    if (c && c->seg) {
        char reason[SEG_REASON_MAX];
        snprintf(reason, sizeof reason, "rank %d (pid %d) called shmesh_abort(%d): %s", c->rank,
                 (int)getpid(), code, why ? why : "");
        seg_abort(c->seg, SEG_CAUSE_RANK_ABORT, c->rank, code, reason);
    }
    fflush(NULL);
    _exit(code);
}

int shmesh_rank(const shmesh_ctx *c) { return c ? c->rank : SHMESH_ERR_INVALID; }

int shmesh_world_size(const shmesh_ctx *c) { return c ? c->world : SHMESH_ERR_INVALID; }

const char *shmesh_notifier(const shmesh_ctx *c) { return c ? notify_name(c->notify) : ""; }
