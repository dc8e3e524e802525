/* Batched (process-local) axes: a mesh axis carried inside each device's
 * arrays as a batch dimension (shmesh_mesh_batch; the seed's vmap with an
 * axis_name).
 *
 * The engine sees every position of a batched mesh as a device of its own
 * (mesh/mesh.h: ids, per, nlocal count positions), so a collective on it
 * runs as on the same mesh with one device per position: one call per
 * local position, through front/local_devices.c, whose results are those of
 * that mesh bit for bit.  This layer sits in front of the public
 * collectives: it cuts each local device's batched array into its B
 * positions' arrays (views where the batch dimension is first, packed
 * copies elsewhere), applies the seed's rules that differ from one device
 * per position (a not-mapped operand of a sum counts as B * x), runs the
 * collective on the positions, and puts the results where the caller asks
 * (matchaxis).  Each op's rule (whether its result is mapped, and where the
 * seed puts its batch dimension) is its op table row's `batch` column
 * (optable.h), one case of enum batch_rule in batch.c. */
#ifndef SHMESH_BATCH_BATCH_H
#define SHMESH_BATCH_BATCH_H

#include <stdbool.h>

#include "mesh/mesh.h"
#include "ops/ops.h"
#include "shmesh.h"

/* Runs op `a` on its batched mesh a->m (the front door's road for a
 * batched mesh, front/front.c): checks what the positions' call cannot, cuts
 * the arrays into the positions' arrays, runs the positions' call through
 * `positions` (the front door without this layer), and puts the results
 * where the caller asks.  `async` not NULL (an `_async` form) is refused:
 * not built on batched meshes. */
int batch_run(const struct op_args *a, const shmesh_token *async,
              int (*positions)(struct op_args *a));

/* Local array moves (the seed's moveaxis and broadcast): src has ndim
 * dimensions `shape` of esz-byte elements.  move_axis writes src with
 * dimension `from` moved to position `to`; broadcast_axis writes src with
 * a dimension of `size` inserted at `at` (0..ndim), src repeated along it. */
void move_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int from, int to,
               void *dst);
void broadcast_axis(const void *src, int ndim, const int64_t *shape, size_t esz, int at,
                    int64_t size, void *dst);

#endif
