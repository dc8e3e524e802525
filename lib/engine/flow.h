/* Flows: what a call moves, described once by its op and carried out by
 * whichever path the engine chooses.
 *
 * Every member has an input array and an output array of its own (the same
 * dtypes and shapes on every member: the call's hash covers them).  A flow
 * says which part of each member's input reaches which part of each
 * member's output, and whether the parts are combined by a reduction:
 *
 *   FLOW_NONE       no data (barrier, finalize, mesh creation)
 *   FLOW_MOVE       a box of member q's input lands in a box of member p's
 *                   output, for the pairs flow_part() names
 *   FLOW_REDUCE     every member's output is the reduction of the inputs'
 *                   boxes meant for it: the whole inputs (psum, world_sum)
 *                   or block p of each (psum_scatter)
 *   FLOW_TRANSFERS    the op gives its transfers itself (ragged_all_to_all,
 *                   whose rows follow the offsets it exchanged first)
 *
 * The boxes come from three numbers per side: the dimension the input is cut
 * along into n blocks (block p goes to member p), the dimension the output is
 * cut along (block q comes from member q), each -1 when the array is taken
 * whole; plus who sends to whom (everyone to everyone, a permutation, or one
 * source to all).  Paths never look at the op: a new path is written once
 * against this description (docs/internals.md). */
#ifndef SHMESH_ENGINE_FLOW_H
#define SHMESH_ENGINE_FLOW_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/box.h"
#include "kernels/reduce.h"
#include "shmesh.h"

struct call;

enum flow_kind { FLOW_NONE, FLOW_MOVE, FLOW_REDUCE, FLOW_TRANSFERS };

/* How a member reads another member's memory for a transfer's rows (single
 * copy: paths/single_copy.c). */
struct rows_reader {
    /* len bytes at address `addr` of the member's memory into dst: 0, or an
     * error (the reader remembers it).  The read may wait until the walk
     * returns (reads are batched): dst must stay where it is. */
    int (*read)(struct rows_reader *r, void *dst, uint64_t addr, uint64_t len);
    /* The same, done when it returns: for what the walk needs next (the
     * addresses of the member's buffers). */
    int (*read_now)(struct rows_reader *r, void *dst, uint64_t addr, uint64_t len);
};

/* Transfers, for FLOW_TRANSFERS and for the engine's own exchanges: what each
 * member sends each other member, packed by the sender into its windows
 * and taken out (or reduced) by the receiver.  Positions are group indices. */
struct transfers {
    bool broadcast; /* one transfer every member reads whole: bytes/pack see to = -1 */
    /* The engine's own exchange (a handshake, a status window, a ragged
     * call's offsets), not the call's data: not traffic (engine/traffic.h). */
    bool control;
    /* Window payloads hold whole units of this many bytes (0: the flow's
     * input element, or 1). */
    uint64_t unit;
    uint64_t (*bytes)(const struct call *k, int from, int to);
    /* This member's segment for `to`, bytes [off, off+len), into dst. */
    void (*pack)(const struct call *k, int to, uint64_t off, uint64_t len, void *dst);
    /* Bytes [off, off+len) of what `from` sent this member. */
    void (*recv)(const struct call *k, int from, uint64_t off, const void *src, uint64_t len);
    /* Or, instead of recv: the same range of every member's segment for this
     * member, combined (every member's segment sits at the same place of its
     * transfer). */
    void (*reduce)(const struct call *k, uint64_t off, const void *const *src, uint64_t len);
    /* Optional: what `from` sends this member, read by this member itself
     * out of from's memory, row by row with `r` (the peer paths take such
     * transfers: one copy, and no windows).  `base` is the address of from's
     * flow input, which every member publishes (the op's directory of the
     * buffers its rows come from).  Returns 0 or r's error. */
    int (*rows)(const struct call *k, int from, uint64_t base, struct rows_reader *r);
    /* With rows: the size the paths' thresholds compare with, the same on
     * every member (say, the data the call is about). */
    uint64_t size;
};

struct flow {
    /* kind, in and out first: a planned call (front/plan.c) takes its own
     * arrays and its plan's kind, and copies the rest from in_esz on. */
    enum flow_kind kind;
    shmesh_array in, out; /* this member's, copied from the caller's */
    size_t in_esz, out_esz;
    uint64_t in_bytes, out_bytes;
    /* FLOW_REDUCE */
    enum red_op red;
    int mean_n;
    /* FLOW_MOVE and FLOW_REDUCE: the blocks (dimension -1: whole array). */
    int in_dim, out_dim;
    int64_t in_blk, out_blk;
    /* FLOW_MOVE: who sends to whom.  dest: member q sends to dest[q] only
     * (-1: nobody); source >= 0: only that member sends, to everyone;
     * neither: everyone to everyone. */
    const int *dest;
    int source;
    /* FLOW_MOVE from a source: the source may return before its receivers
     * checked the call, and find out about a mismatch at a later call
     * (engine/window.h: eager windows). */
    bool run_ahead;
    /* FLOW_MOVE: nothing comes to this member, so its output is zeros: the
     * op writes them into host memory at once; a device output is left to
     * the path (paths/device_ipc.c) or the staging (paths/device_staged.c). */
    bool zero_out;
    /* FLOW_TRANSFERS */
    const struct transfers *transfers;
    /* FLOW_TRANSFERS: this exchange moves the op's own host data (ragged's
     * offsets), not its arrays: host paths carry it, whatever the arrays. */
    bool host_data;
};

/* A flow of `kind` over in and out (either may be NULL: no array), every
 * member to every member, whole arrays. */
void flow_init(struct flow *f, enum flow_kind kind, const shmesh_array *in,
               const shmesh_array *out);
/* What member `from` sends member `to`: true with the box of from's input
 * and the box of to's output it lands in, false when nothing (and for a
 * member's own part that is where it goes already: pbroadcast in place). */
bool flow_part(const struct call *k, int from, int to, struct box *src, struct box *dst);
/* Whether every receiver gets the same part of a sender's input. */
bool flow_shared(const struct flow *f);
/* Whether the reduction is of whole arrays (psum, world_sum: every member's
 * output is the same). */
static inline bool flow_allreduce(const struct flow *f)
{
    return f->kind == FLOW_REDUCE && f->in_dim < 0;
}
/* The size that thresholds are compared with: the input's bytes, or the
 * larger buffer's for a whole-array reduction (a transfers flow with rows:
 * its transfers' size, engine/path.c). */
static inline uint64_t flow_size(const struct flow *f)
{
    if (flow_allreduce(f) && f->out_bytes > f->in_bytes)
        return f->out_bytes;
    return f->in_bytes;
}
/* The staged transfers of a flow (FLOW_TRANSFERS: the op's own). */
const struct transfers *flow_transfers(const struct flow *f);

#endif
