/* Effects and host callbacks (effect.c). */
#ifndef SHMESH_EFFECTS_EFFECT_H
#define SHMESH_EFFECTS_EFFECT_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"
#include "shmesh.h"

/* Frees the context's effects (when the context goes). */
void effects_free(shmesh_ctx *c);

/* Whether rank r's call number `call` was a collective callback: its
 * description into *d (for a mismatch's message). */
bool effect_call_of(shmesh_ctx *c, int r, uint64_t call, struct call_desc *d);

#endif
