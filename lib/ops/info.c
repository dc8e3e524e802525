/* shmesh_op_count, shmesh_op_get: the op table (optable.h) as the
 * public shmesh_op_info, for bindings and tools.
 * tests/check_ops.py compares the `sig` and `async` columns against the
 * library's exports. */
#include <stddef.h>

#include "engine/desc.h"
#include "shmesh.h"

#define INFO_OP(ID, nm, scope, bus, bool_in, params, prepare, batch, has_async, sig)        \
    [OP_##ID - 1] = {#nm, OP_##ID, SHMESH_OP_##scope, SHMESH_OP_SIG_##sig, has_async, bool_in, \
                     SHMESH_OP_BUS_##bus, params},

static const shmesh_op_info op_info[OP_COUNT - 1] = {SHMESH_OPS(INFO_OP)};

int shmesh_op_count(void) { return OP_COUNT - 1; }

const shmesh_op_info *shmesh_op_get(int i)
{
    return i >= 0 && i < OP_COUNT - 1 ? &op_info[i] : NULL;
}
