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
#include "engine/traffic.h"
#include "engine/window.h"
#include "kernels/nontemporal.h"
#include "paths/rsag.h"
#include "paths/state.h"

static void copy_bytes(unsigned char *dst, const unsigned char *src, size_t len)
{
    memcpy(dst, src, len);
}

bool rsag_sized(const struct call *k)
{
    return flow_allreduce(&k->f) && k->g.n > 1 && k->f.in_bytes >= paths_of(k->c)->rsag_min;
}

static bool rsag_candidate(const struct call *k)
{
    /* Not for empty arrays: their data may be NULL, and staging nothing
     * through two windows is no use. */
    return rsag_sized(k) && k->f.in_bytes > 0;
}

/* k->pos: the chunk's first element; k->stage: 0 stage the blocks, 1 collect
 * them, 2 reduce this member's block into the next window, 3 copy the
 * others' blocks out. */
static int rsag_step(struct call *k)
{
    const struct flow *f = &k->f;
    struct call_scratch *s = k->s;
    int n = k->g.n, me = k->g.me, rc;
    size_t in_esz = f->in_esz, out_esz = f->out_esz;
    size_t esz = in_esz > out_esz ? in_esz : out_esz;
    uint64_t count = f->in_bytes / in_esz;
    /* n blocks of a chunk fill the first window; one the second. */
    uint64_t block = win_capacity(k->c) / (uint64_t)n / esz / 16 * 16;
    if (block == 0)
        block = 1;
    uint64_t chunk = block * (uint64_t)n;
    bool nt = count * out_esz >= NT_MIN;
    void (*put)(unsigned char *, const unsigned char *, size_t) = nt ? nt_copy : copy_bytes;
    const unsigned char *in = f->in.data;
    unsigned char *out = f->out.data;
    for (;;) {
        uint64_t base = k->pos;
        uint64_t cnt = count - base < chunk ? count - base : chunk;
        uint64_t per = (cnt + (uint64_t)n - 1) / (uint64_t)n; /* block j: [j*per, ...) */
#define BLOCK_LEN(j)                                                                           \
    (cnt > (uint64_t)(j) * per ? (cnt - (uint64_t)(j) * per < per ? cnt - (uint64_t)(j) * per : per) \
                               : 0)
        switch (k->stage) {
        case 0: {
            unsigned char *stage = win_open(k, &rc);
            if (!stage)
                return rc;
            for (int j = 0; j < n; j++)
                if (j != me)
                    memcpy(stage + (uint64_t)j * per * in_esz,
                           in + (base + (uint64_t)j * per) * in_esz,
                           (size_t)(BLOCK_LEN(j) * in_esz));
            win_post(k);
            /* Member j reads block j of this window; this one, its block
             * of every member's. */
            for (int j = 0; j < n; j++)
                if (call_other_process(k, j))
                    call_moved(k, BLOCK_LEN(j) * in_esz, BLOCK_LEN(me) * in_esz);
            k->stage = 1;
        } /* fall through */
        case 1:
            if ((rc = win_collect(k)))
                return rc;
            for (int q = 0; q < n; q++)
                s->srcs[q] = q == me ? in + (base + (uint64_t)me * per) * in_esz
                                     : (const unsigned char *)seg_payload(s->hdrs[q]) +
                                           (uint64_t)me * per * in_esz;
            k->stage = 2;
            /* fall through */
        case 2: {
            /* The members' first windows stay readable until this rank posts
             * the window after the next one: reduce from them into the next. */
            unsigned char *reduced = win_open(k, &rc);
            if (!reduced)
                return rc;
            uint64_t mine = BLOCK_LEN(me);
            reduce_run(f->red, f->in.dtype, f->out.dtype, reduced, s->srcs, n, (size_t)mine,
                       f->mean_n);
            put(out + (base + (uint64_t)me * per) * out_esz, reduced, (size_t)(mine * out_esz));
            win_post(k);
            /* Every member reads every other's reduced block. */
            for (int j = 0; j < n; j++)
                if (call_other_process(k, j))
                    call_moved(k, mine * out_esz, BLOCK_LEN(j) * out_esz);
            k->stage = 3;
        } /* fall through */
        case 3:
            if ((rc = win_collect(k)))
                return rc;
            for (int q = 0; q < n; q++)
                if (q != me)
                    put(out + (base + (uint64_t)q * per) * out_esz, seg_payload(s->hdrs[q]),
                        (size_t)(BLOCK_LEN(q) * out_esz));
#undef BLOCK_LEN
            k->stage = 0;
            k->pos += chunk;
            if (k->pos >= count) {
                if (nt)
                    nt_fence();
                return 0;
            }
        }
    }
}

const struct path path_rsag = {
    .name = "rsag",
    .kinds = MEM_HOST | MEM_HEAP,
    .candidate = rsag_candidate,
    .step = rsag_step,
};
