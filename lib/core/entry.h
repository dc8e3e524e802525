/* Entering the library: whether the calling thread may use a context now.
 * A context is used by one thread at a time, not from a host callback of
 * its own work, and only by the process that made it (not a fork child). */
#ifndef SHMESH_CORE_ENTRY_H
#define SHMESH_CORE_ENTRY_H

#include "shmesh.h"

/* Entering a public function: a NULL or poisoned context, one another
 * thread is inside, or one this process has from its parent (a fork
 * child), fails here, before the arguments are looked at.  `op` names the
 * function in the message.  On success the calling thread is inside until
 * ctx_leave(). */
int ctx_enter(shmesh_ctx *c, const char *op);
void ctx_leave(shmesh_ctx *c);
/* ctx_enter's checks, for a function that enters through a call later. */
int ctx_check(shmesh_ctx *c, const char *op);
/* A call `op` in a fork child on its parent's context (ctx->busy is
 * CTX_BUSY_FORKED): refused, explained; returns SHMESH_ERR_INVALID. */
int fail_forked(shmesh_ctx *c, const char *op);
/* In a fork child: the calling thread's cached id is the parent's. */
void ctx_thread_forked(void);
/* ctx_enter for a rank-local function that works on a poisoned context too
 * (the heap): NULL, other threads and fork children only. */
int ctx_enter_local(shmesh_ctx *c, const char *op);

#endif
