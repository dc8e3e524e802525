/* shmesh-run internals. */
#ifndef SHMESH_LAUNCHER_H
#define SHMESH_LAUNCHER_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "segment.h"

#define PROG "shmesh-run"

enum bind_policy { BIND_AUTO, BIND_CORE, BIND_NUMA, BIND_NONE };
/* --gpus: the GPUs found, none at all, or the ids listed. */
enum gpu_mode { GPUS_AUTO, GPUS_NONE, GPUS_LIST };

struct options {
    int np;               /* ranks; 0 until chosen */
    int devices;          /* --devices-per-rank: devices each rank holds (K) */
    const char *shm_size_from; /* "--shm-size X" or "SHMESH_SHM_SIZE (N bytes)", or NULL */
    bool tag_output;
    bool verbose;
    double timeout;       /* seconds; 0: none */
    double grace;         /* seconds between the abort flag and SIGKILL */
    enum bind_policy bind; /* BIND_AUTO until main() decides */
    bool bind_overload;    /* --bind-to core:overload-allowed: more ranks than CPUs, in turn */
    enum gpu_mode gpus;
    char **gpu_list;      /* --gpus LIST: the ids, integers without leading zeros */
    int gpu_listed;       /* how many */
    uint64_t slot_bytes;  /* 0: the segment's default */
    uint64_t shm_size;    /* the whole segment; 0: the default */
    const char *sysroot;  /* SHMESH_SYSROOT: prefix of /sys and /proc (tests' fake GPUs) */
    const char *trace_path; /* --trace or SHMESH_TRACE; NULL: no tracing */
    uint32_t trace_events;  /* --trace-events: per rank's ring, a power of two */
    char **argv;          /* the program and its arguments */
};

/* One rank's output stream while --tag-output relays it: the line being
 * gathered, written out whole once its newline comes. */
struct relay {
    int fd;       /* read end; -1 once closed */
    int stream;   /* where lines go: 1 or 2 */
    int rank;
    char *buf;    /* allocated on first use, grown up to RELAY_LINE_MAX */
    size_t len, cap;
};

/* A line longer than this is cut: each piece goes out as a line of its own. */
#define RELAY_LINE_MAX (1u << 20)

struct rank_proc {
    int rank;
    pid_t pid;     /* also its process group */
    bool running;
    int status;    /* wait status once reaped */
    struct relay out, err;
};

/* A GPU of the node and where it sits; what could not be read is unknown. */
struct gpu_info {
    char pci[24];     /* "0000:17:00.0"; "" when unknown */
    char uuid[48];    /* "GPU-..."; "" when unknown */
    int node;         /* its NUMA node; -1 when unknown */
    bool has_cpus;
    cpu_set_t cpus;   /* the CPUs near it (local_cpulist), when has_cpus */
};

struct gpu_env {
    const char *var; /* HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES or NULL */
    int count;
    char **ids;      /* device ids to hand out, count of them */
    bool listed;     /* the ids are --gpus LIST's: one per device of the job */
    /* The GPUs found, numbered as the visibility variable numbers them
     * (AMD: KFD node order; NVIDIA: PCI order). */
    int found;
    struct gpu_info *info;
    bool pci_order;  /* integer ids number info[] (not so under another CUDA_DEVICE_ORDER) */
    bool set_order;  /* the ranks get CUDA_DEVICE_ORDER=PCI_BUS_ID */
};

struct trace;

struct job {
    struct options o;
    struct seg *seg;
    struct trace *trace;  /* --trace; NULL: off */
    struct rank_proc *ranks;
    struct rank_proc **reaped; /* scratch: ranks reaped by one SIGCHLD */
    struct gpu_env gpus;
    int running;
    int *cpus;            /* BIND_CORE: the CPU of each rank */
    /* BIND_NUMA with GPUs: each rank's first GPU among gpus.info (-1: not
     * found), and per GPU found the CPUs near it that the launcher may use
     * (empty: the rank is bound as without a GPU). */
    int *gpu_of;
    cpu_set_t *near;
    int *slot_nodes;      /* per rank, the NUMA node for its slots (its GPU's), or -1 */
    int stdin_fd;         /* rank 0's stdin when forwarded, else -1 */
    int stdin_pipe;       /* write end towards rank 0, or -1 */
    struct rlimit nofile; /* RLIMIT_NOFILE as given: the ranks get it back */
    /* In the job process: the front (the process the caller started) and
     * the read end of a pipe whose end says the front is gone. */
    pid_t front;
    int front_fd;
    /* How the job ends. */
    bool stopping;
    int stop_signals;     /* SIGINT/TERM/HUP/QUIT received; the second kills at once */
    int first_failure;    /* rank, or -1 */
    int left_early;       /* a rank that exited 0 without finalizing while needed, or -1 */
    struct rank_proc *deferred; /* a failure blamed on a rank not yet exited */
    int exit_status;      /* the launcher's, once decided */
    bool exit_decided;
    int64_t kill_at_ns;   /* when stopping: SIGKILL time; 0 once sent */
    int64_t timeout_at_ns;
    int64_t deadline_ns;  /* --timeout's deadline, kept after it fired; 0: none */
    bool hurry;           /* a second stop signal: output not taken is dropped at once */
    bool reaped_any;      /* a child was reaped since the loop last looked for leftovers */
};

/* spawn.c */
int spawn_ranks(struct job *j);
/* gpus.c */
/* Finds the GPUs (none with GPUS_NONE) and the ids to hand out: with
 * GPUS_LIST the `listed` ids of `list`, else the GPUs found, or the entries
 * of the visibility variable when the user set it.  -1 without memory. */
int gpus_detect(struct gpu_env *g, const char *sysroot, enum gpu_mode mode, char **list,
                int listed);
void gpus_free(struct gpu_env *g);
/* --gpus LIST: comma-separated ids, each a non-negative integer or a
 * GPU-/MIG- UUID; integers lose their leading zeros.  -1 with the reason
 * ("entry 2 is empty") in `why`. */
int gpus_parse_list(const char *list, char ***ids, int *count, char *why, size_t len);
/* Whether two ids (as gpus_parse_list leaves them) name the same GPU. */
bool gpus_same(const char *a, const char *b);
/* Whether NVIDIA's MPS control daemon runs: its pipe directory
 * (CUDA_MPS_PIPE_DIRECTORY, else <sysroot>/tmp/nvidia-mps) holds its
 * control pipe. */
bool gpus_mps_running(const char *sysroot);
/* The index in g->info of the GPU an id names, or -1 with the reason. */
int gpus_find(const struct gpu_env *g, const char *id, char *why, size_t len);
/* The visibility list of a rank holding k devices: the ids of GPUs
 * rank*k .. rank*k+k-1 (round-robin over the GPUs), comma-separated;
 * allocated, NULL without memory. */
char *gpus_of_rank(const struct gpu_env *g, int rank, int k);
/* The first of them, the one a rank is bound near. */
const char *gpus_first(const struct gpu_env *g, int rank, int k);
/* Entries of a directory not starting with a dot: -1 when it cannot be opened. */
int dir_entries(const char *path);
/* bind.c: where each rank runs (--bind-to), decided before any fork. */
/* The plan: a CPU per rank (core), or the CPUs near each rank's GPU
 * (numa).  -1 after a usage error (said on stderr). */
int bind_plan(struct job *j, const cpu_set_t *allowed);
/* -v: per rank, its GPUs and where it runs. */
void bind_report(const struct job *j);
/* In the child, before exec; `node` is the NUMA node of its slots or -1. */
void bind_rank(const struct job *j, int rank, int node);
void bind_free(struct job *j);
/* supervise.c */
int supervise(struct job *j, int sigfd);
int64_t now_ns(void);
/* Tells the ranks (abort flag), sends `sig` (0: none) and arms the SIGKILL
 * that follows after --grace. */
void job_stop(struct job *j, int cause, int rank, int sig, const char *reason);
/* SIGKILLs every child of this process but `except` (0: none); how many. */
int kill_children(pid_t except);
/* front.c: shmesh-run's two processes.  Forks the job process, which
 * starts and supervises the ranks: 0 there.  In the front, forwards signals
 * and terminal input to it until it exits, ends what it left, and returns 1
 * with shmesh-run's exit status in *status; -1 when the job process could
 * not be started (said why). */
#define JOB_PROCESS "shmesh-job"
int front_split(struct job *j, int sigfd, int *status);

/* output.c: the launcher's standard output and error, each a queue that a
 * thread of its own writes, so that a reader that stalls never stalls the
 * launcher. */
#define OUT_HIGH (1u << 20)           /* pending bytes above which ranks' pipes wait */
#define OUT_STALL_NS 2000000000LL     /* a reader that takes nothing this long at the end is given up */
void out_init(bool tag_output);
void out_start(void);                 /* the writer threads, once every fork is done */
int out_wake_fd(void);                /* readable after a queue the loop watches changed */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* "shmesh-run: ...\n" */
struct out_state {
    size_t len;     /* pending bytes */
    int64_t since;  /* the last progress, or when bytes came to an empty queue */
    bool full;      /* len >= OUT_HIGH: the ranks' pipes of this stream wait */
    bool dropping;  /* the reader failed or was given up: everything is dropped */
};
void out_state(int stream, struct out_state *st);
/* Wakes the loop (out_wake_fd) at the queue's next change, or now if it
 * changed since `seen`. */
void out_watch(int stream, const struct out_state *seen);
void out_give_up(int stream);         /* drop what is pending and what comes */
/* After the job: says what was dropped, then gives stderr a moment. */
void out_finish(void);

void relay_init(struct relay *r, int rank, int fd, int stream);
/* Reads what is available; returns false at end of file. */
bool relay_pump(struct relay *r);
/* Writes out a last line without its newline, and closes the pipe,
 * counting what is left in it as dropped. */
void relay_close(struct relay *r);

void describe_status(int status, char *buf, size_t len);

/* trace.c: --trace.  trace_open opens the output (and a temporary file for
 * the events) before any fork: -1 after saying why on stderr.  trace_start
 * starts the thread that drains the ranks' rings, once every fork is done.
 * trace_finish, after supervise() and before the segment is closed, drains
 * what is left and writes the JSON whatever became of the ranks; it returns
 * the launcher's exit status, `rc` or 1 when the trace could not be written
 * after a job that succeeded. */
int trace_open(struct job *j);
void trace_drop(struct job *j); /* the front: closes its copies, writes nothing */
int trace_start(struct job *j);
int trace_finish(struct job *j, int rc);

#endif
