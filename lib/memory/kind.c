/* Classifying buffers: device (a backend claims it), shared heap, host. */
#include "core/context.h"
#include "memory/heap.h"
#include "memory/kind.h"

int mem_register(shmesh_ctx *c, const struct mem_backend *b)
{
    struct mem_backends *mb = &c->backends;
    if (!b || !b->claims)
        return ctx_fail(c, SHMESH_ERR_INVALID, "a memory backend needs a claims function");
    if (mb->n == MEM_BACKENDS_MAX)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "cannot register memory backend '%s': %d are registered already",
                        b->name ? b->name : "?", MEM_BACKENDS_MAX);
    mb->list[mb->n++] = *b;
    return 0;
}

enum mem_kind mem_classify(const shmesh_ctx *c, const void *p, uint64_t len, uint64_t *heap_off,
                           const char **backend)
{
    if (!p || !len)
        return MEM_HOST;
    for (int i = 0; i < c->backends.n; i++) {
        const struct mem_backend *b = &c->backends.list[i];
        if (b->claims(b->arg, p, len)) {
            if (backend)
                *backend = b->name;
            return MEM_DEVICE;
        }
    }
    uint64_t off;
    if (heap_offset(&c->heap, p, len, &off)) {
        if (heap_off)
            *heap_off = off;
        return MEM_HEAP;
    }
    return MEM_HOST;
}

const char *mem_kind_name(enum mem_kind k)
{
    switch (k) {
    case MEM_HOST: return "host";
    case MEM_HEAP: return "shared heap";
    case MEM_DEVICE: return "device";
    }
    return "?";
}
