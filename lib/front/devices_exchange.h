/* Several devices (or batch positions) per rank: calls whose groups leave
 * a rank move between ranks only what each rank's devices need, instead of
 * every rank gathering every device's input (front/local_devices.h).  Whole-array reductions
 * (psum, pmean, pmax, pmin, ... over every element) reduce-scatter between
 * ranks in device order, then all-gather:
 *
 * Each group's ranks (those holding at least one of its devices, in the
 * order of their first device in the group) split the array into as many
 * shares (paths/peer.h: peer_share).  The rank owning a share receives
 * that share of every member device's input held elsewhere, reads its own
 * devices' shares in place, and reduces the share over all the group's
 * members in group order with the same kernel as every other path: the bits
 * are those of one device per rank (part by part, each part of every share
 * small enough that a rank's transfer fits one window, reduced straight out
 * of the windows).  Then each rank receives the other shares' results and
 * writes them straight from the windows into each of its devices in the
 * group.  Two world-wide exchanges (ops/ops.h: op_world_transfers)
 * carry exactly that: with R ranks of K devices of S bytes each, a rank
 * receives (R - 1) / R (K + 1) S in a psum over every device, where the
 * gather received (R - 1) K S.
 *
 * psum_scatter likewise, in one exchange (part by part, out of the
 * windows): member i keeps block i of the
 * reduction, so each rank receives, for each of its member devices, that
 * device's block of every member device's input held elsewhere (blocks
 * that are not one run of their array are packed as boxes), and reduces
 * each block over all members in group order straight into the device's
 * output: (N - K) K S / N with N devices, where the gather received
 * (R - 1) K S.
 *
 * Moves (all_gather, all_to_all, ppermute, pshuffle, pbroadcast, ...), in
 * one exchange: each part flow_part() names goes from its sender's rank
 * to its receiver's straight into the receiver's output (a part every
 * receiver gets alike, once per rank), and the parts between a rank's own
 * devices are copied there.  all_to_all receives (N - K) K S / N, a
 * pbroadcast S, an all_gather (N - K) S (what the gather moved, for it). */
#ifndef SHMESH_FRONT_DEVICES_EXCHANGE_H
#define SHMESH_FRONT_DEVICES_EXCHANGE_H

#include "engine/call.h"
#include "mesh/mesh.h"

struct dev_groups;

/* Every group of k0's call on m, when this way serves it: a reduction or a
 * move (not ragged) of host arrays with data, on a mesh of the whole job
 * with more than one rank (batched too: its positions count as devices),
 * over axes some of whose groups leave a rank; with axis_index_groups `gs`
 * (the call's, already checked), each subgroup of each group is a group
 * (of any size for whole-array reductions, which alone accept different
 * sizes).  NULL otherwise, or when out of memory (the gather serves it
 * then). */
struct dev_groups *dev_groups_make(const shmesh_mesh *m, const struct call *k0,
                                   const shmesh_groups *gs);
void dev_groups_free(struct dev_groups *g);

/* Whether no local device's output overlaps another's input (ks[0..nlocal)):
 * these exchanges write outputs while reading other devices' inputs, where
 * the gather had copied every input first. */
bool dev_groups_apart(const struct call *ks, int nlocal);

/* Runs the call of this rank's devices: ks[l] is the call of local device
 * ids[l], l < nlocal (all of one description).  0 or the error. */
int dev_groups_run(shmesh_ctx *c, const struct dev_groups *g, struct call *ks,
                   const int *ids, int nlocal);

#endif
