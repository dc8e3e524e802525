/* Description: the segment — layout, validation of everything a rank reads
 * from the header (corrupted magic, wrong version, truncation, world-size
 * mismatch, corrupt offsets), views and heap bounds that keep the layout
 * read at attach (or create) whatever is later written into the header,
 * the unlink once every rank has joined, a full
 * /dev/shm, NUMA placement, the abort record, shmesh_init's errors, and the
 * pages a rank maps ahead of its first calls. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "guard.h"
#include "memory/heap.h"
#include "numa_place.h"
#include "segment.h"
#include "shmesh.h"
#include "shmesh_config.h"

#if SHMESH_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

static char err[512];

static struct seg *make(int world)
{
    struct seg_create_opts o = {.world_size = world, .numa = 0};
    struct seg *s = NULL;
    if (seg_create(&o, &s, err, sizeof err) < 0)
        fail_msg("seg_create: %s", err);
    return s;
}

static void drop(struct seg *s)
{
    seg_unlink(s);
    seg_close(s);
}

/* Writes `len` bytes at `off` of the named segment, behind the creator's back. */
static void poke(const char *name, off_t off, const void *data, size_t len)
{
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, data, len, off), (ssize_t)len);
    close(fd);
}

static void truncate_to(const char *name, off_t len)
{
    int fd = shm_open(name, O_RDWR, 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, len), 0);
    close(fd);
}

static void expect_attach_error(const char *name, int world, int code, const char *words)
{
    struct seg *s = NULL;
    err[0] = '\0';
    int rc = seg_attach(name, world, 0, &s, err, sizeof err);
    assert_int_equal(rc, code);
    assert_null(s);
    if (!strstr(err, words))
        fail_msg("error '%s' does not say '%s'", err, words);
}

static void layout_is_aligned(void **state)
{
    struct seg *s = make(5);
    const struct seg_header *h = s->hdr;
    assert_int_equal(h->magic, SEG_MAGIC);
    assert_int_equal(h->world_size, 5);
    assert_int_equal(h->total_bytes, s->size);
    assert_int_equal(h->heap_offset, seg_required_bytes(5, h->slot_bytes));
    assert_int_equal(h->total_bytes, h->heap_offset + 5 * h->heap_share);
    assert_int_equal(h->heap_share % SEG_PAGE, 0);
    assert_true(h->heap_share > 0);
    for (int r = 0; r < 5; r++) {
        uintptr_t c = (uintptr_t)seg_ctrl(s, r);
        assert_int_equal(c % 128, 0); /* its own pair of cache lines */
        if (r)
            assert_true(c - (uintptr_t)seg_ctrl(s, r - 1) >= 128);
        assert_int_equal((uintptr_t)seg_slot(s, r, 0) % SEG_PAGE, 0);
        assert_true((uint8_t *)seg_slot(s, r, 1) + h->slot_bytes <= s->base + s->size);
        assert_int_equal(seg_ctrl(s, r)->numa_node, -1);
    }
    assert_true(s->size <= SEG_DEFAULT_TOTAL);
    drop(s);
    /* Eight ranks fit Docker's 64 MiB /dev/shm with room to spare. */
    s = make(8);
    assert_true(s->size <= 32u << 20);
    assert_true(s->hdr->heap_share >= 2u << 20);
    drop(s);
}

static void segment_size_is_chosen(void **state)
{
    /* Small enough for Docker's 64 MiB /dev/shm beside other tests. */
    struct seg_create_opts o = {.world_size = 2, .total_bytes = 24u << 20};
    struct seg *s = NULL;
    assert_int_equal(seg_create(&o, &s, err, sizeof err), 0);
    assert_true(s->size <= 24u << 20 && s->size > 23u << 20);
    assert_true(s->hdr->heap_share > 10u << 20);
    drop(s);
    o.total_bytes = 1u << 20; /* less than two ranks' staging slots */
    assert_int_equal(seg_create(&o, &s, err, sizeof err), -EINVAL);
    if (!strstr(err, "is too small: 2 ranks need at least") || !strstr(err, "--shm-size"))
        fail_msg("unclear error: %s", err);
    assert_int_equal(seg_parse_size("64M"), 64u << 20);
    assert_int_equal(seg_parse_size("1GiB"), 1u << 30);
    assert_int_equal(seg_parse_size("4096"), 4096);
    assert_int_equal(seg_parse_size("1.5K"), 1536);
    assert_int_equal(seg_parse_size("lots"), 0);
    assert_int_equal(seg_parse_size("-1M"), 0);
    assert_int_equal(seg_parse_size("5X"), 0);
}

/* The default slot buffers hold a power-of-two payload whole beside their
 * header and call description (a 512 KiB window in one), at every size of
 * job, and still shrink for large jobs. */
static void default_slots_hold_powers_of_two(void **state)
{
    const struct {
        int world;
        uint64_t payload;
    } cases[] = {{1, 512u << 10}, {2, 512u << 10}, {8, 512u << 10}, {16, 256u << 10},
                 {64, 64u << 10}, {4096, 64u << 10}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint64_t b = seg_default_slot_bytes(cases[i].world);
        if (b % SEG_PAGE || b - SEG_SLOT_HDR - SEG_CALL_DESC_MAX < cases[i].payload ||
            b > cases[i].payload + SEG_PAGE)
            fail_msg("%d ranks: slot buffers of %" PRIu64 " bytes, expected a multiple of %u "
                     "holding %" PRIu64 " bytes of payload and at most a page more",
                     cases[i].world, b, SEG_PAGE, cases[i].payload);
    }
    struct seg *s = make(2);
    assert_true(seg_payload_bytes(s) >= 512u << 10);
    drop(s);
}

/* The heap in a job of one: shares, alignment, exhaustion, bad frees. */
static void heap_alloc_and_free(void **state)
{
    unsetenv("SHMESH_SEGMENT");
    setenv("SHMESH_SHM_SIZE", "8M", 1);
    shmesh_ctx *c;
    assert_int_equal(shmesh_init(&c), 0);
    unsetenv("SHMESH_SHM_SIZE");
    assert_null(shmesh_alloc(c, 0));
    void *a = shmesh_alloc(c, 1000), *b = shmesh_alloc(c, 3000), *d = shmesh_alloc(c, 64);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(d);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    assert_true((char *)b >= (char *)a + 1000 && (char *)d >= (char *)b + 3000);
    memset(a, 1, 1000);
    memset(b, 2, 3000);
    assert_null(shmesh_alloc(c, 64u << 20));
    if (!strstr(shmesh_last_error(c), "start the job with a larger shmesh-run --shm-size"))
        fail_msg("unclear error: %s", shmesh_last_error(c));
    shmesh_free(c, (char *)b + 64);
    assert_non_null(strstr(shmesh_last_error(c), "is not a block shmesh_alloc gave this rank"));
    int local;
    shmesh_free(c, &local);
    assert_non_null(strstr(shmesh_last_error(c), "is not a block shmesh_alloc gave this rank"));
    /* Freed in any order, the blocks merge back into one: the whole share
     * can be handed out again. */
    shmesh_free(c, b);
    shmesh_free(c, b); /* a second time: refused */
    assert_non_null(strstr(shmesh_last_error(c), "freed already"));
    shmesh_free(c, a);
    shmesh_free(c, d);
    size_t whole = 0;
    for (size_t try = 8u << 20; try >= 1u << 20 && !whole; try -= 4096) {
        void *big = shmesh_alloc(c, try);
        if (big) {
            whole = try;
            shmesh_free(c, big);
        }
    }
    assert_true(whole > 4u << 20); /* nearly all of the 8 MiB after the slots */
    void *again = shmesh_alloc(c, whole);
    assert_non_null(again);
    assert_ptr_equal(again, a); /* the first block starts the share */
    shmesh_free(c, again);
    shmesh_free(c, NULL);
    assert_int_equal(shmesh_finalize(c), 0);
}

static void attach_validates_header(void **state)
{
    struct seg *s = make(2);
    char name[SEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", s->name);

    struct seg *a = NULL;
    assert_int_equal(seg_attach(name, 2, 1, &a, err, sizeof err), 0);
    seg_close(a);

    expect_attach_error(name, 3, -EBADMSG,
                        "was made for 2 ranks but this process expects 3 (SHMESH_WORLD_SIZE)");

    uint32_t version = 99;
    poke(name, offsetof(struct seg_header, version), &version, sizeof version);
    char want[96];
    snprintf(want, sizeof want, "has layout version 99 but this library reads version %u",
             SEG_LAYOUT_VERSION);
    expect_attach_error(name, 2, -EBADMSG, want);
    version = SEG_LAYOUT_VERSION;
    poke(name, offsetof(struct seg_header, version), &version, sizeof version);

    uint64_t offset = s->hdr->slot_offset + 64;
    poke(name, offsetof(struct seg_header, slot_offset), &offset, sizeof offset);
    expect_attach_error(name, 2, -EBADMSG, "has a corrupt layout");
    offset = s->hdr->slot_offset;
    poke(name, offsetof(struct seg_header, slot_offset), &offset, sizeof offset);

    uint64_t share = s->hdr->heap_share + SEG_PAGE;
    poke(name, offsetof(struct seg_header, heap_share), &share, sizeof share);
    expect_attach_error(name, 2, -EBADMSG, "has a corrupt layout");
    share = s->hdr->heap_share;
    poke(name, offsetof(struct seg_header, heap_share), &share, sizeof share);

    uint64_t magic = 0x1122334455667788ull;
    poke(name, 0, &magic, sizeof magic);
    expect_attach_error(name, 2, -EBADMSG, "is not a shmesh segment: magic is 0x1122334455667788");
    magic = SEG_MAGIC;
    poke(name, 0, &magic, sizeof magic);

    truncate_to(name, (off_t)s->size / 2);
    expect_attach_error(name, 2, -EBADMSG, "it was truncated or corrupted");
    truncate_to(name, 100);
    expect_attach_error(name, 2, -EBADMSG, "smaller than its 4096-byte header");
    drop(s);

    expect_attach_error(name, 2, -ENOENT, "does not exist");
    expect_attach_error("no-slash", 2, -EINVAL, "must look like /shmesh-");
}

static void last_join_unlinks(void **state)
{
    struct seg *s = make(2);
    struct seg *r0 = NULL, *r1 = NULL;
    assert_int_equal(seg_attach(s->name, 2, 0, &r0, err, sizeof err), 0);
    assert_int_equal(seg_attach(s->name, 2, 1, &r1, err, sizeof err), 0);
    assert_int_equal(seg_join(r0, 0, 1000, err, sizeof err), 0);
    assert_int_equal(seg_join(r0, 0, 1001, err, sizeof err), -EBUSY);
    assert_non_null(strstr(err, "rank 0 of segment"));
    assert_non_null(strstr(err, "already attached by pid 1000"));
    int fd = shm_open(s->name, O_RDONLY, 0);
    assert_true(fd >= 0); /* still there: rank 1 has not joined */
    close(fd);
    assert_int_equal(seg_join(r1, 1, 1002, err, sizeof err), 0);
    fd = shm_open(s->name, O_RDONLY, 0);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(atomic_load(&s->hdr->attached.value), 2);
    seg_close(r0);
    seg_close(r1);
    drop(s); /* unlinking a name already gone is fine */
}

/* A job an MPI launcher started (lib/net/boot.c): the creator removes the
 * name at once and the others attach through /proc/PID/fd/N, which maps
 * the same memory; the last to join has no name to remove; paths that are
 * not of that form are refused as names. */
static void attach_through_the_creators_descriptor(void **state)
{
    struct seg *s = make(2);
    char name[SEG_NAME_MAX], path[SEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", s->name);
    assert_int_equal(seg_fd_path(s, path, sizeof path), 0);
    char want[SEG_NAME_MAX];
    snprintf(want, sizeof want, "/proc/%d/fd/%d", (int)getpid(), s->fd);
    assert_string_equal(path, want);
    int fd = shm_open(name, O_RDONLY, 0); /* the name is gone at once */
    assert_int_equal(fd, -1);
    assert_int_equal(errno, ENOENT);
    struct seg *r0 = NULL, *r1 = NULL;
    assert_int_equal(seg_attach(path, 2, 0, &r0, err, sizeof err), 0);
    assert_int_equal(seg_attach(path, 2, 1, &r1, err, sizeof err), 0);
    assert_false(r0->named);
    s->hdr->creator_pid = 4242; /* the same memory, through the other mapping */
    assert_int_equal(r1->hdr->creator_pid, 4242);
    assert_int_equal(seg_join(r0, 0, 1000, err, sizeof err), 0);
    assert_int_equal(seg_join(r1, 1, 1001, err, sizeof err), 0); /* nothing to unlink */
    assert_int_equal(atomic_load(&s->hdr->attached.value), 2);
    seg_close(r0);
    seg_close(r1);
    seg_close(s);
    expect_attach_error("/proc/1/fd/x", 1, -EINVAL, "/proc/PID/fd/N");
    expect_attach_error("/proc/1/fd/3/more", 1, -EINVAL, "/proc/PID/fd/N");
    expect_attach_error("/proc/999999999/fd/3", 1, -ENOENT,
                        "its creator (pid 999999999) has exited");
}

/* Every pointer and length comes from the layout validated at attach (or,
 * for the creator, the layout it computed): whatever is later written into
 * the header's layout fields, the views stay where they were, and so do the
 * heap's bounds, which decide what is a heap buffer and which offsets a
 * peer may name. */
static void layout_is_read_once(void **state)
{
    struct seg *s = make(3); /* the launcher's view */
    struct seg *a = NULL;    /* rank 1's */
    assert_int_equal(seg_attach(s->name, 3, 1, &a, err, sizeof err), 0);
    struct seg_header honest = *s->hdr;
    struct seg *views[] = {s, a};
    void *ctrl[2][3], *slot[2][3][2], *heap[2][3], *desc[2];
    uint64_t payload[2];
    for (int v = 0; v < 2; v++) {
        for (int r = 0; r < 3; r++) {
            ctrl[v][r] = seg_ctrl(views[v], r);
            slot[v][r][0] = seg_slot(views[v], r, 0);
            slot[v][r][1] = seg_slot(views[v], r, 1);
            heap[v][r] = seg_heap(views[v], r);
        }
        payload[v] = seg_payload_bytes(views[v]);
        desc[v] = seg_call_desc(views[v], seg_slot(views[v], 2, 1));
    }
    assert_int_equal((uint8_t *)ctrl[1][2] - a->base, (uint8_t *)ctrl[0][2] - s->base);

    /* Another process of the same user scribbles over the layout. */
    struct seg_header *h = a->hdr;
    h->header_bytes = 7;
    h->total_bytes = 1ull << 50;
    h->world_size = 4000;
    h->ctrl_stride = 0xfffffff0u;
    h->ctrl_offset = 1ull << 62;
    h->slot_offset = 1ull << 61;
    h->slot_stride = 12345;
    h->slot_bytes = 1ull << 40;
    h->heap_offset = 64;
    h->heap_share = 1ull << 45;

    for (int v = 0; v < 2; v++) {
        for (int r = 0; r < 3; r++) {
            assert_ptr_equal(seg_ctrl(views[v], r), ctrl[v][r]);
            assert_ptr_equal(seg_slot(views[v], r, 0), slot[v][r][0]);
            assert_ptr_equal(seg_slot(views[v], r, 1), slot[v][r][1]);
            assert_ptr_equal(seg_heap(views[v], r), heap[v][r]);
            /* What the launcher reads when a rank exits. */
            assert_int_equal(atomic_load(&seg_ctrl(views[v], r)->state), SEG_RANK_EMPTY);
        }
        assert_int_equal(seg_payload_bytes(views[v]), payload[v]);
        assert_ptr_equal(seg_call_desc(views[v], seg_slot(views[v], 2, 1)), desc[v]);
        seg_wake_all(views[v]);
    }

    /* The heap, set up after the scribbles, has the bounds of the attach. */
    struct heap hp;
    assert_int_equal(heap_init(&hp, a, 1), 0);
    assert_ptr_equal(hp.base, heap[1][1]);
    assert_int_equal(hp.size, honest.heap_share);
    assert_int_equal(hp.lo_off, honest.heap_offset);
    assert_ptr_equal(hp.hi, a->base + honest.total_bytes);
    uint64_t off = 0;
    int private_word = 0;
    assert_false(heap_offset(&hp, &private_word, sizeof private_word, &off));
    assert_false(heap_offset(&hp, a->base + 64, 64, &off)); /* the header is no heap */
    assert_true(heap_offset(&hp, hp.base, 64, &off));
    assert_int_equal(off, honest.heap_offset + honest.heap_share);
    assert_null(heap_at(&hp, 64, 64));
    assert_null(heap_at(&hp, honest.total_bytes - 32, 64));
    assert_non_null(heap_at(&hp, honest.heap_offset, 64));
    heap_fini(&hp);

    /* A new attacher refuses the scribbled header. */
    expect_attach_error(s->name, 3, -EBADMSG, "it was truncated or corrupted");
    seg_close(a);
    drop(s);
}

/* Segments this process created that are still in /dev/shm; with `remove`,
 * unlinks them. */
static int own_segments(bool remove)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "shmesh-%d-", (int)getpid());
    DIR *d = opendir("/dev/shm");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        n++;
        if (remove) {
            char name[300];
            snprintf(name, sizeof name, "/%s", e->d_name);
            shm_unlink(name);
        }
    }
    if (d)
        closedir(d);
    return n;
}

static void full_dev_shm_is_a_clear_error(void **state)
{
    /* 256 GiB per buffer: more than this machine's /dev/shm holds. */
    struct seg_create_opts o = {.world_size = 2, .slot_bytes = 256ull << 30, .numa = 0};
    struct seg *s = NULL;
    int before = own_segments(false);
    int rc = seg_create(&o, &s, err, sizeof err);
    if (rc == 0) {
        drop(s);
        skip(); /* a /dev/shm of over 1 TiB */
    }
    assert_int_equal(rc, -ENOSPC);
    assert_null(s);
    if (!strstr(err, "/dev/shm has no room for the") || !strstr(err, "df -h /dev/shm") ||
        !strstr(err, "2-rank job"))
        fail_msg("unclear error: %s", err);
    assert_int_equal(own_segments(false), before);
}


static void bad_create_options(void **state)
{
    struct seg *s = NULL;
    struct seg_create_opts o = {.world_size = 0};
    assert_int_equal(seg_create(&o, &s, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "world size must be between 1 and 4096, got 0"));
    o = (struct seg_create_opts){.world_size = 2, .slot_bytes = 1000};
    assert_int_equal(seg_create(&o, &s, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "multiple of 4096"));
}

static void numa_placement_before_first_touch(void **state)
{
#if SHMESH_HAVE_NUMA
    if (numa_available() < 0)
        skip();
    struct seg_create_opts o = {.world_size = 2, .numa = 1}; /* even on one node */
    struct seg *s = NULL;
    assert_int_equal(seg_create(&o, &s, err, sizeof err), 0);
    for (int r = 0; r < 2; r++) {
        int node = seg_ctrl(s, r)->numa_node;
        assert_true(node >= 0);
        int mode = -1;
        unsigned long mask[16] = {0};
        assert_int_equal(get_mempolicy(&mode, mask, sizeof mask * 8, seg_slot(s, r, 0),
                                       MPOL_F_ADDR),
                         0);
        assert_int_equal(mode, MPOL_PREFERRED);
        assert_true(mask[0] & (1ul << node));
    }
    drop(s);
#else
    skip();
#endif
}

/* An unpinned rank's start CPU (shmesh-run's default placement): the
 * thread runs there while held, and may run anywhere it could before. */
static void start_cpu_moves_and_frees(void **state)
{
    cpu_set_t was, after;
    assert_int_equal(sched_getaffinity(0, sizeof was, &was), 0);
    if (CPU_COUNT(&was) < 2) {
        assert_int_equal(numa_place_start_cpu(0), -1); /* nowhere to spread */
        skip();
    }
    int n = CPU_COUNT(&was), first = numa_place_start_cpu(0);
    for (int r = 0; r < n + 1; r++) {
        int cpu = numa_place_start_cpu(r);
        assert_true(cpu >= 0 && CPU_ISSET(cpu, &was));
        if (r > 0 && r < n)
            assert_int_not_equal(cpu, first); /* a CPU of its own while there are enough */
        if (r == n)
            assert_int_equal(cpu, first); /* then in turn */
        assert_int_equal(numa_place_start_on(cpu), cpu); /* ran there */
        assert_int_equal(sched_getaffinity(0, sizeof after, &after), 0);
        assert_true(CPU_EQUAL(&after, &was)); /* and is free again */
    }
    int outside = 0;
    while (outside < CPU_SETSIZE && CPU_ISSET(outside, &was))
        outside++;
    if (outside < CPU_SETSIZE)
        assert_int_equal(numa_place_start_on(outside), -EINVAL);
    assert_int_equal(numa_place_start_on(-1), -EINVAL);
    assert_int_equal(sched_getaffinity(0, sizeof after, &after), 0);
    assert_true(CPU_EQUAL(&after, &was));
}

static void abort_record_first_wins(void **state)
{
    struct seg *s = make(3);
    struct seg_abort_info ai;
    assert_false(seg_aborted(s, &ai));
    assert_int_equal(seg_abort(s, SEG_CAUSE_RANK_ABORT, 2, 9, "first"), 0);
    assert_int_equal(seg_abort(s, SEG_CAUSE_SIGNAL, -1, 0, "second"), -EALREADY);
    assert_true(seg_aborted(s, &ai));
    assert_int_equal(ai.cause, SEG_CAUSE_RANK_ABORT);
    assert_int_equal(ai.rank, 2);
    assert_int_equal(ai.code, 9);
    assert_string_equal(ai.reason, "first");
    drop(s);
}

/* shmesh_init reads the launcher's environment; these are its refusals. */
static int init_with(const char *seg, const char *rank, const char *world, const char *notify)
{
    seg ? setenv("SHMESH_SEGMENT", seg, 1) : unsetenv("SHMESH_SEGMENT");
    rank ? setenv("SHMESH_RANK", rank, 1) : unsetenv("SHMESH_RANK");
    world ? setenv("SHMESH_WORLD_SIZE", world, 1) : unsetenv("SHMESH_WORLD_SIZE");
    notify ? setenv("SHMESH_NOTIFY", notify, 1) : unsetenv("SHMESH_NOTIFY");
    shmesh_ctx *ctx = (shmesh_ctx *)&ctx; /* must come back NULL */
    int rc = shmesh_init(&ctx);
    if (rc == 0)
        shmesh_finalize(ctx);
    else
        assert_null(ctx);
    unsetenv("SHMESH_SEGMENT");
    unsetenv("SHMESH_RANK");
    unsetenv("SHMESH_WORLD_SIZE");
    unsetenv("SHMESH_NOTIFY");
    return rc;
}

static void expect_init_error(int rc, int code, const char *words)
{
    assert_int_equal(rc, code);
    if (!strstr(shmesh_last_error(NULL), words))
        fail_msg("error '%s' does not say '%s'", shmesh_last_error(NULL), words);
}

static void init_refuses_bad_environment(void **state)
{
    struct seg *s = make(2);
    char name[SEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", s->name);

    expect_init_error(init_with(name, NULL, "2", NULL), SHMESH_ERR_INVALID,
                      "SHMESH_RANK is not");
    expect_init_error(init_with(name, "0", NULL, NULL), SHMESH_ERR_INVALID,
                      "SHMESH_WORLD_SIZE is not");
    expect_init_error(init_with(name, "2", "2", NULL), SHMESH_ERR_INVALID,
                      "SHMESH_RANK must be an integer in [0, 1], found '2'");
    expect_init_error(init_with(name, "0", "two", NULL), SHMESH_ERR_INVALID,
                      "rank 0: SHMESH_WORLD_SIZE must be an integer");
    expect_init_error(init_with(name, "0", "2", "carrier-pigeon"), SHMESH_ERR_INVALID,
                      "SHMESH_NOTIFY must be uring, futex or auto, found 'carrier-pigeon'");
    expect_init_error(init_with(name, "0", "3", NULL), SHMESH_ERR_BAD_SEGMENT,
                      "rank 0: segment");

    uint64_t magic = 42;
    poke(name, 0, &magic, sizeof magic);
    expect_init_error(init_with(name, "1", "2", NULL), SHMESH_ERR_BAD_SEGMENT, "rank 1: /shmesh-");
    expect_init_error(init_with(name, "1", "2", NULL), SHMESH_ERR_BAD_SEGMENT,
                      "is not a shmesh segment");
    magic = SEG_MAGIC;
    poke(name, 0, &magic, sizeof magic);
    truncate_to(name, 4096 * 3);
    expect_init_error(init_with(name, "1", "2", NULL), SHMESH_ERR_BAD_SEGMENT, "truncated");
    drop(s);
    expect_init_error(init_with(name, "1", "2", NULL), SHMESH_ERR_BAD_SEGMENT, "does not exist");

    setenv("SHMESH_TIMEOUT", "-1", 1);
    expect_init_error(init_with(NULL, NULL, NULL, NULL), SHMESH_ERR_INVALID,
                      "SHMESH_TIMEOUT must be a number of seconds >= 0, found '-1'");
    unsetenv("SHMESH_TIMEOUT");
    /* Without the launcher's variables: a world of one. */
    assert_int_equal(init_with(NULL, NULL, NULL, NULL), 0);
    assert_int_equal(shmesh_init(NULL), SHMESH_ERR_INVALID);
}

/* Trace rings: laid out after the heap, on top of the size asked for,
 * checked on attach like the rest; and seg_observe maps a segment through
 * a descriptor, read-only, whatever its world size. */
static void trace_rings_and_observers(void **state)
{
    (void)state;
    struct seg_create_opts o = {.world_size = 3, .numa = 0, .trace_events = 1024};
    struct seg *s = NULL;
    if (seg_create(&o, &s, err, sizeof err) < 0)
        fail_msg("seg_create: %s", err);
    char name[SEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", s->name);
    assert_int_equal(s->lay.trace_events, 1024);
    assert_int_equal(s->lay.trace_share, SEG_PAGE + 1024 * SEG_TRACE_EVENT);
    assert_int_equal(s->lay.trace_offset, s->lay.heap_offset + 3 * s->lay.heap_share);
    assert_int_equal(s->size, s->lay.trace_offset + 3 * s->lay.trace_share);
    assert_int_equal(s->size, SEG_DEFAULT_TOTAL + seg_trace_bytes(3, 1024));
    /* The last event of the last ring is the mapping's last byte. */
    assert_ptr_equal((unsigned char *)(seg_trace_events(s, 2) + 1024), s->base + s->size);

    struct seg *a = NULL;
    assert_int_equal(seg_attach(name, 3, 1, &a, err, sizeof err), 0);
    assert_int_equal(a->lay.trace_offset, s->lay.trace_offset);
    seg_close(a);
    uint32_t events = 1000; /* not a power of two */
    poke(name, offsetof(struct seg_header, trace_events), &events, sizeof events);
    expect_attach_error(name, 3, -EBADMSG, "1000 trace events per rank");
    events = SEG_TRACE_MAX_EVENTS; /* rings larger than the whole segment */
    poke(name, offsetof(struct seg_header, trace_events), &events, sizeof events);
    expect_attach_error(name, 3, -EBADMSG, "has an impossible layout");
    events = 2048; /* rings that would take what the heap has */
    poke(name, offsetof(struct seg_header, trace_events), &events, sizeof events);
    expect_attach_error(name, 3, -EBADMSG, "has a corrupt layout");
    events = 1024;
    poke(name, offsetof(struct seg_header, trace_events), &events, sizeof events);
    uint64_t off = s->lay.trace_offset + SEG_PAGE;
    poke(name, offsetof(struct seg_header, trace_offset), &off, sizeof off);
    expect_attach_error(name, 3, -EBADMSG, "has a corrupt layout");
    off = s->lay.trace_offset;
    poke(name, offsetof(struct seg_header, trace_offset), &off, sizeof off);

    /* An observer: through the creator's descriptor, as /proc/PID/fd. */
    assert_true(s->fd >= 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", s->fd);
    assert_int_equal(seg_unlink(s), 0); /* the name is gone, the job goes on */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct seg *v = NULL;
    assert_int_equal(seg_observe(fd, "job", &v, err, sizeof err), 0);
    close(fd);
    assert_true(v->readonly);
    assert_int_equal(v->world, 3);
    assert_int_equal(v->lay.trace_events, 1024);
    atomic_store(&seg_ctrl(s, 2)->status.bytes, 12345);
    assert_int_equal(atomic_load(&seg_ctrl(v, 2)->status.bytes), 12345);
    /* What an observer opens cannot be mapped for writing. */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    void *w = mmap(NULL, SEG_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(w == MAP_FAILED && errno == EACCES);
    /* Not a segment: refused with a sentence. */
    int junk = memfd_create("junk", MFD_CLOEXEC);
    assert_true(junk >= 0 && ftruncate(junk, 3 * SEG_PAGE) == 0);
    struct seg *j = NULL;
    assert_int_equal(seg_observe(junk, "junk", &j, err, sizeof err), -EBADMSG);
    assert_null(j);
    if (!strstr(err, "junk is not a shmesh segment"))
        fail_msg("error '%s'", err);
    close(junk);
    close(fd);
    seg_close(v);
    seg_close(s);
}

/* Another process cuts the segment short: the next access past the cut
 * does not kill this process.  The creator and an attacher restore the
 * size and record an abort that says what happened; an observer gets zeros
 * and knows; a SIGBUS that is not about a segment still ends the process. */
static void truncation_is_survived(void **state)
{
    struct seg *s = make(2);
    struct seg *a = NULL;
    assert_int_equal(seg_attach(s->name, 2, 1, &a, err, sizeof err), 0);
    int ro = shm_open(s->name, O_RDONLY, 0);
    assert_true(ro >= 0);
    struct seg *v = NULL;
    assert_int_equal(seg_observe(ro, "the test's view", &v, err, sizeof err), 0);
    close(ro);

    /* The attacher touches rank 1's control block (past the first page). */
    truncate_to(s->name, 4096);
    volatile uint32_t *state_word = (volatile uint32_t *)&seg_ctrl(a, 1)->state;
    assert_int_equal(*state_word, SEG_RANK_EMPTY); /* zero: the page came back empty */
    uint64_t found = 0;
    assert_true(seg_guard_tripped(a, &found));
    assert_int_equal(found, 4096);
    struct stat st;
    assert_int_equal(fstat(s->fd, &st), 0);
    assert_int_equal((uint64_t)st.st_size, s->size); /* restored */
    struct seg_abort_info ai;
    assert_true(seg_aborted(s, &ai));
    assert_int_equal(ai.cause, SEG_CAUSE_CORRUPT);
    if (!strstr(ai.reason, "the segment was truncated to 4096 bytes by another process") ||
        !strstr(ai.reason, "seen by rank 1"))
        fail_msg("abort reason: %s", ai.reason);

    /* The creator, cut below its header: restored too, the abort recorded
     * again on the fresh header. */
    truncate_to(s->name, 0);
    assert_int_equal(atomic_load(&s->hdr->abort.value), SEG_ABORT_SET);
    assert_true(seg_aborted(s, &ai));
    if (!strstr(ai.reason, "truncated to 0 bytes") || !strstr(ai.reason, "its creator"))
        fail_msg("abort reason: %s", ai.reason);

    /* The observer reads what the cut took: private zeros, and it knows. */
    truncate_to(s->name, 4096);
    assert_false(seg_guard_tripped(v, NULL));
    assert_int_equal(atomic_load(&seg_ctrl(v, 1)->pid), 0);
    assert_true(seg_guard_tripped(v, &found));
    assert_int_equal(found, 4096);

    /* Not a segment's fault: the process dies of it as it would have. */
    pid_t child = fork();
    if (child == 0) {
        raise(SIGBUS);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        fail_msg("a SIGBUS sent to the process was swallowed");

    seg_close(v);
    seg_close(a);
    drop(s);
}

/* Eager windows, receipts and the eager wait (shm/layout.h): entry i and
 * receipt i share one description, which lies past every entry and before
 * every receipt; four receipts fill a cache line; the eager wait has its
 * own description; and all of it stays inside the rank's stride. */
static void eager_layout(void **state)
{
    struct seg *s = make(2);
    for (int r = 0; r < 2; r++) {
        const unsigned char *end = (const unsigned char *)seg_slot(s, r, 0) + s->lay.slot_stride;
        const unsigned char *last_entry =
            (const unsigned char *)seg_eager(s, r, SEG_EAGER_ENTRIES - 1) + SEG_EAGER_BYTES;
        const unsigned char *first = (const unsigned char *)seg_receipt(s, r, 0);
        for (unsigned i = 0; i < SEG_EAGER_ENTRIES; i++) {
            const unsigned char *d = seg_call_desc(s, seg_eager(s, r, i));
            assert_ptr_equal(seg_call_desc(s, seg_receipt(s, r, i)), d);
            assert_true(d >= last_entry && d + SEG_CALL_DESC_MAX <= first);
            if (i)
                assert_int_equal(d - (const unsigned char *)seg_call_desc(
                                         s, seg_eager(s, r, i - 1)),
                                 SEG_CALL_DESC_MAX);
        }
        assert_int_equal((uintptr_t)first % SEG_CACHE_LINE, 0);
        assert_int_equal((const unsigned char *)seg_receipt(s, r, 4) - first, SEG_CACHE_LINE);
        assert_true((const unsigned char *)seg_receipt(s, r, SEG_EAGER_ENTRIES - 1) +
                        SEG_SLOT_HDR <= end);
        /* The eager wait: after the receipts, on a line of its own, its
         * description after it. */
        const unsigned char *wait = (const unsigned char *)seg_eager_wait(s, r);
        assert_ptr_equal(wait, first + SEG_EAGER_ENTRIES * SEG_SLOT_HDR);
        assert_int_equal((uintptr_t)wait % SEG_CACHE_LINE, 0);
        const unsigned char *d = seg_call_desc(s, seg_eager_wait(s, r));
        assert_ptr_equal(d, wait + SEG_CACHE_LINE);
        /* The control slots: after the eager wait's description, alike. */
        for (int b = 0; b < 2; b++) {
            const unsigned char *ctl = (const unsigned char *)seg_control(s, r, b);
            assert_ptr_equal(ctl, d + SEG_CALL_DESC_MAX + (size_t)b * SEG_CONTROL_SLOT);
            assert_int_equal((uintptr_t)ctl % SEG_CACHE_LINE, 0);
            assert_ptr_equal(seg_call_desc(s, seg_control(s, r, b)), ctl + SEG_CACHE_LINE);
            assert_true(ctl + SEG_CONTROL_SLOT <= end);
        }
    }
    drop(s);
}

/* Whether the page holding p is in this process's page tables
 * (/proc/self/pagemap's bit 63); -1 when pagemap cannot be read. */
static int mapped(const void *p)
{
    long page = sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0)
        return -1;
    uint64_t e = 0;
    ssize_t n = pread(fd, &e, sizeof e, (off_t)((uintptr_t)p / (uintptr_t)page * sizeof e));
    close(fd);
    return n == (ssize_t)sizeof e ? (int)(e >> 63) : -1;
}

/* seg_populate_hot maps, in a fresh attach, the pages small calls touch
 * (every rank's, not only its own) and none of the heap's. */
static void populate_maps_the_hot_pages(void **state)
{
    struct seg *s = make(2);
    struct seg *a = NULL;
    assert_int_equal(seg_attach(s->name, 2, 1, &a, err, sizeof err), 0);
    const void *hot[] = {
        seg_eager(a, 0, 33),
        seg_eager(a, 1, SEG_EAGER_ENTRIES - 1),
        seg_call_desc(a, seg_eager(a, 0, 40)),
        seg_receipt(a, 1, SEG_EAGER_ENTRIES - 1),
        seg_slot(a, 0, 1),
        seg_call_desc(a, seg_slot(a, 1, 0)),
        seg_ctrl(a, 1),
    };
    const void *heap = a->base + a->lay.heap_offset + a->lay.heap_share + (1u << 20);
    int before = mapped(hot[0]);
    if (before < 0) {
        seg_close(a);
        drop(s);
        skip(); /* no /proc/self/pagemap here */
    }
    assert_int_equal(before, 0);
    seg_populate_hot(a, 1);
    for (size_t i = 0; i < sizeof hot / sizeof *hot; i++) {
        if (mapped(hot[i]) != 1)
            fail_msg("hot page %zu at offset %td is not mapped after seg_populate_hot", i,
                     (const unsigned char *)hot[i] - a->base);
    }
    assert_int_equal(mapped(heap), 0);
    seg_close(a);
    drop(s);
}

/* A failed assertion leaves its test early: remove whatever segments this
 * process created, so that a failure leaves nothing in /dev/shm either. */
static int remove_own_segments(void **state)
{
    own_segments(true);
    return 0;
}

#define TEST(f) cmocka_unit_test_teardown(f, remove_own_segments)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(layout_is_aligned),
        TEST(attach_validates_header),
        TEST(layout_is_read_once),
        TEST(last_join_unlinks),
        TEST(attach_through_the_creators_descriptor),
        TEST(full_dev_shm_is_a_clear_error),
        TEST(bad_create_options),
        TEST(numa_placement_before_first_touch),
        TEST(start_cpu_moves_and_frees),
        TEST(abort_record_first_wins),
        TEST(segment_size_is_chosen),
        TEST(default_slots_hold_powers_of_two),
        TEST(heap_alloc_and_free),
        TEST(init_refuses_bad_environment),
        TEST(trace_rings_and_observers),
        TEST(truncation_is_survived),
        TEST(populate_maps_the_hot_pages),
        TEST(eager_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
