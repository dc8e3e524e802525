/* A rank that writes its trace ring and status block by hand, as
 * lib/trace/ does, so that shmesh-run --trace's reader (launcher/trace.c)
 * is tested against events whose every field is known: the library is not
 * linked.  Times are in the ns clock, on a timeline shared by the ranks
 * (rank 0's start, read from its ring), so that a collective's slices
 * overlap as real ones do.
 *
 *   trace_fake ok     CALLS collectives (world, then pairs), each with a
 *                     wait for the next rank; says "trace_fake: rank R
 *                     calls N" on stdout
 *   trace_fake flood  64 times the ring's events at once, no waits (most are
 *                     overwritten before the launcher reads them)
 *   trace_fake repeat as flood, every call a like world psum: repeat records
 *                     (shm/layout.h), in bursts of 8 rings' worth 25 ms
 *                     apart (read between them, most of each lost), read
 *                     again after each loss from the next event on
 *   trace_fake paced  CALLS collectives, no waits, an eighth of the ring at a
 *                     time with 20 ms between (the launcher's drain, every
 *                     10 ms, keeps up: a job far longer than its rings)
 *   trace_fake die    ok, then rank 2 enters one more call, is seen waiting
 *                     for rank 3, and exits 3 without finishing it
 *   trace_fake hang   ok, then every rank enters one more call and stays in
 *                     it until a signal ends it (--timeout, SIGTERM)
 *
 * Usage: trace_fake MODE [CALLS] (default 20). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/desc.h"
#include "shm/segment.h"
#include "shm/trace_clock.h"

#define CALL_NS 10000  /* a call every 10 us of the shared timeline */
#define RANK_NS 100    /* each rank enters 100 ns after the one before */

static struct seg_trace_ring *ring;
static unsigned char *units;
static uint64_t nunits;
static uint32_t cap;

/* An event record (shm/layout.h): 4 units at a multiple of 4 (this writer
 * writes no repeats, so head stays one), head, then the record count. */
static void put(const struct seg_trace_event *e)
{
    uint64_t h = atomic_load_explicit(&ring->head, memory_order_relaxed);
    memcpy(units + (h & (nunits - 1)) * SEG_TRACE_UNIT, e, sizeof *e);
    atomic_store_explicit(&ring->head, h + SEG_TRACE_EVENT_UNITS, memory_order_release);
    uint64_t n = atomic_load_explicit(&ring->records, memory_order_relaxed);
    atomic_store_explicit(&ring->records, n + 1, memory_order_relaxed);
}

/* A call record as lib/trace/ writes it: a repeat (one unit) of the last
 * call record when only its number (the next) and times differ and that
 * one's event is less than SEG_TRACE_REPEAT_SPAN units back, else its
 * event. */
static void put_call(const struct seg_trace_event *e)
{
    static struct seg_trace_event last;
    static uint64_t run;
    static bool any;
    uint64_t h = atomic_load_explicit(&ring->head, memory_order_relaxed);
    struct seg_trace_event like = *e;
    like.call = last.call;
    like.t0 = last.t0;
    like.t1 = last.t1;
    if (any && e->call == last.call + 1 && h - run < SEG_TRACE_REPEAT_SPAN(nunits) &&
        !memcmp(&like, &last, sizeof like) && e->t1 - e->t0 <= UINT32_MAX) {
        struct seg_trace_repeat r = {.kind = SEG_TEV_REPEAT, .dt = (uint32_t)(e->t1 - e->t0),
                                     .t0 = e->t0};
        memcpy(units + (h & (nunits - 1)) * SEG_TRACE_UNIT, &r, sizeof r);
        atomic_store_explicit(&ring->head, h + 1, memory_order_release);
        uint64_t n = atomic_load_explicit(&ring->records, memory_order_relaxed);
        atomic_store_explicit(&ring->records, n + 1, memory_order_relaxed);
        last.call = e->call;
        last.t0 = e->t0;
        last.t1 = e->t1;
        return;
    }
    for (; h % SEG_TRACE_EVENT_UNITS; h++) /* pads up to the event's place */
        units[(h & (nunits - 1)) * SEG_TRACE_UNIT] = SEG_TEV_PAD;
    atomic_store_explicit(&ring->head, h, memory_order_relaxed);
    run = h;
    put(e);
    last = *e;
    any = true;
}

static int fail(const char *what)
{
    fprintf(stderr, "trace_fake: %s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    int calls = argc > 2 ? atoi(argv[2]) : 20;
    const char *name = getenv("SHMESH_SEGMENT");
    const char *rs = getenv("SHMESH_RANK"), *ws = getenv("SHMESH_WORLD_SIZE");
    if (!name || !rs || !ws)
        return fail("expected SHMESH_SEGMENT, SHMESH_RANK and SHMESH_WORLD_SIZE (run me under "
                    "shmesh-run --trace)");
    int rank = atoi(rs), world = atoi(ws);
    struct seg *s;
    char err[512];
    if (seg_attach(name, world, rank, &s, err, sizeof err) < 0)
        return fail(err);
    if (!s->lay.trace_events)
        return fail("expected trace rings in the segment (shmesh-run --trace), found none");
    ring = seg_trace_ring(s, rank);
    units = seg_trace_units(s, rank);
    nunits = seg_trace_unit_count(s);
    cap = s->lay.trace_events;
    struct seg_status *st = &seg_ctrl(s, rank)->status;

    /* The ring's header: the ns clock, so ticks are the timeline's ns. */
    struct seg_trace_ring *r0 = seg_trace_ring(s, 0);
    ring->clock_kind = TRACE_CLOCK_NS;
    ring->pid = (int32_t)getpid();
    strcpy(ring->path_names[0], "staged");
    strcpy(ring->path_names[1], "zero_copy");
    int64_t base;
    if (rank == 0) {
        base = trace_mono_ns();
        ring->clock_ticks = (uint64_t)base;
        atomic_store_explicit((_Atomic int64_t *)&ring->clock_ns, base, memory_order_release);
    } else {
        /* Rank 0's start is everyone's time 0; it comes within milliseconds. */
        while (!(base = atomic_load_explicit((_Atomic int64_t *)&r0->clock_ns,
                                             memory_order_acquire)))
            usleep(100);
        ring->clock_ticks = (uint64_t)base;
        ring->clock_ns = base;
    }

    static const int ops[] = {OP_PSUM, OP_ALL_GATHER, OP_PPERMUTE, OP_BARRIER};
    bool repeat = !strcmp(mode, "repeat");
    int total = !strcmp(mode, "flood") || repeat ? (int)cap * 64 : calls;
    bool paced = !strcmp(mode, "paced");
    int burst = cap >= 8 ? (int)cap / 8 : 1;
    uint64_t bytes = 0;
    for (int c = 0; c < total; c++) {
        bool pairs = !repeat && c % 2; /* odd calls: groups {0,1}, {2,3}, ... */
        int leader = pairs ? rank & ~1 : 0;
        int members = pairs ? (world - leader >= 2 ? 2 : 1) : world;
        int pos = rank - leader;
        uint64_t t0 = (uint64_t)base + (uint64_t)c * CALL_NS + (uint64_t)pos * RANK_NS;
        uint64_t t1 = (uint64_t)base + (uint64_t)c * CALL_NS + CALL_NS / 2 + (uint64_t)pos * RANK_NS;
        if (paced && c % burst == burst - 1)
            nanosleep(&(struct timespec){0, 20000000}, NULL);
        /* repeat: bursts of 8 times the ring's events, 25 ms apart: the drain
         * reads between them, then loses most of the next. */
        if (repeat && c % (8 * (int)cap) == 8 * (int)cap - 1)
            nanosleep(&(struct timespec){0, 25000000}, NULL);
        if (strcmp(mode, "flood") && !paced && !repeat) {
            struct seg_trace_event w = {
                .kind = SEG_TEV_WAIT,
                .op = (uint8_t)ops[c % 4],
                .peer = members > 1 ? leader + (pos + 1) % members : rank,
                .call = (uint64_t)c,
                .t0 = t0 + 1000,
                .t1 = t0 + 2000,
                .tag = ((uint64_t)c << 32) | 1,
            };
            put(&w);
        }
        int op = repeat ? OP_PSUM : ops[c % 4];
        struct seg_trace_event e = {
            .kind = SEG_TEV_CALL,
            .op = (uint8_t)op,
            .path = repeat ? 0 : c % 3 == 2 ? SEG_TEV_NO_PATH : (uint8_t)(c % 3),
            .flags = (uint8_t)((pos == 0 ? SEG_TEV_FIRST : 0) |
                               (pos == members - 1 ? SEG_TEV_LAST : 0)),
            .rc = 0,
            .call = (uint64_t)c,
            .t0 = t0,
            .t1 = t1,
            .bytes = op == OP_BARRIER ? 0 : repeat ? 8 : 4096 * (uint64_t)(c % 5 + 1),
            .leader = leader,
            .members = members,
            .dtype = 11, /* float32 */
        };
        strcpy(e.axes, pairs ? "y" : "x,y");
        bytes += e.bytes;
        put_call(&e);
        atomic_store(&st->call, SEG_STATUS_CALL(c, e.op));
        atomic_store(&st->bytes, bytes);
    }
    printf("trace_fake: rank %d calls %d\n", rank, total);
    fflush(stdout);
    if (!strcmp(mode, "die") && rank == 2) {
        /* Inside call `total`, blocked on rank 3, when it dies. */
        uint64_t since = (uint64_t)base + (uint64_t)total * CALL_NS;
        atomic_store(&st->call_since, since);
        atomic_store(&st->call, SEG_STATUS_CALL(total, OP_PSUM));
        atomic_store(&st->wait_rank, 3);
        atomic_store(&st->wait_tag, ((uint64_t)total << 32) | 0);
        atomic_store(&st->wait_since, (int64_t)since + 500);
        atomic_store(&st->activity, SEG_ACT_WAIT);
        _exit(3);
    }
    if (!strcmp(mode, "hang")) {
        atomic_store(&st->call_since, (uint64_t)base + (uint64_t)total * CALL_NS);
        atomic_store(&st->call, SEG_STATUS_CALL(total, OP_ALL_GATHER));
        atomic_store(&st->activity, SEG_ACT_CALL);
    }
    if (!strcmp(mode, "die") || !strcmp(mode, "hang")) {
        /* The others wait to be stopped by the launcher, as ranks blocked
         * in the call rank 2 never finishes would. */
        for (;;)
            pause();
    }
    seg_close(s);
    return 0;
}
