/* Description: shmesh-bench -c checks every op at every size in CI at a small
 * size range — every op with every dtype it accepts, 2 and 3 ranks, 8 B to
 * 64 KiB; the same with 4 KiB slots so data spans many staging windows; the
 * CSV's sizes, counts and bandwidths follow nccl-tests' conventions; argument
 * errors exit 2 naming the option, once; --heap buffers checked the same
 * way, and a heap too small for them refused with the library's reason;
 * bench/async_overlap.c's table at a small size; --plot writes well-formed
 * SVG with one line per op in each panel, and --plot-mpi adds the MPI lines
 * of a compare-mpi.sh CSV.  Every run leaves no segment behind. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "shmesh.h"

/* The ops shmesh-bench times: those of the op table with a bus factor
 * (shmesh_op_get), in its order; filled by main. */
static const char *ops[64];
static size_t NOPS;

static const char *bench_path(void)
{
    const char *p = getenv("SHMESH_BENCH");
    if (!p) {
        fprintf(stderr, "SHMESH_BENCH is not set (run the tests through meson test)\n");
        exit(1);
    }
    return p;
}

static shmesh_dtype dtype_of(const char *name)
{
    for (int d = 0; d < SHMESH_DTYPE_COUNT; d++)
        if (!strcmp(shmesh_dtype_name((shmesh_dtype)d), name))
            return (shmesh_dtype)d;
    fail_msg("unknown dtype %s", name);
    return SHMESH_DTYPE_COUNT;
}

static bool refuses_bool(const char *op)
{
    for (int i = 0; i < shmesh_op_count(); i++)
        if (!strcmp(shmesh_op_get(i)->name, op))
            return !shmesh_op_get(i)->bool_input;
    fail_msg("%s is not in the op table", op);
    return false;
}

static bool splits(const char *op)
{
    return !strcmp(op, "all_gather") || !strcmp(op, "psum_scatter") ||
           !strcmp(op, "all_to_all") || !strcmp(op, "ragged_all_to_all");
}

/* nccl-tests' busbw factors. */
static double bus_factor(const char *op, int n)
{
    if (!strcmp(op, "barrier"))
        return 0;
    if (!strcmp(op, "world_sum") || !strcmp(op, "psum") || !strcmp(op, "pmax") ||
        !strcmp(op, "pmin"))
        return 2.0 * (n - 1) / n;
    if (splits(op))
        return (double)(n - 1) / n;
    return 1.0;
}

/* The reported (bytes, count) for a requested size: the larger buffer per
 * rank, rounded down to element size x n where the op splits it. */
static void expected_size(const char *op, shmesh_dtype dt, int n, size_t req, size_t *bytes,
                          size_t *count)
{
    size_t esz = shmesh_dtype_size(dt);
    if (!strcmp(op, "barrier")) {
        *bytes = *count = 0;
    } else if (splits(op)) {
        *count = req / (esz * (size_t)n) * (size_t)n;
        *bytes = *count * esz;
    } else {
        if (!strcmp(op, "psum") && dt == SHMESH_BOOL)
            esz = 4; /* the int32 output is the larger buffer */
        *count = req / esz;
        *bytes = *count * esz;
    }
}

struct row {
    char op[32], notifier[16], dtype[16], wrong[16];
    int ranks;
    size_t bytes, count;
    double us, algbw, busbw;
};

/* The CSV rows of a run's stdout; fails on a malformed header or line. */
static int parse_csv(const struct run *r, struct row *rows, int max)
{
    const char *header = "op,ranks,notifier,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n";
    if (strncmp(r->out, header, strlen(header)))
        fail_msg("no CSV header\nstdout:\n%s\nstderr:\n%s", r->out, r->err);
    int n = 0;
    for (const char *line = r->out + strlen(header); *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            fail_msg("unterminated line '%s'", line);
        if (n == max)
            fail_msg("more than %d rows\n%s", max, r->out);
        struct row *w = &rows[n++];
        int used = 0;
        if (sscanf(line, "%31[^,],%d,%15[^,],%zu,%zu,%15[^,],%lf,%lf,%lf,%15[^\n]%n", w->op,
                   &w->ranks, w->notifier, &w->bytes, &w->count, w->dtype, &w->us, &w->algbw,
                   &w->busbw, w->wrong, &used) != 10 ||
            line + used != end)
            fail_msg("malformed CSV line '%.*s'", (int)(end - line), line);
        line = end + 1;
    }
    return n;
}

static void assert_clean(const struct run *r)
{
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm\nstderr:\n%s", name, r->err);
}

static void run_bench(struct run *r, char *const env[], int ranks, const char *const *args)
{
    char *argv[40], nps[16];
    int n = 0;
    snprintf(nps, sizeof nps, "%d", ranks);
    argv[n++] = (char *)launcher_path();
    argv[n++] = "-v";
    argv[n++] = "-n";
    argv[n++] = nps;
    argv[n++] = "--";
    argv[n++] = (char *)bench_path();
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    run_cmd(argv, env, 60, r);
    assert_false(r->timed_out);
}

/* One checked run of op/dtype from 8 B to 64 KiB (factor 4): every row has
 * the expected size, no wrong element, a positive time and consistent
 * bandwidths. */
static void checked_run(char *const env[], int ranks, const char *op, const char *dtype,
                        bool heap)
{
    const char *args[] = {"-o", op, "-d", dtype, "-b", "8", "-e", "64K", "-f", "4", "-w", "1",
                          "-n", "3", "-c", "1", "--csv", heap ? "--heap" : NULL, NULL};
    struct run r;
    run_bench(&r, env, ranks, args);
    if (r.code != 0)
        fail_msg("%d ranks, %s %s%s%s: exit %d\nstdout:\n%s\nstderr:\n%s", ranks, op, dtype,
                 env ? " (4 KiB slots)" : "", heap ? " (--heap)" : "", r.code, r.out, r.err);
    struct row rows[16];
    int n = parse_csv(&r, rows, 16);
    static const size_t sizes[] = {8, 32, 128, 512, 2048, 8192, 32768, 65536};
    bool barrier = !strcmp(op, "barrier");
    int want = barrier ? 1 : (int)(sizeof sizes / sizeof *sizes);
    if (n != want)
        fail_msg("%d ranks, %s %s: %d rows, expected %d\n%s", ranks, op, dtype, n, want, r.out);
    shmesh_dtype dt = dtype_of(dtype);
    for (int i = 0; i < n; i++) {
        const struct row *w = &rows[i];
        size_t bytes, count;
        expected_size(op, dt, ranks, barrier ? 0 : sizes[i], &bytes, &count);
        double algbw = w->us > 0 ? (double)w->bytes / w->us / 1e3 : 0;
        double tol = 0.002 + 0.01 * algbw;
        if (strcmp(w->op, op) || w->ranks != ranks || strcmp(w->dtype, barrier ? "none" : dtype) ||
            w->bytes != bytes || w->count != count || strcmp(w->wrong, "0") || !(w->us > 0) ||
            w->algbw < algbw - tol || w->algbw > algbw + tol ||
            w->busbw < w->algbw * bus_factor(op, ranks) - 0.002 ||
            w->busbw > w->algbw * bus_factor(op, ranks) + 0.002)
            fail_msg("%d ranks, %s %s%s%s, row %d: expected %zu bytes, %zu elements, 0 wrong, a "
                     "positive time, algbw %.3f, busbw x%.3f\n%s",
                     ranks, op, dtype, env ? " (4 KiB slots)" : "", heap ? " (--heap)" : "", i,
                     bytes, count, algbw, bus_factor(op, ranks), r.out);
    }
    assert_clean(&r);
    run_free(&r);
}

/* Every op with every dtype it accepts (barrier moves none: once). */
static void every_op_every_dtype(void **state)
{
    (void)state;
    unsigned runs = 0, ran = 0;
    for (int ranks = 2; ranks <= 3; ranks++)
        for (size_t o = 0; o < NOPS; o++)
            for (int d = 0; d < SHMESH_DTYPE_COUNT; d++) {
                if ((!strcmp(ops[o], "barrier") && d != SHMESH_FLOAT32) ||
                    (d == SHMESH_BOOL && refuses_bool(ops[o])))
                    continue;
                if (!test_sampled(runs++))
                    continue;
                ran++;
                checked_run(NULL, ranks, ops[o], shmesh_dtype_name((shmesh_dtype)d), false);
            }
    test_sample_note("runs of ranks x ops x dtypes", ran, runs);
}

/* 4 KiB slots: 64 KiB of data crosses 16 staging windows and more. */
static void many_windows(void **state)
{
    (void)state;
    char *env[] = {"SHMESH_SLOT_BYTES=4096", NULL};
    static const char *dtypes[] = {"float64", "bfloat16", "int8"};
    unsigned runs = 0, ran = 0;
    for (int ranks = 2; ranks <= 3; ranks++)
        for (size_t o = 0; o < NOPS; o++)
            for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
                if ((ranks == 3 || d == 0) && test_sampled(runs++)) {
                    ran++;
                    checked_run(env, ranks, ops[o], dtypes[d], false);
                }
    test_sample_note("runs of ranks x ops x dtypes", ran, runs);
}

/* The human table: '#' header lines, one row per size; -c 0 says N/A. */
static void human_table_and_unchecked(void **state)
{
    (void)state;
    const char *args[] = {"-o", "all_gather", "-b", "1K", "-e", "4K", "-w", "0", "-n", "2",
                          "-c", "0", NULL};
    struct run r;
    run_bench(&r, NULL, 2, args);
    assert_int_equal(r.code, 0);
    if (count_lines(r.out, "# shmesh-bench: all_gather, 2 ranks,", "not checked") != 1 ||
        count_lines(r.out, "#wrong", "busbw_GBs") != 1 || count_lines(r.out, "N/A", NULL) != 3 ||
        count_lines(r.out, "4096", "float32") != 1)
        fail_msg("unexpected table\n%s", r.out);
    assert_clean(&r);
    run_free(&r);
}

/* Each argument error: exit 2, a message naming the option and what it
 * accepts, printed once (by rank 0) however many ranks there are. */
static void argument_errors(void **state)
{
    (void)state;
    /* "-o expects barrier, world_sum, ... or pbroadcast, got 'allreduce'" */
    static char o_message[1024];
    size_t n = (size_t)snprintf(o_message, sizeof o_message, "-o expects ");
    for (size_t o = 0; o < NOPS; o++)
        n += (size_t)snprintf(o_message + n, sizeof o_message - n, "%s%s",
                              !o ? "" : o + 1 == NOPS ? " or " : ", ", ops[o]);
    snprintf(o_message + n, sizeof o_message - n, ", got 'allreduce'");
    static const struct {
        const char *args[5];
        const char *message;
    } cases[] = {
        {{"-o", "allreduce", NULL}, o_message},
        {{"-d", "complex64", NULL}, "-d expects bool, int8"},
        {{"-o", "psum_scatter", "-d", "bool", NULL}, "-d bool is refused by psum_scatter"},
        {{"-b", "12Q", NULL}, "-b expects a size in bytes"},
        {{"-e", "-1", NULL}, "-e expects a size in bytes"},
        {{"-f", "1", NULL}, "-f expects a factor greater than 1"},
        {{"-w", "x", NULL}, "-w expects a whole number >= 0"},
        {{"-n", "0", NULL}, "-n expects a whole number >= 1"},
        {{"-c", "yes", NULL}, "-c expects 0 or 1"},
        {{"-b", "1M", "-e", "1K", NULL}, "-e (1024 bytes) must be at least -b (1048576 bytes)"},
        {{"--frobnicate", NULL}, "unknown option '--frobnicate'"},
        {{"-b", NULL}, "option -b needs a value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct run r;
        run_bench(&r, NULL, 3, cases[i].args);
        if (r.code != 2 || count_lines(r.err, "shmesh-bench: ", cases[i].message) != 1)
            fail_msg("case %zu: exit %d, expected 2 and once '%s'\nstderr:\n%s", i, r.code,
                     cases[i].message, r.err);
        assert_clean(&r);
        run_free(&r);
    }
}

/* --heap: buffers from shmesh_alloc, every op checked as above. */
static void heap_buffers(void **state)
{
    (void)state;
    for (int ranks = 2; ranks <= 3; ranks++)
        for (size_t o = 0; o < NOPS; o++)
            checked_run(NULL, ranks, ops[o], ranks == 2 ? "float32" : "int16", true);
}

/* A heap share too small for the buffers: exit 1 with the library's
 * explanation, from every rank. */
static void heap_too_small(void **state)
{
    (void)state;
    const char *args[] = {"-o", "psum", "-b", "64M", "-e", "64M", "--heap", NULL};
    struct run r;
    run_bench(&r, NULL, 2, args);
    if (r.code != 1 ||
        count_lines(r.err, "--heap: shmesh_alloc(67108864 bytes) failed: ", "--shm-size") != 2)
        fail_msg("exit %d, expected 1 and the reason from both ranks\nstderr:\n%s", r.code,
                 r.err);
    assert_clean(&r);
    run_free(&r);
}

/* bench/async_overlap.c at a small size: the table, both rows, no wrong
 * sum; an argument error said once. */
static void async_overlap_table(void **state)
{
    (void)state;
    const char *prog = getenv("SHMESH_ASYNC_OVERLAP");
    if (!prog || !*prog)
        fail_msg("SHMESH_ASYNC_OVERLAP is not set (run through meson test)");
    char *argv[] = {(char *)launcher_path(), "-v", "-n", "2", "--", (char *)prog, "-n", "2",
                    "-b", "64K", "-c", "1", NULL};
    struct run r;
    run_cmd(argv, NULL, 60, &r);
    assert_false(r.timed_out);
    if (r.code != 0 ||
        count_lines(r.out, "# async-overlap: psum of 65536 B (16384 float32) per device over 2 "
                           "devices",
                    "compute 1.0 ms, 2 iterations") != 1 ||
        count_lines(r.out, "# compute", "async/blocking") != 1 ||
        count_lines(r.out, "busy", "65536") != 1 || count_lines(r.out, "sleep", "65536") != 1)
        fail_msg("exit %d, expected 0 and the table\nstdout:\n%s\nstderr:\n%s", r.code, r.out,
                 r.err);
    for (const char *row = strstr(r.out, "\n  "); row; row = strstr(row + 1, "\n  ")) {
        char name[16];
        size_t bytes;
        double psum, compute, blocking, async, ratio, ideal, wrong;
        if (sscanf(row, " %15s %zu %lf %lf %lf %lf %lf %lf %lf", name, &bytes, &psum, &compute,
                   &blocking, &async, &ratio, &ideal, &wrong) != 9 ||
            bytes != 65536 || !(psum > 0 && compute > 0 && blocking > 0 && async > 0) ||
            wrong != 0 || !(ratio > 0 && ideal > 0))
            fail_msg("malformed row '%.80s'\n%s", row + 1, r.out);
    }
    assert_clean(&r);
    run_free(&r);

    char *bad[] = {(char *)launcher_path(), "-v", "-n", "2", "--", (char *)prog, "-b", "12Q",
                   NULL};
    run_cmd(bad, NULL, 60, &r);
    if (r.code != 2 || count_lines(r.err, "async-overlap: -b expects a size", "'12Q'") != 1)
        fail_msg("exit %d, expected 2 and the reason once\nstderr:\n%s", r.code, r.err);
    assert_clean(&r);
    run_free(&r);
}

/* --- --plot ---------------------------------------------------------------- */

/* The file's bytes, NUL-terminated; fails when it cannot be read. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s", path);
    size_t len = 0, cap = 1 << 16;
    char *s = malloc(cap);
    for (size_t got; s && (got = fread(s + len, 1, cap - len - 1, f)) > 0;) {
        len += got;
        if (len + 1 == cap)
            s = realloc(s, cap *= 2);
    }
    fclose(f);
    if (!s)
        fail_msg("out of memory reading %s", path);
    s[len] = '\0';
    return s;
}

static const char xml_name_chars[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-:_";

/* Whether s is well-formed XML as the SVG writer produces it: an optional
 * <?xml ...?> declaration, then one <svg> root whose tags nest and close,
 * attributes name="value", and text with no raw '<' and only the five
 * entities or character references after '&'.  NULL, or what is wrong. */
static const char *xml_problem(const char *s)
{
    static char why[160];
    char stack[64][32];
    int depth = 0;
    bool root_done = false;
    if (!strncmp(s, "<?xml", 5)) {
        const char *e = strstr(s, "?>");
        if (!e)
            return "unterminated XML declaration";
        s = e + 2;
    }
    while (*s) {
        if (*s == '&') {
            static const char *const ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            size_t i = 0, n = sizeof ent / sizeof *ent;
            while (i < n && strncmp(s, ent[i], strlen(ent[i])))
                i++;
            if (i == n && !(s[1] == '#' && strchr(s, ';')))
                return snprintf(why, sizeof why, "bare '&' at '%.20s'", s), why;
            s++;
            continue;
        }
        if (*s != '<') {
            if (!isspace((unsigned char)*s) && (depth == 0))
                return snprintf(why, sizeof why, "text outside the root at '%.20s'", s), why;
            s++;
            continue;
        }
        bool end = s[1] == '/';
        const char *name = s + 1 + end;
        size_t nlen = strspn(name, xml_name_chars);
        if (!nlen || nlen >= 32)
            return snprintf(why, sizeof why, "bad tag at '%.20s'", s), why;
        const char *p = name + nlen;
        if (end) {
            if (!depth || strlen(stack[depth - 1]) != nlen || strncmp(stack[depth - 1], name, nlen))
                return snprintf(why, sizeof why, "'</%.*s>' closes nothing open", (int)nlen, name),
                       why;
            if (*p != '>')
                return snprintf(why, sizeof why, "bad end tag '%.20s'", s), why;
            if (--depth == 0)
                root_done = true;
            s = p + 1;
            continue;
        }
        if (root_done || (depth == 0 && strncmp(name, "svg", nlen)))
            return snprintf(why, sizeof why, "a second root, or a root other than svg: '%.20s'", s),
                   why;
        /* Attributes: name="value" with no '<' or '"' inside. */
        for (;;) {
            while (isspace((unsigned char)*p))
                p++;
            if (*p == '>' || (p[0] == '/' && p[1] == '>'))
                break;
            size_t alen = strspn(p, xml_name_chars);
            if (!alen || p[alen] != '=' || p[alen + 1] != '"')
                return snprintf(why, sizeof why, "bad attribute at '%.30s'", p), why;
            const char *v = p + alen + 2, *q = strchr(v, '"');
            if (!q || memchr(v, '<', (size_t)(q - v)))
                return snprintf(why, sizeof why, "unterminated attribute at '%.30s'", p), why;
            p = q + 1;
        }
        if (*p == '/') {
            s = p + 2;
            if (depth == 0)
                root_done = true;
            continue;
        }
        if (depth == 64)
            return "nested too deep";
        snprintf(stack[depth++], sizeof *stack, "%.*s", (int)nlen, name);
        s = p + 1;
    }
    if (depth)
        return snprintf(why, sizeof why, "<%s> never closed", stack[depth - 1]), why;
    return root_done ? NULL : "no <svg> root";
}

/* How many times needle occurs in s. */
static int occurrences(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* The SVG at path is well-formed, and each of `labels` has one path in each
 * of the two panels and one legend entry; no other line. */
static void check_svg(const char *path, const char *const *labels, int n)
{
    char *svg = slurp(path);
    const char *why = xml_problem(svg);
    if (why)
        fail_msg("%s is not well-formed: %s\n%s", path, why, svg);
    if (occurrences(svg, "<path ") != 2 * n || occurrences(svg, "class=\"series\"") != 2 * n ||
        occurrences(svg, "<g class=\"panel\"") != 2)
        fail_msg("%s: expected 2 panels and %d series paths\n%s", path, 2 * n, svg);
    for (int i = 0; i < n; i++) {
        char path_tag[96], key[96];
        snprintf(path_tag, sizeof path_tag, "<path class=\"series\" data-series=\"%s\"", labels[i]);
        snprintf(key, sizeof key, ">%s</text>", labels[i]);
        if (occurrences(svg, path_tag) != 2 || occurrences(svg, key) != 1)
            fail_msg("%s: expected 2 paths and a legend entry for '%s'\n%s", path, labels[i], svg);
    }
    free(svg);
}

/* The directory plot_svg works in, removed by plot_cleanup even when a
 * check fails: nothing is left in /tmp. */
static char plot_dir[] = "/tmp/shmesh-test-plot-XXXXXX";

static int plot_cleanup(void **state)
{
    (void)state;
    static const char *const names[] = {"bench.svg", "compare.csv", "bad.csv"};
    char path[96];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(path, sizeof path, "%s/%s", plot_dir, names[i]);
        unlink(path);
    }
    rmdir(plot_dir);
    return 0;
}

/* --plot with two ops (and barrier, which has no size to draw); --plot-mpi
 * with a CSV in compare-mpi.sh's format; the errors, each said once. */
static void plot_svg(void **state)
{
    (void)state;
    char *dir = plot_dir, svg[64], csv[64], bad[64], nowhere[80];
    if (!mkdtemp(dir))
        fail_msg("mkdtemp failed");
    snprintf(svg, sizeof svg, "%s/bench.svg", dir);
    snprintf(csv, sizeof csv, "%s/compare.csv", dir);
    snprintf(bad, sizeof bad, "%s/bad.csv", dir);
    snprintf(nowhere, sizeof nowhere, "%s/missing/bench.svg", dir);

    const char *args[] = {"-o", "psum,all_gather,barrier", "-b", "8", "-e", "64K", "-f", "4",
                          "-w", "1", "-n", "3", "--plot", svg, NULL};
    struct run r;
    run_bench(&r, NULL, 2, args);
    if (r.code != 0 || count_lines(r.out, "# shmesh-bench: psum, 2 ranks", NULL) != 1 ||
        count_lines(r.out, "# shmesh-bench: all_gather, 2 ranks", NULL) != 1)
        fail_msg("exit %d, expected 0 and a table per op\nstdout:\n%s\nstderr:\n%s", r.code,
                 r.out, r.err);
    assert_clean(&r);
    run_free(&r);
    check_svg(svg, (const char *const[]){"psum", "all_gather"}, 2);

    /* Two rounds of Open MPI and one of MPICH allreduce, an alltoall that
     * was not asked for, and the shmesh and memcpy rows compare-mpi.sh also
     * writes: two MPI lines. */
    FILE *f = fopen(csv, "w");
    assert_non_null(f);
    fputs("round,pair,side,op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n"
          "1,memcpy,memcpy,memcpy,1,libc,1048576,9,-,21.313,49.200,49.200,0\n"
          "1,allreduce,shmesh,psum,2,uring,8,2,float32,0.5,0.016,0.016,0\n"
          "1,allreduce,openmpi,allreduce,2,openmpi,8,2,float32,1.5,0.005,0.005,0\n"
          "1,allreduce,openmpi,allreduce,2,openmpi,65536,16384,float32,30,2.1,2.1,0\n"
          "2,allreduce,openmpi,allreduce,2,openmpi,8,2,float32,1.7,0.005,0.005,0\n"
          "1,allreduce,mpich,allreduce,2,mpich,8,2,float32,1.1,0.007,0.007,0\n"
          "1,allreduce,mpich,allreduce,2,mpich,65536,16384,float32,25,2.6,2.6,0\n"
          "1,alltoall,openmpi,alltoall,2,openmpi,8,2,float32,1.1,0.007,0.007,0\n",
          f);
    fclose(f);
    const char *mpi_args[] = {"-o", "psum,all_gather", "-b", "8", "-e", "64K", "-f", "8", "-w",
                              "1", "-n", "3", "--plot", svg, "--plot-mpi", csv, "--csv", NULL};
    run_bench(&r, NULL, 2, mpi_args);
    if (r.code != 0)
        fail_msg("--plot-mpi: exit %d\nstderr:\n%s", r.code, r.err);
    assert_clean(&r);
    run_free(&r);
    check_svg(svg, (const char *const[]){"psum", "all_gather", "Open MPI allreduce",
                                          "MPICH allreduce"},
              4);

    /* A file that cannot be written: exit 1 naming it, after the run. */
    const char *nowhere_args[] = {"-o", "psum", "-b", "8", "-e", "8", "-w", "0", "-n", "1",
                                  "--plot", nowhere, NULL};
    run_bench(&r, NULL, 2, nowhere_args);
    char want[160];
    snprintf(want, sizeof want, "--plot %s: cannot write the SVG", nowhere);
    if (r.code != 1 || count_lines(r.err, "shmesh-bench: ", want) != 1)
        fail_msg("exit %d, expected 1 and once '%s'\nstderr:\n%s", r.code, want, r.err);
    assert_clean(&r);
    run_free(&r);

    /* A CSV that is not compare-mpi.sh's, a line that is short: exit 2,
     * naming the file, said once; and --plot-mpi alone. */
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"op,ranks,notifier\n", "not a bench/compare-mpi.sh CSV"},
        {"round,pair,side,op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n"
         "1,allreduce,openmpi,allreduce,2\n",
         ":2: expected 13 comma-separated fields, found 5"},
        {"round,pair,side,op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n"
         "1,allreduce,openmpi,allreduce,2,openmpi,8,2,float32,fast,0.005,0.005,0\n",
         ":2: expected numbers in columns bytes, time_us and busbw_GBs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        f = fopen(bad, "w");
        assert_non_null(f);
        fputs(cases[i].text, f);
        fclose(f);
        const char *bad_args[] = {"-o", "psum", "--plot", svg, "--plot-mpi", bad, NULL};
        run_bench(&r, NULL, 2, bad_args);
        if (r.code != 2 || count_lines(r.err, bad, cases[i].message) != 1)
            fail_msg("case %zu: exit %d, expected 2 and once '%s' naming %s\nstderr:\n%s", i,
                     r.code, cases[i].message, bad, r.err);
        assert_clean(&r);
        run_free(&r);
    }
    const char *alone[] = {"-o", "psum", "--plot-mpi", csv, NULL};
    run_bench(&r, NULL, 2, alone);
    if (r.code != 2 || count_lines(r.err, "--plot-mpi adds lines to --plot", NULL) != 1)
        fail_msg("--plot-mpi alone: exit %d\nstderr:\n%s", r.code, r.err);
    run_free(&r);
}

int main(void)
{
    for (int i = 0; i < shmesh_op_count(); i++)
        if (shmesh_op_get(i)->bus != SHMESH_OP_BUS_NONE && NOPS < sizeof ops / sizeof *ops)
            ops[NOPS++] = shmesh_op_get(i)->name;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_op_every_dtype),
        cmocka_unit_test(many_windows),
        cmocka_unit_test(human_table_and_unchecked),
        cmocka_unit_test(argument_errors),
        cmocka_unit_test(heap_buffers),
        cmocka_unit_test(heap_too_small),
        cmocka_unit_test(async_overlap_table),
        cmocka_unit_test_teardown(plot_svg, plot_cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
