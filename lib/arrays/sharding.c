/* Partition specs and named shardings: how a global array is split over a
 * mesh, its shard shape, and every device's block of it with a replica id
 * (jax.sharding.PartitionSpec and NamedSharding; the seed's
 * GlobalDeviceArray helpers get_shard_shape and get_shard_indices_replica_ids). */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "arrays/sharding.h"

/* Room for the texts error messages quote; longer ones are cut (a message
 * holds CTX_ERR_MAX bytes in all). */
#define TEXT_MAX 512

/* ------------------------------------------------------------------------
 * Text: an appender that counts what it could not write, so that
 * shmesh_pspec_text can say how long a buffer it needed.
 * ---------------------------------------------------------------------- */

struct text {
    char *buf;
    size_t len, n;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
    bool room = t->n < t->len;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(room ? t->buf + t->n : NULL, room ? t->len - t->n : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        t->n += (size_t)k;
}

/* A name as stored in a spec: at most SHMESH_MAX_AXIS_NAME characters even
 * when the caller's array is not terminated. */
#define NAME_FMT "%.*s"
#define NAME_ARG(s) SHMESH_MAX_AXIS_NAME, (s)

/* A name quoted as Python's repr quotes a str (and so JAX's P shows it):
 * in '...', or in "..." when it holds a ' but no ", with a backslash before
 * every backslash and every quote like the one around it.  parse_name
 * reads it back. */
static void name_put(struct text *t, const char *name)
{
    size_t n = strnlen(name, SHMESH_MAX_AXIS_NAME);
    char quote = memchr(name, '\'', n) && !memchr(name, '"', n) ? '"' : '\'';
    put(t, "%c", quote);
    for (size_t i = 0; i < n; i++)
        put(t, "%s%c", name[i] == '\\' || name[i] == quote ? "\\" : "", name[i]);
    put(t, "%c", quote);
}

static void spec_put(struct text *t, const shmesh_pspec *s)
{
    put(t, "P(");
    for (int i = 0; i < s->n; i++) {
        put(t, "%s", i ? ", " : "");
        if (s->naxes[i] == 0)
            put(t, "None");
        else if (s->naxes[i] == 1) /* JAX shows a 1-tuple as its name */
            name_put(t, s->axes[i][0]);
        else {
            put(t, "(");
            for (int k = 0; k < s->naxes[i]; k++) {
                put(t, "%s", k ? ", " : "");
                name_put(t, s->axes[i][k]);
            }
            put(t, ")");
        }
    }
    put(t, ")");
}

/* Python's tuple text: "(9,)", "(5, 12)", "()". */
static const char *shape_text(int ndim, const int64_t *shape, char *buf, size_t len)
{
    struct text t = {buf, len, 0};
    put(&t, "(");
    for (int d = 0; d < ndim; d++)
        put(&t, "%s%" PRId64, d ? ", " : "", shape[d]);
    put(&t, ndim == 1 ? ",)" : ")");
    return buf;
}

/* "NamedSharding(Mesh('x': 2), P('x'))": what error messages name. */
static const char *sharding_text(const shmesh_mesh *m, const shmesh_pspec *s, char *buf,
                                 size_t len)
{
    struct text t = {buf, len, 0};
    put(&t, "NamedSharding(");
    int k = shmesh_mesh_text(m, t.n < len ? buf + t.n : NULL, t.n < len ? len - t.n : 0);
    t.n += k > 0 ? (size_t)k : 0;
    put(&t, ", ");
    spec_put(&t, s);
    put(&t, ")");
    return buf;
}

/* ------------------------------------------------------------------------
 * Specs
 * ---------------------------------------------------------------------- */

/* What ends a name in spec text; mesh axis names never hold these. */
static bool delimiter(char c)
{
    return c == 0 || c == ',' || c == '(' || c == ')' || isspace((unsigned char)c);
}

static bool means_none(const char *s, size_t n)
{
    return (n == 1 && s[0] == '-') || (n == 4 && !strncmp(s, "None", 4));
}

struct parser {
    const char *text, *p;
    shmesh_pspec spec;
};

static void skip_spaces(struct parser *ps)
{
    while (isspace((unsigned char)*ps->p))
        ps->p++;
}

/* "expected ... at position N, found ..." for the character at ps->p. */
static int parse_fail(const struct parser *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int parse_fail(const struct parser *ps, const char *fmt, ...)
{
    char expected[160], found[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(expected, sizeof expected, fmt, ap);
    va_end(ap);
    if (*ps->p)
        snprintf(found, sizeof found, "'%c'", *ps->p);
    else
        snprintf(found, sizeof found, "the end");
    init_error("ValueError: partition spec \"%s\": expected %s at position %d, found %s",
               ps->text, expected, (int)(ps->p - ps->text), found);
    return SHMESH_ERR_INVALID;
}

/* A name at ps->p, bare or quoted as Python writes it ('x' or "x"); *none
 * when it is a bare "-" or "None".  Inside quotes a backslash takes the
 * next character as it is, which must be a backslash or a quote (what
 * name_put escapes; any other escape would mean something else to Python,
 * so it is refused).  A bare name has no escapes. */
static int parse_name(struct parser *ps, char *out, bool *none, const char *expected)
{
    const char *start = ps->p;
    char quote = *ps->p == '\'' || *ps->p == '"' ? *ps->p++ : 0;
    const char *name = ps->p;
    size_t n = 0; /* characters of the name, escapes read */
    while (!delimiter(*ps->p) && *ps->p != quote) {
        if (quote && *ps->p == '\\') {
            ps->p++;
            if (*ps->p != '\\' && *ps->p != '\'' && *ps->p != '"')
                return parse_fail(ps, "\\\\, ' or \" after a backslash in a quoted name");
        }
        ps->p++;
        n++;
    }
    if (quote && *ps->p != quote)
        return parse_fail(ps, "a closing %c (the name opened at position %d)", quote,
                          (int)(start - ps->text));
    if (n == 0) {
        ps->p = start;
        return parse_fail(ps, "%s", expected);
    }
    if (n > SHMESH_MAX_AXIS_NAME) {
        ps->p = start;
        return parse_fail(ps, "an axis name of at most %d characters (it has %zu)",
                          SHMESH_MAX_AXIS_NAME, n);
    }
    *none = !quote && means_none(name, n);
    for (size_t i = 0; i < n; i++) {
        name += quote && *name == '\\';
        out[i] = *name++;
    }
    out[n] = 0;
    ps->p += quote != 0;
    return 0;
}

/* Items separated by commas up to `closer`: '\0' (the end of the text; a
 * trailing comma is an error there) or ')' (which, as in Python's tuples,
 * may follow one).  `what` says what an item is. */
static int parse_list(struct parser *ps, char closer, int (*item)(struct parser *),
                      const char *what)
{
    skip_spaces(ps);
    while (*ps->p != closer) {
        int rc = item(ps);
        if (rc)
            return rc;
        skip_spaces(ps);
        if (*ps->p == closer)
            break;
        if (*ps->p != ',')
            return parse_fail(ps, closer ? "',' or ')'" : "','");
        ps->p++;
        skip_spaces(ps);
        if (!closer && !*ps->p) /* "x,": an entry is missing */
            return parse_fail(ps, "%s", what);
    }
    ps->p += closer != 0;
    return 0;
}

/* One name of the tuple that is the spec's last entry. */
static int tuple_item(struct parser *ps)
{
    shmesh_pspec *s = &ps->spec;
    int i = s->n - 1;
    const char *start = ps->p;
    if (s->naxes[i] == SHMESH_MAX_MESH_DIMS)
        return parse_fail(ps, "')' after at most %d axes in a tuple", SHMESH_MAX_MESH_DIMS);
    bool none;
    int rc = parse_name(ps, s->axes[i][s->naxes[i]], &none, "an axis name");
    if (!rc && none) {
        ps->p = start;
        return parse_fail(ps, "an axis name (a tuple holds names only)");
    }
    s->naxes[i] += !rc;
    return rc;
}

static const char entry_what[] = "an axis name, '-', 'None' or '('";

static int entry_item(struct parser *ps)
{
    shmesh_pspec *s = &ps->spec;
    if (s->n == SHMESH_MAX_NDIM)
        return parse_fail(ps, "at most %d entries", SHMESH_MAX_NDIM);
    int i = s->n++;
    if (*ps->p == '(') {
        ps->p++;
        return parse_list(ps, ')', tuple_item, "an axis name");
    }
    bool none;
    int rc = parse_name(ps, s->axes[i][0], &none, entry_what);
    s->naxes[i] = !rc && !none;
    if (!s->naxes[i]) /* equal specs are equal bytes: nothing left behind */
        memset(s->axes[i][0], 0, sizeof s->axes[i][0]);
    return rc;
}

int shmesh_pspec_parse(const char *text, shmesh_pspec *spec)
{
    if (!text || !spec) {
        init_error("shmesh_pspec_parse: text and spec must not be NULL");
        return SHMESH_ERR_INVALID;
    }
    struct parser ps = {.text = text, .p = text};
    memset(&ps.spec, 0, sizeof ps.spec);
    skip_spaces(&ps);
    /* shmesh_pspec_text's form, "P('x', ('y', 'z'), None)": a bare name is
     * never followed by '(', so "P(" can only start it. */
    const char *after = ps.p + (*ps.p == 'P');
    while (isspace((unsigned char)*after))
        after++;
    int rc;
    if (*ps.p == 'P' && *after == '(') {
        ps.p = after + 1;
        rc = parse_list(&ps, ')', entry_item, entry_what);
        skip_spaces(&ps);
        if (!rc && *ps.p)
            rc = parse_fail(&ps, "the end");
    } else {
        rc = parse_list(&ps, 0, entry_item, entry_what);
    }
    if (!rc)
        *spec = ps.spec;
    return rc;
}

/* A spec built by hand: counts in range, names as mesh axis names are.
 * Errors go where mesh_fail puts them (m may be NULL). */
static int spec_check(const shmesh_mesh *m, const char *fn, const shmesh_pspec *s)
{
    if (s->n < 0 || s->n > SHMESH_MAX_NDIM)
        return mesh_fail(m, "ValueError: %s: a partition spec has 0..%d entries, got %d", fn,
                         SHMESH_MAX_NDIM, s->n);
    for (int i = 0; i < s->n; i++) {
        if (s->naxes[i] < 0 || s->naxes[i] > SHMESH_MAX_MESH_DIMS)
            return mesh_fail(m, "ValueError: %s: entry %d of the partition spec has 0..%d axes, "
                                "got %d",
                             fn, i, SHMESH_MAX_MESH_DIMS, s->naxes[i]);
        for (int k = 0; k < s->naxes[i]; k++) {
            const char *name = s->axes[i][k];
            size_t n = strnlen(name, SHMESH_MAX_AXIS_NAME + 1);
            size_t end = 0;
            while (end < n && !delimiter(name[end]))
                end++;
            if (n == 0 || n > SHMESH_MAX_AXIS_NAME || end != n)
                return mesh_fail(m, "ValueError: %s: axis %d of entry %d of the partition spec "
                                    "must be a name of 1..%d characters without ',', '(', ')' "
                                    "or spaces, got \"" NAME_FMT "\"",
                                 fn, k, i, SHMESH_MAX_AXIS_NAME, NAME_ARG(name));
        }
    }
    return 0;
}

int shmesh_pspec_text(const shmesh_pspec *spec, char *buf, size_t len)
{
    if (!spec || (!buf && len)) {
        init_error("shmesh_pspec_text: spec must not be NULL, nor buf when len > 0");
        return SHMESH_ERR_INVALID;
    }
    int rc = spec_check(NULL, "shmesh_pspec_text", spec);
    if (rc)
        return rc;
    struct text t = {buf, len, 0};
    spec_put(&t, spec);
    return (int)t.n;
}

/* ------------------------------------------------------------------------
 * Shardings
 * ---------------------------------------------------------------------- */

static bool same_name(const char *a, const char *b)
{
    return !strncmp(a, b, SHMESH_MAX_AXIS_NAME + 1);
}

/* The first axis a spec uses twice: its name and the entries holding it
 * (first <= second; equal when a tuple repeats it); NULL when none is. */
static const char *repeated_axis(const shmesh_pspec *s, int *first, int *second)
{
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->naxes[i]; k++)
            for (int j = 0; j <= i; j++)
                for (int l = 0; l < (j == i ? k : s->naxes[j]); l++)
                    if (same_name(s->axes[i][k], s->axes[j][l])) {
                        *first = j;
                        *second = i;
                        return s->axes[i][k];
                    }
    return NULL;
}

/* Each spec entry's axes as mesh dimensions.  As JAX, a repeated axis is
 * reported before an unknown one. */
static int resolve(struct shmesh_sharding *sh)
{
    const shmesh_pspec *s = &sh->spec;
    const shmesh_mesh *m = sh->mesh;
    char nt[TEXT_MAX];
    int first, second;
    const char *twice = repeated_axis(s, &first, &second);
    if (twice) {
        char where[64];
        if (first == second)
            snprintf(where, sizeof where, "twice in entry %d", first);
        else
            snprintf(where, sizeof where, "in entries %d and %d", first, second);
        return mesh_fail(m, "DuplicateSpecError: %s: a mesh axis may split at most one "
                            "dimension of an array, but the spec uses '%s' %s",
                         sharding_text(m, s, nt, sizeof nt), twice, where);
    }
    for (int i = 0; i < s->n; i++) {
        struct axes *a = &sh->entry[i];
        a->n = s->naxes[i];
        a->size = 1;
        for (int k = 0; k < a->n; k++) {
            int dim = -1;
            for (int d = 0; d < m->ndim && dim < 0; d++)
                if (same_name(m->names[d], s->axes[i][k]))
                    dim = d;
            if (dim < 0)
                return mesh_fail(m, "ValueError: %s: entry %d of the spec names axis '%s', "
                                    "which the mesh does not have",
                                 sharding_text(m, s, nt, sizeof nt), i, s->axes[i][k]);
            a->dim[k] = dim;
            a->size *= m->sizes[dim];
        }
    }
    return 0;
}

int shmesh_sharding_create(shmesh_mesh *mesh, const shmesh_pspec *spec, shmesh_sharding **out)
{
    static const char fn[] = "shmesh_sharding_create";
    if (out)
        *out = NULL;
    shmesh_mesh *m = mesh_or_current(mesh, fn);
    if (!m)
        return SHMESH_ERR_INVALID;
    if (!spec || !out)
        return mesh_fail(m, "%s: spec and out must not be NULL", fn);
    int rc = mesh_unbatched(m, fn, "shardings");
    if (!rc)
        rc = spec_check(m, fn, spec);
    if (rc)
        return rc;
    struct shmesh_sharding *sh = calloc(1, sizeof *sh);
    if (!sh) {
        mesh_fail(m, "%s: out of memory", fn);
        return SHMESH_ERR_NOMEM;
    }
    sh->mesh = m;
    sh->spec = *spec;
    rc = resolve(sh);
    if (rc) {
        free(sh);
        return rc;
    }
    *out = sh;
    return 0;
}

void shmesh_sharding_destroy(shmesh_sharding *sharding)
{
    free(sharding);
}

shmesh_mesh *shmesh_sharding_mesh(const shmesh_sharding *sharding)
{
    return sharding ? sharding->mesh : NULL;
}

const shmesh_pspec *shmesh_sharding_spec(const shmesh_sharding *sharding)
{
    return sharding ? &sharding->spec : NULL;
}

/* The shard shape of an array of `shape` (what every function given a
 * shape starts with): the spec fits the array, and each split dimension
 * is a multiple of the number of ways it is split.  A dimension of size 0
 * is, whatever that number (its shards are empty).  Entries past the
 * array's dimensions are refused only when they split (an axis of size
 * > 1): JAX, which leaves out axes of size 1 when it lays a sharding
 * out, accepts P(None, None, None, 'y') for a 3-d array when 'y' has size
 * 1 (the golden file's case 403) and refuses it when 'y' has size 2. */
static int shard_shape(const shmesh_sharding *sh, const char *fn, int ndim, const int64_t *shape,
                       int64_t *shard)
{
    if (!sh)
        return mesh_fail(NULL, "%s: sharding must not be NULL", fn);
    const shmesh_mesh *m = sh->mesh;
    const shmesh_pspec *s = &sh->spec;
    if (ndim < 0 || ndim > SHMESH_MAX_NDIM)
        return mesh_fail(m, "%s: ndim must be 0..%d, got %d", fn, SHMESH_MAX_NDIM, ndim);
    if (!shape && ndim > 0)
        return mesh_fail(m, "%s: shape must not be NULL", fn);
    char nt[TEXT_MAX], sht[TEXT_MAX];
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return mesh_fail(m, "ValueError: %s: the shape %s has a negative dimension (%d)", fn,
                             shape_text(ndim, shape, sht, sizeof sht), d);
    for (int i = ndim; i < s->n; i++)
        if (sh->entry[i].size > 1)
            return mesh_fail(m, "IndexError: %s: the spec has %d entries, but the array has %d "
                                "dimension%s (shape %s), and entry %d splits %d ways a "
                                "dimension it does not have",
                             sharding_text(m, s, nt, sizeof nt), s->n, ndim, ndim == 1 ? "" : "s",
                             shape_text(ndim, shape, sht, sizeof sht), i, sh->entry[i].size);
    for (int d = 0; d < ndim; d++) {
        int64_t ways = d < s->n ? sh->entry[d].size : 1;
        if (shape[d] % ways)
            return mesh_fail(m, "IndivisibleError: %s splits dimension %d of the shape %s %" PRId64
                                " ways, but its size %" PRId64 " is not a multiple of %" PRId64,
                             sharding_text(m, s, nt, sizeof nt), d,
                             shape_text(ndim, shape, sht, sizeof sht), ways, shape[d], ways);
        if (shard)
            shard[d] = shape[d] / ways;
    }
    return 0;
}

int shmesh_sharding_shard_shape(const shmesh_sharding *sharding, int ndim, const int64_t *shape,
                                int64_t *shard)
{
    static const char fn[] = "shmesh_sharding_shard_shape";
    if (sharding && !shard && ndim > 0)
        return mesh_fail(sharding->mesh, "%s: shard_shape must not be NULL", fn);
    return shard_shape(sharding, fn, ndim, shape, shard);
}

/* GlobalDeviceArray's definition: every shard is the whole array. */
int shmesh_sharding_is_fully_replicated(const shmesh_sharding *sharding, int ndim,
                                        const int64_t *shape)
{
    int64_t shard[SHMESH_MAX_NDIM];
    int rc = shard_shape(sharding, "shmesh_sharding_is_fully_replicated", ndim, shape, shard);
    if (rc)
        return rc;
    for (int d = 0; d < ndim; d++)
        if (shard[d] != shape[d])
            return 0;
    return 1;
}

/* Device at mesh position p: along dimension d its block is numbered
 * row-major over its coordinates on the entry's axes (the first slowest),
 * and a device's replica id counts the devices before it in mesh order
 * that hold the same block.  Blocks are told apart by their slices, as in
 * JAX: every block of a dimension of size 0 is the same empty slice. */
int shmesh_sharding_indices(const shmesh_sharding *sharding, int ndim, const int64_t *shape,
                            shmesh_index *out)
{
    static const char fn[] = "shmesh_sharding_indices";
    int64_t shard[SHMESH_MAX_NDIM];
    int rc = shard_shape(sharding, fn, ndim, shape, shard);
    if (rc)
        return rc;
    const shmesh_mesh *m = sharding->mesh;
    const shmesh_pspec *s = &sharding->spec;
    char nt[TEXT_MAX];
    if (m->abstract)
        return mesh_fail(m, "ValueError: AbstractMesh has no devices: %s needs a concrete mesh, "
                            "got %s",
                         fn, sharding_text(m, s, nt, sizeof nt));
    if (!out)
        return mesh_fail(m, "%s: out must not be NULL", fn);

    /* Distinct blocks are numbered row-major over the dimensions' block
     * numbers; there are at most as many as devices, since the ways of all
     * dimensions multiply distinct axes' sizes. */
    int64_t blocks[SHMESH_MAX_NDIM];
    for (int d = 0; d < ndim; d++)
        blocks[d] = shard[d] ? shape[d] / shard[d] : 1;
    int *holders = calloc((size_t)m->size, sizeof *holders);
    if (!holders) {
        mesh_fail(m, "%s: out of memory", fn);
        return SHMESH_ERR_NOMEM;
    }
    int64_t unique = 0;
    for (int p = 0; p < m->size; p++) {
        int coords[SHMESH_MAX_MESH_DIMS];
        mesh_coords(m, p, coords);
        shmesh_index *ix = &out[p];
        memset(ix, 0, sizeof *ix);
        ix->device = m->ids[p];
        int64_t key = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t b = 0;
            for (int k = 0; d < s->n && k < sharding->entry[d].n; k++) {
                int md = sharding->entry[d].dim[k];
                b = b * m->sizes[md] + coords[md];
            }
            ix->start[d] = b * shard[d];
            ix->stop[d] = ix->start[d] + shard[d];
            key = key * blocks[d] + (shard[d] ? b : 0);
        }
        ix->replica_id = holders[key]++;
        unique += ix->replica_id == 0;
    }
    free(holders);

    /* The seed's consistency check: as many distinct blocks as the shard
     * shape implies (a dimension of size 0 contributes one). */
    int64_t expected = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] != 0 || shard[d] != 0)
            expected *= shape[d] / shard[d];
    if (expected != unique)
        return mesh_fail(m, "RuntimeError: %s: the shard shape implies %" PRId64
                            " distinct blocks, but the devices hold %" PRId64
                            " (a bug in shmesh: please report it)",
                         fn, expected, unique);
    return 0;
}
