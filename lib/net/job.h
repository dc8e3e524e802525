/* The job beyond this node: an MPI job of several nodes (docs/multinode.md).
 *
 * The context's own ranks (c->rank, c->world) stay its node's, the
 * segment's: everything that moves through shared memory is addressed by
 * them.  The job's ranks are MPI's (c->job_rank, c->job_size), and device
 * ids, meshes and the public API count in them.  A group whose members all
 * live on this node runs on the node's paths, its members turned into the
 * node's ranks (engine/call.c); a group that spans nodes is a call across
 * nodes (k->net), which paths/net.c carries over MPI.  A job of one node
 * has no struct job (c->job NULL) and never comes here. */
#ifndef SHMESH_NET_JOB_H
#define SHMESH_NET_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "net/boot.h"
#include "net/plugin.h"
#include "shmesh.h"

struct job {
    const struct net_ops *ops;
    int node, nodes;
    int *node_of;  /* by job rank: its node */
    int *seg_rank; /* by job rank: its rank on this node's segment, -1 on another node */
    int *job_of;   /* by the node's rank: its rank in the job */
    const char *library; /* the MPI library, for messages */
    /* Bytes of calls' data this rank sent to ranks on other nodes, and
     * received from them (paths/net.c; shmesh_traffic_nodes_get). */
    uint64_t sent, received;
    /* Calls' staging buffers (job_buffer), kept from call to call: a large
     * one freed and made again at every call costs its page faults. */
    void *buf[2];
    size_t buf_cap[2];
};

/* Buffer `which` (0 or 1) of at least `bytes`, kept for the next calls;
 * NULL when out of memory. */
void *job_buffer(shmesh_ctx *c, int which, size_t bytes);

/* For a job of several nodes (b from net_boot): c->job, c->job_rank and
 * c->job_size set, the nodes' table read over MPI.  0, or SHMESH_ERR_*
 * with why.  A job of one node: nothing to do, 0. */
int job_open(shmesh_ctx *c, const struct net_boot *b, char *why, size_t len);
void job_close(shmesh_ctx *c);

/* The messages of one call across nodes (net/plugin.h), sent and received;
 * while they are not, the node's abort record and the context's timeout
 * (limit_ns > 0: that many nanoseconds instead, after which it returns
 * SHMESH_ERR_TIMEOUT and leaves the context as it is) are watched.  0, or
 * the error the context is poisoned with. */
int job_exchange(shmesh_ctx *c, const char *op, uint64_t seq, struct net_msg *msgs, int n,
                 int64_t limit_ns);

#endif
