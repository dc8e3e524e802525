/* Prepared calls: each collective's arguments checked and turned into a
 * call (engine/call.h) without running it.  The public functions are the
 * front door's (front/front.c): op_args, prepare, call_finish_async; tests
 * submit prepared calls themselves.  On failure the call may hold scratch:
 * call_release() it (or pass the result to call_finish). */
#ifndef SHMESH_OPS_OPS_H
#define SHMESH_OPS_OPS_H

#include <stdbool.h>

#include "engine/call.h"
#include "shmesh.h"

/* One op as its public function was called: the front door's record
 * (front/front.c), which the batched-mesh layer also cuts into positions.
 * Arrays are one per local device of the mesh. */
struct op_args {
    enum call_op op;
    bool tiled; /* all_gather, psum_scatter, all_to_all */
    int axis;   /* all_gather's axis, psum_scatter's scatter_dimension, all_to_all's
                   split_axis, pswapaxes' axis */
    int axis2;  /* all_to_all's concat_axis (pswapaxes: axis again) */
    shmesh_mesh *m; /* mesh ops (the front door resolves NULL to the innermost pushed mesh) */
    const char *axes;
    const shmesh_groups *gs;
    const shmesh_array *in;
    shmesh_array *out;
    /* What only some ops take, one at a time (the record stays small: every
     * call builds it). */
    union {
        struct { /* ppermute */
            const int (*perm)[2];
            int npairs;
        };
        struct { /* pshuffle: nshuffle entries, -1 when not known (shmesh_pshuffle's) */
            const int *shuffle;
            int nshuffle;
        };
        int source;         /* pbroadcast */
        /* ragged_all_to_all: input_offsets, send_sizes, output_offsets, recv_sizes */
        const shmesh_array *offsets[4];
        struct { /* world ops: world_sum in place */
            shmesh_ctx *c;
            void *buf;
            size_t count;
            shmesh_dtype dtype;
        };
    };
};

/* Every op's prepare function has this form: call k of `a` for local device
 * l (its arrays a->in + l, a->out + l; 0 with one device here).  The op
 * table's `prepare` column names it: op_<prepare>_prepare.
 *
 * Each is defined OP_PREPARE_INLINE: an external definition (the
 * declarations here carry nothing) that link-time optimization inlines into
 * the front door's public functions, as when each public function was
 * written beside its op (an 8-byte psum's instructions depend on it:
 * docs/performance.md).  Without LTO it is an ordinary function. */
typedef int op_prepare_fn(struct call *k, const struct op_args *a, int l);
#define OP_PREPARE_INLINE __attribute__((always_inline)) inline

op_prepare_fn op_reduce_prepare; /* psum, pmax, pmin, pmean, pargmax, pargmin */
op_prepare_fn op_all_gather_prepare;
op_prepare_fn op_psum_scatter_prepare;
op_prepare_fn op_all_to_all_prepare; /* all_to_all and pswapaxes (split = concat = axis) */
op_prepare_fn op_ragged_all_to_all_prepare;
op_prepare_fn op_ppermute_prepare;
op_prepare_fn op_pshuffle_prepare;
op_prepare_fn op_pbroadcast_prepare;
op_prepare_fn op_barrier_prepare;
op_prepare_fn op_world_sum_prepare;
/* World-wide data movement for the layers above the collectives (global
 * arrays, several devices per rank).  `name` is the public function that
 * asked, for messages; `d`, when not NULL, is the description ranks compare
 * (else the op's own).
 * gather: every rank's `bytes` bytes (the same count everywhere) into out,
 * rank by rank (world * bytes); with root >= 0, into the root's out only
 * (the others send and receive nothing: their out is not read, and may be
 * NULL).  broadcast: rank root's buf into every rank's. */
int op_world_gather(shmesh_ctx *c, const char *name, const struct call_desc *d, const void *in,
                    uint64_t bytes, void *out, int root);
int op_world_broadcast(shmesh_ctx *c, const char *name, const struct call_desc *d, int root,
                       void *buf, uint64_t bytes);
/* A world-wide exchange whose transfers the caller gives (their callbacks
 * find `state` in the call's op_state): what each rank sends each other
 * rank, packed and taken out as st says.  Transfers with rows (st->rows)
 * name this rank's directory: the `ndir` addresses their rows are read
 * from, published to the others (without rows, NULL and 0). */
int op_world_transfers(shmesh_ctx *c, const char *name, const struct call_desc *d,
                       const struct transfers *st, void *state, const uint64_t *dir,
                       int64_t ndir);

#endif
