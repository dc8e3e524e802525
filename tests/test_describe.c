/* Description: call descriptions, as a peer's may arrive — any bytes.
 * call_describe and the mismatch sentence stay inside the description (it
 * sits against an unmapped page here) and inside the buffer they are given,
 * and write one terminated line of printable ASCII whatever the op, dtypes,
 * ndims, axes and texts hold.  And what the hash covers: the axes as mesh
 * dimensions, never their (once cut) text; long descriptions are cut with a
 * mark, both calls still named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/desc.h"

/* A description whose last byte is the last of a page followed by one that
 * is not mapped: a read past its end faults. */
static struct call_desc *guarded(void **map, size_t *maplen)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (sizeof(struct call_desc) + page - 1) / page;
    *maplen = (pages + 1) * page;
    unsigned char *p = mmap(NULL, *maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + pages * page, page, PROT_NONE), 0);
    *map = p;
    return (struct call_desc *)(p + pages * page - sizeof(struct call_desc));
}

/* buf[0..len) holds a terminated line of printable ASCII; the bytes after
 * it were not touched (canary 0x5a). */
static void expect_line(const char *buf, size_t len, size_t cap)
{
    size_t n = strnlen(buf, len);
    if (n >= len)
        fail_msg("not terminated within %zu bytes", len);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
            fail_msg("byte %zu of '%.*s' is 0x%02x", i, (int)n, buf, (unsigned char)buf[i]);
    for (size_t i = len; i < cap; i++)
        if ((unsigned char)buf[i] != 0x5a)
            fail_msg("byte %zu written past the %zu given", i, len);
}

static void describe_both_ways(const struct call_desc *d, const struct call_desc *mine)
{
    static const size_t lens[] = {1, 2, 4, 5, 17, 64, 255, 400, 1500};
    char buf[2048];
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        memset(buf, 0x5a, sizeof buf);
        call_describe(d, 7, buf, lens[i]);
        expect_line(buf, lens[i], sizeof buf);
        memset(buf, 0x5a, sizeof buf);
        call_mismatch_text(buf, lens[i], 7, mine, 3, d, NULL);
        expect_line(buf, lens[i], sizeof buf);
        memset(buf, 0x5a, sizeof buf);
        call_mismatch_text(buf, lens[i], 7, d, 3, mine, NULL);
        expect_line(buf, lens[i], sizeof buf);
    }
    (void)call_hash(d);
}

static struct call_desc psum_x(void)
{
    struct call_desc d;
    call_desc_clear(&d);
    d.op = OP_PSUM;
    d.mesh = 1;
    d.naxes = 1;
    strcpy(d.axes, "x");
    d.dtype = d.out_dtype = SHMESH_FLOAT32;
    d.ndim = d.out_ndim = 1;
    d.shape[0] = d.out_shape[0] = 4;
    return d;
}

/* All 0xff (unterminated texts, every value out of range), with each op. */
static void garbage_stays_in_bounds(void **state)
{
    void *map;
    size_t maplen;
    struct call_desc *d = guarded(&map, &maplen), mine = psum_x();
    for (uint32_t op = 0; op <= OP_COUNT + 1; op++) {
        memset(d, 0xff, sizeof *d);
        if (op <= OP_COUNT)
            d->op = op;
        describe_both_ways(d, &mine);
        /* Printable but unterminated texts, and plausible numbers. */
        memset(d, 'a', sizeof *d);
        d->op = op <= OP_COUNT ? op : 0x61616161u;
        d->ndim = d->out_ndim = 3;
        describe_both_ways(d, &mine);
    }
    munmap(map, maplen);
}

/* Random descriptions (a fixed seed), half of them with a valid op. */
static void random_bytes(void **state)
{
    void *map;
    size_t maplen;
    struct call_desc *d = guarded(&map, &maplen), mine = psum_x();
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int it = 0; it < 2000; it++) {
        unsigned char *b = (unsigned char *)d;
        for (size_t i = 0; i < sizeof *d; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[i] = (unsigned char)(x >> 32);
        }
        if (it & 1)
            d->op = (uint32_t)(x % OP_COUNT);
        if (it & 2)
            d->ndim = (int32_t)(x >> 8) % 12 - 2;
        describe_both_ways(d, &mine);
    }
    munmap(map, maplen);
}

/* What is shown for values out of range. */
static void out_of_range_shown(void **state)
{
    struct call_desc d = psum_x();
    char buf[512];
    d.dtype = 99;
    d.out_ndim = 12;
    d.naxes = 2;
    d.axis[1] = 200;
    d.axes[1] = '\n';
    d.axes[2] = 0;
    call_describe(&d, 5, buf, sizeof buf);
    assert_string_equal(buf, "shmesh_psum(\"x\\x0a\", dtype 99?[4] -> float32[ndim 12?], axis 1 "
                             "is dimension 200?) (call #5)");
    d = psum_x();
    d.op = 1000;
    call_describe(&d, 5, buf, sizeof buf);
    assert_string_equal(buf, "an unknown collective (op 1000, call #5)");
    d.op = OP_ALL_GATHER;
    d.param[1] = 2; /* tiled, a boolean */
    d.naxes = -1;
    call_describe(&d, 5, buf, sizeof buf);
    assert_string_equal(buf, "shmesh_all_gather(\"x\", float32[4] -> float32[4], axis=0, "
                             "tiled=2?, naxes -1?) (call #5)");
}

/* The hash follows the resolved axes, not the text (which once dropped
 * names past 63 characters). */
static void hash_covers_resolved_axes(void **state)
{
    struct call_desc a = psum_x(), b = psum_x();
    assert_int_equal(call_hash(&a), call_hash(&b));
    strcpy(b.axes, "something else"); /* the text is for people */
    assert_int_equal(call_hash(&a), call_hash(&b));
    b = psum_x();
    b.axis[0] = 1;
    assert_true(call_hash(&a) != call_hash(&b));
    b = psum_x();
    b.naxes = 2;
    assert_true(call_hash(&a) != call_hash(&b));
    b = psum_x();
    b.extra_hash = 1;
    assert_true(call_hash(&a) != call_hash(&b));
}

/* 8 axes of 31 characters and long groups: the description holds every
 * name; a mismatch sentence that does not fit names both calls, each cut
 * with "...". */
static void long_descriptions_cut_with_a_mark(void **state)
{
    struct call_desc a = psum_x(), b;
    char names[CALL_AXES_TEXT] = "";
    a.naxes = SHMESH_MAX_MESH_DIMS;
    for (int k = 0; k < SHMESH_MAX_MESH_DIMS; k++) {
        a.axis[k] = (uint8_t)k;
        char name[SHMESH_MAX_AXIS_NAME + 1];
        memset(name, 'a' + k, SHMESH_MAX_AXIS_NAME);
        name[SHMESH_MAX_AXIS_NAME] = 0;
        if (k)
            strcat(names, ",");
        strcat(names, name);
    }
    assert_int_equal(strlen(names), sizeof a.axes - 1);
    strcpy(a.axes, names);
    b = a; /* the last two axes swapped */
    b.axis[7] = 6;
    b.axis[6] = 7;
    memcpy(b.axes + 6 * 32, names + 7 * 32, 31);
    memcpy(b.axes + 7 * 32, names + 6 * 32, 31);
    char buf[1024], reason[256];
    call_describe(&a, 9, buf, sizeof buf);
    assert_non_null(strstr(buf, names));
    call_mismatch_text(reason, sizeof reason, 9, &a, 1, &b, NULL);
    expect_line(reason, sizeof reason, sizeof reason);
    assert_int_equal(strlen(reason), sizeof reason - 1);
    const char *but = strstr(reason, "... but rank 1 called shmesh_psum(\"aaaa");
    assert_non_null(but);
    assert_int_equal(strncmp(reason, "called shmesh_psum(\"aaaa", 24), 0);
    assert_int_equal(strcmp(reason + strlen(reason) - 3, "..."), 0);
    /* Alike as shown: the sentence says where they differ. */
    b = a;
    b.mesh = 2;
    call_mismatch_text(buf, sizeof buf, 9, &a, 1, &b, NULL);
    assert_non_null(strstr(buf, "(on mesh 1, there mesh 2)"));
    b = a;
    b.extra_hash = 5;
    call_mismatch_text(buf, sizeof buf, 9, &a, 1, &b, NULL);
    assert_non_null(strstr(buf, "(with other axis_index_groups, permutation or device order)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(garbage_stays_in_bounds),
        cmocka_unit_test(random_bytes),
        cmocka_unit_test(out_of_range_shown),
        cmocka_unit_test(hash_covers_resolved_axes),
        cmocka_unit_test(long_descriptions_cut_with_a_mark),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
