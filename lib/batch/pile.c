/* Ragged arrays: the seed's piles, segment_sum, and ragged_all_to_all of
 * piles.
 *
 * A pile is an array and a list of lengths: its components lie one after
 * the other along one axis.  The local functions only check and copy; the
 * collective first tells every member of the group what everyone sends
 * (one all_gather of the lengths), from which each member works out the
 * four offset and size arrays of shmesh_ragged_all_to_all, then calls it. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fail.h"
#include "kernels/box.h"
#include "kernels/half.h"
#include "memory/kind.h"
#include "mesh/mesh.h"
#include "ops/args.h"
#include "shmesh.h"

/* ---------------------------------------------------------------------------
 * Checks of the local functions, explained on the calling thread.
 * ------------------------------------------------------------------------- */

static int refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *fmt, ...)
{
    char msg[CTX_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    init_error("%s", msg);
    return SHMESH_ERR_INVALID;
}

static uint64_t elems_of(const shmesh_array *a)
{
    uint64_t n = 1;
    for (int d = 0; d < a->ndim; d++)
        n *= (uint64_t)a->shape[d];
    return n;
}

/* An array with an axis to cut: a known dtype, 1..SHMESH_MAX_NDIM
 * dimensions of sizes >= 0, at most 2^62 bytes (as every shmesh array), and
 * data unless it is empty. */
static int check_array(const char *fn, const char *what, const shmesh_array *a)
{
    if (!a)
        return refuse("%s: %s must not be NULL", fn, what);
    if (!dtype_valid(a->dtype))
        return refuse("%s: %s has dtype %d, which is not a shmesh_dtype (0..%d)", fn, what,
                      (int)a->dtype, SHMESH_DTYPE_COUNT - 1);
    if (a->ndim < 1 || a->ndim > SHMESH_MAX_NDIM)
        return refuse("%s: %s has ndim %d; expected 1..%d (a pile is cut along one of its "
                      "dimensions)",
                      fn, what, a->ndim, SHMESH_MAX_NDIM);
    int64_t shape[SHMESH_MAX_NDIM];
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] < 0)
            return refuse("%s: %s has dimension %d of size %" PRId64 "; sizes must be >= 0", fn,
                          what, d, a->shape[d]);
        shape[d] = a->shape[d];
    }
    if (!shape_scale(a->dtype, a->ndim, shape, -1, 1)) {
        char got[160];
        shape_format(got, sizeof got, a->dtype, a->ndim, a->shape);
        return refuse("%s: %s %s has more than 2^62 bytes, too large to address", fn, what, got);
    }
    if (!a->data && elems_of(a))
        return refuse("%s: %s holds %" PRIu64 " elements but its data is NULL", fn, what,
                      elems_of(a));
    return 0;
}

/* Python-style axis: -ndim..ndim-1 becomes 0..ndim-1. */
static int canon_axis(const char *fn, int axis, int ndim, int *out)
{
    if (axis < -ndim || axis >= ndim)
        return refuse("%s: axis %d is out of range for %d dimensions (valid: %d..%d)", fn, axis,
                      ndim, -ndim, ndim - 1);
    *out = axis < 0 ? axis + ndim : axis;
    return 0;
}

/* `count` lengths, each >= 0, adding up to `total` (the size of `axis`). */
static int check_lengths(const char *fn, const char *what, const int64_t *lengths, int count,
                         int64_t total, int axis)
{
    if (count < 0)
        return refuse("%s: count must be >= 0, got %d", fn, count);
    if (!lengths && count)
        return refuse("%s: %s is NULL but count is %d (NULL is only for count 0)", fn, what,
                      count);
    int64_t sum = 0; /* saturates: only compared with total */
    for (int i = 0; i < count; i++) {
        if (lengths[i] < 0)
            return refuse("%s: %s[%d] is %" PRId64 "; lengths must be >= 0", fn, what, i,
                          lengths[i]);
        sum = lengths[i] > INT64_MAX - sum ? INT64_MAX : sum + lengths[i];
    }
    if (sum != total)
        return refuse("%s: %s add up to %" PRId64 ", but the array has %" PRId64
                      " entries along axis %d; expected them to add up to that",
                      fn, what, sum, total, axis);
    return 0;
}

/* A pile as the struct says: well-formed data, a canonical axis, lengths
 * that fit it. */
static int check_pile(const char *fn, const shmesh_pile *pile)
{
    if (!pile)
        return refuse("%s: pile must not be NULL", fn);
    int rc = check_array(fn, "the pile's data", &pile->data);
    if (rc)
        return rc;
    if (pile->axis < 0 || pile->axis >= pile->data.ndim)
        return refuse("%s: the pile's axis is %d; expected 0..%d (shmesh_pile_make "
                      "canonicalizes it)",
                      fn, pile->axis, pile->data.ndim - 1);
    return check_lengths(fn, "the pile's lengths", pile->lengths, pile->count,
                         pile->data.shape[pile->axis], pile->axis);
}

/* out must be exactly dt[shape]: `how` says where that shape comes from. */
static int check_out(const char *fn, const shmesh_array *out, shmesh_dtype dt, int ndim,
                     const int64_t *shape, const char *how)
{
    if (!out)
        return refuse("%s: out must not be NULL", fn);
    bool same = out->dtype == dt && out->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = out->shape[d] == shape[d];
    if (!same) {
        char want[160], got[160];
        shape_format(want, sizeof want, dt, ndim, shape);
        shape_format(got, sizeof got, out->dtype, out->ndim, out->shape);
        return refuse("%s: out must be %s (%s), got %s", fn, want, how, got);
    }
    if (!out->data && elems_of(out))
        return refuse("%s: out holds %" PRIu64 " elements but its data is NULL", fn,
                      elems_of(out));
    return 0;
}

/* Results are written while the input is read: they may not share bytes. */
static bool overlap(const shmesh_array *a, const shmesh_array *b)
{
    uint64_t na = elems_of(a) * dtype_size(a->dtype), nb = elems_of(b) * dtype_size(b->dtype);
    const unsigned char *p = a->data, *q = b->data;
    return na && nb && p < q + nb && q < p + na;
}

/* ---------------------------------------------------------------------------
 * Piles
 * ------------------------------------------------------------------------- */

int shmesh_pile_make(shmesh_pile *pile, const shmesh_array *data, int axis, int count,
                     int64_t *lengths)
{
    static const char fn[] = "shmesh_pile_make";
    int ax = 0, rc;
    if (!pile)
        return refuse("%s: pile must not be NULL", fn);
    if ((rc = check_array(fn, "data", data)) || (rc = canon_axis(fn, axis, data->ndim, &ax)) ||
        (rc = check_lengths(fn, "lengths", lengths, count, data->shape[ax], ax)))
        return rc;
    *pile = (shmesh_pile){.data = *data, .axis = ax, .count = count, .lengths = lengths};
    return 0;
}

int shmesh_pile_component(const shmesh_pile *pile, int i, shmesh_array *out)
{
    static const char fn[] = "shmesh_pile_component";
    int rc = check_pile(fn, pile);
    if (rc)
        return rc;
    if (i < 0 || i >= pile->count)
        return refuse("%s: component %d is out of range; the pile has %d (valid: 0..%d)", fn, i,
                      pile->count, pile->count - 1);
    const shmesh_array *data = &pile->data;
    int64_t start = 0, shape[SHMESH_MAX_NDIM];
    for (int j = 0; j < i; j++)
        start += pile->lengths[j];
    memcpy(shape, data->shape, sizeof *shape * (size_t)data->ndim);
    shape[pile->axis] = pile->lengths[i];
    char how[96];
    snprintf(how, sizeof how, "the pile's data with dimension %d of component %d's length",
             pile->axis, i);
    if ((rc = check_out(fn, out, data->dtype, data->ndim, shape, how)))
        return rc;
    if (overlap(data, out))
        return refuse("%s: out overlaps the pile's data; expected separate buffers", fn);
    /* The component is a slab of the data along the axis: one run per
     * position of the dimensions before it. */
    struct box b;
    box_slab(&b, data, pile->axis, start, pile->lengths[i]);
    box_read(&b, data->data, 0, box_elems(&b), out->data);
    return 0;
}

/* ---------------------------------------------------------------------------
 * segment_sum
 * ------------------------------------------------------------------------- */

/* dst[k] = the sum over rows r < nrows of src[r * stride + k], k < n, in row
 * order from +0.  Integers add in the unsigned type of their width (the
 * two's-complement wrap-around, without undefined behaviour); floats add in
 * their own type; a sum that starts from +0 turns a lone -0.0 into +0.0, as
 * JAX's does. */
#define SUM_ROWS(T)                                                                            \
    do {                                                                                       \
        T *d = dst;                                                                            \
        for (size_t k = 0; k < n; k++)                                                         \
            d[k] = (T)0;                                                                       \
        for (int64_t r = 0; r < nrows; r++) {                                                  \
            const T *s = (const T *)(src + (size_t)r * stride);                                \
            for (size_t k = 0; k < n; k++)                                                     \
                d[k] = (T)(d[k] + s[k]);                                                       \
        }                                                                                      \
    } while (0)

/* Half types accumulate in float32, a block of columns at a time, and round
 * once at the end. */
#define HALF_SUM_ROWS(TO_F, FROM_F)                                                            \
    do {                                                                                       \
        enum { BLOCK = 256 };                                                                  \
        float acc[BLOCK];                                                                      \
        uint16_t *d = dst;                                                                     \
        for (size_t k0 = 0; k0 < n; k0 += BLOCK) {                                             \
            size_t m = n - k0 < BLOCK ? n - k0 : BLOCK;                                        \
            for (size_t k = 0; k < m; k++)                                                     \
                acc[k] = 0.0f;                                                                 \
            for (int64_t r = 0; r < nrows; r++) {                                              \
                const uint16_t *s = (const uint16_t *)(src + (size_t)r * stride) + k0;         \
                for (size_t k = 0; k < m; k++)                                                 \
                    acc[k] += TO_F(s[k]);                                                      \
            }                                                                                  \
            for (size_t k = 0; k < m; k++)                                                     \
                d[k0 + k] = FROM_F(acc[k]);                                                    \
        }                                                                                      \
    } while (0)

static void sum_rows(shmesh_dtype dt, void *dst, const unsigned char *src, int64_t nrows,
                     size_t stride, size_t n)
{
    switch (dt) {
    case SHMESH_BOOL: {
        uint8_t *d = dst;
        memset(d, 0, n);
        for (int64_t r = 0; r < nrows; r++)
            for (size_t k = 0; k < n; k++)
                d[k] |= src[(size_t)r * stride + k] != 0;
        break;
    }
    case SHMESH_INT8:
    case SHMESH_UINT8:
        SUM_ROWS(uint8_t);
        break;
    case SHMESH_INT16:
    case SHMESH_UINT16:
        SUM_ROWS(uint16_t);
        break;
    case SHMESH_INT32:
    case SHMESH_UINT32:
        SUM_ROWS(uint32_t);
        break;
    case SHMESH_INT64:
    case SHMESH_UINT64:
        SUM_ROWS(uint64_t);
        break;
    case SHMESH_FLOAT32:
        SUM_ROWS(float);
        break;
    case SHMESH_FLOAT64:
        SUM_ROWS(double);
        break;
    case SHMESH_FLOAT16:
        HALF_SUM_ROWS(half_to_float, float_to_half);
        break;
    case SHMESH_BFLOAT16:
        HALF_SUM_ROWS(bf16_to_float, float_to_bf16);
        break;
    default:
        break;
    }
}

static int segment_sum(const char *fn, const shmesh_array *operand, int axis, int count,
                       const int64_t *lens, shmesh_array *out)
{
    int ax = 0, rc;
    if ((rc = check_array(fn, "operand", operand)) ||
        (rc = canon_axis(fn, axis, operand->ndim, &ax)) ||
        (rc = check_lengths(fn, "segment_lens", lens, count, operand->shape[ax], ax)))
        return rc;
    int64_t shape[SHMESH_MAX_NDIM];
    memcpy(shape, operand->shape, sizeof *shape * (size_t)operand->ndim);
    shape[ax] = count;
    char how[80];
    snprintf(how, sizeof how, "operand's shape with dimension %d of size count", ax);
    if ((rc = check_out(fn, out, operand->dtype, operand->ndim, shape, how)))
        return rc;
    if (overlap(operand, out))
        return refuse("%s: out overlaps operand; expected separate buffers", fn);
    /* operand as outer x shape[ax] x inner, out as outer x count x inner:
     * each segment of each outer position sums whole rows of `inner`. */
    uint64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= (uint64_t)operand->shape[d];
    for (int d = ax + 1; d < operand->ndim; d++)
        inner *= (uint64_t)operand->shape[d];
    if (!outer || !inner || !count)
        return 0; /* out holds nothing */
    size_t row = (size_t)inner * dtype_size(operand->dtype);
    int64_t len = operand->shape[ax];
    for (uint64_t o = 0; o < outer; o++) {
        unsigned char *dst = (unsigned char *)out->data + (size_t)o * (size_t)count * row;
        int64_t start = 0;
        for (int i = 0; i < count; i++) {
            /* An empty segment reads nothing (the operand may have no data). */
            const unsigned char *src =
                lens[i] ? (const unsigned char *)operand->data + ((size_t)o * (size_t)len +
                                                                  (size_t)start) * row
                        : NULL;
            sum_rows(operand->dtype, dst + (size_t)i * row, src, lens[i], row, (size_t)inner);
            start += lens[i];
        }
    }
    return 0;
}

int shmesh_segment_sum(const shmesh_array *operand, int axis, int count,
                       const int64_t *segment_lens, shmesh_array *out)
{
    return segment_sum("shmesh_segment_sum", operand, axis, count, segment_lens, out);
}

int shmesh_pile_sum(const shmesh_pile *pile, shmesh_array *out)
{
    static const char fn[] = "shmesh_pile_sum";
    int rc = check_pile(fn, pile);
    return rc ? rc : segment_sum(fn, &pile->data, pile->axis, pile->count, pile->lengths, out);
}

/* ---------------------------------------------------------------------------
 * ragged_all_to_all of piles
 *
 * 1. Every member publishes a row: its n send lengths, its output's room and
 *    its device id; one all_gather gives every member the group's table.
 * 2. From the table every member reaches the same verdict on every
 *    receiver's room, and computes its offsets and sizes.
 * 3. ragged_all_to_all moves the rows.  It needs the same operand and output
 *    shapes on every member of the group (its call description holds them),
 *    where piles hold what they hold: the call is made with the group's
 *    largest operand and largest received total as shapes, and a member
 *    whose buffers are smaller than that works through a staging copy.
 * With several local devices (or a local mesh) every device's call must be
 * the same call, and the engine moves everything job-wide: the common shapes
 * and the room verdict are then job-wide too, through one pmax over every
 * axis of the mesh.
 * ------------------------------------------------------------------------- */

enum { ROOM, DEVICE, EXTRA };            /* a published row: n lengths, then these */
enum { IN_OFF, SEND, OUT_OFF, RECV, NPARAM };

/* One local device's part of the call. */
struct pile_part {
    int me;                 /* its index in its group */
    int64_t *row;           /* n + EXTRA: what it publishes */
    int64_t *table;         /* n x (n + EXTRA): its group's rows, in group order */
    int64_t *param[NPARAM]; /* the offset and size arrays, n each */
    int64_t total;          /* rows it receives */
    int short_at;           /* the first of its group short of room, or -1 */
    int64_t vote[3], verdict[3]; /* several devices: its rows, room, short device; the max */
    void *op_stage, *out_stage;
};

struct plan {
    const char *fn;
    shmesh_ctx *c;
    shmesh_mesh *m;
    int nlocal, n;
    size_t row_bytes;             /* bytes per row of operand and output */
    int64_t rows, room;           /* the shapes[0] of the ragged call */
    int short_part;               /* the first local device whose group lacks room, or -1 */
    int64_t short_device;         /* a device short of room (job-wide: several devices), or -1 */
    const shmesh_pile *operand;   /* nlocal each */
    shmesh_pile *output;
    struct pile_part *part;       /* nlocal */
    int64_t *ints;                /* what the parts' pointers point into */
    shmesh_array *arrays;         /* the arrays of one call: (2 + NPARAM) * nlocal */
};

static int64_t *table_at(const struct plan *p, const struct pile_part *d, int q)
{
    return d->table + (size_t)q * (size_t)(p->n + EXTRA);
}

/* "operand" or, with several local devices, "operand[l]". */
static const char *name_of(const struct plan *p, const char *what, int l, char *buf, size_t len)
{
    if (p->nlocal == 1)
        return what;
    snprintf(buf, len, "%s[%d]", what, l);
    return buf;
}

/* The group of each local device: its size (the same for all: subgroups
 * of ragged_all_to_all have equal sizes) and each device's index.  The
 * same checks the collectives make of axes and groups, before anything is
 * shared. */
static int resolve_groups(struct plan *p, const char *axes, const shmesh_groups *gs, int *me)
{
    shmesh_mesh *m = p->m;
    struct axes a;
    int rc = mesh_axes(m, p->fn, axes, &a);
    for (int l = 0; l < p->nlocal && !rc; l++) {
        struct group g;
        uint64_t hash;
        mesh_select(m, l);
        if (!(rc = mesh_group(m, p->fn, &a, gs, true, &g, &hash))) {
            p->n = g.n;
            me[l] = g.me;
        }
    }
    mesh_select(m, 0);
    return rc;
}

/* One pile of the call: along axis 0, n components, well-formed. */
static int check_one(const struct plan *p, const char *what, const shmesh_pile *pile)
{
    uint64_t elems;
    int rc;
    if (!pile)
        return ctx_fail(p->c, SHMESH_ERR_INVALID, "%s: %s must not be NULL", p->fn, what);
    if ((rc = array_check(p->c, p->fn, what, &pile->data, &elems)))
        return rc;
    if (pile->data.ndim < 1 || pile->axis != 0)
        return ctx_fail(p->c, SHMESH_ERR_INVALID,
                        "%s: %s has axis %d of %d dimensions; expected a pile along axis 0 "
                        "(rows are exchanged)",
                        p->fn, what, pile->axis, pile->data.ndim);
    if (pile->count != p->n)
        return ctx_fail(p->c, SHMESH_ERR_INVALID,
                        "%s: %s has %d components; expected one per member of the group, %d",
                        p->fn, what, pile->count, p->n);
    if (!pile->lengths)
        return ctx_fail(p->c, SHMESH_ERR_INVALID, "%s: %s's lengths are NULL", p->fn, what);
    const char *backend = NULL;
    if (mem_classify(p->c, pile->data.data, elems * dtype_size(pile->data.dtype), NULL,
                     &backend) == MEM_DEVICE)
        return ctx_fail(p->c, SHMESH_ERR_INVALID,
                        "%s: %s's data is device memory (the '%s' backend's); piles are "
                        "exchanged from host memory",
                        p->fn, what, backend);
    return 0;
}

/* The operand's lengths: >= 0, adding up to its rows. */
static int check_sends(const struct plan *p, const char *what, const shmesh_pile *pile)
{
    int64_t sum = 0;
    for (int j = 0; j < p->n; j++) {
        int64_t len = pile->lengths[j];
        if (len < 0)
            return ctx_fail(p->c, SHMESH_ERR_INVALID,
                            "%s: %s's lengths[%d] is %" PRId64 "; lengths must be >= 0", p->fn,
                            what, j, len);
        sum = len > INT64_MAX - sum ? INT64_MAX : sum + len;
    }
    if (sum != pile->data.shape[0])
        return ctx_fail(p->c, SHMESH_ERR_INVALID,
                        "%s: %s's lengths add up to %" PRId64 " but its data has %" PRId64
                        " rows; expected them to add up to that",
                        p->fn, what, sum, pile->data.shape[0]);
    return 0;
}

/* Everything a member can refuse alone, before anything is shared. */
static int check_local(struct plan *p)
{
    char a[32], b[32];
    for (int l = 0; l < p->nlocal; l++) {
        const shmesh_pile *op = &p->operand[l];
        const shmesh_pile *out = &p->output[l];
        const char *opn = name_of(p, "operand", l, a, sizeof a);
        const char *outn = name_of(p, "output", l, b, sizeof b);
        int rc;
        if ((rc = check_one(p, opn, op)) || (rc = check_one(p, outn, out)) ||
            (rc = check_sends(p, opn, op)))
            return rc;
        const shmesh_array *x = &op->data, *y = &out->data;
        bool same = x->dtype == y->dtype && x->ndim == y->ndim;
        for (int d = 1; same && d < x->ndim; d++)
            same = x->shape[d] == y->shape[d];
        if (!same) {
            char sx[160], sy[160];
            shape_format(sx, sizeof sx, x->dtype, x->ndim, x->shape);
            shape_format(sy, sizeof sy, y->dtype, y->ndim, y->shape);
            return ctx_fail(p->c, SHMESH_ERR_INVALID,
                            "%s: %s and %s must share dtype and every dimension but the first; "
                            "got %s and %s",
                            p->fn, opn, outn, sx, sy);
        }
        if (overlap(x, y))
            return ctx_fail(p->c, SHMESH_ERR_INVALID,
                            "%s: %s's and %s's data overlap; expected separate buffers", p->fn,
                            opn, outn);
    }
    const shmesh_array *x = &p->operand[0].data;
    p->row_bytes = dtype_size(x->dtype);
    for (int d = 1; d < x->ndim; d++)
        p->row_bytes *= (size_t)x->shape[d];
    return 0;
}

/* Room for the tables and the offset arrays of every local device. */
static int plan_alloc(struct plan *p, const int *me)
{
    size_t n = (size_t)p->n, w = n + EXTRA;
    size_t per = w + n * w + NPARAM * n;
    p->part = calloc((size_t)p->nlocal, sizeof *p->part);
    p->ints = calloc((size_t)p->nlocal * per, sizeof *p->ints);
    p->arrays = calloc((size_t)p->nlocal * (2 + NPARAM), sizeof *p->arrays);
    if (!p->part || !p->ints || !p->arrays)
        return ctx_fail(p->c, SHMESH_ERR_NOMEM,
                        "%s: out of memory for %d tables of %d x %d sizes", p->fn, p->nlocal,
                        p->n, p->n + EXTRA);
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        int64_t *at = p->ints + (size_t)l * per;
        d->me = me[l];
        d->row = at;
        d->table = at + w;
        for (int k = 0; k < NPARAM; k++)
            d->param[k] = at + w + n * w + (size_t)k * n;
    }
    return 0;
}

static void plan_free(struct plan *p)
{
    for (int l = 0; p->part && l < p->nlocal; l++) {
        free(p->part[l].op_stage);
        free(p->part[l].out_stage);
    }
    free(p->part);
    free(p->ints);
    free(p->arrays);
}

static shmesh_array int64_vector(int64_t *v, int64_t len)
{
    return (shmesh_array){.data = v, .dtype = SHMESH_INT64, .ndim = 1, .shape = {len}};
}

/* Step 1: every member's row to every member of its group. */
static int exchange_sizes(struct plan *p, const char *axes, const shmesh_groups *gs)
{
    shmesh_array *in = p->arrays, *out = p->arrays + p->nlocal;
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        memcpy(d->row, p->operand[l].lengths, sizeof *d->row * (size_t)p->n);
        d->row[p->n + ROOM] = p->output[l].data.shape[0];
        d->row[p->n + DEVICE] = p->m->ids[p->m->local_pos[l]];
        in[l] = int64_vector(d->row, p->n + EXTRA);
        out[l] = (shmesh_array){.data = d->table, .dtype = SHMESH_INT64, .ndim = 2,
                                .shape = {p->n, p->n + EXTRA}};
    }
    return shmesh_all_gather(p->m, axes, gs, 0, false, in, out);
}

/* Rows group index j receives, from the table (saturating: compared only). */
static int64_t received(const struct plan *p, const struct pile_part *d, int j)
{
    int64_t sum = 0;
    for (int q = 0; q < p->n; q++) {
        int64_t len = table_at(p, d, q)[j];
        sum = len > INT64_MAX - sum ? INT64_MAX : sum + len;
    }
    return sum;
}

/* Step 2a: the first receiver of the group without room for what it gets
 * (-1: none), and the group's largest operand and largest received total. */
static int scan_group(const struct plan *p, struct pile_part *d, int64_t *rows,
                          int64_t *total)
{
    int bad = -1;
    *rows = *total = 0;
    for (int j = 0; j < p->n; j++) {
        const int64_t *row = table_at(p, d, j);
        int64_t sent = 0, got = received(p, d, j);
        for (int k = 0; k < p->n; k++)
            sent += row[k]; /* its own lengths: checked, adding up to its rows */
        if (sent > *rows)
            *rows = sent;
        if (got > *total)
            *total = got;
        if (bad < 0 && got > row[p->n + ROOM])
            bad = j;
    }
    d->total = received(p, d, d->me);
    return bad;
}

/* A receiver lacks room: the sentence of the members that see its row (its
 * group), or with several devices per rank of everyone else. */
static int refuse_room(const struct plan *p)
{
    if (p->short_part < 0)
        return ctx_fail(p->c, SHMESH_ERR_INVALID,
                        "%s: device %d (rank %d) has too little room in its output for what "
                        "its group sends it (its rank says how much); with several devices "
                        "per rank the call is refused job-wide; nothing was sent",
                        p->fn, (int)p->short_device,
                        shmesh_device_process(p->c, (int)p->short_device));
    const struct pile_part *d = &p->part[p->short_part];
    int j = d->short_at;
    const int64_t *row = table_at(p, d, j);
    int device = (int)row[p->n + DEVICE];
    return ctx_fail(p->c, SHMESH_ERR_INVALID,
                    "%s: group index %d (device %d, rank %d) receives %" PRId64
                    " rows but its output has room for %" PRId64
                    " (output->data.shape[0]); expected room for at least what the group "
                    "sends it; nothing was sent",
                    p->fn, j, device, shmesh_device_process(p->c, device), received(p, d, j),
                    row[p->n + ROOM]);
}

/* Step 2b, several local devices: the verdict and the shapes job-wide. */
static int agree_job_wide(struct plan *p)
{
    char names[SHMESH_MAX_MESH_DIMS * (SHMESH_MAX_AXIS_NAME + 1)];
    size_t at = 0;
    for (int d = 0; d < p->m->ndim; d++)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", d ? "," : "",
                               p->m->names[d]);
    shmesh_array *in = p->arrays, *out = p->arrays + p->nlocal;
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        d->vote[0] = p->rows;
        d->vote[1] = p->room;
        d->vote[2] = d->short_at < 0 ? -1 : table_at(p, d, d->short_at)[p->n + DEVICE];
        in[l] = int64_vector(d->vote, 3);
        out[l] = int64_vector(d->verdict, 3);
    }
    int rc = shmesh_pmax(p->m, names, NULL, in, out);
    if (rc)
        return rc;
    p->rows = p->part[0].verdict[0];
    p->room = p->part[0].verdict[1];
    p->short_device = p->part[0].verdict[2];
    return 0;
}

/* Step 2: the room verdict, the same on every member that must agree, and
 * the ragged call's shapes. */
static int agree(struct plan *p)
{
    p->short_part = -1;
    p->short_device = -1;
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        int64_t rows, total;
        d->short_at = scan_group(p, d, &rows, &total);
        if (d->short_at >= 0 && p->short_part < 0) {
            p->short_part = l;
            p->short_device = table_at(p, d, d->short_at)[p->n + DEVICE];
        }
        p->rows = rows > p->rows ? rows : p->rows;
        p->room = total > p->room ? total : p->room;
    }
    return mesh_calls_per_device(p->m) ? agree_job_wide(p) : 0;
}

/* Step 2c: this device's offsets and sizes.  Its component j lands at
 * receiver j after what the members before it send j. */
static void fill_params(const struct plan *p, struct pile_part *d)
{
    int64_t in_off = 0;
    for (int j = 0; j < p->n; j++) {
        int64_t len = table_at(p, d, d->me)[j], before = 0;
        for (int q = 0; q < d->me; q++)
            before += table_at(p, d, q)[j];
        d->param[IN_OFF][j] = in_off;
        d->param[SEND][j] = len;
        d->param[OUT_OFF][j] = before;
        d->param[RECV][j] = table_at(p, d, j)[d->me];
        in_off += len;
    }
}

/* A staging buffer of `rows` rows, zeroed (the engine may read all of it). */
static int stage_alloc(const struct plan *p, int64_t rows, void **buf)
{
    size_t bytes = (size_t)rows * p->row_bytes;
    if (!bytes)
        return 0;
    if ((*buf = calloc(1, bytes)))
        return 0;
    /* The group is already waiting in the exchange this rank cannot make. */
    return fail_job(p->c, SHMESH_ERR_NOMEM,
                    "%s: out of memory for a staging copy of %zu bytes; the group cannot go on "
                    "with the call",
                    p->fn, bytes);
}

/* Step 3's arrays: the operand with p->rows rows and the output with
 * p->room, the caller's buffers where they have that shape (or room for
 * it), else staging copies. */
static int make_arrays(struct plan *p)
{
    shmesh_array *ops = p->arrays, *outs = p->arrays + p->nlocal;
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        const shmesh_array *x = &p->operand[l].data, *y = &p->output[l].data;
        int rc;
        fill_params(p, d);
        ops[l] = *x;
        ops[l].shape[0] = p->rows;
        if (x->shape[0] != p->rows) {
            if ((rc = stage_alloc(p, p->rows, &d->op_stage)))
                return rc;
            if (d->op_stage)
                memcpy(d->op_stage, x->data, (size_t)x->shape[0] * p->row_bytes);
            ops[l].data = d->op_stage;
        }
        outs[l] = *y;
        outs[l].shape[0] = p->room;
        if (y->shape[0] < p->room) {
            if ((rc = stage_alloc(p, p->room, &d->out_stage)))
                return rc;
            outs[l].data = d->out_stage;
        }
        for (int k = 0; k < NPARAM; k++)
            p->arrays[(2 + k) * p->nlocal + l] = int64_vector(d->param[k], p->n);
    }
    return 0;
}

/* After the rows moved: the output piles. */
static void finish(struct plan *p)
{
    for (int l = 0; l < p->nlocal; l++) {
        struct pile_part *d = &p->part[l];
        shmesh_pile *out = &p->output[l];
        if (d->out_stage)
            memcpy(out->data.data, d->out_stage, (size_t)d->total * p->row_bytes);
        for (int q = 0; q < p->n; q++)
            out->lengths[q] = table_at(p, d, q)[d->me];
        out->data.shape[0] = d->total;
    }
}

static int ragged(struct plan *p, const char *axes, const shmesh_groups *gs)
{
    shmesh_array *a = p->arrays;
    int k = p->nlocal;
    return shmesh_ragged_all_to_all(p->m, axes, gs, a, a + k, a + 2 * k, a + 3 * k, a + 4 * k,
                                    a + 5 * k);
}

/* Step 3: the rows move, or a receiver lacks room.  Every rank of the job
 * makes the same calls in the same order, whichever group it is in: a
 * group that refuses still makes its ragged call, moving nothing, beside
 * the groups that go on.  (With several devices per rank all refuse.) */
static int move_rows(struct plan *p, const char *axes, const shmesh_groups *gs)
{
    int rc;
    if (p->short_device >= 0 && mesh_calls_per_device(p->m))
        return refuse_room(p);
    if (p->short_part >= 0) {
        shmesh_array *ops = p->arrays, *outs = p->arrays + 1;
        ops[0] = p->operand[0].data;
        outs[0] = p->output[0].data;
        ops[0].shape[0] = outs[0].shape[0] = 0;
        for (int k = 0; k < NPARAM; k++) {
            memset(p->part[0].param[k], 0, sizeof(int64_t) * (size_t)p->n);
            p->arrays[2 + k] = int64_vector(p->part[0].param[k], p->n);
        }
        return (rc = ragged(p, axes, gs)) ? rc : refuse_room(p);
    }
    if ((rc = make_arrays(p)) || (rc = ragged(p, axes, gs)))
        return rc;
    finish(p);
    return 0;
}

int shmesh_ragged_all_to_all_pile(shmesh_mesh *mesh, const char *axes,
                                  const shmesh_groups *groups, const shmesh_pile *operand,
                                  shmesh_pile *output)
{
    static const char fn[] = "shmesh_ragged_all_to_all_pile";
    shmesh_mesh *m = mesh_or_current(mesh, fn);
    int rc;
    if (!m)
        return SHMESH_ERR_INVALID; /* explained by mesh_or_current */
    if ((rc = mesh_concrete(m, fn, "devices to run a collective on")) ||
        (rc = ctx_check(m->ctx, fn)))
        return rc;
    struct plan p = {.fn = fn, .c = m->ctx, .m = m, .nlocal = m->nlocal, .operand = operand,
                     .output = output};
    if (shmesh_mesh_batch_dim(m) >= 0)
        return ctx_fail(p.c, SHMESH_ERR_INVALID,
                        "%s: the mesh has a batched axis; ragged_all_to_all is not built on a "
                        "batched mesh",
                        fn);
    if (!operand || !output)
        return ctx_fail(p.c, SHMESH_ERR_INVALID, "%s: %s must not be NULL", fn,
                        operand ? "output" : "operand");
    int *me = calloc((size_t)p.nlocal, sizeof *me);
    if (!me)
        return ctx_fail(p.c, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    if (!(rc = resolve_groups(&p, axes, groups, me)) && !(rc = check_local(&p)) &&
        !(rc = plan_alloc(&p, me)) && !(rc = exchange_sizes(&p, axes, groups)) &&
        !(rc = agree(&p)))
        rc = move_rows(&p, axes, groups);
    free(me);
    plan_free(&p);
    return rc;
}
