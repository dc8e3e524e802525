/* shmesh — a shared-memory multiprocess runtime for one node.
 *
 * A job is N processes ("ranks") started by `shmesh-run -n N -- prog`.  They
 * share one POSIX shared-memory segment and call collectives on it.  A
 * program started without the launcher is a job of one rank and runs
 * unchanged.
 *
 * Conventions
 *   - Every function returning int returns 0 (or a non-negative value) on
 *     success and a negative SHMESH_ERR_* code on failure.  The library never
 *     prints; shmesh_last_error() gives the sentence that explains a failure
 *     (what was expected, what was found, on which rank).
 *   - "Collective" functions must be called by every rank of the job, in the
 *     same order, with matching arguments.  A rank that calls something else
 *     gets SHMESH_ERR_MISMATCH, and so do its peers; nothing hangs.
 *   - After a peer dies, the job aborts, ranks make different calls, or a
 *     wait fails, the context is poisoned: every later call returns the same
 *     error at once.  Only shmesh_finalize() (which then just releases) and
 *     the accessors work.  A call that fails alike on every member of its
 *     group (a bad ragged slice; a single copy the kernel refuses,
 *     SHMESH_ERR_SYSTEM) leaves the context usable.
 *   - A context belongs to one thread at a time; it may be handed to another
 *     thread between calls.  A thread that calls while another is inside the
 *     library with the same context gets SHMESH_ERR_INVALID (the other
 *     thread's call is unharmed, the context not poisoned), explained by
 *     shmesh_last_error(ctx) on the refused thread.
 */
#ifndef SHMESH_H
#define SHMESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SHMESH_API __attribute__((visibility("default")))
#define SHMESH_NORETURN __attribute__((noreturn))
#else
#define SHMESH_API
#define SHMESH_NORETURN
#endif

#define SHMESH_VERSION_MAJOR 0
#define SHMESH_VERSION_MINOR 1
#define SHMESH_VERSION_PATCH 0

/* Error codes: XX(name, value, description). */
#define SHMESH_ERROR_MAP(XX)                                                              \
    XX(INVALID, -1, "invalid argument")                                                   \
    XX(PEER_DEAD, -2, "a peer rank died")                                                 \
    XX(ABORTED, -3, "the job was aborted")                                                \
    XX(TIMEOUT, -4, "timed out")                                                          \
    XX(MISMATCH, -5, "ranks made different collective calls")                            \
    XX(NOMEM, -6, "out of memory")                                                        \
    XX(SYSTEM, -7, "system error")                                                        \
    XX(BAD_SEGMENT, -8, "the shared-memory segment is missing, corrupt or from another build")

typedef enum {
    SHMESH_OK = 0,
#define SHMESH_XX(name, value, text) SHMESH_ERR_##name = value,
    SHMESH_ERROR_MAP(SHMESH_XX)
#undef SHMESH_XX
} shmesh_error;

/* Element types.  The numbering is part of the ABI. */
typedef enum {
    SHMESH_BOOL = 0, /* one byte, 0 or 1 */
    SHMESH_INT8,
    SHMESH_INT16,
    SHMESH_INT32,
    SHMESH_INT64,
    SHMESH_UINT8,
    SHMESH_UINT16,
    SHMESH_UINT32,
    SHMESH_UINT64,
    SHMESH_FLOAT16,  /* IEEE binary16 */
    SHMESH_BFLOAT16, /* the upper half of a binary32 */
    SHMESH_FLOAT32,
    SHMESH_FLOAT64,
    SHMESH_DTYPE_COUNT
} shmesh_dtype;

typedef struct shmesh_ctx shmesh_ctx;

/* Joins the job described by the launcher's environment (SHMESH_SEGMENT,
 * SHMESH_RANK, SHMESH_WORLD_SIZE); without it, creates a job of one rank.
 * Collective: returns once every rank has joined.  On success *ctx is a new
 * context the caller owns; on failure *ctx is NULL and shmesh_last_error(NULL)
 * explains, on this thread.
 * Environment read: SHMESH_NOTIFY (uring|futex|auto), SHMESH_TIMEOUT
 * (seconds a single wait may last; default: no limit), SHMESH_SPIN_NS and
 * SHMESH_YIELD_NS (how long a wait spins, then yields, before it blocks),
 * the thresholds that choose algorithms, SHMESH_DEBUG.  See
 * docs/environment.md. */
SHMESH_API int shmesh_init(shmesh_ctx **ctx);

/* Collective: a barrier, then the context is released.  A peer that exits
 * after its finalize is not a failure for the others.  Returns the barrier's
 * result; the context is freed in every case (NULL is accepted), so a
 * failure is explained by shmesh_last_error(NULL). */
SHMESH_API int shmesh_finalize(shmesh_ctx *ctx);

/* Ends the whole job: records `why` in the segment so every other rank's
 * pending and later calls return SHMESH_ERR_ABORTED naming this rank, then
 * exits this process with status `code` (1 when code is 0 or out of
 * 1..255), which makes the launcher stop the others.  Any rank may call it
 * alone; ctx may be NULL (the process just exits). */
SHMESH_API SHMESH_NORETURN void shmesh_abort(shmesh_ctx *ctx, int code, const char *why);

SHMESH_API int shmesh_rank(const shmesh_ctx *ctx);
SHMESH_API int shmesh_world_size(const shmesh_ctx *ctx);
/* "uring" or "futex": how this rank blocks. */
SHMESH_API const char *shmesh_notifier(const shmesh_ctx *ctx);

/* Collective: returns when every rank has entered it. */
SHMESH_API int shmesh_barrier(shmesh_ctx *ctx);

/* Collective, in place: buf[i] becomes the sum over ranks of buf[i].  Every
 * rank gets the bitwise-identical result: ranks' values are added in rank
 * order (rank 0 first).  Integers wrap; FLOAT16 and BFLOAT16 accumulate in
 * float32 and round once.  BOOL is refused (JAX sums booleans as int32: use an
 * int32 buffer).  count may be 0; buf may be NULL only then.  All ranks must
 * pass the same count and dtype. */
SHMESH_API int shmesh_world_sum(shmesh_ctx *ctx, void *buf, size_t count, shmesh_dtype dtype);

/* ---------------------------------------------------------------------------
 * The shared heap: memory inside the job's segment, which every rank can
 * read and write.  Collectives whose buffers live there move data straight
 * between the ranks' buffers instead of through the staging slots
 * ("zero-copy").  Each rank allocates from its own share of the heap
 * (shmesh-run --shm-size, SHMESH_SHM_SIZE); allocation is local, not
 * collective.
 * ------------------------------------------------------------------------- */

/* Local: `bytes` of heap memory, 64-byte aligned, or NULL when this rank's
 * share has no room (shmesh_last_error says how much is free and how to get
 * more).  bytes == 0 returns NULL without an error. */
SHMESH_API void *shmesh_alloc(shmesh_ctx *ctx, size_t bytes);
/* Local: returns memory from shmesh_alloc; NULL is accepted.  Anything else
 * is refused and reported in shmesh_last_error (never a crash). */
SHMESH_API void shmesh_free(shmesh_ctx *ctx, void *ptr);

/* ---------------------------------------------------------------------------
 * Meshes and named axes
 *
 * A mesh lays the job's devices (one per rank) out on named axes, row-major:
 * with axes ("x", "y") of sizes (2, 3), mesh position (i, j) holds device
 * device_order[i * 3 + j] (rank i * 3 + j when device_order is NULL).
 *
 * Collectives name the axes they run over with a string: "x", or "x,y" for
 * several (order matters, as in a JAX tuple of names; spaces are ignored;
 * "" names none).  The group of a device is every device that shares its
 * coordinates on all the axes not named; its index in the group is
 * row-major over the named axes in the order given.  For "y,x" on the mesh
 * above, index = j * 2 + i, and the group size is 6.
 * ------------------------------------------------------------------------- */

#define SHMESH_MAX_MESH_DIMS 8
#define SHMESH_MAX_AXIS_NAME 31

typedef struct shmesh_mesh shmesh_mesh;

/* Collective (every rank, same arguments): creates a mesh.  Axis names are
 * non-empty, at most SHMESH_MAX_AXIS_NAME characters, without ',' or
 * spaces, and distinct; sizes are positive and multiply to the world size;
 * device_order is NULL or a permutation of the ranks.  The mesh borrows ctx,
 * which must outlive it. */
SHMESH_API int shmesh_mesh_create(shmesh_ctx *ctx, int ndim, const char *const axis_names[],
                                  const int sizes[], const int *device_order,
                                  shmesh_mesh **out);
/* Local: frees the mesh (NULL is accepted). */
SHMESH_API void shmesh_mesh_destroy(shmesh_mesh *mesh);

/* Local: this device's index in its group over `axes`, and the group size
 * (the product of the named axes' sizes).  Errors: an unknown or repeated
 * axis name (SHMESH_ERR_INVALID, naming it). */
SHMESH_API int shmesh_axis_index(const shmesh_mesh *mesh, const char *axes, int *index);
SHMESH_API int shmesh_axis_size(const shmesh_mesh *mesh, const char *axes, int *size);

/* axis_index_groups: subgroups of the axis indices 0..n-1 of each group (n =
 * the group size over `axes`).  `indices` lists the members of group 0, then
 * group 1, ...; with group_sizes NULL every group has group_size members,
 * otherwise group g has group_sizes[g] (group_size is then ignored).  Every
 * index must appear exactly once.  A collective then runs inside each
 * subgroup, and a device's index is its position in its subgroup's list
 * (so [[0, 2], [3, 1]] puts device 3 first in its subgroup).  psum, pmax,
 * pmin and pmean accept subgroups of different sizes; all_gather,
 * psum_scatter, all_to_all, pswapaxes and ragged_all_to_all need equal
 * sizes.  A NULL shmesh_groups* means one group (no subgroups). */
typedef struct {
    int ngroups;
    int group_size;
    const int *indices;
    const int *group_sizes;
} shmesh_groups;

/* ---------------------------------------------------------------------------
 * Arrays: C-contiguous (row-major), owned by the caller.  ndim 0 is a
 * scalar (one element).  Shapes are checked exactly; a wrong output shape
 * or dtype is SHMESH_ERR_INVALID with a message giving the expected one.
 * An array holds at most 2^62 bytes, and so does the output shape an op
 * derives from its input's (all_gather's, all_to_all's): a larger one is
 * SHMESH_ERR_INVALID naming the shape.  An empty array's data may be NULL.
 * ------------------------------------------------------------------------- */

#define SHMESH_MAX_NDIM 8

typedef struct {
    void *data;
    shmesh_dtype dtype;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
} shmesh_array;

/* ---------------------------------------------------------------------------
 * Collectives over named axes (JAX's jax.lax parallel primitives).
 *
 * All are collective over the whole job: every rank calls them in the same
 * order with the same axes, groups, parameters, dtypes and shapes (the
 * data differ).  A rank whose call differs gets SHMESH_ERR_MISMATCH, and so
 * does every rank it meets; the message names both calls.  Argument errors
 * found locally (shapes, axes, groups, permutations) return
 * SHMESH_ERR_INVALID before anything is shared: the call is not made.
 * Every rank of a group gets bitwise-identical results, run after run:
 * reductions combine the members' values in group order (index 0 first).
 * `in` and `out` must not overlap, except where noted.  Axis arguments may
 * be negative (counted from the end, as in Python).
 * ------------------------------------------------------------------------- */

/* out = sum over the group of in.  out has in's shape and dtype, except that
 * bool sums into int32 (as JAX converts booleans).  Integers wrap;
 * float16/bfloat16 accumulate in float32 and round once; a sum starts from
 * +0.0, as JAX's does (values that are all -0.0 sum to +0.0). */
SHMESH_API int shmesh_psum(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                           const shmesh_array *in, shmesh_array *out);
/* Element-wise maximum / minimum (NaN wins, where JAX on CPU ignores NaN:
 * docs/semantics.md; bool: or / and).  out: in's shape and dtype. */
SHMESH_API int shmesh_pmax(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                           const shmesh_array *in, shmesh_array *out);
SHMESH_API int shmesh_pmin(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                           const shmesh_array *in, shmesh_array *out);
/* psum divided by the group size, or with axis_index_groups by the size of
 * the first subgroup, for every subgroup (JAX divides by psum(1, axes,
 * axis_index_groups), which is that size).  As XLA computes it, the sum
 * (rounded to the output dtype) is multiplied by 1/n rounded to that dtype,
 * which can differ from a division when n is not a power of two.  Floating
 * inputs keep their dtype; integer and bool inputs give float32 or float64,
 * the caller's choice through out's dtype (JAX gives float32 for 8- and
 * 32-bit inputs, float64 for 64-bit ones). */
SHMESH_API int shmesh_pmean(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                            const shmesh_array *in, shmesh_array *out);
/* Element-wise: the smallest axis index whose value equals the group's
 * maximum (minimum), as int32 with in's shape.  One axis only, no
 * subgroups (groups must be NULL), as in JAX; where the maximum is NaN no
 * value equals it and the result is INT32_MAX (JAX, ignoring NaN, finds
 * the index of the largest number). */
SHMESH_API int shmesh_pargmax(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                              const shmesh_array *in, shmesh_array *out);
SHMESH_API int shmesh_pargmin(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                              const shmesh_array *in, shmesh_array *out);

/* Concatenates the group's inputs in group order.  tiled = false: a new
 * dimension of size n at position `axis` (0..ndim); tiled = true: dimension
 * `axis` (0..ndim-1) grows n times. */
SHMESH_API int shmesh_all_gather(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                 int axis, bool tiled, const shmesh_array *in, shmesh_array *out);
/* The psum, scattered: the device with group index p keeps block p of the
 * sum along scatter_dimension.  tiled = false: in.shape[d] must equal n and
 * dimension d is removed; tiled = true: in.shape[d] must be divisible by n
 * and shrinks n times. */
SHMESH_API int shmesh_psum_scatter(shmesh_mesh *mesh, const char *axes,
                                   const shmesh_groups *groups, int scatter_dimension,
                                   bool tiled, const shmesh_array *in, shmesh_array *out);
/* Block j of in along split_axis goes to the device of group index j, which
 * places the blocks it receives along concat_axis in group order.
 * tiled = false: in.shape[split_axis] must equal n; the output is in's
 * shape without split_axis, with a dimension of size n inserted at
 * concat_axis (an index into the output's dimensions).  tiled = true:
 * in.shape[split_axis] must be divisible by n; split_axis shrinks n times
 * and concat_axis grows n times. */
SHMESH_API int shmesh_all_to_all(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                 int split_axis, int concat_axis, bool tiled,
                                 const shmesh_array *in, shmesh_array *out);
/* all_to_all(split_axis = concat_axis = axis, untiled): swaps the mapped axis
 * with dimension `axis`; out has in's shape. */
SHMESH_API int shmesh_pswapaxes(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                int axis, const shmesh_array *in, shmesh_array *out);
/* Ragged all-to-all (JAX's ragged_all_to_all): operand (N, ...) and output
 * (M, ...) share dtype and trailing dimensions; the four offset/size arrays
 * are integer, rank 1, of one length K, a multiple of the group size n.
 * Entry i of this device's arrays describes the slice
 * operand[input_offsets[i] : + send_sizes[i]] sent to group index
 * i / (K / n), written there at rows output_offsets[i] (this device's
 * value); recv_sizes[i] is the size this device expects from group index
 * i / (K / n), and must equal what that device sends.  output is updated in
 * place: rows not received keep their values.  Every slice is checked
 * against both buffers on sender and receiver before any data moves; a
 * bad one is SHMESH_ERR_INVALID on every rank of the group, naming the rank
 * and the entry, and nothing is written. */
SHMESH_API int shmesh_ragged_all_to_all(shmesh_mesh *mesh, const char *axes,
                                        const shmesh_groups *groups, const shmesh_array *operand,
                                        shmesh_array *output, const shmesh_array *input_offsets,
                                        const shmesh_array *send_sizes,
                                        const shmesh_array *output_offsets,
                                        const shmesh_array *recv_sizes);
/* perm holds npairs (source, destination) pairs of group indices; sources
 * are distinct and destinations are distinct (after reducing indices modulo
 * n, as JAX does).  A device that is no destination gets zeros.  out has
 * in's shape and dtype. */
SHMESH_API int shmesh_ppermute(shmesh_mesh *mesh, const char *axes, const int (*perm)[2],
                               int npairs, const shmesh_array *in, shmesh_array *out);
/* perm has n entries, a permutation of 0..n-1: the device of group index i
 * receives the input of group index perm[i]. */
SHMESH_API int shmesh_pshuffle(shmesh_mesh *mesh, const char *axes, const int *perm,
                               const shmesh_array *in, shmesh_array *out);
/* Every device of the group gets the input of group index `source`. */
SHMESH_API int shmesh_pbroadcast(shmesh_mesh *mesh, const char *axes, int source,
                                 const shmesh_array *in, shmesh_array *out);

/* "invalid argument", … for a SHMESH_ERR_* code; "success" for 0. */
SHMESH_API const char *shmesh_strerror(int err);
/* "SHMESH_ERR_INVALID", … ; "SHMESH_OK" for 0. */
SHMESH_API const char *shmesh_error_name(int err);
/* The sentence explaining this context's most recent failure ("" if none);
 * on a thread refused because another was inside with ctx, why it was.
 * With NULL: the last shmesh_init or shmesh_finalize failure on the calling
 * thread. */
SHMESH_API const char *shmesh_last_error(const shmesh_ctx *ctx);

/* Bytes per element; 0 for an unknown dtype. */
SHMESH_API size_t shmesh_dtype_size(shmesh_dtype dtype);
/* "float32", … ; "?" for an unknown dtype. */
SHMESH_API const char *shmesh_dtype_name(shmesh_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
