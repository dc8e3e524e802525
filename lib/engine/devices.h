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
 * mesh with one device per rank.  A local mesh needs no gather.
 *
 * Every rank receives every device's input: simple and exact, not fast (a
 * rank moves device_count inputs per call); a device-level engine is future
 * work (docs/arrays.md). */
#ifndef SHMESH_ENGINE_DEVICES_H
#define SHMESH_ENGINE_DEVICES_H

#include "engine/call.h"
#include "mesh/mesh.h"

/* Whether a call on m takes the devices path (m NULL: the current mesh). */
static inline bool devices_needed(const shmesh_mesh *m)
{
    if (!m)
        m = shmesh_mesh_current();
    return m && !m->abstract && (m->nlocal != 1 || m->process_local);
}

/* Room for a call per local device of m (the current mesh when NULL): NULL
 * when out of memory (then devices_finish reports it). */
struct call *devices_calls(shmesh_mesh **m);
/* Runs the `prepared` calls (rc: the first failure of the preparation, which
 * stops there), frees them, and returns the result. */
int devices_finish(shmesh_mesh *m, struct call *ks, int prepared, int rc);

/* The body of every public collective: one call on a mesh with one device
 * here, a call per local device otherwise.  PREPARE prepares call K for
 * local device L (in + L, out + L). */
#define DEVICES_RUN(m, K, L, PREPARE)                                                          \
    do {                                                                                       \
        if (!devices_needed(m)) {                                                              \
            struct call K[1];                                                                  \
            const int L = 0;                                                                   \
            return call_finish(K, (PREPARE));                                                  \
        }                                                                                      \
        struct call *K##s_ = devices_calls(&m);                                                \
        int rc_ = K##s_ ? 0 : SHMESH_ERR_NOMEM, n_ = 0;                                        \
        for (int L = 0; K##s_ && !rc_ && L < m->nlocal; L++, n_++) {                            \
            struct call *K = K##s_ + L;                                                        \
            mesh_select(m, L);                                                                 \
            rc_ = (PREPARE);                                                                   \
        }                                                                                      \
        return devices_finish(m, K##s_, n_, rc_);                                              \
    } while (0)

#endif
