/* Copies and clears of a size the compiler knows, made by the C library.
 * At -O3 GCC turns a known-size memcpy or memset of a few hundred bytes
 * (a struct assignment too) into `rep movsq` / `rep stosq`, which start
 * slowly on this project's AMD EPYC: on the path of every call, each took
 * a tenth of a small call's time (docs/performance.md, "Plans").  noipa:
 * neither inlined nor specialised for the size, so the library's vector
 * code runs. */
#ifndef SHMESH_CORE_BYTES_H
#define SHMESH_CORE_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Whether byte ranges [a, a + alen) and [b, b + blen) share a byte. */
static inline bool bytes_overlap(const void *a, uint64_t alen, const void *b, uint64_t blen)
{
    const unsigned char *x = a, *y = b;
    return alen && blen && x < y + blen && y < x + alen;
}

static __attribute__((noipa, unused)) void bytes_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

static __attribute__((noipa, unused)) void bytes_zero(void *dst, size_t n) { memset(dst, 0, n); }

#endif
