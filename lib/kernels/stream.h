/* Large outputs written around the cache (no read for ownership of lines
 * that are only overwritten), as glibc's memcpy does for large copies. */
#ifndef SHMESH_KERNELS_STREAM_H
#define SHMESH_KERNELS_STREAM_H

#include <stddef.h>

/* Outputs at least this large are streamed. */
#define STREAM_MIN (8u << 20)

void stream_copy(unsigned char *dst, const unsigned char *src, size_t len);
/* Before anyone is told the streamed data is there. */
void stream_fence(void);

#endif
