/* Element-wise reductions over the members' buffers, always in member order
 * so every rank computes the bitwise-identical result. */
#include <stdint.h>

#include "core/dtype.h"
#include "kernels/half.h"
#include "kernels/reduce.h"

/* dst = src[0] + src[1] + ... in that order.  Unsigned arithmetic gives the
 * two's-complement wrap-around of signed integers without undefined behaviour.
 * Sums start from zero, as JAX's do: the first source gets + 0, which for
 * floats maps -0.0 to +0.0 and leaves every other value as it is (a NaN
 * keeps its payload), so a sum of nothing but -0.0 is +0.0.  Without
 * -ffast-math the compiler may not drop that addition for floats (x + 0.0
 * is no identity for x = -0.0), and it costs nothing in these memory-bound
 * loops; for integers it is an identity and disappears. */
#define SUM_LOOP(T)                                                                            \
    do {                                                                                       \
        T *d = dst;                                                                            \
        const T *s0 = src[0];                                                                  \
        if (nsrc == 1) {                                                                       \
            for (size_t i = 0; i < n; i++)                                                     \
                d[i] = (T)(s0[i] + (T)0);                                                      \
            break;                                                                             \
        }                                                                                      \
        const T *s1 = src[1];                                                                  \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = (T)((s0[i] + (T)0) + s1[i]);                                                \
        for (int k = 2; k < nsrc; k++) {                                                       \
            const T *sk = src[k];                                                              \
            for (size_t i = 0; i < n; i++)                                                     \
                d[i] = (T)(d[i] + sk[i]);                                                      \
        }                                                                                      \
    } while (0)

/* Half types accumulate in float32, block by block, from +0.0, and round
 * once. */
#define HALF_SUM_LOOP(TO_F, FROM_F)                                                            \
    do {                                                                                       \
        enum { BLOCK = 256 };                                                                  \
        float acc[BLOCK];                                                                      \
        uint16_t *d = dst;                                                                     \
        for (size_t i0 = 0; i0 < n; i0 += BLOCK) {                                             \
            size_t m = n - i0 < BLOCK ? n - i0 : BLOCK;                                        \
            const uint16_t *s0 = (const uint16_t *)src[0] + i0;                                \
            for (size_t i = 0; i < m; i++)                                                     \
                acc[i] = TO_F(s0[i]) + 0.0f;                                                   \
            for (int k = 1; k < nsrc; k++) {                                                   \
                const uint16_t *sk = (const uint16_t *)src[k] + i0;                            \
                for (size_t i = 0; i < m; i++)                                                 \
                    acc[i] += TO_F(sk[i]);                                                     \
            }                                                                                  \
            for (size_t i = 0; i < m; i++)                                                     \
                d[i0 + i] = FROM_F(acc[i]);                                                    \
        }                                                                                      \
    } while (0)

/* The hot loops get an AVX2 copy, chosen at load time where the CPU has it. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("avx2", "default")))
#else
#define HOT
#endif

HOT void reduce_sum(shmesh_dtype dt, void *dst, const void *const *src, int nsrc, size_t n)
{
    switch (dt) {
    case SHMESH_BOOL:
    case SHMESH_INT8:
    case SHMESH_UINT8:
        SUM_LOOP(uint8_t);
        break;
    case SHMESH_INT16:
    case SHMESH_UINT16:
        SUM_LOOP(uint16_t);
        break;
    case SHMESH_INT32:
    case SHMESH_UINT32:
        SUM_LOOP(uint32_t);
        break;
    case SHMESH_INT64:
    case SHMESH_UINT64:
        SUM_LOOP(uint64_t);
        break;
    case SHMESH_FLOAT32:
        SUM_LOOP(float);
        break;
    case SHMESH_FLOAT64:
        SUM_LOOP(double);
        break;
    case SHMESH_FLOAT16:
        HALF_SUM_LOOP(half_to_float, float_to_half);
        break;
    case SHMESH_BFLOAT16:
        HALF_SUM_LOOP(bf16_to_float, float_to_bf16);
        break;
    default:
        break;
    }
}

/* Element-wise max/min in member order, source after source (the same fold
 * as element after element).  Floats: the first NaN wins, else the strictly
 * greater (smaller) value, ties keeping the earlier member's. */
#define MAXMIN_LOOP(T, FLOAT, GT)                                                              \
    do {                                                                                       \
        T *d = dst;                                                                            \
        const T *s0 = src[0];                                                                  \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = s0[i];                                                                      \
        for (int k = 1; k < nsrc; k++) {                                                       \
            const T *sk = src[k];                                                              \
            for (size_t i = 0; i < n; i++) {                                                   \
                T a = d[i], v = sk[i];                                                         \
                bool take = FLOAT ? (a == a) && (v != v || GT(v, a)) : GT(v, a);               \
                d[i] = take ? v : a;                                                           \
            }                                                                                  \
        }                                                                                      \
    } while (0)
#define GREATER(v, a) ((v) > (a))
#define LESS(v, a) ((v) < (a))

/* Returns false for the dtypes left to the element-wise code below. */
HOT static bool maxmin_fast(shmesh_dtype dt, bool want_max, void *dst, const void *const *src,
                            int nsrc, size_t n)
{
#define BOTH(T, FLOAT)                                                                         \
    do {                                                                                       \
        if (want_max)                                                                          \
            MAXMIN_LOOP(T, FLOAT, GREATER);                                                    \
        else                                                                                   \
            MAXMIN_LOOP(T, FLOAT, LESS);                                                       \
    } while (0)
    switch (dt) {
    case SHMESH_FLOAT32: BOTH(float, true); return true;
    case SHMESH_FLOAT64: BOTH(double, true); return true;
    case SHMESH_INT8: BOTH(int8_t, false); return true;
    case SHMESH_INT16: BOTH(int16_t, false); return true;
    case SHMESH_INT32: BOTH(int32_t, false); return true;
    case SHMESH_INT64: BOTH(int64_t, false); return true;
    case SHMESH_UINT8: BOTH(uint8_t, false); return true;
    case SHMESH_UINT16: BOTH(uint16_t, false); return true;
    case SHMESH_UINT32: BOTH(uint32_t, false); return true;
    case SHMESH_UINT64: BOTH(uint64_t, false); return true;
    default: return false; /* bool (normalized), float16, bfloat16 */
    }
#undef BOTH
}

/* Element i of a source, widened without loss (floats to double, integers
 * to 64 bits).  The reductions below go element by element, members in
 * order. */
static double load_f(shmesh_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case SHMESH_FLOAT16: return half_to_float(((const uint16_t *)p)[i]);
    case SHMESH_BFLOAT16: return bf16_to_float(((const uint16_t *)p)[i]);
    case SHMESH_FLOAT32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static int64_t load_s(shmesh_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case SHMESH_INT8: return ((const int8_t *)p)[i];
    case SHMESH_INT16: return ((const int16_t *)p)[i];
    case SHMESH_INT32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static uint64_t load_u(shmesh_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case SHMESH_BOOL: return ((const uint8_t *)p)[i] != 0;
    case SHMESH_UINT8: return ((const uint8_t *)p)[i];
    case SHMESH_UINT16: return ((const uint16_t *)p)[i];
    case SHMESH_UINT32: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

static bool is_signed(shmesh_dtype dt)
{
    return dt == SHMESH_INT8 || dt == SHMESH_INT16 || dt == SHMESH_INT32 || dt == SHMESH_INT64;
}

/* Copies element i of `from` (same dtype) into element i of dst. */
static void copy_elem(shmesh_dtype dt, void *dst, size_t i, const void *from)
{
    size_t sz = dtype_size(dt);
    const unsigned char *s = (const unsigned char *)from + i * sz;
    unsigned char *d = (unsigned char *)dst + i * sz;
    for (size_t b = 0; b < sz; b++)
        d[b] = s[b];
}

/* The winning source of element i for max (want_max) or min: NaN wins (the
 * first one), else the strictly greater (smaller) value, ties to the first. */
static int winner(shmesh_dtype dt, const void *const *src, int nsrc, size_t i, bool want_max)
{
    int w = 0;
    if (dtype_is_float(dt)) {
        double best = load_f(dt, src[0], i);
        for (int k = 1; k < nsrc && best == best; k++) {
            double v = load_f(dt, src[k], i);
            if (v != v || (want_max ? v > best : v < best)) {
                best = v;
                w = k;
            }
        }
    } else if (is_signed(dt)) {
        int64_t best = load_s(dt, src[0], i);
        for (int k = 1; k < nsrc; k++) {
            int64_t v = load_s(dt, src[k], i);
            if (want_max ? v > best : v < best) {
                best = v;
                w = k;
            }
        }
    } else {
        uint64_t best = load_u(dt, src[0], i);
        for (int k = 1; k < nsrc; k++) {
            uint64_t v = load_u(dt, src[k], i);
            if (want_max ? v > best : v < best) {
                best = v;
                w = k;
            }
        }
    }
    return w;
}

/* The first member whose value equals the winner's (never a NaN), or
 * INT32_MAX: JAX compares with ==, so a NaN maximum matches nobody. */
static int32_t arg_index(shmesh_dtype dt, const void *const *src, int nsrc, size_t i, int w)
{
    for (int k = 0; k < nsrc; k++) {
        bool eq;
        if (dtype_is_float(dt))
            eq = load_f(dt, src[k], i) == load_f(dt, src[w], i);
        else if (is_signed(dt))
            eq = load_s(dt, src[k], i) == load_s(dt, src[w], i);
        else
            eq = load_u(dt, src[k], i) == load_u(dt, src[w], i);
        if (eq)
            return k;
    }
    return INT32_MAX;
}

/* pmean, as JAX computes psum(x) / n: XLA turns the division by the
 * constant n into a multiplication by its reciprocal, with n and the
 * reciprocal each rounded to the output dtype (for float16 and bfloat16 the
 * product is computed in float32, where it is exact, and rounded once).
 * Floating inputs: the sum as psum gives it, in place in dst, times that
 * reciprocal. */
static void mean_float(shmesh_dtype dt, void *dst, size_t n, int div)
{
    switch (dt) {
    case SHMESH_FLOAT32: {
        float r = 1.0f / (float)div, *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] *= r;
        break;
    }
    case SHMESH_FLOAT64: {
        double r = 1.0 / (double)div, *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] *= r;
        break;
    }
    case SHMESH_FLOAT16: {
        float r = half_to_float(float_to_half(1.0f / half_to_float(float_to_half((float)div))));
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = float_to_half(half_to_float(d[i]) * r);
        break;
    }
    default: { /* bfloat16 */
        float r = bf16_to_float(float_to_bf16(1.0f / bf16_to_float(float_to_bf16((float)div))));
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = float_to_bf16(bf16_to_float(d[i]) * r);
        break;
    }
    }
}

/* Integer and bool inputs: the sum as psum gives it (wrapped at the
 * input's width; bool counts as int32), converted to the output dtype, then
 * times the reciprocal of n in that dtype. */
static void mean_int_elem(shmesh_dtype in, shmesh_dtype out, void *dst, const void *const *src,
                          int nsrc, size_t i, int div)
{
    size_t width = in == SHMESH_BOOL ? 4 : dtype_size(in);
    uint64_t s = 0;
    for (int k = 0; k < nsrc; k++)
        s += is_signed(in) ? (uint64_t)load_s(in, src[k], i) : load_u(in, src[k], i);
    if (width < 8)
        s &= (UINT64_C(1) << (8 * width)) - 1;
    bool neg = (is_signed(in) || in == SHMESH_BOOL) && (s >> (8 * width - 1));
    /* The signed value, or for unsigned types the value itself. */
    int64_t sv = neg ? (width < 8 ? (int64_t)(s - (UINT64_C(1) << (8 * width))) : (int64_t)s) : 0;
    if (out == SHMESH_FLOAT32)
        ((float *)dst)[i] = (neg ? (float)sv : (float)s) * (1.0f / (float)div);
    else
        ((double *)dst)[i] = (neg ? (double)sv : (double)s) * (1.0 / (double)div);
}

void reduce_run(enum red_op op, shmesh_dtype in_dt, shmesh_dtype out_dt, void *dst,
                const void *const *src, int nsrc, size_t n, int mean_n)
{
    switch (op) {
    case RED_SUM:
        if (in_dt != SHMESH_BOOL) {
            reduce_sum(in_dt, dst, src, nsrc, n);
            return;
        }
        for (size_t i = 0; i < n; i++) { /* bool sums count trues, as int32 */
            int32_t s = 0;
            for (int k = 0; k < nsrc; k++)
                s += ((const uint8_t *)src[k])[i] != 0;
            ((int32_t *)dst)[i] = s;
        }
        return;
    case RED_MAX:
    case RED_MIN:
        if (maxmin_fast(in_dt, op == RED_MAX, dst, src, nsrc, n))
            return;
        for (size_t i = 0; i < n; i++) {
            int w = winner(in_dt, src, nsrc, i, op == RED_MAX);
            if (in_dt == SHMESH_BOOL)
                ((uint8_t *)dst)[i] = ((const uint8_t *)src[w])[i] != 0;
            else
                copy_elem(in_dt, dst, i, src[w]);
        }
        return;
    case RED_MEAN:
        if (dtype_is_float(in_dt)) { /* out_dt is in_dt */
            reduce_sum(in_dt, dst, src, nsrc, n);
            mean_float(in_dt, dst, n, mean_n);
            return;
        }
        for (size_t i = 0; i < n; i++)
            mean_int_elem(in_dt, out_dt, dst, src, nsrc, i, mean_n);
        return;
    case RED_ARGMAX:
    case RED_ARGMIN:
        for (size_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] =
                arg_index(in_dt, src, nsrc, i, winner(in_dt, src, nsrc, i, op == RED_ARGMAX));
        return;
    }
}
