/* The staged reduction for large whole-array reductions: reduce-scatter,
 * then all-gather, through the slot buffers. */
#ifndef SHMESH_PATHS_RSAG_H
#define SHMESH_PATHS_RSAG_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_rsag;

/* A whole-array reduction among two or more members whose input reaches
 * SHMESH_RSAG_MIN: the size from which reduce-scatter + all-gather moves
 * less memory than a copy of every member's whole input (single copy
 * leaves such calls to it; rsag takes them but empty ones).  From what
 * every member knows alike, as a candidate() is. */
bool rsag_sized(const struct call *k);

#endif
