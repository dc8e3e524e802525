/* Fuzz target: segment validation, as an attacher does it.
 *
 * The input is the size of the mapping as the kernel would report it (8
 * bytes), the world size the attacher expects (4 bytes), then the header as
 * found in the segment (shorter: padded with zeros).  seg_validate() gets a
 * private copy, as seg_attach gives it.  Whatever it accepts must keep every
 * region inside the mapping, aligned as the code that derives pointers from
 * it assumes (segment.h's accessors, the atomics in the control blocks and
 * slot headers): each is checked here and a hole aborts, so the fuzzer
 * reports it.  A refusal must come with a terminated sentence.
 * tests/fuzz/run-fuzz.sh builds and runs it. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct seg_header *hdr;
static uint64_t mapped;

static void hole(const char *what)
{
    const struct seg_header *h = hdr;
    fprintf(stderr,
            "seg_validate accepted a layout where %s: mapping %" PRIu64 " bytes, world %u, "
            "header %u bytes, control blocks at %" PRIu64 " every %u, slots at %" PRIu64
            " every %" PRIu64 " of 2 x %" PRIu64 ", heap at %" PRIu64 " shares of %" PRIu64
            ", total %" PRIu64 "\n",
            what, mapped, h->world_size, h->header_bytes, h->ctrl_offset, h->ctrl_stride,
            h->slot_offset, h->slot_stride, h->slot_bytes, h->heap_offset, h->heap_share,
            h->total_bytes);
    abort();
}

#define EXPECT(cond, what)                                                                     \
    do {                                                                                       \
        if (!(cond))                                                                           \
            hole(what);                                                                        \
    } while (0)

/* a + n * stride, or UINT64_MAX when that overflows. */
static uint64_t end_of(uint64_t a, uint64_t n, uint64_t stride)
{
    uint64_t m, e;
    if (__builtin_mul_overflow(n, stride, &m) || __builtin_add_overflow(a, m, &e))
        return UINT64_MAX;
    return e;
}

static void check_layout(const struct seg_header *h, uint64_t real, int world)
{
    hdr = h;
    mapped = real;
    EXPECT(h->total_bytes == real, "the header's size is not the mapping's");
    EXPECT(world >= 1 && world <= SEG_MAX_WORLD && h->world_size == (uint32_t)world,
           "the world size is not the expected one in 1..SEG_MAX_WORLD");
    uint64_t n = h->world_size;
    /* The header: the whole struct is read and written through hdr. */
    EXPECT(h->header_bytes >= sizeof(struct seg_header) && h->header_bytes <= real,
           "the header does not fit");
    /* Control blocks: seg_ctrl(s, r) for r < world, each a struct seg_ctrl
     * with 64-byte-aligned atomics. */
    EXPECT(h->ctrl_stride >= sizeof(struct seg_ctrl) && h->ctrl_stride % SEG_CACHE_LINE == 0,
           "control blocks are too small or misaligned");
    EXPECT(h->ctrl_offset >= h->header_bytes && h->ctrl_offset % SEG_CACHE_LINE == 0,
           "control blocks overlap the header or are misaligned");
    EXPECT(end_of(h->ctrl_offset, n, h->ctrl_stride) <= h->slot_offset,
           "control blocks run into the slots");
    /* Slots: seg_slot(s, r, 0..1) each slot_bytes, starting with a slot
     * header (64-bit atomic tag) and ending with SEG_CALL_DESC_MAX bytes of
     * call description, with seg_payload_bytes() between. */
    EXPECT(h->slot_offset % SEG_PAGE == 0, "slots are not page-aligned");
    EXPECT(h->slot_bytes > SEG_SLOT_HDR + SEG_CALL_DESC_MAX,
           "a slot buffer cannot hold its header and a call description");
    EXPECT(h->slot_bytes % SEG_CACHE_LINE == 0, "slot buffers are misaligned");
    EXPECT(h->slot_stride % SEG_PAGE == 0, "data regions are not page-aligned");
    EXPECT(end_of(0, 2, h->slot_bytes) <= h->slot_stride,
           "a data region cannot hold its two buffers");
    EXPECT(end_of(h->slot_offset, n, h->slot_stride) <= h->heap_offset,
           "the slots run into the heap");
    /* The heap: seg_heap(s, r) for r < world, heap_share bytes each. */
    EXPECT(h->heap_share % SEG_PAGE == 0, "heap shares are not page multiples");
    EXPECT(h->heap_offset % SEG_PAGE == 0, "the heap is not page-aligned");
    EXPECT(end_of(h->heap_offset, n, h->heap_share) <= real, "the heap runs past the mapping");
    /* Trace rings: seg_trace_ring(s, r) a page, then trace_events events. */
    if (h->trace_events) {
        EXPECT(h->trace_events <= SEG_TRACE_MAX_EVENTS &&
                   !(h->trace_events & (h->trace_events - 1)),
               "the trace rings' size is not a power of two up to SEG_TRACE_MAX_EVENTS");
        EXPECT(h->trace_offset % SEG_PAGE == 0 && h->trace_share % SEG_PAGE == 0,
               "the trace rings are not page-aligned");
        EXPECT(end_of(h->heap_offset, n, h->heap_share) <= h->trace_offset,
               "the heap runs into the trace rings");
        EXPECT(end_of(SEG_PAGE, h->trace_events, SEG_TRACE_EVENT) <= h->trace_share,
               "a trace ring cannot hold its page and its events");
        EXPECT(end_of(h->trace_offset, n, h->trace_share) <= real,
               "the trace rings run past the mapping");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t real = 0;
    int32_t world = 0;
    struct seg_header h;
    memset(&h, 0, sizeof h);
    size_t at = 0, n;
    n = size - at < sizeof real ? size - at : sizeof real;
    memcpy(&real, data + at, n);
    at += n;
    n = size - at < sizeof world ? size - at : sizeof world;
    memcpy(&world, data + at, n);
    at += n;
    n = size - at < sizeof h ? size - at : sizeof h;
    memcpy(&h, data + at, n);

    char err[512];
    memset(err, 0x5a, sizeof err);
    int rc = seg_validate("/shmesh-fuzz", &h, real, world, err, sizeof err);
    if (rc == 0) {
        check_layout(&h, real, world);
    } else if (rc != -EBADMSG || strnlen(err, sizeof err) == sizeof err) {
        fprintf(stderr, "seg_validate refused with %d (not -EBADMSG) or without a sentence\n", rc);
        abort();
    }
    return 0;
}
