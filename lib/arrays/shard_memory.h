/* The memory of global arrays' owned shards: huge pages for large ones, and
 * a few freed large shards kept for the next of their size (a reshard or
 * scatter in a loop then writes memory that is already mapped, instead of
 * the kernel zeroing fresh pages first). */
#ifndef SHMESH_ARRAYS_SHARD_MEMORY_H
#define SHMESH_ARRAYS_SHARD_MEMORY_H

#include <stddef.h>

/* Shards from this size on are mappings of their own (mmap), aligned to a
 * huge page (2 MiB), asked for in huge pages (MADV_HUGEPAGE, where
 * transparent huge pages allow it) and kept when freed. */
#define SHARD_LARGE ((size_t)4 << 20)
/* What the cache keeps at most, in the whole process: buffers, and bytes
 * (SHMESH_ARRAY_CACHE, set by shmesh_init: the last context's). */
#define SHARD_CACHE_BUFFERS 4
void shard_memory_budget(size_t bytes);

/* `bytes` (a multiple of 64) aligned to 64 bytes at least: a kept shard of
 * exactly that size when there is one, else new memory.  NULL when out of
 * memory.  Its content is undefined. */
void *shard_alloc(size_t bytes);
/* p (from shard_alloc(bytes), or NULL) freed, or kept for the next. */
void shard_free(void *p, size_t bytes);
/* Large shards are mappings of their own: shard_move gives the whole pages
 * of src's first `bytes` to the range at dst, inside another large shard,
 * without copying them (mremap; both page-aligned).  The bytes moved (a
 * whole number of pages, at most `bytes`: all its whole pages, or those of
 * its whole huge pages where the rest is another mapping; 0: none, when
 * the kernel refused or an address is not page-aligned): the caller copies
 * the rest.  src's
 * moved range is then unmapped, and its shard must go to shard_discard. */
size_t shard_move(void *dst, void *src, size_t bytes);
/* p (from shard_alloc(bytes)) freed, never kept. */
void shard_discard(void *p, size_t bytes);
/* Frees every kept shard (shmesh_finalize). */
void shard_memory_release(void);
/* The bytes kept now (for tests). */
size_t shard_memory_kept(void);

#endif
