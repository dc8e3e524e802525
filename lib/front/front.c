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
#include <string.h>

#include "batch/batch.h"
#include "core/context.h"
#include "engine/call.h"
#include "front/local_devices.h"
#include "front/plan.h"
#include "mesh/mesh.h"
#include "ops/args.h"
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
    /* A repeat of its op's last call runs the plan's kept call, or is
     * prepared from the plan (front/plan.h). */
    struct plan *p = plan_match(a);
    int rc;
    if (p && plan_run(p, a, async, &rc))
        return rc;
    /* An `_async` form's call is prepared where the dispatcher keeps it. */
    struct call here, *k = &here;
    if (async && !(k = call_block_take(scope_of[a->op] == SCOPE_MESH ? (a->m ? a->m->ctx : NULL)
                                                                     : a->c)))
        k = &here;
    if (p)
        rc = plan_prepare(k, p, a);
    else if (!(rc = prepare(k, a, 0)))
        plan_keep(k, a);
    return k == &here ? call_finish_async(k, rc, async) : call_finish_block(k, rc, async);
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
    (struct op_args)                                                                           \
    {                                                                                          \
        .op = OP_PSHUFFLE, .m = m, .axes = axes, .shuffle = perm, .nshuffle = -1, .in = in,    \
        .out = out                                                                             \
    }

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

/* ---- any mesh op through one function (bindings) ---- */

/* The mesh ops with a public function, by code: the op table's mesh scope
 * less its internal rows. */
#define SIG_PUBLIC_INTERNAL 0
#define SIG_PUBLIC_WORLD 0
#define SIG_PUBLIC_REDUCTION 1
#define SIG_PUBLIC_AXIS_TILED 1
#define SIG_PUBLIC_ALL_TO_ALL 1
#define SIG_PUBLIC_AXIS 1
#define SIG_PUBLIC_RAGGED 1
#define SIG_PUBLIC_PPERMUTE 1
#define SIG_PUBLIC_PSHUFFLE 1
#define SIG_PUBLIC_PBROADCAST 1
static const bool mesh_public[OP_COUNT] = {
#define MESH_PUBLIC(ID, name, scope, bus, bool_in, params, prepare, batch, async, sig)         \
    [OP_##ID] = SCOPE_##scope == SCOPE_MESH && SIG_PUBLIC_##sig,
    SHMESH_OPS(MESH_PUBLIC)
#undef MESH_PUBLIC
};

/* The front door's record of p, or SHMESH_ERR_INVALID explained (naming fn)
 * for an op that is no public mesh op, or groups an op does not take. */
static int args_of(const shmesh_op_args *p, struct op_args *a, const char *fn)
{
    if (!p) {
        init_error("%s: args must not be NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    int op = p->op;
    bool known = op > 0 && op < OP_COUNT && mesh_public[op];
    /* No mesh is explained as the op's own function would. */
    shmesh_mesh *m = mesh_or_current(p->mesh, known ? op_name((enum call_op)op) : fn);
    if (!m)
        return SHMESH_ERR_INVALID; /* explained */
    if (!known)
        return mesh_fail(m, "%s: op %d is not the code of a collective over a mesh (the op "
                            "table's mesh ops: shmesh_op_get)", fn, op);
    *a = (struct op_args){.op = (enum call_op)op, .m = m, .axes = p->axes, .gs = p->groups,
                          .axis = p->axis, .axis2 = p->axis2, .tiled = p->tiled, .in = p->in,
                          .out = p->out};
    switch (a->op) {
    case OP_PSWAPAXES: /* all_to_all with split = concat = axis, untiled */
        a->axis2 = p->axis;
        a->tiled = false;
        break;
    case OP_PPERMUTE:
        a->perm = (const int(*)[2])p->perm;
        a->npairs = p->nperm;
        break;
    case OP_PSHUFFLE:
        a->shuffle = p->perm;
        a->nshuffle = p->nperm;
        break;
    case OP_PBROADCAST:
        a->source = p->source;
        break;
    case OP_RAGGED_ALL_TO_ALL:
        for (int i = 0; i < 4; i++)
            a->offsets[i] = p->offsets[i];
        break;
    default:
        break;
    }
    if (p->groups && (a->op == OP_PPERMUTE || a->op == OP_PSHUFFLE || a->op == OP_PBROADCAST))
        return mesh_fail(m, "%s: %s takes no axis_index_groups (JAX's has none): pass NULL", fn,
                         op_name(a->op));
    return 0;
}

int shmesh_op_call(const shmesh_op_args *p, shmesh_token *token)
{
    struct op_args a;
    int rc = args_of(p, &a, "shmesh_op_call");
    if (token)
        *token = (shmesh_token){NULL, 0};
    if (rc)
        return rc;
    return token ? op_call_async(&a, token) : op_call(&a, NULL);
}

int shmesh_op_result(const shmesh_op_args *p, shmesh_array *result)
{
    struct op_args a;
    int rc = args_of(p, &a, "shmesh_op_result");
    if (rc)
        return rc;
    shmesh_mesh *m = a.m;
    if (!result)
        return mesh_fail(m, "shmesh_op_result: result must not be NULL");
    if ((rc = mesh_unbatched(m, "shmesh_op_result", "results' shapes")))
        return rc;
    if (a.op == OP_RAGGED_ALL_TO_ALL) { /* the output, rows written into it */
        if (!a.out)
            return mesh_fail(m, "shmesh_op_result: ragged_all_to_all's output must not be NULL");
        result->dtype = a.out->dtype;
        result->ndim = a.out->ndim;
        memcpy(result->shape, a.out->shape, sizeof result->shape);
        return 0;
    }
    /* The call's preparation for the first local device, up to the check of
     * its output, which answers instead (op_query, ops/args.h). */
    shmesh_array q = {.data = NULL};
    a.out = &q;
    if (mesh_calls_per_device(m))
        mesh_select(m, 0);
    struct call k;
    op_query = &q;
    rc = prepare(&k, &a, 0);
    op_query = NULL;
    call_finish(&k, rc ? rc : SHMESH_ERR_INVALID); /* released: nothing run */
    if (rc != OP_QUERIED)
        return rc ? rc : mesh_fail(m, "shmesh_op_result: %s's preparation never asked for its "
                                      "output", op_name(a.op));
    result->dtype = q.dtype;
    result->ndim = q.ndim;
    memcpy(result->shape, q.shape, sizeof *q.shape * (size_t)q.ndim);
    return 0;
}
