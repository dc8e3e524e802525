/* Global arrays (jax.Array, GlobalDeviceArray): a global shape split over
 * a concrete mesh's devices by a sharding.  Every rank knows every
 * device's block (the sharding says it); it holds data only for its own
 * devices, one shard each.
 *
 * Moving whole arrays between ranks (gather, scatter, reshard) goes
 * through the world-wide movers of ops/ops.h: the simplest thing that is
 * right for any pair of shardings, at the price of the whole array passing
 * through every rank (docs/arrays.md gives the costs).  Nothing moves
 * where every rank holds every block already, nor over a process-local
 * mesh; but only the latter skips the collective: every rank of a job-wide
 * mesh takes part in every move, so that ranks holding one array under
 * different shardings fail at that call. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrays/shard_memory.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/entry.h"
#include "core/fail.h"
#include "core/hash.h"
#include "engine/exchange.h"
#include "kernels/box.h"
#include "mesh/mesh.h"
#include "ops/args.h"
#include "ops/ops.h"

struct shmesh_global_array {
    const shmesh_sharding *sharding; /* borrowed */
    shmesh_ctx *ctx;                 /* the mesh's */
    shmesh_dtype dtype;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    uint64_t bytes;       /* the whole array's */
    uint64_t shard_bytes; /* every shard's */
    bool owned;           /* the shards' data is ours to free */
    /* A process-local mesh (shmesh_mesh_local_mesh): every device is here,
     * and gather, scatter and reshard run inside this process. */
    bool local_only;
    bool replicated;
    /* Every rank's devices hold every block (a fully replicated array, or
     * one split only over axes inside each rank): gathers need no
     * exchange. */
    bool everywhere;
    int nlocal, ndev;
    int *block_of;        /* ndev: per position, where its block's replica 0 is */
    shmesh_shard *local;  /* nlocal: this rank's devices, mesh order */
    shmesh_shard *global; /* ndev: every device, mesh order */
};

/* "[0:2, 0:1]": a block as Python slices ("[]" for a scalar's). */
static void block_text(char *buf, size_t len, int ndim, const shmesh_index *ix)
{
    int n = snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n > 0 && (size_t)n < len; d++)
        n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64 ":%" PRId64, d ? ", " : "",
                      ix->start[d], ix->stop[d]);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]");
}

/* The block of `ix` inside the global array, for box_read/box_write. */
static void block_box(const shmesh_global_array *a, const shmesh_index *ix, struct box *b)
{
    box_whole(b, a->ndim, a->shape, dtype_size(a->dtype));
    for (int d = 0; d < a->ndim; d++) {
        b->start[d] = ix->start[d];
        b->ext[d] = ix->stop[d] - ix->start[d];
    }
    box_simplify(b);
}

/* Copies shard `sh`'s block out of (to_global false) or into the whole
 * array `global`, row-major. */
static void shard_copy(const shmesh_global_array *a, const shmesh_shard *sh, void *global,
                       bool to_global)
{
    if (!a->shard_bytes)
        return;
    struct box b;
    block_box(a, &sh->index, &b);
    if (to_global)
        box_write(&b, global, 0, box_elems(&b), sh->data.data);
    else
        box_read(&b, global, 0, box_elems(&b), sh->data.data);
}

/* What an owned shard of a takes: its bytes to a whole cache line. */
static size_t shard_alloc_bytes(const shmesh_global_array *a)
{
    return (size_t)((a->shard_bytes + SEG_CACHE_LINE - 1) & ~(uint64_t)(SEG_CACHE_LINE - 1));
}

void shmesh_global_array_destroy(shmesh_global_array *a)
{
    if (!a)
        return;
    if (a->owned && a->local)
        for (int l = 0; l < a->nlocal; l++)
            shard_free(a->local[l].data.data, shard_alloc_bytes(a));
    free(a->local);
    free(a->global);
    free(a->block_of);
    free(a);
}

/* The concrete mesh of sharding `s` and its context, or SHMESH_ERR_INVALID
 * explained on this thread (there is no context to explain it in). */
static int sharding_ctx(const char *fn, const shmesh_sharding *s, shmesh_ctx **c)
{
    if (!s) {
        init_error("%s: the sharding is NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    shmesh_mesh *m = shmesh_sharding_mesh(s);
    if (!m || shmesh_mesh_is_abstract(m) || !m->ctx) {
        init_error("%s: the sharding's mesh must be concrete (shmesh_mesh_create), since a global "
                   "array's shards live on its devices; got an abstract mesh",
                   fn);
        return SHMESH_ERR_INVALID;
    }
    *c = m->ctx;
    return 0;
}

/* The sharding's blocks must be what the array's shards can hold: the
 * device of that mesh position, the shard shape, inside the array. */
static int check_index(const shmesh_global_array *a, const char *fn, const shmesh_index *ix,
                       int id, const int64_t *shard_shape)
{
    bool ok = ix->device == id && ix->replica_id >= 0 && ix->replica_id < a->ndev;
    for (int d = 0; ok && d < a->ndim; d++)
        ok = ix->start[d] >= 0 && ix->stop[d] - ix->start[d] == shard_shape[d] &&
             ix->stop[d] <= a->shape[d];
    if (ok)
        return 0;
    char block[256], want[160];
    block_text(block, sizeof block, a->ndim, ix);
    shape_format(want, sizeof want, a->dtype, a->ndim, shard_shape);
    return ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                    "%s: the sharding gave device %d (replica %d) the block %s; expected device "
                    "%d with a block of the shard shape %s inside the array",
                    fn, ix->device, ix->replica_id, block, id, want);
}

static bool same_block(const shmesh_global_array *a, const shmesh_index *x, const shmesh_index *y)
{
    for (int d = 0; d < a->ndim; d++)
        if (x->start[d] != y->start[d] || x->stop[d] != y->stop[d])
            return false;
    return true;
}

/* Which positions share a block (block_of), and whether every rank holds
 * every block (everywhere). */
static int find_blocks(shmesh_global_array *a, const char *fn)
{
    int world = shmesh_world_size(a->ctx);
    int *seen = calloc((size_t)world, sizeof *seen); /* the last block rank r was seen with */
    if (!seen)
        return ctx_fail(a->ctx, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    a->everywhere = !a->local_only;
    for (int p = 0; p < a->ndev; p++) {
        int q = 0;
        while (q < p && !same_block(a, &a->global[q].index, &a->global[p].index))
            q++;
        a->block_of[p] = q;
    }
    for (int b = 0; b < a->ndev && a->everywhere; b++) {
        if (a->block_of[b] != b)
            continue;
        int ranks = 0;
        for (int p = b; p < a->ndev; p++) {
            int r = shmesh_device_process(a->ctx, a->global[p].index.device);
            if (a->block_of[p] == b && r >= 0 && seen[r] != b + 1) {
                seen[r] = b + 1;
                ranks++;
            }
        }
        a->everywhere = ranks == world;
    }
    free(seen);
    return 0;
}

/* Validates the arguments every constructor takes and lays the array out:
 * every shard's block, replica id and shape, no data yet.  On failure *out
 * is NULL and the error explained. */
static int layout(const char *fn, const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                  const int64_t *shape, shmesh_global_array **out)
{
    *out = NULL;
    shmesh_ctx *c;
    int rc = sharding_ctx(fn, s, &c);
    if (rc)
        return rc;
    if (ndim > 0 && !shape)
        return ctx_fail(c, SHMESH_ERR_INVALID, "%s: shape is NULL but ndim is %d", fn, ndim);
    /* The global shape, checked as any array's (dtype, ndim, sizes, 2^62
     * bytes); data is not ours to check, so it is given as present. */
    shmesh_array whole = {.data = &whole, .dtype = dtype, .ndim = ndim};
    if (ndim > 0 && ndim <= SHMESH_MAX_NDIM)
        memcpy(whole.shape, shape, sizeof *shape * (size_t)ndim);
    uint64_t elems;
    if ((rc = array_check(c, fn, "the global array", &whole, &elems)))
        return rc;
    int64_t shard_shape[SHMESH_MAX_NDIM] = {0};
    if ((rc = shmesh_sharding_shard_shape(s, ndim, whole.shape, shard_shape)))
        return rc;

    shmesh_mesh *m = shmesh_sharding_mesh(s);
    int ndev = shmesh_mesh_size(m);
    shmesh_global_array *a = calloc(1, sizeof *a);
    int *ids = calloc((size_t)ndev * 2, sizeof *ids);
    shmesh_index *ix = calloc((size_t)ndev, sizeof *ix);
    if (a) {
        a->global = calloc((size_t)ndev, sizeof *a->global);
        a->local = calloc((size_t)ndev, sizeof *a->local);
        a->block_of = calloc((size_t)ndev, sizeof *a->block_of);
    }
    if (!a || !ids || !ix || !a->global || !a->local || !a->block_of) {
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory laying out %d shards", fn, ndev);
        goto fail;
    }
    a->sharding = s;
    a->ctx = c;
    a->local_only = m->process_local;
    a->dtype = dtype;
    a->ndim = ndim;
    memcpy(a->shape, whole.shape, sizeof a->shape);
    a->ndev = ndev;
    a->bytes = elems * dtype_size(dtype);
    a->shard_bytes = dtype_size(dtype);
    for (int d = 0; d < ndim; d++)
        a->shard_bytes *= (uint64_t)shard_shape[d];

    int *mesh_ids = ids, *local_ids = ids + ndev;
    if ((rc = shmesh_mesh_device_ids(m, mesh_ids, ndev)) < 0)
        goto fail;
    if ((rc = shmesh_mesh_local_devices(m, local_ids, ndev)) < 0)
        goto fail;
    a->nlocal = rc;
    if ((rc = shmesh_sharding_indices(s, ndim, whole.shape, ix)))
        goto fail;
    if ((rc = shmesh_sharding_is_fully_replicated(s, ndim, whole.shape)) < 0)
        goto fail;
    a->replicated = rc == 1;
    rc = 0;
    for (int p = 0; p < ndev; p++) {
        if ((rc = check_index(a, fn, &ix[p], mesh_ids[p], shard_shape)))
            goto fail;
        a->global[p] = (shmesh_shard){.index = ix[p], .data = {NULL, dtype, ndim, {0}}};
        memcpy(a->global[p].data.shape, shard_shape, sizeof shard_shape);
    }
    /* Local shards in shmesh_mesh_local_devices order (mesh order). */
    for (int l = 0; l < a->nlocal; l++) {
        int p = 0;
        while (p < ndev && mesh_ids[p] != local_ids[l])
            p++;
        if (p == ndev) {
            rc = ctx_fail(c, SHMESH_ERR_INVALID,
                          "%s: local device %d (id %d) is not among the mesh's %d devices", fn, l,
                          local_ids[l], ndev);
            goto fail;
        }
        a->local[l] = a->global[p];
    }
    rc = find_blocks(a, fn);
    if (rc)
        goto fail;
    free(ids);
    free(ix);
    *out = a;
    return 0;
fail:
    free(ids);
    free(ix);
    shmesh_global_array_destroy(a);
    return rc;
}

/* Global shards show the local shards' data: the same buffers. */
static void link_global(shmesh_global_array *a)
{
    for (int l = 0; l < a->nlocal; l++)
        for (int p = 0; p < a->ndev; p++)
            if (a->global[p].index.device == a->local[l].index.device)
                a->global[p].data.data = a->local[l].data.data;
}

/* Owned data for every local shard (none for empty shards: their data
 * stays NULL), aligned to a cache line (64 bytes); zeroed unless the
 * caller writes every byte itself (`zero` false). */
static int alloc_shards(shmesh_global_array *a, const char *fn, bool zero)
{
    a->owned = true;
    size_t bytes = shard_alloc_bytes(a);
    for (int l = 0; l < a->nlocal && a->shard_bytes; l++) {
        void *p = shard_alloc(bytes);
        if (!p)
            return ctx_fail(a->ctx, SHMESH_ERR_NOMEM,
                            "%s: out of memory for local shard %d (%" PRIu64 " bytes)", fn, l,
                            a->shard_bytes);
        if (zero)
            memset(p, 0, (size_t)a->shard_bytes);
        a->local[l].data.data = p;
    }
    link_global(a);
    return 0;
}

/* A layout with owned shards: what every constructor but create starts from. */
static int owned_array(const char *fn, const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                       const int64_t *shape, shmesh_global_array **out)
{
    int rc = layout(fn, s, dtype, ndim, shape, out);
    if (!rc && (rc = alloc_shards(*out, fn, true))) {
        shmesh_global_array_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* `out` must not be NULL; it is cleared before anything can fail.  With no
 * context to blame yet, the explanation is this thread's. */
static int check_out(const char *fn, shmesh_global_array **out)
{
    if (out) {
        *out = NULL;
        return 0;
    }
    init_error("%s: out must not be NULL", fn);
    return SHMESH_ERR_INVALID;
}

int shmesh_global_array_create(const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                               const int64_t *shape, void *const *buffers,
                               shmesh_global_array **out)
{
    static const char fn[] = "shmesh_global_array_create";
    shmesh_global_array *a;
    int rc = check_out(fn, out);
    if (rc || (rc = layout(fn, s, dtype, ndim, shape, &a)))
        return rc;
    if (!buffers && a->nlocal && a->shard_bytes) {
        rc = ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                      "%s: buffers is NULL; expected %d buffers (one per local device) of %" PRIu64
                      " bytes",
                      fn, a->nlocal, a->shard_bytes);
        goto fail;
    }
    for (int l = 0; l < a->nlocal && a->shard_bytes; l++) {
        if (!buffers[l]) {
            rc = ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                          "%s: buffers[%d] (device %d) is NULL; expected its shard of %" PRIu64
                          " bytes",
                          fn, l, a->local[l].index.device, a->shard_bytes);
            goto fail;
        }
        a->local[l].data.data = buffers[l];
    }
    link_global(a);
    *out = a;
    return 0;
fail:
    shmesh_global_array_destroy(a);
    return rc;
}

/* A callback's non-zero result for `shards` (n of them, sharing one block
 * when one_block): the construction fails, naming their devices. */
static int callback_failed(const shmesh_global_array *a, const char *fn, int got,
                           const shmesh_shard *shards, int n, bool one_block)
{
    char devs[160] = "", what[300] = "every local shard";
    int len = 0;
    for (int i = 0; i < n && len >= 0 && (size_t)len < sizeof devs; i++)
        len += snprintf(devs + len, sizeof devs - (size_t)len, "%s%d", i ? ", " : "",
                        shards[i].index.device);
    if (one_block) {
        char block[256];
        block_text(block, sizeof block, a->ndim, &shards[0].index);
        snprintf(what, sizeof what, "block %s", block);
    }
    return ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                    "%s: the callback returned %d for device%s %s (%s); expected 0", fn, got,
                    n == 1 ? "" : "s", n ? devs : "(none)", what);
}

/* A caller's callback: per shard (one) or per batch of shards (many). */
struct callback {
    shmesh_shard_fn one;
    shmesh_shards_fn many;
    void *arg;
};

/* make_array_from_callback: once per local device. */
static int fill_each(shmesh_global_array *a, const char *fn, const struct callback *cb)
{
    for (int l = 0; l < a->nlocal; l++) {
        int got = cb->one(cb->arg, &a->local[l]);
        if (got)
            return callback_failed(a, fn, got, &a->local[l], 1, true);
    }
    return 0;
}

/* from_batched_callback: once, every local shard. */
static int fill_batch(shmesh_global_array *a, const char *fn, const struct callback *cb)
{
    int got = cb->many(cb->arg, a->local, a->nlocal);
    return got ? callback_failed(a, fn, got, a->local, a->nlocal, false) : 0;
}

/* from_batched_callback_with_devices: once per distinct block, in the mesh
 * order of its first local device, with the shards of every local device
 * holding it. */
static int fill_blocks(shmesh_global_array *a, const char *fn, const struct callback *cb)
{
    shmesh_shard *batch = calloc((size_t)a->nlocal + 1, sizeof *batch);
    bool *done = calloc((size_t)a->nlocal + 1, sizeof *done);
    int rc = 0;
    if (!batch || !done)
        rc = ctx_fail(a->ctx, SHMESH_ERR_NOMEM, "%s: out of memory grouping %d local devices",
                      fn, a->nlocal);
    for (int l = 0; !rc && l < a->nlocal; l++) {
        if (done[l])
            continue;
        int n = 0;
        for (int k = l; k < a->nlocal; k++)
            if (!done[k] && same_block(a, &a->local[l].index, &a->local[k].index)) {
                done[k] = true;
                batch[n++] = a->local[k];
            }
        int got = cb->many(cb->arg, batch, n);
        if (got)
            rc = callback_failed(a, fn, got, batch, n, true);
    }
    free(batch);
    free(done);
    return rc;
}

/* The callback constructors: owned shards that `fill` has the caller's
 * callback fill; on any failure nothing is left. */
static int from_callback(const char *fn, const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                         const int64_t *shape, const struct callback *cb,
                         int (*fill)(shmesh_global_array *, const char *, const struct callback *),
                         shmesh_global_array **out)
{
    shmesh_global_array *a;
    int rc = check_out(fn, out);
    if (rc || (rc = owned_array(fn, s, dtype, ndim, shape, &a)))
        return rc;
    if (!cb->one && !cb->many)
        rc = ctx_fail(a->ctx, SHMESH_ERR_INVALID, "%s: the callback is NULL", fn);
    else
        rc = fill(a, fn, cb);
    if (rc) {
        shmesh_global_array_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

int shmesh_global_array_from_callback(const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                                      const int64_t *shape, shmesh_shard_fn fn, void *arg,
                                      shmesh_global_array **out)
{
    return from_callback("shmesh_global_array_from_callback", s, dtype, ndim, shape,
                         &(struct callback){.one = fn, .arg = arg}, fill_each, out);
}

int shmesh_global_array_from_batched_callback(const shmesh_sharding *s, shmesh_dtype dtype,
                                              int ndim, const int64_t *shape,
                                              shmesh_shards_fn fn, void *arg,
                                              shmesh_global_array **out)
{
    return from_callback("shmesh_global_array_from_batched_callback", s, dtype, ndim, shape,
                         &(struct callback){.many = fn, .arg = arg}, fill_batch, out);
}

int shmesh_global_array_from_callback_with_devices(const shmesh_sharding *s, shmesh_dtype dtype,
                                                   int ndim, const int64_t *shape,
                                                   shmesh_shards_fn fn, void *arg,
                                                   shmesh_global_array **out)
{
    return from_callback("shmesh_global_array_from_callback_with_devices", s, dtype, ndim, shape,
                         &(struct callback){.many = fn, .arg = arg}, fill_blocks, out);
}

const shmesh_sharding *shmesh_global_array_sharding(const shmesh_global_array *a)
{
    return a ? a->sharding : NULL;
}

shmesh_dtype shmesh_global_array_dtype(const shmesh_global_array *a)
{
    return a ? a->dtype : SHMESH_DTYPE_COUNT;
}

int shmesh_global_array_shape(const shmesh_global_array *a, int64_t *shape)
{
    if (!a) {
        init_error("shmesh_global_array_shape: the array is NULL");
        return SHMESH_ERR_INVALID;
    }
    if (shape)
        memcpy(shape, a->shape, sizeof *shape * (size_t)a->ndim);
    return a->ndim;
}

bool shmesh_global_array_is_fully_replicated(const shmesh_global_array *a)
{
    return a && a->replicated;
}

/* The shards accessors' checks: NULL arguments explained on this thread
 * (shmesh_last_error(NULL)) when the array is missing. */
static int shards_of(const shmesh_global_array *a, const char *fn, const shmesh_shard **shards,
                     const shmesh_shard *list, int n)
{
    if (!a) {
        init_error("%s: the array is NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    if (!shards)
        return ctx_fail(a->ctx, SHMESH_ERR_INVALID, "%s: shards must not be NULL", fn);
    *shards = list;
    return n;
}

int shmesh_global_array_local_shards(const shmesh_global_array *a, const shmesh_shard **shards)
{
    return shards_of(a, "shmesh_global_array_local_shards", shards, a ? a->local : NULL,
                     a ? a->nlocal : 0);
}

int shmesh_global_array_global_shards(const shmesh_global_array *a, const shmesh_shard **shards)
{
    return shards_of(a, "shmesh_global_array_global_shards", shards, a ? a->global : NULL,
                     a ? a->ndev : 0);
}

/* Room for any spec's text: 8 entries of 8 names, each name quoted and
 * every character escaped, with the separators. */
#define SPEC_TEXT_MAX                                                                          \
    (4 + SHMESH_MAX_NDIM * (4 + SHMESH_MAX_MESH_DIMS * (2 * SHMESH_MAX_AXIS_NAME + 4)))

/* What ranks compare for a gather, scatter or reshard (op): the array (its
 * mesh, spec, dtype and shape), for a reshard the target sharding (`to`:
 * its mesh and spec), the bytes each sends and the root, so that ranks
 * moving different arrays, or one array they hold under different
 * shardings, fail with SHMESH_ERR_MISMATCH naming both calls: "P() ->
 * P('x')" stands where a collective shows its axes.  The specs are hashed
 * whole (a text says exactly one spec); the text shown is cut when long. */
static void array_desc(const shmesh_global_array *a, const shmesh_sharding *to, enum call_op op,
                       uint64_t per, int root, struct call_desc *d)
{
    call_desc_clear(d);
    d->op = op;
    d->mesh = shmesh_sharding_mesh(a->sharding)->id;
    d->dtype = d->out_dtype = (uint32_t)a->dtype;
    d->ndim = d->out_ndim = a->ndim;
    memcpy(d->shape, a->shape, sizeof d->shape);
    memcpy(d->out_shape, a->shape, sizeof d->out_shape);
    d->param[0] = (int64_t)per;
    d->param[1] = root;
    char from[SPEC_TEXT_MAX], into[SPEC_TEXT_MAX] = "";
    shmesh_pspec_text(shmesh_sharding_spec(a->sharding), from, sizeof from);
    d->extra_hash = hash_bytes(from, strlen(from), 0);
    if (to) {
        d->param[2] = shmesh_sharding_mesh(to)->id;
        shmesh_pspec_text(shmesh_sharding_spec(to), into, sizeof into);
        d->extra_hash = hash_bytes(into, strlen(into), d->extra_hash);
    }
    int n = snprintf(d->axes, sizeof d->axes, "%s%s%s", from, to ? " -> " : "", into);
    if (n < 0 || (size_t)n >= sizeof d->axes)
        memcpy(d->axes + sizeof d->axes - 4, "...", 4);
}

/* Shard `p`'s block (its data at `src`) into the whole array `out`. */
static void place(const shmesh_global_array *a, int p, const void *src, void *out)
{
    shmesh_shard sh = a->global[p];
    sh.data.data = (void *)src;
    shard_copy(a, &sh, out, true);
}

/* This rank's shard of device p. */
static shmesh_shard *local_shard(const shmesh_global_array *a, int p)
{
    for (int l = 0; l < a->nlocal; l++)
        if (a->local[l].index.device == a->global[p].index.device)
            return &a->local[l];
    return NULL;
}

/* Each device's rank (ndev entries, the caller's to free), or NULL when out
 * of memory. */
static int *owners_of(const shmesh_global_array *a)
{
    int *owner = malloc(sizeof *owner * (size_t)(a->ndev ? a->ndev : 1));
    for (int p = 0; owner && p < a->ndev; p++)
        owner[p] = shmesh_device_process(a->ctx, a->global[p].index.device);
    return owner;
}

/* Whether device p is the first of its rank's devices (owner: owners_of)
 * to hold its block. */
static bool first_here(const shmesh_global_array *a, const int *owner, int p)
{
    for (int q = 0; q < p; q++)
        if (owner[q] == owner[p] && a->block_of[q] == a->block_of[p])
            return false;
    return true;
}

/* Every other holder of a block among rank me's devices, copied from the
 * first. */
static void copy_replicas(const shmesh_global_array *a, const int *owner, int me)
{
    for (int p = 0; p < a->ndev && a->shard_bytes; p++) { /* empty shards: no data */
        if (owner[p] != me || first_here(a, owner, p))
            continue;
        int f = 0;
        while (owner[f] != me || a->block_of[f] != a->block_of[p])
            f++;
        memcpy(local_shard(a, p)->data.data, local_shard(a, f)->data.data,
               (size_t)a->shard_bytes);
    }
}

/* The whole array into out (NULL: this rank only helps), for a gather or
 * (with `to`, the target sharding, which ranks compare too) a reshard.
 * Collective on every rank unless the mesh is process-local, even where
 * no data moves: where every rank holds every block already
 * (a->everywhere) each block is copied from a local shard, and the
 * exchange carries no data but still the call's description, so that a
 * rank holding the array under another sharding (one that does need
 * data) fails here with SHMESH_ERR_MISMATCH instead of pairing this call
 * with its next one.  Otherwise every rank sends the blocks it holds with
 * replica id 0 (each block is held so by exactly one device), packed in
 * mesh order, in a buffer of the same size everywhere: the most any rank
 * holds, which every rank works out alike from the sharding; to every rank,
 * or to the root alone when there is one (root >= 0: the others receive
 * nothing). */
static int gather_into(const shmesh_global_array *a, const shmesh_sharding *to, const char *fn,
                       enum call_op op, int root, void *out)
{
    shmesh_ctx *c = a->ctx;
    int world = shmesh_world_size(c), me = shmesh_rank(c);
    bool exchange = !a->local_only && !a->everywhere; /* data moves */
    uint64_t *at = calloc((size_t)world, sizeof *at); /* where rank r's next block is */
    int *owner = owners_of(a);
    bool *placed = calloc((size_t)a->ndev, sizeof *placed);
    unsigned char *send = NULL, *recv = NULL;
    int rc = 0;
    if (!at || !owner || !placed) {
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    uint64_t per = 0;
    for (int p = 0; p < a->ndev; p++) {
        if (exchange && a->global[p].index.replica_id == 0 && owner[p] >= 0) {
            at[owner[p]] += a->shard_bytes;
            if (at[owner[p]] > per)
                per = at[owner[p]];
        }
    }
    if (!a->local_only) {
        if (per > SIZE_MAX / (uint64_t)world)
            rc = ctx_fail(c, SHMESH_ERR_NOMEM,
                          "%s: %d ranks times %" PRIu64 " bytes each overflow the address space",
                          fn, world, per);
        else if (!(send = malloc(per ? per : 1)) ||
                 ((root < 0 || root == me) && !(recv = malloc(per ? per * world : 1))))
            rc = ctx_fail(c, SHMESH_ERR_NOMEM,
                          "%s: out of memory for %" PRIu64 " bytes to send and %" PRIu64
                          " to receive",
                          fn, per, per * (uint64_t)world);
        if (rc)
            goto out;
        uint64_t off = 0;
        for (int p = 0; exchange && p < a->ndev; p++)
            if (owner[p] == me && a->global[p].index.replica_id == 0 && a->shard_bytes) {
                memcpy(send + off, a->global[p].data.data, (size_t)a->shard_bytes);
                off += a->shard_bytes;
            }
        struct call_desc d;
        array_desc(a, to, op, per, root, &d);
        /* To the root alone when there is one (root >= 0). */
        if ((rc = op_world_gather(c, fn, &d, send, per, recv, root)))
            goto out;
    }
    if (!out || !a->shard_bytes)
        goto out;
    /* Exchanged: rank r's blocks are at r * per, in mesh order (this rank's
     * own are read from its shards).  Not: every block from a local shard
     * holding it. */
    for (int r = 0; r < world; r++)
        at[r] = (uint64_t)r * per;
    for (int p = 0; p < a->ndev; p++) {
        if (exchange && a->global[p].index.replica_id == 0) {
            place(a, p, owner[p] == me ? a->global[p].data.data : recv + at[owner[p]], out);
            at[owner[p]] += a->shard_bytes;
        } else if (!exchange && owner[p] == me && !placed[a->block_of[p]]) {
            place(a, p, a->global[p].data.data, out);
            placed[a->block_of[p]] = true;
        }
    }
out:
    free(at);
    free(owner);
    free(placed);
    free(send);
    free(recv);
    return rc;
}

/* A collective's root: -1 (every rank) where allowed, or a rank. */
static int check_root(shmesh_ctx *c, const char *fn, int root, bool every)
{
    int world = shmesh_world_size(c);
    if (root >= (every ? -1 : 0) && root < world)
        return 0;
    return ctx_fail(c, SHMESH_ERR_INVALID, "%s: root must be %sa rank 0..%d, got %d", fn,
                    every ? "-1 (every rank) or " : "", world - 1, root);
}

int shmesh_global_array_gather(const shmesh_global_array *a, int root, void *out)
{
    static const char fn[] = "shmesh_global_array_gather";
    if (!a) {
        init_error("%s: the array is NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    shmesh_ctx *c = a->ctx;
    int rc = ctx_check(c, fn);
    if (rc || (rc = check_root(c, fn, root, true)))
        return rc;
    bool receives = root == -1 || root == shmesh_rank(c);
    if (receives && !out && a->bytes)
        return ctx_fail(c, SHMESH_ERR_INVALID,
                        "%s: out is NULL, but this rank receives the whole array (%" PRIu64
                        " bytes) with root %d",
                        fn, a->bytes, root);
    return gather_into(a, NULL, fn, OP_GLOBAL_ARRAY_GATHER, root, receives ? out : NULL);
}

/* Every local shard of `a` cut from the whole array `global`. */
static void slice_all(shmesh_global_array *a, const void *global)
{
    for (int l = 0; l < a->nlocal; l++)
        shard_copy(a, &a->local[l], (void *)global, false);
}

/* A scatter to the blocks' holders: the root sends each rank each block
 * its devices hold, once, straight from the whole array (a box of it), and
 * the rank writes it into the first of its devices' shards holding it; the
 * others copy from there.  Every rank works the pieces out alike from the
 * sharding. */
struct scatter_run {
    const shmesh_global_array *a;
    int root;
    const void *data; /* the root's whole array */
    int *owner;       /* ndev: the rank of each device */
};

typedef void scatter_piece_fn(const struct scatter_run *x, int p, uint64_t at, void *arg);

/* The root's transfer to rank `to`: the block of each of its devices that
 * holds one first (mesh order), shard_bytes each.  Returns its bytes. */
static uint64_t scatter_walk(const struct scatter_run *x, int from, int to, scatter_piece_fn *each,
                             void *arg)
{
    uint64_t at = 0;
    if (from != x->root || to == x->root)
        return 0;
    for (int p = 0; p < x->a->ndev; p++)
        if (x->owner[p] == to && first_here(x->a, x->owner, p)) {
            if (each)
                each(x, p, at, arg);
            at += x->a->shard_bytes;
        }
    return at;
}

static uint64_t scatter_bytes(const struct call *k, int from, int to)
{
    return scatter_walk(k->op_state, from, to, NULL, NULL);
}

struct scatter_range {
    uint64_t off, len;
    unsigned char *buf; /* pack: where [off, off + len) goes; recv: where it is */
};

static void pack_block(const struct scatter_run *x, int p, uint64_t at, void *arg)
{
    struct scatter_range *r = arg;
    uint64_t a, b, esz = dtype_size(x->a->dtype);
    if (!xpiece_meet(at, x->a->shard_bytes, r->off, r->len, &a, &b))
        return;
    struct box bx;
    block_box(x->a, &x->a->global[p].index, &bx);
    box_read(&bx, x->data, (a - at) / esz, (b - a) / esz, r->buf + (a - r->off));
}

static void scatter_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct scatter_run *x = k->op_state;
    struct scatter_range r = {off, len, dst};
    scatter_walk(x, x->root, to, pack_block, &r);
}

static void recv_block(const struct scatter_run *x, int p, uint64_t at, void *arg)
{
    struct scatter_range *r = arg;
    uint64_t a, b;
    shmesh_shard *sh = local_shard(x->a, p);
    if (sh && xpiece_meet(at, x->a->shard_bytes, r->off, r->len, &a, &b))
        memcpy((unsigned char *)sh->data.data + (a - at), r->buf + (a - r->off), (size_t)(b - a));
}

static void scatter_recv(const struct call *k, int from, uint64_t off, const void *src,
                         uint64_t len)
{
    const struct scatter_run *x = k->op_state;
    struct scatter_range r = {off, len, (unsigned char *)src};
    scatter_walk(x, from, shmesh_rank(x->a->ctx), recv_block, &r);
}

/* `a`'s shards from the root's whole array `data`: 0 or an error. */
static int scatter_to_holders(shmesh_global_array *a, const char *fn, int root, const void *data,
                              const struct call_desc *d)
{
    shmesh_ctx *c = a->ctx;
    int me = shmesh_rank(c);
    struct scatter_run x = {a, root, data, owners_of(a)};
    if (!x.owner)
        return ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
    const struct transfers st = {.unit = dtype_size(a->dtype), .bytes = scatter_bytes,
                                 .pack = scatter_pack, .recv = scatter_recv};
    int rc = op_world_transfers(c, fn, d, &st, &x, NULL, 0);
    if (!rc && me == root) {
        slice_all(a, data);
    } else if (!rc) {
        copy_replicas(a, x.owner, me);
    }
    free(x.owner);
    return rc;
}

int shmesh_global_array_scatter(const shmesh_sharding *s, shmesh_dtype dtype, int ndim,
                                const int64_t *shape, int root, const void *data,
                                shmesh_global_array **out)
{
    static const char fn[] = "shmesh_global_array_scatter";
    shmesh_global_array *a;
    int rc = check_out(fn, out);
    if (rc || (rc = layout(fn, s, dtype, ndim, shape, &a)))
        return rc;
    shmesh_ctx *c = a->ctx;
    bool is_root = root == shmesh_rank(c);
    if ((rc = ctx_check(c, fn)) || (rc = check_root(c, fn, root, false)))
        goto fail;
    if (a->local_only && !is_root) {
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "%s: the sharding's mesh is process-local (its devices are all this "
                      "rank's), so nothing moves between ranks: root must be this rank, %d; got "
                      "%d",
                      fn, shmesh_rank(c), root);
        goto fail;
    }
    if (is_root && !data && a->bytes) {
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "%s: data is NULL on the root; expected the whole array (%" PRIu64
                      " bytes)",
                      fn, a->bytes);
        goto fail;
    }
    if ((rc = alloc_shards(a, fn, false))) /* every block is written below */
        goto fail;
    if (a->local_only) {
        slice_all(a, data);
        *out = a;
        return 0;
    }
    /* Each rank receives only the blocks its devices hold (the root's data
     * is only read). */
    struct call_desc d;
    array_desc(a, NULL, OP_GLOBAL_ARRAY_SCATTER, a->bytes, root, &d);
    if ((rc = scatter_to_holders(a, fn, root, data, &d)))
        goto fail;
    *out = a;
    return 0;
fail:
    shmesh_global_array_destroy(a);
    return rc;
}

/* A reshard as one exchange of the blocks' intersections: for each block
 * of the new layout that a rank's devices hold (once per rank), each old
 * block it meets comes from the rank's own old shard when it holds one,
 * else from one of the old block's holders (the holders take turns by
 * receiving rank), as the box where the two blocks meet, read from the
 * sender's old shard and written into the receiver's new one.  Replicas
 * of a new block on one rank are copied from the first.  Every rank works
 * the pieces out alike from the two shardings. */
struct reshard_run {
    const shmesh_global_array *a, *b; /* from, to */
    int *a_owner, *b_owner;           /* ndev of each: each device's rank */
    int *a_holders;                   /* a->ndev: for an old block's replica 0, its holder ranks */
    int *a_nholders;                  /* and how many (0 for other positions) */
    /* Single copy (the transfers' rows): this rank's old shards' addresses
     * (a->nlocal), which the others read, and room for a sender's. */
    uint64_t *dir, *peer_dir;
    /* A donated array's own shards (else NULL): per local shard, whether
     * its pages went into a new shard (shard_move). */
    bool *spent;
};

/* The ranks holding each old block, in mesh order, once each. */
static void reshard_holders(struct reshard_run *x)
{
    const shmesh_global_array *a = x->a;
    for (int p = 0; p < a->ndev; p++) {
        int p0 = a->block_of[p], r = x->a_owner[p];
        int *h = x->a_holders + (size_t)p0 * (size_t)a->ndev;
        bool seen = false;
        for (int i = 0; i < x->a_nholders[p0]; i++)
            seen |= h[i] == r;
        if (!seen && r >= 0)
            h[x->a_nholders[p0]++] = r;
    }
}

/* Whether rank r holds old block p0. */
static bool holds_old(const struct reshard_run *x, int p0, int r)
{
    const int *h = x->a_holders + (size_t)p0 * (size_t)x->a->ndev;
    for (int i = 0; i < x->a_nholders[p0]; i++)
        if (h[i] == r)
            return true;
    return false;
}

/* Where old block p0 and new block q meet: false when they do not. */
static bool meet(const struct reshard_run *x, int p0, int q, shmesh_index *m)
{
    const shmesh_index *o = &x->a->global[p0].index, *n = &x->b->global[q].index;
    for (int d = 0; d < x->a->ndim; d++) {
        m->start[d] = o->start[d] > n->start[d] ? o->start[d] : n->start[d];
        m->stop[d] = o->stop[d] < n->stop[d] ? o->stop[d] : n->stop[d];
        if (m->start[d] >= m->stop[d])
            return false;
    }
    return true;
}

/* The box of `m` in the shard holding block `ix` (its own array). */
static void shard_box(const shmesh_global_array *a, const shmesh_index *ix, const shmesh_index *m,
                      struct box *bx)
{
    int64_t shape[SHMESH_MAX_NDIM];
    for (int d = 0; d < a->ndim; d++)
        shape[d] = ix->stop[d] - ix->start[d];
    box_whole(bx, a->ndim, shape, dtype_size(a->dtype));
    for (int d = 0; d < a->ndim; d++) {
        bx->start[d] = m->start[d] - ix->start[d];
        bx->ext[d] = m->stop[d] - m->start[d];
    }
    box_simplify(bx);
}

typedef void reshard_piece_fn(const struct reshard_run *x, int p0, int q, const shmesh_index *m,
                              uint64_t at, uint64_t len, void *arg);

/* Rank `from`'s transfer to rank `to`: for each new block `to` holds
 * first (mesh order), each old block it lacks that meets it and that
 * `from` sends it (by turns among the old block's holders).  Returns its
 * bytes. */
static uint64_t reshard_walk(const struct reshard_run *x, int from, int to, reshard_piece_fn *each,
                             void *arg)
{
    uint64_t at = 0, esz = dtype_size(x->a->dtype);
    if (from == to)
        return 0;
    for (int q = 0; q < x->b->ndev; q++) {
        if (x->b_owner[q] != to || !first_here(x->b, x->b_owner, q))
            continue;
        for (int p0 = 0; p0 < x->a->ndev; p0++) {
            shmesh_index m;
            int nh = x->a_nholders[p0];
            if (!nh || holds_old(x, p0, to) || !meet(x, p0, q, &m) ||
                x->a_holders[(size_t)p0 * (size_t)x->a->ndev + (size_t)((to + p0) % nh)] != from)
                continue;
            uint64_t len = esz;
            for (int d = 0; d < x->a->ndim; d++)
                len *= (uint64_t)(m.stop[d] - m.start[d]);
            if (each)
                each(x, p0, q, &m, at, len, arg);
            at += len;
        }
    }
    return at;
}

static uint64_t reshard_bytes(const struct call *k, int from, int to)
{
    return reshard_walk(k->op_state, from, to, NULL, NULL);
}

/* Which of rank r's local shards (mesh order) holds its first replica of
 * old block p0: -1 when r holds none. */
static int local_index_of(const struct reshard_run *x, int p0, int r)
{
    int l = 0;
    for (int p = 0; p < x->a->ndev; p++) {
        if (x->a_owner[p] != r)
            continue;
        if (x->a->block_of[p] == p0)
            return l;
        l++;
    }
    return -1;
}

/* This rank's shard of old block p0 (its first replica here), or NULL. */
static const shmesh_shard *old_here(const struct reshard_run *x, int p0, int me)
{
    int l = local_index_of(x, p0, me);
    return l < 0 ? NULL : &x->a->local[l];
}

static void reshard_pack_piece(const struct reshard_run *x, int p0, int q, const shmesh_index *m,
                               uint64_t at, uint64_t len, void *arg)
{
    struct scatter_range *r = arg;
    uint64_t a, b, esz = dtype_size(x->a->dtype);
    if (!xpiece_meet(at, len, r->off, r->len, &a, &b))
        return;
    const shmesh_shard *sh = old_here(x, p0, shmesh_rank(x->a->ctx));
    struct box bx;
    (void)q;
    shard_box(x->a, &x->a->global[p0].index, m, &bx);
    box_read(&bx, sh->data.data, (a - at) / esz, (b - a) / esz, r->buf + (a - r->off));
}

static void reshard_pack(const struct call *k, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct reshard_run *x = k->op_state;
    struct scatter_range r = {off, len, dst};
    reshard_walk(x, shmesh_rank(x->a->ctx), to, reshard_pack_piece, &r);
}

static void reshard_recv_piece(const struct reshard_run *x, int p0, int q, const shmesh_index *m,
                               uint64_t at, uint64_t len, void *arg)
{
    struct scatter_range *r = arg;
    uint64_t a, b, esz = dtype_size(x->a->dtype);
    if (!xpiece_meet(at, len, r->off, r->len, &a, &b))
        return;
    shmesh_shard *sh = local_shard(x->b, q);
    struct box bx;
    (void)p0;
    shard_box(x->b, &x->b->global[q].index, m, &bx);
    box_write(&bx, sh->data.data, (a - at) / esz, (b - a) / esz, r->buf + (a - r->off));
}

static void reshard_recv(const struct call *k, int from, uint64_t off, const void *src,
                         uint64_t len)
{
    const struct reshard_run *x = k->op_state;
    struct scatter_range r = {off, len, (unsigned char *)src};
    reshard_walk(x, from, shmesh_rank(x->a->ctx), reshard_recv_piece, &r);
}

/* The rows (engine/flow.h) of what one sender gives this rank: each piece
 * read out of the sender's old shard straight into the new one here. */
struct reshard_rows {
    struct rows_reader *r;
    int from;
    int rc;
    uint64_t src; /* the piece's old shard, in the sender's memory */
    unsigned char *dst;
    uint64_t esz;
};

static void reshard_row_run(void *arg, uint64_t from_off, uint64_t to_off, uint64_t len)
{
    struct reshard_rows *rr = arg;
    if (!rr->rc)
        rr->rc = rr->r->read(rr->r, rr->dst + to_off * rr->esz, rr->src + from_off * rr->esz,
                             len * rr->esz);
}

static void reshard_row_piece(const struct reshard_run *x, int p0, int q, const shmesh_index *m,
                              uint64_t at, uint64_t len, void *arg)
{
    struct reshard_rows *rr = arg;
    struct box from, into;
    (void)at;
    (void)len;
    if (rr->rc)
        return;
    shard_box(x->a, &x->a->global[p0].index, m, &from);
    shard_box(x->b, &x->b->global[q].index, m, &into);
    rr->src = x->peer_dir[local_index_of(x, p0, rr->from)]; /* (from holds p0) */
    rr->dst = local_shard(x->b, q)->data.data;
    box_pair_runs(&from, &into, reshard_row_run, rr);
}

static int reshard_rows(const struct call *k, int from, uint64_t base, struct rows_reader *r)
{
    const struct reshard_run *x = k->op_state;
    uint64_t n = 0;
    for (int p = 0; p < x->a->ndev; p++)
        n += x->a_owner[p] == from;
    int rc = r->read_now(r, x->peer_dir, base, n * sizeof *x->peer_dir);
    if (rc)
        return rc;
    struct reshard_rows rr = {.r = r, .from = from, .esz = dtype_size(x->a->dtype)};
    reshard_walk(x, from, shmesh_rank(x->a->ctx), reshard_row_piece, &rr);
    return rr.rc;
}

/* One run of elements (box_pair_runs), counted. */
struct one_run {
    int runs;
    uint64_t from_off, to_off, len;
};

static void count_run(void *arg, uint64_t from_off, uint64_t to_off, uint64_t len)
{
    struct one_run *r = arg;
    if (!r->runs++)
        *r = (struct one_run){1, from_off, to_off, len};
}

/* A donated array's old shard `l` (holding box `from`, all of it) into box
 * `into` of new shard dst: its pages moved where the box is one run of
 * dst at a page boundary and both shards are mappings of their own (then
 * the old shard is spent), the rest copied.  Whether it was moved. */
static bool move_shard(const struct reshard_run *x, int l, const struct box *from,
                       const struct box *into, void *dst)
{
    const shmesh_global_array *a = x->a;
    size_t esz = dtype_size(a->dtype);
    struct one_run r = {0};
    if (!x->spent || x->spent[l] || box_elems(from) * esz != a->shard_bytes ||
        a->shard_bytes < SHARD_LARGE || x->b->shard_bytes < SHARD_LARGE)
        return false;
    box_pair_runs(from, into, count_run, &r);
    if (r.runs != 1 || r.from_off || r.len * esz != a->shard_bytes)
        return false;
    unsigned char *to = (unsigned char *)dst + r.to_off * esz, *src = a->local[l].data.data;
    size_t moved = shard_move(to, src, (size_t)a->shard_bytes);
    if (!moved)
        return false;
    x->spent[l] = true;
    memcpy(to + moved, src + moved, (size_t)a->shard_bytes - moved);
    return true;
}

/* The new blocks' parts that this rank holds in the old layout, and the
 * replicas of each new block here, from its first. */
static void reshard_local(const struct reshard_run *x, int me)
{
    for (int q = 0; q < x->b->ndev; q++) {
        if (x->b_owner[q] != me || !first_here(x->b, x->b_owner, q))
            continue;
        shmesh_shard *dst = local_shard(x->b, q);
        for (int p0 = 0; p0 < x->a->ndev; p0++) {
            shmesh_index m;
            const shmesh_shard *src;
            if (!x->a_nholders[p0] || !meet(x, p0, q, &m) || !(src = old_here(x, p0, me)))
                continue;
            struct box from, into;
            shard_box(x->a, &x->a->global[p0].index, &m, &from);
            shard_box(x->b, &x->b->global[q].index, &m, &into);
            if (!move_shard(x, local_index_of(x, p0, me), &from, &into, dst->data.data))
                box_copy(&from, src->data.data, &into, dst->data.data);
        }
    }
    copy_replicas(x->b, x->b_owner, me);
}

/* b's shards from a's, as above: 0 or an error.  spent: a donated array's
 * (nlocal, false), else NULL. */
static int reshard_exchange(const shmesh_global_array *a, shmesh_global_array *b,
                            const shmesh_sharding *to, const char *fn, bool *spent)
{
    shmesh_ctx *c = a->ctx;
    struct reshard_run x = {a,
                            b,
                            owners_of(a),
                            owners_of(b),
                            calloc((size_t)a->ndev * (size_t)a->ndev, sizeof(int)),
                            calloc((size_t)a->ndev, sizeof(int)),
                            calloc((size_t)a->nlocal + 1, sizeof(uint64_t)),
                            calloc((size_t)a->ndev + 1, sizeof(uint64_t)),
                            spent};
    int rc = 0;
    if (!x.a_owner || !x.b_owner || !x.a_holders || !x.a_nholders || !x.dir || !x.peer_dir) {
        rc = ctx_fail(c, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    reshard_holders(&x);
    if (!a->local_only) { /* a process-local mesh's blocks are all here */
        struct call_desc d;
        array_desc(a, to, OP_GLOBAL_ARRAY_RESHARD, 0, -1, &d);
        for (int l = 0; l < a->nlocal; l++)
            x.dir[l] = (uint64_t)(uintptr_t)a->local[l].data.data;
        const struct transfers st = {.unit = dtype_size(a->dtype),
                                     .bytes = reshard_bytes,
                                     .pack = reshard_pack,
                                     .recv = reshard_recv,
                                     .rows = reshard_rows,
                                     .size = a->shard_bytes > b->shard_bytes ? a->shard_bytes
                                                                             : b->shard_bytes};
        rc = op_world_transfers(c, fn, &d, &st, &x, x.dir, a->nlocal);
    }
    if (!rc)
        reshard_local(&x, shmesh_rank(c));
out:
    free(x.a_owner);
    free(x.b_owner);
    free(x.a_holders);
    free(x.a_nholders);
    free(x.dir);
    free(x.peer_dir);
    return rc;
}

/* The reshard of a (donated: its shards' pages may be moved into the new
 * ones, and it is destroyed once the new array is made). */
static int reshard(shmesh_global_array *a, const shmesh_sharding *to, shmesh_global_array **out,
                   bool donated, const char *fn)
{
    shmesh_global_array *b;
    bool *spent = NULL;
    int rc = check_out(fn, out);
    if (rc)
        return rc;
    if (!a) {
        init_error("%s: the array is NULL", fn);
        return SHMESH_ERR_INVALID;
    }
    if ((rc = ctx_check(a->ctx, fn)) || (rc = layout(fn, to, a->dtype, a->ndim, a->shape, &b)))
        return rc;
    if (b->ctx != a->ctx) {
        rc = ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                      "%s: the target sharding's mesh belongs to another context than the "
                      "array's; expected a mesh of the array's job and context",
                      fn);
        goto fail;
    }
    if (b->local_only != a->local_only) {
        rc = ctx_fail(a->ctx, SHMESH_ERR_INVALID,
                      "%s: the array's mesh is %s but the target's is %s; expected both "
                      "process-local (shmesh_mesh_local_mesh) or both of the whole job",
                      fn, a->local_only ? "process-local" : "of the whole job",
                      b->local_only ? "process-local" : "of the whole job");
        goto fail;
    }
    if (donated && a->owned && a->nlocal &&
        !(spent = calloc((size_t)a->nlocal, sizeof *spent))) {
        rc = ctx_fail(a->ctx, SHMESH_ERR_NOMEM, "%s: out of memory", fn);
        goto fail;
    }
    /* Every byte of the new shards is written: by the exchange, from the
     * old shards here, or from a replica here. */
    if ((rc = alloc_shards(b, fn, false)) || (rc = reshard_exchange(a, b, to, fn, spent)))
        goto fail;
    *out = b;
    if (donated) {
        for (int l = 0; spent && l < a->nlocal; l++)
            if (spent[l]) { /* its pages are b's now */
                shard_discard(a->local[l].data.data, shard_alloc_bytes(a));
                a->local[l].data.data = NULL;
            }
        shmesh_global_array_destroy(a);
    }
    free(spent);
    return 0;
fail:
    /* Nothing was moved: moves are the last step, which cannot fail. */
    free(spent);
    shmesh_global_array_destroy(b);
    return rc;
}

int shmesh_global_array_reshard(const shmesh_global_array *a, const shmesh_sharding *to,
                                shmesh_global_array **out)
{
    return reshard((shmesh_global_array *)a, to, out, false, "shmesh_global_array_reshard");
}

int shmesh_global_array_reshard_donate(shmesh_global_array *a, const shmesh_sharding *to,
                                       shmesh_global_array **out)
{
    return reshard(a, to, out, true, "shmesh_global_array_reshard_donate");
}
