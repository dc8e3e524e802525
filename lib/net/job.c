/* The job beyond this node (see job.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/context.h"
#include "core/fail.h"
#include "net/job.h"

int job_open(shmesh_ctx *c, const struct net_boot *b, char *why, size_t len)
{
    c->job_rank = c->rank;
    c->job_size = c->world;
    if (!b->active || b->w.nodes < 2)
        return 0;
    const struct net_world *w = &b->w;
    struct job *j = calloc(1, sizeof *j);
    int *tables = calloc((size_t)(2 * w->size + w->local_size), sizeof *tables);
    if (!j || !tables) {
        free(j);
        free(tables);
        snprintf(why, len, "out of memory for the table of the job's %d ranks", w->size);
        return SHMESH_ERR_NOMEM;
    }
    *j = (struct job){.ops = b->ops, .node = w->node, .nodes = w->nodes, .node_of = tables,
                      .seg_rank = tables + w->size, .job_of = tables + 2 * w->size,
                      .library = b->ops->library()};
    c->job = j;
    c->job_of_seg = j->job_of;
    c->job_rank = w->rank;
    c->job_size = w->size;
    if (b->ops->nodes(j->node_of, why, len)) {
        job_close(c);
        return SHMESH_ERR_SYSTEM;
    }
    /* A node's ranks are its segment's in the order of their job ranks
     * (net/mpi.c splits by rank). */
    int here = 0;
    for (int r = 0; r < w->size; r++) {
        j->seg_rank[r] = -1;
        if (j->node_of[r] == w->node) {
            if (here < w->local_size)
                j->job_of[here] = r;
            j->seg_rank[r] = here++;
        }
    }
    if (here != w->local_size || j->seg_rank[w->rank] != w->local_rank) {
        snprintf(why, len, "the job's table of nodes gives this node %d ranks (this one its "
                           "rank %d), where MPI gave it %d (rank %d)",
                 here, j->seg_rank[w->rank], w->local_size, w->local_rank);
        job_close(c);
        return SHMESH_ERR_SYSTEM;
    }
    return 0;
}

void *job_buffer(shmesh_ctx *c, int which, size_t bytes)
{
    struct job *j = c->job;
    if (j->buf_cap[which] < bytes || !j->buf[which]) {
        free(j->buf[which]);
        size_t cap = bytes < 4096 ? 4096 : bytes;
        j->buf[which] = malloc(cap);
        j->buf_cap[which] = j->buf[which] ? cap : 0;
    }
    return j->buf[which];
}

void job_close(shmesh_ctx *c)
{
    if (!c->job)
        return;
    free(c->job->buf[0]);
    free(c->job->buf[1]);
    free(c->job->node_of);
    free(c->job);
    c->job = NULL;
    c->job_of_seg = NULL;
    c->job_rank = c->rank;
    c->job_size = c->world;
}

struct watch {
    shmesh_ctx *c;
    int64_t limit_ns; /* 0: none */
    bool quiet;       /* the limit ends the wait without poisoning the context */
    const char *op;
    uint64_t seq;
    struct timespec t0;
    int polls;
};

/* Between polls of the messages: the node's abort record (a rank of this
 * node failed, or the job was aborted), and the context's timeout. */
static int watch(void *arg)
{
    struct watch *w = arg;
    shmesh_ctx *c = w->c;
    if (++w->polls & 63)
        return 0;
    int rc = fail_if_aborted(c, w->op, w->seq);
    if (rc)
        return rc;
    if (w->limit_ns) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        int64_t ns = (t.tv_sec - w->t0.tv_sec) * 1000000000LL + (t.tv_nsec - w->t0.tv_nsec);
        if (ns > w->limit_ns && w->quiet)
            return SHMESH_ERR_TIMEOUT;
        if (ns > w->limit_ns)
            return ctx_poison(c, SHMESH_ERR_TIMEOUT,
                              "%s (call #%llu): its messages to and from the other nodes did "
                              "not arrive within %s (%.3g s)",
                              w->op, (unsigned long long)w->seq,
                              "SHMESH_TIMEOUT",
                              (double)w->limit_ns / 1e9);
    }
    return 0;
}

int job_exchange(shmesh_ctx *c, const char *op, uint64_t seq, struct net_msg *msgs, int n,
                 int64_t limit_ns)
{
    struct watch w = {c, limit_ns > 0 ? limit_ns : c->waiter.timeout_ns, limit_ns > 0, op, seq,
                      {0, 0}, 0};
    clock_gettime(CLOCK_MONOTONIC, &w.t0);
    char why[400];
    int rc = c->job->ops->exchange(msgs, n, watch, &w, why, sizeof why);
    if (rc == -1)
        return ctx_poison(c, SHMESH_ERR_SYSTEM, "%s (call #%llu): %s (%s)", op,
                          (unsigned long long)seq, why, c->job->library);
    return rc;
}
