/* Element types beyond what the public header says about them. */
#ifndef SHMESH_CORE_DTYPE_H
#define SHMESH_CORE_DTYPE_H

#include <stdbool.h>

#include "shmesh.h"

bool dtype_valid(shmesh_dtype dt);
bool dtype_is_float(shmesh_dtype dt);
bool dtype_is_int(shmesh_dtype dt); /* signed or unsigned integer, not bool */

#endif
