/* shmesh-test-effects: asynchronous dispatch, tokens and effects as a job
 * sees them, through the public library only.
 *
 *   shmesh-run -n P [--devices-per-rank K] -- shmesh-test-effects MODE [ARGS]
 *
 * Modes:
 *   basics            tokens (test, wait, wait_all, wait_any, the runtime
 *                     token, the done token), async results bit for bit
 *                     those of the blocking calls, program order between
 *                     async work, callbacks and blocking calls, refused
 *                     arguments (effects, placements, async calls)
 *   ordered-log [N]   N (10 000) ORDERED callbacks placed on this rank,
 *                     dispatched asynchronously among psums, append to a
 *                     log: it must read 0..N-1
 *   shardable SEED [POINTS] [mixed|unordered]  an ORDERED_SHARDABLE effect
 *                     on every device, each part sleeping 0-2 ms: no part
 *                     of point k+1 may start before every part of point k
 *                     finished (unordered: an UNORDERED effect on each
 *                     rank's own devices, where the checks must see
 *                     violations)
 *   ordered-all       an ORDERED effect on every device is refused (2+
 *                     devices); placed on one device it runs once, there,
 *                     and every rank's token waits for it
 *   peer-death        (3 ranks) rank 2 kills itself while ranks 0 and 1
 *                     wait on tokens: every wait ends with PEER_DEAD
 *   timeout           (2 ranks, SHMESH_TIMEOUT=T) rank 1 stays outside any
 *                     call until rank 0's token wait has ended, with
 *                     TIMEOUT after about T s
 *   mismatch WHAT     rank 0 dispatches psum_async, the others pmax_async
 *                     (WHAT "async"), a blocking pmax ("blocking"), or a
 *                     callback on every device ("callback"): MISMATCH
 *   effect-mismatch WHAT  rank 0 registers effect "alpha", the others
 *                     "beta" (WHAT "name"), or the same name of another
 *                     kind ("kind"): MISMATCH
 *   callback-mismatch WHAT  (2 ranks) the ranks dispatch different
 *                     collective callbacks: an ORDERED effect on device 1
 *                     against device 0 ("device"), effect "a" against "b"
 *                     ("name"), each rank on its own device ("own"), every
 *                     device against device 0 ("all-vs-one"), an UNORDERED
 *                     effect against an ORDERED_SHARDABLE one ("kind"):
 *                     the callback's token is MISMATCH on every rank,
 *                     naming both, and the callback runs nowhere
 *   devices           several devices per rank: async collectives equal
 *                     blocking ones; callbacks run once per device, with
 *                     its id
 *   finalize-pending  shmesh_finalize with work still queued: the work
 *                     runs first
 *
 * Every rank prints "rank R: ..." lines the suite reads, and a line with
 * "FAIL:" for each check that does not hold.  Exit status: 0 when every
 * check held on this rank, 3 when a call failed that should not have, 4
 * when a check failed, 2 for bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "shmesh.h"

static int world, ndev, nlocal;
static pthread_t main_thread;


static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
    va_list ap;
    printf("rank %d: FAIL: ", rank);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    failures++;
}

/* Prints "rank R: what -> NAME: message" and counts a failure when rc is
 * not `want`. */
static int expect(const char *what, int rc, int want)
{
    printf("rank %d: %s -> %s: %s\n", rank, what, shmesh_error_name(rc), rc ? why() : "");
    if (rc != want)
        bad("%s returned %s, expected %s", what, shmesh_error_name(rc), shmesh_error_name(want));
    return rc;
}

static void expect_in_message(const char *what, const char *needle)
{
    if (!strstr(why(), needle))
        bad("%s: the message does not name '%s': %s", what, needle, why());
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double ms_since(int64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        printf("rank %d: FAIL: out of memory\n", rank);
        exit(3);
    }
    return p;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static bool token_is_none(shmesh_token t) { return t.ctx == NULL && t.seq == 0; }

/* ------------------------------------------------------------------------
 * The board: counters every rank reads and writes, in the job's shared
 * heap.  Rank 0 allocates it and sends its offset in the segment (found
 * through /proc/self/maps: the segment is one shared file mapping, and a
 * page's file offset is the same in every process); each rank finds that
 * offset in its own mapping of the same file.
 * ---------------------------------------------------------------------- */

#define MAXDEV 64
#define BOARD_LOG 256
#define MAXPOINTS 1024

struct board {
    _Atomic int64_t started[MAXPOINTS];  /* per program point: parts that began */
    _Atomic int64_t finished[MAXPOINTS]; /* per program point: parts that ended */
    _Atomic int64_t violations;
    _Atomic int64_t runs;       /* how many times the placed callback ran */
    _Atomic int64_t ran_rank;   /* where */
    _Atomic int64_t ran_device; /* with which device argument */
    _Atomic int64_t flag;
    _Atomic int64_t kill_ns; /* CLOCK_MONOTONIC when rank 2 killed itself */
    _Atomic int64_t ready;   /* ranks that dispatched what they then wait for */
    _Atomic int64_t log_n;
    int64_t log[BOARD_LOG];
};

static struct board *board;

struct vma {
    uintptr_t lo, hi;
    uint64_t pgoff, ino;
    unsigned maj, min;
};

/* The mapping holding p (want_p), or the mapping of file (maj, min, ino)
 * holding file offset off. */
static bool find_vma(const void *p, const struct vma *file, uint64_t off, struct vma *out)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        struct vma v;
        unsigned long lo, hi;
        unsigned long long pgoff, ino;
        if (sscanf(line, "%lx-%lx %*s %llx %x:%x %llu", &lo, &hi, &pgoff, &v.maj, &v.min, &ino) !=
            6)
            continue;
        v.lo = lo;
        v.hi = hi;
        v.pgoff = pgoff;
        v.ino = ino;
        if (p)
            found = (uintptr_t)p >= v.lo && (uintptr_t)p < v.hi;
        else
            found = v.ino == file->ino && v.maj == file->maj && v.min == file->min &&
                    off >= v.pgoff && off < v.pgoff + (v.hi - v.lo);
        if (found)
            *out = v;
    }
    fclose(f);
    return found;
}

static void board_setup(void)
{
    void *probe = shmesh_alloc(ctx, 64);
    if (!probe) {
        printf("rank %d: FAIL: shmesh_alloc(64): %s\n", rank, why());
        exit(3);
    }
    struct vma mine;
    int64_t off = 0;
    if (world > 1 && !find_vma(probe, NULL, 0, &mine)) {
        printf("rank %d: FAIL: heap block %p is in no mapping of /proc/self/maps\n", rank, probe);
        exit(3);
    }
    if (rank == 0) {
        board = shmesh_alloc(ctx, sizeof *board);
        if (!board) {
            printf("rank 0: FAIL: shmesh_alloc(%zu): %s\n", sizeof *board, why());
            exit(3);
        }
        memset(board, 0, sizeof *board);
        if (world > 1) {
            struct vma v;
            if (!find_vma(board, NULL, 0, &v) || v.ino != mine.ino ||
                (uintptr_t)board + sizeof *board > v.hi) {
                printf("rank 0: FAIL: the board is not in the segment's mapping\n");
                exit(3);
            }
            off = (int64_t)((uintptr_t)board - v.lo + v.pgoff);
        }
    }
    MUST(shmesh_world_sum(ctx, &off, 1, SHMESH_INT64));
    if (rank != 0) {
        struct vma v;
        if (!find_vma(NULL, &mine, (uint64_t)off, &v)) {
            printf("rank %d: FAIL: segment offset %" PRId64 " is not mapped here\n", rank, off);
            exit(3);
        }
        board = (struct board *)(v.lo + ((uint64_t)off - v.pgoff));
    }
    shmesh_free(ctx, probe);
}

/* Rank 0 clears the board; everyone sees it cleared. */
static void board_reset(void)
{
    if (rank == 0)
        memset(board, 0, sizeof *board);
    MUST(shmesh_barrier(ctx));
}

/* A mesh of every device on one axis "i". */
static shmesh_mesh *line_mesh(void)
{
    static const char *const names[] = {"i"};
    int sizes[] = {ndev};
    shmesh_mesh *m;
    MUST(shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m));
    return m;
}

static shmesh_array arr1(void *data, shmesh_dtype dt, int64_t n)
{
    shmesh_array a = {.data = data, .dtype = dt, .ndim = 1, .shape = {n}};
    return a;
}

/* ------------------------------------------------------------------------
 * ordered-log: 10 000 ORDERED callbacks on this rank among psums.
 * ---------------------------------------------------------------------- */

struct logstate {
    int *log;
    int cap;
    atomic_int n, inside, overlaps;
};
static struct logstate lg;

static void log_cb(void *arg, int device)
{
    (void)device;
    if (atomic_fetch_add(&lg.inside, 1) != 0)
        atomic_fetch_add(&lg.overlaps, 1);
    int n = atomic_load(&lg.n);
    if (n < lg.cap)
        lg.log[n] = *(const int *)arg;
    atomic_store(&lg.n, n + 1);
    atomic_fetch_sub(&lg.inside, 1);
}

static int mode_ordered_log(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 10000;
    const int every = 100;
    if (n <= 0)
        return 2;
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "log", SHMESH_EFFECT_ORDERED, &e));
    shmesh_mesh *m = line_mesh();
    int *idx = xcalloc((size_t)n, sizeof *idx);
    lg.log = xcalloc((size_t)n, sizeof *lg.log);
    lg.cap = n;
    int npsum = (n + every - 1) / every;
    int32_t(*pin)[4] = xcalloc((size_t)npsum, sizeof *pin);
    int32_t(*pout)[4] = xcalloc((size_t)npsum, sizeof *pout);
    shmesh_token *ptok = xcalloc((size_t)npsum, sizeof *ptok);
    shmesh_token prev = {NULL, 0};
    int p = 0;
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        if (i % every == 0) {
            for (int j = 0; j < 4; j++)
                pin[p][j] = rank + 1 + j * p;
            shmesh_array in = arr1(pin[p], SHMESH_INT32, 4), out = arr1(pout[p], SHMESH_INT32, 4);
            MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &ptok[p]));
            p++;
        }
        idx[i] = i;
        shmesh_token tok;
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_SELF, log_cb, &idx[i], &tok));
        if (tok.ctx != ctx || tok.seq <= prev.seq) {
            bad("callback %d: token {%p, %" PRIu64 "} after {%p, %" PRIu64 "}: expected a "
                "later position of this context's stream",
                i, (void *)tok.ctx, tok.seq, (void *)prev.ctx, prev.seq);
            break;
        }
        shmesh_token et = shmesh_effect_token(e);
        if (et.ctx != tok.ctx || et.seq != tok.seq) {
            bad("after callback %d the effect's token is {%p, %" PRIu64 "}, expected the "
                "callback's {%p, %" PRIu64 "}",
                i, (void *)et.ctx, et.seq, (void *)tok.ctx, tok.seq);
            break;
        }
        prev = tok;
    }
    double dispatch_ms = ms_since(t0);
    MUST(shmesh_effects_barrier(ctx));
    double total_ms = ms_since(t0);
    int got = atomic_load(&lg.n);
    if (got != n)
        bad("the log has %d entries after shmesh_effects_barrier, expected %d", got, n);
    for (int i = 0; i < n && i < got; i++)
        if (lg.log[i] != i) {
            bad("log[%d] = %d: not in program order", i, lg.log[i]);
            break;
        }
    if (atomic_load(&lg.overlaps))
        bad("%d callbacks of the ordered effect ran while another was running",
            atomic_load(&lg.overlaps));
    int t = shmesh_token_test(shmesh_effect_token(e));
    if (t != 1)
        bad("the effect's token after shmesh_effects_barrier: test -> %d, expected 1 (done)", t);
    t = shmesh_token_test(shmesh_runtime_token(ctx));
    if (t != 1)
        bad("the runtime token after shmesh_effects_barrier: test -> %d, expected 1 (done)", t);
    t = shmesh_token_test(prev);
    if (t != 1)
        bad("the last callback's token after shmesh_effects_barrier: test -> %d", t);
    for (int q = 0; q < p; q++) {
        t = shmesh_token_test(ptok[q]);
        if (t != 1)
            bad("psum %d's token after shmesh_effects_barrier: test -> %d", q, t);
        for (int j = 0; j < 4; j++) {
            int32_t want = 0;
            for (int r = 0; r < world; r++)
                want += r + 1 + j * q;
            if (pout[q][j] != want) {
                bad("psum %d element %d = %d, expected %d", q, j, pout[q][j], want);
                break;
            }
        }
    }
    printf("rank %d: ordered log of %d callbacks with %d psums: %s (dispatch %.0f ms, "
           "total %.0f ms)\n",
           rank, n, p, failures ? "WRONG" : "in program order", dispatch_ms, total_ms);
    shmesh_mesh_destroy(m);
    free(idx);
    free(lg.log);
    free(pin);
    free(pout);
    free(ptok);
    return failures ? 4 : 0;
}

/* ------------------------------------------------------------------------
 * shardable: point k+1 starts nowhere before point k finished everywhere.
 * ---------------------------------------------------------------------- */

static uint64_t rng_state[MAXDEV];
static atomic_int shard_local_violations;
static char first_violation[256];

static void note_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_violation(const char *fmt, ...)
{
    atomic_fetch_add(&board->violations, 1);
    if (atomic_fetch_add(&shard_local_violations, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_violation, sizeof first_violation, fmt, ap);
        va_end(ap);
    }
}

/* Where point k runs: every device (-1), or in "mixed" runs every seventh
 * point on one device; and so how many parts it has. */
static int shard_points, shard_place[MAXPOINTS];

static int64_t parts_of(int k) { return shard_place[k] < 0 ? ndev : 1; }

static void shard_cb(void *arg, int device)
{
    int k = *(const int *)arg;
    if (device < 0 || device >= ndev || shmesh_device_process(ctx, device) != rank ||
        (shard_place[k] >= 0 && device != shard_place[k])) {
        note_violation("point %d ran with device %d, not one of this rank's or not its place",
                       k, device);
        return;
    }
    if (k > 0) {
        int64_t f = atomic_load(&board->finished[k - 1]);
        if (f != parts_of(k - 1))
            note_violation("device %d began point %d when %" PRId64 " of the %" PRId64
                           " parts of point %d had finished",
                           device, k, f, parts_of(k - 1), k - 1);
    }
    atomic_fetch_add(&board->started[k], 1);
    rng_state[device] = mix(rng_state[device]);
    sleep_us((long)(rng_state[device] % 2001));
    if (k + 1 < shard_points && atomic_load(&board->started[k + 1]))
        note_violation("a part of point %d began while device %d was still in point %d", k + 1,
                       device, k);
    atomic_fetch_add(&board->finished[k], 1);
}

/* SEED POINTS [unordered|mixed] */
static int mode_shardable(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int points = argc > 3 ? atoi(argv[3]) : 200;
    /* "unordered": the same with an UNORDERED effect, each rank's parts
     * dispatched on its own devices (SHMESH_PLACE_SELF: no step among the
     * ranks, so no order across them), where the checks below must find
     * violations (they can see one).  "mixed": every seventh point is
     * placed on one device instead of every device. */
    bool control = argc > 4 && !strcmp(argv[4], "unordered");
    bool mixed = argc > 4 && !strcmp(argv[4], "mixed");
    if (ndev > MAXDEV || points <= 0 || points > MAXPOINTS) {
        printf("rank %d: FAIL: at most %d devices and %d points\n", rank, MAXDEV, MAXPOINTS);
        return 2;
    }
    shard_points = points;
    for (int k = 0; k < points; k++)
        shard_place[k] = mixed && k % 7 == 3 ? (k / 7) % ndev : SHMESH_PLACE_ALL;
    for (int d = 0; d < MAXDEV; d++)
        rng_state[d] = mix(seed * 1000003u + (uint64_t)d);
    board_reset();
    shmesh_effect *e;
    shmesh_effect_kind kind = control ? SHMESH_EFFECT_UNORDERED : SHMESH_EFFECT_ORDERED_SHARDABLE;
    MUST(shmesh_effect_create(ctx, "steps", kind, &e));
    if (shmesh_effect_kind_of(e) != kind || strcmp(shmesh_effect_name(e), "steps"))
        bad("the effect reads back as '%s' of kind %d", shmesh_effect_name(e),
            (int)shmesh_effect_kind_of(e));
    shmesh_mesh *m = line_mesh();
    int *ks = xcalloc((size_t)points, sizeof *ks);
    int npsum = points / 50 + 1;
    float *pin = xcalloc((size_t)npsum * (size_t)nlocal, sizeof *pin);
    float *pout = xcalloc((size_t)npsum * (size_t)nlocal, sizeof *pout);
    shmesh_token last = {NULL, 0};
    int p = 0;
    int64_t t0 = now_ns();
    for (int k = 0; k < points; k++) {
        if (k % 50 == 25) {
            shmesh_array in[MAXDEV], out[MAXDEV];
            for (int l = 0; l < nlocal; l++) {
                pin[p * nlocal + l] = 1.0f;
                in[l] = (shmesh_array){.data = &pin[p * nlocal + l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
                out[l] = (shmesh_array){.data = &pout[p * nlocal + l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
            }
            MUST(shmesh_psum_async(m, "i", NULL, in, out, NULL));
            p++;
        }
        ks[k] = k;
        MUST(shmesh_callback(ctx, e, control ? SHMESH_PLACE_SELF : shard_place[k], shard_cb,
                             &ks[k], &last));
    }
    double dispatch_ms = ms_since(t0);
    MUST(shmesh_effects_barrier(ctx));
    double total_ms = ms_since(t0);
    if (control)
        MUST(shmesh_barrier(ctx)); /* an unordered effect's barrier is this rank's */
    /* After the barrier every part of every point is done, everywhere. */
    for (int k = 0; k < points; k++) {
        int64_t f = atomic_load(&board->finished[k]);
        if (f != parts_of(k)) {
            bad("after shmesh_effects_barrier %" PRId64 " of the %" PRId64
                " parts of point %d had finished",
                f, parts_of(k), k);
            break;
        }
    }
    if (shmesh_token_test(last) != 1)
        bad("the last callback's token is not done after shmesh_effects_barrier");
    for (int i = 0; i < p * nlocal; i++)
        if (pout[i] != (float)ndev) {
            bad("psum %d = %g, expected %d", i / nlocal, pout[i], ndev);
            break;
        }
    int mine = atomic_load(&shard_local_violations);
    if (mine && !control)
        bad("%d ordering violations seen here; the first: %s", mine, first_violation);
    MUST(shmesh_barrier(ctx));
    int64_t all = atomic_load(&board->violations);
    printf("rank %d: %s seed %" PRIu64 ": %d points x %d devices, %" PRId64
           " violations in the job (dispatch %.0f ms, total %.0f ms)\n",
           rank, control ? "unordered" : mixed ? "shardable mixed" : "shardable", seed, points,
           ndev, all, dispatch_ms, total_ms);
    if (control && mine)
        printf("rank %d: unordered: first violation seen here: %s\n", rank, first_violation);
    shmesh_mesh_destroy(m);
    free(ks);
    free(pin);
    free(pout);
    return failures ? 4 : 0;
}

/* ------------------------------------------------------------------------
 * ordered-all: refused on several devices; placed on one it runs once.
 * ---------------------------------------------------------------------- */

static atomic_int never_runs;

static void count_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
    atomic_fetch_add(&never_runs, 1);
}

static void placed_cb(void *arg, int device)
{
    (void)arg;
    atomic_fetch_add(&board->runs, 1);
    atomic_store(&board->ran_rank, rank);
    atomic_store(&board->ran_device, device);
    sleep_us(50000);
    atomic_store(&board->flag, 1);
}

static void placed_log_cb(void *arg, int device)
{
    (void)device;
    int64_t n = atomic_load(&board->log_n);
    if (n < BOARD_LOG)
        board->log[n] = *(const int *)arg;
    sleep_us(1000);
    atomic_store(&board->log_n, n + 1);
}

static void placed_once(shmesh_effect *e, int target)
{
    board_reset();
    int owner = shmesh_device_process(ctx, target);
    shmesh_token tok;
    char what[96];
    snprintf(what, sizeof what, "ordered on device %d", target);
    MUST(shmesh_callback(ctx, e, target, placed_cb, NULL, &tok));
    MUST(shmesh_token_wait(tok));
    if (atomic_load(&board->flag) != 1)
        bad("%s: the token is done but the callback (on rank %d) has not finished", what, owner);
    /* Twenty more in a row: they run there in program order, and the last
     * token means all of them ran. */
    int idx[20];
    for (int i = 0; i < 20; i++) {
        idx[i] = i;
        MUST(shmesh_callback(ctx, e, target, placed_log_cb, &idx[i], &tok));
    }
    MUST(shmesh_token_wait(tok));
    int64_t n = atomic_load(&board->log_n);
    if (n != 20)
        bad("%s: after the last token, %" PRId64 " of 20 callbacks had run", what, n);
    for (int i = 0; i < n && i < 20; i++)
        if (board->log[i] != i) {
            bad("%s: log[%d] = %" PRId64 ": not in program order", what, i, board->log[i]);
            break;
        }
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_barrier(ctx));
    int64_t runs = atomic_load(&board->runs), where = atomic_load(&board->ran_rank),
            dev = atomic_load(&board->ran_device);
    if (runs != 1 || where != owner || dev != target)
        bad("%s: ran %" PRId64 " times, on rank %" PRId64 " with device %" PRId64
            "; expected once, on rank %d with device %d",
            what, runs, where, dev, owner, target);
    else
        printf("rank %d: %s: ran once, on rank %d, token done after it ran\n", rank, what,
               owner);
    MUST(shmesh_barrier(ctx)); /* nobody resets the board before all have read it */
}

static int mode_ordered_all(void)
{
    board_setup();
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "metrics", SHMESH_EFFECT_ORDERED, &e));
    shmesh_token tok = {ctx, 12345};
    int rc = shmesh_callback(ctx, e, SHMESH_PLACE_ALL, count_cb, NULL, &tok);
    if (ndev > 1) {
        expect("ordered on every device", rc, SHMESH_ERR_INVALID);
        if (rc == SHMESH_ERR_INVALID)
            expect_in_message("ordered on every device", "metrics");
        if (!token_is_none(tok))
            bad("a refused dispatch left the token {%p, %" PRIu64 "}, expected {NULL, 0}",
                (void *)tok.ctx, tok.seq);
    } else {
        expect("ordered on the only device", rc, 0);
    }
    /* The context is usable: a barrier and an async one. */
    MUST(shmesh_barrier(ctx));
    shmesh_token bt;
    MUST(shmesh_barrier_async(ctx, &bt));
    MUST(shmesh_token_wait(bt));
    MUST(shmesh_effects_barrier(ctx));
    int ran = atomic_load(&never_runs);
    if (ran != (ndev > 1 ? 0 : 1))
        bad("the callback on every device ran %d times, expected %d", ran, ndev > 1 ? 0 : 1);
    printf("rank %d: usable after the refusal\n", rank);
    /* This rank's devices: one is fine, several have no total order. */
    atomic_store(&never_runs, 0);
    tok = (shmesh_token){ctx, 12345};
    rc = shmesh_callback(ctx, e, SHMESH_PLACE_SELF, count_cb, NULL, &tok);
    if (nlocal > 1) {
        expect("ordered on this rank's devices", rc, SHMESH_ERR_INVALID);
        if (rc == SHMESH_ERR_INVALID)
            expect_in_message("ordered on this rank's devices", "metrics");
    } else {
        expect("ordered on this rank's device", rc, 0);
    }
    MUST(shmesh_effects_barrier(ctx));
    if (atomic_load(&never_runs) != (nlocal > 1 ? 0 : 1))
        bad("the callback on this rank's devices ran %d times, expected %d",
            atomic_load(&never_runs), nlocal > 1 ? 0 : 1);

    placed_once(e, ndev > 1 ? 1 : 0);
    if (ndev - 1 > 1)
        placed_once(e, ndev - 1);
    /* An unordered effect on every device runs once per device. */
    atomic_store(&never_runs, 0);
    shmesh_effect *u;
    MUST(shmesh_effect_create(ctx, "free", SHMESH_EFFECT_UNORDERED, &u));
    MUST(shmesh_callback(ctx, u, SHMESH_PLACE_ALL, count_cb, NULL, &tok));
    MUST(shmesh_token_wait(tok));
    if (atomic_load(&never_runs) != nlocal)
        bad("an unordered callback on every device ran %d times here, expected %d",
            atomic_load(&never_runs), nlocal);
    return failures ? 4 : 0;
}

/* ------------------------------------------------------------------------
 * peer-death: rank 2 dies while ranks 0 and 1 wait on tokens.
 * ---------------------------------------------------------------------- */

static void noop_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
}

static void sleepy_cb(void *arg, int device)
{
    (void)device;
    sleep_us(*(const long *)arg);
}

/* WHAT: kill (rank 2 dies of SIGKILL) or abort (it calls shmesh_abort);
 * shardable (killed inside its part of an ORDERED_SHARDABLE effect's point
 * 1, while the others' first wait is point 2), placed (killed before the
 * callback the others placed on its device). */
static int mode_peer_death(int argc, char **argv)
{
    const char *what = argc > 2 ? argv[2] : "kill";
    bool abort_it = !strcmp(what, "abort"), shard = !strcmp(what, "shardable"),
         placed = !strcmp(what, "placed");
    if (!abort_it && !shard && !placed && strcmp(what, "kill"))
        return 2;
    if (world != 3) {
        printf("rank %d: FAIL: peer-death needs 3 ranks\n", rank);
        return 2;
    }
    int want = abort_it ? SHMESH_ERR_ABORTED : SHMESH_ERR_PEER_DEAD;
    board_setup();
    shmesh_effect *e, *steps;
    MUST(shmesh_effect_create(ctx, "journal", SHMESH_EFFECT_ORDERED, &e));
    MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &steps));
    shmesh_mesh *m = line_mesh();
    /* One async psum that completes: the progress thread is running. */
    float one = 1.0f, sum = 0;
    shmesh_array in = {.data = &one, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}}, out = {.data = &sum, .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
    shmesh_token tok;
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
    MUST(shmesh_token_wait(tok));
    if (sum != 3.0f)
        bad("warm-up psum = %g, expected 3", sum);
    static long part_us;
    if (shard) {
        /* Point 1 everywhere; rank 2's part outlives rank 2. */
        part_us = rank == 2 ? 5000000 : 0;
        MUST(shmesh_callback(ctx, steps, SHMESH_PLACE_ALL, sleepy_cb, &part_us, NULL));
    }
    if (rank == 2) {
        /* Until the others dispatched their work (60 s at most): they are
         * waiting now, or about to. */
        for (int i = 0; i < 60000 && atomic_load(&board->ready) < 2; i++)
            sleep_us(1000);
        atomic_store(&board->kill_ns, now_ns());
        if (abort_it)
            shmesh_abort(ctx, 7, "test abort");
        raise(SIGKILL);
    }
    enum { NT = 6 };
    static float bins[3][256], bouts[3][256];
    shmesh_token toks[NT];
    const char *names[NT] = {"first", "psum #1", "psum #2", "psum #3", "barrier", "callback"};
    int first = 1;
    if (shard) {
        names[0] = "shardable point 2";
        MUST(shmesh_callback(ctx, steps, SHMESH_PLACE_ALL, noop_cb, NULL, &toks[0]));
        first = 0;
    } else if (placed) {
        names[0] = "callback on device 2";
        MUST(shmesh_callback(ctx, e, 2, noop_cb, NULL, &toks[0]));
        first = 0;
    }
    for (int i = 0; i < 3; i++) {
        shmesh_array a = arr1(bins[i], SHMESH_FLOAT32, 256),
                     b = arr1(bouts[i], SHMESH_FLOAT32, 256);
        MUST(shmesh_psum_async(m, "i", NULL, &a, &b, &toks[1 + i]));
    }
    MUST(shmesh_barrier_async(ctx, &toks[4]));
    MUST(shmesh_callback(ctx, e, SHMESH_PLACE_SELF, noop_cb, NULL, &toks[5]));
    atomic_fetch_add(&board->ready, 1);
    for (int i = first; i < NT; i++) {
        int rc = shmesh_token_wait(toks[i]);
        int64_t kill = atomic_load(&board->kill_ns);
        double after = kill ? (double)(now_ns() - kill) / 1e6 : -1;
        printf("rank %d: wait %s -> %s after %.0f ms: %s\n", rank, names[i],
               shmesh_error_name(rc), after, rc ? why() : "");
        if (rc != want)
            bad("wait %s returned %s, expected %s", names[i], shmesh_error_name(rc),
                shmesh_error_name(want));
        else if (!strstr(why(), "rank 2"))
            bad("wait %s: the message does not name rank 2: %s", names[i], why());
        /* No SHMESH_TIMEOUT: a death nobody noticed is a wait for ever
         * (the suite's deadline); noticed, it takes milliseconds. */
        if (after < 0 || after > 10000)
            bad("wait %s ended %.0f ms after rank 2 died, expected within 10 s", names[i],
                after);
    }
    /* Poisoned: everything fails at once with the same error.  Fifty
     * times: calls that waited to learn of the death again (a slice: 0.1 s,
     * 1 s with io_uring) would take 10 s or more. */
    int64_t t0 = now_ns();
    for (int i = 0; i < 50; i++) {
        int rc = shmesh_token_test(toks[first]);
        if (rc != want)
            bad("token_test after the death -> %s", shmesh_error_name(rc));
        rc = shmesh_effects_barrier(ctx);
        if (rc != want)
            bad("shmesh_effects_barrier after the death -> %s", shmesh_error_name(rc));
        rc = shmesh_psum_async(m, "i", NULL, &in, &out, &tok);
        if (rc == 0)
            rc = shmesh_token_wait(tok);
        if (rc != want)
            bad("an async psum after the death -> %s", shmesh_error_name(rc));
        if (failures)
            break;
    }
    double ms = ms_since(t0);
    if (ms > 5000)
        bad("50 rounds of calls after the death took %.0f ms: they waited", ms);
    printf("rank %d: peer death (%s) seen by %d waits%s\n", rank, what, NT - first,
           failures ? " (with failures)" : "");
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

/* ------------------------------------------------------------------------
 * timeout: a token wait ends after SHMESH_TIMEOUT.
 * ---------------------------------------------------------------------- */

/* WHAT: psum (a psum's token), shardable (the token of an
 * ORDERED_SHARDABLE effect's point 2, which waits for rank 1's point 1), or
 * effects-barrier (shmesh_effects_barrier after point 1, which waits for
 * rank 1's part of it). */
static int mode_timeout(int argc, char **argv)
{
    const char *what = argc > 2 ? argv[2] : "psum";
    if (world != 2) {
        printf("rank %d: FAIL: timeout needs 2 ranks\n", rank);
        return 2;
    }
    const char *limit_s = getenv("SHMESH_TIMEOUT");
    double limit_ms = limit_s ? atof(limit_s) * 1000 : 0;
    if (limit_ms <= 0) {
        printf("rank %d: FAIL: timeout needs SHMESH_TIMEOUT > 0\n", rank);
        return 2;
    }
    board_setup();
    shmesh_mesh *m = line_mesh();
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &e));
    if (rank == 1) {
        /* Outside any call until rank 0's wait is over (120 s at most). */
        for (int i = 0; i < 120000 && !atomic_load(&board->flag); i++)
            sleep_us(1000);
        printf("rank 1: waited outside any call until rank 0's wait ended\n");
        shmesh_mesh_destroy(m);
        return -1; /* rank 0 is gone: finalize's result does not matter */
    }
    float v[16] = {0}, w[16];
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 16), out = arr1(w, SHMESH_FLOAT32, 16);
    shmesh_token tok;
    int64_t t0 = now_ns();
    int rc;
    if (!strcmp(what, "psum")) {
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
        rc = shmesh_token_wait(tok);
    } else if (!strcmp(what, "shardable")) {
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, NULL));
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, &tok));
        rc = shmesh_token_wait(tok);
    } else if (!strcmp(what, "effects-barrier")) {
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_ALL, noop_cb, NULL, NULL));
        rc = shmesh_effects_barrier(ctx);
    } else {
        return 2;
    }
    double ms = ms_since(t0);
    atomic_store(&board->flag, 1); /* rank 1 may go */
    printf("rank 0: wait %s -> %s after %.0f ms: %s\n", what, shmesh_error_name(rc), ms,
           rc ? why() : "");
    if (rc != SHMESH_ERR_TIMEOUT)
        bad("the wait returned %s, expected SHMESH_ERR_TIMEOUT", shmesh_error_name(rc));
    else /* docs/environment.md: the error names the rank it waited for */
        expect_in_message("the timed-out wait", "rank 1");
    /* Not before the limit; after it, within seconds (a busy machine may
     * be late by some, a wait that ignored the limit would last for ever). */
    if (ms < limit_ms - 100 || ms > limit_ms + 25000)
        bad("the wait ended after %.0f ms; SHMESH_TIMEOUT is %s s", ms, limit_s);
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

/* ------------------------------------------------------------------------
 * mismatch: different async calls meet.
 * ---------------------------------------------------------------------- */

static int mode_mismatch(int argc, char **argv)
{
    const char *what = argc > 2 ? argv[2] : "async";
    shmesh_mesh *m = line_mesh();
    float v[8], w[8];
    for (int i = 0; i < 8; i++)
        v[i] = (float)(rank * 8 + i);
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 8), out = arr1(w, SHMESH_FLOAT32, 8);
    shmesh_token tok;
    int rc;
    /* What rank 1 calls, which every message must name besides psum. */
    const char *other = strncmp(what, "callback", 8) ? "pmax" : "shmesh_callback";
    shmesh_effect *e = NULL;
    if (!strcmp(what, "callback-shardable"))
        MUST(shmesh_effect_create(ctx, "steps", SHMESH_EFFECT_ORDERED_SHARDABLE, &e));
    if (rank == 0) {
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &tok));
        rc = expect("wait psum_async", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else if (!strcmp(what, "async")) {
        MUST(shmesh_pmax_async(m, "i", NULL, &in, &out, &tok));
        rc = expect("wait pmax_async", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else if (!strcmp(what, "blocking")) {
        rc = expect("pmax", shmesh_pmax(m, "i", NULL, &in, &out), SHMESH_ERR_MISMATCH);
    } else if (!strncmp(what, "callback", 8)) {
        /* callback: no effect, every device; callback-shardable: an
         * ORDERED_SHARDABLE effect's first point; callback-placed: no
         * effect, on rank 0's device. */
        /* A collective callback is compared as any call is, before it
         * runs: its own token fails. */
        int place = !strcmp(what, "callback-placed") ? 0 : SHMESH_PLACE_ALL;
        MUST(shmesh_callback(ctx, e, place, noop_cb, NULL, &tok));
        rc = expect("wait callback", shmesh_token_wait(tok), SHMESH_ERR_MISMATCH);
    } else {
        return 2;
    }
    if (rc == SHMESH_ERR_MISMATCH) {
        expect_in_message("the mismatch", "psum");
        expect_in_message("the mismatch", other);
    }
    /* Poisoned: a later wait fails at once, with the same error. */
    rc = shmesh_effects_barrier(ctx);
    if (rc != SHMESH_ERR_MISMATCH)
        bad("shmesh_effects_barrier after the mismatch -> %s", shmesh_error_name(rc));
    shmesh_mesh_destroy(m);
    return failures ? 4 : -1;
}

static int mode_effect_mismatch(int argc, char **argv)
{
    const char *what = argc > 2 ? argv[2] : "name";
    shmesh_effect *e = NULL;
    int rc;
    if (!strcmp(what, "name"))
        rc = shmesh_effect_create(ctx, rank == 0 ? "alpha" : "beta", SHMESH_EFFECT_ORDERED, &e);
    else if (!strcmp(what, "kind"))
        rc = shmesh_effect_create(ctx, "gamma",
                                  rank == 0 ? SHMESH_EFFECT_ORDERED : SHMESH_EFFECT_UNORDERED,
                                  &e);
    else
        return 2;
    expect("effect_create", rc, SHMESH_ERR_MISMATCH);
    if (rc == SHMESH_ERR_MISMATCH) {
        if (!strcmp(what, "name")) {
            expect_in_message("effect_create", "alpha");
            expect_in_message("effect_create", "beta");
        } else {
            expect_in_message("effect_create", "gamma");
        }
    }
    return failures ? 4 : -1;
}

/* ------------------------------------------------------------------------
 * callback-mismatch: ranks that dispatch different collective callbacks.
 * ---------------------------------------------------------------------- */

static int mode_callback_mismatch(int argc, char **argv)
{
    const char *what = argc > 2 ? argv[2] : "device";
    if (world != 2 || nlocal != 1) {
        printf("rank %d: FAIL: callback-mismatch needs 2 ranks of one device\n", rank);
        return 2;
    }
    shmesh_effect *a, *b, *u, *s;
    MUST(shmesh_effect_create(ctx, "a", SHMESH_EFFECT_ORDERED, &a));
    MUST(shmesh_effect_create(ctx, "b", SHMESH_EFFECT_ORDERED, &b));
    MUST(shmesh_effect_create(ctx, "u", SHMESH_EFFECT_UNORDERED, &u));
    MUST(shmesh_effect_create(ctx, "s", SHMESH_EFFECT_ORDERED_SHARDABLE, &s));
    /* Rank 0's callback and rank 1's, and what names each in a sentence. */
    shmesh_effect *e;
    int place;
    const char *words[2];
    if (!strcmp(what, "device")) {
        e = a;
        place = rank == 0 ? 1 : 0;
        words[0] = "placement=1";
        words[1] = "placement=0";
    } else if (!strcmp(what, "name")) {
        e = rank == 0 ? a : b;
        place = 0;
        words[0] = "\"a\"";
        words[1] = "\"b\"";
    } else if (!strcmp(what, "own")) {
        e = a;
        place = rank;
        words[0] = "placement=0";
        words[1] = "placement=1";
    } else if (!strcmp(what, "all-vs-one")) {
        e = NULL;
        place = rank == 0 ? SHMESH_PLACE_ALL : 0;
        words[0] = "placement=-1";
        words[1] = "placement=0";
    } else if (!strcmp(what, "kind")) {
        e = rank == 0 ? u : s;
        place = SHMESH_PLACE_ALL;
        words[0] = "\"u\"";
        words[1] = "\"s\"";
    } else {
        return 2;
    }
    shmesh_token t;
    MUST(shmesh_callback(ctx, e, place, count_cb, NULL, &t));
    char line[96];
    snprintf(line, sizeof line, "callback-mismatch %s: the callback's token", what);
    int rc = expect(line, shmesh_token_wait(t), SHMESH_ERR_MISMATCH);
    if (rc == SHMESH_ERR_MISMATCH) {
        expect_in_message(line, words[0]);
        expect_in_message(line, words[1]);
    } else if (rc == 0) {
        /* It must not go unnoticed: the next collective, at least. */
        snprintf(line, sizeof line, "callback-mismatch %s: the barrier after it", what);
        expect(line, shmesh_barrier(ctx), SHMESH_ERR_MISMATCH);
    }
    /* Compared before it runs: it ran nowhere. */
    if (atomic_load(&never_runs))
        bad("callback-mismatch %s: the callback ran %d times here, expected none", what,
            atomic_load(&never_runs));
    printf("rank %d: callback-mismatch %s done\n", rank, what);
    return failures ? 4 : -1;
}

/* ------------------------------------------------------------------------
 * basics
 * ---------------------------------------------------------------------- */

struct sleeper {
    long us;
    atomic_int done;
    pthread_t thread;
};

static void sleep_cb(void *arg, int device)
{
    (void)device;
    struct sleeper *s = arg;
    s->thread = pthread_self();
    sleep_us(s->us);
    atomic_store(&s->done, 1);
}

/* A callback held until the main thread opens its gate: what is checked
 * while it runs does not depend on how fast this machine is.  It gives up
 * after 60 s (a dispatch that waited for its work would deadlock), and
 * says so. */
struct gate {
    atomic_int open, done, gave_up;
    pthread_t thread;
};

static void gate_cb(void *arg, int device)
{
    (void)device;
    struct gate *g = arg;
    g->thread = pthread_self();
    int64_t t0 = now_ns();
    while (!atomic_load(&g->open))
        if (now_ns() - t0 > 60 * INT64_C(1000000000)) {
            atomic_store(&g->gave_up, 1);
            break;
        } else {
            sleep_us(1000);
        }
    atomic_store(&g->done, 1);
}

static void gate_check(const struct gate *g, const char *what)
{
    if (atomic_load(&g->gave_up))
        bad("%s: the callback waited 60 s for its gate to open: something waited for it", what);
}

/* Checks, when it runs, that a psum's output is there. */
struct reader {
    const int32_t *out;
    int n;
    int32_t want0; /* out[i] must be want0 + i * world */
    atomic_int ran, ok;
};

static void reader_cb(void *arg, int device)
{
    (void)device;
    struct reader *r = arg;
    bool ok = true;
    for (int i = 0; i < r->n; i++)
        if (r->out[i] != r->want0 + i * world)
            ok = false;
    atomic_store(&r->ok, ok);
    atomic_store(&r->ran, 1);
}

/* A callback that calls the library with its own context: refused, each
 * call explained, nothing deadlocks. */
struct reentry {
    shmesh_token own;
    atomic_int published, ran;
    int rc[3];
    char msg[3][320];
};

static void reentry_cb(void *arg, int device)
{
    (void)device;
    struct reentry *r = arg;
    for (int i = 0; i < 60000 && !atomic_load(&r->published); i++)
        sleep_us(1000);
    shmesh_token t;
    r->rc[0] = shmesh_barrier(ctx);
    snprintf(r->msg[0], sizeof r->msg[0], "%s", shmesh_last_error(ctx));
    r->rc[1] = shmesh_barrier_async(ctx, &t);
    snprintf(r->msg[1], sizeof r->msg[1], "%s", shmesh_last_error(ctx));
    r->rc[2] = shmesh_token_wait(r->own);
    snprintf(r->msg[2], sizeof r->msg[2], "%s", shmesh_last_error(ctx));
    atomic_store(&r->ran, 1);
}

static void fill_random(float *x, size_t n, uint64_t salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(mix(salt * 7919u + i) >> 11) / 9007199254740992.0 * 200.0 - 100.0);
}

static void same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    if (memcmp(a, b, bytes))
        bad("%s: the async result differs from the blocking one", what);
}

static void basics_tokens(shmesh_mesh *m)
{
    int f0 = failures;
    /* The done token, and nothing dispatched yet. */
    shmesh_token none = {NULL, 0};
    if (shmesh_token_test(none) != 1 || shmesh_token_wait(none) != 0)
        bad("the token {NULL, 0} is not done");
    if (shmesh_token_test(shmesh_runtime_token(ctx)) != 1)
        bad("the runtime token before any dispatch is not done");
    shmesh_effect *ord;
    MUST(shmesh_effect_create(ctx, "ord", SHMESH_EFFECT_ORDERED, &ord));
    if (shmesh_token_test(shmesh_effect_token(ord)) != 1)
        bad("a new effect's token is not done");
    if (strcmp(shmesh_effect_name(ord), "ord") ||
        shmesh_effect_kind_of(ord) != SHMESH_EFFECT_ORDERED)
        bad("the effect reads back as '%s' of kind %d", shmesh_effect_name(ord),
            (int)shmesh_effect_kind_of(ord));

    /* test before and after; dispatch does not wait for the work (the
     * callback is held until the gate opens, after the dispatch returned). */
    struct gate s = {0};
    shmesh_token a;
    MUST(shmesh_callback(ctx, ord, SHMESH_PLACE_SELF, gate_cb, &s, &a));
    if (atomic_load(&s.done))
        bad("dispatching a callback waited for it to run");
    int t = shmesh_token_test(a);
    if (t != 0)
        bad("token_test on a callback still held -> %d, expected 0", t);
    /* A psum behind it: wait_any over {psum, callback} names the callback
     * (it is earlier in the stream). */
    int32_t pin[4], pout[4];
    for (int i = 0; i < 4; i++)
        pin[i] = rank + i;
    shmesh_array in = arr1(pin, SHMESH_INT32, 4), out = arr1(pout, SHMESH_INT32, 4);
    shmesh_token b;
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &b));
    if (b.seq <= a.seq || b.ctx != ctx)
        bad("the psum's token {%p, %" PRIu64 "} is not after the callback's {%p, %" PRIu64 "}",
            (void *)b.ctx, b.seq, (void *)a.ctx, a.seq);
    if (shmesh_token_test(b) != 0)
        bad("the psum behind a held callback was done before it");
    shmesh_token pair[2] = {b, a};
    int index = -1;
    atomic_store(&s.open, 1);
    int rc = shmesh_token_wait_any(2, pair, &index);
    if (rc != 0 || index != 1)
        bad("wait_any({psum, held callback}) -> %s, index %d; expected 0, index 1",
            shmesh_error_name(rc), index);
    if (!atomic_load(&s.done))
        bad("wait_any returned before the callback finished");
    gate_check(&s, "token_test before and after");
    if (pthread_equal(s.thread, main_thread))
        bad("the callback ran on the dispatching thread, not the progress thread");
    MUST(shmesh_token_wait(b));
    if (shmesh_token_test(a) != 1 || shmesh_token_test(b) != 1)
        bad("token_test after the waits is not 1");
    for (int i = 0; i < 4; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want += r + i;
        if (pout[i] != want) {
            bad("async psum element %d = %d, expected %d", i, pout[i], want);
            break;
        }
    }
    /* Waiting twice is fine: a token is a value. */
    if (shmesh_token_wait(a) != 0 || shmesh_token_wait(b) != 0)
        bad("a second wait on a done token failed");

    /* wait_all over callbacks, psums and the done token; the runtime token
     * covers everything dispatched. */
    enum { N = 8 };
    shmesh_token toks[N + 1];
    int32_t ins[N][16], outs[N][16];
    struct sleeper ss[N];
    for (int k = 0; k < N; k++) {
        if (k % 2) {
            ss[k] = (struct sleeper){.us = 2000};
            MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &ss[k], &toks[k]));
        } else {
            for (int i = 0; i < 16; i++)
                ins[k][i] = k * 100 + i + rank;
            shmesh_array ki = arr1(ins[k], SHMESH_INT32, 16), ko = arr1(outs[k], SHMESH_INT32, 16);
            MUST(shmesh_psum_async(m, "i", NULL, &ki, &ko, &toks[k]));
        }
    }
    toks[N] = none;
    shmesh_token rt = shmesh_runtime_token(ctx);
    if (rt.ctx != ctx || rt.seq < toks[N - 1].seq)
        bad("the runtime token {%p, %" PRIu64 "} does not cover the last dispatch's %" PRIu64,
            (void *)rt.ctx, rt.seq, toks[N - 1].seq);
    MUST(shmesh_token_wait(rt));
    for (int k = 0; k < N; k++)
        if (shmesh_token_test(toks[k]) != 1) {
            bad("token %d is not done after the runtime token's wait", k);
            break;
        }
    MUST(shmesh_token_wait_all(N + 1, toks));
    for (int k = 0; k < N; k += 2)
        for (int i = 0; i < 16; i++) {
            int32_t want = 0;
            for (int r = 0; r < world; r++)
                want += k * 100 + i + r;
            if (outs[k][i] != want) {
                bad("psum %d element %d = %d, expected %d", k, i, outs[k][i], want);
                k = N;
                break;
            }
        }
    for (int k = 1; k < N; k += 2)
        if (!atomic_load(&ss[k].done))
            bad("callback %d had not run when wait_all returned", k);
    if (failures == f0)
        printf("rank %d: tokens ok\n", rank);
}

static void basics_results(shmesh_mesh *m)
{
    int f0 = failures;
    static const int64_t sizes[] = {1, 1000, 300000};
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        int64_t n = sizes[c];
        float *x = xcalloc((size_t)n, sizeof *x);
        fill_random(x, (size_t)n, 100 + (uint64_t)rank * 31 + c);
        size_t bytes = (size_t)n * sizeof(float);
        float *sa = xcalloc((size_t)n, sizeof(float)), *sb = xcalloc((size_t)n, sizeof(float));
        float *ga = xcalloc((size_t)n * world, sizeof(float)),
              *gb = xcalloc((size_t)n * world, sizeof(float));
        float *pa = xcalloc((size_t)n, sizeof(float)), *pb = xcalloc((size_t)n, sizeof(float));
        shmesh_array in = arr1(x, SHMESH_FLOAT32, n);
        shmesh_array sum_a = arr1(sa, SHMESH_FLOAT32, n), sum_b = arr1(sb, SHMESH_FLOAT32, n);
        shmesh_array gat_a = {.data = ga, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, n}},
                     gat_b = {.data = gb, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, n}};
        shmesh_array per_a = arr1(pa, SHMESH_FLOAT32, n), per_b = arr1(pb, SHMESH_FLOAT32, n);
        int(*perm)[2] = xcalloc((size_t)world, sizeof *perm);
        for (int i = 0; i < world; i++) {
            perm[i][0] = i;
            perm[i][1] = (i + 1) % world;
        }
        shmesh_token t[3];
        MUST(shmesh_psum_async(m, "i", NULL, &in, &sum_a, &t[0]));
        MUST(shmesh_all_gather_async(m, "i", NULL, 0, false, &in, &gat_a, &t[1]));
        MUST(shmesh_ppermute_async(m, "i", (const int(*)[2])perm, world, &in, &per_a, &t[2]));
        /* Blocking calls after async ones: the same stream, in order. */
        MUST(shmesh_psum(m, "i", NULL, &in, &sum_b));
        int done = shmesh_token_test(t[0]);
        if (done != 1)
            bad("an async psum dispatched before a blocking psum is not done after it (%d)",
                done);
        MUST(shmesh_all_gather(m, "i", NULL, 0, false, &in, &gat_b));
        MUST(shmesh_ppermute(m, "i", (const int(*)[2])perm, world, &in, &per_b));
        MUST(shmesh_token_wait_all(3, t));
        char what[64];
        snprintf(what, sizeof what, "psum of %" PRId64, n);
        same_bits(what, sa, sb, bytes);
        snprintf(what, sizeof what, "all_gather of %" PRId64, n);
        same_bits(what, ga, gb, bytes * (size_t)world);
        snprintf(what, sizeof what, "ppermute of %" PRId64, n);
        same_bits(what, pa, pb, bytes);
        /* and the gather holds every rank's data. */
        for (int r = 0; r < world; r++) {
            float *want = xcalloc((size_t)n, sizeof *want);
            fill_random(want, (size_t)n, 100 + (uint64_t)r * 31 + c);
            if (memcmp(ga + (size_t)r * (size_t)n, want, bytes))
                bad("all_gather_async of %" PRId64 ": rank %d's block is wrong", n, r);
            if (r == (rank + world - 1) % world && memcmp(pa, want, bytes))
                bad("ppermute_async of %" PRId64 ": not rank %d's data", n, r);
            free(want);
        }
        free(perm);
        free(x);
        free(sa);
        free(sb);
        free(ga);
        free(gb);
        free(pa);
        free(pb);
    }
    /* Heap buffers (zero-copy): async equals blocking. */
    int64_t n = 65536;
    float *hx = shmesh_alloc(ctx, (size_t)n * sizeof(float));
    float *ha = shmesh_alloc(ctx, (size_t)n * sizeof(float));
    float *hb = xcalloc((size_t)n, sizeof(float));
    if (!hx || !ha) {
        bad("shmesh_alloc of %" PRId64 " floats: %s", n, why());
    } else {
        fill_random(hx, (size_t)n, 900 + (uint64_t)rank);
        shmesh_array in = arr1(hx, SHMESH_FLOAT32, n), oa = arr1(ha, SHMESH_FLOAT32, n),
                     ob = arr1(hb, SHMESH_FLOAT32, n);
        shmesh_token t;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &oa, &t));
        MUST(shmesh_token_wait(t));
        MUST(shmesh_psum(m, "i", NULL, &in, &ob));
        same_bits("psum of heap buffers", ha, hb, (size_t)n * sizeof(float));
    }
    shmesh_free(ctx, hx);
    shmesh_free(ctx, ha);
    free(hb);
    if (failures == f0)
        printf("rank %d: async results equal blocking ones\n", rank);
}

/* Every other async form against its blocking form, on the same inputs. */
static void basics_all_ops(shmesh_mesh *m)
{
    int f0 = failures;
    const int64_t w = world, n = 4 * w;
    float x[4 * 64];
    fill_random(x, (size_t)n, 500 + (uint64_t)rank);
    float a[4 * 64], b[4 * 64];
    int32_t ia[4 * 64], ib[4 * 64];
    shmesh_array in = arr1(x, SHMESH_FLOAT32, n);
    shmesh_array in2 = {.data = x, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    int *rev = xcalloc((size_t)w, sizeof *rev);
    for (int i = 0; i < w; i++)
        rev[i] = (int)w - 1 - i;
    for (int op = 0; op < 10; op++) {
        memset(a, 0x5a, sizeof a);
        memset(b, 0x5a, sizeof b);
        memset(ia, 0x5a, sizeof ia);
        memset(ib, 0x5a, sizeof ib);
        shmesh_array oa = arr1(a, SHMESH_FLOAT32, n), ob = arr1(b, SHMESH_FLOAT32, n);
        shmesh_array qa = arr1(ia, SHMESH_INT32, n), qb = arr1(ib, SHMESH_INT32, n);
        shmesh_token t = {NULL, 0};
        const char *name = "?";
        int rca = 0, rcb = 0;
        switch (op) {
        case 0:
            name = "pmax";
            rca = shmesh_pmax_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmax(m, "i", NULL, &in, &ob);
            break;
        case 1:
            name = "pmin";
            rca = shmesh_pmin_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmin(m, "i", NULL, &in, &ob);
            break;
        case 2:
            name = "pmean";
            rca = shmesh_pmean_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmean(m, "i", NULL, &in, &ob);
            break;
        case 3:
            name = "pargmax";
            rca = shmesh_pargmax_async(m, "i", NULL, &in, &qa, &t);
            rcb = shmesh_pargmax(m, "i", NULL, &in, &qb);
            break;
        case 4:
            name = "pargmin";
            rca = shmesh_pargmin_async(m, "i", NULL, &in, &qa, &t);
            rcb = shmesh_pargmin(m, "i", NULL, &in, &qb);
            break;
        case 5:
            name = "psum_scatter";
            oa.shape[0] = ob.shape[0] = 4;
            rca = shmesh_psum_scatter_async(m, "i", NULL, 0, true, &in, &oa, &t);
            rcb = shmesh_psum_scatter(m, "i", NULL, 0, true, &in, &ob);
            break;
        case 6:
            name = "all_to_all";
            rca = shmesh_all_to_all_async(m, "i", NULL, 0, 0, true, &in, &oa, &t);
            rcb = shmesh_all_to_all(m, "i", NULL, 0, 0, true, &in, &ob);
            break;
        case 7: {
            name = "pswapaxes";
            shmesh_array a2 = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}}, b2 = {.data = b, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
            rca = shmesh_pswapaxes_async(m, "i", NULL, 0, &in2, &a2, &t);
            rcb = shmesh_pswapaxes(m, "i", NULL, 0, &in2, &b2);
            break;
        }
        case 8:
            name = "pshuffle";
            rca = shmesh_pshuffle_async(m, "i", rev, &in, &oa, &t);
            rcb = shmesh_pshuffle(m, "i", rev, &in, &ob);
            break;
        case 9:
            name = "pbroadcast";
            rca = shmesh_pbroadcast_async(m, "i", (int)w - 1, &in, &oa, &t);
            rcb = shmesh_pbroadcast(m, "i", (int)w - 1, &in, &ob);
            break;
        }
        if (rca || rcb) {
            bad("%s: async -> %s, blocking -> %s: %s", name, shmesh_error_name(rca),
                shmesh_error_name(rcb), why());
            break;
        }
        /* The blocking call came later in the stream: the async one is done. */
        if (shmesh_token_test(t) != 1)
            bad("%s_async is not done after the blocking %s that followed it", name, name);
        MUST(shmesh_token_wait(t));
        if (memcmp(a, b, sizeof a) || memcmp(ia, ib, sizeof ia))
            bad("%s: the async result differs from the blocking one", name);
    }
    /* world_sum, in place. */
    int64_t wa[5], wb[5];
    for (int i = 0; i < 5; i++)
        wa[i] = wb[i] = (int64_t)(rank + 1) * (i + 1);
    shmesh_token t;
    MUST(shmesh_world_sum_async(ctx, wa, 5, SHMESH_INT64, &t));
    MUST(shmesh_world_sum(ctx, wb, 5, SHMESH_INT64));
    MUST(shmesh_token_wait(t));
    if (memcmp(wa, wb, sizeof wa) || wa[4] != 5 * w * (w + 1) / 2)
        bad("world_sum_async: %" PRId64 ", blocking %" PRId64 ", expected %" PRId64, wa[4], wb[4],
            5 * w * (w + 1) / 2);
    /* ragged_all_to_all: row i of this rank's operand goes to rank i, at
     * row `rank` there. */
    int32_t io[64], ss[64], oo[64], rs[64];
    for (int i = 0; i < w; i++) {
        io[i] = i;
        ss[i] = 1;
        oo[i] = rank;
        rs[i] = 1;
    }
    shmesh_array op = {.data = x, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    shmesh_array ra = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}}, rb = {.data = b, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    shmesh_array aio = arr1(io, SHMESH_INT32, w), ass = arr1(ss, SHMESH_INT32, w),
                 aoo = arr1(oo, SHMESH_INT32, w), ars = arr1(rs, SHMESH_INT32, w);
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    MUST(shmesh_ragged_all_to_all_async(m, "i", NULL, &op, &ra, &aio, &ass, &aoo, &ars, &t));
    MUST(shmesh_ragged_all_to_all(m, "i", NULL, &op, &rb, &aio, &ass, &aoo, &ars));
    int rc = shmesh_token_wait(t);
    if (rc) /* refused alike on every rank: the job goes on */
        bad("ragged_all_to_all_async -> %s where the blocking call succeeded: %s",
            shmesh_error_name(rc), why());
    else if (memcmp(a, b, sizeof a))
        bad("ragged_all_to_all: the async result differs from the blocking one");
    free(rev);
    if (failures == f0)
        printf("rank %d: every async form equals its blocking form\n", rank);
}

/* The runtime token is per thread: a thread that takes the context over
 * and has dispatched nothing has a done runtime token, whatever the
 * context's stream still holds; once it dispatches, its token covers that. */
struct handoff {
    shmesh_mesh *m;
    struct gate *g; /* the main thread's callback, held until this thread dispatched */
    int before, after_dispatch;
    int32_t v, sum;
    int rc;
};

static void *handoff_thread(void *arg)
{
    struct handoff *h = arg;
    h->before = shmesh_token_test(shmesh_runtime_token(ctx));
    shmesh_array in = {.data = &h->v, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}}, out = {.data = &h->sum, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
    shmesh_token t;
    h->rc = shmesh_psum_async(h->m, "i", NULL, &in, &out, &t);
    shmesh_token rt = shmesh_runtime_token(ctx);
    h->after_dispatch = rt.ctx == ctx && rt.seq == t.seq;
    atomic_store(&h->g->open, 1);
    if (!h->rc)
        h->rc = shmesh_token_wait(rt);
    return NULL;
}

static void basics_threads(shmesh_mesh *m)
{
    int f0 = failures;
    struct gate s = {0};
    shmesh_token a;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, gate_cb, &s, &a));
    struct handoff h = {.m = m, .g = &s, .v = rank + 1};
    pthread_t th;
    if (pthread_create(&th, NULL, handoff_thread, &h)) {
        bad("pthread_create failed");
        return;
    }
    pthread_join(th, NULL);
    gate_check(&s, "runtime token per thread");
    if (h.before != 1)
        bad("a thread that dispatched nothing: its runtime token test -> %d, expected 1 (done) "
            "while another thread's callback is still held", h.before);
    if (!h.after_dispatch)
        bad("after a dispatch, the thread's runtime token is not that dispatch's token");
    if (h.rc)
        bad("the other thread's psum -> %s", shmesh_error_name(h.rc));
    else if (h.sum != world * (world + 1) / 2)
        bad("the other thread's psum = %d, expected %d", h.sum, world * (world + 1) / 2);
    if (!atomic_load(&s.done) || shmesh_token_test(a) != 1)
        bad("the psum the other thread dispatched after the callback finished first");
    if (failures == f0)
        printf("rank %d: runtime tokens per thread ok\n", rank);
}

static void basics_order(shmesh_mesh *m)
{
    int f0 = failures;
    /* A callback after an async psum sees its output (no effect, and an
     * unordered effect). */
    shmesh_effect *u;
    MUST(shmesh_effect_create(ctx, "unord", SHMESH_EFFECT_UNORDERED, &u));
    shmesh_effect *effs[2] = {NULL, u};
    for (int j = 0; j < 2; j++) {
        enum { N = 2048 };
        static int32_t in_[N], out_[N];
        for (int i = 0; i < N; i++) {
            in_[i] = rank + i + j;
            out_[i] = -1;
        }
        int32_t want0 = 0;
        for (int r = 0; r < world; r++)
            want0 += r + j;
        struct reader rd = {.out = out_, .n = N, .want0 = want0};
        shmesh_array in = arr1(in_, SHMESH_INT32, N), out = arr1(out_, SHMESH_INT32, N);
        shmesh_token t;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, NULL));
        MUST(shmesh_callback(ctx, effs[j], SHMESH_PLACE_SELF, reader_cb, &rd, &t));
        MUST(shmesh_token_wait(t));
        if (!atomic_load(&rd.ran) || !atomic_load(&rd.ok))
            bad("a callback (%s) dispatched after an async psum did not see its output",
                j ? "unordered effect" : "no effect");
    }
    /* A blocking call waits for the callback dispatched before it. */
    struct sleeper s = {.us = 100000};
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &s, NULL));
    MUST(shmesh_barrier(ctx));
    if (!atomic_load(&s.done))
        bad("a blocking barrier returned before the callback dispatched before it ran");
    /* Every device, no effect: once here (one device per rank). */
    struct sleeper s2 = {.us = 1000};
    shmesh_token t;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_ALL, sleep_cb, &s2, &t));
    MUST(shmesh_token_wait(t));
    if (!atomic_load(&s2.done))
        bad("a callback on every device did not run here");
    MUST(shmesh_effects_barrier(ctx));
    if (failures == f0)
        printf("rank %d: program order ok\n", rank);

    static struct reentry re;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, reentry_cb, &re, &re.own));
    atomic_store(&re.published, 1);
    int64_t t0 = now_ns();
    MUST(shmesh_token_wait(re.own));
    static const char *const calls[] = {"shmesh_barrier", "shmesh_barrier_async",
                                        "shmesh_token_wait(its own token)"};
    for (int i = 0; i < 3; i++) {
        printf("rank %d: in a callback, %s -> %s: %s\n", rank, calls[i],
               shmesh_error_name(re.rc[i]), re.msg[i]);
        if (re.rc[i] != SHMESH_ERR_INVALID)
            bad("in a callback, %s returned %s, expected SHMESH_ERR_INVALID", calls[i],
                shmesh_error_name(re.rc[i]));
        else if (!strstr(re.msg[i], "callback"))
            bad("in a callback, %s: the explanation does not say why: '%s'", calls[i],
                re.msg[i]);
    }
    /* Refused, not waited: a wait here would be for ever (no SHMESH_TIMEOUT). */
    if (ms_since(t0) > 20000)
        bad("the callback calling the library took %.0f ms", ms_since(t0));
    MUST(shmesh_barrier(ctx)); /* still usable */
}

/* Work that fails alike on every rank (a ragged_all_to_all whose recv_sizes
 * disagree with what the peer sends) fails its own token only: the work
 * around it succeeds, wait_all reports it, the context stays usable. */
static void basics_failed_work(shmesh_mesh *m)
{
    if (world < 2)
        return;
    int f0 = failures;
    int32_t x[4] = {rank, rank, rank, rank}, y[4], z[4];
    shmesh_array xi = arr1(x, SHMESH_INT32, 4), yo = arr1(y, SHMESH_INT32, 4),
                 zo = arr1(z, SHMESH_INT32, 4);
    float op[64 * 4], out[64 * 4];
    fill_random(op, 4 * (size_t)world, 77);
    int32_t io[64], ss[64], oo[64], rs[64];
    for (int i = 0; i < world; i++) {
        io[i] = i;
        ss[i] = 1;
        oo[i] = rank;
        rs[i] = 1;
    }
    if (rank == 0)
        rs[1] = 2; /* rank 1 sends one row */
    shmesh_array aop = {.data = op, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}},
                 aout = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}};
    shmesh_array aio = arr1(io, SHMESH_INT32, world), ass = arr1(ss, SHMESH_INT32, world),
                 aoo = arr1(oo, SHMESH_INT32, world), ars = arr1(rs, SHMESH_INT32, world);
    shmesh_token t[3];
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &yo, &t[0]));
    MUST(shmesh_ragged_all_to_all_async(m, "i", NULL, &aop, &aout, &aio, &ass, &aoo, &ars, &t[1]));
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &zo, &t[2]));
    int rc = shmesh_token_wait_all(3, t);
    printf("rank %d: wait_all over a failing ragged_all_to_all -> %s: %s\n", rank,
           shmesh_error_name(rc), rc ? why() : "");
    if (rc != SHMESH_ERR_INVALID)
        bad("wait_all over a failing ragged_all_to_all -> %s, expected SHMESH_ERR_INVALID",
            shmesh_error_name(rc));
    else if (!strstr(why(), "recv_sizes"))
        bad("wait_all: the explanation does not name recv_sizes: %s", why());
    int t0 = shmesh_token_test(t[0]), t1 = shmesh_token_test(t[1]), t2 = shmesh_token_test(t[2]);
    if (t0 != 1 || t1 != SHMESH_ERR_INVALID || t2 != 1)
        bad("token_test of psum, failed ragged, psum -> %d, %d, %d; expected 1, %d, 1", t0, t1, t2,
            SHMESH_ERR_INVALID);
    int want = world * (world - 1) / 2;
    if (y[0] != want || z[3] != want)
        bad("the psums around the failed call gave %d and %d, expected %d", y[0], z[3], want);
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_barrier(ctx)); /* usable */
    if (failures == f0)
        printf("rank %d: failed work fails its own token only\n", rank);
}

static void basics_refusals(shmesh_mesh *m)
{
    shmesh_effect *e = NULL;
    char longname[SHMESH_MAX_EFFECT_NAME + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    expect("effect_create(NULL name)", shmesh_effect_create(ctx, NULL, SHMESH_EFFECT_ORDERED, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(empty name)", shmesh_effect_create(ctx, "", SHMESH_EFFECT_ORDERED, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(long name)",
           shmesh_effect_create(ctx, longname, SHMESH_EFFECT_ORDERED, &e), SHMESH_ERR_INVALID);
    expect_in_message("effect_create(long name)", "32 characters");
    if (strstr(why(), "got \"\""))
        bad("effect_create(long name): the message says the name found was empty: %s", why());
    expect("effect_create(kind 7)", shmesh_effect_create(ctx, "k", (shmesh_effect_kind)7, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(NULL out)", shmesh_effect_create(ctx, "k", SHMESH_EFFECT_ORDERED, NULL),
           SHMESH_ERR_INVALID);

    shmesh_token t = {ctx, 999};
    expect("callback(NULL fn)", shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, NULL, NULL, &t),
           SHMESH_ERR_INVALID);
    if (!token_is_none(t))
        bad("a refused callback left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    t = (shmesh_token){ctx, 999};
    expect("callback(placement -5)", shmesh_callback(ctx, NULL, -5, noop_cb, NULL, &t),
           SHMESH_ERR_INVALID);
    expect_in_message("callback(placement -5)", "-5");
    if (!token_is_none(t))
        bad("a refused callback left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    char found[16];
    snprintf(found, sizeof found, "%d", ndev);
    expect("callback(placement ndev)", shmesh_callback(ctx, NULL, ndev, noop_cb, NULL, &t),
           SHMESH_ERR_INVALID);
    expect_in_message("callback(placement ndev)", found);

    /* An async call with a wrong output shape: refused at once. */
    float v[4] = {0}, w[3], w4[4];
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 4), out = arr1(w, SHMESH_FLOAT32, 3),
                 out4 = arr1(w4, SHMESH_FLOAT32, 4);
    t = (shmesh_token){ctx, 999};
    expect("psum_async(out of 3 for 4)", shmesh_psum_async(m, "i", NULL, &in, &out, &t),
           SHMESH_ERR_INVALID);
    if (!token_is_none(t))
        bad("a refused psum_async left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    expect("psum_async(axis 'nope')", shmesh_psum_async(m, "nope", NULL, &in, &out4, &t),
           SHMESH_ERR_INVALID);

    /* Tokens that name nothing dispatched, and bad token lists: refused,
     * never a wait.  Fifty times: a refusal that first waited one slice
     * (0.1 s, 1 s with io_uring) would take 15 s or more, where refusals
     * take microseconds, however busy the machine. */
    shmesh_token forged = {ctx, (uint64_t)1 << 40};
    int64_t t0 = now_ns();
    expect("token_wait(forged)", shmesh_token_wait(forged), SHMESH_ERR_INVALID);
    expect("token_test(forged)", shmesh_token_test(forged), SHMESH_ERR_INVALID);
    shmesh_token two[2] = {{NULL, 0}, forged};
    expect("token_wait_all(forged)", shmesh_token_wait_all(2, two), SHMESH_ERR_INVALID);
    for (int i = 1; i < 50; i++)
        if (shmesh_token_wait(forged) != SHMESH_ERR_INVALID ||
            shmesh_token_test(forged) != SHMESH_ERR_INVALID ||
            shmesh_token_wait_all(2, two) != SHMESH_ERR_INVALID) {
            bad("forged tokens: refused once, then not in round %d", i);
            break;
        }
    if (ms_since(t0) > 5000)
        bad("refusing forged tokens 50 times took %.0f ms", ms_since(t0));
    /* Lists naming no context: explained by shmesh_last_error(NULL). */
    int index = -7;
    for (int i = 0; i < 3; i++) {
        static const char *const what[] = {"token_wait_all(-1)", "token_wait_any(0)",
                                           "token_wait_any(NULL index)"};
        static const char *const needle[] = {"n = -1", "n = 0", "index NULL"};
        int rc = i == 0   ? shmesh_token_wait_all(-1, two)
                 : i == 1 ? shmesh_token_wait_any(0, two, &index)
                          : shmesh_token_wait_any(1, two, NULL);
        printf("rank %d: %s -> %s: %s\n", rank, what[i], shmesh_error_name(rc),
               shmesh_last_error(NULL));
        if (rc != SHMESH_ERR_INVALID)
            bad("%s -> %s, expected SHMESH_ERR_INVALID", what[i], shmesh_error_name(rc));
        else if (!strstr(shmesh_last_error(NULL), needle[i]))
            bad("%s: shmesh_last_error(NULL) does not say '%s': %s", what[i], needle[i],
                shmesh_last_error(NULL));
    }
    expect("token_wait_all(0, NULL)", shmesh_token_wait_all(0, NULL), 0);
    expect("token_wait_any(a done token)", shmesh_token_wait_any(1, two, &index), 0);
    if (index != 0)
        bad("wait_any over a done token: index %d, expected 0", index);

    /* Effects up to the limit (two exist: "ord" and "unord"), then one more. */
    int made = 2;
    for (; made < SHMESH_MAX_EFFECTS; made++) {
        char name[16];
        snprintf(name, sizeof name, "e%d", made);
        MUST(shmesh_effect_create(ctx, name, (shmesh_effect_kind)(made % 3), &e));
    }
    e = NULL;
    expect("effect_create(one too many)",
           shmesh_effect_create(ctx, "extra", SHMESH_EFFECT_ORDERED, &e), SHMESH_ERR_INVALID);
    char limit[16];
    snprintf(limit, sizeof limit, "%d", SHMESH_MAX_EFFECTS);
    expect_in_message("effect_create(one too many)", limit);

    /* Still usable. */
    MUST(shmesh_barrier(ctx));
    shmesh_token bt;
    MUST(shmesh_barrier_async(ctx, &bt));
    MUST(shmesh_token_wait(bt));
    printf("rank %d: errors: job usable\n", rank);
}

/* A mesh may be freed, or popped, once the work is dispatched. */
static void basics_mesh_lifetime(void)
{
    int f0 = failures;
    int32_t v[8], w1[8], w2[8];
    for (int i = 0; i < 8; i++)
        v[i] = rank * 10 + i;
    shmesh_array in = arr1(v, SHMESH_INT32, 8), o1 = arr1(w1, SHMESH_INT32, 8),
                 o2 = arr1(w2, SHMESH_INT32, 8);
    shmesh_mesh *m1 = line_mesh(), *m2 = line_mesh(); /* collective: before the gate */
    struct gate s = {0}; /* the work waits behind it */
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, gate_cb, &s, NULL));
    shmesh_token t1, t2;
    MUST(shmesh_psum_async(m1, "i", NULL, &in, &o1, &t1));
    shmesh_mesh_destroy(m1);
    MUST(shmesh_mesh_push(m2));
    MUST(shmesh_psum_async(NULL, "i", NULL, &in, &o2, &t2));
    MUST(shmesh_mesh_pop(m2));
    shmesh_mesh_destroy(m2);
    if (shmesh_token_test(t1) != 0)
        bad("the psum behind a held callback was done at once");
    atomic_store(&s.open, 1);
    MUST(shmesh_token_wait(t1));
    gate_check(&s, "meshes freed after dispatch");
    MUST(shmesh_token_wait(t2));
    for (int i = 0; i < 8; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want += r * 10 + i;
        if (w1[i] != want || w2[i] != want) {
            bad("psums over a freed / popped mesh: element %d = %d, %d; expected %d", i, w1[i],
                w2[i], want);
            break;
        }
    }
    if (failures == f0)
        printf("rank %d: meshes freed after dispatch ok\n", rank);
}

/* Thousands of async psums in flight at once, each with its own buffers. */
static void basics_flood(shmesh_mesh *m)
{
    int f0 = failures;
    enum { N = 3000 };
    int32_t *in = xcalloc(N, sizeof *in), *out = xcalloc(N, sizeof *out);
    shmesh_token *t = xcalloc(N, sizeof *t);
    for (int i = 0; i < N; i++) {
        in[i] = i + rank;
        out[i] = -1;
        shmesh_array a = {.data = &in[i], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}}, b = {.data = &out[i], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
        MUST(shmesh_psum_async(m, "i", NULL, &a, &b, &t[i]));
    }
    MUST(shmesh_token_wait_all(N, t));
    for (int i = 0; i < N; i++)
        if (out[i] != world * i + world * (world - 1) / 2) {
            bad("psum %d of %d in flight = %d, expected %d", i, N, out[i],
                world * i + world * (world - 1) / 2);
            break;
        }
    free(in);
    free(out);
    free(t);
    if (failures == f0)
        printf("rank %d: %d psums in flight ok\n", rank, N);
}

static int mode_basics(void)
{
    shmesh_mesh *m = line_mesh();
    basics_tokens(m);
    basics_results(m);
    basics_all_ops(m);
    basics_threads(m);
    basics_mesh_lifetime();
    basics_flood(m);
    basics_order(m);
    basics_failed_work(m);
    basics_refusals(m);
    MUST(shmesh_effects_barrier(ctx));
    shmesh_mesh_destroy(m);
    printf("rank %d: basics %s\n", rank, failures ? "FAILED" : "ok");
    return failures ? 4 : 0;
}

/* ------------------------------------------------------------------------
 * devices: several devices per rank.
 * ---------------------------------------------------------------------- */

static atomic_int device_seen[MAXDEV];

static void device_cb(void *arg, int device)
{
    (void)arg;
    if (device >= 0 && device < MAXDEV)
        atomic_fetch_add(&device_seen[device], 1);
}

static int mode_devices(void)
{
    if (ndev > MAXDEV || nlocal > 16)
        return 2;
    shmesh_mesh *m = line_mesh();
    int ids[16];
    MUST(shmesh_mesh_local_devices(m, ids, 16));
    enum { N = 1000 };
    static float x[16][N], a[16][N], b[16][N], ga[16][64 * N], gb[16][64 * N];
    shmesh_array in[16], oa[16], ob[16], gin[16], gxa[16], gxb[16];
    for (int l = 0; l < nlocal; l++) {
        fill_random(x[l], N, 300 + (uint64_t)ids[l]);
        in[l] = arr1(x[l], SHMESH_FLOAT32, N);
        oa[l] = arr1(a[l], SHMESH_FLOAT32, N);
        ob[l] = arr1(b[l], SHMESH_FLOAT32, N);
        gin[l] = in[l];
        gxa[l] = (shmesh_array){.data = ga[l], .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {ndev, N}};
        gxb[l] = (shmesh_array){.data = gb[l], .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {ndev, N}};
    }
    if (ndev > 64)
        return 2;
    shmesh_token t[2];
    MUST(shmesh_psum_async(m, "i", NULL, in, oa, &t[0]));
    MUST(shmesh_all_gather_async(m, "i", NULL, 0, false, gin, gxa, &t[1]));
    MUST(shmesh_psum(m, "i", NULL, in, ob));
    MUST(shmesh_all_gather(m, "i", NULL, 0, false, gin, gxb));
    MUST(shmesh_token_wait_all(2, t));
    for (int l = 0; l < nlocal; l++) {
        if (memcmp(a[l], b[l], sizeof a[l]))
            bad("device %d: psum_async differs from psum", ids[l]);
        if (memcmp(ga[l], gb[l], (size_t)ndev * N * sizeof(float)))
            bad("device %d: all_gather_async differs from all_gather", ids[l]);
    }
    /* Callbacks: every device runs its part once, with its id; this rank's
     * devices alone; a device of this rank. */
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_ALL, device_cb, NULL, NULL));
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, device_cb, NULL, NULL));
    MUST(shmesh_callback(ctx, NULL, ndev - 1, device_cb, NULL, NULL));
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_token_wait(shmesh_runtime_token(ctx)));
    for (int d = 0; d < ndev; d++) {
        int want = shmesh_device_process(ctx, d) == rank ? 2 : 0;
        if (d == ndev - 1 && shmesh_device_process(ctx, d) == rank)
            want++;
        if (atomic_load(&device_seen[d]) != want)
            bad("device %d's callbacks ran %d times here, expected %d", d,
                atomic_load(&device_seen[d]), want);
    }
    shmesh_mesh_destroy(m);
    if (!failures)
        printf("rank %d: %d local devices: async equals blocking, callbacks per device ok\n",
               rank, nlocal);
    return failures ? 4 : 0;
}

/* ------------------------------------------------------------------------
 * finalize-pending: shmesh_finalize with work still queued: it comes after
 * that work in program order.
 * ---------------------------------------------------------------------- */

static struct sleeper pending_cb;
static int32_t pending_in[64], pending_out[64];

static int mode_finalize_pending(void)
{
    shmesh_mesh *m = line_mesh();
    pending_cb.us = 200000;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &pending_cb, NULL));
    for (int i = 0; i < 64; i++)
        pending_in[i] = rank + i;
    shmesh_array in = arr1(pending_in, SHMESH_INT32, 64), out = arr1(pending_out, SHMESH_INT32, 64);
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, NULL));
    shmesh_mesh_destroy(m);
    int64_t t0 = now_ns();
    int rc = shmesh_finalize(ctx);
    double ms = ms_since(t0);
    ctx = NULL;
    if (rc)
        bad("shmesh_finalize with work queued -> %s: %s", shmesh_error_name(rc),
            shmesh_last_error(NULL));
    if (!atomic_load(&pending_cb.done))
        bad("shmesh_finalize returned before the callback dispatched before it ran");
    for (int i = 0; i < 64; i++)
        if (pending_out[i] != world * i + world * (world - 1) / 2) {
            bad("the psum queued before shmesh_finalize: element %d = %d, expected %d", i,
                pending_out[i], world * i + world * (world - 1) / 2);
            break;
        }
    if (!failures)
        printf("rank %d: finalize after queued work ok (%.0f ms)\n", rank, ms);
    return failures ? 4 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    main_thread = pthread_self();
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s basics|ordered-log [N]|shardable SEED [POINTS]|ordered-all|"
                "peer-death WHAT|timeout WHAT|mismatch WHAT|effect-mismatch name|kind|"
                "callback-mismatch WHAT|devices|"
                "finalize-pending\n",
                argv[0]);
        return 2;
    }
    int rc = shmesh_init(&ctx);
    if (rc) {
        printf("rank ?: FAIL: shmesh_init -> %s: %s\n", shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    ndev = shmesh_device_count(ctx);
    nlocal = shmesh_local_device_count(ctx);
    const char *mode = argv[1];
    if (!strcmp(mode, "basics"))
        rc = mode_basics();
    else if (!strcmp(mode, "ordered-log"))
        rc = mode_ordered_log(argc, argv);
    else if (!strcmp(mode, "shardable")) {
        board_setup();
        rc = mode_shardable(argc, argv);
    } else if (!strcmp(mode, "ordered-all"))
        rc = mode_ordered_all();
    else if (!strcmp(mode, "peer-death"))
        rc = mode_peer_death(argc, argv);
    else if (!strcmp(mode, "timeout"))
        rc = mode_timeout(argc, argv);
    else if (!strcmp(mode, "mismatch"))
        rc = mode_mismatch(argc, argv);
    else if (!strcmp(mode, "effect-mismatch"))
        rc = mode_effect_mismatch(argc, argv);
    else if (!strcmp(mode, "callback-mismatch"))
        rc = mode_callback_mismatch(argc, argv);
    else if (!strcmp(mode, "devices"))
        rc = mode_devices();
    else if (!strcmp(mode, "finalize-pending")) /* finalizes itself */
        return mode_finalize_pending();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    if (rc > 0)
        return rc; /* a failed rank exits without finalize: the launcher stops the rest */
    bool poisoned = rc < 0;
    rc = shmesh_finalize(ctx);
    if (rc && !poisoned) {
        printf("rank %d: FAIL: shmesh_finalize -> %s: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 3;
    }
    return 0;
}
