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

#include "golden_read.h"
#include "shmesh.h"

#define MAX_RANKS 16 /* the files hold 8 */
#define MAX_MESHES 256

struct garr {
    bool present;
    shmesh_dtype dt;
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM];
    size_t count;
    unsigned char *data; /* count elements of dt's size */
};

struct gcase {
    int id;
    long line; /* of its "case" line */
    char op[32];
    char mesh[160]; /* the mesh line's text: the key of the mesh cache */
    int mesh_ndim;
    char names[SHMESH_MAX_MESH_DIMS][SHMESH_MAX_AXIS_NAME + 1];
    int sizes[SHMESH_MAX_MESH_DIMS];
    bool batched;
    char axes[160];
    /* axis_index_groups: ngroups == 0 means none */
    int ngroups, *gsizes, *gindices;
    /* parameters; has_* says which were given */
    bool has_axis, has_sd, has_split, has_concat, has_tiled, has_source, has_perm;
    int axis, sd, split, concat, source;
    bool tiled;
    int npairs;
    int (*pairs)[2];
    int nperm, *perm;
    char *perm_text;
    char *error; /* "ValueError: message", or NULL */
    struct garr in[MAX_RANKS], expect[MAX_RANKS];
};

static struct gcase *cases;
static int ncases, nranks_file;

/* ------------------------------------------------------------------------
 * Reading the file
 * ---------------------------------------------------------------------- */

static void *xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "shmesh-golden-coll: out of memory\n");
        exit(2);
    }
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = xalloc(strlen(s) + 1);
    strcpy(p, s);
    return p;
}

/* A whole decimal integer (optionally negative) ending at `end`. */
static bool parse_int(const char *s, const char *end, long lo, long hi, int *out)
{
    if (s == end)
        return false;
    char buf[32];
    size_t n = (size_t)(end - s);
    if (n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *e;
    errno = 0;
    long v = strtol(buf, &e, 10);
    if (errno || *e || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static bool dtype_by_name(const char *name, shmesh_dtype *dt)
{
    for (int d = 0; d < SHMESH_DTYPE_COUNT; d++)
        if (!strcmp(shmesh_dtype_name((shmesh_dtype)d), name)) {
            *dt = (shmesh_dtype)d;
            return true;
        }
    return false;
}

/* Splits line (modified) into blank-separated words; returns their number. */
static int split_words(char *line, char **w, int max)
{
    int n = 0;
    for (char *p = strtok(line, " \t\r\n"); p; p = strtok(NULL, " \t\r\n")) {
        if (n == max)
            return -1;
        w[n++] = p;
    }
    return n;
}

static bool parse_mesh(struct gcase *c, char **w, int nw)
{
    if (nw < 2 || nw - 1 > SHMESH_MAX_MESH_DIMS)
        return bad("mesh: 1..%d NAME=SIZE entries expected", SHMESH_MAX_MESH_DIMS);
    size_t o = 0;
    c->mesh_ndim = nw - 1;
    for (int k = 1; k < nw; k++) {
        o += (size_t)snprintf(c->mesh + o, sizeof c->mesh - o, "%s%s", k > 1 ? " " : "", w[k]);
        if (o >= sizeof c->mesh)
            return bad("mesh line too long");
        char *eq = strchr(w[k], '=');
        if (!eq || eq == w[k] || (size_t)(eq - w[k]) > SHMESH_MAX_AXIS_NAME)
            return bad("mesh entry '%s' is not NAME=SIZE", w[k]);
        memcpy(c->names[k - 1], w[k], (size_t)(eq - w[k]));
        c->names[k - 1][eq - w[k]] = '\0';
        char *end = eq + 1 + strlen(eq + 1);
        char *paren = strchr(eq + 1, '(');
        if (paren) { /* the batched files' vmapped axis */
            if (strcmp(paren, "(batched)"))
                return bad("mesh entry '%s': unknown suffix", w[k]);
            c->batched = true;
            end = paren;
        }
        if (!parse_int(eq + 1, end, 1, 1 << 20, &c->sizes[k - 1]))
            return bad("mesh entry '%s': the size must be a positive integer", w[k]);
    }
    return true;
}

/* "0,2;1,3" or "-" */
static bool parse_groups(struct gcase *c, const char *s)
{
    if (!strcmp(s, "-"))
        return true;
    int ng = 1, ni = 1;
    for (const char *p = s; *p; p++) {
        ng += *p == ';';
        ni += *p == ';' || *p == ',';
    }
    c->ngroups = ng;
    c->gsizes = xalloc(sizeof(int) * (size_t)ng);
    c->gindices = xalloc(sizeof(int) * (size_t)ni);
    int g = 0, i = 0;
    const char *p = s;
    for (;;) {
        const char *e = p;
        while (*e && *e != ',' && *e != ';')
            e++;
        if (!parse_int(p, e, 0, 1 << 20, &c->gindices[i++]))
            return bad("groups: '%s' is not lists of indices like 0,2;1,3", s);
        c->gsizes[g]++;
        if (!*e)
            break;
        if (*e == ';')
            g++;
        p = e + 1;
    }
    return true;
}

static bool parse_perm(struct gcase *c, const char *v)
{
    c->has_perm = true;
    c->perm_text = xstrdup(v);
    if (!strcmp(v, "-"))
        return true;
    int n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    bool pairs = strchr(v, '>') != NULL;
    if (pairs)
        c->pairs = xalloc(sizeof *c->pairs * (size_t)n);
    else
        c->perm = xalloc(sizeof(int) * (size_t)n);
    const char *p = v;
    for (int k = 0; k < n; k++) {
        const char *e = strchr(p, ',');
        if (!e)
            e = p + strlen(p);
        if (pairs) {
            const char *gt = memchr(p, '>', (size_t)(e - p));
            if (!gt || !parse_int(p, gt, -(1 << 20), 1 << 20, &c->pairs[k][0]) ||
                !parse_int(gt + 1, e, -(1 << 20), 1 << 20, &c->pairs[k][1]))
                return bad("perm: '%s' is not pairs like 0>1,2>3", v);
        } else if (!parse_int(p, e, -(1 << 20), 1 << 20, &c->perm[k])) {
            return bad("perm: '%s' is not a list of indices", v);
        }
        p = e + 1;
    }
    if (pairs)
        c->npairs = n;
    else
        c->nperm = n;
    return true;
}

static bool parse_params(struct gcase *c, char **w, int nw)
{
    for (int k = 1; k < nw; k++) {
        char *eq = strchr(w[k], '=');
        if (!eq)
            return bad("param '%s' is not KEY=VALUE", w[k]);
        *eq = '\0';
        const char *key = w[k], *v = eq + 1, *end = v + strlen(v);
        bool ok = true;
        if (!strcmp(key, "axis"))
            ok = c->has_axis = parse_int(v, end, -64, 64, &c->axis);
        else if (!strcmp(key, "scatter_dimension"))
            ok = c->has_sd = parse_int(v, end, -64, 64, &c->sd);
        else if (!strcmp(key, "split_axis"))
            ok = c->has_split = parse_int(v, end, -64, 64, &c->split);
        else if (!strcmp(key, "concat_axis"))
            ok = c->has_concat = parse_int(v, end, -64, 64, &c->concat);
        else if (!strcmp(key, "source"))
            ok = c->has_source = parse_int(v, end, -(1 << 20), 1 << 20, &c->source);
        else if (!strcmp(key, "tiled")) {
            int t = 0;
            ok = c->has_tiled = parse_int(v, end, 0, 1, &t);
            c->tiled = t;
        } else if (!strcmp(key, "perm")) {
            if (!parse_perm(c, v))
                return false;
        } else if (!strcmp(key, "via") || !strcmp(key, "B") || !strcmp(key, "bdim")) {
            /* via=all_gather: how JAX computed pbroadcast's expectation;
             * B and bdim belong to the batched files */
        } else {
            return bad("unknown param '%s'", key);
        }
        if (!ok)
            return bad("param %s: '%s' is not a valid value", key, v);
    }
    return true;
}

/* arr RANK NAME DTYPE NDIM D0 D1 ... : V V ... */
static bool parse_arr(struct gcase *c, char **w, int nw)
{
    int rank, ndim;
    if (nw < 5 || !parse_int(w[1], w[1] + strlen(w[1]), 0, MAX_RANKS - 1, &rank))
        return bad("arr: a rank 0..%d expected", MAX_RANKS - 1);
    struct garr *a;
    if (!strcmp(w[2], "in"))
        a = &c->in[rank];
    else if (!strcmp(w[2], "expect"))
        a = &c->expect[rank];
    else
        return bad("arr: 'in' or 'expect' expected, got '%s'", w[2]);
    if (a->present)
        return bad("arr: rank %d's %s is given twice", rank, w[2]);
    if (!dtype_by_name(w[3], &a->dt))
        return bad("arr: unknown dtype '%s'", w[3]);
    if (!parse_int(w[4], w[4] + strlen(w[4]), 0, SHMESH_MAX_NDIM, &ndim))
        return bad("arr: ndim must be 0..%d", SHMESH_MAX_NDIM);
    if (nw < 6 + ndim || strcmp(w[5 + ndim], ":"))
        return bad("arr: %d dimensions, then ':' expected", ndim);
    a->ndim = ndim;
    a->count = 1;
    for (int k = 0; k < ndim; k++) {
        int d;
        if (!parse_int(w[5 + k], w[5 + k] + strlen(w[5 + k]), 0, 1 << 24, &d))
            return bad("arr: dimension %d is not a size", k);
        a->shape[k] = d;
        a->count *= (size_t)d;
    }
    int nv = nw - 6 - ndim;
    if ((size_t)nv != a->count)
        return bad("arr: the shape holds %zu elements, the line gives %d values", a->count, nv);
    size_t es = shmesh_dtype_size(a->dt);
    a->data = xalloc(a->count * es);
    uint64_t max = es == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * es)) - 1;
    if (a->dt == SHMESH_BOOL)
        max = 1;
    for (int k = 0; k < nv; k++) {
        const char *s = w[6 + ndim + k];
        char *e;
        errno = 0;
        unsigned long long v = strtoull(s, &e, 16);
        if (errno || *e || *s == '-' || *s == '+' || v > max)
            return bad("arr: value %d ('%s') is not a %s bit pattern in hex", k, s, w[3]);
        memcpy(a->data + (size_t)k * es, &v, es); /* little-endian */
    }
    a->present = true;
    return true;
}

/* Whole-case checks at "end": every rank's input, and its expectation
 * unless JAX refused. */
static bool finish_case(struct gcase *c)
{
    if (!c->mesh_ndim)
        return bad("case %d has no mesh line", c->id);
    int n = 0;
    while (n < MAX_RANKS && c->in[n].present)
        n++;
    for (int r = n; r < MAX_RANKS; r++)
        if (c->in[r].present || c->expect[r].present)
            return bad("case %d: rank %d has arrays but rank %d has no input", c->id, r, n);
    if (!n)
        return bad("case %d has no input arrays", c->id);
    if (!nranks_file)
        nranks_file = n;
    if (n != nranks_file)
        return bad("case %d has %d ranks, earlier cases %d", c->id, n, nranks_file);
    for (int r = 0; r < n; r++)
        if (c->error ? c->expect[r].present : !c->expect[r].present)
            return bad("case %d: rank %d %s", c->id, r,
                       c->error ? "has an expectation although JAX refused the case"
                                : "has no expectation");
    return true;
}

static bool read_file(void)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(parse_err, sizeof parse_err, "%s: %s", path, strerror(errno));
        return false;
    }
    char *line = NULL, *copy = NULL;
    size_t cap = 0;
    ssize_t len;
    int cap_cases = 0, maxw = 0;
    char **w = NULL;
    struct gcase *c = NULL;
    bool ok = true;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > maxw) { /* at most one word per two characters */
            maxw = (int)len;
            free(w);
            w = xalloc(sizeof *w * (size_t)(maxw / 2 + 2));
        }
        free(copy);
        copy = xstrdup(line);
        int nw = split_words(line, w, maxw / 2 + 2);
        if (lineno == 1) {
            if (nw < 2 || strcmp(w[0], "shmesh-golden") || strcmp(w[1], "1"))
                ok = bad("not a golden file of format 1 (first line 'shmesh-golden 1 ...')");
            continue;
        }
        if (nw == 0)
            continue;
        const char *key = w[0];
        if (!c && strcmp(key, "case")) {
            ok = bad("'%s' outside a case", key);
        } else if (!strcmp(key, "case")) {
            if (c) {
                ok = bad("'case' before the previous case's 'end'");
                break;
            }
            if (nw != 3) {
                ok = bad("case: 'case ID OP' expected");
                break;
            }
            if (ncases == cap_cases) {
                cap_cases = cap_cases ? 2 * cap_cases : 256;
                cases = realloc(cases, sizeof *cases * (size_t)cap_cases);
                if (!cases) {
                    ok = bad("out of memory");
                    break;
                }
            }
            c = &cases[ncases];
            memset(c, 0, sizeof *c);
            c->line = lineno;
            if (!parse_int(w[1], w[1] + strlen(w[1]), 0, INT32_MAX, &c->id))
                ok = bad("case: the id must be a non-negative integer");
            else if (strlen(w[2]) >= sizeof c->op)
                ok = bad("case: op name too long");
            else
                strcpy(c->op, w[2]);
        } else if (!strcmp(key, "mesh")) {
            ok = parse_mesh(c, w, nw);
        } else if (!strcmp(key, "axes")) {
            if (nw > 2 || (nw == 2 && strlen(w[1]) >= sizeof c->axes))
                ok = bad("axes: one list of names like 'x,y' expected");
            else
                strcpy(c->axes, nw == 2 ? w[1] : "");
        } else if (!strcmp(key, "groups")) {
            ok = nw == 2 ? parse_groups(c, w[1]) : bad("groups: one field expected");
        } else if (!strcmp(key, "param")) {
            ok = parse_params(c, w, nw);
        } else if (!strcmp(key, "arr")) {
            ok = parse_arr(c, w, nw);
        } else if (!strcmp(key, "error")) {
            char *msg = strstr(copy, "error") + 5;
            msg += strspn(msg, " \t");
            msg[strcspn(msg, "\r\n")] = '\0';
            c->error = xstrdup(msg);
        } else if (!strcmp(key, "note")) {
            /* free text */
        } else if (!strcmp(key, "end")) {
            ok = finish_case(c);
            ncases++;
            c = NULL;
        } else {
            ok = bad("unknown record '%s'", key);
        }
    }
    if (ok && c) {
        lineno++;
        ok = bad("the file ends inside case %d (no 'end')", c->id);
    }
    if (ok && !ncases)
        ok = bad("no cases");
    free(line);
    free(copy);
    free(w);
    fclose(f);
    return ok;
}

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

static bool is_op(const struct gcase *c, const char *a) { return !strcmp(c->op, a); }

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

/* A missing parameter the op needs, or NULL. */
static const char *missing_param(const struct gcase *c)
{
    if (is_op(c, "all_gather"))
        return !c->has_axis ? "axis" : !c->has_tiled ? "tiled" : NULL;
    if (is_op(c, "psum_scatter"))
        return !c->has_sd ? "scatter_dimension" : !c->has_tiled ? "tiled" : NULL;
    if (is_op(c, "all_to_all"))
        return !c->has_split ? "split_axis" : !c->has_concat ? "concat_axis"
               : !c->has_tiled ? "tiled" : NULL;
    if (is_op(c, "pswapaxes"))
        return !c->has_axis ? "axis" : NULL;
    if (is_op(c, "ppermute"))
        return !c->has_perm || c->perm ? "perm (as pairs)" : NULL;
    if (is_op(c, "pshuffle"))
        return !c->has_perm || c->pairs || !c->perm ? "perm (as a list)" : NULL;
    if (is_op(c, "pbroadcast"))
        return !c->has_source ? "source" : NULL;
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

static shmesh_array as_array(const struct garr *a, void *data)
{
    shmesh_array s = {.data = data, .dtype = a->dt, .ndim = a->ndim};
    memcpy(s.shape, a->shape, sizeof s.shape);
    return s;
}

static int run_op(shmesh_mesh *m, const struct gcase *c, const shmesh_array *in, shmesh_array *out)
{
    const shmesh_groups *g = NULL;
    shmesh_groups gs = {.ngroups = c->ngroups, .indices = c->gindices, .group_sizes = c->gsizes};
    if (c->ngroups)
        g = &gs;
    const char *ax = c->axes;
    if (is_op(c, "psum"))
        return shmesh_psum(m, ax, g, in, out);
    if (is_op(c, "pmean"))
        return shmesh_pmean(m, ax, g, in, out);
    if (is_op(c, "pmax"))
        return shmesh_pmax(m, ax, g, in, out);
    if (is_op(c, "pmin"))
        return shmesh_pmin(m, ax, g, in, out);
    if (is_op(c, "pargmax"))
        return shmesh_pargmax(m, ax, g, in, out);
    if (is_op(c, "pargmin"))
        return shmesh_pargmin(m, ax, g, in, out);
    if (is_op(c, "all_gather"))
        return shmesh_all_gather(m, ax, g, c->axis, c->tiled, in, out);
    if (is_op(c, "psum_scatter"))
        return shmesh_psum_scatter(m, ax, g, c->sd, c->tiled, in, out);
    if (is_op(c, "all_to_all"))
        return shmesh_all_to_all(m, ax, g, c->split, c->concat, c->tiled, in, out);
    if (is_op(c, "pswapaxes"))
        return shmesh_pswapaxes(m, ax, g, c->axis, in, out);
    if (is_op(c, "ppermute"))
        return shmesh_ppermute(m, ax, (const int(*)[2])c->pairs, c->npairs, in, out);
    if (is_op(c, "pshuffle"))
        return shmesh_pshuffle(m, ax, c->perm, in, out);
    if (is_op(c, "pbroadcast"))
        return shmesh_pbroadcast(m, ax, c->source, in, out);
    if (is_op(c, "axis_index")) { /* local; the file records an int32 scalar */
        if (out->dtype != SHMESH_INT32 || out->ndim != 0)
            return SHMESH_ERR_INVALID;
        int idx;
        int rc = shmesh_axis_index(m, ax, &idx);
        if (!rc)
            *(int32_t *)out->data = idx;
        return rc;
    }
    return SHMESH_ERR_INVALID;
}

/* One rank's report on one case, pooled by shmesh_world_sum.  A case's
 * status is the highest of its ranks'. */
enum { ST_PASS, ST_KNOWN_EXTREME, ST_KNOWN_SUM_NAN, ST_FAIL };
enum { R_STATUS, R_RC, R_ELEM, R_WANT, R_GOT, R_WORDS };

static uint64_t elem_bits(shmesh_dtype dt, const unsigned char *base, size_t i)
{
    uint64_t u = 0;
    size_t es = shmesh_dtype_size(dt);
    memcpy(&u, base + i * es, es);
    return u;
}

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

static int fatal(shmesh_ctx *ctx, const struct gcase *c, const char *what, int rc)
{
    fprintf(stderr, "shmesh-golden-coll: rank %d: case %d %s: %s: %s: %s\n", shmesh_rank(ctx),
            c->id, c->op, what, shmesh_error_name(rc), shmesh_last_error(ctx));
    return 1;
}

int main(int argc, char **argv)
{
    shmesh_ctx *ctx;
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
    if (!read_file()) {
        if (rank == 0)
            fprintf(stderr, "shmesh-golden-coll: %s\n", parse_err);
        shmesh_finalize(ctx);
        return 2;
    }
    if (world != nranks_file || world > MAX_RANKS) {
        if (rank == 0)
            fprintf(stderr, "shmesh-golden-coll: %s was recorded on %d devices: run it with "
                    "shmesh-run -n %d (this job has %d ranks)\n", path, nranks_file,
                    nranks_file, world);
        shmesh_finalize(ctx);
        return 2;
    }
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
            exit_code = fatal(ctx, c, "shmesh_mesh_create", rc);
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
            exit_code = fatal(ctx, c, c->op, rc);
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
            exit_code = fatal(ctx, c, "pooling the reports (shmesh_world_sum)", rc);
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
