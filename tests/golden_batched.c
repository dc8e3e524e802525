/* shmesh-golden-batched: shmesh's collectives on batched meshes against
 * outputs recorded from real JAX (tests/golden/README.md, batched-101.txt).
 *
 *   shmesh-run -n 8 -- shmesh-golden-batched [--all] tests/golden/batched-101.txt
 *
 * JAX recorded each case as vmap(f, in_axes=bdim, out_axes=0,
 * axis_name='b', axis_size=B) inside shard_map over a mesh of the 8
 * devices.  Every rank reads the whole file.  For each case, in file order,
 * every rank creates the case's mesh without its batched axis (once per
 * distinct mesh; rank r is the device at row-major position r), adds the
 * batched axis with shmesh_mesh_batch (rank r's batch position k is
 * position (r, k)), runs the op on its own `in` (its batch at dimension
 * bdim, or not mapped for bdim=-) with the case's axes, axis_index_groups
 * and parameters, asks for the output with the batch first (out.bdim 0,
 * JAX's out_axes) and compares it bit for bit with its `expect`.
 * axis_index was recorded as axis_index(axes) + 0 * x, the index broadcast
 * to each position's shape: the reader takes the B indices from
 * shmesh_axis_index_array and broadcasts them likewise.
 *
 * A case with an `error` line is one JAX refused: several of its batching
 * rules raise for calls shmesh runs (an axis size that "doesn't match", a
 * multi-axis pbroadcast, ...).  There is nothing to compare with, so it is
 * skipped (not run) with its reason.  So are the 3 cases where JAX
 * answered all_to_all of an operand that is not mapped, over axes with the
 * batched one, with a dimension too many (skip_reason).  The ranks pool
 * one report each per case with shmesh_world_sum; rank 0 prints a line for
 * each of the first failed cases (every one with --all), one per skipped
 * case, a summary of both, and finally
 *
 *   N passed, M failed, S skipped (JAX refused), K skipped (other reason)
 *
 * Exit status: 0 when no case failed and some passed; 1 otherwise, or when
 * a shmesh call failed in a way that ends the job; 2 for bad usage or a
 * malformed file (the message names the line). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_READ_CASES
#include "golden_read.h"
#include "shmesh.h"

#define MAX_MESHES 128 /* of each kind; the file has 60 batched meshes */
#define SHOWN_FAILURES 20 /* failure lines printed without --all */

/* ------------------------------------------------------------------------
 * What the file must say about a batched case
 * ---------------------------------------------------------------------- */

/* Why the case is not one this reader can run, or NULL: a malformed file
 * (the same on every rank). */
static const char *check_case(const struct gcase *c, char *buf, size_t len)
{
    const char *miss = missing_param(c);
    if (!c->batched || c->mesh_ndim < 2)
        return "its mesh is not mesh axes then a batched axis (NAME=B(batched))";
    if (!c->has_B || !c->has_bdim)
        return "it has no param B= or bdim=";
    if (c->B != c->sizes[c->mesh_ndim - 1])
        return "its param B differs from the batched axis's size";
    if (miss && !c->error) {
        snprintf(buf, len, "it has no %s", miss);
        return buf;
    }
    if (!strcmp(c->op, "axis_index") && !c->error && c->expect[0].dt != SHMESH_INT32)
        return "its axis_index expectation is not int32";
    for (int r = 0; r < nranks_file; r++) {
        const struct garr *in = &c->in[r], *e = &c->expect[r];
        if (c->bdim != SHMESH_NOT_MAPPED) {
            int d = c->bdim < 0 ? c->bdim + in->ndim : c->bdim;
            if (d < 0 || d >= in->ndim || in->shape[d] != c->B) {
                snprintf(buf, len, "rank %d's input has no dimension %d of size B=%d", r,
                         c->bdim, c->B);
                return buf;
            }
        }
        if (e->present && (e->ndim < 1 || e->shape[0] != c->B)) {
            snprintf(buf, len, "rank %d's expectation does not have the batch (B=%d) first", r,
                     c->B);
            return buf;
        }
    }
    return NULL;
}

static const char refused[] = "JAX refused";
static const char extra_dim[] = "JAX's answer has a dimension too many";
static const char unknown_op[] = "an op this reader does not run";

/* Whether the case's axes name the batched axis. */
static bool names_batched(const struct gcase *c)
{
    char buf[sizeof c->axes];
    strcpy(buf, c->axes);
    for (char *p = strtok(buf, ","); p; p = strtok(NULL, ","))
        if (!strcmp(p, c->names[c->mesh_ndim - 1]))
            return true;
    return false;
}

/* Why the case is skipped, or NULL: `refused` for an `error` line,
 * `extra_dim` for JAX's all_to_all of an operand that is not mapped over
 * axes with the batched one, whose answer has one dimension more than the
 * op gives (x of shape (24,) over x=8,b=3: (24, 24) per position instead
 * of (24,)); it is wrong by JAX's own shape rule, which a vmapped function
 * keeps.  The same on every rank. */
static const char *skip_reason(const struct gcase *c)
{
    static const char *const ops[] = {"psum",       "pmean",        "pmax",       "pmin",
                                      "pargmax",    "pargmin",      "all_gather", "psum_scatter",
                                      "all_to_all", "pswapaxes",    "ppermute",   "pshuffle",
                                      "pbroadcast", "axis_index"};
    bool known = false;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
        known |= is_op(c, ops[k]);
    if (!known)
        return unknown_op;
    if (c->error)
        return refused;
    if (is_op(c, "all_to_all") && c->bdim == SHMESH_NOT_MAPPED && names_batched(c) &&
        c->expect[0].ndim != c->in[0].ndim + 1)
        return extra_dim;
    return NULL;
}

/* JAX's sentence, shortened for the summary: without the exception type,
 * and without the arguments it lists after ", got" (ppermute's pairs). */
static void short_reason(const char *error, char *buf, size_t len)
{
    const char *colon = strchr(error, ':');
    const char *s = colon ? colon + 1 + strspn(colon + 1, " ") : error;
    const char *got = strstr(s, ", got ");
    int n = got ? (int)(got - s) : (int)strlen(s);
    snprintf(buf, len, "%.*s", n, s);
}

/* ------------------------------------------------------------------------
 * Meshes, made once: the unbatched ones collectively, the batched ones
 * locally from them
 * ---------------------------------------------------------------------- */

struct mesh_slot {
    char key[160];
    shmesh_mesh *mesh;
};
static struct mesh_slot plain[MAX_MESHES], batched[MAX_MESHES];
static int nplain, nbatched;

static void destroy_meshes(struct mesh_slot *slots, int *n)
{
    for (int k = 0; k < *n; k++)
        shmesh_mesh_destroy(slots[k].mesh);
    *n = 0;
}

static shmesh_mesh *cached(const struct mesh_slot *slots, int n, const char *key)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(slots[k].key, key))
            return slots[k].mesh;
    return NULL;
}

/* The case's mesh without its batched axis (collective the first time its
 * text is met: every rank meets the cases in the same order). */
static int get_plain_mesh(shmesh_ctx *ctx, const struct gcase *c, shmesh_mesh **out)
{
    char key[sizeof c->mesh];
    snprintf(key, sizeof key, "%s", c->mesh);
    char *last = strrchr(key, ' ');
    if (last)
        *last = '\0'; /* the batched entry comes last */
    if ((*out = cached(plain, nplain, key)))
        return 0;
    if (nplain == MAX_MESHES) { /* the same on every rank */
        destroy_meshes(batched, &nbatched);
        destroy_meshes(plain, &nplain);
    }
    const char *names[SHMESH_MAX_MESH_DIMS];
    for (int k = 0; k < c->mesh_ndim - 1; k++)
        names[k] = c->names[k];
    int rc = shmesh_mesh_create(ctx, c->mesh_ndim - 1, names, c->sizes, NULL, out);
    if (rc)
        return rc;
    strcpy(plain[nplain].key, key);
    plain[nplain++].mesh = *out;
    return 0;
}

/* The batched mesh (local): kept only when made, so a failure is met
 * again by the next case with the same mesh, on every rank alike. */
static int get_batched_mesh(const shmesh_mesh *m, const struct gcase *c, shmesh_mesh **out)
{
    if ((*out = cached(batched, nbatched, c->mesh)))
        return 0;
    if (nbatched == MAX_MESHES)
        destroy_meshes(batched, &nbatched);
    int rc = shmesh_mesh_batch(m, c->names[c->mesh_ndim - 1], c->B, out);
    if (rc)
        return rc;
    strcpy(batched[nbatched].key, c->mesh);
    batched[nbatched++].mesh = *out;
    return 0;
}

/* ------------------------------------------------------------------------
 * Running a case
 * ---------------------------------------------------------------------- */

/* axis_index(axes) + 0 * x: the B indices (int32, the batch first),
 * each broadcast over one position's share of the output. */
static int run_axis_index(shmesh_mesh *bm, const struct gcase *c, shmesh_array *out)
{
    int32_t *idx = xalloc(sizeof *idx * (size_t)c->B);
    shmesh_array ia = {.data = idx, .dtype = SHMESH_INT32, .ndim = 1, .shape = {c->B}, .bdim = 0};
    int rc = shmesh_axis_index_array(bm, c->axes, &ia);
    if (!rc) {
        size_t count = 1;
        for (int k = 0; k < out->ndim; k++)
            count *= (size_t)out->shape[k];
        size_t per = count / (size_t)c->B;
        for (size_t i = 0; i < count; i++)
            ((int32_t *)out->data)[i] = idx[i / per];
    }
    free(idx);
    return rc;
}

/* The sentence explaining this rank's latest failure: the context's, or
 * (a local call that explains on the thread) shmesh_last_error(NULL). */
static const char *why(const shmesh_ctx *ctx)
{
    const char *s = shmesh_last_error(ctx);
    return *s ? s : shmesh_last_error(NULL);
}

/* One rank's report on one case, pooled by shmesh_world_sum. */
enum { ST_PASS, ST_FAIL };
enum { R_STATUS, R_RC, R_ELEM, R_WANT, R_GOT, R_WORDS };

/* Compares this rank's output with its expectation: the first element
 * that differs. */
static void judge(const struct gcase *c, int rank, const unsigned char *got, int64_t *rep)
{
    const struct garr *e = &c->expect[rank];
    size_t es = shmesh_dtype_size(e->dt);
    rep[R_STATUS] = ST_PASS;
    rep[R_ELEM] = -1;
    for (size_t i = 0; i < e->count; i++)
        if (memcmp(got + i * es, e->data + i * es, es)) {
            rep[R_STATUS] = ST_FAIL;
            rep[R_ELEM] = (int64_t)i;
            rep[R_WANT] = (int64_t)elem_bits(e->dt, e->data, i);
            rep[R_GOT] = (int64_t)elem_bits(e->dt, got, i);
            return;
        }
}

struct tally {
    int passed, failed, refused;
    int failed_by_op[16];
    char failed_ops[16][32];
    int nfailed_ops;
    /* the reasons of JAX's refusals, shortened, with their counts */
    char (*reasons)[160];
    int *reason_count, nreasons;
    /* the cases skipped for other reasons (skip_reason's), by reason */
    const char *others[4];
    int other_count[4], nothers;
};

static void count_failure(struct tally *t, const char *op)
{
    t->failed++;
    for (int k = 0; k < t->nfailed_ops; k++)
        if (!strcmp(t->failed_ops[k], op)) {
            t->failed_by_op[k]++;
            return;
        }
    if (t->nfailed_ops < 16) {
        snprintf(t->failed_ops[t->nfailed_ops], sizeof t->failed_ops[0], "%s", op);
        t->failed_by_op[t->nfailed_ops++] = 1;
    }
}

static void count_other_skip(struct tally *t, const char *reason)
{
    for (int k = 0; k < t->nothers; k++)
        if (t->others[k] == reason) {
            t->other_count[k]++;
            return;
        }
    t->others[t->nothers] = reason;
    t->other_count[t->nothers++] = 1;
}

static void count_refusal(struct tally *t, const char *reason)
{
    t->refused++;
    for (int k = 0; k < t->nreasons; k++)
        if (!strcmp(t->reasons[k], reason)) {
            t->reason_count[k]++;
            return;
        }
    snprintf(t->reasons[t->nreasons], sizeof t->reasons[0], "%s", reason);
    t->reason_count[t->nreasons++] = 1;
}

/* "0,1,2" or "0-7" */
static void list_ranks(char *buf, size_t len, const int64_t *reps, int world)
{
    size_t o = 0;
    int n = 0;
    buf[0] = '\0';
    for (int r = 0; r < world; r++)
        n += reps[r * R_WORDS + R_STATUS] == ST_FAIL;
    if (n == world) {
        snprintf(buf, len, "0-%d", world - 1);
        return;
    }
    for (int r = 0; r < world && o < len; r++)
        if (reps[r * R_WORDS + R_STATUS] == ST_FAIL)
            o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", r);
}

/* "[1,0,2] of 3x2x4": element i's index in the shape */
static void elem_place(char *buf, size_t len, const struct garr *a, int64_t i)
{
    int64_t idx[SHMESH_MAX_NDIM];
    for (int k = a->ndim - 1; k >= 0; k--) {
        idx[k] = a->shape[k] ? i % a->shape[k] : 0;
        i = a->shape[k] ? i / a->shape[k] : 0;
    }
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < a->ndim && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, k ? "," : "", idx[k]);
    if (o < len)
        o += (size_t)snprintf(buf + o, len - o, "] of ");
    for (int k = 0; k < a->ndim && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, k ? "x" : "", a->shape[k]);
    if (!a->ndim && o < len)
        snprintf(buf + o, len - o, "a scalar");
}

/* Counts a case all ranks reported on; rank 0 (`print`) writes the first
 * failures' lines (all of them with `all`). */
static void report(const struct gcase *c, const int64_t *reps, int world, const char *my_err,
                   bool print, bool all, struct tally *t)
{
    int first = -1;
    for (int r = 0; r < world && first < 0; r++)
        if (reps[r * R_WORDS + R_STATUS] == ST_FAIL)
            first = r;
    if (first < 0) {
        t->passed++;
        return;
    }
    count_failure(t, c->op);
    if (!print || (!all && t->failed > SHOWN_FAILURES))
        return;
    const int64_t *p = reps + first * R_WORDS;
    char ranks[256];
    list_ranks(ranks, sizeof ranks, reps, world);
    printf("FAIL case %d %s (line %ld: mesh %s, axes %s, %s), ranks %s: rank %d ", c->id, c->op,
           c->line, c->mesh, c->axes, c->param_text ? c->param_text : "", ranks, first);
    if (p[R_RC]) {
        printf("returned %s%s%s\n", shmesh_error_name((int)p[R_RC]), my_err ? "; rank 0 says: " : "",
               my_err ? my_err : "");
        return;
    }
    const struct garr *e = &c->expect[first];
    int hex = 2 * (int)shmesh_dtype_size(e->dt);
    char place[200];
    elem_place(place, sizeof place, e, p[R_ELEM]);
    printf("element %" PRId64 " %s (%s): expected 0x%0*" PRIx64 ", got 0x%0*" PRIx64 "\n",
           p[R_ELEM], place, shmesh_dtype_name(e->dt), hex, (uint64_t)p[R_WANT], hex,
           (uint64_t)p[R_GOT]);
}

static void print_summary(const struct tally *t, bool all)
{
    if (t->failed) {
        if (!all && t->failed > SHOWN_FAILURES)
            printf("... %d more failed cases not shown (--all shows every one)\n",
                   t->failed - SHOWN_FAILURES);
        printf("failed %d:", t->failed);
        for (int k = 0; k < t->nfailed_ops; k++)
            printf("%s %d %s", k ? "," : "", t->failed_by_op[k], t->failed_ops[k]);
        printf("\n");
    }
    if (t->refused) {
        /* most frequent first */
        bool *done = xalloc(sizeof *done * (size_t)(t->nreasons ? t->nreasons : 1));
        printf("skipped %d (JAX refused):", t->refused);
        for (int n = 0; n < t->nreasons; n++) {
            int best = -1;
            for (int k = 0; k < t->nreasons; k++)
                if (!done[k] && (best < 0 || t->reason_count[k] > t->reason_count[best]))
                    best = k;
            done[best] = true;
            printf("%s %d %s", n ? "," : "", t->reason_count[best], t->reasons[best]);
        }
        printf("\n");
        free(done);
    }
}

int main(int argc, char **argv)
{
    shmesh_ctx *ctx;
    prog = "shmesh-golden-batched";
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh-golden-batched: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx);
    bool all = argc == 3 && !strcmp(argv[1], "--all");
    if (argc != 2 + all) {
        if (rank == 0)
            fprintf(stderr, "usage: shmesh-run -n 8 -- shmesh-golden-batched [--all] FILE\n");
        shmesh_finalize(ctx);
        return 2;
    }
    path = argv[1 + all];
    int opened = open_cases(ctx);
    if (opened)
        return opened;
    for (int i = 0; i < ncases; i++) {
        char buf[200];
        const char *bad_case = check_case(&cases[i], buf, sizeof buf);
        if (bad_case) {
            if (rank == 0)
                fprintf(stderr, "shmesh-golden-batched: %s:%ld: case %d (%s): %s\n", path,
                        cases[i].line, cases[i].id, cases[i].op, bad_case);
            shmesh_finalize(ctx);
            return 2;
        }
    }

    struct tally t = {0};
    t.reasons = xalloc(sizeof *t.reasons * (size_t)ncases);
    t.reason_count = xalloc(sizeof *t.reason_count * (size_t)ncases);
    int64_t *reps = xalloc(sizeof *reps * R_WORDS * (size_t)world);
    size_t cap = 0;
    unsigned char *outbuf = NULL;
    int exit_code = 0;
    for (int i = 0; i < ncases && !exit_code; i++) {
        const struct gcase *c = &cases[i];
        const char *skip = skip_reason(c);
        if (skip) {
            char reason[160];
            if (skip == refused) {
                short_reason(c->error, reason, sizeof reason);
                count_refusal(&t, reason);
            } else {
                count_other_skip(&t, skip);
            }
            if (rank == 0) {
                int type = skip == refused ? (int)strcspn(c->error, ":") : 0;
                if (skip == refused)
                    printf("skip case %d (%s): JAX refused: %.*s: %s\n", c->id, c->op, type,
                           c->error, reason);
                else if (skip == extra_dim)
                    printf("skip case %d (%s): %s (an operand not mapped, the batched axis "
                           "named)\n", c->id, c->op, skip);
                else
                    printf("skip case %d (%s): %s\n", c->id, c->op, skip);
            }
            continue;
        }
        shmesh_mesh *m, *bm;
        int rc = get_plain_mesh(ctx, c, &m);
        if (rc) {
            exit_code = fatal(ctx, c, "shmesh_mesh_create", rc, why(ctx));
            break;
        }
        const struct garr *e = &c->expect[rank];
        size_t need = e->count * shmesh_dtype_size(e->dt);
        if (need > cap) {
            free(outbuf);
            cap = need;
            outbuf = xalloc(cap);
        }
        memset(outbuf, 0xa5, need); /* nothing left over from earlier cases */
        shmesh_array in = as_array(&c->in[rank], c->in[rank].data);
        shmesh_array out = as_array(e, outbuf);
        in.bdim = c->bdim;
        out.bdim = 0;
        const char *what = "shmesh_mesh_batch";
        /* A local failure here is every rank's (same mesh, same B): no
         * rank then runs the op. */
        rc = get_batched_mesh(m, c, &bm);
        if (!rc) {
            what = c->op;
            rc = is_op(c, "axis_index") ? run_axis_index(bm, c, &out)
                                        : run_collective(bm, c, &in, &out);
        }

        int64_t *mine = reps + rank * R_WORDS;
        memset(reps, 0, sizeof *reps * R_WORDS * (size_t)world);
        mine[R_RC] = rc;
        if (rc)
            mine[R_STATUS] = ST_FAIL;
        else
            judge(c, rank, outbuf, mine);
        /* A refusal leaves the context usable; anything else ends the job
         * (the pooled sum would fail too). */
        if (rc && rc != SHMESH_ERR_INVALID) {
            exit_code = fatal(ctx, c, what, rc, why(ctx));
            break;
        }
        char my_err[600]; /* the library's sentence names the call */
        if (rc)
            snprintf(my_err, sizeof my_err, "%s", why(ctx));
        rc = shmesh_world_sum(ctx, reps, (size_t)R_WORDS * (size_t)world, SHMESH_INT64);
        if (rc) {
            exit_code = fatal(ctx, c, "pooling the reports (shmesh_world_sum)", rc, why(ctx));
            break;
        }
        report(c, reps, world, mine[R_RC] ? my_err : NULL, rank == 0, all, &t);
    }
    if (!exit_code && rank == 0) {
        print_summary(&t, all);
        printf("%s: %d cases: %d passed, %d failed, %d skipped (JAX refused)", path, ncases,
               t.passed, t.failed, t.refused);
        for (int k = 0; k < t.nothers; k++)
            printf(", %d skipped (%s)", t.other_count[k], t.others[k]);
        printf("\n");
        fflush(stdout);
    }
    destroy_meshes(batched, &nbatched);
    destroy_meshes(plain, &nplain);
    free(outbuf);
    free(reps);
    free(t.reasons);
    free(t.reason_count);
    if (exit_code) /* the others may be stuck in a collective: end the job */
        shmesh_abort(ctx, exit_code, "shmesh-golden-batched: a shmesh call failed");
    int rc = shmesh_finalize(ctx);
    if (rc)
        return 1;
    /* every rank has the same counts; rank 0's status is the launcher's */
    return rank == 0 && (t.failed || !t.passed) ? 1 : 0;
}
