/* all_to_all and pswapaxes: block j of the input along split_axis goes to
 * position j, which places the block from position q at index q along
 * concat_axis. */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "ops/args.h"
#include "ops/ops.h"
#include "ops/prologue.h"

OP_PREPARE_INLINE int op_all_to_all_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    enum call_op op = args->op;
    const char *axes = args->axes;
    const shmesh_groups *gs = args->gs;
    int split_axis = args->axis, concat_axis = args->axis2;
    bool tiled = args->tiled;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, op, axes, gs, true, &a, in, out);
    if (rc)
        return rc;
    shmesh_ctx *c = k->c;
    int n = k->g.n, split, concat;
    const char *split_name = op == OP_PSWAPAXES ? "axis" : "split_axis";
    const char *concat_name = op == OP_PSWAPAXES ? "axis" : "concat_axis";
    if ((rc = axis_canon(c, k->name, split_name, split_axis, in->ndim, &split)) ||
        (rc = axis_canon(c, k->name, concat_name, concat_axis, in->ndim, &concat)))
        return rc;
    int64_t size = in->shape[split], in_blk, out_blk;
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, in->shape, sizeof *shape * (size_t)in->ndim);
    if (tiled) {
        if (size % n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: the size of all_to_all split_axis (%lld) has to be divisible by "
                            "the size of the named axis \"%s\" (%d)",
                            k->name, (long long)size, k->d.axes, n);
        in_blk = size / n;
        shape[split] /= n;
        out_blk = shape[concat];
        /* The elements stay as many, but when split_axis has size 0 the
         * concat_axis may be too long to multiply. */
        if (!shape_scale(in->dtype, in->ndim, shape, concat, n)) {
            char how[96];
            snprintf(how, sizeof how, "split along axis %d, concatenated along axis %d over %d "
                     "members", split, concat, n);
            return shape_refuse(c, k->name, "out", in->dtype, in->ndim, shape, concat, n, "in",
                                in, how);
        }
    } else {
        if (size != n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: all_to_all requires the size of the mapped axis \"%s\" to equal "
                            "x.shape[split_axis], but they are %d and %lld respectively",
                            k->name, k->d.axes, n, (long long)size);
        in_blk = out_blk = 1;
        /* Delete split_axis, then insert the group's axis at concat_axis. */
        memmove(shape + split, shape + split + 1, sizeof *shape * (size_t)(in->ndim - split - 1));
        memmove(shape + concat + 1, shape + concat,
                sizeof *shape * (size_t)(in->ndim - 1 - concat));
        shape[concat] = n;
    }
    if ((rc = array_expect(c, k->name, "out", out, in->dtype, in->ndim, shape)))
        return rc;
    struct flow *f = &k->f;
    flow_init(f, FLOW_MOVE, in, out);
    f->in_dim = split;
    f->in_blk = in_blk;
    f->out_dim = concat;
    f->out_blk = out_blk;
    if ((rc = coll_no_overlap(k, in->data, f->in_bytes, out->data, f->out_bytes, false)))
        return rc;
    k->d.param[0] = split;
    k->d.param[1] = concat;
    k->d.param[2] = tiled;
    return coll_ready(k);
}


