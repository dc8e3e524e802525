/* Fuzz target: a peer's call description, as any bytes.
 *
 * The input is the description a peer left at the end of its slot buffer
 * (shorter inputs are padded with zeros, as a fresh segment would be; 8
 * more bytes, when there, are the call number).  It is copied once into a
 * buffer of exactly its size, as win_collect copies it out of the segment,
 * then read the ways a mismatch reads it: described, hashed, and explained
 * against a fixed local call (in both roles, into buffers of many sizes).
 * Every line must stay inside the description and inside its buffer, and be
 * terminated printable ASCII.  tests/fuzz/run-fuzz.sh builds and runs it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_line(const char *what, const char *buf, size_t len)
{
    size_t n = strnlen(buf, len);
    if (n >= len) {
        fprintf(stderr, "%s: not terminated within %zu bytes\n", what, len);
        abort();
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f) {
            fprintf(stderr, "%s: byte %zu is 0x%02x in: %.*s\n", what, i, (unsigned char)buf[i],
                    (int)n, buf);
            abort();
        }
}

/* The call on this side: psum over "x,y" with groups, as coll_open fills it. */
static struct call_desc local_call(void)
{
    struct call_desc d;
    call_desc_clear(&d);
    d.op = OP_PSUM;
    d.mesh = 1;
    d.naxes = 2;
    d.axis[0] = 0;
    d.axis[1] = 1;
    strcpy(d.axes, "x,y");
    strcpy(d.groups, "[[0,1],[2,3]]");
    d.extra_hash = 0x1234;
    d.tuning = 7;
    d.dtype = d.out_dtype = SHMESH_FLOAT32;
    d.ndim = d.out_ndim = 2;
    d.shape[0] = d.out_shape[0] = 4;
    d.shape[1] = d.out_shape[1] = 3;
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t lens[] = {1, 2, 5, 64, 256, 496, 1024};
    struct call_desc *theirs = malloc(sizeof *theirs); /* exactly its size: ASan sees past it */
    if (!theirs)
        return 0;
    memset(theirs, 0, sizeof *theirs);
    memcpy(theirs, data, size < sizeof *theirs ? size : sizeof *theirs);
    uint64_t call = 3;
    if (size >= sizeof *theirs + sizeof call)
        memcpy(&call, data + sizeof *theirs, sizeof call);
    const struct call_desc mine = local_call();

    char buf[1100];
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        call_describe(theirs, call, buf, lens[i]);
        check_line("call_describe", buf, lens[i]);
        call_mismatch_text(buf, lens[i], call, &mine, 1, theirs, NULL);
        check_line("call_mismatch_text (theirs)", buf, lens[i]);
        call_mismatch_text(buf, lens[i], call, theirs, 1, &mine, NULL);
        check_line("call_mismatch_text (as mine)", buf, lens[i]);
    }
    call_mismatch_text(buf, sizeof buf, call, theirs, 2, NULL, NULL);
    check_line("call_mismatch_text (gone)", buf, sizeof buf);
    volatile uint64_t h = call_hash(theirs);
    (void)h;
    free(theirs);
    return 0;
}
