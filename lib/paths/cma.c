/* Single copy between ranks: process_vm_readv reads a peer's private
 * buffer straight into ours, one copy instead of the two that staging takes
 * (into a slot, out of it).  The kernel may refuse it (seccomp, Yama,
 * another user): every rank tries it on every peer at start-up and says
 * whether it may, and a collective uses it only when every member may. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/context.h"
#include "paths/cma.h"

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

/* Before joining: where the probe word is, so that peers can try to read it. */
void cma_publish(shmesh_ctx *c)
{
    /* Under Yama's ptrace_scope 1 only ancestors may read us unless we say so;
     * the peers are siblings.  Harmless elsewhere. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    c->probe_word = 0x5348534d45534800ull ^ (uint64_t)getpid();
    c->me->probe_addr = (uint64_t)(uintptr_t)&c->probe_word;
    c->me->probe_value = c->probe_word;
}

/* After every rank joined: may this rank read each peer's memory? */
void cma_probe(shmesh_ctx *c)
{
    /* shmesh_init left cma_ok false when SHMESH_CMA=0 turns it off here. */
    c->cma_ok = c->cma_ok && c->world > 1;
    for (int r = 0; r < c->world && c->cma_ok; r++) {
        if (r == c->rank)
            continue;
        const struct seg_ctrl *pc = seg_ctrl(c->seg, r);
        uint64_t got = 0;
        struct iovec local = {&got, sizeof got},
                     remote = {(void *)(uintptr_t)pc->probe_addr, sizeof got};
        pid_t pid = atomic_load(&pc->pid);
        c->cma_ok = process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof got &&
                    got == pc->probe_value;
    }
}

static int cma_failed(shmesh_ctx *c, int r, int err)
{
    char reason[SEG_REASON_MAX];
    ctx_poison(c, SHMESH_ERR_SYSTEM,
               "%s (call #%" PRIu64 "): cannot read rank %d's buffer (pid %d) with "
               "process_vm_readv: %s",
               c->op, c->calls, r, (int)atomic_load(&seg_ctrl(c->seg, r)->pid), strerror(err));
    snprintf(reason, sizeof reason, "%.*s", (int)sizeof reason - 1, c->err);
    seg_abort(c->seg, SEG_CAUSE_RANK_ABORT, c->rank, 0, reason);
    return SHMESH_ERR_SYSTEM;
}

/* Reads iov[0..n) of rank r into one local buffer, resuming short reads. */
static int readv_all(shmesh_ctx *c, int r, unsigned char *dst, struct iovec *iov, int n)
{
    pid_t pid = atomic_load(&seg_ctrl(c->seg, r)->pid);
    while (n > 0) {
        uint64_t want = 0;
        for (int i = 0; i < n; i++)
            want += iov[i].iov_len;
        struct iovec local = {dst, want};
        ssize_t got = process_vm_readv(pid, &local, 1, iov, (unsigned long)n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return cma_failed(c, r, got < 0 ? errno : EFAULT);
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

int cma_read(shmesh_ctx *c, int r, uint64_t addr, void *dst, uint64_t len)
{
    if (!len)
        return 0;
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    return readv_all(c, r, dst, &remote, 1);
}

#define IOVS 512

struct box_reader {
    shmesh_ctx *c;
    int r;
    uint64_t addr;
    size_t esz;
    unsigned char *dst;
    struct iovec iov[IOVS];
    int n;
    int rc;
};

static void flush_runs(struct box_reader *br)
{
    if (br->n && !br->rc) {
        uint64_t bytes = 0;
        for (int i = 0; i < br->n; i++)
            bytes += br->iov[i].iov_len;
        br->rc = readv_all(br->c, br->r, br->dst, br->iov, br->n);
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

int cma_read_box(shmesh_ctx *c, int r, uint64_t addr, const struct box *b, uint64_t first,
                 uint64_t count, void *dst)
{
    struct box_reader br = {.c = c, .r = r, .addr = addr, .esz = b->esz, .dst = dst};
    box_runs(b, first, count, add_run, &br);
    flush_runs(&br);
    return br.rc;
}
