/* Settings: every SHMESH_* environment variable, one line each, and the one
 * parser of them.  The library, shmesh-run and shmesh-bench read the
 * environment only through here (a test checks it), and docs/environment.md
 * lists exactly these variables with these defaults (a test checks that too).
 *
 * X(NAME, field, type, dflt, doc, who, hashed, meaning)
 *   NAME     the variable is SHMESH_<NAME>; SETTING_<NAME> its index
 *   field    its member of struct settings
 *   type     how a value is parsed, and the member's C type:
 *              TEXT     any string (NULL when unset or empty)
 *              WORLD    ranks, 1 to SEG_MAX_WORLD
 *              DEVICES  devices per rank, 1 to SETTINGS_MAX_LOCAL_DEVICES
 *              RANK     0 to the world size - 1 (read SHMESH_WORLD_SIZE first)
 *              INDEX    an integer >= 0
 *              NOTIFY   uring, futex or auto
 *              NET      auto, mpi or none (enum settings_net)
 *              SECONDS  seconds >= 0, fractions allowed; kept in nanoseconds
 *              SIZE     bytes > 0 with an optional K, M, G, T suffix (seg_parse_size)
 *              BYTES    the same, or 0
 *              PAGES    bytes, a positive multiple of SEG_PAGE, no suffix
 *              NS       nanoseconds, 0 to INT_MAX
 *              SWITCH   "0" is off, anything else on
 *              DEBUG    comma-separated words: paths, waits, calls, all
 *   dflt     the member's value when the variable is unset or empty; -1 or 0
 *            where the reader chooses (the rule is in `doc`)
 *   doc      the default as docs/environment.md gives it
 *   who      SETTINGS_LIBRARY: shmesh_init reads it; SETTINGS_LAUNCHER:
 *            shmesh-run reads it; SETTINGS_RANKS: shmesh-run sets it for
 *            every rank; SETTINGS_PYTHON: the Python package reads it (or'ed)
 *   hashed   1: it chooses algorithms, so ranks must agree on it: the
 *            context hashes the values of exactly these rows (a number
 *            each: settings_hashed_values) into every call's hash, each
 *            rank publishes them in its control block, and ranks that
 *            differ get SHMESH_ERR_MISMATCH naming the settings that differ
 *            and their values on both (settings_hashed_text)
 *   meaning  one line
 *
 * A new setting is one line here, its row in docs/environment.md, and the
 * code that uses its member; a hashed one needs nothing more (the
 * thresholds' sentence of docs/environment.md names it). */
#ifndef SHMESH_CORE_SETTINGS_H
#define SHMESH_CORE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/notify.h"

/* The most devices one rank may hold (SHMESH_LOCAL_DEVICES,
 * shmesh-run --devices-per-rank): a node's GPUs, or CPU devices batched in
 * one process, are far fewer. */
#define SETTINGS_MAX_LOCAL_DEVICES 64

/* SHMESH_NET: joining an MPI job when its launcher's environment says so
 * (auto), always (mpi), or never (none): net/boot.h. */
enum settings_net { SETTINGS_NET_AUTO = 0, SETTINGS_NET_MPI, SETTINGS_NET_NONE };

enum settings_who {
    SETTINGS_LIBRARY = 1,
    SETTINGS_LAUNCHER = 2,
    SETTINGS_RANKS = 4,
    SETTINGS_PYTHON = 8, /* the Python package (python/shmesh) reads it; C never does */
};

/* SHMESH_DEBUG's words, as bits of settings.debug. */
enum settings_debug {
    SETTINGS_DEBUG_PATHS = 1, /* the path each call takes */
    SETTINGS_DEBUG_WAITS = 2, /* each wait: for whom, how long */
    SETTINGS_DEBUG_CALLS = 4, /* each call: op, bytes, time */
    SETTINGS_DEBUG_ALL = 7,
};

#define SHMESH_SETTINGS(X)                                                                     \
    X(SEGMENT, segment, TEXT, NULL, "unset: a job of one rank",                                \
      SETTINGS_RANKS | SETTINGS_LIBRARY, 0, "name of the job's shared-memory segment")         \
    X(WORLD_SIZE, world, WORLD, 1, "1", SETTINGS_RANKS | SETTINGS_LIBRARY, 0,                  \
      "number of ranks")                                                                       \
    X(RANK, rank, RANK, 0, "0", SETTINGS_RANKS | SETTINGS_LIBRARY, 0, "this rank")             \
    X(LOCAL_DEVICES, local_devices, DEVICES, 1, "1", SETTINGS_RANKS | SETTINGS_LIBRARY, 0,     \
      "devices each rank holds (shmesh-run --devices-per-rank)")                               \
    X(LOCAL_RANK, local_rank, INDEX, -1, "unset", SETTINGS_RANKS, 0, "rank on this node")      \
    X(NUMA_NODE, numa_node, INDEX, -1, "unset", SETTINGS_RANKS, 0,                             \
      "the NUMA node holding the rank's slots")                                                \
    X(CPU, cpu, INDEX, -1, "unset", SETTINGS_RANKS, 0, "the CPU the rank is pinned to")        \
    X(START_CPU, start_cpu, INDEX, -1, "unset", SETTINGS_RANKS | SETTINGS_LIBRARY, 0,          \
      "the CPU shmesh_init moves an unpinned rank to, free to move on (shmesh-run's default "  \
      "placement)")                                                                            \
    X(NOTIFY, notify, NOTIFY, NOTIFY_AUTO, "auto", SETTINGS_LIBRARY, 0,                        \
      "how a waiting rank blocks")                                                             \
    X(TIMEOUT, timeout_ns, SECONDS, 0, "none", SETTINGS_LIBRARY, 0,                            \
      "seconds a single wait may last; 0: no limit")                                           \
    X(SPIN_NS, spin_ns, NS, -1, "3000, or 500 with more ranks than online CPUs",               \
      SETTINGS_LIBRARY, 0, "nanoseconds a waiting rank spins before it yields")                \
    X(YIELD_NS, yield_ns, NS, 100000, "100000", SETTINGS_LIBRARY, 0,                           \
      "then nanoseconds it yields between checks before it blocks")                            \
    X(DISPATCH_POLL_NS, dispatch_poll_ns, NS, 1000000, "1000000", SETTINGS_LIBRARY, 0,          \
      "while callers run the async work they wait for, how often the idle progress thread "   \
      "looks at its queue instead of being woken at every dispatch; 0: always woken")         \
    X(ZC_MIN, zc_min, BYTES, 65536, "65536", SETTINGS_LIBRARY, 1,                              \
      "the smallest collective that goes zero-copy through the shared heap")                   \
    X(CMA_MIN, cma_min, BYTES, 524288, "524288", SETTINGS_LIBRARY, 1,                          \
      "the smallest collective that reads peers' buffers with process_vm_readv")               \
    X(CMA_BCAST_REDUCE_MIN, cma_bcast_reduce_min, BYTES, UINT64_C(1) << 40, "1099511627776",   \
      SETTINGS_LIBRARY, 1,                                                                     \
      "the same for broadcasts and reductions (1 TiB: never, in practice), which staging "     \
      "measured faster at every size (both this and SHMESH_CMA_MIN must be reached)")          \
    X(CMA, cma, SWITCH, 1, "1", SETTINGS_LIBRARY, 0, "0: this rank refuses single copy")       \
    X(RSAG_MIN, rsag_min, BYTES, 262144, "262144", SETTINGS_LIBRARY, 1,                        \
      "the smallest staged reduction that takes reduce-scatter + all-gather")                  \
    X(EAGER_MAX, eager_max, BYTES, 2048, "2048", SETTINGS_LIBRARY, 1,                          \
      "the largest pbroadcast whose source runs up to 64 calls ahead of its receivers "        \
      "(at most 2096)")                                                                        \
    X(SHM_SIZE, shm_size, SIZE, 0, "32M", SETTINGS_LIBRARY | SETTINGS_LAUNCHER, 0,             \
      "the segment's size, and so the shared heap's")                                          \
    X(SLOT_BYTES, slot_bytes, PAGES, 0,                                                        \
      "516 KiB for up to 8 ranks, then `8 MiB / N / 2` (at least 64 KiB) + 4 KiB",             \
      SETTINGS_LAUNCHER, 1, "bytes in each of a rank's two staging buffers")                   \
    X(SYSROOT, sysroot, TEXT, NULL, "empty", SETTINGS_LAUNCHER, 0,                             \
      "prefix for /sys and /proc: GPUs (shmesh-run), jobs (shmesh-top); for tests")          \
    X(TRACE, trace, TEXT, NULL, "empty: no trace", SETTINGS_LAUNCHER, 0,                       \
      "write a Chrome trace of the job to this file (shmesh-run --trace)")                     \
    X(TRACE_EVENTS, trace_events, INDEX, 65536, "65536", SETTINGS_LAUNCHER, 0,                 \
      "events each rank's trace ring holds, a power of two (shmesh-run --trace-events)")       \
    X(DEVICE, device, TEXT, NULL, "auto", SETTINGS_LIBRARY, 0,                                 \
      "the GPU runtime: auto, none, cuda, hip, or a plugin's path")                            \
    X(NET, net, NET, SETTINGS_NET_AUTO, "auto", SETTINGS_LIBRARY, 0,                          \
      "joining an MPI job: auto (when an MPI launcher started the process, not shmesh-run), "  \
      "mpi, or none (each process a job of its own)")                                         \
    X(NODE_SIZE, node_size, INDEX, 0, "0: the machines' nodes", SETTINGS_LIBRARY, 0,          \
      "an MPI job's nodes as runs of this many consecutive ranks (several nodes on one "        \
      "machine, for tests)")                                                                   \
    X(NODE_CYCLIC, node_cyclic, SWITCH, 0, "0", SETTINGS_LIBRARY, 0,                          \
      "1: with SHMESH_NODE_SIZE, the ranks dealt to the nodes in turn (rank r on node r mod "  \
      "the nodes), as mpirun --map-by node places them")                                      \
    X(NET_HIERARCHICAL, net_hierarchical, SWITCH, 0, "0", SETTINGS_LIBRARY, 1,                 \
      "1: whole-array reductions (psum, pmax, pmin) whose group spans nodes reduce inside "    \
      "each node first and send across nodes only each node's partial result (another order " \
      "of the sums than on one node), and all_gather and pbroadcast relay inside the node "   \
      "what crossed once")                                                                     \
    X(DEVICE_TWO_SHOT_MIN, device_two_shot_min, BYTES, 262144, "262144", SETTINGS_LIBRARY, 1,  \
      "the smallest device reduction whose members each reduce a share (two-shot)")           \
    X(ARRAY_CACHE, array_cache, BYTES, UINT64_C(1) << 30, "1073741824", SETTINGS_LIBRARY, 0,   \
      "bytes of freed global-array shards (of 4 MiB and more) a process keeps for the next "   \
      "shards of their size; 0: none")                                                         \
    X(DEBUG, debug, DEBUG, 0, "empty", SETTINGS_LIBRARY, 0,                                    \
      "what to trace on stderr: paths, waits, calls or all")                                   \
    X(LIBRARY, library, TEXT, NULL, "unset", SETTINGS_PYTHON, 0,                               \
      "the libshmesh file the Python package loads")                                           \
    X(RUN, run, TEXT, NULL, "unset", SETTINGS_PYTHON, 0,                                       \
      "the shmesh-run that python3 -m shmesh.run starts")

#define SETTINGS_CTYPE_TEXT const char *
#define SETTINGS_CTYPE_WORLD int
#define SETTINGS_CTYPE_DEVICES int
#define SETTINGS_CTYPE_RANK int
#define SETTINGS_CTYPE_INDEX int
#define SETTINGS_CTYPE_NOTIFY enum notify_kind
#define SETTINGS_CTYPE_NET enum settings_net
#define SETTINGS_CTYPE_SECONDS int64_t
#define SETTINGS_CTYPE_SIZE uint64_t
#define SETTINGS_CTYPE_BYTES uint64_t
#define SETTINGS_CTYPE_PAGES uint64_t
#define SETTINGS_CTYPE_NS int64_t
#define SETTINGS_CTYPE_SWITCH bool
#define SETTINGS_CTYPE_DEBUG unsigned

enum setting {
#define SETTINGS_ID(NAME, ...) SETTING_##NAME,
    SHMESH_SETTINGS(SETTINGS_ID)
#undef SETTINGS_ID
    SETTING_COUNT
};

struct settings {
#define SETTINGS_FIELD(NAME, field, type, ...) SETTINGS_CTYPE_##type field;
    SHMESH_SETTINGS(SETTINGS_FIELD)
#undef SETTINGS_FIELD
};

/* How many rows are hashed: the length of settings_hashed_values' array. */
#define SETTINGS_HASHED_ROW(NAME, field, type, dflt, doc, who, hashed, meaning) +(hashed)
enum { SETTINGS_HASHED = 0 SHMESH_SETTINGS(SETTINGS_HASHED_ROW) };
#undef SETTINGS_HASHED_ROW

/* The table's columns, for messages, tools and tests. */
struct setting_info {
    const char *name; /* "SHMESH_ZC_MIN" */
    const char *type; /* "BYTES" */
    const char *doc;  /* the default as the docs give it */
    unsigned who;     /* enum settings_who bits */
    bool hashed;
    const char *meaning;
};
extern const struct setting_info settings_table[SETTING_COUNT];

/* Every member at its default. */
void settings_defaults(struct settings *s);

/* Parses `value` as setting `id` into its member of s; NULL or "" gives the
 * default.  0, or SHMESH_ERR_INVALID with a sentence in err (may be NULL)
 * naming the variable, what it must be and what was found ("SHMESH_ZC_MIN
 * must be a size in bytes such as 0, 4096 or 1M, found 'x'").  A RANK is
 * checked against s->world. */
int settings_parse(struct settings *s, enum setting id, const char *value, char *err,
                   size_t errlen);

/* settings_parse of the variable's value in the environment. */
int settings_read(struct settings *s, enum setting id, char *err, size_t errlen);

/* The values of the hashed settings, in table order, into v[SETTINGS_HASHED]
 * (each a number: a hashed row cannot be TEXT), and their hash, which the
 * context puts into every call's hash. */
void settings_hashed_values(const struct settings *s, uint64_t *v);
uint64_t settings_hashed_hash(const uint64_t *v);

/* Why the hashed values `mine` (of rank `me`) and `theirs` (of rank `other`,
 * untrusted: only compared and printed as numbers) make calls differ:
 * "SHMESH_ZC_MIN is 65536 on rank 0 but 4096 on rank 1" for each that
 * differs, joined by "; "; returns how many.  When none does (or theirs is
 * NULL), 0 and a sentence naming every hashed setting ("SHMESH_ZC_MIN, ...
 * and SHMESH_DEVICE_TWO_SHOT_MIN must be the same on every rank"). */
int settings_hashed_text(char *buf, size_t len, const uint64_t *mine, int me,
                         const uint64_t *theirs, int other);

/* Everything shmesh_init reads, from defaults: SHMESH_SEGMENT, then (with a
 * segment) SHMESH_WORLD_SIZE and SHMESH_RANK, which must then be set; then
 * the table's other SETTINGS_LIBRARY lines in order, SHMESH_SHM_SIZE only
 * without a segment.  An error after the rank is known starts "rank R: ". */
int settings_read_library(struct settings *s, char *err, size_t errlen);

#endif
