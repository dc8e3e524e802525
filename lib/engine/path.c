/* The path table and the one choice (see path.h). */
#include <inttypes.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "engine/exchange.h"
#include "engine/path.h"
#include "memory/heap.h"
#include "paths/paths.h"

static const struct path *const table[] = {
    &path_zero_copy,
    &path_single_copy,
    &path_rsag,
    &path_staged,
};
#define NPATHS (sizeof table / sizeof *table)

bool path_takes(unsigned kinds)
{
    for (size_t i = 0; i < NPATHS; i++)
        if ((kinds & ~table[i]->kinds) == 0)
            return true;
    return false;
}

/* The handshake: every member publishes where its buffers are. */
struct where {
    uint64_t in, out;           /* segment offsets, or UINT64_MAX when not in the heap */
    uint64_t in_addr, out_addr; /* addresses in the member's own process */
    uint64_t flags;             /* enum hs_flag */
};

static uint64_t where_bytes(const struct call *k, int from, int to) { return sizeof(struct where); }

static void where_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    struct where w = {UINT64_MAX, UINT64_MAX, (uint64_t)(uintptr_t)k->f.in.data,
                      (uint64_t)(uintptr_t)k->f.out.data, k->c->cma_ok ? HS_CMA : 0};
    if (k->in_kind == MEM_HEAP) {
        w.in = k->in_heap;
        w.flags |= HS_IN_HEAP;
    }
    if (k->out_kind == MEM_HEAP) {
        w.out = k->out_heap;
        w.flags |= HS_OUT_HEAP;
    }
    memcpy(dst, (const unsigned char *)&w + off, len);
}

static void where_recv(const struct call *k, int from, uint64_t off, const void *src,
                       uint64_t len)
{
    const shmesh_ctx *c = k->c;
    struct call_scratch *s = k->s;
    struct where w;
    memcpy((unsigned char *)&w + off, src, len);
    /* Never trust a peer's offset: it must name a range inside the heap.
     * (Addresses are only ever handed to the kernel, which checks them.) */
    s->zin[from] = heap_at(&c->heap, w.in, k->f.in_bytes);
    s->zout[from] = heap_at(&c->heap, w.out, k->f.out_bytes);
    s->cin[from] = w.in_addr;
    s->cout[from] = w.out_addr;
    s->flags[from] = (uint32_t)w.flags;
}

static const struct streams handshake = {.broadcast = true,
                                         .unit = sizeof(struct where),
                                         .bytes = where_bytes,
                                         .pack = where_pack,
                                         .recv = where_recv};

static const struct path *choose(const struct call *k)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (table[i]->candidate(k) && (!table[i]->handshake || table[i]->eligible(k)))
            return table[i];
    return &path_staged; /* not reached: staged is always a candidate */
}

static bool needs_handshake(const struct call *k)
{
    for (size_t i = 0; i < NPATHS; i++)
        if (table[i]->handshake && table[i]->candidate(k))
            return true;
    return false;
}

int path_step(struct call *k)
{
    if (!k->path) {
        if (!k->handshaken && needs_handshake(k)) {
            if (k->stage == 0) {
                xrun_start(k, &k->xr, &handshake);
                k->stage = 1;
            }
            int rc = xrun_step(k, &k->xr);
            if (rc)
                return rc;
            k->handshaken = true;
        }
        k->path = choose(k);
        k->stage = 0;
        k->pos = 0;
        if (k->c->debug & DEBUG_PATHS)
            debug_line(k->c, "call #%" PRIu64 " %s: %" PRIu64 " B among %d, path %s%s", k->seq,
                       k->name, flow_size(&k->f), k->g.n, k->path->name,
                       k->handshaken ? " (after the handshake)" : "");
    }
    return k->path->step(k);
}
