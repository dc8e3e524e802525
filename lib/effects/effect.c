/* Effects and host callbacks (shmesh.h, docs/effects.md).
 *
 * Within a rank the stream already runs work in dispatch order, so an
 * effect's executions there are in program order.  What effects add is the
 * order across ranks.  A callback dispatched collectively (placement ALL or
 * a device) is program point k of its effect: it takes a call number, as a
 * collective does, and when it is over the rank publishes k in its word for
 * the effect (seg_ctrl's effect_point) and rings its progress bell.
 *   - ORDERED_SHARDABLE: before its part of point k runs, a rank waits until
 *     every rank's word shows k-1;
 *   - placed on another rank's device: the rank waits until that rank's
 *     word shows k (its token is done when the owner ran it);
 *   - ORDERED may not span several devices (refused at dispatch, alike on
 *     every rank).
 * A rank waiting for a peer's point also watches the peer's windows: a
 * peer that posts a window of the point's call number or later without
 * having passed the point made a different call there (SHMESH_ERR_MISMATCH),
 * and a peer that finalized never will. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/fail.h"
#include "core/hash.h"
#include "effects/effect.h"
#include "effects/stream.h"
#include "engine/call.h"
#include "mesh/device.h"
#include "ops/ops.h"

_Static_assert(SHMESH_MAX_EFFECTS + 1 == SEG_EFFECT_SLOTS, "an effect slot per effect, and one");
#define PLAIN_SLOT SHMESH_MAX_EFFECTS /* callbacks without an effect */

struct shmesh_effect {
    shmesh_ctx *c;
    int id; /* its slot */
    shmesh_effect_kind kind;
    char name[SHMESH_MAX_EFFECT_NAME + 1];
    uint64_t points;    /* collective dispatches so far */
    int last_placement; /* the last one's */
    uint64_t last_seq;  /* the stream position of its last dispatch: its token */
    uint64_t last_call; /* the call number its last point took (set when it ran) */
};

static void describe(struct call_desc *d, enum call_op op, const char *name, int64_t p0,
                     int64_t p1)
{
    call_desc_clear(d);
    d->op = op;
    d->mesh = -1;
    d->param[0] = p0;
    d->param[1] = p1;
    snprintf(d->axes, sizeof d->axes, "%s", name);
    d->extra_hash = hash_bytes(name, strlen(name), op);
}

int shmesh_effect_create(shmesh_ctx *c, const char *name, shmesh_effect_kind kind,
                         shmesh_effect **out)
{
    if (out)
        *out = NULL;
    struct call k;
    int rc = call_init(&k, c, OP_EFFECT_CREATE);
    size_t len = name ? strlen(name) : 0;
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
    if (c->neffects == SHMESH_MAX_EFFECTS)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_INVALID,
                                        "shmesh_effect_create: a context has at most %d "
                                        "effects, and \"%s\" would be one more",
                                        SHMESH_MAX_EFFECTS, name));
    shmesh_effect *e = calloc(1, sizeof *e);
    if (!e)
        return call_finish(&k, ctx_fail(c, SHMESH_ERR_NOMEM,
                                        "shmesh_effect_create: out of memory"));
    *e = (shmesh_effect){.c = c, .id = c->neffects, .kind = kind};
    memcpy(e->name, name, len + 1);
    /* Ranks compare names and kinds, as they compare any collective call. */
    call_group_world(&k);
    flow_init(&k.f, FLOW_NONE, NULL, NULL);
    describe(&k.d, OP_EFFECT_CREATE, name, kind, 0);
    rc = call_finish(&k, 0);
    if (rc) {
        free(e);
        return rc;
    }
    c->effects[c->neffects++] = e;
    *out = e;
    return 0;
}

void effects_free(shmesh_ctx *c)
{
    for (int i = 0; i < c->neffects; i++)
        free(c->effects[i]);
    c->neffects = 0;
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
    uint64_t point, call;
};

static int point_ready(void *arg)
{
    const struct point_wait *pw = arg;
    const struct seg_ctrl *ctl = seg_ctrl(pw->c->seg, pw->q);
    /* Progress first: a window of a later call is posted after the point. */
    uint64_t p = atomic_load_explicit(&ctl->progress.value, memory_order_acquire);
    if (atomic_load_explicit(&ctl->effect_point[pw->slot], memory_order_acquire) >= pw->point)
        return 1;
    return (p >> 32) >= pw->call ? -EPROTO : 0;
}

/* The window of call `call` that rank q posted instead of the point, if
 * its slots still hold it: its description into *d. */
static bool posted_instead(shmesh_ctx *c, int q, uint64_t call, struct call_desc *d)
{
    for (int b = 0; b < 2; b++) {
        struct seg_slot_hdr *h = seg_slot(c->seg, q, b);
        if (atomic_load_explicit(&h->tag, memory_order_acquire) != call << 32)
            continue;
        memcpy(d, seg_call_desc(c->seg, h), sizeof *d);
        d->axes[sizeof d->axes - 1] = d->groups[sizeof d->groups - 1] = '\0';
        return true;
    }
    return false;
}

/* Waits until rank q passed `point` of the effect in `slot` (which took call
 * number `call` everywhere); `mine` describes it for messages. */
static int wait_point(shmesh_ctx *c, struct seg_waiter *w, const char *fn, int q, int slot,
                      uint64_t point, uint64_t call, const struct call_desc *mine)
{
    struct point_wait pw = {c, q, slot, point, call};
    int culprit = q;
    int rc = seg_wait_until(w, &seg_ctrl(c->seg, q)->progress, point_ready, &pw, q, &culprit);
    if (!rc)
        return 0;
    if (rc == -EPROTO) {
        struct call_desc theirs;
        return fail_mismatch(c, call, mine, q,
                             posted_instead(c, q, call, &theirs) ? &theirs : NULL);
    }
    char what[sizeof mine->axes + 64]; /* the effect's whole name, never cut */
    snprintf(what, sizeof what, "rank %d to pass point %" PRIu64 " of effect \"%s\"", q, point,
             mine->axes[0] ? mine->axes : "(none)");
    return fail_wait(c, fn, call, rc, culprit, what);
}

bool effect_call_of(shmesh_ctx *c, int r, uint64_t call, struct call_desc *d)
{
    const struct seg_ctrl *ctl = seg_ctrl(c->seg, r);
    if (atomic_load_explicit(&ctl->cb_call, memory_order_acquire) != call)
        return false;
    int slot = atomic_load_explicit(&ctl->cb_slot, memory_order_relaxed);
    /* Ranks register the same effects in the same order: ours names it. */
    const char *name = slot >= 0 && slot < c->neffects ? c->effects[slot]->name : "";
    describe(d, OP_CALLBACK, name,
             (int64_t)atomic_load_explicit(&ctl->cb_point, memory_order_relaxed),
             atomic_load_explicit(&ctl->cb_placement, memory_order_relaxed));
    return true;
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
            cw->fn(cw->arg, c->rank * c->local_devices + l);
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
    uint64_t call = ++c->calls; /* collective work: it has its place among calls */
    int rc = fail_if_aborted(c, "shmesh_callback", call);
    if (rc)
        return rc;
    shmesh_effect *e = cw->e;
    int slot = e ? e->id : PLAIN_SLOT;
    uint64_t *last_call = e ? &e->last_call : &c->plain_last_call;
    struct seg_ctrl *me = c->me;
    atomic_store_explicit(&me->cb_point, cw->point, memory_order_relaxed);
    atomic_store_explicit(&me->cb_slot, slot, memory_order_relaxed);
    atomic_store_explicit(&me->cb_placement, cw->placement, memory_order_relaxed);
    atomic_store_explicit(&me->cb_call, call, memory_order_release);
    struct call_desc d;
    describe(&d, OP_CALLBACK, e ? e->name : "", (int64_t)cw->point, cw->placement);
    if (e && e->kind == SHMESH_EFFECT_ORDERED_SHARDABLE && cw->point > 1)
        for (int q = 0; q < c->world && !rc; q++)
            if (q != c->rank)
                rc = wait_point(c, &c->waiter, "shmesh_callback", q, slot, cw->point - 1,
                                *last_call, &d);
    if (rc)
        return rc;
    int owner = cw->placement >= 0 ? device_of(c, cw->placement).rank : c->rank;
    if (owner == c->rank)
        run_here(cw);
    else if ((rc = wait_point(c, &c->waiter, "shmesh_callback", owner, slot, cw->point, call,
                              &d)))
        return rc;
    atomic_store_explicit(&c->me->effect_point[slot], cw->point, memory_order_release);
    seg_progress_ring(&c->me->progress);
    *last_call = call;
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
    if (!fn)
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
    *cw = (struct callback_work){.w = {.run = callback_run, .drop = callback_drop},
                                 .c = c, .e = e, .placement = placement, .fn = fn, .arg = arg};
    if (placement != SHMESH_PLACE_SELF)
        cw->point = ++*(e ? &e->points : &c->plain_points);
    if (e && placement != SHMESH_PLACE_SELF)
        e->last_placement = placement;
    shmesh_token spare, *t = token ? token : &spare; /* a callback is always dispatched */
    rc = stream_dispatch(c, &cw->w, t);
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
    uint64_t last = shmesh_runtime_token(c).seq;
    for (int i = 0; i < c->neffects; i++)
        if (c->effects[i]->last_seq > last)
            last = c->effects[i]->last_seq;
    if (last && c->stream)
        rc = stream_wait(c, last);
    /* Sharded tokens: every rank's part of each ordered effect's last point. */
    for (int i = 0; i < c->neffects && !rc; i++) {
        const shmesh_effect *e = c->effects[i];
        if (e->kind == SHMESH_EFFECT_UNORDERED || !e->points)
            continue;
        struct call_desc d;
        describe(&d, OP_CALLBACK, e->name, (int64_t)e->points, e->last_placement);
        for (int q = 0; q < c->world && !rc; q++)
            if (q != c->rank)
                rc = wait_point(c, stream_waiter(c), "shmesh_effects_barrier", q, e->id,
                                e->points, e->last_call, &d);
    }
    ctx_leave(c);
    return rc;
}
