/* Classifying buffers: device (a backend claims it), shared heap, host. */
#include "core/context.h"
#include "memory/heap.h"
#include "memory/kind.h"
#include "memory/state.h"

int mem_register(shmesh_ctx *c, const struct mem_backend *b)
{
    struct mem_backends *mb = &memory_of(c)->backends;
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
    uint64_t off;
    const char *name = NULL;
    const struct memory_state *memory = memory_of(c);
    enum mem_kind k = mem_kind_of(&memory->backends, &memory->heap, p, len, &off, &name);
    if (k == MEM_HEAP && heap_off)
        *heap_off = off;
    if (k == MEM_DEVICE && backend)
        *backend = name;
    return k;
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
