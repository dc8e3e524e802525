/* Flows: the parts each member sends each other member, and the staged
 * transfers that carry them (see flow.h). */
#include <string.h>

#include "core/dtype.h"
#include "engine/call.h"
#include "engine/exchange.h"
#include "engine/flow.h"

static uint64_t array_bytes(const shmesh_array *a, size_t esz)
{
    uint64_t n = esz;
    for (int d = 0; d < a->ndim; d++)
        n *= (uint64_t)a->shape[d];
    return n;
}

void flow_init(struct flow *f, enum flow_kind kind, const shmesh_array *in,
               const shmesh_array *out)
{
    static const shmesh_array none;
    f->kind = kind;
    f->in = in ? *in : none;
    f->in_esz = in ? dtype_size(in->dtype) : 0;
    f->in_bytes = in ? array_bytes(in, f->in_esz) : 0;
    f->out = out ? *out : none;
    f->out_esz = out ? dtype_size(out->dtype) : 0;
    f->out_bytes = out ? array_bytes(out, f->out_esz) : 0;
    f->red = RED_SUM;
    f->mean_n = 1;
    f->in_dim = f->out_dim = -1;
    f->in_blk = f->out_blk = 0;
    f->dest = NULL;
    f->source = -1;
    f->run_ahead = false;
    f->zero_out = false;
    f->host_data = false;
    f->transfers = NULL;
}

/* Whether `from` sends `to` anything. */
static bool sends(const struct flow *f, int from, int to)
{
    if (f->dest)
        return f->dest[from] == to;
    return f->source < 0 || from == f->source;
}

static void side(struct box *b, const shmesh_array *a, size_t esz, int dim, int64_t blk, int at)
{
    if (dim < 0) {
        box_whole(b, a->ndim, a->shape, esz);
        box_simplify(b);
    } else {
        box_slab(b, a, dim, (int64_t)at * blk, blk);
    }
}

/* Whether a member's own part is where it goes already: a move of whole
 * arrays with in and out the very same buffer (pbroadcast in place, whose
 * source keeps its input). */
static bool own_in_place(const struct flow *f)
{
    return f->kind == FLOW_MOVE && f->in_dim < 0 && f->out_dim < 0 &&
           f->in.data == f->out.data && f->in_bytes == f->out_bytes;
}

bool flow_part(const struct call *k, int from, int to, struct box *src, struct box *dst)
{
    const struct flow *f = &k->f;
    if (!sends(f, from, to) || (from == to && own_in_place(f)))
        return false;
    side(src, &f->in, f->in_esz, f->in_dim, f->in_blk, to);
    side(dst, &f->out, f->out_esz, f->out_dim, f->out_blk, from);
    return true;
}

bool flow_shared(const struct flow *f)
{
    return f->kind == FLOW_NONE || (!f->dest && f->in_dim < 0);
}

/* The part of an input one destination gets, in bytes. */
static uint64_t part_bytes(const struct flow *f)
{
    if (f->in_dim < 0)
        return f->in_bytes;
    int64_t whole = f->in.shape[f->in_dim];
    return whole ? f->in_bytes / (uint64_t)whole * (uint64_t)f->in_blk : 0;
}

static uint64_t flow_bytes(const struct call *k, int from, int to)
{
    const struct flow *f = &k->f;
    if (to < 0) /* a shared transfer */
        return f->source < 0 || from == f->source ? f->in_bytes : 0;
    return sends(f, from, to) ? part_bytes(f) : 0;
}

/* Where block `at` of an array cut along `dim` in blocks of `blk` starts,
 * in bytes, when the block is one run of the array (every dimension before
 * `dim` has size 1: the common cut along the first axis), so that its
 * packed order is its order in memory; -1 when it is not.  What
 * box_contiguous says of box_slab's box, read from the shape alone: the
 * small calls that are mostly such blocks skip building the box. */
static int64_t block_run(const shmesh_array *a, size_t esz, int dim, int64_t blk, int at)
{
    for (int d = 0; d < dim; d++)
        if (a->shape[d] != 1)
            return -1;
    int64_t inner = (int64_t)esz;
    for (int d = dim + 1; d < a->ndim; d++)
        inner *= a->shape[d];
    return (int64_t)at * blk * inner;
}

static void flow_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct flow *f = &k->f;
    int64_t run = f->in_dim < 0 ? 0 : block_run(&f->in, f->in_esz, f->in_dim, f->in_blk, to);
    if (run >= 0) {
        memcpy(dst, (const unsigned char *)f->in.data + run + off, len);
        return;
    }
    struct box b;
    box_slab(&b, &f->in, f->in_dim, (int64_t)to * f->in_blk, f->in_blk);
    box_read(&b, f->in.data, off / f->in_esz, len / f->in_esz, dst);
}

static void flow_recv(const struct call *k, int from, uint64_t off, const void *src,
                      uint64_t len)
{
    const struct flow *f = &k->f;
    int64_t run = f->out_dim < 0 ? 0 : block_run(&f->out, f->out_esz, f->out_dim, f->out_blk, from);
    if (run >= 0) {
        memcpy((unsigned char *)f->out.data + run + off, src, len);
        return;
    }
    /* The block's packed order is the same on both sides (for all_to_all:
     * untiled, the input block lacks split_axis and the output block lacks
     * concat_axis, and those shapes agree; tiled, both have the chunk's). */
    struct box b;
    box_slab(&b, &f->out, f->out_dim, (int64_t)from * f->out_blk, f->out_blk);
    box_write(&b, f->out.data, off / f->out_esz, len / f->out_esz, src);
}

/* In place is safe: a window's range is packed before it is written. */
static void flow_reduce(const struct call *k, uint64_t off, const void *const *src, uint64_t len)
{
    const struct flow *f = &k->f;
    uint64_t first = off / f->in_esz;
    reduce_run(f->red, f->in.dtype, f->out.dtype, (unsigned char *)f->out.data + first * f->out_esz,
               src, k->g.n, (size_t)(len / f->in_esz), f->mean_n);
}

static const struct transfers none = {.broadcast = true, .control = true, .bytes = transfers_no_bytes};
static const struct transfers shared_move = {
    .broadcast = true, .bytes = flow_bytes, .pack = flow_pack, .recv = flow_recv};
static const struct transfers move = {.bytes = flow_bytes, .pack = flow_pack, .recv = flow_recv};
static const struct transfers shared_reduce = {
    .broadcast = true, .bytes = flow_bytes, .pack = flow_pack, .reduce = flow_reduce};
static const struct transfers reduce = {.bytes = flow_bytes, .pack = flow_pack, .reduce = flow_reduce};

const struct transfers *flow_transfers(const struct flow *f)
{
    switch (f->kind) {
    case FLOW_NONE: return &none;
    case FLOW_MOVE: return flow_shared(f) ? &shared_move : &move;
    case FLOW_REDUCE: return flow_shared(f) ? &shared_reduce : &reduce;
    case FLOW_TRANSFERS: return f->transfers;
    }
    return &none;
}
