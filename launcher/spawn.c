/* Forking the ranks: environment, process groups, parent-death signal, and
 * an exec failure reported once instead of N times. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"

static void set_env_int(const char *name, int v)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", v);
    setenv(name, buf, 1);
}

static void child_fail(int errfd, int err)
{
    ssize_t w = write(errfd, &err, sizeof err);
    (void)w;
    _exit(err == ENOENT ? 127 : 126);
}

/* In the child, between fork and exec: only async-signal-safe calls matter
 * little here (the launcher is single-threaded), but keep it short. */
static void child(struct job *j, int rank, pid_t launcher, int errfd, int out_w, int err_w)
{
    setpgid(0, 0); /* its own group: a signal reaches the rank and all it started */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != launcher)
        _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setrlimit(RLIMIT_NOFILE, &j->nofile); /* the limit it would have had without the launcher */

    if (rank == 0 && j->stdin_fd >= 0) {
        dup2(j->stdin_fd, 0);
    } else if (rank != 0) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0)
            dup2(null, 0);
    }
    if (out_w >= 0)
        dup2(out_w, 1);
    if (err_w >= 0)
        dup2(err_w, 2);

    setenv("SHMESH_SEGMENT", j->seg->name, 1);
    set_env_int("SHMESH_RANK", rank);
    set_env_int("SHMESH_WORLD_SIZE", j->o.np);
    set_env_int("SHMESH_LOCAL_RANK", rank);
    set_env_int("RANK", rank);
    set_env_int("WORLD_SIZE", j->o.np);
    set_env_int("LOCAL_RANK", rank);
    set_env_int("LOCAL_WORLD_SIZE", j->o.np);
    set_env_int("SHMESH_LOCAL_DEVICES", j->o.devices);
    if (j->gpus.count > 0) {
        char *gpus = gpus_of_rank(&j->gpus, rank, j->o.devices);
        if (!gpus) /* never a rank that sees every GPU */
            child_fail(errfd, ENOMEM);
        setenv(j->gpus.var, gpus, 1);
        free(gpus);
        if (j->gpus.set_order)
            setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
    }
    int node = seg_ctrl(j->seg, rank)->numa_node;
    if (node >= 0)
        set_env_int("SHMESH_NUMA_NODE", node);
    bind_rank(j, rank, node);
    execvp(j->o.argv[0], j->o.argv);
    child_fail(errfd, errno);
}

static int make_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0) {
        say("cannot create a pipe: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void close_pipes(int a[2], int b[2], int c[2])
{
    int *fds[] = {a, b, c};
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < 2; e++)
            if (fds[k][e] >= 0)
                close(fds[k][e]);
}

int spawn_ranks(struct job *j)
{
    j->ranks = calloc((size_t)j->o.np, sizeof *j->ranks);
    if (!j->ranks)
        return 1;
    pid_t self = getpid();
    /* Every relay closed first: a rank never started has none to poll. */
    for (int r = 0; r < j->o.np; r++) {
        j->ranks[r].rank = r;
        relay_init(&j->ranks[r].out, r, -1, 1);
        relay_init(&j->ranks[r].err, r, -1, 2);
    }
    for (int r = 0; r < j->o.np; r++) {
        struct rank_proc *p = &j->ranks[r];
        int errp[2] = {-1, -1}, outp[2] = {-1, -1}, errs[2] = {-1, -1};
        if (make_pipe(errp) || (j->o.tag_output && (make_pipe(outp) || make_pipe(errs)))) {
            close_pipes(errp, outp, errs);
            goto failed;
        }
        pid_t pid = fork();
        if (pid < 0) {
            say("cannot start rank %d: fork: %s", r, strerror(errno));
            close_pipes(errp, outp, errs);
            goto failed;
        }
        if (pid == 0) {
            close(errp[0]);
            child(j, r, self, errp[1], outp[1], errs[1]);
        }
        setpgid(pid, pid); /* also here, so killpg works before the child runs */
        p->pid = pid;
        p->running = true;
        j->running++;
        close(errp[1]);
        if (j->o.tag_output) {
            close(outp[1]);
            close(errs[1]);
            relay_init(&p->out, r, outp[0], 1);
            relay_init(&p->err, r, errs[0], 2);
        }
        int child_errno = 0;
        ssize_t n;
        do
            n = read(errp[0], &child_errno, sizeof child_errno);
        while (n < 0 && errno == EINTR);
        close(errp[0]);
        if (n == (ssize_t)sizeof child_errno) {
            say("cannot run '%s': %s", j->o.argv[0], strerror(child_errno));
            int st;
            waitpid(pid, &st, 0);
            p->running = false;
            j->running--;
            j->exit_status = child_errno == ENOENT ? 127 : 126;
            j->exit_decided = true;
            job_stop(j, SEG_CAUSE_RANK_DIED, r, SIGKILL, "the program could not be started");
            return 0;
        }
        continue;
    failed:
        j->exit_status = 1;
        j->exit_decided = true;
        job_stop(j, SEG_CAUSE_RANK_DIED, -1, SIGKILL, "the launcher could not start every rank");
        return 0;
    }
    if (j->stdin_fd > 0)
        close(j->stdin_fd); /* rank 0 has its copy of the pipe's read end */
    return 0;
}
