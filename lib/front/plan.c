/* Plans (see plan.h). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "engine/desc.h"
#include "engine/state.h"
#include "front/plan.h"
#include "front/state.h"
#include "memory/kind.h"
#include "mesh/mesh.h"
#include "ops/prologue.h"

/* The longest axes text a plan keeps (longer: no plan). */
#define PLAN_AXES 64
/* The most calls a plan keeps: as many of its calls in flight at once as
 * the dispatcher keeps spare blocks for (each holds a call's scratch). */
#define PLAN_KEPT ENGINE_SPARE_WORKS

struct plan {
    /* What the call's preparation read: the mesh (by address and id: ids
     * are not reused within a context), the axes as given, the op's own
     * arguments, and the arrays' dtypes, shapes and batch dimensions. */
    const shmesh_mesh *m;
    int mesh_id;
    char axes[PLAN_AXES];
    bool tiled;
    int axis, axis2, source;
    shmesh_array in, out; /* data left NULL */
    bool in_place;        /* in and out were the very same buffer */
    /* What it made. */
    struct call_desc d;
    struct flow f;
    int n, me;
    bool net; /* the group spans nodes (its ranks are the job's) */
    int *ranks; /* n of cap: the group's ranks */
    int cap;
    int misses; /* calls of the op prepared in full since the plan was made */
    uint64_t hash; /* d's, with the context's thresholds (win_post's) */
    /* The plan's own calls, run again by its repeats (plan_run): one per
     * call of it in flight at once, up to PLAN_KEPT; `unkept`: a run of it
     * could not be kept (its path does not run a call again:
     * engine/path.h), so none is tried. */
    struct call *kept[PLAN_KEPT];
    int nkept;
    bool unkept;
};

/* A plan is made again at most once every this many calls of its op that
 * did not repeat it: calls that never repeat (a trainer's gradients, each
 * of its own shape) pay the copy into a plan at most that rarely. */
#define PLAN_PATIENCE 8

/* The ops whose preparation reads only the plan's key: the op table's
 * signatures of reductions, gathers and scatters, all_to_all, pswapaxes
 * and pbroadcast (not ppermute or pshuffle, whose preparation writes
 * zeros and scratch; not ragged, world or internal ops). */
#define SIG_PLAN_REDUCTION 1
#define SIG_PLAN_AXIS_TILED 1
#define SIG_PLAN_ALL_TO_ALL 1
#define SIG_PLAN_AXIS 1
#define SIG_PLAN_PBROADCAST 1
#define SIG_PLAN_WORLD 0
#define SIG_PLAN_RAGGED 0
#define SIG_PLAN_PPERMUTE 0
#define SIG_PLAN_PSHUFFLE 0
#define SIG_PLAN_INTERNAL 0
static const bool plannable[OP_COUNT] = {
#define PLAN_OP(ID, name, scope, bus, bool_in, params, prepare, batch, async, sig)            \
    [OP_##ID] = SIG_PLAN_##sig,
    SHMESH_OPS(PLAN_OP)
#undef PLAN_OP
};

/* Whether a's call may have a plan: one device of its mesh here (per rank
 * one), not batched, no groups, arrays given, its axes short enough. */
static inline bool fits(const struct op_args *a)
{
    const shmesh_mesh *m = a->m;
    return plannable[a->op] && m && !m->abstract && !mesh_calls_per_device(m) && m->per == 1 &&
           m->batch_dim < 0 && !a->gs && a->axes && a->in && a->out;
}

/* strcmp's answer for the short texts axes are, without a call. */
static inline bool same_text(const char *x, const char *y)
{
    for (; *x == *y; x++, y++)
        if (!*x)
            return true;
    return false;
}

static inline bool same_array(const shmesh_array *x, const shmesh_array *y)
{
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->bdim != y->bdim || x->ndim < 0 ||
        x->ndim > SHMESH_MAX_NDIM)
        return false;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i])
            return false;
    return true;
}

_Static_assert(offsetof(struct flow, in_esz) == offsetof(struct flow, out) + sizeof(shmesh_array),
               "plan_prepare copies the flow from in_esz on: nothing between out and it");

struct plan *plan_match(const struct op_args *a)
{
    if (!fits(a))
        return NULL;
    struct plan *p = front_of(a->m->ctx)->plans[a->op];
    /* What differs most often first: calls of one op mostly differ in shape. */
    if (!p || !same_array(&p->in, a->in) || !same_array(&p->out, a->out) || p->m != a->m ||
        p->mesh_id != a->m->id || p->tiled != a->tiled || p->axis != a->axis ||
        p->axis2 != a->axis2 || (a->op == OP_PBROADCAST && p->source != a->source) ||
        !same_text(p->axes, a->axes))
        return NULL;
    /* The buffers' own checks are the full preparation's to explain; in
     * place is as the plan's call was (the op's rule, the same shapes). */
    const void *in = a->in->data, *out = a->out->data;
    if ((p->f.in_bytes && !in) || (p->f.out_bytes && !out) ||
        (in == out ? !p->in_place : bytes_overlap(in, p->f.in_bytes, out, p->f.out_bytes)))
        return NULL;
    return p;
}

int plan_prepare(struct call *k, const struct plan *p, const struct op_args *a)
{
    int rc = call_init(k, a->m->ctx, a->op);
    if (rc)
        return rc;
    call_desc_copy(&k->d, &p->d);
    /* The flow but its arrays, which are the call's own. */
    k->f.kind = p->f.kind;
    k->f.in = *a->in;
    k->f.out = *a->out;
    bytes_copy(&k->f.in_esz, &p->f.in_esz, sizeof k->f - offsetof(struct flow, in_esz));
    call_group_kept(k, p->n, p->me, p->ranks, p->net);
    rc = call_buffers(k);
    /* The description is the plan's unless the buffers are device memory
     * (call_buffers marks it): its hash too. */
    if (!rc && !k->d.in_device && !k->d.out_device) {
        k->hash = p->hash;
        k->hashed = true;
    }
    return rc;
}

/* The plan's kept calls given up (engine/call.h: call_kept_free). */
static void drop_kept(struct plan *p)
{
    for (int i = 0; i < p->nkept; i++)
        call_kept_free(p->kept[i]);
    p->nkept = 0;
    p->unkept = false;
}

bool plan_run(struct plan *p, const struct op_args *a, shmesh_token *async, int *rc)
{
    if (p->unkept)
        return false;
    /* The first not in flight, else a new one. */
    int i = 0;
    enum call_kept_state state = KEPT_BUSY;
    while (i < p->nkept && (state = call_kept_state(p->kept[i])) == KEPT_BUSY)
        i++;
    if (i == p->nkept) {
        if (i == PLAN_KEPT || !(p->kept[i] = call_kept_new()))
            return false; /* prepared apart */
        p->nkept++;
        state = KEPT_SPENT;
    }
    struct call *k = p->kept[i];
    switch (state) {
    case KEPT_IDLE:
        *rc = call_again(k, a->in->data, a->out->data);
        if (*rc == CALL_NOT_AGAIN) {
            drop_kept(p);
            return false; /* prepared apart */
        }
        if (*rc)
            return true;
        break;
    case KEPT_SPENT:
        *rc = plan_prepare(k, p, a);
        break;
    case KEPT_NEVER:
        drop_kept(p);
        p->unkept = true; /* its path runs no call again */
        return false;
    default: /* not reached: KEPT_BUSY was passed over, KEPT_ORPHAN is not ours */
        return false;
    }
    *rc = call_finish_kept(k, *rc, async);
    return true;
}

/* Whether prepared k depends on nothing but its plan's key: no op state or
 * hooks, no scratch of its own, nothing written, host memory. */
static bool plain(const struct call *k)
{
    return !k->op_state && !k->then && !k->op_free && !k->pub_pack && !k->local &&
           !k->rebind && !k->dev_rows && !k->path_state && !k->path_end && !k->f.dest &&
           !k->f.zero_out && !k->f.transfers && !k->d.in_device && !k->d.out_device &&
           !((k->in_kind | k->out_kind) & MEM_DEVICE);
}

void plan_keep(const struct call *k, const struct op_args *a)
{
    if (!fits(a))
        return;
    shmesh_ctx *c = a->m->ctx;
    struct plan **slot = &front_of(c)->plans[a->op], *p = *slot;
    if (p && ++p->misses < PLAN_PATIENCE)
        return;
    if (p)
        drop_kept(p); /* the plan changes */
    if (!plain(k) || strlen(a->axes) >= PLAN_AXES || (p && k->g.n > p->cap)) {
        if (p)
            p->m = NULL; /* matches nothing */
        return;
    }
    if (!p) {
        p = calloc(1, sizeof *p);
        int *ranks = malloc(sizeof *ranks * (size_t)engine_of(c)->scratch_members);
        if (!p || !ranks || k->g.n > engine_of(c)->scratch_members) {
            free(p);
            free(ranks);
            return; /* no plan: every call prepared in full */
        }
        p->ranks = ranks;
        p->cap = engine_of(c)->scratch_members;
        *slot = p;
    }
    p->m = NULL; /* a plan half written matches nothing */
    p->misses = 0;
    p->mesh_id = a->m->id;
    strcpy(p->axes, a->axes);
    p->tiled = a->tiled;
    p->axis = a->axis;
    p->axis2 = a->axis2;
    p->source = a->op == OP_PBROADCAST ? a->source : 0;
    p->in_place = a->in->data == a->out->data;
    p->in = *a->in;
    p->in.data = NULL;
    p->out = *a->out;
    p->out.data = NULL;
    bytes_copy(&p->d, &k->d, sizeof p->d);
    bytes_copy(&p->f, &k->f, sizeof p->f);
    p->f.in.data = p->f.out.data = NULL;
    p->hash = call_hash(&p->d) ^ c->tuning;
    p->n = k->g.n;
    p->me = k->g.me;
    p->net = k->net;
    memcpy(p->ranks, k->g.ranks, sizeof *p->ranks * (size_t)k->g.n);
    p->m = a->m;
}

void plan_free_all(shmesh_ctx *c)
{
    for (int op = 0; op < OP_COUNT; op++) {
        struct plan *p = front_of(c)->plans[op];
        if (p) {
            drop_kept(p);
            free(p->ranks);
        }
        free(p);
        front_of(c)->plans[op] = NULL;
    }
}
