/* Staged: every member's transfer through the slot buffers, one window at a
 * time (engine/exchange.c).  Always a candidate: the path of last resort. */
#include "engine/exchange.h"
#include "paths/staged.h"

static bool always(const struct call *k) { return true; }

static int staged_step(struct call *k)
{
    if (k->stage == 0) {
        xrun_start(k, &k->xr, flow_transfers(&k->f));
        k->stage = 1;
    }
    return xrun_step(k, &k->xr);
}

/* The exchange planned (stage 1) runs again from its first window. */
static void staged_replay(struct call *k) { xrun_rewind(&k->xr); }

const struct path path_staged = {
    .name = "staged",
    .kinds = MEM_HOST | MEM_HEAP,
    .candidate = always,
    .step = staged_step,
    .replay = staged_replay,
};
