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
    char text[SHMESH_MAX_MESH_DIMS * 48];
    shmesh_mesh_text(m, text, sizeof text);
    if (m->abstract)
        return mesh_fail(m, "%s: %s is abstract and has no local mesh", fn, text);
    /* Per dimension, the smallest range of coordinates covering every local
     * device. */
    int lo[SHMESH_MAX_MESH_DIMS], hi[SHMESH_MAX_MESH_DIMS];
    for (int d = 0; d < m->ndim; d++) {
        lo[d] = m->sizes[d];
        hi[d] = -1;
    }
    for (int l = 0; l < m->nlocal; l++) {
        int pos = m->local_pos[l];
        for (int d = m->ndim - 1; d >= 0; d--) {
            int c = pos % m->sizes[d];
            pos /= m->sizes[d];
            lo[d] = c < lo[d] ? c : lo[d];
            hi[d] = c > hi[d] ? c : hi[d];
        }
    }
    int rank = m->ctx->rank;
    if (!m->nlocal)
        return mesh_fail(m, "%s: rank %d holds no device of %s", fn, rank, text);
    /* The block must hold nothing else: a device of another rank inside it
     * means this rank's devices are not a contiguous sub-block. */
    for (int p = 0; p < m->size; p++) {
        if (m->pos_rank[p] == rank)
            continue;
        int pos = p, inside = 1;
        for (int d = m->ndim - 1; d >= 0; d--) {
            int c = pos % m->sizes[d];
            pos /= m->sizes[d];
            inside &= c >= lo[d] && c <= hi[d];
        }
        if (!inside)
            continue;
        char block[SHMESH_MAX_MESH_DIMS * 48];
        size_t n = 0;
        block[0] = 0;
        for (int d = 0; d < m->ndim && n < sizeof block; d++)
            n += (size_t)snprintf(block + n, sizeof block - n, "%s%s %d:%d", d ? ", " : "",
                                  m->names[d], lo[d], hi[d] + 1);
        return mesh_fail(m,
                         "%s: rank %d's devices must form a contiguous sub-block of %s, but the "
                         "smallest block covering them (%s) also holds device %d of rank %d",
                         fn, rank, text, block, m->ids[p], m->pos_rank[p]);
    }
    shmesh_mesh *b = mesh_block(m, lo, hi);
    if (!b)
        return ctx_fail(m->ctx, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    b->process_local = true;
    *out = b;
    return 0;
}
