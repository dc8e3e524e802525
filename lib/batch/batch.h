/* Batched (process-local) axes: a mesh axis carried inside each device's
 * arrays as a batch dimension (shmesh_mesh_batch; the seed's vmap with an
 * axis_name).
 *
 * The engine sees every position of a batched mesh as a device of its own
 * (mesh/mesh.h: ids, per, nlocal count positions), so a collective on it
 * runs as on the same mesh with one device per position: one call per
 * local position, through engine/devices.c, whose results are those of
 * that mesh bit for bit.  This layer sits in front of the public
 * collectives: it cuts each local device's batched array into its B
 * positions' arrays (views where the batch dimension is first, packed
 * copies elsewhere), applies the seed's rules that differ from one device
 * per position (a not-mapped operand of a sum counts as B * x), runs the
 * collective on the positions, and puts the results where the caller asks
 * (matchaxis).  Each op's rule (whether its result is mapped, and where the
 * seed puts its batch dimension) is one case of the table in batch.c. */
#ifndef SHMESH_BATCH_BATCH_H
#define SHMESH_BATCH_BATCH_H

#include <stdbool.h>

#include "mesh/mesh.h"
#include "ops/op.h"
#include "shmesh.h"

/* One collective as its public function was called. */
struct batch_op {
    enum call_op op;
    const char *axes;
    const shmesh_groups *gs;
    int axis;  /* all_gather's axis, psum_scatter's scatter_dimension, all_to_all's
                  split_axis, pswapaxes' axis */
    int axis2; /* all_to_all's concat_axis */
    bool tiled;
    const int (*perm)[2]; /* ppermute */
    int npairs;
    const int *shuffle; /* pshuffle */
    int source;         /* pbroadcast */
    const shmesh_array *in;
    shmesh_array *out;
};

/* Set while this layer runs a collective on the positions. */
extern _Thread_local bool batch_inside;

/* Runs p on batched mesh m (every public collective's front, BATCHED). */
int batch_run(shmesh_mesh *m, const struct batch_op *p);

/* The first statement of a public collective: on a batched mesh, the
 * call goes through this layer (which calls the function again for the
 * positions).  m NULL becomes the innermost pushed mesh. */
#define BATCHED(m, ...)                                                                        \
    do {                                                                                       \
        if (!(m))                                                                              \
            (m) = shmesh_mesh_current();                                                       \
        if ((m) && (m)->batch_dim >= 0 && !batch_inside)                                       \
            return batch_run((m), &(struct batch_op){__VA_ARGS__});                            \
    } while (0)

/* Local array moves (the seed's moveaxis and broadcast): src has ndim
 * dimensions `shape` of esz-byte elements.  move_axis writes src with
 * dimension `from` moved to position `to`; broadcast_axis writes src with
 * a dimension of `size` inserted at `at` (0..ndim), src repeated along it. */
void move_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int from, int to,
               void *dst);
void broadcast_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int at,
                    int64_t size, void *dst);

#endif
