/* shmesh-test-garray: global arrays (jax.Array, GlobalDeviceArray) as a
 * job sees them, through the public library only.
 *
 *   shmesh-run -n P --devices-per-rank K -- shmesh-test-garray MODE [ARGS]
 *
 * Modes:
 *   examples       the examples of the GlobalDeviceArray docstrings (a job
 *                  of 8 devices): shard data, shapes and indices
 *   with-devices   the calls the per-block callback gets on a 4x2 mesh with
 *                  P('x'): one line per call
 *   prop SEED N    N random cases (meshes, device orders, specs, shapes,
 *                  dtypes) checked against the test's own slicing: every
 *                  constructor, gather to all and to a root, scatter,
 *                  reshard there and back
 *   errors         refused arguments and failing callbacks, each reported;
 *                  then the job must still work
 *   local-mesh     arrays over a process-local mesh: nothing collective
 *   mismatch       ranks gathering different arrays: SHMESH_ERR_MISMATCH
 *   mismatch-scatter  ranks scattering different arrays: the same
 *   mismatch-sharding WHAT  one array built with different shardings on
 *                  different ranks, then gathered or resharded (WHAT:
 *                  gather, gather-root, reshard, reshard-target): the same
 *
 * Every rank prints "rank R: ..." lines the suite reads.  Every rank makes
 * the same random draws (same seed), so collective calls match.  Exit
 * status: 0 when all is well, 3 when a call failed that should not have, 4
 * for a wrong result, 2 for bad usage. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "shmesh.h"

static int world;


static void wrong(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void wrong(const char *fmt, ...)
{
    va_list ap;
    printf("rank %d: WRONG: ", rank);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    exit(4);
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        printf("rank %d: out of memory\n", rank);
        exit(3);
    }
    return p;
}

/* ------------------------------------------------------------------------
 * The whole array on the host, and the test's own slicing of it.
 * ---------------------------------------------------------------------- */

struct host {
    shmesh_dtype dtype;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    size_t esz, bytes;
    unsigned char *data;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Random bytes (NaNs and all: comparisons are bitwise), or with `arange`
 * element i = i (int64 only), as numpy.arange fills the examples. */
static void host_init(struct host *h, shmesh_dtype dt, int ndim, const int64_t *shape,
                      uint64_t salt, bool arange)
{
    memset(h, 0, sizeof *h);
    h->dtype = dt;
    h->ndim = ndim;
    h->esz = shmesh_dtype_size(dt);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        h->shape[d] = shape[d];
        n *= (size_t)shape[d];
    }
    h->bytes = n * h->esz;
    h->data = xcalloc(h->bytes, 1);
    for (size_t i = 0; i < h->bytes; i++)
        h->data[i] = (unsigned char)mix(salt * 1000003u + i);
    if (arange)
        for (size_t i = 0; i < n; i++)
            ((int64_t *)(void *)h->data)[i] = (int64_t)i;
}

/* Copies the block of `ix` between the whole array and `packed` (the
 * block's own row-major order), an element at a time. */
static void block_copy(const struct host *h, const shmesh_index *ix, void *packed, bool to_host)
{
    int64_t ext[SHMESH_MAX_NDIM], idx[SHMESH_MAX_NDIM] = {0};
    uint64_t n = 1;
    for (int d = 0; d < h->ndim; d++) {
        ext[d] = ix->stop[d] - ix->start[d];
        n *= (uint64_t)ext[d];
    }
    for (uint64_t k = 0; k < n; k++) {
        uint64_t off = 0;
        for (int d = 0; d < h->ndim; d++)
            off = off * (uint64_t)h->shape[d] + (uint64_t)(ix->start[d] + idx[d]);
        unsigned char *g = h->data + off * h->esz, *p = (unsigned char *)packed + k * h->esz;
        memcpy(to_host ? g : p, to_host ? p : g, h->esz);
        for (int d = h->ndim - 1; d >= 0; d--) {
            if (++idx[d] < ext[d])
                break;
            idx[d] = 0;
        }
    }
}

static size_t shard_bytes(const shmesh_shard *sh)
{
    size_t n = shmesh_dtype_size(sh->data.dtype);
    for (int d = 0; d < sh->data.ndim; d++)
        n *= (size_t)sh->data.shape[d];
    return n;
}

static void fill_shard(const struct host *h, const shmesh_shard *sh)
{
    if (shard_bytes(sh))
        block_copy(h, &sh->index, sh->data.data, false);
}

static void block_str(char *buf, size_t len, int ndim, const shmesh_index *ix)
{
    int n = snprintf(buf, len, "[");
    for (int d = 0; d < ndim; d++)
        n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64 ":%" PRId64, d ? ", " : "",
                      ix->start[d], ix->stop[d]);
    snprintf(buf + n, len - (size_t)n, "]");
}

static bool same_block(int ndim, const shmesh_index *x, const shmesh_index *y)
{
    for (int d = 0; d < ndim; d++)
        if (x->start[d] != y->start[d] || x->stop[d] != y->stop[d])
            return false;
    return true;
}

/* Everything a global array says about its shards, against the whole
 * array `h`: local shards hold their blocks' data; global shards cover
 * every device in mesh order, with data exactly where local (the local
 * shards' buffers), and replica ids counting the holders of each block. */
static void check_array(const shmesh_global_array *a, const struct host *h, const char *what)
{
    const shmesh_sharding *s = shmesh_global_array_sharding(a);
    shmesh_mesh *m = shmesh_sharding_mesh(s);
    int ndev = shmesh_mesh_size(m);
    int64_t shape[SHMESH_MAX_NDIM], shard_shape[SHMESH_MAX_NDIM];
    if (shmesh_global_array_dtype(a) != h->dtype ||
        shmesh_global_array_shape(a, shape) != h->ndim ||
        (h->ndim && memcmp(shape, h->shape, sizeof *shape * (size_t)h->ndim)))
        wrong("%s: dtype or shape differ from the array made", what);
    MUST(shmesh_sharding_shard_shape(s, h->ndim, h->shape, shard_shape));
    int *ids = xcalloc((size_t)ndev, sizeof *ids), *local = xcalloc((size_t)ndev, sizeof *local);
    MUST(shmesh_mesh_device_ids(m, ids, ndev));
    int nlocal = shmesh_mesh_local_devices(m, local, ndev);
    MUST(nlocal);
    const shmesh_shard *ls, *gs;
    if (shmesh_global_array_local_shards(a, &ls) != nlocal)
        wrong("%s: %d local shards, expected %d", what,
              shmesh_global_array_local_shards(a, &ls), nlocal);
    if (shmesh_global_array_global_shards(a, &gs) != ndev)
        wrong("%s: not %d global shards", what, ndev);
    unsigned char *tmp = NULL;
    for (int l = 0; l < nlocal; l++) {
        const shmesh_shard *sh = &ls[l];
        size_t bytes = shard_bytes(sh);
        if (sh->index.device != local[l])
            wrong("%s: local shard %d is device %d, expected %d", what, l, sh->index.device,
                  local[l]);
        if (sh->data.dtype != h->dtype || sh->data.ndim != h->ndim ||
            (h->ndim && memcmp(sh->data.shape, shard_shape, sizeof *shard_shape * (size_t)h->ndim)))
            wrong("%s: local shard %d has not the shard shape", what, l);
        if (!bytes)
            continue;
        if (!sh->data.data)
            wrong("%s: local shard %d (%zu bytes) has no data", what, l, bytes);
        free(tmp);
        tmp = xcalloc(bytes, 1);
        block_copy(h, &sh->index, tmp, false);
        if (memcmp(tmp, sh->data.data, bytes)) {
            char b[200];
            block_str(b, sizeof b, h->ndim, &sh->index);
            wrong("%s: local shard %d (device %d, block %s) differs from the global data", what,
                  l, sh->index.device, b);
        }
    }
    free(tmp);
    for (int p = 0, l = 0; p < ndev; p++) {
        const shmesh_shard *g = &gs[p];
        if (g->index.device != ids[p])
            wrong("%s: global shard %d is device %d, expected %d", what, p, g->index.device,
                  ids[p]);
        int replica = 0;
        for (int q = 0; q < p; q++)
            replica += same_block(h->ndim, &gs[q].index, &g->index);
        if (g->index.replica_id != replica)
            wrong("%s: global shard %d has replica id %d, expected %d", what, p,
                  g->index.replica_id, replica);
        bool is_local = shmesh_device_process(ctx, ids[p]) == rank;
        if (is_local) {
            if (g->data.data != ls[l].data.data)
                wrong("%s: global shard %d's data is not local shard %d's", what, p, l);
            l++;
        } else if (g->data.data) {
            wrong("%s: global shard %d (device %d of rank %d) has data here", what, p, ids[p],
                  shmesh_device_process(ctx, ids[p]));
        }
    }
    free(ids);
    free(local);
}

/* The bytes a reshard from `a` to `b` must bring this rank: for each block
 * of b its devices hold (once), the parts of every block of a that its
 * devices do not hold. */
static uint64_t reshard_need(const shmesh_global_array *a, const shmesh_global_array *b, int ndim)
{
    const shmesh_shard *al, *ag, *bl;
    int na = shmesh_global_array_local_shards(a, &al), ng = shmesh_global_array_global_shards(a, &ag);
    int nb = shmesh_global_array_local_shards(b, &bl);
    size_t esz = shmesh_dtype_size(shmesh_global_array_dtype(a));
    uint64_t need = 0;
    for (int l = 0; l < nb; l++) {
        bool again = false;
        for (int m = 0; m < l; m++)
            again |= same_block(ndim, &bl[m].index, &bl[l].index);
        for (int p = 0; p < ng && !again; p++) {
            bool here = false, repeat = false;
            for (int m = 0; m < na; m++)
                here |= same_block(ndim, &al[m].index, &ag[p].index);
            for (int q = 0; q < p; q++)
                repeat |= same_block(ndim, &ag[q].index, &ag[p].index);
            if (here || repeat)
                continue;
            uint64_t n = esz;
            for (int d = 0; d < ndim; d++) {
                int64_t lo = ag[p].index.start[d] > bl[l].index.start[d] ? ag[p].index.start[d]
                                                                          : bl[l].index.start[d];
                int64_t hi = ag[p].index.stop[d] < bl[l].index.stop[d] ? ag[p].index.stop[d]
                                                                       : bl[l].index.stop[d];
                n *= (uint64_t)(hi > lo ? hi - lo : 0);
            }
            need += n;
        }
    }
    return need;
}

/* gather to every rank, and to `root`, gives the whole array; to `root`,
 * the other ranks receive nothing (shmesh_traffic_get). */
static void check_gather(const shmesh_global_array *a, const struct host *h, int root,
                         const char *what)
{
    unsigned char *out = xcalloc(h->bytes, 1);
    MUST(shmesh_global_array_gather(a, -1, out));
    if (h->bytes && memcmp(out, h->data, h->bytes))
        wrong("%s: gather to every rank differs from the global data", what);
    memset(out, 0, h->bytes);
    shmesh_traffic t0, t1;
    MUST(shmesh_traffic_get(ctx, &t0));
    MUST(shmesh_global_array_gather(a, root, rank == root ? out : NULL));
    MUST(shmesh_traffic_get(ctx, &t1));
    if (rank == root && h->bytes && memcmp(out, h->data, h->bytes))
        wrong("%s: gather to rank %d differs from the global data", what, root);
    if (rank != root && t1.received != t0.received)
        wrong("%s: gather to rank %d: rank %d received %llu bytes, expected none", what, root,
              rank, (unsigned long long)(t1.received - t0.received));
    free(out);
}

/* ------------------------------------------------------------------------
 * Callbacks.
 * ---------------------------------------------------------------------- */

struct src {
    const struct host *h;
    int fail_at; /* the call (counted from 0) that returns fail_rc; -1: none */
    int fail_rc;
    int calls;
    int nlocal;  /* batched: the count it must be given */
    /* with_devices: each call's devices, -1 ending each call. */
    int log[256];
    int nlog;
};

static int cb_one(void *arg, const shmesh_shard *sh)
{
    struct src *s = arg;
    if (s->calls++ == s->fail_at)
        return s->fail_rc;
    fill_shard(s->h, sh);
    return 0;
}

static int cb_batch(void *arg, const shmesh_shard *shards, int n)
{
    struct src *s = arg;
    if (s->calls++ == s->fail_at)
        return s->fail_rc;
    if (n != s->nlocal)
        wrong("the batched callback got %d shards, expected %d", n, s->nlocal);
    for (int i = 0; i < n; i++)
        fill_shard(s->h, &shards[i]);
    return 0;
}

static int cb_devices(void *arg, const shmesh_shard *shards, int n)
{
    struct src *s = arg;
    if (s->calls++ == s->fail_at)
        return s->fail_rc;
    for (int i = 0; i < n; i++) {
        if (!same_block(s->h->ndim, &shards[i].index, &shards[0].index))
            wrong("with_devices: one call got devices %d and %d of different blocks",
                  shards[0].index.device, shards[i].index.device);
        if (s->nlog < (int)(sizeof s->log / sizeof *s->log) - 1)
            s->log[s->nlog++] = shards[i].index.device;
        fill_shard(s->h, &shards[i]);
    }
    s->log[s->nlog++] = -1;
    return 0;
}

/* The with_devices calls, against the array's local shards: every local
 * device exactly once, each call one block that no other call has, calls
 * in mesh order of their first device, devices in mesh order. */
static void check_device_calls(const shmesh_global_array *a, const struct src *s, int ndim)
{
    const shmesh_shard *ls;
    int nlocal = shmesh_global_array_local_shards(a, &ls);
    int seen = 0, last_first = -1, last = -1;
    const shmesh_index *first = NULL, *firsts[256];
    int nfirst = 0;
    for (int i = 0; i < s->nlog; i++) {
        int dev = s->log[i];
        if (dev < 0) {
            first = NULL;
            continue;
        }
        int l = 0;
        while (l < nlocal && ls[l].index.device != dev)
            l++;
        if (l == nlocal)
            wrong("with_devices: called for device %d, not a local one", dev);
        if (!first) {
            if (l <= last_first)
                wrong("with_devices: a call starts at local shard %d after one at %d", l,
                      last_first);
            for (int f = 0; f < nfirst; f++)
                if (same_block(ndim, firsts[f], &ls[l].index))
                    wrong("with_devices: two calls for one block (device %d)", dev);
            first = firsts[nfirst++] = &ls[l].index;
            last_first = last = l;
        } else if (l <= last) {
            wrong("with_devices: devices of one call out of mesh order");
        } else {
            last = l;
        }
        seen++;
    }
    if (seen != nlocal)
        wrong("with_devices: %d devices passed, expected each of %d once", seen, nlocal);
    if (s->calls != nfirst)
        wrong("with_devices: %d calls logged, %d made", nfirst, s->calls);
}

/* ------------------------------------------------------------------------
 * Meshes and shardings.
 * ---------------------------------------------------------------------- */

/* This rank's devices in m. */
static int local_count(const shmesh_mesh *m)
{
    int n = shmesh_mesh_size(m), *ids = xcalloc((size_t)n, sizeof *ids);
    int got = shmesh_mesh_local_devices(m, ids, n);
    MUST(got);
    free(ids);
    return got;
}

static shmesh_mesh *mesh_of(int ndim, const int *sizes, const int *order)
{
    static const char *const names[] = {"x", "y", "z", "w"};
    shmesh_mesh *m;
    MUST(shmesh_mesh_create(ctx, ndim, names, sizes, order, &m));
    return m;
}

static shmesh_sharding *sharding_of(shmesh_mesh *m, const char *spec)
{
    shmesh_pspec p;
    shmesh_sharding *s;
    MUST(shmesh_pspec_parse(spec, &p));
    MUST(shmesh_sharding_create(m, &p, &s));
    return s;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape)
{
    int n = snprintf(buf, len, "(");
    for (int d = 0; d < ndim; d++)
        n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64, d ? ", " : "", shape[d]);
    snprintf(buf + n, len - (size_t)n, "%s)", ndim == 1 ? "," : "");
}

/* ------------------------------------------------------------------------
 * examples
 * ---------------------------------------------------------------------- */

/* "[[0], [2]]": an int64 shard as nested lists. */
static void int_text(char *buf, size_t len, const shmesh_shard *sh)
{
    const int64_t *v = sh->data.data;
    int64_t rows = sh->data.shape[0], cols = sh->data.shape[1];
    int n = snprintf(buf, len, "[");
    for (int64_t r = 0; r < rows; r++) {
        n += snprintf(buf + n, len - (size_t)n, "%s[", r ? ", " : "");
        for (int64_t c = 0; c < cols; c++)
            n += snprintf(buf + n, len - (size_t)n, "%s%" PRId64, c ? ", " : "", v[r * cols + c]);
        n += snprintf(buf + n, len - (size_t)n, "]");
    }
    snprintf(buf + n, len - (size_t)n, "]");
}

static shmesh_global_array *example(const char *how, const int *mesh_sizes, const char *spec,
                                    const int64_t *shape, struct host *h, shmesh_mesh **m,
                                    shmesh_sharding **s)
{
    *m = mesh_of(2, mesh_sizes, NULL);
    *s = sharding_of(*m, spec);
    host_init(h, SHMESH_INT64, 2, shape, 0, true);
    struct src src = {.h = h, .fail_at = -1, .nlocal = local_count(*m)};
    shmesh_global_array *a;
    if (!strcmp(how, "from_callback"))
        MUST(shmesh_global_array_from_callback(*s, SHMESH_INT64, 2, shape, cb_one, &src, &a));
    else if (!strcmp(how, "from_batched_callback"))
        MUST(shmesh_global_array_from_batched_callback(*s, SHMESH_INT64, 2, shape, cb_batch, &src,
                                                       &a));
    else
        MUST(shmesh_global_array_from_callback_with_devices(*s, SHMESH_INT64, 2, shape,
                                                            cb_devices, &src, &a));
    if (!strcmp(how, "from_batched_callback") && src.calls != 1)
        wrong("the batched callback was called %d times", src.calls);
    check_array(a, h, how);
    check_gather(a, h, world - 1, how);
    const shmesh_shard *ls;
    MUST(shmesh_global_array_local_shards(a, &ls));
    char sh[64];
    shape_str(sh, sizeof sh, ls[0].data.ndim, ls[0].data.shape);
    printf("rank %d: %s %s: local_data(0).shape %s\n", rank, how, spec, sh);
    return a;
}

static void done_example(shmesh_global_array *a, struct host *h, shmesh_mesh *m,
                         shmesh_sharding *s)
{
    shmesh_global_array_destroy(a);
    shmesh_sharding_destroy(s);
    shmesh_mesh_destroy(m);
    free(h->data);
}

static int mode_examples(void)
{
    if (shmesh_device_count(ctx) != 8) {
        printf("rank %d: the examples need 8 devices, the job has %d\n", rank,
               shmesh_device_count(ctx));
        return 2;
    }
    struct host h;
    shmesh_mesh *m;
    shmesh_sharding *s;
    /* The class docstring: (8, 2) over a 4x2 mesh, P('x', 'y'). */
    shmesh_global_array *a =
        example("from_callback", (int[]){4, 2}, "x,y", (int64_t[]){8, 2}, &h, &m, &s);
    const shmesh_shard *ls;
    MUST(shmesh_global_array_local_shards(a, &ls));
    int64_t shape[SHMESH_MAX_NDIM];
    char gshape[64], data[128], sshape[64];
    shape_str(gshape, sizeof gshape, shmesh_global_array_shape(a, shape), shape);
    int_text(data, sizeof data, &ls[0]);
    shape_str(sshape, sizeof sshape, ls[0].data.ndim, ls[0].data.shape);
    printf("rank %d: gda.shape %s; local_shards[0]: data %s, shape %s, index "
           "(slice(%" PRId64 ", %" PRId64 "), slice(%" PRId64 ", %" PRId64 "))\n",
           rank, gshape, data, sshape, ls[0].index.start[0], ls[0].index.stop[0],
           ls[0].index.start[1], ls[0].index.stop[1]);
    done_example(a, &h, m, s);
    /* from_callback: (8, 8) over 2x4, P('x', 'y'). */
    a = example("from_callback", (int[]){2, 4}, "x,y", (int64_t[]){8, 8}, &h, &m, &s);
    done_example(a, &h, m, s);
    /* from_batched_callback: (8, 2) over 4x2, P('x'). */
    a = example("from_batched_callback", (int[]){4, 2}, "x", (int64_t[]){8, 2}, &h, &m, &s);
    done_example(a, &h, m, s);
    /* from_batched_callback_with_devices: (8, 2) over 4x2, P(('x', 'y')). */
    a = example("from_callback_with_devices", (int[]){4, 2}, "(x,y)", (int64_t[]){8, 2}, &h, &m,
                &s);
    done_example(a, &h, m, s);
    return 0;
}

/* ------------------------------------------------------------------------
 * with-devices: (8, 2) over a 4x2 mesh with P('x'): the two devices of
 * each row of the mesh share a block.
 * ---------------------------------------------------------------------- */

static int mode_with_devices(void)
{
    int ndev = shmesh_device_count(ctx);
    if (ndev % 2) {
        printf("rank %d: with-devices needs an even device count, the job has %d\n", rank, ndev);
        return 2;
    }
    shmesh_mesh *m = mesh_of(2, (int[]){ndev / 2, 2}, NULL);
    shmesh_sharding *s = sharding_of(m, "x");
    int64_t shape[] = {ndev, 2};
    struct host h;
    host_init(&h, SHMESH_FLOAT32, 2, shape, 7, false);
    struct src src = {.h = &h, .fail_at = -1};
    shmesh_global_array *a;
    MUST(shmesh_global_array_from_callback_with_devices(s, SHMESH_FLOAT32, 2, shape, cb_devices,
                                                        &src, &a));
    check_device_calls(a, &src, 2);
    check_array(a, &h, "with-devices");
    const shmesh_shard *ls;
    int nlocal = shmesh_global_array_local_shards(a, &ls), call = 0;
    for (int i = 0; i < src.nlog; call++) {
        char line[256], b[64];
        int l = 0;
        while (ls[l].index.device != src.log[i])
            l++;
        block_str(b, sizeof b, 2, &ls[l].index);
        int n = snprintf(line, sizeof line, "rank %d: with_devices call %d: block %s devices", rank,
                         call, b);
        for (; src.log[i] >= 0; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %d", src.log[i]);
        i++;
        printf("%s\n", line);
    }
    printf("rank %d: with_devices %d calls for %d local devices\n", rank, call, nlocal);
    shmesh_global_array_destroy(a);
    shmesh_sharding_destroy(s);
    shmesh_mesh_destroy(m);
    free(h.data);
    return 0;
}

/* ------------------------------------------------------------------------
 * prop: random cases.
 * ---------------------------------------------------------------------- */

static uint64_t rng_state;

static unsigned rnd(unsigned n)
{
    rng_state = mix(rng_state);
    return n ? (unsigned)(rng_state % n) : 0;
}

/* A mesh of every device: 1 to 3 axes whose sizes multiply to the device
 * count, and half the time a shuffled device order. */
static shmesh_mesh *random_mesh(void)
{
    int ndev = shmesh_device_count(ctx), ndim = 1 + (int)rnd(3), sizes[3], rem = ndev;
    for (int d = 0; d < ndim - 1; d++) {
        int divs[64], n = 0;
        for (int k = 1; k <= rem; k++)
            if (rem % k == 0)
                divs[n++] = k;
        sizes[d] = divs[rnd((unsigned)n)];
        rem /= sizes[d];
    }
    sizes[ndim - 1] = rem;
    int *order = NULL;
    if (rnd(2)) {
        order = xcalloc((size_t)ndev, sizeof *order);
        for (int i = 0; i < ndev; i++)
            order[i] = i;
        for (int i = ndev - 1; i > 0; i--) {
            int j = (int)rnd((unsigned)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    shmesh_mesh *m = mesh_of(ndim, sizes, order);
    free(order);
    return m;
}

/* A spec for `ndim` dimensions over m's axes (each used at most once):
 * None, one axis or a pair per dimension, trailing entries sometimes left
 * out.  factor[d] receives how many pieces dimension d is cut into. */
static void random_spec(shmesh_mesh *m, int ndim, char *text, size_t len, int64_t *factor)
{
    int naxes = shmesh_mesh_ndim(m);
    bool used[SHMESH_MAX_MESH_DIMS] = {false};
    int entries = ndim - (ndim ? (int)rnd((unsigned)ndim + 1) / 2 : 0);
    int n = 0;
    text[0] = '\0';
    for (int d = 0; d < ndim; d++) {
        factor[d] = 1;
        if (d >= entries)
            continue;
        int free_axes[SHMESH_MAX_MESH_DIMS], nfree = 0;
        for (int k = 0; k < naxes; k++)
            if (!used[k])
                free_axes[nfree++] = k;
        unsigned kind = rnd(10);
        int take = kind < 4 || !nfree ? 0 : kind < 8 || nfree < 2 ? 1 : 2;
        n += snprintf(text + n, len - (size_t)n, "%s", d ? "," : "");
        if (!take) {
            n += snprintf(text + n, len - (size_t)n, "%s", rnd(2) ? "None" : "-");
            continue;
        }
        n += snprintf(text + n, len - (size_t)n, "%s", take > 1 ? "(" : "");
        for (int t = 0; t < take; t++) {
            int pick = (int)rnd((unsigned)nfree), k = free_axes[pick];
            free_axes[pick] = free_axes[--nfree];
            used[k] = true;
            factor[d] *= shmesh_mesh_dim_size(m, k);
            n += snprintf(text + n, len - (size_t)n, "%s%s", t ? "," : "",
                          shmesh_mesh_axis_name(m, k));
        }
        n += snprintf(text + n, len - (size_t)n, "%s", take > 1 ? ")" : "");
    }
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

static void prop_case(int k)
{
    char what[1024];
    shmesh_dtype dt = (shmesh_dtype)rnd(SHMESH_DTYPE_COUNT);
    unsigned r = rnd(8); /* scalars and 4 dimensions one case in 8 each */
    int ndim = r == 0 ? 0 : r == 7 ? 4 : 1 + (int)(r - 1) % 3;
    shmesh_mesh *m1 = random_mesh(), *m2 = random_mesh();
    char spec1[128], spec2[128];
    int64_t f1[SHMESH_MAX_NDIM], f2[SHMESH_MAX_NDIM], shape[SHMESH_MAX_NDIM];
    random_spec(m1, ndim, spec1, sizeof spec1, f1);
    random_spec(m2, ndim, spec2, sizeof spec2, f2);
    bool empty = rnd(10) == 0;
    for (int d = 0; d < ndim; d++) {
        int64_t lcm = f1[d] / gcd64(f1[d], f2[d]) * f2[d];
        shape[d] = lcm * (empty && d == ndim - 1 ? 0 : 1 + (int64_t)rnd(3));
    }
    char sh[96];
    shape_str(sh, sizeof sh, ndim, shape);
    char t1[96], t2[96];
    shmesh_mesh_text(m1, t1, sizeof t1);
    shmesh_mesh_text(m2, t2, sizeof t2);
    snprintf(what, sizeof what, "case %d: %s%s over %s P(%s) then %s P(%s)", k,
             shmesh_dtype_name(dt), sh, t1, spec1, t2, spec2);
    shmesh_sharding *s1 = sharding_of(m1, spec1), *s2 = sharding_of(m2, spec2);
    struct host h;
    host_init(&h, dt, ndim, shape, rng_state, false);
    int root = (int)rnd((unsigned)world);

    /* Every constructor makes the same array. */
    struct src src = {.h = &h, .fail_at = -1};
    shmesh_global_array *a, *b, *c;
    MUST(shmesh_global_array_from_callback(s1, dt, ndim, shape, cb_one, &src, &a));
    check_array(a, &h, what);
    check_gather(a, &h, root, what);
    src = (struct src){.h = &h, .fail_at = -1};
    src.nlocal = shmesh_global_array_local_shards(a, &(const shmesh_shard *){NULL});
    MUST(shmesh_global_array_from_batched_callback(s1, dt, ndim, shape, cb_batch, &src, &b));
    check_array(b, &h, what);
    shmesh_global_array_destroy(b);
    src = (struct src){.h = &h, .fail_at = -1};
    MUST(shmesh_global_array_from_callback_with_devices(s2, dt, ndim, shape, cb_devices, &src,
                                                        &b));
    check_device_calls(b, &src, ndim);
    check_array(b, &h, what);
    shmesh_global_array_destroy(b);

    /* scatter from a root, then gather back; a rank other than the root
     * receives each block its devices hold once, and nothing else. */
    shmesh_traffic st0, st1;
    MUST(shmesh_traffic_get(ctx, &st0));
    MUST(shmesh_global_array_scatter(s2, dt, ndim, shape, root, rank == root ? h.data : NULL,
                                     &b));
    MUST(shmesh_traffic_get(ctx, &st1));
    check_array(b, &h, what);
    {
        const shmesh_shard *bs;
        int nb = shmesh_global_array_local_shards(b, &bs);
        uint64_t want = 0;
        for (int l = 0; l < nb && rank != root; l++) {
            bool seen = false;
            for (int m = 0; m < l; m++)
                seen |= same_block(ndim, &bs[m].index, &bs[l].index);
            want += seen ? 0 : shard_bytes(&bs[l]);
        }
        if (st1.received - st0.received != want)
            wrong("%s: scatter from rank %d: rank %d received %llu bytes, expected %llu (its "
                  "blocks once)", what, root, rank, (unsigned long long)(st1.received - st0.received),
                  (unsigned long long)want);
    }
    check_gather(b, &h, (root + 1) % world, what);

    /* Borrowed buffers: the caller's own copies of b's shards. */
    const shmesh_shard *ls;
    int nlocal = shmesh_global_array_local_shards(b, &ls);
    void **bufs = xcalloc((size_t)nlocal, sizeof *bufs);
    for (int l = 0; l < nlocal; l++) {
        bufs[l] = xcalloc(shard_bytes(&ls[l]), 1);
        if (shard_bytes(&ls[l]))
            memcpy(bufs[l], ls[l].data.data, shard_bytes(&ls[l]));
    }
    MUST(shmesh_global_array_create(s2, dt, ndim, shape, bufs, &c));
    check_array(c, &h, what);
    check_gather(c, &h, root, what);
    const shmesh_shard *cs;
    shmesh_global_array_local_shards(c, &cs);
    for (int l = 0; l < nlocal; l++)
        if (shard_bytes(&cs[l]) && cs[l].data.data != bufs[l])
            wrong("%s: create does not use the caller's buffer %d", what, l);
    shmesh_global_array_destroy(c);
    shmesh_global_array_destroy(b);

    /* reshard there and back, bit for bit; a rank receives exactly the
     * parts of its new blocks that it does not hold already. */
    shmesh_traffic rt0, rt1;
    MUST(shmesh_traffic_get(ctx, &rt0));
    MUST(shmesh_global_array_reshard(a, s2, &b));
    MUST(shmesh_traffic_get(ctx, &rt1));
    check_array(b, &h, what);
    if (rt1.received - rt0.received != reshard_need(a, b, ndim))
        wrong("%s: reshard: rank %d received %llu bytes, expected %llu", what, rank,
              (unsigned long long)(rt1.received - rt0.received),
              (unsigned long long)reshard_need(a, b, ndim));
    MUST(shmesh_global_array_reshard(b, s1, &c));
    check_array(c, &h, what);
    const shmesh_shard *as;
    shmesh_global_array_local_shards(a, &as);
    shmesh_global_array_local_shards(c, &cs);
    for (int l = 0; l < shmesh_global_array_local_shards(a, &as); l++)
        if (shard_bytes(&as[l]) && memcmp(as[l].data.data, cs[l].data.data, shard_bytes(&as[l])))
            wrong("%s: reshard there and back changed local shard %d", what, l);
    shmesh_global_array_destroy(c);
    shmesh_global_array_destroy(b);
    shmesh_global_array_destroy(a);

    for (int l = 0; l < nlocal; l++)
        free(bufs[l]);
    free(bufs);
    free(h.data);
    shmesh_sharding_destroy(s1);
    shmesh_sharding_destroy(s2);
    shmesh_mesh_destroy(m1);
    shmesh_mesh_destroy(m2);
    if (getenv("GARRAY_VERBOSE"))
        printf("rank %d: %s ok\n", rank, what);
}

static int mode_prop(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int cases = atoi(argv[3]);
    rng_state = seed;
    for (int k = 0; k < cases; k++)
        prop_case(k);
    printf("rank %d: prop seed %" PRIu64 ": %d cases ok (%d ranks, %d devices)\n", rank, seed,
           cases, world, shmesh_device_count(ctx));
    return 0;
}

/* ------------------------------------------------------------------------
 * errors
 * ---------------------------------------------------------------------- */

/* A call that must fail with `want`: "rank R: CASE -> ERROR: message". */
static void expect(const char *name, int rc, int want, bool on_thread)
{
    printf("rank %d: %s -> %s: %s\n", rank, name, shmesh_error_name(rc),
           rc ? (on_thread ? shmesh_last_error(NULL) : shmesh_last_error(ctx)) : "");
    if (rc != want)
        wrong("%s returned %s, expected %s", name, shmesh_error_name(rc), shmesh_error_name(want));
}

static int mode_errors(void)
{
    int ndev = shmesh_device_count(ctx);
    if (ndev < 2) {
        printf("rank %d: errors needs 2 devices or more, the job has %d\n", rank, ndev);
        return 2;
    }
    shmesh_mesh *m = mesh_of(1, (int[]){ndev}, NULL);
    shmesh_sharding *s = sharding_of(m, "x");
    int64_t shape[] = {ndev * 2, 3};
    struct host h;
    host_init(&h, SHMESH_INT32, 2, shape, 3, false);
    int nlocal = local_count(m);
    shmesh_global_array *a = (shmesh_global_array *)&a; /* must become NULL */

    /* A global array needs a concrete mesh. */
    shmesh_mesh *abstract;
    shmesh_sharding *sa;
    MUST(shmesh_abstract_mesh_create(1, (const char *const[]){"x"}, (int[]){ndev}, &abstract));
    MUST(shmesh_sharding_create(abstract, &(shmesh_pspec){0}, &sa));
    struct src src = {.h = &h, .fail_at = -1};
    expect("abstract", shmesh_global_array_from_callback(sa, SHMESH_INT32, 2, shape, cb_one, &src,
                                                         &a),
           SHMESH_ERR_INVALID, true);
    if (a)
        wrong("abstract: out was not cleared");
    shmesh_sharding_destroy(sa);
    shmesh_mesh_destroy(abstract);

    /* Callbacks that fail, at the last call: everything made so far goes. */
    src = (struct src){.h = &h, .fail_at = nlocal - 1, .fail_rc = 7};
    expect("callback", shmesh_global_array_from_callback(s, SHMESH_INT32, 2, shape, cb_one, &src,
                                                         &a),
           SHMESH_ERR_INVALID, false);
    src = (struct src){.h = &h, .fail_at = 0, .fail_rc = -2};
    expect("batched-callback",
           shmesh_global_array_from_batched_callback(s, SHMESH_INT32, 2, shape, cb_batch, &src,
                                                     &a),
           SHMESH_ERR_INVALID, false);
    src = (struct src){.h = &h, .fail_at = nlocal - 1, .fail_rc = 5};
    expect("with-devices-callback",
           shmesh_global_array_from_callback_with_devices(s, SHMESH_INT32, 2, shape, cb_devices,
                                                          &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("null-callback",
           shmesh_global_array_from_callback(s, SHMESH_INT32, 2, shape, NULL, NULL, &a),
           SHMESH_ERR_INVALID, false);

    /* Shapes, dtypes and NULLs. */
    expect("indivisible",
           shmesh_global_array_from_callback(s, SHMESH_INT32, 1, (int64_t[]){ndev + 1}, cb_one,
                                             &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("negative",
           shmesh_global_array_from_callback(s, SHMESH_INT32, 2, (int64_t[]){ndev, -1}, cb_one,
                                             &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("ndim", shmesh_global_array_from_callback(s, SHMESH_INT32, 9, shape, cb_one, &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("dtype",
           shmesh_global_array_from_callback(s, (shmesh_dtype)99, 2, shape, cb_one, &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("too-large",
           shmesh_global_array_from_callback(s, SHMESH_INT8, 2, (int64_t[]){(int64_t)ndev << 40,
                                                                          INT64_C(1) << 40},
                                             cb_one, &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("null-shape",
           shmesh_global_array_from_callback(s, SHMESH_INT32, 2, NULL, cb_one, &src, &a),
           SHMESH_ERR_INVALID, false);
    expect("null-out", shmesh_global_array_from_callback(s, SHMESH_INT32, 2, shape, cb_one, &src,
                                                         NULL),
           SHMESH_ERR_INVALID, true);
    expect("null-sharding",
           shmesh_global_array_from_callback(NULL, SHMESH_INT32, 2, shape, cb_one, &src, &a),
           SHMESH_ERR_INVALID, true);
    expect("null-buffers", shmesh_global_array_create(s, SHMESH_INT32, 2, shape, NULL, &a),
           SHMESH_ERR_INVALID, false);
    if (a)
        wrong("a refused construction left out set");

    /* Collectives refused alike on every rank before anything moves. */
    expect("scatter-root",
           shmesh_global_array_scatter(s, SHMESH_INT32, 2, shape, -1, h.data, &a),
           SHMESH_ERR_INVALID, false);
    if (world == 1) /* only the root looks at data: elsewhere the others would wait */
        expect("scatter-null-data",
               shmesh_global_array_scatter(s, SHMESH_INT32, 2, shape, 0, NULL, &a),
               SHMESH_ERR_INVALID, false);
    src = (struct src){.h = &h, .fail_at = -1};
    MUST(shmesh_global_array_from_callback(s, SHMESH_INT32, 2, shape, cb_one, &src, &a));
    unsigned char *out = xcalloc(h.bytes, 1);
    expect("gather-root", shmesh_global_array_gather(a, world, out), SHMESH_ERR_INVALID, false);
    expect("gather-null-out", shmesh_global_array_gather(a, -1, NULL), SHMESH_ERR_INVALID, false);
    shmesh_sharding *bad = sharding_of(m, "-,x"); /* 3 columns over ndev devices */
    shmesh_global_array *b = (shmesh_global_array *)&b;
    if (ndev > 1 && ndev != 3)
        expect("reshard-indivisible", shmesh_global_array_reshard(a, bad, &b), SHMESH_ERR_INVALID,
               false);
    else
        b = NULL;
    if (b)
        wrong("reshard-indivisible: out was not cleared");
    expect("reshard-null", shmesh_global_array_reshard(a, NULL, &b), SHMESH_ERR_INVALID, true);
    expect("accessor-null", shmesh_global_array_local_shards(NULL, NULL), SHMESH_ERR_INVALID, true);

    /* The job goes on. */
    MUST(shmesh_global_array_gather(a, -1, out));
    if (memcmp(out, h.data, h.bytes))
        wrong("gather after the refusals differs from the global data");
    printf("rank %d: errors: job usable\n", rank);
    free(out);
    shmesh_global_array_destroy(a);
    shmesh_global_array_destroy(NULL);
    shmesh_sharding_destroy(bad);
    shmesh_sharding_destroy(s);
    shmesh_mesh_destroy(m);
    free(h.data);
    return 0;
}

/* ------------------------------------------------------------------------
 * local-mesh: arrays over this rank's local mesh move nothing between
 * ranks: only rank 0 gathers, scatters and reshards them, then every rank
 * meets in a barrier (which a stray collective would not match).
 * ---------------------------------------------------------------------- */

static int mode_local_mesh(void)
{
    int k = shmesh_local_device_count(ctx);
    shmesh_mesh *m = mesh_of(2, (int[]){world, k}, NULL), *lm;
    MUST(shmesh_mesh_local_mesh(m, &lm));
    if (rank == 0) {
        shmesh_sharding *rows = sharding_of(lm, "y,-"), *cols = sharding_of(lm, "-,y");
        shmesh_sharding *whole = sharding_of(m, "-"); /* replicated over the job */
        int64_t shape[] = {2 * k, 3 * k};
        struct host h;
        host_init(&h, SHMESH_UINT16, 2, shape, 11, false);
        struct src src = {.h = &h, .fail_at = -1};
        shmesh_global_array *a, *b, *c;
        MUST(shmesh_global_array_from_callback(rows, SHMESH_UINT16, 2, shape, cb_one, &src, &a));
        check_array(a, &h, "local mesh");
        check_gather(a, &h, 0, "local mesh");
        MUST(shmesh_global_array_scatter(cols, SHMESH_UINT16, 2, shape, 0, h.data, &b));
        check_array(b, &h, "local mesh scatter");
        MUST(shmesh_global_array_reshard(b, rows, &c));
        check_array(c, &h, "local mesh reshard");
        shmesh_global_array_destroy(c);
        c = (shmesh_global_array *)&c;
        if (world > 1)
            expect("local-scatter-root",
                   shmesh_global_array_scatter(cols, SHMESH_UINT16, 2, shape, 1, h.data, &c),
                   SHMESH_ERR_INVALID, false);
        expect("local-reshard-to-job", shmesh_global_array_reshard(a, whole, &c),
               SHMESH_ERR_INVALID, false);
        if (c)
            wrong("a refused reshard left out set");
        shmesh_global_array_destroy(b);
        shmesh_global_array_destroy(a);
        shmesh_sharding_destroy(whole);
        shmesh_sharding_destroy(cols);
        shmesh_sharding_destroy(rows);
        free(h.data);
        printf("rank 0: local mesh: gather, scatter and reshard without the other ranks ok\n");
    }
    MUST(shmesh_barrier(ctx));
    shmesh_mesh_destroy(lm);
    shmesh_mesh_destroy(m);
    return 0;
}

/* ------------------------------------------------------------------------
 * mismatch: rank 0 gathers an int32 array, the others a float32 one of the
 * same bytes: every rank fails, naming both calls.
 * ---------------------------------------------------------------------- */

static int mode_mismatch(bool scatter)
{
    int ndev = shmesh_device_count(ctx);
    shmesh_mesh *m = mesh_of(1, (int[]){ndev}, NULL);
    shmesh_sharding *s = sharding_of(m, "x");
    shmesh_dtype dt = rank == 0 ? SHMESH_INT32 : SHMESH_FLOAT32;
    int64_t shape[] = {ndev, 2};
    struct host h;
    host_init(&h, dt, 2, shape, 5, false);
    struct src src = {.h = &h, .fail_at = -1};
    shmesh_global_array *a;
    unsigned char *out = xcalloc(h.bytes, 1);
    if (scatter) {
        a = NULL;
        expect("scatter", shmesh_global_array_scatter(s, dt, 2, shape, 0, h.data, &a),
               SHMESH_ERR_MISMATCH, false);
    } else {
        MUST(shmesh_global_array_from_callback(s, dt, 2, shape, cb_one, &src, &a));
        expect("gather", shmesh_global_array_gather(a, -1, out), SHMESH_ERR_MISMATCH, false);
    }
    free(out);
    shmesh_global_array_destroy(a);
    shmesh_sharding_destroy(s);
    shmesh_mesh_destroy(m);
    free(h.data);
    return -1; /* the context is poisoned: finalize only releases it */
}

/* ------------------------------------------------------------------------
 * mismatch-sharding WHAT: the same array built with different shardings
 * on different ranks.  Rank 0 holds A as P() (replicated: a gather needs
 * nothing from the others), the other ranks as P('x'); every rank holds B
 * as P('x').  WHAT:
 *   gather          A, then B, to every rank
 *   gather-root     A to rank 1
 *   reshard         A to P('x')
 *   reshard-target  B to P() on rank 0, to P('x') on the others
 * Every rank must fail at its first call with SHMESH_ERR_MISMATCH naming
 * both shardings (never OK with another rank's array, as when the
 * replicated rank skipped the exchange and paired A with the others' B).
 * ---------------------------------------------------------------------- */

static int mode_mismatch_sharding(const char *what)
{
    int ndev = shmesh_device_count(ctx);
    if (world < 2) {
        printf("rank %d: mismatch-sharding needs 2 ranks or more, the job has %d\n", rank, world);
        return 2;
    }
    shmesh_mesh *m = mesh_of(1, (int[]){ndev}, NULL);
    shmesh_sharding *split = sharding_of(m, "x"), *whole = sharding_of(m, "");
    int64_t shape[] = {ndev, 2};
    struct host ha, hb;
    host_init(&ha, SHMESH_INT32, 2, shape, 5, false);
    host_init(&hb, SHMESH_INT32, 2, shape, 6, false);
    struct src sa = {.h = &ha, .fail_at = -1}, sb = {.h = &hb, .fail_at = -1};
    shmesh_global_array *a, *b, *c = NULL;
    MUST(shmesh_global_array_from_callback(rank == 0 ? whole : split, SHMESH_INT32, 2, shape,
                                           cb_one, &sa, &a));
    MUST(shmesh_global_array_from_callback(split, SHMESH_INT32, 2, shape, cb_one, &sb, &b));
    unsigned char *out = xcalloc(ha.bytes, 1);
    if (!strcmp(what, "gather")) {
        expect("gather-A", shmesh_global_array_gather(a, -1, out), SHMESH_ERR_MISMATCH, false);
        expect("gather-B", shmesh_global_array_gather(b, -1, out), SHMESH_ERR_MISMATCH, false);
    } else if (!strcmp(what, "gather-root")) {
        expect("gather-root", shmesh_global_array_gather(a, 1, out), SHMESH_ERR_MISMATCH, false);
    } else if (!strcmp(what, "reshard")) {
        expect("reshard", shmesh_global_array_reshard(a, split, &c), SHMESH_ERR_MISMATCH, false);
    } else if (!strcmp(what, "reshard-target")) {
        expect("reshard-target", shmesh_global_array_reshard(b, rank == 0 ? whole : split, &c),
               SHMESH_ERR_MISMATCH, false);
    } else {
        printf("rank %d: mismatch-sharding: unknown case %s\n", rank, what);
        return 2;
    }
    if (c)
        wrong("a failed reshard left out set");
    free(out);
    shmesh_global_array_destroy(b);
    shmesh_global_array_destroy(a);
    shmesh_sharding_destroy(whole);
    shmesh_sharding_destroy(split);
    shmesh_mesh_destroy(m);
    free(ha.data);
    free(hb.data);
    return -1; /* the context is poisoned: finalize only releases it */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s examples|with-devices|prop SEED N|errors|local-mesh|mismatch|"
                "mismatch-scatter|mismatch-sharding WHAT\n",
                argv[0]);
        return 2;
    }
    int rc = shmesh_init(&ctx);
    if (rc) {
        printf("rank ?: shmesh_init -> %s: %s\n", shmesh_error_name(rc), shmesh_last_error(NULL));
        return 3;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    const char *mode = argv[1];
    if (!strcmp(mode, "examples"))
        rc = mode_examples();
    else if (!strcmp(mode, "with-devices"))
        rc = mode_with_devices();
    else if (!strcmp(mode, "prop"))
        rc = mode_prop(argc, argv);
    else if (!strcmp(mode, "errors"))
        rc = mode_errors();
    else if (!strcmp(mode, "local-mesh"))
        rc = mode_local_mesh();
    else if (!strcmp(mode, "mismatch"))
        rc = mode_mismatch(false);
    else if (!strcmp(mode, "mismatch-scatter"))
        rc = mode_mismatch(true);
    else if (!strcmp(mode, "mismatch-sharding") && argc > 2)
        rc = mode_mismatch_sharding(argv[2]);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        rc = 2;
    }
    if (rc > 0)
        return rc;
    bool poisoned = rc < 0;
    rc = shmesh_finalize(ctx);
    if (rc && !poisoned) {
        printf("rank %d: shmesh_finalize -> %s: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 3;
    }
    return 0;
}
