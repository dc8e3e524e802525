/* Segment creation, validation on attach, join/unlink, and job-wide abort. */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "errtext.h"
#include "guard.h"
#include "notify.h"
#include "numa_place.h"

static uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

uint64_t seg_default_slot_bytes(int world_size)
{
    /* 512 KiB of payload up to 8 ranks, then shrinking so that the data
     * regions of a large job stay near 8 MiB; never under 64 KiB.  A page
     * more for the buffer's header and call description, so that a window
     * holds a power-of-two payload whole: with 512 KiB buffers a 512 KiB
     * pbroadcast took two windows (the second of 1040 bytes), both buffers
     * every call, and its calls no longer overlapped (docs/performance.md). */
    uint64_t b = world_size > 0 ? (8u << 20) / (uint64_t)world_size / 2 : 0;
    if (b > (512u << 10))
        b = 512u << 10;
    if (b < (64u << 10))
        b = 64u << 10;
    return round_up(b, SEG_PAGE) + SEG_PAGE;
}

static uint64_t trace_share(uint32_t events)
{
    return events ? SEG_PAGE + round_up((uint64_t)events * SEG_TRACE_EVENT, SEG_PAGE) : 0;
}

uint64_t seg_trace_bytes(int world_size, uint32_t trace_events)
{
    return (uint64_t)world_size * trace_share(trace_events);
}

/* total: the whole segment wanted, 0 for the default; the heap gets what
 * the fixed parts leave, in equal page-aligned shares.  The trace rings
 * (trace_events per rank, 0: none) come after, on top of total. */
static void layout(int world, uint64_t slot_bytes, uint64_t total, uint32_t trace_events,
                   struct seg_header *h)
{
    memset(h, 0, sizeof *h);
    h->magic = SEG_MAGIC;
    h->version = SEG_LAYOUT_VERSION;
    h->header_bytes = SEG_PAGE;
    h->world_size = (uint32_t)world;
    h->ctrl_stride = SEG_CTRL_STRIDE;
    h->ctrl_offset = SEG_PAGE;
    h->slot_offset = round_up(h->ctrl_offset + (uint64_t)world * SEG_CTRL_STRIDE, SEG_PAGE);
    h->slot_bytes = slot_bytes;
    h->slot_stride = round_up(2 * slot_bytes + SEG_EAGER_REGION, SEG_PAGE);
    h->heap_offset = h->slot_offset + (uint64_t)world * h->slot_stride;
    if (total == 0)
        total = SEG_DEFAULT_TOTAL > h->heap_offset ? SEG_DEFAULT_TOTAL : h->heap_offset;
    h->heap_share = total > h->heap_offset
                        ? (total - h->heap_offset) / (uint64_t)world / SEG_PAGE * SEG_PAGE
                        : 0;
    h->total_bytes = h->heap_offset + (uint64_t)world * h->heap_share;
    if (trace_events) {
        h->trace_offset = h->total_bytes;
        h->trace_share = trace_share(trace_events);
        h->trace_events = trace_events;
        h->total_bytes += (uint64_t)world * h->trace_share;
    }
    h->abort_rank = -1;
}

uint64_t seg_required_bytes(int world_size, uint64_t slot_bytes)
{
    if (world_size < 1 || world_size > SEG_MAX_WORLD || slot_bytes <= SEG_SLOT_HDR + SEG_CALL_DESC_MAX ||
        slot_bytes % SEG_PAGE || slot_bytes > (1ull << 40))
        return 0;
    struct seg_header h;
    layout(world_size, slot_bytes, 1, 0, &h); /* 1: smaller than any fixed part, so no heap */
    return h.heap_offset;
}

/* A load from each page of [p, p + bytes): never a store, which could race
 * a peer's.  It maps a page not mapped yet (read-only until the first
 * store). */
static void touch(const void *p, size_t bytes)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(SEG_PAGE - 1);
    for (uintptr_t a = lo; a < (uintptr_t)p + bytes; a += SEG_PAGE)
        (void)*(volatile const unsigned char *)a;
}

void seg_populate(void *p, size_t bytes)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(SEG_PAGE - 1);
    uintptr_t hi = (uintptr_t)p + bytes;
    if (hi <= lo)
        return;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
        return;
#endif
    touch(p, bytes);
}

void seg_populate_hot(const struct seg *s, int self)
{
    if (s->readonly)
        return;
    seg_populate(s->base, s->lay.slot_offset); /* header, control blocks */
    touch(s->base, s->lay.slot_offset);
    for (int r = 0; r < s->world; r++) {
        for (int b = 0; b < 2; b++) {
            unsigned char *h = (unsigned char *)seg_slot(s, r, b);
            seg_populate(h, SEG_PAGE);
            seg_populate(seg_call_desc(s, (struct seg_slot_hdr *)h), SEG_CALL_DESC_MAX);
            touch(h, SEG_CACHE_LINE);
            if (r == self) /* written at the first post of each call */
                touch(seg_call_desc(s, (struct seg_slot_hdr *)h), SEG_CALL_DESC_MAX);
        }
        seg_populate(seg_eager(s, r, 0), SEG_EAGER_REGION);
        /* The eager windows, receipts, eager wait and control slots, which a
         * waiter looks at (one eager window and receipt per call number);
         * the descriptions only of this rank, which writes one with each of
         * its first 64 eager windows and receipts (a peer's is read only to
         * explain a mismatch). */
        touch(seg_eager(s, r, 0), SEG_EAGER_ENTRIES * SEG_EAGER_BYTES);
        if (r == self)
            touch(seg_call_desc(s, seg_eager(s, r, 0)), SEG_EAGER_ENTRIES * SEG_CALL_DESC_MAX);
        touch(seg_receipt(s, r, 0), SEG_EAGER_ENTRIES * SEG_SLOT_HDR);
        touch(seg_eager_wait(s, r), SEG_EAGER_WAIT + 2 * SEG_CONTROL_SLOT);
    }
}

uint64_t seg_parse_size(const char *s)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0))
        return 0;
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; break;
    case 'm': case 'M': mult = 1024.0 * 1024; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; break;
    case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
    }
    if (mult > 1) {
        end++;
        if (*end == 'i') /* KiB, MiB, ... */
            end++;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    v *= mult;
    if (*end || v > 9.0e18)
        return 0;
    return (uint64_t)v;
}

static int check_opts(int world, uint64_t *slot_bytes, uint64_t total, char *err, size_t errlen)
{
    if (world < 1 || world > SEG_MAX_WORLD)
        return errtext_set(err, errlen, -EINVAL, "world size must be between 1 and %d, got %d",
                           SEG_MAX_WORLD, world);
    if (*slot_bytes == 0)
        *slot_bytes = seg_default_slot_bytes(world);
    uint64_t min = seg_required_bytes(world, *slot_bytes);
    if (!min)
        return errtext_set(err, errlen, -EINVAL,
                           "slot size must be a multiple of %u bytes from %u to 1 TiB, "
                           "got %" PRIu64,
                           SEG_PAGE, SEG_PAGE, *slot_bytes);
    if (total && total < min)
        return errtext_set(err, errlen, -EINVAL,
                           "a segment of %" PRIu64 " bytes (%.1f MiB) is too small: %d ranks need "
                           "at least %" PRIu64 " bytes (%.1f MiB) for control blocks and staging "
                           "slots, before any shared heap (--shm-size, SHMESH_SHM_SIZE)",
                           total, (double)total / (1 << 20), world, min, (double)min / (1 << 20));
    return 0;
}

static void init_ctrl(struct seg *s, const int *nodes)
{
    for (int r = 0; r < s->world; r++) {
        struct seg_ctrl *c = seg_ctrl(s, r);
        c->pid = 0;
        c->state = SEG_RANK_EMPTY;
        c->numa_node = nodes ? nodes[r] : -1;
    }
}

/* h: the layout computed by the creator, or the attacher's validated copy. */
static struct seg *seg_new(void *base, size_t size, int world, const struct seg_header *h)
{
    struct seg *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    s->hdr = base;
    s->lay = (struct seg_layout){
        .total_bytes = h->total_bytes,
        .ctrl_offset = h->ctrl_offset,
        .slot_offset = h->slot_offset,
        .slot_stride = h->slot_stride,
        .slot_bytes = h->slot_bytes,
        .heap_offset = h->heap_offset,
        .heap_share = h->heap_share,
        .trace_offset = h->trace_offset,
        .trace_share = h->trace_share,
        .trace_events = h->trace_events,
        .ctrl_stride = h->ctrl_stride,
        .world_size = h->world_size,
    };
    s->size = size;
    s->world = world;
    s->fd = -1;
    s->guard = -1;
    return s;
}

static void random_name(char *name, size_t len)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid();
    }
    snprintf(name, len, "/shmesh-%d-%016" PRIx64, (int)getpid(), r);
}

static bool wants_placement(int numa)
{
    int nnodes = numa_place_nodes();
    return nnodes >= 1 && (numa > 0 || (numa < 0 && nnodes > 1));
}

/* Each rank's data region on the rank's node, decided before the memory is
 * first touched (posix_fallocate allocates according to the shared policy). */
static int place(struct seg *s, const int *given, int **nodes_out, char *err, size_t errlen)
{
    int nnodes = numa_place_nodes();
    int *nodes = calloc((size_t)s->world, sizeof *nodes);
    if (!nodes)
        return errtext_set(err, errlen, -ENOMEM, "out of memory");
    for (int r = 0; r < s->world; r++) {
        nodes[r] = given && given[r] >= 0 ? given[r] : numa_place_node_of_rank(r, s->world, nnodes);
        uint8_t *region = (uint8_t *)seg_slot(s, r, 0);
        int rc = numa_place_bind(region, s->lay.slot_stride, nodes[r]);
        if (!rc && s->lay.heap_share)
            rc = numa_place_bind(seg_heap(s, r), s->lay.heap_share, nodes[r]);
        if (rc < 0) {
            int node = nodes[r];
            free(nodes);
            return errtext_set(err, errlen, rc, "cannot place rank %d's slots on NUMA node %d: %s",
                               r, node, strerror(-rc));
        }
    }
    s->hdr->numa_nodes = (uint32_t)nnodes;
    *nodes_out = nodes;
    return 0;
}

/* Reserves every page now: a full /dev/shm must fail here, at start, and not
 * later as a SIGBUS inside some rank's collective. */
static int reserve(int fd, const struct seg_header *h, int world, const char *name, char *err,
                   size_t errlen)
{
    int rc = posix_fallocate(fd, 0, (off_t)h->total_bytes);
    if (rc == 0)
        return 0;
    if (rc == ENOSPC || rc == ENOMEM)
        return errtext_set(err, errlen, -ENOSPC,
                           "/dev/shm has no room for the %" PRIu64 "-byte segment a %d-rank job "
                           "needs (%.1f MiB); see `df -h /dev/shm`, free space there, give the "
                           "container a larger /dev/shm (docker run --shm-size), or ask for a "
                           "smaller segment (shmesh-run --shm-size)",
                           h->total_bytes, world, (double)h->total_bytes / (1 << 20));
    return errtext_set(err, errlen, -rc, "cannot reserve %" PRIu64 " bytes for segment %s: %s",
                       h->total_bytes, name, strerror(rc));
}

int seg_create(const struct seg_create_opts *o, struct seg **out, char *err, size_t errlen)
{
    *out = NULL;
    uint64_t slot_bytes = o->slot_bytes;
    int rc = check_opts(o->world_size, &slot_bytes, o->total_bytes, err, errlen);
    if (rc)
        return rc;
    if (o->trace_events &&
        (o->trace_events > SEG_TRACE_MAX_EVENTS || (o->trace_events & (o->trace_events - 1))))
        return errtext_set(err, errlen, -EINVAL,
                           "trace rings hold a power of two of events, at most %u; got %u",
                           SEG_TRACE_MAX_EVENTS, o->trace_events);
    struct seg_header h;
    layout(o->world_size, slot_bytes, o->total_bytes, o->trace_events, &h);

    char name[SEG_NAME_MAX];
    int fd = -1;
    for (int tries = 0; tries < 16 && fd < 0; tries++) {
        random_name(name, sizeof name);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return errtext_set(err, errlen, -errno, "cannot create shared-memory segment %s: %s",
                               name, strerror(errno));
    }
    if (fd < 0)
        return errtext_set(err, errlen, -EEXIST, "cannot find a free segment name in /dev/shm");

    void *base = MAP_FAILED;
    struct seg *s = NULL;
    int *nodes = NULL;
    if (ftruncate(fd, (off_t)h.total_bytes) < 0) {
        rc = errtext_set(err, errlen, -errno, "cannot size segment %s to %" PRIu64 " bytes: %s",
                         name, h.total_bytes, strerror(errno));
        goto fail;
    }
    /* Placement must precede the reservation; without it, reserve first so
     * that a full /dev/shm is found before anything large is mapped. */
    bool placing = wants_placement(o->numa);
    if (!placing && (rc = reserve(fd, &h, o->world_size, name, err, errlen)))
        goto fail;
    base = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = errtext_set(err, errlen, -errno, "cannot map segment %s (%" PRIu64 " bytes): %s", name,
                         h.total_bytes, strerror(errno));
        goto fail;
    }
    s = seg_new(base, h.total_bytes, o->world_size, &h);
    if (!s) {
        rc = errtext_set(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    /* The header is written before placement, for the ranks (the views
     * here come from s->lay). */
    memcpy(base, &h, sizeof h);
    if (placing && ((rc = place(s, o->nodes, &nodes, err, errlen)) ||
                    (rc = reserve(fd, &h, o->world_size, name, err, errlen))))
        goto fail;
    init_ctrl(s, nodes);
    free(nodes);
    s->hdr->creator_pid = (int32_t)getpid();
    s->named = true;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->fd = fd; /* kept for observers (seg_close closes it) */
    seg_guard_add(s, "its creator (the launcher)", true);
    *out = s;
    return 0;

fail:
    free(nodes);
    free(s);
    if (base != MAP_FAILED)
        munmap(base, h.total_bytes);
    close(fd);
    shm_unlink(name);
    return rc;
}

int seg_create_private(int world_size, uint64_t slot_bytes, uint64_t total_bytes,
                       struct seg **out, char *err, size_t errlen)
{
    *out = NULL;
    int rc = check_opts(world_size, &slot_bytes, total_bytes, err, errlen);
    if (rc)
        return rc;
    struct seg_header h;
    layout(world_size, slot_bytes, total_bytes, 0, &h);
    void *base = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
    if (base == MAP_FAILED)
        return errtext_set(err, errlen, -ENOMEM, "cannot map %" PRIu64 " bytes: %s", h.total_bytes,
                           strerror(errno));
    struct seg *s = seg_new(base, h.total_bytes, world_size, &h);
    if (!s) {
        munmap(base, h.total_bytes);
        return errtext_set(err, errlen, -ENOMEM, "out of memory");
    }
    memcpy(base, &h, sizeof h);
    s->hdr->creator_pid = (int32_t)getpid();
    init_ctrl(s, NULL);
    *out = s;
    return 0;
}

/* Everything an attacher derives a pointer from is checked here, against the
 * size the kernel reports rather than the size the header claims. */
int seg_validate(const char *name, const struct seg_header *h, uint64_t real, int world,
                 char *err, size_t errlen)
{
    if (h->magic != SEG_MAGIC)
        return errtext_set(err, errlen, -EBADMSG,
                           "%s is not a shmesh segment: magic is 0x%016" PRIx64 ", expected "
                           "0x%016llx",
                           name, h->magic, (unsigned long long)SEG_MAGIC);
    if (h->version != SEG_LAYOUT_VERSION)
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s has layout version %u but this library reads version %u: "
                           "launcher and library come from different shmesh builds",
                           name, h->version, SEG_LAYOUT_VERSION);
    if (h->total_bytes != real)
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s is %" PRIu64 " bytes but its header says %" PRIu64
                           " bytes: it was truncated or corrupted",
                           name, real, h->total_bytes);
    if ((int64_t)h->world_size != world)
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s was made for %u ranks but this process expects %d "
                           "(SHMESH_WORLD_SIZE)",
                           name, h->world_size, world);
    struct seg_header want;
    uint32_t ev = h->trace_events;
    uint64_t rings = ev <= SEG_TRACE_MAX_EVENTS && !(ev & (ev - 1)) && h->world_size >= 1 &&
                             h->world_size <= SEG_MAX_WORLD
                         ? seg_trace_bytes((int)h->world_size, ev)
                         : UINT64_MAX;
    if (h->world_size < 1 || h->world_size > SEG_MAX_WORLD || rings == UINT64_MAX ||
        !seg_required_bytes((int)h->world_size, h->slot_bytes) ||
        h->total_bytes < rings ||
        h->total_bytes - rings < seg_required_bytes((int)h->world_size, h->slot_bytes))
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s has an impossible layout (world %u, slot %" PRIu64
                           " bytes, %u trace events per rank)",
                           name, h->world_size, h->slot_bytes, ev);
    layout((int)h->world_size, h->slot_bytes, h->total_bytes - rings, ev, &want);
    if (h->header_bytes != want.header_bytes || h->ctrl_stride != want.ctrl_stride ||
        h->ctrl_offset != want.ctrl_offset || h->slot_offset != want.slot_offset ||
        h->slot_stride != want.slot_stride || h->heap_offset != want.heap_offset ||
        h->heap_share != want.heap_share || h->trace_offset != want.trace_offset ||
        h->trace_share != want.trace_share || want.total_bytes != real)
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s has a corrupt layout: header %u/%u bytes, control blocks "
                           "at %" PRIu64 " (expected %" PRIu64 "), slots at %" PRIu64 " (expected "
                           "%" PRIu64 "), slot stride %" PRIu64 " (expected %" PRIu64 ")",
                           name, h->header_bytes, want.header_bytes, h->ctrl_offset,
                           want.ctrl_offset, h->slot_offset, want.slot_offset, h->slot_stride,
                           want.slot_stride);
    return 0;
}

int seg_attach(const char *name, int world_size, int rank, struct seg **out, char *err,
               size_t errlen)
{
    *out = NULL;
    /* A creator's descriptor, its name already gone (seg_fd_path). */
    unsigned pid, fdn;
    int used = 0;
    bool by_fd = name && sscanf(name, "/proc/%u/fd/%u%n", &pid, &fdn, &used) == 2 &&
                 (size_t)used == strlen(name) && strlen(name) < SEG_NAME_MAX;
    if (!by_fd &&
        (!name || name[0] != '/' || strlen(name) >= SEG_NAME_MAX || strchr(name + 1, '/')))
        return errtext_set(err, errlen, -EINVAL,
                           "segment name must look like /shmesh-... (or /proc/PID/fd/N), at "
                           "most %d characters, got '%s'",
                           SEG_NAME_MAX - 1, name ? name : "(null)");
    if (world_size < 1 || world_size > SEG_MAX_WORLD || rank < 0 || rank >= world_size)
        return errtext_set(err, errlen, -EINVAL,
                           "rank must be in [0, world size) and world size in [1, %d]; got "
                           "rank %d of %d",
                           SEG_MAX_WORLD, rank, world_size);
    int fd = by_fd ? open(name, O_RDWR | O_CLOEXEC) : shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT && by_fd)
            return errtext_set(err, errlen, -ENOENT,
                               "segment %s does not exist: its creator (pid %u) has exited",
                               name, pid);
        if (e == ENOENT)
            return errtext_set(err, errlen, -ENOENT,
                               "segment %s does not exist: the job's launcher has exited, every "
                               "rank already attached, or SHMESH_SEGMENT is stale",
                               name);
        return errtext_set(err, errlen, -e, "cannot open segment %s: %s", name, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return errtext_set(err, errlen, -e, "cannot stat segment %s: %s", name, strerror(e));
    }
    uint64_t real = (uint64_t)st.st_size;
    if (real < SEG_PAGE) {
        close(fd);
        return errtext_set(err, errlen, -EBADMSG,
                           "segment %s is %" PRIu64 " bytes, smaller than its %u-byte header: "
                           "it was truncated",
                           name, real, SEG_PAGE);
    }
    void *base = mmap(NULL, real, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    if (base == MAP_FAILED) {
        close(fd);
        return errtext_set(err, errlen, -e, "cannot map segment %s (%" PRIu64 " bytes): %s", name,
                           real, strerror(e));
    }
    /* Validate a private copy, and keep it: a writer can change the header
     * neither between check and use nor at any time later. */
    struct seg_header h;
    memcpy(&h, base, sizeof h);
    int rc = seg_validate(name, &h, real, world_size, err, errlen);
    struct seg *s = rc ? NULL : seg_new(base, real, world_size, &h);
    if (!s) {
        munmap(base, real);
        close(fd);
        return rc ? rc : errtext_set(err, errlen, -ENOMEM, "out of memory");
    }
    s->named = !by_fd; /* (a descriptor's segment has no name to remove) */
    snprintf(s->name, sizeof s->name, "%s", name);
    /* The descriptor stays: should another process truncate the file, the
     * guard restores its size through it. */
    s->fd = fd;
    char who[32];
    snprintf(who, sizeof who, "rank %d", rank);
    seg_guard_add(s, who, true);
    *out = s;
    return 0;
}

int seg_observe(int fd, const char *what, struct seg **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return errtext_set(err, errlen, -errno, "cannot stat %s: %s", what, strerror(errno));
    uint64_t real = (uint64_t)st.st_size;
    if (real < SEG_PAGE)
        return errtext_set(err, errlen, -EBADMSG,
                           "%s is %" PRIu64 " bytes, smaller than a segment's %u-byte header", what,
                           real, SEG_PAGE);
    void *base = mmap(NULL, real, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        return errtext_set(err, errlen, -errno, "cannot map %s read-only (%" PRIu64 " bytes): %s",
                           what, real, strerror(errno));
    struct seg_header h;
    memcpy(&h, base, sizeof h);
    int world = h.world_size <= SEG_MAX_WORLD ? (int)h.world_size : -1;
    int rc = seg_validate(what, &h, real, world, err, errlen);
    struct seg *s = rc ? NULL : seg_new(base, real, world, &h);
    if (!s) {
        munmap(base, real);
        return rc ? rc : errtext_set(err, errlen, -ENOMEM, "out of memory");
    }
    s->readonly = true;
    /* A copy of the descriptor, read-only: should the file be truncated,
     * the guard can say to what. */
    s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    seg_guard_add(s, "an observer", false);
    *out = s;
    return 0;
}

int seg_join(struct seg *s, int rank, pid_t pid, char *err, size_t errlen)
{
    struct seg_ctrl *c = seg_ctrl(s, rank);
    uint32_t expect = SEG_RANK_EMPTY;
    if (!atomic_compare_exchange_strong(&c->state, &expect, SEG_RANK_ATTACHED))
        return errtext_set(err, errlen, -EBUSY,
                           "rank %d of segment %s is already %s by pid %d: two processes were "
                           "given the same SHMESH_RANK",
                           rank, s->name, expect == SEG_RANK_FINALIZED ? "finalized" : "attached",
                           (int)atomic_load(&c->pid));
    atomic_store_explicit(&c->pid, (int32_t)pid, memory_order_relaxed);
    /* The counter's release publishes pid and state to whoever sees the count. */
    uint32_t n = atomic_fetch_add(&s->hdr->attached.value, 1) + 1;
    if (atomic_load(&s->hdr->attached.waiters))
        notify_wake(&s->hdr->attached.value);
    if (n == (uint32_t)s->world && s->named)
        seg_unlink(s);
    return 0;
}

int seg_fd_path(struct seg *s, char *path, size_t len)
{
    int rc = seg_unlink(s);
    if (rc)
        return rc;
    s->named = false;
    int n = snprintf(path, len, "/proc/%d/fd/%d", (int)getpid(), s->fd);
    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int seg_unlink(struct seg *s)
{
    if (!s->named)
        return 0;
    if (shm_unlink(s->name) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

void seg_close(struct seg *s)
{
    if (!s)
        return;
    seg_guard_remove(s);
    munmap(s->base, s->size);
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

void seg_wake_all(struct seg *s)
{
    notify_wake(&s->hdr->attached.value);
    notify_wake(&s->hdr->abort.value);
    for (int r = 0; r < s->world; r++)
        notify_wake(&seg_ctrl(s, r)->progress.bell.value);
}

int seg_abort(struct seg *s, int cause, int rank, int code, const char *reason)
{
    struct seg_header *h = s->hdr;
    uint32_t expect = SEG_ABORT_NONE;
    if (!atomic_compare_exchange_strong(&h->abort.value, &expect, SEG_ABORT_WRITING))
        return -EALREADY;
    h->abort_cause = cause;
    h->abort_rank = rank;
    h->abort_code = code;
    size_t n = 0; /* a copy without snprintf: a signal handler may call this */
    for (; reason && reason[n] && n < sizeof h->abort_reason - 1; n++)
        h->abort_reason[n] = reason[n];
    h->abort_reason[n] = '\0';
    atomic_store_explicit(&h->abort.value, SEG_ABORT_SET, memory_order_seq_cst);
    seg_wake_all(s);
    return 0;
}

bool seg_aborted(const struct seg *s, struct seg_abort_info *info)
{
    const struct seg_header *h = s->hdr;
    uint32_t st = atomic_load_explicit(&h->abort.value, memory_order_acquire);
    if (st == SEG_ABORT_NONE)
        return false;
    /* The winner fills a few fields between its two stores; give it a moment,
     * but never wait on a writer that may have died half-way. */
    for (int i = 0; st == SEG_ABORT_WRITING && i < 100000; i++) {
        notify_cpu_relax();
        st = atomic_load_explicit(&h->abort.value, memory_order_acquire);
    }
    if (info) {
        memset(info, 0, sizeof *info);
        info->rank = -1;
        if (st == SEG_ABORT_SET) {
            info->cause = h->abort_cause;
            info->rank = h->abort_rank;
            info->code = h->abort_code;
            memcpy(info->reason, h->abort_reason, sizeof info->reason);
            info->reason[sizeof info->reason - 1] = '\0';
        }
    }
    return true;
}

const char *seg_text_escaped(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    if (!len)
        return buf;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 <= len; p++) {
        const char *named = *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : *p == '\r' ? "\\r"
                            : *p == '\t' ? "\\t" : NULL;
        if (named)
            o += (size_t)snprintf(buf + o, len - o, "%s", named);
        else if (*p < 0x20 || *p >= 0x7f)
            o += (size_t)snprintf(buf + o, len - o, "\\x%02x", *p);
        else
            buf[o++] = (char)*p;
    }
    buf[o] = '\0';
    return buf;
}
