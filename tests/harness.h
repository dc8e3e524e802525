/* Running shmesh-run (or any command) from a test, always with a deadline. */
#ifndef SHMESH_TEST_HARNESS_H
#define SHMESH_TEST_HARNESS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sched.h>
#include <sys/types.h>

struct run {
    int status;      /* wait status */
    int code;        /* exit code, or 128+signal */
    bool timed_out;  /* the deadline passed and the process group was killed */
    double secs;     /* wall time */
    char *out, *err; /* captured, NUL-terminated */
};

/* Runs argv in a new process group with extra environment entries
 * ("NAME=value", NULL-terminated list, may be NULL; a bare "NAME" unsets
 * NAME), stdin from /dev/null.  After `timeout` seconds the whole group is
 * killed. */
int run_cmd(char *const argv[], char *const env[], double timeout, struct run *r);

/* As run_cmd, but calls `during(pid, arg)` in the parent right after the
 * child starts; the deadline still applies. */
int run_cmd_with(char *const argv[], char *const env[], double timeout, struct run *r,
                 void (*during)(pid_t pid, void *arg), void *arg);

/* Everything run_cmd_with takes, and how stdout is connected. */
struct run_opts {
    char *const *env;
    double timeout;
    void (*during)(pid_t pid, void *arg);
    void *arg;
    /* stdout is a pipe that nothing reads (r->out stays empty), as when a
     * reader of the command's output stalls. */
    bool stdout_unread;
};
int run_cmd_opts(char *const argv[], const struct run_opts *o, struct run *r);

void run_free(struct run *r);

/* Runs shmesh-run with the given arguments (NULL-terminated); an argument
 * "@rank" stands for the shmesh-test-rank helper. */
int run_launcher(struct run *r, char *const env[], double timeout, ...);
/* The same for any program: prog, then the arguments in ap (NULL-terminated,
 * "@rank" likewise). */
int run_prog_v(struct run *r, char *const env[], double timeout, const char *prog, va_list ap);

/* True when the segment named in launcher -v output still exists in
 * /dev/shm, or when no name was printed; `name` receives it. */
bool segment_left_behind(const struct run *r, char *name, size_t len);

/* Whether SHMESH_NOTIFY=uring can work on this machine. */
bool uring_available(void);

/* Each "rank R: ... (N ms)" line's N for the given operation and error
 * name; returns how many were found (at most max). */
int op_times_ms(const char *out, const char *op_arrow_err, double *ms, int max);

/* Paths given by meson through the environment: the variable's value, or
 * exit 1 saying it is not set. */
const char *need_env(const char *name);
const char *launcher_path(void);
const char *rank_prog_path(void);

/* Counts lines of `text` containing every one of the given substrings. */
int count_lines(const char *text, const char *a, const char *b);
/* Fails the test (showing r's output) unless exactly n lines of r's stdout
 * contain a (and b, unless NULL). */
void expect_lines(const struct run *r, const char *a, const char *b, int n);

/* Pulls "segment /shmesh-..." out of launcher -v output into name. */
bool find_segment_name(const char *text, char *name, size_t len);
bool shm_exists(const char *name);

/* Are any of these pids still alive (not zombies of someone else)? */
bool pid_alive(pid_t pid);

/* The CPUs process pid's main thread may run on, as /proc/PID/status's
 * Cpus_allowed_list gives them ("0-3,8"), into list: false when unread. */
bool cpus_allowed_list(pid_t pid, char *list, size_t len);

/* The CPUs this test may use (a cpuset or taskset may allow fewer than are
 * online, and the launcher counts them so) into *mine: their number. */
int usable_cpus(cpu_set_t *mine);
/* The first process in /proc that match(pid, its stat, arg) accepts, or 0. */
struct proc_stat;
pid_t find_process(bool (*match)(pid_t pid, const struct proc_stat *st, void *arg), void *arg);

/* A directory to pass as SHMESH_SYSROOT: `gpus` fake NVIDIA GPUs under
 * proc/driver/nvidia/gpus (0: none at all, whatever the machine has).
 * Returns the path (static storage, one at a time); remove it with
 * fake_sysroot_remove. */
const char *fake_sysroot(int gpus);
void fake_sysroot_remove(void);

/* SHMESH_TEST_SAMPLE=N (default 1; the sanitize setup sets it): the suites
 * built on large matrices run one case in N, and say so. */
int test_sample(void);
/* count / N, at least 1. */
int test_scaled(int count);
/* Whether entry i of a matrix runs: every N-th, from the first. */
bool test_sampled(unsigned i);
/* "SHMESH_TEST_SAMPLE=N: RAN of the OF WHAT" when N > 1. */
void test_sample_note(const char *what, unsigned ran, unsigned of);

double mono_secs(void);
void sleep_secs(double s);

#endif
