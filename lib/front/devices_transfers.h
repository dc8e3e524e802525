/* Several devices (or batch positions) per rank, for an op whose members
 * publish parameters before its data moves (struct call's pub_bytes,
 * pub_pack and local: ragged_all_to_all, whose offsets and sizes say which
 * rows go where), on a mesh whose groups leave ranks.  Instead of every
 * rank gathering every device's input (front/local_devices.h), three
 * world-wide exchanges (ops/ops.h: op_world_transfers):
 *
 *   1. every device's parameters, to every rank (small; not traffic);
 *   2. the bytes each rank sends each other rank, once each device has
 *      checked its call (local(k, false)): every member of a group reaches
 *      the same verdict, so a group that refuses the call moves nothing,
 *      and a rank whose call is refused for one of its devices still sends
 *      its other groups' rows but writes nothing (as with one device per
 *      rank, the other groups' members get their results);
 *   3. the data: from each rank to each other, only the rows its devices
 *      send the other's devices (each pair's transfer as the op's
 *      f.transfers says, in a fixed order: sender's device slot, then the
 *      receiver's index in the group), packed straight from the operands
 *      and taken out of the windows straight into the outputs.
 *
 * Rows between a rank's own devices are copied from operand to output
 * (local(k, true) with the member's input).  A ragged_all_to_all thus
 * receives from other processes exactly the rows other processes' devices
 * send its devices. */
#ifndef SHMESH_FRONT_DEVICES_TRANSFERS_H
#define SHMESH_FRONT_DEVICES_TRANSFERS_H

#include "engine/call.h"

/* Runs the call of this rank's devices: ks[l] is the call of local device
 * ids[l], l < nlocal (all of one description), on a mesh of `per` devices
 * per rank whose groups leave ranks, where no device's output overlaps
 * another's input.  0 or the error. */
int dev_transfers_run(shmesh_ctx *c, struct call *ks, const int *ids, int nlocal, int per);

#endif
