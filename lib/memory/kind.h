/* Memory kinds: what a buffer is, decided once per call.
 *
 * A buffer is device memory when a registered device backend claims it,
 * shared-heap memory when it lies in this rank's share of the segment's heap
 * (shmesh_alloc), and host memory otherwise.  Paths declare the kinds they
 * take (engine/path.h); a device buffer never reaches memcpy or
 * process_vm_readv. */
#ifndef SHMESH_MEMORY_KIND_H
#define SHMESH_MEMORY_KIND_H

#include <stdbool.h>
#include <stdint.h>

#include "memory/heap.h"
#include "shmesh.h"

enum mem_kind {
    MEM_HOST = 1,
    MEM_HEAP = 2,
    MEM_DEVICE = 4,
};

#define MEM_BACKENDS_MAX 4

/* A device runtime's say on pointers: whether [p, p+len) is its memory. */
struct mem_backend {
    const char *name;
    bool (*claims)(void *arg, const void *p, uint64_t len);
    void *arg;
};

struct mem_backends {
    struct mem_backend list[MEM_BACKENDS_MAX];
    int n;
};

/* Registers a backend with the context (device layers, tests). */
int mem_register(shmesh_ctx *c, const struct mem_backend *b);
/* The kind of [p, p+len); for the heap also its offset in the segment, for
 * a device the backend's name.  An empty buffer is host memory. */
enum mem_kind mem_classify(const shmesh_ctx *c, const void *p, uint64_t len, uint64_t *heap_off,
                           const char **backend);
/* The same, given the context's backends and heap (what the engine calls on
 * every buffer: no function call when no backend is registered). */
static inline enum mem_kind mem_kind_of(const struct mem_backends *mb, const struct heap *h,
                                        const void *p, uint64_t len, uint64_t *heap_off,
                                        const char **backend)
{
    if (!p || !len)
        return MEM_HOST;
    for (int i = 0; i < mb->n; i++)
        if (mb->list[i].claims(mb->list[i].arg, p, len)) {
            *backend = mb->list[i].name;
            return MEM_DEVICE;
        }
    return heap_offset(h, p, len, heap_off) ? MEM_HEAP : MEM_HOST;
}
/* "host", "shared heap", "device". */
const char *mem_kind_name(enum mem_kind k);

#endif
