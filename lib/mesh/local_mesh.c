/* The local mesh: the sub-block of a mesh that this rank's devices form
 * (Mesh.local_mesh). */
#include <stdio.h>

#include "core/context.h"
#include "core/error.h"
#include "mesh/mesh.h"

int shmesh_mesh_local_mesh(const shmesh_mesh *m, shmesh_mesh **out)
{
    const char *fn = "shmesh_mesh_local_mesh";
    if (!m || !out)
        return mesh_fail(m, "%s: %s must not be NULL", fn, m ? "out" : "the mesh");
    *out = NULL;
    int rc = mesh_concrete(m, fn, "local mesh");
    if (!rc)
        rc = mesh_unbatched(m, fn, "local meshes");
    if (rc)
        return rc;
    char text[SHMESH_MAX_MESH_DIMS * 48];
    shmesh_mesh_text(m, text, sizeof text);
    /* Per dimension, the smallest range of coordinates covering every local
     * device. */
    int lo[SHMESH_MAX_MESH_DIMS], hi[SHMESH_MAX_MESH_DIMS];
    for (int d = 0; d < m->ndim; d++) {
        lo[d] = m->sizes[d];
        hi[d] = -1;
    }
    int cc[SHMESH_MAX_MESH_DIMS];
    for (int l = 0; l < m->nlocal; l++) {
        mesh_coords(m, m->local_pos[l], cc);
        for (int d = 0; d < m->ndim; d++) {
            lo[d] = cc[d] < lo[d] ? cc[d] : lo[d];
            hi[d] = cc[d] > hi[d] ? cc[d] : hi[d];
        }
    }
    int rank = m->ctx->job_rank;
    if (!m->nlocal)
        return mesh_fail(m, "%s: this rank holds no device of %s", fn, text);
    /* The block must hold nothing else: a device of another rank inside it
     * means this rank's devices are not a contiguous sub-block. */
    for (int p = 0; p < m->size; p++) {
        if (m->pos_rank[p] == rank)
            continue;
        int inside = 1;
        mesh_coords(m, p, cc);
        for (int d = 0; d < m->ndim; d++)
            inside &= cc[d] >= lo[d] && cc[d] <= hi[d];
        if (!inside)
            continue;
        char block[SHMESH_MAX_MESH_DIMS * 48];
        size_t n = 0;
        block[0] = 0;
        for (int d = 0; d < m->ndim && n < sizeof block; d++)
            n += (size_t)snprintf(block + n, sizeof block - n, "%s%s %d:%d", d ? ", " : "",
                                  m->names[d], lo[d], hi[d] + 1);
        return mesh_fail(m,
                         "%s: this rank's devices must form a contiguous sub-block of %s, but "
                         "the smallest block covering them (%s) also holds device %d of rank %d",
                         fn, text, block, m->ids[p], m->pos_rank[p]);
    }
    shmesh_mesh *b = mesh_block(m, lo, hi);
    if (!b)
        return ctx_fail(m->ctx, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    b->process_local = true;
    *out = b;
    return 0;
}
