/* The network plugin's interface: what libshmesh asks of the existing
 * engine that joins nodes (MPI), through libshmesh-net-mpi.so, which
 * links the MPI library so that libshmesh does not (docs/multinode.md).
 * The plugin includes this header alone and exports its entry point alone
 * (net/plugin.map); libshmesh loads it (net/boot.c) only for a job an MPI
 * launcher started. */
#ifndef SHMESH_NET_PLUGIN_H
#define SHMESH_NET_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NET_ABI 3u
#define NET_ENTRY "shmesh_net_mpi_v1"

/* This process's place in the job. */
struct net_world {
    int rank, size;             /* MPI's world: the job's ranks */
    int node, nodes;            /* this process's node, and how many there are */
    int local_rank, local_size; /* its rank on its node, and the node's ranks */
};

/* One member's part of an exchange (net_ops.exchange): what this process
 * sends rank `peer` of the job and where what it sends back lands (send
 * NULL: nothing sent; recv NULL: nothing received). */
struct net_msg {
    int peer;        /* a rank of the job, not this one */
    const void *send;
    size_t send_bytes;
    void *recv;
    size_t recv_cap;  /* the most it may send */
    size_t recv_bytes; /* out: what it sent; SIZE_MAX: more than recv_cap */
};

struct net_ops {
    uint32_t abi; /* NET_ABI */
    /* Joins the job (MPI_Init_thread, unless the program initialized MPI
     * already: then its own, which finalize leaves) and finds the nodes:
     * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or with node_size > 0
     * nodes of that many consecutive ranks (SHMESH_NODE_SIZE: several
     * "nodes" on one machine, for tests), or with `cyclic` as many nodes
     * with the ranks dealt to them in turn (SHMESH_NODE_CYCLIC).  0, or -1
     * with why. */
    int (*init)(int node_size, bool cyclic, struct net_world *w, char *why, size_t len);
    /* `bytes` of buf from the node's rank `root` to the node's others. */
    int (*node_bcast)(void *buf, size_t bytes, int root, char *why, size_t len);
    /* Every rank's node, by rank, into node_of[size] (after init). */
    int (*nodes)(int *node_of, char *why, size_t len);
    /* Each message of msgs[0..n) sent and received: all posted at once,
     * then completed; while they are not, `idle(arg)` is asked between
     * polls, and a non-zero answer ends the wait (the job is ending: the
     * messages are left to MPI's abort).  0, the idle's answer, or -1 with
     * why. */
    int (*exchange)(struct net_msg *msgs, int n, int (*idle)(void *arg), void *arg, char *why,
                    size_t len);
    /* The library and version (MPI_Get_library_version's first line). */
    const char *(*library)(void);
    /* Ends the whole job at once (MPI_Abort), from any rank. */
    void (*abort)(int code);
    /* MPI_Finalize where init called MPI_Init_thread; else nothing. */
    void (*finalize)(void);
};

typedef const struct net_ops *(*net_entry_fn)(void);

#endif
