/* Running shmesh-run (or any command) from a test, always with a deadline. */
#ifndef SHMESH_TEST_HARNESS_H
#define SHMESH_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

struct run {
    int status;      /* wait status */
    int code;        /* exit code, or 128+signal */
    bool timed_out;  /* the deadline passed and the process group was killed */
    double secs;     /* wall time */
    char *out, *err; /* captured, NUL-terminated */
};

/* Runs argv in a new process group with extra environment entries
 * ("NAME=value", NULL-terminated list, may be NULL).  After `timeout` seconds
 * the whole group is killed.  If `pid_out` is given, it receives the pid as
 * soon as the child starts (through `started`, called in the parent). */
int run_cmd(char *const argv[], char *const env[], double timeout, struct run *r);

/* As run_cmd, but calls `during(pid, arg)` in the parent right after the
 * child starts; the deadline still applies. */
int run_cmd_with(char *const argv[], char *const env[], double timeout, struct run *r,
                 void (*during)(pid_t pid, void *arg), void *arg);

void run_free(struct run *r);

/* Paths given by meson through the environment. */
const char *launcher_path(void);
const char *rank_prog_path(void);

/* Counts lines of `text` containing every one of the given substrings. */
int count_lines(const char *text, const char *a, const char *b);

/* Pulls "segment /shmesh-..." out of launcher -v output into name. */
bool find_segment_name(const char *text, char *name, size_t len);
bool shm_exists(const char *name);

/* Are any of these pids still alive (not zombies of someone else)? */
bool pid_alive(pid_t pid);

double mono_secs(void);
void sleep_secs(double s);

#endif
