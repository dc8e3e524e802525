/* libshmesh internals shared by lib/ files; never installed. */
#ifndef SHMESH_LIB_INTERNAL_H
#define SHMESH_LIB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "segment.h"
#include "shmesh.h"
#include "wait.h"

#define CTX_ERR_MAX 512

/* What a collective call publishes (struct seg_sig.op). */
enum sig_op {
    SIG_OP_BARRIER = 1,
    SIG_OP_WORLD_SUM = 2,
    SIG_OP_FINALIZE = 3,
};

struct shmesh_ctx {
    int rank;
    int world;
    struct seg *seg;
    struct notify *notify;
    struct seg_waiter waiter;
    struct seg_ctrl *me;
    uint32_t phase;       /* the last phase this rank posted */
    uint64_t calls;       /* collective calls entered, for messages */
    const char *op;       /* the public function being run, for messages */
    int poison;           /* 0, or the error every later call returns */
    const void **srcs;    /* world pointers, scratch for reductions */
    char err[CTX_ERR_MAX];
};

/* error.c */
int ctx_fail(shmesh_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As ctx_fail, and every later call returns `code`. */
int ctx_poison(shmesh_ctx *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void init_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* sync.c: phases.  A phase is one step in which every rank posts its
 * sequence word and waits for every peer's.  Data written to the rank's slot
 * buffer (phase & 1) before sync_phase() is readable by peers after it and
 * stays intact until the phase after next, so no closing barrier is needed. */
/* sync_enter: a poisoned context fails here, before arguments are looked
 * at.  sync_begin: the arguments were accepted; the call counts from now on
 * (a refused call is not made, so it must not shift the call numbers that
 * ranks compare). */
int sync_enter(shmesh_ctx *c, const char *op);
int sync_begin(shmesh_ctx *c);
int sync_phase(shmesh_ctx *c, const struct seg_sig *sig);
static inline int sync_next_parity(const shmesh_ctx *c) { return (int)((c->phase + 1) & 1); }
/* Turns a seg_wait_flag() failure into a poisoned context and its error. */
int sync_wait_failed(shmesh_ctx *c, int rc, int culprit, const char *waiting_for);

/* dtype.c / reduce.c */
bool dtype_valid(shmesh_dtype dt);
void reduce_sum(shmesh_dtype dt, void *dst, const void *const *src, int nsrc, size_t n);

#endif
