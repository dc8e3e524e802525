/* psum, pmax, pmin, pmean, pargmax, pargmin: every member's output is the
 * reduction of every member's whole input, combined in group order. */
#include "core/context.h"
#include "core/dtype.h"
#include "ops/args.h"
#include "ops/ops.h"
#include "ops/prologue.h"

static enum red_op red_of(enum call_op op)
{
    switch (op) {
    case OP_PMAX: return RED_MAX;
    case OP_PMIN: return RED_MIN;
    case OP_PMEAN: return RED_MEAN;
    case OP_PARGMAX: return RED_ARGMAX;
    case OP_PARGMIN: return RED_ARGMIN;
    default: return RED_SUM;
    }
}

OP_PREPARE_INLINE int op_reduce_prepare(struct call *k, const struct op_args *args, int l)
{
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    const shmesh_groups *gs = args->gs;
    enum red_op rop = red_of(args->op);
    struct axes a;
    int rc = coll_open(k, args->m, args->op, args->axes, gs, false, &a, in, out);
    if (rc)
        return rc;
    shmesh_ctx *c = k->c;
    bool arg = rop == RED_ARGMAX || rop == RED_ARGMIN;
    if (arg && a.n != 1)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s only accepts a single axis, got \"%s\"",
                        k->name, k->d.axes);
    if (arg && gs)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s takes no axis_index_groups (JAX's has none): pass NULL", k->name);

    shmesh_dtype want = in->dtype;
    if (rop == RED_SUM && in->dtype == SHMESH_BOOL)
        want = SHMESH_INT32; /* JAX sums booleans as int32 */
    else if (arg)
        want = SHMESH_INT32;
    else if (rop == RED_MEAN && !dtype_is_float(in->dtype) && out == op_query) {
        /* The package's choice (and JAX's with 64-bit types enabled). */
        want = shmesh_dtype_size(in->dtype) == 8 ? SHMESH_FLOAT64 : SHMESH_FLOAT32;
    } else if (rop == RED_MEAN && !dtype_is_float(in->dtype)) {
        if (out->dtype != SHMESH_FLOAT32 && out->dtype != SHMESH_FLOAT64)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: the mean of %s is floating: out must be float32 (as JAX gives) "
                            "or float64, got %s",
                            k->name, shmesh_dtype_name(in->dtype), shmesh_dtype_name(out->dtype));
        want = out->dtype;
    }
    if ((rc = array_expect(c, k->name, "out", out, want, in->ndim, in->shape)))
        return rc;
    struct flow *f = &k->f;
    flow_init(f, FLOW_REDUCE, in, out);
    f->red = rop;
    /* JAX's pmean divides by psum(1, axes, axis_index_groups), which for a
     * constant is the size of the *first* subgroup, for every subgroup. */
    f->mean_n = !gs ? k->g.n : gs->group_sizes ? gs->group_sizes[0] : gs->group_size;
    if ((rc = coll_no_overlap(k, in->data, f->in_bytes, out->data, f->out_bytes,
                              f->in_esz == f->out_esz)))
        return rc;
    return coll_ready(k);
}
