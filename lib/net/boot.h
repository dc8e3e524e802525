/* Joining a job that an MPI launcher started (mpirun, srun): shmesh_init's
 * first step there.  The network plugin (net/plugin.h) joins MPI and finds
 * the nodes; the first rank of this node creates its segment and passes
 * the path to it over MPI, and every rank then attaches as under
 * shmesh-run.  A job under shmesh-run never comes here (docs/multinode.md). */
#ifndef SHMESH_NET_BOOT_H
#define SHMESH_NET_BOOT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/settings.h"
#include "net/plugin.h"
#include "shm/segment.h"

struct net_boot {
    bool active;        /* an MPI job: the rest is set */
    const struct net_ops *ops; /* the plugin */
    struct net_world w;
    struct seg *created; /* the node's first rank: the segment it made (its descriptor the
                            others attach through), until they all joined */
    char segment[SEG_NAME_MAX];
};

/* Whether this process joins an MPI job (SHMESH_NET, the launcher's
 * environment) and, if so, does: e's segment, world and rank become the
 * node's (b->segment, b->w).  0 with b->active false for any other job; 0
 * with it true; or SHMESH_ERR_* with why (every rank of the job says the
 * same where the cause is the job's: a missing plugin, several nodes). */
int net_boot(struct settings *e, struct net_boot *b, char *why, size_t len);
/* After every rank of the node joined the segment: the creator's handle
 * closed (its name is long gone). */
void net_joined(struct net_boot *b);

#endif
