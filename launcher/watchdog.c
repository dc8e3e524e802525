/* The watchdog: what cleans up when shmesh-run itself is killed with SIGKILL.
 *
 * Forked before the ranks, in a process group of its own (a signal to the
 * launcher's group, such as a terminal's ^C, does not reach it), it reads a
 * pipe from the launcher: each rank's pid as it is started ('P') and as it
 * is reaped ('X'), and 'E' when the job ended cleanly.  End of file without
 * 'E' means the launcher is gone.  Its ranks die by their parent-death
 * signal, but what they started does not, and the segment's name is still
 * in /dev/shm if not every rank had joined: the watchdog kills the process
 * group of every rank not reaped, then any process whose environment names
 * the job's segment (what left its rank's group but not the job's
 * environment), and removes the name. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/settings.h"
#include "launcher.h"

struct note {
    int32_t what;
    int32_t pid;
};

/* Closes every descriptor from `low` up. */
static void close_from(int low)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)low, ~0u, 0u) == 0)
        return;
#endif
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        for (int fd = low; fd < 1024; fd++)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (fd >= low && fd != dirfd(d))
            close(fd);
    }
    closedir(d);
}

/* Whether the NUL-separated environment `env` holds `entry` as a whole. */
static bool env_has(const char *env, size_t len, const char *entry)
{
    size_t n = strlen(entry);
    for (size_t at = 0; at < len;) {
        const char *end = memchr(env + at, '\0', len - at);
        size_t l = end ? (size_t)(end - (env + at)) : len - at;
        if (l == n && !memcmp(env + at, entry, n))
            return true;
        at += l + 1;
    }
    return false;
}

/* SIGKILLs every process (of this user, as /proc lets read) whose
 * environment holds `entry`; returns how many. */
static int kill_by_env(const char *entry)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    static char env[256 << 10];
    int killed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == getpid())
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/environ", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        size_t len = 0;
        ssize_t got;
        while (len < sizeof env && (got = read(fd, env + len, sizeof env - len)) > 0)
            len += (size_t)got;
        close(fd);
        if (env_has(env, len, entry) && kill((pid_t)pid, SIGKILL) == 0)
            killed++;
    }
    closedir(d);
    return killed;
}

static void __attribute__((noreturn)) watch(int fd, const char *name, int np, pid_t launcher)
{
    pid_t *pids = calloc((size_t)np, sizeof *pids);
    int n = 0;
    struct note m;
    for (;;) {
        ssize_t got = read(fd, &m, sizeof m);
        if (got < 0 && errno == EINTR)
            continue;
        if (got != (ssize_t)sizeof m)
            break; /* the launcher is gone */
        if (m.what == 'E')
            _exit(0);
        if (m.what == 'P' && pids && n < np)
            pids[n++] = (pid_t)m.pid;
        for (int i = 0; m.what == 'X' && pids && i < n; i++)
            if (pids[i] == (pid_t)m.pid)
                pids[i] = 0;
    }
    int groups = 0;
    for (int i = 0; pids && i < n; i++)
        if (pids[i] > 0 && killpg(pids[i], SIGKILL) == 0)
            groups++;
    /* Processes that left their rank's group (setsid, daemons) usually still
     * carry the job's environment: the segment's name is unique to it.  A
     * second look catches what they started meanwhile. */
    char entry[SEG_NAME_MAX + 64];
    snprintf(entry, sizeof entry, "%s=%s", settings_table[SETTING_SEGMENT].name, name);
    for (int pass = 0; pass < 5 && kill_by_env(entry) > 0; pass++)
        usleep(20000);
    bool unlinked = shm_unlink(name) == 0;
    /* A word on stderr, unless nobody reads it. */
    alarm(5);
    char line[512];
    int len = snprintf(line, sizeof line,
                       PROG ": the launcher (pid %d) was killed; its watchdog killed what was "
                       "left of %d %s%s%s\n",
                       (int)launcher, groups, groups == 1 ? "rank" : "ranks",
                       unlinked ? " and removed segment " : "", unlinked ? name : "");
    if (groups || unlinked) {
        ssize_t w = write(2, line, (size_t)len);
        (void)w;
    }
    _exit(0);
}

int watchdog_start(struct job *j)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int ignored[] = {SIGINT, SIGQUIT, SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1,
                         SIGUSR2};
        for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
            signal(ignored[i], SIG_IGN);
        prctl(PR_SET_NAME, "shmesh-watchdog");
        char name[SEG_NAME_MAX];
        snprintf(name, sizeof name, "%s", j->seg->name);
        munmap(j->seg->base, j->seg->size);
        /* Only the pipe and stderr: a reader of the launcher's stdout, or of
         * any pipe it inherited, sees its end when the launcher's comes. */
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
        }
        if (dup2(p[0], 3) < 0)
            _exit(1);
        close_from(4);
        watch(3, name, j->o.np, launcher);
    }
    close(p[0]);
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    j->watchdog = pid;
    j->watch_fd = p[1];
    return 0;
}

void watchdog_note(struct job *j, char what, pid_t pid)
{
    if (j->watch_fd < 0)
        return;
    struct note m = {what, (int32_t)pid};
    ssize_t w = write(j->watch_fd, &m, sizeof m);
    (void)w; /* a watchdog that is gone cannot be told */
}

void watchdog_stop(struct job *j)
{
    if (j->watch_fd >= 0) {
        watchdog_note(j, 'E', 0);
        close(j->watch_fd);
        j->watch_fd = -1;
    }
    /* It exits at once; not waiting forever for one that was stopped. */
    for (int i = 0; j->watchdog > 0 && i < 200; i++) {
        pid_t w = waitpid(j->watchdog, NULL, WNOHANG);
        if (w == j->watchdog || (w < 0 && errno != EINTR))
            break;
        usleep(5000);
    }
    j->watchdog = 0;
}
