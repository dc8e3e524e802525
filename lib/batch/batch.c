/* Batched (process-local) axes (see batch.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch/batch.h"
#include "core/context.h"
#include "core/entry.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fail.h"
#include "kernels/half.h"
#include "memory/kind.h"
#include "ops/args.h"

/* ---- moving and broadcasting a dimension ---- */

static uint64_t prod(const int64_t *shape, int from, int to)
{
    uint64_t n = 1;
    for (int d = from; d < to; d++)
        n *= (uint64_t)shape[d];
    return n;
}

void move_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int from, int to,
               void *dst)
{
    /* Dimensions outside [lo, hi] stay; inside, the moved one and the
     * block of the others swap: outer x (P, Q) x chunk becomes
     * outer x (Q, P) x chunk. */
    int lo = from < to ? from : to, hi = from < to ? to : from;
    uint64_t outer = prod(shape, 0, lo), chunk = prod(shape, hi + 1, ndim) * esz;
    uint64_t moved = (uint64_t)shape[from];
    uint64_t rest = from < to ? prod(shape, from + 1, to + 1) : prod(shape, to, from);
    uint64_t p = from < to ? moved : rest, q = from < to ? rest : moved;
    const unsigned char *s = src;
    unsigned char *d = dst;
    if (from == to || p == 1 || q == 1) {
        memcpy(d, s, outer * p * q * chunk);
        return;
    }
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t i = 0; i < p; i++)
            for (uint64_t j = 0; j < q; j++)
                memcpy(d + ((o * q + j) * p + i) * chunk, s + ((o * p + i) * q + j) * chunk,
                       chunk);
}

void broadcast_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int at,
                    int64_t size, void *dst)
{
    uint64_t outer = prod(shape, 0, at), inner = prod(shape, at, ndim) * esz;
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (uint64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < size; k++)
            memcpy(d + (o * (uint64_t)size + (uint64_t)k) * inner, s + o * inner, inner);
}

/* shape without dimension `dim` (dim < 0: as it is), into out; its ndim. */
static int shape_drop(int ndim, const int64_t *shape, int dim, int64_t *out)
{
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (d != dim)
            out[n++] = shape[d];
    return n;
}

/* ---- the seed's rules, op by op ---- */

/* The op table's `batch` column. */
enum batch_rule {
    BATCH_NONE,
    BATCH_REDUCE,
    BATCH_SUM,
    BATCH_GATHER,
    BATCH_SCATTER,
    BATCH_ALL_TO_ALL,
    BATCH_PERMUTE,
    BATCH_SHUFFLE,
    BATCH_BROADCAST,
};

static const unsigned char rule_of[OP_COUNT] = {
#define RULE_OF(ID, name, scope, bus, bool_in, params, prepare, batch, ...)                    \
    [OP_##ID] = BATCH_##batch,
    SHMESH_OPS(RULE_OF)
#undef RULE_OF
};

static enum batch_rule rule(enum call_op op) { return (enum batch_rule)rule_of[op]; }

/* Whether every member of the group gets the same result. */
static bool result_shared(enum call_op op)
{
    enum batch_rule r = rule(op);
    return r == BATCH_REDUCE || r == BATCH_SUM || r == BATCH_GATHER || r == BATCH_BROADCAST;
}

/* Whether a not-mapped operand counts B times, as B * x (the seed's
 * `x * axis_size` for sums over the batched axis). */
static bool op_sums(enum call_op op)
{
    return rule(op) == BATCH_SUM || rule(op) == BATCH_SCATTER;
}

/* Whether the result differs along the batch (is mapped).  named: the call
 * names the batched axis; only: it names nothing else. */
static bool result_mapped(const struct op_args *p, int batch, bool named, bool only,
                          bool mapped_in)
{
    if (!mapped_in && !named)
        return false; /* the same call on the same value at every position */
    if (result_shared(p->op))
        /* Every member of the group gets the same result; subgroups may
         * split a batch, and then its positions' results differ. */
        return !named || p->gs;
    if (!mapped_in && only && rule(p->op) == BATCH_SHUFFLE)
        return false; /* equal values moved among the batch */
    if (!mapped_in && only && rule(p->op) == BATCH_PERMUTE)
        return p->npairs != batch; /* a full permutation: the seed returns x */
    return true;
}

/* An axis argument in 0..n-1 (negative from the end); out-of-range values
 * are left for the op itself to refuse. */
static int canon(int axis, int n)
{
    return axis < 0 ? axis + n : axis;
}

static int clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Where the seed puts a mapped result's batch dimension.  d: the operand's
 * (0 when it is not mapped: the seed broadcasts it to the front); r: the
 * ndim of one position's operand; out_ndim: of one position's result. */
static int result_bdim(const struct op_args *p, bool named, int d, int r, int out_ndim)
{
    int b = d;
    switch (rule(p->op)) {
    case BATCH_GATHER: { /* _all_gather_batcher */
        int g = canon(p->axis, p->tiled ? r : r + 1);
        b = d <= g ? d : p->tiled ? d : d + 1;
        break;
    }
    case BATCH_SCATTER: { /* _reduce_scatter_collective / _batcher */
        int s = canon(p->axis, r);
        /* Over other axes, an untiled scatter removes dimension s: a batch
         * dimension after it moves one down (the seed's batcher moves it
         * up, which points past the result: docs/batching.md). */
        b = named ? s : d <= s || p->tiled ? d : d - 1;
        break;
    }
    case BATCH_ALL_TO_ALL: { /* _all_to_all_batched_collective / _batcher (pswapaxes: split =
                                concat = axis, untiled) */
        bool tiled = p->tiled;
        int s = canon(p->axis, r);
        int c = canon(p->axis2, r);
        if (named)
            b = s == c ? d : tiled ? s : s + (c < s);
        else if (tiled || s == c)
            b = d;
        else { /* untiled: s leaves, a new dimension comes at c */
            int e = d - (s < d);
            b = c < e ? e + 1 : e;
        }
        break;
    }
    default: /* reductions over other axes, ppermute, pshuffle, pbroadcast */
        break;
    }
    return clamp(b, 0, out_ndim);
}

/* out = B * x in x's dtype, as the seed's constant product (bool: x). */
static void scale_by(shmesh_dtype dt, const void *src, void *dst, uint64_t n, int times)
{
    size_t esz = dtype_size(dt);
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (uint64_t i = 0; i < n; i++, s += esz, d += esz) {
        switch (dt) {
        case SHMESH_FLOAT32: {
            float v;
            memcpy(&v, s, 4);
            v *= (float)times;
            memcpy(d, &v, 4);
            break;
        }
        case SHMESH_FLOAT64: {
            double v;
            memcpy(&v, s, 8);
            v *= (double)times;
            memcpy(d, &v, 8);
            break;
        }
        case SHMESH_FLOAT16:
        case SHMESH_BFLOAT16: {
            uint16_t h;
            memcpy(&h, s, 2);
            float v = (dt == SHMESH_FLOAT16 ? half_to_float(h) : bf16_to_float(h)) * (float)times;
            h = dt == SHMESH_FLOAT16 ? float_to_half(v) : float_to_bf16(v);
            memcpy(d, &h, 2);
            break;
        }
        case SHMESH_BOOL: /* bool(B) is true: B * x is x */
            *d = *s;
            break;
        default: { /* integers wrap at their width */
            uint64_t v = 0;
            memcpy(&v, s, esz); /* little-endian */
            v *= (uint64_t)times;
            memcpy(d, &v, esz);
            break;
        }
        }
    }
}

/* ---- running a collective on the positions ---- */

/* A call on a batched mesh, being cut into its positions' calls. */
struct batch_call {
    shmesh_mesh *m;
    const struct op_args *p;
    shmesh_ctx *c;
    const char *fn;
    int batch, nl;        /* B, and the local devices (arrays given) */
    bool named, only;     /* the call names the batched axis (alone) */
    int in_bdim;          /* the operand's, canonical; -1 when not mapped */
    bool mapped;          /* the result is mapped */
    int natural;          /* where the seed puts it (mapped results) */
    int out_bdim;         /* where the caller wants it, canonical; -1 for not mapped */
    shmesh_array *vin, *vout; /* the positions' arrays, B per local device */
    void **tmp;           /* per local device: its packed operand (or NULL) */
    void **res;           /* per local device: result scratch to move into out (or NULL) */
};

static const char *axis_name(const struct batch_call *b)
{
    return b->m->names[b->m->batch_dim];
}

/* The operand's batch dimension: every local device's array the same,
 * mapped ones of size B there. */
/* Batch dimension `d` of array a (`what`: "in" or "out"; `others`: what
 * else its bdim may be), canonical into *dc: a dimension of a, of size B. */
static int check_bdim(const struct batch_call *b, const char *what, const char *others,
                      const shmesh_array *a, int d, int *dc)
{
    int nd = a->ndim;
    *dc = canon(d, nd);
    if (nd < 1 || nd > SHMESH_MAX_NDIM || *dc < 0 || *dc >= nd)
        return ctx_fail(b->c, SHMESH_ERR_INVALID,
                        "%s: %s.bdim must be a dimension of %s (-%d..%d)%s, got %d for an "
                        "array of %d dimensions",
                        b->fn, what, what, nd, nd - 1, others, d, nd);
    if (a->shape[*dc] != b->batch)
        return ctx_fail(b->c, SHMESH_ERR_INVALID,
                        "%s: %s's batch dimension %d must have the batched axis '%s''s size "
                        "%d, got %" PRId64,
                        b->fn, what, *dc, axis_name(b), b->batch, a->shape[*dc]);
    return 0;
}

static int check_in(struct batch_call *b)
{
    const shmesh_array *in = b->p->in;
    int d = in[0].bdim;
    b->in_bdim = -1;
    for (int l = 0; l < b->nl; l++) {
        if (in[l].bdim != d)
            return ctx_fail(b->c, SHMESH_ERR_INVALID,
                            "%s: every local device's operand must have the same bdim, "
                            "but in[%d].bdim is %d and in[0].bdim %d",
                            b->fn, l, in[l].bdim, d);
        if (d == SHMESH_NOT_MAPPED)
            continue;
        int rc = check_bdim(b, "in", " or SHMESH_NOT_MAPPED", &in[l], d, &b->in_bdim);
        if (rc)
            return rc;
    }
    return 0;
}

/* Where the caller wants the result: out.bdim, SHMESH_BDIM_AUTO resolved. */
static int check_out(struct batch_call *b)
{
    shmesh_array *out = b->p->out;
    int want = out[0].bdim;
    for (int l = 1; l < b->nl; l++)
        if (out[l].bdim != want)
            return ctx_fail(b->c, SHMESH_ERR_INVALID,
                            "%s: every local device's output must have the same bdim, "
                            "but out[%d].bdim is %d and out[0].bdim %d",
                            b->fn, l, out[l].bdim, want);
    if (want == SHMESH_BDIM_AUTO)
        want = b->mapped ? b->natural : SHMESH_NOT_MAPPED;
    b->out_bdim = -1;
    if (want == SHMESH_NOT_MAPPED) {
        if (b->mapped)
            return ctx_fail(b->c, SHMESH_ERR_INVALID,
                            "%s: the result is mapped along the batched axis '%s' (it "
                            "differs along the batch), so out.bdim cannot be SHMESH_NOT_MAPPED "
                            "(vmap: mapped output but out_axes is None)",
                            b->fn, axis_name(b));
        return 0;
    }
    for (int l = 0; l < b->nl; l++) {
        int rc = check_bdim(b, "out", ", SHMESH_NOT_MAPPED or SHMESH_BDIM_AUTO", &out[l], want,
                            &b->out_bdim);
        if (rc)
            return rc;
    }
    return 0;
}

static void *alloc_bytes(uint64_t n)
{
    return n <= SIZE_MAX ? malloc(n ? (size_t)n : 1) : NULL;
}

/* The positions' operands of local device l. */
static int cut_in(struct batch_call *b, int l)
{
    const shmesh_array *in = &b->p->in[l];
    int B = b->batch;
    shmesh_array one = {.data = in->data, .dtype = in->dtype};
    one.ndim = shape_drop(in->ndim, in->shape, b->in_bdim, one.shape);
    size_t esz = dtype_size(in->dtype);
    uint64_t elems = prod(one.shape, 0, one.ndim), bytes = elems * esz;
    unsigned char *base = in->data;
    bool premul = b->in_bdim < 0 && b->named && op_sums(b->p->op);
    if (premul || b->in_bdim > 0) { /* a packed copy */
        uint64_t n = premul ? 2 * bytes : (uint64_t)B * bytes;
        if (!(base = b->tmp[l] = alloc_bytes(n)))
            return ctx_fail(b->c, SHMESH_ERR_NOMEM,
                            "%s: out of memory for the batch's %" PRIu64 " bytes", b->fn, n);
        if (premul) { /* position 0 counts B times; the others add +0 */
            scale_by(in->dtype, in->data, base, elems, B);
            memset(base + bytes, 0, bytes);
        } else
            move_axis(in->data, in->ndim, in->shape, esz, b->in_bdim, 0, base);
    }
    for (int k = 0; k < B; k++) {
        shmesh_array *v = &b->vin[l * B + k];
        *v = one;
        if (premul)
            v->data = base + (k ? bytes : 0);
        else if (b->in_bdim >= 0)
            v->data = base + (uint64_t)k * bytes;
    }
    return 0;
}

/* The positions' outputs of local device l: the caller's out where the
 * result lands in it as it is (the batch first, or not mapped on both
 * sides), scratch otherwise. */
static int cut_out(struct batch_call *b, int l)
{
    shmesh_array *out = &b->p->out[l];
    int B = b->batch;
    shmesh_array one = {.data = out->data, .dtype = out->dtype};
    one.ndim = shape_drop(out->ndim, out->shape, b->out_bdim, one.shape);
    uint64_t bytes = prod(one.shape, 0, one.ndim) * dtype_size(out->dtype);
    bool direct = b->mapped ? b->out_bdim == 0 : b->out_bdim < 0;
    unsigned char *base = out->data;
    if (!direct) {
        uint64_t n = b->mapped ? (uint64_t)B * bytes : bytes;
        if (!(base = b->res[l] = alloc_bytes(n)))
            return ctx_fail(b->c, SHMESH_ERR_NOMEM,
                            "%s: out of memory for the batch's %" PRIu64 " bytes", b->fn, n);
    }
    for (int k = 0; k < B; k++) {
        shmesh_array *v = &b->vout[l * B + k];
        *v = one;
        /* A not-mapped result is the same at every position: one copy. */
        v->data = base + (b->mapped ? (uint64_t)k * bytes : 0);
    }
    return 0;
}

/* Local device l's result, from scratch into the caller's out. */
static void place_out(struct batch_call *b, int l)
{
    if (!b->res[l])
        return;
    const shmesh_array *one = &b->vout[l * b->batch];
    const shmesh_array *out = &b->p->out[l];
    size_t esz = dtype_size(out->dtype);
    if (!b->mapped) /* broadcast to the batch dimension asked for */
        broadcast_axis(b->res[l], one->ndim, one->shape, esz, b->out_bdim, b->batch, out->data);
    else { /* the batch is first in scratch */
        int64_t shape[SHMESH_MAX_NDIM];
        shape[0] = b->batch;
        memcpy(shape + 1, one->shape, sizeof *shape * (size_t)one->ndim);
        move_axis(b->res[l], one->ndim + 1, shape, esz, 0, b->out_bdim, out->data);
    }
}

/* Every array given must be host memory: the positions' arrays are cut
 * with memcpy. */
static int check_host(struct batch_call *b)
{
    for (int l = 0; l < b->nl; l++) {
        const shmesh_array *arrays[2] = {&b->p->in[l], &b->p->out[l]};
        for (int i = 0; i < 2; i++) {
            const shmesh_array *a = arrays[i];
            uint64_t n = 0;
            int rc = array_check(b->c, b->fn, i ? "out" : "in", a, &n);
            if (rc)
                return rc;
            uint64_t off;
            const char *backend = NULL;
            if (mem_classify(b->c, a->data, n * dtype_size(a->dtype), &off, &backend) ==
                MEM_DEVICE)
                return ctx_fail(b->c, SHMESH_ERR_INVALID,
                                "%s: %s is device memory; collectives on a batched "
                                "mesh take host buffers (device buffers there are not built: "
                                "docs/batching.md)",
                                b->fn, i ? "out" : "in");
        }
    }
    return 0;
}

/* Checks what the positions' calls cannot: the bdims, and what is not
 * built here. */
static int batch_open(struct batch_call *b, const shmesh_token *async)
{
    const struct op_args *p = b->p;
    int rc = ctx_check(b->c, b->fn);
    if (rc)
        return rc;
    if (async)
        return ctx_fail(b->c, SHMESH_ERR_INVALID,
                        "%s_async: the _async forms are not built on batched meshes "
                        "(docs/batching.md): call %s",
                        b->fn, b->fn);
    if (!p->in || !p->out)
        return ctx_fail(b->c, SHMESH_ERR_INVALID, "%s: in and out must not be NULL", b->fn);
    struct axes a;
    if ((rc = mesh_axes(b->m, b->fn, p->axes, &a)))
        return rc;
    for (int i = 0; i < a.n; i++)
        b->named |= a.dim[i] == b->m->batch_dim;
    b->only = b->named && a.n == 1;
    if ((rc = check_host(b)) || (rc = check_in(b)))
        return rc;
    b->mapped = result_mapped(p, b->batch, b->named, b->only, b->in_bdim >= 0);
    int r = p->in[0].ndim - (b->in_bdim >= 0);
    int out_ndim = p->out[0].ndim - (p->out[0].bdim != SHMESH_NOT_MAPPED &&
                                     (p->out[0].bdim != SHMESH_BDIM_AUTO || b->mapped));
    b->natural = b->mapped ? result_bdim(p, b->named, b->in_bdim < 0 ? 0 : b->in_bdim, r,
                                         out_ndim)
                           : SHMESH_NOT_MAPPED;
    if ((rc = check_out(b)))
        return rc;
    if (b->in_bdim < 0 && b->named && op_sums(p->op) && p->gs)
        return ctx_fail(b->c, SHMESH_ERR_INVALID,
                        "%s: axis_index_groups with a not-mapped operand summed over "
                        "the batched axis '%s': the seed has no rule for it (vmap refuses "
                        "axis_index_groups)",
                        b->fn, axis_name(b));
    return 0;
}

int batch_run(const struct op_args *p, const shmesh_token *async,
              int (*positions)(struct op_args *a))
{
    shmesh_mesh *m = p->m;
    struct batch_call b = {.m = m, .p = p, .c = m->ctx, .fn = op_name(p->op),
                           .batch = m->batch, .nl = m->nlocal / m->batch};
    if (rule(p->op) == BATCH_NONE)
        return ctx_fail(b.c, SHMESH_ERR_INVALID, "%s: not built on a batched mesh (docs/batching.md)%s",
                        b.fn, p->op == OP_RAGGED_ALL_TO_ALL ? "; piles (shmesh_ragged_all_to_all_pile) are the ragged exchange" : "");
    int rc = batch_open(&b, async);
    size_t n = (size_t)m->nlocal;
    b.vin = calloc(2 * n, sizeof *b.vin);
    b.tmp = calloc(2 * (size_t)b.nl, sizeof *b.tmp);
    if (!rc && (!b.vin || !b.tmp))
        rc = ctx_fail(b.c, SHMESH_ERR_NOMEM, "%s: out of memory", b.fn);
    if (!rc) {
        b.vout = b.vin + n;
        b.res = b.tmp + b.nl;
    }
    for (int l = 0; l < b.nl && !rc; l++)
        if (!(rc = cut_in(&b, l)))
            rc = cut_out(&b, l);
    if (!rc) {
        struct op_args pos = *p;
        pos.in = b.vin;
        pos.out = b.vout;
        /* The positions' call refuses what it is given: say what that is. */
        const char *note = b.c->fail_note;
        b.c->fail_note = " (on the batched mesh: each position's array, without the batch "
                         "dimension)";
        rc = positions(&pos);
        b.c->fail_note = note;
    }
    for (int l = 0; l < b.nl && !rc; l++)
        place_out(&b, l);
    if (!rc && p->out[0].bdim == SHMESH_BDIM_AUTO)
        for (int l = 0; l < b.nl; l++)
            p->out[l].bdim = b.mapped ? b.out_bdim : SHMESH_NOT_MAPPED;
    for (int i = 0; b.tmp && i < 2 * b.nl; i++)
        free(b.tmp[i]);
    free(b.tmp);
    free(b.vin);
    return rc;
}
