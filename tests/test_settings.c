/* Description: the settings table (lib/core/settings.h) and its parser —
 * every type's values, defaults and refusals, word for word; what
 * shmesh_init reads, in its order, with the rank in its messages, and
 * SHMESH_DEBUG's words; shmesh-run's own variables (SHMESH_SLOT_BYTES,
 * SHMESH_SHM_SIZE under --shm-size); docs/environment.md against the table
 * (every variable in its section with its default, nothing the table lacks,
 * the hashed thresholds); and that no file of lib/, launcher/, shm/ or tools/
 * but settings.c calls getenv on a SHMESH_* name. */
#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/context.h"
#include "core/settings.h"
#include "harness.h"
#include "shm/segment.h"
#include "shmesh.h"

static const char *source_root(void)
{
    const char *p = getenv("SHMESH_TEST_SOURCE_ROOT");
    if (!p) {
        fprintf(stderr,
                "SHMESH_TEST_SOURCE_ROOT is not set (run the tests through meson test)\n");
        exit(1);
    }
    return p;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(f);
    fclose(m);
    return text;
}

static int find(const char *name)
{
    for (int id = 0; id < SETTING_COUNT; id++)
        if (!strcmp(settings_table[id].name, name))
            return id;
    return -1;
}

/* settings_parse must refuse `value` for `id` with exactly `message`. */
static void refuses(enum setting id, const char *value, const char *message)
{
    struct settings s;
    settings_defaults(&s);
    char err[256] = "";
    if (settings_parse(&s, id, value, err, sizeof err) != -1 || strcmp(err, message))
        fail_msg("%s='%s': expected the error \"%s\", got \"%s\"", settings_table[id].name,
                 value, message, err);
}

static struct settings parsed(enum setting id, const char *value)
{
    struct settings s;
    settings_defaults(&s);
    char err[256] = "";
    if (settings_parse(&s, id, value, err, sizeof err))
        fail_msg("%s='%s' refused: %s", settings_table[id].name, value, err);
    return s;
}

static void every_type(void **state)
{
    (void)state;
    struct settings d;
    settings_defaults(&d);
    assert_null(d.segment);
    assert_int_equal(d.world, 1);
    assert_int_equal(d.rank, 0);
    assert_int_equal(d.local_devices, 1);
    assert_int_equal(d.notify, NOTIFY_AUTO);
    assert_int_equal(d.timeout_ns, 0);
    assert_int_equal(d.spin_ns, -1);
    assert_int_equal(d.yield_ns, 100000);
    assert_int_equal(d.zc_min, 65536);
    assert_int_equal(d.cma_min, 524288);
    assert_int_equal(d.rsag_min, 262144);
    assert_true(d.cma);
    assert_int_equal(d.shm_size, 0);
    assert_int_equal(d.slot_bytes, 0);
    assert_null(d.sysroot);
    assert_int_equal(d.debug, 0);

    /* Empty is unset. */
    assert_null(parsed(SETTING_SEGMENT, "").segment);
    assert_int_equal(parsed(SETTING_ZC_MIN, "").zc_min, 65536);
    assert_string_equal(parsed(SETTING_SEGMENT, "/shmesh-1-2").segment, "/shmesh-1-2");

    assert_int_equal(parsed(SETTING_WORLD_SIZE, "4096").world, 4096);
    refuses(SETTING_WORLD_SIZE, "0",
            "SHMESH_WORLD_SIZE must be an integer in [1, 4096], found '0'");
    refuses(SETTING_WORLD_SIZE, "two",
            "SHMESH_WORLD_SIZE must be an integer in [1, 4096], found 'two'");
    struct settings s = parsed(SETTING_WORLD_SIZE, "2");
    char err[256];
    assert_int_equal(settings_parse(&s, SETTING_RANK, "1", err, sizeof err), 0);
    assert_int_equal(s.rank, 1);
    assert_int_equal(settings_parse(&s, SETTING_RANK, "2", err, sizeof err), -1);
    assert_string_equal(err, "SHMESH_RANK must be an integer in [0, 1], found '2'");
    assert_int_equal(parsed(SETTING_LOCAL_DEVICES, "64").local_devices, 64);
    refuses(SETTING_LOCAL_DEVICES, "0",
            "SHMESH_LOCAL_DEVICES must be an integer in [1, 64], found '0'");
    refuses(SETTING_LOCAL_DEVICES, "65",
            "SHMESH_LOCAL_DEVICES must be an integer in [1, 64], found '65'");
    assert_int_equal(parsed(SETTING_CPU, "3").cpu, 3);
    refuses(SETTING_CPU, "-1", "SHMESH_CPU must be an integer in [0, 2147483647], found '-1'");

    assert_int_equal(parsed(SETTING_NOTIFY, "futex").notify, NOTIFY_FUTEX);
    assert_int_equal(parsed(SETTING_NOTIFY, "uring").notify, NOTIFY_URING);
    refuses(SETTING_NOTIFY, "carrier-pigeon",
            "SHMESH_NOTIFY must be uring, futex or auto, found 'carrier-pigeon'");

    assert_int_equal(parsed(SETTING_NET, "mpi").net, SETTINGS_NET_MPI);
    assert_int_equal(parsed(SETTING_NET, "none").net, SETTINGS_NET_NONE);
    refuses(SETTING_NET, "openmpi", "SHMESH_NET must be auto, mpi or none, found 'openmpi'");

    assert_int_equal(parsed(SETTING_TIMEOUT, "1.5").timeout_ns, 1500000000);
    assert_int_equal(parsed(SETTING_TIMEOUT, "0").timeout_ns, 0);
    refuses(SETTING_TIMEOUT, "-1",
            "SHMESH_TIMEOUT must be a number of seconds >= 0, found '-1'");
    refuses(SETTING_TIMEOUT, "soon",
            "SHMESH_TIMEOUT must be a number of seconds >= 0, found 'soon'");
    /* A limit too small for nanoseconds is the smallest limit, not "none". */
    assert_int_equal(parsed(SETTING_TIMEOUT, "1e-12").timeout_ns, 1);
    assert_int_equal(parsed(SETTING_TIMEOUT, "1e-400").timeout_ns, 1);
    assert_int_equal(parsed(SETTING_TIMEOUT, "0.0").timeout_ns, 0);
    refuses(SETTING_TIMEOUT, "-1e-400",
            "SHMESH_TIMEOUT must be a number of seconds >= 0, found '-1e-400'");

    assert_int_equal(parsed(SETTING_SHM_SIZE, "64M").shm_size, 64u << 20);
    refuses(SETTING_SHM_SIZE, "0",
            "SHMESH_SHM_SIZE must be a size such as 64M or 1G, found '0'");
    refuses(SETTING_SHM_SIZE, "big",
            "SHMESH_SHM_SIZE must be a size such as 64M or 1G, found 'big'");

    assert_int_equal(parsed(SETTING_ZC_MIN, "0").zc_min, 0);
    assert_int_equal(parsed(SETTING_RSAG_MIN, "1M").rsag_min, 1u << 20);
    assert_int_equal(parsed(SETTING_CMA_MIN, "4096").cma_min, 4096);
    refuses(SETTING_ZC_MIN, "x",
            "SHMESH_ZC_MIN must be a size in bytes such as 0, 4096 or 1M, found 'x'");
    refuses(SETTING_CMA_MIN, "-5",
            "SHMESH_CMA_MIN must be a size in bytes such as 0, 4096 or 1M, found '-5'");

    assert_int_equal(parsed(SETTING_SLOT_BYTES, "8192").slot_bytes, 8192);
    refuses(SETTING_SLOT_BYTES, "5000",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '5000'");
    /* strtoull would read these as 2^64 - 4096, a multiple of 4096. */
    refuses(SETTING_SLOT_BYTES, "-4096",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '-4096'");
    refuses(SETTING_SLOT_BYTES, " -4096",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found ' -4096'");
    refuses(SETTING_SLOT_BYTES, "+8192",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '+8192'");
    refuses(SETTING_SLOT_BYTES, "0",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '0'");
    refuses(SETTING_SLOT_BYTES, "64K",
            "SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '64K'");

    assert_int_equal(parsed(SETTING_SPIN_NS, "0").spin_ns, 0);
    refuses(SETTING_YIELD_NS, "1e3",
            "SHMESH_YIELD_NS must be an integer in [0, 2147483647], found '1e3'");

    assert_false(parsed(SETTING_CMA, "0").cma);
    assert_true(parsed(SETTING_CMA, "1").cma);
    assert_true(parsed(SETTING_CMA, "no").cma); /* only "0" turns it off, as always */

    assert_int_equal(parsed(SETTING_DEBUG, "paths").debug, SETTINGS_DEBUG_PATHS);
    assert_int_equal(parsed(SETTING_DEBUG, "waits,calls").debug,
                     SETTINGS_DEBUG_WAITS | SETTINGS_DEBUG_CALLS);
    assert_int_equal(parsed(SETTING_DEBUG, " paths , calls,").debug,
                     SETTINGS_DEBUG_PATHS | SETTINGS_DEBUG_CALLS);
    assert_int_equal(parsed(SETTING_DEBUG, "all").debug, SETTINGS_DEBUG_ALL);
    assert_int_equal(SETTINGS_DEBUG_ALL,
                     SETTINGS_DEBUG_PATHS | SETTINGS_DEBUG_WAITS | SETTINGS_DEBUG_CALLS);
    refuses(SETTING_DEBUG, "paths,everything",
            "SHMESH_DEBUG must be a comma-separated list of paths, waits, calls or all, found "
            "'everything' in 'paths,everything'");
}

/* Where a default in the docs is a value, it is the member's default (the
 * shared-memory size's 0 stands for the segment's default). */
static void defaults_agree_with_the_docs(void **state)
{
    (void)state;
#define CHECK_DEFAULT(NAME, field, type, dflt, doc, ...)                                      \
    do {                                                                                      \
        struct settings a, b;                                                                 \
        settings_defaults(&a);                                                                \
        settings_defaults(&b);                                                                \
        if (strcmp(#type, "TEXT") && !settings_parse(&b, SETTING_##NAME, doc, NULL, 0)) {     \
            if (SETTING_##NAME == SETTING_SHM_SIZE)                                           \
                a.shm_size = SEG_DEFAULT_TOTAL;                                               \
            if (memcmp(&a.field, &b.field, sizeof a.field))                                   \
                fail_msg("SHMESH_" #NAME ": the default '%s' is not the member's", doc);      \
        }                                                                                     \
    } while (0);
    SHMESH_SETTINGS(CHECK_DEFAULT)
#undef CHECK_DEFAULT
}

/* shmesh_init through settings_read_library: its order and the rank. */
static int init_with(const char *name, const char *value, const char *words)
{
    setenv(name, value, 1);
    shmesh_ctx *ctx;
    int rc = shmesh_init(&ctx);
    unsetenv(name);
    if (rc == 0) {
        shmesh_finalize(ctx);
        return 0;
    }
    if (words && !strstr(shmesh_last_error(NULL), words))
        fail_msg("%s='%s': error '%s' does not say '%s'", name, value, shmesh_last_error(NULL),
                 words);
    return rc;
}

/* The context's devices after shmesh_init with SHMESH_LOCAL_DEVICES at
 * `value` (NULL: unset); -1 when it fails. */
static int local_devices_of_init(const char *value)
{
    if (value)
        setenv("SHMESH_LOCAL_DEVICES", value, 1);
    shmesh_ctx *ctx;
    int rc = shmesh_init(&ctx), k = rc ? -1 : ctx->local_devices;
    unsetenv("SHMESH_LOCAL_DEVICES");
    if (!rc)
        shmesh_finalize(ctx);
    return k;
}

static void what_shmesh_init_reads(void **state)
{
    (void)state;
    unsetenv("SHMESH_SEGMENT");
    assert_int_equal(init_with("SHMESH_ZC_MIN", "x",
                               "rank 0: SHMESH_ZC_MIN must be a size in bytes such as 0, 4096 "
                               "or 1M, found 'x'"),
                     SHMESH_ERR_INVALID);
    assert_int_equal(init_with("SHMESH_DEBUG", "paths,bogus",
                               "rank 0: SHMESH_DEBUG must be a comma-separated list of paths, "
                               "waits, calls or all, found 'bogus'"),
                     SHMESH_ERR_INVALID);
    assert_int_equal(init_with("SHMESH_DEBUG", "all", NULL), 0);
    assert_int_equal(init_with("SHMESH_SPIN_NS", "-3",
                               "rank 0: SHMESH_SPIN_NS must be an integer in [0, 2147483647], "
                               "found '-3'"),
                     SHMESH_ERR_INVALID);
    assert_int_equal(init_with("SHMESH_CMA", "0", NULL), 0);
    assert_int_equal(init_with("SHMESH_LOCAL_DEVICES", "two",
                               "rank 0: SHMESH_LOCAL_DEVICES must be an integer in [1, 64], "
                               "found 'two'"),
                     SHMESH_ERR_INVALID);
    /* A process started alone holds the devices it is told to. */
    assert_int_equal(local_devices_of_init(NULL), 1);
    assert_int_equal(local_devices_of_init("3"), 3);
    /* Not the library's: the launcher's. */
    assert_int_equal(init_with("SHMESH_SLOT_BYTES", "5000", NULL), 0);
    assert_int_equal(init_with("SHMESH_CPU", "x", NULL), 0);

    struct settings s;
    char err[256];
    setenv("SHMESH_SEGMENT", "/shmesh-none", 1);
    setenv("SHMESH_WORLD_SIZE", "4", 1);
    setenv("SHMESH_RANK", "3", 1);
    setenv("SHMESH_SHM_SIZE", "nonsense", 1); /* a job's segment is the launcher's */
    setenv("SHMESH_RSAG_MIN", "1K", 1);
    setenv("SHMESH_DEBUG", "waits", 1);
    setenv("SHMESH_LOCAL_DEVICES", "2", 1);
    assert_int_equal(settings_read_library(&s, err, sizeof err), 0);
    assert_int_equal(s.local_devices, 2);
    assert_string_equal(s.segment, "/shmesh-none");
    assert_int_equal(s.world, 4);
    assert_int_equal(s.rank, 3);
    assert_int_equal(s.shm_size, 0);
    assert_int_equal(s.rsag_min, 1024);
    assert_int_equal(s.debug, SETTINGS_DEBUG_WAITS);
    setenv("SHMESH_NOTIFY", "smoke", 1);
    assert_int_equal(settings_read_library(&s, err, sizeof err), -1);
    assert_string_equal(err, "rank 3: SHMESH_NOTIFY must be uring, futex or auto, found 'smoke'");
    unsetenv("SHMESH_NOTIFY");
    unsetenv("SHMESH_RANK");
    assert_int_equal(settings_read_library(&s, err, sizeof err), -1);
    assert_string_equal(err, "SHMESH_SEGMENT is set but SHMESH_RANK is not: start the program "
                             "with shmesh-run, or unset SHMESH_SEGMENT to run as a single rank");
    unsetenv("SHMESH_SEGMENT");
    assert_int_equal(settings_read_library(&s, err, sizeof err), -1);
    assert_string_equal(err, "rank 0: SHMESH_SHM_SIZE must be a size such as 64M or 1G, "
                             "found 'nonsense'");
    unsetenv("SHMESH_WORLD_SIZE");
    unsetenv("SHMESH_SHM_SIZE");
    unsetenv("SHMESH_RSAG_MIN");
    unsetenv("SHMESH_DEBUG");
    unsetenv("SHMESH_LOCAL_DEVICES");
}

/* shmesh-run refuses its own variables' bad values, exit 2, and --shm-size
 * wins over SHMESH_SHM_SIZE (which is then not looked at). */
static void what_shmesh_run_reads(void **state)
{
    (void)state;
    static const struct {
        const char *env;
        const char *size; /* --shm-size, or NULL */
        int code;
        const char *message;
    } cases[] = {
        {"SHMESH_SLOT_BYTES=5000", NULL, 2,
         "shmesh-run: SHMESH_SLOT_BYTES must be a positive multiple of 4096, found '5000'"},
        {"SHMESH_SHM_SIZE=lots", NULL, 2,
         "shmesh-run: SHMESH_SHM_SIZE must be a size such as 64M or 1G, found 'lots'"},
        {"SHMESH_SHM_SIZE=lots", "8M", 0, NULL},
        {"SHMESH_SLOT_BYTES=8192", NULL, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *env[] = {(char *)cases[i].env, NULL};
        struct run r;
        if (cases[i].size)
            run_launcher(&r, env, 30, "-n", "1", "--shm-size", cases[i].size, "--", "true", NULL);
        else
            run_launcher(&r, env, 30, "-n", "1", "--", "true", NULL);
        if (r.code != cases[i].code ||
            (cases[i].message && count_lines(r.err, cases[i].message, NULL) != 1))
            fail_msg("%s: exit %d, expected %d%s%s\nstderr:\n%s", cases[i].env, r.code,
                     cases[i].code, cases[i].message ? " and " : "",
                     cases[i].message ? cases[i].message : "", r.err);
        run_free(&r);
    }
}

/* ---- hashed settings ------------------------------------------------------ */

/* A value of each type other than its default (the table's defaults are
 * none of these; a switch: the other state of its default). */
static const char *other_value(const char *type, const char *dflt)
{
    if (!strcmp(type, "SWITCH")) /* the other of on and off */
        return strcmp(dflt, "0") ? "0" : "1";
    static const struct {
        const char *type, *value;
    } values[] = {
        {"TEXT", "x"},     {"WORLD", "3"},    {"DEVICES", "3"}, {"RANK", "2"},
        {"INDEX", "7"},    {"NOTIFY", "futex"}, {"NET", "mpi"}, {"SECONDS", "3"}, {"SIZE", "7M"},
        {"BYTES", "7M"},   {"PAGES", "8192"}, {"NS", "7"},      {"SWITCH", "0"},
        {"DEBUG", "paths"},
    };
    for (size_t i = 0; i < sizeof values / sizeof *values; i++)
        if (!strcmp(values[i].type, type))
            return values[i].value;
    fail_msg("no test value for type %s", type);
    return NULL;
}

/* Whether text names the variable (SHMESH_CMA is not named by SHMESH_CMA_MIN). */
static bool names(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += n) {
        char next = p[n];
        if (!((next >= 'A' && next <= 'Z') || (next >= '0' && next <= '9') || next == '_'))
            return true;
    }
    return false;
}

/* The call hash covers exactly the table's hashed column: changing a hashed
 * setting changes the context's tuning hash, changing any other does not;
 * and a mismatch text names exactly the settings that differ. */
static void hashed_settings_are_the_tables_column(void **state)
{
    (void)state;
    int hashed = 0;
    for (int id = 0; id < SETTING_COUNT; id++)
        hashed += settings_table[id].hashed;
    assert_int_equal(hashed, SETTINGS_HASHED);

    struct settings d;
    settings_defaults(&d);
    d.world = 4;
    uint64_t base[SETTINGS_HASHED];
    settings_hashed_values(&d, base);
    uint64_t h0 = settings_hashed_hash(base);
    for (int id = 0, i = 0; id < SETTING_COUNT; id++) {
        struct settings s = d;
        const char *v = other_value(settings_table[id].type, settings_table[id].doc);
        char err[256];
        if (settings_parse(&s, (enum setting)id, v, err, sizeof err))
            fail_msg("%s='%s': %s", settings_table[id].name, v, err);
        uint64_t vals[SETTINGS_HASHED];
        settings_hashed_values(&s, vals);
        bool changed = settings_hashed_hash(vals) != h0;
        if (changed != settings_table[id].hashed)
            fail_msg("%s='%s' %s the tuning hash, but the table says it is %shashed",
                     settings_table[id].name, v, changed ? "changes" : "leaves",
                     settings_table[id].hashed ? "" : "not ");
        if (!settings_table[id].hashed)
            continue;
        /* Only this one differs: the text names it, with both values. */
        char text[512], want[256];
        assert_int_equal(settings_hashed_text(text, sizeof text, base, 0, vals, 1), 1);
        snprintf(want, sizeof want, "%s is %" PRIu64 " on rank 0 but %" PRIu64 " on rank 1",
                 settings_table[id].name, base[i], vals[i]);
        assert_string_equal(text, want);
        i++;
    }

    /* Two differ: both, in table order; none (or unknown): every one named. */
    uint64_t two[SETTINGS_HASHED];
    memcpy(two, base, sizeof two);
    two[0] += 1;
    two[SETTINGS_HASHED - 1] = UINT64_MAX;
    char text[512];
    assert_int_equal(settings_hashed_text(text, sizeof text, base, 3, two, 2), 2);
    assert_non_null(strstr(text, "; "));
    assert_non_null(strstr(text, " on rank 3 but 18446744073709551615 on rank 2"));
    for (int round = 0; round < 2; round++) {
        assert_int_equal(settings_hashed_text(text, sizeof text, base, 0, round ? NULL : base, 1),
                         0);
        for (int id = 0; id < SETTING_COUNT; id++)
            assert_int_equal(names(text, settings_table[id].name), settings_table[id].hashed);
        assert_non_null(strstr(text, " must be the same on every rank"));
    }
    /* Cut short, it is still a terminated line. */
    assert_int_equal(settings_hashed_text(text, 12, base, 3, two, 2), 2);
    assert_int_equal(strlen(text), 11);

    /* The context hashes and publishes the same values. */
    unsetenv("SHMESH_SEGMENT");
    shmesh_ctx *ctx;
    assert_int_equal(shmesh_init(&ctx), 0);
    uint64_t published[SETTINGS_HASHED];
    memcpy(published, seg_ctrl(ctx->seg, 0)->tuning, sizeof published);
    assert_memory_equal(published, ctx->tuning_values, sizeof published);
    assert_true(ctx->tuning == settings_hashed_hash(published));
    shmesh_finalize(ctx);
}

/* Two ranks of one job whose settings differ only in `name` (rank 1 has
 * `value`): `hashed`, their first call fails with SHMESH_ERR_MISMATCH on
 * both, naming that setting and both values and no other hashed setting;
 * otherwise the job runs. */
static void job_with_rank_1_at(const char *name, const char *value, const char *at_rank_0,
                               bool hashed)
{
    char script[256];
    snprintf(script, sizeof script,
             "if [ \"$RANK\" = 1 ]; then export %s=%s; fi; exec \"$0\" sum int32 4 2", name,
             value);
    struct run r;
    run_launcher(&r, NULL, 30, "-n", "2", "--", "/bin/sh", "-c", script, rank_prog_path(),
                 NULL);
    if (r.timed_out)
        fail_msg("%s=%s on rank 1: timed out\n%s\n%s", name, value, r.out, r.err);
    if (!hashed) {
        if (r.code != 0 || count_lines(r.out, "sum int32 count 4 x 2 ok", NULL) != 2)
            fail_msg("%s=%s on rank 1 (not hashed): exit %d\n%s\n%s", name, value, r.code,
                     r.out, r.err);
        run_free(&r);
        return;
    }
    /* Each rank's line: its own sentence, or the one in the abort record. */
    char mine[256], theirs[256];
    snprintf(mine, sizeof mine, "%s is %s on rank 0 but %s on rank 1", name, at_rank_0, value);
    snprintf(theirs, sizeof theirs, "%s is %s on rank 1 but %s on rank 0", name, value,
             at_rank_0);
    int named = 0;
    for (int rank = 0; rank < 2; rank++) {
        char head[64];
        snprintf(head, sizeof head, "rank %d: shmesh_world_sum -> SHMESH_ERR_MISMATCH", rank);
        named += count_lines(r.out, head, mine) + count_lines(r.out, head, theirs) > 0;
    }
    if (r.code == 0 || named != 2)
        fail_msg("%s=%s on rank 1: exit %d, %d of 2 ranks said '%s'\n%s\n%s", name, value,
                 r.code, named, mine, r.out, r.err);
    for (int id = 0; id < SETTING_COUNT; id++)
        if (settings_table[id].hashed && strcmp(settings_table[id].name, name) &&
            names(r.out, settings_table[id].name))
            fail_msg("%s=%s on rank 1: the mismatch names %s too\n%s", name, value,
                     settings_table[id].name, r.out);
    run_free(&r);
}

static void ranks_that_differ_in_one_hashed_setting(void **state)
{
    (void)state;
    int tried = 0;
    for (int id = 0; id < SETTING_COUNT; id++) {
        const struct setting_info *in = &settings_table[id];
        /* The library's own: SHMESH_SLOT_BYTES is the launcher's, one for
         * the whole job (the segment's layout), so ranks cannot differ. */
        if (!in->hashed || !(in->who & SETTINGS_LIBRARY))
            continue;
        if (strspn(in->doc, "0123456789") != strlen(in->doc))
            fail_msg("%s: the default '%s' is not a number of bytes", in->name, in->doc);
        /* A switch's other state; else a number of bytes. */
        bool sw = !strcmp(in->type, "SWITCH");
        job_with_rank_1_at(in->name, sw ? other_value(in->type, in->doc) : "1048576", in->doc,
                           true);
        tried++;
    }
    assert_true(tried >= 4);
    /* Settings outside the column may differ. */
    job_with_rank_1_at("SHMESH_YIELD_NS", "5", NULL, false);
    job_with_rank_1_at("SHMESH_SPIN_NS", "0", NULL, false);
}

/* ---- docs/environment.md ------------------------------------------------ */

/* Copies the next SHMESH_* name at or after *p into name; false at the end.
 * Error codes (SHMESH_ERR_*) are not variables. */
static bool next_name(const char **p, const char *end, char *name, size_t len)
{
    for (;;) {
        const char *s = memmem(*p, (size_t)(end - *p), "SHMESH_", 7);
        if (!s)
            return false;
        size_t n = 7;
        while (s + n < end && ((s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
                               s[n] == '_'))
            n++;
        *p = s + n;
        if (n == 7 || !strncmp(s, "SHMESH_ERR_", 11) || n >= len)
            continue;
        memcpy(name, s, n);
        name[n] = '\0';
        return true;
    }
}

/* A cell without its spaces, and without the backticks of a cell that is
 * all code (`auto` is the default auto). */
static char *trim(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ')
        s[--n] = '\0';
    if (n > 2 && s[0] == '`' && s[n - 1] == '`' && !memchr(s + 1, '`', n - 2)) {
        s[n - 1] = '\0';
        s++;
    }
    return s;
}

static void docs_match_the_table(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/environment.md", source_root());
    char *text = read_text(path);
    int errors = 0;
    unsigned seen[SETTING_COUNT] = {0}; /* the sections each appears in */
    unsigned section = 0;

    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "## ", 3)) {
            section = strstr(line, "Set by") ? SETTINGS_RANKS
                      : strstr(line, "Read by the library") ? SETTINGS_LIBRARY
                      : strstr(line, "Read by `shmesh-run`") ? SETTINGS_LAUNCHER
                      : strstr(line, "Read by the Python package") ? SETTINGS_PYTHON
                                                            : 0;
            continue;
        }
        if (line[0] != '|' || !strncmp(line, "| ---", 5) || !strncmp(line, "| variable", 10))
            continue;
        char *cells[4] = {0};
        int ncells = 0;
        char *save, *cell = strtok_r(line + 1, "|", &save);
        for (; cell && ncells < 4; cell = strtok_r(NULL, "|", &save))
            cells[ncells++] = trim(cell);
        if (ncells < 3)
            continue;
        const char *p = cells[0], *end = p + strlen(p);
        char name[64];
        while (next_name(&p, end, name, sizeof name)) {
            int id = find(name);
            if (id < 0)
                continue; /* reported below, with every other mention */
            const struct setting_info *in = &settings_table[id];
            if (!(in->who & section)) {
                print_error("docs/environment.md lists %s in a section its table line does "
                            "not give it\n", name);
                errors++;
            }
            if (strcmp(cells[1], in->doc)) {
                print_error("docs/environment.md gives %s the default '%s', the table '%s'\n",
                            name, cells[1], in->doc);
                errors++;
            }
            seen[id] |= section;
        }
    }
    free(text);

    for (int id = 0; id < SETTING_COUNT; id++) {
        unsigned who = settings_table[id].who;
        /* What the launcher sets is documented there, whoever reads it. */
        unsigned want = who & SETTINGS_RANKS ? SETTINGS_RANKS : who;
        if ((seen[id] & want) != want) {
            print_error("docs/environment.md has no row for %s in every section of its readers\n",
                        settings_table[id].name);
            errors++;
        }
    }

    /* Every SHMESH_* name the page mentions is a setting; the thresholds it
     * says are hashed are the table's. */
    text = read_text(path);
    const char *p = text, *end = text + strlen(text);
    char name[64];
    while (next_name(&p, end, name, sizeof name))
        if (find(name) < 0) {
            print_error("docs/environment.md names %s, which the settings table lacks\n", name);
            errors++;
        }
    const char *t = strstr(text, "The thresholds (");
    const char *close = t ? strchr(t, ')') : NULL;
    if (!close) {
        print_error("docs/environment.md has no 'The thresholds (...)' sentence\n");
        errors++;
    } else {
        bool listed[SETTING_COUNT] = {false};
        p = t;
        while (next_name(&p, close, name, sizeof name))
            if (find(name) >= 0)
                listed[find(name)] = true;
        for (int id = 0; id < SETTING_COUNT; id++)
            if (listed[id] != settings_table[id].hashed) {
                print_error("%s is %s the call hash but %s the thresholds' sentence\n",
                            settings_table[id].name, listed[id] ? "not in" : "in",
                            listed[id] ? "in" : "not in");
                errors++;
            }
    }
    free(text);
    assert_int_equal(errors, 0);
}

/* ---- one reader of the environment ------------------------------------------ */

static int offenders, scanned;
static size_t root_len;

static int scan(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    size_t n = strlen(path);
    if (type != FTW_F || n < 2 || path[n - 2] != '.' || (path[n - 1] != 'c' && path[n - 1] != 'h'))
        return 0;
    const char *rel = path + root_len + 1;
    if (!strcmp(rel, "lib/core/settings.c"))
        return 0;
    char *text = read_text(path);
    scanned++;
    if (strstr(text, "getenv(\"SHMESH_")) {
        print_error("%s calls getenv on a SHMESH_* name: read it through lib/core/settings.h\n",
                    rel);
        offenders++;
    }
    free(text);
    return 0;
}

static void only_settings_reads_the_environment(void **state)
{
    (void)state;
    const char *root = source_root();
    root_len = strlen(root);
    static const char *dirs[] = {"lib", "launcher", "shm", "tools"};
    offenders = scanned = 0;
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        assert_int_equal(nftw(path, scan, 16, FTW_PHYS), 0);
    }
    assert_int_equal(offenders, 0);
    if (scanned < 40)
        fail_msg("only %d source files under %s: the wrong folder?", scanned, root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_type),
        cmocka_unit_test(defaults_agree_with_the_docs),
        cmocka_unit_test(what_shmesh_init_reads),
        cmocka_unit_test(what_shmesh_run_reads),
        cmocka_unit_test(hashed_settings_are_the_tables_column),
        cmocka_unit_test(ranks_that_differ_in_one_hashed_setting),
        cmocka_unit_test(docs_match_the_table),
        cmocka_unit_test(only_settings_reads_the_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
