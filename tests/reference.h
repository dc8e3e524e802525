/* A single-process model of the shmesh collectives, for the tests.
 *
 * Given a mesh, one call and every device's input arrays (host memory), it
 * computes every device's expected output, or says that the call is invalid
 * and why.  It follows lib/include/shmesh.h (and JAX's semantics where the
 * header leaves something out) with plain nested loops; it never calls a
 * libshmesh collective, so it can judge them.
 *
 * Where the header says less than JAX, JAX decides (the seed, and JAX 0.11
 * on CPU as recorded in tests/golden): pmean with axis_index_groups scales
 * every subgroup's sum by the size of the first subgroup (JAX's psum(1,
 * axes, axis_index_groups) for a constant is len(axis_index_groups[0])),
 * multiplying by its reciprocal rounded in the output dtype as XLA does;
 * floating sums start from +0.0.  psum_scatter refuses bool, which JAX
 * converts to int32 in psum only (docs/semantics.md says so too). */
#ifndef SHMESH_TEST_REFERENCE_H
#define SHMESH_TEST_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/optable.h"
#include "shmesh.h"

/* Returned (with a sentence in `why`) for a call the header refuses. */
#define REF_INVALID (-1)

/* The ops the model knows: the MESH lines of the library's op table
 * (shm/optable.h), in its order, as REF_<ID> (REF_PSUM, REF_PMAX, ...,
 * REF_PBROADCAST).  The WORLD lines (barrier, world_sum, ...) are left out.
 * REF_SCOPE_<scope>(...) keeps its arguments for MESH and drops them for
 * WORLD. */
#define REF_SCOPE_MESH(...) __VA_ARGS__
#define REF_SCOPE_WORLD(...)
#define REF_OP_ENUM(ID, name, scope, ...) REF_SCOPE_##scope(REF_##ID, )
typedef enum { SHMESH_OPS(REF_OP_ENUM) REF_OP_COUNT } ref_op;
#undef REF_OP_ENUM

/* The table's names: "psum", "all_gather", ... ; ref_op_by_name returns -1
 * for an unknown name (a WORLD op included). */
const char *ref_op_name(ref_op op);
int ref_op_by_name(const char *name);

/* A mesh as shmesh_mesh_create takes it; device_order NULL = identity. */
typedef struct {
    int ndim;
    const char *const *names;
    const int *sizes;
    const int *device_order;
} ref_mesh;

/* One call's parameters; fields an op does not take are ignored. */
typedef struct {
    ref_op op;
    const char *axes;
    const shmesh_groups *groups; /* reductions, all_gather, psum_scatter,
                                    all_to_all, pswapaxes, ragged_all_to_all */
    int axis;        /* all_gather axis, psum_scatter scatter_dimension,
                        all_to_all split_axis, pswapaxes axis */
    int concat_axis; /* all_to_all */
    bool tiled;      /* all_gather, psum_scatter, all_to_all */
    const int (*pairs)[2]; /* ppermute */
    int npairs;
    const int *perm; /* pshuffle: group-size entries */
    int source;      /* pbroadcast */
    /* pmean of integer or bool input: the output dtype wanted
     * (SHMESH_FLOAT32 or SHMESH_FLOAT64); used only by ref_out_shape. */
    shmesh_dtype mean_dtype;
} ref_call;

/* One device's arrays.  `out` is described by the caller (dtype, ndim,
 * shape; data with room for that shape) and is checked against the shape
 * the call gives; the model writes the expected values into out->data.
 * For ragged_all_to_all `in` is the operand, `out` the output, which must
 * hold the output's values before the call (it is updated in place), and
 * the four offset/size arrays are used. */
typedef struct {
    const shmesh_array *in;
    shmesh_array *out;
    const shmesh_array *input_offsets, *send_sizes, *output_offsets, *recv_sizes;
    int rc; /* set by ref_collective: this device's result (0 or REF_INVALID) */
} ref_dev;

/* Number of devices of the mesh (the product of its sizes), or REF_INVALID
 * when the mesh itself is malformed. */
int ref_mesh_world(const ref_mesh *mesh, char *why, size_t whylen);

/* shmesh_axis_index / shmesh_axis_size for `device`. */
int ref_axis_index(const ref_mesh *mesh, const char *axes, int device, int *index, int *size,
                   char *why, size_t whylen);

/* The group `device` runs a collective in (axes, then axis_index_groups
 * when given): its members in group-index order (members has room for
 * every device), their number, and the device's own index. */
int ref_group(const ref_mesh *mesh, const char *axes, const shmesh_groups *groups, int device,
              int *members, int *n, int *me, char *why, size_t whylen);

/* The dtype and shape of the output the call gives for input `in` (for
 * ragged_all_to_all, pass the output array: its own shape).  0, or
 * REF_INVALID when the arguments are refused whatever the output. */
int ref_out_shape(const ref_mesh *mesh, const ref_call *call, const shmesh_array *in,
                  shmesh_dtype *dtype, int *ndim, int64_t shape[SHMESH_MAX_NDIM], char *why,
                  size_t whylen);

/* Runs the call for every device (devs has one entry per device, indexed by
 * device = rank).  0 with every out filled, or REF_INVALID with `why`: the
 * outputs are then untouched.  ragged_all_to_all alone can refuse the call
 * for some groups only (a bad slice, found when the group's devices compare
 * their arrays): those devices get rc REF_INVALID and keep their outputs,
 * the other groups run. */
int ref_collective(const ref_mesh *mesh, const ref_call *call, ref_dev *devs, char *why,
                   size_t whylen);

/* Elements of an array (the product of its shape; 1 for ndim 0). */
int64_t ref_numel(int ndim, const int64_t *shape);

#endif
