/* Batched axes as values: making a batched mesh, axis_index over it, and
 * the seed's matchaxis. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "batch/batch.h"
#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fail.h"
#include "engine/call.h"
#include "engine/state.h"
#include "ops/args.h"

int shmesh_mesh_batch(const shmesh_mesh *m, const char *name, int size, shmesh_mesh **out)
{
    static const char fn[] = "shmesh_mesh_batch";
    if (!m || !out)
        return mesh_fail(m, "%s: %s must not be NULL", fn, m ? "out" : "the mesh");
    *out = NULL;
    int rc = mesh_concrete(m, fn, "devices to batch");
    if (!rc && m->batch_dim >= 0)
        rc = mesh_fail(m, "%s: the mesh has a batched axis already ('%s'); one per mesh is built",
                       fn, m->names[m->batch_dim]);
    if (!rc && m->process_local)
        rc = mesh_fail(m, "%s: local meshes cannot be batched (not built: docs/batching.md)", fn);
    if (!rc && m->ndim >= SHMESH_MAX_MESH_DIMS)
        rc = mesh_fail(m, "%s: the mesh has %d axes already, the most a mesh may have", fn,
                       m->ndim);
    if (rc)
        return rc;
    shmesh_mesh *b;
    if ((rc = mesh_batched(m, fn, name, size, &b)))
        return rc;
    /* Calls' scratch must have room for every position of the job. */
    shmesh_ctx *c = m->ctx;
    struct engine_state *engine = engine_of(c);
    if (c->world * b->per > engine->scratch_members)
        engine->scratch_members = c->world * b->per;
    *out = b;
    return 0;
}

int shmesh_mesh_batch_dim(const shmesh_mesh *m) { return m ? m->batch_dim : -1; }

/* ---- axis_index as an array ---- */

int shmesh_axis_index_array(shmesh_mesh *m, const char *axes, shmesh_array *out)
{
    static const char fn[] = "shmesh_axis_index_array";
    if (!(m = mesh_or_current(m, fn)))
        return SHMESH_ERR_INVALID;
    int rc = mesh_concrete(m, fn, "devices to index");
    if (rc)
        return rc;
    if (!out)
        return mesh_fail(m, "%s: out must not be NULL", fn);
    struct axes a;
    if ((rc = mesh_axes(m, fn, axes, &a)))
        return rc;
    int B = m->batch, nl = m->nlocal / B;
    bool batched = m->batch_dim >= 0, mapped = false;
    for (int i = 0; i < a.n && batched; i++)
        mapped |= a.dim[i] == m->batch_dim;
    /* Where each local device's indices go: a scalar, or B of them. */
    int want = batched ? out[0].bdim : SHMESH_NOT_MAPPED;
    if (want == SHMESH_BDIM_AUTO)
        want = mapped ? 0 : SHMESH_NOT_MAPPED;
    if (mapped && want == SHMESH_NOT_MAPPED)
        return mesh_fail(m,
                         "%s: the index over \"%s\" differs along the batched axis "
                         "'%s', so out.bdim cannot be SHMESH_NOT_MAPPED (vmap: mapped output "
                         "but out_axes is None)",
                         fn, axes, m->names[m->batch_dim]);
    int ndim = want == SHMESH_NOT_MAPPED ? 0 : 1;
    if (ndim && want != 0 && want != -1)
        return mesh_fail(m, "%s: out.bdim must be 0 or -1 (B indices) or "
                         "SHMESH_NOT_MAPPED, got %d", fn, want);
    int64_t shape[1] = {B};
    for (int l = 0; l < nl; l++) {
        shmesh_array *o = &out[l];
        if (batched && o->bdim != out[0].bdim)
            return mesh_fail(m, "%s: out[%d].bdim is %d but out[0].bdim %d", fn,
                             l, o->bdim, out[0].bdim);
        if (o->dtype != SHMESH_INT32 || o->ndim != ndim || (ndim && o->shape[0] != B) ||
            !o->data) {
            char want_s[64], got_s[64];
            shape_format(want_s, sizeof want_s, SHMESH_INT32, ndim, shape);
            shape_format(got_s, sizeof got_s, o->dtype,
                         o->ndim < 0 || o->ndim > SHMESH_MAX_NDIM ? 0 : o->ndim, o->shape);
            return mesh_fail(m, "%s: out[%d] must be %s with data, got %s%s", fn,
                             l, want_s, got_s, o->data ? "" : " without data");
        }
    }
    if (out[0].bdim == SHMESH_BDIM_AUTO)
        for (int l = 0; l < nl; l++)
            out[l].bdim = want;
    for (int l = 0; l < nl; l++) {
        int32_t *dst = out[l].data;
        for (int k = 0; k < (ndim ? B : 1); k++)
            dst[k] = mesh_index_at(m, &a, m->local_pos[l * B + (mapped ? k : 0)]);
    }
    return 0;
}

/* ---- matchaxis ---- */

int shmesh_matchaxis(int size, const shmesh_array *in, shmesh_array *out)
{
    static const char fn[] = "shmesh_matchaxis";
    if (!in || !out)
        return mesh_fail(NULL, "%s: in and out must not be NULL", fn);
    if (size < 1)
        return mesh_fail(NULL, "%s: size must be positive, got %d", fn, size);
    int src = in->bdim, dst = out->bdim;
    if (in->ndim < 0 || in->ndim > SHMESH_MAX_NDIM || !dtype_valid(in->dtype))
        return mesh_fail(NULL, "%s: in must have a known dtype and 0..%d dimensions", fn,
                         SHMESH_MAX_NDIM);
    if (src != SHMESH_NOT_MAPPED) {
        if (src < -in->ndim || src >= in->ndim)
            return mesh_fail(NULL,
                             "%s: in.bdim must be a dimension of in (-%d..%d) or "
                             "SHMESH_NOT_MAPPED, got %d",
                             fn, in->ndim, in->ndim - 1, src);
        src = src < 0 ? src + in->ndim : src;
        if (in->shape[src] != size)
            return mesh_fail(NULL, "%s: in's batch dimension %d must have size %d, got %" PRId64,
                             fn, src, size, in->shape[src]);
    }
    int out_ndim = in->ndim + (src == SHMESH_NOT_MAPPED && dst != SHMESH_NOT_MAPPED);
    if (dst == SHMESH_NOT_MAPPED && src != SHMESH_NOT_MAPPED)
        return mesh_fail(NULL,
                         "%s: in is mapped (bdim %d) but out.bdim is SHMESH_NOT_MAPPED (vmap: "
                         "mapped output but out_axes is None)",
                         fn, src);
    if (dst != SHMESH_NOT_MAPPED) {
        if (dst < -out_ndim || dst >= out_ndim)
            return mesh_fail(NULL,
                             "%s: out.bdim must be a dimension of the result (-%d..%d) or "
                             "SHMESH_NOT_MAPPED, got %d",
                             fn, out_ndim, out_ndim - 1, dst);
        dst = dst < 0 ? dst + out_ndim : dst;
    }
    /* The result's shape: in's, with the batch dimension moved or added. */
    int64_t rest[SHMESH_MAX_NDIM] = {0}, shape[SHMESH_MAX_NDIM]; /* gcc cannot see r < nrest */
    int nrest = 0;
    for (int d = 0; d < in->ndim; d++)
        if (d != src)
            rest[nrest++] = in->shape[d];
    for (int d = 0, r = 0; d < out_ndim; d++)
        shape[d] = dst != SHMESH_NOT_MAPPED && d == dst ? size : rest[r++];
    char want[128], got[128];
    shape_format(want, sizeof want, in->dtype, out_ndim, shape);
    if (out->dtype != in->dtype || out->ndim != out_ndim ||
        memcmp(out->shape, shape, sizeof *shape * (size_t)out_ndim)) {
        shape_format(got, sizeof got, out->dtype, out->ndim < 0 || out->ndim > SHMESH_MAX_NDIM
                                                      ? 0 : out->ndim, out->shape);
        return mesh_fail(NULL, "%s: out must be %s (batch dimension at %d), got %s", fn, want,
                         dst, got);
    }
    size_t esz = dtype_size(in->dtype);
    uint64_t bytes = esz;
    for (int d = 0; d < out_ndim; d++)
        bytes *= (uint64_t)shape[d];
    if (bytes && (!in->data || !out->data))
        return mesh_fail(NULL, "%s: in and out need data for %s", fn, want);
    const unsigned char *i0 = in->data;
    unsigned char *o0 = out->data;
    uint64_t in_bytes = src == SHMESH_NOT_MAPPED && dst != SHMESH_NOT_MAPPED ? bytes / size
                                                                            : bytes;
    if (bytes && i0 < o0 + bytes && o0 < i0 + in_bytes)
        return mesh_fail(NULL, "%s: in and out overlap", fn);
    if (!bytes)
        return 0;
    if (src == SHMESH_NOT_MAPPED && dst == SHMESH_NOT_MAPPED)
        memcpy(o0, i0, bytes);
    else if (src == SHMESH_NOT_MAPPED)
        broadcast_axis(i0, in->ndim, in->shape, esz, dst, size, o0);
    else
        move_axis(i0, in->ndim, in->shape, esz, src, dst, o0);
    return 0;
}
