#include "core/dtype.h"
#include "core/dtype_names.h"

const unsigned char dtype_sizes[SHMESH_DTYPE_COUNT] = {
    [SHMESH_BOOL] = 1,    [SHMESH_INT8] = 1,    [SHMESH_INT16] = 2,   [SHMESH_INT32] = 4,
    [SHMESH_INT64] = 8,   [SHMESH_UINT8] = 1,   [SHMESH_UINT16] = 2,  [SHMESH_UINT32] = 4,
    [SHMESH_UINT64] = 8,  [SHMESH_FLOAT16] = 2, [SHMESH_BFLOAT16] = 2, [SHMESH_FLOAT32] = 4,
    [SHMESH_FLOAT64] = 8,
};

bool dtype_valid(shmesh_dtype dt) { return (unsigned)dt < SHMESH_DTYPE_COUNT; }

size_t shmesh_dtype_size(shmesh_dtype dt) { return dtype_size(dt); }

const char *shmesh_dtype_name(shmesh_dtype dt) { return dtype_valid(dt) ? dtype_names[dt] : "?"; }

bool dtype_is_float(shmesh_dtype dt)
{
    return dt == SHMESH_FLOAT16 || dt == SHMESH_BFLOAT16 || dt == SHMESH_FLOAT32 ||
           dt == SHMESH_FLOAT64;
}

bool dtype_is_int(shmesh_dtype dt) { return dt >= SHMESH_INT8 && dt <= SHMESH_UINT64; }
