/* shmesh-golden-sharding: shmesh's NamedSharding against what real JAX
 * recorded (tests/golden/README.md, the `sharding` records).
 *
 *   SHMESH_LOCAL_DEVICES=8 shmesh-golden-sharding tests/golden/sharding-101.txt
 *   shmesh-run -n 2 --devices-per-rank 4 -- shmesh-golden-sharding FILE
 *
 * The job must hold as many devices as the file's meshes (8).  For each
 * case, in file order, every rank creates the case's mesh over the job's
 * devices in id order (so the device at row-major position r is device r,
 * as in the file) and its abstract mesh, reads the spec with
 * shmesh_pspec_parse (the file's entries joined by commas), and checks on
 * both meshes the shard shape and is_fully_replicated, and on the concrete
 * one every device's index and replica id.  A case JAX refused must be
 * refused on both meshes with SHMESH_ERR_INVALID and a message that starts
 * with JAX's exception type ("IndivisibleError", ...; after the "rank R: "
 * a context's messages begin with).  Every rank checks every case; rank 0
 * prints a line per failure and finally
 *
 *   N passed, M failed
 *
 * Exit status: 0 when no case failed; 1 when some did or the job could not
 * run them; 2 for bad usage or a malformed file (the message names the
 * line). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden_read.h"
#include "shmesh.h"

#define MAX_DEVICES 64

struct gcase {
    int id;
    long line; /* of its "case" line */
    int mesh_ndim;
    char names[SHMESH_MAX_MESH_DIMS][SHMESH_MAX_AXIS_NAME + 1];
    int sizes[SHMESH_MAX_MESH_DIMS];
    char spec[256]; /* the entries joined by commas: shmesh_pspec_parse's text */
    int ndim;
    int64_t shape[SHMESH_MAX_NDIM], shard[SHMESH_MAX_NDIM];
    bool has_mesh, has_spec, has_shape, has_shard;
    int fully_replicated; /* -1: not given */
    int ndev;             /* device lines */
    shmesh_index expect[MAX_DEVICES];
    char error[64]; /* JAX's exception type, "" when it accepted */
};

/* ------------------------------------------------------------------------
 * Reading the file
 * ---------------------------------------------------------------------- */

/* A whole decimal integer in [lo, hi]. */
static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    if (!*s)
        return false;
    long long v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    int64_t v;
    if (!parse_i64(s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

/* Space-separated dimensions (at most SHMESH_MAX_NDIM) into dims. */
static bool parse_dims(char *rest, const char *what, int *ndim, int64_t *dims)
{
    *ndim = 0;
    for (char *tok = strtok(rest, " "); tok; tok = strtok(NULL, " ")) {
        if (*ndim == SHMESH_MAX_NDIM)
            return bad("%s has more than %d dimensions", what, SHMESH_MAX_NDIM);
        if (!parse_i64(tok, 0, INT64_MAX, &dims[(*ndim)++]))
            return bad("%s: '%s' is not a dimension", what, tok);
    }
    return true;
}

static bool parse_mesh(struct gcase *c, char *rest)
{
    c->mesh_ndim = 0;
    for (char *tok = strtok(rest, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (c->mesh_ndim == SHMESH_MAX_MESH_DIMS || !eq || eq == tok ||
            eq - tok > SHMESH_MAX_AXIS_NAME)
            return bad("mesh: '%s' is not NAME=SIZE (at most %d axes)", tok,
                       SHMESH_MAX_MESH_DIMS);
        *eq = 0;
        strcpy(c->names[c->mesh_ndim], tok);
        if (!parse_int(eq + 1, 1, MAX_DEVICES, &c->sizes[c->mesh_ndim++]))
            return bad("mesh: axis '%s' has size '%s'", tok, eq + 1);
    }
    return c->has_mesh = true;
}

/* "device R replica K index S:E S:E ..." */
static bool parse_device(struct gcase *c, char *rest)
{
    char *tok[4 + SHMESH_MAX_NDIM + 1];
    int n = 0;
    for (char *t = strtok(rest, " "); t && n < (int)(sizeof tok / sizeof *tok); t = strtok(NULL, " "))
        tok[n++] = t;
    if (c->ndev == MAX_DEVICES)
        return bad("more than %d device lines", MAX_DEVICES);
    shmesh_index *ix = &c->expect[c->ndev];
    memset(ix, 0, sizeof *ix);
    if (n < 4 || strcmp(tok[1], "replica") || strcmp(tok[3], "index") ||
        !parse_int(tok[0], 0, MAX_DEVICES - 1, &ix->device) ||
        !parse_int(tok[2], 0, MAX_DEVICES - 1, &ix->replica_id))
        return bad("expected 'device R replica K index S:E ...'");
    if (n - 4 > SHMESH_MAX_NDIM)
        return bad("an index of more than %d dimensions", SHMESH_MAX_NDIM);
    for (int d = 0; d < n - 4; d++) {
        char *colon = strchr(tok[4 + d], ':');
        if (!colon)
            return bad("'%s' is not START:STOP", tok[4 + d]);
        *colon = 0;
        if (!parse_i64(tok[4 + d], 0, INT64_MAX, &ix->start[d]) ||
            !parse_i64(colon + 1, 0, INT64_MAX, &ix->stop[d]))
            return bad("'%s:%s' is not START:STOP", tok[4 + d], colon + 1);
    }
    if (c->has_shape && n - 4 != c->ndim)
        return bad("an index of %d dimensions for a shape of %d", n - 4, c->ndim);
    c->ndev++;
    return true;
}

/* One line of a case; *done at its "end". */
static bool parse_line(struct gcase *c, char *line, bool *done)
{
    char *rest = strchr(line, ' ');
    if (rest)
        *rest++ = 0;
    else
        rest = line + strlen(line);
    if (!strcmp(line, "end")) {
        if (!c->has_mesh || !c->has_spec || !c->has_shape)
            return bad("case %d lacks its mesh, spec or shape line", c->id);
        if (!c->error[0] && (!c->has_shard || c->fully_replicated < 0 || !c->ndev))
            return bad("case %d lacks its shard_shape, fully_replicated or device lines", c->id);
        return *done = true;
    }
    if (!strcmp(line, "mesh"))
        return parse_mesh(c, rest);
    if (!strcmp(line, "spec")) {
        /* Entries are separated by spaces in the file, by commas in
         * shmesh's text. */
        size_t n = strlen(rest);
        if (n >= sizeof c->spec)
            return bad("spec longer than %zu characters", sizeof c->spec - 1);
        for (size_t i = 0; i <= n; i++)
            c->spec[i] = rest[i] == ' ' ? ',' : rest[i];
        return c->has_spec = true;
    }
    if (!strcmp(line, "shape"))
        return (c->has_shape = parse_dims(rest, "shape", &c->ndim, c->shape));
    if (!strcmp(line, "shard_shape")) {
        int n;
        if (!parse_dims(rest, "shard_shape", &n, c->shard))
            return false;
        if (!c->has_shape || n != c->ndim)
            return bad("shard_shape has %d dimensions, the shape %d", n, c->ndim);
        return c->has_shard = true;
    }
    if (!strcmp(line, "fully_replicated")) {
        if (!parse_int(rest, 0, 1, &c->fully_replicated))
            return bad("fully_replicated is '%s', not 0 or 1", rest);
        return true;
    }
    if (!strcmp(line, "device"))
        return parse_device(c, rest);
    if (!strcmp(line, "error")) {
        size_t n = strcspn(rest, ":");
        if (!rest[n] || n == 0 || n >= sizeof c->error)
            return bad("expected 'error TYPE: MESSAGE'");
        memcpy(c->error, rest, n);
        c->error[n] = 0;
        return true;
    }
    return bad("unknown line '%s'", line);
}

/* The next case into c; false at the end of the file (c->id < 0) or when
 * the file is malformed (parse_err says why). */
static bool read_case(FILE *f, struct gcase *c)
{
    char line[4096];
    bool in_case = false, done = false;
    memset(c, 0, sizeof *c);
    c->id = -1;
    c->fully_replicated = -1;
    while (!done && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n && line[n - 1] != '\n' && !feof(f))
            return bad("line longer than %zu characters", sizeof line - 2);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (lineno == 1) {
            if (strncmp(line, "shmesh-golden 1 ", 16))
                return bad("not a shmesh-golden 1 file");
            continue;
        }
        if (!in_case) {
            if (!n)
                continue;
            int id;
            char op[32];
            if (sscanf(line, "case %d %31s", &id, op) != 2 || id < 0)
                return bad("expected 'case ID sharding'");
            if (strcmp(op, "sharding"))
                return bad("case %d is a '%s' case, not a sharding one", id, op);
            c->id = id;
            c->line = lineno;
            in_case = true;
            continue;
        }
        if (!parse_line(c, line, &done))
            return false;
    }
    if (in_case && !done)
        return bad("case %d has no 'end'", c->id);
    if (lineno == 0)
        return bad("empty file");
    return in_case;
}

/* ------------------------------------------------------------------------
 * Checking a case
 * ---------------------------------------------------------------------- */

static int rank;
static bool case_failed;

static void failure(const struct gcase *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failure(const struct gcase *c, const char *fmt, ...)
{
    case_failed = true;
    if (rank)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("case %d (line %ld): %s\n", c->id, c->line, msg);
}

/* A context's messages start "rank R: ". */
static const char *sentence(const char *msg)
{
    int n = 0;
    if (sscanf(msg, "rank %*d: %n", &n) == 0 && n > 0)
        return msg + n;
    return msg;
}

/* "device 3 replica 1 index 0:2 4:6", as the file writes it. */
static const char *index_text(const shmesh_index *ix, int ndim, char *buf, size_t len)
{
    int n = snprintf(buf, len, "device %d replica %d index", ix->device, ix->replica_id);
    for (int d = 0; d < ndim && n > 0 && (size_t)n < len; d++)
        n += snprintf(buf + n, len - (size_t)n, " %" PRId64 ":%" PRId64, ix->start[d],
                      ix->stop[d]);
    return buf;
}

/* Case c on mesh m (concrete: indices too); failures are the case's.
 * err_ctx: where m's errors are explained (NULL for an abstract mesh). */
static void check_on(const struct gcase *c, shmesh_mesh *m, const shmesh_ctx *err_ctx,
                     const char *which)
{
    shmesh_pspec spec;
    if (shmesh_pspec_parse(c->spec, &spec)) {
        failure(c, "shmesh_pspec_parse(\"%s\"): %s", c->spec, shmesh_last_error(NULL));
        return;
    }
    shmesh_sharding *sh = NULL;
    int64_t shard[SHMESH_MAX_NDIM];
    int rc = shmesh_sharding_create(m, &spec, &sh);
    if (!rc)
        rc = shmesh_sharding_shard_shape(sh, c->ndim, c->shape, shard);
    if (c->error[0]) {
        const char *msg = sentence(shmesh_last_error(err_ctx));
        size_t n = strlen(c->error);
        if (rc != SHMESH_ERR_INVALID)
            failure(c, "%s mesh: JAX refused it (%s), shmesh returned %s", which, c->error,
                    shmesh_error_name(rc));
        else if (strncmp(msg, c->error, n) || msg[n] != ':')
            failure(c, "%s mesh: JAX refused it with %s, shmesh with \"%s\"", which, c->error,
                    msg);
        shmesh_sharding_destroy(sh);
        return;
    }
    if (rc) {
        failure(c, "%s mesh: %s: %s", which, shmesh_error_name(rc),
                sentence(shmesh_last_error(err_ctx)));
        shmesh_sharding_destroy(sh);
        return;
    }
    for (int d = 0; d < c->ndim; d++)
        if (shard[d] != c->shard[d])
            failure(c, "%s mesh: shard shape dimension %d is %" PRId64 ", JAX's %" PRId64, which,
                    d, shard[d], c->shard[d]);
    int fr = shmesh_sharding_is_fully_replicated(sh, c->ndim, c->shape);
    if (fr != c->fully_replicated)
        failure(c, "%s mesh: fully replicated %d, JAX's %d", which, fr, c->fully_replicated);
    if (!shmesh_mesh_is_abstract(m)) {
        shmesh_index got[MAX_DEVICES];
        int size = shmesh_mesh_size(m);
        rc = shmesh_sharding_indices(sh, c->ndim, c->shape, got);
        if (rc)
            failure(c, "indices: %s: %s", shmesh_error_name(rc),
                    sentence(shmesh_last_error(err_ctx)));
        else if (size != c->ndev)
            failure(c, "%d devices, JAX's %d", size, c->ndev);
        for (int p = 0; !rc && p < size && p < c->ndev; p++) {
            const shmesh_index *g = &got[p], *e = &c->expect[p];
            bool same = g->device == e->device && g->replica_id == e->replica_id;
            for (int d = 0; d < c->ndim; d++)
                same &= g->start[d] == e->start[d] && g->stop[d] == e->stop[d];
            char gt[256], et[256];
            if (!same)
                failure(c, "position %d: %s, JAX's %s", p, index_text(g, c->ndim, gt, sizeof gt),
                        index_text(e, c->ndim, et, sizeof et));
        }
    }
    shmesh_sharding_destroy(sh);
}

static int finish(shmesh_ctx *ctx, int code)
{
    shmesh_finalize(ctx);
    return code;
}

int main(int argc, char **argv)
{
    shmesh_ctx *ctx;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh-golden-sharding: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: SHMESH_LOCAL_DEVICES=8 shmesh-golden-sharding FILE\n"
                            "       shmesh-run -n R --devices-per-rank 8/R -- "
                            "shmesh-golden-sharding FILE\n");
        return finish(ctx, 2);
    }
    path = argv[1];
    FILE *f = fopen(path, "r");
    if (!f) {
        if (rank == 0)
            perror(path);
        return finish(ctx, 2);
    }
    int devices = shmesh_device_count(ctx);
    int passed = 0, failed = 0, code = 0;
    struct gcase *c = calloc(1, sizeof *c);
    while (c && read_case(f, c)) {
        int size = 1;
        for (int d = 0; d < c->mesh_ndim; d++)
            size *= c->sizes[d];
        if (size != devices) {
            if (rank == 0)
                fprintf(stderr, "shmesh-golden-sharding: %s:%ld: case %d's mesh has %d devices, "
                                "the job %d: run with SHMESH_LOCAL_DEVICES=%d, or shmesh-run "
                                "-n R --devices-per-rank %d/R\n",
                        path, c->line, c->id, size, devices, size, size);
            code = 2;
            break;
        }
        const char *names[SHMESH_MAX_MESH_DIMS];
        for (int d = 0; d < c->mesh_ndim; d++)
            names[d] = c->names[d];
        shmesh_mesh *m, *am = NULL;
        int rc = shmesh_mesh_create(ctx, c->mesh_ndim, names, c->sizes, NULL, &m);
        if (!rc && (rc = shmesh_mesh_abstract(m, &am)))
            shmesh_mesh_destroy(m);
        if (rc) {
            fprintf(stderr, "shmesh-golden-sharding: case %d: the mesh: %s\n", c->id,
                    shmesh_last_error(ctx));
            code = 1;
            break;
        }
        case_failed = false;
        check_on(c, m, ctx, "concrete");
        check_on(c, am, NULL, "abstract");
        passed += !case_failed;
        failed += case_failed;
        shmesh_mesh_destroy(am);
        shmesh_mesh_destroy(m);
    }
    if (!c) {
        fprintf(stderr, "shmesh-golden-sharding: out of memory\n");
        code = 1;
    } else if (parse_err[0]) {
        if (rank == 0)
            fprintf(stderr, "shmesh-golden-sharding: %s\n", parse_err);
        code = 2;
    }
    free(c);
    fclose(f);
    if (code)
        return finish(ctx, code);
    if (rank == 0)
        printf("%d passed, %d failed\n", passed, failed);
    return finish(ctx, failed ? 1 : 0);
}
