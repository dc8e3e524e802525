/* Peer paths: a member reads the other members' buffers itself, instead of
 * having them staged through the slots.  The algorithms are written once,
 * against the flow (engine/flow.h) and an access method set; zero-copy
 * (mapped shared-heap buffers) and single-copy (process_vm_readv) differ
 * only in how they reach a peer's buffer.
 *
 *   moves          each member copies the parts meant for it out of their
 *                  senders' inputs into its output
 *   transfers      each member reads what each sender's transfers give it
 *                  (their rows), straight into where it lands
 *   psum_scatter   each member reduces its block of every input
 *   whole-array    each member reduces a share of the elements; when peers'
 *   reductions     outputs are mapped it writes the share into all of them,
 *                  else, after a window, it reads the other shares out of
 *                  their owners' outputs
 *
 * Members combine in group order, as the staged path does, so every path
 * gives the same bits.  After each stage every member publishes whether it
 * could read what it had to (a status window); a failed read fails the call
 * on every member of the group, with the reason, and leaves the context
 * usable.  The last status window also keeps every member from leaving
 * while others still read its buffers. */
#ifndef SHMESH_PATHS_PEER_H
#define SHMESH_PATHS_PEER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/call.h"
#include "kernels/box.h"

struct peer_access {
    const char *how; /* for messages: "process_vm_readv" */
    /* Every member's buffers are mapped here (k->s->zin, zout): read in
     * place, and reductions write peers' outputs. */
    bool mapped;
    /* Bytes [off, off+len) of member q's input (or output) into dst: 0, or
     * SHMESH_ERR_SYSTEM with the failed read's errno in k->err (data: the
     * status window publishes it to the group). */
    int (*read)(struct call *k, int q, bool output, uint64_t off, void *dst, uint64_t len);
    /* Elements [first, first+count) of block b of member q's input, packed;
     * returns as read does. */
    int (*read_box)(struct call *k, int q, const struct box *b, uint64_t first, uint64_t count,
                    void *dst);
    /* What member q sends this one of a transfers flow, read with the
     * transfers' rows (engine/flow.h); returns as read does.  NULL: this
     * access takes no transfers flows. */
    int (*rows)(struct call *k, int q);
};

/* Members' buffers mapped here: read in place (zero copy). */
extern const struct peer_access peer_mapped;

/* The step function of a peer path. */
int peer_step(struct call *k, const struct peer_access *pa);
/* Every member's input mapped here (k->s->zin; this member's own may be
 * its caller's): this member's output computed alone, without windows, by
 * the same algorithms and in the same order, so with the same bits (FLOW_MOVE
 * and FLOW_REDUCE flows; several devices per rank, front/local_devices.c). */
int peer_local(struct call *k);
/* The status window: every member publishes k->err and k->err_peer (its
 * failed read: a positive errno, as data, and whose buffer), and peer_status_check fails the
 * call alike on every member when one failed (`how` names the means of
 * reading in the message).  Paths of their own use them too. */
extern const struct transfers peer_status;
int peer_status_check(struct call *k, const char *how);
/* Whole-array reductions' shares: position p of n owns elements [lo, hi)
 * of count (whole cache lines). */
void peer_share(uint64_t count, int n, int p, uint64_t *lo, uint64_t *hi);
/* How a peer algorithm's members take each other's data, for the traffic
 * they count (engine/traffic.h): member `to` reads of member `from`'s ...
 *   PEER_MOVE       input, the parts flow_part() names
 *   PEER_SCATTER    input, block `to` (psum_scatter)
 *   PEER_WHOLE      input, all of it (a whole-array reduction by everyone)
 *   PEER_PUSH       input, share `to`; and `from` writes its share of the
 *                   result into `to`'s output
 *   PEER_OWN_SHARE  input, share `to` (stage 0 without mappings)
 *   PEER_SHARES     output, share `from` (stage 1 without mappings)
 *   PEER_ROWS       input, what the op's transfers say `from` sends `to` */
enum peer_traffic {
    PEER_MOVE,
    PEER_SCATTER,
    PEER_WHOLE,
    PEER_PUSH,
    PEER_OWN_SHARE,
    PEER_SHARES,
    PEER_ROWS,
};
/* Adds to the call's traffic what this member sends and receives in one
 * stage of such an algorithm. */
void peer_count(struct call *k, enum peer_traffic how);
/* Candidate of the peer paths: a flow they can carry (transfers: when
 * they have rows; the access must have rows too). */
bool peer_flow(const struct call *k);

#endif
