/* Description: the examples of JAX's parallel-primitive docstrings (psum,
 * pmean, all_gather, psum_scatter, axis_index, ragged_all_to_all), each run
 * as a job of shmesh-test-examples under shmesh-run, its printed result
 * compared with the output the docstring shows; and the numpy-style printer
 * those programs use, compared with what numpy prints; the trainer
 * (examples/train.c), whose loss must fall; and the metrics example
 * (examples/metrics.c), whose lines, printed by host callbacks on ordered
 * effects from every rank, come in step order; and the batched example
 * (examples/batched.c), a program for 8 devices run by 2 processes.
 *
 * About the expected texts.  The seed is a web mirror of JAX's source: it
 * lost every line's leading indentation, collapsed each run of spaces into
 * one ("[[ 4 6 8 10]" where numpy prints "[[ 4  6  8 10]"), and it shows no
 * blank line between the 2-D blocks of a 3-D array, where numpy prints one.
 * So each example carries two expectations: `seed`, the docstring's output
 * as the mirror shows it, compared after normalizing both texts the same
 * way (runs of spaces become one space, spaces at the start and end of a
 * line go, blank lines go); and `exact`, the same array as numpy 1.24
 * prints it, compared byte for byte. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

struct example {
    const char *name;  /* the program's argument */
    const char *ranks; /* -n */
    const char *seed;  /* the docstring's output, as in the mirrored seed */
    const char *exact; /* what numpy / JAX print */
};

static const char *examples_path(void)
{
    const char *p = getenv("SHMESH_TEST_EXAMPLES");
    if (!p || !*p)
        fail_msg("SHMESH_TEST_EXAMPLES is not set (run through meson test)");
    return p;
}

/* Runs of spaces -> one space; no spaces at line starts or ends; no blank
 * lines.  Returns a new string. */
static char *normalize(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    size_t o = 0;
    const char *p = s;
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        const char *a = p, *b = eol;
        while (a < b && *a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        if (a < b) {
            for (const char *q = a; q < b; q++)
                if (*q != ' ' || q[-1] != ' ')
                    out[o++] = *q;
            out[o++] = '\n';
        }
        p = *eol ? eol + 1 : eol;
    }
    out[o] = '\0';
    return out;
}

static void assert_clean(const struct run *r)
{
    char name[128];
    if (segment_left_behind(r, name, sizeof name))
        fail_msg("segment %s left in /dev/shm\nstderr:\n%s", name, r->err);
}

static void run_example(void **state)
{
    const struct example *ex = *state;
    char *argv[] = {(char *)launcher_path(), "-v", "-n", (char *)ex->ranks, "--",
                    (char *)examples_path(), (char *)ex->name, NULL};
    struct run r;
    run_cmd(argv, NULL, 60, &r);
    if (r.timed_out || r.code != 0)
        fail_msg("shmesh-run -n %s -- shmesh-test-examples %s: exit %d%s\nstdout:\n%s\nstderr:\n%s",
                 ex->ranks, ex->name, r.code, r.timed_out ? " (timed out)" : "", r.out, r.err);
    char *got = normalize(r.out), *want = normalize(ex->seed);
    if (strcmp(got, want))
        fail_msg("%s: the output differs from the docstring's (normalized)\n"
                 "got:\n%s\nexpected:\n%s",
                 ex->name, got, want);
    if (strcmp(r.out, ex->exact))
        fail_msg("%s: the output differs from numpy's layout\ngot:\n%s\nexpected:\n%s", ex->name,
                 r.out, ex->exact);
    free(got);
    free(want);
    assert_clean(&r);
    run_free(&r);
}

/* Where the docstring also prints the input x = np.arange(16).reshape(4, 4)
 * (psum, all_gather and psum_scatter do), the `input-4x4` example prints the
 * per-device rows stacked back, through no collective but the stacking. */
static const char input_seed[] = "[[ 0 1 2 3]\n"
                                 "[ 4 5 6 7]\n"
                                 "[ 8 9 10 11]\n"
                                 "[12 13 14 15]]\n";
static const char input_exact[] = "[[ 0  1  2  3]\n"
                                  " [ 4  5  6  7]\n"
                                  " [ 8  9 10 11]\n"
                                  " [12 13 14 15]]\n";

static const struct example examples[] = {
    /* psum */
    {"psum", "4", "[6 6 6 6]\n", "[6 6 6 6]\n"},
    {"psum-div", "4", "[0. 0.16666667 0.33333334 0.5 ]\n",
     "[0.         0.16666667 0.33333334 0.5       ]\n"},
    {"psum-groups", "4", "[1 1 5 5]\n", "[1 1 5 5]\n"},
    {"input-4x4", "4", input_seed, input_exact},
    {"psum-2d", "4",
     "[[24 28 32 36]\n"
     "[24 28 32 36]\n"
     "[24 28 32 36]\n"
     "[24 28 32 36]]\n",
     "[[24 28 32 36]\n"
     " [24 28 32 36]\n"
     " [24 28 32 36]\n"
     " [24 28 32 36]]\n"},
    {"psum-2d-groups", "4",
     "[[ 4 6 8 10]\n"
     "[ 4 6 8 10]\n"
     "[20 22 24 26]\n"
     "[20 22 24 26]]\n",
     "[[ 4  6  8 10]\n"
     " [ 4  6  8 10]\n"
     " [20 22 24 26]\n"
     " [20 22 24 26]]\n"},
    /* pmean */
    {"pmean", "4", "[1.5 1.5 1.5 1.5]\n", "[1.5 1.5 1.5 1.5]\n"},
    {"pmean-div", "4", "[0. 0.6666667 1.3333334 2. ]\n",
     "[0.        0.6666667 1.3333334 2.       ]\n"},
    /* all_gather */
    {"all-gather", "4",
     "[[0 1 2 3]\n"
     "[0 1 2 3]\n"
     "[0 1 2 3]\n"
     "[0 1 2 3]]\n",
     "[[0 1 2 3]\n"
     " [0 1 2 3]\n"
     " [0 1 2 3]\n"
     " [0 1 2 3]]\n"},
    {"all-gather-groups", "4",
     "[[[ 0 1 2 3]\n"
     "[ 8 9 10 11]]\n"
     "[[12 13 14 15]\n"
     "[ 4 5 6 7]]\n"
     "[[ 0 1 2 3]\n"
     "[ 8 9 10 11]]\n"
     "[[12 13 14 15]\n"
     "[ 4 5 6 7]]]\n",
     "[[[ 0  1  2  3]\n"
     "  [ 8  9 10 11]]\n"
     "\n"
     " [[12 13 14 15]\n"
     "  [ 4  5  6  7]]\n"
     "\n"
     " [[ 0  1  2  3]\n"
     "  [ 8  9 10 11]]\n"
     "\n"
     " [[12 13 14 15]\n"
     "  [ 4  5  6  7]]]\n"},
    /* psum_scatter */
    {"psum-scatter", "4", "[24 28 32 36]\n", "[24 28 32 36]\n"},
    {"psum-scatter-tiled", "4",
     "[[24]\n"
     "[28]\n"
     "[32]\n"
     "[36]]\n",
     "[[24]\n"
     " [28]\n"
     " [32]\n"
     " [36]]\n"},
    {"psum-scatter-groups", "4",
     "[[ 8 10]\n"
     "[20 22]\n"
     "[12 14]\n"
     "[16 18]]\n",
     "[[ 8 10]\n"
     " [20 22]\n"
     " [12 14]\n"
     " [16 18]]\n"},
    /* axis_index: f(np.zeros(4)), f(np.zeros(8)), then the nested pmap */
    {"axis-index", "4", "Array([0, 1, 2, 3], dtype=int32)\n",
     "Array([0, 1, 2, 3], dtype=int32)\n"},
    {"axis-index", "8", "Array([0, 1, 2, 3, 4, 5, 6, 7], dtype=int32)\n",
     "Array([0, 1, 2, 3, 4, 5, 6, 7], dtype=int32)\n"},
    {"axis-index-nested", "8",
     "[[0 0]\n"
     "[1 1]\n"
     "[2 2]\n"
     "[3 3]]\n"
     "[[0 1]\n"
     "[0 1]\n"
     "[0 1]\n"
     "[0 1]]\n",
     "[[0 0]\n"
     " [1 1]\n"
     " [2 2]\n"
     " [3 3]]\n"
     "[[0 1]\n"
     " [0 1]\n"
     " [0 1]\n"
     " [0 1]]\n"},
    /* ragged_all_to_all over an axis of size 2: each device's result, in
     * the docstring's own notation */
    {"ragged-all-to-all", "2",
     "axis index 0:\n"
     "result = [1, 3, 0, 0]\n"
     "axis index 1:\n"
     "result = [2, 2, 4, 0]\n",
     "axis index 0:\n"
     "  result = [1, 3, 0, 0]\n"
     "axis index 1:\n"
     "  result = [2, 2, 4, 0]\n"},
};

/* The printer alone (no launcher, no collective), on arrays that take
 * numpy's other paths: scientific notation, nan and inf, line wrapping,
 * booleans.  Expected strings printed by numpy 1.24. */
struct fmt_case {
    const char *args[20]; /* fmt DTYPE SHAPE VALUES..., NULL-terminated */
    const char *want;
};

static const struct fmt_case fmt_cases[] = {
    {{"fmt", "float32", "2x3", "-1.5", "0", "2.25", "100", "-0.001", "7", NULL},
     "[[-1.50e+00  0.00e+00  2.25e+00]\n [ 1.00e+02 -1.00e-03  7.00e+00]]\n"},
    {{"fmt", "float32", "4", "1e-5", "1.5e-5", "0.1", "3", NULL},
     "[1.0e-05 1.5e-05 1.0e-01 3.0e+00]\n"},
    {{"fmt", "float64", "3", "1e10", "-2.5", "0", NULL}, "[ 1.0e+10 -2.5e+00  0.0e+00]\n"},
    {{"fmt", "float32", "4", "nan", "-inf", "1", "0.5", NULL}, "[ nan -inf  1.   0.5]\n"},
    {{"fmt", "int32", "16", "1", "-10", "100", "-1000", "10000", "-100000", "1000000",
      "-10000000", "100000000", "0", "1", "2", "3", "4", "5", "6", NULL},
     "[        1       -10       100     -1000     10000   -100000   1000000\n"
     " -10000000 100000000         0         1         2         3         4\n"
     "         5         6]\n"},
    {{"fmt", "bool", "2x2", "1", "0", "1", "1", NULL}, "[[ True False]\n [ True  True]]\n"},
    {{"fmt", "float64", "2x2x2", "0", "0.1", "0.2", "0.30000000000000004", "0.4", "0.5",
      "0.6000000000000001", "0.7000000000000001", NULL},
     "[[[0.  0.1]\n  [0.2 0.3]]\n\n [[0.4 0.5]\n  [0.6 0.7]]]\n"},
    {{"fmt", "float64", "2", "-1.3095846993569658", "202.90181041022223", NULL},
     "[ -1.3095847  202.90181041]\n"},
    {{"fmt-repr", "int32", "3", "-5", "0", "12", NULL}, "Array([-5,  0, 12], dtype=int32)\n"},
};

static void printer_matches_numpy(void **state)
{
    for (size_t k = 0; k < sizeof fmt_cases / sizeof *fmt_cases; k++) {
        char *argv[24] = {(char *)examples_path()};
        int n = 1;
        for (const char *const *a = fmt_cases[k].args; *a; a++)
            argv[n++] = (char *)*a;
        argv[n] = NULL;
        struct run r;
        run_cmd(argv, NULL, 30, &r);
        if (r.code != 0)
            fail_msg("case %zu: exit %d\n%s", k, r.code, r.err);
        if (strcmp(r.out, fmt_cases[k].want))
            fail_msg("case %zu (%s %s):\ngot:\n%s\nexpected:\n%s", k, fmt_cases[k].args[1],
                     fmt_cases[k].args[2], r.out, fmt_cases[k].want);
        run_free(&r);
    }
}

/* The trainer (examples/train.c): its loss lines, "step N  loss X". */
static int losses(const char *out, double *loss, int max)
{
    int n = 0;
    for (const char *p = strstr(out, "step "); p && n < max; p = strstr(p + 1, "\nstep ")) {
        int step;
        double l;
        if (sscanf(p + (*p == '\n'), "step %d loss %lf", &step, &l) == 2)
            loss[n++] = l;
    }
    return n;
}

/* An example job (the program in environment variable `var`, with `arg`
 * or none) on `ranks` ranks of `per` CPU devices each (--gpus none: the
 * same devices whatever GPUs the machine has): its stdout, after checking
 * it exited 0 and left nothing behind. */
static char *example(const char *var, const char *ranks, const char *per, const char *arg)
{
    const char *prog = getenv(var);
    if (!prog || !*prog)
        fail_msg("%s is not set (run through meson test)", var);
    char *argv[] = {(char *)launcher_path(), "-v", "-n", (char *)ranks, "--devices-per-rank",
                    (char *)per, "--gpus", "none", "--", (char *)prog, (char *)arg, NULL};
    struct run r;
    assert_int_equal(run_cmd(argv, NULL, 120, &r), 0);
    if (r.code != 0 || r.timed_out)
        fail_msg("%s -n %s --devices-per-rank %s: exit %d%s\nstdout:\n%s\nstderr:\n%s", prog,
                 ranks, per, r.code, r.timed_out ? " (timed out)" : "", r.out, r.err);
    assert_clean(&r);
    char *out = strdup(r.out);
    run_free(&r);
    return out;
}

static char *train(const char *ranks, const char *per)
{
    return example("SHMESH_TRAIN", ranks, per, "100");
}

/* The loss falls at every printed step, by far, and the same mesh gives the
 * same losses whether its devices are 4 ranks of 1, 2 of 2 or 1 of 4. */
static void trainer_learns(void **state)
{
    char *a = train("4", "1"), *b = train("2", "2"), *c = train("1", "4");
    double la[16], lb[16], lc[16];
    int n = losses(a, la, 16);
    if (n != 11)
        fail_msg("expected 11 loss lines, found %d:\n%s", n, a);
    for (int i = 1; i < n; i++)
        if (!(la[i] < la[i - 1]))
            fail_msg("the loss went up at line %d:\n%s", i, a);
    if (!(la[n - 1] < la[0] / 100))
        fail_msg("the loss fell only from %g to %g:\n%s", la[0], la[n - 1], a);
    assert_int_equal(losses(b, lb, 16), n);
    assert_int_equal(losses(c, lc, 16), n);
    for (int i = 0; i < n; i++)
        if (la[i] != lb[i] || la[i] != lc[i])
            fail_msg("line %d: losses %.6f (4x1), %.6f (2x2), %.6f (1x4)", i, la[i], lb[i], lc[i]);
    free(a);
    free(b);
    free(c);
}

/* The metrics example (examples/metrics.c): its lines come from host
 * callbacks on the progress threads of every rank.  Returns stdout. */
static char *metrics(const char *ranks, const char *per)
{
    return example("SHMESH_METRICS", ranks, per, NULL);
}

#define METRICS_STEPS 20

/* Checks the lines of one run of `devices` devices: the header first, then
 * for each step every device's line once (any order among them) and then
 * the mean line, nothing of a step before the previous one's mean line, the
 * summary last.  Copies the mean lines into means (one text). */
static void check_metrics(const char *out, int devices, char *means, size_t len)
{
    int seen[METRICS_STEPS][64] = {{0}}, step = 0, lineno = 0;
    bool mean_done = false, summary = false;
    size_t m = 0;
    means[0] = '\0';
    for (const char *p = out; *p; lineno++) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            fail_msg("line %d has no newline\n%s", lineno, out);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(eol - p), p);
        p = eol + 1;
        int k, rank, dev, used = 0;
        double loss;
        if (lineno == 0) {
            if (strncmp(line, "metrics: ", 9) || !strstr(line, "ordered effects"))
                fail_msg("expected the header first, found '%s'\n%s", line, out);
        } else if (summary) {
            fail_msg("line %d follows the summary: '%s'\n%s", lineno, line, out);
        } else if (sscanf(line, "step %d: mean loss %lf over %d devices%n", &k, &loss, &dev,
                          &used) == 3 &&
                   !line[used]) {
            if (k != step || mean_done || dev != devices)
                fail_msg("line %d, '%s': expected step %d's rank lines or mean line\n%s", lineno,
                         line, step, out);
            for (int d = 0; d < devices; d++)
                if (seen[k][d] != 1)
                    fail_msg("mean line of step %d at line %d, but its line of device %d was "
                             "seen %d times\n%s",
                             k, lineno, d, seen[k][d], out);
            m += (size_t)snprintf(means + m, len - m, "%s\n", line);
            mean_done = true;
        } else if ((sscanf(line, "step %d rank %d device %d loss %lf%n", &k, &rank, &dev, &loss,
                           &used) == 4 ||
                    (sscanf(line, "step %d rank %d loss %lf%n", &k, &rank, &loss, &used) == 3 &&
                     (dev = rank) >= 0)) &&
                   !line[used]) {
            if (mean_done) {
                step++;
                mean_done = false;
            }
            if (k != step || step >= METRICS_STEPS || dev < 0 || dev >= devices ||
                !(loss > 0 && loss < 1))
                fail_msg("line %d, '%s': expected a line of step %d, device 0 to %d, a loss "
                         "in (0, 1)\n%s",
                         lineno, line, step, devices - 1, out);
            seen[k][dev]++;
        } else if (!strncmp(line, "metrics: 20 steps; the mean loss went from ", 43) &&
                   step == METRICS_STEPS - 1 && mean_done) {
            summary = true;
        } else {
            fail_msg("unexpected line %d: '%s'\n%s", lineno, line, out);
        }
    }
    if (!summary)
        fail_msg("no summary after step %d\n%s", METRICS_STEPS - 1, out);
}

/* Every step's lines, in step order, from 4 ranks; the same values from
 * another run and from 2 ranks of 2 devices. */
static void metrics_in_step_order(void **state)
{
    (void)state;
    static char a[4096], b[4096], c[4096];
    char *out = metrics("4", "1");
    check_metrics(out, 4, a, sizeof a);
    free(out);
    out = metrics("4", "1");
    check_metrics(out, 4, b, sizeof b);
    free(out);
    out = metrics("2", "2");
    check_metrics(out, 4, c, sizeof c);
    free(out);
    if (strcmp(a, b) || strcmp(a, c))
        fail_msg("mean lines differ:\n%s\nagain:\n%s\n2 ranks x 2:\n%s", a, b, c);
}

/* The batched example (examples/batched.c): 2 processes run a program
 * written for 8 devices (x = 2 over the processes, b = 4 batched in each);
 * rank 0 prints every position's results, gathered over (x, b). */
static void batched_example(void **state)
{
    (void)state;
    static const char want[] =
        "batched: 2 processes, mesh x=2 over them and b=4 batched in each: 8 positions\n"
        "value (global index):    [0 1 2 3 4 5 6 7]\n"
        "psum over (x, b):        [28 28 28 28 28 28 28 28]\n"
        "axis_index over (x, b):  [0 1 2 3 4 5 6 7]\n"
        "all_gather over b:\n"
        "[[0 1 2 3]\n"
        " [0 1 2 3]\n"
        " [0 1 2 3]\n"
        " [0 1 2 3]\n"
        " [4 5 6 7]\n"
        " [4 5 6 7]\n"
        " [4 5 6 7]\n"
        " [4 5 6 7]]\n";
    char *out = example("SHMESH_BATCHED", "2", "1", NULL);
    if (strcmp(out, want))
        fail_msg("shmesh-run -n 2 -- batched:\ngot:\n%s\nexpected:\n%s", out, want);
    free(out);
}

static void normalize_rules(void **state)
{
    char *s = normalize("[[ 4  6  8 10]\n [20 22 24 26]]\n\n  x   \n");
    assert_string_equal(s, "[[ 4 6 8 10]\n[20 22 24 26]]\nx\n");
    free(s);
}

#define EXAMPLE(k)                                                                             \
    {                                                                                          \
        .name = #k, .test_func = run_example, .initial_state = (void *)&examples[k]            \
    }

int main(void)
{
    struct CMUnitTest tests[] = {
        cmocka_unit_test(normalize_rules),
        cmocka_unit_test(printer_matches_numpy),
        cmocka_unit_test(trainer_learns),
        cmocka_unit_test(metrics_in_step_order),
        EXAMPLE(0),  EXAMPLE(1),  EXAMPLE(2),  EXAMPLE(3),  EXAMPLE(4),  EXAMPLE(5),
        EXAMPLE(6),  EXAMPLE(7),  EXAMPLE(8),  EXAMPLE(9),  EXAMPLE(10), EXAMPLE(11),
        EXAMPLE(12), EXAMPLE(13), EXAMPLE(14), EXAMPLE(15), EXAMPLE(16),
        cmocka_unit_test(batched_example),
    };
    _Static_assert(sizeof examples / sizeof *examples == 17, "one EXAMPLE() per example");
    /* Name each example test after its program argument and rank count. */
    static char names[17][64];
    for (size_t k = 0; k < 17; k++) {
        snprintf(names[k], sizeof names[k], "%s (-n %s)", examples[k].name, examples[k].ranks);
        tests[k + 4].name = names[k];
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
