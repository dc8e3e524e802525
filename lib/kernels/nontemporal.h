/* Large outputs written around the cache (no read for ownership of lines
 * that are only overwritten), as glibc's memcpy does for large copies. */
#ifndef SHMESH_KERNELS_NONTEMPORAL_H
#define SHMESH_KERNELS_NONTEMPORAL_H

#include <stddef.h>

/* Outputs at least this large are written with non-temporal stores. */
#define NT_MIN (8u << 20)

void nt_copy(unsigned char *dst, const unsigned char *src, size_t len);
/* Before anyone is told the data written so is there. */
void nt_fence(void);

#endif
