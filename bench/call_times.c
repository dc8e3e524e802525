/* call_times: each call of one collective timed alone, to see what a
 * mean over many calls hides (docs/performance.md, "Mid sizes on malloc'd
 * buffers").
 *
 *   shmesh-run -n 2 -- build/bench/call-times [-o OP] [-b BYTES[K|M|G]] [-w WARMUP] [-n CALLS]
 *                                             [-k FIRST] [--no-barrier]
 *
 * A 1-D mesh "i" over every rank; float32 buffers of BYTES per rank
 * (default 128 KiB; all_gather's output is that times the ranks).  OP is
 * psum, all_gather, psum_scatter, all_to_all or pbroadcast (from rank 0;
 * the default).  After WARMUP calls (default 5) and, unless --no-barrier, a
 * barrier, CALLS calls (default 1000) are each timed alone.  Rank 0 prints
 * the first FIRST times (default 20) in microseconds, then the mean, median
 * and slowest of each tenth of the calls, and every rank its minor page
 * faults and voluntary context switches during the first two calls and
 * during the rest (getrusage). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "shmesh.h"

#define PROG "call-times"
#define TRY(what, call)                                                                        \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0)                                                                           \
            bench_fail(PROG, ctx, what, rc_);                                                  \
    } while (0)

enum op { PSUM, ALL_GATHER, PSUM_SCATTER, ALL_TO_ALL, PBROADCAST };
static const char *const op_names[] = {"psum", "all_gather", "psum_scatter", "all_to_all",
                                       "pbroadcast"};

static shmesh_ctx *ctx;

static int usage(shmesh_ctx *c, const char *msg)
{
    return bench_usage(c, PROG, msg,
                       "usage: shmesh-run -n N -- call-times [-o OP] [-b BYTES] [-w WARMUP] "
                       "[-n CALLS] [-k FIRST] [--no-barrier]\n"
                       "  OP: psum, all_gather, psum_scatter, all_to_all or pbroadcast "
                       "(default)\n");
}

static int call(shmesh_mesh *m, enum op op, const shmesh_array *in, shmesh_array *out)
{
    switch (op) {
    case PSUM: return shmesh_psum(m, "i", NULL, in, out);
    case ALL_GATHER: return shmesh_all_gather(m, "i", NULL, 0, true, in, out);
    case PSUM_SCATTER: return shmesh_psum_scatter(m, "i", NULL, 0, true, in, out);
    case ALL_TO_ALL: return shmesh_all_to_all(m, "i", NULL, 0, 0, true, in, out);
    default: return shmesh_pbroadcast(m, "i", 0, in, out);
    }
}

struct usage_now {
    long faults, switches;
};

static struct usage_now usage_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (struct usage_now){u.ru_minflt, u.ru_nvcsw};
}

int main(int argc, char **argv)
{
    int rc = shmesh_init(&ctx);
    if (rc) {
        fprintf(stderr, PROG ": shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    enum op op = PBROADCAST;
    long bytes = 128 << 10, warmup = 5, calls = 1000, first = 20;
    bool barrier = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return usage(ctx, NULL);
        if (!strcmp(a, "--no-barrier")) {
            barrier = false;
            continue;
        }
        if (!v)
            BENCH_BAD_ARG("%s needs a value", a);
        i++;
        char *end;
        long n = strtol(v, &end, 10);
        if (!strcmp(a, "-b") && *end && !end[1]) { /* K, M or G */
            const char *units = "KMG", *u = strchr(units, *end);
            if (u && n >= 0 && n < (1L << 30)) {
                n <<= 10 * (u - units + 1);
                end++;
            }
        }
        if (!strcmp(a, "-o")) {
            int k = 0;
            while (k < 5 && strcmp(v, op_names[k]))
                k++;
            if (k == 5)
                BENCH_BAD_ARG("-o: expected psum, all_gather, psum_scatter, all_to_all or "
                              "pbroadcast, got '%s'",
                              v);
            op = (enum op)k;
        } else if (*end || n < 0 || (n == 0 && strcmp(a, "-w") && strcmp(a, "-k"))) {
            BENCH_BAD_ARG("%s: expected a positive integer, got '%s'", a, v);
        } else if (!strcmp(a, "-b")) {
            bytes = n;
        } else if (!strcmp(a, "-w")) {
            warmup = n;
        } else if (!strcmp(a, "-n")) {
            calls = n;
        } else if (!strcmp(a, "-k")) {
            first = n;
        } else {
            BENCH_BAD_ARG("unknown option '%s'", a);
        }
    }
    int world = shmesh_world_size(ctx), rank = shmesh_rank(ctx);
    const char *names[] = {"i"};
    int sizes[] = {world};
    shmesh_mesh *m;
    TRY("shmesh_mesh_create", shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m));
    /* Elements: a multiple of the ranks, for the ops that split by them. */
    int64_t n = bytes / 4 / world * world;
    if (n < world)
        n = world;
    int64_t out_n = op == ALL_GATHER ? n * world : op == PSUM_SCATTER ? n / world : n;
    float *in = malloc((size_t)n * 4), *out = malloc((size_t)out_n * 4);
    double *t = malloc(sizeof *t * (size_t)calls);
    if (!in || !out || !t)
        TRY("malloc", SHMESH_ERR_NOMEM);
    for (int64_t i = 0; i < n; i++)
        in[i] = (float)(rank + 1);
    memset(out, 0, (size_t)out_n * 4);
    shmesh_array a = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {n}};
    shmesh_array b = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {out_n}};
    for (long i = 0; i < warmup; i++)
        TRY(op_names[op], call(m, op, &a, &b));
    if (barrier)
        TRY("shmesh_barrier", shmesh_barrier(ctx));
    struct usage_now u0 = usage_now(), u2 = u0;
    for (long i = 0; i < calls; i++) {
        double t0 = bench_now_us();
        TRY(op_names[op], call(m, op, &a, &b));
        t[i] = bench_now_us() - t0;
        if (i == 1 || calls == 1)
            u2 = usage_now();
    }
    struct usage_now u1 = usage_now();
    /* One rank at a time, in rank order. */
    for (int r = 0; r < world; r++) {
        if (r == rank) {
            printf("# rank %d: first two calls %ld page faults, %ld sleeps; the rest %ld, %ld\n",
                   rank, u2.faults - u0.faults, u2.switches - u0.switches,
                   u1.faults - u2.faults, u1.switches - u2.switches);
            fflush(stdout);
        }
        TRY("shmesh_barrier", shmesh_barrier(ctx));
    }
    if (rank == 0) {
        printf("# %s of %lld B per rank, %d ranks, %ld warm-up calls, %s, %ld calls timed "
               "alone (us)\n",
               op_names[op], (long long)n * 4, world, warmup,
               barrier ? "then a barrier" : "no barrier", calls);
        printf("# the first %ld:", first < calls ? first : calls);
        for (long i = 0; i < first && i < calls; i++)
            printf(" %.1f", t[i]);
        printf("\n#      calls        mean      median     slowest\n");
        long tenth = calls >= 10 ? calls / 10 : calls;
        for (long lo = 0; lo + tenth <= calls; lo += tenth) {
            double sum = 0, hi = 0;
            for (long i = lo; i < lo + tenth; i++) {
                sum += t[i];
                hi = t[i] > hi ? t[i] : hi;
            }
            double med = median(t + lo, (int)tenth); /* sorts that tenth: read last */
            printf("%6ld-%-6ld %10.2f %11.2f %11.2f\n", lo, lo + tenth, sum / (double)tenth, med,
                   hi);
        }
    }
    free(t);
    free(in);
    free(out);
    shmesh_finalize(ctx);
    return 0;
}
