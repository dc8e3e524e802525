/* shmesh-bench: collective latency and bandwidth, printed the way
 * nccl-tests prints them.  Run it under the launcher:
 *
 *   shmesh-run -n 2 -- build/tools/shmesh-bench -o world_sum -b 8 -e 1M -f 2
 *
 * Each size runs -w warm-up then -n timed iterations; time_us is the mean per
 * iteration, the largest over ranks.  algbw = bytes / time; busbw applies the
 * usual factor (allreduce 2(n-1)/n).  -c fills inputs so the sum can be
 * checked exactly and counts wrong elements across ranks. */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmesh.h"

enum op { OP_BARRIER, OP_WORLD_SUM };

struct opts {
    enum op op;
    size_t min_bytes, max_bytes;
    double factor;
    shmesh_dtype dtype;
    int warmup, iters;
    bool check, csv;
};

static shmesh_ctx *ctx;
static int rank, world;

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

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    case '\0': break;
    default: fprintf(stderr, "shmesh-bench: bad size '%s'\n", s); exit(2);
    }
    return (size_t)v;
}

static void usage(void)
{
    printf("Usage: shmesh-run -n N -- shmesh-bench [options]\n"
           "  -o OP      barrier | world_sum (default world_sum)\n"
           "  -b BYTES   smallest message (default 8; K, M, G suffixes)\n"
           "  -e BYTES   largest message (default 1M)\n"
           "  -f FACTOR  size multiplier between steps (default 2)\n"
           "  -d DTYPE   float32 (default), float64, int32, int64, ...\n"
           "  -w N       warm-up iterations per size (default 20)\n"
           "  -n N       timed iterations per size (default 200)\n"
           "  -c 0|1     check results (default 1)\n"
           "  --csv      comma-separated output\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){OP_WORLD_SUM, 8, 1 << 20, 2.0, SHMESH_FLOAT32, 20, 200, true, false};
    static const struct option longs[] = {{"csv", no_argument, NULL, 'C'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:b:e:f:d:w:n:c:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!strcmp(optarg, "barrier"))
                o->op = OP_BARRIER;
            else if (!strcmp(optarg, "world_sum") || !strcmp(optarg, "psum"))
                o->op = OP_WORLD_SUM;
            else {
                fprintf(stderr, "shmesh-bench: -o expects barrier or world_sum, got '%s'\n",
                        optarg);
                exit(2);
            }
            break;
        case 'b': o->min_bytes = parse_size(optarg); break;
        case 'e': o->max_bytes = parse_size(optarg); break;
        case 'f': o->factor = atof(optarg); break;
        case 'd': {
            int d;
            for (d = 0; d < SHMESH_DTYPE_COUNT; d++)
                if (!strcmp(shmesh_dtype_name((shmesh_dtype)d), optarg))
                    break;
            if (d == SHMESH_DTYPE_COUNT || d == SHMESH_BOOL) {
                fprintf(stderr, "shmesh-bench: -d expects a summable dtype, got '%s'\n", optarg);
                exit(2);
            }
            o->dtype = (shmesh_dtype)d;
            break;
        }
        case 'w': o->warmup = atoi(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'c': o->check = atoi(optarg) != 0; break;
        case 'C': o->csv = true; break;
        case 'h': usage(); exit(0);
        default: usage(); exit(2);
        }
    }
    if (o->factor <= 1.0)
        o->factor = 2.0;
    if (o->iters < 1)
        o->iters = 1;
    if (o->max_bytes < o->min_bytes)
        o->max_bytes = o->min_bytes;
}

/* Small integers: every dtype sums them exactly whatever the rank count. */
static void fill(void *buf, size_t count, shmesh_dtype dt, int r)
{
    for (size_t i = 0; i < count; i++) {
        int v = (int)((r + 1 + i) % 7);
        switch (dt) {
        case SHMESH_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case SHMESH_FLOAT64: ((double *)buf)[i] = v; break;
        case SHMESH_INT8: case SHMESH_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
        case SHMESH_INT16: case SHMESH_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
        case SHMESH_INT32: case SHMESH_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
        case SHMESH_INT64: case SHMESH_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
        /* Half types get 0 or 1, whose sums stay exact and easy to decode. */
        case SHMESH_FLOAT16: ((uint16_t *)buf)[i] = v ? 0x3c00 : 0; break;
        case SHMESH_BFLOAT16: ((uint16_t *)buf)[i] = v ? 0x3f80 : 0; break;
        default: break;
        }
    }
}

static double expected(size_t i, shmesh_dtype dt)
{
    double s = 0;
    for (int r = 0; r < world; r++) {
        int v = (int)((r + 1 + i) % 7);
        s += (dt == SHMESH_FLOAT16 || dt == SHMESH_BFLOAT16) ? (v != 0) : v;
    }
    return s;
}

static double value(const void *buf, size_t i, shmesh_dtype dt)
{
    switch (dt) {
    case SHMESH_FLOAT32: return ((const float *)buf)[i];
    case SHMESH_FLOAT64: return ((const double *)buf)[i];
    case SHMESH_INT8: return ((const int8_t *)buf)[i];
    case SHMESH_UINT8: return ((const uint8_t *)buf)[i];
    case SHMESH_INT16: return ((const int16_t *)buf)[i];
    case SHMESH_UINT16: return ((const uint16_t *)buf)[i];
    case SHMESH_INT32: return ((const int32_t *)buf)[i];
    case SHMESH_UINT32: return ((const uint32_t *)buf)[i];
    case SHMESH_INT64: return (double)((const int64_t *)buf)[i];
    case SHMESH_UINT64: return (double)((const uint64_t *)buf)[i];
    case SHMESH_FLOAT16: {
        uint16_t h = ((const uint16_t *)buf)[i]; /* small integers: exact */
        int e = (h >> 10) & 0x1f;
        return h ? (double)(1024 + (h & 0x3ff)) * (double)(1 << e) / (double)(1 << 25) : 0.0;
    }
    case SHMESH_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return 0;
    }
}

/* The largest of every rank's value, through a world sum of one slot each. */
static double max_over_ranks(double v)
{
    double *all = calloc((size_t)world, sizeof *all);
    all[rank] = v;
    int rc = shmesh_world_sum(ctx, all, (size_t)world, SHMESH_FLOAT64);
    if (rc)
        die("shmesh_world_sum", rc);
    double m = all[0];
    for (int r = 1; r < world; r++)
        m = all[r] > m ? all[r] : m;
    free(all);
    return m;
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
    size_t esz = shmesh_dtype_size(o.dtype);
    const char *opname = o.op == OP_BARRIER ? "barrier" : "world_sum";
    double busfactor = o.op == OP_WORLD_SUM && world > 1 ? 2.0 * (world - 1) / world : 0;

    if (rank == 0) {
        if (o.csv)
            printf("op,ranks,notifier,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n");
        else {
            printf("# shmesh-bench: %s, %d ranks, %s notifier, warm-up %d, iterations %d%s\n",
                   opname, world, shmesh_notifier(ctx), o.warmup, o.iters,
                   o.check ? ", checked" : "");
            printf("# %12s %12s %9s %10s %10s %10s %7s\n", "size", "count", "type", "time_us",
                   "algbw_GBs", "busbw_GBs", "#wrong");
        }
        fflush(stdout);
    }

    size_t min = o.op == OP_BARRIER ? 0 : o.min_bytes, max = o.op == OP_BARRIER ? 0 : o.max_bytes;
    void *buf = malloc(max + esz);
    for (size_t bytes = min;;) {
        size_t count = bytes / esz;
        double wrong = 0;
        for (int it = 0; it < o.warmup; it++)
            if ((rc = o.op == OP_BARRIER ? shmesh_barrier(ctx)
                                         : shmesh_world_sum(ctx, buf, count, o.dtype)))
                die(opname, rc);
        if (o.check && o.op == OP_WORLD_SUM) {
            fill(buf, count, o.dtype, rank);
            if ((rc = shmesh_world_sum(ctx, buf, count, o.dtype)))
                die(opname, rc);
            for (size_t i = 0; i < count; i++)
                wrong += value(buf, i, o.dtype) != expected(i, o.dtype);
        }
        if ((rc = shmesh_barrier(ctx)))
            die("shmesh_barrier", rc);
        double t0 = now_us();
        for (int it = 0; it < o.iters; it++)
            if ((rc = o.op == OP_BARRIER ? shmesh_barrier(ctx)
                                         : shmesh_world_sum(ctx, buf, count, o.dtype)))
                die(opname, rc);
        double us = max_over_ranks((now_us() - t0) / o.iters);
        double total_wrong = wrong; /* over all ranks */
        if ((rc = shmesh_world_sum(ctx, &total_wrong, 1, SHMESH_FLOAT64)))
            die("shmesh_world_sum", rc);
        if (rank == 0) {
            double algbw = us > 0 ? (double)(count * esz) / us / 1e3 : 0;
            if (o.csv)
                printf("%s,%d,%s,%zu,%zu,%s,%.3f,%.3f,%.3f,%.0f\n", opname, world,
                       shmesh_notifier(ctx), count * esz, count, shmesh_dtype_name(o.dtype), us,
                       algbw, algbw * busfactor, total_wrong);
            else
                printf("  %12zu %12zu %9s %10.2f %10.3f %10.3f %7.0f\n", count * esz, count,
                       shmesh_dtype_name(o.dtype), us, algbw, algbw * busfactor, total_wrong);
            fflush(stdout);
        }
        if (bytes >= max)
            break;
        size_t next = (size_t)((double)(bytes ? bytes : 1) * o.factor);
        bytes = next > max ? max : next;
    }
    free(buf);
    rc = shmesh_finalize(ctx);
    if (rc) {
        fprintf(stderr, "shmesh-bench: shmesh_finalize: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    return 0;
}
