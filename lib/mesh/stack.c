/* The mesh context: a stack of meshes per thread (`with mesh:`), and the
 * mesh a call given NULL runs on.
 *
 * The seed keeps a stack of resource environments; entering a mesh replaces
 * the top environment's mesh after checking that the new mesh's axes do not
 * shadow resource axes the environment has beyond its physical mesh's.  A
 * shmesh environment's resource axes are exactly its mesh's, so that set is
 * always empty and the check can never refuse: it is not written out.  What
 * can fail is pushing an abstract mesh (not a context manager), overflowing
 * the stack, or popping out of order. */
#include <string.h>

#include "core/error.h"
#include "mesh/mesh.h"

#define STACK_MAX 64

static _Thread_local shmesh_mesh *stack[STACK_MAX];
static _Thread_local int depth;

int shmesh_mesh_push(shmesh_mesh *m)
{
    if (!m)
        return mesh_fail(NULL, "shmesh_mesh_push: the mesh is NULL");
    if (m->abstract) {
        char text[SHMESH_MAX_MESH_DIMS * 48];
        shmesh_mesh_text(m, text, sizeof text);
        return mesh_fail(NULL,
                         "shmesh_mesh_push: %s is abstract and cannot be the mesh context (as "
                         "JAX's AbstractMesh is not a context manager): push a concrete mesh",
                         text);
    }
    if (depth == STACK_MAX)
        return mesh_fail(NULL, "shmesh_mesh_push: this thread already has %d meshes pushed",
                         STACK_MAX);
    stack[depth++] = m;
    return 0;
}

int shmesh_mesh_pop(shmesh_mesh *m)
{
    if (!depth)
        return mesh_fail(NULL, "shmesh_mesh_pop: no mesh is pushed on this thread");
    if (m != stack[depth - 1]) {
        char want[SHMESH_MAX_MESH_DIMS * 48], got[SHMESH_MAX_MESH_DIMS * 48];
        shmesh_mesh_text(stack[depth - 1], want, sizeof want);
        shmesh_mesh_text(m, got, sizeof got);
        return mesh_fail(NULL,
                         "shmesh_mesh_pop: pops must match pushes: the innermost mesh is %s "
                         "(pushed %d deep), but %s was given",
                         want, depth, got);
    }
    stack[--depth] = NULL;
    return 0;
}

shmesh_mesh *shmesh_mesh_current(void) { return depth ? stack[depth - 1] : NULL; }

shmesh_mesh *mesh_or_current(shmesh_mesh *m, const char *fn)
{
    if (m)
        return m;
    if (depth)
        return stack[depth - 1];
    mesh_none_pushed(fn);
    return NULL;
}

int mesh_none_pushed(const char *fn)
{
    init_error("%s: the mesh is NULL and none is pushed on this thread (shmesh_mesh_push)", fn);
    return SHMESH_ERR_INVALID;
}
