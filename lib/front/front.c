/* The front door: every public op function, one line each, and the one path
 * they all take (op_call).
 *
 * A public function fills a struct op_args (ops/ops.h) and calls op_call
 * with its token: NULL for the blocking form, where the token goes for the
 * `_async` form.  op_call decides, from explicit arguments only:
 *   - a batched mesh: the batched-axis layer (batch/batch.h) cuts the call
 *     into its positions' call, which it runs through op_positions;
 *   - several devices of the mesh here: a call per local device, finished
 *     together (front/local_devices.h);
 *   - otherwise one call.
 * Each call is prepared by the op's prepare function (the op table's
 * `prepare` column) and finished by the engine (engine/call.h), which runs
 * it on this thread, or on the dispatcher when there is one or the form is
 * `_async` (engine/dispatch.h). */
#include <stdbool.h>
#include <stddef.h>

#include "batch/batch.h"
#include "core/context.h"
#include "engine/call.h"
#include "front/local_devices.h"
#include "front/plan.h"
#include "mesh/mesh.h"
#include "ops/ops.h"
#include "shmesh.h"

/* Rows without a public function (prepare `none`) are never asked for. */
static int op_none_prepare(struct call *k, const struct op_args *a, int l)
{
    (void)k, (void)a, (void)l;
    return SHMESH_ERR_INVALID;
}

/* The op table's prepare column, by op: a switch the compiler folds into a
 * direct call (inlined where it pays) in each public function, whose op is
 * a constant. */
static inline __attribute__((always_inline)) int prepare(struct call *k, const struct op_args *a,
                                                         int l)
{
    switch (a->op) {
#define PREPARE_CASE(ID, name, scope, bus, bool_in, params, prepare, ...)                      \
    case OP_##ID:                                                                              \
        return op_##prepare##_prepare(k, a, l);
        SHMESH_OPS(PREPARE_CASE)
    default:
        return SHMESH_ERR_INVALID;
    }
}

enum { SCOPE_WORLD, SCOPE_MESH };
static const unsigned char scope_of[OP_COUNT] = {
#define SCOPE_OF(ID, name, scope, ...) [OP_##ID] = SCOPE_##scope,
    SHMESH_OPS(SCOPE_OF)
#undef SCOPE_OF
};

/* A call per local device of a->m, prepared in mesh order (mesh_select
 * points group resolution at that device) and finished together. */
static __attribute__((noinline)) int devices_call(struct op_args *a, shmesh_token *async)
{
    shmesh_mesh *m = a->m;
    struct call *ks = devices_calls(m);
    int n = ks ? m->nlocal : 0, rc = ks ? 0 : SHMESH_ERR_NOMEM, prepared = 0;
    for (int l = 0; l < n && !rc; l++, prepared++) {
        mesh_select(m, l);
        rc = prepare(ks + l, a, l);
    }
    return devices_finish(m, a->gs, ks, prepared, rc, async);
}

/* op_call without the batched-axis layer.  Inlined into every public
 * function: with the op a constant, the table lookups fold into a direct
 * call of its prepare function. */
static inline __attribute__((always_inline)) int run(struct op_args *a, shmesh_token *async)
{
    if (scope_of[a->op] == SCOPE_MESH && mesh_calls_per_device(a->m))
        return devices_call(a, async);
    struct call k;
    int rc;
    if (plan_take(&k, a, &rc)) /* a repeat of its op's last call (front/plan.h) */
        return call_finish_async(&k, rc, async);
    if (!(rc = prepare(&k, a, 0)))
        plan_keep(&k, a);
    return call_finish_async(&k, rc, async);
}

/* The batched-axis layer's way back in, for the positions' call. */
static int op_positions(struct op_args *a) { return run(a, NULL); }

static inline __attribute__((always_inline)) int op_call(struct op_args *a, shmesh_token *async)
{
    if (scope_of[a->op] == SCOPE_MESH) {
        if (!a->m) /* the innermost pushed mesh, looked up once */
            a->m = shmesh_mesh_current();
        if (a->m && a->m->batch_dim >= 0)
            return batch_run(a, async, op_positions);
    }
    return run(a, async);
}

/* The `_async` forms: the token is written when the work is dispatched
 * ({NULL, 0}, a token that is done, when it is refused or runs at once). */
static inline __attribute__((always_inline)) int op_call_async(struct op_args *a,
                                                               shmesh_token *token)
{
    shmesh_token spare;
    shmesh_token *t = token ? token : &spare;
    *t = (shmesh_token){NULL, 0};
    return op_call(a, t);
}

/* ---- world-wide ops ---- */

int shmesh_barrier(shmesh_ctx *c) { return op_call(&(struct op_args){.op = OP_BARRIER, .c = c}, NULL); }

int shmesh_barrier_async(shmesh_ctx *c, shmesh_token *t)
{
    return op_call_async(&(struct op_args){.op = OP_BARRIER, .c = c}, t);
}

int shmesh_world_sum(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype)
{
    return op_call(&(struct op_args){.op = OP_WORLD_SUM, .c = c, .buf = buf, .count = count,
                                    .dtype = dtype},
                   NULL);
}

int shmesh_world_sum_async(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype,
                           shmesh_token *t)
{
    return op_call_async(&(struct op_args){.op = OP_WORLD_SUM, .c = c, .buf = buf,
                                          .count = count, .dtype = dtype},
                         t);
}

/* ---- reductions ---- */

#define REDUCE_ARGS(OP) (struct op_args){.op = OP, .m = m, .axes = axes, .gs = gs, .in = in, .out = out}

int shmesh_psum(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, const shmesh_array *in,
                shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PSUM), NULL);
}

int shmesh_pmax(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, const shmesh_array *in,
                shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PMAX), NULL);
}

int shmesh_pmin(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, const shmesh_array *in,
                shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PMIN), NULL);
}

int shmesh_pmean(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                 const shmesh_array *in, shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PMEAN), NULL);
}

int shmesh_pargmax(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                   const shmesh_array *in, shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PARGMAX), NULL);
}

int shmesh_pargmin(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                   const shmesh_array *in, shmesh_array *out)
{
    return op_call(&REDUCE_ARGS(OP_PARGMIN), NULL);
}

int shmesh_psum_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                      const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PSUM), t);
}

int shmesh_pmax_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                      const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PMAX), t);
}

int shmesh_pmin_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                      const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PMIN), t);
}

int shmesh_pmean_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                       const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PMEAN), t);
}

int shmesh_pargmax_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                         const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PARGMAX), t);
}

int shmesh_pargmin_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                         const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&REDUCE_ARGS(OP_PARGMIN), t);
}

/* ---- gathers, scatters, all-to-alls ---- */

#define ALL_GATHER_ARGS                                                                        \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_ALL_GATHER, .m = m, .axes = axes, .gs = gs, .axis = axis, .tiled = tiled,     \
        .in = in, .out = out                                                                   \
    }

int shmesh_all_gather(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                      bool tiled, const shmesh_array *in, shmesh_array *out)
{
    return op_call(&ALL_GATHER_ARGS, NULL);
}

int shmesh_all_gather_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                            bool tiled, const shmesh_array *in, shmesh_array *out,
                            shmesh_token *t)
{
    return op_call_async(&ALL_GATHER_ARGS, t);
}

#define PSUM_SCATTER_ARGS                                                                      \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_PSUM_SCATTER, .m = m, .axes = axes, .gs = gs, .axis = scatter_dimension,      \
        .tiled = tiled, .in = in, .out = out                                                   \
    }

int shmesh_psum_scatter(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                        int scatter_dimension, bool tiled, const shmesh_array *in,
                        shmesh_array *out)
{
    return op_call(&PSUM_SCATTER_ARGS, NULL);
}

int shmesh_psum_scatter_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                              int scatter_dimension, bool tiled, const shmesh_array *in,
                              shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&PSUM_SCATTER_ARGS, t);
}

#define ALL_TO_ALL_ARGS                                                                        \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_ALL_TO_ALL, .m = m, .axes = axes, .gs = gs, .axis = split_axis,               \
        .axis2 = concat_axis, .tiled = tiled, .in = in, .out = out                             \
    }

int shmesh_all_to_all(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int split_axis,
                      int concat_axis, bool tiled, const shmesh_array *in, shmesh_array *out)
{
    return op_call(&ALL_TO_ALL_ARGS, NULL);
}

int shmesh_all_to_all_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                            int split_axis, int concat_axis, bool tiled, const shmesh_array *in,
                            shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&ALL_TO_ALL_ARGS, t);
}

/* pswapaxes is all_to_all with split = concat = axis, untiled. */
#define PSWAPAXES_ARGS                                                                         \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_PSWAPAXES, .m = m, .axes = axes, .gs = gs, .axis = axis, .axis2 = axis,       \
        .in = in, .out = out                                                                   \
    }

int shmesh_pswapaxes(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                     const shmesh_array *in, shmesh_array *out)
{
    return op_call(&PSWAPAXES_ARGS, NULL);
}

int shmesh_pswapaxes_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                           const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&PSWAPAXES_ARGS, t);
}

#define RAGGED_ARGS                                                                            \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_RAGGED_ALL_TO_ALL, .m = m, .axes = axes, .gs = gs, .in = operand,             \
        .out = output,                                                                         \
        .offsets = {input_offsets, send_sizes, output_offsets, recv_sizes}                     \
    }

int shmesh_ragged_all_to_all(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                             const shmesh_array *operand, shmesh_array *output,
                             const shmesh_array *input_offsets, const shmesh_array *send_sizes,
                             const shmesh_array *output_offsets, const shmesh_array *recv_sizes)
{
    return op_call(&RAGGED_ARGS, NULL);
}

int shmesh_ragged_all_to_all_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                                   const shmesh_array *operand, shmesh_array *output,
                                   const shmesh_array *input_offsets,
                                   const shmesh_array *send_sizes,
                                   const shmesh_array *output_offsets,
                                   const shmesh_array *recv_sizes, shmesh_token *t)
{
    return op_call_async(&RAGGED_ARGS, t);
}

/* ---- permutations and broadcast ---- */

#define PPERMUTE_ARGS                                                                          \
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_PPERMUTE, .m = m, .axes = axes, .perm = perm, .npairs = npairs, .in = in,     \
        .out = out                                                                             \
    }

int shmesh_ppermute(shmesh_mesh *m, const char *axes, const int (*perm)[2], int npairs,
                    const shmesh_array *in, shmesh_array *out)
{
    return op_call(&PPERMUTE_ARGS, NULL);
}

int shmesh_ppermute_async(shmesh_mesh *m, const char *axes, const int (*perm)[2], int npairs,
                          const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&PPERMUTE_ARGS, t);
}

#define PSHUFFLE_ARGS                                                                          \
    (struct op_args) { .op = OP_PSHUFFLE, .m = m, .axes = axes, .shuffle = perm, .in = in, .out = out }

int shmesh_pshuffle(shmesh_mesh *m, const char *axes, const int *perm, const shmesh_array *in,
                    shmesh_array *out)
{
    return op_call(&PSHUFFLE_ARGS, NULL);
}

int shmesh_pshuffle_async(shmesh_mesh *m, const char *axes, const int *perm,
                          const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&PSHUFFLE_ARGS, t);
}

#define PBROADCAST_ARGS                                                                        \
    (struct op_args) { .op = OP_PBROADCAST, .m = m, .axes = axes, .source = source, .in = in, .out = out }

int shmesh_pbroadcast(shmesh_mesh *m, const char *axes, int source, const shmesh_array *in,
                      shmesh_array *out)
{
    return op_call(&PBROADCAST_ARGS, NULL);
}

int shmesh_pbroadcast_async(shmesh_mesh *m, const char *axes, int source,
                            const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    return op_call_async(&PBROADCAST_ARGS, t);
}
