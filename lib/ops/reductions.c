/* psum, pmax, pmin, pmean, pargmax, pargmin: every member's output is the
 * reduction of every member's whole input, combined in group order. */
#include "core/context.h"
#include "batch/batch.h"
#include "engine/devices.h"
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

int op_reduce_prepare(struct call *k, shmesh_mesh *m, enum call_op op, const char *axes,
                      const shmesh_groups *gs, const shmesh_array *in, shmesh_array *out)
{
    enum red_op rop = red_of(op);
    struct axes a;
    int rc = coll_open(k, m, op, axes, gs, false, &a, in, out);
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
    else if (rop == RED_MEAN && !dtype_is_float(in->dtype)) {
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

#define REDUCTION(name, OP)                                                                    \
    int shmesh_##name(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,               \
                      const shmesh_array *in, shmesh_array *out)                               \
    {                                                                                          \
        BATCHED(m, .op = OP, .axes = axes, .gs = gs, .in = in, .out = out);                    \
        DEVICES_RUN(m, k, l, op_reduce_prepare(k, m, OP, axes, gs, in + l, out + l));          \
    }

REDUCTION(psum, OP_PSUM)
REDUCTION(pmax, OP_PMAX)
REDUCTION(pmin, OP_PMIN)
REDUCTION(pmean, OP_PMEAN)
REDUCTION(pargmax, OP_PARGMAX)
REDUCTION(pargmin, OP_PARGMIN)
