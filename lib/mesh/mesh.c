/* Meshes, axis names, and the groups a collective runs in. */
#include <ctype.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/hash.h"
#include "mesh/device.h"
#include "mesh/state.h"
#include "mesh/mesh.h"

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SHMESH_MAX_AXIS_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',' || s[i] == '(' || s[i] == ')' || isspace((unsigned char)s[i]))
            return false;
    return true;
}

/* "x=2 x y=3", for messages. */
static void shape_text(int ndim, const char *const names[], const int sizes[], char *buf,
                       size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s=%d", d ? " x " : "", names[d], sizes[d]);
}

/* Names and sizes: the rules every mesh follows.  *size gets the product
 * (capped just past max). */
static int check_shape(const shmesh_mesh *err_to, const char *fn, int ndim,
                       const char *const names[], const int sizes[], int64_t max, int64_t *size)
{
    if (ndim < 1 || ndim > SHMESH_MAX_MESH_DIMS)
        return mesh_fail(err_to, "%s: ndim must be 1..%d, got %d", fn, SHMESH_MAX_MESH_DIMS,
                         ndim);
    if (!names || !sizes)
        return mesh_fail(err_to, "%s: axis_names and sizes must not be NULL", fn);
    int64_t prod = 1;
    for (int d = 0; d < ndim; d++) {
        if (!name_ok(names[d]))
            return mesh_fail(err_to,
                             "%s: axis %d's name must be 1..%d characters without ',', '(', ')' "
                             "or spaces, got '%s'",
                             fn, d, SHMESH_MAX_AXIS_NAME, names[d] ? names[d] : "(null)");
        for (int e = 0; e < d; e++)
            if (!strcmp(names[d], names[e]))
                return mesh_fail(err_to, "%s: axis name '%s' is given twice (axes %d and %d)", fn,
                                 names[d], e, d);
        if (sizes[d] < 1)
            return mesh_fail(err_to, "%s: axis '%s' has size %d; sizes must be positive", fn,
                             names[d], sizes[d]);
        if (prod <= max)
            prod *= sizes[d];
    }
    *size = prod;
    return 0;
}

static int check_mesh(shmesh_ctx *c, const shmesh_mesh *err_to, int ndim,
                      const char *const names[], const int sizes[], const int *order)
{
    int ndev = device_count(c);
    int64_t prod;
    int rc = check_shape(err_to, "shmesh_mesh_create", ndim, names, sizes, ndev, &prod);
    if (rc)
        return rc;
    if (prod != ndev) {
        char shape[SHMESH_MAX_MESH_DIMS * 48];
        shape_text(ndim, names, sizes, shape, sizeof shape);
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_mesh_create: the axis sizes (%s) must multiply to the job's "
                        "device count %d (%d ranks x %d devices each)",
                        shape, ndev, c->job_size, c->local_devices);
    }
    if (!order)
        return 0;
    /* A permutation of the device ids: each exactly once. */
    int *at = malloc(sizeof *at * (size_t)ndev);
    if (!at)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_mesh_create: out of memory");
    for (int i = 0; i < ndev; i++)
        at[i] = -1;
    for (int i = 0; i < ndev && !rc; i++) {
        int r = order[i];
        if (r < 0 || r >= ndev)
            rc = ctx_fail(c, SHMESH_ERR_INVALID,
                          "shmesh_mesh_create: device_order[%d] = %d is not a device id (0..%d)",
                          i, r, ndev - 1);
        else if (at[r] >= 0)
            rc = ctx_fail(c, SHMESH_ERR_INVALID,
                          "shmesh_mesh_create: device_order must be a permutation of the device "
                          "ids, but device %d appears at positions %d and %d",
                          r, at[r], i);
        else
            at[r] = i;
    }
    free(at);
    return rc;
}

/* A mesh value: names and sizes (checked), and for a concrete mesh (c not
 * NULL) the device id at each position (ids NULL: in order).  batch > 0:
 * the last dimension is batched, of that size, and ids (of size / batch
 * entries) name the devices holding each block of `batch` positions. */
static shmesh_mesh *mesh_new_batched(shmesh_ctx *c, int ndim, const char *const names[],
                                     const int sizes[], int size, const int *ids, int batch)
{
    shmesh_mesh *m = calloc(1, sizeof *m);
    int *buf = NULL;
    if (m && c && !(buf = calloc((size_t)size * 7, sizeof *buf))) {
        free(m);
        return NULL;
    }
    if (!m)
        return NULL;
    m->ctx = c;
    m->abstract = !c;
    m->ndim = ndim;
    m->size = size;
    m->id = -1;
    m->batch_dim = batch ? ndim - 1 : -1;
    m->batch = batch ? batch : 1;
    m->per = c ? c->local_devices * m->batch : 1;
    uint64_t h = m->abstract ? 7 : batch ? 11 : 5;
    for (int d = 0; d < ndim; d++) {
        snprintf(m->names[d], sizeof m->names[d], "%s", names[d]);
        m->sizes[d] = sizes[d];
        h = hash_bytes(m->names[d], strlen(m->names[d]) + 1, h);
    }
    h = hash_bytes(m->sizes, sizeof *m->sizes * (size_t)ndim, h);
    if (!c) {
        m->hash = h;
        return m;
    }
    size_t n = (size_t)size;
    m->ids = buf;
    m->pos_rank = buf + n;
    m->pos_local = buf + 2 * n;
    m->axis_group = buf + 3 * n;
    m->sub = buf + 4 * n;
    m->seen = buf + 5 * n;
    m->local_pos = buf + 6 * n;
    int b = m->batch;
    for (int i = 0; i < size; i++) {
        int id = ids ? ids[i / b] : i / b;
        struct device dev = device_of(c, id);
        m->ids[i] = id * b + i % b;
        m->pos_rank[i] = dev.rank;
        m->pos_local[i] = dev.local * b + i % b;
        if (dev.rank == c->job_rank)
            m->local_pos[m->nlocal++] = i;
    }
    m->hash = hash_bytes(m->ids, sizeof *m->ids * n, h);
    m->cur = -1;
    mesh_select(m, 0);
    return m;
}

static shmesh_mesh *mesh_new(shmesh_ctx *c, int ndim, const char *const names[],
                             const int sizes[], int size, const int *ids)
{
    return mesh_new_batched(c, ndim, names, sizes, size, ids, 0);
}

int mesh_batched(const shmesh_mesh *m, const char *fn, const char *name, int batch,
                 shmesh_mesh **out)
{
    if (m->ctx && m->ctx->job)
        return mesh_fail(m, "%s: batched meshes in a job of several nodes are not built yet "
                            "(docs/multinode.md)", fn);
    const char *names[SHMESH_MAX_MESH_DIMS];
    int sizes[SHMESH_MAX_MESH_DIMS];
    for (int d = 0; d < m->ndim; d++) {
        names[d] = m->names[d];
        sizes[d] = m->sizes[d];
    }
    names[m->ndim] = name;
    sizes[m->ndim] = batch;
    int64_t size;
    int rc = check_shape(m, fn, m->ndim + 1, names, sizes, INT32_MAX / 8, &size);
    if (!rc && size > INT32_MAX / 8)
        rc = mesh_fail(m, "%s: a batch of %d on each of %d devices makes more than %d positions",
                       fn, batch, m->size, INT32_MAX / 8);
    if (rc)
        return rc;
    shmesh_mesh *b = mesh_new_batched(m->ctx, m->ndim + 1, names, sizes, (int)size, m->ids,
                                      batch);
    if (!b)
        return ctx_fail(m->ctx, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    b->id = m->id;
    *out = b;
    return 0;
}

void mesh_coords(const shmesh_mesh *m, int pos, int *coords)
{
    for (int d = m->ndim - 1; d >= 0; d--) {
        coords[d] = pos % m->sizes[d];
        pos /= m->sizes[d];
    }
}

void mesh_select(shmesh_mesh *m, int l)
{
    if (m->cur == l || l >= m->nlocal)
        return;
    mesh_coords(m, m->local_pos[l], m->coords);
    m->cur = l;
    m->last_valid = false; /* the cached group was the previous device's */
}

int mesh_fail(const shmesh_mesh *m, const char *fmt, ...)
{
    char msg[CTX_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m && m->ctx)
        return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s", msg);
    init_error("%s", msg);
    return SHMESH_ERR_INVALID;
}

int shmesh_mesh_create(shmesh_ctx *c, int ndim, const char *const names[], const int sizes[],
                       const int *order, shmesh_mesh **out)
{
    int rc = ctx_check(c, "shmesh_mesh_create");
    if (rc)
        return rc;
    if (!out)
        return ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_mesh_create: out must not be NULL");
    *out = NULL;
    shmesh_mesh err_to = {.ctx = c};
    rc = check_mesh(c, &err_to, ndim, names, sizes, order);
    if (rc)
        return rc;
    shmesh_mesh *m = mesh_new(c, ndim, names, sizes, device_count(c), order);
    if (!m)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_mesh_create: out of memory");

    /* Every rank must describe the same mesh: names, sizes and order. */
    struct call k;
    rc = call_world_step(&k, c, OP_MESH_CREATE);
    if (!rc) {
        m->id = mesh_of(c)->next_mesh_id++;
        k.d.mesh = m->id;
        k.d.ndim = ndim;
        /* Every name in full (the text has room for all of them), hashed
         * whole with the sizes (in the shape) and the devices' order. */
        struct axes all = {.n = ndim};
        for (int i = 0; i < ndim; i++) {
            k.d.shape[i] = sizes[i];
            all.dim[i] = i;
        }
        mesh_axes_text(m, &all, k.d.axes, sizeof k.d.axes);
        k.d.extra_hash = m->hash;
    }
    rc = call_finish(&k, rc);
    if (rc) {
        shmesh_mesh_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

int shmesh_abstract_mesh_create(int ndim, const char *const names[], const int sizes[],
                                shmesh_mesh **out)
{
    const char *fn = "shmesh_abstract_mesh_create";
    if (!out)
        return mesh_fail(NULL, "%s: out must not be NULL", fn);
    *out = NULL;
    int64_t size;
    int rc = check_shape(NULL, fn, ndim, names, sizes, INT32_MAX, &size);
    if (rc)
        return rc;
    if (size > INT32_MAX)
        return mesh_fail(NULL, "%s: the sizes multiply to more than %d devices", fn, INT32_MAX);
    if (!(*out = mesh_new(NULL, ndim, names, sizes, (int)size, NULL))) {
        init_error("%s: out of memory", fn);
        return SHMESH_ERR_NOMEM;
    }
    return 0;
}

/* The mesh's names as an array of pointers, for mesh_new. */
static void name_ptrs(const shmesh_mesh *m, const char *names[SHMESH_MAX_MESH_DIMS])
{
    for (int d = 0; d < m->ndim; d++)
        names[d] = m->names[d];
}

int shmesh_mesh_abstract(const shmesh_mesh *m, shmesh_mesh **out)
{
    if (!m || !out)
        return mesh_fail(m, "shmesh_mesh_abstract: %s must not be NULL", m ? "out" : "the mesh");
    const char *names[SHMESH_MAX_MESH_DIMS];
    name_ptrs(m, names);
    if (!(*out = mesh_new(NULL, m->ndim, names, m->sizes, m->size, NULL))) {
        init_error("shmesh_mesh_abstract: out of memory");
        return SHMESH_ERR_NOMEM;
    }
    return 0;
}

/* The sub-block of m's positions [lo[d], hi[d]] as a mesh of the same
 * context, its devices in row-major order. */
shmesh_mesh *mesh_block(const shmesh_mesh *m, const int *lo, const int *hi)
{
    int sizes[SHMESH_MAX_MESH_DIMS], n = 1;
    for (int d = 0; d < m->ndim; d++) {
        sizes[d] = hi[d] - lo[d] + 1;
        n *= sizes[d];
    }
    int *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids)
        return NULL;
    for (int i = 0; i < n; i++) {
        int rem = i, lin = 0, mul = 1;
        for (int d = m->ndim - 1; d >= 0; d--) {
            lin += (lo[d] + rem % sizes[d]) * mul;
            rem /= sizes[d];
            mul *= m->sizes[d];
        }
        ids[i] = m->ids[lin];
    }
    const char *names[SHMESH_MAX_MESH_DIMS];
    name_ptrs(m, names);
    shmesh_mesh *b = mesh_new(m->ctx, m->ndim, names, sizes, n, ids);
    free(ids);
    return b;
}

void shmesh_mesh_destroy(shmesh_mesh *m)
{
    if (!m)
        return;
    free(m->ids);
    free(m);
}

int shmesh_mesh_ndim(const shmesh_mesh *m) { return m ? m->ndim : 0; }

const char *shmesh_mesh_axis_name(const shmesh_mesh *m, int dim)
{
    return m && dim >= 0 && dim < m->ndim ? m->names[dim] : NULL;
}

int shmesh_mesh_dim_size(const shmesh_mesh *m, int dim)
{
    return m && dim >= 0 && dim < m->ndim ? m->sizes[dim] : -1;
}

int shmesh_mesh_size(const shmesh_mesh *m) { return m ? m->size : 0; }

bool shmesh_mesh_is_abstract(const shmesh_mesh *m) { return m && m->abstract; }

/* What an abstract mesh cannot answer (JAX: "AbstractMesh does not
 * implement ..."). */
int mesh_concrete(const shmesh_mesh *m, const char *fn, const char *what)
{
    if (!m)
        return mesh_fail(NULL, "%s: the mesh is NULL", fn);
    if (m->abstract) {
        char text[SHMESH_MAX_MESH_DIMS * 48];
        shmesh_mesh_text(m, text, sizeof text);
        return mesh_fail(m, "%s: %s is abstract (names and sizes only) and has no %s", fn, text,
                         what);
    }
    return 0;
}

int mesh_unbatched(const shmesh_mesh *m, const char *fn, const char *what)
{
    if (!m || m->batch_dim < 0)
        return 0;
    char text[SHMESH_MAX_MESH_DIMS * 48];
    shmesh_mesh_text(m, text, sizeof text);
    return mesh_fail(m,
                     "%s: %s has the batched axis '%s'; %s on batched meshes are not built "
                     "(docs/batching.md)",
                     fn, text, m->names[m->batch_dim], what);
}

/* The devices at n positions (pos NULL: every position; else pos[0],
 * pos[step], ...): on a batched mesh, the device holding each. */
static int copy_ids(const shmesh_mesh *m, const int *pos, int n, int step, int *ids,
                    int capacity)
{
    for (int i = 0; i < n && i < capacity; i++)
        ids[i] = m->ids[pos ? pos[i * step] : i] / m->batch;
    return n;
}

int shmesh_mesh_device_ids(const shmesh_mesh *m, int *ids, int capacity)
{
    int rc = mesh_concrete(m, "shmesh_mesh_device_ids", "device ids");
    if (!rc && !ids && capacity > 0)
        rc = mesh_fail(m, "shmesh_mesh_device_ids: ids is NULL but capacity is %d", capacity);
    return rc ? rc : copy_ids(m, NULL, m->size, 1, ids, capacity);
}

int shmesh_mesh_local_devices(const shmesh_mesh *m, int *ids, int capacity)
{
    int rc = mesh_concrete(m, "shmesh_mesh_local_devices", "local devices");
    if (!rc && !ids && capacity > 0)
        rc = mesh_fail(m, "shmesh_mesh_local_devices: ids is NULL but capacity is %d", capacity);
    return rc ? rc : copy_ids(m, m->local_pos, m->nlocal / m->batch, m->batch, ids, capacity);
}

int shmesh_mesh_is_multi_process(const shmesh_mesh *m)
{
    int rc = mesh_concrete(m, "shmesh_mesh_is_multi_process", "processes");
    return rc ? rc : m->nlocal != m->size;
}

bool shmesh_mesh_same_shape(const shmesh_mesh *a, const shmesh_mesh *b)
{
    if (!a || !b || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || strcmp(a->names[d], b->names[d]))
            return false;
    return true;
}

bool shmesh_mesh_equal(const shmesh_mesh *a, const shmesh_mesh *b)
{
    if (a == b)
        return a != NULL;
    if (!shmesh_mesh_same_shape(a, b) || a->abstract != b->abstract || a->hash != b->hash)
        return false;
    return a->abstract || !memcmp(a->ids, b->ids, sizeof *a->ids * (size_t)a->size);
}

uint64_t shmesh_mesh_hash(const shmesh_mesh *m) { return m ? m->hash : 0; }

int shmesh_mesh_text(const shmesh_mesh *m, char *buf, size_t len)
{
    char tmp[SHMESH_MAX_MESH_DIMS * 48];
    size_t n = 0;
    if (!m)
        n = (size_t)snprintf(tmp, sizeof tmp, "(no mesh)");
    else {
        n = (size_t)snprintf(tmp, sizeof tmp, "%s(", m->abstract ? "AbstractMesh" : "Mesh");
        for (int d = 0; d < m->ndim && n < sizeof tmp; d++)
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s'%s': %d", d ? ", " : "",
                                  m->names[d], m->sizes[d]);
        if (n < sizeof tmp)
            n += (size_t)snprintf(tmp + n, sizeof tmp - n, ")");
    }
    if (len)
        snprintf(buf, len, "%s", tmp);
    return (int)n;
}

static int parse_axes(shmesh_mesh *m, const char *op, const char *spec, struct axes *a);

int mesh_axes(shmesh_mesh *m, const char *op, const char *spec, struct axes *a)
{
    if (spec && m->last_valid && !strcmp(spec, m->last_spec)) {
        *a = m->last_axes;
        return 0;
    }
    int rc = parse_axes(m, op, spec, a);
    /* The cache holds the spec, its axes, and their group in axis_group. */
    m->last_valid = !rc && !m->abstract && strlen(spec) < sizeof m->last_spec;
    if (m->last_valid) {
        strcpy(m->last_spec, spec);
        m->last_axes = *a;
        m->last_index = mesh_axis_group(m, a, m->axis_group);
    }
    return rc;
}

static int parse_axes(shmesh_mesh *m, const char *op, const char *spec, struct axes *a)
{
    memset(a, 0, sizeof *a);
    if (!spec)
        return mesh_fail(m, "%s: axes must not be NULL (\"\" names none)",
                        op);
    const char *p = spec;
    while (isspace((unsigned char)*p))
        p++;
    while (*p) { /* one name per comma-separated token, spaces around it ignored */
        while (isspace((unsigned char)*p))
            p++;
        const char *start = p;
        while (*p && *p != ',' && !isspace((unsigned char)*p))
            p++;
        size_t len = (size_t)(p - start);
        while (isspace((unsigned char)*p))
            p++;
        if (len == 0)
            return mesh_fail(m, "%s: empty axis name in \"%s\"", op,
                            spec);
        if (*p && *p != ',')
            return mesh_fail(m,
                            "%s: axis names in \"%s\" must be separated by commas", op, spec);
        int dim = -1;
        for (int d = 0; d < m->ndim; d++)
            if (strlen(m->names[d]) == len && !strncmp(m->names[d], start, len))
                dim = d;
        if (dim < 0) {
            char known[8 * (SHMESH_MAX_AXIS_NAME + 2)];
            int n = 0;
            for (int d = 0; d < m->ndim; d++)
                n += snprintf(known + n, sizeof known - (size_t)n, "%s%s", d ? ", " : "",
                              m->names[d]);
            return mesh_fail(m,
                            "%s: unbound axis name '%.*s' (the mesh's axes are %s)", op,
                            (int)len, start, known);
        }
        for (int k = 0; k < a->n; k++)
            if (a->dim[k] == dim)
                return mesh_fail(m,
                                "%s: axis '%s' is named twice in \"%s\"", op, m->names[dim], spec);
        a->dim[a->n++] = dim;
        if (*p == ',')
            p++;
        else
            break;
        if (!*p) /* a trailing comma */
            return mesh_fail(m, "%s: empty axis name in \"%s\"", op,
                            spec);
    }
    a->size = 1;
    for (int k = 0; k < a->n; k++)
        a->size *= m->sizes[a->dim[k]];
    return 0;
}

void mesh_axes_text(const shmesh_mesh *m, const struct axes *a, char *buf, size_t len)
{
    size_t n = 0;
    if (!len)
        return;
    /* Byte by byte: names are short, and this runs on every call. */
    for (int k = 0; k < a->n; k++) {
        const char *name = m->names[a->dim[k]];
        size_t at = n;
        if (k && at + 1 < len)
            buf[at++] = ',';
        while (*name && at + 1 < len)
            buf[at++] = *name++;
        if (*name) /* no room for all of it: not even part */
            break;
        n = at;
    }
    buf[n] = 0;
}

static const char *axes_msg(const shmesh_mesh *m, const struct axes *a, char *buf, size_t len)
{
    mesh_axes_text(m, a, buf, len);
    return buf;
}

int mesh_axis_group(const shmesh_mesh *m, const struct axes *a, int *ids)
{
    int cc[SHMESH_MAX_MESH_DIMS];
    memcpy(cc, m->coords, sizeof cc);
    for (int p = 0; p < a->size; p++) {
        int rem = p;
        for (int k = a->n - 1; k >= 0; k--) {
            int d = a->dim[k];
            cc[d] = rem % m->sizes[d];
            rem /= m->sizes[d];
        }
        int lin = 0;
        for (int d = 0; d < m->ndim; d++)
            lin = lin * m->sizes[d] + cc[d];
        ids[p] = m->ids[lin];
    }
    int idx = 0;
    for (int k = 0; k < a->n; k++)
        idx = idx * m->sizes[a->dim[k]] + m->coords[a->dim[k]];
    return idx;
}

/* Inlined into every call's prologue (coll_open) even with a second
 * caller (piles): it is most of a small call's group resolution. */
__attribute__((always_inline)) inline int mesh_group(shmesh_mesh *m, const char *op,
                                                     const struct axes *a,
                                                     const shmesh_groups *gs, bool equal_sizes,
                                                     struct group *g, uint64_t *groups_hash)
{
    shmesh_ctx *c = m->ctx;
    int n = a->size;
    int idx;
    if (m->last_valid && !memcmp(a, &m->last_axes, sizeof *a)) {
        idx = m->last_index;
    } else {
        idx = mesh_axis_group(m, a, m->axis_group);
        m->last_valid = false; /* axis_group no longer holds the cached group */
    }
    *groups_hash = 0;
    if (!gs) {
        *g = (struct group){.n = n, .me = idx, .ranks = m->axis_group}; /* device ids */
        return 0;
    }
    char text[SHMESH_MAX_MESH_DIMS * (SHMESH_MAX_AXIS_NAME + 1)]; /* for messages */
    if (gs->ngroups < 1 || !gs->indices)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: axis_index_groups needs at least one group and its indices, got %d "
                        "groups%s",
                        op, gs->ngroups, gs->indices ? "" : " and NULL indices");
    int64_t total = 0;
    for (int k = 0; k < gs->ngroups; k++) {
        int size = gs->group_sizes ? gs->group_sizes[k] : gs->group_size;
        if (size < 1)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: axis_index_groups group %d has %d members; groups cannot be "
                            "empty",
                            op, k, size);
        total += size;
        if (total > n)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: axis_index_groups must cover all indices exactly once, but its "
                            "groups hold more than the %d indices of axes \"%s\"",
                            op, n, axes_msg(m, a, text, sizeof text));
    }
    if (total != n)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: axis_index_groups must cover all indices exactly once, but its groups "
                        "hold %" PRId64 " indices and axes \"%s\" have %d",
                        op, total, axes_msg(m, a, text, sizeof text), n);
    memset(m->seen, 0, sizeof *m->seen * (size_t)n);
    int at = 0, mine_at = 0, mine_size = 0, size0 = 0;
    for (int k = 0; k < gs->ngroups; k++) {
        int size = gs->group_sizes ? gs->group_sizes[k] : gs->group_size;
        if (k == 0)
            size0 = size;
        else if (equal_sizes && size != size0)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: axis_index_groups must all have the same size, but group 0 has %d "
                            "members and group %d has %d",
                            op, size0, k, size);
        for (int i = 0; i < size; i++) {
            int v = gs->indices[at + i];
            if (v < 0 || v >= n)
                return ctx_fail(c, SHMESH_ERR_INVALID,
                                "%s: axis_index_groups index %d (group %d) is out of range for "
                                "axes \"%s\" of size %d",
                                op, v, k, axes_msg(m, a, text, sizeof text), n);
            if (m->seen[v]++)
                return ctx_fail(c, SHMESH_ERR_INVALID,
                                "%s: axis_index_groups must cover all indices exactly once, but %d "
                                "appears twice",
                                op, v);
            if (v == idx) { /* this device's subgroup */
                mine_at = at;
                mine_size = size;
            }
        }
        at += size;
    }
    for (int i = 0; i < mine_size; i++) {
        int v = gs->indices[mine_at + i];
        m->sub[i] = m->axis_group[v];
        if (v == idx)
            g->me = i;
    }
    g->n = mine_size;
    g->ranks = m->sub;
    uint64_t h = hash_bytes(gs->indices, sizeof *gs->indices * (size_t)n, (uint64_t)gs->ngroups);
    for (int k = 0; k < gs->ngroups; k++)
        h = hash_bytes(&(int){gs->group_sizes ? gs->group_sizes[k] : gs->group_size}, sizeof(int),
                       h);
    *groups_hash = h;
    return 0;
}

/* The axes of a local query (shmesh_axis_index, _size), its NULL arguments
 * explained: `what` names the result argument. */
static int query_axes(const shmesh_mesh **mp, const char *fn, const char *axes, const void *out,
                      const char *what, struct axes *a)
{
    const shmesh_mesh *m = *mp ? *mp : (*mp = mesh_or_current(NULL, fn));
    if (!m)
        return SHMESH_ERR_INVALID; /* explained by mesh_or_current */
    if (!out)
        return mesh_fail(m, "%s: %s must not be NULL", fn, what);
    return mesh_axes((shmesh_mesh *)m, fn, axes, a);
}

bool mesh_axes_in_rank(shmesh_mesh *m, int n, const uint8_t *dims)
{
    uint32_t key = 1; /* the named dimensions as a bit set, cached */
    for (int i = 0; i < n; i++)
        key |= 2u << dims[i];
    if (m->in_rank_key == key)
        return m->in_rank;
    bool in = true;
    for (int p = 0; p < m->size && in; p++) {
        /* Position p's neighbour one step along each named dimension (the
         * next coordinate, or the first after the last) holds the same rank:
         * then so does all of p's group. */
        int stride = 1;
        for (int d = m->ndim - 1; d >= 0 && in; stride *= m->sizes[d--]) {
            if (!(key & (2u << d)))
                continue;
            int c = p / stride % m->sizes[d];
            int q = p + (c + 1 < m->sizes[d] ? stride : -c * stride);
            in = m->pos_rank[q] == m->pos_rank[p];
        }
    }
    m->in_rank_key = key;
    m->in_rank = in;
    return in;
}

int mesh_groups_all(const shmesh_mesh *m, int n, const uint8_t *dims, int *ids)
{
    bool named[SHMESH_MAX_MESH_DIMS] = {false};
    int size = 1;
    for (int i = 0; i < n; i++) {
        named[dims[i]] = true;
        size *= m->sizes[dims[i]];
    }
    for (int p = 0; p < m->size; p++) {
        int cc[SHMESH_MAX_MESH_DIMS], group = 0, idx = 0;
        mesh_coords(m, p, cc);
        for (int d = 0; d < m->ndim; d++)
            if (!named[d])
                group = group * m->sizes[d] + cc[d];
        for (int i = 0; i < n; i++)
            idx = idx * m->sizes[dims[i]] + cc[dims[i]];
        ids[group * size + idx] = m->ids[p];
    }
    return size;
}

int mesh_index_at(const shmesh_mesh *m, const struct axes *a, int pos)
{
    int cc[SHMESH_MAX_MESH_DIMS];
    mesh_coords(m, pos, cc);
    int idx = 0;
    for (int k = 0; k < a->n; k++)
        idx = idx * m->sizes[a->dim[k]] + cc[a->dim[k]];
    return idx;
}

/* query_axes for an index: the mesh must have devices. */
static int index_query(const shmesh_mesh **mp, const char *fn, const char *axes, int *index,
                       struct axes *a)
{
    int rc = query_axes(mp, fn, axes, index, "index", a);
    return rc ? rc : mesh_concrete(*mp, fn, "devices to index");
}

int shmesh_axis_index(const shmesh_mesh *m, const char *axes, int *index)
{
    struct axes a;
    int rc = index_query(&m, "shmesh_axis_index", axes, index, &a);
    if (rc)
        return rc;
    *index = mesh_index_at(m, &a, m->local_pos[0]);
    return 0;
}

int shmesh_axis_index_of(const shmesh_mesh *m, const char *axes, int device, int *index)
{
    struct axes a;
    int rc = index_query(&m, "shmesh_axis_index_of", axes, index, &a);
    if (rc)
        return rc;
    for (int p = 0; p < m->size; p++)
        if (m->ids[p] / m->batch == device) { /* its first position */
            *index = mesh_index_at(m, &a, p);
            return 0;
        }
    char text[SHMESH_MAX_MESH_DIMS * 48];
    shmesh_mesh_text(m, text, sizeof text);
    return mesh_fail(m, "shmesh_axis_index_of: device %d is not in %s", device, text);
}

int shmesh_axis_size(const shmesh_mesh *m, const char *axes, int *size)
{
    struct axes a;
    int rc = query_axes(&m, "shmesh_axis_size", axes, size, "size", &a);
    if (rc)
        return rc;
    *size = a.size;
    return 0;
}
