/* The entries of the path table (engine/path.h), one per file here. */
#ifndef SHMESH_PATHS_PATHS_H
#define SHMESH_PATHS_PATHS_H

#include "engine/path.h"

extern const struct path path_zero_copy;   /* paths/zero_copy.c */
extern const struct path path_single_copy; /* paths/single_copy.c */
extern const struct path path_rsag;        /* paths/rsag.c */
extern const struct path path_staged;      /* paths/staged.c */

#endif
