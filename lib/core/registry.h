/* The process's live contexts, between shmesh_init and shmesh_finalize.
 * A token is a value that may outlive its context: it finds its context
 * here, never by following its pointer first.  A fork child's copies of
 * them are marked as its parent's, so that every call there is refused. */
#ifndef SHMESH_CORE_REGISTRY_H
#define SHMESH_CORE_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "shmesh.h"

/* Registers c (the end of shmesh_init) and sets c->seq_base: past every
 * dispatch position a context of this process finalized before handed out,
 * so an old token is never taken for one of c's, even where c sits at the
 * old context's address.  The first registration installs the fork
 * handler.  0, or SHMESH_ERR_SYSTEM when it could not be installed. */
int registry_add(shmesh_ctx *c);
/* Unregisters c (shmesh_finalize, before c is released), whose dispatcher
 * handed out positions up to `last`. */
void registry_remove(shmesh_ctx *c, uint64_t last);
/* Whether p is a live context of this process. */
bool registry_live(const shmesh_ctx *p);
/* The live context token t names in *out (0), or SHMESH_ERR_INVALID: its
 * context was finalized (explained by shmesh_last_error(NULL)), or it is
 * the copy a fork child has of its parent's (explained by the context's
 * shmesh_last_error).  `fn` names the function in the message.  A done
 * token ({NULL, 0} or position 0) gives NULL and 0. */
int registry_token(const shmesh_token *t, const char *fn, shmesh_ctx **out);

#endif
