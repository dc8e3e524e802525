/* Checking arrays and axes, and describing shapes in messages. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/args.h"

void shape_format(char *buf, size_t len, shmesh_dtype dt, int ndim, const int64_t *shape)
{
    int n = snprintf(buf, len, "%s[", shmesh_dtype_name(dt));
    for (int d = 0; d < ndim && d < SHMESH_MAX_NDIM && n > 0 && (size_t)n < len; d++)
        n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64, d ? "," : "", shape[d]);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]");
}

/* Every array's bytes must fit in 2^62: sizes and offsets in bytes then fit
 * int64 and uint64 with room to spare. */
#define BYTES_MAX (UINT64_C(1) << 62)

/* *n times a dimension d >= 0, when the product's bytes stay within
 * BYTES_MAX; once *n is 0 (an earlier dimension is 0) it stays 0. */
static bool elems_times(uint64_t *n, int64_t d, size_t esz)
{
    uint64_t limit = BYTES_MAX / esz;
    if (d && *n > limit / (uint64_t)d)
        return false;
    *n *= (uint64_t)d;
    return true;
}

bool shape_scale(shmesh_dtype dt, int ndim, int64_t *shape, int dim, int64_t times)
{
    int64_t scaled = 0;
    if (dim >= 0 && __builtin_mul_overflow(shape[dim], times, &scaled))
        return false;
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (!elems_times(&n, d == dim ? scaled : shape[d], dtype_size(dt)))
            return false;
    if (dim >= 0)
        shape[dim] = scaled;
    return true;
}

int shape_refuse(shmesh_ctx *c, const char *op, const char *what, shmesh_dtype dt, int ndim,
                 const int64_t *shape, int dim, int64_t times, const char *in_name,
                 const shmesh_array *in, const char *how)
{
    /* The dimension the op multiplies shows as the product it would be. */
    char want[240], from[160];
    int len = snprintf(want, sizeof want, "%s[", shmesh_dtype_name(dt));
    for (int d = 0; d < ndim && len > 0 && (size_t)len < sizeof want; d++) {
        len += snprintf(want + len, sizeof want - (size_t)len, "%s%" PRId64, d ? "," : "",
                        shape[d]);
        if (d == dim && (size_t)len < sizeof want)
            len += snprintf(want + len, sizeof want - (size_t)len, "*%" PRId64, times);
    }
    if (len > 0 && (size_t)len < sizeof want)
        snprintf(want + len, sizeof want - (size_t)len, "]");
    shape_format(from, sizeof from, in->dtype, in->ndim, in->shape);
    return ctx_fail(c, SHMESH_ERR_INVALID,
                    "%s: %s would be %s (%s %s %s): more than 2^62 bytes, too large to address",
                    op, what, want, in_name, from, how);
}

int array_check(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                uint64_t *elems)
{
    if (!a)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: %s must not be NULL", op, what);
    if (!dtype_valid(a->dtype))
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: %s has dtype %d, which is not a shmesh_dtype (0..%d)", op, what,
                        (int)a->dtype, SHMESH_DTYPE_COUNT - 1);
    if (a->ndim < 0 || a->ndim > SHMESH_MAX_NDIM)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: %s has ndim %d; it must be 0..%d", op, what,
                        a->ndim, SHMESH_MAX_NDIM);
    uint64_t n = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] < 0)
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: %s has dimension %d of size %" PRId64 "; sizes must be >= 0", op,
                            what, d, a->shape[d]);
        if (!elems_times(&n, a->shape[d], dtype_size(a->dtype))) {
            char shape[160];
            shape_format(shape, sizeof shape, a->dtype, a->ndim, a->shape);
            return ctx_fail(c, SHMESH_ERR_INVALID,
                            "%s: %s %s has more than 2^62 bytes, too large to address", op, what,
                            shape);
        }
    }
    if (n && !a->data)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: %s holds %" PRIu64 " elements but its data is NULL",
                        op, what, n);
    *elems = n;
    return 0;
}

_Thread_local shmesh_array *op_query __attribute__((tls_model("initial-exec")));

int array_expect(shmesh_ctx *c, const char *op, const char *what, const shmesh_array *a,
                 shmesh_dtype dt, int ndim, const int64_t *shape)
{
    if (__builtin_expect(a == op_query, 0)) {
        op_query->dtype = dt;
        op_query->ndim = ndim;
        memcpy(op_query->shape, shape, sizeof *shape * (size_t)ndim);
        return OP_QUERIED;
    }
    bool same = a->dtype == dt && a->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = a->shape[d] == shape[d];
    if (same)
        return 0;
    char want[160], got[160];
    shape_format(want, sizeof want, dt, ndim, shape);
    shape_format(got, sizeof got, a->dtype, a->ndim, a->shape);
    return ctx_fail(c, SHMESH_ERR_INVALID, "%s: %s must be %s, got %s", op, what, want, got);
}

int axis_canon(shmesh_ctx *c, const char *op, const char *what, int axis, int ndim, int *out)
{
    if (axis < -ndim || axis >= ndim)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: %s %d is out of range for %d dimensions (valid: %d..%d)", op, what,
                        axis, ndim, -ndim, ndim - 1);
    *out = axis < 0 ? axis + ndim : axis;
    return 0;
}
