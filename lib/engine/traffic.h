/* Traffic between processes: what a call's data paths move from one
 * process to another, counted per call (struct call's sent and received),
 * per rank (the status block, shmesh_traffic_get) and in the trace.
 *
 * A byte counts once for each process that takes it: as received by the
 * process that reads it out of another's memory (a peer's window in the
 * slots, its shared-heap buffer, its private memory through
 * process_vm_readv, its device buffer through an IPC handle) or into whose
 * memory another writes it, and as sent by the process whose data it is.
 * Copies inside one process (a member's own block, devices of one rank)
 * and the engine's own exchanges (handshakes, status windows, a ragged
 * call's offsets) are not traffic.  Every member of a call counts its part
 * from the same numbers every member has, so over a call's group what is
 * sent equals what is received (tests/test_traffic.c checks it, and each
 * path's figures against the op's minimum). */
#ifndef SHMESH_ENGINE_TRAFFIC_H
#define SHMESH_ENGINE_TRAFFIC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/context.h"
#include "engine/call.h"

/* Whether member q of the call's group lives in another process. */
static inline bool call_other_process(const struct call *k, int q)
{
    if (__builtin_expect(k->net, 0)) /* the job's ranks, one device each */
        return q != k->g.me;
    return k->g.ranks[q] != k->c->rank;
}

/* Adds to the call's traffic. */
static inline void call_moved(struct call *k, uint64_t sent, uint64_t received)
{
    k->sent += sent;
    k->received += received;
}

#endif
