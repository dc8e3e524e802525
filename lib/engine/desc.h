/* Ops (the op table expanded) and call descriptions: what a call publishes
 * in its first window, so that ranks can check they make the same call and
 * explain it when they do not. */
#ifndef SHMESH_ENGINE_DESC_H
#define SHMESH_ENGINE_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shm/layout.h"
#include "shm/op_numbers.h"
#include "shmesh.h"

/* Room for texts in a description: every axis name in full (at most
 * SHMESH_MAX_MESH_DIMS names of SHMESH_MAX_AXIS_NAME characters and the
 * commas between them), and axis_index_groups, which may be cut short
 * ("..." marks the cut; the groups are hashed whole in extra_hash). */
#define CALL_AXES_TEXT (SHMESH_MAX_MESH_DIMS * (SHMESH_MAX_AXIS_NAME + 1))
#define CALL_GROUPS_TEXT 128

/* What a call publishes in its first window.  Ranks compare a hash of what
 * identifies the call (call_hash): op, mesh, the named axes as mesh
 * dimensions, arrays, parameters and extra_hash; the texts are read back
 * only to explain a mismatch.  call_desc_clear() zeroes the fixed fields
 * (but tuning) and empties the texts; shapes are meaningful up to ndim only.
 *
 * A peer's description is untrusted bytes: it is copied out of the segment
 * once and then only read through call_hash and call_describe (and
 * call_mismatch_text), which are safe for any contents. */
struct call_desc {
    uint32_t op;
    int32_t mesh; /* mesh id, -1 for world-wide calls */
    uint32_t dtype, out_dtype;
    int32_t ndim, out_ndim;
    int64_t param[4];    /* the op's own values, named in the op table; mesh ops have at
                            most 3, and param[CALL_PARAM_BATCH] holds the batch of a
                            batched mesh (0 otherwise): meshes that differ only there
                            share an id */
    uint64_t extra_hash; /* groups, permutations, mesh_create's names and device order */
    int32_t naxes;       /* the named axes, resolved: how many, */
    uint8_t axis[SHMESH_MAX_MESH_DIMS]; /* and their mesh dimensions, in the order named */
    /* Whether the input and the output are device memory (call_buffers):
     * members must agree, since device calls take other paths. */
    uint8_t in_device, out_device;
    /* Not cleared (set when the description is published): the thresholds
     * that choose algorithms, on which every rank must agree. */
    uint64_t tuning;
    char axes[CALL_AXES_TEXT];     /* canonical "x,y" (mesh_create: every name), never cut */
    char groups[CALL_GROUPS_TEXT]; /* axis_index_groups as text ("" without) */
    int64_t shape[SHMESH_MAX_NDIM], out_shape[SHMESH_MAX_NDIM];
};

#define CALL_PARAM_BATCH 3

static inline void call_desc_clear(struct call_desc *d)
{
    /* At most 80 bytes: gcc clears them with a few stores, more with rep stos. */
    memset(d, 0, offsetof(struct call_desc, tuning));
    d->axes[0] = d->groups[0] = 0;
}
/* The part of a description that means something (what call_desc_clear
 * and an op's preparation write: the fixed fields, each text to its end,
 * the shapes to their ndim) from src into dst: a planned call's copy of
 * its plan's (front/plan.h), a tenth of the description's 600 bytes. */
static inline void call_desc_copy(struct call_desc *dst, const struct call_desc *src)
{
    memcpy(dst, src, offsetof(struct call_desc, axes));
    size_t i = 0;
    do
        dst->axes[i] = src->axes[i];
    while (src->axes[i] && ++i < sizeof dst->axes);
    i = 0;
    do
        dst->groups[i] = src->groups[i];
    while (src->groups[i] && ++i < sizeof dst->groups);
    for (int d = 0; d < src->ndim && d < SHMESH_MAX_NDIM; d++)
        dst->shape[d] = src->shape[d];
    for (int d = 0; d < src->out_ndim && d < SHMESH_MAX_NDIM; d++)
        dst->out_shape[d] = src->out_shape[d];
}
_Static_assert(sizeof(struct call_desc) <= SEG_CALL_DESC_MAX, "call description too large");
/* Op numbers on the wire (shm/op_numbers.h has the segment's others). */
_Static_assert(OP_COUNT - 1 <= UINT32_MAX, "op numbers fit call_desc.op");
_Static_assert(SHMESH_MAX_MESH_DIMS <= 8, "call_hash reads the axes as one word");

/* "shmesh_psum", ...; NULL for an unknown op. */
const char *op_name(enum call_op op);

/* One line: the op, its arrays, parameters, axes and groups, and the call
 * number.  Always a terminated line of printable ASCII within len: other
 * bytes of the texts are shown as \xNN, values out of range as numbers
 * marked with '?'. */
void call_describe(const struct call_desc *d, uint64_t call, char *buf, size_t len);
/* What identifies the call (not the whole description). */
uint64_t call_hash(const struct call_desc *d);
/* Why call `call` failed: "called <mine> but rank R called <theirs>" (theirs
 * NULL: R went past the call's window without it).  When only the hashed
 * settings differ, <theirs> is "the same with other settings: <settings>"
 * (which differ, from settings_hashed_text; NULL: not known).  When that
 * does not fit in len, each description is cut (marked "...") so that both
 * are named. */
void call_mismatch_text(char *buf, size_t len, uint64_t call, const struct call_desc *mine,
                        int other_rank, const struct call_desc *theirs, const char *settings);

/* Ranks made different calls (engine/mismatch.c): both explained, the
 * context poisoned, and the job told: every rank returns
 * SHMESH_ERR_MISMATCH from its next wait or call.  `theirs` is NULL when
 * the other rank's window is gone; otherwise a private copy of the peer's
 * description, read as untrusted bytes (call_mismatch_text). */
int call_mismatch(shmesh_ctx *c, uint64_t seq, const struct call_desc *mine, int other_rank,
                  const struct call_desc *theirs);

#endif
