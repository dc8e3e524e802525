/* Failure: what becomes of a failed wait (abort, a peer's death, a peer that
 * finalized, a timeout) and of ranks that made different calls.  Each turns
 * into a poisoned context with a sentence; job-wide failures are also
 * written into the segment's abort record so every rank learns of them. */
#ifndef SHMESH_CORE_FAIL_H
#define SHMESH_CORE_FAIL_H

#include "ops/op.h"
#include "shmesh.h"

/* Entering a call: a NULL or poisoned context fails here, before the
 * arguments are looked at. */
int sync_enter(shmesh_ctx *c, const char *op);
/* The arguments were accepted: the call counts from now on (a refused call
 * is not made, so it must not shift the call numbers ranks compare). */
int sync_begin(shmesh_ctx *c);
/* Turns a seg_wait_*() failure into a poisoned context and its error. */
int sync_wait_failed(shmesh_ctx *c, int rc, int culprit, const char *waiting_for);
/* Both calls explained, the context poisoned, and the job told: every rank
 * returns SHMESH_ERR_MISMATCH from its next wait or call. */
int sync_mismatch(shmesh_ctx *c, const struct call_desc *mine, int other_rank,
                  const struct call_desc *theirs);

#endif
