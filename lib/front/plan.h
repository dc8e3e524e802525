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
 * (front/state.h), one per op, and a context's own.
 *
 * A plan also keeps the calls it ran (plan_run): a repeat runs one of them
 * again, with its own buffers, skipping the preparation, the path's choice
 * and the exchange's plan (engine/call.h: kept calls). */
#ifndef SHMESH_FRONT_PLAN_H
#define SHMESH_FRONT_PLAN_H

#include <stdbool.h>

#include "core/context.h"
#include "engine/call.h"
#include "ops/ops.h"

struct plan;

/* a's op's plan when a repeats it (the same mesh, axes text, shapes,
 * dtypes and op arguments; its buffers pass the checks a full preparation
 * makes), else NULL. */
struct plan *plan_match(const struct op_args *a);
/* a's call, which repeats p, made with p's own call, kept from p's
 * previous run (engine/call.h: call_again): run at once, waited for, or
 * dispatched with `async`'s token; its result in *rc, and true.  False, and
 * nothing done, when that call is in flight still or a's buffers are of
 * another memory kind: prepare a's call from p.  A run on a path that
 * cannot run a call again (engine/path.h) is not kept, and p's later calls
 * are prepared from it. */
bool plan_run(struct plan *p, const struct op_args *a, shmesh_token *async, int *rc);
/* k prepared from p for a's call, which repeats it: 0 or the error of
 * call_init or call_buffers (k needs call_finish either way). */
int plan_prepare(struct call *k, const struct plan *p, const struct op_args *a);
/* After a's call was prepared into k without error: k kept as its op's
 * plan when it may be (else that op's plan is dropped). */
void plan_keep(const struct call *k, const struct op_args *a);
/* The context's plans freed, their kept calls' scratch back in the pool
 * (when the context goes: before call_scratch_free_all). */
void plan_free_all(shmesh_ctx *c);

#endif
