/* The shared-memory segment: create (launcher), attach (ranks), unlink, views.
 *
 * Functions return 0 or a negative errno and, on failure, write a sentence
 * into the caller's err buffer saying what was expected and what was found.
 * Validation failures of an existing segment return -EBADMSG. */
#ifndef SHMESH_SHM_SEGMENT_H
#define SHMESH_SHM_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"

#define SEG_NAME_MAX 64

/* The layout this process uses: computed by the creator, or copied from the
 * header and validated by seg_attach.  Every pointer into the segment is
 * derived from this private copy, never from the header, which any process
 * that maps the segment can overwrite at any time. */
struct seg_layout {
    uint64_t total_bytes;
    uint64_t ctrl_offset;
    uint64_t slot_offset, slot_stride, slot_bytes;
    uint64_t heap_offset, heap_share;
    uint64_t trace_offset, trace_share; /* 0: no rings */
    uint32_t trace_events;
    uint32_t ctrl_stride;
    uint32_t world_size;
};

struct seg {
    uint8_t *base;
    /* == base: the live header.  Only its shared words (the attach counter,
     * the abort record) are read through it; its layout fields are in lay. */
    struct seg_header *hdr;
    struct seg_layout lay;
    size_t size;
    int world;
    bool named;   /* false for a private (anonymous) segment */
    bool readonly; /* mapped by seg_observe: nothing may be written */
    /* The creator's descriptor (kept open for the job's life, so that
     * shmesh-top can open the segment read-only through /proc after the
     * name is gone) or an attacher's (to restore the size should another
     * process truncate the file: guard.h), or -1. */
    int fd;
    int guard; /* its slot in the SIGBUS guard (guard.h), or -1 */
    char name[SEG_NAME_MAX];
};

#define SEG_DEFAULT_TOTAL (32ull << 20) /* fits Docker's default 64 MiB /dev/shm */

struct seg_create_opts {
    int world_size;
    uint64_t slot_bytes; /* per buffer; 0 picks seg_default_slot_bytes() */
    /* The whole segment; what the header, control blocks and slots leave is
     * the shared heap.  0 picks SEG_DEFAULT_TOTAL (or the minimum, if more). */
    uint64_t total_bytes;
    /* NUMA placement: -1 places when libnuma reports more than one node,
     * 0 never places, 1 places even on one node (tests use it to exercise the
     * mbind path on machines with a single node). */
    int numa;
    /* When placing: per rank, the node for its slots and heap share (the
     * launcher gives a rank's GPU's node), or -1 for the default spread of
     * ranks over nodes in contiguous blocks.  NULL: the default for all. */
    const int *nodes;
    /* Events per rank's trace ring (shmesh-run --trace): 0 for none, else a
     * power of two up to SEG_TRACE_MAX_EVENTS.  The rings come on top of
     * total_bytes. */
    uint32_t trace_events;
};

uint64_t seg_default_slot_bytes(int world_size);
/* Bytes a segment needs before any heap; 0 when the options are invalid. */
uint64_t seg_required_bytes(int world_size, uint64_t slot_bytes);
/* Parses "32M", "1G", "65536" (K/M/G/T, binary); 0 when it is not a size. */
uint64_t seg_parse_size(const char *s);

/* Creates a named segment (random name, O_EXCL, mode 0600), reserves all of
 * its memory up front and writes the header.  The caller owns the result and
 * must seg_unlink() and seg_close() it. */
int seg_create(const struct seg_create_opts *opts, struct seg **out, char *err, size_t errlen);

/* An anonymous mapping laid out like a segment: a world of one needs no name. */
int seg_create_private(int world_size, uint64_t slot_bytes, uint64_t total_bytes,
                       struct seg **out, char *err, size_t errlen);

/* Maps an existing segment and validates its header against the mapping and
 * against what the caller expects (world size, rank).  Does not join. */
int seg_attach(const char *name, int world_size, int rank, struct seg **out, char *err,
               size_t errlen);

/* Checks a private copy of a header against the size of the mapping (`real`,
 * as the kernel reports it) and the world size the caller expects: 0, or
 * -EBADMSG with a sentence in err.  Pure: reads nothing but *h. */
int seg_validate(const char *name, const struct seg_header *h, uint64_t real, int world,
                 char *err, size_t errlen);

/* Maps a segment read-only from a descriptor (shmesh-top: the launcher's,
 * reopened through /proc) and validates it like seg_attach, whatever its
 * world size.  `what` names it in messages.  The result's writes fault:
 * use only the views and loads. */
int seg_observe(int fd, const char *what, struct seg **out, char *err, size_t errlen);

/* Maps [p, p + bytes) of a writable mapping into this process's page tables
 * now, without changing a byte: the segment's pages exist (the creator
 * reserved them), but each process's first touch of each page is a page
 * fault, about a microsecond here.  One madvise(MADV_POPULATE_WRITE) where
 * the kernel has it (5.14), else a load from each page. */
void seg_populate(void *p, size_t bytes);

/* seg_populate over the pages that small calls touch, every rank's: the
 * header and control blocks, each slot buffer's first page and call
 * description, the eager windows and theirs.  Without it the first 64
 * eager broadcasts each paid a fault or two, so that the first hundred
 * small calls of a job took 1-3 us each instead of 0.1 (docs/performance.md).
 * Then a load from each of those pages that calls read or write (of the
 * descriptions, only rank `self`'s; -1: none): on this VM (PVM, whose
 * hypervisor shadows each process's page tables) a process's first access
 * to a page it has mapped still cost about 5 us, which each of a job's
 * first 64 calls paid when it looked at a late peer's eager window of its
 * call number (docs/performance.md, "The first 64 calls: pages touched once
 * per call number").  Costs about 50 pages per rank of the job, once, at
 * init. */
void seg_populate_hot(const struct seg *s, int self);

/* Bytes the trace rings add to a segment of `world_size` ranks. */
uint64_t seg_trace_bytes(int world_size, uint32_t trace_events);

/* Registers `rank` as attached by process `pid`; the rank that completes the
 * count unlinks the name.  Returns -EBUSY when the rank is already taken. */
int seg_join(struct seg *s, int rank, pid_t pid, char *err, size_t errlen);

/* Removes the name; a name already gone is not an error. */
int seg_unlink(struct seg *s);
/* A created segment's name removed at once (nothing of it is left in
 * /dev/shm, whatever becomes of the job), and the path through which
 * other processes of this user attach to it while its creator lives:
 * "/proc/PID/fd/N" (seg_attach takes it as a name).  0 or -errno. */
int seg_fd_path(struct seg *s, char *path, size_t len);
void seg_close(struct seg *s);

/* Views into the segment, from the private layout; ranks must be in
 * [0, world) and `which` 0 or 1. */
static inline struct seg_ctrl *seg_ctrl(const struct seg *s, int rank)
{
    return (struct seg_ctrl *)(s->base + s->lay.ctrl_offset +
                               (uint64_t)rank * s->lay.ctrl_stride);
}

/* One of the two data buffers of `rank`'s region: its header, then
 * seg_payload_bytes() of payload. */
static inline struct seg_slot_hdr *seg_slot(const struct seg *s, int rank, int which)
{
    return (struct seg_slot_hdr *)(s->base + s->lay.slot_offset +
                                   (uint64_t)rank * s->lay.slot_stride +
                                   (uint64_t)which * s->lay.slot_bytes);
}

static inline void *seg_payload(struct seg_slot_hdr *h) { return (unsigned char *)h + SEG_SLOT_HDR; }

static inline uint64_t seg_payload_bytes(const struct seg *s)
{
    return s->lay.slot_bytes - SEG_SLOT_HDR - SEG_CALL_DESC_MAX;
}

/* `rank`'s share of the shared heap. */
static inline unsigned char *seg_heap(const struct seg *s, int rank)
{
    return s->base + s->lay.heap_offset + (uint64_t)rank * s->lay.heap_share;
}

/* `rank`'s trace ring and its events (only when s->lay.trace_events). */
static inline struct seg_trace_ring *seg_trace_ring(const struct seg *s, int rank)
{
    return (struct seg_trace_ring *)(s->base + s->lay.trace_offset +
                                     (uint64_t)rank * s->lay.trace_share);
}

static inline struct seg_trace_event *seg_trace_events(const struct seg *s, int rank)
{
    return (struct seg_trace_event *)((unsigned char *)seg_trace_ring(s, rank) + SEG_PAGE);
}

/* The same ring as SEG_TRACE_UNIT-byte units (shm/layout.h), and how many. */
static inline unsigned char *seg_trace_units(const struct seg *s, int rank)
{
    return (unsigned char *)seg_trace_events(s, rank);
}

static inline uint64_t seg_trace_unit_count(const struct seg *s)
{
    return (uint64_t)s->lay.trace_events * SEG_TRACE_EVENT_UNITS;
}

/* Eager window i of `rank` (shm/layout.h): its header, then its payload. */
static inline struct seg_slot_hdr *seg_eager(const struct seg *s, int rank, unsigned i)
{
    return (struct seg_slot_hdr *)((unsigned char *)seg_slot(s, rank, 0) + 2 * s->lay.slot_bytes +
                                   (uint64_t)i * SEG_EAGER_BYTES);
}

/* Receipt i of `rank` (shm/layout.h), after the eager windows' descriptions. */
static inline struct seg_slot_hdr *seg_receipt(const struct seg *s, int rank, unsigned i)
{
    return (struct seg_slot_hdr *)((unsigned char *)seg_eager(s, rank, 0) +
                                   SEG_EAGER_ENTRIES * (SEG_EAGER_BYTES + SEG_CALL_DESC_MAX) +
                                   (uint64_t)i * SEG_SLOT_HDR);
}

/* Where `rank` waits as an eager receiver (shm/layout.h), after its receipts. */
static inline struct seg_slot_hdr *seg_eager_wait(const struct seg *s, int rank)
{
    return (struct seg_slot_hdr *)((unsigned char *)seg_receipt(s, rank, 0) +
                                   SEG_EAGER_ENTRIES * SEG_SLOT_HDR);
}

/* One of `rank`'s two control slots (shm/layout.h), after its eager wait: a
 * header and SEG_CONTROL_PAYLOAD bytes of payload on one line. */
static inline struct seg_slot_hdr *seg_control(const struct seg *s, int rank, int which)
{
    return (struct seg_slot_hdr *)((unsigned char *)seg_eager_wait(s, rank) + SEG_EAGER_WAIT +
                                   (uint64_t)which * SEG_CONTROL_SLOT);
}

/* Where a buffer, an eager window, a receipt, the eager wait or a control
 * slot keeps the description of the call whose first window it holds. */
static inline void *seg_call_desc(const struct seg *s, struct seg_slot_hdr *h)
{
    uint64_t at =
        (uint64_t)((unsigned char *)h - (s->base + s->lay.slot_offset)) % s->lay.slot_stride;
    if (at < 2 * s->lay.slot_bytes)
        return (unsigned char *)h + s->lay.slot_bytes - SEG_CALL_DESC_MAX;
    uint64_t e = at - 2 * s->lay.slot_bytes; /* into the eager region */
    uint64_t descs = SEG_EAGER_ENTRIES * SEG_EAGER_BYTES;
    uint64_t receipts = descs + SEG_EAGER_ENTRIES * SEG_CALL_DESC_MAX;
    if (e >= receipts + SEG_EAGER_ENTRIES * SEG_SLOT_HDR) /* the eager wait or a control slot */
        return (unsigned char *)h + SEG_CACHE_LINE;
    uint64_t i = e < receipts ? e / SEG_EAGER_BYTES : (e - receipts) / SEG_SLOT_HDR;
    return (unsigned char *)h - e + descs + i * SEG_CALL_DESC_MAX;
}

/* Job-wide abort: the first caller wins and records why; later callers get
 * -EALREADY.  Every blocked rank is woken.  Async-signal-safe (the SIGBUS
 * guard calls it). */
int seg_abort(struct seg *s, int cause, int rank, int code, const char *reason);

struct seg_abort_info {
    int cause; /* enum seg_abort_cause */
    int rank;
    int code;
    char reason[SEG_REASON_MAX];
};
/* True when the job was aborted; fills *info (reason may be empty when the
 * writer died half-way). */
bool seg_aborted(const struct seg *s, struct seg_abort_info *info);
/* Text a rank wrote (an abort reason), for a terminal: control characters
 * and bytes outside ASCII as C escapes (\x1b, \n), so nothing read from
 * the segment moves the cursor or retitles the window; cut to fit len
 * (4 x the text's length + 1 holds any text whole).  Returns buf. */
const char *seg_text_escaped(const char *s, char *buf, size_t len);

/* Wakes everyone blocked on any word of the segment. */
void seg_wake_all(struct seg *s);

#endif
