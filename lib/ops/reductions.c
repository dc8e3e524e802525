/* psum, pmax, pmin, pmean, pargmax, pargmin: every member sends its whole
 * input; every member combines all of them, in group order. */
#include <string.h>

#include "ops/prologue.h"
#include "ops/reductions.h"
#include "paths/cma.h"
#include "paths/rsag.h"

struct red {
    const shmesh_array *in;
    shmesh_array *out;
    size_t in_esz, out_esz;
    enum red_op op;
    int mean_n;
};

static uint64_t red_bytes(const struct xchg *x, int from, int to)
{
    const struct red *r = x->op;
    uint64_t n = 1;
    for (int d = 0; d < r->in->ndim; d++)
        n *= (uint64_t)r->in->shape[d];
    return n * r->in_esz;
}

static void red_pack(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct red *r = x->op;
    memcpy(dst, (const unsigned char *)r->in->data + off, len);
}

static void red_reduce(const struct xchg *x, uint64_t off, const void *const *src, uint64_t len)
{
    const struct red *r = x->op;
    uint64_t first = off / r->in_esz;
    reduce_run(r->op, r->in->dtype, r->out->dtype,
               (unsigned char *)r->out->data + first * r->out_esz, src, x->g.n,
               (size_t)(len / r->in_esz), r->mean_n);
}


void direct_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
                   uint64_t count, int mean_n, unsigned char *const *in, unsigned char *const *out)
{
    shmesh_ctx *c = x->c;
    int n = x->g.n;
    size_t in_esz = shmesh_dtype_size(in_dt), out_esz = shmesh_dtype_size(out_dt);
    /* Position p owns elements [p * per, (p + 1) * per), whole cache lines. */
    uint64_t per = (count + (uint64_t)n - 1) / (uint64_t)n;
    per = (per + 63) / 64 * 64;
    uint64_t lo = (uint64_t)x->g.me * per, hi = lo + per;
    if (hi > count)
        hi = count;
    uint64_t block = BOUNCE_BYTES / (in_esz > out_esz ? in_esz : out_esz);
    bool stream = count * out_esz >= STREAM_MIN;
    for (uint64_t i = lo; i < hi; i += block) {
        uint64_t cnt = hi - i < block ? hi - i : block;
        for (int q = 0; q < n; q++)
            c->srcs[q] = in[q] + i * in_esz;
        /* Through private memory: an output may be its member's input. */
        reduce_run(op, in_dt, out_dt, c->bounce, c->srcs, n, (size_t)cnt, mean_n);
        for (int q = 0; q < n; q++)
            if (stream)
                stream_copy(out[q] + i * out_esz, c->bounce, (size_t)(cnt * out_esz));
            else
                memcpy(out[q] + i * out_esz, c->bounce, (size_t)(cnt * out_esz));
    }
    if (stream)
        stream_fence(); /* the streamed lines are visible before the closing window */
}

/* Single copy: each member reduces its share, reading the others' inputs
 * out of their processes, then (after one window) copies the others' shares
 * out of their outputs.  The bounce buffer holds n inputs' blocks and the
 * result, so an output may be its member's input. */
int cma_reduce(const struct xchg *x, enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt,
               uint64_t count, int mean_n, const unsigned char *in, unsigned char *out,
               const uint64_t *in_addr, const uint64_t *out_addr)
{
    shmesh_ctx *c = x->c;
    int n = x->g.n, me = x->g.me, rc;
    size_t in_esz = shmesh_dtype_size(in_dt), out_esz = shmesh_dtype_size(out_dt);
    size_t esz = in_esz > out_esz ? in_esz : out_esz;
    uint64_t per = ((count + (uint64_t)n - 1) / (uint64_t)n + 63) / 64 * 64;
    uint64_t block = BOUNCE_BYTES / (uint64_t)(n + 1) / esz;
    unsigned char *result = c->bounce + (size_t)n * block * in_esz;
#define SHARE(p, lo, hi)                                                                       \
    uint64_t lo = (uint64_t)(p) * per < count ? (uint64_t)(p) * per : count;                   \
    uint64_t hi = lo + per < count ? lo + per : count
    SHARE(me, lo, hi);
    for (uint64_t i = lo; i < hi; i += block) {
        uint64_t cnt = hi - i < block ? hi - i : block;
        for (int q = 0; q < n; q++) {
            unsigned char *b = c->bounce + (size_t)q * block * in_esz;
            if (q == me)
                c->srcs[q] = in + i * in_esz;
            else if ((rc = cma_read(c, x->g.ranks[q], in_addr[q] + i * in_esz, b, cnt * in_esz)))
                return rc;
            else
                c->srcs[q] = b;
        }
        reduce_run(op, in_dt, out_dt, result, c->srcs, n, (size_t)cnt, mean_n);
        memcpy(out + i * out_esz, result, (size_t)(cnt * out_esz));
    }
    /* Every share reduced before anyone copies it. */
    if (!win_open(c, &rc) || (rc = win_exchange(c, &x->g, NULL)))
        return rc;
    for (int q = 0; q < n; q++) {
        SHARE(q, qlo, qhi);
        if (q != me && (rc = cma_read(c, x->g.ranks[q], out_addr[q] + qlo * out_esz,
                                      out + qlo * out_esz, (qhi - qlo) * out_esz)))
            return rc;
    }
#undef SHARE
    return 0;
}

static int red_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct red *r = x->op;
    return cma_reduce(x, r->op, r->in->dtype, r->out->dtype, x->zin_bytes / r->in_esz, r->mean_n,
                      r->in->data, r->out->data, in_addr, out_addr);
}

static void red_direct(const struct xchg *x, unsigned char *const *in, unsigned char *const *out)
{
    const struct red *r = x->op;
    direct_reduce(x, r->op, r->in->dtype, r->out->dtype, x->zin_bytes / r->in_esz, r->mean_n, in,
                  out);
}

static int red_rsag(struct xchg *x, const struct call_desc *desc)
{
    const struct red *r = x->op;
    return rsag_run(x->c, &x->g, desc, r->op, r->in->dtype, r->out->dtype, r->in->data,
                    r->out->data, x->zin_bytes / r->in_esz, r->mean_n);
}

static int reduction(shmesh_mesh *m, enum call_op op, enum red_op rop, const char *axes,
                     const shmesh_groups *gs, const shmesh_array *in, shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, op, axes, gs, false);
    if (rc)
        return rc;
    shmesh_ctx *c = k.c;
    bool arg = rop == RED_ARGMAX || rop == RED_ARGMIN;
    if (arg && k.axes.n != 1)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s only accepts a single axis, got \"%s\"",
                        k.name, k.axes.text);
    if (arg && gs)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s takes no axis_index_groups (JAX's has none): pass NULL", k.name);
    uint64_t n_in, n_out;
    if ((rc = coll_arrays(&k, in, "in", out, "out", &n_in, &n_out)))
        return rc;

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
                            k.name, shmesh_dtype_name(in->dtype), shmesh_dtype_name(out->dtype));
        want = out->dtype;
    }
    if ((rc = array_expect(c, k.name, "out", out, want, in->ndim, in->shape)))
        return rc;
    /* JAX's pmean divides by psum(1, axes, axis_index_groups), which for a
     * constant is the size of the *first* subgroup, for every subgroup. */
    int mean_n = !gs ? k.g.n : gs->group_sizes ? gs->group_sizes[0] : gs->group_size;
    struct red r = {in, out, shmesh_dtype_size(in->dtype), shmesh_dtype_size(out->dtype), rop,
                    mean_n};
    if ((rc = coll_no_overlap(&k, in->data, n_in * r.in_esz, out->data, n_out * r.out_esz,
                              r.in_esz == r.out_esz)))
        return rc;

    if ((rc = coll_start(&k, in, out)))
        return rc;
    struct xchg x = coll_xchg(&k);
    x.broadcast = true;
    x.unit = r.in_esz;
    x.bytes = red_bytes;
    x.pack = red_pack;
    x.reduce = red_reduce;
    x.direct = red_direct;
    /* Single copy beats staging below the reduce-scatter's threshold; above
     * it the staged reduce-scatter moves less memory (docs/algorithms.md). */
    x.cma = use_rsag(k.c, n_in * r.in_esz, k.g.n) ? NULL : red_cma;
    x.zin = in->data;
    x.zin_bytes = n_in * r.in_esz;
    x.zout = out->data;
    x.zout_bytes = n_out * r.out_esz;
    x.zout_shared = true;
    if (use_rsag(k.c, x.zin_bytes, k.g.n))
        x.staged = red_rsag;
    x.op = &r;
    return xchg_run(&x, &k.d);
}

int shmesh_psum(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PSUM, RED_SUM, axes, gs, in, out);
}

int shmesh_pmax(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PMAX, RED_MAX, axes, gs, in, out);
}

int shmesh_pmin(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PMIN, RED_MIN, axes, gs, in, out);
}

int shmesh_pmean(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                 const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PMEAN, RED_MEAN, axes, gs, in, out);
}

int shmesh_pargmax(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                   const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PARGMAX, RED_ARGMAX, axes, gs, in, out);
}

int shmesh_pargmin(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                   const shmesh_array *in, shmesh_array *out)
{
    return reduction(m, OP_PARGMIN, RED_ARGMIN, axes, gs, in, out);
}
