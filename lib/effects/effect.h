/* Effects and host callbacks (effect.c). */
#ifndef SHMESH_EFFECTS_EFFECT_H
#define SHMESH_EFFECTS_EFFECT_H

#include "shmesh.h"

/* Frees the context's effects (when the context goes). */
void effects_free(shmesh_ctx *c);

#endif
