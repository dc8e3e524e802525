/* The staged reduction for large whole-array reductions: reduce-scatter,
 * then all-gather, through the slot buffers. */
#ifndef SHMESH_PATHS_RSAG_H
#define SHMESH_PATHS_RSAG_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_rsag;

#endif
