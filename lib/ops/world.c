/* World-wide calls: barrier, the in-place world_sum, and the data-less step
 * that finalize and mesh creation take. */
#include "core/context.h"
#include "core/dtype.h"
#include "ops/ops.h"

int op_world_step_prepare(struct call *k, shmesh_ctx *c, enum call_op op)
{
    int rc = call_init(k, c, op);
    if (rc)
        return rc;
    call_group_world(k);
    flow_init(&k->f, FLOW_NONE, NULL, NULL);
    return 0;
}

int shmesh_barrier(shmesh_ctx *c)
{
    struct call k;
    return call_finish(&k, op_world_step_prepare(&k, c, OP_BARRIER));
}

int op_world_sum_prepare(struct call *k, shmesh_ctx *c, void *buf, size_t count,
                         shmesh_dtype dtype)
{
    int rc = call_init(k, c, OP_WORLD_SUM);
    if (rc)
        return rc;
    if (!dtype_valid(dtype))
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: dtype must be a shmesh_dtype below %d, got %d",
                        SHMESH_DTYPE_COUNT, (int)dtype);
    if (dtype == SHMESH_BOOL)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: cannot sum bool in place (a sum of booleans is int32, "
                        "as in JAX): pass an int32 buffer");
    size_t esz = dtype_size(dtype);
    if (count > SIZE_MAX / esz)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: count %zu of %s overflows the address space", count,
                        shmesh_dtype_name(dtype));
    if (!buf && count)
        return ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_world_sum: buf is NULL but count is %zu",
                        count);
    call_group_world(k);
    /* In place: input and output are the same one-dimensional buffer. */
    shmesh_array a = {buf, dtype, 1, {(int64_t)count}};
    flow_init(&k->f, FLOW_REDUCE, &a, &a);
    k->f.red = RED_SUM;
    k->f.mean_n = 1;
    k->d.dtype = k->d.out_dtype = (uint32_t)dtype;
    k->d.param[0] = (int64_t)count;
    return call_buffers(k);
}

int shmesh_world_sum(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype)
{
    struct call k;
    return call_finish(&k, op_world_sum_prepare(&k, c, buf, count, dtype));
}
