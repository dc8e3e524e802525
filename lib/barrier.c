#include "internal.h"

int shmesh_barrier(shmesh_ctx *c)
{
    int rc = sync_enter(c, "shmesh_barrier");
    if (!rc)
        rc = sync_begin(c);
    if (rc)
        return rc;
    struct seg_sig sig = {.op = SIG_OP_BARRIER, .call = c->calls};
    return sync_phase(c, &sig);
}
