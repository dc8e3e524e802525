/* Element-wise reductions over the ranks' buffers, always in rank order so
 * every rank computes the bitwise-identical result. */
#include "half.h"
#include "internal.h"

/* dst = src[0] + src[1] + ... in that order.  Unsigned arithmetic gives the
 * two's-complement wrap-around of signed integers without undefined behaviour. */
#define SUM_LOOP(T)                                                                            \
    do {                                                                                       \
        T *d = dst;                                                                            \
        const T *s0 = src[0];                                                                  \
        if (nsrc == 1) {                                                                       \
            for (size_t i = 0; i < n; i++)                                                     \
                d[i] = s0[i];                                                                  \
            break;                                                                             \
        }                                                                                      \
        const T *s1 = src[1];                                                                  \
        for (size_t i = 0; i < n; i++)                                                         \
            d[i] = (T)(s0[i] + s1[i]);                                                         \
        for (int k = 2; k < nsrc; k++) {                                                       \
            const T *sk = src[k];                                                              \
            for (size_t i = 0; i < n; i++)                                                     \
                d[i] = (T)(d[i] + sk[i]);                                                      \
        }                                                                                      \
    } while (0)

/* Half types accumulate in float32, block by block, and round once. */
#define HALF_SUM_LOOP(TO_F, FROM_F)                                                            \
    do {                                                                                       \
        enum { BLOCK = 256 };                                                                  \
        float acc[BLOCK];                                                                      \
        uint16_t *d = dst;                                                                     \
        for (size_t i0 = 0; i0 < n; i0 += BLOCK) {                                             \
            size_t m = n - i0 < BLOCK ? n - i0 : BLOCK;                                        \
            const uint16_t *s0 = (const uint16_t *)src[0] + i0;                                \
            for (size_t i = 0; i < m; i++)                                                     \
                acc[i] = TO_F(s0[i]);                                                          \
            for (int k = 1; k < nsrc; k++) {                                                   \
                const uint16_t *sk = (const uint16_t *)src[k] + i0;                            \
                for (size_t i = 0; i < m; i++)                                                 \
                    acc[i] += TO_F(sk[i]);                                                     \
            }                                                                                  \
            for (size_t i = 0; i < m; i++)                                                     \
                d[i0 + i] = FROM_F(acc[i]);                                                    \
        }                                                                                      \
    } while (0)

void reduce_sum(shmesh_dtype dt, void *dst, const void *const *src, int nsrc, size_t n)
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
