/* --trace: the launcher reads every rank's event ring (shm/layout.h,
 * written by lib/trace/) while the job runs, and writes the Chrome trace
 * JSON (Perfetto, chrome://tracing) once it has ended, however it ended.
 *
 * A drain thread looks at the rings every DRAIN_PERIOD_NS and copies the
 * new events of those a quarter full (or not copied for DRAIN_IDLE_NS) into
 * an unlinked temporary file (written around the page cache where the file
 * system allows it: see struct chunk), so that the launcher's memory stays bounded
 * however long the job runs and a ring only has to hold what a rank writes
 * in a few periods.  At the end, after supervise() has returned and before the
 * segment is closed, a last drain takes what the ranks left, and two passes
 * over the file write the JSON: the first finds the earliest time, the
 * second writes the events as it reads them, holding only the flow steps of
 * collectives whose members are not all read yet (struct flows): the
 * launcher's memory is bounded by the rings' size, not the job's length.
 *
 * The JSON's pids are rank + 1: Perfetto treats pid 0 as the kernel's idle
 * task; process_sort_index keeps the tracks in rank order. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/dtype_names.h"
#include "launcher.h"
#include "shm/optable.h"
#include "shmesh.h"
#include "shm/trace_clock.h"

#define DRAIN_PERIOD_NS 10000000L /* 10 ms: how often the rings are looked at */
#define DRAIN_IDLE_NS 1000000000L /* 1 s: the longest a ring waits for a copy */

/* An event's op is an enum call_op (engine/desc.h: the op table's order
 * after 0, none); the launcher links no library, so the names are expanded
 * here from the same table (shm/optable.h). */
static const char *const op_names[] = {
    "none",
#define TRACE_OP_NAME(ID, name, ...) #name,
    SHMESH_OPS(TRACE_OP_NAME)
#undef TRACE_OP_NAME
};
#define OP_COUNT (sizeof op_names / sizeof *op_names)

#define DTYPE_COUNT SHMESH_DTYPE_COUNT

/* A call's result: "ok" or the SHMESH_ERR_* name (shmesh_error_name's). */
static const char *error_name(int code)
{
    switch (code) {
    case 0:
        return "ok";
#define TRACE_ERR(name, value, text)                                                          \
    case value:                                                                               \
        return "SHMESH_ERR_" #name;
        SHMESH_ERROR_MAP(TRACE_ERR)
#undef TRACE_ERR
    }
    return NULL;
}

/* What the drain writes to the temporary file: for each copy of a ring, a
 * header block (struct chunk, then zeros, CHUNK_BYTES in all) and the
 * ring's blocks that hold the units copied, as they were in the ring,
 * written straight from the segment with one call.  The records are read
 * out of them only when the JSON is written, after the job.
 *
 * The file is opened O_DIRECT where its file system takes that: the drain
 * then copies nothing itself and fills no page cache.  Copying the records
 * out and writing them through the page cache took most of the drain's
 * time, and on a node with no free core that time is taken from a rank:
 * an 8-byte psum on 2 ranks of 2 cores ran about 1.2x slower traced with
 * it, about 1.06x with this (docs/performance.md, "Tracing"). */
#define CHUNK_BYTES 4096u
#define CHUNK_MAGIC 0x52545353u /* "SSTR" */
struct chunk {
    uint32_t magic;
    int32_t rank;
    uint32_t block_units; /* units in a block: 256 (4 KiB), or the ring's if fewer */
    uint32_t blocks;      /* ring blocks that follow (the first holds unit `first`) */
    uint64_t first;       /* the unit number of the first block's first unit */
    uint64_t start;       /* the first unit to read: where a record starts */
    uint64_t head;        /* the first unit not to read */
    uint32_t lost;        /* units before `start` were lost: repeats after wait for an event */
    uint32_t unused;
};
_Static_assert(sizeof(struct chunk) <= CHUNK_BYTES, "a chunk's header fits its block");

/* One event read back, and its rank. */
struct record {
    int32_t rank;
    struct seg_trace_event ev;
    uint64_t sent, received; /* a call's traffic unit (0 without one) */
};

/* A repeat (struct seg_trace_repeat, shm/layout.h) is rebuilt from the
 * rank's last call record. */
static void unrepeat(const struct seg_trace_repeat *rp, struct seg_trace_event *last)
{
    last->call++;
    last->t0 = rp->t0;
    last->t1 = rp->t0 + rp->dt;
}

/* Per rank: how far the drain got, and what the reader found (each pass
 * over the temporary file counts again; the writer needs them before its
 * second pass). */
struct ring_state {
    uint64_t next;      /* the next unit to copy */
    int64_t drained_ns; /* when the drain thread last copied this ring */
    uint64_t read;      /* records read (the rank's `records` less these were lost) */
    uint64_t dropped;   /* records lost, once the first pass is over */
    bool any_call;
    uint64_t last_call; /* the number of the last CALL read */
};

struct trace {
    const char *path;
    int fd;        /* the JSON's file, opened before the ranks start */
    int tmp_fd;    /* the records; only the drain writes it until it stops */
    bool direct;   /* tmp_fd is O_DIRECT */
    off_t tmp_end; /* where the next chunk goes */
    struct seg *seg;
    const struct rank_proc *ranks; /* their pids, for ranks that never wrote theirs */
    int world;
    struct ring_state *rings;
    struct chunk *header; /* the drain's: CHUNK_BYTES, aligned to them (O_DIRECT) */
    bool tmp_failed; /* writing the temporary file failed (errno in tmp_errno) */
    int tmp_errno;
    pthread_t thread;
    bool running;
    _Atomic bool stop;
};

int trace_open(struct job *j)
{
    if (!j->o.trace_path)
        return 0;
    struct trace *t = calloc(1, sizeof *t);
    if (!t) {
        fprintf(stderr, PROG ": out of memory\n");
        return -1;
    }
    t->path = j->o.trace_path;
    /* Opened now, before any rank starts: a trace that cannot be written is
     * a usage error found at once, not after an hour of work.  Without
     * blocking: a FIFO that nobody reads would hold open() for ever, with
     * the signals blocked and no --timeout armed yet.  The writes at the end
     * block as usual (a reader that is there is waited for). */
    t->fd = open(t->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
    if (t->fd < 0) {
        if (errno == ENXIO)
            fprintf(stderr,
                    PROG ": --trace: nobody reads the FIFO '%s': expected a reader already "
                         "there (start it first), found none\n",
                    t->path);
        else
            fprintf(stderr, PROG ": --trace: cannot open '%s' for writing: %s\n", t->path,
                    strerror(errno));
        free(t);
        return -1;
    }
    int fl = fcntl(t->fd, F_GETFL);
    if (fl >= 0)
        fcntl(t->fd, F_SETFL, fl & ~O_NONBLOCK);
    /* Unnamed and close-on-exec: the ranks must not inherit it.  In $TMPDIR
     * (as mktemp), else /tmp. */
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : P_tmpdir;
    t->tmp_fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC | O_DIRECT, 0600);
    t->direct = t->tmp_fd >= 0;
    if (t->tmp_fd < 0) /* file systems that refuse O_DIRECT */
        t->tmp_fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (t->tmp_fd < 0) {
        fprintf(stderr,
                PROG ": --trace: cannot create a temporary file (in %s) for the events: %s\n",
                dir, strerror(errno));
        close(t->fd);
        free(t);
        return -1;
    }
    j->trace = t;
    return 0;
}

void trace_drop(struct job *j)
{
    struct trace *t = j->trace;
    if (!t)
        return;
    j->trace = NULL;
    close(t->fd);
    close(t->tmp_fd);
    free(t);
}

/* Units in a block of the image the drain writes: a 4 KiB block (the
 * ring's units start on a page), or the whole ring if it is smaller. */
static uint64_t block_units(uint64_t cap)
{
    uint64_t b = CHUNK_BYTES / SEG_TRACE_UNIT;
    return cap < b ? cap : b;
}

/* pwritev, whole; with O_DIRECT refused for this buffer or size (EINVAL:
 * a file system that wants another alignment, or a ring smaller than a
 * block), written through the page cache from here on. */
static int write_all(struct trace *t, struct iovec *iov, int n, off_t off)
{
    while (n) {
        ssize_t w = pwritev(t->tmp_fd, iov, n, off);
        if (w < 0 && errno == EINVAL && t->direct) {
            int fl = fcntl(t->tmp_fd, F_GETFL);
            if (fl < 0 || fcntl(t->tmp_fd, F_SETFL, fl & ~O_DIRECT) < 0)
                return -errno;
            t->direct = false;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        off += w;
        for (; n && (size_t)w >= iov->iov_len; n--, iov++)
            w -= (ssize_t)iov->iov_len;
        if (n) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Copies rank r's new units [next, head) to the temporary file: the ring's
 * blocks that hold them, straight from the segment, then the chunk that
 * says which units to read.  The writer never waits: while we copy, it may
 * overwrite the oldest units, so head is read again after the copy, and the
 * units it may have reached are left out (the reading starts at the next
 * event's place after them). */
static void drain_ring(struct trace *t, int r)
{
    struct ring_state *rs = &t->rings[r];
    struct seg_trace_ring *ring = (struct seg_trace_ring *)seg_trace_ring(t->seg, r);
    unsigned char *units = seg_trace_units(t->seg, r);
    uint64_t cap = seg_trace_unit_count(t->seg);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
    if (head <= rs->next || t->tmp_failed)
        return; /* nothing new (or a head gone backwards: a rank's bug, ignored) */
    if (!t->header && !(t->header = aligned_alloc(CHUNK_BYTES, CHUNK_BYTES)))
        return; /* tried again on the next round; counted as lost if overwritten */
    uint64_t from = rs->next;
    bool lost = false;
    if (head - from > cap) {
        lost = true;
        from = head - cap;
    }
    /* Blocks [b0, b1) of the units' numbering; block b is the ring's
     * block b % nring: at most nring + 1 of them, in up to 3 runs. */
    uint64_t bu = block_units(cap), nring = cap / bu;
    uint64_t b0 = from / bu, b1 = (head + bu - 1) / bu;
    struct iovec iov[4];
    int n = 0;
    for (uint64_t b = b0; b < b1;) {
        uint64_t k = b % nring, run = nring - k < b1 - b ? nring - k : b1 - b;
        iov[n++] = (struct iovec){units + k * bu * SEG_TRACE_UNIT, run * bu * SEG_TRACE_UNIT};
        b += run;
    }
    off_t at = t->tmp_end;
    int err = write_all(t, iov, n, at + CHUNK_BYTES);
    atomic_thread_fence(memory_order_acquire);
    uint64_t again = atomic_load_explicit(&ring->head, memory_order_acquire);
    /* The writer may be storing a record of up to 7 units (pads and an
     * event) from unit `again` on, over units again - cap on: those are
     * suspect. */
    uint64_t reach = again + 2 * SEG_TRACE_EVENT_UNITS - 1;
    uint64_t safe = reach >= cap ? reach - cap : 0;
    lost |= safe > from;
    uint64_t start = from;
    if (lost) { /* the next record start after what was lost */
        start = safe > from ? safe : from;
        start = (start + SEG_TRACE_EVENT_UNITS - 1) / SEG_TRACE_EVENT_UNITS * SEG_TRACE_EVENT_UNITS;
    }
    memset(t->header, 0, CHUNK_BYTES);
    *t->header = (struct chunk){.magic = CHUNK_MAGIC, .rank = r, .block_units = (uint32_t)bu,
                                .blocks = (uint32_t)(b1 - b0), .first = b0 * bu,
                                .start = start < head ? start : head, .head = head, .lost = lost};
    struct iovec hv = {t->header, CHUNK_BYTES};
    if (!err)
        err = write_all(t, &hv, 1, at);
    if (err) {
        t->tmp_failed = true;
        t->tmp_errno = -err;
        return;
    }
    t->tmp_end = at + CHUNK_BYTES + (off_t)((b1 - b0) * bu * SEG_TRACE_UNIT);
    rs->next = head;
}

static void drain_all(struct trace *t)
{
    for (int r = 0; r < t->world; r++)
        drain_ring(t, r);
}

/* The drain thread shares the machine with the ranks (on a node with no
 * free core, every copy it makes takes a core from one): a ring is copied
 * once it is a quarter full, or DRAIN_IDLE_NS after its last copy, so a
 * large ring (--trace-events) is copied in few large pieces, and a short
 * job's events mostly wait for the last drain after it. */
static void drain_due(struct trace *t)
{
    int64_t now = trace_mono_ns();
    uint64_t quarter = seg_trace_unit_count(t->seg) / 4;
    for (int r = 0; r < t->world; r++) {
        struct ring_state *rs = &t->rings[r];
        uint64_t head = atomic_load_explicit(&seg_trace_ring(t->seg, r)->head,
                                             memory_order_relaxed);
        if (head - rs->next >= quarter || now - rs->drained_ns >= DRAIN_IDLE_NS) {
            drain_ring(t, r);
            rs->drained_ns = now;
        }
    }
}

static void *drain_thread(void *arg)
{
    struct trace *t = arg;
    while (!atomic_load(&t->stop)) {
        drain_due(t);
        struct timespec ts = {0, DRAIN_PERIOD_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int trace_start(struct job *j)
{
    struct trace *t = j->trace;
    if (!t)
        return 0;
    t->seg = j->seg;
    t->ranks = j->ranks;
    t->world = j->o.np;
    t->rings = calloc((size_t)t->world, sizeof *t->rings);
    if (!t->rings) {
        say("--trace: out of memory; no trace");
        return -1;
    }
    /* Started once every rank is forked (a thread that holds malloc's lock
     * across a fork would leave the child stuck in it). */
    int e = pthread_create(&t->thread, NULL, drain_thread, t);
    if (e) {
        /* The final drain still takes what fits in the rings. */
        say("--trace: cannot start the drain thread (%s): only the last %u events of each "
            "rank will be in the trace", strerror(e), t->seg->lay.trace_events);
        return 0;
    }
    t->running = true;
    return 0;
}

/* ---- the JSON ------------------------------------------------------------- */

/* Ticks of one rank's clock to CLOCK_MONOTONIC nanoseconds: the rank's pair
 * of readings taken at its start and ours taken at the end. */
struct conv {
    enum trace_clock_kind kind;
    uint64_t t0, t1;
    int64_t ns0, ns1;
    bool valid; /* the rank wrote its ring's header */
};

static int64_t to_ns(const struct conv *c, uint64_t ticks)
{
    return trace_ticks_to_ns(c->kind, ticks, c->t0, c->ns0, c->t1, c->ns1);
}

/* Flow arrows join the slices of one collective's members.  Each member's
 * step is placed at the latest start among the members (so that the steps
 * come in order in time and each lies inside its own slice), which is known
 * only once every member's event was read.  The members' events lie near
 * each other in the temporary file (the drain copies every ring at least
 * once a second, and a collective's members run it at about the same time),
 * so the steps of a collective are held only until its last member comes:
 * then they are written and forgotten.  The memory is bounded by what the
 * rings hold (FLOWS_PER_EVENT), not by the job's length; a collective still
 * open when the bound is reached, the oldest first, is written with the
 * members seen so far (or dropped, without both ends).  The JSON's order of
 * events does not matter to its readers. */
#define NIL UINT32_MAX
#define FLOWS_MIN 1024u
#define FLOWS_MAX (1u << 22) /* steps held at most: 128 MiB of them */

struct step {
    int64_t start, end;
    int32_t rank;
    uint32_t next; /* the collective's next step, or NIL */
    uint8_t flags, op;
};

/* A collective whose members are not all read yet. */
struct flow {
    uint64_t call;
    int64_t latest;
    int32_t leader; /* -1: the slot is free (written out, or never used) */
    int32_t members, seen;
    uint32_t steps; /* the first of its steps, or NIL */
    unsigned flags; /* the ends seen: SEG_TEV_FIRST, SEG_TEV_LAST */
};

struct flows {
    /* The collectives open, in the order their first member was read: a
     * ring of qcap slots from head, len of them used (free ones among). */
    struct flow *q;
    uint32_t qcap, head, len;
    uint32_t *index; /* open addressing over q: slot + 1, 0 for none */
    uint32_t mask;
    struct step *st;
    uint32_t stcap, free_step, held; /* free_step: list through next */
    uint32_t bound;  /* steps (and collectives) held at most */
};

static uint64_t flow_hash(uint64_t call, int64_t leader)
{
    uint64_t h = call * 0x9e3779b97f4a7c15ull ^ (uint64_t)leader * 0xc2b2ae3d27d4eb4full;
    return h ^ (h >> 29);
}

static void flows_free(struct flows *f)
{
    free(f->q);
    free(f->index);
    free(f->st);
    *f = (struct flows){0};
}

static void index_put(struct flows *f, uint32_t slot)
{
    const struct flow *e = &f->q[slot];
    uint32_t i = (uint32_t)flow_hash(e->call, e->leader) & f->mask;
    while (f->index[i])
        i = (i + 1) & f->mask;
    f->index[i] = slot + 1;
}

/* The index position of (call, leader), or of the empty entry where it
 * would go. */
static uint32_t index_at(const struct flows *f, uint64_t call, int32_t leader)
{
    uint32_t i = (uint32_t)flow_hash(call, leader) & f->mask;
    for (; f->index[i]; i = (i + 1) & f->mask) {
        const struct flow *e = &f->q[f->index[i] - 1];
        if (e->call == call && e->leader == leader)
            break;
    }
    return i;
}

/* Removes index entry i, moving back the entries after it that would not
 * be found past the hole (linear probing's deletion). */
static void index_del(struct flows *f, uint32_t i)
{
    for (;;) {
        f->index[i] = 0;
        uint32_t j = i;
        for (;;) {
            j = (j + 1) & f->mask;
            if (!f->index[j])
                return;
            const struct flow *e = &f->q[f->index[j] - 1];
            uint32_t home = (uint32_t)flow_hash(e->call, e->leader) & f->mask;
            bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
            if (!stays)
                break;
        }
        f->index[i] = f->index[j];
        i = j;
    }
}

/* Room for `want` collectives (up to the bound): the ring is laid out
 * again from its head and the index rebuilt.  false without memory. */
static bool flows_grow(struct flows *f, uint32_t want)
{
    uint32_t qcap = FLOWS_MIN;
    while (qcap < want)
        qcap *= 2;
    struct flow *q = malloc((size_t)qcap * sizeof *q);
    uint32_t *index = calloc(2 * (size_t)qcap, sizeof *index);
    if (!q || !index) {
        free(q);
        free(index);
        return false;
    }
    uint32_t n = 0;
    for (uint32_t k = 0; k < f->len; k++) {
        const struct flow *e = &f->q[(f->head + k) % f->qcap];
        if (e->leader >= 0)
            q[n++] = *e;
    }
    free(f->q);
    free(f->index);
    f->q = q;
    f->index = index;
    f->qcap = qcap;
    f->mask = 2 * qcap - 1;
    f->head = 0;
    f->len = n;
    for (uint32_t k = 0; k < n; k++)
        index_put(f, k);
    return true;
}

static bool steps_grow(struct flows *f)
{
    uint32_t cap = f->stcap ? 2 * f->stcap : FLOWS_MIN;
    struct step *st = realloc(f->st, (size_t)cap * sizeof *st);
    if (!st)
        return false;
    for (uint32_t i = f->stcap; i < cap; i++)
        st[i].next = i + 1 < cap ? i + 1 : f->free_step;
    f->free_step = f->stcap;
    f->st = st;
    f->stcap = cap;
    return true;
}

struct writer;
static void flow_write(struct writer *w, struct flows *f, const struct flow *fl);

/* Writes collective `slot` with what was seen of it and frees it. */
static void flow_close(struct writer *w, struct flows *f, uint32_t slot)
{
    struct flow *fl = &f->q[slot];
    flow_write(w, f, fl);
    index_del(f, index_at(f, fl->call, fl->leader));
    for (uint32_t s = fl->steps, next; s != NIL; s = next) {
        next = f->st[s].next;
        f->st[s].next = f->free_step;
        f->free_step = s;
        f->held--;
    }
    fl->leader = -1;
    /* Free slots at the head are given back at once. */
    while (f->len && f->q[f->head].leader < 0) {
        f->head = (f->head + 1) % f->qcap;
        f->len--;
    }
}

/* The oldest collective still open, written with what was seen of it. */
static void flow_evict(struct writer *w, struct flows *f)
{
    while (f->len && f->q[f->head].leader < 0) {
        f->head = (f->head + 1) % f->qcap;
        f->len--;
    }
    if (f->len)
        flow_close(w, f, f->head);
}

/* One member's step of a collective; the collective is written once its
 * last member came.  -ENOMEM when not even the bound could be had. */
static int flow_step(struct writer *w, struct flows *f, int rank, const struct seg_trace_event *e,
                     int64_t start, int64_t end)
{
    /* Room for one more collective and one more step: grown up to the
     * bound, else made by writing out the oldest collective open. */
    if (f->len == f->qcap && !(f->qcap < f->bound && flows_grow(f, f->qcap ? 2 * f->qcap : 0)) &&
        !f->qcap)
        return -ENOMEM;
    while (f->len == f->qcap)
        flow_evict(w, f);
    if (f->free_step == NIL && !(f->stcap < f->bound && steps_grow(f)) && !f->held)
        return -ENOMEM;
    while (f->free_step == NIL)
        flow_evict(w, f);
    uint32_t i = index_at(f, e->call, e->leader);
    uint32_t slot;
    if (f->index[i]) {
        slot = f->index[i] - 1;
    } else {
        slot = (f->head + f->len++) % f->qcap;
        f->q[slot] = (struct flow){.call = e->call, .leader = e->leader, .latest = INT64_MIN,
                                   .members = e->members, .steps = NIL};
        f->index[i] = slot + 1;
    }
    struct flow *fl = &f->q[slot];
    uint32_t s = f->free_step;
    f->free_step = f->st[s].next;
    f->held++;
    f->st[s] = (struct step){.start = start, .end = end, .rank = rank, .next = fl->steps,
                             .flags = e->flags, .op = e->op};
    fl->steps = s;
    fl->latest = start > fl->latest ? start : fl->latest;
    fl->flags |= e->flags;
    if (++fl->seen >= fl->members)
        flow_close(w, f, slot);
    return 0;
}

/* The flow id of a collective: call * 2^20 + leader (device ids stay below
 * 2^18: 4096 ranks of 64 devices). */
static uint64_t flow_id(uint64_t call, int32_t leader)
{
    return (call << 20) + (uint64_t)(uint32_t)leader;
}

/* JSON output: a string of at most `max` bytes, escaped. */
static void put_str(FILE *f, const char *s, size_t max)
{
    fputc('"', f);
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c); /* bytes as Latin-1: never invalid UTF-8 */
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Nanoseconds as microseconds with three decimals, exactly. */
static void put_us(FILE *f, int64_t ns)
{
    if (ns < 0) {
        fputc('-', f);
        ns = -ns;
    }
    fprintf(f, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

struct writer {
    FILE *f;
    bool first;
    int64_t base; /* the earliest time in the trace: ts 0 */
};

static void begin_event(struct writer *w, const char *ph, int rank, int64_t ns)
{
    fprintf(w->f, "%s\n{\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":", w->first ? "" : ",", ph,
            rank + 1, rank + 1);
    put_us(w->f, ns - w->base);
    w->first = false;
}

static void metadata(struct writer *w, int rank, const char *name, const char *key,
                     const char *text, int value)
{
    fprintf(w->f, "%s\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"%s\":",
            w->first ? "" : ",", rank + 1, rank + 1, name, key);
    if (text)
        put_str(w->f, text, strlen(text));
    else
        fprintf(w->f, "%d", value);
    fputs("}}", w->f);
    w->first = false;
}

static const char *event_op_name(unsigned op, char *buf, size_t len)
{
    if (op < OP_COUNT && op_names[op])
        return op_names[op];
    snprintf(buf, len, "op %u", op);
    return buf;
}

static void call_slice(struct writer *w, int rank, const struct record *rec, int64_t start,
                       int64_t end, const struct seg_trace_ring *ring)
{
    const struct seg_trace_event *e = &rec->ev;
    char buf[32];
    begin_event(w, "X", rank, start);
    fputs(",\"dur\":", w->f);
    put_us(w->f, end - start);
    fprintf(w->f, ",\"cat\":\"call\",\"name\":\"%s\",\"args\":{\"call\":%" PRIu64
                  ",\"bytes\":%" PRIu64 ",\"path\":",
            event_op_name(e->op, buf, sizeof buf), e->call, e->bytes);
    if (e->path < SEG_TRACE_PATHS)
        put_str(w->f, ring->path_names[e->path], SEG_TRACE_NAME);
    else
        fputs(e->path == SEG_TEV_NO_PATH ? "null" : "\"?\"", w->f);
    fprintf(w->f, ",\"leader\":%" PRId32 ",\"members\":%" PRId32 ",\"dtype\":", e->leader,
            e->members);
    if (e->dtype < DTYPE_COUNT)
        fprintf(w->f, "\"%s\"", dtype_names[e->dtype]);
    else
        fprintf(w->f, "%u", e->dtype);
    fputs(",\"axes\":", w->f);
    put_str(w->f, e->axes, sizeof e->axes);
    fputs(",\"result\":", w->f);
    if (error_name(e->rc))
        fprintf(w->f, "\"%s\"", error_name(e->rc));
    else
        fprintf(w->f, "\"error %" PRId32 "\"", e->rc);
    if (rec->sent | rec->received)
        fprintf(w->f, ",\"sent\":%" PRIu64 ",\"received\":%" PRIu64, rec->sent, rec->received);
    fputs("}}", w->f);
}

/* A collective's flow: only where both ends are in the trace.  s, then
 * the steps, then f, 1 ns apart at the latest start, each kept inside its
 * own slice. */
static void flow_write(struct writer *w, struct flows *f, const struct flow *fl)
{
    if (fl->flags != (SEG_TEV_FIRST | SEG_TEV_LAST))
        return;
    for (uint32_t s = fl->steps; s != NIL; s = f->st[s].next) {
        const struct step *p = &f->st[s];
        const char *ph = p->flags & SEG_TEV_FIRST ? "s" : p->flags & SEG_TEV_LAST ? "f" : "t";
        int64_t at = fl->latest + (*ph == 's' ? 0 : *ph == 'f' ? 2 : 1);
        at = at < p->start ? p->start : at > p->end ? p->end : at;
        char buf[32];
        begin_event(w, ph, p->rank, at);
        fprintf(w->f, ",\"cat\":\"collective\",\"name\":\"%s\",\"id\":%" PRIu64 "%s}",
                event_op_name(p->op, buf, sizeof buf), flow_id(fl->call, fl->leader),
                *ph == 'f' ? ",\"bp\":\"e\"" : "");
    }
}

static void wait_slice(struct writer *w, int rank, int peer, uint64_t tag, int64_t start,
                       int64_t end, bool unfinished)
{
    begin_event(w, "X", rank, start);
    fputs(",\"dur\":", w->f);
    put_us(w->f, end - start);
    fprintf(w->f,
            ",\"cat\":\"wait\",\"name\":\"wait rank %d\",\"args\":{\"peer\":%d,\"call\":%" PRIu64
            ",\"window\":%" PRIu64 "%s}}",
            peer, peer, tag >> 32, tag & 0xffffffffu, unfinished ? ",\"unfinished\":true" : "");
}

/* Waits come before their call in the ring; they are written after it, so
 * that a viewer meets the enclosing slice first (up to WAITS_HELD of them:
 * a call that waits more is written as its waits come). */
#define WAITS_HELD 4096
struct pending {
    struct seg_trace_event *v;
    size_t n, cap;
};

struct rank_out {
    struct conv conv;
    struct pending waits;
    uint64_t bytes;          /* cumulative, for the counter */
    uint64_t sent, received; /* cumulative, for the traffic counter */
};

static void flush_waits(struct writer *w, int rank, struct rank_out *ro)
{
    for (size_t i = 0; i < ro->waits.n; i++) {
        const struct seg_trace_event *e = &ro->waits.v[i];
        wait_slice(w, rank, e->peer, e->tag, to_ns(&ro->conv, e->t0), to_ns(&ro->conv, e->t1),
                   false);
    }
    ro->waits.n = 0;
}

/* Reading the temporary file back from its start, through the page cache
 * (the drain has stopped): the chunk being read, its blocks, and each
 * rank's last call (what a repeat repeats).  Counts what it reads in
 * t->rings (each pass again). */
struct reader {
    FILE *f;
    struct trace *t;
    struct chunk cur;
    uint64_t at;          /* the next unit of cur to read */
    unsigned char *image; /* cur's blocks */
    size_t image_cap;
    bool *chain; /* per rank: last[r] is its last call record, repeats can be read */
    struct record *last;
};

static int reader_open(struct reader *rd, struct trace *t)
{
    *rd = (struct reader){.t = t};
    int fl = fcntl(t->tmp_fd, F_GETFL);
    if (fl < 0 || fcntl(t->tmp_fd, F_SETFL, fl & ~O_DIRECT) < 0)
        return -errno;
    t->direct = false;
    int fd = dup(t->tmp_fd);
    if (fd < 0)
        return -errno;
    if (!(rd->f = fdopen(fd, "r"))) {
        close(fd);
        return -ENOMEM;
    }
    rd->last = calloc((size_t)t->world, sizeof *rd->last);
    rd->chain = calloc((size_t)t->world, sizeof *rd->chain);
    if (!rd->last || !rd->chain)
        return -ENOMEM; /* reader_close frees what there is */
    rewind(rd->f); /* the dup shares the file's offset */
    for (int r = 0; r < t->world; r++) {
        struct ring_state *rs = &t->rings[r];
        rs->read = rs->last_call = 0;
        rs->any_call = false;
    }
    return 0;
}

static void reader_close(struct reader *rd)
{
    free(rd->last);
    free(rd->chain);
    free(rd->image);
    if (rd->f)
        fclose(rd->f);
}

/* The next chunk and its blocks; false at the end (or at one that makes
 * no sense: a short file after a failed write). */
static bool next_chunk(struct reader *rd)
{
    struct chunk *c = &rd->cur;
    unsigned char hb[CHUNK_BYTES];
    if (fread(hb, sizeof hb, 1, rd->f) != 1)
        return false;
    memcpy(c, hb, sizeof *c);
    uint64_t bu = c->block_units, cap = seg_trace_unit_count(rd->t->seg);
    size_t bytes = (size_t)c->blocks * bu * SEG_TRACE_UNIT;
    if (c->magic != CHUNK_MAGIC || c->rank < 0 || c->rank >= rd->t->world ||
        bu != block_units(cap) || c->blocks > cap / bu + 1 || c->start < c->first ||
        c->head < c->start || c->head - c->first > c->blocks * bu)
        return false;
    if (bytes > rd->image_cap) {
        free(rd->image);
        if (!(rd->image = malloc(bytes)))
            return false;
        rd->image_cap = bytes;
    }
    if (fread(rd->image, 1, bytes, rd->f) != bytes)
        return false;
    rd->at = c->start;
    if (c->lost)
        rd->chain[c->rank] = false;
    return true;
}

/* The next record of the temporary file: the chunks' units [start, head)
 * read as the rank wrote them (shm/layout.h): pads skipped, a repeat
 * rebuilt from its rank's last call, one after a lost call record dropped
 * (counted with the lost). */
static bool read_record(struct reader *rd, struct record *rec)
{
    struct chunk *c = &rd->cur;
    for (;;) {
        while (rd->at >= c->head)
            if (!next_chunk(rd))
                return false;
        int r = c->rank;
        struct ring_state *rs = &rd->t->rings[r];
        const unsigned char *u = rd->image + (rd->at - c->first) * SEG_TRACE_UNIT;
        if (u[0] == SEG_TEV_PAD) {
            rd->at++;
            continue;
        }
        if (u[0] == SEG_TEV_REPEAT) {
            rd->at++;
            if (!rd->chain[r])
                continue;
            struct seg_trace_repeat rp;
            memcpy(&rp, u, sizeof rp);
            unrepeat(&rp, &rd->last[r].ev);
            *rec = rd->last[r];
        } else if ((u[0] == SEG_TEV_CALL || u[0] == SEG_TEV_WAIT) &&
                   rd->at % SEG_TRACE_EVENT_UNITS == 0 && c->head - rd->at >= SEG_TRACE_EVENT_UNITS) {
            memcpy(&rec->ev, u, sizeof rec->ev);
            rd->at += SEG_TRACE_EVENT_UNITS;
            rec->sent = rec->received = 0;
            if (rec->ev.kind == SEG_TEV_CALL) {
                /* Its traffic unit, committed with it. */
                if (rd->at < c->head && u[SEG_TRACE_EVENT] == SEG_TEV_TRAFFIC) {
                    struct seg_trace_traffic x;
                    memcpy(&x, u + SEG_TRACE_EVENT, sizeof x);
                    rec->sent = x.kind_sent >> 8;
                    rec->received = x.received;
                    rd->at++;
                }
                rd->chain[r] = true;
                rd->last[r] = *rec;
            }
        } else { /* not a record start (a rank's bug): on to the next event's place */
            rd->at = (rd->at / SEG_TRACE_EVENT_UNITS + 1) * SEG_TRACE_EVENT_UNITS;
            rd->chain[r] = false;
            continue;
        }
        rs->read++;
        if (rec->ev.kind == SEG_TEV_CALL) {
            rs->any_call = true;
            rs->last_call = rec->ev.call;
        }
        rec->rank = r;
        return true;
    }
}

/* Each rank's clock pair: the one its ring recorded at start, and now. */
static void conv_init(struct trace *t, struct rank_out *ro)
{
    for (int r = 0; r < t->world; r++) {
        const struct seg_trace_ring *ring = seg_trace_ring(t->seg, r);
        struct conv *c = &ro[r].conv;
        c->kind = ring->clock_kind == TRACE_CLOCK_TSC ? TRACE_CLOCK_TSC : TRACE_CLOCK_NS;
        c->t0 = ring->clock_ticks;
        c->ns0 = ring->clock_ns;
        c->valid = ring->clock_ns != 0;
        trace_clock_pair(c->kind, &c->t1, &c->ns1);
    }
}

/* Steps held at most: as many as the rings hold records. */
static void flows_init(struct flows *flows, const struct trace *t)
{
    uint64_t bound = FLOWS_MIN;
    while (bound < (uint64_t)t->world * seg_trace_unit_count(t->seg) && bound < FLOWS_MAX)
        bound *= 2;
    flows->bound = (uint32_t)bound;
    flows->free_step = NIL;
}

/* Pass 1: the earliest time, ts 0: the first event read, or the start of
 * a call still running at the end (no later than its slices); end_ns
 * without either. */
static int64_t earliest_ns(struct trace *t, const struct rank_out *ro, int64_t end_ns)
{
    int64_t base = INT64_MAX;
    struct record rec;
    struct reader rd;
    if (reader_open(&rd, t))
        return end_ns;
    while (read_record(&rd, &rec)) {
        if (rec.rank < 0 || rec.rank >= t->world)
            continue;
        int64_t s = to_ns(&ro[rec.rank].conv, rec.ev.t0);
        base = s < base ? s : base;
    }
    reader_close(&rd);
    for (int r = 0; r < t->world; r++) {
        const struct seg_status *st = &seg_ctrl(t->seg, r)->status;
        uint64_t since = atomic_load(&((struct seg_status *)st)->call_since);
        if (atomic_load(&((struct seg_status *)st)->activity) != SEG_ACT_IDLE && since &&
            ro[r].conv.valid) {
            int64_t s = to_ns(&ro[r].conv, since);
            base = s < base ? s : base;
        }
    }
    return base == INT64_MAX ? end_ns : base;
}

/* A process and a thread per rank, named for the viewer. */
static void write_rank_names(struct writer *w, const struct trace *t)
{
    for (int r = 0; r < t->world; r++) {
        const struct seg_trace_ring *ring = seg_trace_ring(t->seg, r);
        char name[64];
        int pid = ring->pid ? ring->pid : t->ranks ? (int)t->ranks[r].pid : 0;
        snprintf(name, sizeof name, "rank %d (pid %d)", r, pid);
        metadata(w, r, "process_name", "name", name, 0);
        metadata(w, r, "process_sort_index", "sort_index", NULL, r);
        snprintf(name, sizeof name, "rank %d", r);
        metadata(w, r, "thread_name", "name", name, 0);
    }
}

/* A wait is held until its call is written (see WAITS_HELD). */
static int hold_wait(struct writer *w, int r, struct rank_out *o, const struct seg_trace_event *e)
{
    if (o->waits.n == WAITS_HELD)
        flush_waits(w, r, o); /* a call that waits without end: no call slice yet */
    if (o->waits.n == o->waits.cap) {
        size_t cap = o->waits.cap ? 2 * o->waits.cap : 16;
        void *v = realloc(o->waits.v, cap * sizeof *o->waits.v);
        if (!v)
            return -ENOMEM;
        o->waits.v = v;
        o->waits.cap = cap;
    }
    o->waits.v[o->waits.n++] = *e;
    return 0;
}

/* A finished call: its slice, its waits, the bytes and traffic counters,
 * and its step of the collective's flow. */
static int write_call(struct writer *w, struct trace *t, struct flows *flows, int r,
                      struct rank_out *o, const struct record *rec)
{
    const struct seg_trace_event *e = &rec->ev;
    const struct seg_trace_ring *ring = seg_trace_ring(t->seg, r);
    int64_t start = to_ns(&o->conv, e->t0), end = to_ns(&o->conv, e->t1);
    end = end < start ? start : end;
    call_slice(w, r, rec, start, end, ring);
    flush_waits(w, r, o);
    o->bytes += e->bytes;
    begin_event(w, "C", r, end);
    fprintf(w->f, ",\"name\":\"bytes moved\",\"args\":{\"bytes\":%" PRIu64 "}}", o->bytes);
    if (rec->sent | rec->received) {
        o->sent += rec->sent;
        o->received += rec->received;
        begin_event(w, "C", r, end);
        fprintf(w->f, ",\"name\":\"traffic\",\"args\":{\"sent\":%" PRIu64 ",\"received\":%" PRIu64 "}}",
                o->sent, o->received);
    }
    if (e->members > 1 && e->leader >= 0 && e->flags != (SEG_TEV_FIRST | SEG_TEV_LAST))
        return flow_step(w, flows, r, e, start, end);
    return 0;
}

/* Pass 2: the events, each rank's in its own order; a collective's flow
 * steps once its last member is read.  Counts the calls written. */
static int write_events(struct writer *w, struct trace *t, struct rank_out *ro,
                        struct flows *flows, uint64_t *calls)
{
    struct record rec;
    struct reader rd;
    int err = reader_open(&rd, t);
    while (!err && read_record(&rd, &rec)) {
        int r = rec.rank;
        if (r < 0 || r >= t->world)
            continue;
        const struct seg_trace_event *e = &rec.ev;
        if (e->kind == SEG_TEV_WAIT) {
            err = hold_wait(w, r, &ro[r], e);
            continue;
        }
        if (e->kind != SEG_TEV_CALL)
            continue;
        (*calls)++;
        err = write_call(w, t, flows, r, &ro[r], &rec);
    }
    reader_close(&rd);
    return err;
}

/* Ranks that were inside a call when the job ended: a slice (and the wait
 * it was in) up to end_ns.  Counts the calls written. */
static void write_unfinished(struct writer *w, struct trace *t, struct rank_out *ro,
                             int64_t end_ns, uint64_t *calls)
{
    for (int r = 0; r < t->world; r++) {
        struct seg_status *st = &seg_ctrl(t->seg, r)->status;
        struct ring_state *rs = &t->rings[r];
        struct rank_out *o = &ro[r];
        uint32_t act = atomic_load(&st->activity);
        uint64_t word = atomic_load(&st->call);
        uint64_t since = atomic_load(&st->call_since);
        uint64_t number = SEG_STATUS_NUMBER(word);
        if (act == SEG_ACT_IDLE || !since || !o->conv.valid ||
            (rs->any_call && rs->last_call >= number))
            continue;
        int64_t start = to_ns(&o->conv, since);
        start = start > end_ns ? end_ns : start;
        char buf[32];
        begin_event(w, "X", r, start);
        fputs(",\"dur\":", w->f);
        put_us(w->f, end_ns - start);
        fprintf(w->f,
                ",\"cat\":\"call\",\"name\":\"%s\",\"args\":{\"call\":%" PRIu64
                ",\"unfinished\":true}}",
                event_op_name(SEG_STATUS_OP(word), buf, sizeof buf), number);
        (*calls)++;
        flush_waits(w, r, o);
        if (act == SEG_ACT_WAIT) {
            int64_t ws = atomic_load(&st->wait_since);
            ws = ws < start ? start : ws > end_ns ? end_ns : ws;
            wait_slice(w, r, atomic_load(&st->wait_rank), atomic_load(&st->wait_tag), ws,
                       end_ns, true);
        }
    }
}

/* The end of the event list, and what the launcher says of the rings. */
static void write_other_data(FILE *f, const struct trace *t)
{
    fputs("\n],\"otherData\":{\"launcher\":\"" PROG "\"", f);
    fprintf(f, ",\"ranks\":%d,\"ring_events\":%u,\"lost_events\":[", t->world,
            t->seg->lay.trace_events);
    for (int r = 0; r < t->world; r++)
        fprintf(f, "%s%" PRIu64, r ? "," : "", t->rings[r].dropped);
    fputs("]}}\n", f);
}

/* Everything from the temporary file and the status blocks to the JSON. */
static int write_json(struct trace *t, FILE *f, uint64_t *calls_out)
{
    struct rank_out *ro = calloc((size_t)t->world, sizeof *ro);
    struct flows flows = {0};
    if (!ro)
        return -ENOMEM;
    int64_t end_ns = trace_mono_ns();
    conv_init(t, ro);
    flows_init(&flows, t);
    struct writer w = {.f = f, .first = true, .base = earliest_ns(t, ro, end_ns)};
    for (int r = 0; r < t->world; r++) { /* written, less what the first pass read */
        struct ring_state *rs = &t->rings[r];
        uint64_t written = atomic_load_explicit(&seg_trace_ring(t->seg, r)->records,
                                                memory_order_acquire);
        rs->dropped = written > rs->read ? written - rs->read : 0;
    }

    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    write_rank_names(&w, t);
    uint64_t calls = 0;
    int err = write_events(&w, t, ro, &flows, &calls);
    /* Collectives some member of which never came (lost, or unfinished). */
    while (!err && flows.len)
        flow_evict(&w, &flows);
    if (!err)
        write_unfinished(&w, t, ro, end_ns, &calls);
    write_other_data(f, t);

    for (int r = 0; r < t->world; r++)
        free(ro[r].waits.v);
    free(ro);
    flows_free(&flows);
    *calls_out = calls;
    return err;
}

int trace_finish(struct job *j, int rc)
{
    struct trace *t = j->trace;
    if (!t)
        return rc;
    j->trace = NULL;
    if (t->running) {
        atomic_store(&t->stop, true);
        pthread_join(t->thread, NULL);
    }
    int status = rc;
    if (t->rings) {
        drain_all(t); /* what the ranks wrote since, or all of it without the thread */
        uint64_t calls = 0;
        int err = 0;
        FILE *f = NULL;
        if (t->tmp_failed) {
            err = -t->tmp_errno;
        } else if (!(f = fdopen(t->fd, "w"))) {
            err = -errno;
        } else {
            t->fd = -1;
            err = write_json(t, f, &calls);
            if (fflush(f) && !err)
                err = -errno;
        }
        if (f && fclose(f) && !err)
            err = -errno;
        if (err) {
            say("--trace: writing the trace to '%s' failed: %s", t->path,
                t->tmp_failed ? "the temporary file of events could not be written" : strerror(-err));
            if (status == 0)
                status = 1;
        } else {
            /* Said once, for all ranks: which lost most, and how many in all. */
            uint64_t lost = 0;
            int worst = 0, ranks = 0;
            for (int r = 0; r < t->world; r++) {
                lost += t->rings[r].dropped;
                ranks += t->rings[r].dropped != 0;
                worst = t->rings[r].dropped > t->rings[worst].dropped ? r : worst;
            }
            if (lost)
                say("trace: %" PRIu64 " events of rank %d were lost (%" PRIu64 " of %d rank%s in "
                    "all): overwritten in its ring of %u events before they were read; raise "
                    "--trace-events",
                    t->rings[worst].dropped, worst, lost, ranks, ranks == 1 ? "" : "s",
                    t->seg->lay.trace_events);
            say("trace of %" PRIu64 " calls on %d rank%s written to %s%s", calls, t->world,
                t->world == 1 ? "" : "s", t->path, lost ? " (with events lost)" : "");
        }
    }
    if (t->fd >= 0)
        close(t->fd);
    close(t->tmp_fd);
    free(t->rings);
    free(t->header);
    free(t);
    return status;
}
