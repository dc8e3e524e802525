/* The one choice of a path (see path.h; the table is paths/table.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/debug.h"
#include "core/fail.h"
#include "engine/exchange.h"
#include "engine/path.h"
#include "engine/state.h"
#include "memory/heap.h"
#include "memory/state.h"

void path_names(char (*names)[SEG_TRACE_NAME], int max)
{
    for (size_t i = 0; i < path_count && (int)i < max; i++)
        snprintf(names[i], SEG_TRACE_NAME, "%s", path_table[i]->name);
}

unsigned path_index(const struct path *p)
{
    for (size_t i = 0; i < path_count; i++)
        if (path_table[i] == p)
            return (unsigned)i;
    return SEG_TEV_NO_PATH;
}

unsigned path_kinds(void)
{
    unsigned kinds = 0;
    for (size_t i = 0; i < path_count; i++)
        kinds |= path_table[i]->kinds;
    return kinds;
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
                      (uint64_t)(uintptr_t)k->f.out.data, engine_of(k->c)->cma_ok ? HS_CMA : 0};
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
    /* Never trust a peer's offset: it must name a range inside the heap
     * (handshake_check).  Addresses are only ever handed to the kernel,
     * which checks them. */
    s->hin[from] = w.in;
    s->hout[from] = w.out;
    s->zin[from] = w.flags & HS_IN_HEAP ? heap_at(&memory_of(c)->heap, w.in, k->f.in_bytes) : NULL;
    s->zout[from] = w.flags & HS_OUT_HEAP ? heap_at(&memory_of(c)->heap, w.out, k->f.out_bytes) : NULL;
    s->cin[from] = w.in_addr;
    s->cout[from] = w.out_addr;
    s->flags[from] = w.flags > UINT32_MAX ? UINT32_MAX : (uint32_t)w.flags;
}

/* What every member published is what where_pack writes: known flags, and
 * heap offsets exactly when the flags say so, naming ranges inside the heap.
 * Anything else was written by someone else: the job fails, naming the
 * member (every member reads the same bytes, so all find it). */
static int handshake_check(struct call *k)
{
    const struct call_scratch *s = k->s;
    for (int q = 0; q < k->g.n; q++) {
        uint32_t f = s->flags[q];
        bool in_ok = f & HS_IN_HEAP ? s->zin[q] != NULL : s->hin[q] == UINT64_MAX;
        bool out_ok = f & HS_OUT_HEAP ? s->zout[q] != NULL : s->hout[q] == UINT64_MAX;
        if (!(f & ~(uint32_t)(HS_CMA | HS_IN_HEAP | HS_OUT_HEAP)) && in_ok && out_ok)
            continue;
        const struct heap *h = &memory_of(k->c)->heap;
        int r = k->g.ranks[q];
        return fail_corrupt(k->c, k->name, k->seq, r,
                            "rank %d published flags 0x%x and heap offsets 0x%" PRIx64
                            " (input, %" PRIu64 " bytes) and 0x%" PRIx64 " (output, %" PRIu64
                            " bytes) for zero copy; the heap is [0x%" PRIx64 ", 0x%" PRIx64 ")",
                            r, f, s->hin[q], k->f.in_bytes, s->hout[q], k->f.out_bytes,
                            h->lo_off, h->lo_off + (uint64_t)(h->hi - h->lo));
    }
    return 0;
}

static const struct transfers handshake = {.broadcast = true,
                                         .control = true,
                                         .unit = sizeof(struct where),
                                         .bytes = where_bytes,
                                         .pack = where_pack,
                                         .recv = where_recv};

static const struct path *choose(const struct call *k)
{
    for (unsigned c = k->candidates; c; c &= c - 1) { /* the candidates, in table order */
        const struct path *p = path_table[__builtin_ctz(c)];
        if (!p->handshake || p->eligible(k))
            return p;
    }
    return path_last; /* not reached: a call's kinds always have a candidate */
}

/* The path every member will choose, where this member knows it without
 * the handshake: each candidate that needs it is ruled out by this member's
 * own buffers, and the first that does not is host staging (whose exchange
 * collects the handshake's windows before its own: exchange.c).  Else NULL. */
static const struct path *known_alone(const struct call *k)
{
    for (unsigned c = k->candidates; c; c &= c - 1) {
        const struct path *p = path_table[__builtin_ctz(c)];
        if (!p->handshake)
            return p == path_last ? p : NULL;
        if (!p->ruled_out || !p->ruled_out(k))
            return NULL;
    }
    return NULL;
}

/* k's candidates among the paths that take memory of `kinds`; whether one
 * needs the handshake. */
static bool candidates_of(struct call *k, unsigned kinds)
{
    bool hs = false;
    k->candidates = 0;
    for (size_t i = 0; i < path_count; i++)
        if ((path_table[i]->kinds & kinds) && path_table[i]->candidate(k) &&
            (path_table[i]->across_nodes == k->net || path_table[i]->hands_over)) {
            k->candidates |= 1u << i;
            hs |= path_table[i]->handshake;
        }
    return hs;
}

/* A device call's candidates among the device paths (none for an exchange
 * of the op's own host data that the host paths carry).  Not memoized: they
 * depend on the call's dtype and op too. */
static __attribute__((noinline, cold)) bool device_candidates(struct call *k)
{
    bool hs = candidates_of(k, MEM_DEVICE);
    /* The first candidate is the call's device path (the device paths need
     * no handshake); one that moves the arrays only leaves the op's own
     * host data to the host paths. */
    if (k->candidates && k->f.host_data &&
        path_table[__builtin_ctz(k->candidates)]->arrays_only)
        k->candidates = 0;
    return hs;
}

/* The candidates, once per exchange; whether one needs the handshake. */
static bool find_candidates(struct call *k)
{
    struct path_memo *m = &engine_of(k->c)->path_memo;
    const struct flow *f = &k->f;
    k->size = flow_size(f);
    /* Device buffers (every member's, as the call's hash makes sure; host
     * memory once staged) go to the device paths. */
    if (__builtin_expect(call_on_device(k), 0) && ((k->in_kind | k->out_kind) & MEM_DEVICE)) {
        bool hs = device_candidates(k);
        if (k->candidates)
            return hs;
    }
    /* Across nodes: not remembered (the memo is the node's calls'). */
    if (__builtin_expect(k->net, 0))
        return candidates_of(k, MEM_HOST | MEM_HEAP);
    /* Transfers with rows: the size is theirs, and their candidates are
     * not remembered (a transfers flow without rows has other ones). */
    if (__builtin_expect(f->kind == FLOW_TRANSFERS, 0) && f->transfers->rows) {
        k->size = f->transfers->size;
        return candidates_of(k, MEM_HOST | MEM_HEAP);
    }
    bool allreduce = flow_allreduce(f);
    if (m->valid && m->size == k->size && m->in_bytes == f->in_bytes && m->n == k->g.n &&
        m->kind == (int)f->kind && m->allreduce == allreduce) {
        k->candidates = m->candidates;
        return m->handshake;
    }
    bool hs = candidates_of(k, MEM_HOST | MEM_HEAP);
    *m = (struct path_memo){k->size, f->in_bytes, k->g.n, (int)f->kind, allreduce, hs, true,
                            k->candidates};
    return hs;
}

void path_debug(const struct call *k)
{
    if (!k->path->hands_over)
        debug_line(k->c, "call #%" PRIu64 " %s: %" PRIu64 " B among %d, path %s%s", k->seq,
                   k->name, k->size, k->g.n, k->path->name,
                   k->handshaken ? " (after the handshake)" : "");
}

/* Before a path is chosen, k->stage is 0 (nothing done), 1 (the handshake
 * is needed) or 2 (it is under way). */
int path_step(struct call *k)
{
    if (!k->path) {
        if (k->stage == 0 && find_candidates(k))
            k->stage = 1;
        const struct path *alone = NULL;
        if (k->stage > 0 && !k->handshaken) {
            if (k->stage == 1) {
                xrun_start(k, &k->xr, &handshake);
                k->stage = 2;
            }
            /* Where this member knows the path, it posts its part of the
             * handshake and goes on to the path's first window, so that it
             * need not wait for the others' parts first: the exchange
             * collects them before that window's (k->late_st). */
            if ((alone = known_alone(k))) {
                int rc = xrun_post(k, &k->xr);
                if (rc)
                    return rc;
                k->late_st = &handshake;
                k->late_tag = k->tag;
                k->late_check = handshake_check;
                k->handshaken = true; /* a part in it: never run again without it */
            } else {
                int rc = xrun_step(k, &k->xr);
                if (rc || (rc = handshake_check(k)))
                    return rc;
                k->handshaken = true;
            }
        }
        k->path = alone ? alone : choose(k);
        k->stage = 0;
        k->pos = 0;
        if (k->c->debug & DEBUG_PATHS)
            path_debug(k);
    }
    return k->path->step(k);
}

int path_on_host(struct call *k)
{
    path_again(k);
    return path_step(k);
}
