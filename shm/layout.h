/* The segment's binary layout: what every process of one job maps.
 *
 *   offset 0            struct seg_header (one page)
 *   ctrl_offset         world_size control blocks, SEG_CTRL_STRIDE bytes each
 *   slot_offset         world_size data regions, slot_stride bytes each,
 *                       each holding two slot_bytes buffers (double
 *                       buffering); a buffer starts with a struct
 *                       seg_slot_hdr on the same cache line as the first
 *                       bytes of its payload, and ends with room for a
 *                       call description; then SEG_EAGER_ENTRIES eager
 *                       windows of SEG_EAGER_BYTES (header and payload),
 *                       then a call description for each, then a receipt
 *                       (a struct seg_slot_hdr) for each, then where the
 *                       rank waits as an eager receiver
 *   heap_offset         the shared heap: world_size shares of heap_share
 *                       bytes, one per rank, allocated by their owner
 *   trace_offset        only when tracing (shmesh-run --trace): world_size
 *                       event rings of trace_share bytes, each a page of
 *                       struct seg_trace_ring then trace_events events
 *
 * Every offset and size here is written once by the creator and validated by
 * each attacher against the real size of the mapping (segment.c) before any
 * pointer is derived from it.  Words that other processes block on are 32-bit
 * futex words inside struct seg_flag. */
#ifndef SHMESH_SHM_LAYOUT_H
#define SHMESH_SHM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>

#define SEG_MAGIC 0x01004853454d4853ULL /* the bytes "SHMESH\0\1" */
/* Bumped whenever what ranks exchange changes meaning: 5, the op table
 * gained the world-wide gather and broadcast (op numbers moved); 7, the
 * status block and the trace rings; 8, a collective callback is a call of
 * its own (its window carries its description) and the status block shows
 * waits for effects' points and for tokens; 9, a control block holds the
 * rank's hashed settings (seg_ctrl's `tuning`); 10, trace rings of 16-byte
 * units with repeat records; 11, eager windows after each rank's buffers;
 * 13, an eager receiver posts a receipt, not its entry's header; 14, a
 * two control slots after the eager wait. */
#define SEG_LAYOUT_VERSION 14u
#define SEG_CACHE_LINE 64
#define SEG_PAGE 4096u
/* Two lines per hot block: x86's adjacent-line prefetcher pulls lines in pairs,
 * so sharing a 128-byte pair between writers is false sharing too. */
#define SEG_CTRL_STRIDE 896u
/* Effects whose program points a rank publishes (lib/effects/): 32
 * registered ones and one for callbacks without an effect; room for a
 * name (SHMESH_MAX_EFFECT_NAME characters and the NUL). */
#define SEG_EFFECT_SLOTS 33
#define SEG_EFFECT_NAME 32
#define SEG_MAX_WORLD 4096
/* Room for the values of the settings hashed into every call (lib/core/
 * settings.h, the "hashed" column). */
#define SEG_TUNING_MAX 8
#define SEG_REASON_MAX 256

/* A word peers block on, and how many of them announced they are blocking, so
 * that a writer pays for a wake-up system call only when someone sleeps. */
struct seg_flag {
    _Atomic uint32_t value;
    _Atomic uint32_t waiters;
};

enum seg_rank_state {
    SEG_RANK_EMPTY = 0,     /* never attached */
    SEG_RANK_ATTACHED = 1,  /* between shmesh_init and shmesh_finalize */
    SEG_RANK_FINALIZED = 2, /* left cleanly: its exit is not a failure */
};

enum seg_abort_state {
    SEG_ABORT_NONE = 0,
    SEG_ABORT_WRITING = 1, /* one writer won the race and is filling the reason */
    SEG_ABORT_SET = 2,
};

enum seg_abort_cause {
    SEG_CAUSE_NONE = 0,
    SEG_CAUSE_RANK_ABORT = 1, /* a rank called shmesh_abort */
    SEG_CAUSE_RANK_DIED = 2,  /* the launcher saw a rank fail or leave early */
    SEG_CAUSE_SIGNAL = 3,     /* the launcher was signalled */
    SEG_CAUSE_TIMEOUT = 4,    /* the launcher's --timeout expired */
    SEG_CAUSE_MISMATCH = 5,   /* ranks made different collective calls */
    SEG_CAUSE_CORRUPT = 6,    /* a rank read a value no rank can have written */
};

/* A rank's progress: the last window it published, (call << 32) | window,
 * increasing.  `bell` changes with every post; it is the futex word that
 * waiters sleep on, since futexes are 32-bit. */
struct seg_progress {
    _Atomic uint64_t value;
    struct seg_flag bell;
};

/* What a rank is doing, for observers (shmesh-top, tools/top.c) and for
 * the trace of a job that died (an unfinished call): written by the rank
 * alone, on lines of their own, and never read by its peers, so that it
 * costs a call a few stores to its own cache.  Observers read the words
 * one by one: a snapshot may mix two moments, never two ranks. */
enum seg_activity {
    SEG_ACT_IDLE = 0, /* outside any call: computing, or before its first call */
    SEG_ACT_CALL = 1, /* inside call `call` */
    SEG_ACT_WAIT = 2, /* inside it, blocked until wait_rank moves */
};

/* What a SEG_ACT_WAIT waits for. */
enum seg_wait_kind {
    SEG_WAIT_WINDOW = 0, /* wait_rank to post window wait_tag, or to move past it */
    SEG_WAIT_POINT = 1,  /* wait_rank to pass program point wait_point of effect
                            wait_effect (lib/effects/), after call wait_tag >> 32 */
};

/* seg_status.call: (number << SEG_STATUS_OP_BITS) | op.  Every op number
 * must fit the field (_Static_assert in lib/engine/desc.h, tools/top.c). */
#define SEG_STATUS_OP_BITS 8
#define SEG_STATUS_OP_MASK ((UINT64_C(1) << SEG_STATUS_OP_BITS) - 1)
#define SEG_STATUS_CALL(number, op)                                                            \
    (((uint64_t)(number) << SEG_STATUS_OP_BITS) | ((uint64_t)(op) & SEG_STATUS_OP_MASK))
#define SEG_STATUS_NUMBER(word) ((uint64_t)(word) >> SEG_STATUS_OP_BITS)
#define SEG_STATUS_OP(word) ((unsigned)((uint64_t)(word) & SEG_STATUS_OP_MASK))

struct seg_status {
    /* SEG_STATUS_CALL(number, op): the current call, or the last one.  op
     * is enum call_op (lib/engine/desc.h): 0 for none, then line i of the op
     * table (shm/optable.h) is op i + 1. */
    _Atomic uint64_t call;
    _Atomic uint32_t activity;   /* enum seg_activity */
    _Atomic int32_t wait_rank;   /* SEG_ACT_WAIT: whom it waits for */
    _Atomic uint64_t wait_tag;   /* and for what: (call << 32) | window */
    _Atomic int64_t wait_since;  /* CLOCK_MONOTONIC ns, when the block began */
    _Atomic uint64_t bytes;      /* bytes of the calls finished: each one's size as the
                                    path table counts it (engine/path.c), 0 without data */
    _Atomic uint64_t call_since; /* tracing only: the current call's start, in event-clock ticks */
    char notifier[8];            /* "uring" or "futex", written at start */
    _Atomic uint32_t wait_kind;  /* SEG_ACT_WAIT: enum seg_wait_kind */
    _Atomic uint32_t pad;
    _Atomic uint64_t wait_point; /* SEG_WAIT_POINT: the point, */
    char wait_effect[SEG_EFFECT_NAME]; /* and its effect's name ("" for none) */
    /* A thread of the rank blocked on a token (shmesh_token_wait and the
     * like, lib/engine/dispatch.c), whatever the rank's calls do: the
     * dispatch queue position it waits for (0: none) and since when
     * (CLOCK_MONOTONIC ns).  How far the dispatch queue got is seg_ctrl's
     * `done`. */
    _Atomic uint64_t token_seq;
    _Atomic int64_t token_since;
    /* The calls finished so far: bytes of the rank's data other processes
     * took, and of theirs it took (lib/engine/traffic.h). */
    _Atomic uint64_t sent, received;
};

struct seg_ctrl {
    /* Written by the owner on every window; read by its group's members, so
     * everything a reader needs shares this one line. */
    alignas(SEG_CACHE_LINE) struct seg_progress progress;
    /* Written once or twice per job. */
    alignas(128) _Atomic int32_t pid;
    _Atomic uint32_t state; /* enum seg_rank_state */
    int32_t numa_node;      /* chosen by the creator; -1 when not placed */
    /* A word of the rank's private memory and its value, so peers can test
     * whether they may read its memory directly (lib/cma.c). */
    uint64_t probe_addr, probe_value;
    /* The values of the rank's hashed settings (lib/core/settings.h), in the
     * table's order, written before it joins: read by a peer only to say
     * which differ when the calls' hashes do (untrusted: compared, printed
     * as numbers). */
    uint64_t tuning[SEG_TUNING_MAX];
    /* Tokens (lib/effects/): how much of the rank's dispatch queue has
     * finished (its own threads sleep on it; the rank keeps the count in
     * private memory too, and a word above it is not the rank's), and for
     * each effect the program points the rank has passed.  A point's post
     * rings `progress`'s bell without changing its value, so a peer waiting
     * for a point also sees the rank's windows.  No rank passes a point
     * before every rank announced it (a collective callback is a call of
     * its own), so a point above those a peer dispatched is not the rank's. */
    alignas(128) struct seg_progress done;
    _Atomic uint64_t effect_point[SEG_EFFECT_SLOTS];
    alignas(128) struct seg_status status;
};

/* The head of each slot buffer: which window it holds and, for a call's
 * first window, the call's hash.  The payload starts right after, on the
 * same cache line, so a small window reaches a reader in one transfer.  A
 * description of the call (opaque to shm/: lib/ fills it, and reads it back
 * only to explain a mismatch) sits at the buffer's end. */
struct seg_slot_hdr {
    _Atomic uint64_t tag; /* the window: the progress value it was posted with */
    uint64_t call_hash;
};
#define SEG_SLOT_HDR 16u
#define SEG_CALL_DESC_MAX 1024u

/* Eager windows: a one-window broadcast of a few bytes goes through one of
 * these, entry (call number mod SEG_EAGER_ENTRIES) of each member, so that
 * its source may run that many calls ahead of its receivers
 * (lib/engine/window.c).  An entry is a seg_slot_hdr and its payload in
 * SEG_EAGER_BYTES; the entries follow each other (a receiver behind its
 * source reads them in a stream), and their calls' descriptions come after
 * them all.  A receiver posts no payload: it posts a receipt, a bare
 * seg_slot_hdr, and receipts are packed four to a cache line, so that the
 * source, which checks them in batches, takes a line from a receiver every
 * fourth call rather than every call.  Entry i's description serves its
 * receipt too.  Last, a receiver that has to wait for its source's entry
 * first posts where it waits (a seg_slot_hdr on a line of its own: the
 * window's tag and its call's hash, then that call's description): a member
 * that takes it for the source of the same call finds it a receiver there,
 * a mismatch no entry would ever show (each waiting for the other).
 *
 * After the eager wait, each laid out alike (a line, then a description),
 * the rank's two control slots: two more buffers, taken in turn, for the
 * windows of control exchanges (a path's handshake, a barrier's empty
 * window), whose payload is a line's rest, so that they leave the two data
 * buffers to the data: a call that shakes hands before it stages its data
 * posts that data into either buffer in turn, as one that does not
 * (lib/engine/window.c).  Two, as the data buffers are two: a buffer is
 * reused once its window's readers posted a later one, which a run of
 * control exchanges (a barrier, then a handshake) gives only for the
 * window before the last. */
#define SEG_EAGER_ENTRIES 64u
#define SEG_EAGER_BYTES 2112u
#define SEG_EAGER_WAIT (SEG_CACHE_LINE + SEG_CALL_DESC_MAX)
#define SEG_CONTROL_SLOT SEG_EAGER_WAIT
#define SEG_CONTROL_PAYLOAD (SEG_CACHE_LINE - SEG_SLOT_HDR)
#define SEG_EAGER_REGION                                                                          \
    (SEG_EAGER_ENTRIES * (SEG_EAGER_BYTES + SEG_CALL_DESC_MAX + SEG_SLOT_HDR) + SEG_EAGER_WAIT +  \
     2 * SEG_CONTROL_SLOT)

/* Tracing (lib/trace/): one ring per rank, written by the rank alone and
 * read by the launcher while the job runs and after it ends
 * (launcher/trace.c), so that a rank that dies leaves what it did.
 *
 * The ring is a run of 16-byte units (SEG_TRACE_UNIT; as many as fit the
 * ring's `trace_events` 64-byte events), and a record is
 *   - an event (struct seg_trace_event): 4 units, at a unit number that is
 *     a multiple of 4, so that a reader that lost its place finds the next
 *     record start there;
 *   - a repeat (struct seg_trace_repeat): 1 unit, a call like the rank's
 *     previous call record (the next number; the same op, path, flags,
 *     result, bytes, group, dtype and axes), written less than
 *     SEG_TRACE_REPEAT_SPAN units after that run's event;
 *   - a pad unit (kind SEG_TEV_PAD) before an event, to align it;
 *   - a traffic unit (struct seg_trace_traffic) right after the event of a
 *     call that moved data between processes, part of that record (a
 *     repeat's traffic is its run's call's).
 * A loop of small calls thus writes a quarter of a line per call (writing
 * and reading whole events was most of a traced small call's cost).  The
 * writer never waits: it stores a record at `head % units`, then head +
 * its units (release), then `records` + 1; a reader that copied units
 * [from, head) checks head again and drops those the writer may have
 * overwritten meanwhile, and `records` less what it read is what was lost. */
#define SEG_TRACE_PATHS 16
#define SEG_TRACE_NAME 16
#define SEG_TRACE_UNIT 16u
struct seg_trace_ring {
    alignas(SEG_CACHE_LINE) _Atomic uint64_t head; /* units written so far */
    _Atomic uint64_t records;                     /* events and repeats written so far */
    /* The event clock (shm/trace_clock.h): its kind, and one reading of it
     * and of CLOCK_MONOTONIC taken together when the rank started. */
    uint32_t clock_kind;
    int32_t pid;
    uint64_t clock_ticks;
    int64_t clock_ns;
    /* The path table's names (engine/path.c), by index, for the reader. */
    char path_names[SEG_TRACE_PATHS][SEG_TRACE_NAME];
};

enum seg_trace_kind {
    SEG_TEV_CALL = 1,   /* a call, from its submission to its end */
    SEG_TEV_WAIT = 2,   /* one wait inside a call, past the first look */
    SEG_TEV_REPEAT = 3, /* a repeat unit (struct seg_trace_repeat) */
    SEG_TEV_PAD = 4,    /* a unit to skip */
    SEG_TEV_TRAFFIC = 5, /* the traffic of the call event just before */
};
/* Flags of a call: the rank is its group's first or last (the flow that
 * joins the members' slices starts and ends there). */
#define SEG_TEV_FIRST 1u
#define SEG_TEV_LAST 2u
#define SEG_TEV_NO_PATH 0xffu

struct seg_trace_event {
    uint8_t kind;    /* enum seg_trace_kind */
    uint8_t op;      /* enum call_op: line op - 1 of the op table (as in seg_status) */
    uint8_t path;    /* CALL: the last exchange's path, or SEG_TEV_NO_PATH */
    uint8_t flags;   /* CALL: SEG_TEV_FIRST, SEG_TEV_LAST */
    union {
        int32_t rc;   /* CALL: 0 or the shmesh error */
        int32_t peer; /* WAIT: the rank waited for */
    };
    uint64_t call;   /* the call number */
    uint64_t t0, t1; /* event clock: CALL submitted and finished; WAIT begun and over */
    union {
        uint64_t bytes; /* CALL: its size as the bench counts it */
        uint64_t tag;   /* WAIT: the window's tag */
    };
    int32_t leader;  /* CALL: the rank of the group's first member: a call number
                        and a leader name one collective */
    int32_t members; /* CALL: devices in the group */
    uint8_t dtype;   /* CALL: enum shmesh_dtype of the input */
    uint8_t pad[3];
    char axes[12];   /* CALL: the axes as named ("" for world calls), cut */
};
#define SEG_TRACE_EVENT 64u
#define SEG_TRACE_MAX_EVENTS (1u << 24)
#define SEG_TRACE_EVENT_UNITS (SEG_TRACE_EVENT / SEG_TRACE_UNIT)

/* A call like the rank's previous call record: its number is that one's + 1,
 * its times t0 and t0 + dt, everything else that one's. */
struct seg_trace_repeat {
    uint8_t kind; /* SEG_TEV_REPEAT */
    uint8_t pad[3];
    uint32_t dt;
    uint64_t t0;
};
/* What a call sent to and received from other processes (lib/engine/
 * traffic.h), when either is not 0.  The kind is the low byte of the first
 * word, read as the unit's first byte (little-endian machines, as the
 * segment is one machine's). */
struct seg_trace_traffic {
    uint64_t kind_sent; /* SEG_TEV_TRAFFIC | sent << 8 (sent under 2^56) */
    uint64_t received;
};

/* A repeat comes less than this many units after its run's event: a reader
 * that lost its place reads the repeats again from the next event on (at
 * most an eighth of the ring of them go with the lost records). */
#define SEG_TRACE_REPEAT_SPAN(units) ((units) / 8)

struct seg_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_bytes;
    uint64_t total_bytes;
    uint32_t world_size;
    uint32_t ctrl_stride;
    uint64_t ctrl_offset;
    uint64_t slot_offset;
    uint64_t slot_stride; /* bytes between two ranks' data regions */
    uint64_t slot_bytes;  /* bytes in each of a region's two buffers */
    uint64_t heap_offset;
    uint64_t heap_share;  /* bytes of heap per rank (page multiple, may be 0) */
    int32_t creator_pid;
    uint32_t numa_nodes; /* nodes the regions were spread over; 0 or 1: none */
    uint64_t trace_offset; /* the rings; 0 (and the next two 0): no tracing */
    uint64_t trace_share;  /* bytes per rank: the ring's page and its events */
    uint32_t trace_events; /* events per ring: a power of two */

    /* Number of ranks attached; the one that completes the count unlinks the
     * name.  Ranks block on it during start-up. */
    alignas(SEG_CACHE_LINE) struct seg_flag attached;

    alignas(SEG_CACHE_LINE) struct seg_flag abort; /* value: enum seg_abort_state */
    int32_t abort_cause;                          /* enum seg_abort_cause */
    int32_t abort_rank;                           /* the rank at fault, or -1 */
    int32_t abort_code;
    char abort_reason[SEG_REASON_MAX];
};

_Static_assert(sizeof(struct seg_header) <= SEG_PAGE, "header must fit in one page");
_Static_assert(sizeof(struct seg_ctrl) <= SEG_CTRL_STRIDE, "control block too large");
_Static_assert(sizeof(struct seg_slot_hdr) == SEG_SLOT_HDR, "slot header size");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "futex words are 32-bit");
_Static_assert(sizeof(struct seg_trace_event) == SEG_TRACE_EVENT, "trace event size");
_Static_assert(sizeof(struct seg_trace_repeat) == SEG_TRACE_UNIT, "trace repeat size");
_Static_assert(sizeof(struct seg_trace_traffic) == SEG_TRACE_UNIT, "trace traffic size");
_Static_assert(sizeof(struct seg_trace_ring) <= SEG_PAGE, "trace ring header must fit in a page");

#endif
