/* Zero copy: every member's buffers lie in the shared heap, mapped in every
 * process, so members read (and reductions write) them in place. */
#include "core/context.h"
#include "paths/state.h"
#include "paths/zero_copy.h"
#include "paths/peer.h"

static bool zc_candidate(const struct call *k)
{
    /* Transfers' rows are read through process_vm_readv only. */
    return peer_flow(k) && k->f.kind != FLOW_TRANSFERS && k->size >= paths_of(k->c)->zc_min;
}

/* Inputs mapped everywhere; whole-array reductions write every output too. */
static bool zc_eligible(const struct call *k)
{
    bool outputs = flow_allreduce(&k->f);
    for (int q = 0; q < k->g.n; q++)
        if ((k->f.in_bytes && !k->s->zin[q]) || (outputs && k->f.out_bytes && !k->s->zout[q]))
            return false;
    return true;
}

/* What zc_eligible asks of every member, not met by this one. */
static bool zc_ruled_out(const struct call *k)
{
    return (k->f.in_bytes && k->in_kind != MEM_HEAP) ||
           (flow_allreduce(&k->f) && k->f.out_bytes && k->out_kind != MEM_HEAP);
}

static int zc_step(struct call *k) { return peer_step(k, &peer_mapped); }

const struct path path_zero_copy = {
    .name = "zero-copy",
    .kinds = MEM_HEAP,
    .handshake = true,
    .in_place = true,
    .candidate = zc_candidate,
    .eligible = zc_eligible,
    .ruled_out = zc_ruled_out,
    .step = zc_step,
};
