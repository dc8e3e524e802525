/* The shared heap: each rank allocates from its own share of the segment's
 * heap region.  The bookkeeping is private to the rank (peers only ever see
 * offsets handed to them by a collective, and check those against the heap's
 * bounds), so allocation needs no locking and no communication. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/fail.h"
#include "memory/heap.h"
#include "memory/state.h"

#define HEAP_ALIGN ((unsigned)SEG_CACHE_LINE) /* no two blocks share a line */

int heap_init(struct heap *h, const struct seg *seg, int rank)
{
    memset(h, 0, sizeof *h);
    h->seg = seg;
    /* The segment's private layout, never the header: a peer's offset is
     * checked against these bounds, and a buffer in them is a heap buffer. */
    h->lo_off = seg->lay.heap_offset;
    h->lo = seg->base + h->lo_off;
    h->hi = seg->base + seg->lay.total_bytes;
    h->base = seg_heap(seg, rank);
    h->size = seg->lay.heap_share;
    if (!h->size)
        return 0;
    h->free = malloc(sizeof *h->free);
    if (!h->free)
        return SHMESH_ERR_NOMEM;
    h->free[0] = (struct heap_block){0, h->size};
    h->nfree = 1;
    h->cap_free = 1;
    return 0;
}

void heap_fini(struct heap *h)
{
    free(h->free);
    free(h->used);
    memset(h, 0, sizeof *h);
}

/* Inserts b at index at of a sorted array, growing it. */
static int insert(struct heap_block **arr, int *n, int *cap, int at, struct heap_block b)
{
    if (*n == *cap) {
        int ncap = *cap ? 2 * *cap : 8;
        struct heap_block *p = realloc(*arr, sizeof *p * (size_t)ncap);
        if (!p)
            return SHMESH_ERR_NOMEM;
        *arr = p;
        *cap = ncap;
    }
    memmove(*arr + at + 1, *arr + at, sizeof **arr * (size_t)(*n - at));
    (*arr)[at] = b;
    (*n)++;
    return 0;
}

static void erase(struct heap_block *arr, int *n, int at)
{
    memmove(arr + at, arr + at + 1, sizeof *arr * (size_t)(*n - at - 1));
    (*n)--;
}

/* First index whose offset is >= off. */
static int lower_bound(const struct heap_block *arr, int n, uint64_t off)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (arr[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void *alloc(shmesh_ctx *c, size_t bytes)
{
    struct heap *h = &memory_of(c)->heap;
    if (bytes == 0)
        return NULL;
    uint64_t len = bytes > UINT64_MAX - HEAP_ALIGN ? UINT64_MAX : (bytes + HEAP_ALIGN - 1) / HEAP_ALIGN * HEAP_ALIGN;
    uint64_t free_total = 0, largest = 0;
    for (int i = 0; i < h->nfree; i++) {
        struct heap_block *f = &h->free[i];
        free_total += f->len;
        largest = f->len > largest ? f->len : largest;
        if (f->len < len)
            continue;
        struct heap_block got = {f->off, len};
        int at = lower_bound(h->used, h->nused, got.off);
        if (insert(&h->used, &h->nused, &h->cap_used, at, got) < 0)
            break;
        f->off += len;
        f->len -= len;
        if (!f->len)
            erase(h->free, &h->nfree, i);
        return h->base + got.off;
    }
    ctx_fail(c, SHMESH_ERR_NOMEM,
             "shmesh_alloc: %zu bytes asked, but this rank's share of the shared heap has "
             "%.1f MiB free (largest block %.1f MiB) of %.1f MiB; start the job with a larger "
             "shmesh-run --shm-size (or SHMESH_SHM_SIZE): the segment is now %.1f MiB for %d ranks",
             bytes, (double)free_total / (1 << 20), (double)largest / (1 << 20),
             (double)h->size / (1 << 20), (double)c->seg->size / (1 << 20), c->world);
    return NULL;
}

void *shmesh_alloc(shmesh_ctx *c, size_t bytes)
{
    if (ctx_enter_local(c, "shmesh_alloc"))
        return NULL;
    void *p = alloc(c, bytes);
    ctx_leave(c);
    return p;
}

static void heap_free(shmesh_ctx *c, void *ptr)
{
    struct heap *h = &memory_of(c)->heap;
    const unsigned char *p = ptr;
    uint64_t off = p >= h->base && p < h->base + h->size ? (uint64_t)(p - h->base) : UINT64_MAX;
    int at = lower_bound(h->used, h->nused, off);
    if (off == UINT64_MAX || at == h->nused || h->used[at].off != off) {
        ctx_fail(c, SHMESH_ERR_INVALID,
                 "shmesh_free: %p is not a block shmesh_alloc gave this rank (or it was freed "
                 "already); it was left alone",
                 ptr);
        return;
    }
    struct heap_block b = h->used[at];
    erase(h->used, &h->nused, at);
    int i = lower_bound(h->free, h->nfree, b.off);
    /* Merge with the free neighbours on either side. */
    if (i > 0 && h->free[i - 1].off + h->free[i - 1].len == b.off) {
        h->free[i - 1].len += b.len;
        if (i < h->nfree && b.off + b.len == h->free[i].off) {
            h->free[i - 1].len += h->free[i].len;
            erase(h->free, &h->nfree, i);
        }
        return;
    }
    if (i < h->nfree && b.off + b.len == h->free[i].off) {
        h->free[i].off = b.off;
        h->free[i].len += b.len;
        return;
    }
    if (insert(&h->free, &h->nfree, &h->cap_free, i, b) < 0)
        ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_free: out of memory; %" PRIu64 " heap bytes are lost",
                 b.len);
}

void shmesh_free(shmesh_ctx *c, void *ptr)
{
    if (!ptr || ctx_enter_local(c, "shmesh_free"))
        return;
    heap_free(c, ptr);
    ctx_leave(c);
}

void *heap_at(const struct heap *h, uint64_t off, uint64_t len)
{
    uint64_t start = h->lo_off, end = h->lo_off + (uint64_t)(h->hi - h->lo);
    if (off < start || off > end || len > end - off)
        return NULL;
    return (unsigned char *)h->lo + (off - start);
}
