/* shmesh-bench: collective latency and bandwidth, printed the way
 * nccl-tests prints them.  Run it under the launcher:
 *
 *   shmesh-run -n 2 -- build/tools/shmesh-bench -o psum -b 8 -e 64M -f 2
 *
 * Each size runs -w warm-up then -n timed iterations; time_us is the mean per
 * iteration, the largest over ranks.  algbw = bytes / time; busbw applies
 * nccl-tests' factor for the op.  -c fills inputs so every result can be
 * checked exactly (outside the timed loop) and counts wrong elements across
 * ranks.  docs/shmesh-bench.md describes sizes, columns and options. */
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "plot.h"
#include "device/runtime.h"
#include "core/settings.h"
#include "shm/segment.h"
#include "shmesh.h"

struct opts {
    enum bench_op ops[BENCH_OP_COUNT]; /* -o, in the order given */
    int nops;
    enum bench_op op; /* the one running */
    size_t min_bytes, max_bytes;
    double factor;
    shmesh_dtype dtype;
    int warmup, iters;
    bool check, csv, heap, device, nodes;
    const char *plot_path, *plot_mpi_path; /* --plot, --plot-mpi */
};

static shmesh_ctx *ctx;
static int rank, world;
static double total_wrong; /* over every size: the exit status says whether any */
static struct plot plot;    /* --plot: rank 0's rows, and --plot-mpi's */

static void die(const char *what, int rc)
{
    fprintf(stderr, "shmesh-bench: rank %d: %s: %s: %s\n", rank, what, shmesh_strerror(rc),
            shmesh_last_error(ctx));
    exit(1);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Before shmesh_init: the launcher's rank, so that an argument error is
 * printed once, by rank 0, rather than by every rank. */
static bool first_rank(void)
{
    struct settings env;
    settings_defaults(&env);
    /* Unset: a job of one; not a rank number: shmesh_init will say so, once. */
    if (settings_read(&env, SETTING_WORLD_SIZE, NULL, 0) ||
        settings_read(&env, SETTING_RANK, NULL, 0))
        return true;
    return env.rank == 0;
}

/* The op table's timed ops (bench_op_list), in a static buffer. */
static const char *op_list(bool refusing_bool)
{
    static char buf[2][512];
    bench_op_list(buf[refusing_bool], sizeof buf[0], refusing_bool,
                  refusing_bool ? " and " : " or ");
    return buf[refusing_bool];
}

/* The -o line of the help: the op list wrapped under the option's text. */
static void usage_ops(FILE *f)
{
    const char *s = op_list(false);
    int col = fprintf(f, "  -o OP[,OP...]");
    while (*s) {
        size_t w = strcspn(s, " ");
        if (col + 1 + (int)w > 79) {
            fprintf(f, "\n%12s", "");
            col = 12; /* the space before each name makes the 13 of the other lines */
        }
        col += fprintf(f, " %.*s", (int)w, s);
        s += w;
        s += strspn(s, " ");
    }
    fprintf(f, "\n");
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: shmesh-run -n N -- shmesh-bench [options]\n");
    usage_ops(f);
    fprintf(f,
            "             (default world_sum); several run one after the other\n"
            "  -b BYTES   smallest size (default 8; K, M, G suffixes)\n"
            "  -e BYTES   largest size (default 1M)\n"
            "  -f FACTOR  size multiplier between steps, > 1 (default 2)\n"
            "  -d DTYPE   bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64,\n"
            "             float16, bfloat16, float32, float64 (default float32; bool is\n"
            "             refused by %s)\n"
            "  -w N       warm-up iterations per size, >= 0 (default 20)\n"
            "  -n N       timed iterations per size, >= 1 (default 200)\n"
            "  -c 0|1     check results (default 1)\n"
            "  --csv      comma-separated output\n"
            "  --heap     buffers from the shared heap (shmesh_alloc) instead of malloc;\n"
            "             each rank needs 2 x -e of it (shmesh-run --shm-size)\n"
            "  --device   buffers in device memory (shmesh_device_alloc, device 0 of the\n"
            "             rank); first prints the device-to-device copy rate at -e, and\n"
            "             for psum the reduction kernel's rate alone over N buffers\n"
            "  --nodes    a job of several nodes (docs/multinode.md): also the bytes of\n"
            "             data a rank sent to other nodes per call (xnode_B, the most\n"
            "             of any rank)\n"
            "  --plot FILE.svg  also draw busbw and time against size, a line per op\n"
            "  --plot-mpi CSV   add the MPI lines of bench/compare-mpi.sh's CSV to --plot\n"
            "  --list-ops the ops, one a line: name, bus factor kind, whether bool is\n"
            "             accepted (from the op table)\n"
            "  -h         this help\n"
            "size is the bytes of the larger buffer per rank (nccl-tests' convention);\n"
            "every op runs over one mesh axis \"i\" spanning all ranks.\n",
            op_list(true));
}

static void SHMESH_NORETURN bad_arg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad_arg(const char *fmt, ...)
{
    if (first_rank()) { /* one write, not interleaved with the launcher's lines */
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "shmesh-bench: %s\n", msg);
    }
    exit(2);
}

/* seg_parse_size's sizes, and zero. */
static size_t parse_size(char opt, const char *s)
{
    char *end, o[3] = {'-', opt, '\0'}, one[32];
    uint64_t v = seg_parse_size(s);
    if (v && v <= UINT64_C(1000000000000000000))
        return (size_t)v;
    if (!v) {
        /* 0 is also seg_parse_size's "not a size": zero it is when the number
         * is below one byte and seg_parse_size takes its suffix. */
        errno = 0;
        double d = strtod(s, &end);
        if (end != s && !errno && d >= 0 && d < 1 &&
            snprintf(one, sizeof one, "1%s", end) < (int)sizeof one && seg_parse_size(one))
            return 0;
    }
    bad_arg("%s expects a size in bytes with an optional K, M or G suffix (8, 64K, 1M), "
            "got '%s'",
            o, s);
}

static int parse_int(char opt, const char *s, int min)
{
    char *end, o[3] = {'-', opt, '\0'};
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > 1000000000L)
        bad_arg(min ? "%s expects a whole number >= 1, got '%s'"
                    : "%s expects a whole number >= 0, got '%s'",
                o, s);
    return (int)v;
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.ops = {BENCH_WORLD_SUM}, .nops = 1, .min_bytes = 8, .max_bytes = 1 << 20,
                       .factor = 2.0, .dtype = SHMESH_FLOAT32, .warmup = 20, .iters = 200,
                       .check = true};
    static const struct option longs[] = {{"csv", no_argument, NULL, 'C'},
                                          {"heap", no_argument, NULL, 'H'},
                                          {"device", no_argument, NULL, 'D'},
                                          {"nodes", no_argument, NULL, 'X'},
                                          {"plot", required_argument, NULL, 'P'},
                                          {"plot-mpi", required_argument, NULL, 'M'},
                                          {"help", no_argument, NULL, 'h'},
                                          {"list-ops", no_argument, NULL, 'L'},
                                          {NULL, 0, NULL, 0}};
    const char *dtype_arg = NULL;
    int c;
    opterr = 0; /* our own messages, printed by rank 0 only */
    while ((c = getopt_long(argc, argv, ":o:b:e:f:d:w:n:c:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o': {
            /* A comma-separated list: the plot's lines come from one run. */
            char name[64];
            o->nops = 0;
            for (const char *p = optarg;; p++) {
                size_t len = strcspn(p, ",");
                snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), p);
                enum bench_op op = len < 63 ? bench_op_parse(name) : BENCH_OP_COUNT;
                if (op == BENCH_OP_COUNT)
                    bad_arg("-o expects %s, got '%s' (several: comma-separated)", op_list(false),
                            name);
                for (int i = 0; i < o->nops; i++)
                    if (o->ops[i] == op)
                        bad_arg("-o names %s twice", name);
                o->ops[o->nops++] = op;
                p += len;
                if (!*p)
                    break;
            }
            break;
        }
        case 'b': o->min_bytes = parse_size('b', optarg); break;
        case 'e': o->max_bytes = parse_size('e', optarg); break;
        case 'f': {
            char *end;
            errno = 0;
            o->factor = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(o->factor > 1.0) || o->factor > 1e6)
                bad_arg("-f expects a factor greater than 1 (2, 4, 1.5), got '%s'", optarg);
            break;
        }
        case 'd': {
            int d;
            for (d = 0; d < SHMESH_DTYPE_COUNT; d++)
                if (!strcmp(shmesh_dtype_name((shmesh_dtype)d), optarg))
                    break;
            if (d == SHMESH_DTYPE_COUNT)
                bad_arg("-d expects bool, int8, int16, int32, int64, uint8, uint16, uint32, "
                        "uint64, float16, bfloat16, float32 or float64, got '%s'",
                        optarg);
            o->dtype = (shmesh_dtype)d;
            dtype_arg = optarg;
            break;
        }
        case 'w': o->warmup = parse_int('w', optarg, 0); break;
        case 'n': o->iters = parse_int('n', optarg, 1); break;
        case 'c':
            if (strcmp(optarg, "0") && strcmp(optarg, "1"))
                bad_arg("-c expects 0 or 1, got '%s'", optarg);
            o->check = optarg[0] == '1';
            break;
        case 'C': o->csv = true; break;
        case 'X': o->nodes = true; break;
        case 'H': o->heap = true; break;
        case 'D': o->device = true; break;
        case 'P': o->plot_path = optarg; break;
        case 'M': o->plot_mpi_path = optarg; break;
        case 'h':
            if (first_rank())
                usage(stdout);
            exit(0);
        case 'L':
            if (first_rank())
                for (int op = 0; op < BENCH_OP_COUNT; op++)
                    printf("%s %s %s\n", bench_op_name((enum bench_op)op),
                           bench_op_bus_name((enum bench_op)op),
                           bench_op_takes((enum bench_op)op, SHMESH_BOOL) ? "bool" : "nobool");
            exit(0);
        case ':': {
            char opt[3] = {'-', (char)optopt, '\0'};
            bad_arg("option %s needs a value (-h lists the options)", opt);
        }
        default: {
            char opt[3] = {'-', (char)optopt, '\0'};
            bad_arg("unknown option '%s' (-h lists the options)",
                    optopt ? opt : argv[optind - 1]);
        }
        }
    }
    if (optind < argc)
        bad_arg("unexpected argument '%s' (-h lists the options)", argv[optind]);
    for (int i = 0; i < o->nops; i++)
        if (!bench_op_takes(o->ops[i], o->dtype))
            bad_arg("-d %s is refused by %s: use a numeric dtype (int32, float32, ...)",
                    dtype_arg ? dtype_arg : shmesh_dtype_name(o->dtype),
                    bench_op_name(o->ops[i]));
    o->op = o->ops[0];
    if (o->plot_mpi_path && !o->plot_path)
        bad_arg("--plot-mpi adds lines to --plot FILE.svg, which is missing");
    if (o->plot_mpi_path) {
        /* Read now, on every rank, so that a bad file is said once and
         * before the run rather than after it. */
        const char *names[BENCH_OP_COUNT];
        char err[512];
        for (int i = 0; i < o->nops; i++)
            names[i] = bench_op_name(o->ops[i]);
        if (plot_read_mpi_csv(&plot, o->plot_mpi_path, names, (size_t)o->nops, err, sizeof err))
            bad_arg("--plot-mpi %s", err);
    }
    if (o->max_bytes < o->min_bytes)
        bad_arg("-e (%zu bytes) must be at least -b (%zu bytes)", o->max_bytes, o->min_bytes);
}

/* Buffers of `bytes`, every page touched: from the shared heap or malloc,
 * or zeroed device memory. */
static void *buffer(const struct opts *o, size_t bytes)
{
    void *p = NULL;
    if (o->device) {
        void *zeros = calloc(1, bytes);
        if (!zeros || shmesh_device_alloc(ctx, 0, bytes, &p) ||
            shmesh_device_copy(ctx, p, zeros, bytes)) {
            fprintf(stderr, "shmesh-bench: rank %d: --device: %zu bytes of device memory: %s\n",
                    rank, bytes, zeros ? shmesh_last_error(ctx) : "out of host memory");
            exit(1);
        }
        free(zeros);
        return p;
    }
    if (o->heap) {
        p = shmesh_alloc(ctx, bytes);
        if (!p) {
            fprintf(stderr, "shmesh-bench: rank %d: --heap: shmesh_alloc(%zu bytes) failed: %s\n",
                    rank, bytes, shmesh_last_error(ctx));
            exit(1);
        }
    } else if (posix_memalign(&p, SEG_CACHE_LINE, bytes)) {
        fprintf(stderr, "shmesh-bench: rank %d: out of memory for a buffer of %zu bytes\n", rank,
                bytes);
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

static void release(const struct opts *o, void *p)
{
    if (o->device)
        shmesh_device_free(ctx, p);
    else if (o->heap && p)
        shmesh_free(ctx, p);
    else
        free(p);
}

/* The largest time and bytes sent across nodes and the total wrong count
 * over ranks, through one world sum (rank r's time in slot r, its bytes in
 * slot world + 1 + r, its wrong count in slot world). */
static void reduce_stats(double *us, double *wrong, double *xnode)
{
    double *all = calloc(2 * (size_t)world + 1, sizeof *all);
    if (!all) {
        fprintf(stderr, "shmesh-bench: rank %d: out of memory\n", rank);
        exit(1);
    }
    all[rank] = *us;
    all[world] = *wrong;
    all[world + 1 + rank] = *xnode;
    int rc = shmesh_world_sum(ctx, all, 2 * (size_t)world + 1, SHMESH_FLOAT64);
    if (rc)
        die("shmesh_world_sum (statistics)", rc);
    *us = all[0];
    *xnode = all[world + 1];
    for (int r = 1; r < world; r++) {
        *us = all[r] > *us ? all[r] : *us;
        *xnode = all[world + 1 + r] > *xnode ? all[world + 1 + r] : *xnode;
    }
    *wrong = all[world];
    free(all);
}

static void print_header(const struct opts *o)
{
    if (o->csv && o->op != o->ops[0])
        return; /* one header; the op column tells the ops apart */
    if (o->csv) {
        printf("op,ranks,notifier,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong%s\n",
               o->nodes ? ",xnode_B" : "");
    } else {
        printf("# shmesh-bench: %s, %d ranks, %s notifier, warm-up %d, iterations %d%s%s\n",
               bench_op_name(o->op), world, shmesh_notifier(ctx), o->warmup, o->iters,
               o->check ? ", checked" : ", not checked",
               o->device ? ", device buffers" : o->heap ? ", shared-heap buffers" : "");
        printf("# %12s %12s %9s %10s %10s %10s %7s%s\n", "size", "count", "type", "time_us",
               "algbw_GBs", "busbw_GBs", "#wrong", o->nodes ? "     xnode_B" : "");
    }
    fflush(stdout);
}

static void print_row(const struct opts *o, const struct bench *b, double us, double wrong,
                      double xnode)
{
    double algbw = us > 0 ? (double)b->bytes / us / 1e3 : 0;
    double busbw = algbw * bench_bus_factor(o->op, world);
    const char *type = !bench_op_has_data(o->op) ? "none" : shmesh_dtype_name(o->dtype);
    char w[32];
    if (o->check)
        snprintf(w, sizeof w, "%.0f", wrong);
    else
        snprintf(w, sizeof w, "N/A");
    /* A size of 0 (barrier, or too few bytes for one element) has no place
     * on the plot's log axis. */
    const char *name = bench_op_name(o->op);
    if (o->plot_path && b->bytes &&
        plot_add(&plot, name, name, PLOT_SOLID, (double)b->bytes, us, busbw)) {
        fprintf(stderr, "shmesh-bench: rank %d: out of memory for --plot\n", rank);
        exit(1);
    }
    char x[32] = "";
    if (o->nodes)
        snprintf(x, sizeof x, o->csv ? ",%.0f" : " %12.0f", xnode);
    if (o->csv)
        printf("%s,%d,%s,%zu,%zu,%s,%.3f,%.3f,%.3f,%s%s\n", name, world,
               shmesh_notifier(ctx), b->bytes, b->count, type, us, algbw, busbw, w, x);
    else
        printf("  %12zu %12zu %9s %10.2f %10.3f %10.3f %7s%s\n", b->bytes, b->count, type, us,
               algbw, busbw, w, x);
    fflush(stdout);
}

/* --device's reference lines: step(arg) timed 9 times on every rank; the
 * slowest rank's median, in microseconds. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double reference_us(void (*step)(void *arg), void *arg)
{
    double t[9];
    for (int i = 0; i < 9; i++) {
        double t0 = now_us();
        step(arg);
        t[i] = now_us() - t0;
    }
    qsort(t, 9, sizeof *t, cmp_double);
    double us = t[4], none = 0, no_bytes = 0;
    reduce_stats(&us, &none, &no_bytes);
    return us;
}

/* One device-to-device copy of -e bytes: the rate the movement ops are
 * measured against. */
static void copy_step(void *arg)
{
    const struct bench *b = arg;
    int rc = shmesh_device_copy(ctx, b->out, b->in, b->cap);
    if (rc)
        die("shmesh_device_copy", rc);
}

static void copy_rate(const struct opts *o, const struct bench *b)
{
    double us = reference_us(copy_step, (void *)b);
    if (rank == 0 && !o->csv)
        printf("# device-to-device copy of %zu bytes: %.2f us, %.3f GB/s (slowest rank's median "
               "of 9)\n",
               o->max_bytes, us, (double)o->max_bytes / us / 1e3);
}

/* The runtime plugin the library loaded (libshmesh-device-<backend>.so,
 * wherever it came from): dlopen of its path gives the same instance. */
struct plugin_search {
    char suffix[64];
    void *dl;
};

static int find_plugin(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct plugin_search *ps = arg;
    size_t len = strlen(info->dlpi_name), want = strlen(ps->suffix);
    (void)size;
    if (len < want || strcmp(info->dlpi_name + len - want, ps->suffix))
        return 0;
    ps->dl = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    return ps->dl != NULL;
}

static const struct rt_ops *loaded_plugin(void)
{
    shmesh_device_stats st;
    shmesh_device_stats_get(ctx, &st);
    struct plugin_search ps = {.dl = NULL};
    snprintf(ps.suffix, sizeof ps.suffix, "/libshmesh-device-%s.so", st.backend);
    dl_iterate_phdr(find_plugin, &ps);
    rt_entry_fn entry;
    void *fn = ps.dl ? dlsym(ps.dl, RT_ENTRY) : NULL;
    if (!fn)
        return NULL;
    memcpy(&entry, &fn, sizeof entry); /* POSIX: a function's address as dlsym gives it */
    return entry();
}

/* --device -o psum: the reference the device psum is measured against, the
 * reduction kernel alone, one-shot, over as many device buffers as there
 * are ranks (this rank's input and local stand-ins for the peers'). */
struct kernel_run {
    const struct rt_ops *rt;
    struct rt_reduce r;
};

static void kernel_step(void *arg)
{
    struct kernel_run *k = arg;
    if (k->rt->reduce(&k->r, NULL) || k->rt->sync(NULL)) {
        fprintf(stderr, "shmesh-bench: rank %d: the reference kernel: %s\n", rank,
                k->rt->last_error());
        exit(1);
    }
}

static void kernel_rate(const struct opts *o, const struct bench *b)
{
    struct kernel_run k = {.rt = loaded_plugin()};
    size_t count = o->max_bytes / shmesh_dtype_size(o->dtype);
    if (!k.rt || !k.rt->takes(RT_SUM, o->dtype) || world > RT_MAX_SRC || !count) {
        if (rank == 0 && !o->csv)
            printf("# no reference kernel rate (%s)\n",
                   !k.rt ? "the runtime plugin was not found" : "no kernel for this dtype or size");
        return;
    }
    k.r = (struct rt_reduce){.op = RT_SUM, .dtype = o->dtype, .dst = b->out, .nsrc = world,
                             .n = count, .mean_n = 1};
    k.r.src[0] = b->in;
    for (int q = 1; q < world; q++)
        k.r.src[q] = buffer(o, o->max_bytes);
    double us = reference_us(kernel_step, &k);
    for (int q = 1; q < world; q++)
        shmesh_device_free(ctx, (void *)k.r.src[q]);
    if (rank == 0 && !o->csv)
        printf("# one-shot sum kernel alone, %d buffers of %zu bytes: %.2f us, %.3f GB/s of input "
               "(slowest rank's median of 9)\n",
               world, o->max_bytes, us, (double)o->max_bytes * world / us / 1e3);
}

/* Warm-up, the check, then the timed iterations at the size b holds. */
static void run_size(const struct opts *o, struct bench *b)
{
    const char *name = bench_op_name(o->op);
    int rc;
    for (int it = 0; it < o->warmup; it++)
        if ((rc = bench_run(b)))
            die(name, rc);
    double wrong = 0;
    if (o->check && bench_op_has_data(o->op) && !o->device) {
        bench_fill(b);
        if ((rc = bench_run(b)))
            die(name, rc);
        wrong = (double)bench_count_wrong(b);
    } else if (o->check && bench_op_has_data(o->op)) {
        /* The pattern is written and read on host copies of the buffers. */
        struct bench h = *b;
        h.in = malloc(b->cap);
        h.out = b->out ? malloc(b->cap) : NULL;
        if (!h.in || (b->out && !h.out))
            die("host copies for the check", SHMESH_ERR_NOMEM);
        bench_size(&h, b->requested);
        bench_fill(&h);
        if ((rc = shmesh_device_copy(ctx, b->in, h.in, b->cap)) ||
            (b->out && (rc = shmesh_device_copy(ctx, b->out, h.out, b->cap))) ||
            (rc = bench_run(b)) ||
            (b->out && (rc = shmesh_device_copy(ctx, h.out, b->out, b->cap))) ||
            (!b->out && (rc = shmesh_device_copy(ctx, h.in, b->in, b->cap))))
            die(name, rc);
        wrong = (double)bench_count_wrong(&h);
        free(h.in);
        free(h.out);
    }
    if ((rc = shmesh_barrier(ctx)))
        die("shmesh_barrier", rc);
    shmesh_traffic x0, x1;
    shmesh_traffic_nodes_get(ctx, &x0);
    double t0 = now_us();
    for (int it = 0; it < o->iters; it++)
        if ((rc = bench_run(b)))
            die(name, rc);
    double us = (now_us() - t0) / o->iters;
    shmesh_traffic_nodes_get(ctx, &x1);
    double xnode = (double)(x1.sent - x0.sent) / o->iters;
    reduce_stats(&us, &wrong, &xnode);
    total_wrong += wrong;
    if (rank == 0)
        print_row(o, b, us, wrong, xnode);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    int rc = shmesh_init(&ctx);
    if (rc) {
        fprintf(stderr, "shmesh-bench: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);

    const char *names[] = {"i"};
    int sizes[] = {world};
    shmesh_mesh *mesh;
    if ((rc = shmesh_mesh_create(ctx, 1, names, sizes, NULL, &mesh)))
        die("shmesh_mesh_create", rc);

    /* One pair of buffers, as large as the largest op needs, for every op. */
    bool need_in = false, need_out = false;
    for (int i = 0; i < o.nops; i++) {
        need_in |= bench_op_has_data(o.ops[i]);
        need_out |= bench_op_has_data(o.ops[i]) && !bench_op_in_place(o.ops[i]);
    }
    size_t cap = o.max_bytes ? o.max_bytes : 1;
    void *in = need_in ? buffer(&o, cap) : NULL, *out = need_out ? buffer(&o, cap) : NULL;

    for (int i = 0; i < o.nops; i++) {
        o.op = o.ops[i];
        bool barrier = !bench_op_has_data(o.op);
        struct bench b = {.op = o.op, .ctx = ctx, .mesh = mesh, .rank = rank, .n = world,
                          .dtype = o.dtype, .cap = barrier ? 0 : cap, .in = barrier ? NULL : in,
                          .out = barrier || bench_op_in_place(o.op) ? NULL : out};
        if (bench_setup(&b)) {
            fprintf(stderr, "shmesh-bench: rank %d: out of memory\n", rank);
            return 1;
        }
        if (rank == 0)
            print_header(&o);
        if (o.device && b.out)
            copy_rate(&o, &b);
        if (o.device && o.op == BENCH_PSUM)
            kernel_rate(&o, &b);
        if (barrier) { /* one row: it moves no data */
            bench_size(&b, 0);
            run_size(&o, &b);
        } else {
            for (size_t bytes = o.min_bytes;;) {
                bench_size(&b, bytes);
                run_size(&o, &b);
                if (bytes >= o.max_bytes)
                    break;
                double next = (double)(bytes ? bytes : 1) * o.factor;
                if (next > (double)o.max_bytes)
                    bytes = o.max_bytes;
                else /* at least one byte more, whatever the factor */
                    bytes = (size_t)next > bytes ? (size_t)next : bytes + 1;
            }
        }
        bench_teardown(&b);
    }

    release(&o, in);
    release(&o, out);
    /* For the plot's title: the name is the context's, gone after finalize. */
    char notifier[32];
    snprintf(notifier, sizeof notifier, "%s", shmesh_notifier(ctx));
    shmesh_mesh_destroy(mesh);
    rc = shmesh_finalize(ctx);
    if (rc) {
        fprintf(stderr, "shmesh-bench: shmesh_finalize: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    if (rank == 0 && o.plot_path) {
        char title[160];
        snprintf(title, sizeof title, "shmesh-bench: %d ranks, %s, %s notifier", world,
                 shmesh_dtype_name(o.dtype), notifier);
        rc = plot_write_svg(&plot, o.plot_path, title);
        if (rc) {
            fprintf(stderr, "shmesh-bench: --plot %s: cannot write the SVG: %s\n", o.plot_path,
                    strerror(-rc));
            return 1;
        }
    }
    plot_free(&plot);
    if (total_wrong > 0) { /* as nccl-tests: wrong results fail the run */
        if (rank == 0)
            fprintf(stderr, "shmesh-bench: %.0f wrong elements in all: FAILED\n", total_wrong);
        return 1;
    }
    return 0;
}
