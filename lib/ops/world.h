/* World-wide calls: every rank of the job, no mesh. */
#ifndef SHMESH_OPS_WORLD_H
#define SHMESH_OPS_WORLD_H

#include "ops/op.h"
#include "shmesh.h"

/* One world-wide step with no data (barrier, finalize, mesh creation). */
int world_step(shmesh_ctx *c, enum call_op op);

#endif
