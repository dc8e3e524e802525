/* Single copy between ranks: process_vm_readv reads a peer's private
 * buffer straight into ours, one copy instead of the two that staging takes
 * (into a slot, out of it).  The kernel may refuse it (seccomp, Yama,
 * another user): every rank tries it on every peer at start-up and says
 * whether it may, and a call takes this path only when every member may.
 * A read that fails anyway (a buffer the kernel cannot read) fails the
 * call on every member (paths/peer.c), never the job. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/context.h"
#include "core/debug.h"
#include "engine/path.h"
#include "engine/state.h"
#include "paths/peer.h"
#include "paths/rsag.h"
#include "paths/single_copy.h"
#include "paths/state.h"
#include "shm/proc.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif

/* The parent of `pid`, from /proc: 0 when it cannot be read. */
static pid_t parent_of(pid_t pid)
{
    struct proc_stat st;
    return proc_read_stat(NULL, pid, &st) ? st.ppid : 0;
}

/* The launcher that created the segment, when it is an ancestor of this
 * process (the ranks are its descendants); 0 otherwise. */
static pid_t launcher_ancestor(const shmesh_ctx *c)
{
    pid_t launcher = (pid_t)c->seg->hdr->creator_pid;
    if (launcher <= 1)
        return 0;
    pid_t p = getppid();
    for (int depth = 0; p > 1 && depth < 64; depth++, p = parent_of(p))
        if (p == launcher)
            return launcher;
    return 0;
}

void cma_publish(shmesh_ctx *c, bool allowed)
{
    struct paths_state *paths = paths_of(c);
    paths->probe_word = 0x5348534d45534800ull ^ (uint64_t)getpid();
    c->me->probe_addr = (uint64_t)(uintptr_t)&paths->probe_word;
    c->me->probe_value = paths->probe_word;
    paths->ptracer = 0;
    if (c->world < 2 || !allowed)
        return; /* no peer reads this rank: ptrace stays as the system has it */
    /* Under Yama's ptrace_scope 1 only ancestors may read a process unless it
     * names a tracer; the peers are siblings.  Naming the launcher lets it
     * and its descendants (the job) read this rank, and no one else. */
    pid_t launcher = launcher_ancestor(c);
    if (launcher && prctl(PR_SET_PTRACER, (unsigned long)launcher, 0, 0, 0) == 0)
        paths->ptracer = launcher;
    if (c->debug & DEBUG_PATHS)
        debug_line(c, "single copy: %s", !launcher ? "the launcher is not an ancestor: ptrace "
                                                     "left as the system sets it"
                                         : paths->ptracer ? "PR_SET_PTRACER names the launcher"
                                                      : "no Yama: ptrace left as the system "
                                                        "sets it");
}

void cma_probe(shmesh_ctx *c, bool allowed)
{
    struct engine_state *engine = engine_of(c);
    engine->cma_ok = c->world > 1 && allowed;
    for (int r = 0; r < c->world && engine->cma_ok; r++) {
        if (r == c->rank)
            continue;
        const struct seg_ctrl *pc = seg_ctrl(c->seg, r);
        uint64_t got = 0;
        struct iovec local = {&got, sizeof got},
                     remote = {(void *)(uintptr_t)pc->probe_addr, sizeof got};
        pid_t pid = c->pids[r];
        engine->cma_ok = pid > 0 &&
                    process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof got &&
                    got == pc->probe_value;
    }
    if (!engine->cma_ok && paths_of(c)->ptracer) {
        /* This rank will never take single copy: take the permission back. */
        prctl(PR_SET_PTRACER, 0, 0, 0, 0);
        paths_of(c)->ptracer = 0;
    }
}

/* Reads iov[0..n) of rank r into one local buffer, resuming short reads:
 * 0, or SHMESH_ERR_SYSTEM with the errno in k->err (struct peer_access). */
static int readv_all(struct call *k, int r, unsigned char *dst, struct iovec *iov, int n)
{
    pid_t pid = k->c->pids[r];
    while (n > 0) {
        uint64_t want = 0;
        for (int i = 0; i < n; i++)
            want += iov[i].iov_len;
        struct iovec local = {dst, want};
        ssize_t got = process_vm_readv(pid, &local, 1, iov, (unsigned long)n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            k->err = got < 0 ? errno : EFAULT;
            return SHMESH_ERR_SYSTEM;
        }
        dst += got;
        while (n > 0 && (uint64_t)got >= iov->iov_len) {
            got -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (unsigned char *)iov->iov_base + got;
            iov->iov_len -= (size_t)got;
        }
    }
    return 0;
}

static int cma_read(struct call *k, int q, bool output, uint64_t off, void *dst, uint64_t len)
{
    if (!len)
        return 0;
    uint64_t addr = (output ? k->s->cout[q] : k->s->cin[q]) + off;
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    return readv_all(k, k->g.ranks[q], dst, &remote, 1);
}

#define IOVS 512

struct box_reader {
    struct call *k;
    int r;
    uint64_t addr;
    size_t esz;
    unsigned char *dst;
    struct iovec iov[IOVS];
    int n;
    int rc; /* 0, or the first failed read's (k->err has its errno) */
};

static void flush_runs(struct box_reader *br)
{
    if (br->n && !br->rc) {
        uint64_t bytes = 0;
        for (int i = 0; i < br->n; i++)
            bytes += br->iov[i].iov_len;
        br->rc = readv_all(br->k, br->r, br->dst, br->iov, br->n);
        br->dst += bytes;
    }
    br->n = 0;
}

static void add_run(void *arg, uint64_t array_off, uint64_t packed_off, uint64_t len)
{
    struct box_reader *br = arg;
    if (br->n == IOVS)
        flush_runs(br);
    br->iov[br->n++] = (struct iovec){(void *)(uintptr_t)(br->addr + array_off * br->esz),
                                      len * br->esz};
}

static int cma_read_box(struct call *k, int q, const struct box *b, uint64_t first,
                        uint64_t count, void *dst)
{
    struct box_reader br = {.k = k, .r = k->g.ranks[q], .addr = k->s->cin[q], .esz = b->esz,
                            .dst = dst};
    box_runs(b, first, count, add_run, &br);
    flush_runs(&br);
    return br.rc;
}

/* Drops the first `got` bytes of an iovec list: its new length. */
static int iov_advance(struct iovec **iov, int n, size_t got)
{
    while (n > 0 && got >= (*iov)->iov_len) {
        got -= (*iov)->iov_len;
        (*iov)++;
        n--;
    }
    if (n > 0) {
        (*iov)->iov_base = (unsigned char *)(*iov)->iov_base + got;
        (*iov)->iov_len -= got;
    }
    return n;
}

/* A transfers flow's rows (engine/flow.h): pairs of a run of the peer's
 * memory and where it lands here, IOVS at a time. */
struct cma_rows {
    struct rows_reader r;
    struct call *k;
    pid_t pid;
    struct iovec local[IOVS], remote[IOVS];
    int n;
    int rc; /* 0, or the first failed read's (k->err has its errno) */
};

static void rows_flush(struct cma_rows *cr)
{
    struct iovec *local = cr->local, *remote = cr->remote;
    int nl = cr->n, nr = cr->n;
    cr->n = 0;
    while (nl > 0 && nr > 0 && !cr->rc) {
        ssize_t got = process_vm_readv(cr->pid, local, (unsigned long)nl, remote,
                                       (unsigned long)nr, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            cr->k->err = got < 0 ? errno : EFAULT;
            cr->rc = SHMESH_ERR_SYSTEM;
            break;
        }
        nl = iov_advance(&local, nl, (size_t)got);
        nr = iov_advance(&remote, nr, (size_t)got);
    }
}

static int rows_read(struct rows_reader *r, void *dst, uint64_t addr, uint64_t len)
{
    struct cma_rows *cr = (struct cma_rows *)r;
    if (!len || cr->rc)
        return cr->rc;
    if (cr->n == IOVS)
        rows_flush(cr);
    cr->local[cr->n] = (struct iovec){dst, len};
    cr->remote[cr->n++] = (struct iovec){(void *)(uintptr_t)addr, len};
    return cr->rc;
}

static int rows_read_now(struct rows_reader *r, void *dst, uint64_t addr, uint64_t len)
{
    struct cma_rows *cr = (struct cma_rows *)r;
    rows_read(r, dst, addr, len);
    rows_flush(cr);
    return cr->rc;
}

static int cma_rows(struct call *k, int q)
{
    struct cma_rows cr = {
        .r = {rows_read, rows_read_now}, .k = k, .pid = k->c->pids[k->g.ranks[q]]};
    int rc = flow_transfers(&k->f)->rows(k, q, k->s->cin[q], &cr.r);
    rows_flush(&cr);
    return rc ? rc : cr.rc;
}

static const struct peer_access cma = {
    .how = "process_vm_readv",
    .read = cma_read,
    .read_box = cma_read_box,
    .rows = cma_rows,
};

/* Single copy beats staging from SHMESH_CMA_MIN where every member reads
 * the others, but not the staged reduce-scatter on the reductions it is for
 * (that moves less memory, docs/algorithms.md; which those are is rsag's to
 * say), and a broadcast or reduction only from SHMESH_CMA_BCAST_REDUCE_MIN:
 * staging runs the sender's copy and the receivers' at once, and measured
 * faster for them at every size (docs/performance.md). */
static bool cma_candidate(const struct call *k)
{
    const struct paths_state *p = paths_of(k->c);
    bool one_way = k->f.kind == FLOW_REDUCE || (k->f.kind == FLOW_MOVE && k->f.source >= 0);
    return peer_flow(k) && k->size >= p->cma_min &&
           (!one_way || k->size >= p->cma_bcast_reduce_min) && !rsag_sized(k);
}

static bool cma_eligible(const struct call *k)
{
    for (int q = 0; q < k->g.n; q++)
        if (!(k->s->flags[q] & HS_CMA))
            return false;
    return true;
}

static int cma_step(struct call *k) { return peer_step(k, &cma); }

const struct path path_single_copy = {
    .name = "single-copy",
    .kinds = MEM_HOST | MEM_HEAP,
    .handshake = true,
    .in_place = true,
    .candidate = cma_candidate,
    .eligible = cma_eligible,
    .step = cma_step,
};
