/* shmesh_op_count, shmesh_op_get: the op table (ops/optable.h) as the
 * public shmesh_op_info, for bindings and tools.
 *
 * Two things are not (yet) columns of the table and are kept here, one line
 * per op keyed by its ID: the shape of its public function and whether it
 * has an _async form.  An op of the table without its line here does not
 * compile (INFO_<ID> is then one token where the row needs two), and
 * tests/check_ops.py compares both against the library's exports. */
#include <stddef.h>

#include "ops/op.h"
#include "shmesh.h"

/*        ID                    sig          has_async */
#define INFO_BARRIER              WORLD,       1
#define INFO_WORLD_SUM            WORLD,       1
#define INFO_FINALIZE             WORLD,       0
#define INFO_MESH_CREATE          WORLD,       0
#define INFO_WORLD_GATHER         INTERNAL,    0
#define INFO_WORLD_BROADCAST      INTERNAL,    0
#define INFO_GLOBAL_ARRAY_GATHER  WORLD,       0
#define INFO_GLOBAL_ARRAY_SCATTER WORLD,       0
#define INFO_GLOBAL_ARRAY_RESHARD WORLD,       0
#define INFO_EFFECT_CREATE        WORLD,       0
#define INFO_CALLBACK             WORLD,       0
#define INFO_PSUM                 REDUCTION,   1
#define INFO_PMAX                 REDUCTION,   1
#define INFO_PMIN                 REDUCTION,   1
#define INFO_PMEAN                REDUCTION,   1
#define INFO_PARGMAX              REDUCTION,   1
#define INFO_PARGMIN              REDUCTION,   1
#define INFO_ALL_GATHER           AXIS_TILED,  1
#define INFO_PSUM_SCATTER         AXIS_TILED,  1
#define INFO_ALL_TO_ALL           ALL_TO_ALL,  1
#define INFO_PSWAPAXES            AXIS,        1
#define INFO_RAGGED_ALL_TO_ALL    RAGGED,      1
#define INFO_PPERMUTE             PPERMUTE,    1
#define INFO_PSHUFFLE             PSHUFFLE,    1
#define INFO_PBROADCAST           PBROADCAST,  1

#define INFO_ROW(...) INFO_ROW_(__VA_ARGS__)
#define INFO_ROW_(ID, nm, scope, bus, bool_in, params, sig, has_async)                        \
    [OP_##ID - 1] = {#nm, OP_##ID, SHMESH_OP_##scope, SHMESH_OP_SIG_##sig, has_async, bool_in, \
                     SHMESH_OP_BUS_##bus, params},
#define INFO_OP(ID, nm, scope, bus, bool_in, params)                                        \
    INFO_ROW(ID, nm, scope, bus, bool_in, params, INFO_##ID)

static const shmesh_op_info op_info[OP_COUNT - 1] = {SHMESH_OPS(INFO_OP)};

int shmesh_op_count(void) { return OP_COUNT - 1; }

const shmesh_op_info *shmesh_op_get(int i)
{
    return i >= 0 && i < OP_COUNT - 1 ? &op_info[i] : NULL;
}
