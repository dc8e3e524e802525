/* Zero copy: every member's buffers in the shared heap, read (and for
 * reductions written) in place. */
#ifndef SHMESH_PATHS_ZERO_COPY_H
#define SHMESH_PATHS_ZERO_COPY_H

#include "engine/path.h"

/* The path table's entry (engine/path.c). */
extern const struct path path_zero_copy;

#endif
