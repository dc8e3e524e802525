/* Element types beyond what the public header says about them. */
#ifndef SHMESH_CORE_DTYPE_H
#define SHMESH_CORE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

#include "shmesh.h"

bool dtype_valid(shmesh_dtype dt);
/* Bytes per element, as shmesh_dtype_size() but without a call (0 for an
 * invalid dtype). */
extern const unsigned char dtype_sizes[SHMESH_DTYPE_COUNT];
static inline size_t dtype_size(shmesh_dtype dt)
{
    return (unsigned)dt < SHMESH_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}
bool dtype_is_float(shmesh_dtype dt);
bool dtype_is_int(shmesh_dtype dt); /* signed or unsigned integer, not bool */

#endif
