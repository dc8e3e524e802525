/* shmesh-test-examples: the examples of the JAX parallel-primitive
 * docstrings, run as shmesh programs.
 *
 *   shmesh-run -n 4 -- shmesh-test-examples NAME
 *
 * Each rank plays one device of the example's pmap: it builds its slice of
 * the input (device i gets row i of the example's x), calls the collective
 * under test over a mesh with one axis "i" (two axes "i", "j" for the nested
 * axis_index example), and then every rank's output is stacked on every rank
 * by shmesh_world_sum over bytes (each rank contributes its own bytes and
 * zeros elsewhere, so the byte sums are exact copies whatever the dtype).
 * Rank 0 prints the stacked array as numpy's print() (or JAX's repr) would.
 *
 * Two modes need no launcher and call no collective; they exist so that
 * the printer itself can be checked against strings numpy produced:
 *
 *   shmesh-test-examples fmt DTYPE SHAPE V...       print(np.array(...))
 *   shmesh-test-examples fmt-repr DTYPE SHAPE V...  repr of a JAX Array
 *
 * DTYPE is int32, int64, float32, float64 or bool; SHAPE is "-" for a
 * scalar or sizes joined by 'x' ("2x3").  Values are C numbers, nan, inf.
 *
 * Exit status: 0 on success, 3 when a shmesh call failed (the rank prints
 * the error on stderr), 2 for bad usage. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

/* ------------------------------------------------------------------------
 * A growing string.
 * ---------------------------------------------------------------------- */

struct sbuf {
    char *s;
    size_t len, cap;
};

static void sb_addn(struct sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_add(struct sbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }

static void sb_addf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_addf(struct sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_addn(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_pad(struct sbuf *b, size_t n)
{
    while (n--)
        sb_addn(b, " ", 1);
}

static char *sb_take(struct sbuf *b)
{
    if (!b->s)
        sb_addn(b, "", 0);
    char *s = b->s;
    *b = (struct sbuf){0};
    return s;
}

/* ------------------------------------------------------------------------
 * numpy-style printing (numpy >= 1.14 defaults: linewidth 75, precision 8,
 * floatmode "maxprec", no suppression, sign '-'; no summarization, the
 * arrays here are small).
 * ---------------------------------------------------------------------- */

enum kind { K_INT, K_BOOL, K_F32, K_F64 };

struct nd {
    enum kind kind;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    size_t count;
    int64_t *iv; /* K_INT, K_BOOL */
    double *fv;  /* K_F32, K_F64 (float32 values stored exactly) */
};

static size_t nd_count(int ndim, const int64_t *shape)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    return n;
}

static bool roundtrips(const char *s, double v, bool f32)
{
    return f32 ? strtof(s, NULL) == (float)v : strtod(s, NULL) == v;
}

/* The fewest digits after the point (at most 8) that read back as v in its
 * own precision: numpy's unique Dragon4 output with precision 8.  Written
 * positionally ("%.*f") or in scientific notation ("%.*e"); returns the
 * digit count. */
static int shortest(double v, bool f32, bool sci, char *buf, size_t len)
{
    for (int p = 0; p <= 8; p++) {
        snprintf(buf, len, sci ? "%.*e" : "%.*f", p, v);
        if (roundtrips(buf, v, f32))
            return p;
    }
    /* Cut at 8 digits: rounded there, trailing zeros dropped. */
    snprintf(buf, len, sci ? "%.*e" : "%.*f", 8, v);
    char *e = sci ? strchr(buf, 'e') : buf + strlen(buf);
    char *z = e;
    while (z[-1] == '0')
        z--;
    memmove(z, e, strlen(e) + 1);
    return 8 - (int)(e - z);
}

/* One element's text in scientific form, split: integer part ("-1"),
 * fraction digits ("25") and exponent ("-05", at least two digits). */
static void sci_parts(double v, bool f32, char *ip, char *fp, char *ep)
{
    char buf[64];
    shortest(v, f32, true, buf, sizeof buf);
    char *e = strchr(buf, 'e');
    *e = '\0';
    strcpy(ep, e + 1);
    char *dot = strchr(buf, '.');
    if (dot) {
        *dot = '\0';
        strcpy(fp, dot + 1);
    } else {
        fp[0] = '\0';
    }
    strcpy(ip, buf);
}

static void pos_parts(double v, bool f32, char *ip, char *fp)
{
    char buf[400];
    shortest(v, f32, false, buf, sizeof buf);
    char *dot = strchr(buf, '.');
    if (dot) {
        *dot = '\0';
        strcpy(fp, dot + 1);
    } else {
        fp[0] = '\0';
    }
    strcpy(ip, buf);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Formats every element to one common width, as numpy's FloatingFormat,
 * IntegerFormat and BoolFormat do.  Returns count strings. */
static char **format_elements(const struct nd *a)
{
    char **el = calloc(a->count ? a->count : 1, sizeof *el);
    if (a->kind == K_INT) {
        int64_t lo = 0, hi = 0;
        for (size_t i = 0; i < a->count; i++) {
            if (i == 0 || a->iv[i] < lo)
                lo = a->iv[i];
            if (i == 0 || a->iv[i] > hi)
                hi = a->iv[i];
        }
        char t[32];
        int w = snprintf(t, sizeof t, "%" PRId64, hi);
        int w2 = snprintf(t, sizeof t, "%" PRId64, lo);
        if (w2 > w)
            w = w2;
        for (size_t i = 0; i < a->count; i++) {
            struct sbuf b = {0};
            sb_addf(&b, "%*" PRId64, w, a->iv[i]);
            el[i] = sb_take(&b);
        }
        return el;
    }
    if (a->kind == K_BOOL) {
        for (size_t i = 0; i < a->count; i++)
            el[i] = strdup(a->iv[i] ? (a->ndim ? " True" : "True") : "False");
        return el;
    }

    bool f32 = a->kind == K_F32;
    /* Which notation: numpy switches to scientific when the largest finite
     * magnitude is >= 1e8, the smallest non-zero one is < 1e-4, or their
     * ratio exceeds 1000. */
    size_t nfinite = 0, nnonzero = 0;
    double maxv = 0, minv = 0;
    bool neg_inf = false;
    for (size_t i = 0; i < a->count; i++) {
        double v = a->fv[i];
        if (!isfinite(v)) {
            neg_inf |= isinf(v) && v < 0;
            continue;
        }
        nfinite++;
        double m = fabs(v);
        if (m == 0)
            continue;
        if (nnonzero == 0 || m > maxv)
            maxv = m;
        if (nnonzero == 0 || m < minv)
            minv = m;
        nnonzero++;
    }
    bool sci = false;
    if (nnonzero) {
        double ratio = f32 ? (double)((float)maxv / (float)minv) : maxv / minv;
        sci = maxv >= 1e8 || minv < 0.0001 || ratio > 1000.;
    }

    size_t pad_left = 0, pad_right = 0, prec = 0, exp_size = 0;
    char ip[400], fp[400], ep[16];
    for (size_t i = 0; i < a->count; i++) {
        double v = a->fv[i];
        if (!isfinite(v))
            continue;
        if (sci) {
            sci_parts(v, f32, ip, fp, ep);
            prec = max_sz(prec, strlen(fp));
            exp_size = max_sz(exp_size, strlen(ep) - 1);
        } else {
            pos_parts(v, f32, ip, fp);
            pad_right = max_sz(pad_right, strlen(fp));
        }
        pad_left = max_sz(pad_left, strlen(ip));
    }
    if (sci)
        pad_right = exp_size + 2 + prec;
    if (nfinite != a->count) {
        /* room for "nan", "inf" and "-inf" where finite values are short */
        size_t offset = pad_right + 1;
        size_t inflen = 3 + (neg_inf ? 1 : 0);
        if (3 > offset)
            pad_left = max_sz(pad_left, 3 - offset);
        if (inflen > offset)
            pad_left = max_sz(pad_left, inflen - offset);
    }

    for (size_t i = 0; i < a->count; i++) {
        double v = a->fv[i];
        struct sbuf b = {0};
        if (!isfinite(v)) {
            const char *t = isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
            size_t w = pad_left + pad_right + 1;
            sb_pad(&b, w > strlen(t) ? w - strlen(t) : 0);
            sb_add(&b, t);
        } else if (sci) {
            /* every element gets the common number of digits, the value
             * rounded there (not zero-padded: numpy's min_digits) */
            char buf[64];
            snprintf(buf, sizeof buf, "%.*e", (int)prec, v);
            char *e = strchr(buf, 'e');
            *e = '\0';
            snprintf(ep, sizeof ep, "%s", e + 1);
            char *dot = strchr(buf, '.');
            if (dot)
                *dot = '\0';
            sb_pad(&b, pad_left - strlen(buf));
            sb_add(&b, buf);
            sb_add(&b, ".");
            if (dot)
                sb_add(&b, dot + 1);
            sb_add(&b, "e");
            sb_addn(&b, ep, 1); /* sign */
            for (size_t k = strlen(ep) - 1; k < exp_size; k++)
                sb_add(&b, "0");
            sb_add(&b, ep + 1);
        } else {
            /* unique digits, the point kept ("0."), spaces after */
            pos_parts(v, f32, ip, fp);
            sb_pad(&b, pad_left - strlen(ip));
            sb_add(&b, ip);
            sb_add(&b, ".");
            sb_add(&b, fp);
            sb_pad(&b, pad_right - strlen(fp));
        }
        el[i] = sb_take(&b);
    }
    return el;
}

/* numpy's line filling: a word that would pass the width starts a new line
 * (unless the line holds nothing but its indent). */
static void extend_line(struct sbuf *s, struct sbuf *line, const char *word, size_t width,
                        const char *indent)
{
    bool wrap = line->len + strlen(word) > width;
    if (line->len <= strlen(indent))
        wrap = false;
    if (wrap) {
        size_t n = line->len;
        while (n > 0 && line->s[n - 1] == ' ')
            n--;
        sb_addn(s, line->s, n);
        sb_add(s, "\n");
        line->len = 0;
        sb_add(line, indent);
    }
    sb_add(line, word);
}

/* numpy's _formatArray recursion over the dimensions from `axis` on, for
 * the block of elements starting at flat index `off`. */
static char *layout(const struct nd *a, char **el, size_t off, int axis, const char *indent,
                    size_t width, const char *sep)
{
    int left = a->ndim - axis;
    if (left == 0)
        return strdup(el[off]);
    struct sbuf next_indent = {0};
    sb_add(&next_indent, indent);
    sb_add(&next_indent, " ");
    size_t next_width = width - 1;
    int64_t len = a->shape[axis];
    size_t stride = nd_count(left - 1, a->shape + axis + 1);
    size_t seplen = strlen(sep);
    while (seplen > 0 && sep[seplen - 1] == ' ')
        seplen--; /* the separator without its trailing blanks */

    struct sbuf s = {0};
    if (len == 0) {
        sb_add(&s, indent);
    } else if (left == 1) {
        size_t elem_width = width - max_sz(seplen, 1);
        struct sbuf line = {0};
        sb_add(&line, indent);
        for (int64_t i = 0; i < len; i++) {
            char *word = layout(a, el, off + (size_t)i * stride, axis + 1, next_indent.s,
                                next_width, sep);
            extend_line(&s, &line, word, elem_width, indent);
            free(word);
            if (i + 1 < len)
                sb_add(&line, sep);
        }
        sb_add(&s, line.s);
        free(line.s);
    } else {
        for (int64_t i = 0; i < len; i++) {
            char *nested = layout(a, el, off + (size_t)i * stride, axis + 1, next_indent.s,
                                  next_width, sep);
            sb_add(&s, indent);
            sb_add(&s, nested);
            free(nested);
            if (i + 1 < len) {
                sb_addn(&s, sep, seplen);
                for (int k = 0; k < left - 1; k++)
                    sb_add(&s, "\n");
            }
        }
    }
    free(next_indent.s);
    struct sbuf out = {0};
    sb_add(&out, "[");
    sb_add(&out, s.s + strlen(indent));
    sb_add(&out, "]");
    free(s.s);
    return sb_take(&out);
}

/* np.array2string(a, separator=sep, prefix=prefix, suffix=suffix). */
static char *array2string(const struct nd *a, const char *sep, const char *prefix,
                          const char *suffix)
{
    char **el = format_elements(a);
    char *text;
    if (a->ndim == 0) {
        text = strdup(el[0]);
    } else {
        struct sbuf indent = {0};
        sb_add(&indent, " ");
        sb_pad(&indent, strlen(prefix));
        text = layout(a, el, 0, 0, indent.s, 75 - strlen(suffix), sep);
        free(indent.s);
    }
    for (size_t i = 0; i < a->count; i++)
        free(el[i]);
    free(el);
    return text;
}

static const char *kind_name(const struct nd *a)
{
    switch (a->kind) {
    case K_BOOL: return "bool";
    case K_F32: return "float32";
    case K_F64: return "float64";
    default: return "int32";
    }
}

/* print(a) */
static void print_str(const struct nd *a)
{
    char *t = array2string(a, " ", "", "");
    printf("%s\n", t);
    free(t);
}

/* repr of a JAX Array: "Array([0, 1], dtype=int32)". */
static void print_repr(const struct nd *a)
{
    char *t = array2string(a, ", ", "Array(", ",");
    printf("Array(%s, dtype=%s)\n", t, kind_name(a));
    free(t);
}

/* ------------------------------------------------------------------------
 * Running the examples.
 * ---------------------------------------------------------------------- */

static shmesh_ctx *ctx;
static shmesh_mesh *mesh;
static int rank, world;

static void check_rc(const char *what, int rc)
{
    if (rc) {
        fprintf(stderr, "rank %d: %s -> %s: %s\n", rank, what, shmesh_error_name(rc),
                shmesh_last_error(ctx));
        exit(3);
    }
}

#define CHECK(call) check_rc(#call, (call))

static shmesh_array arr(void *data, shmesh_dtype dt, int ndim, ...)
{
    shmesh_array a = {.data = data, .dtype = dt, .ndim = ndim};
    va_list ap;
    va_start(ap, ndim);
    for (int d = 0; d < ndim; d++)
        a.shape[d] = va_arg(ap, int64_t);
    va_end(ap);
    return a;
}

/* Stacks every rank's `a` (same shape and dtype everywhere) along a new
 * leading axis of size world, in rank order, on every rank. */
static struct nd stack(const shmesh_array *a)
{
    size_t n = nd_count(a->ndim, a->shape);
    size_t esz = shmesh_dtype_size(a->dtype);
    size_t bytes = n * esz;
    unsigned char *all = calloc((size_t)world * bytes + 1, 1);
    memcpy(all + (size_t)rank * bytes, a->data, bytes);
    CHECK(shmesh_world_sum(ctx, all, (size_t)world * bytes, SHMESH_UINT8));

    struct nd s = {.ndim = a->ndim + 1, .count = (size_t)world * n};
    s.shape[0] = world;
    for (int d = 0; d < a->ndim; d++)
        s.shape[d + 1] = a->shape[d];
    if (a->dtype == SHMESH_FLOAT32 || a->dtype == SHMESH_FLOAT64) {
        s.kind = a->dtype == SHMESH_FLOAT32 ? K_F32 : K_F64;
        s.fv = calloc(s.count + 1, sizeof *s.fv);
        for (size_t i = 0; i < s.count; i++) {
            if (s.kind == K_F32) {
                float f;
                memcpy(&f, all + i * 4, 4);
                s.fv[i] = f;
            } else {
                memcpy(&s.fv[i], all + i * 8, 8);
            }
        }
    } else if (a->dtype == SHMESH_INT32) {
        s.kind = K_INT;
        s.iv = calloc(s.count + 1, sizeof *s.iv);
        for (size_t i = 0; i < s.count; i++) {
            int32_t v;
            memcpy(&v, all + i * 4, 4);
            s.iv[i] = v;
        }
    } else {
        fprintf(stderr, "stack: dtype %s not handled\n", shmesh_dtype_name(a->dtype));
        exit(2);
    }
    free(all);
    return s;
}

static void nd_free(struct nd *a)
{
    free(a->iv);
    free(a->fv);
}

/* Every rank stacks; rank 0 prints. */
static void show(const shmesh_array *a, bool repr)
{
    struct nd s = stack(a);
    if (rank == 0) {
        if (repr)
            print_repr(&s);
        else
            print_str(&s);
        fflush(stdout);
    }
    nd_free(&s);
}

static void need_world(int n)
{
    if (world != n) {
        fprintf(stderr, "rank %d: this example needs %d ranks, the job has %d\n", rank, n, world);
        exit(2);
    }
}

/* Row r of np.arange(16).reshape(4, 4). */
static void row_of_arange16(int32_t row[4])
{
    for (int k = 0; k < 4; k++)
        row[k] = 4 * rank + k;
}

/* x = np.arange(4); psum(x, 'i')  ->  [6 6 6 6] */
static void ex_psum(void)
{
    int32_t x = rank, y = 0;
    shmesh_array in = arr(&x, SHMESH_INT32, 0), out = arr(&y, SHMESH_INT32, 0);
    CHECK(shmesh_psum(mesh, "i", NULL, &in, &out));
    show(&out, false);
}

/* x / psum(x, 'i'): int32 divided by int32 is float32 in JAX. */
static void ex_psum_div(void)
{
    int32_t x = rank, y = 0;
    shmesh_array in = arr(&x, SHMESH_INT32, 0), out = arr(&y, SHMESH_INT32, 0);
    CHECK(shmesh_psum(mesh, "i", NULL, &in, &out));
    float q = (float)x / (float)y;
    shmesh_array qa = arr(&q, SHMESH_FLOAT32, 0);
    show(&qa, false);
}

static const int pairs_idx[] = {0, 1, 2, 3};
static const shmesh_groups pairs = {.ngroups = 2, .group_size = 2, .indices = pairs_idx};
static const int even_odd_idx[] = {0, 2, 3, 1};
static const shmesh_groups even_odd = {.ngroups = 2, .group_size = 2, .indices = even_odd_idx};

/* psum(x, 'i', axis_index_groups=[[0, 1], [2, 3]])  ->  [1 1 5 5] */
static void ex_psum_groups(void)
{
    int32_t x = rank, y = 0;
    shmesh_array in = arr(&x, SHMESH_INT32, 0), out = arr(&y, SHMESH_INT32, 0);
    CHECK(shmesh_psum(mesh, "i", &pairs, &in, &out));
    show(&out, false);
}

/* print(x) for x = np.arange(16).reshape(4, 4), one row per device. */
static void ex_input_4x4(void)
{
    int32_t x[4];
    row_of_arange16(x);
    shmesh_array in = arr(x, SHMESH_INT32, 1, (int64_t)4);
    show(&in, false);
}

static void ex_psum_2d(const shmesh_groups *groups)
{
    int32_t x[4], y[4] = {0};
    row_of_arange16(x);
    shmesh_array in = arr(x, SHMESH_INT32, 1, (int64_t)4), out = arr(y, SHMESH_INT32, 1, (int64_t)4);
    CHECK(shmesh_psum(mesh, "i", groups, &in, &out));
    show(&out, false);
}

/* pmean(x, 'i') of int32 x: float32 as in JAX without x64. */
static void ex_pmean(bool divide)
{
    int32_t x = rank;
    float m = 0;
    shmesh_array in = arr(&x, SHMESH_INT32, 0), out = arr(&m, SHMESH_FLOAT32, 0);
    CHECK(shmesh_pmean(mesh, "i", NULL, &in, &out));
    float q = divide ? (float)x / m : m; /* int32 / float32 -> float32 */
    shmesh_array qa = arr(&q, SHMESH_FLOAT32, 0);
    show(&qa, false);
}

/* all_gather(x, 'i') of x = np.arange(4): every device gets [0 1 2 3]. */
static void ex_all_gather(void)
{
    int32_t x = rank, y[4] = {0};
    shmesh_array in = arr(&x, SHMESH_INT32, 0), out = arr(y, SHMESH_INT32, 1, (int64_t)4);
    CHECK(shmesh_all_gather(mesh, "i", NULL, 0, false, &in, &out));
    show(&out, false);
}

/* all_gather(x, 'i', axis_index_groups=[[0, 2], [3, 1]]) of the 4x4 rows. */
static void ex_all_gather_groups(void)
{
    int32_t x[4], y[8] = {0};
    row_of_arange16(x);
    shmesh_array in = arr(x, SHMESH_INT32, 1, (int64_t)4);
    shmesh_array out = arr(y, SHMESH_INT32, 2, (int64_t)2, (int64_t)4);
    CHECK(shmesh_all_gather(mesh, "i", &even_odd, 0, false, &in, &out));
    show(&out, false);
}

/* psum_scatter(x, 'i'): untiled leaves a scalar per device; tiled keeps a
 * dimension of 4 / n. */
static void ex_psum_scatter(const shmesh_groups *groups, bool tiled)
{
    int32_t x[4], y[4] = {0};
    row_of_arange16(x);
    int n = groups ? groups->group_size : world;
    shmesh_array in = arr(x, SHMESH_INT32, 1, (int64_t)4);
    shmesh_array out = tiled ? arr(y, SHMESH_INT32, 1, (int64_t)(4 / n)) : arr(y, SHMESH_INT32, 0);
    CHECK(shmesh_psum_scatter(mesh, "i", groups, 0, tiled, &in, &out));
    show(&out, false);
}

/* axis_index('i') under pmap: Array([0, 1, ...], dtype=int32). */
static void ex_axis_index(void)
{
    int32_t idx = -1;
    int i;
    CHECK(shmesh_axis_index(mesh, "i", &i));
    idx = i;
    shmesh_array a = arr(&idx, SHMESH_INT32, 0);
    show(&a, true);
}

/* Nested pmap, 'i' outer (4) and 'j' inner (2): print(x), print(y) of
 * (axis_index('i'), axis_index('j')), stacked as shape (4, 2). */
static void ex_axis_index_nested(void)
{
    int i, j;
    CHECK(shmesh_axis_index(mesh, "i", &i));
    CHECK(shmesh_axis_index(mesh, "j", &j));
    int32_t v[2] = {i, j};
    shmesh_array ai = arr(&v[0], SHMESH_INT32, 0), aj = arr(&v[1], SHMESH_INT32, 0);
    struct nd x = stack(&ai), y = stack(&aj);
    /* The stacks are in rank order, rank = i * 2 + j: that is the (4, 2)
     * layout of the nested pmap's output. */
    x.ndim = y.ndim = 2;
    x.shape[0] = y.shape[0] = 4;
    x.shape[1] = y.shape[1] = 2;
    if (rank == 0) {
        print_str(&x);
        print_str(&y);
        fflush(stdout);
    }
    nd_free(&x);
    nd_free(&y);
}

/* The ragged_all_to_all example over an axis of size 2. */
static void ex_ragged_all_to_all(void)
{
    static const int32_t operand_of[2][3] = {{1, 2, 2}, {3, 4, 0}};
    static const int32_t in_off_of[2][2] = {{0, 1}, {0, 1}};
    static const int32_t send_of[2][2] = {{1, 2}, {1, 1}};
    static const int32_t out_off_of[2][2] = {{0, 0}, {1, 2}};
    static const int32_t recv_of[2][2] = {{1, 1}, {2, 1}};
    int32_t operand[3], output[4] = {0, 0, 0, 0};
    int32_t in_off[2], send[2], out_off[2], recv[2];
    memcpy(operand, operand_of[rank], sizeof operand);
    memcpy(in_off, in_off_of[rank], sizeof in_off);
    memcpy(send, send_of[rank], sizeof send);
    memcpy(out_off, out_off_of[rank], sizeof out_off);
    memcpy(recv, recv_of[rank], sizeof recv);
    shmesh_array op = arr(operand, SHMESH_INT32, 1, (int64_t)3);
    shmesh_array out = arr(output, SHMESH_INT32, 1, (int64_t)4);
    shmesh_array io = arr(in_off, SHMESH_INT32, 1, (int64_t)2);
    shmesh_array ss = arr(send, SHMESH_INT32, 1, (int64_t)2);
    shmesh_array oo = arr(out_off, SHMESH_INT32, 1, (int64_t)2);
    shmesh_array rs = arr(recv, SHMESH_INT32, 1, (int64_t)2);
    CHECK(shmesh_ragged_all_to_all(mesh, "i", NULL, &op, &out, &io, &ss, &oo, &rs));
    struct nd s = stack(&out);
    if (rank == 0) {
        for (int d = 0; d < 2; d++) {
            struct nd one = {.kind = K_INT, .ndim = 1, .count = 4, .iv = s.iv + 4 * d};
            one.shape[0] = 4;
            char *t = array2string(&one, ", ", "", "");
            printf("axis index %d:\n  result = %s\n", d, t);
            free(t);
        }
        fflush(stdout);
    }
    nd_free(&s);
}

/* ------------------------------------------------------------------------
 * fmt / fmt-repr: the printer alone.
 * ---------------------------------------------------------------------- */

static int mode_fmt(int argc, char **argv, bool repr)
{
    if (argc < 4)
        return 2;
    struct nd a = {0};
    const char *dt = argv[2];
    if (!strcmp(dt, "int32") || !strcmp(dt, "int64"))
        a.kind = K_INT;
    else if (!strcmp(dt, "bool"))
        a.kind = K_BOOL;
    else if (!strcmp(dt, "float32"))
        a.kind = K_F32;
    else if (!strcmp(dt, "float64"))
        a.kind = K_F64;
    else
        return 2;
    if (strcmp(argv[3], "-")) {
        const char *p = argv[3];
        while (*p) {
            if (a.ndim == SHMESH_MAX_NDIM)
                return 2;
            char *end;
            a.shape[a.ndim++] = strtoll(p, &end, 10);
            p = *end == 'x' ? end + 1 : end;
            if (end == p && *p)
                return 2;
        }
    }
    a.count = nd_count(a.ndim, a.shape);
    if ((size_t)(argc - 4) != a.count) {
        fprintf(stderr, "%zu values expected, got %d\n", a.count, argc - 4);
        return 2;
    }
    a.iv = calloc(a.count + 1, sizeof *a.iv);
    a.fv = calloc(a.count + 1, sizeof *a.fv);
    for (size_t i = 0; i < a.count; i++) {
        const char *v = argv[4 + i];
        if (a.kind == K_INT || a.kind == K_BOOL)
            a.iv[i] = strtoll(v, NULL, 0);
        else if (a.kind == K_F32)
            a.fv[i] = strtof(v, NULL);
        else
            a.fv[i] = strtod(v, NULL);
    }
    if (repr)
        print_repr(&a);
    else
        print_str(&a);
    nd_free(&a);
    return 0;
}

/* ------------------------------------------------------------------------ */

struct example {
    const char *name;
    int ranks;
    void (*run)(void);
};

static void ex_psum_2d_full(void) { ex_psum_2d(NULL); }
static void ex_psum_2d_groups(void) { ex_psum_2d(&pairs); }
static void ex_pmean_plain(void) { ex_pmean(false); }
static void ex_pmean_div(void) { ex_pmean(true); }
static void ex_psum_scatter_untiled(void) { ex_psum_scatter(NULL, false); }
static void ex_psum_scatter_tiled(void) { ex_psum_scatter(NULL, true); }
static void ex_psum_scatter_groups(void) { ex_psum_scatter(&even_odd, true); }

/* ranks 0: any job size (the example adapts to it). */
static const struct example examples[] = {
    {"psum", 4, ex_psum},
    {"psum-div", 4, ex_psum_div},
    {"psum-groups", 4, ex_psum_groups},
    {"input-4x4", 4, ex_input_4x4},
    {"psum-2d", 4, ex_psum_2d_full},
    {"psum-2d-groups", 4, ex_psum_2d_groups},
    {"pmean", 4, ex_pmean_plain},
    {"pmean-div", 4, ex_pmean_div},
    {"all-gather", 4, ex_all_gather},
    {"all-gather-groups", 4, ex_all_gather_groups},
    {"psum-scatter", 4, ex_psum_scatter_untiled},
    {"psum-scatter-tiled", 4, ex_psum_scatter_tiled},
    {"psum-scatter-groups", 4, ex_psum_scatter_groups},
    {"axis-index", 0, ex_axis_index},
    {"axis-index-nested", 8, ex_axis_index_nested},
    {"ragged-all-to-all", 2, ex_ragged_all_to_all},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAME | fmt DTYPE SHAPE V... | fmt-repr DTYPE SHAPE V...\n",
                argv[0]);
        return 2;
    }
    if (!strcmp(argv[1], "fmt") || !strcmp(argv[1], "fmt-repr"))
        return mode_fmt(argc, argv, !strcmp(argv[1], "fmt-repr"));

    const struct example *ex = NULL;
    for (size_t k = 0; k < sizeof examples / sizeof *examples; k++)
        if (!strcmp(examples[k].name, argv[1]))
            ex = &examples[k];
    if (!ex) {
        fprintf(stderr, "unknown example %s\n", argv[1]);
        return 2;
    }

    int rc = shmesh_init(&ctx);
    if (rc) {
        fprintf(stderr, "shmesh_init -> %s: %s\n", shmesh_error_name(rc),
                shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    if (ex->ranks)
        need_world(ex->ranks);

    if (!strcmp(ex->name, "axis-index-nested")) {
        static const char *const names[] = {"i", "j"};
        static const int sizes[] = {4, 2};
        CHECK(shmesh_mesh_create(ctx, 2, names, sizes, NULL, &mesh));
    } else {
        static const char *const names[] = {"i"};
        int sizes[] = {world};
        CHECK(shmesh_mesh_create(ctx, 1, names, sizes, NULL, &mesh));
    }
    ex->run();
    shmesh_mesh_destroy(mesh);
    rc = shmesh_finalize(ctx);
    if (rc) {
        fprintf(stderr, "rank %d: shmesh_finalize -> %s: %s\n", rank, shmesh_error_name(rc),
                shmesh_last_error(NULL));
        return 3;
    }
    return 0;
}
