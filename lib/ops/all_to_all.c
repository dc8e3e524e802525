/* all_to_all and pswapaxes: block j of the input along split_axis goes to
 * position j, which places the block from position q at index q along
 * concat_axis. */
#include <string.h>

#include "ops/prologue.h"
#include "paths/cma.h"

static void a2a_direct(const struct xchg *x, unsigned char *const *in, unsigned char *const *out)
{
    const struct blocks *a = x->op;
    uint64_t count = a->blk_bytes / a->esz, block = BOUNCE_BYTES / a->esz;
    struct box from, to;
    box_slab(&from, a->in, a->in_dim, (int64_t)x->g.me * a->in_blk, a->in_blk);
    for (int q = 0; q < x->g.n; q++) {
        box_slab(&to, a->out, a->out_dim, (int64_t)q * a->out_blk, a->out_blk);
        for (uint64_t i = 0; i < count; i += block) {
            uint64_t cnt = count - i < block ? count - i : block;
            box_read(&from, in[q], i, cnt, x->c->bounce);
            box_write(&to, a->out->data, i, cnt, x->c->bounce);
        }
    }
}

static int a2a_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct blocks *a = x->op;
    shmesh_ctx *c = x->c;
    uint64_t count = a->blk_bytes / a->esz, block = BOUNCE_BYTES / a->esz;
    struct box from, to;
    box_slab(&from, a->in, a->in_dim, (int64_t)x->g.me * a->in_blk, a->in_blk);
    for (int q = 0; q < x->g.n; q++) {
        box_slab(&to, a->out, a->out_dim, (int64_t)q * a->out_blk, a->out_blk);
        int rc = 0;
        if (q != x->g.me && to.ndim == 1) {
            /* The block lands in one run of the output: read it straight there. */
            rc = cma_read_box(c, x->g.ranks[q], in_addr[q], &from, 0, count,
                              (unsigned char *)a->out->data + (uint64_t)to.start[0] * a->esz);
            if (rc)
                return rc;
            continue;
        }
        for (uint64_t i = 0; i < count; i += block) {
            uint64_t cnt = count - i < block ? count - i : block;
            if (q == x->g.me)
                box_read(&from, a->in->data, i, cnt, c->bounce);
            else
                rc = cma_read_box(c, x->g.ranks[q], in_addr[q], &from, i, cnt, c->bounce);
            if (rc)
                return rc;
            box_write(&to, a->out->data, i, cnt, c->bounce);
        }
    }
    return 0;
}

static int a2a_run(shmesh_mesh *m, enum call_op op, const char *axes, const shmesh_groups *gs,
                   int split_axis, int concat_axis, bool tiled, const shmesh_array *in,
                   shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, op, axes, gs, true);
    if (rc)
        return rc;
    shmesh_ctx *c = k.c;
    uint64_t n_in, n_out;
    if ((rc = coll_arrays(&k, in, "in", out, "out", &n_in, &n_out)))
        return rc;
    int n = k.g.n, split, concat;
    const char *split_name = op == OP_PSWAPAXES ? "axis" : "split_axis";
    const char *concat_name = op == OP_PSWAPAXES ? "axis" : "concat_axis";
    if ((rc = axis_canon(c, k.name, split_name, split_axis, in->ndim, &split)) ||
        (rc = axis_canon(c, k.name, concat_name, concat_axis, in->ndim, &concat)))
        return rc;
    int64_t size = in->shape[split];
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, in->shape, sizeof *shape * (size_t)in->ndim);
    struct blocks a = {.in = in, .out = out, .esz = shmesh_dtype_size(in->dtype), .in_dim = split,
                       .out_dim = concat};
    if (tiled) {
        if (size % n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: the size of all_to_all split_axis (%lld) has to be divisible by "
                            "the size of the named axis \"%s\" (%d)",
                            k.name, (long long)size, k.axes.text, n);
        a.in_blk = size / n;
        shape[split] /= n;
        a.out_blk = shape[concat];
        shape[concat] *= n;
    } else {
        if (size != n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: all_to_all requires the size of the mapped axis \"%s\" to equal "
                            "x.shape[split_axis], but they are %d and %lld respectively",
                            k.name, k.axes.text, n, (long long)size);
        a.in_blk = 1;
        a.out_blk = 1;
        /* Delete split_axis, then insert the group's axis at concat_axis. */
        memmove(shape + split, shape + split + 1, sizeof *shape * (size_t)(in->ndim - split - 1));
        memmove(shape + concat + 1, shape + concat,
                sizeof *shape * (size_t)(in->ndim - 1 - concat));
        shape[concat] = n;
    }
    if ((rc = array_expect(c, k.name, "out", out, in->dtype, in->ndim, shape)))
        return rc;
    a.blk_bytes = n ? n_in / (uint64_t)n * a.esz : 0;
    if ((rc = coll_no_overlap(&k, in->data, n_in * a.esz, out->data, n_out * a.esz, false)))
        return rc;

    if ((rc = coll_start(&k, in, out)))
        return rc;
    k.d.param[0] = split;
    k.d.param[1] = concat;
    k.d.param[2] = tiled;
    struct xchg x = coll_xchg(&k);
    x.unit = a.esz;
    x.bytes = blocks_one;
    x.pack = blocks_pack;
    x.recv = blocks_recv;
    x.direct = a2a_direct;
    x.cma = a2a_cma;
    x.zin = in->data;
    x.zin_bytes = n_in * a.esz;
    x.op = &a;
    return xchg_run(&x, &k.d);
}

int shmesh_all_to_all(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int split_axis,
                      int concat_axis, bool tiled, const shmesh_array *in, shmesh_array *out)
{
    return a2a_run(m, OP_ALL_TO_ALL, axes, gs, split_axis, concat_axis, tiled, in, out);
}

int shmesh_pswapaxes(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                     const shmesh_array *in, shmesh_array *out)
{
    return a2a_run(m, OP_PSWAPAXES, axes, gs, axis, axis, false, in, out);
}
