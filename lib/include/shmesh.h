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
 *     shmesh_last_error(ctx) on the refused thread.  So does a host callback
 *     that calls the library with its own context.
 *   - A context belongs to the process that made it, from shmesh_init to
 *     shmesh_finalize.  In a fork child every call with the parent's
 *     context (or one of its tokens) is SHMESH_ERR_INVALID, saying so, and
 *     nothing is done in the parent's rank's name; the child's
 *     shmesh_finalize only releases its own copy.  A token of a finalized
 *     context is SHMESH_ERR_INVALID too.
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
 * SHMESH_RANK, SHMESH_WORLD_SIZE); under an MPI launcher instead (mpirun,
 * srun: SHMESH_NET), joins MPI through the network plugin and shares one
 * segment with the node's ranks; over several nodes, ranks and device ids
 * are the job's (MPI's) and a mesh spans every node (docs/multinode.md);
 * without either, creates a job of one rank.
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
 * failure is explained by shmesh_last_error(NULL).  Except, each
 * SHMESH_ERR_INVALID and explained there too:
 *   - from a host callback with its own context, or while another thread
 *     is inside the library with it: refused, and the context left as it
 *     was (finalize it later, from its own thread);
 *   - in a fork child, on its parent's context: no barrier, nothing in the
 *     job's name, and only the child's copy is released (not its GPU
 *     runtime part, nor work the parent had queued at the fork);
 *   - a pointer that is no live context of this process (finalized
 *     already): nothing is done. */
SHMESH_API int shmesh_finalize(shmesh_ctx *ctx);

/* Ends the whole job: records `why` in the segment so every other rank's
 * pending and later calls return SHMESH_ERR_ABORTED naming this rank, then
 * exits this process with status `code` (1 when code is 0 or out of
 * 1..255), which makes the launcher stop the others.  Any rank may call it
 * alone; ctx may be NULL (the process just exits), as it is in effect in a
 * fork child on its parent's context (nothing is recorded). */
SHMESH_API SHMESH_NORETURN void shmesh_abort(shmesh_ctx *ctx, int code, const char *why);

/* Leaves the job when this process exits, for programs (and language
 * bindings) that learn their exit status only then: an on_exit handler
 * finalizes ctx (as shmesh_finalize, collective) if the process exits
 * with status 0, and otherwise tells the job, without a collective, that
 * this rank failed: every other rank's pending and later calls return
 * SHMESH_ERR_PEER_DEAD naming this rank, its status and `why` (copied;
 * NULL or "" for none), and shmesh-run reports this rank and status.  ctx
 * then belongs to the exit: the program must not use it again.  Local;
 * once per process.  Errors: SHMESH_ERR_INVALID (NULL ctx, or a second
 * call), SHMESH_ERR_SYSTEM where the C library has no on_exit (glibc has):
 * call shmesh_finalize instead. */
SHMESH_API int shmesh_finalize_at_exit(shmesh_ctx *ctx, const char *why);

/* This process's rank in the job and the job's ranks (under an MPI
 * launcher, MPI's: every node's ranks). */
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
 * Devices
 *
 * A device is (process, local device).  shmesh-run --devices-per-rank K
 * gives every rank K devices (SHMESH_LOCAL_DEVICES; a program started
 * without the launcher holds 1, or SHMESH_LOCAL_DEVICES of them, as
 * XLA_FLAGS=--xla_force_host_platform_device_count makes one process hold
 * several CPU devices).  Device ids count them rank by rank: rank r holds
 * ids r*K .. r*K+K-1, its local devices 0..K-1.  With GPUs, local device l
 * of rank r is GPU r*K+l, its entry in the one visibility variable the
 * launcher sets (shared round-robin when the machine has fewer GPUs).  In a
 * job of several nodes (an MPI launcher's: docs/multinode.md) r is the
 * job's rank, and K > 1 is not built yet (shmesh_init refuses it).
 * ------------------------------------------------------------------------- */

/* Devices this rank holds (K). */
SHMESH_API int shmesh_local_device_count(const shmesh_ctx *ctx);
/* Devices in the job: world size times K. */
SHMESH_API int shmesh_device_count(const shmesh_ctx *ctx);
/* The id of this rank's local device `local` (0..K-1); -1 when out of range. */
SHMESH_API int shmesh_device_id(const shmesh_ctx *ctx, int local);
/* The rank holding device `id`; -1 when the job has no such device. */
SHMESH_API int shmesh_device_process(const shmesh_ctx *ctx, int id);

/* ---------------------------------------------------------------------------
 * Meshes and named axes (jax.sharding.Mesh, AbstractMesh)
 *
 * A mesh lays the job's devices out on named axes, row-major: with axes
 * ("x", "y") of sizes (2, 3), mesh position (i, j) holds device
 * device_order[i * 3 + j] (device i * 3 + j when device_order is NULL).
 * With one device per rank, device ids are ranks.
 *
 * Collectives name the axes they run over with a string: "x", or "x,y" for
 * several (order matters, as in a JAX tuple of names; spaces are ignored;
 * "" names none).  The group of a device is every device that shares its
 * coordinates on all the axes not named; its index in the group is
 * row-major over the named axes in the order given.  For "y,x" on the mesh
 * above, index = j * 2 + i, and the group size is 6.
 *
 * A mesh is an immutable value: two meshes are equal (shmesh_mesh_equal)
 * when their axis names, shape and device order are, and then hash alike.
 * Errors of the local mesh functions are explained by
 * shmesh_last_error(ctx) of the mesh's context; for abstract meshes (which
 * have none) and partition specs, by shmesh_last_error(NULL) on the calling
 * thread.
 * ------------------------------------------------------------------------- */

#define SHMESH_MAX_MESH_DIMS 8
#define SHMESH_MAX_AXIS_NAME 31

typedef struct shmesh_mesh shmesh_mesh;

/* Collective (every rank, same arguments): creates a mesh of every device
 * of the job.  Axis names are non-empty, at most SHMESH_MAX_AXIS_NAME
 * characters, without ',', '(', ')' or spaces, and distinct; sizes are
 * positive and multiply to the device count; device_order is NULL or a
 * permutation of the device ids.  The mesh borrows ctx, which must outlive
 * it. */
SHMESH_API int shmesh_mesh_create(shmesh_ctx *ctx, int ndim, const char *const axis_names[],
                                  const int sizes[], const int *device_order,
                                  shmesh_mesh **out);
/* Local: an abstract mesh, names and sizes only (jax.sharding.AbstractMesh):
 * it has a shape and a size, specs and shard shapes work on it, but asking
 * it for devices, local devices, a local mesh, or running a collective on
 * it is SHMESH_ERR_INVALID naming what was asked.  Same rules for names and
 * sizes as shmesh_mesh_create (any positive product). */
SHMESH_API int shmesh_abstract_mesh_create(int ndim, const char *const axis_names[],
                                           const int sizes[], shmesh_mesh **out);
/* Local: the abstract mesh of `mesh` (its shape; itself copied when it is
 * abstract already). */
SHMESH_API int shmesh_mesh_abstract(const shmesh_mesh *mesh, shmesh_mesh **out);
/* Local: the sub-block of `mesh` held by this rank (Mesh.local_mesh): for
 * each dimension, the smallest range of coordinates that covers every
 * local device.  When that block holds a device of another rank, this
 * rank's devices are not a contiguous sub-block of the mesh: SHMESH_ERR_INVALID
 * naming one such device.  Collectives on a local mesh run inside this
 * process (no other rank calls them). */
SHMESH_API int shmesh_mesh_local_mesh(const shmesh_mesh *mesh, shmesh_mesh **out);
/* Local: frees the mesh (NULL is accepted).  A mesh still pushed
 * (shmesh_mesh_push) must be popped first. */
SHMESH_API void shmesh_mesh_destroy(shmesh_mesh *mesh);

/* Local accessors.  ndim, name and size of dimension `dim` (NULL / -1 out
 * of range), and the number of devices (the product of the sizes). */
SHMESH_API int shmesh_mesh_ndim(const shmesh_mesh *mesh);
SHMESH_API const char *shmesh_mesh_axis_name(const shmesh_mesh *mesh, int dim);
SHMESH_API int shmesh_mesh_dim_size(const shmesh_mesh *mesh, int dim);
SHMESH_API int shmesh_mesh_size(const shmesh_mesh *mesh);
SHMESH_API bool shmesh_mesh_is_abstract(const shmesh_mesh *mesh);
/* The device ids in mesh order (row-major), into ids[0..capacity): returns
 * the mesh's size (only min(size, capacity) written), or an error. */
SHMESH_API int shmesh_mesh_device_ids(const shmesh_mesh *mesh, int *ids, int capacity);
/* This rank's devices in the mesh, in mesh order (the order collectives
 * take their buffers in): returns how many, or an error. */
SHMESH_API int shmesh_mesh_local_devices(const shmesh_mesh *mesh, int *ids, int capacity);
/* 1 when the mesh holds devices of more than one rank, 0 when not, or an
 * error (abstract meshes). */
SHMESH_API int shmesh_mesh_is_multi_process(const shmesh_mesh *mesh);
/* Same kind (concrete or abstract), names, shape and (concrete) device
 * order.  An abstract mesh never equals a concrete one, as in JAX: compare
 * shmesh_mesh_abstract(concrete) with it, or use shmesh_mesh_same_shape. */
SHMESH_API bool shmesh_mesh_equal(const shmesh_mesh *a, const shmesh_mesh *b);
/* Same names and sizes, in order (the shape tuple), of any two meshes. */
SHMESH_API bool shmesh_mesh_same_shape(const shmesh_mesh *a, const shmesh_mesh *b);
/* Equal meshes hash alike. */
SHMESH_API uint64_t shmesh_mesh_hash(const shmesh_mesh *mesh);
/* "Mesh('x': 2, 'y': 4)" or "AbstractMesh('x': 2, 'y': 4)" into buf (always
 * terminated when len > 0); returns the length it needed. */
SHMESH_API int shmesh_mesh_text(const shmesh_mesh *mesh, char *buf, size_t len);

/* The mesh context (`with mesh:`): a stack per thread.  Functions that take
 * a mesh take the innermost pushed one when given NULL.  push fails for an
 * abstract mesh and, as the seed's resource environment does, for a mesh
 * whose axes shadow resource axes the environment has beyond its mesh's
 * (shmesh's environments have none, so that never happens); pop must be
 * given the innermost mesh.  Both return 0 or SHMESH_ERR_INVALID (explained
 * by shmesh_last_error(NULL)).  current is NULL when nothing is pushed. */
SHMESH_API int shmesh_mesh_push(shmesh_mesh *mesh);
SHMESH_API int shmesh_mesh_pop(shmesh_mesh *mesh);
SHMESH_API shmesh_mesh *shmesh_mesh_current(void);

/* Local (mesh NULL: the innermost pushed one): this rank's first local
 * device's index in its group over `axes`
 * (with several local devices, shmesh_axis_index_of gives each one's), and
 * the group size (the product of the named axes' sizes).  Errors: an
 * unknown or repeated axis name (SHMESH_ERR_INVALID, naming it). */
SHMESH_API int shmesh_axis_index(const shmesh_mesh *mesh, const char *axes, int *index);
SHMESH_API int shmesh_axis_size(const shmesh_mesh *mesh, const char *axes, int *size);
/* Local: device `device`'s index in its group over `axes` (any device of
 * the mesh, local or not). */
SHMESH_API int shmesh_axis_index_of(const shmesh_mesh *mesh, const char *axes, int device,
                                    int *index);

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

/* bdim: where the array carries the batched axis of a batched mesh
 * (shmesh_mesh_batch), read only by collectives on such a mesh and by the
 * batching helpers below; other calls ignore it.  0 (the default, as
 * vmap's in_axes and out_axes) is the first dimension; negative counts from
 * the end; SHMESH_NOT_MAPPED: the array has no batch dimension (one value
 * for every position of the batched axis).  For an output, SHMESH_BDIM_AUTO
 * asks for the batch dimension where the seed's batching rule puts it; the
 * call writes back where that is (or SHMESH_NOT_MAPPED). */
#define SHMESH_NOT_MAPPED INT32_MIN
#define SHMESH_BDIM_AUTO (INT32_MIN + 1)

typedef struct {
    void *data;
    shmesh_dtype dtype;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    int bdim;
} shmesh_array;

/* ---------------------------------------------------------------------------
 * Collectives over named axes (JAX's jax.lax parallel primitives).
 *
 * All are collective over the whole job: every rank calls them in the same
 * order with the same axes, groups, parameters, dtypes and shapes (the
 * data differ).  The mesh may be NULL: the innermost pushed mesh.  A rank
 * whose call differs gets SHMESH_ERR_MISMATCH, and so does every rank it
 * meets; the message names both calls.  Argument errors found locally
 * (shapes, axes, groups, permutations) return SHMESH_ERR_INVALID before
 * anything is shared: the call is not made.  Every rank of a group gets
 * bitwise-identical results, run after run: reductions combine the
 * members' values in group order (index 0 first).  `in` and `out` must not
 * overlap, except where noted.  Axis arguments may be negative (counted
 * from the end, as in Python).
 *
 * Several devices per rank: `in` and `out` (and ragged_all_to_all's
 * arrays) point to one array per local device of the mesh, in
 * shmesh_mesh_local_devices order, all of the same dtype and shape, no two
 * devices' buffers overlapping; with one device per rank that is one array
 * each, as before.  Results are exactly those of the same mesh with one
 * device per rank; a call refused for one of a rank's devices (a bad
 * ragged slice) writes nothing for any of them.
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
 * (M, ...) share dtype and trailing dimensions, and like every collective's
 * arrays have the same shapes on every member, N and M included (members
 * whose N or M differ get SHMESH_ERR_MISMATCH; shmesh_ragged_all_to_all_pile
 * sizes them for the caller); the four offset/size arrays
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
/* Every device of the group gets the input of group index `source`.  in and
 * out may be the very same buffer (MPI_Bcast's in place: the source's stays
 * as it is, the others' are overwritten); a partial overlap is refused.
 * Up to SHMESH_EAGER_MAX bytes (default 2048) the source returns once its
 * data is posted, up to 64 calls ahead of its receivers: a difference of
 * calls only it can see (two members that each name themselves the source)
 * then fails its next call that is not such a pbroadcast (at the latest
 * shmesh_finalize) or its 64th pbroadcast after (docs/semantics.md). */
SHMESH_API int shmesh_pbroadcast(shmesh_mesh *mesh, const char *axes, int source,
                                 const shmesh_array *in, shmesh_array *out);

/* ---------------------------------------------------------------------------
 * Batched (process-local) axes: vmap with an axis_name, inside the mesh
 *
 * shmesh_mesh_batch adds to a mesh one more axis, of size B, that every
 * device carries inside its arrays as a batch dimension (as
 * vmap(f, axis_name=name, axis_size=B) does inside shard_map): mesh
 * position (p, k) is position k of the batch held by the device at
 * position p of the original mesh.  The batched axis is the new mesh's
 * last dimension and is named in collectives like any other, alone or with
 * others.  So 2 ranks can run a program written for an 8-device mesh
 * (mesh x=2, batched b=4), and a trainer can keep a process-local axis
 * (micro-batches) in one array.
 *
 * Collectives on a batched mesh take, for each local device, one array
 * holding its B positions' values at dimension in.bdim, or one value for
 * all of them (in.bdim = SHMESH_NOT_MAPPED), and write the result with its
 * batch dimension at out.bdim (0 by default, vmap's out_axes).  Each
 * position gets what the same mesh with one device per position computes,
 * bit for bit (members combine in group order), with the seed's rules
 * where those differ:
 *   - a not-mapped operand of psum, pmean or psum_scatter over the batched
 *     axis counts as B * x (one product in its dtype; for bool, x), not as
 *     a sum of B copies; axis_index_groups are then refused, as in JAX;
 *   - the result is not mapped (one value for the batch) when the batched
 *     axis is named by psum, pmax, pmin, pmean, pargmax, pargmin,
 *     all_gather or pbroadcast without axis_index_groups, or when the
 *     operand is not mapped and either the batched axis is not named or
 *     (ppermute with a full permutation, pshuffle) the op only moves values
 *     among the batch; otherwise it is mapped, where docs/batching.md's
 *     table says (SHMESH_BDIM_AUTO).
 * A not-mapped result asked for at a bdim is broadcast there; a mapped
 * result asked for as SHMESH_NOT_MAPPED is SHMESH_ERR_INVALID, as vmap's
 * "mapped output but out_axes is None".  A call whose every group lies
 * inside one rank (over the batched axis alone, B > 1) runs inside each
 * process: nothing is exchanged and ranks do not compare it.  Every rank
 * must batch a mesh with the same size (else SHMESH_ERR_MISMATCH on the
 * calls that cross ranks).  Not built on a batched mesh
 * (SHMESH_ERR_INVALID saying so): ragged_all_to_all, the _async forms,
 * device buffers, shardings and global arrays, local meshes, a second
 * batched axis, and a job of several nodes (docs/multinode.md).
 * ------------------------------------------------------------------------- */

/* Local: a new mesh, `mesh`'s axes then `name` of `size` (>= 1) batched.
 * `mesh` is concrete and has no batched axis; the new mesh borrows its
 * context and does not need `mesh` afterwards.  Its size counts positions
 * (mesh's size times B); shmesh_mesh_device_ids gives for each position the
 * device holding it, and shmesh_mesh_local_devices this rank's devices
 * once each (the order collectives take their arrays in). */
SHMESH_API int shmesh_mesh_batch(const shmesh_mesh *mesh, const char *name, int size,
                                 shmesh_mesh **out);
/* The batched axis's dimension, or -1 when the mesh has none. */
SHMESH_API int shmesh_mesh_batch_dim(const shmesh_mesh *mesh);

/* Local: axis_index as an array, for each local device (out[l], in
 * shmesh_mesh_local_devices order): int32, a scalar (ndim 0).  On a batched
 * mesh the index over axes naming the batched axis differs along the batch:
 * out holds the B indices at out.bdim (0..B-1 along it when the batched
 * axis is the only one); over other axes it is not mapped (a scalar, or
 * broadcast to out.bdim when one is asked for). */
SHMESH_API int shmesh_axis_index_array(shmesh_mesh *mesh, const char *axes, shmesh_array *out);

/* Local: the seed's matchaxis.  Moves in's batch dimension (in->bdim, of
 * size `size`) to out->bdim: a mapped in goes where asked (moveaxis); a
 * not-mapped in is broadcast to `size` positions there, or copied when out
 * is not mapped either; a mapped in with out->bdim SHMESH_NOT_MAPPED is
 * SHMESH_ERR_INVALID ("mapped output but out_axes is None").  out has in's
 * dtype and the shape that gives; errors are explained by
 * shmesh_last_error(NULL). */
SHMESH_API int shmesh_matchaxis(int size, const shmesh_array *in, shmesh_array *out);

/* ---------------------------------------------------------------------------
 * Ragged arrays (the seed's piles): components whose shapes differ only
 * along one axis, stored concatenated along it, with their lengths.
 * Local functions; errors are explained by shmesh_last_error(NULL).
 * ------------------------------------------------------------------------- */

typedef struct {
    shmesh_array data; /* the components, concatenated along `axis` */
    int axis;          /* 0..data.ndim-1 */
    int count;         /* how many components */
    int64_t *lengths;  /* count entries: each component's size along `axis` */
} shmesh_pile;

/* Makes a pile of `count` components over data (borrowed, not copied, as
 * is lengths): axis may be negative (from the end); lengths are >= 0 and
 * add up to data->shape[axis]. */
SHMESH_API int shmesh_pile_make(shmesh_pile *pile, const shmesh_array *data, int axis, int count,
                                int64_t *lengths);
/* Copies component i (0..count-1) into out: data's dtype and shape with
 * dimension `axis` of size lengths[i]. */
SHMESH_API int shmesh_pile_component(const shmesh_pile *pile, int i, shmesh_array *out);
/* The seed's segment_sum along `axis`: out has operand's dtype and shape
 * with dimension `axis` of size count; its entry i along `axis` is the sum
 * of the segment_lens[i] consecutive entries of operand starting after the
 * earlier segments (lengths >= 0, adding up to operand->shape[axis]).
 * Sums run in order from +0; integers wrap; float16 and bfloat16
 * accumulate in float32 and round once; bool sums are "or". */
SHMESH_API int shmesh_segment_sum(const shmesh_array *operand, int axis, int count,
                                  const int64_t *segment_lens, shmesh_array *out);
/* segment_sum of a pile over its own axis: one sum per component. */
SHMESH_API int shmesh_pile_sum(const shmesh_pile *pile, shmesh_array *out);
/* Collective: ragged_all_to_all of piles along axis 0.  operand has one
 * component per member of the group (count = the group size n): component
 * j goes to group index j.  output has count n, its own lengths array, and
 * room in output->data for what arrives (its shape[0] is the room); on
 * return output->lengths[j] is what group index j sent, the components sit
 * in group order from row 0, and output->data.shape[0] is their total.
 * The sizes are exchanged first (one all_gather), so no member needs to
 * know in advance what it receives.  Too little room on any member is
 * SHMESH_ERR_INVALID on every member of its group, and nothing is
 * written.  Several local devices: one pile each, as arrays. */
SHMESH_API int shmesh_ragged_all_to_all_pile(shmesh_mesh *mesh, const char *axes,
                                             const shmesh_groups *groups,
                                             const shmesh_pile *operand, shmesh_pile *output);

/* ---------------------------------------------------------------------------
 * Partition specs and shardings (jax.sharding.PartitionSpec, NamedSharding)
 *
 * A partition spec says, for each dimension of an array, how it is split
 * over the mesh: not at all (None), over one mesh axis, or over several (a
 * tuple: the product of their sizes, the first varying slowest).
 * Dimensions past the spec's entries are not split.  A NamedSharding is a
 * mesh and a spec; with a global shape it gives the shard shape, and for
 * every device of the mesh its block of the global array (start/stop per
 * dimension) and its replica id: 0 for the first device holding that block
 * in mesh order, counting up.
 *
 * Errors name JAX's exception first, then say what was expected and found:
 * "DuplicateSpecError: ..." (an axis used twice), "IndivisibleError: ..."
 * (a dimension not divisible by its axes' product), "IndexError: ..." (an
 * entry past the array's dimensions that splits), "ValueError: ..." (an
 * axis the mesh does not have, a malformed spec).  All are
 * SHMESH_ERR_INVALID.
 * ------------------------------------------------------------------------- */

typedef struct {
    int n; /* entries, at most SHMESH_MAX_NDIM */
    /* Per entry: how many axes split it (0: None), and their names. */
    int naxes[SHMESH_MAX_NDIM];
    char axes[SHMESH_MAX_NDIM][SHMESH_MAX_MESH_DIMS][SHMESH_MAX_AXIS_NAME + 1];
} shmesh_pspec;

/* Local: parses a spec from text: entries separated by commas, each "-" or
 * "None" (not split), an axis name, or a tuple "(a,b)" ("()" is None, "(a)"
 * is a).  "x" is P('x'); "x,y" P('x', 'y'); "(x,y),-" P(('x', 'y'), None);
 * "" P().  Spaces around names are ignored.  shmesh_pspec_text's form is
 * read too: "P('x', ('x', 'y'), None)" (names may be quoted, and a tuple
 * or P(...) may end with a comma, as in Python).  Errors (a malformed
 * text, naming the position; more than SHMESH_MAX_NDIM entries or
 * SHMESH_MAX_MESH_DIMS axes in a tuple; a name longer than
 * SHMESH_MAX_AXIS_NAME): SHMESH_ERR_INVALID, explained by
 * shmesh_last_error(NULL); *spec is then unchanged. */
SHMESH_API int shmesh_pspec_parse(const char *text, shmesh_pspec *spec);
/* "P('x', ('x', 'y'), None)" into buf (terminated when len > 0); returns the
 * length it needed, or SHMESH_ERR_INVALID for a spec whose counts or names
 * are out of range (shmesh_last_error(NULL)).  Names are quoted as Python's
 * repr quotes a str: P("x'"), P('a\\b'), P('a\'"b'); shmesh_pspec_parse
 * reads every such text back as the same spec (inside quotes it takes
 * \\, \' and \" as escapes and refuses any other backslash). */
SHMESH_API int shmesh_pspec_text(const shmesh_pspec *spec, char *buf, size_t len);

typedef struct shmesh_sharding shmesh_sharding;

/* One device's block of a global array. */
typedef struct {
    int device;     /* its id */
    int replica_id; /* 0 for the first device holding this block in mesh order */
    int64_t start[SHMESH_MAX_NDIM], stop[SHMESH_MAX_NDIM];
} shmesh_index;

/* Local: NamedSharding(mesh, spec); mesh NULL: the innermost pushed mesh.
 * Errors: an axis the mesh does not have, an axis used twice.  The
 * sharding borrows the mesh (and copies the spec). */
SHMESH_API int shmesh_sharding_create(shmesh_mesh *mesh, const shmesh_pspec *spec,
                                      shmesh_sharding **out);
SHMESH_API void shmesh_sharding_destroy(shmesh_sharding *sharding);
SHMESH_API shmesh_mesh *shmesh_sharding_mesh(const shmesh_sharding *sharding);
SHMESH_API const shmesh_pspec *shmesh_sharding_spec(const shmesh_sharding *sharding);
/* Local: the shape of every shard of an array of `shape`.  Entries past
 * the array's dimensions may not split anything (None, or axes of size 1,
 * which JAX accepts): IndexError otherwise. */
SHMESH_API int shmesh_sharding_shard_shape(const shmesh_sharding *sharding, int ndim,
                                           const int64_t *shape, int64_t *shard_shape);
/* Local: 1 when every shard is the whole array, 0 when not, or an error. */
SHMESH_API int shmesh_sharding_is_fully_replicated(const shmesh_sharding *sharding, int ndim,
                                                   const int64_t *shape);
/* Local: every device's block and replica id, in mesh order (out has
 * shmesh_mesh_size entries).  Also checks, as JAX does, that the blocks
 * found are as many as the shard shape implies.  Abstract meshes: an
 * error. */
SHMESH_API int shmesh_sharding_indices(const shmesh_sharding *sharding, int ndim,
                                       const int64_t *shape, shmesh_index *out);

/* ---------------------------------------------------------------------------
 * Global arrays (jax.Array / GlobalDeviceArray): one logical array of a
 * global shape, split over a concrete mesh's devices by a sharding.  Each
 * rank holds the shards of its local devices; it knows every shard's block,
 * but has data only for its own.  An array borrows its sharding (which
 * must outlive it) and is used by one thread at a time, as its context is.
 *
 * The constructors are local: each rank builds its own view, and every rank
 * should build the same array (same sharding, dtype and shape) before the
 * collective ones (gather, reshard) meet.  Errors are explained by
 * shmesh_last_error(ctx) of the mesh's context; those found before there is
 * one (a NULL sharding or out, an abstract mesh, a NULL array) by
 * shmesh_last_error(NULL) on the calling thread.  On failure *out is NULL
 * and nothing is left allocated.  Memory and data movement of each call:
 * docs/arrays.md.
 * ------------------------------------------------------------------------- */

/* A shard: a device's block (index: device id, replica id, start/stop per
 * dimension) and its data, an array of the shard shape whose data.data is
 * the device's buffer where the device is local, NULL elsewhere (and NULL
 * also for a shard with no elements). */
typedef struct {
    shmesh_index index;
    shmesh_array data;
} shmesh_shard;

typedef struct shmesh_global_array shmesh_global_array;

/* Fills shard->data.data (owned by the array: zeroed, 64-byte aligned, of
 * the shard shape) with the block shard->index names; returns 0, or
 * anything else to fail the construction: SHMESH_ERR_INVALID naming the
 * device, the block and the value, with everything made so far freed.  It
 * runs on the calling thread and may call local shmesh functions. */
typedef int (*shmesh_shard_fn)(void *arg, const shmesh_shard *shard);
/* Fills n shards at once (the same contract, for all n). */
typedef int (*shmesh_shards_fn)(void *arg, const shmesh_shard *shards, int n);

/* Local: a global array over one caller buffer per local device of the
 * sharding's mesh (shmesh_mesh_local_devices order), each holding that
 * device's shard; borrowed: the caller keeps them alive and frees them.
 * buffers (or an entry) may be NULL only where the shards are empty.
 * Errors: dtype, ndim (0..SHMESH_MAX_NDIM), a negative dimension, more
 * than 2^62 bytes, a shape the sharding cannot split (IndivisibleError,
 * IndexError from the sharding), NULL arguments. */
SHMESH_API int shmesh_global_array_create(const shmesh_sharding *sharding, shmesh_dtype dtype,
                                          int ndim, const int64_t *shape,
                                          void *const *buffers, shmesh_global_array **out);
/* Local: owned shards filled by fn, called once per local device in
 * shmesh_mesh_local_devices order (make_array_from_callback,
 * GlobalDeviceArray.from_callback). */
SHMESH_API int shmesh_global_array_from_callback(const shmesh_sharding *sharding,
                                                 shmesh_dtype dtype, int ndim,
                                                 const int64_t *shape, shmesh_shard_fn fn,
                                                 void *arg, shmesh_global_array **out);
/* Local: fn called once with every local shard (from_batched_callback). */
SHMESH_API int shmesh_global_array_from_batched_callback(const shmesh_sharding *sharding,
                                                         shmesh_dtype dtype, int ndim,
                                                         const int64_t *shape,
                                                         shmesh_shards_fn fn, void *arg,
                                                         shmesh_global_array **out);
/* Local: fn called once per distinct block among the local devices (in the
 * mesh order of the first local device holding it), with the shards of
 * every local device that holds it (in mesh order): it fills each
 * (from_batched_callback_with_devices). */
SHMESH_API int shmesh_global_array_from_callback_with_devices(const shmesh_sharding *sharding,
                                                              shmesh_dtype dtype, int ndim,
                                                              const int64_t *shape,
                                                              shmesh_shards_fn fn, void *arg,
                                                              shmesh_global_array **out);
/* Local: frees the array and the shards it owns (never borrowed buffers;
 * NULL is accepted).  Up to four owned shards of 4 MiB and more are kept
 * for the next shards of their size, within SHMESH_ARRAY_CACHE bytes
 * (default 1 GiB; shmesh_finalize frees them). */
SHMESH_API void shmesh_global_array_destroy(shmesh_global_array *array);

/* Local accessors.  The sharding (NULL for a NULL array), the dtype
 * (SHMESH_DTYPE_COUNT for a NULL array). */
SHMESH_API const shmesh_sharding *shmesh_global_array_sharding(const shmesh_global_array *array);
SHMESH_API shmesh_dtype shmesh_global_array_dtype(const shmesh_global_array *array);
/* Its ndim; the global shape into shape[0..ndim) (room for SHMESH_MAX_NDIM
 * is enough) unless NULL. */
SHMESH_API int shmesh_global_array_shape(const shmesh_global_array *array, int64_t *shape);
/* Whether every shard is the whole array (the sharding's answer). */
SHMESH_API bool shmesh_global_array_is_fully_replicated(const shmesh_global_array *array);
/* The local shards (one per local device, mesh order) or every device's
 * (mesh order; data only where local, the same buffers as the local
 * shards'): returns how many; *shards points into the array, valid until
 * it is destroyed. */
SHMESH_API int shmesh_global_array_local_shards(const shmesh_global_array *array,
                                                const shmesh_shard **shards);
SHMESH_API int shmesh_global_array_global_shards(const shmesh_global_array *array,
                                                 const shmesh_shard **shards);

/* Collective over the job (device_get, process_allgather): the whole
 * array, row-major, into `out` on rank `root`, or on every rank when root
 * is -1 (out is ignored elsewhere and may be NULL).  Each block travels
 * once, from the device holding it with replica id 0, to the root only
 * when there is one; ranks gathering
 * different arrays (mesh, spec, dtype, shape) or roots then get
 * SHMESH_ERR_MISMATCH naming both.  Where every rank holds every block
 * already (a fully replicated array) no data moves, but every rank still
 * takes part, so that a rank holding the array under another sharding
 * gets SHMESH_ERR_MISMATCH at this call, as they all do.  Over a
 * process-local mesh (shmesh_mesh_local_mesh) it is local: no other rank
 * takes part. */
SHMESH_API int shmesh_global_array_gather(const shmesh_global_array *array, int root, void *out);
/* Collective (device_put of a host array): a global array of `sharding`
 * (owned shards) whose data is rank root's `data` (the whole array,
 * row-major; only read, and ignored elsewhere).  Each other rank receives
 * each block its devices hold, once.  Over a process-local mesh it is
 * local, and root must be this rank. */
SHMESH_API int shmesh_global_array_scatter(const shmesh_sharding *sharding, shmesh_dtype dtype,
                                           int ndim, const int64_t *shape, int root,
                                           const void *data, shmesh_global_array **out);
/* Collective (jax.device_put(x, new_sharding)): the same array under
 * sharding `to`, whose mesh is any concrete mesh of the same job (another
 * device order, other axes), process-local exactly when the array's is;
 * owned shards, bit for bit the same values.  Ranks compare both
 * shardings (SHMESH_ERR_MISMATCH naming both calls when they differ), on
 * every rank even where no data moves.  A rank receives only the parts of
 * its new blocks that its devices do not hold already, each from one
 * holder, read straight out of the holder's shard where single copy may
 * be used (docs/arrays.md).  Over a process-local mesh it is local. */
SHMESH_API int shmesh_global_array_reshard(const shmesh_global_array *array,
                                           const shmesh_sharding *to, shmesh_global_array **out);
/* The same, donating `array` (jax.device_put(x, new_sharding,
 * donate=True)): on success it is destroyed (it and its shards' memory
 * must not be used again), and the pages of an owned shard that lies whole
 * in one new shard as one run of it, at a page boundary, both of 4 MiB or
 * more, become the new shard's there instead of being copied
 * (P('x') -> P(), say); on failure it is left as it was. */
SHMESH_API int shmesh_global_array_reshard_donate(shmesh_global_array *array,
                                                  const shmesh_sharding *to,
                                                  shmesh_global_array **out);

/* ---------------------------------------------------------------------------
 * Asynchronous dispatch, tokens and effects (docs/effects.md; JAX's async
 * dispatch, RuntimeToken, ordered effects and jax.barrier).
 *
 * The dispatch queue.  Every context has one dispatch queue: work is
 * executed in the order it was dispatched (collectives and host callbacks
 * alike), as on a CUDA stream.  An `_async` function checks its arguments
 * on the calling thread (an error returns at once and nothing is
 * dispatched), queues the work and returns; the context's progress thread
 * (the dispatcher), started by the first async dispatch, executes the queue
 * while the caller computes; a thread that waits for queued collectives the
 * progress thread has not taken yet runs them itself, in order (host
 * callbacks run on the progress thread only).  Once the thread runs, the
 * blocking functions are dispatch + wait on the same queue, so program
 * order is kept.  Data
 * buffers belong to the library until the work's token is done: do not
 * touch them (inputs may be read, outputs written, until then).
 * ragged_all_to_all's offset and size arrays are read at dispatch, and a
 * mesh may be freed after dispatch.
 *
 * Tokens.  A token names a position in a context's dispatch queue; it is a
 * value (copy it, wait on it twice, drop it: nothing to free).  It is done
 * once the work at that position and everything dispatched before it on the
 * context finished: the context's count of finished work is a word of the
 * segment, waited on with the collectives' notifier, so a token wait ends
 * on completion, on a peer's death or an abort (the error), or after
 * SHMESH_TIMEOUT (the dispatcher's own wait, which names the rank it waited
 * for, fails first; a token wait gives up by itself a little later, by
 * a quarter of SHMESH_TIMEOUT or at least 0.1 s).  A failed dispatch sets
 * the token to {NULL, 0}, which is done.  Work that fails has its token fail with the error and explanation
 * (shmesh_last_error); after a peer's death, an abort or a mismatch every
 * pending token fails with that error, and output buffers of failed work
 * hold unspecified values.  A token may outlive its context: after
 * shmesh_finalize (which finished its work) it is SHMESH_ERR_INVALID,
 * explained by shmesh_last_error(NULL), never followed into freed memory,
 * and never taken for a position of a later context, even one at the same
 * address.
 * ------------------------------------------------------------------------- */

typedef struct {
    shmesh_ctx *ctx; /* NULL: no work (done) */
    uint64_t seq;    /* position in ctx's dispatch order: from 1, or in a
                        process that finalized a context before, from past
                        that one's last */
} shmesh_token;

/* Blocks until `token` is done: 0, or the error of its work (the
 * explanation in shmesh_last_error(token.ctx)). */
SHMESH_API int shmesh_token_wait(shmesh_token token);
/* Never blocks: 1 when done (and succeeded), 0 when not yet, or the error
 * its work failed with. */
SHMESH_API int shmesh_token_test(shmesh_token token);
/* Waits for all n tokens (of one context, or done ones): 0, or the error of
 * the first failed one in dispatch order.  A malformed list (n < 0, a NULL
 * array; for wait_any also n == 0 or a NULL index) is SHMESH_ERR_INVALID,
 * explained by shmesh_last_error(NULL) when no token names a context. */
SHMESH_API int shmesh_token_wait_all(int n, const shmesh_token tokens[]);
/* Waits until one of the n tokens (of one context) is done; *index is its
 * position in tokens[] (the earliest in dispatch order, as work finishes in
 * order); returns its result. */
SHMESH_API int shmesh_token_wait_any(int n, const shmesh_token tokens[], int *index);
/* The token of everything this thread dispatched on ctx so far (JAX's
 * RuntimeToken): {ctx, 0}-like (done) when it dispatched nothing. */
SHMESH_API shmesh_token shmesh_runtime_token(shmesh_ctx *ctx);

/* The non-blocking forms: the same arguments and checks as the blocking
 * function, plus the token.  Collective as their blocking forms: every
 * rank dispatches the same calls in the same order (a rank that dispatches
 * a different one gets SHMESH_ERR_MISMATCH from its token, naming both). */
SHMESH_API int shmesh_barrier_async(shmesh_ctx *ctx, shmesh_token *token);
SHMESH_API int shmesh_world_sum_async(shmesh_ctx *ctx, void *buf, size_t count,
                                      shmesh_dtype dtype, shmesh_token *token);
SHMESH_API int shmesh_psum_async(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                 const shmesh_array *in, shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pmax_async(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                 const shmesh_array *in, shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pmin_async(shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups,
                                 const shmesh_array *in, shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pmean_async(shmesh_mesh *mesh, const char *axes,
                                  const shmesh_groups *groups, const shmesh_array *in,
                                  shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pargmax_async(shmesh_mesh *mesh, const char *axes,
                                    const shmesh_groups *groups, const shmesh_array *in,
                                    shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pargmin_async(shmesh_mesh *mesh, const char *axes,
                                    const shmesh_groups *groups, const shmesh_array *in,
                                    shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_all_gather_async(shmesh_mesh *mesh, const char *axes,
                                       const shmesh_groups *groups, int axis, bool tiled,
                                       const shmesh_array *in, shmesh_array *out,
                                       shmesh_token *token);
SHMESH_API int shmesh_psum_scatter_async(shmesh_mesh *mesh, const char *axes,
                                         const shmesh_groups *groups, int scatter_dimension,
                                         bool tiled, const shmesh_array *in, shmesh_array *out,
                                         shmesh_token *token);
SHMESH_API int shmesh_all_to_all_async(shmesh_mesh *mesh, const char *axes,
                                       const shmesh_groups *groups, int split_axis,
                                       int concat_axis, bool tiled, const shmesh_array *in,
                                       shmesh_array *out, shmesh_token *token);
SHMESH_API int shmesh_pswapaxes_async(shmesh_mesh *mesh, const char *axes,
                                      const shmesh_groups *groups, int axis,
                                      const shmesh_array *in, shmesh_array *out,
                                      shmesh_token *token);
SHMESH_API int shmesh_ragged_all_to_all_async(
    shmesh_mesh *mesh, const char *axes, const shmesh_groups *groups, const shmesh_array *operand,
    shmesh_array *output, const shmesh_array *input_offsets, const shmesh_array *send_sizes,
    const shmesh_array *output_offsets, const shmesh_array *recv_sizes, shmesh_token *token);
SHMESH_API int shmesh_ppermute_async(shmesh_mesh *mesh, const char *axes, const int (*perm)[2],
                                     int npairs, const shmesh_array *in, shmesh_array *out,
                                     shmesh_token *token);
SHMESH_API int shmesh_pshuffle_async(shmesh_mesh *mesh, const char *axes, const int *perm,
                                     const shmesh_array *in, shmesh_array *out,
                                     shmesh_token *token);
SHMESH_API int shmesh_pbroadcast_async(shmesh_mesh *mesh, const char *axes, int source,
                                       const shmesh_array *in, shmesh_array *out,
                                       shmesh_token *token);

/* Effects (JAX's effect sets).  An effect is registered with a kind:
 *   UNORDERED          no order among its executions beyond dispatch order
 *   ORDERED            its executions happen one after the other in program
 *                      order; work with it may not span several devices
 *                      (there would be no total order), unless placed on
 *                      exactly one ("maximal sharding")
 *   ORDERED_SHARDABLE  every device runs its part; all parts of program
 *                      point k, on every rank, finish before any part of
 *                      point k+1 starts on any rank; no order among the
 *                      parts of one point
 * Each dispatch with an effect takes the effect's current token and
 * replaces it with its own.  Across ranks, an effect's progress is a word
 * per rank in the segment (the program points it passed), which the other
 * ranks wait on with the notifier. */
typedef enum {
    SHMESH_EFFECT_UNORDERED = 0,
    SHMESH_EFFECT_ORDERED,
    SHMESH_EFFECT_ORDERED_SHARDABLE,
} shmesh_effect_kind;

typedef struct shmesh_effect shmesh_effect;

#define SHMESH_MAX_EFFECTS 32
#define SHMESH_MAX_EFFECT_NAME 31

/* Collective (every rank, same name and kind, in the same order): registers
 * an effect; at most SHMESH_MAX_EFFECTS per context.  The name (1 to
 * SHMESH_MAX_EFFECT_NAME characters) appears in messages.  The context owns
 * the effect: it is freed by shmesh_finalize.  Not built yet in a job of
 * several nodes: SHMESH_ERR_INVALID on every rank (docs/multinode.md). */
SHMESH_API int shmesh_effect_create(shmesh_ctx *ctx, const char *name, shmesh_effect_kind kind,
                                    shmesh_effect **out);
SHMESH_API const char *shmesh_effect_name(const shmesh_effect *effect);
SHMESH_API shmesh_effect_kind shmesh_effect_kind_of(const shmesh_effect *effect);
/* The token of the effect's last dispatch on this rank (done when none). */
SHMESH_API shmesh_token shmesh_effect_token(const shmesh_effect *effect);

/* Where a callback runs: every device of the job (each rank dispatches it;
 * fn runs once per local device), one device id (each rank dispatches it;
 * it runs once, on the rank holding that device, and the other ranks'
 * tokens are done when it has), or this rank's devices alone (only this
 * rank dispatches it: work of this process, ordered by its dispatch
 * queue). */
#define SHMESH_PLACE_ALL (-1)
#define SHMESH_PLACE_SELF (-2)

/* A host callback: `device` is the id of the device whose part this is. */
typedef void (*shmesh_callback_fn)(void *arg, int device);

/* Dispatches fn(arg, device) as work with `effect` (NULL: unordered, no
 * effect) at `placement` (a device id, SHMESH_PLACE_ALL or
 * SHMESH_PLACE_SELF); *token (may be NULL) is done once this rank's part
 * is, or for work placed on another rank's device, once that rank ran it.
 * ALL and device placements are collective: every rank dispatches them in
 * the same order as its other collective work, and each is a collective
 * call of its own: no part of it runs before every rank has reached it,
 * and ranks that dispatched different callbacks there (another effect,
 * kind or placement) get SHMESH_ERR_MISMATCH from its token, naming both,
 * with fn run nowhere.  An ORDERED effect placed on more than one device is
 * SHMESH_ERR_INVALID on every rank (nothing is dispatched).  fn runs on the
 * progress thread, after every earlier work of the dispatch queue; it must
 * not call shmesh with this context.  In a job of several nodes only
 * SHMESH_PLACE_SELF is built; other placements are SHMESH_ERR_INVALID
 * (docs/multinode.md). */
SHMESH_API int shmesh_callback(shmesh_ctx *ctx, shmesh_effect *effect, int placement,
                               shmesh_callback_fn fn, void *arg, shmesh_token *token);

/* Local (jax.barrier): waits until the runtime token of this thread and
 * every ordered effect's current token are done, on every rank for a
 * sharded one (every rank's part of its last program point). */
SHMESH_API int shmesh_effects_barrier(shmesh_ctx *ctx);

/* Device buffers (docs/devices.md).  With a GPU runtime loaded (SHMESH_DEVICE:
 * auto, none, cuda, hip, or a plugin's path), every collective takes device
 * pointers as well as host ones: the input and output of a call must then
 * be device memory on every member of its group (or host memory on every
 * member: a description that differs is SHMESH_ERR_MISMATCH, naming both).
 * Data moves device to device through the runtime's IPC handles where a
 * device path exists (docs/devices.md lists what runs where), else it is
 * staged through host memory (SHMESH_DEBUG=paths says which).  A call on
 * device buffers first waits for the context's GPU stream
 * (shmesh_set_stream), queues its copies and kernels on it, and is done
 * (returns, or its token is) once they have finished: it is ordered after
 * the GPU work queued on that stream before it, and the GPU work queued
 * after it sees its result.
 * Memory from stream-ordered pools (cudaMallocAsync) has no IPC handle: a
 * call on it is SHMESH_ERR_INVALID on every member, naming the rank. */

/* What the context's device layer did so far (this rank). */
typedef struct {
    char backend[16];       /* "cuda", "hip", "fake", or "none" */
    int devices;            /* devices this process sees */
    uint64_t device_calls;  /* calls that moved device buffers device to device */
    uint64_t staged_calls;  /* calls whose device buffers were staged through host memory */
    uint64_t ipc_exports;   /* handles this rank created (one per allocation, cached) */
    uint64_t ipc_opens;     /* peers' handles opened here (one per peer allocation, cached) */
    uint64_t ipc_closes;    /* mappings closed: freed and reused memory, cache evictions */
    uint64_t ipc_hits;      /* peers' buffers found mapped already */
} shmesh_device_stats;

/* Local.  Fills *stats (the backend is "none" without a GPU runtime). */
SHMESH_API int shmesh_device_stats_get(const shmesh_ctx *ctx, shmesh_device_stats *stats);

/* What this rank's calls moved between processes so far (since
 * shmesh_init; docs/profiling.md, "Traffic").  A byte counts once for each
 * process that takes it: as received by the rank that reads it out of
 * another process's memory (a peer's staging window, shared-heap buffer,
 * private memory or device buffer) or into whose memory another rank
 * writes it, and as sent by the rank whose data it is.  Copies within a
 * process and the library's own handshakes are not counted.  Over the
 * ranks of a job, sent and received add up to the same total. */
typedef struct {
    uint64_t bytes;    /* the finished calls' sizes, as shmesh-bench counts them */
    uint64_t sent;     /* bytes of this rank's data that other processes took */
    uint64_t received; /* bytes of other processes' data this rank took */
} shmesh_traffic;

/* Local.  Fills *traffic; SHMESH_ERR_INVALID for a NULL argument.  Calls
 * still queued or running (async) are counted once they finish. */
SHMESH_API int shmesh_traffic_get(const shmesh_ctx *ctx, shmesh_traffic *traffic);
/* Local.  The same, for the bytes that crossed between nodes (a job of
 * several nodes, docs/multinode.md): `bytes` as shmesh_traffic_get gives,
 * `sent` and `received` the calls' data this rank sent to ranks on other
 * nodes and received from them (0 in a job of one node).  A subset of
 * shmesh_traffic_get's, which counts every byte between processes. */
SHMESH_API int shmesh_traffic_nodes_get(const shmesh_ctx *ctx, shmesh_traffic *traffic);
/* Local.  The GPU stream (a cudaStream_t or hipStream_t; NULL: the
 * runtime's default stream) that later calls on device buffers order with
 * (see above).  SHMESH_ERR_INVALID without a GPU runtime. */
SHMESH_API int shmesh_set_stream(shmesh_ctx *ctx, void *stream);
/* Local.  bytes of memory on `device` (this process's numbering: 0 is the
 * first device it sees), as the runtime's own allocator gives it (for
 * programs that have no other use for the runtime: tests, benchmarks,
 * bindings).  Free with shmesh_device_free. */
SHMESH_API int shmesh_device_alloc(shmesh_ctx *ctx, int device, size_t bytes, void **ptr);
SHMESH_API int shmesh_device_free(shmesh_ctx *ctx, void *ptr);
/* Local.  Copies bytes between any two of host and device memory, on the
 * context's GPU stream, and waits for the copy. */
SHMESH_API int shmesh_device_copy(shmesh_ctx *ctx, void *dst, const void *src, size_t bytes);

/* "invalid argument", … for a SHMESH_ERR_* code; "success" for 0. */
SHMESH_API const char *shmesh_strerror(int err);
/* "SHMESH_ERR_INVALID", … ; "SHMESH_OK" for 0. */
SHMESH_API const char *shmesh_error_name(int err);
/* The sentence explaining this context's most recent failure ("" if none);
 * on a thread refused because another was inside with ctx, why it was.
 * With NULL: the last shmesh_init or shmesh_finalize failure on the calling
 * thread, or a token refused because its context was finalized.  A
 * poisoned context's sentence stays first: a later failure (a local
 * refusal) is appended to it. */
SHMESH_API const char *shmesh_last_error(const shmesh_ctx *ctx);

/* ---- The ops (introspection) ------------------------------------------
 * Every call shmesh makes between ranks, as the library's op table
 * (shm/optable.h) lists them: for bindings, benchmarks and tools that
 * must know the same list (the Python package and shmesh-bench take theirs
 * from here or from the same table).  Local, need no context, and may be
 * called before shmesh_init. */

/* Who takes part: every rank of the job, or a mesh's named axes. */
typedef enum { SHMESH_OP_WORLD = 0, SHMESH_OP_MESH = 1 } shmesh_op_scope;

/* shmesh-bench's bus-bandwidth factor (nccl-tests' busbw = algbw x factor,
 * n ranks): NONE not timed by the bench, ZERO 0 (no data), ALLREDUCE
 * 2(n-1)/n, SPREAD (n-1)/n, ONE 1. */
typedef enum {
    SHMESH_OP_BUS_NONE = 0,
    SHMESH_OP_BUS_ZERO = 1,
    SHMESH_OP_BUS_ALLREDUCE = 2,
    SHMESH_OP_BUS_SPREAD = 3,
    SHMESH_OP_BUS_ONE = 4,
} shmesh_op_bus;

/* The shape of the op's public function (its _async form takes the same
 * and a shmesh_token *):
 *   INTERNAL    none: a call the library makes on its own (world_gather)
 *   WORLD       a world-wide function with arguments of its own, ctx first
 *               (barrier, world_sum, finalize, mesh_create, ...)
 *   REDUCTION   (mesh, axes, groups, in, out): psum, pmax, ..., pargmin
 *   AXIS_TILED  (mesh, axes, groups, int axis, bool tiled, in, out):
 *               all_gather, psum_scatter
 *   ALL_TO_ALL  (mesh, axes, groups, int split, int concat, bool tiled, in, out)
 *   AXIS        (mesh, axes, groups, int axis, in, out): pswapaxes
 *   RAGGED      (mesh, axes, groups, operand, output, 4 offset/size arrays)
 *   PPERMUTE    (mesh, axes, const int (*pairs)[2], int npairs, in, out)
 *   PSHUFFLE    (mesh, axes, const int *perm, in, out)
 *   PBROADCAST  (mesh, axes, int source, in, out) */
typedef enum {
    SHMESH_OP_SIG_INTERNAL = 0,
    SHMESH_OP_SIG_WORLD,
    SHMESH_OP_SIG_REDUCTION,
    SHMESH_OP_SIG_AXIS_TILED,
    SHMESH_OP_SIG_ALL_TO_ALL,
    SHMESH_OP_SIG_AXIS,
    SHMESH_OP_SIG_RAGGED,
    SHMESH_OP_SIG_PPERMUTE,
    SHMESH_OP_SIG_PSHUFFLE,
    SHMESH_OP_SIG_PBROADCAST,
} shmesh_op_sig;

/* One op.  The library's own (static, never freed); later versions may add
 * fields at the end, so never copy or allocate one by value. */
typedef struct {
    const char *name;      /* "psum": the function is shmesh_psum (sig not INTERNAL) */
    int code;              /* the number status words and trace events carry for it
                              (shmesh-top, shmesh-run --trace): index + 1, 0 is none */
    shmesh_op_scope scope;
    shmesh_op_sig sig;
    bool has_async;        /* shmesh_<name>_async exists */
    bool bool_input;       /* a bool input is accepted */
    shmesh_op_bus bus;
    const char *params;    /* the names of the op's own values in its call description
                              (at most 4), as the table gives them, space-separated:
                              "axis tiled?" ('?' a boolean, a leading '_' hashed but
                              never printed; "" for none) */
} shmesh_op_info;

/* How many ops there are. */
SHMESH_API int shmesh_op_count(void);
/* Op i (0 .. shmesh_op_count() - 1) in the table's order, NULL for any
 * other i. */
SHMESH_API const shmesh_op_info *shmesh_op_get(int i);

/* Any mesh collective of the table through one function, for bindings
 * that would otherwise restate every op's signature and shape rules (the
 * Python package's compiled module does this).  The fields are the
 * arguments of the op's public function; those the op does not take are
 * left zero (or NULL).  Zero-initialize the struct: later versions may add
 * fields at the end, meaning nothing when zero. */
typedef struct {
    int op;                      /* the op's code (shmesh_op_info.code), a mesh op */
    shmesh_mesh *mesh;           /* NULL: the innermost pushed mesh */
    const char *axes;
    const shmesh_groups *groups; /* NULL: none (the only choice for ppermute, pshuffle,
                                    pbroadcast, pargmax and pargmin) */
    int axis;   /* all_gather: axis; psum_scatter: scatter_dimension;
                   all_to_all: split_axis; pswapaxes: axis */
    int axis2;  /* all_to_all: concat_axis */
    bool tiled; /* all_gather, psum_scatter, all_to_all */
    int source; /* pbroadcast */
    const int *perm; /* ppermute: nperm (source, destination) pairs, 2 * nperm ints;
                        pshuffle: nperm entries, which must be the group's size */
    int nperm;
    const shmesh_array *in; /* ragged_all_to_all: the operand */
    shmesh_array *out;      /* ragged_all_to_all: the output */
    const shmesh_array *offsets[4]; /* ragged_all_to_all: input_offsets, send_sizes,
                                       output_offsets, recv_sizes */
} shmesh_op_args;

/* The op's call, exactly as its public function (shmesh_<name>) with
 * token NULL, or as its `_async` form with a token. */
SHMESH_API int shmesh_op_call(const shmesh_op_args *args, shmesh_token *token);
/* What the op's call would write into args->out, for one device: its dtype,
 * ndim and shape into *result (its data and bdim untouched), from the same
 * checks of the mesh, axes, groups, parameters and args->in (whose data is
 * not read) as the call makes, with the same errors; args->out is not
 * read (ragged_all_to_all: it is the result, and is copied).  Nothing is
 * shared with other ranks: this is not a collective, and may be asked
 * on one rank alone.  Integer pmean gives float32, or float64 for 64-bit
 * integers (the call accepts either).  Not on a batched mesh. */
SHMESH_API int shmesh_op_result(const shmesh_op_args *args, shmesh_array *result);

/* Bytes per element; 0 for an unknown dtype. */
SHMESH_API size_t shmesh_dtype_size(shmesh_dtype dtype);
/* "float32", … ; "?" for an unknown dtype. */
SHMESH_API const char *shmesh_dtype_name(shmesh_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
