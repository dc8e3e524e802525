/* What every mesh collective does before its data moves: resolve the axes
 * and the group, check the arrays, and describe the call. */
#ifndef SHMESH_LIB_COLLECTIVE_H
#define SHMESH_LIB_COLLECTIVE_H

#include "mesh.h"

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

#endif
