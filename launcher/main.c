/* shmesh-run: start N ranks of a program around one shared-memory segment,
 * stop them all when one fails, and leave nothing behind.  The options, the
 * segment and the trace file are settled here; then the process splits in
 * two (front.c): the front forwards signals, the job process starts and
 * supervises the ranks. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/settings.h"
#include "launcher.h"
#include "shmesh_config.h"

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: " PROG " [-n N] [options] [--] PROGRAM [ARGS...]\n"
            "Start N processes (ranks) of PROGRAM sharing one shmesh segment.\n"
            "\n"
            "  -n, --np N            number of ranks (default: one per GPU found, or per K\n"
            "                        GPUs with --devices-per-rank K, or per K ids of --gpus\n"
            "                        LIST; else one per online CPU)\n"
            "      --devices-per-rank K  devices each rank holds, 1 to %d (default 1): with\n"
            "                        GPUs, rank r sees GPUs r*K .. r*K+K-1; without, K CPU\n"
            "                        devices\n"
            "      --gpus auto|none|LIST  the GPUs to hand out: those found (auto, the\n"
            "                        default); none (CPU devices, GPU variables left as\n"
            "                        they are); or LIST, comma-separated ids such as 0,2,3\n"
            "                        or 0,0,0,0 (ranks may share a GPU), K per rank in order:\n"
            "                        N*K of them with -n N, else N = their number / K\n"
            "      --tag-output      prefix each line of each rank's output with [rank]\n"
            "      --timeout SECS    stop the job after SECS seconds; exit status 124\n"
            "      --grace SECS      after a failure, how long ranks get to exit before\n"
            "                        SIGKILL (default 5)\n"
            "      --shm-size SIZE   the shared-memory segment, e.g. 256M or 1G (default 32M,\n"
            "                        or SHMESH_SHM_SIZE): what the staging slots leave is the\n"
            "                        shared heap (shmesh_alloc), split evenly between ranks\n"
            "      --bind-to core|core:overload-allowed|numa|none\n"
            "                        run each rank on a core of its own (overload-allowed:\n"
            "                        more ranks than cores, the cores taken in turn); near\n"
            "                        its (first) GPU, or without one on the NUMA node\n"
            "                        holding its memory (the default); or anywhere\n"
            "      --trace FILE      write a Chrome trace of the job to FILE (Perfetto,\n"
            "                        chrome://tracing): each rank's calls, their waits, flows\n"
            "                        joining a collective's members, bytes moved; written\n"
            "                        however the job ends (or SHMESH_TRACE)\n"
            "      --trace-events N  events each rank's ring holds between two reads, a power\n"
            "                        of two (default 65536, or SHMESH_TRACE_EVENTS)\n"
            "  -v, --verbose         say what is started, and how each rank ends\n"
            "  -h, --help            show this help\n"
            "  -V, --version         show the version\n"
            "\n"
            "Each rank gets SHMESH_SEGMENT, SHMESH_RANK, SHMESH_WORLD_SIZE, SHMESH_LOCAL_RANK,\n"
            "SHMESH_LOCAL_DEVICES, RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and with\n"
            "GPUs HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES (the latter with\n"
            "CUDA_DEVICE_ORDER=PCI_BUS_ID unless it is set).  When a rank exits non-zero or by\n"
            "a signal the others are told, given --grace seconds, then killed; " PROG " exits\n"
            "with that rank's status (128+N for signal N).  See shmesh-run(1).\n",
            SETTINGS_MAX_LOCAL_DEVICES);
}

static int parse_seconds(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e8) {
        fprintf(stderr, PROG ": %s expects a number of seconds >= 0, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A count from 1 to max: "-n expects a number of ranks from 1 to 4096". */
static int parse_count(const char *opt, const char *what, const char *s, int max, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 1 || v > max) {
        fprintf(stderr, PROG ": %s expects a number of %s from 1 to %d, got '%s'\n", opt, what,
                max, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static void free_gpu_list(struct options *o)
{
    for (int i = 0; i < o->gpu_listed; i++)
        free(o->gpu_list[i]);
    free(o->gpu_list);
    o->gpu_list = NULL;
    o->gpu_listed = 0;
}

static int parse_gpus(const char *s, struct options *o)
{
    free_gpu_list(o); /* the last --gpus counts */
    if (!strcmp(s, "auto")) {
        o->gpus = GPUS_AUTO;
    } else if (!strcmp(s, "none")) {
        o->gpus = GPUS_NONE;
    } else {
        char why[160];
        if (gpus_parse_list(s, &o->gpu_list, &o->gpu_listed, why, sizeof why)) {
            fprintf(stderr,
                    PROG ": --gpus expects auto, none or a comma-separated list of GPU ids "
                         "(integers from 0, or GPU-/MIG- UUIDs), got '%s': %s\n",
                    s, why);
            return -1;
        }
        o->gpus = GPUS_LIST;
    }
    return 0;
}

/* --trace-events and SHMESH_TRACE_EVENTS: what the segment's rings take. */
static int trace_events_check(const char *what, long v, const char *given)
{
    if (v >= 1 && v <= (long)SEG_TRACE_MAX_EVENTS && !(v & (v - 1)))
        return 0;
    fprintf(stderr,
            PROG ": %s expects a power of two from 1 to %u (events per rank's ring, such as "
                 "65536), got '%s'\n",
            what, SEG_TRACE_MAX_EVENTS, given);
    return -1;
}

enum {
    OPT_TAG = 256,
    OPT_TIMEOUT,
    OPT_GRACE,
    OPT_BIND,
    OPT_SHM_SIZE,
    OPT_DEVICES,
    OPT_GPUS,
    OPT_TRACE,
    OPT_TRACE_EVENTS,
};

static const struct option long_options[] = {
    {"np", required_argument, NULL, 'n'},
    {"devices-per-rank", required_argument, NULL, OPT_DEVICES},
    {"gpus", required_argument, NULL, OPT_GPUS},
    {"tag-output", no_argument, NULL, OPT_TAG},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"bind-to", required_argument, NULL, OPT_BIND},
    {"shm-size", required_argument, NULL, OPT_SHM_SIZE},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"trace-events", required_argument, NULL, OPT_TRACE_EVENTS},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

static int parse_bind(const char *s, struct options *o)
{
    o->bind_overload = false;
    if (!strcmp(s, "core"))
        o->bind = BIND_CORE;
    else if (!strcmp(s, "core:overload-allowed")) { /* mpirun's spelling */
        o->bind = BIND_CORE;
        o->bind_overload = true;
    } else if (!strcmp(s, "numa"))
        o->bind = BIND_NUMA;
    else if (!strcmp(s, "none"))
        o->bind = BIND_NONE;
    else {
        fprintf(stderr,
                PROG ": --bind-to expects core, core:overload-allowed, numa or none, got '%s'\n", s);
        return -1;
    }
    return 0;
}

static int parse_shm_size(const char *s, struct options *o)
{
    static char given[96];
    if (!(o->shm_size = seg_parse_size(s))) {
        fprintf(stderr, PROG ": --shm-size expects a size such as 256M or 1G, got '%s'\n", s);
        return -1;
    }
    snprintf(given, sizeof given, "--shm-size %s", s);
    o->shm_size_from = given;
    return 0;
}

static int parse_trace_events(const char *s, struct options *o)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || trace_events_check("--trace-events", v, s))
        return -1;
    o->trace_events = (uint32_t)v;
    return 0;
}

/* One option c from getopt_long (its value in optarg); -h and -V exit. */
static int parse_option(int c, char **argv, struct options *o)
{
    switch (c) {
    case 'n':
        return parse_count("-n", "ranks", optarg, SEG_MAX_WORLD, &o->np);
    case OPT_DEVICES:
        return parse_count("--devices-per-rank", "devices", optarg, SETTINGS_MAX_LOCAL_DEVICES,
                           &o->devices);
    case OPT_GPUS:
        return parse_gpus(optarg, o);
    case OPT_TAG:
        o->tag_output = true;
        return 0;
    case OPT_TIMEOUT:
        return parse_seconds("--timeout", optarg, &o->timeout);
    case OPT_GRACE:
        return parse_seconds("--grace", optarg, &o->grace);
    case OPT_BIND:
        return parse_bind(optarg, o);
    case OPT_SHM_SIZE:
        return parse_shm_size(optarg, o);
    case OPT_TRACE:
        if (!*optarg) {
            fprintf(stderr, PROG ": --trace expects a file name, got ''\n");
            return -1;
        }
        o->trace_path = optarg;
        return 0;
    case OPT_TRACE_EVENTS:
        return parse_trace_events(optarg, o);
    case 'v':
        o->verbose = true;
        return 0;
    case 'h':
        usage(stdout);
        exit(0);
    case 'V':
        printf(PROG " (shmesh) %s\n", SHMESH_VERSION);
        exit(0);
    case ':':
        fprintf(stderr, PROG ": option '%s' needs a value\n", argv[optind - 1]);
        return -1;
    default:
        fprintf(stderr, PROG ": unknown option '%s' (see " PROG " --help)\n", argv[optind - 1]);
        return -1;
    }
}

/* The environment after the options: --shm-size wins over SHMESH_SHM_SIZE,
 * --trace and --trace-events over SHMESH_TRACE and SHMESH_TRACE_EVENTS. */
static int read_environment(struct options *o)
{
    struct settings env;
    settings_defaults(&env);
    for (int id = 0; id < SETTING_COUNT; id++) {
        if (!(settings_table[id].who & SETTINGS_LAUNCHER) ||
            (id == SETTING_SHM_SIZE && o->shm_size) ||
            (id == SETTING_TRACE_EVENTS && o->trace_events))
            continue;
        char why[256];
        if (settings_read(&env, (enum setting)id, why, sizeof why)) {
            fprintf(stderr, PROG ": %s\n", why);
            return -1;
        }
    }
    if (!o->shm_size) {
        o->shm_size = env.shm_size;
        if (o->shm_size) {
            static char given[96];
            snprintf(given, sizeof given, "SHMESH_SHM_SIZE (%" PRIu64 " bytes)", o->shm_size);
            o->shm_size_from = given;
        }
    }
    o->slot_bytes = env.slot_bytes;
    if (!o->trace_path)
        o->trace_path = env.trace;
    if (!o->trace_events) {
        char given[32];
        snprintf(given, sizeof given, "%d", env.trace_events);
        if (trace_events_check("SHMESH_TRACE_EVENTS", env.trace_events, given))
            return -1;
        o->trace_events = (uint32_t)env.trace_events;
    }
    o->sysroot = env.sysroot ? env.sysroot : "";
    return 0;
}

static int parse_options(int argc, char **argv, struct options *o)
{
    *o = (struct options){.devices = 1, .grace = 5.0, .bind = BIND_AUTO};
    int c;
    opterr = 0;
    /* '+': stop at the program name, so its own options stay its own. */
    while ((c = getopt_long(argc, argv, "+:n:vhV", long_options, NULL)) != -1)
        if (parse_option(c, argv, o))
            return -1;
    if (optind >= argc) {
        fprintf(stderr, PROG ": no program given; usage: " PROG " -n N -- PROGRAM [ARGS...]\n");
        return -1;
    }
    o->argv = argv + optind;
    return read_environment(o);
}

static int signal_fd(void)
{
    sigset_t set;
    sigemptyset(&set);
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&set, sigs[i]);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return -1;
    /* A reader of our --tag-output that goes away must not kill us mid-job. */
    signal(SIGPIPE, SIG_IGN);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Sizes that cannot make a segment are usage errors, like other bad
 * options; said here, before anything is created. */
static int check_sizes(const struct options *o)
{
    uint64_t slot = o->slot_bytes ? o->slot_bytes : seg_default_slot_bytes(o->np);
    uint64_t min = seg_required_bytes(o->np, slot);
    if (!min) {
        fprintf(stderr, PROG ": SHMESH_SLOT_BYTES must be a multiple of %u from %u to 1 TiB, got %"
                PRIu64 "\n", SEG_PAGE, SEG_PAGE, slot);
        return -1;
    }
    if (o->shm_size && o->shm_size < min) {
        fprintf(stderr,
                PROG ": %s is too small: %d ranks need at least %" PRIu64 " bytes (%.1f MiB) for "
                "control blocks and staging slots, before any shared heap\n",
                o->shm_size_from ? o->shm_size_from : "the segment", o->np, min,
                (double)min / (1 << 20));
        return -1;
    }
    return 0;
}

/* Processes sharing an NVIDIA GPU without MPS take turns on it by time
 * slices: each call on device buffers then waits about 275 us per sharing
 * process (measured on an H100, docs/devices.md).  Said once, where it
 * applies. */
static void note_mps(const struct job *j)
{
    if (strcmp(j->gpus.var, "CUDA_VISIBLE_DEVICES") || gpus_mps_running(j->o.sysroot))
        return;
    fprintf(stderr,
            PROG ": note: ranks share an NVIDIA GPU and no MPS daemon runs (%s): calls on device "
                 "buffers will wait for the GPU's time slices (about 275 us per sharing process "
                 "on an H100); start it first with nvidia-cuda-mps-control -d (docs/devices.md)\n",
            getenv("CUDA_MPS_PIPE_DIRECTORY") && *getenv("CUDA_MPS_PIPE_DIRECTORY")
                ? "no control pipe in CUDA_MPS_PIPE_DIRECTORY"
                : "no /tmp/nvidia-mps/control");
}

/* --gpus LIST: exactly K ids per rank, a rank's own K all different, and
 * integer ids among the GPUs found (when any were). */
static int place_listed(struct job *j)
{
    struct options *o = &j->o;
    const struct gpu_env *g = &j->gpus;
    int n = g->count, k = o->devices;
    char per[32] = "one per rank";
    if (k > 1)
        snprintf(per, sizeof per, "%d per rank", k);
    if (o->np == 0) {
        if (n % k) {
            fprintf(stderr,
                    PROG ": --gpus with --devices-per-rank %d: expected a multiple of %d GPU ids "
                         "(%s), found %d\n",
                    k, k, per, n);
            return -1;
        }
        if (n / k > SEG_MAX_WORLD) {
            fprintf(stderr, PROG ": --gpus: expected at most %d ranks (%s), found %d GPU ids\n",
                    SEG_MAX_WORLD, per, n);
            return -1;
        }
        o->np = n / k;
    } else if ((int64_t)o->np * k != n) {
        char dpr[48] = "";
        if (k > 1)
            snprintf(dpr, sizeof dpr, " and --devices-per-rank %d", k);
        fprintf(stderr, PROG ": --gpus with -n %d%s: expected %" PRId64 " GPU ids (%s), found %d\n",
                o->np, dpr, (int64_t)o->np * k, per, n);
        return -1;
    }
    for (int r = 0; r < o->np; r++)
        for (int a = r * k; a < r * k + k; a++)
            for (int b = a + 1; b < r * k + k; b++)
                if (gpus_same(g->ids[a], g->ids[b])) {
                    fprintf(stderr,
                            PROG ": --gpus with --devices-per-rank %d: rank %d would hold GPU %s "
                                 "twice (entries %d and %d of the list); a rank cannot hold one GPU "
                                 "twice\n",
                            k, r, g->ids[a], a + 1, b + 1);
                    return -1;
                }
    for (int i = 0; i < n && g->found; i++) {
        char *end;
        long id = strtol(g->ids[i], &end, 10);
        if (!*end && id >= g->found) {
            char range[32] = "0";
            if (g->found > 1)
                snprintf(range, sizeof range, "from 0 to %d", g->found - 1);
            fprintf(stderr,
                    PROG ": --gpus: expected GPU ids %s (%d GPU%s found, numbered as %s numbers "
                         "them), found %ld\n",
                    range, g->found, g->found == 1 ? " was" : "s were", g->var, id);
            return -1;
        }
    }
    bool shared = false;
    for (int a = 0; a < n && !shared; a++)
        for (int b = (a / k + 1) * k; b < n && !shared; b++)
            shared = gpus_same(g->ids[a], g->ids[b]);
    if (shared)
        note_mps(j);
    /* The ids are the variable's own numbering, not positions in the
     * user's list: say so rather than let a restriction pass unseen. */
    const char *given = getenv(g->var);
    if (given && *given)
        fprintf(stderr, PROG ": note: --gpus replaces %s=%s of the environment\n", g->var, given);
    return 0;
}

/* The number of ranks when -n is not given, and whether the GPUs can hold
 * the devices.  A rank's K devices are K different GPUs; ranks share GPUs
 * round-robin when the job has more devices than the node has GPUs. */
static int place_devices(struct job *j)
{
    struct options *o = &j->o;
    if (j->gpus.listed)
        return place_listed(j);
    int gpus = j->gpus.count;
    if (o->np == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->np = gpus > 0 ? gpus / o->devices : (cpus > 0 ? (int)cpus : 1);
        o->np = o->np < 1 ? 1 : o->np > SEG_MAX_WORLD ? SEG_MAX_WORLD : o->np;
    }
    if (gpus == 0)
        return 0;
    if (o->devices > gpus) {
        fprintf(stderr,
                PROG ": --devices-per-rank %d with %d rank%s: each rank needs %d different GPUs, "
                "and %d GPU%s found (%s); a rank cannot hold one GPU twice\n",
                o->devices, o->np, o->np == 1 ? "" : "s", o->devices, gpus,
                gpus == 1 ? " was" : "s were", j->gpus.var);
        return -1;
    }
    if ((int64_t)o->np * o->devices > gpus) {
        char ranks[64];
        snprintf(ranks, sizeof ranks, o->devices == 1 ? "%d ranks" : "%d ranks of %d devices each",
                 o->np, o->devices);
        fprintf(stderr, PROG ": note: %s share %d GPU%s (%s is given round-robin)\n", ranks, gpus,
                gpus == 1 ? "" : "s", j->gpus.var);
        note_mps(j);
    }
    return 0;
}

static int open_fds(void)
{
    int n = dir_entries("/proc/self/fd");
    return n > 0 ? n - 1 : 3; /* less the directory's own descriptor */
}

/* --tag-output keeps two pipes per rank open.  The soft limit on open files
 * is raised to the hard one (each rank gets back the limit as it was); a job
 * that cannot have what it needs even so is refused here, not half started. */
static int open_file_limit(struct job *j)
{
    if (getrlimit(RLIMIT_NOFILE, &j->nofile) < 0)
        return 0;
    struct rlimit lim = j->nofile;
    if (lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &lim) < 0)
            lim.rlim_cur = j->nofile.rlim_cur; /* an infinite hard limit may be refused */
    }
    /* Beyond the pipes: the signalfd, the front's pipe, the writers'
     * eventfd, a terminal's forwarding pipe, /proc scans, a rank's pipes
     * while it is started. */
    uint64_t need = (uint64_t)open_fds() + 16 + (j->o.tag_output ? 2 * (uint64_t)j->o.np : 0);
    if (lim.rlim_cur == RLIM_INFINITY || need <= lim.rlim_cur)
        return 0;
    fprintf(stderr,
            PROG ": %d ranks%s need about %" PRIu64 " open files, and the limit is %" PRIu64
            " (ulimit -n); raise it%s\n",
            j->o.np, j->o.tag_output ? " with --tag-output" : "", need, (uint64_t)lim.rlim_cur,
            j->o.tag_output ? ", or run without --tag-output" : "");
    return -1;
}

/* The job process: the ranks, until they and what they started are gone. */
static int run_job(struct job *j, int sigfd)
{
    /* From here on its messages go through the output queues. */
    out_init(j->o.tag_output);
    int rc = spawn_ranks(j);
    out_start();
    if (rc == 0)
        trace_start(j); /* without it the job still runs, untraced (it says why) */
    if (rc == 0)
        rc = supervise(j, sigfd);
    seg_unlink(j->seg);
    /* Whatever became of the ranks: a job that failed is the one whose
     * trace matters most. */
    rc = trace_finish(j, rc);
    out_finish();
    return rc;
}

int main(int argc, char **argv)
{
    struct job j = {.first_failure = -1, .left_early = -1, .stdin_fd = -1, .stdin_pipe = -1,
                    .front_fd = -1};
    int rc = 2, sigfd = -1;
    if (parse_options(argc, argv, &j.o) < 0)
        goto out;
    rc = 1;
    if (gpus_detect(&j.gpus, j.o.sysroot, j.o.gpus, j.o.gpu_list, j.o.gpu_listed)) {
        fprintf(stderr, PROG ": out of memory\n");
        goto out;
    }
    free_gpu_list(&j.o);
    cpu_set_t allowed;
    bool known = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    rc = 2;
    if (place_devices(&j) || check_sizes(&j.o) || bind_plan(&j, known ? &allowed : NULL))
        goto out;
    rc = 1;
    if (open_file_limit(&j))
        goto out;
    if ((sigfd = signal_fd()) < 0) {
        fprintf(stderr, PROG ": cannot set up signal handling: %s\n", strerror(errno));
        goto out;
    }
    /* Should the job process be killed, what the ranks started is
     * reparented to the front rather than to init, so it can be ended. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    char err[512];
    struct seg_create_opts so = {
        .world_size = j.o.np,
        .slot_bytes = j.o.slot_bytes,
        .total_bytes = j.o.shm_size,
        .numa = j.o.bind == BIND_NONE ? 0 : -1,
        .nodes = j.slot_nodes,
        .trace_events = j.o.trace_path ? j.o.trace_events : 0,
    };
    if (seg_create(&so, &j.seg, err, sizeof err) < 0) {
        fprintf(stderr, PROG ": %s\n", err);
        goto out;
    }
    if (trace_open(&j) < 0) { /* said why; nothing started yet, nothing left */
        rc = 2;
        goto out;
    }
    if (j.o.verbose)
        fprintf(stderr,
                PROG ": starting %d rank%s of '%s', %d %s device%s each; segment %s (%.1f MiB, "
                "heap %.1f MiB per rank)%s\n",
                j.o.np, j.o.np == 1 ? "" : "s", j.o.argv[0], j.o.devices,
                j.gpus.count > 0 ? "GPU" : "CPU", j.o.devices == 1 ? "" : "s", j.seg->name,
                (double)j.seg->size / (1 << 20), (double)j.seg->hdr->heap_share / (1 << 20),
                j.seg->hdr->numa_nodes > 1 ? ", slots spread over NUMA nodes" : "");
    if (j.o.verbose)
        bind_report(&j);
    /* The front returns once the job is over, the job process at once. */
    int split = front_split(&j, sigfd, &rc);
    if (split < 0)
        rc = 1;
    else if (split == 0)
        rc = run_job(&j, sigfd);

out:
    /* Every exit, the front's and the job process's, and each refusal
     * before them: whatever was made, released in reverse. */
    trace_drop(&j);
    if (j.seg) {
        seg_unlink(j.seg); /* if a rank never joined */
        seg_close(j.seg);
    }
    if (sigfd >= 0)
        close(sigfd);
    free(j.ranks);
    bind_free(&j);
    gpus_free(&j.gpus);
    free_gpu_list(&j.o);
    return rc;
}
