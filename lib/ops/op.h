/* Ops (the op table expanded) and call descriptions: what a call publishes
 * in its first window, so that ranks can check they make the same call and
 * explain it when they do not. */
#ifndef SHMESH_OPS_OP_H
#define SHMESH_OPS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops/optable.h"
#include "shm/layout.h"
#include "shmesh.h"

enum call_op {
    OP_NONE = 0, /* a zeroed description */
#define OP_ENUM(ID, name, scope, bus, bool_in, params) OP_##ID,
    SHMESH_OPS(OP_ENUM)
#undef OP_ENUM
    OP_COUNT
};

/* What a call publishes in its first window.  Ranks compare a hash of what
 * identifies the call (call_hash); the fields are read back only to explain
 * a mismatch.  call_desc_clear() zeroes the fixed fields and empties the
 * texts; shapes are meaningful up to ndim only. */
struct call_desc {
    uint32_t op;
    int32_t mesh; /* mesh id, -1 for world-wide calls */
    uint32_t dtype, out_dtype;
    int32_t ndim, out_ndim;
    int64_t param[4];    /* the op's own values, named in the op table */
    uint64_t extra_hash; /* groups, permutations, mesh layout */
    uint64_t tuning;     /* the thresholds that choose algorithms: every rank must agree */
    char axes[64];
    char groups[96]; /* axis_index_groups as text ("" without), maybe cut short */
    int64_t shape[SHMESH_MAX_NDIM], out_shape[SHMESH_MAX_NDIM];
};

static inline void call_desc_clear(struct call_desc *d)
{
    memset(d, 0, offsetof(struct call_desc, axes));
    d->axes[0] = d->groups[0] = 0;
}
_Static_assert(sizeof(struct call_desc) <= SEG_CALL_DESC_MAX, "call description too large");

/* "shmesh_psum", ...; NULL for an unknown op. */
const char *op_name(enum call_op op);

/* One line: the op, its arrays, parameters, axes and groups, and the call number. */
void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len);
/* What identifies the call (not the whole description). */
uint64_t call_hash(const struct call_desc *d);

#endif
