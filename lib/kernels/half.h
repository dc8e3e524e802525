/* IEEE binary16 and bfloat16 <-> binary32, round to nearest even. */
#ifndef SHMESH_LIB_HALF_H
#define SHMESH_LIB_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t half_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 31)
        return half_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return half_bits_f32(sign);
        /* Subnormal: shift the leading one into the implicit position. */
        exp = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        return half_bits_f32(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
    }
    return half_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t float_to_half(float x)
{
    uint32_t f = half_f32_bits(x);
    uint32_t sign = (f >> 16) & 0x8000u;
    uint32_t a = f & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: stay quiet, keep the top of the payload */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) /* below 2^-25 (2^-25 itself ties to 0) */
            return (uint16_t)sign;
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = (a >> 13) - (112u << 10), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is the right answer */
    return (uint16_t)(sign | h);
}

static inline float bf16_to_float(uint16_t b) { return half_bits_f32((uint32_t)b << 16); }

static inline uint16_t float_to_bf16(float x)
{
    uint32_t f = half_f32_bits(x);
    if ((f & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((f >> 16) | 0x40u);
    f += 0x7fffu + ((f >> 16) & 1u);
    return (uint16_t)(f >> 16);
}

#endif
