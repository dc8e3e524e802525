/* The call prologue (see prologue.h). */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "ops/args.h"
#include "ops/prologue.h"

/* "[[0,1],[2,3]]", ending in "..." when it does not fit. */
static void groups_text(const shmesh_groups *gs, char *buf, size_t len)
{
    size_t n = 0;
    int at = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int g = 0; g < gs->ngroups && n < len; g++) {
        int size = gs->group_sizes ? gs->group_sizes[g] : gs->group_size;
        n += (size_t)snprintf(buf + n, len - n, "%s[", g ? "," : "");
        for (int i = 0; i < size && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s%d", i ? "," : "", gs->indices[at + i]);
        at += size;
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "]");
    }
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "]");
    if (n >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);
}

int coll_open(struct call *k, shmesh_mesh *m, enum call_op op, const char *axes,
              const shmesh_groups *gs, bool equal_groups, struct axes *a,
              const shmesh_array *in, const shmesh_array *out)
{
    if (!m)
        m = shmesh_mesh_current();
    int rc = call_init(k, m ? m->ctx : NULL, op);
    if (rc && !m)
        mesh_none_pushed(op_name(op));
    else if (rc && m->abstract) {
        char text[SHMESH_MAX_MESH_DIMS * 48];
        shmesh_mesh_text(m, text, sizeof text);
        init_error("%s: %s is abstract (names and sizes only): collectives need a concrete "
                   "mesh (shmesh_mesh_create)",
                   op_name(op), text);
    }
    if (rc)
        return rc;
    rc = mesh_axes(m, k->name, axes, a);
    if (!rc) {
        /* The axes as the mesh's dimensions (hashed), and their names (shown). */
        k->d.naxes = a->n;
        for (int i = 0; i < a->n && i < SHMESH_MAX_MESH_DIMS; i++)
            k->d.axis[i] = (uint8_t)a->dim[i];
        mesh_axes_text(m, a, k->d.axes, sizeof k->d.axes);
        struct group g;
        uint64_t gh = 0;
        rc = mesh_group(m, k->name, a, gs, equal_groups, &g, &gh);
        if (!rc)
            call_group(k, g.n, g.me, g.ranks, m->per);
        k->d.extra_hash = gh;
    }
    k->d.mesh = m->id;
    if (m->batch_dim >= 0) /* a batched mesh shares its mesh's id */
        k->d.param[CALL_PARAM_BATCH] = m->batch;
    if (!rc && gs)
        groups_text(gs, k->d.groups, sizeof k->d.groups);
    uint64_t n_in, n_out;
    if (!rc && in)
        rc = coll_arrays(k, in, "in", out, "out", &n_in, &n_out);
    return rc;
}

int coll_arrays(struct call *k, const shmesh_array *in, const char *in_name,
                const shmesh_array *out, const char *out_name, uint64_t *n_in, uint64_t *n_out)
{
    int rc = array_check(k->c, k->name, in_name, in, n_in);
    if (rc || __builtin_expect(out == op_query, 0)) /* shmesh_op_result's: not an array yet */
        return rc;
    return array_check(k->c, k->name, out_name, out, n_out);
}

int coll_no_overlap(struct call *k, const void *in, uint64_t in_bytes, const void *out,
                    uint64_t out_bytes, bool same_allowed)
{
    if (same_allowed && in == out && in_bytes == out_bytes)
        return 0;
    if (bytes_overlap(in, in_bytes, out, out_bytes))
        return ctx_fail(k->c, SHMESH_ERR_INVALID, "%s: in and out overlap%s", k->name,
                        same_allowed ? " (only the very same buffer is allowed)" : "");
    return 0;
}

int coll_ready(struct call *k)
{
    const struct flow *f = &k->f;
    struct call_desc *d = &k->d;
    if (f->in_esz) {
        d->dtype = (uint32_t)f->in.dtype;
        d->ndim = f->in.ndim;
        /* Only the used dimensions: the rest of a caller's shape may be junk. */
        memcpy(d->shape, f->in.shape, sizeof *f->in.shape * (size_t)f->in.ndim);
    }
    if (f->out_esz) {
        d->out_dtype = (uint32_t)f->out.dtype;
        d->out_ndim = f->out.ndim;
        memcpy(d->out_shape, f->out.shape, sizeof *f->out.shape * (size_t)f->out.ndim);
    }
    return call_buffers(k);
}
