/* Joining an MPI job (see boot.h). */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/plugin.h"
#include "net/boot.h"
#include "shmesh.h"

/* The plugin, once loaded: kept for the process's life (MPI is the
 * process's, and is finalized at its exit). */
static const struct net_ops *ops;

/* Variables an MPI launcher sets in every process it starts: Open MPI's,
 * PMIx's (Open MPI 5, Slurm), MPICH's Hydra and Slurm's PMI. */
static const char *mpi_launcher(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                                       "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return vars[i];
    return NULL;
}

/* The job spans several nodes (the last net_boot's). */
static bool several_nodes;

/* At the process's exit: MPI finalized, unless the process fails (a
 * status other than 0, or in a job of several nodes a context poisoned):
 * then the whole job ends (MPI_Abort), since ranks on other nodes may wait
 * for this one in vain, where mpirun would wait for them after a finalize.
 * (On one node the others learn of a failure through the segment.) */
static void at_exit(int status, void *arg)
{
    (void)arg;
    if (!ops)
        return;
    if (status || (several_nodes && atomic_load(&ctx_poisoned_here)))
        ops->abort(status ? status : 1);
    ops->finalize();
}

#ifndef __GLIBC__
static void at_exit_plain(void) { at_exit(0, NULL); }
#endif

/* The plugin from beside the library: 0, or SHMESH_ERR_INVALID with why. */
static int load(const char *launcher, char *why, size_t len)
{
    if (ops)
        return 0;
    char err[512], path[PLUGIN_PATH_MAX];
    void *dl, *sym = plugin_open_beside("net", "libshmesh-net-mpi.so", NET_ENTRY, "network", &dl,
                                        path, err, sizeof err);
    if (sym) {
        net_entry_fn entry;
        memcpy(&entry, &sym, sizeof entry); /* POSIX: a function's address as dlsym gives it */
        const struct net_ops *o = entry();
        if (o && o->abi == NET_ABI) {
            ops = o;
#ifdef __GLIBC__
            on_exit(at_exit, NULL); /* glibc's: with the exit status */
#else
            atexit(at_exit_plain);
#endif
            return 0;
        }
        snprintf(err, sizeof err, "%.300s: a plugin of another version of shmesh (its ABI "
                                  "differs)", path);
        dlclose(dl);
    }
    char who[96];
    if (launcher)
        snprintf(who, sizeof who, "an MPI launcher started this process (%s is set)", launcher);
    else
        snprintf(who, sizeof who, "SHMESH_NET=mpi");
    snprintf(why, len,
             "shmesh_init: %s, but %s: shmesh was built without Open MPI's development files "
             "(Debian: libopenmpi-dev; then rebuild), or run each process as a job of its own "
             "with SHMESH_NET=none",
             who, err[0] ? err : "libshmesh-net-mpi.so is not beside libshmesh");
    return SHMESH_ERR_INVALID;
}

/* The node's first rank makes the segment; every rank learns its path, or
 * the creator's failure. */
struct made {
    int rc;
    int rank; /* the creator's rank in the job (a node's ranks need not be consecutive) */
    char path[SEG_NAME_MAX];
    char why[400];
};

int net_boot(struct settings *e, struct net_boot *b, char *why, size_t len)
{
    memset(b, 0, sizeof *b);
    const char *launcher = mpi_launcher();
    if (e->net == SETTINGS_NET_NONE || e->segment || (e->net == SETTINGS_NET_AUTO && !launcher)) {
        if (e->net == SETTINGS_NET_MPI && e->segment) {
            snprintf(why, len, "SHMESH_NET=mpi, but shmesh-run started this process "
                               "(SHMESH_SEGMENT is set): a job is one or the other");
            return SHMESH_ERR_INVALID;
        }
        return 0;
    }
    int rc = load(launcher, why, len);
    if (rc)
        return rc;
    if (ops->init(e->node_size, e->node_cyclic, &b->w, why, len))
        return SHMESH_ERR_SYSTEM;
    b->active = true;
    b->ops = ops;
    const struct net_world *w = &b->w;
    several_nodes = w->nodes > 1;
    struct made m = {.rank = w->rank};
    if (w->local_rank == 0) {
        struct seg_create_opts so = {.world_size = w->local_size,
                                     .slot_bytes = e->slot_bytes,
                                     .total_bytes = e->shm_size,
                                     .numa = -1};
        m.rc = seg_create(&so, &b->created, m.why, sizeof m.why);
        if (!m.rc && (m.rc = seg_fd_path(b->created, m.path, sizeof m.path)))
            snprintf(m.why, sizeof m.why, "cannot remove the name of segment %s",
                     b->created->name);
    }
    if (ops->node_bcast(&m, sizeof m, 0, why, len))
        return SHMESH_ERR_SYSTEM;
    if (m.rc) {
        snprintf(why, len, "the node's first rank (rank %d of the job) could not make the "
                           "segment: %s", m.rank, m.why);
        return SHMESH_ERR_SYSTEM;
    }
    snprintf(b->segment, sizeof b->segment, "%s", m.path);
    e->segment = b->segment;
    e->world = w->local_size;
    e->rank = w->local_rank;
    e->local_rank = w->local_rank;
    return 0;
}

void net_joined(struct net_boot *b)
{
    seg_close(b->created);
    b->created = NULL;
}
