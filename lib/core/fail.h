/* Failure: what becomes of a failed wait (abort, a peer's death, a peer that
 * finalized, a timeout) and of ranks that made different calls.  Each
 * poisons the context with a sentence; job-wide failures are also written
 * into the segment's abort record so every rank learns of them. */
#ifndef SHMESH_CORE_FAIL_H
#define SHMESH_CORE_FAIL_H

#include <stdint.h>

#include "shmesh.h"

/* The job was aborted (the segment's abort record): call `seq` of `op`
 * fails with the record's explanation.  0 when it was not. */
int fail_if_aborted(shmesh_ctx *c, const char *op, uint64_t seq);
/* A value read from the segment during call `seq` of `op` cannot be right:
 * rank `culprit` (-1: no rank in particular) cannot have written it, so
 * something else wrote into the segment.  fmt says what was read.  The
 * context is poisoned (SHMESH_ERR_BAD_SEGMENT) and the job told, so every
 * rank fails alike; returns SHMESH_ERR_BAD_SEGMENT. */
int fail_corrupt(shmesh_ctx *c, const char *op, uint64_t seq, int culprit, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* This rank cannot go on with the call it is in (its GPU runtime failed,
 * or memory ran out in the middle): its peers would wait for it in vain.
 * The context is poisoned with `code` and the sentence, and the job told
 * (as by shmesh_abort), so every rank fails instead of hanging; returns
 * code. */
int fail_job(shmesh_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* This rank leaves call `seq` of `op` with error `rc` (a failed wait, a
 * mismatch: the context is poisoned already) while its peers may still read
 * or write its buffers in place (single copy, zero copy, device IPC): the
 * job is told, with the context's sentence, before the caller gets its
 * buffers back, so that a peer checking the abort record after its reads
 * (fail_if_aborted) does not trust what it read.  Returns rc. */
int fail_left_in_place(shmesh_ctx *c, int rc);
/* Turns a seg_wait_*() failure during call `seq` of `op` into a poisoned
 * context and its error. */
int fail_wait(shmesh_ctx *c, const char *op, uint64_t seq, int rc, int culprit,
              const char *waiting_for);

#endif
