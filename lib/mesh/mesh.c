/* Meshes, axis names, and the groups a collective runs in. */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "core/hash.h"
#include "mesh/device.h"
#include "ops/ops.h"
#include "mesh/mesh.h"

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SHMESH_MAX_AXIS_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',' || isspace((unsigned char)s[i]))
            return false;
    return true;
}

static int check_mesh(shmesh_ctx *c, int ndim, const char *const names[], const int sizes[],
                      const int *order)
{
    if (ndim < 1 || ndim > SHMESH_MAX_MESH_DIMS)
        return ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_mesh_create: ndim must be 1..%d, got %d",
                        SHMESH_MAX_MESH_DIMS, ndim);
    if (!names || !sizes)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_mesh_create: axis_names and sizes must not be NULL");
    int64_t prod = 1;
    for (int d = 0; d < ndim; d++) {
        if (!name_ok(names[d]))
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "shmesh_mesh_create: axis %d's name must be 1..%d characters without "
                            "',' or spaces, got '%s'",
                            d, SHMESH_MAX_AXIS_NAME, names[d] ? names[d] : "(null)");
        for (int e = 0; e < d; e++)
            if (!strcmp(names[d], names[e]))
                return ctx_fail(c, SHMESH_ERR_INVALID,
                                "shmesh_mesh_create: axis name '%s' is given twice (axes %d and %d)",
                                names[d], e, d);
        if (sizes[d] < 1)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "shmesh_mesh_create: axis '%s' has size %d; sizes must be positive",
                            names[d], sizes[d]);
        prod *= sizes[d];
        if (prod > c->world)
            break;
    }
    if (prod != c->world) {
        char shape[128];
        int n = 0;
        for (int d = 0; d < ndim && n < (int)sizeof shape; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%s=%d", d ? " x " : "",
                          names[d], sizes[d]);
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_mesh_create: the axis sizes (%s) must multiply to the world size "
                        "%d",
                        shape, c->world);
    }
    if (!order)
        return 0;
    /* A permutation of the ranks: each exactly once. */
    int *at = malloc(sizeof *at * (size_t)c->world);
    if (!at)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_mesh_create: out of memory");
    for (int i = 0; i < c->world; i++)
        at[i] = -1;
    int rc = 0;
    for (int i = 0; i < c->world && !rc; i++) {
        int r = order[i];
        if (r < 0 || r >= c->world)
            rc = ctx_fail(c, SHMESH_ERR_INVALID,
                          "shmesh_mesh_create: device_order[%d] = %d is not a rank (0..%d)", i, r,
                          c->world - 1);
        else if (at[r] >= 0)
            rc = ctx_fail(c, SHMESH_ERR_INVALID,
                          "shmesh_mesh_create: device_order must be a permutation of the ranks, "
                          "but rank %d appears at positions %d and %d",
                          r, at[r], i);
        else
            at[r] = i;
    }
    free(at);
    return rc;
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
    rc = check_mesh(c, ndim, names, sizes, order);
    if (rc)
        return rc;

    shmesh_mesh *m = calloc(1, sizeof *m);
    int ndev = device_count(c);
    int *buf = m ? calloc((size_t)ndev * 5, sizeof *buf) : NULL;
    if (!buf) {
        free(m);
        return ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_mesh_create: out of memory");
    }
    m->ctx = c;
    m->ndim = ndim;
    m->pos_rank = buf;
    m->pos_local = buf + ndev;
    m->axis_group = buf + 2 * (size_t)ndev;
    m->sub = buf + 3 * (size_t)ndev;
    m->seen = buf + 4 * (size_t)ndev;
    for (int d = 0; d < ndim; d++) {
        snprintf(m->names[d], sizeof m->names[d], "%s", names[d]);
        m->sizes[d] = sizes[d];
    }
    int my_pos = 0;
    for (int i = 0; i < ndev; i++) {
        struct device dev = device_of(c, order ? order[i] : i);
        m->pos_rank[i] = dev.rank;
        m->pos_local[i] = dev.local;
        if (dev.rank == c->rank && dev.local == 0)
            my_pos = i;
    }
    for (int d = ndim - 1; d >= 0; d--) {
        m->coords[d] = my_pos % sizes[d];
        my_pos /= sizes[d];
    }

    /* Every rank must describe the same mesh: names, sizes and order. */
    struct call k;
    rc = op_world_step_prepare(&k, c, OP_MESH_CREATE);
    if (!rc) {
        m->id = c->next_mesh_id++;
        k.d.mesh = m->id;
        k.d.ndim = ndim;
        /* Every name in full (the text has room for all of them), hashed
         * whole with the sizes (in the shape) and the devices' order. */
        struct axes all = {.n = ndim};
        uint64_t h = 1;
        for (int i = 0; i < ndim; i++) {
            k.d.shape[i] = sizes[i];
            all.dim[i] = i;
            h = hash_bytes(m->names[i], strlen(m->names[i]) + 1, h);
        }
        mesh_axes_text(m, &all, k.d.axes, sizeof k.d.axes);
        h = hash_bytes(m->pos_rank, sizeof *m->pos_rank * (size_t)ndev, h);
        k.d.extra_hash = hash_bytes(m->pos_local, sizeof *m->pos_local * (size_t)ndev, h);
    }
    rc = call_finish(&k, rc);
    if (rc) {
        shmesh_mesh_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

void shmesh_mesh_destroy(shmesh_mesh *m)
{
    if (!m)
        return;
    free(m->pos_rank);
    free(m);
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
    m->last_valid = !rc && strlen(spec) < sizeof m->last_spec;
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
        return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s: axes must not be NULL (\"\" names none)",
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
            return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s: empty axis name in \"%s\"", op,
                            spec);
        if (*p && *p != ',')
            return ctx_fail(m->ctx, SHMESH_ERR_INVALID,
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
            return ctx_fail(m->ctx, SHMESH_ERR_INVALID,
                            "%s: unbound axis name '%.*s' (the mesh's axes are %s)", op,
                            (int)len, start, known);
        }
        for (int k = 0; k < a->n; k++)
            if (a->dim[k] == dim)
                return ctx_fail(m->ctx, SHMESH_ERR_INVALID,
                                "%s: axis '%s' is named twice in \"%s\"", op, m->names[dim], spec);
        a->dim[a->n++] = dim;
        if (*p == ',')
            p++;
        else
            break;
        if (!*p) /* a trailing comma */
            return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s: empty axis name in \"%s\"", op,
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

int mesh_axis_group(const shmesh_mesh *m, const struct axes *a, int *ranks)
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
        ranks[p] = m->pos_rank[lin];
    }
    int idx = 0;
    for (int k = 0; k < a->n; k++)
        idx = idx * m->sizes[a->dim[k]] + m->coords[a->dim[k]];
    return idx;
}

int mesh_group(shmesh_mesh *m, const char *op, const struct axes *a, const shmesh_groups *gs,
               bool equal_sizes, struct group *g, uint64_t *groups_hash)
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
        *g = (struct group){.n = n, .me = idx, .ranks = m->axis_group};
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
static int query_axes(const shmesh_mesh *m, const char *fn, const char *axes, const void *out,
                      const char *what, struct axes *a)
{
    if (!m) {
        init_error("%s: the mesh is NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    if (!out)
        return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s: %s must not be NULL", fn, what);
    return mesh_axes((shmesh_mesh *)m, fn, axes, a);
}

int shmesh_axis_index(const shmesh_mesh *m, const char *axes, int *index)
{
    struct axes a;
    int rc = query_axes(m, "shmesh_axis_index", axes, index, "index", &a);
    if (rc)
        return rc;
    int idx = 0;
    for (int k = 0; k < a.n; k++)
        idx = idx * m->sizes[a.dim[k]] + m->coords[a.dim[k]];
    *index = idx;
    return 0;
}

int shmesh_axis_size(const shmesh_mesh *m, const char *axes, int *size)
{
    struct axes a;
    int rc = query_axes(m, "shmesh_axis_size", axes, size, "size", &a);
    if (rc)
        return rc;
    *size = a.size;
    return 0;
}
