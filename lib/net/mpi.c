/* libshmesh-net-mpi.so: the network plugin over MPI (net/plugin.h).  It
 * links the MPI library; libshmesh loads it only for a job that an MPI
 * launcher started (net/boot.c). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "plugin.h"

static MPI_Comm node_comm = MPI_COMM_NULL;
static int we_initialized; /* this plugin called MPI_Init_thread */
static char library_name[128];

static int mpi_why(int err, const char *what, char *why, size_t len)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(err, text, &n);
    snprintf(why, len, "%s failed: %s", what, text);
    return -1;
}

static int init(int node_size, struct net_world *w, char *why, size_t len)
{
    int inited = 0, err;
    MPI_Initialized(&inited);
    if (!inited) {
        /* Serialized: later calls come from one thread at a time (the
         * context's, or its dispatcher's). */
        int provided = 0;
        if ((err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS)
            return mpi_why(err, "MPI_Init_thread", why, len);
        we_initialized = 1;
    }
    if (node_comm != MPI_COMM_NULL) /* a second shmesh_init: the nodes found again */
        MPI_Comm_free(&node_comm);
    /* Errors come back as codes, not as an abort inside MPI. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    if (node_size > 0)
        err = MPI_Comm_split(MPI_COMM_WORLD, w->rank / node_size, w->rank, &node_comm);
    else
        err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL,
                                  &node_comm);
    if (err != MPI_SUCCESS)
        return mpi_why(err, node_size > 0 ? "MPI_Comm_split" : "MPI_Comm_split_type", why, len);
    MPI_Comm_set_errhandler(node_comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(node_comm, &w->local_rank);
    MPI_Comm_size(node_comm, &w->local_size);
    /* The nodes: their first ranks counted, in rank order. */
    int first = w->local_rank == 0, before = 0;
    MPI_Allreduce(&first, &w->nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Exscan(&first, &before, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (w->rank == 0)
        before = 0; /* (MPI_Exscan leaves rank 0's undefined) */
    /* A node's number: its first rank's count of first ranks before it. */
    int node = first ? before : 0;
    MPI_Bcast(&node, 1, MPI_INT, 0, node_comm);
    w->node = node;
    return 0;
}

static int node_bcast(void *buf, size_t bytes, int root, char *why, size_t len)
{
    int err = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, node_comm);
    return err == MPI_SUCCESS ? 0 : mpi_why(err, "MPI_Bcast on the node", why, len);
}

static const char *library(void)
{
    if (!library_name[0]) {
        char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int n = 0;
        MPI_Get_library_version(v, &n);
        snprintf(library_name, sizeof library_name, "%.*s", (int)strcspn(v, ",\n"), v);
    }
    return library_name;
}

static void job_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void finalize(void)
{
    if (node_comm != MPI_COMM_NULL)
        MPI_Comm_free(&node_comm);
    int done = 0;
    MPI_Finalized(&done);
    if (we_initialized && !done)
        MPI_Finalize();
    we_initialized = 0;
}

static const struct net_ops ops = {
    .abi = NET_ABI,
    .init = init,
    .node_bcast = node_bcast,
    .library = library,
    .abort = job_abort,
    .finalize = finalize,
};

const struct net_ops *shmesh_net_mpi_v1(void);
__attribute__((visibility("default"))) const struct net_ops *shmesh_net_mpi_v1(void)
{
    return &ops;
}
