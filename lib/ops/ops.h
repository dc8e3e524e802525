/* Prepared calls: each collective's arguments checked and turned into a
 * call (engine/call.h) without running it.  The public functions are
 * prepare + call_finish; async dispatch and tests submit prepared calls
 * themselves.  On failure the call may hold scratch: call_release() it (or
 * pass the result to call_finish). */
#ifndef SHMESH_OPS_OPS_H
#define SHMESH_OPS_OPS_H

#include <stdbool.h>

#include "engine/call.h"
#include "shmesh.h"

/* psum, pmax, pmin, pmean, pargmax, pargmin (op says which). */
int op_reduce_prepare(struct call *k, shmesh_mesh *m, enum call_op op, const char *axes,
                      const shmesh_groups *gs, const shmesh_array *in, shmesh_array *out);
int op_all_gather_prepare(struct call *k, shmesh_mesh *m, const char *axes,
                          const shmesh_groups *gs, int axis, bool tiled, const shmesh_array *in,
                          shmesh_array *out);
int op_psum_scatter_prepare(struct call *k, shmesh_mesh *m, const char *axes,
                            const shmesh_groups *gs, int scatter_dimension, bool tiled,
                            const shmesh_array *in, shmesh_array *out);
/* all_to_all and pswapaxes (op says which; pswapaxes: split = concat = axis,
 * untiled). */
int op_all_to_all_prepare(struct call *k, shmesh_mesh *m, enum call_op op, const char *axes,
                          const shmesh_groups *gs, int split_axis, int concat_axis, bool tiled,
                          const shmesh_array *in, shmesh_array *out);
int op_ragged_all_to_all_prepare(struct call *k, shmesh_mesh *m, const char *axes,
                                 const shmesh_groups *gs, const shmesh_array *operand,
                                 shmesh_array *output, const shmesh_array *input_offsets,
                                 const shmesh_array *send_sizes,
                                 const shmesh_array *output_offsets,
                                 const shmesh_array *recv_sizes);
int op_ppermute_prepare(struct call *k, shmesh_mesh *m, const char *axes, const int (*perm)[2],
                        int npairs, const shmesh_array *in, shmesh_array *out);
int op_pshuffle_prepare(struct call *k, shmesh_mesh *m, const char *axes, const int *perm,
                        const shmesh_array *in, shmesh_array *out);
int op_pbroadcast_prepare(struct call *k, shmesh_mesh *m, const char *axes, int source,
                          const shmesh_array *in, shmesh_array *out);
/* barrier, finalize (op says which): a world-wide step with no data. */
int op_world_step_prepare(struct call *k, shmesh_ctx *c, enum call_op op);
int op_world_sum_prepare(struct call *k, shmesh_ctx *c, void *buf, size_t count,
                         shmesh_dtype dtype);

/* World-wide data movement for the layers above the collectives (global
 * arrays, several devices per rank).  `name` is the public function that
 * asked, for messages; `d`, when not NULL, is the description ranks compare
 * (else the op's own).
 * gather: every rank's `bytes` bytes (the same count everywhere) into out,
 * rank by rank (world * bytes).  broadcast: rank root's buf into every
 * rank's. */
int op_world_gather(shmesh_ctx *c, const char *name, const struct call_desc *d, const void *in,
                    uint64_t bytes, void *out);
int op_world_broadcast(shmesh_ctx *c, const char *name, const struct call_desc *d, int root,
                       void *buf, uint64_t bytes);

#endif
