/* ppermute, pshuffle, pbroadcast: whole inputs moved between positions. */
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/hash.h"
#include "ops/args.h"
#include "ops/ops.h"
#include "ops/prologue.h"

/* out like in, and apart from it (or, with `same_allowed`, the very same
 * buffer). */
static int same_shape_out(struct call *k, const shmesh_array *in, shmesh_array *out,
                          bool same_allowed)
{
    int rc = array_expect(k->c, k->name, "out", out, in->dtype, in->ndim, in->shape);
    if (rc)
        return rc;
    flow_init(&k->f, FLOW_MOVE, in, out);
    return coll_no_overlap(k, in->data, k->f.in_bytes, out->data, k->f.out_bytes, same_allowed);
}

/* The permutation in k->s->dest (positions); zeros where nothing comes. */
static int permutation(struct call *k)
{
    const int *dest = k->s->dest;
    k->f.dest = dest;
    k->d.extra_hash = hash_bytes(dest, sizeof *dest * (size_t)k->g.n, k->d.extra_hash);
    int rc = coll_ready(k);
    if (rc)
        return rc;
    bool fed = false;
    for (int q = 0; q < k->g.n; q++)
        fed |= dest[q] == k->g.me;
    if (!fed && k->f.out_bytes) { /* an empty out's data may be NULL */
        if (k->out_kind == MEM_DEVICE)
            k->f.zero_out = true; /* the CPU cannot write it */
        else
            memset(k->f.out.data, 0, (size_t)k->f.out_bytes);
    }
    return 0;
}

OP_PREPARE_INLINE int op_ppermute_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    const char *axes = args->axes;
    const int(*perm)[2] = args->perm;
    int npairs = args->npairs;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, OP_PPERMUTE, axes, NULL, false, &a, in, out);
    if (rc || (rc = same_shape_out(k, in, out, false)))
        return rc;
    int n = k->g.n;
    if (npairs < 0 || (npairs > 0 && !perm))
        return ctx_fail(k->c, SHMESH_ERR_INVALID, "%s: npairs is %d and perm is %s", k->name,
                        npairs, perm ? "given" : "NULL");
    int *dest = k->s->dest, *src_of = k->s->src_of;
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
            return ctx_fail(k->c, SHMESH_ERR_INVALID,
                            "%s: ppermute sources and destinations must be unique, got [%s]",
                            k->name, pairs);
        }
        dest[s] = d;
        src_of[d] = s;
    }
    k->d.param[0] = npairs;
    return permutation(k);
}


OP_PREPARE_INLINE int op_pshuffle_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    const char *axes = args->axes;
    const int *perm = args->shuffle;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, OP_PSHUFFLE, axes, NULL, false, &a, in, out);
    if (rc || (rc = same_shape_out(k, in, out, false)))
        return rc;
    int n = k->g.n;
    if (!perm)
        return ctx_fail(k->c, SHMESH_ERR_INVALID, "%s: perm must not be NULL", k->name);
    if (args->nshuffle >= 0 && args->nshuffle != n)
        return ctx_fail(k->c, SHMESH_ERR_INVALID,
                        "%s: perm has %d entries, the axes \"%s\" have %d devices: it must be a "
                        "permutation of 0..%d",
                        k->name, args->nshuffle, k->d.axes, n, n - 1);
    int *dest = k->s->dest;
    for (int q = 0; q < n; q++)
        dest[q] = -1;
    for (int i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= n || dest[perm[i]] >= 0) {
            char list[256];
            int len = 0;
            for (int j = 0; j < n && len < (int)sizeof list - 16; j++)
                len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", j ? ", " : "",
                                perm[j]);
            return ctx_fail(k->c, SHMESH_ERR_INVALID,
                            "%s: `perm` does not represent a permutation of 0..%d: [%s]", k->name,
                            n - 1, list);
        }
        dest[perm[i]] = i; /* position i receives from position perm[i] */
    }
    return permutation(k);
}


OP_PREPARE_INLINE int op_pbroadcast_prepare(struct call *k, const struct op_args *args, int l)
{
    shmesh_mesh *m = args->m;
    const char *axes = args->axes;
    int source = args->source;
    const shmesh_array *in = args->in + l;
    shmesh_array *out = args->out + l;
    struct axes a;
    int rc = coll_open(k, m, OP_PBROADCAST, axes, NULL, false, &a, in, out);
    /* In place (in and out the very same buffer) as MPI_Bcast: the source's
     * output is its input already, and no one reads the others' inputs. */
    if (rc || (rc = same_shape_out(k, in, out, true)))
        return rc;
    if (source < 0 || source >= k->g.n)
        return ctx_fail(k->c, SHMESH_ERR_INVALID,
                        "%s: source %d is out of range for axes \"%s\" of size %d", k->name,
                        source, k->d.axes, k->g.n);
    k->f.source = source;
    k->f.run_ahead = true;
    k->d.param[0] = source;
    return coll_ready(k);
}

