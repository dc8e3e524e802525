/* World-wide collectives of the foundation: barrier and the in-place sum. */
#include <string.h>

#include "core/context.h"
#include "core/dtype.h"
#include "core/fail.h"
#include "engine/exchange.h"
#include "kernels/reduce.h"
#include "ops/reductions.h"
#include "ops/world.h"
#include "paths/cma.h"
#include "paths/rsag.h"

static struct xchg world_xchg(shmesh_ctx *c)
{
    return (struct xchg){.c = c, .g = {.n = c->world, .me = c->rank, .ranks = c->all_ranks},
                         .broadcast = true, .bytes = xchg_no_bytes};
}

int world_step(shmesh_ctx *c, enum call_op op)
{
    struct call_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.mesh = -1;
    struct xchg x = world_xchg(c);
    return xchg_run(&x, &d);
}

int shmesh_barrier(shmesh_ctx *c)
{
    int rc = sync_enter(c, "shmesh_barrier");
    if (!rc)
        rc = sync_begin(c);
    return rc ? rc : world_step(c, OP_BARRIER);
}

struct world_sum {
    unsigned char *buf;
    uint64_t bytes;
    shmesh_dtype dt;
};

static uint64_t ws_bytes(const struct xchg *x, int from, int to)
{
    return ((const struct world_sum *)x->op)->bytes;
}

static void ws_pack(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    memcpy(dst, ((const struct world_sum *)x->op)->buf + off, len);
}

/* In place is safe: a window's range is copied out before it is written. */
static void ws_reduce(const struct xchg *x, uint64_t off, const void *const *src, uint64_t len)
{
    const struct world_sum *w = x->op;
    size_t esz = shmesh_dtype_size(w->dt);
    reduce_sum(w->dt, w->buf + off, src, x->g.n, (size_t)(len / esz));
}

static void ws_direct(const struct xchg *x, unsigned char *const *in, unsigned char *const *out)
{
    const struct world_sum *w = x->op;
    direct_reduce(x, RED_SUM, w->dt, w->dt, w->bytes / shmesh_dtype_size(w->dt), 1, in, out);
}

static int ws_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct world_sum *w = x->op;
    return cma_reduce(x, RED_SUM, w->dt, w->dt, w->bytes / shmesh_dtype_size(w->dt), 1, w->buf,
                      w->buf, in_addr, out_addr);
}

static int ws_rsag(struct xchg *x, const struct call_desc *desc)
{
    const struct world_sum *w = x->op;
    return rsag_run(x->c, &x->g, desc, RED_SUM, w->dt, w->dt, w->buf, w->buf,
                    w->bytes / shmesh_dtype_size(w->dt), 1);
}

int shmesh_world_sum(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype)
{
    int rc = sync_enter(c, "shmesh_world_sum");
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
    size_t esz = shmesh_dtype_size(dtype);
    if (count > SIZE_MAX / esz)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: count %zu of %s overflows the address space", count,
                        shmesh_dtype_name(dtype));
    if (!buf && count)
        return ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_world_sum: buf is NULL but count is %zu",
                        count);
    if ((rc = sync_begin(c)))
        return rc;
    struct call_desc d;
    memset(&d, 0, sizeof d);
    d.op = OP_WORLD_SUM;
    d.mesh = -1;
    d.dtype = d.out_dtype = (uint32_t)dtype;
    d.param[0] = (int64_t)count;
    struct world_sum w = {buf, count * esz, dtype};
    struct xchg x = world_xchg(c);
    x.unit = esz;
    x.bytes = ws_bytes;
    x.pack = ws_pack;
    x.reduce = ws_reduce;
    x.direct = ws_direct; /* in place: input and output are the same buffer */
    x.cma = use_rsag(c, w.bytes, c->world) ? NULL : ws_cma;
    x.zin = x.zout = buf;
    x.zin_bytes = x.zout_bytes = w.bytes;
    x.zout_shared = true;
    if (use_rsag(c, w.bytes, c->world))
        x.staged = ws_rsag;
    x.op = &w;
    return xchg_run(&x, &d);
}
