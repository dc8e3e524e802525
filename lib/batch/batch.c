/* Batched (process-local) axes.  (Being written.) */
#include "core/error.h"
#include "shmesh.h"

int shmesh_mesh_batch(const shmesh_mesh *mesh, const char *name, int size, shmesh_mesh **out)
{
    (void)mesh, (void)name, (void)size, (void)out;
    init_error("shmesh_mesh_batch: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_mesh_batch_dim(const shmesh_mesh *mesh)
{
    (void)mesh;
    return -1;
}

int shmesh_axis_index_array(shmesh_mesh *mesh, const char *axes, shmesh_array *out)
{
    (void)mesh, (void)axes, (void)out;
    init_error("shmesh_axis_index_array: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_matchaxis(int size, const shmesh_array *in, shmesh_array *out)
{
    (void)size, (void)in, (void)out;
    init_error("shmesh_matchaxis: not built yet");
    return SHMESH_ERR_INVALID;
}
