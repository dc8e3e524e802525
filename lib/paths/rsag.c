/* Staged reductions for large arrays: reduce-scatter then all-gather.
 *
 * One-shot (every member stages its whole input, every member reduces the
 * whole array) moves about 5 bytes of memory per byte reduced on each rank
 * with two ranks, and 3 + n with n.  Here each chunk takes two windows:
 * in the first, a member stages only the blocks the others reduce; then it
 * reduces its own block — its own share straight from its private input —
 * into its next window, which the others copy out: about 4 bytes per byte at
 * two ranks, and 5 whatever n.  Members combine in group order, as one-shot
 * does, so both give the same bits. */
#include <string.h>

#include "core/context.h"
#include "engine/exchange.h"
#include "kernels/stream.h"
#include "paths/rsag.h"

static void copy_bytes(unsigned char *dst, const unsigned char *src, size_t len)
{
    memcpy(dst, src, len);
}

int rsag_run(shmesh_ctx *c, const struct group *g, const struct call_desc *desc, enum red_op op,
             shmesh_dtype in_dt, shmesh_dtype out_dt, const unsigned char *in, unsigned char *out,
             uint64_t count, int mean_n)
{
    int n = g->n, me = g->me;
    size_t in_esz = shmesh_dtype_size(in_dt), out_esz = shmesh_dtype_size(out_dt);
    size_t esz = in_esz > out_esz ? in_esz : out_esz;
    /* n blocks of a chunk fill the first window; one the second. */
    uint64_t block = win_capacity(c) / (uint64_t)n / esz / 16 * 16;
    if (block == 0)
        block = 1;
    uint64_t chunk = block * (uint64_t)n;
    bool stream = count * out_esz >= STREAM_MIN;
    void (*put)(unsigned char *, const unsigned char *, size_t) = stream ? stream_copy : copy_bytes;
    for (uint64_t base = 0; base < count || (base == 0 && count == 0); base += chunk) {
        uint64_t cnt = count - base < chunk ? count - base : chunk;
        uint64_t per = (cnt + (uint64_t)n - 1) / (uint64_t)n; /* block j: [j*per, ...) */
#define BLOCK_LEN(j) (cnt > (uint64_t)(j) * per ? (cnt - (uint64_t)(j) * per < per ? cnt - (uint64_t)(j) * per : per) : 0)
        int rc;
        unsigned char *stage = win_open(c, &rc);
        if (!stage)
            return rc;
        for (int j = 0; j < n; j++)
            if (j != me)
                memcpy(stage + (uint64_t)j * per * in_esz, in + (base + (uint64_t)j * per) * in_esz,
                       (size_t)(BLOCK_LEN(j) * in_esz));
        if ((rc = win_exchange(c, g, base == 0 ? desc : NULL)))
            return rc;
        for (int q = 0; q < n; q++)
            c->srcs[q] = q == me ? in + (base + (uint64_t)me * per) * in_esz
                                 : (const unsigned char *)seg_payload(c->hdrs[q]) +
                                       (uint64_t)me * per * in_esz;
        /* The members' first windows stay readable until this rank posts
         * the window after the next one: reduce from them into the next. */
        unsigned char *reduced = win_open(c, &rc);
        if (!reduced)
            return rc;
        uint64_t mine = BLOCK_LEN(me);
        reduce_run(op, in_dt, out_dt, reduced, c->srcs, n, (size_t)mine, mean_n);
        put(out + (base + (uint64_t)me * per) * out_esz, reduced, (size_t)(mine * out_esz));
        if ((rc = win_exchange(c, g, NULL)))
            return rc;
        for (int q = 0; q < n; q++)
            if (q != me)
                put(out + (base + (uint64_t)q * per) * out_esz, seg_payload(c->hdrs[q]),
                    (size_t)(BLOCK_LEN(q) * out_esz));
#undef BLOCK_LEN
    }
    if (stream)
        stream_fence();
    return 0;
}

bool use_rsag(const shmesh_ctx *c, uint64_t bytes, int n) { return n > 1 && bytes >= c->rsag_min; }
