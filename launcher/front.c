/* shmesh-run's two processes, and why nothing of a job outlives either.
 *
 * The front (the process the caller started, whose pid it knows) parses
 * the options and creates the segment, then forks the job process, which
 * starts the ranks and supervises them (supervise.c).  The front forwards
 * signals and terminal input to it and exits with its status.  Each guards
 * the other:
 *
 *   - The front killed (SIGKILL: nothing of it runs any more).  The job
 *     process sees the pipe from the front close and ends the job at once.
 *     Every process a rank started is its descendant: it is a child
 *     subreaper (PR_SET_CHILD_SUBREAPER), so what a double fork orphans is
 *     reparented to it, whatever session, process group or environment it
 *     moved to, and it kills its children until none is left.
 *   - The job process killed.  Its ranks die of their parent-death signal,
 *     and what they started is reparented to the front (a child subreaper
 *     too), which kills it, removes the segment's name and says so.
 *
 * The job process runs in a process group of its own, so that a signal to
 * the front's group (a terminal's ^C, timeout(1)'s SIGKILL to its group)
 * does not reach it: the front forwards what it receives, and the job
 * process takes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 from
 * the front alone (so that `pkill shmesh-run` is one signal, not two).  For
 * the same reason it never reads the terminal: the front forwards the
 * terminal's input to rank 0.  What escapes both: a process started through
 * a service manager (systemd-run, at), which is not a descendant. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"

#define LEFTOVER_NS 2000000000LL /* killing what the job left: no longer than this */
#define RESCAN_MS 50

/* Terminal input for rank 0, a chunk at a time; the pipe is non-blocking so
 * a rank that never reads cannot stall the front. */
struct fwd {
    char buf[4096];
    size_t len, off;
};

static void forward_stdin(struct job *j, struct fwd *f, short in_ev, short out_ev)
{
    if (f->len == 0 && (in_ev & (POLLIN | POLLHUP))) {
        ssize_t n = read(0, f->buf, sizeof f->buf);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
            close(j->stdin_pipe); /* end of input reaches rank 0 as EOF */
            j->stdin_pipe = -1;
            return;
        }
        f->len = n > 0 ? (size_t)n : 0;
        f->off = 0;
    }
    if (f->len && (out_ev & POLLOUT || in_ev)) {
        ssize_t n = write(j->stdin_pipe, f->buf + f->off, f->len - f->off);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            close(j->stdin_pipe); /* rank 0 closed its stdin */
            j->stdin_pipe = -1;
            return;
        }
        if (n > 0)
            f->off += (size_t)n;
        if (f->off == f->len)
            f->len = f->off = 0;
    }
}

/* Rank 0 reads the caller's stdin.  A terminal cannot be handed over (the
 * rank runs in a background process group and would be stopped by
 * SIGTTIN), so the front forwards what is typed through a pipe. */
static int setup_stdin(struct job *j)
{
    if (!isatty(0)) {
        j->stdin_fd = 0;
        return 0;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, PROG ": cannot create a pipe: %s\n", strerror(errno));
        return -1;
    }
    j->stdin_fd = p[0];
    j->stdin_pipe = p[1];
    return 0;
}

/* After the job process: its leftovers, now the front's children, killed
 * and reaped until none is left (for at most LEFTOVER_NS); how many. */
static int end_leftovers(void)
{
    int killed = 0;
    int64_t until = now_ns() + LEFTOVER_NS;
    for (;;) {
        int n = kill_children(0);
        killed += n;
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (n == 0 || now_ns() >= until)
            return killed;
        poll(NULL, 0, RESCAN_MS);
    }
}

/* The front's loop: signals forwarded to the job process, terminal input
 * to rank 0, until the job process has exited.  Returns its wait status. */
static int front_loop(struct job *j, int sigfd, pid_t job)
{
    struct fwd fwd = {.len = 0};
    if (j->stdin_pipe >= 0)
        fcntl(j->stdin_pipe, F_SETFL, O_NONBLOCK);
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sigfd, .events = POLLIN}};
        nfds_t n = 1;
        if (j->stdin_pipe >= 0)
            pfd[n++] = fwd.len ? (struct pollfd){.fd = j->stdin_pipe, .events = POLLOUT}
                               : (struct pollfd){.fd = 0, .events = POLLIN};
        if (poll(pfd, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, PROG ": poll: %s; waiting for the job to end\n", strerror(errno));
            int st = 0;
            while (waitpid(job, &st, 0) < 0 && errno == EINTR)
                ;
            return st;
        }
        struct signalfd_siginfo si;
        while ((pfd[0].revents & POLLIN) && read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo != SIGCHLD) {
                kill(job, (int)si.ssi_signo);
                continue;
            }
            int st;
            pid_t pid;
            while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
                if (pid == job)
                    return st;
        }
        if (n > 1 && pfd[1].revents) {
            if (pfd[1].fd == 0)
                forward_stdin(j, &fwd, pfd[1].revents, 0);
            else
                forward_stdin(j, &fwd, 0, pfd[1].revents);
        }
    }
}

int front_split(struct job *j, int sigfd, int *status)
{
    if (setup_stdin(j))
        return -1;
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, PROG ": cannot create a pipe: %s\n", strerror(errno));
        goto fail;
    }
    pid_t front = getpid();
    pid_t job = fork();
    if (job < 0) {
        fprintf(stderr, PROG ": cannot start the job process: fork: %s\n", strerror(errno));
        close(p[0]);
        close(p[1]);
        goto fail;
    }
    if (job == 0) {
        setpgid(0, 0);
        prctl(PR_SET_NAME, JOB_PROCESS);
        prctl(PR_SET_CHILD_SUBREAPER, 1);
        close(p[1]);
        if (j->stdin_pipe >= 0) {
            close(j->stdin_pipe);
            j->stdin_pipe = -1;
        }
        j->front = front;
        j->front_fd = p[0];
        return 0;
    }
    setpgid(job, job); /* also here: a signal forwarded at once finds it */
    close(p[0]);
    trace_drop(j); /* the job process's now */
    /* p[1] stays open, unused, until the front exits: its end tells the
     * job process that the front is gone. */
    if (j->stdin_fd > 0)
        close(j->stdin_fd);
    j->stdin_fd = -1;
    int st = front_loop(j, sigfd, job);
    if (WIFEXITED(st)) {
        end_leftovers(); /* anything orphaned as the job process exited */
        *status = WEXITSTATUS(st);
    } else {
        /* Its ranks died with it (their parent-death signal); what they
         * started is ours now. */
        char how[96];
        describe_status(st, how, sizeof how);
        int left = end_leftovers();
        bool unlinked = j->seg->named && shm_unlink(j->seg->name) == 0;
        fprintf(stderr,
                PROG ": the job process (pid %d) was %s; the job ended with it: its ranks died "
                     "of their parent-death signal, %d process%s they had started %s killed%s%s\n",
                (int)job, how, left, left == 1 ? "" : "es", left == 1 ? "was" : "were",
                unlinked ? ", segment removed: " : "", unlinked ? j->seg->name : "");
        *status = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    }
    close(p[1]);
    if (j->stdin_pipe >= 0)
        close(j->stdin_pipe);
    j->stdin_pipe = -1;
    return 1;

fail:
    if (j->stdin_pipe >= 0) {
        close(j->stdin_fd);
        close(j->stdin_pipe);
        j->stdin_fd = j->stdin_pipe = -1;
    }
    return -1;
}
