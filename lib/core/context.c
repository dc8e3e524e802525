/* Joining and leaving a job: shmesh_init, shmesh_finalize, shmesh_abort. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "core/fail.h"
#include "core/hash.h"
#include "core/settings.h"
#include "ops/world.h"
#include "paths/cma.h"
#include "shm/notify.h"

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

static void release(shmesh_ctx *c)
{
    heap_fini(&c->heap);
    notify_close(c->notify);
    seg_close(c->seg);
    free(c->scratch);
    free(c);
}

/* Every per-world scratch array in one allocation. */
static int alloc_scratch(shmesh_ctx *c)
{
    size_t w = (size_t)c->world;
    size_t bytes = w * (5 * sizeof(int) + sizeof(void *) * 4 + 8 * sizeof(uint64_t) +
                        sizeof(bool)) +
                   BOUNCE_BYTES;
    unsigned char *p = calloc(1, bytes);
    if (!p)
        return -1;
    c->scratch = p;
    c->srcs = (const void **)p;
    p += w * sizeof(void *);
    c->hdrs = (struct seg_slot_hdr **)p;
    p += w * sizeof(void *);
    c->zin = (unsigned char **)p;
    p += w * sizeof(void *);
    c->zout = (unsigned char **)p;
    p += w * sizeof(void *);
    c->bounce = p;
    p += BOUNCE_BYTES;
    uint64_t **u64[] = {&c->xoff_to, &c->xlen_to, &c->xoff_from, &c->xlen_from, &c->xtotal,
                        &c->seen, &c->cin, &c->cout};
    for (size_t i = 0; i < sizeof u64 / sizeof *u64; i++) {
        *u64[i] = (uint64_t *)p;
        p += w * sizeof(uint64_t);
    }
    int **ints[] = {&c->all_ranks, &c->perm_dest, &c->perm_src, &c->buf_readers[0],
                    &c->buf_readers[1]};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        *ints[i] = (int *)p;
        p += w * sizeof(int);
    }
    c->peer_cma = (bool *)p;
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

int shmesh_init(shmesh_ctx **out)
{
    if (!out) {
        init_error("shmesh_init: the ctx argument must not be NULL");
        return SHMESH_ERR_INVALID;
    }
    *out = NULL;
    struct settings e; /* the environment */
    char bad[CTX_ERR_MAX];
    if (settings_read_library(&e, bad, sizeof bad)) {
        init_error("%s", bad);
        return SHMESH_ERR_INVALID;
    }
    int rc;

    shmesh_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        init_error("rank %d: out of memory", e.rank);
        return SHMESH_ERR_NOMEM;
    }
    c->rank = e.rank;
    c->world = e.world;
    c->op = "shmesh_init";
    char why[CTX_ERR_MAX - 32] = "";
    if (alloc_scratch(c)) {
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
    c->cma_ok = e.cma; /* SHMESH_CMA=0: refused before any probe */
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
        .spin_ns = e.spin_ns, /* default filled in below */
        .yield_ns = e.yield_ns,
        .timeout_ns = e.timeout_ns,
        .slice_ns = notify_kind_of(c->notify) == NOTIFY_URING ? SLICE_URING_NS : SLICE_FUTEX_NS,
    };
    default_spin(e.world, &c->waiter.spin_ns);
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
        rc = sync_wait_failed(c, rc, culprit, waiting);
        init_error("%s", c->err);
        release(c);
        return rc;
    }
    cma_probe(c);
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
    c->op = NULL;
    *out = c;
    return 0;
}

int shmesh_finalize(shmesh_ctx *c)
{
    if (!c)
        return 0;
    int rc = sync_enter(c, "shmesh_finalize");
    if (!rc)
        rc = sync_begin(c);
    if (!rc)
        rc = world_step(c, OP_FINALIZE);
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
