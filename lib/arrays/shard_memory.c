/* Owned shards' memory (see shard_memory.h).  The cache is the process's,
 * shared by its contexts and threads under a lock that is only ever tried:
 * when another thread holds it (or a fork child inherited it held), memory
 * is allocated or freed plainly, and nothing waits. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "arrays/shard_memory.h"

#define HUGE_PAGE ((size_t)2 << 20)

static struct {
    void *p;
    size_t bytes;
} kept[SHARD_CACHE_BUFFERS];
static size_t kept_bytes, budget = (size_t)1 << 30;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

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
    void *p = aligned_alloc(HUGE_PAGE, bytes);
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
    free(p);
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
        free(kept[i].p);
        kept[i].p = NULL;
    }
    kept_bytes = 0;
    pthread_mutex_unlock(&lock);
}
