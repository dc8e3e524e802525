/* Description: element conversions and reduction kernels — float16 and
 * bfloat16 round to nearest even (checked against the compiler's _Float16
 * and an exact double-precision reference), reduce_sum for every dtype
 * and rank count against a scalar reference, integers wrapping, floating
 * sums starting from +0.0 as JAX's (a sum of -0.0 is +0.0), and pmean
 * multiplying by the reciprocal of n rounded in the dtype, as JAX (XLA)
 * does, which differs from dividing when n is not a power of two. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/half.h"
#include "kernels/reduce.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static void half_round_trip_is_exact(void **state)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_to_float((uint16_t)h);
        uint16_t back = float_to_half(f);
        if (is_half_nan((uint16_t)h))
            assert_true(isnan(f) && is_half_nan(back));
        else if (back != h)
            fail_msg("half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
    }
}

/* The exactly-rounded binary16 neighbour of x, computed in double. */
static uint16_t half_reference(float x)
{
    if (isnan(x))
        return 0x7e00;
    double a = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (a >= 65520.0)
        return sign | 0x7c00;
    /* Candidates are consecutive halves; find the pair around a. */
    uint16_t lo = 0;
    for (int step = 1 << 14; step; step >>= 1)
        if (lo + step < 0x7c00 && (double)half_to_float((uint16_t)(lo + step)) <= a)
            lo = (uint16_t)(lo + step);
    double dl = a - (double)half_to_float(lo);
    double dh = (double)half_to_float((uint16_t)(lo + 1)) - a;
    uint16_t r = dl < dh ? lo : dh < dl ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
    return sign | r;
}

static void float_to_half_rounds_to_nearest_even(void **state)
{
    float edge[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e6f, -1e-8f, 5.9604645e-8f,
                    2.9802322e-8f, 2.9802326e-8f, 6.1035156e-5f, 6.1035152e-5f, 1.0009765625f,
                    1.00048828125f, 1.00146484375f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        assert_int_equal(float_to_half(edge[i]), half_reference(edge[i]));
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)next();
        /* Mostly values near the binary16 range, some anywhere. */
        if (i % 4)
            u = (u & 0x807fffffu) | ((uint32_t)(100 + next() % 50) << 23);
        float f = half_bits_f32(u);
        uint16_t got = float_to_half(f);
        if (isnan(f)) {
            assert_true(is_half_nan(got));
            continue;
        }
        if (got != half_reference(f))
            fail_msg("float_to_half(%a) = 0x%04x, expected 0x%04x", (double)f, got,
                     half_reference(f));
#ifdef __FLT16_MAX__
        __extension__ _Float16 c = (__extension__(_Float16) f);
        uint16_t cb;
        memcpy(&cb, &c, 2);
        assert_int_equal(got, cb);
#endif
    }
}

static void bfloat16_rounds_to_nearest_even(void **state)
{
    assert_int_equal(float_to_bf16(1.0f), 0x3f80);
    assert_int_equal(float_to_bf16(half_bits_f32(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(float_to_bf16(half_bits_f32(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(float_to_bf16(half_bits_f32(0x3f808001u)), 0x3f81);
    assert_int_equal(float_to_bf16(half_bits_f32(0x7f7fffffu)), 0x7f80); /* to infinity */
    assert_true(isnan(bf16_to_float(float_to_bf16(NAN))));
    for (int i = 0; i < 300000; i++) {
        float f = half_bits_f32((uint32_t)next());
        if (isnan(f))
            continue;
        uint16_t b = float_to_bf16(f);
        double lo = (double)bf16_to_float((uint16_t)(half_f32_bits(f) >> 16));
        double hi = (double)bf16_to_float((uint16_t)((half_f32_bits(f) >> 16) + 1));
        double got = (double)bf16_to_float(b), x = (double)f;
        /* Nearest of the two neighbours that bracket x (by magnitude). */
        if (isinf(hi) && !isinf(x)) /* past the largest finite: 2^128 stands in for it */
            hi = copysign(ldexp(1.0, 128), x);
        double dl = fabs(x - lo), dh = fabs(hi - x);
        if (dl < dh) {
            if (got != lo)
                fail_msg("float_to_bf16(%a) = 0x%04x, expected 0x%04x", x, b,
                         (unsigned)(half_f32_bits(f) >> 16));
        } else if (dh < dl)
            assert_true(got == hi || (isinf(got) && fabs(hi) == ldexp(1.0, 128)));
        else if (b & 1)
            fail_msg("float_to_bf16(%a) = 0x%04x: a tie must round to even", x, b);
    }
}

/* A scalar reference in rank order: ((s0 + s1) + s2) + ... */
static void check_sum(shmesh_dtype dt, int nsrc, size_t n)
{
    size_t esz = shmesh_dtype_size(dt);
    uint8_t *srcs[6], *dst = malloc(n * esz + 1);
    const void *sp[6];
    for (int k = 0; k < nsrc; k++) {
        srcs[k] = malloc(n * esz + 1);
        for (size_t i = 0; i < n; i++) {
            uint64_t u = next();
            float f = (float)((int64_t)(u % 2001) - 1000) / 8.0f;
            if (dt == SHMESH_FLOAT32)
                memcpy(srcs[k] + i * 4, &f, 4);
            else if (dt == SHMESH_FLOAT64) {
                double d = (double)(int64_t)(u % 200001) / 3.0;
                memcpy(srcs[k] + i * 8, &d, 8);
            } else if (dt == SHMESH_FLOAT16) {
                uint16_t h = float_to_half(f);
                memcpy(srcs[k] + i * 2, &h, 2);
            } else if (dt == SHMESH_BFLOAT16) {
                uint16_t h = float_to_bf16(f);
                memcpy(srcs[k] + i * 2, &h, 2);
            } else
                memcpy(srcs[k] + i * esz, &u, esz);
        }
        sp[k] = srcs[k];
    }
    reduce_sum(dt, dst, sp, nsrc, n);
    for (size_t i = 0; i < n; i++) {
        uint8_t want[8];
        uint64_t u = 0;
        float f = 0;
        double d = 0;
        for (int k = 0; k < nsrc; k++) {
            uint64_t x = 0;
            memcpy(&x, srcs[k] + i * esz, esz);
            u += x;
            uint16_t h;
            memcpy(&h, srcs[k] + i * esz, esz < 2 ? esz : 2);
            /* Floating sums start from +0.0. */
            if (dt == SHMESH_FLOAT32) {
                float v;
                memcpy(&v, srcs[k] + i * 4, 4);
                f += v;
            } else if (dt == SHMESH_FLOAT64) {
                double v;
                memcpy(&v, srcs[k] + i * 8, 8);
                d += v;
            } else if (dt == SHMESH_FLOAT16)
                f += half_to_float(h);
            else if (dt == SHMESH_BFLOAT16)
                f += bf16_to_float(h);
        }
        uint16_t h;
        switch (dt) {
        case SHMESH_FLOAT32: memcpy(want, &f, 4); break;
        case SHMESH_FLOAT64: memcpy(want, &d, 8); break;
        case SHMESH_FLOAT16: h = float_to_half(f); memcpy(want, &h, 2); break;
        case SHMESH_BFLOAT16: h = float_to_bf16(f); memcpy(want, &h, 2); break;
        default: memcpy(want, &u, esz); break;
        }
        if (memcmp(want, dst + i * esz, esz))
            fail_msg("%s, %d sources, element %zu of %zu differs", shmesh_dtype_name(dt), nsrc,
                     i, n);
    }
    for (int k = 0; k < nsrc; k++)
        free(srcs[k]);
    free(dst);
}

static void reduce_sum_every_dtype(void **state)
{
    for (int dt = SHMESH_INT8; dt < SHMESH_DTYPE_COUNT; dt++)
        for (int nsrc = 1; nsrc <= 6; nsrc++) {
            check_sum((shmesh_dtype)dt, nsrc, 0);
            check_sum((shmesh_dtype)dt, nsrc, 1);
            check_sum((shmesh_dtype)dt, nsrc, 257);
            check_sum((shmesh_dtype)dt, nsrc, 1000);
        }
}

static void integer_sums_wrap(void **state)
{
    int8_t a = 100, b = 100, out;
    const void *src[] = {&a, &b};
    reduce_sum(SHMESH_INT8, &out, src, 2, 1);
    assert_int_equal(out, -56);
    int64_t x = INT64_MAX, y = 1, o64;
    const void *src64[] = {&x, &y};
    reduce_sum(SHMESH_INT64, &o64, src64, 2, 1);
    assert_true(o64 == INT64_MIN);
}

/* Bits of one element of each floating dtype. */
static const shmesh_dtype float_dtypes[] = {SHMESH_FLOAT16, SHMESH_BFLOAT16, SHMESH_FLOAT32,
                                            SHMESH_FLOAT64};
static const uint64_t neg_zero[] = {0x8000, 0x8000, 0x80000000u, UINT64_C(0x8000000000000000)};

static void fill_bits(void *buf, shmesh_dtype dt, size_t n, uint64_t bits)
{
    size_t esz = shmesh_dtype_size(dt);
    for (size_t i = 0; i < n; i++)
        memcpy((char *)buf + i * esz, &bits, esz);
}

static uint64_t bits_at(const void *buf, shmesh_dtype dt, size_t i)
{
    uint64_t u = 0;
    size_t esz = shmesh_dtype_size(dt);
    memcpy(&u, (const char *)buf + i * esz, esz);
    return u;
}

/* JAX's sums start from +0.0: -0.0 + -0.0 + ... is +0.0, for any number of
 * sources (one included), in the vector loops and their tails. */
static void sums_of_negative_zero_are_positive(void **state)
{
    enum { N = 37 };
    uint64_t bufs[6][N], out[N];
    const void *src[6];
    for (size_t t = 0; t < 4; t++) {
        shmesh_dtype dt = float_dtypes[t];
        for (int k = 0; k < 6; k++) {
            fill_bits(bufs[k], dt, N, neg_zero[t]);
            src[k] = bufs[k];
        }
        for (int nsrc = 1; nsrc <= 6; nsrc++) {
            memset(out, 0xff, sizeof out);
            reduce_sum(dt, out, src, nsrc, N);
            for (size_t i = 0; i < N; i++)
                if (bits_at(out, dt, i) != 0)
                    fail_msg("%s, %d sources of -0.0: element %zu is 0x%llx, not +0.0",
                             shmesh_dtype_name(dt), nsrc, i,
                             (unsigned long long)bits_at(out, dt, i));
            /* psum and pmean go through reduce_run too. */
            reduce_run(RED_SUM, dt, dt, out, src, nsrc, N, 0);
            assert_int_equal(bits_at(out, dt, N - 1), 0);
            reduce_run(RED_MEAN, dt, dt, out, src, nsrc, N, 3);
            assert_int_equal(bits_at(out, dt, 0), 0);
            assert_int_equal(bits_at(out, dt, N - 1), 0);
        }
        /* Anything else is left alone: -1.5 stays -1.5, a quiet NaN keeps
         * its payload. */
        static const uint64_t neg_one_half[] = {0xbe00, 0xbfc0, 0xbfc00000u,
                                                UINT64_C(0xbff8000000000000)};
        static const uint64_t nan_payload[] = {0x7e15, 0x7fd5, 0x7fc12345u,
                                               UINT64_C(0x7ff8000000012345)};
        fill_bits(bufs[0], dt, N, neg_one_half[t]);
        fill_bits(bufs[0], dt, 1, nan_payload[t]);
        reduce_sum(dt, out, src, 1, N);
        assert_int_equal(bits_at(out, dt, 0), nan_payload[t]);
        assert_int_equal(bits_at(out, dt, N - 1), neg_one_half[t]);
    }
}

/* Three sources summing to `sum` in element 0 (exactly: small values). */
static void three_sources(shmesh_dtype dt, double sum, uint64_t bufs[3][4], const void *src[3])
{
    double part[3] = {sum - 2 * floor(sum / 3), floor(sum / 3), floor(sum / 3)};
    for (int k = 0; k < 3; k++) {
        uint64_t u = 0;
        float f = (float)part[k];
        switch (dt) {
        case SHMESH_FLOAT16: u = float_to_half(f); break;
        case SHMESH_BFLOAT16: u = float_to_bf16(f); break;
        case SHMESH_FLOAT32: memcpy(&u, &f, 4); break;
        case SHMESH_FLOAT64: memcpy(&u, &part[k], 8); break;
        default: u = (uint64_t)(int64_t)part[k]; break; /* integers, two's complement */
        }
        memset(bufs[k], 0, sizeof bufs[k]);
        memcpy(bufs[k], &u, shmesh_dtype_size(dt));
        src[k] = bufs[k];
    }
}

/* pmean over groups of 3: JAX's psum(x) / 3 is x * (1/3) after XLA's
 * algebraic simplifier, the reciprocal rounded in the dtype (float16 and
 * bfloat16: 3 and 1/3 rounded to the type, the product rounded once).  Each
 * case is one where dividing gives the other neighbour (the division's
 * bits in the comment); the golden data of JAX 0.11 show it for float32,
 * int32 and uint32 (tests/golden). */
static void pmean_multiplies_by_the_reciprocal(void **state)
{
    static const struct {
        shmesh_dtype in, out;
        double sum;
        int n, mean_n;
        uint64_t want;
    } cases[] = {
        {SHMESH_FLOAT32, SHMESH_FLOAT32, 5, 3, 3, 0x3fd55556u},        /* / 3: 0x3fd55555 */
        {SHMESH_FLOAT32, SHMESH_FLOAT32, 23, 3, 3, 0x40f55556u},       /* / 3: 0x40f55555 */
        {SHMESH_FLOAT32, SHMESH_FLOAT32, 9, 3, 5, 0x3fe66667u},        /* / 5: 0x3fe66666 */
        {SHMESH_FLOAT64, SHMESH_FLOAT64, 5, 3, 3, UINT64_C(0x3ffaaaaaaaaaaaaa)}, /* ...ab */
        {SHMESH_FLOAT64, SHMESH_FLOAT64, 3, 3, 5, UINT64_C(0x3fe3333333333334)}, /* ...33 */
        {SHMESH_FLOAT16, SHMESH_FLOAT16, 1.25, 3, 3, 0x36aa},          /* / 3: 0x36ab */
        {SHMESH_FLOAT16, SHMESH_FLOAT16, 1.5, 3, 5, 0x34cc},           /* / 5: 0x34cd */
        {SHMESH_BFLOAT16, SHMESH_BFLOAT16, 1.25, 3, 3, 0x3ed6},        /* / 3: 0x3ed5 */
        {SHMESH_BFLOAT16, SHMESH_BFLOAT16, 2.25, 3, 5, 0x3ee7},        /* / 5: 0x3ee6 */
        /* integers: the wrapped sum converted, times the reciprocal */
        {SHMESH_INT32, SHMESH_FLOAT32, 23, 3, 3, 0x40f55556u},
        {SHMESH_UINT32, SHMESH_FLOAT32, 23, 3, 3, 0x40f55556u},
        {SHMESH_INT8, SHMESH_FLOAT32, -5, 3, 3, 0xbfd55556u},
        {SHMESH_UINT8, SHMESH_FLOAT32, 5, 3, 3, 0x3fd55556u},
        {SHMESH_INT64, SHMESH_FLOAT64, 5, 3, 3, UINT64_C(0x3ffaaaaaaaaaaaaa)},
        {SHMESH_INT32, SHMESH_FLOAT64, 5, 3, 3, UINT64_C(0x3ffaaaaaaaaaaaaa)},
        {SHMESH_UINT64, SHMESH_FLOAT64, 3, 3, 5, UINT64_C(0x3fe3333333333334)},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint64_t bufs[3][4], out[4];
        const void *src[3];
        three_sources(cases[c].in, cases[c].sum, bufs, src);
        memset(out, 0, sizeof out);
        reduce_run(RED_MEAN, cases[c].in, cases[c].out, out, src, cases[c].n, 1,
                   cases[c].mean_n);
        uint64_t got = bits_at(out, cases[c].out, 0);
        if (got != cases[c].want)
            fail_msg("pmean of %s summing to %g over %d, divided by %d: 0x%llx, expected 0x%llx",
                     shmesh_dtype_name(cases[c].in), cases[c].sum, cases[c].n, cases[c].mean_n,
                     (unsigned long long)got, (unsigned long long)cases[c].want);
    }
    /* bool counts as int32: 2 trues of 3, over a first subgroup of 3 */
    uint8_t t = 1, f = 0;
    const void *bsrc[] = {&t, &f, &t};
    float m;
    reduce_run(RED_MEAN, SHMESH_BOOL, SHMESH_FLOAT32, &m, bsrc, 3, 1, 3);
    assert_true(m == 2.0f * (1.0f / 3.0f));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_round_trip_is_exact),
        cmocka_unit_test(float_to_half_rounds_to_nearest_even),
        cmocka_unit_test(bfloat16_rounds_to_nearest_even),
        cmocka_unit_test(reduce_sum_every_dtype),
        cmocka_unit_test(integer_sums_wrap),
        cmocka_unit_test(sums_of_negative_zero_are_positive),
        cmocka_unit_test(pmean_multiplies_by_the_reciprocal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
