/* World-wide calls: barrier, the in-place world_sum, the data-less step
 * that finalize and mesh creation take, and the gather and broadcast of
 * bytes that the layers above the collectives move data with. */
#include <inttypes.h>
#include <stdlib.h>

#include "core/context.h"
#include "core/dtype.h"
#include "ops/ops.h"

OP_PREPARE_INLINE int op_barrier_prepare(struct call *k, const struct op_args *a, int l)
{
    (void)l;
    return call_world_step(k, a->c, OP_BARRIER);
}

OP_PREPARE_INLINE int op_world_sum_prepare(struct call *k, const struct op_args *args, int l)
{
    (void)l;
    shmesh_ctx *c = args->c;
    void *buf = args->buf;
    size_t count = args->count;
    shmesh_dtype dtype = args->dtype;
    int rc = call_init(k, c, OP_WORLD_SUM);
    if (rc)
        return rc;
    if (!dtype_valid(dtype))
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: dtype must be a shmesh_dtype below %d, got %d",
                        SHMESH_DTYPE_COUNT, (int)dtype);
    if (dtype == SHMESH_BOOL)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: cannot sum bool in place (a sum of booleans is int32, "
                        "as in JAX): pass an int32 buffer");
    size_t esz = dtype_size(dtype);
    if (count > SIZE_MAX / esz)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: count %zu of %s overflows the address space", count,
                        shmesh_dtype_name(dtype));
    if (!buf && count)
        return ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_world_sum: buf is NULL but count is %zu",
                        count);
    call_group_world(k);
    /* In place: input and output are the same one-dimensional buffer. */
    shmesh_array one = {.data = buf, .dtype = dtype, .ndim = 1, .shape = {(int64_t)count}};
    flow_init(&k->f, FLOW_REDUCE, &one, &one);
    k->f.red = RED_SUM;
    k->f.mean_n = 1;
    k->d.dtype = k->d.out_dtype = (uint32_t)dtype;
    k->d.param[0] = (int64_t)count;
    return call_buffers(k);
}


/* A world-wide move of bytes (the job's ranks: in a job of several nodes
 * the world's step is the job's, net/job.h): `in` (in_n bytes) and `out` (world rows of
 * out_n bytes, or out_n bytes) on every rank; from `root` to every rank,
 * or (root < 0) every rank's to every rank, or (dest not NULL) every rank's
 * to rank dest[r] only (out_rows rows on the ranks that receive, none on
 * the others). */
static int world_move(shmesh_ctx *c, enum call_op op, const char *name, const struct call_desc *d,
                      const void *in, uint64_t in_n, void *out, uint64_t out_rows, uint64_t out_n,
                      int root, const int *dest)
{
    struct call k;
    int rc = call_init(&k, c, op);
    if (rc)
        return call_finish(&k, rc);
    k.name = name;
    call_group_world(&k);
    shmesh_array a = {.data = (void *)in, .dtype = SHMESH_UINT8, .ndim = 1, .shape = {(int64_t)in_n}};
    shmesh_array o = {.data = out, .dtype = SHMESH_UINT8, .ndim = 2, .shape = {(int64_t)out_rows, (int64_t)out_n}};
    flow_init(&k.f, FLOW_MOVE, &a, &o);
    if (root >= 0) {
        k.f.source = root;
    } else {
        k.f.out_dim = 0; /* rank q's bytes land in row q */
        k.f.out_blk = 1;
        k.f.dest = dest;
    }
    if (d) { /* the caller's call is what ranks compare and messages name */
        k.d = *d;
    } else {
        k.d.dtype = k.d.out_dtype = SHMESH_UINT8;
        k.d.param[0] = (int64_t)in_n;
        k.d.param[1] = root;
    }
    return call_finish(&k, call_buffers(&k));
}

int op_world_gather(shmesh_ctx *c, const char *name, const struct call_desc *d, const void *in,
                    uint64_t bytes, void *out, int root)
{
    uint64_t rows = c ? (uint64_t)c->job_size : 0;
    if (!c || root < 0)
        return world_move(c, OP_WORLD_GATHER, name, d, in, bytes, out, rows, bytes, -1, NULL);
    if (root >= c->job_size)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: root must be a rank (0..%d), got %d", name,
                        c->job_size - 1, root);
    /* Every rank's bytes to the root; the others' output has no rows. */
    int *dest = malloc(sizeof *dest * (size_t)c->job_size);
    if (!dest)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory", name);
    for (int r = 0; r < c->job_size; r++)
        dest[r] = root;
    bool mine = c->job_rank == root;
    int rc = world_move(c, OP_WORLD_GATHER, name, d, in, bytes, mine ? out : NULL,
                        mine ? rows : 0, bytes, -1, dest);
    free(dest);
    return rc;
}

int op_world_transfers(shmesh_ctx *c, const char *name, const struct call_desc *d,
                       const struct transfers *st, void *state, const uint64_t *dir,
                       int64_t ndir)
{
    struct call k;
    int rc = call_init(&k, c, OP_WORLD_GATHER);
    if (rc)
        return call_finish(&k, rc);
    k.name = name;
    call_group_world(&k);
    /* The directory is the flow's input: its address is what the handshake
     * publishes. */
    shmesh_array in = {.data = (void *)dir, .dtype = SHMESH_UINT64, .ndim = 1, .shape = {ndir}};
    flow_init(&k.f, FLOW_TRANSFERS, st->rows ? &in : NULL, NULL);
    k.f.transfers = st;
    k.op_state = state; /* the caller's: no op_free */
    k.d = *d;
    return call_finish(&k, call_buffers(&k));
}

int op_world_broadcast(shmesh_ctx *c, const char *name, const struct call_desc *d, int root,
                       void *buf, uint64_t bytes)
{
    if (c && (root < 0 || root >= c->job_size))
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: root must be a rank (0..%d), got %d", name,
                        c->job_size - 1, root);
    if (!c || c->job_rank != root)
        return world_move(c, OP_WORLD_BROADCAST, name, d, buf, bytes, buf, 1, bytes, root, NULL);
    /* The root's copy to itself would be a copy onto itself: it writes a
     * scratch output. */
    void *scratch = bytes ? malloc(bytes) : NULL;
    if (bytes && !scratch)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory for %" PRIu64 " bytes", name,
                        bytes);
    int rc = world_move(c, OP_WORLD_BROADCAST, name, d, buf, bytes, scratch, 1, bytes, root, NULL);
    free(scratch);
    return rc;
}
