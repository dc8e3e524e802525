/* The two notifiers (io_uring, futex) and peer liveness through pidfds. */
#include "notify.h"
#include "errtext.h"
#include "proc.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shmesh_config.h"

#if SHMESH_HAVE_URING
#include <liburing.h>
#endif

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* Not in liburing 2.3's headers: the opcode (Linux 6.7) and its size flag. */
#define NOTIFY_OP_FUTEX_WAIT 51
#define NOTIFY_FUTEX2_SIZE_U32 0x02

/* user_data of our SQEs: a tag in the top byte, a payload below. */
#define TAG_SHIFT 56
#define TAG_FUTEX (1ull << TAG_SHIFT)
#define TAG_TIMEOUT (2ull << TAG_SHIFT)
#define TAG_PEER (3ull << TAG_SHIFT)
#define TAG_CANCEL (4ull << TAG_SHIFT)
#define TAG_PROBE (5ull << TAG_SHIFT)
#define TAG_MASK (0xffull << TAG_SHIFT)

struct notify {
    enum notify_kind kind;
    int nslots;
    int *pidfd;    /* per rank; -1 when not watched */
    pid_t *pid;    /* per rank; set where pidfds are unavailable and kill(pid, 0) polls */
    bool *exited;  /* per rank */
    struct pollfd *pfd;
    int *pfd_rank;
    int npfd;
#if SHMESH_HAVE_URING
    struct io_uring ring;
    bool ring_up;
    uint64_t gen;
#endif
};

void notify_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + timeout_ns % 1000000000;
    ts.tv_sec += (time_t)(timeout_ns / 1000000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
    long r = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, expected, &ts, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    if (r == 0)
        return 0;
    if (errno == ETIMEDOUT)
        return -ETIMEDOUT;
    if (errno == EAGAIN || errno == EINTR)
        return 0;
    return -errno;
}

#if SHMESH_HAVE_URING
static struct io_uring_sqe *get_sqe(struct notify *n)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);
    if (!sqe) {
        io_uring_submit(&n->ring);
        sqe = io_uring_get_sqe(&n->ring);
    }
    return sqe;
}

static void prep_futex_wait(struct io_uring_sqe *sqe, _Atomic uint32_t *word, uint32_t expected)
{
    /* Hand-built: fd carries the futex2 flags, off the expected value, addr3
     * the wake mask.  No FUTEX2_PRIVATE: the word is shared between processes. */
    io_uring_prep_rw(NOTIFY_OP_FUTEX_WAIT, sqe, NOTIFY_FUTEX2_SIZE_U32, (const void *)word, 0,
                     expected);
    sqe->addr3 = FUTEX_BITSET_MATCH_ANY;
}

/* Reads every completion present.  *result receives the res of the futex wait
 * tagged `id` (or -ETIME when only its linked timeout came back); returns
 * true when a peer's exit was among them. */
static bool drain(struct notify *n, uint64_t id, int *result)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    bool peer = false;
    io_uring_for_each_cqe(&n->ring, head, cqe)
    {
        uint64_t ud = cqe->user_data;
        seen++;
        if ((ud & TAG_MASK) == TAG_PEER) {
            int r = (int)(ud & ~TAG_MASK);
            if (cqe->res > 0 && r >= 0 && r < n->nslots) {
                n->exited[r] = true;
                peer = true;
            }
        } else if (ud == id && result) {
            *result = cqe->res;
        } else if (result && *result == INT_MIN && ud == (TAG_TIMEOUT | (id & ~TAG_MASK)) &&
                   cqe->res == -ETIME) {
            /* The deadline passed; the wait itself reports -ECANCELED next.
             * Either ends this wait, so a lost completion cannot hang it. */
            *result = -ETIME;
        }
        /* Link timeouts, cancels and waits abandoned earlier are dropped. */
    }
    io_uring_cq_advance(&n->ring, seen);
    return peer;
}

static int uring_wait(struct notify *n, _Atomic uint32_t *word, uint32_t expected,
                      int64_t timeout_ns)
{
    uint64_t id = TAG_FUTEX | (++n->gen & ~TAG_MASK);
    struct io_uring_sqe *sqe = get_sqe(n);
    if (!sqe)
        return -EBUSY;
    prep_futex_wait(sqe, word, expected);
    sqe->flags |= IOSQE_IO_LINK;
    sqe->user_data = id;
    struct __kernel_timespec ts = {.tv_sec = timeout_ns / 1000000000,
                                   .tv_nsec = timeout_ns % 1000000000};
    sqe = get_sqe(n);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_link_timeout(sqe, &ts, 0);
    sqe->user_data = TAG_TIMEOUT | (id & ~TAG_MASK);
    int rc = io_uring_submit(&n->ring);
    if (rc < 0)
        return rc;

    int result = INT_MIN;
    bool peer = false;
    while (result == INT_MIN && !peer) {
        struct io_uring_cqe *cqe;
        rc = io_uring_wait_cqe(&n->ring, &cqe);
        if (rc == -EINTR)
            break;
        if (rc < 0)
            return rc;
        peer = drain(n, id, &result);
    }
    if (result == INT_MIN) {
        /* Leaving early: withdraw the wait so it cannot pile up. */
        sqe = get_sqe(n);
        if (sqe) {
            io_uring_prep_cancel64(sqe, id, 0);
            sqe->user_data = TAG_CANCEL;
            io_uring_submit(&n->ring);
        }
    }
    if (peer)
        return 1;
    if (result == -ECANCELED || result == -ETIME)
        return -ETIMEDOUT;
    return 0;
}

/* Set once a ring of this process passed uring_open's checks: the kernel
 * and its policy do not change under a running process, so later rings (a
 * dispatcher's, a second context's) skip the probe and the trial wait. */
static _Atomic bool uring_checked;

/* io_uring can be present yet refused (seccomp, io_uring_disabled), or too old
 * for FUTEX_WAIT: ask the kernel, then try one wait that must fail at once. */
static int uring_open(struct notify *n, char *err, size_t errlen)
{
    unsigned entries = 16;
    while (entries < (unsigned)n->nslots + 8 && entries < 4096)
        entries *= 2;
    int rc = io_uring_queue_init(entries, &n->ring, 0);
    if (rc < 0)
        return errtext_set(err, errlen, -EOPNOTSUPP, "io_uring is not available: %s",
                           strerror(-rc));
    n->ring_up = true;
    if (atomic_load_explicit(&uring_checked, memory_order_relaxed))
        return 0;
    struct io_uring_probe *probe = io_uring_get_probe_ring(&n->ring);
    bool ok = probe && io_uring_opcode_supported(probe, NOTIFY_OP_FUTEX_WAIT) &&
              io_uring_opcode_supported(probe, IORING_OP_POLL_ADD) &&
              io_uring_opcode_supported(probe, IORING_OP_LINK_TIMEOUT);
    if (probe)
        io_uring_free_probe(probe);
    if (!ok)
        return errtext_set(err, errlen, -EOPNOTSUPP,
                           "io_uring here lacks IORING_OP_FUTEX_WAIT (Linux 6.7 or later)");
    _Atomic uint32_t word = 1;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);
    prep_futex_wait(sqe, &word, 0);
    sqe->user_data = TAG_PROBE;
    struct io_uring_cqe *cqe;
    rc = io_uring_submit_and_wait(&n->ring, 1);
    if (rc >= 0)
        rc = io_uring_peek_cqe(&n->ring, &cqe);
    if (rc < 0)
        return errtext_set(err, errlen, -EOPNOTSUPP, "io_uring refused a FUTEX_WAIT: %s",
                           strerror(-rc));
    int res = cqe->res;
    io_uring_cqe_seen(&n->ring, cqe);
    if (res != -EAGAIN)
        return errtext_set(err, errlen, -EOPNOTSUPP, "io_uring FUTEX_WAIT misbehaves: %s",
                           res < 0 ? strerror(-res) : "it slept on a value that differed");
    atomic_store_explicit(&uring_checked, true, memory_order_relaxed);
    return 0;
}
#endif

int notify_parse_kind(const char *s, enum notify_kind *out)
{
    if (!s || !*s || !strcmp(s, "auto"))
        *out = NOTIFY_AUTO;
    else if (!strcmp(s, "uring") || !strcmp(s, "io_uring"))
        *out = NOTIFY_URING;
    else if (!strcmp(s, "futex"))
        *out = NOTIFY_FUTEX;
    else
        return -EINVAL;
    return 0;
}

int notify_open(enum notify_kind kind, int nslots, struct notify **out, char *err, size_t errlen)
{
    *out = NULL;
    struct notify *n = calloc(1, sizeof *n);
    if (!n)
        return errtext_set(err, errlen, -ENOMEM, "out of memory");
    n->nslots = nslots > 0 ? nslots : 1;
    n->pidfd = malloc(sizeof *n->pidfd * (size_t)n->nslots);
    n->pid = calloc((size_t)n->nslots, sizeof *n->pid);
    n->exited = calloc((size_t)n->nslots, sizeof *n->exited);
    n->pfd = calloc((size_t)n->nslots, sizeof *n->pfd);
    n->pfd_rank = calloc((size_t)n->nslots, sizeof *n->pfd_rank);
    if (!n->pidfd || !n->pid || !n->exited || !n->pfd || !n->pfd_rank) {
        notify_close(n);
        return errtext_set(err, errlen, -ENOMEM, "out of memory");
    }
    for (int i = 0; i < n->nslots; i++)
        n->pidfd[i] = -1;

    n->kind = NOTIFY_FUTEX;
    if (kind != NOTIFY_FUTEX) {
#if SHMESH_HAVE_URING
        char why[160] = "";
        int rc = uring_open(n, why, sizeof why);
        if (rc == 0) {
            n->kind = NOTIFY_URING;
        } else {
            if (n->ring_up)
                io_uring_queue_exit(&n->ring);
            n->ring_up = false;
            if (kind == NOTIFY_URING) {
                notify_close(n);
                return errtext_set(err, errlen, -EOPNOTSUPP,
                                   "SHMESH_NOTIFY=uring was asked for: %s", why);
            }
        }
#else
        if (kind == NOTIFY_URING) {
            notify_close(n);
            return errtext_set(err, errlen, -EOPNOTSUPP,
                               "SHMESH_NOTIFY=uring was asked for: this libshmesh was built "
                               "without liburing");
        }
#endif
    }
    *out = n;
    return 0;
}

void notify_close(struct notify *n)
{
    if (!n)
        return;
#if SHMESH_HAVE_URING
    if (n->ring_up)
        io_uring_queue_exit(&n->ring);
#endif
    if (n->pidfd)
        for (int i = 0; i < n->nslots; i++)
            if (n->pidfd[i] >= 0)
                close(n->pidfd[i]);
    free(n->pidfd);
    free(n->pid);
    free(n->exited);
    free(n->pfd);
    free(n->pfd_rank);
    free(n);
}

const char *notify_name(const struct notify *n)
{
    return n->kind == NOTIFY_URING ? "uring" : "futex";
}

enum notify_kind notify_kind_of(const struct notify *n) { return n->kind; }

int notify_watch(struct notify *n, int rank, pid_t pid)
{
    if (rank < 0 || rank >= n->nslots || pid <= 0)
        return -EINVAL;
    if (n->pidfd[rank] >= 0 || n->pid[rank] || n->exited[rank])
        return 0;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0) {
        if (errno == ESRCH) {
            n->exited[rank] = true;
            return 0;
        }
        if (errno == ENOSYS) {
            /* Before Linux 5.3, or under valgrind: ask kill(pid, 0) after
             * each slice instead.  The launcher reaps its ranks at once, so
             * a dead rank's pid disappears quickly. */
            n->pid[rank] = pid;
            return 0;
        }
        return -errno;
    }
    n->pidfd[rank] = fd;
    n->pfd[n->npfd].fd = fd;
    n->pfd[n->npfd].events = POLLIN;
    n->pfd_rank[n->npfd++] = rank;
#if SHMESH_HAVE_URING
    if (n->kind == NOTIFY_URING) {
        struct io_uring_sqe *sqe = get_sqe(n);
        if (!sqe)
            return -EBUSY;
        io_uring_prep_poll_add(sqe, fd, POLLIN);
        sqe->user_data = TAG_PEER | (uint64_t)rank;
        int rc = io_uring_submit(&n->ring);
        if (rc < 0)
            return rc;
    }
#endif
    return 0;
}

bool notify_pid_exited(pid_t pid)
{
    if (kill(pid, 0) < 0)
        return errno == ESRCH;
    struct proc_stat st;
    /* unreadable: gone between the two looks */
    return !proc_read_stat(NULL, pid, &st) || st.state == 'Z' || st.state == 'X';
}

void notify_check_peers(struct notify *n, bool thorough)
{
    if (thorough)
        for (int r = 0; r < n->nslots; r++)
            if (n->pid[r] && !n->exited[r] && notify_pid_exited(n->pid[r]))
                n->exited[r] = true;
#if SHMESH_HAVE_URING
    if (n->kind == NOTIFY_URING) {
        drain(n, 0, NULL);
        return;
    }
#endif
    if (!thorough || n->npfd == 0)
        return;
    if (poll(n->pfd, (nfds_t)n->npfd, 0) <= 0)
        return;
    for (int i = 0; i < n->npfd; i++)
        if (n->pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
            n->exited[n->pfd_rank[i]] = true;
}

bool notify_peer_exited(const struct notify *n, int rank)
{
    return rank >= 0 && rank < n->nslots && n->exited[rank];
}

int notify_wait(struct notify *n, _Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    if (timeout_ns < 1000)
        timeout_ns = 1000;
#if SHMESH_HAVE_URING
    if (n->kind == NOTIFY_URING)
        return uring_wait(n, word, expected, timeout_ns);
#endif
    return futex_wait(word, expected, timeout_ns);
}
