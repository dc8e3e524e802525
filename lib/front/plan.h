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

/* When a repeats its op's plan: k prepared from it (after call_init), its
 * result in *rc, and true; else false, and nothing done. */
bool plan_take(struct call *k, const struct op_args *a, int *rc);
/* For a blocking call: when a repeats its op's plan and the context has no
 * dispatcher, or a quiet one (engine/dispatch.h: dispatch_quiet), the call
 * is made with the plan's own call, kept from the plan's previous run
 * (engine/call.h: call_again): its result in *rc, and true; else false,
 * and nothing done.  A run on a path that cannot run a call again
 * (engine/path.h) is not kept, and the plan then leaves its calls to
 * plan_take. */
bool plan_run(const struct op_args *a, int *rc);
/* After a's call was prepared into k without error: k kept as its op's
 * plan when it may be (else that op's plan is dropped). */
void plan_keep(const struct call *k, const struct op_args *a);
/* The context's plans freed, their kept calls' scratch back in the pool
 * (when the context goes: before call_scratch_free_all). */
void plan_free_all(shmesh_ctx *c);

#endif
