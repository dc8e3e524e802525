/* Writes the fuzz targets' seed inputs (tests/fuzz/corpus/): real segment
 * headers, as seg_create_private lays them out, and call descriptions as the
 * ops fill them.  Run by `tests/fuzz/run-fuzz.sh BUILD_DIR seeds` after the
 * layout or struct call_desc changes; the files are committed.
 *   make-seeds CORPUS_DIR   (writes CORPUS_DIR/desc/ and CORPUS_DIR/segment/) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/desc.h"
#include "segment.h"

static const char *dir;

static void put(const char *target, const char *name, const void *a, size_t alen,
                const void *b, size_t blen, const void *c, size_t clen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, alen, f) != alen || (blen && fwrite(b, 1, blen, f) != blen) ||
        (clen && fwrite(c, 1, clen, f) != clen) || fclose(f)) {
        perror(path);
        exit(1);
    }
}

/* The mapping's size, the world expected, the header. */
static void segment(const char *name, int world, uint64_t slot, uint64_t total)
{
    struct seg *s;
    char err[256];
    if (seg_create_private(world, slot, total, &s, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", name, err);
        exit(1);
    }
    uint64_t real = s->size;
    int32_t w = world;
    put("segment", name, &real, sizeof real, &w, sizeof w, s->hdr, sizeof *s->hdr);
    seg_close(s);
}

/* A segment of 2 ranks with trace rings of `events` each, as shmesh-run
 * --trace lays it out (seg_create_private makes none: the rings are added
 * to its header by the same rule). */
static void traced_segment(const char *name, uint32_t events)
{
    struct seg *s;
    char err[256];
    if (seg_create_private(2, 0, 0, &s, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", name, err);
        exit(1);
    }
    struct seg_header h = *s->hdr;
    h.trace_offset = h.total_bytes;
    h.trace_share = SEG_PAGE + ((uint64_t)events * SEG_TRACE_EVENT + SEG_PAGE - 1) / SEG_PAGE * SEG_PAGE;
    h.trace_events = events;
    h.total_bytes += 2 * h.trace_share;
    uint64_t real = h.total_bytes;
    int32_t w = 2;
    put("segment", name, &real, sizeof real, &w, sizeof w, &h, sizeof h);
    seg_close(s);
}

/* The description, then the call number. */
static void desc(const char *name, const struct call_desc *d, uint64_t call)
{
    put("desc", name, d, sizeof *d, &call, sizeof call, NULL, 0);
}

static struct call_desc mesh_call(enum call_op op, const char *axes, int naxes)
{
    struct call_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.mesh = 1;
    d.naxes = naxes;
    for (int k = 0; k < naxes; k++)
        d.axis[k] = (uint8_t)k;
    snprintf(d.axes, sizeof d.axes, "%s", axes);
    d.dtype = d.out_dtype = SHMESH_FLOAT32;
    d.ndim = d.out_ndim = 1;
    d.shape[0] = d.out_shape[0] = 4;
    d.tuning = 7;
    return d;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    segment("world1-default", 1, 0, 0);
    segment("world4-default", 4, 0, 0);
    segment("world2-small-slots-no-heap", 2, 2 * SEG_PAGE, 0);
    segment("world3-heap", 3, 16 * SEG_PAGE, 8u << 20);
    traced_segment("world2-traced", 1024);

    struct call_desc d = mesh_call(OP_PSUM, "x,y", 2);
    snprintf(d.groups, sizeof d.groups, "[[0,1],[2,3]]");
    d.extra_hash = 0x1234;
    desc("psum-groups", &d, 3);
    d = mesh_call(OP_ALL_GATHER, "i", 1);
    d.param[0] = 0;
    d.param[1] = 1;
    d.out_shape[0] = 16;
    desc("all-gather", &d, 4);
    d = mesh_call(OP_MESH_CREATE, "a_long_axis_name_of_31_chars_aa,b,x,y", 0);
    d.mesh = 2;
    d.ndim = 4;
    d.shape[0] = 1, d.shape[1] = 1, d.shape[2] = 2, d.shape[3] = 2;
    desc("mesh-create", &d, 1);
    d = mesh_call(OP_WORLD_SUM, "", 0);
    d.mesh = -1;
    d.param[0] = 4;
    desc("world-sum", &d, 2);
    memset(&d, 0xff, sizeof d);
    desc("all-ff", &d, UINT64_MAX);
    return 0;
}
