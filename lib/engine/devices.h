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
 * rank moves device_count inputs per call); a device-level engine is future
 * work (docs/arrays.md). */
#ifndef SHMESH_ENGINE_DEVICES_H
#define SHMESH_ENGINE_DEVICES_H

#include "engine/call.h"
#include "mesh/mesh.h"

/* Whether a call on m takes the devices path. */
static inline bool devices_needed(const shmesh_mesh *m)
{
    return m && !m->abstract && (m->nlocal != 1 || m->process_local);
}

/* Room for a call per local device of m: NULL when out of memory (then
 * devices_finish reports it). */
struct call *devices_calls(const shmesh_mesh *m);
/* Runs the `prepared` calls (rc: the first failure of the preparation, which
 * stops there) and frees them; returns the result.  With a stream they are
 * one piece of its work (effects/stream.h), which copies what it needs of
 * m. */
int devices_finish(shmesh_mesh *m, struct call *ks, int prepared, int rc);

/* The body of every public collective: one call on a mesh with one device
 * here, a call per local device otherwise.  PREPARE prepares call K for
 * local device L (in + L, out + L); it is written once, so that the
 * compiler can inline it into the public function as before. */
#define DEVICES_RUN(m, K, L, PREPARE)                                                          \
    do {                                                                                       \
        struct call one_[1], *K##s_ = one_;                                                    \
        if (!m) /* the innermost pushed mesh, looked up once */                                \
            m = shmesh_mesh_current();                                                         \
        bool multi_ = devices_needed(m);                                                       \
        int n_ = 1, rc_ = 0, prepared_ = 0;                                                    \
        if (multi_) {                                                                          \
            K##s_ = devices_calls(m);                                                          \
            n_ = K##s_ ? m->nlocal : 0;                                                        \
            rc_ = K##s_ ? 0 : SHMESH_ERR_NOMEM;                                                \
        }                                                                                      \
        for (int L = 0; L < n_ && !rc_; L++, prepared_++) {                                    \
            struct call *K = K##s_ + L;                                                        \
            if (multi_)                                                                        \
                mesh_select(m, L);                                                             \
            rc_ = (PREPARE);                                                                   \
        }                                                                                      \
        return multi_ ? devices_finish(m, K##s_, prepared_, rc_) : call_finish(one_, rc_);     \
    } while (0)

#endif
