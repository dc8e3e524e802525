/* shmesh-golden-coll: shmesh's collectives against outputs recorded from
 * real JAX (tests/golden/README.md).
 *
 *   shmesh-run -n 8 -- shmesh-golden-coll tests/golden/coll-101.txt
 *
 * Every rank reads the whole file.  For each case, in file order, every
 * rank creates the case's mesh (once per distinct mesh line; rank r is the
 * device at row-major position r), runs the op on its own `in` with the
 * case's axes, axis_index_groups and parameters, and compares its output
 * bit for bit with its `expect`.  A case JAX refused for its arguments must
 * be refused by shmesh with SHMESH_ERR_INVALID on every rank, with JAX's
 * message inside shmesh's.  The ranks then pool one report each with
 * shmesh_world_sum, and rank 0 prints a line for every failed case, every
 * known difference and every skipped case, and finally
 *
 *   N passed, M failed, K known differences (...), S skipped
 *
 * Known differences (docs/semantics.md), counted apart from failures:
 *  - JAX on CPU ignores NaN in pmax and pmin (so pargmax/pargmin find a real
 *    index), shmesh propagates it: an element where the rank's group holds a
 *    NaN and shmesh gave NaN (INT32_MAX for the arg reductions);
 *  - which NaN a sum gives (sign, payload) is the hardware's and the
 *    compiler's choice in both: an element of psum, pmean or psum_scatter
 *    where both JAX and shmesh gave a NaN, with other bits.
 *
 * Exit status: 0 when no case failed; 1 when some did or a shmesh call
 * failed in a way that ends the job; 2 for bad usage or a malformed file
 * (the message names the line). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_READ_CASES
#include "golden_read.h"
#include "shmesh.h"

#define MAX_MESHES 256

/* ------------------------------------------------------------------------
 * Groups, as the file means them (rank r = device at row-major position r)
 * ---------------------------------------------------------------------- */

/* The members of rank's (sub)group in index order; returns their number,
 * or 0 when the axes or groups do not fit the mesh. */
static int group_of(const struct gcase *c, int rank, int *members)
{
    int ax[SHMESH_MAX_MESH_DIMS], nax = 0;
    char buf[sizeof c->axes];
    strcpy(buf, c->axes);
    for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
        int k = 0;
        while (k < c->mesh_ndim && strcmp(c->names[k], p))
            k++;
        if (k == c->mesh_ndim || nax == SHMESH_MAX_MESH_DIMS)
            return 0;
        ax[nax++] = k;
    }
    int coord[SHMESH_MAX_MESH_DIMS], pos = rank;
    for (int k = c->mesh_ndim - 1; k >= 0; k--) {
        coord[k] = pos % c->sizes[k];
        pos /= c->sizes[k];
    }
    int n = 1, me = 0;
    for (int j = 0; j < nax; j++) {
        n *= c->sizes[ax[j]];
        me = me * c->sizes[ax[j]] + coord[ax[j]];
    }
    int *full = xalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int cc[SHMESH_MAX_MESH_DIMS], rest = i, p = 0;
        memcpy(cc, coord, sizeof cc);
        for (int j = nax - 1; j >= 0; j--) {
            cc[ax[j]] = rest % c->sizes[ax[j]];
            rest /= c->sizes[ax[j]];
        }
        for (int k = 0; k < c->mesh_ndim; k++)
            p = p * c->sizes[k] + cc[k];
        full[i] = p;
    }
    int count = n;
    if (c->ngroups) {
        count = 0;
        for (int g = 0, off = 0; g < c->ngroups && !count; off += c->gsizes[g++])
            for (int q = 0; q < c->gsizes[g]; q++)
                if (c->gindices[off + q] == me) {
                    for (int t = 0; t < c->gsizes[g]; t++) {
                        int idx = c->gindices[off + t];
                        members[t] = idx >= 0 && idx < n ? full[idx] : 0;
                    }
                    count = c->gsizes[g];
                    break;
                }
    } else {
        memcpy(members, full, sizeof(int) * (size_t)n);
    }
    free(full);
    return count;
}

static bool is_nan(shmesh_dtype dt, const unsigned char *p)
{
    uint64_t u = 0;
    switch (dt) {
    case SHMESH_FLOAT16:
        memcpy(&u, p, 2);
        return (u & 0x7c00) == 0x7c00 && (u & 0x3ff);
    case SHMESH_BFLOAT16:
        memcpy(&u, p, 2);
        return (u & 0x7f80) == 0x7f80 && (u & 0x7f);
    case SHMESH_FLOAT32:
        memcpy(&u, p, 4);
        return (u & 0x7f800000) == 0x7f800000 && (u & 0x7fffff);
    case SHMESH_FLOAT64:
        memcpy(&u, p, 8);
        return (u >> 52 & 0x7ff) == 0x7ff && (u & ((UINT64_C(1) << 52) - 1));
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------
 * Running a case
 * ---------------------------------------------------------------------- */

static bool nan_op(const struct gcase *c)
{
    return is_op(c, "pmax") || is_op(c, "pmin") || is_op(c, "pargmax") || is_op(c, "pargmin");
}

static bool sum_op(const struct gcase *c)
{
    return is_op(c, "psum") || is_op(c, "pmean") || is_op(c, "psum_scatter");
}

/* Why the case cannot be run, or NULL.  The same on every rank. */
static const char *skip_reason(const struct gcase *c)
{
    static const char *const ops[] = {"psum", "pmean", "pmax", "pmin", "pargmax", "pargmin",
                                      "all_gather", "psum_scatter", "all_to_all", "pswapaxes",
                                      "ppermute", "pshuffle", "pbroadcast", "axis_index"};
    bool known = false;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
        known |= is_op(c, ops[k]);
    if (!known)
        return "an op this reader does not run";
    if (c->batched)
        return "batched (vmapped) axes are not built in shmesh yet";
    if (c->error && strncmp(c->error, "ValueError:", 11) && strncmp(c->error, "TypeError:", 10) &&
        strncmp(c->error, "NameError:", 10))
        return "JAX's error is not about the arguments";
    return NULL;
}

struct mesh_slot {
    char key[160];
    shmesh_mesh *mesh;
};
static struct mesh_slot meshes[MAX_MESHES];
static int nmeshes;

/* The case's mesh, created the first time its line is met (collective:
 * every rank meets the cases in the same order). */
static int get_mesh(shmesh_ctx *ctx, const struct gcase *c, shmesh_mesh **out)
{
    for (int k = 0; k < nmeshes; k++)
        if (!strcmp(meshes[k].key, c->mesh)) {
            *out = meshes[k].mesh;
            return 0;
        }
    if (nmeshes == MAX_MESHES) { /* the same on every rank */
        for (int k = 0; k < nmeshes; k++)
            shmesh_mesh_destroy(meshes[k].mesh);
        nmeshes = 0;
    }
    const char *names[SHMESH_MAX_MESH_DIMS];
    for (int k = 0; k < c->mesh_ndim; k++)
        names[k] = c->names[k];
    int rc = shmesh_mesh_create(ctx, c->mesh_ndim, names, c->sizes, NULL, out);
    if (rc)
        return rc;
    strcpy(meshes[nmeshes].key, c->mesh);
    meshes[nmeshes++].mesh = *out;
    return 0;
}

static int run_op(shmesh_mesh *m, const struct gcase *c, const shmesh_array *in, shmesh_array *out)
{
    if (is_op(c, "axis_index")) { /* local; the file records an int32 scalar */
        if (out->dtype != SHMESH_INT32 || out->ndim != 0)
            return SHMESH_ERR_INVALID;
        int idx;
        int rc = shmesh_axis_index(m, c->axes, &idx);
        if (!rc)
            *(int32_t *)out->data = idx;
        return rc;
    }
    return run_collective(m, c, in, out);
}

/* One rank's report on one case, pooled by shmesh_world_sum.  A case's
 * status is the highest of its ranks'. */
enum { ST_PASS, ST_KNOWN_EXTREME, ST_KNOWN_SUM_NAN, ST_FAIL };
enum { R_STATUS, R_RC, R_ELEM, R_WANT, R_GOT, R_WORDS };

/* Compares this rank's output with its expectation. */
static void judge(const struct gcase *c, int rank, const unsigned char *got, int64_t *rep)
{
    const struct garr *e = &c->expect[rank];
    size_t es = shmesh_dtype_size(e->dt);
    int members[MAX_RANKS];
    int n = nan_op(c) ? group_of(c, rank, members) : 0;
    bool arg = is_op(c, "pargmax") || is_op(c, "pargmin");
    rep[R_STATUS] = ST_PASS;
    rep[R_ELEM] = -1;
    for (size_t i = 0; i < e->count; i++) {
        if (!memcmp(got + i * es, e->data + i * es, es))
            continue;
        /* The known differences: a NaN among the group's inputs here, and
         * shmesh's documented answer to it; a NaN sum, other bits. */
        int status = ST_FAIL;
        if (nan_op(c)) {
            bool group_nan = false;
            for (int k = 0; k < n; k++) {
                const struct garr *in = &c->in[members[k]];
                group_nan |=
                    i < in->count && is_nan(in->dt, in->data + i * shmesh_dtype_size(in->dt));
            }
            if (group_nan &&
                (arg ? elem_bits(e->dt, got, i) == INT32_MAX : is_nan(e->dt, got + i * es)))
                status = ST_KNOWN_EXTREME;
        } else if (sum_op(c) && is_nan(e->dt, got + i * es) && is_nan(e->dt, e->data + i * es)) {
            status = ST_KNOWN_SUM_NAN;
        }
        if (rep[R_ELEM] < 0 || (status == ST_FAIL && rep[R_STATUS] != ST_FAIL)) {
            rep[R_ELEM] = (int64_t)i;
            rep[R_WANT] = (int64_t)elem_bits(e->dt, e->data, i);
            rep[R_GOT] = (int64_t)elem_bits(e->dt, got, i);
        }
        if (status > rep[R_STATUS])
            rep[R_STATUS] = status;
        if (status == ST_FAIL)
            return;
    }
}

struct tally {
    int passed, failed, known_extreme, known_sum_nan, skipped;
};

static void list_ranks(char *buf, size_t len, const int64_t *reps, int world, int status)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int r = 0; r < world && o < len; r++)
        if (reps[r * R_WORDS + R_STATUS] == status)
            o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", r);
}

/* Counts a case all ranks reported on; rank 0 (`print`) writes its line. */
static void report(const struct gcase *c, const int64_t *reps, int world, const char *my_err,
                   bool print, struct tally *t)
{
    int status = ST_PASS, first = -1;
    for (int r = 0; r < world; r++)
        if (reps[r * R_WORDS + R_STATUS] > status)
            status = (int)reps[r * R_WORDS + R_STATUS];
    if (status == ST_PASS) {
        t->passed++;
        return;
    }
    for (int r = 0; r < world && first < 0; r++)
        if (reps[r * R_WORDS + R_STATUS] == status)
            first = r;
    const int64_t *p = reps + first * R_WORDS;
    char ranks[256];
    list_ranks(ranks, sizeof ranks, reps, world, status);
    shmesh_dtype dt = c->expect[first].present ? c->expect[first].dt : c->in[first].dt;
    int hex = 2 * (int)shmesh_dtype_size(dt);
    if (status == ST_KNOWN_EXTREME) {
        t->known_extreme++;
        if (print)
            printf("known difference: case %d %s (line %ld), ranks %s: a NaN among the "
                   "group's inputs; rank %d element %" PRId64 ": JAX ignores it: 0x%0*" PRIx64
                   ", shmesh propagates it: 0x%0*" PRIx64 "\n",
                   c->id, c->op, c->line, ranks, first, p[R_ELEM], hex, (uint64_t)p[R_WANT],
                   hex, (uint64_t)p[R_GOT]);
        return;
    }
    if (status == ST_KNOWN_SUM_NAN) {
        t->known_sum_nan++;
        if (print)
            printf("known difference: case %d %s (line %ld), ranks %s: a NaN sum with other "
                   "bits; rank %d element %" PRId64 ": JAX 0x%0*" PRIx64 ", shmesh 0x%0*" PRIx64
                   "\n",
                   c->id, c->op, c->line, ranks, first, p[R_ELEM], hex, (uint64_t)p[R_WANT],
                   hex, (uint64_t)p[R_GOT]);
        return;
    }
    t->failed++;
    if (!print)
        return;
    printf("FAIL case %d %s (line %ld), ranks %s: rank %d ", c->id, c->op, c->line, ranks, first);
    if (c->error) {
        printf("returned %s; JAX refused it (%s), shmesh must refuse it with SHMESH_ERR_INVALID "
               "and JAX's message%s%s\n",
               p[R_RC] ? shmesh_error_name((int)p[R_RC]) : "0", c->error,
               my_err ? "; rank 0 says: " : "", my_err ? my_err : "");
    } else if (p[R_RC]) {
        printf("returned %s%s%s\n", shmesh_error_name((int)p[R_RC]),
               my_err ? ": " : "", my_err ? my_err : "");
    } else {
        printf("element %" PRId64 " (%s): expected 0x%0*" PRIx64 ", got 0x%0*" PRIx64 "\n",
               p[R_ELEM], shmesh_dtype_name(dt), hex, (uint64_t)p[R_WANT], hex,
               (uint64_t)p[R_GOT]);
    }
}

int main(int argc, char **argv)
{
    shmesh_ctx *ctx;
    prog = "shmesh-golden-coll";
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh-golden-coll: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: shmesh-run -n 8 -- shmesh-golden-coll FILE\n");
        shmesh_finalize(ctx);
        return 2;
    }
    path = argv[1];
    int opened = open_cases(ctx);
    if (opened)
        return opened;
    for (int i = 0; i < ncases; i++) {
        const char *miss = skip_reason(&cases[i]) ? NULL : missing_param(&cases[i]);
        if (miss) {
            if (rank == 0)
                fprintf(stderr, "shmesh-golden-coll: %s:%ld: case %d (%s) has no %s\n", path,
                        cases[i].line, cases[i].id, cases[i].op, miss);
            shmesh_finalize(ctx);
            return 2;
        }
    }

    struct tally t = {0};
    int64_t *reps = xalloc(sizeof *reps * R_WORDS * (size_t)world);
    size_t cap = 0;
    unsigned char *outbuf = NULL;
    int exit_code = 0;
    for (int i = 0; i < ncases && !exit_code; i++) {
        const struct gcase *c = &cases[i];
        const char *why = skip_reason(c);
        if (why) {
            t.skipped++;
            if (rank == 0)
                printf("skipped: case %d %s (line %ld): %s\n", c->id, c->op, c->line, why);
            continue;
        }
        shmesh_mesh *m;
        int rc = get_mesh(ctx, c, &m);
        if (rc) {
            exit_code = fatal(ctx, c, "shmesh_mesh_create", rc, shmesh_last_error(ctx));
            break;
        }
        /* The output: as expected, or (JAX refused) as the input. */
        const struct garr *oa = c->error ? &c->in[rank] : &c->expect[rank];
        size_t need = oa->count * shmesh_dtype_size(oa->dt);
        if (need > cap) {
            free(outbuf);
            cap = need;
            outbuf = xalloc(cap);
        }
        memset(outbuf, 0xa5, need); /* nothing left over from earlier cases */
        shmesh_array in = as_array(&c->in[rank], c->in[rank].data);
        shmesh_array out = as_array(oa, outbuf);
        rc = run_op(m, c, &in, &out);

        int64_t *mine = reps + rank * R_WORDS;
        memset(reps, 0, sizeof *reps * R_WORDS * (size_t)world);
        mine[R_RC] = rc;
        if (c->error) {
            /* JAX's sentence, after "ValueError: ", inside shmesh's. */
            const char *jax = strchr(c->error, ':') + 1;
            jax += strspn(jax, " ");
            mine[R_STATUS] = rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), jax)
                                 ? ST_PASS : ST_FAIL;
        } else if (rc) {
            mine[R_STATUS] = ST_FAIL;
        } else {
            judge(c, rank, outbuf, mine);
        }
        /* A refusal leaves the context usable; anything else ends the job
         * (the pooled sum would fail too). */
        if (rc && rc != SHMESH_ERR_INVALID) {
            exit_code = fatal(ctx, c, c->op, rc, shmesh_last_error(ctx));
            break;
        }
        const char *my_err = rc ? shmesh_last_error(ctx) : NULL;
        char err_copy[512];
        if (my_err) {
            snprintf(err_copy, sizeof err_copy, "%s", my_err);
            my_err = err_copy;
        }
        rc = shmesh_world_sum(ctx, reps, (size_t)R_WORDS * (size_t)world, SHMESH_INT64);
        if (rc) {
            exit_code = fatal(ctx, c, "pooling the reports (shmesh_world_sum)", rc, shmesh_last_error(ctx));
            break;
        }
        report(c, reps, world, my_err, rank == 0, &t);
    }
    if (!exit_code && rank == 0) {
        printf("%s: %d cases: %d passed, %d failed, %d known differences (%d NaN in "
               "pmax/pmin/pargmax/pargmin, %d NaN sums with other bits), %d skipped\n",
               path, ncases, t.passed, t.failed, t.known_extreme + t.known_sum_nan,
               t.known_extreme, t.known_sum_nan, t.skipped);
        fflush(stdout);
    }
    for (int k = 0; k < nmeshes; k++)
        shmesh_mesh_destroy(meshes[k].mesh);
    free(outbuf);
    free(reps);
    if (exit_code) /* the others may be stuck in a collective: end the job */
        shmesh_abort(ctx, exit_code, "shmesh-golden-coll: a shmesh call failed");
    int rc = shmesh_finalize(ctx);
    return rc || (rank == 0 && t.failed) ? 1 : 0; /* the launcher exits with it */
}
