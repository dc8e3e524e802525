/* all_gather (every member sends its input to all; each places the inputs
 * side by side) and psum_scatter (every member sends block j of its input to
 * position j, which sums what it receives). */
#include <stdio.h>
#include <string.h>

#include "ops/prologue.h"
#include "paths/cma.h"

static void gather_direct(const struct xchg *x, unsigned char *const *in, unsigned char *const *out)
{
    const struct blocks *b = x->op;
    for (int q = 0; q < x->g.n; q++) {
        struct box bx;
        box_slab(&bx, b->out, b->out_dim, (int64_t)q * b->out_blk, b->out_blk);
        box_write(&bx, b->out->data, 0, b->in_bytes / b->esz, in[q]);
    }
}

static int gather_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct blocks *b = x->op;
    shmesh_ctx *c = x->c;
    uint64_t count = b->in_bytes / b->esz, block = BOUNCE_BYTES / b->esz;
    for (int q = 0; q < x->g.n; q++) {
        struct box bx;
        box_slab(&bx, b->out, b->out_dim, (int64_t)q * b->out_blk, b->out_blk);
        if (q == x->g.me) {
            box_write(&bx, b->out->data, 0, count, b->in->data);
            continue;
        }
        int rc;
        if (bx.ndim == 1) { /* one run of the output: read straight into it */
            if ((rc = cma_read(c, x->g.ranks[q], in_addr[q],
                               (unsigned char *)b->out->data + (uint64_t)bx.start[0] * b->esz,
                               b->in_bytes)))
                return rc;
            continue;
        }
        for (uint64_t i = 0; i < count; i += block) {
            uint64_t cnt = count - i < block ? count - i : block;
            if ((rc = cma_read(c, x->g.ranks[q], in_addr[q] + i * b->esz, c->bounce, cnt * b->esz)))
                return rc;
            box_write(&bx, b->out->data, i, cnt, c->bounce);
        }
    }
    return 0;
}

int shmesh_all_gather(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                      bool tiled, const shmesh_array *in, shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, OP_ALL_GATHER, axes, gs, true);
    if (rc)
        return rc;
    shmesh_ctx *c = k.c;
    uint64_t n_in, n_out;
    if ((rc = coll_arrays(&k, in, "in", out, "out", &n_in, &n_out)))
        return rc;
    int n = k.g.n, dim;
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, in->shape, sizeof *shape * (size_t)in->ndim);
    int out_ndim = in->ndim;
    if (tiled) {
        if ((rc = axis_canon(c, k.name, "axis", axis, in->ndim, &dim)))
            return rc;
        shape[dim] *= n;
    } else {
        if (in->ndim == SHMESH_MAX_NDIM)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: in already has %d dimensions; untiled output would have more",
                            k.name, SHMESH_MAX_NDIM);
        if ((rc = axis_canon(c, k.name, "axis", axis, in->ndim + 1, &dim)))
            return rc;
        memmove(shape + dim + 1, shape + dim, sizeof *shape * (size_t)(in->ndim - dim));
        shape[dim] = n;
        out_ndim++;
    }
    if ((rc = array_expect(c, k.name, "out", out, in->dtype, out_ndim, shape)))
        return rc;
    struct blocks b = {.in = in, .out = out, .esz = shmesh_dtype_size(in->dtype), .out_dim = dim,
                       .out_blk = tiled ? in->shape[dim] : 1};
    b.in_bytes = n_in * b.esz;
    if ((rc = coll_no_overlap(&k, in->data, b.in_bytes, out->data, n_out * b.esz, false)))
        return rc;

    if ((rc = coll_start(&k, in, out)))
        return rc;
    k.d.param[0] = dim;
    k.d.param[1] = tiled;
    struct xchg x = coll_xchg(&k);
    x.broadcast = true;
    x.unit = b.esz;
    x.bytes = blocks_whole;
    x.pack = blocks_copy_input;
    x.recv = blocks_recv;
    x.direct = gather_direct;
    x.cma = gather_cma;
    x.zin = in->data;
    x.zin_bytes = b.in_bytes;
    x.op = &b;
    return xchg_run(&x, &k.d);
}

static void scatter_reduce(const struct xchg *x, uint64_t off, const void *const *src,
                           uint64_t len)
{
    const struct blocks *b = x->op;
    reduce_run(RED_SUM, b->in->dtype, b->in->dtype, (unsigned char *)b->out->data + off, src,
               x->g.n, (size_t)(len / b->esz), x->g.n);
}

/* Zero-copy, when position p's block is one run of every input (nothing but
 * size-1 dimensions before the scattered one). */
static void scatter_direct(const struct xchg *x, unsigned char *const *in,
                           unsigned char *const *out)
{
    const struct blocks *b = x->op;
    shmesh_ctx *c = x->c;
    uint64_t count = b->blk_bytes / b->esz, block = BOUNCE_BYTES / b->esz;
    for (uint64_t i = 0; i < count; i += block) {
        uint64_t cnt = count - i < block ? count - i : block;
        for (int q = 0; q < x->g.n; q++)
            c->srcs[q] = in[q] + (uint64_t)x->g.me * b->blk_bytes + i * b->esz;
        reduce_run(RED_SUM, b->in->dtype, b->in->dtype,
                   (unsigned char *)b->out->data + i * b->esz, c->srcs, x->g.n, (size_t)cnt,
                   x->g.n);
    }
}

static int scatter_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct blocks *b = x->op;
    shmesh_ctx *c = x->c;
    int n = x->g.n, me = x->g.me, rc;
    uint64_t count = b->blk_bytes / b->esz, block = BOUNCE_BYTES / (uint64_t)n / b->esz;
    uint64_t base = (uint64_t)me * b->blk_bytes;
    for (uint64_t i = 0; i < count; i += block) {
        uint64_t cnt = count - i < block ? count - i : block;
        for (int q = 0; q < n; q++) {
            unsigned char *bq = c->bounce + (size_t)q * block * b->esz;
            if (q == me)
                c->srcs[q] = (const unsigned char *)b->in->data + base + i * b->esz;
            else if ((rc = cma_read(c, x->g.ranks[q], in_addr[q] + base + i * b->esz, bq,
                                    cnt * b->esz)))
                return rc;
            else
                c->srcs[q] = bq;
        }
        reduce_run(RED_SUM, b->in->dtype, b->in->dtype, (unsigned char *)b->out->data + i * b->esz,
                   c->srcs, n, (size_t)cnt, n);
    }
    return 0;
}

int shmesh_psum_scatter(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                        int scatter_dimension, bool tiled, const shmesh_array *in,
                        shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, OP_PSUM_SCATTER, axes, gs, true);
    if (rc)
        return rc;
    shmesh_ctx *c = k.c;
    uint64_t n_in, n_out;
    if ((rc = coll_arrays(&k, in, "in", out, "out", &n_in, &n_out)))
        return rc;
    if (in->dtype == SHMESH_BOOL)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: cannot sum bool (JAX turns booleans into int32 only in psum): pass "
                        "an integer array",
                        k.name);
    int n = k.g.n, dim;
    if ((rc = axis_canon(c, k.name, "scatter_dimension", scatter_dimension, in->ndim, &dim)))
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
                            k.name, (long long)size, n);
        shape[dim] = size / n;
    } else {
        if (size != n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: reduce_scatter operand scatter dimension size %lld must match "
                            "shard count %d",
                            k.name, (long long)size, n);
        memmove(shape + dim, shape + dim + 1, sizeof *shape * (size_t)(in->ndim - dim - 1));
        out_ndim--;
    }
    if ((rc = array_expect(c, k.name, "out", out, in->dtype, out_ndim, shape)))
        return rc;
    struct blocks b = {.in = in, .out = out, .esz = shmesh_dtype_size(in->dtype), .in_dim = dim,
                       .in_blk = size / n};
    b.in_bytes = n_in * b.esz;
    b.blk_bytes = n_out * b.esz;
    if ((rc = coll_no_overlap(&k, in->data, b.in_bytes, out->data, b.blk_bytes, false)))
        return rc;

    if ((rc = coll_start(&k, in, out)))
        return rc;
    k.d.param[0] = dim;
    k.d.param[1] = tiled;
    struct xchg x = coll_xchg(&k);
    x.unit = b.esz;
    x.bytes = blocks_one;
    x.pack = blocks_pack;
    x.reduce = scatter_reduce;
    bool leading = true;
    for (int d = 0; d < dim; d++)
        leading &= in->shape[d] == 1;
    if (leading) {
        x.direct = scatter_direct;
        x.cma = scatter_cma;
        x.zin = in->data;
        x.zin_bytes = b.in_bytes;
    }
    x.op = &b;
    return xchg_run(&x, &k.d);
}
