/* The non-blocking forms of the collectives: each is its blocking function
 * with the token's destination set, so the work it prepares is dispatched
 * to the stream instead of waited for (effects/stream.h). */
#include "effects/stream.h"

int shmesh_barrier_async(shmesh_ctx *c, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_barrier(c));
}

int shmesh_world_sum_async(shmesh_ctx *c, void *buf, size_t count, shmesh_dtype dtype,
                           shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_world_sum(c, buf, count, dtype));
}

#define REDUCTION_ASYNC(name)                                                                  \
    int shmesh_##name##_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,       \
                              const shmesh_array *in, shmesh_array *out, shmesh_token *t)      \
    {                                                                                          \
        STREAM_ASYNC(t, shmesh_##name(m, axes, gs, in, out));                                  \
    }

REDUCTION_ASYNC(psum)
REDUCTION_ASYNC(pmax)
REDUCTION_ASYNC(pmin)
REDUCTION_ASYNC(pmean)
REDUCTION_ASYNC(pargmax)
REDUCTION_ASYNC(pargmin)

int shmesh_all_gather_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                            bool tiled, const shmesh_array *in, shmesh_array *out,
                            shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_all_gather(m, axes, gs, axis, tiled, in, out));
}

int shmesh_psum_scatter_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                              int scatter_dimension, bool tiled, const shmesh_array *in,
                              shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_psum_scatter(m, axes, gs, scatter_dimension, tiled, in, out));
}

int shmesh_all_to_all_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                            int split_axis, int concat_axis, bool tiled, const shmesh_array *in,
                            shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_all_to_all(m, axes, gs, split_axis, concat_axis, tiled, in, out));
}

int shmesh_pswapaxes_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs, int axis,
                           const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_pswapaxes(m, axes, gs, axis, in, out));
}

int shmesh_ragged_all_to_all_async(shmesh_mesh *m, const char *axes, const shmesh_groups *gs,
                                   const shmesh_array *operand, shmesh_array *output,
                                   const shmesh_array *input_offsets,
                                   const shmesh_array *send_sizes,
                                   const shmesh_array *output_offsets,
                                   const shmesh_array *recv_sizes, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_ragged_all_to_all(m, axes, gs, operand, output, input_offsets,
                                             send_sizes, output_offsets, recv_sizes));
}

int shmesh_ppermute_async(shmesh_mesh *m, const char *axes, const int (*perm)[2], int npairs,
                          const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_ppermute(m, axes, perm, npairs, in, out));
}

int shmesh_pshuffle_async(shmesh_mesh *m, const char *axes, const int *perm,
                          const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_pshuffle(m, axes, perm, in, out));
}

int shmesh_pbroadcast_async(shmesh_mesh *m, const char *axes, int source,
                            const shmesh_array *in, shmesh_array *out, shmesh_token *t)
{
    STREAM_ASYNC(t, shmesh_pbroadcast(m, axes, source, in, out));
}
