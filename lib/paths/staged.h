/* Staged: every member's transfer through the slot buffers (engine/exchange.c),
 * one window at a time; always a candidate. */
#ifndef SHMESH_PATHS_STAGED_H
#define SHMESH_PATHS_STAGED_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_staged;

#endif
