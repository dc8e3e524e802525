#include "harness.h"

#include "notify.h"
#include "proc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double mono_secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_secs(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static char *slurp(int fd)
{
    off_t len = lseek(fd, 0, SEEK_END);
    if (len < 0)
        len = 0;
    char *buf = malloc((size_t)len + 1);
    if (!buf)
        abort();
    ssize_t got = pread(fd, buf, (size_t)len, 0);
    buf[got > 0 ? got : 0] = '\0';
    close(fd);
    return buf;
}

/* A sanitizer's report in what a command printed fails the test, whatever
 * the test expected of the command (a rank that halts on a report exits 1,
 * which a test of a failing job would accept). */
static void sanitizer_check(char *const argv[], struct run *r)
{
    static const char *const marks[] = {"runtime error:", "ERROR: AddressSanitizer",
                                        "ERROR: LeakSanitizer", "WARNING: AddressSanitizer"};
    const char *texts[] = {r->out, r->err};
    for (size_t t = 0; t < 2; t++)
        for (size_t m = 0; m < sizeof marks / sizeof *marks; m++)
            if (strstr(texts[t], marks[m])) {
                fprintf(stderr, "%s printed a sanitizer report (\"%s\") on %s:\n%s\n", argv[0],
                        marks[m], t ? "stderr" : "stdout", texts[t]);
                run_free(r); /* the test ends here: no leak report for them at exit */
                fail_msg("sanitizer report from %s", argv[0]);
            }
}

int run_cmd_opts(char *const argv[], const struct run_opts *o, struct run *r)
{
    char *const *env = o->env;
    double timeout = o->timeout;
    memset(r, 0, sizeof *r);
    int out = memfd_create("out", MFD_CLOEXEC), err = memfd_create("err", MFD_CLOEXEC);
    if (out < 0 || err < 0)
        return -1;
    int unread[2] = {-1, -1};
    if (o->stdout_unread && pipe2(unread, O_CLOEXEC) < 0)
        return -1;
    /* Ranks share these files: without O_APPEND their writes race on the
     * shared offset (memfds lack the f_pos lock of ordinary files). */
    fcntl(out, F_SETFL, O_APPEND);
    fcntl(err, F_SETFL, O_APPEND);
    double t0 = mono_secs();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        dup2(unread[1] >= 0 ? unread[1] : out, 1);
        dup2(err, 2);
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        for (int i = 0; env && env[i]; i++) {
            if (strchr(env[i], '='))
                putenv(env[i]);
            else
                unsetenv(env[i]);
        }
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    if (unread[1] >= 0)
        close(unread[1]);
    if (o->during)
        o->during(pid, o->arg);
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        if (mono_secs() - t0 > timeout) {
            r->timed_out = true;
            killpg(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        sleep_secs(0.005);
    }
    /* Whatever the command left in its group goes too. */
    killpg(pid, SIGKILL);
    r->secs = mono_secs() - t0;
    r->status = st;
    r->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r->out = slurp(out);
    r->err = slurp(err);
    if (unread[0] >= 0)
        close(unread[0]);
    sanitizer_check(argv, r);
    return 0;
}

int run_cmd_with(char *const argv[], char *const env[], double timeout, struct run *r,
                 void (*during)(pid_t pid, void *arg), void *arg)
{
    struct run_opts o = {.env = env, .timeout = timeout, .during = during, .arg = arg};
    return run_cmd_opts(argv, &o, r);
}

int run_cmd(char *const argv[], char *const env[], double timeout, struct run *r)
{
    return run_cmd_with(argv, env, timeout, r, NULL, NULL);
}

void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const char *need_env(const char *name)
{
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "%s is not set (run the tests through meson test)\n", name);
        exit(1);
    }
    return v;
}

const char *launcher_path(void) { return need_env("SHMESH_RUN"); }
const char *rank_prog_path(void) { return need_env("SHMESH_TEST_RANK"); }

int count_lines(const char *text, const char *a, const char *b)
{
    int n = 0;
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *copy = strndup(line, len);
        if (copy && (!a || strstr(copy, a)) && (!b || strstr(copy, b)))
            n++;
        free(copy);
        line = end ? end + 1 : NULL;
    }
    return n;
}

void expect_lines(const struct run *r, const char *a, const char *b, int n)
{
    int got = count_lines(r->out, a, b);
    if (got != n)
        fail_msg("%d lines with '%s'%s%s, expected %d\nstdout:\n%s\nstderr:\n%s", got, a,
                 b ? " and " : "", b ? b : "", n, r->out, r->err);
}

bool find_segment_name(const char *text, char *name, size_t len)
{
    const char *p = strstr(text, "segment /shmesh-");
    if (!p)
        return false;
    p += strlen("segment ");
    size_t n = strcspn(p, " \n,");
    if (n >= len)
        return false;
    memcpy(name, p, n);
    name[n] = '\0';
    return true;
}

bool shm_exists(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    struct stat st;
    return stat(path, &st) == 0;
}

bool pid_alive(pid_t pid) { return !notify_pid_exited(pid); }

int usable_cpus(cpu_set_t *mine)
{
    assert_int_equal(sched_getaffinity(0, sizeof *mine, mine), 0);
    return CPU_COUNT(mine);
}

bool cpus_allowed_list(pid_t pid, char *list, size_t len)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            const char *v = line + 18 + strspn(line + 18, " \t");
            snprintf(list, len, "%.*s", (int)strcspn(v, "\n"), v);
            found = true;
        }
    if (f)
        fclose(f);
    return found;
}

int run_prog_v(struct run *r, char *const env[], double timeout, const char *prog, va_list ap)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)prog;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 63)
        argv[n++] = (char *)(strcmp(a, "@rank") ? a : rank_prog_path());
    argv[n] = NULL;
    return run_cmd(argv, env, timeout, r);
}

int run_launcher(struct run *r, char *const env[], double timeout, ...)
{
    va_list ap;
    va_start(ap, timeout);
    int rc = run_prog_v(r, env, timeout, launcher_path(), ap);
    va_end(ap);
    return rc;
}

bool segment_left_behind(const struct run *r, char *name, size_t len)
{
    if (!find_segment_name(r->err, name, len)) {
        snprintf(name, len, "(no segment name in the launcher's output)");
        return true;
    }
    return shm_exists(name);
}

bool uring_available(void)
{
    struct notify *n;
    char err[256];
    if (notify_open(NOTIFY_URING, 1, &n, err, sizeof err) < 0)
        return false;
    notify_close(n);
    return true;
}

int op_times_ms(const char *out, const char *op_arrow_err, double *ms, int max)
{
    int n = 0;
    const char *p = out;
    while (n < max && (p = strstr(p, op_arrow_err))) {
        p += strlen(op_arrow_err);
        const char *paren = strstr(p, " (");
        if (paren && sscanf(paren, " (%lf ms)", &ms[n]) == 1)
            n++;
    }
    return n;
}

static char sysroot[64];

const char *fake_sysroot(int gpus)
{
    fake_sysroot_remove();
    snprintf(sysroot, sizeof sysroot, "/tmp/shmesh-sysroot-XXXXXX");
    if (!mkdtemp(sysroot))
        abort();
    char path[256];
    snprintf(path, sizeof path, "%s/proc/driver/nvidia/gpus", sysroot);
    for (int i = 0; i < gpus; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "mkdir -p %s/0000:%02x:00.0", path, i + 1);
        if (system(cmd) != 0)
            abort();
    }
    return sysroot;
}

void fake_sysroot_remove(void)
{
    if (!sysroot[0])
        return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", sysroot);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", sysroot);
    sysroot[0] = '\0';
}

int test_sample(void)
{
    static int n;
    if (n)
        return n;
    const char *v = getenv("SHMESH_TEST_SAMPLE");
    char *end;
    long l = v && *v ? strtol(v, &end, 10) : 1;
    if (v && *v && (*end || l < 1 || l > 1000)) {
        fprintf(stderr, "SHMESH_TEST_SAMPLE must be a whole number from 1 to 1000, got '%s'\n", v);
        exit(1);
    }
    n = (int)l;
    return n;
}

int test_scaled(int count)
{
    int n = count / test_sample();
    return n > 0 ? n : 1;
}

bool test_sampled(unsigned i) { return i % (unsigned)test_sample() == 0; }

void test_sample_note(const char *what, unsigned ran, unsigned of)
{
    if (test_sample() > 1)
        print_message("SHMESH_TEST_SAMPLE=%d: %u of the %u %s\n", test_sample(), ran, of, what);
}

pid_t find_process(bool (*match)(pid_t pid, const struct proc_stat *st, void *arg), void *arg)
{
    DIR *d = opendir("/proc");
    pid_t found = 0;
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        pid_t pid = (pid_t)atoi(e->d_name);
        struct proc_stat st;
        if (pid > 0 && proc_read_stat(NULL, pid, &st) && match(pid, &st, arg))
            found = pid;
    }
    if (d)
        closedir(d);
    return found;
}
