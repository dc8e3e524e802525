/* Checking a call's arrays and axis arguments, and describing shapes in
 * messages. */
#ifndef SHMESH_OPS_ARGS_H
#define SHMESH_OPS_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shmesh.h"

/* "float32[4,3]" ("float32[]" for a scalar). */
void shape_format(char *buf, size_t len, shmesh_dtype dt, int ndim, const int64_t *shape);
/* A well-formed array: known dtype, ndim 0..SHMESH_MAX_NDIM, dimensions >= 0,
 * data present when it holds elements.  *elems receives the element count. */
int array_check(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                uint64_t *elems);
/* An output shape an op derives from its input's, with dimension `dim`
 * multiplied by `times` (dim -1: none): true when that dimension fits int64
 * and the array's bytes fit 2^62, the limit array_check sets every array;
 * then shape[dim] receives the product.  False leaves shape as it was. */
bool shape_scale(shmesh_dtype dt, int ndim, int64_t *shape, int dim, int64_t times);
/* The refusal of such a shape (SHMESH_ERR_INVALID), from the array named
 * in_name: "OP: WHAT would be int8[2305843009213693952*4] (in
 * int8[2305843009213693952] HOW): more than 2^62 bytes, too large to
 * address". */
int shape_refuse(shmesh_ctx *c, const char *op, const char *what, shmesh_dtype dt, int ndim,
                 const int64_t *shape, int dim, int64_t times, const char *in_name,
                 const shmesh_array *in, const char *how);
/* shmesh_op_result's question (front/front.c): while it prepares a call,
 * this thread's op_query is the result array it asks about.  array_expect
 * on that array writes the dtype and shape there and returns OP_QUERIED
 * (the preparation stops, nothing shared), and coll_arrays does not check
 * it; NULL at any other time. */
extern _Thread_local shmesh_array *op_query __attribute__((tls_model("initial-exec")));
#define OP_QUERIED 1
/* `a` must have exactly this dtype and shape; the message gives both (or,
 * when `a` is op_query, receives them). */
int array_expect(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                 shmesh_dtype dt, int ndim, const int64_t *shape);
/* Python-style axis: -ndim..ndim-1 becomes 0..ndim-1. */
int axis_canon(shmesh_ctx *c, const char *op, const char *what, int axis, int ndim, int *out);

#endif
