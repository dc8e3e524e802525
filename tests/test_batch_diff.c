/* Description: batched meshes against one process per position.  For a pair
 * (R, B), shmesh-test-batch runs the same random cases (a mesh of 1-3 axes
 * over R ranks plus a batched axis of size B; every collective and
 * axis_index over random ordered subsets of the axes, subgroups, dtypes,
 * shapes, parameters, in.bdim and out.bdim; a few arguments spoiled on
 * purpose) twice: as a job of R ranks on the batched mesh, and as a job of
 * R*B ranks on the same axes with one process per position.  Each job writes
 * every position's result code and output bytes into a directory of its
 * own; the two directories must be equal file for file, byte for byte
 * (shmesh.h: "each position gets what the same mesh with one device per
 * position computes, bit for bit").  A comparison of two flat runs with one
 * byte flipped checks that the comparison itself can fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define CASES test_scaled(150)
#define DEADLINE 120.0

static char *env_vars[] = {"SHMESH_TIMEOUT=30", NULL};

static const char *batch_path(void)
{
    const char *p = getenv("SHMESH_TEST_BATCH");
    if (!p || !*p)
        fail_msg("SHMESH_TEST_BATCH is not set (run the tests through meson test)");
    return p;
}

/* A fresh directory under /tmp with the subdirectories `a` and `b`. */
static void make_dirs(char *top, size_t len, const char *a, const char *b)
{
    snprintf(top, len, "/tmp/shmesh-batch-XXXXXX");
    if (!mkdtemp(top))
        fail_msg("mkdtemp %s failed", top);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/%s", top, a);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(sub, sizeof sub, "%s/%s", top, b);
    assert_int_equal(mkdir(sub, 0700), 0);
}

/* Removes top, its subdirectories and their files (as make_dirs made them). */
static void remove_dirs(const char *top)
{
    DIR *d = opendir(top);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char sub[512];
        snprintf(sub, sizeof sub, "%s/%s", top, e->d_name);
        DIR *s = opendir(sub);
        struct dirent *f;
        while (s && (f = readdir(s))) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
            if (strcmp(f->d_name, ".") && strcmp(f->d_name, ".."))
                unlink(path);
        }
        if (s)
            closedir(s);
        rmdir(sub);
    }
    if (d)
        closedir(d);
    rmdir(top);
}

/* A file's bytes (NUL-terminated beyond *len), or NULL when it is absent. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* One job: shmesh-run -v -n RANKS --gpus none --timeout 60 --
 * shmesh-test-batch diff SEED COUNT DIR MODE B. */
static void run_job(struct run *r, int ranks, const char *mode, int B, unsigned long seed,
                    int count, const char *dir)
{
    char ns[16], ss[32], cs[16], bs[16];
    snprintf(ns, sizeof ns, "%d", ranks);
    snprintf(ss, sizeof ss, "%lu", seed);
    snprintf(cs, sizeof cs, "%d", count);
    snprintf(bs, sizeof bs, "%d", B);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", ns, "--gpus", "none", "--timeout", "60",
                    "--", (char *)batch_path(), "diff", ss, cs, (char *)dir, (char *)mode, bs,
                    NULL};
    assert_int_equal(run_cmd(argv, env_vars, DEADLINE, r), 0);
}

/* What comparing two runs' directories found. */
struct verdict {
    int differing; /* cases whose files differ */
    int ran;       /* cases both ran (every position SHMESH_OK) and agree on */
    int refused;   /* cases both refused alike */
    int spoiled;   /* cases spoiled on purpose (their description says so) */
    long first;    /* the first differing case, -1 if none */
    long unspoiled_refused; /* the first case refused though not spoiled, -1 if none */
    char what[4096]; /* two paths of up to 1 KiB each, the names and the bytes */
};

static void hex(char *buf, size_t len, const char *data, size_t n, size_t from)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = from; i < n && i < from + 24 && o + 4 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%02x ", (unsigned char)data[i]);
    if (from + 24 < n && o + 4 < len)
        snprintf(buf + o, len - o, "...");
}

/* Compares case c's files of directories a and b (named na and nb in the
 * explanation); returns whether they agree, and what differs in `what`. */
static bool compare_case(const char *a, const char *b, const char *na, const char *nb, long c,
                         int positions, bool *all_ok, bool *spoiled, char *what, size_t wlen)
{
    char pa[1024], pb[1024];
    size_t la, lb;
    bool same = true;
    *all_ok = true;
    snprintf(pa, sizeof pa, "%s/case-%ld-desc.txt", a, c);
    snprintf(pb, sizeof pb, "%s/case-%ld-desc.txt", b, c);
    char *da = read_all(pa, &la), *db = read_all(pb, &lb);
    *spoiled = da && strstr(da, " spoiled: ");
    if (!da || !db || strcmp(da, db)) {
        snprintf(what, wlen, "the case's descriptions differ (the case must not depend on the "
                             "mode):\n  %s: %s  %s: %s", na, da ? da : "(none)\n", nb,
                 db ? db : "(none)\n");
        same = false;
    }
    free(da);
    free(db);
    for (int q = 0; q < positions && same; q++) {
        snprintf(pa, sizeof pa, "%s/case-%ld-rc-%d.txt", a, c, q);
        snprintf(pb, sizeof pb, "%s/case-%ld-rc-%d.txt", b, c, q);
        char *ra = read_all(pa, &la), *rb = read_all(pb, &lb);
        if (!ra || !rb || strcmp(ra, rb)) {
            snprintf(what, wlen, "position %d: the %s job returned %.40s, the %s job %.40s", q,
                     na, ra ? strtok(ra, "\n") : "nothing (no result file)", nb,
                     rb ? strtok(rb, "\n") : "nothing (no result file)");
            same = false;
        }
        *all_ok = *all_ok && ra && !strcmp(ra, "SHMESH_OK\n");
        free(ra);
        free(rb);
        if (!same)
            break;
        snprintf(pa, sizeof pa, "%s/case-%ld-pos-%d.bin", a, c, q);
        snprintf(pb, sizeof pb, "%s/case-%ld-pos-%d.bin", b, c, q);
        char *oa = read_all(pa, &la), *ob = read_all(pb, &lb);
        if (!oa != !ob) {
            snprintf(what, wlen, "position %d: only the %s job wrote an output", q,
                     oa ? na : nb);
            same = false;
        } else if (oa && (la != lb || memcmp(oa, ob, la))) {
            size_t i = 0;
            while (i < la && i < lb && oa[i] == ob[i])
                i++;
            char ha[128], hb[128];
            hex(ha, sizeof ha, oa, la, i);
            hex(hb, sizeof hb, ob, lb, i);
            snprintf(what, wlen,
                     "position %d: outputs of %zu and %zu bytes differ from byte %zu on:\n"
                     "  %s: %s\n  %s: %s\n  (cmp %s %s)",
                     q, la, lb, i, na, ha, nb, hb, pa, pb);
            same = false;
        }
        free(oa);
        free(ob);
    }
    return same;
}

static struct verdict compare_dirs(const char *a, const char *b, const char *na, const char *nb,
                                   int count, int positions)
{
    struct verdict v = {0, 0, 0, 0, -1, -1, ""};
    for (long c = 0; c < count; c++) {
        bool all_ok, spoiled;
        char what[sizeof ((struct verdict *)0)->what];
        bool same = compare_case(a, b, na, nb, c, positions, &all_ok, &spoiled, what, sizeof what);
        v.spoiled += spoiled;
        if (!same) {
            if (v.differing++ == 0) {
                v.first = c;
                snprintf(v.what, sizeof v.what, "%s", what);
            }
        } else if (all_ok) {
            v.ran++;
        } else {
            v.refused++;
            if (!spoiled && v.unspoiled_refused < 0)
                v.unspoiled_refused = c;
        }
    }
    return v;
}

/* The lines of `out` about case SEED/C. */
static void case_lines(const char *out, unsigned long seed, long c, char *buf, size_t len)
{
    char key[64];
    snprintf(key, sizeof key, "case %lu/%ld R=", seed, c);
    size_t o = 0;
    int n = 0;
    buf[0] = '\0';
    for (const char *line = out; line && *line && n < 6;) {
        const char *end = strchr(line, '\n');
        size_t l = end ? (size_t)(end - line) : strlen(line);
        if (memmem(line, l, key, strlen(key)) && o + l + 4 < len) {
            o += (size_t)snprintf(buf + o, len - o, "  %.*s\n", (int)l, line);
            n++;
        }
        line = end ? end + 1 : NULL;
    }
    if (!n)
        snprintf(buf, len, "  (nothing about it)\n");
}

/* The job's exit, if anything went wrong with it ("" if not). */
static void job_trouble(const struct run *r, const char *name, char *buf, size_t len)
{
    char seg[128];
    buf[0] = '\0';
    if (r->timed_out)
        snprintf(buf, len, "the %s job was still running after %.0f s", name, DEADLINE);
    else if (r->code != 0)
        snprintf(buf, len, "the %s job exited %d", name, r->code);
    else if (segment_left_behind(r, seg, sizeof seg))
        snprintf(buf, len, "the %s job left segment %s in /dev/shm", name, seg);
}

/* Batched job of R ranks against the flat job of R*B ranks. */
static void pair(int R, int B, unsigned long seed)
{
    int count = CASES, P = R * B;
    char top[64], bdir[128], fdir[128];
    make_dirs(top, sizeof top, "batched", "flat");
    snprintf(bdir, sizeof bdir, "%s/batched", top);
    snprintf(fdir, sizeof fdir, "%s/flat", top);
    struct run rb, rf;
    double t0 = mono_secs();
    run_job(&rb, R, "batched", B, seed, count, bdir);
    run_job(&rf, P, "flat", B, seed, count, fdir);
    double secs = mono_secs() - t0;
    struct verdict v = compare_dirs(bdir, fdir, "batched", "flat", count, P);
    char tb[256], tf[256];
    job_trouble(&rb, "batched", tb, sizeof tb);
    job_trouble(&rf, "flat", tf, sizeof tf);
    print_message("R=%d B=%d (flat: %d ranks), seed %lu: %d cases, %d ran alike, %d refused "
                  "alike (%d spoiled on purpose), %d differ (%.1f s)\n",
                  R, B, P, seed, count, v.ran, v.refused, v.spoiled, v.differing, secs);
    bool bad = v.differing || v.unspoiled_refused >= 0 || tb[0] || tf[0] || v.ran < count / 2;
    long c = v.first >= 0 ? v.first : v.unspoiled_refused;
    if (bad && c >= 0) {
        /* cmocka cuts long messages: the details go to stderr first. */
        char desc[2048] = "", lb[8192], lf[8192], path[512];
        size_t len;
        snprintf(path, sizeof path, "%s/case-%ld-desc.txt", bdir, c);
        char *d = read_all(path, &len);
        snprintf(desc, sizeof desc, "%s", d ? d : "(no description)\n");
        free(d);
        case_lines(rb.out, seed, c, lb, sizeof lb);
        case_lines(rf.out, seed, c, lf, sizeof lf);
        fprintf(stderr,
                "%s case: %ld\n  %s%s\nthe batched job said:\n%sthe flat job said:\n%s"
                "reproduce (case %ld alone; compare the directories' case-%ld-* files):\n"
                "  mkdir -p /tmp/b /tmp/f\n"
                "  shmesh-run -n %d --gpus none --timeout 60 -- shmesh-test-batch diff %lu 1 "
                "/tmp/b batched %d %ld\n"
                "  shmesh-run -n %d --gpus none --timeout 60 -- shmesh-test-batch diff %lu 1 "
                "/tmp/f flat %d %ld\n",
                v.first >= 0 ? "first differing" : "refused by both though not spoiled,", c,
                desc, v.first >= 0 ? v.what : "", lb, lf, c, c, R, seed, B, c, P, seed, B, c);
    }
    if (bad && (tb[0] || tf[0]))
        fprintf(stderr, "%s%s%s%s" "batched stdout:\n%.3000s\nbatched stderr:\n%.2000s\n"
                        "flat stdout:\n%.3000s\nflat stderr:\n%.2000s\n",
                tb, tb[0] ? "\n" : "", tf, tf[0] ? "\n" : "", rb.out, rb.err, rf.out, rf.err);
    run_free(&rb);
    run_free(&rf);
    remove_dirs(top);
    if (v.differing)
        fail_msg("R=%d B=%d seed %lu: %d of %d cases differ, the first %ld (details above)", R, B,
                 seed, v.differing, count, v.first);
    if (v.unspoiled_refused >= 0)
        fail_msg("R=%d B=%d seed %lu: both jobs refused case %ld, whose arguments are valid "
                 "(details above)", R, B, seed, v.unspoiled_refused);
    if (tb[0] || tf[0])
        fail_msg("R=%d B=%d seed %lu: %s%s%s", R, B, seed, tb, tb[0] && tf[0] ? "; " : "", tf);
    if (v.ran < count / 2)
        fail_msg("R=%d B=%d seed %lu: only %d of %d cases ran (expected at least %d)", R, B, seed,
                 v.ran, count, count / 2);
}

static void pair_2x4(void **state) { pair(2, 4, 101); }
static void pair_4x2(void **state) { pair(4, 2, 102); }
static void pair_3x2(void **state) { pair(3, 2, 103); }
static void pair_1x3(void **state) { pair(1, 3, 104); }
static void pair_2x1(void **state) { pair(2, 1, 105); }

/* The comparison can fail: two flat runs of the same cases agree (the
 * inputs and the flat mesh's results are deterministic); with one output
 * byte flipped, or one result file gone, exactly that case differs. */
static void comparison_catches_a_flipped_byte(void **state)
{
    const int R = 2, B = 2, P = R * B, count = 40;
    const unsigned long seed = 106;
    char top[64], adir[128], bdir[128];
    make_dirs(top, sizeof top, "a", "b");
    snprintf(adir, sizeof adir, "%s/a", top);
    snprintf(bdir, sizeof bdir, "%s/b", top);
    struct run ra, rb;
    run_job(&ra, P, "flat", B, seed, count, adir);
    run_job(&rb, P, "flat", B, seed, count, bdir);
    char ta[256], tb[256];
    job_trouble(&ra, "first flat", ta, sizeof ta);
    job_trouble(&rb, "second flat", tb, sizeof tb);
    struct verdict same = compare_dirs(adir, bdir, "first", "second", count, P);

    /* The first case with a non-empty output: flip its last byte's low bit. */
    long flipped = -1, gone = -1;
    char path[512];
    for (long c = 0; c < count && flipped < 0; c++) {
        size_t len;
        snprintf(path, sizeof path, "%s/case-%ld-pos-%d.bin", bdir, c, P - 1);
        char *d = read_all(path, &len);
        if (d && len) {
            d[len - 1] ^= 1;
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(d, 1, len, f), len);
            fclose(f);
            flipped = c;
        }
        free(d);
    }
    struct verdict one = compare_dirs(adir, bdir, "first", "second", count, P);
    /* A result file gone: the case differs too. */
    gone = count - 1;
    snprintf(path, sizeof path, "%s/case-%ld-rc-0.txt", adir, gone);
    unlink(path);
    struct verdict two = compare_dirs(adir, bdir, "first", "second", count, P);
    run_free(&ra);
    run_free(&rb);
    remove_dirs(top);

    if (ta[0] || tb[0])
        fail_msg("%s %s", ta, tb);
    if (same.differing)
        fail_msg("two flat runs differ at case %ld: %s", same.first, same.what);
    if (same.ran < count / 2)
        fail_msg("only %d of %d cases ran", same.ran, count);
    assert_true(flipped >= 0);
    if (one.differing != 1 || one.first != flipped || !strstr(one.what, "differ from byte"))
        fail_msg("flipped a byte of case %ld: %d cases differ, the first %ld: %s", flipped,
                 one.differing, one.first, one.what);
    if (two.differing != 2 || !strstr(two.what, "differ from byte"))
        fail_msg("removed a result of case %ld too: %d cases differ: %s", gone, two.differing,
                 two.what);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(comparison_catches_a_flipped_byte),
        cmocka_unit_test(pair_2x4),
        cmocka_unit_test(pair_4x2),
        cmocka_unit_test(pair_3x2),
        cmocka_unit_test(pair_1x3),
        cmocka_unit_test(pair_2x1),
    };
    if (test_sample() > 1)
        print_message("SHMESH_TEST_SAMPLE=%d: every pair runs %d of its 150 random cases\n",
                      test_sample(), CASES);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
