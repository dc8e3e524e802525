/* ppermute, pshuffle, pbroadcast: whole inputs moved between positions. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ops/prologue.h"
#include "paths/cma.h"

struct move {
    const shmesh_array *in;
    shmesh_array *out;
    uint64_t bytes;
    const int *dest; /* ppermute: position each position sends to, or -1 */
    int source;      /* pbroadcast */
};

static uint64_t permute_bytes(const struct xchg *x, int from, int to)
{
    const struct move *mv = x->op;
    return mv->dest[from] == to ? mv->bytes : 0;
}

static void copy_in(const struct xchg *x, int to, uint64_t off, uint64_t len, void *dst)
{
    const struct move *mv = x->op;
    memcpy(dst, (const unsigned char *)mv->in->data + off, len);
}

static void copy_out(const struct xchg *x, int from, uint64_t off, const void *src, uint64_t len)
{
    const struct move *mv = x->op;
    memcpy((unsigned char *)mv->out->data + off, src, len);
}

static int same_shape_out(struct coll *k, const shmesh_array *in, shmesh_array *out,
                          uint64_t *bytes)
{
    uint64_t n_in, n_out;
    int rc;
    if ((rc = coll_arrays(k, in, "in", out, "out", &n_in, &n_out)) ||
        (rc = array_expect(k->c, k->name, "out", out, in->dtype, in->ndim, in->shape)))
        return rc;
    *bytes = n_in * shmesh_dtype_size(in->dtype);
    return coll_no_overlap(k, in->data, *bytes, out->data, *bytes, false);
}

static void permute_direct(const struct xchg *x, unsigned char *const *in,
                           unsigned char *const *out)
{
    const struct move *mv = x->op;
    for (int q = 0; q < x->g.n; q++)
        if (mv->dest[q] == x->g.me)
            memcpy(mv->out->data, in[q], (size_t)mv->bytes);
}

static void broadcast_direct(const struct xchg *x, unsigned char *const *in,
                             unsigned char *const *out)
{
    const struct move *mv = x->op;
    memcpy(mv->out->data, in[mv->source], (size_t)mv->bytes);
}

static int permute_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct move *mv = x->op;
    for (int q = 0; q < x->g.n; q++) {
        if (mv->dest[q] != x->g.me)
            continue;
        if (q == x->g.me)
            memcpy(mv->out->data, mv->in->data, (size_t)mv->bytes);
        else
            return cma_read(x->c, x->g.ranks[q], in_addr[q], mv->out->data, mv->bytes);
    }
    return 0;
}

static int broadcast_cma(const struct xchg *x, const uint64_t *in_addr, const uint64_t *out_addr)
{
    const struct move *mv = x->op;
    if (mv->source == x->g.me) {
        memcpy(mv->out->data, mv->in->data, (size_t)mv->bytes);
        return 0;
    }
    return cma_read(x->c, x->g.ranks[mv->source], in_addr[mv->source], mv->out->data, mv->bytes);
}

/* Runs a permutation given as dest[] (positions); zeros where nothing comes. */
static int run_permutation(struct coll *k, const shmesh_array *in, shmesh_array *out,
                           uint64_t bytes, const int *dest)
{
    int rc = coll_start(k, in, out);
    if (rc)
        return rc;
    k->d.extra_hash = hash_bytes(dest, sizeof *dest * (size_t)k->g.n, k->d.extra_hash);
    bool fed = false;
    for (int q = 0; q < k->g.n; q++)
        fed |= dest[q] == k->g.me;
    if (!fed)
        memset(out->data, 0, (size_t)bytes);
    struct move mv = {.in = in, .out = out, .bytes = bytes, .dest = dest};
    struct xchg x = coll_xchg(k);
    x.bytes = permute_bytes;
    x.pack = copy_in;
    x.recv = copy_out;
    x.direct = permute_direct;
    x.cma = permute_cma;
    x.zin = in->data;
    x.zin_bytes = bytes;
    x.op = &mv;
    return xchg_run(&x, &k->d);
}

int shmesh_ppermute(shmesh_mesh *m, const char *axes, const int (*perm)[2], int npairs,
                    const shmesh_array *in, shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, OP_PPERMUTE, axes, NULL, false);
    if (rc)
        return rc;
    uint64_t bytes;
    if ((rc = same_shape_out(&k, in, out, &bytes)))
        return rc;
    int n = k.g.n;
    if (npairs < 0 || (npairs > 0 && !perm))
        return ctx_fail(k.c, SHMESH_ERR_INVALID, "%s: npairs is %d and perm is %s", k.name,
                        npairs, perm ? "given" : "NULL");
    int *dest = k.c->perm_dest, *src_of = k.c->perm_src;
    for (int q = 0; q < n; q++)
        dest[q] = src_of[q] = -1;
    for (int i = 0; i < npairs; i++) {
        /* Indices wrap modulo the group size, as in JAX's lowering. */
        int s = ((perm[i][0] % n) + n) % n, d = ((perm[i][1] % n) + n) % n;
        if (dest[s] >= 0 || src_of[d] >= 0) {
            char pairs[256];
            int len = 0;
            for (int j = 0; j < npairs && len < (int)sizeof pairs - 16; j++)
                len += snprintf(pairs + len, sizeof pairs - (size_t)len, "%s(%d, %d)",
                                j ? ", " : "", perm[j][0], perm[j][1]);
            return ctx_fail(k.c, SHMESH_ERR_INVALID,
                            "%s: ppermute sources and destinations must be unique, got [%s]",
                            k.name, pairs);
        }
        dest[s] = d;
        src_of[d] = s;
    }
    k.d.param[0] = npairs;
    return run_permutation(&k, in, out, bytes, dest);
}

int shmesh_pshuffle(shmesh_mesh *m, const char *axes, const int *perm, const shmesh_array *in,
                    shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, OP_PSHUFFLE, axes, NULL, false);
    if (rc)
        return rc;
    uint64_t bytes;
    if ((rc = same_shape_out(&k, in, out, &bytes)))
        return rc;
    int n = k.g.n;
    if (!perm)
        return ctx_fail(k.c, SHMESH_ERR_INVALID, "%s: perm must not be NULL", k.name);
    int *dest = k.c->perm_dest;
    for (int q = 0; q < n; q++)
        dest[q] = -1;
    for (int i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= n || dest[perm[i]] >= 0) {
            char list[256];
            int len = 0;
            for (int j = 0; j < n && len < (int)sizeof list - 16; j++)
                len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", j ? ", " : "",
                                perm[j]);
            return ctx_fail(k.c, SHMESH_ERR_INVALID,
                            "%s: `perm` does not represent a permutation of 0..%d: [%s]", k.name,
                            n - 1, list);
        }
        dest[perm[i]] = i; /* position i receives from position perm[i] */
    }
    return run_permutation(&k, in, out, bytes, dest);
}

static uint64_t broadcast_bytes(const struct xchg *x, int from, int to)
{
    const struct move *mv = x->op;
    return from == mv->source ? mv->bytes : 0;
}

int shmesh_pbroadcast(shmesh_mesh *m, const char *axes, int source, const shmesh_array *in,
                      shmesh_array *out)
{
    struct coll k;
    int rc = coll_open(&k, m, OP_PBROADCAST, axes, NULL, false);
    if (rc)
        return rc;
    uint64_t bytes;
    if ((rc = same_shape_out(&k, in, out, &bytes)))
        return rc;
    if (source < 0 || source >= k.g.n)
        return ctx_fail(k.c, SHMESH_ERR_INVALID,
                        "%s: source %d is out of range for axes \"%s\" of size %d", k.name, source,
                        k.axes.text, k.g.n);
    if ((rc = coll_start(&k, in, out)))
        return rc;
    k.d.param[0] = source;
    struct move mv = {.in = in, .out = out, .bytes = bytes, .source = source};
    struct xchg x = coll_xchg(&k);
    x.broadcast = true;
    x.bytes = broadcast_bytes;
    x.pack = copy_in;
    x.recv = copy_out;
    x.direct = broadcast_direct;
    x.cma = broadcast_cma;
    x.zin = in->data;
    x.zin_bytes = bytes;
    x.op = &mv;
    return xchg_run(&x, &k.d);
}
