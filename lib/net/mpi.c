/* libshmesh-net-mpi.so: the network plugin over MPI (net/plugin.h).  It
 * links the MPI library; libshmesh loads it only for a job that an MPI
 * launcher started (net/boot.c). */
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

static MPI_Comm node_comm = MPI_COMM_NULL;
/* The collectives' messages: a communicator of their own, so that the
 * program's own MPI traffic never meets them. */
static MPI_Comm data_comm = MPI_COMM_NULL;
static int my_node;        /* init's answer */
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

static int init(int node_size, bool cyclic, struct net_world *w, char *why, size_t len)
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
    if (data_comm != MPI_COMM_NULL)
        MPI_Comm_free(&data_comm);
    /* Errors come back as codes, not as an abort inside MPI. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    int nodes = node_size > 0 ? (w->size + node_size - 1) / node_size : 0;
    if (node_size > 0) /* a node's ranks in job order (the key): its segment's */
        err = MPI_Comm_split(MPI_COMM_WORLD, cyclic ? w->rank % nodes : w->rank / node_size,
                             w->rank, &node_comm);
    else
        err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL,
                                  &node_comm);
    if (err != MPI_SUCCESS)
        return mpi_why(err, node_size > 0 ? "MPI_Comm_split" : "MPI_Comm_split_type", why, len);
    MPI_Comm_set_errhandler(node_comm, MPI_ERRORS_RETURN);
    if ((err = MPI_Comm_dup(MPI_COMM_WORLD, &data_comm)) != MPI_SUCCESS)
        return mpi_why(err, "MPI_Comm_dup", why, len);
    MPI_Comm_set_errhandler(data_comm, MPI_ERRORS_RETURN);
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
    w->node = my_node = node;
    return 0;
}

static int node_bcast(void *buf, size_t bytes, int root, char *why, size_t len)
{
    int err = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, node_comm);
    return err == MPI_SUCCESS ? 0 : mpi_why(err, "MPI_Bcast on the node", why, len);
}

static int nodes(int *node_of, char *why, size_t len)
{
    int err = MPI_Allgather(&my_node, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD);
    return err == MPI_SUCCESS ? 0 : mpi_why(err, "MPI_Allgather of the nodes", why, len);
}

/* Messages go in pieces of at most this many bytes (MPI counts are ints). */
#define PIECE ((size_t)1 << 30)

static int pieces(const void *buf, size_t bytes)
{
    return !buf ? 0 : bytes ? (int)((bytes + PIECE - 1) / PIECE) : 1;
}

/* Requests left behind (a failed or abandoned exchange): the receives,
 * req[0..nrecv), cancelled and completed, so that nothing lands later in
 * buffers their owners free; the sends cancelled and let go. */
static void cancel_pending(MPI_Request *req, int r, int nrecv)
{
    for (int q = 0; q < r; q++) {
        if (req[q] == MPI_REQUEST_NULL)
            continue;
        MPI_Cancel(&req[q]);
        if (q < nrecv)
            MPI_Wait(&req[q], MPI_STATUS_IGNORE);
        else
            MPI_Request_free(&req[q]);
    }
}

static int exchange(struct net_msg *msgs, int n, int (*idle)(void *arg), void *arg, char *why,
                    size_t len)
{
    int nreq = 0, nrecv = 0;
    for (int i = 0; i < n; i++) {
        nrecv += pieces(msgs[i].recv, msgs[i].recv_cap);
        nreq += pieces(msgs[i].send, msgs[i].send_bytes) + pieces(msgs[i].recv, msgs[i].recv_cap);
    }
    MPI_Request *req = malloc(sizeof *req * (size_t)nreq);
    MPI_Status *st = malloc(sizeof *st * (size_t)nreq);
    if (!req || !st) {
        free(req);
        free(st);
        snprintf(why, len, "out of memory for %d MPI requests", nreq);
        return -1;
    }
    int r = 0, err = MPI_SUCCESS;
    /* Receives first, so that the sends find them posted. */
    for (int i = 0; i < n && err == MPI_SUCCESS; i++)
        for (int p = 0; p < pieces(msgs[i].recv, msgs[i].recv_cap) && err == MPI_SUCCESS; p++) {
            size_t at = (size_t)p * PIECE, left = msgs[i].recv_cap - at;
            err = MPI_Irecv((char *)msgs[i].recv + at, (int)(left < PIECE ? left : PIECE),
                            MPI_BYTE, msgs[i].peer, 0, data_comm, &req[r++]);
        }
    for (int i = 0; i < n && err == MPI_SUCCESS; i++)
        for (int p = 0; p < pieces(msgs[i].send, msgs[i].send_bytes) && err == MPI_SUCCESS;
             p++) {
            size_t at = (size_t)p * PIECE, left = msgs[i].send_bytes - at;
            err = MPI_Isend((const char *)msgs[i].send + at, (int)(left < PIECE ? left : PIECE),
                            MPI_BYTE, msgs[i].peer, 0, data_comm, &req[r++]);
        }
    int rc = 0, posted = r;
    if (err != MPI_SUCCESS) {
        rc = mpi_why(err, "posting the collective's messages", why, len);
        cancel_pending(req, r, r < nrecv ? r : nrecv); /* what was posted */
        free(req);
        free(st);
        return rc;
    }
    /* Polled, yielding the core between polls: ranks may outnumber cores. */
    for (unsigned spins = 0;; spins++) {
        int done = 0;
        err = MPI_Testall(r, req, &done, st);
        if (err != MPI_SUCCESS && err != MPI_ERR_IN_STATUS) {
            rc = mpi_why(err, "MPI_Testall", why, len);
            break;
        }
        if (done || err == MPI_ERR_IN_STATUS)
            break;
        if ((rc = idle(arg)) != 0) { /* abandoned: the job is ending */
            cancel_pending(req, posted, nrecv);
            free(req);
            free(st);
            return rc;
        }
        if (spins > 64)
            sched_yield();
    }
    if (!rc) {
        r = 0;
        for (int i = 0; i < n; i++) {
            size_t got = 0;
            for (int p = 0; p < pieces(msgs[i].recv, msgs[i].recv_cap); p++, r++) {
                int count = 0;
                if (got == SIZE_MAX || rc)
                    continue;
                if (err == MPI_ERR_IN_STATUS && st[r].MPI_ERROR != MPI_SUCCESS) {
                    if (st[r].MPI_ERROR == MPI_ERR_TRUNCATE)
                        got = SIZE_MAX; /* more than the receiver expected */
                    else if (st[r].MPI_ERROR != MPI_ERR_PENDING)
                        rc = mpi_why(st[r].MPI_ERROR, "receiving a collective's message", why,
                                     len);
                    continue;
                }
                MPI_Get_count(&st[r], MPI_BYTE, &count);
                got += (size_t)count;
            }
            msgs[i].recv_bytes = got;
            if (rc)
                break;
        }
    }
    if (err == MPI_ERR_IN_STATUS) /* some failed: the others may still be pending */
        cancel_pending(req, posted, nrecv);
    free(req);
    free(st);
    return rc;
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
    if (data_comm != MPI_COMM_NULL)
        MPI_Comm_free(&data_comm);
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
    .nodes = nodes,
    .exchange = exchange,
    .library = library,
    .abort = job_abort,
    .finalize = finalize,
};

const struct net_ops *shmesh_net_mpi_v1(void);
__attribute__((visibility("default"))) const struct net_ops *shmesh_net_mpi_v1(void)
{
    return &ops;
}
