/* What every mesh collective does before its data moves: resolve the axes
 * and the group, check the arrays, and describe the call. */
#ifndef SHMESH_OPS_PROLOGUE_H
#define SHMESH_OPS_PROLOGUE_H

#include "core/context.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fail.h"
#include "core/hash.h"
#include "engine/exchange.h"
#include "kernels/box.h"
#include "kernels/reduce.h"
#include "kernels/stream.h"
#include "mesh/mesh.h"
#include "ops/args.h"

struct coll {
    shmesh_mesh *m;
    shmesh_ctx *c;
    const char *name;
    struct axes axes;
    struct group g;
    struct call_desc d;
};

/* Enters the call and resolves axes and (sub)group: every failure here is
 * local (SHMESH_ERR_INVALID, or the poisoned context's error). */
int coll_open(struct coll *k, shmesh_mesh *m, enum call_op op, const char *axes,
              const shmesh_groups *gs, bool equal_groups);
/* Both arrays well-formed (array_check); element counts out. */
int coll_arrays(struct coll *k, const shmesh_array *in, const char *in_name,
                const shmesh_array *out, const char *out_name, uint64_t *n_in, uint64_t *n_out);
/* Records in/out in the call's description. */
void coll_describe(struct coll *k, const shmesh_array *in, const shmesh_array *out);
/* The arguments were accepted: the call begins (see sync_begin) and is
 * described by in and out. */
int coll_start(struct coll *k, const shmesh_array *in, const shmesh_array *out);
/* A new exchange among the call's group. */
struct xchg coll_xchg(const struct coll *k);

/* Fails unless `out` and `in` are the same buffer or do not overlap. */
int coll_no_overlap(struct coll *k, const void *in, uint64_t in_bytes, const void *out,
                    uint64_t out_bytes, bool same_allowed);

/* Arrays cut into equal blocks along one dimension, the shape of all_gather,
 * psum_scatter and all_to_all: block j of the input is what goes to position
 * j (psum_scatter, all_to_all); block q of the output is what comes from
 * position q (all_gather, all_to_all). */
struct blocks {
    const shmesh_array *in;
    shmesh_array *out;
    size_t esz;
    int in_dim, out_dim;    /* the dimensions the blocks are cut along */
    int64_t in_blk, out_blk; /* block extents along them */
    uint64_t in_bytes, blk_bytes;
};

/* Exchange callbacks over a struct blocks (x->op). */
uint64_t blocks_whole(const struct xchg *x, int from, int to);   /* in_bytes */
uint64_t blocks_one(const struct xchg *x, int from, int to);     /* blk_bytes */
void blocks_copy_input(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst);
void blocks_pack(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst);
void blocks_recv(const struct xchg *x, int from, uint64_t off, const void *src, uint64_t len);

#endif
