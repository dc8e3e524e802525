/* What the golden readers (golden_coll.c, golden_batched.c,
 * golden_sharding.c) share to read a file: where they are in it, and the
 * sentence that says why it is malformed; and for the two readers of
 * collective records, the records themselves.  Header-only: each reader is
 * one program of one file. */
#ifndef SHMESH_TESTS_GOLDEN_READ_H
#define SHMESH_TESTS_GOLDEN_READ_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static const char *path; /* the file being read */
static long lineno;      /* its line being read, from 1 */
static char parse_err[512];

/* Records "PATH:LINE: why" in parse_err; returns false, for
 * `return bad(...)` in the readers' bool functions. */
static bool bad(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static bool bad(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(parse_err, sizeof parse_err, "%s:%ld: %s", path, lineno, msg);
    return false;
}


/* ------------------------------------------------------------------------
 * The collective records (coll and batched files): what golden_coll.c and
 * golden_batched.c share, for a reader that defines GOLDEN_READ_CASES
 * before including this header.  Every rank reads the whole file into
 * `cases`; `prog` (set by the reader) names it in messages.
 * ---------------------------------------------------------------------- */
#ifdef GOLDEN_READ_CASES

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

#define MAX_RANKS 16 /* the files hold 8 */

static const char *prog;

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
    bool batched; /* the last mesh entry is the vmapped axis, NAME=B(batched) */
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
    /* batched files: the batch size, and the input's batch dimension
     * (SHMESH_NOT_MAPPED for "bdim=-") */
    bool has_B, has_bdim;
    int B, bdim;
    char *param_text; /* the param line after "param", for messages */
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
        fprintf(stderr, "%s: out of memory\n", prog);
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
            if (k != nw - 1)
                return bad("mesh entry '%s': the batched axis must be the last", w[k]);
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
        } else if (!strcmp(key, "B")) {
            ok = c->has_B = parse_int(v, end, 1, 1 << 20, &c->B);
        } else if (!strcmp(key, "bdim")) {
            c->has_bdim = true;
            if (!strcmp(v, "-"))
                c->bdim = SHMESH_NOT_MAPPED;
            else
                ok = parse_int(v, end, -SHMESH_MAX_NDIM, SHMESH_MAX_NDIM, &c->bdim);
        } else if (!strcmp(key, "via")) {
            /* via=all_gather: how JAX computed pbroadcast's expectation */
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
            char *text = strstr(copy, "param") + 5;
            text += strspn(text, " \t");
            text[strcspn(text, "\r\n")] = '\0';
            free(c->param_text);
            c->param_text = xstrdup(text);
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
 * Running a case's op
 * ---------------------------------------------------------------------- */

static bool is_op(const struct gcase *c, const char *a) { return !strcmp(c->op, a); }

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

static shmesh_array as_array(const struct garr *a, void *data)
{
    shmesh_array s = {.data = data, .dtype = a->dt, .ndim = a->ndim};
    memcpy(s.shape, a->shape, sizeof s.shape);
    return s;
}

static uint64_t elem_bits(shmesh_dtype dt, const unsigned char *base, size_t i)
{
    uint64_t u = 0;
    size_t es = shmesh_dtype_size(dt);
    memcpy(&u, base + i * es, es);
    return u;
}

/* The case's op, other than axis_index (local, recorded differently by the
 * two files): SHMESH_ERR_INVALID for an op it does not know. */
static int run_collective(shmesh_mesh *m, const struct gcase *c, const shmesh_array *in,
                          shmesh_array *out)
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
    return SHMESH_ERR_INVALID;
}

/* The readers' start: `path` read whole, and a job of as many ranks as the
 * file has devices; rank 0 says what is wrong.  0, or the exit status 2
 * after finalizing ctx. */
static int open_cases(shmesh_ctx *ctx)
{
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx);
    if (!read_file()) {
        if (rank == 0)
            fprintf(stderr, "%s: %s\n", prog, parse_err);
    } else if (world != nranks_file || world > MAX_RANKS) {
        if (rank == 0)
            fprintf(stderr, "%s: %s was recorded on %d devices: run it with "
                    "shmesh-run -n %d (this job has %d ranks)\n", prog, path, nranks_file,
                    nranks_file, world);
    } else
        return 0;
    shmesh_finalize(ctx);
    return 2;
}

/* A call of case c that should have worked failed with rc: the reader
 * stops (exit status 1), saying why (the context's sentence, `why`). */
static int fatal(shmesh_ctx *ctx, const struct gcase *c, const char *what, int rc,
                 const char *why)
{
    fprintf(stderr, "%s: rank %d: case %d %s: %s: %s: %s\n", prog, shmesh_rank(ctx), c->id,
            c->op, what, shmesh_error_name(rc), why);
    return 1;
}

#endif /* GOLDEN_READ_CASES */

#endif
