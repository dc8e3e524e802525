/* Effects and host callbacks (shmesh.h, docs/effects.md).
 *
 * Within a rank the dispatcher already runs work in dispatch order, so an
 * effect's executions there are in program order.  What effects add is the
 * order across ranks.  A callback dispatched collectively (placement ALL or
 * a device) is program point k of its effect, and a collective call of its
 * own: a data-less step among every rank whose description (effect, kind,
 * point, placement) is compared as any call's, so no rank's part runs
 * before every rank announced the same callback, and ranks that dispatched
 * different ones get SHMESH_ERR_MISMATCH naming both.  Every rank's dispatcher
 * is in order, so a rank that announced point k has finished its part of
 * every earlier point: that step is the ORDERED_SHARDABLE rule.  When its
 * part is over the rank publishes k in its word for the effect (seg_ctrl's
 * effect_point) and rings its progress bell;
 *   - placed on another rank's device: the rank waits until that rank's
 *     word shows k (its token is done when the owner ran it);
 *   - ORDERED may not span several devices (refused at dispatch, alike on
 *     every rank);
 *   - shmesh_effects_barrier waits for every rank's word to show the
 *     effect's last point.
 * A peer's word is never trusted beyond what can be: no rank passes a
 * point before this rank announced it, so a word above the point this rank
 * waits for (the last it announced), or a peer that posts a later call's
 * window without having passed the point, is a corrupt segment
 * (SHMESH_ERR_BAD_SEGMENT). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/fail.h"
#include "core/hash.h"
#include "effects/effect.h"
#include "effects/state.h"
#include "engine/dispatch.h"
#include "engine/call.h"
#include "engine/state.h"
#include "mesh/device.h"
#include "ops/ops.h"
#include "engine/status.h"
#include "trace/trace.h"

_Static_assert(SHMESH_MAX_EFFECTS + 1 == SEG_EFFECT_SLOTS, "an effect slot per effect, and one");
_Static_assert(SHMESH_MAX_EFFECT_NAME < SEG_EFFECT_NAME, "an effect's name fits the status");
#define PLAIN_SLOT SHMESH_MAX_EFFECTS /* callbacks without an effect */

struct shmesh_effect {
    shmesh_ctx *c;
    int id; /* its slot */
    shmesh_effect_kind kind;
    char name[SHMESH_MAX_EFFECT_NAME + 1];
    uint64_t points;    /* collective dispatches so far */
    uint64_t last_seq;  /* the dispatch position of its last dispatch: its token */
    uint64_t last_call; /* the call number its last point took (set when it ran) */
};

/* An effect's name for descriptions and messages ("" for none). */
static const char *name_of(const shmesh_effect *e) { return e ? e->name : ""; }

static void describe(struct call_desc *d, enum call_op op, const char *name, int64_t p0,
                     int64_t p1, int64_t p2)
{
    call_desc_clear(d);
    d->op = op;
    d->mesh = -1;
    d->param[0] = p0;
    d->param[1] = p1;
    d->param[2] = p2;
    snprintf(d->axes, sizeof d->axes, "%s", name);
    d->extra_hash = hash_bytes(name, strlen(name), op);
}

int shmesh_effect_create(shmesh_ctx *c, const char *name, shmesh_effect_kind kind,
                         shmesh_effect **out)
{
    if (out)
        *out = NULL;
    struct call k;
    int rc = call_world_step(&k, c, OP_EFFECT_CREATE);
    size_t len = name ? strlen(name) : 0;
    if (!rc && c->job)
        rc = ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_effect_create: effects in a job of "
                      "several nodes are not built yet (docs/multinode.md)");
    if (rc)
        return call_finish(&k, rc);
    if (!out || !name || len < 1 || len > SHMESH_MAX_EFFECT_NAME)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_INVALID,
                                        "shmesh_effect_create: expected a name of 1 to %d "
                                        "characters and a place for the effect, got %s%.40s%s "
                                        "(%zu characters)%s",
                                        SHMESH_MAX_EFFECT_NAME, name ? "\"" : "",
                                        name ? name : "NULL", name && len > 40 ? "...\"" :
                                        name ? "\"" : "", len,
                                        out ? "" : " and out NULL"));
    for (size_t i = 0; i < len; i++)
        if (name[i] <= ' ' || name[i] > '~')
            return call_finish(&k, ctx_fail(c, SHMESH_ERR_INVALID,
                                            "shmesh_effect_create: the name must be printable "
                                            "ASCII without spaces, got byte 0x%02x at %zu",
                                            (unsigned char)name[i], i));
    if ((unsigned)kind > SHMESH_EFFECT_ORDERED_SHARDABLE)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_INVALID,
                                        "shmesh_effect_create: kind must be "
                                        "SHMESH_EFFECT_UNORDERED (0), _ORDERED (1) or "
                                        "_ORDERED_SHARDABLE (2), got %d",
                                        (int)kind));
    if (effects_of(c)->neffects == SHMESH_MAX_EFFECTS)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_INVALID,
                                        "shmesh_effect_create: a context has at most %d "
                                        "effects, and \"%s\" would be one more",
                                        SHMESH_MAX_EFFECTS, name));
    shmesh_effect *e = calloc(1, sizeof *e);
    if (!e)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_NOMEM,
                                        "shmesh_effect_create: out of memory"));
    *e = (shmesh_effect){.c = c, .id = effects_of(c)->neffects, .kind = kind};
    memcpy(e->name, name, len + 1);
    /* Ranks compare names and kinds, as they compare any collective call. */
    describe(&k.d, OP_EFFECT_CREATE, name, kind, 0, 0);
    rc = call_finish(&k, 0);
    if (rc) {
        free(e);
        return rc;
    }
    struct effects_state *effects = effects_of(c);
    effects->effects[effects->neffects++] = e;
    *out = e;
    return 0;
}

void effects_free(shmesh_ctx *c)
{
    struct effects_state *effects = effects_of(c);
    for (int i = 0; i < effects->neffects; i++)
        free(effects->effects[i]);
    effects->neffects = 0;
}

const char *shmesh_effect_name(const shmesh_effect *e) { return e ? e->name : ""; }

shmesh_effect_kind shmesh_effect_kind_of(const shmesh_effect *e)
{
    return e ? e->kind : SHMESH_EFFECT_UNORDERED;
}

shmesh_token shmesh_effect_token(const shmesh_effect *e)
{
    if (!e || !e->last_seq)
        return (shmesh_token){NULL, 0};
    return (shmesh_token){e->c, e->last_seq};
}

/* ---- Waiting for a peer's program point ------------------------------ */

struct point_wait {
    shmesh_ctx *c;
    int q, slot;
    uint64_t point, call; /* the point awaited, and the call number it took */
    uint64_t most;        /* the most q can have passed: what this rank announced */
    uint64_t seen, progress; /* what was read, for a message */
};

static int point_ready(void *arg)
{
    struct point_wait *pw = arg;
    const struct seg_ctrl *ctl = seg_ctrl(pw->c->seg, pw->q);
    /* Progress first: q stores the point before it posts a later window. */
    uint64_t p = atomic_load_explicit(&ctl->progress.value, memory_order_acquire);
    uint64_t v = atomic_load_explicit(&ctl->effect_point[pw->slot], memory_order_acquire);
    pw->seen = v;
    pw->progress = p;
    if (v > pw->most)
        return -EOVERFLOW;
    if (v >= pw->point)
        return 1;
    return (p >> 32) > pw->call ? -EPROTO : 0;
}

/* Waits until rank q passed `point` of effect e (slot `slot`; NULL: the
 * callbacks without one), which took call number `call` everywhere and is
 * the last point of e this rank announced. */
static int wait_point(shmesh_ctx *c, struct seg_waiter *w, const char *fn, int q,
                      const shmesh_effect *e, int slot, uint64_t point, uint64_t call)
{
    struct point_wait pw = {c, q, slot, point, call, point, 0, 0};
    const char *name = name_of(e);
    int culprit = q;
    status_block_point(c, q, call, point, name);
    int rc = seg_wait_until(w, &seg_ctrl(c->seg, q)->progress, point_ready, &pw, q, &culprit);
    status_idle(c);
    if (!rc)
        return 0;
    char what[SHMESH_MAX_EFFECT_NAME + 64]; /* the effect's whole name, never cut */
    snprintf(what, sizeof what, "point %" PRIu64 " of effect \"%s\"", point,
             e ? name : "(none)");
    if (rc == -EOVERFLOW)
        return fail_corrupt(c, fn, call, q,
                            "rank %d's word for %s reads %" PRIu64 " (no rank passes a point "
                            "before every rank announced it, and this rank has announced the "
                            "effect's points up to %" PRIu64 ")",
                            q, what, pw.seen, pw.most);
    if (rc == -EPROTO)
        return fail_corrupt(c, fn, call, q,
                            "rank %d's progress reads call #%" PRIu64 " window %" PRIu64
                            " while its word for %s (call #%" PRIu64 ") reads %" PRIu64
                            " (a rank passes a point before it goes on to later calls)",
                            q, pw.progress >> 32, pw.progress & 0xffffffffu, what, call,
                            pw.seen);
    char waited[sizeof what + 32];
    snprintf(waited, sizeof waited, "rank %d to pass %s", q, what);
    return fail_wait(c, fn, call, rc, culprit, waited);
}

/* ---- Callbacks ---------------------------------------------------------- */

struct callback_work {
    struct work w;
    shmesh_ctx *c;
    shmesh_effect *e; /* NULL: none */
    int placement;
    shmesh_callback_fn fn;
    void *arg;
    uint64_t point; /* program point (collective placements), from 1 */
};

static void run_here(const struct callback_work *cw)
{
    shmesh_ctx *c = cw->c;
    const shmesh_ctx *was = ctx_in_callback;
    ctx_in_callback = c;
    if (cw->placement >= 0)
        cw->fn(cw->arg, cw->placement);
    else
        for (int l = 0; l < c->local_devices; l++)
            cw->fn(cw->arg, c->job_rank * c->local_devices + l); /* device ids */
    ctx_in_callback = was;
}

static int callback_run(struct work *w)
{
    struct callback_work *cw = (struct callback_work *)w;
    shmesh_ctx *c = cw->c;
    if (cw->placement == SHMESH_PLACE_SELF) {
        run_here(cw);
        return 0;
    }
    shmesh_effect *e = cw->e;
    int slot = e ? e->id : PLAIN_SLOT;
    /* Its step among every rank: compared there, and passed only once
     * every rank announced it (and so finished every earlier point). */
    struct call k;
    int rc = call_world_step(&k, c, OP_CALLBACK);
    if (!rc)
        describe(&k.d, OP_CALLBACK, name_of(e), (int64_t)cw->point, cw->placement,
                 e ? (int64_t)e->kind : -1);
    if ((rc = call_finish(&k, rc)))
        return rc;
    uint64_t call = k.seq;
    int owner = cw->placement >= 0 ? device_of(c, cw->placement).rank : c->rank;
    if (owner == c->rank) {
        status_callback(c, call);
        run_here(cw);
        status_idle(c);
    } else if ((rc = wait_point(c, &c->waiter, "shmesh_callback", owner, e, slot, cw->point,
                                call))) {
        return rc;
    }
    atomic_store_explicit(&c->me->effect_point[slot], cw->point, memory_order_release);
    seg_progress_ring(&c->me->progress);
    if (e)
        e->last_call = call;
    return 0;
}

static void callback_drop(struct work *w) { free(w); }

int shmesh_callback(shmesh_ctx *c, shmesh_effect *e, int placement, shmesh_callback_fn fn,
                    void *arg, shmesh_token *token)
{
    if (token)
        *token = (shmesh_token){NULL, 0};
    int rc = ctx_enter(c, "shmesh_callback");
    if (rc)
        return rc;
    int devices = device_count(c);
    int span = placement == SHMESH_PLACE_ALL    ? devices
               : placement == SHMESH_PLACE_SELF ? c->local_devices
                                                : 1;
    if (c->job && placement != SHMESH_PLACE_SELF)
        rc = ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_callback: callbacks placed on other "
                      "devices than this rank's (SHMESH_PLACE_SELF) in a job of several nodes "
                      "are not built yet (docs/multinode.md)");
    else if (!fn)
        rc = ctx_fail(c, SHMESH_ERR_INVALID, "shmesh_callback: fn is NULL");
    else if (e && e->c != c)
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "shmesh_callback: effect \"%s\" belongs to another context", e->name);
    else if (placement < SHMESH_PLACE_SELF || placement >= devices)
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "shmesh_callback: placement must be a device id (0..%d), "
                      "SHMESH_PLACE_ALL (-1) or SHMESH_PLACE_SELF (-2), got %d",
                      devices - 1, placement);
    else if (e && e->kind == SHMESH_EFFECT_ORDERED && span > 1)
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "shmesh_callback: effect \"%s\" is ordered, and work placed on %d "
                      "devices (%s) has no total order: place it on one device (a device id, "
                      "as JAX's maximal sharding) or register the effect as "
                      "SHMESH_EFFECT_ORDERED_SHARDABLE",
                      e->name, span,
                      placement == SHMESH_PLACE_ALL ? "SHMESH_PLACE_ALL" : "this rank's");
    struct callback_work *cw = rc ? NULL : malloc(sizeof *cw);
    if (!rc && !cw)
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "shmesh_callback: out of memory");
    if (rc) {
        ctx_leave(c);
        return rc;
    }
    *cw = (struct callback_work){.w = {.run = callback_run, .drop = callback_drop, .thread_only = true},
                                 .c = c, .e = e, .placement = placement, .fn = fn, .arg = arg};
    if (placement != SHMESH_PLACE_SELF)
        cw->point = ++*(e ? &e->points : &effects_of(c)->plain_points);
    shmesh_token spare, *t = token ? token : &spare; /* a callback is always dispatched */
    rc = dispatch_submit(c, &cw->w, t);
    if (!rc && e)
        e->last_seq = t->seq;
    ctx_leave(c);
    return rc;
}

/* ---- jax.barrier ---------------------------------------------------------- */

int shmesh_effects_barrier(shmesh_ctx *c)
{
    int rc = ctx_enter(c, "shmesh_effects_barrier");
    if (rc)
        return rc;
    const struct effects_state *effects = effects_of(c);
    uint64_t last = shmesh_runtime_token(c).seq;
    for (int i = 0; i < effects->neffects; i++)
        if (effects->effects[i]->last_seq > last)
            last = effects->effects[i]->last_seq;
    if (last && engine_of(c)->dispatcher)
        rc = dispatch_wait(c, last);
    /* Sharded tokens: every rank's part of each ordered effect's last point
     * (the last this rank announced: no rank can be past it). */
    for (int i = 0; i < effects->neffects && !rc; i++) {
        const shmesh_effect *e = effects->effects[i];
        if (e->kind == SHMESH_EFFECT_UNORDERED || !e->points)
            continue;
        struct seg_waiter *w;
        if ((rc = dispatch_waiter(c, "shmesh_effects_barrier", &w)))
            break;
        for (int q = 0; q < c->world && !rc; q++)
            if (q != c->rank)
                rc = wait_point(c, w, "shmesh_effects_barrier", q, e, e->id, e->points,
                                e->last_call);
    }
    ctx_leave(c);
    return rc;
}
