/* enum shmesh_dtype's names ("float32"), as shmesh_dtype_name gives them.
 * Header only: shmesh-run names the dtypes of a trace's calls with it
 * without linking the library. */
#ifndef SHMESH_CORE_DTYPE_NAMES_H
#define SHMESH_CORE_DTYPE_NAMES_H

#include "shmesh.h"

static const char *const dtype_names[SHMESH_DTYPE_COUNT] = {
    [SHMESH_BOOL] = "bool",       [SHMESH_INT8] = "int8",       [SHMESH_INT16] = "int16",
    [SHMESH_INT32] = "int32",     [SHMESH_INT64] = "int64",     [SHMESH_UINT8] = "uint8",
    [SHMESH_UINT16] = "uint16",   [SHMESH_UINT32] = "uint32",   [SHMESH_UINT64] = "uint64",
    [SHMESH_FLOAT16] = "float16", [SHMESH_BFLOAT16] = "bfloat16", [SHMESH_FLOAT32] = "float32",
    [SHMESH_FLOAT64] = "float64",
};

#endif
