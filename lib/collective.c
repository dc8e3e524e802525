#include <stdio.h>
#include <string.h>

#include "collective.h"

static const char *const names[] = {
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

int coll_open(struct coll *k, shmesh_mesh *m, enum call_op op, const char *axes,
              const shmesh_groups *gs, bool equal_groups)
{
    memset(k, 0, sizeof *k);
    k->name = names[op];
    k->m = m;
    k->c = m ? m->ctx : NULL;
    int rc = sync_enter(k->c, k->name);
    if (rc)
        return rc;
    rc = mesh_axes(m, k->name, axes, &k->axes);
    if (!rc) {
        uint64_t gh = 0;
        rc = mesh_group(m, k->name, &k->axes, gs, equal_groups, &k->g, &gh);
        k->d.extra_hash = gh;
    }
    k->d.op = op;
    k->d.mesh = m->id;
    snprintf(k->d.axes, sizeof k->d.axes, "%s", k->axes.text);
    return rc;
}

void coll_describe(struct coll *k, const shmesh_array *in, const shmesh_array *out)
{
    if (in) {
        k->d.dtype = (uint32_t)in->dtype;
        k->d.ndim = in->ndim;
        /* Only the used dimensions: the rest of a caller's shape may be junk. */
        memcpy(k->d.shape, in->shape, sizeof *in->shape * (size_t)in->ndim);
    }
    if (out) {
        k->d.out_dtype = (uint32_t)out->dtype;
        k->d.out_ndim = out->ndim;
        memcpy(k->d.out_shape, out->shape, sizeof *out->shape * (size_t)out->ndim);
    }
}

int coll_begin(struct coll *k) { return sync_begin(k->c); }

struct xchg coll_xchg(const struct coll *k)
{
    return (struct xchg){.c = k->c, .g = k->g};
}

int coll_no_overlap(struct coll *k, const void *in, uint64_t in_bytes, const void *out,
                    uint64_t out_bytes, bool same_allowed)
{
    const unsigned char *a = in, *b = out;
    if (!in_bytes || !out_bytes)
        return 0;
    if (same_allowed && a == b && in_bytes == out_bytes)
        return 0;
    if (a < b + out_bytes && b < a + in_bytes)
        return ctx_fail(k->c, SHMESH_ERR_INVALID,
                        "%s: in and out overlap%s", k->name,
                        same_allowed ? " (only the very same buffer is allowed)" : "");
    return 0;
}
