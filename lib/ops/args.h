/* Checking a call's arrays and axis arguments, and describing shapes in
 * messages. */
#ifndef SHMESH_OPS_ARGS_H
#define SHMESH_OPS_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "shmesh.h"

/* "float32[4,3]" ("float32[]" for a scalar). */
void shape_format(char *buf, size_t len, shmesh_dtype dt, int ndim, const int64_t *shape);
/* A well-formed array: known dtype, ndim 0..SHMESH_MAX_NDIM, dimensions >= 0,
 * data present when it holds elements.  *elems receives the element count. */
int array_check(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                uint64_t *elems);
/* `a` must have exactly this dtype and shape; the message gives both. */
int array_expect(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                 shmesh_dtype dt, int ndim, const int64_t *shape);
/* Python-style axis: -ndim..ndim-1 becomes 0..ndim-1. */
int axis_canon(shmesh_ctx *c, const char *op, const char *what, int axis, int ndim, int *out);

#endif
