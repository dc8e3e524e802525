/* Owned shards' memory (see shard_memory.h).  The cache is the process's,
 * shared by its contexts and threads under a lock that is only ever tried:
 * when another thread holds it (or a fork child inherited it held), memory
 * is allocated or freed plainly, and nothing waits. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arrays/shard_memory.h"

#define HUGE_PAGE ((size_t)2 << 20)

static struct {
    void *p;
    size_t bytes;
} kept[SHARD_CACHE_BUFFERS];
static size_t kept_bytes, budget = (size_t)1 << 30;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static size_t page_size(void)
{
    static size_t page;
    if (!page) {
        long p = sysconf(_SC_PAGESIZE);
        page = p > 0 ? (size_t)p : 4096;
    }
    return page;
}

/* A large shard's mapping: its bytes to whole pages. */
static size_t mapped_bytes(size_t bytes)
{
    return (bytes + page_size() - 1) & ~(page_size() - 1);
}

/* A mapping of its own for a large shard, aligned to a huge page. */
static void *map_aligned(size_t bytes)
{
    size_t len = mapped_bytes(bytes), span = len + HUGE_PAGE;
    unsigned char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    unsigned char *a = (unsigned char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (p + span > a + len)
        munmap(a + len, (size_t)(p + span - (a + len)));
    return a;
}

static void unmap(void *p, size_t bytes)
{
    if (p)
        munmap(p, mapped_bytes(bytes));
}

void *shard_alloc(size_t bytes)
{
    if (bytes < SHARD_LARGE)
        return aligned_alloc(64, bytes);
    if (pthread_mutex_trylock(&lock) == 0) {
        void *p = NULL;
        for (int i = 0; i < SHARD_CACHE_BUFFERS && !p; i++)
            if (kept[i].p && kept[i].bytes == bytes) {
                p = kept[i].p;
                kept[i].p = NULL;
                kept_bytes -= bytes;
            }
        pthread_mutex_unlock(&lock);
        if (p)
            return p;
    }
    /* The first touch of each 2 MiB is then one fault, not 512. */
    void *p = map_aligned(bytes);
#ifdef MADV_HUGEPAGE
    if (p)
        (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice: may be refused */
#endif
    return p;
}

void shard_free(void *p, size_t bytes)
{
    if (p && bytes >= SHARD_LARGE && pthread_mutex_trylock(&lock) == 0) {
        for (int i = 0; i < SHARD_CACHE_BUFFERS && p; i++)
            if (!kept[i].p && kept_bytes + bytes <= budget) {
                kept[i].p = p;
                kept[i].bytes = bytes;
                kept_bytes += bytes;
                p = NULL;
            }
        pthread_mutex_unlock(&lock);
    }
    shard_discard(p, bytes); /* not kept (NULL if it was) */
}

void shard_discard(void *p, size_t bytes)
{
    if (bytes < SHARD_LARGE)
        free(p);
    else
        unmap(p, bytes);
}

size_t shard_move(void *dst, void *src, size_t bytes)
{
    size_t page = page_size(), n = bytes & ~(page - 1);
    if (!n || ((uintptr_t)dst | (uintptr_t)src) & (page - 1))
        return 0;
    /* The pages of src's range take dst's place (what dst held there is
     * unmapped first); src's range is left unmapped. */
    if (mremap(src, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == dst)
        return n;
    /* A shard not a whole number of huge pages is two mappings (its huge
     * pages asked for MADV_HUGEPAGE, its tail not), which one mremap does
     * not span: the first alone, then. */
    size_t h = bytes & ~(HUGE_PAGE - 1);
    if (h && h < n && mremap(src, h, h, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == dst)
        return h;
    return 0;
}

void shard_memory_budget(size_t bytes)
{
    if (pthread_mutex_trylock(&lock) == 0) {
        budget = bytes;
        pthread_mutex_unlock(&lock);
    }
}

size_t shard_memory_kept(void)
{
    size_t n = 0;
    if (pthread_mutex_trylock(&lock) == 0) {
        n = kept_bytes;
        pthread_mutex_unlock(&lock);
    }
    return n;
}

void shard_memory_release(void)
{
    if (pthread_mutex_trylock(&lock) != 0)
        return; /* another thread is at it */
    for (int i = 0; i < SHARD_CACHE_BUFFERS; i++) {
        unmap(kept[i].p, kept[i].bytes);
        kept[i].p = NULL;
    }
    kept_bytes = 0;
    pthread_mutex_unlock(&lock);
}
