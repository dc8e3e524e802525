/* The shared heap: this rank's share of the segment's heap region, handed
 * out by shmesh_alloc; and where a peer's heap offset points. */
#ifndef SHMESH_MEMORY_HEAP_H
#define SHMESH_MEMORY_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "shmesh.h"

struct seg;

struct heap_block {
    uint64_t off, len;
};

/* Private bookkeeping of this rank's share: no locking, no communication. */
struct heap {
    const struct seg *seg;
    const unsigned char *lo, *hi; /* the whole heap region, every rank's share */
    uint64_t lo_off;              /* lo's offset in the segment */
    unsigned char *base;
    uint64_t size;
    struct heap_block *free, *used; /* sorted by offset */
    int nfree, nused, cap_free, cap_used;
};

/* 0, or SHMESH_ERR_NOMEM. */
int heap_init(struct heap *h, const struct seg *seg, int rank);
void heap_fini(struct heap *h);
/* Where [p, p+len) lies in the segment, when it lies within the heap. */
static inline bool heap_offset(const struct heap *h, const void *p, uint64_t len, uint64_t *off)
{
    const unsigned char *q = p;
    if (!p || q < h->lo || q > h->hi || len > (uint64_t)(h->hi - q))
        return false;
    *off = (uint64_t)(q - h->lo) + h->lo_off;
    return true;
}
/* The heap range a peer named by offset, checked against the heap's bounds;
 * NULL when it leaves them. */
void *heap_at(const struct heap *h, uint64_t off, uint64_t len);

#endif
