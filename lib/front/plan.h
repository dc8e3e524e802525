/* Plans: a call that repeats the last one of its op on the same mesh (the
 * same axes, shapes, dtypes and op arguments; other buffers allowed) is
 * prepared from that one's prepared call, its plan, instead of again from
 * its arguments: a loop of small calls spends about a fifth of its
 * instructions preparing each call (docs/performance.md).
 *
 * A plan is kept only for a call whose preparation depends on nothing but
 * what the plan compares (the op table's signature says which ops:
 * reductions, gathers, scatters, all_to_all, pswapaxes, pbroadcast), with
 * one device of the mesh here, no axis_index_groups, host memory and no
 * op state; the buffers' own checks (NULL data, overlap) and their memory
 * kinds are made again for every call.  The plans are the front door's
 * (front/state.h), one per op, and a context's own. */
#ifndef SHMESH_FRONT_PLAN_H
#define SHMESH_FRONT_PLAN_H

#include <stdbool.h>

#include "core/context.h"
#include "engine/call.h"
#include "ops/ops.h"

/* What a call made of its op's plan (plan_take). */
enum plan_use {
    PLAN_NONE,  /* it does not repeat the plan: nothing done */
    PLAN_TAKEN, /* k prepared from the plan (after call_init), its result in *rc */
    PLAN_RAN,   /* made with the plan's kept call, its result in *rc (k untouched) */
};
/* When a repeats its op's plan: for a blocking call, on a context with no
 * dispatcher or a quiet one (engine/dispatch.h: dispatch_quiet), the call
 * is made with the plan's own call, kept from the plan's previous run
 * (engine/call.h: call_again); else k is prepared from the plan.  A run on
 * a path that cannot run a call again (engine/path.h) is not kept, and the
 * plan's later calls are prepared from it. */
enum plan_use plan_take(struct call *k, const struct op_args *a, bool blocking, int *rc);
/* After a's call was prepared into k without error: k kept as its op's
 * plan when it may be (else that op's plan is dropped). */
void plan_keep(const struct call *k, const struct op_args *a);
/* The context's plans freed, their kept calls' scratch back in the pool
 * (when the context goes: before call_scratch_free_all). */
void plan_free_all(shmesh_ctx *c);

#endif
