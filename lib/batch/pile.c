/* Ragged arrays: the seed's piles, segment_sum, and ragged_all_to_all of
 * piles.  (Being written.) */
#include "core/error.h"
#include "shmesh.h"

int shmesh_pile_make(shmesh_pile *pile, const shmesh_array *data, int axis, int count,
                     int64_t *lengths)
{
    (void)pile, (void)data, (void)axis, (void)count, (void)lengths;
    init_error("shmesh_pile_make: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_pile_component(const shmesh_pile *pile, int i, shmesh_array *out)
{
    (void)pile, (void)i, (void)out;
    init_error("shmesh_pile_component: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_segment_sum(const shmesh_array *operand, int axis, int count,
                       const int64_t *segment_lens, shmesh_array *out)
{
    (void)operand, (void)axis, (void)count, (void)segment_lens, (void)out;
    init_error("shmesh_segment_sum: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_pile_sum(const shmesh_pile *pile, shmesh_array *out)
{
    (void)pile, (void)out;
    init_error("shmesh_pile_sum: not built yet");
    return SHMESH_ERR_INVALID;
}

int shmesh_ragged_all_to_all_pile(shmesh_mesh *mesh, const char *axes,
                                  const shmesh_groups *groups, const shmesh_pile *operand,
                                  shmesh_pile *output)
{
    (void)mesh, (void)axes, (void)groups, (void)operand, (void)output;
    init_error("shmesh_ragged_all_to_all_pile: not built yet");
    return SHMESH_ERR_INVALID;
}
