/* shmesh-run internals. */
#ifndef SHMESH_LAUNCHER_H
#define SHMESH_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "segment.h"

#define PROG "shmesh-run"

enum bind_policy { BIND_AUTO, BIND_CORE, BIND_NUMA, BIND_NONE };

struct options {
    int np;               /* ranks; 0 until chosen */
    const char *shm_size_from; /* "--shm-size X" or "SHMESH_SHM_SIZE (N bytes)", or NULL */
    bool tag_output;
    bool verbose;
    double timeout;       /* seconds; 0: none */
    double grace;         /* seconds between the abort flag and SIGKILL */
    enum bind_policy bind; /* BIND_AUTO until main() decides */
    uint64_t slot_bytes;  /* 0: the segment's default */
    uint64_t shm_size;    /* the whole segment; 0: the default */
    const char *sysroot;  /* SHMESH_SYSROOT: prefix of /sys and /proc (tests' fake GPUs) */
    char **argv;          /* the program and its arguments */
};

/* One rank's output stream while --tag-output relays it. */
struct relay {
    int fd;       /* read end; -1 once closed */
    int out_fd;   /* where lines go: 1 or 2 */
    int rank;
    bool at_line_start;
    size_t len;
    char buf[8192];
};

struct rank_proc {
    int rank;
    pid_t pid;     /* also its process group */
    bool running;
    int status;    /* wait status once reaped */
    struct relay out, err;
};

struct gpu_env {
    const char *var; /* HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES or NULL */
    int count;
    char **ids;      /* device ids to hand out, count of them */
};

struct job {
    struct options o;
    struct seg *seg;
    struct rank_proc *ranks;
    struct rank_proc **reaped; /* scratch: ranks reaped by one SIGCHLD */
    struct gpu_env gpus;
    int running;
    int *cpus;            /* BIND_CORE: the CPU of each rank */
    int stdin_fd;         /* rank 0's stdin when forwarded, else -1 */
    int stdin_pipe;       /* write end towards rank 0, or -1 */
    struct rlimit nofile; /* RLIMIT_NOFILE as given: the ranks get it back */
    /* How the job ends. */
    bool stopping;
    int stop_signals;     /* SIGINT/TERM/HUP/QUIT received; the second kills at once */
    int first_failure;    /* rank, or -1 */
    struct rank_proc *deferred; /* a failure blamed on a rank not yet exited */
    int exit_status;      /* the launcher's, once decided */
    bool exit_decided;
    int64_t kill_at_ns;   /* when stopping: SIGKILL time; 0 once sent */
    int64_t timeout_at_ns;
};

/* spawn.c */
int spawn_ranks(struct job *j);
/* gpus.c */
void gpus_detect(struct gpu_env *g, const char *sysroot);
void gpus_free(struct gpu_env *g);
/* supervise.c */
int supervise(struct job *j, int sigfd);
int64_t now_ns(void);
/* Tells the ranks (abort flag), sends `sig` (0: none) and arms the SIGKILL
 * that follows after --grace. */
void job_stop(struct job *j, int cause, int rank, int sig, const char *reason);
/* output.c */
void relay_init(struct relay *r, int rank, int fd, int out_fd);
/* Reads what is available; returns false at end of file. */
bool relay_pump(struct relay *r);
void relay_flush(struct relay *r);

void describe_status(int status, char *buf, size_t len);

#endif
