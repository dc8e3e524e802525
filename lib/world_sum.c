/* shmesh_world_sum: every rank copies a chunk into its slot buffer, one phase
 * makes all chunks visible, and each rank adds them in rank order.  Chunks
 * alternate between the two buffers of each slot (see sync_phase). */
#include <inttypes.h>
#include <string.h>

#include "internal.h"

int shmesh_world_sum(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype)
{
    int rc = sync_enter(c, "shmesh_world_sum");
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
    size_t esz = shmesh_dtype_size(dtype);
    if (count > SIZE_MAX / esz)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: count %zu of %s overflows the address space", count,
                        shmesh_dtype_name(dtype));
    if (!buf && count)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "shmesh_world_sum: buf is NULL but count is %zu", count);

    rc = sync_begin(c);
    if (rc)
        return rc;
    struct seg_sig sig = {.op = SIG_OP_WORLD_SUM, .dtype = (uint32_t)dtype, .count = count,
                          .call = c->calls};
    size_t chunk = (size_t)(c->seg->hdr->slot_bytes / esz);
    uint8_t *p = buf;
    size_t done = 0;
    do {
        size_t n = count - done < chunk ? count - done : chunk;
        int par = sync_next_parity(c);
        if (n)
            memcpy(seg_slot(c->seg, c->rank, par), p + done * esz, n * esz);
        rc = sync_phase(c, done == 0 ? &sig : NULL);
        if (rc)
            return rc;
        for (int j = 0; j < c->world; j++)
            c->srcs[j] = seg_slot(c->seg, j, par);
        if (n)
            reduce_sum(dtype, p + done * esz, c->srcs, c->world, n);
        done += n;
    } while (done < count);
    return 0;
}
