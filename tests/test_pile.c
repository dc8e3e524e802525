/* Description: ragged arrays (piles) in one process — shmesh_pile_make's
 * checks, components cut along the first and a middle axis, segment_sum
 * against hand-computed sums for every kind of dtype (integers wrapping,
 * float32 and float64 added in order, float16 and bfloat16 accumulated in
 * float32 and rounded once, bool as "or"), empty segments and count 0, and
 * the seed's own pile: lengths [3, 1, 4] over [0, 1, 2, 0, 0, 1, 2, 3];
 * and ragged_all_to_all_pile's checks in a job of one rank. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shmesh.h"

#define N_OF(a) (sizeof(a) / sizeof *(a))

static shmesh_array arr(void *data, shmesh_dtype dt, int ndim, const int64_t *shape)
{
    shmesh_array a = {.data = data, .dtype = dt, .ndim = ndim};
    for (int d = 0; d < ndim; d++)
        a.shape[d] = shape[d];
    return a;
}

/* The call was refused with a message holding every one of the words. */
static void expect_refused(int rc, const char *w1, const char *w2, const char *w3)
{
    const char *msg = shmesh_last_error(NULL);
    if (rc != SHMESH_ERR_INVALID)
        fail_msg("expected SHMESH_ERR_INVALID, got %s (%s)", shmesh_error_name(rc), msg);
    const char *words[] = {w1, w2, w3};
    for (size_t i = 0; i < N_OF(words); i++)
        if (words[i] && !strstr(msg, words[i]))
            fail_msg("message '%s' does not say '%s'", msg, words[i]);
}

/* The seed's example pile, f32[[3 1 4].a]: components [0,1,2], [0] and
 * [0,1,2,3]; their sums 3, 0 and 6. */
static void seed_example(void **state)
{
    float data[] = {0, 1, 2, 0, 0, 1, 2, 3};
    int64_t lengths[] = {3, 1, 4};
    shmesh_array a = arr(data, SHMESH_FLOAT32, 1, (int64_t[]){8});
    shmesh_pile p;
    assert_int_equal(shmesh_pile_make(&p, &a, 0, 3, lengths), 0);
    assert_int_equal(p.count, 3);
    assert_int_equal(p.axis, 0);
    assert_ptr_equal(p.lengths, lengths);
    assert_ptr_equal(p.data.data, data);

    const float want0[] = {0, 1, 2}, want1[] = {0}, want2[] = {0, 1, 2, 3};
    const float *want[] = {want0, want1, want2};
    for (int i = 0; i < 3; i++) {
        float got[4] = {-1, -1, -1, -1};
        shmesh_array out = arr(got, SHMESH_FLOAT32, 1, &lengths[i]);
        assert_int_equal(shmesh_pile_component(&p, i, &out), 0);
        assert_memory_equal(got, want[i], sizeof(float) * (size_t)lengths[i]);
        assert_true(lengths[i] == 4 || got[lengths[i]] == -1.0f); /* nothing past it */
    }
    float sums[3] = {-1, -1, -1};
    shmesh_array out = arr(sums, SHMESH_FLOAT32, 1, (int64_t[]){3});
    assert_int_equal(shmesh_pile_sum(&p, &out), 0);
    assert_true(sums[0] == 3.0f && sums[1] == 0.0f && sums[2] == 6.0f);
    memset(sums, 0xff, sizeof sums);
    assert_int_equal(shmesh_segment_sum(&a, 0, 3, lengths, &out), 0);
    assert_true(sums[0] == 3.0f && sums[1] == 0.0f && sums[2] == 6.0f);
}

static void make_refuses_bad_piles(void **state)
{
    int32_t data[12] = {0};
    shmesh_array a = arr(data, SHMESH_INT32, 2, (int64_t[]){4, 3});
    shmesh_pile p, before;
    memset(&p, 0x5a, sizeof p);
    before = p;
    int64_t ok[] = {1, 3}, negative[] = {5, -1}, short_sum[] = {1, 2}, long_sum[] = {3, 2};

    expect_refused(shmesh_pile_make(&p, &a, 0, 2, negative), "shmesh_pile_make",
                   "lengths[1] is -1", ">= 0");
    expect_refused(shmesh_pile_make(&p, &a, 0, 2, short_sum), "add up to 3", "has 4 entries",
                   "axis 0");
    expect_refused(shmesh_pile_make(&p, &a, 0, 2, long_sum), "add up to 5", "has 4 entries",
                   NULL);
    expect_refused(shmesh_pile_make(&p, &a, 2, 2, ok), "axis 2 is out of range",
                   "2 dimensions", "-2..1");
    expect_refused(shmesh_pile_make(&p, &a, -3, 2, ok), "axis -3 is out of range", NULL, NULL);
    expect_refused(shmesh_pile_make(NULL, &a, 0, 2, ok), "pile must not be NULL", NULL, NULL);
    expect_refused(shmesh_pile_make(&p, NULL, 0, 2, ok), "data must not be NULL", NULL, NULL);
    expect_refused(shmesh_pile_make(&p, &a, 0, 2, NULL), "lengths is NULL", "count is 2",
                   NULL);
    expect_refused(shmesh_pile_make(&p, &a, 0, -1, ok), "count must be >= 0", "-1", NULL);
    shmesh_array scalar = arr(data, SHMESH_INT32, 0, NULL);
    expect_refused(shmesh_pile_make(&p, &scalar, 0, 1, ok), "ndim 0", NULL, NULL);
    shmesh_array no_data = arr(NULL, SHMESH_INT32, 2, (int64_t[]){4, 3});
    expect_refused(shmesh_pile_make(&p, &no_data, 0, 2, ok), "data is NULL", NULL, NULL);
    shmesh_array bad_dtype = a;
    bad_dtype.dtype = SHMESH_DTYPE_COUNT;
    expect_refused(shmesh_pile_make(&p, &bad_dtype, 0, 2, ok), "not a shmesh_dtype", NULL, NULL);
    /* A refused pile is left as it was. */
    assert_memory_equal(&p, &before, sizeof p);

    /* A negative axis counts from the end; lengths may be NULL for no components. */
    assert_int_equal(shmesh_pile_make(&p, &a, -2, 2, ok), 0);
    assert_int_equal(p.axis, 0);
    int64_t along_cols[] = {2, 0, 1};
    assert_int_equal(shmesh_pile_make(&p, &a, -1, 3, along_cols), 0);
    assert_int_equal(p.axis, 1);
    shmesh_array empty = arr(NULL, SHMESH_FLOAT32, 2, (int64_t[]){3, 0});
    assert_int_equal(shmesh_pile_make(&p, &empty, 1, 0, NULL), 0);
    assert_int_equal(p.count, 0);
    expect_refused(shmesh_pile_make(&p, &a, 1, 0, NULL), "add up to 0", "has 3 entries", NULL);
}

/* Rows of int32[5,3] (row r holds 10r, 10r+1, 10r+2) as components of 2, 0
 * and 3 rows. */
static void component_along_axis_0(void **state)
{
    int32_t data[15];
    for (int i = 0; i < 15; i++)
        data[i] = (i / 3) * 10 + i % 3;
    int64_t lengths[] = {2, 0, 3};
    shmesh_array a = arr(data, SHMESH_INT32, 2, (int64_t[]){5, 3});
    shmesh_pile p;
    assert_int_equal(shmesh_pile_make(&p, &a, 0, 3, lengths), 0);

    int32_t c0[6], c2[9];
    shmesh_array out0 = arr(c0, SHMESH_INT32, 2, (int64_t[]){2, 3});
    assert_int_equal(shmesh_pile_component(&p, 0, &out0), 0);
    assert_memory_equal(c0, ((int32_t[]){0, 1, 2, 10, 11, 12}), sizeof c0);
    shmesh_array out1 = arr(NULL, SHMESH_INT32, 2, (int64_t[]){0, 3});
    assert_int_equal(shmesh_pile_component(&p, 1, &out1), 0);
    shmesh_array out2 = arr(c2, SHMESH_INT32, 2, (int64_t[]){3, 3});
    assert_int_equal(shmesh_pile_component(&p, 2, &out2), 0);
    assert_memory_equal(c2, ((int32_t[]){20, 21, 22, 30, 31, 32, 40, 41, 42}), sizeof c2);

    /* A wrong output names the shape expected and the one found. */
    expect_refused(shmesh_pile_component(&p, 2, &out0), "shmesh_pile_component",
                   "out must be int32[3,3]", "got int32[2,3]");
    shmesh_array as_float = arr(c2, SHMESH_FLOAT32, 2, (int64_t[]){3, 3});
    expect_refused(shmesh_pile_component(&p, 2, &as_float), "int32[3,3]", "got float32[3,3]",
                   NULL);
    expect_refused(shmesh_pile_component(&p, 3, &out2), "component 3 is out of range",
                   "has 3", NULL);
    expect_refused(shmesh_pile_component(&p, -1, &out2), "component -1", NULL, NULL);
    expect_refused(shmesh_pile_component(&p, 0, NULL), "out must not be NULL", NULL, NULL);
    expect_refused(shmesh_pile_component(NULL, 0, &out0), "pile must not be NULL", NULL, NULL);
    shmesh_pile bad = p;
    bad.axis = -1; /* only shmesh_pile_make canonicalizes */
    expect_refused(shmesh_pile_component(&bad, 0, &out0), "axis is -1", NULL, NULL);
}

/* f32[2,5,3] holding 100i + 10j + k, cut along axis 1 into 1, 3 and 1:
 * a strided copy. */
static void component_along_a_middle_axis(void **state)
{
    float data[30];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++)
            for (int k = 0; k < 3; k++)
                data[(i * 5 + j) * 3 + k] = (float)(100 * i + 10 * j + k);
    int64_t lengths[] = {1, 3, 1};
    shmesh_array a = arr(data, SHMESH_FLOAT32, 3, (int64_t[]){2, 5, 3});
    shmesh_pile p;
    assert_int_equal(shmesh_pile_make(&p, &a, -2, 3, lengths), 0);
    assert_int_equal(p.axis, 1);

    float c1[18], c2[6];
    shmesh_array out1 = arr(c1, SHMESH_FLOAT32, 3, (int64_t[]){2, 3, 3});
    assert_int_equal(shmesh_pile_component(&p, 1, &out1), 0);
    const float want1[] = {10,  11,  12,  20,  21,  22,  30,  31,  32,
                           110, 111, 112, 120, 121, 122, 130, 131, 132};
    assert_memory_equal(c1, want1, sizeof c1);
    shmesh_array out2 = arr(c2, SHMESH_FLOAT32, 3, (int64_t[]){2, 1, 3});
    assert_int_equal(shmesh_pile_component(&p, 2, &out2), 0);
    assert_memory_equal(c2, ((float[]){40, 41, 42, 140, 141, 142}), sizeof c2);
    expect_refused(shmesh_pile_component(&p, 0, &out1), "out must be float32[2,1,3]",
                   "got float32[2,3,3]", NULL);

    /* And along the last axis: columns 0..1 and 2. */
    int64_t cols[] = {2, 1};
    assert_int_equal(shmesh_pile_make(&p, &a, 2, 2, cols), 0);
    float last[10];
    shmesh_array out3 = arr(last, SHMESH_FLOAT32, 3, (int64_t[]){2, 5, 1});
    assert_int_equal(shmesh_pile_component(&p, 1, &out3), 0);
    assert_memory_equal(last, ((float[]){2, 12, 22, 32, 42, 102, 112, 122, 132, 142}),
                        sizeof last);
}

/* One segment_sum of a rank-1 operand: bits in, bits out. */
static void sum1(shmesh_dtype dt, const void *in, int64_t n, int count, const int64_t *lens,
                 void *out)
{
    shmesh_array a = arr((void *)in, dt, 1, &n), o = arr(out, dt, 1, (int64_t[]){count});
    int rc = shmesh_segment_sum(&a, 0, count, lens, &o);
    if (rc)
        fail_msg("segment_sum of %s: %s", shmesh_dtype_name(dt), shmesh_last_error(NULL));
}

static void segment_sum_integers_wrap(void **state)
{
    const int32_t i32[] = {INT32_MAX, 1, -5, INT32_MIN, -1};
    int32_t o32[2];
    sum1(SHMESH_INT32, i32, 5, 2, (int64_t[]){2, 3}, o32);
    /* MAX + 1 wraps to MIN; -5 + MIN wraps to MAX - 3, and -1 more. */
    assert_int_equal(o32[0], INT32_MIN);
    assert_int_equal(o32[1], INT32_MAX - 5);

    const uint8_t u8[] = {200, 100, 7};
    uint8_t o8[2];
    sum1(SHMESH_UINT8, u8, 3, 2, (int64_t[]){2, 1}, o8);
    assert_int_equal(o8[0], 44);
    assert_int_equal(o8[1], 7);

    const int8_t i8[] = {100, 100, -128, -1};
    int8_t oi8[2];
    sum1(SHMESH_INT8, i8, 4, 2, (int64_t[]){2, 2}, oi8);
    assert_int_equal(oi8[0], -56);
    assert_int_equal(oi8[1], 127);

    const int16_t i16[] = {INT16_MAX, 2};
    int16_t o16;
    sum1(SHMESH_INT16, i16, 2, 1, (int64_t[]){2}, &o16);
    assert_int_equal(o16, INT16_MIN + 1);

    const uint16_t u16[] = {65535, 65535};
    uint16_t ou16;
    sum1(SHMESH_UINT16, u16, 2, 1, (int64_t[]){2}, &ou16);
    assert_int_equal(ou16, 65534);

    const uint32_t u32[] = {UINT32_MAX, 3};
    uint32_t ou32;
    sum1(SHMESH_UINT32, u32, 2, 1, (int64_t[]){2}, &ou32);
    assert_int_equal(ou32, 2);

    const int64_t i64[] = {INT64_MAX, INT64_MAX, 7};
    int64_t o64[2];
    sum1(SHMESH_INT64, i64, 3, 2, (int64_t[]){2, 1}, o64);
    assert_true(o64[0] == -2 && o64[1] == 7);

    const uint64_t u64[] = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
    uint64_t ou64;
    sum1(SHMESH_UINT64, u64, 3, 1, (int64_t[]){3}, &ou64);
    assert_true(ou64 == UINT64_MAX - 2);
}

/* Floats add in their own type, in order: 1e8 + 1 rounds back to 1e8 in
 * float32, so [1e8, 1, -1e8] sums to 0 (1 in another order), and in
 * float64 (0.1 + 0.2) + 0.3 is 0.6000000000000001 where 0.1 + (0.2 + 0.3)
 * is 0.6.  A sum starts from +0: -0.0 + -0.0 gives +0.0. */
static void segment_sum_floats_in_order(void **state)
{
    const float f32[] = {1e8f, 1.0f, -1e8f, -0.0f, -0.0f, 2.5f};
    float o32[3];
    sum1(SHMESH_FLOAT32, f32, 6, 3, (int64_t[]){3, 2, 1}, o32);
    assert_true(o32[0] == 0.0f);
    assert_true(o32[1] == 0.0f && !signbit(o32[1]));
    assert_true(o32[2] == 2.5f);

    const double f64[] = {0.1, 0.2, 0.3, -0.0};
    double o64[2];
    sum1(SHMESH_FLOAT64, f64, 4, 2, (int64_t[]){3, 1}, o64);
    assert_true(o64[0] == 0.6000000000000001);
    assert_true(o64[1] == 0.0 && !signbit(o64[1]));

    /* A NaN stays a NaN, and infinities add as IEEE says. */
    const float odd[] = {NAN, 1.0f, INFINITY, 1.0f};
    float oo[2];
    sum1(SHMESH_FLOAT32, odd, 4, 2, (int64_t[]){2, 2}, oo);
    assert_true(isnan(oo[0]) && isinf(oo[1]) && oo[1] > 0);
}

/* float16: 2048 + 1 + 1.  Rounded at every step, 2049 ties to even (2048)
 * twice; accumulated in float32 it is 2050, a float16 (0x6801).
 * bfloat16: 256 + 1 + 1 alike, 258 (0x4381) and not 256 (0x4380). */
static void segment_sum_halves_round_once(void **state)
{
    const uint16_t h[] = {0x6800, 0x3c00, 0x3c00, 0xbc00, 0x8000};
    uint16_t oh[3];
    sum1(SHMESH_FLOAT16, h, 5, 3, (int64_t[]){3, 1, 1}, oh);
    assert_int_equal(oh[0], 0x6801);
    assert_int_equal(oh[1], 0xbc00); /* -1 */
    assert_int_equal(oh[2], 0x0000); /* -0.0 from +0 is +0.0 */

    const uint16_t b[] = {0x4380, 0x3f80, 0x3f80, 0x4000, 0x8000};
    uint16_t ob[3];
    sum1(SHMESH_BFLOAT16, b, 5, 3, (int64_t[]){3, 1, 1}, ob);
    assert_int_equal(ob[0], 0x4381);
    assert_int_equal(ob[1], 0x4000); /* 2 */
    assert_int_equal(ob[2], 0x0000);

    /* More than one block of 256 columns: each column is its own sum. */
    enum { COLS = 300 };
    uint16_t wide[2 * COLS], owide[COLS];
    for (int k = 0; k < COLS; k++) {
        wide[k] = 0x3c00;         /* 1.0 */
        wide[COLS + k] = 0x4000; /* 2.0 */
    }
    shmesh_array a = arr(wide, SHMESH_FLOAT16, 2, (int64_t[]){2, COLS});
    shmesh_array o = arr(owide, SHMESH_FLOAT16, 2, (int64_t[]){1, COLS});
    assert_int_equal(shmesh_segment_sum(&a, 0, 1, (int64_t[]){2}, &o), 0);
    for (int k = 0; k < COLS; k++)
        assert_int_equal(owide[k], 0x4200); /* 3.0 */
}

static void segment_sum_bool_is_or(void **state)
{
    const uint8_t in[] = {0, 1, 0, 0, 0, 1, 1};
    uint8_t out[4] = {9, 9, 9, 9};
    sum1(SHMESH_BOOL, in, 7, 4, (int64_t[]){3, 2, 2, 0}, out);
    assert_memory_equal(out, ((uint8_t[]){1, 0, 1, 0}), 4);
}

/* Empty segments give zeros (+0.0), count 0 gives an empty result. */
static void segment_sum_empty_segments(void **state)
{
    const float in[] = {1.5f, 2.5f};
    float out[4] = {-1, -1, -1, -1};
    sum1(SHMESH_FLOAT32, in, 2, 4, (int64_t[]){0, 2, 0, 0}, out);
    assert_true(out[0] == 0.0f && !signbit(out[0]));
    assert_true(out[1] == 4.0f);
    assert_true(out[2] == 0.0f && out[3] == 0.0f && !signbit(out[3]));

    /* Nothing to sum at all: an operand without rows, segments all empty. */
    int32_t z[3] = {7, 7, 7};
    shmesh_array none = arr(NULL, SHMESH_INT32, 1, (int64_t[]){0});
    shmesh_array zo = arr(z, SHMESH_INT32, 1, (int64_t[]){3});
    assert_int_equal(shmesh_segment_sum(&none, 0, 3, (int64_t[]){0, 0, 0}, &zo), 0);
    assert_memory_equal(z, ((int32_t[]){0, 0, 0}), sizeof z);

    /* count 0: out has 0 entries along the axis; lengths may be NULL. */
    shmesh_array empty_out = arr(NULL, SHMESH_INT32, 1, (int64_t[]){0});
    assert_int_equal(shmesh_segment_sum(&none, 0, 0, NULL, &empty_out), 0);
    shmesh_array mid = arr(NULL, SHMESH_FLOAT64, 3, (int64_t[]){2, 0, 3});
    shmesh_array mid_out = arr(NULL, SHMESH_FLOAT64, 3, (int64_t[]){2, 0, 3});
    assert_int_equal(shmesh_segment_sum(&mid, 1, 0, NULL, &mid_out), 0);
}

/* int64[2,4,2] holding 100i + 10j + k, summed along axis 1 in segments of
 * 1 and 3 (and along the last axis, named -1). */
static void segment_sum_along_a_middle_axis(void **state)
{
    int64_t in[16];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 2; k++)
                in[(i * 4 + j) * 2 + k] = 100 * i + 10 * j + k;
    shmesh_array a = arr(in, SHMESH_INT64, 3, (int64_t[]){2, 4, 2});
    int64_t out[8];
    shmesh_array o = arr(out, SHMESH_INT64, 3, (int64_t[]){2, 2, 2});
    assert_int_equal(shmesh_segment_sum(&a, 1, 2, (int64_t[]){1, 3}, &o), 0);
    /* i = 0: [0, 1], [10+20+30, 11+21+31]; i = 1: the same plus 100 per term. */
    assert_memory_equal(out, ((int64_t[]){0, 1, 60, 63, 100, 101, 360, 363}), sizeof out);

    int64_t last[8];
    shmesh_array ol = arr(last, SHMESH_INT64, 3, (int64_t[]){2, 4, 1});
    assert_int_equal(shmesh_segment_sum(&a, -1, 1, (int64_t[]){2}, &ol), 0);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            assert_int_equal(last[i * 4 + j], 2 * (100 * i + 10 * j) + 1);

    /* The pile along axis 1 gives the same sums. */
    shmesh_pile p;
    int64_t lengths[] = {1, 3};
    assert_int_equal(shmesh_pile_make(&p, &a, 1, 2, lengths), 0);
    memset(out, 0, sizeof out);
    assert_int_equal(shmesh_pile_sum(&p, &o), 0);
    assert_memory_equal(out, ((int64_t[]){0, 1, 60, 63, 100, 101, 360, 363}), sizeof out);
    expect_refused(shmesh_pile_sum(&p, &ol), "shmesh_pile_sum", "out must be int64[2,2,2]",
                   "got int64[2,4,1]");
}

static void segment_sum_refusals(void **state)
{
    float in[6] = {0}, out[3];
    shmesh_array a = arr(in, SHMESH_FLOAT32, 1, (int64_t[]){6});
    shmesh_array o = arr(out, SHMESH_FLOAT32, 1, (int64_t[]){3});
    shmesh_array o2 = arr(out, SHMESH_FLOAT32, 1, (int64_t[]){2});
    shmesh_array oi = arr(out, SHMESH_INT32, 1, (int64_t[]){3});
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, 2, 2}, &o),
                   "shmesh_segment_sum", "segment_lens add up to 5", "has 6 entries");
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, -2, 7}, &o),
                   "segment_lens[1] is -2", NULL, NULL);
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, 2, 3}, &o2),
                   "out must be float32[3]", "got float32[2]", NULL);
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, 2, 3}, &oi),
                   "out must be float32[3]", "got int32[3]", NULL);
    expect_refused(shmesh_segment_sum(&a, 1, 3, (int64_t[]){1, 2, 3}, &o), "axis 1", NULL,
                   NULL);
    expect_refused(shmesh_segment_sum(NULL, 0, 3, (int64_t[]){1, 2, 3}, &o),
                   "operand must not be NULL", NULL, NULL);
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, 2, 3}, NULL),
                   "out must not be NULL", NULL, NULL);
    shmesh_array inside = arr(in + 1, SHMESH_FLOAT32, 1, (int64_t[]){3});
    expect_refused(shmesh_segment_sum(&a, 0, 3, (int64_t[]){1, 2, 3}, &inside), "overlaps",
                   NULL, NULL);
}

/* A job of one rank (no launcher): the collective's checks, and a pile
 * exchanged with itself over an axis of size 1. */
static void collective_in_one_rank(void **state)
{
    shmesh_ctx *ctx;
    if (shmesh_init(&ctx))
        fail_msg("shmesh_init: %s", shmesh_last_error(NULL));
    const char *x[] = {"x"};
    shmesh_mesh *mesh, *abstract;
    assert_int_equal(shmesh_mesh_create(ctx, 1, x, (int[]){1}, NULL, &mesh), 0);
    assert_int_equal(shmesh_mesh_abstract(mesh, &abstract), 0);

    int16_t rows[3][2] = {{1, 2}, {3, 4}, {5, 6}}, room[5][2];
    for (int r = 0; r < 5; r++)
        room[r][0] = room[r][1] = -1;
    int64_t send[1] = {3}, got[2] = {-9, -9};
    shmesh_array in = arr(rows, SHMESH_INT16, 2, (int64_t[]){3, 2});
    shmesh_pile op, out = {.data = arr(room, SHMESH_INT16, 2, (int64_t[]){5, 2}), .count = 1,
                           .lengths = got};
    assert_int_equal(shmesh_pile_make(&op, &in, 0, 1, send), 0);

    expect_refused(shmesh_ragged_all_to_all_pile(NULL, "x", NULL, &op, &out),
                   "shmesh_ragged_all_to_all_pile", "none is pushed", NULL);
    expect_refused(shmesh_ragged_all_to_all_pile(abstract, "x", NULL, &op, &out), "abstract",
                   NULL, NULL);
    int rc = shmesh_ragged_all_to_all_pile(mesh, "y", NULL, &op, &out);
    assert_int_equal(rc, SHMESH_ERR_INVALID);
    assert_non_null(strstr(shmesh_last_error(ctx), "unbound axis name 'y'"));
    out.count = 2;
    rc = shmesh_ragged_all_to_all_pile(mesh, "x", NULL, &op, &out);
    assert_int_equal(rc, SHMESH_ERR_INVALID);
    assert_non_null(strstr(shmesh_last_error(ctx), "output has 2 components; expected one per "
                                                   "member of the group, 1"));
    out.count = 1;
    out.data.shape[0] = 2; /* room for 2 of the 3 rows */
    rc = shmesh_ragged_all_to_all_pile(mesh, "x", NULL, &op, &out);
    assert_int_equal(rc, SHMESH_ERR_INVALID);
    assert_non_null(strstr(shmesh_last_error(ctx), "receives 3 rows but its output has room "
                                                   "for 2"));
    assert_true(got[0] == -9 && out.data.shape[0] == 2 && room[0][0] == -1);

    out.data.shape[0] = 5;
    assert_int_equal(shmesh_ragged_all_to_all_pile(mesh, "x", NULL, &op, &out), 0);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], -9); /* count 1: one length written */
    assert_int_equal(out.data.shape[0], 3);
    assert_memory_equal(room, ((int16_t[]){1, 2, 3, 4, 5, 6, -1, -1, -1, -1}), sizeof room);

    shmesh_mesh_destroy(abstract);
    shmesh_mesh_destroy(mesh);
    assert_int_equal(shmesh_finalize(ctx), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seed_example),
        cmocka_unit_test(make_refuses_bad_piles),
        cmocka_unit_test(component_along_axis_0),
        cmocka_unit_test(component_along_a_middle_axis),
        cmocka_unit_test(segment_sum_integers_wrap),
        cmocka_unit_test(segment_sum_floats_in_order),
        cmocka_unit_test(segment_sum_halves_round_once),
        cmocka_unit_test(segment_sum_bool_is_or),
        cmocka_unit_test(segment_sum_empty_segments),
        cmocka_unit_test(segment_sum_along_a_middle_axis),
        cmocka_unit_test(segment_sum_refusals),
        cmocka_unit_test(collective_in_one_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
