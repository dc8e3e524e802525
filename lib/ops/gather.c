/* all_gather (every member's input lands in block q of every output) and
 * psum_scatter (block p of every input is summed into member p's output). */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "ops/args.h"
#include "ops/ops.h"
#include "ops/prologue.h"

OP_PREPARE_INLINE int op_all_gather_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    const char *axes = args->axes;
    const shmesh_groups *gs = args->gs;
    int axis = args->axis;
    bool tiled = args->tiled;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, OP_ALL_GATHER, axes, gs, true, &a, in, out);
    if (rc)
        return rc;
    shmesh_ctx *c = k->c;
    int n = k->g.n, dim;
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, in->shape, sizeof *shape * (size_t)in->ndim);
    int out_ndim = in->ndim;
    int scaled = -1; /* the dimension multiplied by n */
    if (tiled) {
        if ((rc = axis_canon(c, k->name, "axis", axis, in->ndim, &dim)))
            return rc;
        scaled = dim;
    } else {
        if (in->ndim == SHMESH_MAX_NDIM)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: in already has %d dimensions; untiled output would have more",
                            k->name, SHMESH_MAX_NDIM);
        if ((rc = axis_canon(c, k->name, "axis", axis, in->ndim + 1, &dim)))
            return rc;
        memmove(shape + dim + 1, shape + dim, sizeof *shape * (size_t)(in->ndim - dim));
        shape[dim] = n;
        out_ndim++;
    }
    /* n times the input's elements may not be addressable, nor its
     * dimension fit int64. */
    if (!shape_scale(in->dtype, out_ndim, shape, scaled, n)) {
        char how[96];
        snprintf(how, sizeof how, "gathered over %d members %s axis %d", n,
                 tiled ? "along" : "into new", dim);
        return shape_refuse(c, k->name, "out", in->dtype, out_ndim, shape, scaled, n, "in", in,
                            how);
    }
    if ((rc = array_expect(c, k->name, "out", out, in->dtype, out_ndim, shape)))
        return rc;
    struct flow *f = &k->f;
    flow_init(f, FLOW_MOVE, in, out);
    f->out_dim = dim;
    f->out_blk = tiled ? in->shape[dim] : 1;
    if ((rc = coll_no_overlap(k, in->data, f->in_bytes, out->data, f->out_bytes, false)))
        return rc;
    k->d.param[0] = dim;
    k->d.param[1] = tiled;
    return coll_ready(k);
}


OP_PREPARE_INLINE int op_psum_scatter_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    const char *axes = args->axes;
    const shmesh_groups *gs = args->gs;
    int scatter_dimension = args->axis;
    bool tiled = args->tiled;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, OP_PSUM_SCATTER, axes, gs, true, &a, in, out);
    if (rc)
        return rc;
    shmesh_ctx *c = k->c;
    if (in->dtype == SHMESH_BOOL)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: cannot sum bool (JAX turns booleans into int32 only in psum): pass "
                        "an integer array",
                        k->name);
    int n = k->g.n, dim;
    if ((rc = axis_canon(c, k->name, "scatter_dimension", scatter_dimension, in->ndim, &dim)))
        return rc;
    int64_t size = in->shape[dim];
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, in->shape, sizeof *shape * (size_t)in->ndim);
    int out_ndim = in->ndim;
    if (tiled) {
        if (size % n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: tiled reduce_scatter operand scatter dimension size %lld must be "
                            "divisible by shard_count %d",
                            k->name, (long long)size, n);
        shape[dim] = size / n;
    } else {
        if (size != n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: reduce_scatter operand scatter dimension size %lld must match "
                            "shard count %d",
                            k->name, (long long)size, n);
        memmove(shape + dim, shape + dim + 1, sizeof *shape * (size_t)(in->ndim - dim - 1));
        out_ndim--;
    }
    if ((rc = array_expect(c, k->name, "out", out, in->dtype, out_ndim, shape)))
        return rc;
    struct flow *f = &k->f;
    flow_init(f, FLOW_REDUCE, in, out);
    f->red = RED_SUM;
    f->mean_n = n;
    f->in_dim = dim;
    f->in_blk = size / n;
    if ((rc = coll_no_overlap(k, in->data, f->in_bytes, out->data, f->out_bytes, false)))
        return rc;
    k->d.param[0] = dim;
    k->d.param[1] = tiled;
    return coll_ready(k);
}

