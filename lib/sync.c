/* Entering and beginning calls, explaining calls, and what becomes of a
 * failed wait (abort, peer death, mismatch, timeout). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const char *const op_names[] = {
    [OP_BARRIER] = "shmesh_barrier",
    [OP_WORLD_SUM] = "shmesh_world_sum",
    [OP_FINALIZE] = "shmesh_finalize",
    [OP_MESH_CREATE] = "shmesh_mesh_create",
    [OP_PSUM] = "shmesh_psum",
    [OP_PMAX] = "shmesh_pmax",
    [OP_PMIN] = "shmesh_pmin",
    [OP_PMEAN] = "shmesh_pmean",
    [OP_PARGMAX] = "shmesh_pargmax",
    [OP_PARGMIN] = "shmesh_pargmin",
    [OP_ALL_GATHER] = "shmesh_all_gather",
    [OP_PSUM_SCATTER] = "shmesh_psum_scatter",
    [OP_ALL_TO_ALL] = "shmesh_all_to_all",
    [OP_PSWAPAXES] = "shmesh_pswapaxes",
    [OP_RAGGED_ALL_TO_ALL] = "shmesh_ragged_all_to_all",
    [OP_PPERMUTE] = "shmesh_ppermute",
    [OP_PSHUFFLE] = "shmesh_pshuffle",
    [OP_PBROADCAST] = "shmesh_pbroadcast",
};

const char *call_op_name(enum call_op op)
{
    return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : NULL;
}

/* 64-bit multiply-mix over 8-byte words: fast for the few hundred bytes of a
 * call description, and good enough to tell calls apart. */
uint64_t hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t h = seed ^ 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, b + i, n - i);
    h = (h ^ w) * 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len)
{
    const char *name = call_op_name((enum call_op)d->op);
    if (!name) {
        snprintf(buf, len, "an unknown collective (op %u, call #%" PRIu64 ")", d->op, call);
        return;
    }
    char in[128], out[128];
    shape_format(in, sizeof in, (shmesh_dtype)d->dtype, d->ndim, d->shape);
    shape_format(out, sizeof out, (shmesh_dtype)d->out_dtype, d->out_ndim, d->out_shape);
    switch (d->op) {
    case OP_BARRIER:
    case OP_FINALIZE:
        snprintf(buf, len, "%s (call #%" PRIu64 ")", name, call);
        break;
    case OP_WORLD_SUM:
        snprintf(buf, len, "%s(count=%" PRIu64 ", %s) (call #%" PRIu64 ")", name, d->count,
                 shmesh_dtype_name((shmesh_dtype)d->dtype), call);
        break;
    case OP_MESH_CREATE: {
        char sizes[128] = "";
        int n = 0;
        for (int k = 0; k < d->ndim && k < SHMESH_MAX_NDIM && n < (int)sizeof sizes; k++)
            n += snprintf(sizes + n, sizeof sizes - (size_t)n, "%s%" PRId64, k ? "," : "",
                          d->shape[k]);
        snprintf(buf, len, "%s(axes \"%s\", sizes [%s]) (call #%" PRIu64 ")", name, d->axes,
                 sizes, call);
        break;
    }
    default: {
        char params[96] = "";
        const int64_t *pa = d->param;
        switch (d->op) {
        case OP_ALL_GATHER:
            snprintf(params, sizeof params, ", axis=%" PRId64 ", tiled=%s", pa[0],
                     pa[1] ? "true" : "false");
            break;
        case OP_PSUM_SCATTER:
            snprintf(params, sizeof params, ", scatter_dimension=%" PRId64 ", tiled=%s", pa[0],
                     pa[1] ? "true" : "false");
            break;
        case OP_ALL_TO_ALL:
            snprintf(params, sizeof params,
                     ", split_axis=%" PRId64 ", concat_axis=%" PRId64 ", tiled=%s", pa[0], pa[1],
                     pa[2] ? "true" : "false");
            break;
        case OP_PSWAPAXES:
            snprintf(params, sizeof params, ", axis=%" PRId64, pa[0]);
            break;
        case OP_PBROADCAST:
            snprintf(params, sizeof params, ", source=%" PRId64, pa[0]);
            break;
        case OP_PPERMUTE:
            snprintf(params, sizeof params, ", %" PRId64 " pairs", pa[0]);
            break;
        default:
            break;
        }
        snprintf(buf, len, "%s(\"%s\", %s -> %s%s%s%s) (call #%" PRIu64 ")", name, d->axes,
                 in, out, params, d->groups[0] ? ", axis_index_groups=" : "", d->groups, call);
    }
    }
}

static uint64_t mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

/* Only what identifies the call: the used dimensions and the axes' text,
 * not the whole description (hashing it all cost more than the rest of a
 * small call).  The groups' text is covered by extra_hash. */
uint64_t call_hash(const struct call_desc *d)
{
    uint64_t h = mix(0x9E3779B97F4A7C15ull, d->op | (uint64_t)(uint32_t)d->mesh << 32);
    h = mix(h, d->dtype | (uint64_t)d->out_dtype << 32);
    h = mix(h, (uint32_t)d->ndim | (uint64_t)(uint32_t)d->out_ndim << 32);
    for (int k = 0; k < d->ndim && k < SHMESH_MAX_NDIM; k++)
        h = mix(h, (uint64_t)d->shape[k]);
    for (int k = 0; k < d->out_ndim && k < SHMESH_MAX_NDIM; k++)
        h = mix(h, (uint64_t)d->out_shape[k]);
    for (int k = 0; k < 4; k++)
        h = mix(h, (uint64_t)d->param[k]);
    h = mix(h, d->count);
    h = mix(h, d->extra_hash);
    size_t len = strnlen(d->axes, sizeof d->axes);
    return len ? hash_bytes(d->axes, len, h) : h;
}

static int aborted(shmesh_ctx *c, const struct seg_abort_info *ai)
{
    switch (ai->cause) {
    case SEG_CAUSE_RANK_DIED:
        if (ai->rank < 0)
            return ctx_poison(c, SHMESH_ERR_PEER_DEAD,
                              "a peer failed during %s (call #%" PRIu64 "): %s", c->op, c->calls,
                              ai->reason);
        return ctx_poison(c, SHMESH_ERR_PEER_DEAD,
                          "peer rank %d failed during %s (call #%" PRIu64 "): %s", ai->rank,
                          c->op, c->calls, ai->reason);
    case SEG_CAUSE_RANK_ABORT:
        return ctx_poison(c, SHMESH_ERR_ABORTED, "job aborted during %s (call #%" PRIu64 "): %s",
                          c->op, c->calls, ai->reason);
    case SEG_CAUSE_MISMATCH:
        return ctx_poison(c, SHMESH_ERR_MISMATCH,
                          "ranks made different calls, seen during %s (call #%" PRIu64 "): %s",
                          c->op, c->calls, ai->reason);
    default:
        return ctx_poison(c, SHMESH_ERR_ABORTED,
                          "job aborted by the launcher during %s (call #%" PRIu64 "): %s", c->op,
                          c->calls, ai->reason[0] ? ai->reason : "no reason recorded");
    }
}

int sync_enter(shmesh_ctx *c, const char *op)
{
    if (!c) {
        init_error("%s: the context (or mesh) is NULL", op);
        return SHMESH_ERR_INVALID;
    }
    if (c->poison)
        return c->poison;
    c->op = op;
    return 0;
}

int sync_begin(shmesh_ctx *c)
{
    c->calls++;
    c->window = 0;
    struct seg_abort_info ai;
    if (atomic_load_explicit(&c->seg->hdr->abort.value, memory_order_acquire) &&
        seg_aborted(c->seg, &ai))
        return aborted(c, &ai);
    return 0;
}

int sync_mismatch(shmesh_ctx *c, const struct call_desc *mine, int other_rank,
                  const struct call_desc *theirs)
{
    char a[400], b[400], reason[SEG_REASON_MAX];
    call_describe(mine, c->calls, a, sizeof a);
    if (theirs && theirs->tuning != mine->tuning && call_hash(theirs) == call_hash(mine))
        snprintf(b, sizeof b,
                 "the same with other settings: SHMESH_SLOT_BYTES, SHMESH_ZC_MIN, SHMESH_CMA_MIN "
                 "and SHMESH_RSAG_MIN must be the same on every rank");
    else if (theirs)
        call_describe(theirs, c->calls, b, sizeof b);
    else
        snprintf(b, sizeof b,
                 "something else: its step of call #%" PRIu64 " is gone, so the ranks disagree "
                 "about this call's groups or sizes",
                 c->calls);
    ctx_poison(c, SHMESH_ERR_MISMATCH, "called %s but rank %d called %s", a, other_rank, b);
    /* Tell the whole job: ranks of other groups may never meet this one. */
    snprintf(reason, sizeof reason, "%.*s", (int)sizeof reason - 1, c->err);
    seg_abort(c->seg, SEG_CAUSE_MISMATCH, c->rank, 0, reason);
    return SHMESH_ERR_MISMATCH;
}

int sync_wait_failed(shmesh_ctx *c, int rc, int culprit, const char *waiting_for)
{
    struct seg_abort_info ai;
    switch (rc) {
    case -ECANCELED:
        seg_aborted(c->seg, &ai);
        return aborted(c, &ai);
    case -EOWNERDEAD: {
        /* Recorded for the other ranks and the launcher unless someone was
         * first; the launcher's record, when it won, knows the exit status. */
        char reason[SEG_REASON_MAX];
        snprintf(reason, sizeof reason,
                 "rank %d (pid %d) exited without calling shmesh_finalize (seen by rank %d "
                 "while waiting for %s)",
                 culprit, (int)atomic_load(&seg_ctrl(c->seg, culprit)->pid), c->rank, waiting_for);
        seg_abort(c->seg, SEG_CAUSE_RANK_DIED, culprit, 0, reason);
        seg_aborted(c->seg, &ai);
        return aborted(c, &ai);
    }
    case -ESHUTDOWN:
        return ctx_poison(c, SHMESH_ERR_MISMATCH,
                          "rank %d already called shmesh_finalize but this rank called %s "
                          "(call #%" PRIu64 "): ranks made different numbers of collective calls",
                          culprit, c->op, c->calls);
    case -ETIMEDOUT:
        return ctx_poison(c, SHMESH_ERR_TIMEOUT,
                          "%s (call #%" PRIu64 ") waited longer than SHMESH_TIMEOUT (%.3f s) "
                          "for %s",
                          c->op, c->calls, (double)c->waiter.timeout_ns / 1e9, waiting_for);
    default:
        return ctx_poison(c, SHMESH_ERR_SYSTEM, "%s (call #%" PRIu64 ") could not wait for %s: %s",
                          c->op, c->calls, waiting_for, strerror(-rc));
    }
}
