/* memcpy_bw: what one core can copy, the ceiling any shared-memory
 * collective works under on this machine.
 *
 *   memcpy_bw [--csv] [-r REPS] [SIZE...]      (default sizes 1M 16M 64M)
 *
 * For each size: two buffers, both written first (warm, faulted in), one
 * untimed copy, then REPS timed repetitions (default 9).  A repetition copies
 * the buffer enough times to run about 20 ms; its bandwidth is bytes copied /
 * time (GB/s = 1e9 bytes/s).  Prints the median, min and max repetition.
 * --csv: memcpy,1,libc,bytes,reps,median_GBs,min_GBs,max_GBs
 * (the first columns follow the op,ranks,impl,bytes layout of the bench
 * CSVs). */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; end++; break;
    case 'M': case 'm': v *= 1024 * 1024; end++; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (end == s || *end || v < 1) {
        fprintf(stderr, "memcpy_bw: bad size '%s'\n", s);
        exit(2);
    }
    return (size_t)v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Keeps the compiler from dropping copies whose result nobody reads. */
static volatile unsigned char sink;

static void measure(size_t bytes, int reps, bool csv)
{
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_bw: out of memory for 2 x %zu bytes\n", bytes);
        exit(1);
    }
    memset(src, 0x5a, bytes);
    memset(dst, 0xa5, bytes);
    memcpy(dst, src, bytes);

    /* Copies per repetition: about 20 ms at ~10 GB/s, at least one. */
    double t = now_s();
    memcpy(dst, src, bytes);
    t = now_s() - t;
    long per = t > 0 ? (long)(0.02 / t) : 1000;
    if (per < 1)
        per = 1;
    if (per > 100000)
        per = 100000;

    double *gbs = calloc((size_t)reps, sizeof *gbs);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (long i = 0; i < per; i++) {
            memcpy(dst, src, bytes);
            /* A compiler barrier: each copy is done, in order. */
            __asm__ __volatile__("" ::"r"(dst) : "memory");
        }
        double dt = now_s() - t0;
        gbs[r] = (double)bytes * (double)per / dt / 1e9;
    }
    sink = dst[bytes - 1];
    qsort(gbs, (size_t)reps, sizeof *gbs, cmp_double);
    double median = reps % 2 ? gbs[reps / 2] : (gbs[reps / 2 - 1] + gbs[reps / 2]) / 2;
    if (csv)
        printf("memcpy,1,libc,%zu,%d,%.3f,%.3f,%.3f\n", bytes, reps, median, gbs[0],
               gbs[reps - 1]);
    else
        printf("  %12zu %6d %10.3f %10.3f %10.3f\n", bytes, reps, median, gbs[0],
               gbs[reps - 1]);
    fflush(stdout);
    free(gbs);
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    bool csv = false;
    int reps = 9, c;
    static const struct option longs[] = {{"csv", no_argument, NULL, 'C'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    while ((c = getopt_long(argc, argv, "r:h", longs, NULL)) != -1) {
        switch (c) {
        case 'r': reps = atoi(optarg); break;
        case 'C': csv = true; break;
        case 'h':
            printf("Usage: memcpy_bw [--csv] [-r REPS] [SIZE...]\n"
                   "  one-core memcpy bandwidth (GB/s = 1e9 bytes copied per second),\n"
                   "  median of REPS repetitions (default 9); sizes default to 1M 16M 64M\n");
            return 0;
        default: return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    if (csv)
        printf("op,ranks,impl,bytes,reps,median_GBs,min_GBs,max_GBs\n");
    else {
        printf("# memcpy_bw: one core, libc memcpy, median of %d repetitions\n", reps);
        printf("# %12s %6s %10s %10s %10s\n", "size", "reps", "median_GBs", "min_GBs", "max_GBs");
    }
    if (optind == argc) {
        static const size_t def[] = {1 << 20, 16 << 20, 64 << 20};
        for (size_t i = 0; i < sizeof def / sizeof *def; i++)
            measure(def[i], reps, csv);
    } else {
        for (int i = optind; i < argc; i++)
            measure(parse_size(argv[i]), reps, csv);
    }
    return 0;
}
