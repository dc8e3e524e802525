/* The op table: every call shmesh makes between ranks, one line each.
 * Data only (no includes, no declarations), so that the library, the bench
 * (tools/) and the tests' reference model all expand the same list.
 *
 * X(ID, name, scope, bus, bool_in, params, prepare, batch, async, sig)
 *   ID       the enum constant is OP_<ID>
 *   name     the public function is shmesh_<name>; also the name the bench's
 *            -o option and the golden files use
 *   scope    WORLD: every rank of the job, no mesh; MESH: a mesh's named axes
 *   bus      shmesh-bench's bus-bandwidth factor (nccl-tests): ALLREDUCE
 *            2(n-1)/n, SPREAD (n-1)/n, ONE 1, ZERO 0 (no data); NONE: not
 *            timed by the bench
 *   bool_in  whether a bool input is accepted
 *   params   the op's own values in its call description (param[0..3]),
 *            space-separated: what call_hash covers beyond shapes, axes and
 *            groups, and what call_describe prints ("axis=0, tiled=true");
 *            a name ending in '?' is a boolean, one starting with '_' is
 *            hashed but not printed
 *   prepare  the op's prepare function, op_<prepare>_prepare (ops/front.h),
 *            which the front door (ops/front.c) calls for every public call;
 *            none: a call its own layer makes (finalize, mesh creation,
 *            global arrays, effects), with no public op function
 *   batch    its rule on a batched mesh (batch/batch.c, enum batch_rule):
 *            NONE: not on batched meshes; REDUCE: every member gets the same
 *            result; SUM: the same, and a not-mapped operand counts B times;
 *            GATHER, SCATTER, ALL_TO_ALL: where the seed puts the batch
 *            dimension differs (all_to_all's rule covers pswapaxes);
 *            PERMUTE, SHUFFLE, BROADCAST: the permutations' rules
 *   async    1: it has an `_async` form, shmesh_<name>_async
 *   sig      the shape of its public function (shmesh_op_sig in shmesh.h:
 *            WORLD, REDUCTION, AXIS_TILED, ALL_TO_ALL, AXIS, RAGGED,
 *            PPERMUTE, PSHUFFLE, PBROADCAST; INTERNAL: none)
 *
 * Consumers expand only the columns they need and take the rest as `...`,
 * so that a column added here changes no consumer.  docs/internals.md ("How
 * to add an op") lists every place a new op touches. */
#define SHMESH_OPS(X)                                                                       \
    X(BARRIER, barrier, WORLD, ZERO, 1, "", barrier, NONE, 1, WORLD)                       \
    X(WORLD_SUM, world_sum, WORLD, ALLREDUCE, 0, "count", world_sum, NONE, 1, WORLD)       \
    X(FINALIZE, finalize, WORLD, NONE, 1, "", none, NONE, 0, WORLD)                        \
    X(MESH_CREATE, mesh_create, WORLD, NONE, 1, "", none, NONE, 0, WORLD)                  \
    X(WORLD_GATHER, world_gather, WORLD, NONE, 1, "bytes", none, NONE, 0, INTERNAL)        \
    X(WORLD_BROADCAST, world_broadcast, WORLD, NONE, 1, "bytes root", none, NONE, 0, INTERNAL) \
    X(GLOBAL_ARRAY_GATHER, global_array_gather, WORLD, NONE, 1, "bytes root", none, NONE, 0, WORLD) \
    X(GLOBAL_ARRAY_SCATTER, global_array_scatter, WORLD, NONE, 1, "bytes root", none, NONE, 0, WORLD) \
    X(GLOBAL_ARRAY_RESHARD, global_array_reshard, WORLD, NONE, 1, "bytes _root to_mesh", none, NONE, 0, WORLD) \
    X(EFFECT_CREATE, effect_create, WORLD, NONE, 1, "kind", none, NONE, 0, WORLD)          \
    X(CALLBACK, callback, WORLD, NONE, 1, "point placement _kind", none, NONE, 0, WORLD)   \
    X(PSUM, psum, MESH, ALLREDUCE, 1, "", reduce, SUM, 1, REDUCTION)                       \
    X(PMAX, pmax, MESH, ALLREDUCE, 1, "", reduce, REDUCE, 1, REDUCTION)                    \
    X(PMIN, pmin, MESH, ALLREDUCE, 1, "", reduce, REDUCE, 1, REDUCTION)                    \
    X(PMEAN, pmean, MESH, NONE, 1, "", reduce, SUM, 1, REDUCTION)                          \
    X(PARGMAX, pargmax, MESH, NONE, 1, "", reduce, REDUCE, 1, REDUCTION)                   \
    X(PARGMIN, pargmin, MESH, NONE, 1, "", reduce, REDUCE, 1, REDUCTION)                   \
    X(ALL_GATHER, all_gather, MESH, SPREAD, 1, "axis tiled?", all_gather, GATHER, 1, AXIS_TILED) \
    X(PSUM_SCATTER, psum_scatter, MESH, SPREAD, 0, "scatter_dimension tiled?", psum_scatter, SCATTER, 1, AXIS_TILED) \
    X(ALL_TO_ALL, all_to_all, MESH, SPREAD, 1, "split_axis concat_axis tiled?", all_to_all, ALL_TO_ALL, 1, ALL_TO_ALL) \
    X(PSWAPAXES, pswapaxes, MESH, NONE, 1, "axis", all_to_all, ALL_TO_ALL, 1, AXIS)        \
    X(RAGGED_ALL_TO_ALL, ragged_all_to_all, MESH, SPREAD, 1, "entries _index_dtypes", ragged_all_to_all, NONE, 1, RAGGED) \
    X(PPERMUTE, ppermute, MESH, ONE, 1, "pairs", ppermute, PERMUTE, 1, PPERMUTE)           \
    X(PSHUFFLE, pshuffle, MESH, NONE, 1, "", pshuffle, SHUFFLE, 1, PSHUFFLE)               \
    X(PBROADCAST, pbroadcast, MESH, ONE, 1, "source", pbroadcast, BROADCAST, 1, PBROADCAST)
