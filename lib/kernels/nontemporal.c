/* Copies that write around the cache. */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>

#include "kernels/nontemporal.h"
#endif

/* Large outputs are written around the cache (no read for ownership of
 * lines that are only overwritten), as glibc's memcpy does for large copies;
 * the caller fences before telling anyone. */
void nt_copy(unsigned char *dst, const unsigned char *src, size_t len)
{
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > len)
        head = len;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    len -= head;
    for (; len >= 64; len -= 64, dst += 64, src += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src),
                b = _mm_loadu_si128((const __m128i *)(src + 16)),
                c = _mm_loadu_si128((const __m128i *)(src + 32)),
                d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
#endif
    memcpy(dst, src, len);
}

void nt_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}
