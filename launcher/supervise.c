/* The job process's event loop: reap ranks, fail fast, forward signals,
 * enforce --timeout and --grace, relay tagged output, end whatever the ranks
 * left running, and end the job at once if the front is killed (front.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"
#include "proc.h"

#define DRAIN_NS 2000000000LL    /* output still arriving after the last rank exits */
#define LEFTOVER_NS 2000000000LL /* killing what the ranks left: no longer than this */
#define RESCAN_NS 50000000LL     /* ...looking again this often */

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *signame(int sig)
{
    static char buf[32];
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev)
        snprintf(buf, sizeof buf, "SIG%s", abbrev);
    else
        snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

void describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by %s%s", signame(WTERMSIG(status)),
                 WCOREDUMP(status) ? " (core dumped)" : "");
    else
        snprintf(buf, len, "ended with wait status 0x%x", status);
}

static const char *plural(int n, const char *one, const char *many) { return n == 1 ? one : many; }

/* Each rank leads its own process group; a rank never started has pid 0,
 * and killpg(0) would hit the launcher's own group. */
static void signal_group(const struct rank_proc *p, int sig)
{
    if (p->pid > 0)
        killpg(p->pid, sig);
}

static void signal_running(struct job *j, int sig)
{
    for (int r = 0; r < j->o.np; r++)
        if (j->ranks[r].running)
            signal_group(&j->ranks[r], sig);
}

void job_stop(struct job *j, int cause, int rank, int sig, const char *reason)
{
    seg_abort(j->seg, cause, rank, 0, reason); /* the first reason is kept */
    if (sig)
        signal_running(j, sig);
    if (!j->stopping) {
        j->stopping = true;
        j->kill_at_ns = sig == SIGKILL ? 0 : now_ns() + (int64_t)(j->o.grace * 1e9);
    }
}

/* The rank the abort record blames (it called shmesh_abort, or a peer saw it
 * die), or -1. */
static int blamed_rank(const struct job *j)
{
    struct seg_abort_info ai;
    if (!seg_aborted(j->seg, &ai) ||
        (ai.cause != SEG_CAUSE_RANK_ABORT && ai.cause != SEG_CAUSE_RANK_DIED) || ai.rank < 0 ||
        ai.rank >= j->o.np)
        return -1;
    return ai.rank;
}

/* What a failed rank said of its own end in the abort record (it called
 * shmesh_abort, or left with shmesh_finalize_at_exit: a status given),
 * without the "rank R (pid P) " the launcher's line has, nor the status
 * when the line says it already: "called shmesh_abort(7): why", or the
 * exception a Python rank ended with.  "" when it said nothing. */
static const char *own_words(const struct job *j, const struct rank_proc *p, const char *how,
                             struct seg_abort_info *ai)
{
    char prefix[48];
    if (!seg_aborted(j->seg, ai) || ai->rank != p->rank || ai->code == 0 ||
        (ai->cause != SEG_CAUSE_RANK_ABORT && ai->cause != SEG_CAUSE_RANK_DIED))
        return "";
    size_t n = (size_t)snprintf(prefix, sizeof prefix, "rank %d (pid %d) ", p->rank, (int)p->pid);
    const char *w = ai->reason;
    if (strncmp(w, prefix, n))
        return "";
    w += n;
    if (!strncmp(w, how, strlen(how)))
        w += strlen(how);
    while (*w == ':' || *w == ' ')
        w++;
    return w;
}

/* A rank that exited with status 0 without finalizing while its peers
 * still needed it: noted, and recorded as the job's cause unless the job
 * already failed otherwise.  Its peers may have seen it go (and recorded
 * it in the segment) before the launcher did: that record names it too. */
static void left_early(struct job *j, const struct rank_proc *p)
{
    uint32_t state = atomic_load(&seg_ctrl(j->seg, p->rank)->state);
    struct seg_abort_info ai;
    bool aborted = seg_aborted(j->seg, &ai);
    bool seen_by_peers = aborted && ai.cause == SEG_CAUSE_RANK_DIED && ai.rank == p->rank;
    if (state == SEG_RANK_FINALIZED || (j->stopping && !seen_by_peers) ||
        (aborted && !seen_by_peers) || (j->running == 0 && !seen_by_peers))
        return; /* nobody waits for it, or the job already knows it is over */
    char reason[SEG_REASON_MAX];
    snprintf(reason, sizeof reason, "rank %d (pid %d) exited with status 0 without calling %s",
             p->rank, (int)p->pid, state == SEG_RANK_EMPTY ? "shmesh_init" : "shmesh_finalize");
    /* A clean exit that leaves the others waiting for it is still a failure
     * for them: tell them now rather than letting them find out. */
    if (!aborted)
        seg_abort(j->seg, SEG_CAUSE_RANK_DIED, p->rank, 0, reason);
    if (seen_by_peers || atomic_load(&j->seg->hdr->attached.value) > 0) {
        say("note: %s; ranks still waiting for it will fail", reason);
        if (j->left_early < 0)
            j->left_early = p->rank;
    }
}

static void rank_exited(struct job *j, struct rank_proc *p)
{
    char how[96], reason[4 * SEG_REASON_MAX + 128], esc[4 * SEG_REASON_MAX + 1];
    struct seg_abort_info ai;
    describe_status(p->status, how, sizeof how);
    /* The rank's own words reach the user's terminal: escaped. */
    const char *words =
        seg_text_escaped(WIFEXITED(p->status) ? own_words(j, p, how, &ai) : "", esc, sizeof esc);
    snprintf(reason, sizeof reason, "rank %d (pid %d) %s%s%s%s", p->rank, (int)p->pid, how,
             *words ? " (" : "", words, *words ? ")" : "");
    bool ok = WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0;
    if (j->o.verbose && (ok || j->exit_decided))
        say("%s", reason);
    if (ok) {
        left_early(j, p);
        return;
    }
    if (j->exit_decided)
        return; /* only the first failure is reported and decides the status */
    /* A rank that called shmesh_abort, or whose death a peer noticed,
     * is the cause even if a peer that reacted exits before it. */
    int blamed = blamed_rank(j);
    if (blamed >= 0 && blamed != p->rank && j->ranks[blamed].running) {
        if (!j->deferred)
            j->deferred = p;
        job_stop(j, SEG_CAUSE_RANK_DIED, p->rank, 0, reason);
        return;
    }
    j->exit_decided = true;
    j->first_failure = p->rank;
    j->exit_status = WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128 + WTERMSIG(p->status);
    /* The first failure after a rank left early is its doing: the line
     * names that rank as the cause (the status is the failure's: the rank
     * that left has none to give). */
    char cause[SEG_REASON_MAX] = "";
    if (j->left_early >= 0 && blamed == j->left_early) {
        const struct rank_proc *q = &j->ranks[j->left_early];
        snprintf(cause, sizeof cause,
                 " after rank %d (pid %d) left the job early (it exited with status 0 without "
                 "calling shmesh_finalize while its peers still needed it)",
                 q->rank, (int)q->pid);
        j->first_failure = q->rank;
    }
    if (j->running > 0)
        say("%s%s; stopping %d other %s", reason, cause, j->running,
            plural(j->running, "rank", "ranks"));
    else
        say("%s%s", reason, cause);
    job_stop(j, SEG_CAUSE_RANK_DIED, p->rank, 0, reason);
}

static struct rank_proc *running_rank(struct job *j, pid_t pid)
{
    for (int r = 0; r < j->o.np; r++)
        if (j->ranks[r].pid == pid && j->ranks[r].running)
            return &j->ranks[r];
    return NULL;
}

/* Each exited child is looked at before it is reaped: while a rank's zombie
 * is there its pid, the id of its process group, cannot be reused, so what
 * it left in its group is killed then, safely.  Other children (processes
 * the ranks left behind, which the job process adopts as a subreaper) are
 * just reaped.
 *
 * waitid hands back zombies in fork order, not in order of death: when
 * a rank dies and a peer exits on noticing it, both may be reaped together.
 * The abort record (written first by whoever noticed) names the rank at
 * fault; it is accounted first, so its report counts the others as running. */
static void reap(struct job *j)
{
    struct rank_proc **batch = j->reaped;
    int n = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            break;
        pid_t pid = si.si_pid;
        struct rank_proc *p = running_rank(j, pid);
        if (p)
            killpg(pid, SIGKILL); /* a rank's children end with it */
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) != pid)
            break;
        j->reaped_any = true;
        if (p) {
            p->status = st;
            batch[n++] = p;
        }
    }
    int blamed = n > 1 ? blamed_rank(j) : -1;
    for (int i = 1; i < n; i++)
        if (batch[i]->rank == blamed) {
            struct rank_proc *t = batch[0];
            batch[0] = batch[i];
            batch[i] = t;
        }
    /* Each exit is accounted in turn, so the first reported sees the others
     * as they were when it died. */
    for (int i = 0; i < n; i++) {
        batch[i]->running = false;
        j->running--;
        rank_exited(j, batch[i]);
    }
}

/* The parent of `pid` as /proc says, or -1. */
static pid_t parent_of(long pid)
{
    struct proc_stat st;
    return proc_read_stat(NULL, (pid_t)pid, &st) ? st.ppid : -1;
}

int kill_children(pid_t except)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    pid_t self = getpid();
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == except || parent_of(pid) != self)
            continue;
        kill((pid_t)pid, SIGKILL);
        n++;
    }
    closedir(d);
    return n;
}

/* After the last rank: anything still running that a rank started has been
 * reparented to the job process (a subreaper), even if it left the rank's
 * process group, session or environment: each is sent SIGKILL.  Returns how
 * many children are not reaped yet. */
static int kill_leftovers(struct job *j) { return kill_children(0); }

/* The front is gone: SIGKILLed, since otherwise it waits for the job
 * process.  Nobody is there to wait for the job: it ends now, and what
 * the ranks started with it (kill_leftovers, after the last rank). */
static void front_gone(struct job *j)
{
    close(j->front_fd);
    j->front_fd = -1;
    if (j->running > 0)
        say("the launcher (pid %d) was killed; killing %d %s and what they started", (int)j->front,
            j->running, plural(j->running, "rank", "ranks"));
    else
        say("the launcher (pid %d) was killed; ending what the ranks started", (int)j->front);
    j->hurry = true; /* its reader may be gone with it */
    if (!j->exit_decided) {
        j->exit_decided = true;
        j->exit_status = 128 + SIGKILL;
    }
    char reason[64];
    snprintf(reason, sizeof reason, PROG " (pid %d) was killed", (int)j->front);
    job_stop(j, SEG_CAUSE_SIGNAL, -1, SIGKILL, reason);
}

static void on_signal(struct job *j, int sig)
{
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        signal_running(j, sig);
        return;
    }
    if (j->running == 0)
        j->hurry = true; /* only output is left to write: the user wants out */
    if (j->stopping && j->kill_at_ns == 0)
        return; /* SIGKILL already sent */
    if (++j->stop_signals > 1) {
        say("received %s again; killing %d %s now", signame(sig), j->running,
            plural(j->running, "rank", "ranks"));
        j->kill_at_ns = now_ns();
        j->hurry = true;
        return;
    }
    say("received %s; forwarding it to %d %s", signame(sig), j->running,
        plural(j->running, "rank", "ranks"));
    if (!j->exit_decided) {
        j->exit_decided = true;
        j->exit_status = 128 + sig;
    }
    char reason[64];
    snprintf(reason, sizeof reason, PROG " received %s", signame(sig));
    job_stop(j, SEG_CAUSE_SIGNAL, -1, sig, reason);
}

static void on_deadlines(struct job *j, int64_t now)
{
    if (j->timeout_at_ns && now >= j->timeout_at_ns) {
        j->timeout_at_ns = 0;
        say("the job ran longer than --timeout %g s; stopping %d %s", j->o.timeout, j->running,
            plural(j->running, "rank", "ranks"));
        j->exit_decided = true;
        j->exit_status = 124;
        char reason[96];
        snprintf(reason, sizeof reason, "the job ran longer than --timeout %g s", j->o.timeout);
        j->stopping = false; /* restart the grace period for SIGTERM */
        job_stop(j, SEG_CAUSE_TIMEOUT, -1, SIGTERM, reason);
    }
    if (j->kill_at_ns && now >= j->kill_at_ns) {
        j->kill_at_ns = 0;
        if (j->running > 0) {
            say("%d %s still running after the %g s grace period; sending SIGKILL", j->running,
                plural(j->running, "rank", "ranks"), j->o.grace);
            signal_running(j, SIGKILL);
        }
    }
}

static bool relays_open(const struct job *j)
{
    for (int r = 0; r < j->o.np; r++)
        if (j->ranks[r].out.fd >= 0 || j->ranks[r].err.fd >= 0)
            return true;
    return false;
}

static void close_relays(struct job *j, const struct out_state *os)
{
    for (int r = 0; r < j->o.np; r++) {
        struct relay *rel[2] = {&j->ranks[r].out, &j->ranks[r].err};
        for (int k = 0; k < 2; k++)
            if (rel[k]->fd >= 0 && (!os || !os[rel[k]->stream].full))
                relay_close(rel[k]);
    }
}

static void earliest(int64_t *next, int64_t t)
{
    if (t && t < *next)
        *next = t;
}

/* The event loop's state between two turns, and what one turn saw. */
struct loop {
    int sigfd, wake;
    struct pollfd *pfd;  /* the signals, the wake, the front, the relays */
    struct relay **who;  /* the relay of each pfd slot from first_relay on */
    nfds_t n, first_relay;
    int front_slot;      /* -1: the front's pipe is closed */
    int64_t over_at;     /* when the last rank was reaped */
    int leftovers;       /* children the ranks left, as last counted */
    int64_t rescan_at;
    struct out_state os[3]; /* stdout and stderr, as this turn found them */
    bool over;           /* no rank is running */
    bool bounded;        /* output may be dropped: after a signal or past --timeout */
};

/* Without memory for the loop: the ranks are killed and reaped. */
static int supervise_no_memory(struct job *j, struct loop *l)
{
    say("out of memory");
    free(l->pfd);
    free(l->who);
    free(j->reaped);
    job_stop(j, SEG_CAUSE_SIGNAL, -1, SIGKILL, "the launcher ran out of memory");
    while (wait(NULL) > 0 || errno == EINTR)
        ;
    return 1;
}

/* Once no rank runs: kill what they left, close pipes kept open from
 * outside, give up on output nobody takes.  True when nothing is left. */
static bool wind_down(struct job *j, struct loop *l, int64_t now)
{
    struct out_state *os = l->os;
    if (!l->over_at)
        l->over_at = now;
    /* What the ranks left running ends with the job: killed, and looked
     * for again after each death (its children are then ours) or a while,
     * for at most LEFTOVER_NS. */
    if (l->leftovers && (j->reaped_any || now >= l->rescan_at)) {
        j->reaped_any = false;
        l->leftovers = now < l->over_at + LEFTOVER_NS ? kill_leftovers(j) : 0;
        l->rescan_at = now + RESCAN_NS;
    }
    /* Pipes still open after the drain time have a writer outside the job:
     * what they hold is dropped, unless the stream's reader is slow (then
     * they wait for it). */
    if (!l->leftovers && now >= l->over_at + DRAIN_NS)
        close_relays(j, os);
    /* The rest of the output waits for its reader, as anything written to
     * a pipe does; but not past --timeout or after a signal: output the
     * reader then takes nothing of for OUT_STALL_NS is dropped (at once
     * after a second signal). */
    for (int s = 1; s <= 2; s++)
        if (os[s].len && !os[s].dropping &&
            (j->hurry || (l->bounded && now >= os[s].since + OUT_STALL_NS))) {
            out_give_up(s);
            out_state(s, &os[s]);
        }
    bool pending = (os[1].len && !os[1].dropping) || (os[2].len && !os[2].dropping);
    return !l->leftovers && !relays_open(j) && !pending;
}

/* What to poll: signals, the wake, the front's pipe, each relay whose
 * stream has room. */
static void build_pollset(struct job *j, struct loop *l)
{
    struct pollfd *pfd = l->pfd;
    nfds_t n = 0;
    pfd[n++] = (struct pollfd){.fd = l->sigfd, .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = l->wake, .events = POLLIN};
    l->front_slot = -1;
    if (j->front_fd >= 0) {
        l->front_slot = (int)n;
        pfd[n++] = (struct pollfd){.fd = j->front_fd, .events = POLLIN};
    }
    l->first_relay = n;
    for (int r = 0; r < j->o.np; r++) {
        struct relay *rel[2] = {&j->ranks[r].out, &j->ranks[r].err};
        for (int k = 0; k < 2; k++)
            if (rel[k]->fd >= 0 && !l->os[rel[k]->stream].full) {
                l->who[n] = rel[k];
                pfd[n++] = (struct pollfd){.fd = rel[k]->fd, .events = POLLIN};
            }
    }
    l->n = n;
    /* A full queue wakes the loop when its reader takes some; at the end,
     * any change matters. */
    for (int s = 1; s <= 2; s++)
        if (l->os[s].full || (l->over && l->os[s].len && !l->os[s].dropping))
            out_watch(s, &l->os[s]);
}

/* How long poll may wait: until the next deadline (-1: none). */
static int next_wait_ms(const struct job *j, const struct loop *l, int64_t now)
{
    int64_t next = INT64_MAX;
    earliest(&next, j->timeout_at_ns);
    earliest(&next, j->kill_at_ns);
    if (l->over) {
        if (l->leftovers)
            earliest(&next, l->rescan_at);
        else if (relays_open(j) && now < l->over_at + DRAIN_NS)
            earliest(&next, l->over_at + DRAIN_NS);
        for (int s = 1; s <= 2; s++)
            if (l->os[s].len && !l->os[s].dropping)
                earliest(&next, l->bounded ? l->os[s].since + OUT_STALL_NS
                                           : (j->deadline_ns > now ? j->deadline_ns : 0));
    }
    if (next == INT64_MAX)
        return -1;
    return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

/* What poll found ready: signals (SIGCHLD reaps), the wake, the front
 * gone, output to relay. */
static void handle_ready(struct job *j, struct loop *l)
{
    struct pollfd *pfd = l->pfd;
    if (pfd[0].revents & POLLIN) {
        struct signalfd_siginfo si;
        while (read(l->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo == SIGCHLD)
                reap(j);
            else if ((pid_t)si.ssi_pid == j->front || !j->front)
                on_signal(j, (int)si.ssi_signo); /* the front's; others' were its too */
        }
    }
    if (pfd[1].revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(l->wake, &v, sizeof v);
        (void)r;
    }
    if (l->front_slot >= 0 && pfd[l->front_slot].revents) {
        char c;
        if (read(j->front_fd, &c, 1) <= 0)
            front_gone(j);
    }
    for (nfds_t i = l->first_relay; i < l->n; i++)
        if (pfd[i].revents)
            relay_pump(l->who[i]);
}

/* The rank blamed never failed by itself: report what was seen. */
static void report_deferred(struct job *j)
{
    struct rank_proc *p = j->deferred;
    char how[96];
    describe_status(p->status, how, sizeof how);
    say("rank %d (pid %d) %s", p->rank, (int)p->pid, how);
    j->exit_decided = true;
    j->exit_status = WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128 + WTERMSIG(p->status);
}

int supervise(struct job *j, int sigfd)
{
    if (j->o.timeout > 0)
        j->timeout_at_ns = j->deadline_ns = now_ns() + (int64_t)(j->o.timeout * 1e9);
    size_t cap = 3 + 2 * (size_t)j->o.np;
    struct loop l = {.sigfd = sigfd, .leftovers = 1};
    l.pfd = calloc(cap, sizeof *l.pfd);
    l.who = calloc(cap, sizeof *l.who);
    j->reaped = calloc((size_t)j->o.np, sizeof *j->reaped);
    if (!l.pfd || !l.who || !j->reaped)
        return supervise_no_memory(j, &l);
    l.wake = out_wake_fd();

    for (;;) {
        int64_t now = now_ns();
        on_deadlines(j, now);
        memset(l.os, 0, sizeof l.os);
        out_state(1, &l.os[1]);
        out_state(2, &l.os[2]);
        l.over = j->running == 0;
        l.bounded = j->stop_signals > 0 || (j->deadline_ns && now >= j->deadline_ns);
        if (l.over && wind_down(j, &l, now))
            break;
        build_pollset(j, &l);
        int ready = poll(l.pfd, l.n, next_wait_ms(j, &l, now));
        if (ready < 0 && errno != EINTR) {
            say("poll: %s", strerror(errno));
            break;
        }
        if (ready > 0)
            handle_ready(j, &l);
    }
    if (!j->exit_decided && j->deferred)
        report_deferred(j);
    close_relays(j, NULL); /* only after a failed poll */
    if (j->front_fd >= 0)
        close(j->front_fd);
    j->front_fd = -1;
    free(l.pfd);
    free(l.who);
    free(j->reaped);
    j->reaped = NULL;
    return j->exit_decided ? j->exit_status : 0;
}
