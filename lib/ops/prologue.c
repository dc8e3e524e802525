#include <stdio.h>
#include <string.h>

#include "ops/prologue.h"


/* "[[0,1],[2,3]]", ending in "..." when it does not fit. */
static void groups_text(const shmesh_groups *gs, char *buf, size_t len)
{
    size_t n = 0;
    int at = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int g = 0; g < gs->ngroups && n < len; g++) {
        int size = gs->group_sizes ? gs->group_sizes[g] : gs->group_size;
        n += (size_t)snprintf(buf + n, len - n, "%s[", g ? "," : "");
        for (int i = 0; i < size && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s%d", i ? "," : "", gs->indices[at + i]);
        at += size;
        if (n < len)
            n += (size_t)snprintf(buf + n, len - n, "]");
    }
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, "]");
    if (n >= len && len > 4)
        memcpy(buf + len - 4, "...", 4);
}

int coll_open(struct coll *k, shmesh_mesh *m, enum call_op op, const char *axes,
              const shmesh_groups *gs, bool equal_groups)
{
    memset(k, 0, sizeof *k);
    k->name = op_name(op);
    k->m = m;
    k->c = m ? m->ctx : NULL;
    int rc = sync_enter(k->c, k->name);
    if (rc)
        return rc;
    rc = mesh_axes(m, k->name, axes, &k->axes);
    if (!rc) {
        uint64_t gh = 0;
        rc = mesh_group(m, k->name, &k->axes, gs, equal_groups, &k->g, &gh);
        k->d.extra_hash = gh;
    }
    k->d.op = op;
    k->d.mesh = m->id;
    memcpy(k->d.axes, k->axes.text, sizeof k->d.axes < sizeof k->axes.text ? sizeof k->d.axes
                                                                            : sizeof k->axes.text);
    if (!rc && gs)
        groups_text(gs, k->d.groups, sizeof k->d.groups);
    return rc;
}

void coll_describe(struct coll *k, const shmesh_array *in, const shmesh_array *out)
{
    if (in) {
        k->d.dtype = (uint32_t)in->dtype;
        k->d.ndim = in->ndim;
        /* Only the used dimensions: the rest of a caller's shape may be junk. */
        memcpy(k->d.shape, in->shape, sizeof *in->shape * (size_t)in->ndim);
    }
    if (out) {
        k->d.out_dtype = (uint32_t)out->dtype;
        k->d.out_ndim = out->ndim;
        memcpy(k->d.out_shape, out->shape, sizeof *out->shape * (size_t)out->ndim);
    }
}

int coll_arrays(struct coll *k, const shmesh_array *in, const char *in_name,
                const shmesh_array *out, const char *out_name, uint64_t *n_in, uint64_t *n_out)
{
    int rc = array_check(k->c, k->name, in_name, in, n_in);
    return rc ? rc : array_check(k->c, k->name, out_name, out, n_out);
}

int coll_start(struct coll *k, const shmesh_array *in, const shmesh_array *out)
{
    int rc = sync_begin(k->c);
    if (!rc)
        coll_describe(k, in, out);
    return rc;
}

struct xchg coll_xchg(const struct coll *k)
{
    return (struct xchg){.c = k->c, .g = k->g};
}

int coll_no_overlap(struct coll *k, const void *in, uint64_t in_bytes, const void *out,
                    uint64_t out_bytes, bool same_allowed)
{
    const unsigned char *a = in, *b = out;
    if (!in_bytes || !out_bytes)
        return 0;
    if (same_allowed && a == b && in_bytes == out_bytes)
        return 0;
    if (a < b + out_bytes && b < a + in_bytes)
        return ctx_fail(k->c, SHMESH_ERR_INVALID,
                        "%s: in and out overlap%s", k->name,
                        same_allowed ? " (only the very same buffer is allowed)" : "");
    return 0;
}

uint64_t blocks_whole(const struct xchg *x, int from, int to)
{
    return ((const struct blocks *)x->op)->in_bytes;
}

uint64_t blocks_one(const struct xchg *x, int from, int to)
{
    return ((const struct blocks *)x->op)->blk_bytes;
}

void blocks_copy_input(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct blocks *b = x->op;
    memcpy(dst, (const unsigned char *)b->in->data + off, len);
}

void blocks_pack(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct blocks *b = x->op;
    struct box bx;
    box_slab(&bx, b->in, b->in_dim, (int64_t)to * b->in_blk, b->in_blk);
    box_read(&bx, b->in->data, off / b->esz, len / b->esz, dst);
}

/* The block's row-major order is the same on both sides (for all_to_all:
 * untiled, the input block lacks split_axis and the output block lacks
 * concat_axis, and those shapes agree; tiled, both have the chunk's shape). */
void blocks_recv(const struct xchg *x, int from, uint64_t off, const void *src, uint64_t len)
{
    const struct blocks *b = x->op;
    struct box bx;
    box_slab(&bx, b->out, b->out_dim, (int64_t)from * b->out_blk, b->out_blk);
    box_write(&bx, b->out->data, off / b->esz, len / b->esz, src);
}
