/* Description: partition specs and named shardings (lib/mesh/sharding.c).
 * The seed's GlobalDeviceArray examples; specs read from text and written
 * back; every parse error naming its position; each error kind of a
 * sharding with what its message must say; and properties over random
 * meshes, specs, shapes and device orders: the shard shape times the ways
 * a dimension is split is the dimension, every distinct block is held by
 * the same number of devices whose replica ids count 0, 1, ... in mesh
 * order, and the distinct blocks tile the array exactly once.
 *
 * Meshes are built by hand (an internal test): abstract ones where only
 * shard shapes are asked, concrete ones (device ids, no context) where
 * indices are. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "arrays/sharding.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* An abstract mesh from the library, or a concrete one as mesh.c makes
 * one, as far as shardings look (no context): names, sizes and the device
 * at each position (order, or the identity). */
static shmesh_mesh *make_mesh(int ndim, const char *const names[], const int sizes[],
                              bool abstract, const int *order)
{
    shmesh_mesh *m;
    if (abstract) {
        int rc = shmesh_abstract_mesh_create(ndim, names, sizes, &m);
        if (rc)
            fail_msg("shmesh_abstract_mesh_create: %s", shmesh_last_error(NULL));
        return m;
    }
    m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->ndim = ndim;
    m->size = 1;
    m->batch_dim = -1; /* no batched axis (mesh/mesh.h) */
    m->batch = m->per = 1;
    for (int d = 0; d < ndim; d++) {
        snprintf(m->names[d], sizeof m->names[d], "%s", names[d]);
        m->sizes[d] = sizes[d];
        m->size *= sizes[d];
    }
    m->ids = malloc(sizeof *m->ids * (size_t)m->size);
    assert_non_null(m->ids);
    for (int p = 0; p < m->size; p++)
        m->ids[p] = order ? order[p] : p;
    return m;
}

static void free_mesh(shmesh_mesh *m)
{
    if (m->abstract) {
        shmesh_mesh_destroy(m);
        return;
    }
    free(m->ids);
    free(m);
}

static shmesh_pspec parse(const char *text)
{
    shmesh_pspec s;
    int rc = shmesh_pspec_parse(text, &s);
    if (rc)
        fail_msg("\"%s\": %d, %s", text, rc, shmesh_last_error(NULL));
    return s;
}

static shmesh_sharding *sharding(shmesh_mesh *m, const char *spec)
{
    shmesh_pspec s = parse(spec);
    shmesh_sharding *sh = NULL;
    int rc = shmesh_sharding_create(m, &s, &sh);
    if (rc)
        fail_msg("\"%s\": %d, %s", spec, rc, shmesh_last_error(NULL));
    return sh;
}

/* The shard shape of `shape` (ndim given by the list, -1 terminated). */
static void expect_shard_shape(shmesh_sharding *sh, int ndim, const int64_t *shape,
                               const int64_t *want)
{
    int64_t got[SHMESH_MAX_NDIM];
    assert_int_equal(shmesh_sharding_shard_shape(sh, ndim, shape, got), 0);
    for (int d = 0; d < ndim; d++)
        if (got[d] != want[d])
            fail_msg("dimension %d: shard %lld, expected %lld", d, (long long)got[d],
                     (long long)want[d]);
}

/* The call failed with SHMESH_ERR_INVALID and a message on this thread
 * that starts with `type` and holds every one of the NULL-terminated
 * fragments. */
static void expect_error(int rc, const char *type, ...)
{
    const char *msg = shmesh_last_error(NULL);
    if (rc != SHMESH_ERR_INVALID)
        fail_msg("returned %d, expected SHMESH_ERR_INVALID (message: %s)", rc, msg);
    if (strncmp(msg, type, strlen(type)))
        fail_msg("message \"%s\" does not start with \"%s\"", msg, type);
    va_list ap;
    va_start(ap, type);
    for (const char *frag; (frag = va_arg(ap, const char *));)
        if (!strstr(msg, frag))
            fail_msg("message \"%s\" lacks \"%s\"", msg, frag);
    va_end(ap);
}

static const char *const XY[] = {"x", "y"};

/* ------------------------------------------------------------------------
 * The seed's examples
 * ---------------------------------------------------------------------- */

static void seed_examples(void **state)
{
    (void)state;
    /* (8, 2) over a 4 x 2 mesh ('x', 'y'). */
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){4, 2}, false, NULL);
    const int64_t shape[] = {8, 2};

    shmesh_sharding *sh = sharding(m, "x,y");
    expect_shard_shape(sh, 2, shape, (const int64_t[]){2, 1});
    shmesh_index ix[8];
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++) { /* device p sits at (p / 2, p % 2) */
        assert_int_equal(ix[p].device, p);
        assert_int_equal(ix[p].replica_id, 0);
        assert_int_equal(ix[p].start[0], 2 * (p / 2));
        assert_int_equal(ix[p].stop[0], 2 * (p / 2) + 2);
        assert_int_equal(ix[p].start[1], p % 2);
        assert_int_equal(ix[p].stop[1], p % 2 + 1);
    }
    assert_int_equal(shmesh_sharding_is_fully_replicated(sh, 2, shape), 0);
    shmesh_sharding_destroy(sh);

    /* P('x'): 'y' replicates; the two devices of a row hold one block. */
    sh = sharding(m, "x");
    expect_shard_shape(sh, 2, shape, (const int64_t[]){2, 2});
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++) {
        assert_int_equal(ix[p].replica_id, p % 2);
        assert_int_equal(ix[p].start[0], 2 * (p / 2));
        assert_int_equal(ix[p].start[1], 0);
        assert_int_equal(ix[p].stop[1], 2);
    }
    shmesh_sharding_destroy(sh);

    /* P(('x', 'y')): dimension 0 split 8 ways, 'x' slowest. */
    sh = sharding(m, "(x,y)");
    expect_shard_shape(sh, 2, shape, (const int64_t[]){1, 2});
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++) {
        assert_int_equal(ix[p].start[0], p);
        assert_int_equal(ix[p].stop[0], p + 1);
        assert_int_equal(ix[p].replica_id, 0);
    }
    shmesh_sharding_destroy(sh);
    /* ('y', 'x'): 'y' slowest, so device (i, j) holds row j * 4 + i. */
    sh = sharding(m, "(y,x)");
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++)
        assert_int_equal(ix[p].start[0], (p % 2) * 4 + p / 2);
    shmesh_sharding_destroy(sh);
    free_mesh(m);

    /* (8, 8) over a 2 x 4 mesh, P('x', 'y'). */
    m = make_mesh(2, XY, (const int[]){2, 4}, true, NULL);
    sh = sharding(m, "x,y");
    expect_shard_shape(sh, 2, (const int64_t[]){8, 8}, (const int64_t[]){4, 2});
    assert_ptr_equal(shmesh_sharding_mesh(sh), m);
    assert_int_equal(shmesh_sharding_spec(sh)->n, 2);
    shmesh_sharding_destroy(sh);
    free_mesh(m);
}

/* The device ids follow the mesh's order; blocks follow positions. */
static void device_order(void **state)
{
    (void)state;
    const int order[] = {5, 3, 0, 1, 7, 6, 2, 4};
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){2, 4}, false, order);
    shmesh_sharding *sh = sharding(m, "y");
    const int64_t shape[] = {4, 3};
    shmesh_index ix[8];
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++) {
        assert_int_equal(ix[p].device, order[p]);
        assert_int_equal(ix[p].start[0], p % 4);
        assert_int_equal(ix[p].replica_id, p / 4);
        assert_int_equal(ix[p].start[1], 0);
        assert_int_equal(ix[p].stop[1], 3);
    }
    shmesh_sharding_destroy(sh);
    free_mesh(m);
}

/* ------------------------------------------------------------------------
 * Spec text
 * ---------------------------------------------------------------------- */

static void parse_and_print(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"", "P()"},
        {"   ", "P()"},
        {"x", "P('x')"},
        {"x,y", "P('x', 'y')"},
        {"(x,y),-", "P(('x', 'y'), None)"},
        {" ( x , y ) , None ", "P(('x', 'y'), None)"},
        {"-", "P(None)"},
        {"None,x", "P(None, 'x')"},
        {"()", "P(None)"},
        {"(a)", "P('a')"},
        {"(a,)", "P('a')"},
        {"-,-,-,-,-,-,-,model", "P(None, None, None, None, None, None, None, 'model')"},
        {"(a,b,c,d,e,f,g,h)", "P(('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'))"},
        {"data-parallel", "P('data-parallel')"},
        {"-x", "P('-x')"},
        {"Nonex", "P('Nonex')"},
        {"abcdefghijklmnopqrstuvwxyz01234", "P('abcdefghijklmnopqrstuvwxyz01234')"},
        /* shmesh_pspec_text's own form, and JAX's spelling of it */
        {"P()", "P()"},
        {"P('x', ('x', 'y'), None)", "P('x', ('x', 'y'), None)"},
        {"P('data',)", "P('data')"},
        {"P((\"z\", 'model'), None)", "P(('z', 'model'), None)"},
        {" P ( x ) ", "P('x')"},
        {"P", "P('P')"},
        {"'None'", "P('None')"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        shmesh_pspec s = parse(cases[i].in);
        char buf[256];
        int n = shmesh_pspec_text(&s, buf, sizeof buf);
        if (n != (int)strlen(cases[i].out) || strcmp(buf, cases[i].out))
            fail_msg("\"%s\" printed as \"%s\" (%d), expected \"%s\"", cases[i].in, buf, n,
                     cases[i].out);
        /* The printed form reads back as the same spec. */
        shmesh_pspec again = parse(buf);
        if (memcmp(&s, &again, sizeof s))
            fail_msg("\"%s\" read back from \"%s\" differs", cases[i].in, buf);
        /* A short buffer: cut, terminated, the length still the whole. */
        for (size_t len = 0; len < (size_t)n + 1; len++) {
            char small[256];
            memset(small, 0x5a, sizeof small);
            assert_int_equal(shmesh_pspec_text(&s, len ? small : NULL, len), n);
            if (len) {
                assert_int_equal(strlen(small), len - 1);
                assert_memory_equal(small, buf, len - 1);
            }
            assert_int_equal((unsigned char)small[len], 0x5a);
        }
    }
}

static void parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int pos;
        const char *says;
    } cases[] = {
        {",x", 0, "expected an axis name"},
        {"x,,y", 2, "found ','"},
        {"x,", 2, "found the end"},
        {"x y", 2, "expected ','"},
        {"x)", 1, "expected ','"},
        {"x(", 1, "expected ','"},
        {"(x", 2, "expected ',' or ')'"},
        {"(x y)", 3, "found 'y'"},
        {"(x,-)", 3, "a tuple holds names only"},
        {"(None)", 1, "a tuple holds names only"},
        {"((x))", 1, "expected an axis name"},
        {"(,)", 1, "expected an axis name"},
        {")", 0, "found ')'"},
        {"abcdefghijklmnopqrstuvwxyz012345", 0, "at most 31 characters"},
        {"a,b,c,d,e,f,g,h,i", 16, "at most 8 entries"},
        {"(a,b,c,d,e,f,g,h,i)", 17, "at most 8 axes in a tuple"},
        {"'x", 2, "a closing ' (the name opened at position 0)"},
        {"'x y'", 2, "a closing '"},
        {"''", 0, "expected an axis name"},
        {"P(x", 3, "found the end"},
        {"P(x))", 4, "expected the end"},
        {"P(x,,)", 4, "found ','"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        shmesh_pspec s, before;
        memset(&s, 0x33, sizeof s);
        before = s;
        int rc = shmesh_pspec_parse(cases[i].in, &s);
        char pos[32], text[64];
        snprintf(pos, sizeof pos, "at position %d", cases[i].pos);
        snprintf(text, sizeof text, "\"%s\"", cases[i].in);
        expect_error(rc, "ValueError: ", text, pos, cases[i].says, NULL);
        assert_memory_equal(&s, &before, sizeof s);
    }
    shmesh_pspec s;
    expect_error(shmesh_pspec_parse(NULL, &s), "shmesh_pspec_parse: ", "NULL", NULL);
    expect_error(shmesh_pspec_parse("x", NULL), "shmesh_pspec_parse: ", "NULL", NULL);
}

/* Specs built by hand that no text gives. */
static void malformed_specs(void **state)
{
    (void)state;
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){2, 4}, true, NULL);
    char buf[64];
    shmesh_sharding *sh;
    shmesh_pspec s = parse("x,y");
    s.n = SHMESH_MAX_NDIM + 1;
    expect_error(shmesh_pspec_text(&s, buf, sizeof buf), "ValueError: ", "0..8 entries", "9",
                 NULL);
    expect_error(shmesh_sharding_create(m, &s, &sh), "ValueError: ", "0..8 entries", NULL);
    s = parse("x,y");
    s.naxes[1] = -1;
    expect_error(shmesh_pspec_text(&s, buf, sizeof buf), "ValueError: ", "entry 1", "-1", NULL);
    s = parse("x,y");
    s.axes[1][0][0] = 0;
    expect_error(shmesh_sharding_create(m, &s, &sh), "ValueError: ", "axis 0 of entry 1", NULL);
    s = parse("x,y");
    strcpy(s.axes[0][0], "a b");
    expect_error(shmesh_pspec_text(&s, buf, sizeof buf), "ValueError: ", "\"a b\"", NULL);
    s = parse("x,y");
    memset(s.axes[0][0], 'a', sizeof s.axes[0][0]); /* not terminated */
    expect_error(shmesh_pspec_text(&s, buf, sizeof buf), "ValueError: ", "axis 0 of entry 0",
                 NULL);
    expect_error(shmesh_pspec_text(NULL, buf, sizeof buf), "shmesh_pspec_text: ", NULL);
    s = parse("x");
    expect_error(shmesh_pspec_text(&s, NULL, 4), "shmesh_pspec_text: ", NULL);
    free_mesh(m);
}

/* ------------------------------------------------------------------------
 * Sharding errors
 * ---------------------------------------------------------------------- */

static void create_errors(void **state)
{
    (void)state;
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){2, 4}, true, NULL);
    char mt[128];
    shmesh_mesh_text(m, mt, sizeof mt);
    shmesh_sharding *sh = (shmesh_sharding *)m; /* set to NULL on failure */
    shmesh_pspec s = parse("x,x");
    expect_error(shmesh_sharding_create(m, &s, &sh), "DuplicateSpecError: ", "P('x', 'x')",
                 "'x' in entries 0 and 1", mt, NULL);
    assert_null(sh);
    s = parse("(y,x),-,x");
    expect_error(shmesh_sharding_create(m, &s, &sh), "DuplicateSpecError: ",
                 "P(('y', 'x'), None, 'x')", "entries 0 and 2", NULL);
    s = parse("(x,x)");
    expect_error(shmesh_sharding_create(m, &s, &sh), "DuplicateSpecError: ",
                 "'x' twice in entry 0", NULL);
    /* A repeated axis is reported before an unknown one, as JAX does. */
    s = parse("w,y,y");
    expect_error(shmesh_sharding_create(m, &s, &sh), "DuplicateSpecError: ", "'y'", NULL);
    s = parse("y,(x,w)");
    expect_error(shmesh_sharding_create(m, &s, &sh), "ValueError: ", "P('y', ('x', 'w'))",
                 "entry 1 of the spec names axis 'w'", mt, "does not have", NULL);
    s = parse("X");
    expect_error(shmesh_sharding_create(m, &s, &sh), "ValueError: ", "'X'", NULL);

    expect_error(shmesh_sharding_create(m, NULL, &sh), "shmesh_sharding_create: ", NULL);
    s = parse("x");
    expect_error(shmesh_sharding_create(m, &s, NULL), "shmesh_sharding_create: ", NULL);
    /* No mesh: the innermost pushed one, and an error when none is. */
    assert_int_equal(shmesh_sharding_create(NULL, &s, &sh), SHMESH_ERR_INVALID);
    assert_null(sh);
    shmesh_mesh *cm = make_mesh(2, XY, (const int[]){2, 4}, false, NULL);
    assert_int_equal(shmesh_mesh_push(cm), 0);
    assert_int_equal(shmesh_sharding_create(NULL, &s, &sh), 0);
    assert_ptr_equal(shmesh_sharding_mesh(sh), cm);
    shmesh_sharding_destroy(sh);
    assert_int_equal(shmesh_mesh_pop(cm), 0);
    free_mesh(cm);
    /* The spec is copied: the caller's may change. */
    assert_int_equal(shmesh_sharding_create(m, &s, &sh), 0);
    strcpy(s.axes[0][0], "y");
    assert_string_equal(shmesh_sharding_spec(sh)->axes[0][0], "x");
    shmesh_sharding_destroy(sh);
    shmesh_sharding_destroy(NULL);
    assert_null(shmesh_sharding_mesh(NULL));
    assert_null(shmesh_sharding_spec(NULL));
    free_mesh(m);
}

static void shape_errors(void **state)
{
    (void)state;
    shmesh_mesh *m = make_mesh(2, (const char *const[]){"x", "z"}, (const int[]){1, 8}, true,
                               NULL);
    int64_t shard[SHMESH_MAX_NDIM];
    shmesh_sharding *sh = sharding(m, "x,z");
    int64_t three[] = {2, 9, 3};
    expect_error(shmesh_sharding_shard_shape(sh, 3, three, shard), "IndivisibleError: ",
                 "P('x', 'z')", "Mesh('x': 1, 'z': 8)", "dimension 1", "(2, 9, 3)", "8 ways",
                 "size 9", NULL);
    expect_error(shmesh_sharding_is_fully_replicated(sh, 3, three), "IndivisibleError: ",
                 "dimension 1", NULL);
    expect_error(shmesh_sharding_shard_shape(sh, 1, (const int64_t[]){8}, shard), "IndexError: ",
                 "P('x', 'z')", "2 entries", "1 dimension", "(8,)", "entry 1 splits 8 ways",
                 NULL);
    expect_error(shmesh_sharding_shard_shape(sh, 0, NULL, shard), "IndexError: ", "()", NULL);
    shmesh_sharding_destroy(sh);
    /* Entries past the array's dimensions that split nothing are accepted,
     * as JAX does: None, and axes of size 1. */
    sh = sharding(m, "z,-,x");
    expect_shard_shape(sh, 1, (const int64_t[]){16}, (const int64_t[]){2});
    assert_int_equal(shmesh_sharding_shard_shape(sh, 0, NULL, shard), SHMESH_ERR_INVALID);
    shmesh_sharding_destroy(sh);
    sh = sharding(m, "x,z");
    expect_error(shmesh_sharding_shard_shape(sh, 2, (const int64_t[]){4, -8}, shard),
                 "ValueError: ", "(4, -8)", "negative", NULL);
    expect_error(shmesh_sharding_shard_shape(sh, SHMESH_MAX_NDIM + 1, three, shard),
                 "shmesh_sharding_shard_shape: ", "ndim", NULL);
    expect_error(shmesh_sharding_shard_shape(sh, 2, NULL, shard), "shmesh_sharding_shard_shape: ",
                 "shape", NULL);
    expect_error(shmesh_sharding_shard_shape(sh, 2, three, NULL), "shmesh_sharding_shard_shape: ",
                 "shard_shape", NULL);
    expect_error(shmesh_sharding_shard_shape(NULL, 2, three, shard),
                 "shmesh_sharding_shard_shape: ", "sharding", NULL);
    /* An abstract mesh has no devices to index. */
    shmesh_index ix[8];
    expect_error(shmesh_sharding_indices(sh, 2, (const int64_t[]){1, 8}, ix),
                 "ValueError: AbstractMesh has no devices", "AbstractMesh('x': 1, 'z': 8)",
                 NULL);
    shmesh_sharding_destroy(sh);
    free_mesh(m);
}

/* 0 is divisible by anything: the shards of a split empty dimension are
 * empty, and all the same slice. */
static void zero_size(void **state)
{
    (void)state;
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){2, 4}, false, NULL);
    shmesh_sharding *sh = sharding(m, "x,y");
    const int64_t shape[] = {0, 8};
    expect_shard_shape(sh, 2, shape, (const int64_t[]){0, 2});
    assert_int_equal(shmesh_sharding_is_fully_replicated(sh, 2, shape), 0);
    shmesh_index ix[8];
    assert_int_equal(shmesh_sharding_indices(sh, 2, shape, ix), 0);
    for (int p = 0; p < 8; p++) {
        assert_int_equal(ix[p].start[0], 0);
        assert_int_equal(ix[p].stop[0], 0);
        assert_int_equal(ix[p].start[1], 2 * (p % 4));
        assert_int_equal(ix[p].replica_id, p / 4);
    }
    /* Split only along the empty dimension: every shard is the whole
     * (empty) array, so it counts as fully replicated (GlobalDeviceArray's
     * rule: the shard shape is the global shape). */
    shmesh_sharding_destroy(sh);
    sh = sharding(m, "(y,x)");
    assert_int_equal(shmesh_sharding_is_fully_replicated(sh, 2, (const int64_t[]){0, 3}), 1);
    assert_int_equal(shmesh_sharding_indices(sh, 2, (const int64_t[]){0, 3}, ix), 0);
    for (int p = 0; p < 8; p++)
        assert_int_equal(ix[p].replica_id, p);
    shmesh_sharding_destroy(sh);
    free_mesh(m);
}

static void fully_replicated(void **state)
{
    (void)state;
    shmesh_mesh *m = make_mesh(2, XY, (const int[]){1, 8}, true, NULL);
    const int64_t shape[] = {8, 8};
    static const struct {
        const char *spec;
        int want;
    } cases[] = {
        {"", 1}, {"-,-", 1}, {"x", 1}, {"-,x", 1}, {"(x),-", 1}, {"y", 0}, {"x,y", 0}, {"-,(x,y)", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        shmesh_sharding *sh = sharding(m, cases[i].spec);
        if (shmesh_sharding_is_fully_replicated(sh, 2, shape) != cases[i].want)
            fail_msg("\"%s\": expected %d", cases[i].spec, cases[i].want);
        shmesh_sharding_destroy(sh);
    }
    free_mesh(m);
}

/* ------------------------------------------------------------------------
 * Properties over random cases
 * ---------------------------------------------------------------------- */

static unsigned long long rng_state;

static unsigned rnd(unsigned n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rng_state >> 33) % n;
}

/* a[0..n): 0..n-1 in a random order. */
static void shuffled(int *a, int n)
{
    for (int i = 0; i < n; i++)
        a[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd((unsigned)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static bool same_block(const shmesh_index *a, const shmesh_index *b, int ndim)
{
    for (int d = 0; d < ndim; d++)
        if (a->start[d] != b->start[d] || a->stop[d] != b->stop[d])
            return false;
    return true;
}

#define MAX_DEVICES 32
#define MAX_CELLS 4096

/* One random case: a mesh of 1..4 axes and at most 32 devices in a random
 * order, a spec using some of its axes, and a shape it divides. */
static void random_case(int iter)
{
    static const char *const pool[] = {"a", "bb", "data", "model", "x", "y"};
    int ndim_mesh = 1 + (int)rnd(4), sizes[4], size = 1;
    const char *names[4];
    bool used[6] = {false};
    for (int d = 0; d < ndim_mesh; d++) {
        int k;
        do
            k = (int)rnd(6);
        while (used[k]);
        used[k] = true;
        names[d] = pool[k];
        int most = MAX_DEVICES / size;
        sizes[d] = 1 + (int)rnd(most < 4 ? (unsigned)most : 4);
        size *= sizes[d];
    }
    int order[MAX_DEVICES];
    shuffled(order, size);
    shmesh_mesh *am = make_mesh(ndim_mesh, names, sizes, true, NULL);
    shmesh_mesh *cm = make_mesh(ndim_mesh, names, sizes, false, order);

    /* Each mesh axis goes to a random entry or none, in random order. */
    int ndim = 1 + (int)rnd(4);
    shmesh_pspec spec;
    memset(&spec, 0, sizeof spec);
    spec.n = (int)rnd((unsigned)ndim + 1);
    int perm[4];
    shuffled(perm, ndim_mesh);
    int64_t ways[SHMESH_MAX_NDIM] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int k = 0; k < ndim_mesh && spec.n; k++) {
        int e = (int)rnd((unsigned)spec.n + 1);
        if (e == spec.n)
            continue;
        strcpy(spec.axes[e][spec.naxes[e]++], names[perm[k]]);
        ways[e] *= sizes[perm[k]];
    }
    int64_t shape[SHMESH_MAX_NDIM], cells = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t mult = rnd(8) == 0 ? 0 : 1 + rnd(3);
        while (cells * ways[d] * mult > MAX_CELLS)
            mult--;
        shape[d] = ways[d] * mult;
        cells *= shape[d] ? shape[d] : 1;
    }
    char st[256], ctx[512];
    shmesh_pspec_text(&spec, st, sizeof st);
    shmesh_mesh_text(cm, ctx, sizeof ctx);
    snprintf(ctx + strlen(ctx), sizeof ctx - strlen(ctx), " %s, iteration %d", st, iter);

    /* The shard shape, on the abstract mesh and the concrete one. */
    shmesh_sharding *as, *cs;
    assert_int_equal(shmesh_sharding_create(am, &spec, &as), 0);
    assert_int_equal(shmesh_sharding_create(cm, &spec, &cs), 0);
    int64_t shard[SHMESH_MAX_NDIM], shard2[SHMESH_MAX_NDIM];
    assert_int_equal(shmesh_sharding_shard_shape(as, ndim, shape, shard), 0);
    assert_int_equal(shmesh_sharding_shard_shape(cs, ndim, shape, shard2), 0);
    bool whole = true;
    for (int d = 0; d < ndim; d++) {
        if (shard[d] * ways[d] != shape[d] || shard2[d] != shard[d])
            fail_msg("%s: dimension %d", ctx, d);
        whole &= shard[d] == shape[d];
    }
    assert_int_equal(shmesh_sharding_is_fully_replicated(as, ndim, shape), whole);

    shmesh_index ix[MAX_DEVICES];
    assert_int_equal(shmesh_sharding_indices(cs, ndim, shape, ix), 0);
    int distinct = 0, copies = 0;
    unsigned char covered[MAX_CELLS];
    memset(covered, 0, sizeof covered);
    for (int p = 0; p < size; p++) {
        if (ix[p].device != order[p])
            fail_msg("%s: position %d holds device %d, expected %d", ctx, p, ix[p].device,
                     order[p]);
        for (int d = 0; d < ndim; d++)
            if (ix[p].stop[d] - ix[p].start[d] != shard[d] || ix[p].start[d] < 0 ||
                ix[p].stop[d] > shape[d] || (shard[d] && ix[p].start[d] % shard[d]))
                fail_msg("%s: device %d, dimension %d: %lld:%lld", ctx, p, d,
                         (long long)ix[p].start[d], (long long)ix[p].stop[d]);
        /* Replica id: the earlier holders of the same block, counted. */
        int before = 0;
        for (int q = 0; q < p; q++)
            before += same_block(&ix[q], &ix[p], ndim);
        if (ix[p].replica_id != before)
            fail_msg("%s: device %d has replica id %d, expected %d", ctx, p, ix[p].replica_id,
                     before);
        if (before)
            continue;
        /* A new block: it has as many holders as every other, and its
         * cells were covered by no other block. */
        int holders = 0;
        for (int q = p; q < size; q++)
            holders += same_block(&ix[q], &ix[p], ndim);
        if (distinct++ == 0)
            copies = holders;
        else if (holders != copies)
            fail_msg("%s: device %d's block has %d holders, the first block %d", ctx, p,
                     holders, copies);
        int64_t n = 1, at[SHMESH_MAX_NDIM];
        for (int d = 0; d < ndim; d++)
            n *= shard[d];
        for (int64_t c = 0; c < n; c++) {
            int64_t rem = c, lin = 0;
            for (int d = ndim - 1; d >= 0; d--) {
                at[d] = ix[p].start[d] + rem % shard[d];
                rem /= shard[d];
            }
            for (int d = 0; d < ndim; d++)
                lin = lin * shape[d] + at[d];
            if (covered[lin]++)
                fail_msg("%s: cell %lld is in two blocks", ctx, (long long)lin);
        }
    }
    int64_t total = 1;
    for (int d = 0; d < ndim; d++)
        total *= shape[d];
    for (int64_t c = 0; c < total; c++)
        if (!covered[c])
            fail_msg("%s: cell %lld is in no block", ctx, (long long)c);
    if (distinct * copies != size)
        fail_msg("%s: %d blocks of %d holders on %d devices", ctx, distinct, copies, size);
    shmesh_sharding_destroy(as);
    shmesh_sharding_destroy(cs);
    free_mesh(am);
    free_mesh(cm);
}

/* Names with quotes and backslashes (JAX takes any str as an axis name;
 * shmesh's mesh names refuse only ',', '(', ')' and spaces): the text
 * quotes them as Python's repr does, and reads them back. */
static void quoted_names(void **state)
{
    (void)state;
    static const struct {
        const char *name, *text;
    } cases[] = {
        {"x'", "P(\"x'\")"}, /* a quote: the other quotes, as repr */
        {"a\"b", "P('a\"b')"},
        {"a'\"b", "P('a\\'\"b')"}, /* both: ' escaped */
        {"a\\b", "P('a\\\\b')"},   /* a backslash: doubled */
        {"'", "P(\"'\")"},
        {"\\'\"", "P('\\\\\\'\"')"},
        {"None", "P('None')"},
        {"-", "P('-')"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        shmesh_pspec s;
        memset(&s, 0, sizeof s);
        s.n = 1;
        s.naxes[0] = 1;
        strcpy(s.axes[0][0], cases[i].name);
        char buf[128];
        int n = shmesh_pspec_text(&s, buf, sizeof buf);
        if (n != (int)strlen(cases[i].text) || strcmp(buf, cases[i].text))
            fail_msg("name [%s] printed as [%s] (%d), expected [%s]", cases[i].name, buf, n,
                     cases[i].text);
        shmesh_pspec again = parse(buf);
        if (memcmp(&s, &again, sizeof s))
            fail_msg("[%s] read back as [%s]", buf, again.axes[0][0]);
    }
    /* Escapes Python would read otherwise (or not at all) are refused. */
    static const struct {
        const char *in;
        int pos;
        const char *says;
    } bad[] = {
        {"'a\\q'", 3, "after a backslash in a quoted name at position 3, found 'q'"},
        {"'a\\n'", 3, "after a backslash"},
        {"'a\\", 3, "found the end"},
        {"\"x\\\"", 4, "a closing \" (the name opened at position 0)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        shmesh_pspec s;
        int rc = shmesh_pspec_parse(bad[i].in, &s);
        char pos[32];
        snprintf(pos, sizeof pos, "at position %d", bad[i].pos);
        expect_error(rc, "ValueError: ", pos, bad[i].says, NULL);
    }
    /* A bare name keeps its quotes and backslashes as they are (but a
     * leading quote opens a quoted name). */
    shmesh_pspec s = parse("x'y,a\\b");
    assert_string_equal(s.axes[0][0], "x'y");
    assert_string_equal(s.axes[1][0], "a\\b");
}

/* 20000 random specs over names drawn mostly from quotes, backslashes and
 * the spec's own words: the text reads back as the same spec, byte for
 * byte. */
static void text_round_trip(void **state)
{
    (void)state;
    static const char alphabet[] = "''\"\"\\\\-xyN\xc3\xa9_P.";
    static const char *const words[] = {"None", "-", "P", "'", "\"", "\\", "''", "\\'"};
    const char *seed = getenv("SHMESH_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 0) : 20261122;
    static char buf[8192];
    for (int iter = 0; iter < 20000; iter++) {
        shmesh_pspec s;
        memset(&s, 0, sizeof s);
        s.n = (int)rnd(SHMESH_MAX_NDIM + 1);
        for (int i = 0; i < s.n; i++) {
            s.naxes[i] = rnd(4) == 0 ? (int)rnd(SHMESH_MAX_MESH_DIMS + 1) : (int)rnd(3);
            for (int k = 0; k < s.naxes[i]; k++) {
                char *name = s.axes[i][k];
                if (rnd(4) == 0) {
                    strcpy(name, words[rnd(sizeof words / sizeof *words)]);
                    continue;
                }
                int len = rnd(8) == 0 ? SHMESH_MAX_AXIS_NAME : 1 + (int)rnd(6);
                for (int c = 0; c < len; c++)
                    name[c] = alphabet[rnd(sizeof alphabet - 1)];
            }
        }
        int n = shmesh_pspec_text(&s, buf, sizeof buf);
        if (n < 0 || n >= (int)sizeof buf)
            fail_msg("iteration %d: shmesh_pspec_text returned %d: %s", iter, n,
                     shmesh_last_error(NULL));
        shmesh_pspec again;
        if (shmesh_pspec_parse(buf, &again))
            fail_msg("iteration %d: [%s] does not read back: %s", iter, buf,
                     shmesh_last_error(NULL));
        if (memcmp(&s, &again, sizeof s))
            fail_msg("iteration %d: [%s] reads back as another spec", iter, buf);
    }
}

static void random_cases(void **state)
{
    (void)state;
    const char *seed = getenv("SHMESH_TEST_SEED");
    rng_state = seed ? strtoull(seed, NULL, 0) : 20261122;
    print_message("seed %llu (SHMESH_TEST_SEED)\n", rng_state);
    for (int i = 0; i < 3000; i++)
        random_case(i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seed_examples),    cmocka_unit_test(device_order),
        cmocka_unit_test(parse_and_print),  cmocka_unit_test(parse_errors),
        cmocka_unit_test(malformed_specs),  cmocka_unit_test(create_errors),
        cmocka_unit_test(shape_errors),     cmocka_unit_test(zero_size),
        cmocka_unit_test(fully_replicated), cmocka_unit_test(random_cases),
        cmocka_unit_test(quoted_names),     cmocka_unit_test(text_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
