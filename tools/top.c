/* shmesh-top: what each rank of a running job is doing, read from the
 * job's segment without stopping it.
 *
 *   shmesh-top [--once] [--json] [--interval SECS] [PID]
 *
 * PID is the launcher's (shmesh-run), or for a job an MPI launcher started
 * its first rank's on this node (the one that made the segment:
 * docs/multinode.md); without it, the only job of this user.  The launcher
 * (or that rank) keeps its segment's descriptor open for the whole job, so
 * the segment is found through /proc/PID/fd even after its name left
 * /dev/shm, and reopened read-only through that link: the kernel lets only
 * the job's user do so, and shmesh-top refuses other users' jobs even when
 * it runs as root (what ranks pass each other is theirs).
 *
 * Every rank keeps a status block (struct seg_status, shm/layout.h): its
 * current or last call, whether it is outside any call, inside one, or
 * blocked waiting for a peer (and which: a window of a call, or a program
 * point of an effect), and whether a thread of it blocks on a token of its
 * own dispatch queue.  From these the wait-for graph is built and each
 * chain of waits is followed to the rank it ends at: the one the others
 * wait for, and what it is doing; token waits are shown with what their
 * dispatch queue does.  docs/shmesh-top.1 describes the columns and the
 * JSON fields. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "core/settings.h"
#include "shm/optable.h"
#include "shm/guard.h"
#include "shm/proc.h"
#include "shm/errtext.h"
#include "shm/segment.h"

#define PROG "shmesh-top"
#define LAUNCHER "shmesh-run"
#define SHM_PREFIX "/dev/shm/shmesh-"

/* The op names, by the number a status carries (enum call_op: 0 is no op,
 * then the table's lines in order). */
#define TOP_OP_NAME(ID, name, ...) #name,
static const char *const op_names[] = {"none", SHMESH_OPS(TOP_OP_NAME)};
#undef TOP_OP_NAME
#define OP_NAMES (int)(sizeof op_names / sizeof op_names[0])
_Static_assert(OP_NAMES - 1 <= SEG_STATUS_OP_MASK, "op numbers fit seg_status.call's op field");

static const char *op_name(int op) { return op >= 0 && op < OP_NAMES ? op_names[op] : "?"; }

/* /proc, or $SHMESH_SYSROOT/proc (the tests give an empty one). */
static char proc_root[PATH_MAX];

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(code);
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- processes ---------------------------------------------------------- */

static bool read_stat(pid_t pid, struct proc_stat *st)
{
    return proc_read_stat(proc_root, pid, st);
}

static bool read_comm(pid_t pid, char *comm, size_t len)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%d/comm", proc_root, (int)pid);
    return proc_read_line(path, comm, len);
}

/* The command line, arguments separated by spaces, cut to len. */
static void read_cmdline(pid_t pid, char *buf, size_t len)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%d/cmdline", proc_root, (int)pid);
    buf[0] = '\0';
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\0')
        n--;
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0' || buf[i] == '\n')
            buf[i] = ' ';
}

static const char *user_name(uid_t uid, char *buf, size_t len)
{
    struct passwd *pw = getpwuid(uid);
    if (pw)
        snprintf(buf, len, "%s", pw->pw_name);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
    return buf;
}

/* ---- finding and opening a job ------------------------------------------ */

enum find_result {
    FIND_OK = 0,
    FIND_NO_PROCESS,   /* no such pid */
    FIND_NOT_LAUNCHER, /* it is something else than shmesh-run */
    FIND_OTHER_USER,
    FIND_NO_SEGMENT,   /* a launcher without a segment (yet, or a rank before its exec) */
    FIND_BAD_SEGMENT,  /* found, but not one we can read */
};

struct job {
    pid_t pid;
    unsigned long long start; /* the launcher's start time, to tell when it is gone */
    /* A job an MPI launcher started: pid is its first rank, and the ranks
     * are children of this process (mpirun's, or its daemon's); 0 under
     * shmesh-run. */
    pid_t rank_parent;
    struct seg *seg;
};

/* Opens the job of launcher `pid`: 0 and j filled, or a FIND_ code with a
 * sentence in err. */
static int open_job(pid_t pid, struct job *j, char *err, size_t errlen)
{
    char path[PATH_MAX + 64], comm[64], who[64];
    struct stat st;
    snprintf(path, sizeof path, "%s/%d", proc_root, (int)pid);
    if (stat(path, &st) < 0)
        return errtext_set(err, errlen, FIND_NO_PROCESS, "no process %d is running", (int)pid);
    /* Before anything of the job is read: the kernel would refuse most
     * other users' descriptors, but not root's, and a job's data is its
     * user's alone. */
    if (st.st_uid != getuid())
        return errtext_set(err, errlen, FIND_OTHER_USER,
                           "job %d belongs to user %s: " PROG " attaches only to your own jobs",
                           (int)pid, user_name(st.st_uid, who, sizeof who));
    if (!read_comm(pid, comm, sizeof comm))
        return errtext_set(err, errlen, FIND_NO_PROCESS, "no process %d is running", (int)pid);
    /* Anything else may be the first rank of a job an MPI launcher started:
     * the segment it holds says (its creator). */
    bool launcher = !strcmp(comm, LAUNCHER);
    struct proc_stat ps;
    if (!read_stat(pid, &ps) || ps.state == 'Z')
        return errtext_set(err, errlen, FIND_NO_PROCESS, "job %d has ended", (int)pid);
    snprintf(path, sizeof path, "%s/%d/fd", proc_root, (int)pid);
    DIR *d = opendir(path);
    if (!d) {
        if (errno == EACCES || errno == EPERM)
            return errtext_set(err, errlen, FIND_OTHER_USER,
                               "job %d belongs to another user: " PROG
                               " attaches only to your own jobs",
                               (int)pid);
        return errtext_set(err, errlen, FIND_NO_PROCESS,
                           "cannot list the descriptors of job %d (%.256s): %s", (int)pid, path,
                           strerror(errno));
    }
    int fd = -1, open_errno = 0;
    struct dirent *e;
    while (fd < 0 && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char link[PATH_MAX + 320], target[PATH_MAX];
        snprintf(link, sizeof link, "%s/%s", path, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        /* After every rank joined the name is gone: "... (deleted)". */
        if (strncmp(target, SHM_PREFIX, strlen(SHM_PREFIX)))
            continue;
        /* Through the link: the file itself, read-only, whatever its name. */
        fd = open(link, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            open_errno = errno;
    }
    closedir(d);
    if (fd < 0 && !launcher && !open_errno)
        return errtext_set(err, errlen, FIND_NOT_LAUNCHER,
                           "process %d is %s, not " LAUNCHER " nor the first rank of a job an MPI "
                           "launcher started: give the launcher's pid",
                           (int)pid, comm);
    if (fd < 0) {
        if (open_errno == EACCES || open_errno == EPERM)
            return errtext_set(err, errlen, FIND_OTHER_USER,
                               "job %d belongs to another user: " PROG
                               " attaches only to your own jobs",
                               (int)pid);
        if (open_errno)
            snprintf(err, errlen, "cannot open the segment of job %d: %s", (int)pid,
                     strerror(open_errno));
        else
            snprintf(err, errlen,
                     "process %d (" LAUNCHER ") holds no shmesh segment: it is not a job's "
                     "launcher, or its job has not started or has ended",
                     (int)pid);
        return open_errno ? FIND_BAD_SEGMENT : FIND_NO_SEGMENT;
    }
    char what[64], why[512];
    snprintf(what, sizeof what, "the segment of job %d", (int)pid);
    struct seg *s;
    int rc = seg_observe(fd, what, &s, why, sizeof why);
    close(fd);
    if (rc)
        return errtext_set(err, errlen, FIND_BAD_SEGMENT, "%s", why);
    /* A rank between its fork and its exec is called shmesh-run too and
     * holds the descriptor: only the creator is the job. */
    int creator = s->hdr->creator_pid;
    if (creator != (int)pid) {
        seg_close(s);
        return errtext_set(err, errlen, FIND_NO_SEGMENT,
                           "process %d holds a shmesh segment created by process %d: give the "
                           "%s pid, %d",
                           (int)pid, creator, launcher ? "launcher's" : "job's", creator);
    }
    j->pid = pid;
    j->start = ps.start;
    j->rank_parent = launcher ? 0 : ps.ppid;
    j->seg = s;
    return FIND_OK;
}

static bool job_running(const struct job *j)
{
    struct proc_stat ps;
    return read_stat(j->pid, &ps) && ps.state != 'Z' && ps.start == j->start;
}

/* The pids of this user's jobs (at most max): launchers that hold a segment
 * they made, and first ranks of MPI jobs that do. */
static int list_jobs(pid_t *pids, int max)
{
    DIR *d = opendir(proc_root);
    if (!d)
        die(1, "cannot read %s: %s", proc_root, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid > INT_MAX)
            continue;
        char path[PATH_MAX + 32];
        struct stat st;
        snprintf(path, sizeof path, "%s/%ld", proc_root, pid);
        if (stat(path, &st) < 0 || st.st_uid != getuid())
            continue;
        struct job j;
        char err[256];
        if (open_job((pid_t)pid, &j, err, sizeof err) == FIND_OK) {
            seg_close(j.seg);
            pids[n++] = (pid_t)pid;
        }
    }
    closedir(d);
    return n;
}

/* ---- a snapshot --------------------------------------------------------- */

struct rank_view {
    pid_t pid;
    int state;     /* enum seg_rank_state */
    bool alive;    /* its process is there (and still the job's) */
    int activity;  /* enum seg_activity */
    uint64_t call; /* the current or last call's number; 0: none yet */
    int op;
    int wait_rank; /* SEG_ACT_WAIT: the peer, else -1 */
    uint64_t wait_call, wait_window;
    double waited_s; /* SEG_ACT_WAIT: how long so far */
    bool wait_point_kind; /* SEG_ACT_WAIT for a program point (else a window) */
    uint64_t wait_point;
    char wait_effect[SEG_EFFECT_NAME + 1]; /* its effect ("" for none), printable */
    uint64_t token_seq; /* a thread blocks on this dispatch queue position; 0: none */
    double token_waited_s;
    uint64_t done; /* dispatch queue positions finished */
    uint64_t calls, bytes;
    char notifier[sizeof ((struct seg_status *)0)->notifier + 1];
    double rate; /* calls finished per second since the previous snapshot; < 0: unknown */
};

struct snapshot {
    int world;
    pid_t job;
    int64_t t_ns;  /* CLOCK_MONOTONIC */
    time_t wall;
    bool aborted;
    struct seg_abort_info abort;
    struct rank_view *r;
};

static bool rank_alive(pid_t pid, const struct job *j)
{
    struct proc_stat ps;
    if (pid <= 0 || !read_stat(pid, &ps) || ps.state == 'Z')
        return false;
    /* An MPI job's ranks are children of its launcher's process on this
     * node, as its first rank is: another parent is a reused pid. */
    if (j->rank_parent)
        return ps.ppid == j->rank_parent;
    /* Ranks are children of the launcher's job process (shmesh-run's child,
     * launcher/front.c): another parent is a reused pid. */
    struct proc_stat parent;
    return ps.ppid == j->pid ||
           (read_stat(ps.ppid, &parent) && parent.ppid == j->pid && parent.state != 'Z');
}

/* Another process truncated the segment while we read it: the guard
 * (shm/guard.h) gave us zeros instead of a SIGBUS; nothing more can be
 * read of the job. */
static void check_truncated(const struct job *j)
{
    uint64_t found;
    if (!seg_guard_tripped(j->seg, &found))
        return;
    char size[48] = "";
    if (found != UINT64_MAX)
        snprintf(size, sizeof size, " to %llu bytes", (unsigned long long)found);
    die(1, "the segment of job %d was truncated%s by another process (expected %zu bytes): "
           "what it held can no longer be read",
        (int)j->pid, size, j->seg->size);
}

/* A text field of a rank's block, len bytes that may be changing and need
 * not end, into dst (len + 1 bytes): cut at the first NUL, anything but
 * printable ASCII shown as '?'. */
static void printable(char *dst, const char *src, size_t len)
{
    size_t i = 0;
    for (; i < len && src[i]; i++)
        dst[i] = src[i] < 0x21 || src[i] > 0x7e ? '?' : src[i];
    dst[i] = '\0';
}

/* Reads every rank's block, one word at a time: a rank's activity first
 * (acquire), so that the wait it describes is at least as new. */
static void take_snapshot(const struct job *j, struct snapshot *sn, const struct snapshot *prev)
{
    const struct seg *s = j->seg;
    sn->world = s->world;
    sn->job = j->pid;
    sn->t_ns = mono_ns();
    sn->wall = time(NULL);
    sn->aborted = seg_aborted(s, &sn->abort);
    for (int i = 0; i < s->world; i++) {
        struct seg_ctrl *c = seg_ctrl(s, i);
        struct seg_status *st = &c->status;
        struct rank_view *v = &sn->r[i];
        v->state = (int)atomic_load(&c->state);
        v->pid = atomic_load(&c->pid);
        v->activity = (int)atomic_load_explicit(&st->activity, memory_order_acquire);
        uint64_t call = atomic_load_explicit(&st->call, memory_order_relaxed);
        v->call = SEG_STATUS_NUMBER(call);
        v->op = (int)SEG_STATUS_OP(call);
        v->wait_rank = -1;
        v->wait_call = v->wait_window = 0;
        v->waited_s = 0;
        v->wait_point_kind = false;
        v->wait_point = 0;
        v->wait_effect[0] = '\0';
        if (v->activity == SEG_ACT_WAIT) {
            int w = atomic_load_explicit(&st->wait_rank, memory_order_relaxed);
            uint64_t tag = atomic_load_explicit(&st->wait_tag, memory_order_relaxed);
            int64_t since = atomic_load_explicit(&st->wait_since, memory_order_relaxed);
            v->wait_rank = w >= 0 && w < s->world ? w : -1;
            v->wait_call = tag >> 32;
            v->wait_window = tag & 0xffffffffu;
            v->waited_s = since > 0 && since < sn->t_ns ? (double)(sn->t_ns - since) / 1e9 : 0;
            v->wait_point_kind = atomic_load_explicit(&st->wait_kind, memory_order_relaxed) ==
                                 SEG_WAIT_POINT;
            if (v->wait_point_kind) {
                v->wait_point = atomic_load_explicit(&st->wait_point, memory_order_relaxed);
                printable(v->wait_effect, st->wait_effect, sizeof st->wait_effect);
            }
        }
        v->token_seq = atomic_load_explicit(&st->token_seq, memory_order_acquire);
        int64_t tsince = atomic_load_explicit(&st->token_since, memory_order_relaxed);
        v->token_waited_s = v->token_seq && tsince > 0 && tsince < sn->t_ns
                                ? (double)(sn->t_ns - tsince) / 1e9
                                : 0;
        v->done = atomic_load_explicit(&c->done.value, memory_order_relaxed);
        /* Calls are numbered from 1 in order: those finished are the
         * current one's predecessors, or the last one and its own. */
        v->calls = v->call - (v->call && v->activity != SEG_ACT_IDLE ? 1 : 0);
        v->bytes = atomic_load_explicit(&st->bytes, memory_order_relaxed);
        printable(v->notifier, st->notifier, sizeof st->notifier);
        v->alive = v->state != SEG_RANK_EMPTY && rank_alive(v->pid, j);
        v->rate = -1;
        if (prev && sn->t_ns > prev->t_ns && v->calls >= prev->r[i].calls)
            v->rate = (double)(v->calls - prev->r[i].calls) * 1e9 / (double)(sn->t_ns - prev->t_ns);
    }
}

/* ---- the diagnosis ------------------------------------------------------ */

/* A rank that is blocked, on a peer it may wait for: a dead or finalized
 * rank's last words are not a wait. */
static bool waiting(const struct rank_view *v)
{
    return v->activity == SEG_ACT_WAIT && v->state == SEG_RANK_ATTACHED && v->alive &&
           v->wait_rank >= 0;
}

/* Where each rank's chain of waits ends: sink[r] is the first rank on it
 * that does not wait (r itself when r does not), or -1 - m when the chain
 * runs into a cycle whose smallest rank is m. */
static void follow_waits(const struct snapshot *sn, int *sink)
{
    int n = sn->world;
    for (int r = 0; r < n; r++) {
        int cur = r, steps = 0;
        while (waiting(&sn->r[cur]) && steps <= n) {
            cur = sn->r[cur].wait_rank;
            steps++;
        }
        if (steps <= n && !waiting(&sn->r[cur])) {
            sink[r] = cur;
            continue;
        }
        /* n + 1 steps without an end: cur is on the cycle. */
        int m = cur;
        for (int x = sn->r[cur].wait_rank; x != cur; x = sn->r[x].wait_rank)
            m = x < m ? x : m;
        sink[r] = -1 - m;
    }
}

/* "rank 3", "ranks 0-2", "ranks 0, 1, 3, 5-7": the ranks marked in `in`
 * (a range for three or more in a row). */
static void rank_list(const bool *in, int n, char *buf, size_t len)
{
    int count = 0;
    for (int r = 0; r < n; r++)
        count += in[r];
    size_t used = (size_t)snprintf(buf, len, "%s", count == 1 ? "rank " : "ranks ");
    bool first = true;
    for (int r = 0; r < n && used < len; r++) {
        if (!in[r])
            continue;
        int end = r;
        while (end + 1 < n && in[end + 1])
            end++;
        if (end == r + 1) /* two: "0, 1", not "0-1" */
            end = r;
        if (end == r)
            used += (size_t)snprintf(buf + used, len - used, "%s%d", first ? "" : ", ", r);
        else
            used += (size_t)snprintf(buf + used, len - used, "%s%d-%d", first ? "" : ", ", r, end);
        first = false;
        r = end;
    }
}

static void call_text(uint64_t call, int op, char *buf, size_t len)
{
    snprintf(buf, len, "#%" PRIu64 " (%s)", call, op_name(op));
}

/* What a rank the others wait for is doing, as the end of a sentence. */
static void sink_text(const struct rank_view *v, int r, char *buf, size_t len)
{
    char last[64] = "it has made no call yet";
    if (v->call)
        snprintf(last, sizeof last, "its last call: #%" PRIu64 " %s", v->call, op_name(v->op));
    if (v->state == SEG_RANK_EMPTY)
        snprintf(buf, len, "rank %d never attached (it has not reached shmesh_init)", r);
    else if (v->state == SEG_RANK_FINALIZED)
        snprintf(buf, len, "rank %d has finalized and left the job (%s)", r, last);
    else if (!v->alive)
        snprintf(buf, len, "rank %d (pid %d) has exited without finalizing (%s)", r, (int)v->pid,
                 last);
    else if (v->activity == SEG_ACT_IDLE)
        snprintf(buf, len, "rank %d is outside any call (%s)", r, last);
    else {
        char c[64];
        call_text(v->call, v->op, c, sizeof c);
        snprintf(buf, len,
                 "rank %d is in call %s, not blocked (running, or spinning before it blocks)", r,
                 c);
    }
}

/* A machine-readable word for the same. */
static const char *sink_doing(const struct rank_view *v)
{
    if (v->state == SEG_RANK_EMPTY)
        return "never_attached";
    if (v->state == SEG_RANK_FINALIZED)
        return "finalized";
    if (!v->alive)
        return "exited";
    return v->activity == SEG_ACT_IDLE ? "outside_call" : "in_call";
}

/* "point 3 of effect \"log\"": the program point v waits for. */
static const char *point_text(const struct rank_view *v, char *buf, size_t len)
{
    if (v->wait_effect[0])
        snprintf(buf, len, "point %" PRIu64 " of effect \"%s\"", v->wait_point, v->wait_effect);
    else
        snprintf(buf, len, "point %" PRIu64 " of the callbacks without an effect",
                 v->wait_point);
    return buf;
}

/* A rank a thread of which blocks on a token, and whose dispatch queue
 * does not wait for a peer: what the dispatch queue does. */
static void token_line(const struct rank_view *v, int r, char *buf, size_t len)
{
    char doing[160];
    if (v->activity == SEG_ACT_CALL)
        snprintf(doing, sizeof doing,
                 "its dispatch queue is in call #%" PRIu64 " (%s), not blocked (running it%s)",
                 v->call, op_name(v->op), !strcmp(op_name(v->op), "callback") ? "s callback" : "");
    else
        snprintf(doing, sizeof doing,
                 "its dispatch queue is outside any collective call (running work of this rank "
                 "alone, such as a callback placed on SHMESH_PLACE_SELF)");
    snprintf(buf, len,
             "rank %d waits for a token (position %" PRIu64 " of its dispatch queue, %" PRIu64
             " finished), blocked for %.1f s; %s",
             r, v->token_seq, v->done, v->token_waited_s, doing);
}

/* Whether a thread of rank v blocks on a token. */
static bool token_waiting(const struct rank_view *v)
{
    return v->token_seq && v->state == SEG_RANK_ATTACHED && v->alive;
}

/* One finding of the diagnosis: the ranks whose waits end at `sink` (or in
 * the cycle through `cycle_min`). */
struct finding {
    int sink;       /* -1 for a cycle */
    int cycle_min;  /* the cycle's smallest rank */
    bool *waiters;  /* ranks that wait, directly or through others */
    bool same_call; /* every waiter is in the same call */
    bool same_point; /* and each waits for the same program point (of `first`'s effect) */
    int first;      /* the first waiter */
    uint64_t call;
    int op;
    double waited_s; /* the longest wait */
    char text[1536]; /* who + in + what and the words between: never cut */
};

struct diagnosis {
    struct finding *f;
    int n;
    bool *running; /* in a call, not blocked, and no one waits for them */
    char running_text[512];
    /* Ranks a thread of which blocks on a token: those whose dispatch
     * queue waits for a peer (shown by the findings) in one line, each
     * other one in a line of its own. */
    char *token_text;
    char summary[256]; /* when there is nothing else to say */
};

static void diagnose(const struct snapshot *sn, struct diagnosis *d)
{
    int n = sn->world;
    int *sink = calloc((size_t)n, sizeof *sink);
    d->f = calloc((size_t)n, sizeof *d->f);
    d->running = calloc((size_t)n, sizeof *d->running);
    if (!sink || !d->f || !d->running)
        die(1, "out of memory");
    d->n = 0;
    follow_waits(sn, sink);
    bool *waited_for = calloc((size_t)n, sizeof *waited_for);
    if (!waited_for)
        die(1, "out of memory");
    for (int r = 0; r < n; r++)
        if (sink[r] >= 0 && sink[r] != r)
            waited_for[sink[r]] = true;
    /* Sinks in rank order, then cycles in the order of their smallest rank. */
    for (int pass = 0; pass < 2; pass++) {
        for (int t = 0; t < n; t++) {
            if (pass == 0 && !waited_for[t])
                continue;
            struct finding *f = &d->f[d->n];
            f->waiters = calloc((size_t)n, sizeof *f->waiters);
            if (!f->waiters)
                die(1, "out of memory");
            int count = 0;
            f->same_call = true;
            for (int r = 0; r < n; r++) {
                bool member = pass == 0 ? sink[r] == t && r != t : sink[r] == -1 - t;
                if (!member)
                    continue;
                const struct rank_view *v = &sn->r[r];
                if (count && (v->call != f->call || v->op != f->op))
                    f->same_call = false;
                if (!count) {
                    f->first = r;
                    f->same_point = v->wait_point_kind;
                } else if (!v->wait_point_kind || v->wait_point != sn->r[f->first].wait_point ||
                           strcmp(v->wait_effect, sn->r[f->first].wait_effect)) {
                    f->same_point = false;
                }
                if (!count || v->call < f->call) {
                    f->call = v->call;
                    f->op = v->op;
                }
                f->waited_s = v->waited_s > f->waited_s ? v->waited_s : f->waited_s;
                f->waiters[r] = true;
                count++;
            }
            if (!count) {
                free(f->waiters);
                continue;
            }
            f->sink = pass == 0 ? t : -1;
            f->cycle_min = t;
            char who[256], what[512], in[sizeof what + 96];
            rank_list(f->waiters, n, who, sizeof who);
            if (f->same_call && f->same_point)
                snprintf(in, sizeof in, "in call #%" PRIu64 " (%s) to pass %s", f->call,
                         op_name(f->op), point_text(&sn->r[f->first], what, sizeof what));
            else if (f->same_call)
                snprintf(in, sizeof in, "in call #%" PRIu64 " (%s)", f->call, op_name(f->op));
            else
                snprintf(in, sizeof in, "in different calls (the earliest: #%" PRIu64 " %s)",
                         f->call, op_name(f->op));
            if (pass == 0) {
                sink_text(&sn->r[t], t, what, sizeof what);
                snprintf(f->text, sizeof f->text, "%s %s for rank %d %s, blocked for %.1f s; %s",
                         who, count == 1 ? "waits" : "wait", t, in, f->waited_s, what);
            } else {
                /* The cycle itself, from its smallest rank. */
                char ring[256];
                size_t used = (size_t)snprintf(ring, sizeof ring, "%d", t);
                for (int x = sn->r[t].wait_rank; x != t && used < sizeof ring;
                     x = sn->r[x].wait_rank)
                    used += (size_t)snprintf(ring + used, sizeof ring - used, " -> %d", x);
                snprintf(f->text, sizeof f->text,
                         "%s wait in a cycle (%s -> %d) %s, blocked for %.1f s: each waits for "
                         "the next, a deadlock",
                         who, ring, t, in, f->waited_s);
            }
            d->n++;
        }
    }
    /* Ranks in a call that are not blocked and that no one waits for:
     * making progress, or spinning before they block. */
    int running = 0;
    for (int r = 0; r < n; r++) {
        const struct rank_view *v = &sn->r[r];
        d->running[r] = v->state == SEG_RANK_ATTACHED && v->alive &&
                        v->activity == SEG_ACT_CALL && !waited_for[r];
        running += d->running[r];
    }
    d->running_text[0] = '\0';
    if (running) {
        char who[256];
        rank_list(d->running, n, who, sizeof who);
        snprintf(d->running_text, sizeof d->running_text,
                 "%s %s in a call but not blocked (running, or spinning before %s block)", who,
                 running == 1 ? "is" : "are", running == 1 ? "it" : "they");
    }
    /* Token waits: behind a wait shown above, or on the rank's own dispatch
     * queue. */
    size_t cap = 256 + (size_t)n * 320, used = 0;
    d->token_text = calloc(1, cap);
    bool *behind = calloc((size_t)n, sizeof *behind);
    if (!d->token_text || !behind)
        die(1, "out of memory");
    int nbehind = 0;
    for (int r = 0; r < n; r++) {
        const struct rank_view *v = &sn->r[r];
        if (!token_waiting(v))
            continue;
        if (waiting(v)) {
            behind[r] = true;
            nbehind++;
            continue;
        }
        char line[320];
        token_line(v, r, line, sizeof line);
        used += (size_t)snprintf(d->token_text + used, cap - used, "%s%s", used ? "\n" : "",
                                 line);
    }
    if (nbehind) {
        char who[256];
        rank_list(behind, n, who, sizeof who);
        snprintf(d->token_text + used, cap - used,
                 "%s%s %s for tokens of %s own dispatch queue%s, which %s as shown above",
                 used ? "\n" : "", who, nbehind == 1 ? "waits" : "wait",
                 nbehind == 1 ? "its" : "their", nbehind == 1 ? "" : "s",
                 nbehind == 1 ? "waits" : "wait");
    }
    free(behind);
    int finalized = 0, attached = 0;
    for (int r = 0; r < n; r++) {
        finalized += sn->r[r].state == SEG_RANK_FINALIZED;
        attached += sn->r[r].state != SEG_RANK_EMPTY;
    }
    if (finalized == n)
        snprintf(d->summary, sizeof d->summary, "every rank has finalized");
    else if (!attached)
        snprintf(d->summary, sizeof d->summary, "no rank has attached yet");
    else
        snprintf(d->summary, sizeof d->summary, "no rank is blocked");
    free(sink);
    free(waited_for);
}

static void diagnosis_free(struct diagnosis *d)
{
    for (int i = 0; i < d->n; i++)
        free(d->f[i].waiters);
    free(d->f);
    free(d->running);
    free(d->token_text);
}

/* ---- output -------------------------------------------------------------- */

static const char *state_word(const struct rank_view *v)
{
    switch (v->state) {
    case SEG_RANK_EMPTY:
        return "starting";
    case SEG_RANK_FINALIZED:
        return "finalized";
    case SEG_RANK_ATTACHED:
        return v->alive ? "attached" : "exited";
    }
    return "?";
}

static const char *activity_word(const struct rank_view *v)
{
    if (v->state != SEG_RANK_ATTACHED || !v->alive)
        return "-";
    switch (v->activity) {
    case SEG_ACT_IDLE:
        return "idle";
    case SEG_ACT_CALL:
        return "call";
    case SEG_ACT_WAIT:
        return "wait";
    }
    return "?";
}

static void human_bytes(uint64_t b, char *buf, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double x = (double)b;
    int u = 0;
    while (x >= 1024 && u < 5) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else
        snprintf(buf, len, "%.1f %s", x, unit[u]);
}

static void print_text(FILE *o, const struct job *j, const struct snapshot *sn,
                       const struct diagnosis *d)
{
    char cmd[256], when[32], text[4 * SEG_REASON_MAX + 1];
    read_cmdline(j->pid, cmd, sizeof cmd);
    struct tm tm;
    localtime_r(&sn->wall, &tm);
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    fprintf(o, "job %d: %d rank%s, %s  [%s]\n", (int)j->pid, sn->world, sn->world == 1 ? "" : "s",
            seg_text_escaped(cmd, text, sizeof text), when);
    if (sn->aborted)
        fprintf(o, "job aborted: %s\n",
                sn->abort.reason[0] ? seg_text_escaped(sn->abort.reason, text, sizeof text) : "(no reason)");
    fprintf(o, "%4s %8s %-9s %-4s %10s %-20s %9s %9s %-8s %10s %9s\n", "RANK", "PID", "STATE", "DO",
            "CALL", "OP", "WAITS_FOR", "WAITED", "NOTIFIER", "BYTES", "CALLS/S");
    for (int r = 0; r < sn->world; r++) {
        const struct rank_view *v = &sn->r[r];
        char call[24] = "-", waits[24] = "-", waited[24] = "-", bytes[24], rate[24] = "-";
        if (v->call)
            snprintf(call, sizeof call, "#%" PRIu64, v->call);
        if (waiting(v)) {
            snprintf(waits, sizeof waits, "rank %d", v->wait_rank);
            snprintf(waited, sizeof waited, "%.1f s", v->waited_s);
        }
        human_bytes(v->bytes, bytes, sizeof bytes);
        if (v->rate >= 0)
            snprintf(rate, sizeof rate, "%.1f", v->rate);
        fprintf(o, "%4d %8d %-9s %-4s %10s %-20s %9s %9s %-8s %10s %9s\n", r, (int)v->pid,
                state_word(v), activity_word(v), call, v->call ? op_name(v->op) : "-", waits,
                waited, v->notifier[0] ? v->notifier : "-", bytes, rate);
    }
    fprintf(o, "\n");
    for (int i = 0; i < d->n; i++)
        fprintf(o, "%s\n", d->f[i].text);
    if (d->token_text[0])
        fprintf(o, "%s\n", d->token_text);
    if (d->running_text[0])
        fprintf(o, "%s\n", d->running_text);
    if (!d->n && !d->running_text[0] && !d->token_text[0])
        fprintf(o, "%s\n", d->summary);
}

static void json_str(FILE *o, const char *s)
{
    fputc('"', o);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(o, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(o, "\\u%04x", *p);
        else
            fputc(*p, o);
    }
    fputc('"', o);
}

static void json_ranks(FILE *o, const bool *in, int n)
{
    fputc('[', o);
    bool first = true;
    for (int r = 0; r < n; r++)
        if (in[r]) {
            fprintf(o, "%s%d", first ? "" : ",", r);
            first = false;
        }
    fputc(']', o);
}

static void print_json(FILE *o, const struct job *j, const struct snapshot *sn,
                       const struct diagnosis *d)
{
    char cmd[256];
    read_cmdline(j->pid, cmd, sizeof cmd);
    fprintf(o, "{\"job\":%d,\"command\":", (int)j->pid);
    json_str(o, cmd);
    fprintf(o, ",\"time\":%lld,\"world\":%d,\"aborted\":", (long long)sn->wall, sn->world);
    if (sn->aborted) {
        fprintf(o, "{\"cause\":%d,\"rank\":%d,\"reason\":", sn->abort.cause, sn->abort.rank);
        json_str(o, sn->abort.reason);
        fputc('}', o);
    } else {
        fprintf(o, "null");
    }
    fprintf(o, ",\"ranks\":[");
    for (int r = 0; r < sn->world; r++) {
        const struct rank_view *v = &sn->r[r];
        fprintf(o, "%s{\"rank\":%d,\"pid\":%d,\"state\":\"%s\",\"activity\":\"%s\",", r ? "," : "",
                r, (int)v->pid, state_word(v), activity_word(v));
        if (v->call)
            fprintf(o, "\"call\":%" PRIu64 ",\"op\":\"%s\",", v->call, op_name(v->op));
        else
            fprintf(o, "\"call\":null,\"op\":null,");
        if (waiting(v)) {
            fprintf(o,
                    "\"wait_rank\":%d,\"wait_call\":%" PRIu64 ",\"wait_window\":%" PRIu64
                    ",\"waited_s\":%.3f,\"wait_kind\":\"%s\",",
                    v->wait_rank, v->wait_call, v->wait_window, v->waited_s,
                    v->wait_point_kind ? "point" : "window");
            if (v->wait_point_kind) {
                fprintf(o, "\"wait_point\":%" PRIu64 ",\"wait_effect\":", v->wait_point);
                json_str(o, v->wait_effect);
                fputc(',', o);
            } else {
                fprintf(o, "\"wait_point\":null,\"wait_effect\":null,");
            }
        } else {
            fprintf(o, "\"wait_rank\":null,\"wait_call\":null,\"wait_window\":null,"
                       "\"waited_s\":null,\"wait_kind\":null,\"wait_point\":null,"
                       "\"wait_effect\":null,");
        }
        fprintf(o, "\"notifier\":");
        json_str(o, v->notifier);
        fprintf(o, ",\"calls\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"calls_per_s\":", v->calls,
                v->bytes);
        if (v->rate >= 0)
            fprintf(o, "%.3f", v->rate);
        else
            fprintf(o, "null");
        if (token_waiting(v))
            fprintf(o, ",\"token_wait\":%" PRIu64 ",\"token_waited_s\":%.3f,\"done\":%" PRIu64
                       "}",
                    v->token_seq, v->token_waited_s, v->done);
        else
            fprintf(o, ",\"token_wait\":null,\"token_waited_s\":null,\"done\":%" PRIu64 "}",
                    v->done);
    }
    fprintf(o, "],\"waits\":[");
    for (int i = 0; i < d->n; i++) {
        const struct finding *f = &d->f[i];
        fprintf(o, "%s{", i ? "," : "");
        if (f->sink >= 0) {
            const struct rank_view *v = &sn->r[f->sink];
            fprintf(o, "\"for\":%d,\"cycle\":null,\"doing\":\"%s\",", f->sink, sink_doing(v));
            if (v->call)
                fprintf(o, "\"its_call\":%" PRIu64 ",\"its_op\":\"%s\",", v->call,
                        op_name(v->op));
            else
                fprintf(o, "\"its_call\":null,\"its_op\":null,");
        } else {
            fprintf(o, "\"for\":null,\"cycle\":[%d", f->cycle_min);
            for (int x = sn->r[f->cycle_min].wait_rank; x != f->cycle_min; x = sn->r[x].wait_rank)
                fprintf(o, ",%d", x);
            fprintf(o, "],\"doing\":\"cycle\",\"its_call\":null,\"its_op\":null,");
        }
        fprintf(o, "\"waiters\":");
        json_ranks(o, f->waiters, sn->world);
        fprintf(o, ",\"call\":%" PRIu64 ",\"op\":\"%s\",\"same_call\":%s,\"waited_s\":%.3f,"
                   "\"text\":",
                f->call, op_name(f->op), f->same_call ? "true" : "false", f->waited_s);
        json_str(o, f->text);
        fputc('}', o);
    }
    fprintf(o, "],\"running\":");
    json_ranks(o, d->running, sn->world);
    fprintf(o, ",\"tokens\":[");
    for (const char *t = d->token_text; *t;) { /* one string per line */
        size_t n = strcspn(t, "\n");
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)n, t);
        if (t != d->token_text)
            fputc(',', o);
        json_str(o, line);
        t += n + (t[n] == '\n');
    }
    fputc(']', o);
    fprintf(o, ",\"summary\":");
    if (d->n)
        json_str(o, d->f[0].text);
    else if (d->token_text[0]) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(d->token_text, "\n"), d->token_text);
        json_str(o, line);
    } else if (d->running_text[0])
        json_str(o, d->running_text);
    else
        json_str(o, d->summary);
    fprintf(o, "}\n");
}

/* ---- the live view -------------------------------------------------------- */

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = sig; }

static struct termios saved_tty;
static bool tty_raw;

static void restore_tty(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
}

/* Keys without Enter and without echo, so that 'q' quits. */
static void raw_tty(void)
{
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) < 0)
        return;
    struct termios t = saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0) {
        tty_raw = true;
        atexit(restore_tty);
    }
}

/* Waits up to `secs`; true when the user asked to quit. */
static bool pause_for(double secs)
{
    int64_t end = mono_ns() + (int64_t)(secs * 1e9);
    for (;;) {
        if (stop)
            return true;
        int64_t left = end - mono_ns();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = tty_raw ? STDIN_FILENO : -1, .events = POLLIN};
        int ms = (int)((left + 999999) / 1000000);
        if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN)) {
            char c;
            if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
                return true;
        }
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [--once] [--json] [--interval SECS] [PID]\n"
            "Shows what each rank of a running shmesh job is doing, without stopping it.\n"
            "  PID              the job's launcher (shmesh-run), or its first rank under\n"
            "                   mpirun (docs/multinode.md); default: your only job\n"
            "  -1, --once       print one snapshot and exit\n"
            "  -j, --json       print JSON: one object per snapshot, one per line\n"
            "  -i, --interval SECS  seconds between refreshes (default 1); with --once,\n"
            "                   the time over which calls/s is measured (default 0.2)\n"
            "  -h, --help       this text\n"
            "In the live view, q or Ctrl-C quits.  See shmesh-top(1).\n");
}

/* No pid given: the only job, or the user's choice among several. */
static pid_t choose_job(void)
{
    pid_t pids[64];
    int n = list_jobs(pids, 64);
    char who[64];
    if (n == 0)
        die(1, "no shmesh job of user %s is running (no " LAUNCHER " process, nor a first rank "
               "of an MPI job, holding a segment)",
            user_name(getuid(), who, sizeof who));
    if (n == 1)
        return pids[0];
    fprintf(stderr, PROG ": %d jobs of yours are running:\n", n);
    fprintf(stderr, "%8s  %5s  %s\n", "PID", "RANKS", "COMMAND");
    for (int i = 0; i < n; i++) {
        struct job j;
        char err[256], cmd[200];
        if (open_job(pids[i], &j, err, sizeof err) != FIND_OK)
            continue;
        read_cmdline(pids[i], cmd, sizeof cmd);
        fprintf(stderr, "%8d  %5d  %s\n", (int)pids[i], j.seg->world, cmd);
        seg_close(j.seg);
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO))
        die(1, "several jobs: give the pid of the one to show (" PROG " PID)");
    fprintf(stderr, "pid of the job to show: ");
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        die(1, "no pid given");
    char *end;
    long pid = strtol(line, &end, 10);
    if (end == line || (*end && *end != '\n') || pid <= 0 || pid > INT_MAX)
        die(2, "'%s' is not a pid", strtok(line, "\n") ? line : "");
    return (pid_t)pid;
}

/* What the command line asks for. */
struct args {
    bool once, json;
    bool interval_given;
    double interval;
    pid_t pid; /* 0: choose */
};

/* A command line that makes no sense: the usage, exit status 2. */
static void bad_usage(void)
{
    usage(stderr);
    exit(2);
}

static double parse_interval(const char *s)
{
    char *end;
    errno = 0;
    double interval = strtod(s, &end);
    if (errno || end == s || *end || !(interval >= 0.01 && interval <= 86400)) {
        fprintf(stderr, PROG ": --interval expects seconds from 0.01 to 86400, got '%s'\n", s);
        bad_usage();
    }
    return interval;
}

static pid_t parse_pid(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v <= 0 || v > INT_MAX) {
        fprintf(stderr, PROG ": expected the launcher's pid (a positive number), got '%s'\n", s);
        bad_usage();
    }
    return (pid_t)v;
}

/* The options and the pid; --help and usage errors exit. */
static void parse_args(int argc, char **argv, struct args *a)
{
    static const struct option longs[] = {
        {"once", no_argument, NULL, '1'},
        {"json", no_argument, NULL, 'j'},
        {"interval", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (struct args){.interval = 1};
    int c;
    while ((c = getopt_long(argc, argv, "1ji:h", longs, NULL)) != -1) {
        switch (c) {
        case '1':
            a->once = true;
            break;
        case 'j':
            a->json = true;
            break;
        case 'i':
            a->interval = parse_interval(optarg);
            a->interval_given = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            bad_usage();
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, PROG ": expected at most one PID, got %d arguments\n", argc - optind);
        bad_usage();
    }
    if (optind < argc)
        a->pid = parse_pid(argv[optind]);
}

/* /proc under SHMESH_SYSROOT. */
static void set_proc_root(void)
{
    struct settings env;
    char why[256];
    settings_defaults(&env);
    if (settings_read(&env, SETTING_SYSROOT, why, sizeof why))
        die(2, "%s", why);
    snprintf(proc_root, sizeof proc_root, "%s/proc", env.sysroot ? env.sysroot : "");
}

static void catch_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* One snapshot, diagnosed and printed; on a screen after clearing it, and
 * with `separate` followed by an empty line. */
static void show(const struct job *j, const struct snapshot *sn, bool json, bool screen,
                 bool separate)
{
    check_truncated(j);
    struct diagnosis d;
    diagnose(sn, &d);
    if (screen)
        fputs("\033[H\033[2J", stdout); /* home, clear */
    if (json)
        print_json(stdout, j, sn, &d);
    else
        print_text(stdout, j, sn, &d);
    if (separate)
        fputc('\n', stdout);
    diagnosis_free(&d);
}

/* --once: two looks, to tell calls per second, and the second shown. */
static int show_once(const struct job *j, struct snapshot *a, struct snapshot *b,
                     const struct args *args)
{
    take_snapshot(j, b, NULL);
    pause_for(args->interval_given ? args->interval : 0.2);
    take_snapshot(j, a, b);
    show(j, a, args->json, false, false);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

/* The live view: a snapshot each interval until q, a signal, a reader
 * gone or the job's end. */
static void show_live(const struct job *j, struct snapshot *a, struct snapshot *b,
                      const struct args *args)
{
    struct snapshot *cur = a, *prev = NULL;
    bool screen = !args->json && isatty(STDOUT_FILENO);
    if (screen)
        raw_tty();
    for (;;) {
        take_snapshot(j, cur, prev);
        show(j, cur, args->json, screen, !args->json && !screen);
        if (fflush(stdout) != 0 || ferror(stdout))
            break; /* the reader is gone */
        prev = cur;
        cur = cur == a ? b : a;
        if (pause_for(args->interval))
            break;
        if (!job_running(j)) {
            fprintf(stderr, PROG ": job %d has ended\n", (int)j->pid);
            break;
        }
    }
    restore_tty();
}

int main(int argc, char **argv)
{
    struct args args;
    parse_args(argc, argv, &args);
    set_proc_root();
    pid_t pid = args.pid ? args.pid : choose_job();
    struct job j;
    char err[768];
    if (open_job(pid, &j, err, sizeof err) != FIND_OK)
        die(1, "%s", err);

    struct snapshot a = {0}, b = {0};
    a.r = calloc((size_t)j.seg->world, sizeof *a.r);
    b.r = calloc((size_t)j.seg->world, sizeof *b.r);
    if (!a.r || !b.r)
        die(1, "out of memory");
    catch_signals();

    int status = 0;
    if (args.once)
        status = show_once(&j, &a, &b, &args);
    else
        show_live(&j, &a, &b, &args);
    seg_close(j.seg);
    free(a.r);
    free(b.r);
    return status;
}
