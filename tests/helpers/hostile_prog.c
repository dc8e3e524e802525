/* shmesh-test-hostile SCENARIO [ITERATIONS]: ranks run checked collectives
 * while a hostile process scribbles over their segment.
 *
 * Before it joins, rank 0 forks a scribbler: a process of the same user that
 * is no rank, which maps the job's segment by its name (SHMESH_SEGMENT, still
 * there since rank 0 has not joined) and reads the honest layout from the
 * header.  The scribbler then writes what the scenario says, once (between
 * two iterations of rank 0, which waits for it) or over and over until rank
 * 0 is done.  Its values come from a fixed seed: a run scribbles the same
 * fields with the same values every time (the interleaving with the ranks is
 * the scheduler's).
 *
 * Three scenarios forge the words of progress that tokens and effects rest
 * on, at one moment rank 0 chooses (iteration GO_AT runs their trap instead
 * of the checked collectives):
 *   done-high    rank 0's `done` (how much of its dispatch queue finished)
 *                set to 2^40 while its token waits for a psum held up
 *                behind a callback: the wait must not succeed before the
 *                psum ran
 *   point-placed rank 0's point of an ORDERED effect set to 2^40 while rank
 *                1 waits for rank 0 to run the callback placed on rank 0's
 *                device
 *   point-barrier the same while rank 1 is in shmesh_effects_barrier, waiting
 *                for rank 0's part of an ORDERED_SHARDABLE point
 * Each must end in SHMESH_ERR_BAD_SEGMENT on every rank.  A fourth trap:
 *   left-reading rank 0 leaves a single-copy all_gather early (rank 1's
 *                state forged to FINALIZED while rank 0 waits for its
 *                status) and reuses its input while rank 1, stopped in the
 *                middle of reading it, has not finished: rank 1 must not
 *                return what it read (hit_left_reading says how)
 *
 * Every rank runs, per iteration: an 8-byte-per-element psum on private
 * memory (staged), a psum of 128 KiB between shmesh_alloc buffers (zero
 * copy), a 64 KiB psum on private memory (single copy where the kernel
 * allows it), a psum of each rank alone (axis_index_groups) and an
 * all_gather; each result is checked.  The first error
 * ends the loop.  Each rank prints one line:
 *
 *   hostile rank R: end ok after N iterations
 *   hostile rank R: end SHMESH_ERR_... after N iterations: message
 *   hostile rank R: WRONG ...        (and exits 3)
 *
 * and exits 0 otherwise, whether or not its finalize succeeded.  A rank that
 * faults, hangs or overruns a buffer never gets to its line. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/desc.h"
#include "shm/layout.h"
#include "shmesh.h"

#define GO_AT 10          /* rank 0 lets the scribbler go after this many iterations */
#define ZC_COUNT 32768    /* int32: 128 KiB, zero copy */
#define CMA_COUNT 16384   /* int32: 64 KiB, single copy where allowed */
#define LEFT_COUNT (16 << 20) /* int32: 64 MiB, the all_gather of left-reading */
#define SMALL_COUNT 8     /* int64: 64 bytes, staged */
#define GATHER_COUNT 4

/* ------------------------------------------------------------------------
 * The scribbler
 * ---------------------------------------------------------------------- */

struct target {
    unsigned char *base;
    struct seg_header h; /* the honest layout, read when it mapped the segment */
    uint64_t rng;
};

static uint64_t next(struct target *t)
{
    t->rng ^= t->rng << 13;
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    return t->rng;
}

static struct seg_ctrl *ctrl(const struct target *t, int r)
{
    return (struct seg_ctrl *)(t->base + t->h.ctrl_offset + (uint64_t)r * t->h.ctrl_stride);
}

static unsigned char *slot(const struct target *t, int r, int b)
{
    return t->base + t->h.slot_offset + (uint64_t)r * t->h.slot_stride +
           (uint64_t)b * t->h.slot_bytes;
}

static void put64(void *p, uint64_t v) { __atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED); }
static void put32(void *p, uint32_t v) { __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELAXED); }

/* Every field of the header an attacher derives a pointer or a length from. */
static void hit_layout(struct target *t)
{
    struct seg_header *h = (struct seg_header *)t->base;
    put32(&h->header_bytes, (uint32_t)next(t));
    put64(&h->total_bytes, next(t));
    put32(&h->world_size, (uint32_t)next(t));
    put32(&h->ctrl_stride, (uint32_t)next(t));
    put64(&h->ctrl_offset, next(t) | (1ull << 62));
    put64(&h->slot_offset, next(t) | (1ull << 62));
    put64(&h->slot_stride, next(t));
    put64(&h->slot_bytes, next(t));
    put64(&h->heap_offset, next(t));
    put64(&h->heap_share, next(t));
}

/* Only the slot size: twice the real one, so that buffers and windows seem
 * larger than they are and overlap the neighbour's. */
static void hit_slot_bytes(struct target *t)
{
    struct seg_header *h = (struct seg_header *)t->base;
    put64(&h->slot_bytes, 2 * t->h.slot_bytes);
}

/* The heap's place and size: a rank that believed them would take private
 * buffers for heap ones, or hand peers offsets outside the segment. */
static void hit_heap(struct target *t)
{
    struct seg_header *h = (struct seg_header *)t->base;
    put64(&h->heap_offset, 0);
    put64(&h->heap_share, 1ull << 46);
    put64(&h->total_bytes, 1ull << 47);
}

static void hit_progress_low(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++)
        put64(&ctrl(t, (int)r)->progress.value, 0);
}

static void hit_progress_high(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++)
        put64(&ctrl(t, (int)r)->progress.value, next(t) | (1ull << 63));
}

static void hit_pid(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++)
        put32(&ctrl(t, (int)r)->pid, r % 2 ? 1 : 0x7ffffff0);
}

static void hit_probe(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++) {
        put64(&ctrl(t, (int)r)->probe_addr, next(t));
        put64(&ctrl(t, (int)r)->probe_value, next(t));
    }
}

static void hit_state(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++)
        put32(&ctrl(t, (int)r)->state, r % 2 ? SEG_RANK_FINALIZED : 77);
}

static void hit_tags(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++)
        put64(slot(t, (int)r, (int)(next(t) & 1)), next(t));
}

/* Heap offsets a member publishes in the handshake (the first 16 bytes of
 * its window's payload): outside the heap, before it, past the segment. */
static void hit_handshake(struct target *t)
{
    const uint64_t bad[] = {t->h.heap_offset - 64, t->h.total_bytes, t->h.total_bytes - 64,
                            UINT64_MAX - 4095, 0, next(t)};
    for (uint32_t r = 0; r < t->h.world_size; r++) {
        unsigned char *p = slot(t, (int)r, (int)(next(t) & 1)) + SEG_SLOT_HDR;
        put64(p, bad[next(t) % 6]);
        put64(p + 8, bad[next(t) % 6]);
    }
}

/* Call hashes and descriptions: a known op, so the description is printed
 * in full, and texts without their terminating NUL. */
static void hit_desc(struct target *t)
{
    for (uint32_t r = 0; r < t->h.world_size; r++) {
        int b = (int)(next(t) & 1);
        unsigned char *s = slot(t, (int)r, b);
        unsigned char *d = s + t->h.slot_bytes - SEG_CALL_DESC_MAX;
        memset(d, 'A', SEG_CALL_DESC_MAX);
        put32(d, OP_PSUM);
        put64(s + 8, next(t));
    }
}

static void hit_abort(struct target *t)
{
    struct seg_header *h = (struct seg_header *)t->base;
    memset(h->abort_reason, 'B', sizeof h->abort_reason);
    h->abort_cause = (int32_t)next(t);
    h->abort_rank = (int32_t)next(t);
    h->abort_code = (int32_t)next(t);
    put32(&h->abort.value, SEG_ABORT_SET);
}

/* A bell rung as its owner would: peers asleep on it look again. */
static void ring(struct seg_progress *p)
{
    __atomic_fetch_add((uint32_t *)&p->bell.value, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &p->bell.value, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* More of rank 0's dispatch queue finished than it ever dispatched. */
static void hit_done(struct target *t)
{
    put64(&ctrl(t, 0)->done.value, 1ull << 40);
    ring(&ctrl(t, 0)->done);
}

/* Rank 0's word for its first effect far past any point dispatched; then,
 * so that rank 0 does not overwrite it with the truth before rank 1 looked,
 * rank 0's callback is held until rank 1 made its next step (its progress
 * moved: it went on) or the job was aborted (20 s at most). */
static void hit_point(struct target *t)
{
    struct seg_ctrl *c1 = ctrl(t, 1);
    uint64_t was = __atomic_load_n((uint64_t *)&c1->progress.value, __ATOMIC_ACQUIRE);
    put64(&ctrl(t, 0)->effect_point[0], 1ull << 40);
    ring(&ctrl(t, 0)->progress);
    struct seg_header *h = (struct seg_header *)t->base;
    for (int i = 0; i < 20000; i++) {
        if (__atomic_load_n((uint32_t *)&h->abort.value, __ATOMIC_ACQUIRE) ||
            __atomic_load_n((uint64_t *)&c1->progress.value, __ATOMIC_ACQUIRE) != was)
            return;
        sleep_ms(1);
    }
}

/* The scribbler's ends of rank 0's pipes, for traps that take two steps. */
static int scribbler_go = -1, scribbler_done = -1;

static uint64_t load64(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE); }
static uint32_t load32(const void *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE); }

static double secs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A rank that leaves a call early while a peer still reads its buffer in
 * place.  Rank 0 is about to start a single-copy all_gather (call `call`,
 * its number from rank 0's progress at go; rank 0 starts it once told).  Rank 1 is stopped (SIGSTOP) as
 * soon as it posted a window of that call, before it read rank 0's input
 * through; rank 0 reads rank 1's, posts its status and waits for rank 1's.
 * Then rank 1's state is forged to FINALIZED: rank 0 leaves the call
 * (rank 1 "already called shmesh_finalize") and writes over its input.
 * Once it has, rank 1's state is put back and rank 1 goes on reading rank
 * 0's input.  It must not return what it read as the all_gather's result.
 * Prints "scribbler: fired" or "scribbler: missed" (rank 1 got past its
 * read before it was stopped). */
static void hit_left_reading(struct target *t)
{
    struct seg_ctrl *c0 = ctrl(t, 0), *c1 = ctrl(t, 1);
    /* Rank 0 waits for this byte before it starts the call. */
    uint64_t call = (load64(&c0->progress.value) >> 32) + 1;
    if (write(scribbler_done, "a", 1) != 1)
        _exit(2);
    pid_t p1 = (pid_t)load32(&c1->pid);
    double t0 = secs_now();
    while (load64(&c1->progress.value) >> 32 < call && secs_now() - t0 < 20)
        sched_yield();
    kill(p1, SIGSTOP);
    uint64_t stopped_at = load64(&c1->progress.value);
    /* Rank 0 blocked in the same call, a window past rank 1. */
    bool waiting = false;
    t0 = secs_now();
    while (!waiting && secs_now() - t0 < 10) {
        uint64_t p0 = load64(&c0->progress.value);
        waiting = p0 >> 32 == call && p0 > stopped_at &&
                  load32(&c0->status.activity) == SEG_ACT_WAIT &&
                  (int32_t)load32(&c0->status.wait_rank) == 1;
        if (!waiting)
            sleep_ms(1);
    }
    if (!waiting) {
        kill(p1, SIGCONT);
        printf("scribbler: missed (rank 1 stopped at call %" PRIu64 " window %" PRIu64
               ", rank 0 at call %" PRIu64 " window %" PRIu64 ")\n",
               stopped_at >> 32, stopped_at & 0xffffffffu, load64(&c0->progress.value) >> 32,
               load64(&c0->progress.value) & 0xffffffffu);
        fflush(stdout);
        return;
    }
    uint32_t state = load32(&c1->state);
    put32(&c1->state, SEG_RANK_FINALIZED);
    ring(&c1->progress);
    struct pollfd p = {scribbler_go, POLLIN, 0};
    char c;
    if (poll(&p, 1, 20000) > 0 && read(scribbler_go, &c, 1) != 1)
        c = 0; /* rank 0 ended: go on all the same */
    put32(&c1->state, state);
    kill(p1, SIGCONT);
    printf("scribbler: fired\n");
    fflush(stdout);
}

/* TRAP: once, like ONCE, when rank 0's trap (below) says go. */
enum when { BEFORE, ONCE, LOOP, AT_EXIT, TRAP };

enum trap { NO_TRAP, TRAP_DONE, TRAP_POINT_PLACED, TRAP_POINT_BARRIER, TRAP_LEFT_READING };

static const struct scenario {
    const char *name;
    enum when when;
    bool zc_only; /* staged payloads are scribbled: only zero copy is checked */
    void (*hit)(struct target *t);
    enum trap trap; /* what the ranks do at iteration GO_AT instead */
} scenarios[] = {
    {"layout", ONCE, false, hit_layout, NO_TRAP},
    {"slot-bytes", ONCE, false, hit_slot_bytes, NO_TRAP},
    {"heap", ONCE, false, hit_heap, NO_TRAP},
    {"exit", AT_EXIT, false, hit_layout, NO_TRAP},
    {"progress-low", LOOP, false, hit_progress_low, NO_TRAP},
    {"progress-high", LOOP, false, hit_progress_high, NO_TRAP},
    {"pid", ONCE, false, hit_pid, NO_TRAP},
    {"probe", BEFORE, false, hit_probe, NO_TRAP},
    {"state", ONCE, false, hit_state, NO_TRAP},
    {"tags", LOOP, false, hit_tags, NO_TRAP},
    {"handshake", LOOP, true, hit_handshake, NO_TRAP},
    {"desc", LOOP, false, hit_desc, NO_TRAP},
    {"abort", ONCE, false, hit_abort, NO_TRAP},
    {"done-high", TRAP, false, hit_done, TRAP_DONE},
    {"point-placed", TRAP, false, hit_point, TRAP_POINT_PLACED},
    {"point-barrier", TRAP, false, hit_point, TRAP_POINT_BARRIER},
    {"left-reading", TRAP, false, hit_left_reading, TRAP_LEFT_READING},
};

/* Whether the pipe from rank 0 has something (a byte, or its end). */
static bool readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

static void scribbler(const struct scenario *sc, int go_fd, int done_fd, int mapped_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *name = getenv("SHMESH_SEGMENT");
    int fd = name ? shm_open(name, O_RDWR, 0) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "scribbler: cannot open segment %s: %s\n", name ? name : "(unset)",
                strerror(errno));
        _exit(2);
    }
    struct target t = {.rng = 0x243F6A8885A308D3ull};
    t.base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (t.base == MAP_FAILED)
        _exit(2);
    memcpy(&t.h, t.base, sizeof t.h);
    scribbler_go = go_fd;
    scribbler_done = done_fd;
    if (write(mapped_fd, "m", 1) != 1)
        _exit(2);
    close(mapped_fd);
    char c;
    if (sc->when == BEFORE) /* until rank 0 has done GO_AT iterations */
        while (!readable(go_fd))
            for (int i = 0; i < 256; i++)
                sc->hit(&t);
    if (read(go_fd, &c, 1) != 1)
        _exit(0); /* rank 0 ended before it let us go */
    if (sc->when == LOOP) {
        while (!readable(go_fd))
            for (int i = 0; i < 64; i++)
                sc->hit(&t);
        _exit(0);
    }
    if (sc->when != BEFORE)
        sc->hit(&t);
    if (write(done_fd, "d", 1) != 1)
        _exit(2);
    while (read(go_fd, &c, 1) > 0) /* until rank 0 exits */
        ;
    _exit(0);
}

/* ------------------------------------------------------------------------
 * The ranks
 * ---------------------------------------------------------------------- */

static shmesh_ctx *ctx;
static int rank, world;

static int32_t zval(int r, int i, int it) { return (int32_t)(r * 7919 + i * 31 + it * 3); }
static int64_t sval(int r, int i, int it) { return (int64_t)r * 1000003 + i * 101 + it; }

static void wrong(const char *what, int it, long at, long long got, long long want)
{
    printf("hostile rank %d: WRONG %s in iteration %d: element %ld is %lld, expected %lld\n",
           rank, what, it, at, got, want);
    fflush(stdout);
    _exit(3);
}

/* One iteration: 0, or the first call's error. */
static int iteration(shmesh_mesh *m, int it, bool zc_only, int32_t *zin, int32_t *zout,
                     int32_t *cin, int32_t *cout)
{
    int rc;
    for (int i = 0; i < ZC_COUNT; i++)
        zin[i] = zval(rank, i, it);
    shmesh_array a = {.data = zin, .dtype = SHMESH_INT32, .ndim = 1, .shape = {ZC_COUNT}}, b = {.data = zout, .dtype = SHMESH_INT32, .ndim = 1, .shape = {ZC_COUNT}};
    if ((rc = shmesh_psum(m, "i", NULL, &a, &b)))
        return rc;
    for (int i = 0; i < ZC_COUNT; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want = (int32_t)((uint32_t)want + (uint32_t)zval(r, i, it));
        if (zout[i] != want)
            wrong("zero-copy psum", it, i, zout[i], want);
    }
    if (zc_only)
        return 0;

    int64_t sin[SMALL_COUNT], sout[SMALL_COUNT];
    for (int i = 0; i < SMALL_COUNT; i++)
        sin[i] = sval(rank, i, it);
    a = (shmesh_array){.data = sin, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
    b = (shmesh_array){.data = sout, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
    if ((rc = shmesh_psum(m, "i", NULL, &a, &b)))
        return rc;
    for (int i = 0; i < SMALL_COUNT; i++) {
        int64_t want = 0;
        for (int r = 0; r < world; r++)
            want += sval(r, i, it);
        if (sout[i] != want)
            wrong("small psum", it, i, sout[i], want);
    }

    for (int i = 0; i < CMA_COUNT; i++)
        cin[i] = zval(rank, i, it + 1);
    a = (shmesh_array){.data = cin, .dtype = SHMESH_INT32, .ndim = 1, .shape = {CMA_COUNT}};
    b = (shmesh_array){.data = cout, .dtype = SHMESH_INT32, .ndim = 1, .shape = {CMA_COUNT}};
    if ((rc = shmesh_psum(m, "i", NULL, &a, &b)))
        return rc;
    for (int i = 0; i < CMA_COUNT; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want = (int32_t)((uint32_t)want + (uint32_t)zval(r, i, it + 1));
        if (cout[i] != want)
            wrong("host psum", it, i, cout[i], want);
    }

    /* Each rank alone (axis_index_groups), between calls of the whole
     * group: reusing a buffer then needs the peers' progress. */
    int alone[64];
    for (int i = 0; i < world; i++)
        alone[i] = i;
    shmesh_groups singles = {.ngroups = world, .group_size = 1, .indices = alone};
    a = (shmesh_array){.data = sin, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
    b = (shmesh_array){.data = sout, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
    if ((rc = shmesh_psum(m, "i", &singles, &a, &b)))
        return rc;
    for (int i = 0; i < SMALL_COUNT; i++)
        if (sout[i] != sin[i])
            wrong("psum alone", it, i, sout[i], sin[i]);

    int32_t gin[GATHER_COUNT], gout[64 * GATHER_COUNT];
    for (int i = 0; i < GATHER_COUNT; i++)
        gin[i] = zval(rank, i, it + 2);
    a = (shmesh_array){.data = gin, .dtype = SHMESH_INT32, .ndim = 1, .shape = {GATHER_COUNT}};
    b = (shmesh_array){.data = gout, .dtype = SHMESH_INT32, .ndim = 2, .shape = {world, GATHER_COUNT}};
    if ((rc = shmesh_all_gather(m, "i", NULL, 0, false, &a, &b)))
        return rc;
    for (int r = 0; r < world; r++)
        for (int i = 0; i < GATHER_COUNT; i++)
            if (gout[r * GATHER_COUNT + i] != zval(r, i, it + 2))
                wrong("all_gather", it, r * GATHER_COUNT + i, gout[r * GATHER_COUNT + i],
                      zval(r, i, it + 2));
    return 0;
}

/* ------------------------------------------------------------------------
 * The traps: rank 0 lets the scribbler go at a moment when a forged word
 * would end a wait early.
 * ---------------------------------------------------------------------- */

static int go_fd = -1, done_fd = -1;
static int32_t *left_in; /* left-reading: rank 0's input, freed at exit */
static atomic_int released;

/* Rank 0's dispatch queue, held until its main thread says so (20 s at
 * most). */
static void hold_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
    for (int i = 0; i < 20000 && !atomic_load(&released); i++)
        sleep_ms(1);
}

/* Rank 0's part of an effect's point: it lets the scribbler go and stays
 * until it is done (20 s at most). */
static void let_go_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
    char c;
    if (write(go_fd, "g", 1) != 1)
        return;
    struct pollfd p = {done_fd, POLLIN, 0};
    if (poll(&p, 1, 20000) > 0 && read(done_fd, &c, 1) != 1)
        return;
}

static void noop_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
}

/* 0, or the first error. */
static int trap(const struct scenario *sc, shmesh_mesh *m, int it)
{
    int rc;
    shmesh_token t;
    if (sc->trap == TRAP_DONE) {
        int64_t in[SMALL_COUNT], out[SMALL_COUNT];
        for (int i = 0; i < SMALL_COUNT; i++) {
            in[i] = sval(rank, i, it);
            out[i] = -1;
        }
        shmesh_array a = {.data = in, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
        shmesh_array b = {.data = out, .dtype = SHMESH_INT64, .ndim = 1, .shape = {SMALL_COUNT}};
        if (rank == 0 && (rc = shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, hold_cb, NULL, NULL)))
            return rc;
        if ((rc = shmesh_psum_async(m, "i", NULL, &a, &b, &t)))
            return rc;
        char c;
        if (rank == 0 && (write(go_fd, "g", 1) != 1 || read(done_fd, &c, 1) != 1))
            _exit(2);
        rc = shmesh_token_wait(t);
        bool held = rank == 0 && !atomic_load(&released);
        atomic_store(&released, 1);
        if (rc)
            return rc;
        if (held && out[0] == -1)
            wrong("psum: its token was done while the psum waited behind a callback, and",
                  it, 0, out[0], sval(0, 0, it) + sval(1, 0, it));
        for (int i = 0; i < SMALL_COUNT; i++) {
            int64_t want = 0;
            for (int r = 0; r < world; r++)
                want += sval(r, i, it);
            if (out[i] != want)
                wrong("psum_async", it, i, out[i], want);
        }
        return 0;
    }
    if (sc->trap == TRAP_LEFT_READING) {
        /* A single-copy all_gather of LEFT_COUNT int32 per rank (long
         * enough to read that the scribbler stops rank 1 in the middle). */
        int32_t *in = malloc(LEFT_COUNT * 4), *out = malloc((size_t)world * LEFT_COUNT * 4);
        if (!in || !out)
            _exit(2);
        for (int i = 0; i < LEFT_COUNT; i++)
            in[i] = zval(rank, i, it);
        shmesh_array a = {.data = in, .dtype = SHMESH_INT32, .ndim = 1, .shape = {LEFT_COUNT}};
        shmesh_array b = {.data = out, .dtype = SHMESH_INT32, .ndim = 2,
                          .shape = {world, LEFT_COUNT}};
        if ((rc = shmesh_barrier(ctx)))
            return rc;
        char c;
        if (rank == 0 && (write(go_fd, "g", 1) != 1 || read(done_fd, &c, 1) != 1))
            _exit(2);
        rc = shmesh_all_gather(m, "i", NULL, 0, false, &a, &b);
        if (rank == 0) {
            /* The caller has its buffer back: it uses it for something else. */
            memset(in, 0x35, LEFT_COUNT * 4);
            if (write(go_fd, "l", 1) != 1 || read(done_fd, &c, 1) != 1)
                _exit(2);
        }
        for (int r = 0; !rc && r < world; r++)
            for (int i = 0; i < LEFT_COUNT; i++)
                if (out[r * LEFT_COUNT + i] != zval(r, i, it))
                    wrong("all_gather read while its owner had left", it, r * LEFT_COUNT + i,
                          out[r * LEFT_COUNT + i], zval(r, i, it));
        if (rank == 0) /* it stays mapped, reused as a caller may, until the end */
            left_in = in;
        else
            free(in);
        free(out);
        return rc;
    }
    /* An effect's point, run by rank 0 (placed on its device, or its part
     * of a point on every device), which rank 1 waits for. */
    bool placed = sc->trap == TRAP_POINT_PLACED;
    shmesh_effect *e;
    if ((rc = shmesh_effect_create(ctx, "log", placed ? SHMESH_EFFECT_ORDERED
                                                      : SHMESH_EFFECT_ORDERED_SHARDABLE, &e)))
        return rc;
    if ((rc = shmesh_callback(ctx, e, placed ? 0 : SHMESH_PLACE_ALL,
                              rank == 0 ? let_go_cb : noop_cb, NULL, &t)))
        return rc;
    if ((rc = shmesh_token_wait(t)))
        return rc;
    if (!placed && (rc = shmesh_effects_barrier(ctx)))
        return rc;
    return shmesh_barrier(ctx);
}

int main(int argc, char **argv)
{
    const struct scenario *sc = NULL;
    for (size_t i = 0; argc >= 2 && i < sizeof scenarios / sizeof *scenarios; i++)
        if (!strcmp(argv[1], scenarios[i].name))
            sc = &scenarios[i];
    int iters = argc >= 3 ? atoi(argv[2]) : 60;
    if (!sc || iters <= GO_AT) {
        fprintf(stderr, "usage: %s SCENARIO [ITERATIONS > %d]\n", argv[0], GO_AT);
        return 2;
    }
    const char *r = getenv("SHMESH_RANK");
    rank = r ? atoi(r) : 0;

    /* Rank 0 starts the scribbler and waits until it has the segment mapped. */
    int go[2] = {-1, -1}, done[2] = {-1, -1};
    if (rank == 0) {
        int mapped[2];
        if (pipe(go) || pipe(done) || pipe(mapped))
            return 2;
        pid_t pid = fork();
        if (pid < 0)
            return 2;
        if (pid == 0) {
            close(go[1]);
            close(done[0]);
            close(mapped[0]);
            scribbler(sc, go[0], done[1], mapped[1]);
        }
        close(go[0]);
        close(done[1]);
        close(mapped[1]);
        char c;
        if (read(mapped[0], &c, 1) != 1)
            return 2;
        close(mapped[0]);
    }

    int rc = shmesh_init(&ctx);
    if (rc) {
        printf("hostile rank %d: end %s after 0 iterations: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 0;
    }
    world = shmesh_world_size(ctx);
    if (world > 64) {
        fprintf(stderr, "%s: at most 64 ranks\n", argv[0]);
        return 2;
    }
    const char *axis = "i";
    shmesh_mesh *m = NULL;
    rc = shmesh_mesh_create(ctx, 1, &axis, &world, NULL, &m);
    int32_t *zin = shmesh_alloc(ctx, ZC_COUNT * 4), *zout = shmesh_alloc(ctx, ZC_COUNT * 4);
    int32_t *cin = malloc(CMA_COUNT * 4), *cout = malloc(CMA_COUNT * 4);
    if (!rc && (!zin || !zout || !cin || !cout)) {
        printf("hostile rank %d: cannot allocate: %s\n", rank, shmesh_last_error(ctx));
        return 2;
    }
    int it = 0;
    go_fd = go[1];
    done_fd = done[0];
    for (; !rc && it < iters; it++) {
        if (sc->trap && it == GO_AT) {
            rc = trap(sc, m, it);
            continue;
        }
        if (rank == 0 && it == GO_AT && sc->when != AT_EXIT) {
            char c;
            if (write(go[1], "g", 1) != 1)
                return 2;
            if (sc->when != LOOP && read(done[0], &c, 1) != 1)
                return 2;
        }
        rc = iteration(m, it, sc->zc_only, zin, zout, cin, cout);
    }
    if (rc)
        printf("hostile rank %d: end %s after %d iterations: %s\n", rank, shmesh_error_name(rc),
               it - 1, shmesh_last_error(ctx));
    else
        printf("hostile rank %d: end ok after %d iterations\n", rank, it);
    fflush(stdout);
    shmesh_mesh_destroy(m);
    shmesh_free(ctx, zin);
    shmesh_free(ctx, zout);
    free(cin);
    free(cout);
    rc = shmesh_finalize(ctx);
    if (rank == 0) {
        char c;
        /* The layout goes bad after every rank is done, while the launcher
         * still has ranks to reap. */
        if (sc->when == AT_EXIT && write(go[1], "g", 1) == 1 && read(done[0], &c, 1) != 1)
            return 2;
        close(go[1]); /* a looping scribbler stops */
    }
    if (rc)
        printf("hostile rank %d: finalize %s: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
    free(left_in);
    return 0;
}
