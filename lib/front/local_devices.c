/* Several devices per rank (see devices.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/fail.h"
#include "engine/dispatch.h"
#include "front/devices_exchange.h"
#include "front/devices_transfers.h"
#include "front/local_devices.h"
#include "front/state.h"
#include "mesh/device.h"
#include "ops/ops.h"
#include "paths/peer.h"

struct call *devices_calls(const shmesh_mesh *m)
{
    return calloc((size_t)m->nlocal, sizeof(struct call));
}

/* The work of one collective on several local devices: its calls, and
 * what it needs of the mesh (which may be freed once it is dispatched). */
struct devices_work {
    struct work w;
    shmesh_ctx *c;
    struct call *ks;
    int prepared;      /* calls to release */
    int nlocal;
    int per;           /* the mesh's devices (positions) per rank */
    bool process_local;
    /* Every group of the call lies inside one rank (a local mesh, a job of
     * one rank, or axes that never leave a rank: a batched axis alone): no
     * rank needs another's inputs, and none gathers them. */
    bool alone;
    /* A reduction or move whose groups leave ranks: only what its devices
     * need, instead of the gather (front/devices_exchange.h); NULL: the
     * gather. */
    struct dev_groups *groups;
    int ids[];         /* the local devices' ids, in mesh order */
};

/* Where device `id`'s input sits in the gathered buffer: by device id, or on
 * a local mesh (every device here) by local device. */
static uint64_t slot_of(const struct devices_work *dw, int id)
{
    return dw->alone ? (uint64_t)(id % dw->per) : (uint64_t)id;
}

/* Every local device's call must be the same call (its arrays' shapes and
 * dtypes, its parameters): they share one exchange. */
static int same_calls(const struct devices_work *dw)
{
    const struct call *ks = dw->ks;
    uint64_t h = call_hash(&ks[0].d);
    for (int l = 1; l < dw->nlocal; l++) {
        if (call_hash(&ks[l].d) == h)
            continue;
        char a[300], b[300];
        call_describe(&ks[0].d, 0, a, sizeof a);
        call_describe(&ks[l].d, 0, b, sizeof b);
        return ctx_fail(dw->c, SHMESH_ERR_INVALID,
                        "the arrays of local device %d (device %d) must match local device "
                        "0's: got %s and %s",
                        l, dw->ids[l], b, a);
    }
    return 0;
}

static int run(struct work *w)
{
    struct devices_work *dw = (struct devices_work *)w;
    shmesh_ctx *c = dw->c;
    struct call *ks = dw->ks, *k0 = &ks[0];
    int rc = same_calls(dw);
    if (rc)
        return rc;
    if (k0->then && !k0->local)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s takes one device per rank, but this rank holds %d devices of this "
                        "mesh%s",
                        k0->name, dw->nlocal, dw->process_local ? " (a local mesh)" : "");
    if (dw->groups && dev_groups_apart(ks, dw->nlocal))
        return dev_groups_run(c, dw->groups, ks, dw->ids, dw->nlocal);
    if (k0->local && !dw->alone && dev_groups_apart(ks, dw->nlocal))
        return dev_transfers_run(c, ks, dw->ids, dw->nlocal, dw->per);
    /* Every device's input, by slot: this rank's own at its devices' slots
     * (all of them on a local mesh, or with one rank), the others' from
     * the gather, which puts rank r's devices at r * per.  An op that
     * publishes parameters puts them before its input. */
    uint64_t params = k0->local ? k0->pub_bytes : 0, each = params + k0->f.in_bytes;
    uint64_t per = (uint64_t)dw->per;
    bool alone = dw->alone;
    uint64_t slots = alone ? per : (uint64_t)c->world * per;
    uint64_t need = (alone ? slots : slots + per) * each;
    if (need > front_of(c)->dev_buf_bytes) {
        unsigned char *b = need <= SIZE_MAX ? realloc(front_of(c)->dev_buf, (size_t)need) : NULL;
        if (!b)
            return ctx_fail(c, SHMESH_ERR_NOMEM,
                            "%s: out of memory for %" PRIu64 " inputs of %" PRIu64 " bytes",
                            k0->name, slots, each);
        front_of(c)->dev_buf = b;
        front_of(c)->dev_buf_bytes = (size_t)need;
    }
    unsigned char *all = front_of(c)->dev_buf, *mine = alone ? all : all + slots * each;
    for (int l = 0; l < dw->nlocal; l++) {
        unsigned char *at = mine + (dw->ids[l] % per) * each;
        if (ks[l].local)
            ks[l].pub_pack(&ks[l], at);
        if (ks[l].f.in_bytes)
            memcpy(at + params, ks[l].f.in.data, ks[l].f.in_bytes);
    }
    if (!alone && (rc = op_world_gather(c, k0->name, &k0->d, mine, per * each, all, -1)))
        return rc;
    for (int l = 0; l < dw->nlocal; l++) {
        struct call *k = &ks[l];
        for (int q = 0; q < k->g.n; q++)
            k->s->zin[q] = all + slot_of(dw, k->g.ranks[q] * (int)per + k->g.locals[q]) * each;
    }
    /* Every device's checks before any writes: a call refused for one
     * device writes nothing for any. */
    for (int l = 0; l < dw->nlocal && !rc; l++)
        if (ks[l].local)
            rc = ks[l].local(&ks[l], false);
    for (int l = 0; l < dw->nlocal && !rc; l++) {
        struct call *k = &ks[l];
        if (!k->local) {
            rc = peer_local(k);
            continue;
        }
        for (int q = 0; q < k->g.n; q++) /* each member's input */
            k->s->zin[q] += params;
        rc = k->local(k, true);
    }
    return rc;
}

static void drop(struct work *w)
{
    struct devices_work *dw = (struct devices_work *)w;
    for (int l = 0; l < dw->prepared; l++)
        if (dw->ks[l].c)
            call_release(&dw->ks[l]);
    free(dw->ks);
    dev_groups_free(dw->groups);
    free(dw);
}

int devices_finish(shmesh_mesh *m, const shmesh_groups *gs, struct call *ks, int prepared, int rc,
                   shmesh_token *async)
{
    shmesh_ctx *c = NULL;
    for (int l = 0; ks && l < prepared; l++)
        if (ks[l].c)
            c = ks[l].c;
    struct devices_work *dw = NULL;
    if (!rc && ks && c) {
        dw = malloc(sizeof *dw + (size_t)m->nlocal * sizeof(int));
        if (!dw)
            rc = ctx_fail(c, SHMESH_ERR_NOMEM, "out of memory for %d local devices' calls",
                          m->nlocal);
    }
    if (!ks && m && m->ctx)
        rc = ctx_fail(m->ctx, SHMESH_ERR_NOMEM, "out of memory for %d local devices' calls",
                      m->nlocal);
    else if (!ks)
        rc = SHMESH_ERR_NOMEM;
    if (!dw) { /* refused: nothing runs */
        for (int l = 0; ks && l < prepared; l++)
            if (ks[l].c)
                call_release(&ks[l]);
        free(ks);
        if (c)
            ctx_leave(c);
        return rc;
    }
    *dw = (struct devices_work){.w = {.run = run, .drop = drop}, .c = c, .ks = ks,
                                .prepared = prepared, .nlocal = m->nlocal, .per = m->per,
                                .process_local = m->process_local};
    dw->alone = m->process_local || c->world == 1 ||
                mesh_axes_in_rank(m, ks[0].d.naxes, ks[0].d.axis);
    dw->groups = dw->alone ? NULL : dev_groups_make(m, &ks[0], gs);
    for (int l = 0; l < m->nlocal; l++)
        dw->ids[l] = m->ids[m->local_pos[l]];
    if (dispatch_wanted(c, async))
        rc = dispatch_submit(c, &dw->w, async);
    else {
        rc = run(&dw->w);
        drop(&dw->w);
    }
    ctx_leave(c);
    return rc;
}
