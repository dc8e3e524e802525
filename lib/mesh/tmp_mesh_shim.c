/* TEMPORARY (branch helper-shard): stand-ins for mesh functions that the
 * rewrite of lib/mesh/mesh.c defines.  Delete this file (and its line in
 * lib/meson.build) when merging the branch that brings the real ones. */
#include <stdarg.h>
#include <stdio.h>

#include "core/context.h"
#include "core/error.h"
#include "mesh/mesh.h"

int mesh_fail(const shmesh_mesh *m, const char *fmt, ...)
{
    char msg[CTX_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m && m->ctx && !m->abstract)
        return ctx_fail(m->ctx, SHMESH_ERR_INVALID, "%s", msg);
    init_error("%s", msg);
    return SHMESH_ERR_INVALID;
}

shmesh_mesh *mesh_or_current(shmesh_mesh *m, const char *fn)
{
    if (!m)
        mesh_fail(NULL, "%s: no mesh given and none pushed", fn);
    return m;
}

int shmesh_mesh_text(const shmesh_mesh *m, char *buf, size_t len)
{
    size_t n = 0;
    char tmp[1024];
    n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s(", m->abstract ? "AbstractMesh" : "Mesh");
    for (int d = 0; d < m->ndim; d++)
        n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s'%s': %d", d ? ", " : "", m->names[d],
                              m->sizes[d]);
    snprintf(tmp + n, sizeof tmp - n, ")");
    return snprintf(buf, len, "%s", tmp);
}
