/* The reference model of the collectives (see reference.h).  Written for
 * obviousness, not speed: every output element is computed on its own from
 * the definition, with multi-indices and the group each device belongs to. */
#include "reference.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

#define MAXD SHMESH_MAX_NDIM

static int invalid(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int invalid(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return REF_INVALID;
}

/* From the op table, as the enum (reference.h). */
#define REF_OP_NAME(ID, name, scope, ...) REF_SCOPE_##scope([REF_##ID] = #name, )
static const char *const op_names[REF_OP_COUNT] = {SHMESH_OPS(REF_OP_NAME)};
#undef REF_OP_NAME

const char *ref_op_name(ref_op op)
{
    return (unsigned)op < REF_OP_COUNT ? op_names[op] : "?";
}

int ref_op_by_name(const char *name)
{
    for (int i = 0; i < REF_OP_COUNT; i++)
        if (!strcmp(op_names[i], name))
            return i;
    return -1;
}

/* ------------------------------------------------------------------------
 * Element types (kept independent of the library's own tables)
 * ---------------------------------------------------------------------- */

static size_t dt_size(shmesh_dtype dt)
{
    switch (dt) {
    case SHMESH_BOOL: case SHMESH_INT8: case SHMESH_UINT8: return 1;
    case SHMESH_INT16: case SHMESH_UINT16: case SHMESH_FLOAT16: case SHMESH_BFLOAT16: return 2;
    case SHMESH_INT32: case SHMESH_UINT32: case SHMESH_FLOAT32: return 4;
    case SHMESH_INT64: case SHMESH_UINT64: case SHMESH_FLOAT64: return 8;
    default: return 0;
    }
}

static bool dt_float(shmesh_dtype dt)
{
    return dt == SHMESH_FLOAT16 || dt == SHMESH_BFLOAT16 || dt == SHMESH_FLOAT32 ||
           dt == SHMESH_FLOAT64;
}

static bool dt_signed(shmesh_dtype dt) { return dt >= SHMESH_INT8 && dt <= SHMESH_INT64; }
static bool dt_unsigned(shmesh_dtype dt) { return dt >= SHMESH_UINT8 && dt <= SHMESH_UINT64; }
static bool dt_integer(shmesh_dtype dt) { return dt_signed(dt) || dt_unsigned(dt); }

/* The bits of element i, zero-extended. */
static uint64_t ld_raw(const void *base, size_t es, int64_t i)
{
    const unsigned char *p = (const unsigned char *)base + (size_t)i * es;
    switch (es) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void st_raw(void *base, size_t es, int64_t i, uint64_t bits)
{
    unsigned char *p = (unsigned char *)base + (size_t)i * es;
    switch (es) {
    case 1: *p = (unsigned char)bits; break;
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

/* A floating element's value (exact in double). */
static double ld_float(shmesh_dtype dt, const void *base, int64_t i)
{
    uint64_t b = ld_raw(base, dt_size(dt), i);
    switch (dt) {
    case SHMESH_FLOAT16: return half_to_float((uint16_t)b);
    case SHMESH_BFLOAT16: return bf16_to_float((uint16_t)b);
    case SHMESH_FLOAT32: { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }
    default: { double d; memcpy(&d, &b, 8); return d; }
    }
}

/* A signed integer element, sign-extended. */
static int64_t ld_signed(shmesh_dtype dt, const void *base, int64_t i)
{
    uint64_t b = ld_raw(base, dt_size(dt), i);
    switch (dt) {
    case SHMESH_INT8: return (int8_t)(uint8_t)b;
    case SHMESH_INT16: return (int16_t)(uint16_t)b;
    case SHMESH_INT32: return (int32_t)(uint32_t)b;
    default: return (int64_t)b;
    }
}

/* Three-way comparison of element ia of a with element ib of b (same dtype;
 * floats not NaN). */
static int cmp_elem(shmesh_dtype dt, const void *a, int64_t ia, const void *b, int64_t ib)
{
    if (dt_float(dt)) {
        double x = ld_float(dt, a, ia), y = ld_float(dt, b, ib);
        return x < y ? -1 : x > y;
    }
    if (dt_signed(dt)) {
        int64_t x = ld_signed(dt, a, ia), y = ld_signed(dt, b, ib);
        return x < y ? -1 : x > y;
    }
    uint64_t x = ld_raw(a, dt_size(dt), ia), y = ld_raw(b, dt_size(dt), ib);
    return x < y ? -1 : x > y;
}

static bool elem_nan(shmesh_dtype dt, const void *a, int64_t i)
{
    return dt_float(dt) && isnan(ld_float(dt, a, i));
}

/* ------------------------------------------------------------------------
 * Shapes
 * ---------------------------------------------------------------------- */

int64_t ref_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int k = 0; k < ndim; k++)
        n *= shape[k];
    return n;
}

static void unravel(int64_t lin, int nd, const int64_t *shape, int64_t *idx)
{
    for (int k = nd - 1; k >= 0; k--) {
        idx[k] = lin % shape[k];
        lin /= shape[k];
    }
}

static int64_t ravel(int nd, const int64_t *shape, const int64_t *idx)
{
    int64_t lin = 0;
    for (int k = 0; k < nd; k++)
        lin = lin * shape[k] + idx[k];
    return lin;
}

static void fmt_shape(char *buf, size_t len, int nd, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int k = 0; k < nd && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (o < len)
        snprintf(buf + o, len - o, nd == 1 ? ",)" : ")");
}

static int check_array(const char *what, const shmesh_array *a, bool need_data, char *why,
                       size_t len)
{
    if (!a)
        return invalid(why, len, "%s is NULL", what);
    if (!dt_size(a->dtype))
        return invalid(why, len, "%s has an unknown dtype %d", what, (int)a->dtype);
    if (a->ndim < 0 || a->ndim > MAXD)
        return invalid(why, len, "%s has ndim %d (0..%d)", what, a->ndim, MAXD);
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] < 0)
            return invalid(why, len, "%s has a negative dimension", what);
    if (need_data && !a->data && ref_numel(a->ndim, a->shape) > 0)
        return invalid(why, len, "%s has no data", what);
    return 0;
}

/* Python-style axis: a in [-range, range) becomes a in [0, range). */
static int canon_axis(const char *what, int a, int range, int *out, char *why, size_t len)
{
    if (a < -range || a >= range)
        return invalid(why, len, "%s %d is out of range for %d positions", what, a, range);
    *out = a < 0 ? a + range : a;
    return 0;
}

/* ------------------------------------------------------------------------
 * Mesh layout and groups
 * ---------------------------------------------------------------------- */

typedef struct {
    int ndim;
    int sizes[SHMESH_MAX_MESH_DIMS];
    int world;
    int *pos_dev; /* row-major mesh position -> device */
    int *dev_pos; /* device -> position */
} layout;

static void layout_free(layout *L)
{
    free(L->pos_dev);
    free(L->dev_pos);
    L->pos_dev = L->dev_pos = NULL;
}

static int layout_make(const ref_mesh *m, layout *L, char *why, size_t len)
{
    memset(L, 0, sizeof *L);
    if (!m || m->ndim < 0 || m->ndim > SHMESH_MAX_MESH_DIMS)
        return invalid(why, len, "mesh ndim must be 0..%d", SHMESH_MAX_MESH_DIMS);
    long world = 1;
    for (int k = 0; k < m->ndim; k++) {
        const char *nm = m->names ? m->names[k] : NULL;
        if (!nm || !*nm || strlen(nm) > SHMESH_MAX_AXIS_NAME || strchr(nm, ',') ||
            strchr(nm, ' '))
            return invalid(why, len, "mesh axis %d has a bad name", k);
        for (int j = 0; j < k; j++)
            if (!strcmp(m->names[j], nm))
                return invalid(why, len, "mesh axis name '%s' is repeated", nm);
        if (m->sizes[k] <= 0)
            return invalid(why, len, "mesh axis '%s' has size %d", nm, m->sizes[k]);
        world *= m->sizes[k];
        if (world > 1 << 20)
            return invalid(why, len, "mesh too large");
    }
    L->ndim = m->ndim;
    for (int k = 0; k < m->ndim; k++)
        L->sizes[k] = m->sizes[k];
    L->world = (int)world;
    L->pos_dev = malloc(sizeof(int) * (size_t)world);
    L->dev_pos = malloc(sizeof(int) * (size_t)world);
    if (!L->pos_dev || !L->dev_pos) {
        layout_free(L);
        return invalid(why, len, "out of memory");
    }
    for (int d = 0; d < L->world; d++)
        L->dev_pos[d] = -1;
    for (int p = 0; p < L->world; p++) {
        int d = m->device_order ? m->device_order[p] : p;
        if (d < 0 || d >= L->world || L->dev_pos[d] >= 0) {
            layout_free(L);
            return invalid(why, len, "device_order is not a permutation of 0..%d",
                           L->world - 1);
        }
        L->pos_dev[p] = d;
        L->dev_pos[d] = p;
    }
    return 0;
}

int ref_mesh_world(const ref_mesh *mesh, char *why, size_t whylen)
{
    layout L;
    int rc = layout_make(mesh, &L, why, whylen);
    if (rc)
        return rc;
    int w = L.world;
    layout_free(&L);
    return w;
}

/* Parses "x,y" (spaces ignored) into mesh axis numbers. */
static int parse_axes(const ref_mesh *m, const char *axes, int *list, int *count, char *why,
                      size_t len)
{
    if (!axes)
        return invalid(why, len, "axes is NULL");
    char buf[512];
    size_t o = 0;
    for (const char *p = axes; *p; p++) {
        if (*p == ' ')
            continue;
        if (o + 1 >= sizeof buf)
            return invalid(why, len, "axes string too long");
        buf[o++] = *p;
    }
    buf[o] = '\0';
    *count = 0;
    if (o == 0)
        return 0;
    int n = 0;
    /* strtok would skip empty names; walk by hand. */
    char *start = buf;
    for (;;) {
        char *comma = strchr(start, ',');
        if (comma)
            *comma = '\0';
        if (!*start)
            return invalid(why, len, "axes '%s' has an empty name", axes);
        int found = -1;
        for (int k = 0; k < m->ndim; k++)
            if (!strcmp(m->names[k], start))
                found = k;
        if (found < 0)
            return invalid(why, len, "unknown axis name '%s'", start);
        for (int j = 0; j < n; j++)
            if (list[j] == found)
                return invalid(why, len, "axis name '%s' is repeated", start);
        list[n++] = found;
        if (!comma)
            break;
        start = comma + 1;
    }
    *count = n;
    return 0;
}

/* The group of `device` over the named axes: members in group-index order
 * (members has room for the world), its size and the device's index. */
static void full_group(const layout *L, const int *ax, int nax, int device, int *members,
                       int *n, int *me)
{
    int coord[SHMESH_MAX_MESH_DIMS];
    int pos = L->dev_pos[device];
    for (int k = L->ndim - 1; k >= 0; k--) {
        coord[k] = pos % L->sizes[k];
        pos /= L->sizes[k];
    }
    int size = 1, idx = 0;
    for (int j = 0; j < nax; j++) {
        size *= L->sizes[ax[j]];
        idx = idx * L->sizes[ax[j]] + coord[ax[j]];
    }
    for (int i = 0; i < size; i++) {
        int c[SHMESH_MAX_MESH_DIMS];
        memcpy(c, coord, sizeof c);
        int rest = i;
        for (int j = nax - 1; j >= 0; j--) {
            c[ax[j]] = rest % L->sizes[ax[j]];
            rest /= L->sizes[ax[j]];
        }
        int p = 0;
        for (int k = 0; k < L->ndim; k++)
            p = p * L->sizes[k] + c[k];
        members[i] = L->pos_dev[p];
    }
    *n = size;
    *me = idx;
}

static int subgroup_len(const shmesh_groups *g, int i)
{
    return g->group_sizes ? g->group_sizes[i] : g->group_size;
}

/* axis_index_groups must partition 0..nfull-1 (into equal parts if asked). */
static int check_groups(const shmesh_groups *g, int nfull, bool equal, char *why, size_t len)
{
    if (!g)
        return 0;
    if (g->ngroups < 1)
        return invalid(why, len, "axis_index_groups has %d groups", g->ngroups);
    long total = 0;
    for (int i = 0; i < g->ngroups; i++) {
        int s = subgroup_len(g, i);
        if (s < 1)
            return invalid(why, len, "axis_index_group %d has size %d", i, s);
        if (equal && s != subgroup_len(g, 0))
            return invalid(why, len,
                           "axis_index_groups must all have one size here (group 0 has %d, "
                           "group %d has %d)",
                           subgroup_len(g, 0), i, s);
        total += s;
    }
    if (total != nfull)
        return invalid(why, len, "axis_index_groups hold %ld indices, the group has %d", total,
                       nfull);
    if (!g->indices)
        return invalid(why, len, "axis_index_groups indices is NULL");
    char *seen = calloc((size_t)nfull, 1);
    if (!seen)
        return invalid(why, len, "out of memory");
    for (long i = 0; i < total; i++) {
        int v = g->indices[i];
        if (v < 0 || v >= nfull || seen[v]) {
            free(seen);
            return invalid(why, len, "axis_index_groups: index %d is out of range or repeated",
                           v);
        }
        seen[v] = 1;
    }
    free(seen);
    return 0;
}

/* Narrows a full group to the device's subgroup (members in listed order). */
static void narrow_group(const shmesh_groups *g, int *members, int *n, int *me)
{
    if (!g)
        return;
    int off = 0;
    for (int i = 0; i < g->ngroups; i++) {
        int s = subgroup_len(g, i);
        for (int q = 0; q < s; q++)
            if (g->indices[off + q] == *me) {
                int *sub = malloc(sizeof(int) * (size_t)s);
                if (!sub)
                    abort();
                for (int t = 0; t < s; t++)
                    sub[t] = members[g->indices[off + t]];
                memcpy(members, sub, sizeof(int) * (size_t)s);
                free(sub);
                *n = s;
                *me = q;
                return;
            }
        off += s;
    }
}

int ref_axis_index(const ref_mesh *mesh, const char *axes, int device, int *index, int *size,
                   char *why, size_t whylen)
{
    layout L;
    int rc = layout_make(mesh, &L, why, whylen);
    if (rc)
        return rc;
    int ax[SHMESH_MAX_MESH_DIMS], nax;
    rc = parse_axes(mesh, axes, ax, &nax, why, whylen);
    if (!rc && (device < 0 || device >= L.world))
        rc = invalid(why, whylen, "device %d is not in the mesh", device);
    if (!rc) {
        int *members = malloc(sizeof(int) * (size_t)L.world);
        full_group(&L, ax, nax, device, members, size, index);
        free(members);
    }
    layout_free(&L);
    return rc;
}

int ref_group(const ref_mesh *mesh, const char *axes, const shmesh_groups *groups, int device,
              int *members, int *n, int *me, char *why, size_t whylen)
{
    layout L;
    int rc = layout_make(mesh, &L, why, whylen);
    if (rc)
        return rc;
    int ax[SHMESH_MAX_MESH_DIMS], nax;
    rc = parse_axes(mesh, axes, ax, &nax, why, whylen);
    if (!rc && (device < 0 || device >= L.world))
        rc = invalid(why, whylen, "device %d is not in the mesh", device);
    if (!rc) {
        full_group(&L, ax, nax, device, members, n, me);
        rc = check_groups(groups, *n, false, why, whylen);
        if (!rc)
            narrow_group(groups, members, n, me);
    }
    layout_free(&L);
    return rc;
}

/* ------------------------------------------------------------------------
 * Argument checks and output shapes
 * ---------------------------------------------------------------------- */

static bool op_takes_groups(ref_op op)
{
    return op != REF_PPERMUTE && op != REF_PSHUFFLE && op != REF_PBROADCAST;
}

static bool op_needs_equal_groups(ref_op op)
{
    return op == REF_ALL_GATHER || op == REF_PSUM_SCATTER || op == REF_ALL_TO_ALL ||
           op == REF_PSWAPAXES || op == REF_RAGGED_ALL_TO_ALL;
}

static long py_mod(long a, long n) { return ((a % n) + n) % n; }

/* Everything about the call that does not depend on a device: mesh, axes,
 * groups, permutations; gives the (sub)group size n (equal for the ops
 * that need it; for reductions with uneven subgroups, that of group 0). */
static int check_common(const ref_mesh *mesh, const ref_call *c, layout *L, int *ax, int *nax,
                        int *n, char *why, size_t len)
{
    if ((unsigned)c->op >= REF_OP_COUNT)
        return invalid(why, len, "unknown op %d", (int)c->op);
    int rc = layout_make(mesh, L, why, len);
    if (rc)
        return rc;
    rc = parse_axes(mesh, c->axes, ax, nax, why, len);
    if (rc)
        goto fail;
    int nfull = 1;
    for (int j = 0; j < *nax; j++)
        nfull *= L->sizes[ax[j]];
    const shmesh_groups *g = op_takes_groups(c->op) ? c->groups : NULL;
    if ((c->op == REF_PARGMAX || c->op == REF_PARGMIN)) {
        if (*nax != 1) {
            rc = invalid(why, len, "%s takes exactly one axis, got '%s'", ref_op_name(c->op),
                         c->axes);
            goto fail;
        }
        if (c->groups) {
            rc = invalid(why, len, "%s takes no axis_index_groups", ref_op_name(c->op));
            goto fail;
        }
    }
    rc = check_groups(g, nfull, op_needs_equal_groups(c->op), why, len);
    if (rc)
        goto fail;
    *n = g ? subgroup_len(g, 0) : nfull;
    if (c->op == REF_PPERMUTE) {
        if (c->npairs < 0 || (c->npairs > 0 && !c->pairs)) {
            rc = invalid(why, len, "ppermute: bad pair list");
            goto fail;
        }
        for (int i = 0; i < c->npairs; i++)
            for (int j = 0; j < i; j++) {
                if (py_mod(c->pairs[i][0], nfull) == py_mod(c->pairs[j][0], nfull)) {
                    rc = invalid(why, len, "ppermute: source %d repeats (modulo %d)",
                                 c->pairs[i][0], nfull);
                    goto fail;
                }
                if (py_mod(c->pairs[i][1], nfull) == py_mod(c->pairs[j][1], nfull)) {
                    rc = invalid(why, len, "ppermute: destination %d repeats (modulo %d)",
                                 c->pairs[i][1], nfull);
                    goto fail;
                }
            }
    }
    if (c->op == REF_PSHUFFLE) {
        if (!c->perm) {
            rc = invalid(why, len, "pshuffle: perm is NULL");
            goto fail;
        }
        for (int i = 0; i < nfull; i++) {
            if (c->perm[i] < 0 || c->perm[i] >= nfull) {
                rc = invalid(why, len, "pshuffle: perm[%d] = %d is not in 0..%d", i, c->perm[i],
                             nfull - 1);
                goto fail;
            }
            for (int j = 0; j < i; j++)
                if (c->perm[j] == c->perm[i]) {
                    rc = invalid(why, len, "pshuffle: %d appears twice in perm", c->perm[i]);
                    goto fail;
                }
        }
    }
    if (c->op == REF_PBROADCAST && (c->source < 0 || c->source >= nfull)) {
        rc = invalid(why, len, "pbroadcast: source %d is not in 0..%d", c->source, nfull - 1);
        goto fail;
    }
    return 0;
fail:
    layout_free(L);
    return rc;
}

/* Output dtype and shape for input `in`, n being the group size. */
static int shape_rule(const ref_call *c, int n, const shmesh_array *in, shmesh_dtype *odt,
                      int *ond, int64_t *osh, char *why, size_t len)
{
    int nd = in->ndim;
    *odt = in->dtype;
    *ond = nd;
    memcpy(osh, in->shape, sizeof(int64_t) * (size_t)nd);
    int a = 0, cc = 0;
    switch (c->op) {
    case REF_PSUM:
        if (in->dtype == SHMESH_BOOL)
            *odt = SHMESH_INT32;
        return 0;
    case REF_PMAX:
    case REF_PMIN:
    case REF_PPERMUTE:
    case REF_PSHUFFLE:
    case REF_PBROADCAST:
    case REF_RAGGED_ALL_TO_ALL:
        return 0;
    case REF_PMEAN:
        if (!dt_float(in->dtype))
            *odt = c->mean_dtype == SHMESH_FLOAT64 ? SHMESH_FLOAT64 : SHMESH_FLOAT32;
        return 0;
    case REF_PARGMAX:
    case REF_PARGMIN:
        *odt = SHMESH_INT32;
        return 0;
    case REF_ALL_GATHER:
        if (c->tiled) {
            if (canon_axis("all_gather axis", c->axis, nd, &a, why, len))
                return REF_INVALID;
            osh[a] *= n;
            return 0;
        }
        if (canon_axis("all_gather axis", c->axis, nd + 1, &a, why, len))
            return REF_INVALID;
        if (nd + 1 > MAXD)
            return invalid(why, len, "all_gather output would have %d dimensions", nd + 1);
        for (int k = nd; k > a; k--)
            osh[k] = osh[k - 1];
        osh[a] = n;
        *ond = nd + 1;
        return 0;
    case REF_PSUM_SCATTER:
        /* JAX turns booleans into int32 in psum only; its reduce_scatter
         * has no bool addition, and shmesh refuses bool here (docs). */
        if (in->dtype == SHMESH_BOOL)
            return invalid(why, len, "psum_scatter does not sum bool (use an integer array)");
        if (canon_axis("psum_scatter scatter_dimension", c->axis, nd, &a, why, len))
            return REF_INVALID;
        if (c->tiled) {
            if (in->shape[a] % n)
                return invalid(why, len, "psum_scatter: dimension %d (%lld) is not divisible "
                               "by the group size %d", a, (long long)in->shape[a], n);
            osh[a] /= n;
            return 0;
        }
        if (in->shape[a] != n)
            return invalid(why, len, "psum_scatter: dimension %d is %lld, the group size %d",
                           a, (long long)in->shape[a], n);
        for (int k = a; k + 1 < nd; k++)
            osh[k] = osh[k + 1];
        *ond = nd - 1;
        return 0;
    case REF_ALL_TO_ALL:
    case REF_PSWAPAXES: {
        int split = c->axis, concat = c->op == REF_PSWAPAXES ? c->axis : c->concat_axis;
        bool tiled = c->op == REF_ALL_TO_ALL && c->tiled;
        if (canon_axis("split axis", split, nd, &a, why, len) ||
            canon_axis("concat axis", concat, nd, &cc, why, len))
            return REF_INVALID;
        if (tiled) {
            if (in->shape[a] % n)
                return invalid(why, len, "all_to_all: split dimension %d (%lld) is not "
                               "divisible by the group size %d", a, (long long)in->shape[a], n);
            osh[a] /= n;
            osh[cc] *= n;
            return 0;
        }
        if (in->shape[a] != n)
            return invalid(why, len, "%s: dimension %d is %lld, the group size %d",
                           ref_op_name(c->op), a, (long long)in->shape[a], n);
        /* delete split, insert n at concat */
        int64_t tmp[MAXD];
        int t = 0;
        for (int k = 0; k < nd; k++)
            if (k != a)
                tmp[t++] = in->shape[k];
        for (int k = 0, s = 0; k < nd; k++)
            osh[k] = k == cc ? n : tmp[s++];
        return 0;
    }
    default:
        return invalid(why, len, "unknown op");
    }
}

int ref_out_shape(const ref_mesh *mesh, const ref_call *call, const shmesh_array *in,
                  shmesh_dtype *dtype, int *ndim, int64_t shape[SHMESH_MAX_NDIM], char *why,
                  size_t whylen)
{
    layout L;
    int ax[SHMESH_MAX_MESH_DIMS], nax, n;
    int rc = check_common(mesh, call, &L, ax, &nax, &n, why, whylen);
    if (rc)
        return rc;
    layout_free(&L);
    if (check_array("input", in, false, why, whylen))
        return REF_INVALID;
    return shape_rule(call, n, in, dtype, ndim, shape, why, whylen);
}

/* ------------------------------------------------------------------------
 * Reductions of one element over a group
 * ---------------------------------------------------------------------- */

/* The sum of element e of src[0..n-1], in that order, stored as element oe
 * of dst (bool inputs give int32).  Floating sums start from +0.0, as JAX's:
 * a sum of nothing but -0.0 is +0.0. */
static void sum_elem(shmesh_dtype dt, const void *const *src, int n, int64_t e, void *dst,
                     int64_t oe)
{
    size_t es = dt_size(dt);
    switch (dt) {
    case SHMESH_BOOL: {
        uint32_t acc = 0;
        for (int k = 0; k < n; k++)
            acc += (uint32_t)ld_raw(src[k], 1, e);
        st_raw(dst, 4, oe, acc);
        return;
    }
    case SHMESH_FLOAT16:
    case SHMESH_BFLOAT16: {
        bool h = dt == SHMESH_FLOAT16;
        float acc = 0.0f;
        for (int k = 0; k < n; k++) {
            uint16_t b = (uint16_t)ld_raw(src[k], 2, e);
            acc += h ? half_to_float(b) : bf16_to_float(b);
        }
        st_raw(dst, 2, oe, h ? float_to_half(acc) : float_to_bf16(acc));
        return;
    }
    case SHMESH_FLOAT32: {
        float acc = 0.0f;
        for (int k = 0; k < n; k++)
            acc += (float)ld_float(dt, src[k], e);
        uint32_t u;
        memcpy(&u, &acc, 4);
        st_raw(dst, 4, oe, u);
        return;
    }
    case SHMESH_FLOAT64: {
        double acc = 0.0;
        for (int k = 0; k < n; k++)
            acc += ld_float(dt, src[k], e);
        uint64_t u;
        memcpy(&u, &acc, 8);
        st_raw(dst, 8, oe, u);
        return;
    }
    default: {
        /* Integers: the sum modulo 2^64 truncated to the width is the
         * wrapped sum in that width. */
        uint64_t acc = 0;
        for (int k = 0; k < n; k++)
            acc += ld_raw(src[k], es, e);
        st_raw(dst, es, oe, acc);
        return;
    }
    }
}

/* Which member holds the result of max (or min) of element e: the first
 * NaN, else the first member holding the extreme value. */
static int extreme_member(shmesh_dtype dt, const void *const *src, int n, int64_t e, bool max)
{
    for (int k = 0; k < n; k++)
        if (elem_nan(dt, src[k], e))
            return k;
    int best = 0;
    for (int k = 1; k < n; k++) {
        int c = cmp_elem(dt, src[k], e, src[best], e);
        if (max ? c > 0 : c < 0)
            best = k;
    }
    return best;
}

/* The pmean of element e (the sum over the n members "divided" by div), as
 * element oe of dst (dtype odt).  JAX computes psum(x) / div, which XLA
 * turns into psum(x) * (1 / div): div and its reciprocal rounded to the
 * output dtype, the product rounded once (for float16 and bfloat16 it is
 * exact in float32, then rounded to the type).  Integer and bool inputs:
 * the wrapped integer sum, converted to the output dtype first. */
static void mean_elem(shmesh_dtype dt, const void *const *src, int n, int div, int64_t e,
                      void *dst, shmesh_dtype odt, int64_t oe)
{
    unsigned char sum[8];
    sum_elem(dt, src, n, e, sum, 0);
    /* The sum converted to float and to double, each rounded once. */
    float sf;
    double sd;
    shmesh_dtype sdt = dt == SHMESH_BOOL ? SHMESH_INT32 : dt;
    if (dt_float(dt)) {
        sd = ld_float(dt, sum, 0);
        sf = (float)sd; /* exact for the types narrower than double */
    } else if (dt_signed(sdt)) {
        int64_t i = ld_signed(sdt, sum, 0);
        sf = (float)i;
        sd = (double)i;
    } else {
        uint64_t u = ld_raw(sum, dt_size(sdt), 0);
        sf = (float)u;
        sd = (double)u;
    }
    switch (odt) {
    case SHMESH_FLOAT16: {
        float r = half_to_float(float_to_half(1.0f / half_to_float(float_to_half((float)div))));
        st_raw(dst, 2, oe, float_to_half(sf * r));
        return;
    }
    case SHMESH_BFLOAT16: {
        float r = bf16_to_float(float_to_bf16(1.0f / bf16_to_float(float_to_bf16((float)div))));
        st_raw(dst, 2, oe, float_to_bf16(sf * r));
        return;
    }
    case SHMESH_FLOAT32: {
        float q = sf * (1.0f / (float)div);
        uint32_t u;
        memcpy(&u, &q, 4);
        st_raw(dst, 4, oe, u);
        return;
    }
    default: {
        double q = sd * (1.0 / (double)div);
        uint64_t u;
        memcpy(&u, &q, 8);
        st_raw(dst, 8, oe, u);
        return;
    }
    }
}

/* ------------------------------------------------------------------------
 * The call
 * ---------------------------------------------------------------------- */

static int64_t ld_index(const shmesh_array *a, int64_t i)
{
    if (dt_signed(a->dtype))
        return ld_signed(a->dtype, a->data, i);
    uint64_t u = ld_raw(a->data, dt_size(a->dtype), i);
    return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
}

static int check_offsets(const char *what, const shmesh_array *a, int dev, int64_t *k,
                         char *why, size_t len)
{
    char w[64];
    snprintf(w, sizeof w, "device %d's %s", dev, what);
    if (check_array(w, a, true, why, len))
        return REF_INVALID;
    if (!dt_integer(a->dtype))
        return invalid(why, len, "%s must have an integer dtype", w);
    if (a->ndim != 1)
        return invalid(why, len, "%s must have rank 1", w);
    if (*k < 0)
        *k = a->shape[0];
    else if (a->shape[0] != *k)
        return invalid(why, len, "%s has length %lld, expected %lld", w,
                       (long long)a->shape[0], (long long)*k);
    return 0;
}

static int ragged(const layout *L, const int *ax, int nax, const ref_call *c, ref_dev *devs,
                  int *members, bool *per_group, char *why, size_t len)
{
    const shmesh_array *op0 = devs[0].in, *out0 = devs[0].out;
    if (op0->ndim < 1)
        return invalid(why, len, "ragged_all_to_all: operand must have rank >= 1");
    if (out0->ndim != op0->ndim || out0->dtype != op0->dtype)
        return invalid(why, len, "ragged_all_to_all: output must share operand's dtype and rank");
    for (int k = 1; k < op0->ndim; k++)
        if (out0->shape[k] != op0->shape[k])
            return invalid(why, len, "ragged_all_to_all: trailing dimension %d differs", k);
    int64_t K = -1;
    for (int d = 0; d < L->world; d++) {
        ref_dev *v = &devs[d];
        if (check_offsets("input_offsets", v->input_offsets, d, &K, why, len) ||
            check_offsets("send_sizes", v->send_sizes, d, &K, why, len) ||
            check_offsets("output_offsets", v->output_offsets, d, &K, why, len) ||
            check_offsets("recv_sizes", v->recv_sizes, d, &K, why, len))
            return REF_INVALID;
    }
    int n0, me0;
    full_group(L, ax, nax, 0, members, &n0, &me0);
    narrow_group(c->groups, members, &n0, &me0);
    if (K < 1 || K % n0)
        return invalid(why, len, "ragged_all_to_all: %lld entries, not a positive multiple "
                       "of the group size %d", (long long)K, n0);
    int64_t rows_in = op0->shape[0], rows_out = out0->shape[0];
    int64_t row_elems = ref_numel(op0->ndim - 1, op0->shape + 1);
    size_t es = dt_size(op0->dtype);
    *per_group = true;
    /* Check every entry, sender and receiver side, before writing.  A bad
     * entry refuses the call for its whole group; other groups go on. */
    int bad_groups = 0;
    for (int d = 0; d < L->world; d++)
        devs[d].rc = 0;
    for (int d = 0; d < L->world; d++) {
        int n, me;
        full_group(L, ax, nax, d, members, &n, &me);
        narrow_group(c->groups, members, &n, &me);
        int64_t spd = K / n;
        const ref_dev *s = &devs[d];
        char bad[256] = "";
        for (int64_t i = 0; i < K && !bad[0]; i++) {
            int r = (int)(i / spd);
            const ref_dev *rv = &devs[members[r]];
            int64_t off = ld_index(s->input_offsets, i), sz = ld_index(s->send_sizes, i);
            int64_t oo = ld_index(s->output_offsets, i);
            int64_t want = ld_index(rv->recv_sizes, (int64_t)me * spd + i % spd);
            if (off < 0 || sz < 0 || off > rows_in || sz > rows_in - off)
                invalid(bad, sizeof bad, "device %d entry %lld: operand rows [%lld, +%lld) "
                        "are outside 0..%lld", d, (long long)i, (long long)off,
                        (long long)sz, (long long)rows_in);
            else if (oo < 0 || oo > rows_out || sz > rows_out - oo)
                invalid(bad, sizeof bad, "device %d entry %lld: output rows [%lld, +%lld) "
                        "are outside 0..%lld", d, (long long)i, (long long)oo,
                        (long long)sz, (long long)rows_out);
            else if (want != sz)
                invalid(bad, sizeof bad, "device %d entry %lld sends %lld rows but device %d "
                        "expects %lld", d, (long long)i, (long long)sz, members[r],
                        (long long)want);
        }
        if (bad[0]) {
            if (!bad_groups++ && why && len)
                snprintf(why, len, "%s", bad);
            for (int q = 0; q < n; q++)
                devs[members[q]].rc = REF_INVALID;
        }
    }
    /* Move: each receiver of a group that passed takes its senders' slices
     * in group order. */
    for (int d = 0; d < L->world; d++) {
        if (devs[d].rc)
            continue;
        int n, me;
        full_group(L, ax, nax, d, members, &n, &me);
        narrow_group(c->groups, members, &n, &me);
        int64_t spd = K / n;
        for (int sp = 0; sp < n; sp++) {
            const ref_dev *s = &devs[members[sp]];
            for (int64_t k = 0; k < spd; k++) {
                int64_t i = (int64_t)me * spd + k;
                int64_t off = ld_index(s->input_offsets, i), sz = ld_index(s->send_sizes, i);
                int64_t oo = ld_index(s->output_offsets, i);
                if (sz > 0 && row_elems > 0)
                    memcpy((char *)devs[d].out->data + (size_t)(oo * row_elems) * es,
                           (const char *)s->in->data + (size_t)(off * row_elems) * es,
                           (size_t)(sz * row_elems) * es);
            }
        }
    }
    return bad_groups ? REF_INVALID : 0;
}

static bool same_shape(int nd, const int64_t *a, int nd2, const int64_t *b)
{
    if (nd != nd2)
        return false;
    for (int k = 0; k < nd; k++)
        if (a[k] != b[k])
            return false;
    return true;
}

int ref_collective(const ref_mesh *mesh, const ref_call *c, ref_dev *devs, char *why,
                   size_t len)
{
    layout L;
    int ax[SHMESH_MAX_MESH_DIMS], nax, n0;
    int rc = check_common(mesh, c, &L, ax, &nax, &n0, why, len);
    if (rc) {
        int w = ref_mesh_world(mesh, NULL, 0);
        for (int d = 0; d < w; d++)
            devs[d].rc = rc;
        return rc;
    }
    int *members = malloc(sizeof(int) * (size_t)L.world);
    const void **src = malloc(sizeof(void *) * (size_t)L.world);
    void *tmp = NULL;
    bool ragged_checked = false; /* ragged() set each device's rc itself */
    if (!members || !src) {
        rc = invalid(why, len, "out of memory");
        goto done;
    }
    /* Every device's arrays: same dtype and shape everywhere (else the
     * library reports a mismatch), and the output as the call gives it. */
    const shmesh_array *in0 = devs[0].in;
    for (int d = 0; d < L.world; d++) {
        char w[48];
        snprintf(w, sizeof w, "device %d's input", d);
        if ((rc = check_array(w, devs[d].in, true, why, len)))
            goto done;
        snprintf(w, sizeof w, "device %d's output", d);
        if ((rc = check_array(w, devs[d].out, true, why, len)))
            goto done;
        if (devs[d].in->dtype != in0->dtype ||
            !same_shape(devs[d].in->ndim, devs[d].in->shape, in0->ndim, in0->shape)) {
            rc = invalid(why, len, "devices pass inputs of different dtypes or shapes");
            goto done;
        }
    }
    if (c->op == REF_RAGGED_ALL_TO_ALL) {
        for (int d = 0; d < L.world; d++)
            if (devs[d].out->dtype != devs[0].out->dtype ||
                !same_shape(devs[d].out->ndim, devs[d].out->shape, devs[0].out->ndim,
                            devs[0].out->shape)) {
                rc = invalid(why, len, "devices pass outputs of different dtypes or shapes");
                goto done;
            }
        rc = ragged(&L, ax, nax, c, devs, members, &ragged_checked, why, len);
        goto done;
    }
    shmesh_dtype odt;
    int ond;
    int64_t osh[MAXD];
    ref_call cc = *c;
    if (c->op == REF_PMEAN && !dt_float(in0->dtype)) {
        shmesh_dtype want = devs[0].out->dtype;
        if (want != SHMESH_FLOAT32 && want != SHMESH_FLOAT64) {
            rc = invalid(why, len, "pmean of %s input gives float32 or float64, not dtype %d",
                         in0->dtype == SHMESH_BOOL ? "bool" : "integer", (int)want);
            goto done;
        }
        cc.mean_dtype = want;
    }
    if ((rc = shape_rule(&cc, n0, in0, &odt, &ond, osh, why, len)))
        goto done;
    for (int d = 0; d < L.world; d++) {
        const shmesh_array *o = devs[d].out;
        if (o->dtype != odt || !same_shape(o->ndim, o->shape, ond, osh)) {
            char s1[160], s2[160];
            fmt_shape(s1, sizeof s1, ond, osh);
            fmt_shape(s2, sizeof s2, o->ndim, o->shape);
            rc = invalid(why, len, "output must be dtype %d shape %s, device %d gives dtype %d "
                         "shape %s", (int)odt, s1, d, (int)o->dtype, s2);
            goto done;
        }
    }

    shmesh_dtype dt = in0->dtype;
    size_t es = dt_size(dt), oes = dt_size(odt);
    int nd = in0->ndim;
    int64_t nin = ref_numel(nd, in0->shape), nout = ref_numel(ond, osh);
    if (c->op == REF_PSUM_SCATTER) {
        tmp = malloc((size_t)(nin > 0 ? nin : 1) * oes);
        if (!tmp) {
            rc = invalid(why, len, "out of memory");
            goto done;
        }
    }
    for (int d = 0; d < L.world; d++) {
        int n, me;
        full_group(&L, ax, nax, d, members, &n, &me);
        if (op_takes_groups(c->op))
            narrow_group(c->groups, members, &n, &me);
        for (int k = 0; k < n; k++)
            src[k] = devs[members[k]].in->data;
        void *out = devs[d].out->data;
        int64_t idx[MAXD + 1], j;
        switch (c->op) {
        case REF_PSUM:
            for (int64_t e = 0; e < nin; e++)
                sum_elem(dt, src, n, e, out, e);
            break;
        case REF_PMAX:
        case REF_PMIN:
            for (int64_t e = 0; e < nin; e++) {
                int w = extreme_member(dt, src, n, e, c->op == REF_PMAX);
                st_raw(out, es, e, ld_raw(src[w], es, e));
            }
            break;
        case REF_PMEAN:
            /* JAX divides by psum(1, axes, axis_index_groups), which for a
             * constant is the size of the first subgroup (n0), whatever the
             * device's own subgroup; the seed is followed here. */
            for (int64_t e = 0; e < nin; e++)
                mean_elem(dt, src, n, n0, e, out, odt, e);
            break;
        case REF_PARGMAX:
        case REF_PARGMIN:
            for (int64_t e = 0; e < nin; e++) {
                int w = extreme_member(dt, src, n, e, c->op == REF_PARGMAX);
                uint32_t res = INT32_MAX;
                if (!elem_nan(dt, src[w], e))
                    for (int k = 0; k < n; k++)
                        if (!elem_nan(dt, src[k], e) && cmp_elem(dt, src[k], e, src[w], e) == 0) {
                            res = (uint32_t)k;
                            break;
                        }
                st_raw(out, 4, e, res);
            }
            break;
        case REF_ALL_GATHER: {
            int a;
            canon_axis("", c->axis, c->tiled ? nd : nd + 1, &a, NULL, 0);
            for (int64_t e = 0; e < nout; e++) {
                unravel(e, ond, osh, idx);
                if (c->tiled) {
                    j = idx[a] / in0->shape[a];
                    idx[a] %= in0->shape[a];
                } else {
                    j = idx[a];
                    for (int k = a; k < nd; k++)
                        idx[k] = idx[k + 1];
                }
                st_raw(out, es, e, ld_raw(src[j], es, ravel(nd, in0->shape, idx)));
            }
            break;
        }
        case REF_PSUM_SCATTER: {
            int a;
            canon_axis("", c->axis, nd, &a, NULL, 0);
            for (int64_t e = 0; e < nin; e++)
                sum_elem(dt, src, n, e, tmp, e);
            for (int64_t e = 0; e < nout; e++) {
                unravel(e, ond, osh, idx);
                if (c->tiled) {
                    idx[a] += (int64_t)me * osh[a];
                } else {
                    for (int k = nd - 1; k > a; k--)
                        idx[k] = idx[k - 1];
                    idx[a] = me;
                }
                st_raw(out, oes, e, ld_raw(tmp, oes, ravel(nd, in0->shape, idx)));
            }
            break;
        }
        case REF_ALL_TO_ALL:
        case REF_PSWAPAXES: {
            int s, cx;
            bool tiled = c->op == REF_ALL_TO_ALL && c->tiled;
            canon_axis("", c->axis, nd, &s, NULL, 0);
            canon_axis("", c->op == REF_PSWAPAXES ? c->axis : c->concat_axis, nd, &cx, NULL, 0);
            for (int64_t e = 0; e < nout; e++) {
                unravel(e, ond, osh, idx);
                if (tiled) {
                    /* The blocks all have in's shape with split shrunk n times;
                     * sender j's block `me` lands as block j along concat. */
                    int64_t b = in0->shape[s] / n;
                    int64_t bc = cx == s ? b : in0->shape[cx];
                    j = idx[cx] / bc;
                    idx[cx] %= bc;
                    idx[s] += (int64_t)me * b;
                } else {
                    /* out = in without split, n inserted at concat. */
                    j = idx[cx];
                    int64_t rest[MAXD];
                    int t = 0;
                    for (int k = 0; k < nd; k++)
                        if (k != cx)
                            rest[t++] = idx[k];
                    for (int k = 0, r = 0; k < nd; k++)
                        idx[k] = k == s ? me : rest[r++];
                }
                st_raw(out, es, e, ld_raw(src[j], es, ravel(nd, in0->shape, idx)));
            }
            break;
        }
        case REF_PPERMUTE: {
            int from = -1;
            for (int i = 0; i < c->npairs; i++)
                if (py_mod(c->pairs[i][1], n) == me)
                    from = (int)py_mod(c->pairs[i][0], n);
            if (nin == 0)
                break;
            if (from < 0)
                memset(out, 0, (size_t)nin * es);
            else
                memcpy(out, src[from], (size_t)nin * es);
            break;
        }
        case REF_PSHUFFLE:
            if (nin > 0)
                memcpy(out, src[c->perm[me]], (size_t)nin * es);
            break;
        case REF_PBROADCAST:
            if (nin > 0)
                memcpy(out, src[c->source], (size_t)nin * es);
            break;
        default:
            break;
        }
    }
    rc = 0;
done:
    if (!ragged_checked)
        for (int d = 0; d < L.world; d++)
            devs[d].rc = rc;
    free(tmp);
    free(members);
    free(src);
    layout_free(&L);
    return rc;
}
