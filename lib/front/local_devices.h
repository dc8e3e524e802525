/* Several devices per rank: a collective on a mesh where this rank holds
 * more than one device (or on a local mesh, whose devices are all here).
 *
 * The op prepares one call per local device, in mesh order (mesh_select
 * points group resolution at that device), without submitting them.  Then
 * every rank puts all its devices' inputs into one world-wide gather (a
 * single call through the engine, which carries the first device's
 * description, so ranks still compare their calls), and each local device's
 * output is computed here from its members' inputs by the peer algorithms
 * (paths/peer.h: peer_local), in group order: the bits are those of the same
 * mesh with one device per rank.  An op whose data is more than its input
 * publishes its own bytes and computes its own part (struct call's
 * pub_bytes, pub_pack, local: ragged_all_to_all).  A local mesh needs no
 * gather, and neither does a call whose every group lies inside one rank
 * (over a batched axis alone, or axes along a rank's own devices): it runs
 * inside each process, and ranks do not compare it.
 *
 * Every rank receives every device's input: simple and exact, not fast (a
 * rank moves device_count inputs per call).  Reductions and moves whose
 * groups leave ranks move only what their devices need instead
 * (front/devices_exchange.h), and so does ragged_all_to_all
 * (front/devices_transfers.h); the gather serves calls where a device's
 * output overlaps another's input. */
#ifndef SHMESH_FRONT_LOCAL_DEVICES_H
#define SHMESH_FRONT_LOCAL_DEVICES_H

#include "engine/call.h"
#include "mesh/mesh.h"

/* Room for a call per local device of m: NULL when out of memory (then
 * devices_finish reports it). */
struct call *devices_calls(const shmesh_mesh *m);
/* Runs the `prepared` calls (rc: the first failure of the preparation, which
 * stops there) and frees them; returns the result.  With a dispatcher, or
 * `async` (an `_async` form: where its token goes), they are one piece of
 * its work (engine/dispatch.h), which copies what it needs of m.  gs: the
 * call's axis_index_groups (NULL: none).  The front door (front/front.c)
 * prepares them. */
int devices_finish(shmesh_mesh *m, const shmesh_groups *gs, struct call *ks, int prepared, int rc,
                   shmesh_token *async);

#endif
