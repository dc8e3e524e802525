/* shmesh-bench: each op's buffers, call, input pattern and expected output.
 *
 * Every op runs over the one axis "i" of a mesh spanning all ranks, without
 * subgroups.  Sizes follow nccl-tests: the reported size is the bytes of the
 * larger buffer per rank (docs/shmesh-bench.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kernels/half.h"

enum bus { BUS_ZERO, BUS_ALLREDUCE, BUS_SPREAD, BUS_ONE };

/* How an op's buffers are sized for a size (bench_size). */
enum layout {
    LAY_NONE,     /* no data (barrier) */
    LAY_IN_PLACE, /* one buffer, the result in the input (world_sum; pbroadcast, as
                     MPI_Bcast, which compare-mpi.sh puts beside it, is) */
    LAY_SAME,     /* out as large as in */
    LAY_GATHER,   /* tiled along axis 0: each rank gives size / n */
    LAY_SCATTER,  /* tiled along axis 0: each rank keeps size / n */
    LAY_EXCHANGE, /* size / n to each peer */
};

/* What output element j should hold (expected). */
enum check {
    CHK_NONE,       /* nothing to check */
    CHK_SUM,        /* the sum over ranks (bool: into int32) */
    CHK_SUM_BLOCK,  /* block r of the sum */
    CHK_MAX,
    CHK_MIN,
    CHK_GATHER,     /* rank p's input at block p */
    CHK_EXCHANGE,   /* block p: block r of rank p's input */
    CHK_SHIFT,      /* the input of rank r - 1 (the ring i -> i+1) */
    CHK_ROOT,       /* rank 0's input */
};

static int run_barrier(struct bench *b) { return shmesh_barrier(b->ctx); }
static int run_world_sum(struct bench *b)
{
    return shmesh_world_sum(b->ctx, b->in, b->in_count, b->dtype);
}
static int run_psum(struct bench *b) { return shmesh_psum(b->mesh, "i", NULL, &b->a_in, &b->a_out); }
static int run_pmax(struct bench *b) { return shmesh_pmax(b->mesh, "i", NULL, &b->a_in, &b->a_out); }
static int run_pmin(struct bench *b) { return shmesh_pmin(b->mesh, "i", NULL, &b->a_in, &b->a_out); }
static int run_all_gather(struct bench *b)
{
    return shmesh_all_gather(b->mesh, "i", NULL, 0, true, &b->a_in, &b->a_out);
}
static int run_psum_scatter(struct bench *b)
{
    return shmesh_psum_scatter(b->mesh, "i", NULL, 0, true, &b->a_in, &b->a_out);
}
static int run_all_to_all(struct bench *b)
{
    return shmesh_all_to_all(b->mesh, "i", NULL, 0, 0, true, &b->a_in, &b->a_out);
}
static int run_ragged_all_to_all(struct bench *b)
{
    return shmesh_ragged_all_to_all(b->mesh, "i", NULL, &b->a_in, &b->a_out, &b->idx[0],
                                    &b->idx[1], &b->idx[2], &b->idx[3]);
}
static int run_ppermute(struct bench *b)
{
    return shmesh_ppermute(b->mesh, "i", (const int(*)[2])b->perm, b->n, &b->a_in, &b->a_out);
}
static int run_pbroadcast(struct bench *b)
{
    return shmesh_pbroadcast(b->mesh, "i", 0, &b->a_in, &b->a_in);
}

/* What the op table does not say about a timed op, one line each keyed by
 * its ID: layout, check, and the function that calls it.  A timed op (bus
 * not NONE) without its line here does not compile: BENCH_ROW_<ID> is then
 * one argument where BENCH_ENTRY_ takes three (and bench_run a NULL). */
#define BENCH_ROW_BARRIER LAY_NONE, CHK_NONE, run_barrier
#define BENCH_ROW_WORLD_SUM LAY_IN_PLACE, CHK_SUM, run_world_sum
#define BENCH_ROW_PSUM LAY_SAME, CHK_SUM, run_psum
#define BENCH_ROW_PMAX LAY_SAME, CHK_MAX, run_pmax
#define BENCH_ROW_PMIN LAY_SAME, CHK_MIN, run_pmin
#define BENCH_ROW_ALL_GATHER LAY_GATHER, CHK_GATHER, run_all_gather
#define BENCH_ROW_PSUM_SCATTER LAY_SCATTER, CHK_SUM_BLOCK, run_psum_scatter
#define BENCH_ROW_ALL_TO_ALL LAY_EXCHANGE, CHK_EXCHANGE, run_all_to_all
#define BENCH_ROW_RAGGED_ALL_TO_ALL LAY_EXCHANGE, CHK_EXCHANGE, run_ragged_all_to_all
#define BENCH_ROW_PPERMUTE LAY_SAME, CHK_SHIFT, run_ppermute
#define BENCH_ROW_PBROADCAST LAY_IN_PLACE, CHK_ROOT, run_pbroadcast

static const struct {
    const char *name;
    bool bool_in; /* the library accepts bool */
    enum bus bus;
    enum layout layout;
    enum check check;
    int (*run)(struct bench *b);
} ops[BENCH_OP_COUNT] = {
#define BENCH_ENTRY(...) BENCH_ENTRY_(__VA_ARGS__)
#define BENCH_ENTRY_(name, bool_in, bus, layout, check, run) {name, bool_in, bus, layout, check, run}
#define BENCH_OP_INFO(ID, name, scope, bus, bool_in, params, ...)                                \
    BENCH_TIMED_##bus([BENCH_##ID] = BENCH_ENTRY(#name, bool_in, BUS_##bus, BENCH_ROW_##ID), )
    SHMESH_OPS(BENCH_OP_INFO)
#undef BENCH_OP_INFO
#undef BENCH_ENTRY_
#undef BENCH_ENTRY
};

const char *bench_op_name(enum bench_op op) { return op < BENCH_OP_COUNT ? ops[op].name : "?"; }

enum bench_op bench_op_parse(const char *name)
{
    int op;
    for (op = 0; op < BENCH_OP_COUNT; op++)
        if (!strcmp(ops[op].name, name))
            break;
    return (enum bench_op)op;
}

bool bench_op_takes(enum bench_op op, shmesh_dtype dt)
{
    return dt != SHMESH_BOOL || ops[op].bool_in;
}

bool bench_op_has_data(enum bench_op op) { return ops[op].layout != LAY_NONE; }

bool bench_op_in_place(enum bench_op op) { return ops[op].layout == LAY_IN_PLACE; }

size_t bench_op_list(char *buf, size_t len, bool refusing_bool, const char *last)
{
    size_t n = 0, k = 0, count = 0;
    for (int op = 0; op < BENCH_OP_COUNT; op++)
        count += !refusing_bool || !ops[op].bool_in;
    if (len)
        buf[0] = 0;
    for (int op = 0; op < BENCH_OP_COUNT; op++) {
        if (refusing_bool && ops[op].bool_in)
            continue;
        const char *sep = !k++ ? "" : k == count ? last : ", ";
        int w = snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "%s%s", sep,
                         ops[op].name);
        n += w > 0 ? (size_t)w : 0;
    }
    return n;
}

const char *bench_op_bus_name(enum bench_op op)
{
    static const char *const names[] = {"zero", "allreduce", "spread", "one"};
    return op < BENCH_OP_COUNT ? names[ops[op].bus] : "?";
}

double bench_bus_factor(enum bench_op op, int n)
{
    switch (op < BENCH_OP_COUNT ? ops[op].bus : BUS_ZERO) {
    case BUS_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case BUS_SPREAD: /* all_gather, reduce_scatter, all_to_all */
        return (double)(n - 1) / n;
    case BUS_ONE:
        return 1.0;
    default: /* no data */
        return 0.0;
    }
}

static shmesh_dtype out_dtype(const struct bench *b)
{
    return ops[b->op].check == CHK_SUM && b->dtype == SHMESH_BOOL ? SHMESH_INT32 : b->dtype;
}

int bench_setup(struct bench *b)
{
    size_t n = (size_t)b->n;
    b->idx_data = calloc(4 * n, sizeof *b->idx_data);
    b->perm = calloc(n, sizeof *b->perm);
    if (!b->idx_data || !b->perm)
        return -1;
    for (int p = 0; p < b->n; p++) {
        b->perm[p][0] = p;
        b->perm[p][1] = (p + 1) % b->n;
    }
    for (int k = 0; k < 4; k++)
        b->idx[k] = (shmesh_array){.data = b->idx_data + (size_t)k * n, .dtype = SHMESH_INT64, .ndim = 1, .shape = {b->n}};
    return 0;
}

void bench_teardown(struct bench *b)
{
    free(b->idx_data);
    free(b->perm);
    b->idx_data = NULL;
    b->perm = NULL;
}

void bench_size(struct bench *b, size_t requested)
{
    size_t n = (size_t)b->n, esz = shmesh_dtype_size(b->dtype);
    size_t oesz = shmesh_dtype_size(out_dtype(b)), m = requested / (esz * n);
    b->requested = requested;
    switch (ops[b->op].layout) {
    case LAY_NONE:
        b->in_count = b->out_count = 0;
        break;
    case LAY_GATHER: /* tiled along axis 0: each rank gives size / n */
        b->in_count = m;
        b->out_count = m * n;
        break;
    case LAY_SCATTER: /* tiled along axis 0: each rank keeps size / n */
        b->in_count = m * n;
        b->out_count = m;
        break;
    case LAY_EXCHANGE: /* size / n to each peer */
        b->in_count = b->out_count = m * n;
        break;
    default: /* one buffer's worth (psum of bool: the int32 output) */
        b->in_count = b->out_count = requested / (esz > oesz ? esz : oesz);
        break;
    }
    bool out_larger = b->out_count * oesz > b->in_count * esz;
    b->count = out_larger ? b->out_count : b->in_count;
    b->bytes = out_larger ? b->out_count * oesz : b->in_count * esz;
    b->a_in = (shmesh_array){.data = b->in, .dtype = b->dtype, .ndim = 1, .shape = {(int64_t)b->in_count}};
    b->a_out = (shmesh_array){.data = b->out, .dtype = out_dtype(b), .ndim = 1, .shape = {(int64_t)b->out_count}};

    /* ragged_all_to_all: rows p*m.. go to peer p, landing at rows rank*m..
     * of its output, as all_to_all places them. */
    int64_t *io = b->idx_data, *ss = io + n, *oo = ss + n, *rs = oo + n;
    for (size_t p = 0; p < n; p++) {
        io[p] = (int64_t)(p * m);
        ss[p] = rs[p] = (int64_t)m;
        oo[p] = (int64_t)((size_t)b->rank * m);
    }
}

int bench_run(struct bench *b) { return ops[b->op].run(b); }

/* ---- the check pattern ---------------------------------------------------
 * Rank r's element i holds a small integer that depends on r and on a hash
 * of i (so a block taken from the wrong offset shows): 0..12 for unsigned
 * types, -6..6 for signed and floating ones, 0 or 1 for bool.  Sums, maxima
 * and minima of such values are exact in every dtype (integers wrap the way
 * the library's do), so each output element has one right bit pattern. */

static bool is_unsigned(shmesh_dtype dt)
{
    return dt == SHMESH_UINT8 || dt == SHMESH_UINT16 || dt == SHMESH_UINT32 ||
           dt == SHMESH_UINT64;
}

static double val(shmesh_dtype dt, int r, size_t i)
{
    uint64_t h = ((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) >> 40;
    int v = (int)((h + (uint64_t)r * 5) % 13);
    if (dt == SHMESH_BOOL)
        return v & 1;
    return is_unsigned(dt) ? v : v - 6;
}

/* Stores the integer v as one element of dt. */
static void put(void *dst, shmesh_dtype dt, double v)
{
    uint64_t u = (uint64_t)(int64_t)v; /* integers wrap to their width */
    switch (dt) {
    case SHMESH_BOOL:
    case SHMESH_INT8:
    case SHMESH_UINT8: {
        uint8_t x = (uint8_t)u;
        memcpy(dst, &x, 1);
        break;
    }
    case SHMESH_INT16:
    case SHMESH_UINT16: {
        uint16_t x = (uint16_t)u;
        memcpy(dst, &x, 2);
        break;
    }
    case SHMESH_INT32:
    case SHMESH_UINT32: {
        uint32_t x = (uint32_t)u;
        memcpy(dst, &x, 4);
        break;
    }
    case SHMESH_INT64:
    case SHMESH_UINT64:
        memcpy(dst, &u, 8);
        break;
    case SHMESH_FLOAT16: {
        uint16_t x = float_to_half((float)v);
        memcpy(dst, &x, 2);
        break;
    }
    case SHMESH_BFLOAT16: {
        uint16_t x = float_to_bf16((float)v);
        memcpy(dst, &x, 2);
        break;
    }
    case SHMESH_FLOAT32: {
        float x = (float)v;
        memcpy(dst, &x, 4);
        break;
    }
    case SHMESH_FLOAT64:
        memcpy(dst, &v, 8);
        break;
    default:
        break;
    }
}

void bench_fill(struct bench *b)
{
    size_t esz = shmesh_dtype_size(b->dtype);
    for (size_t i = 0; i < b->in_count; i++)
        put((char *)b->in + i * esz, b->dtype, val(b->dtype, b->rank, i));
    if (ops[b->op].layout != LAY_IN_PLACE) /* junk where the results go */
        memset(b->out, 0xa5, b->out_count * shmesh_dtype_size(out_dtype(b)));
}

/* The value output element j should hold on this rank. */
static double expected(const struct bench *b, size_t j)
{
    shmesh_dtype dt = b->dtype;
    int n = b->n, r = b->rank;
    size_t m;
    double acc;
    enum check chk = ops[b->op].check;
    switch (chk) {
    case CHK_SUM:
    case CHK_SUM_BLOCK: /* block r of the sum */
        m = chk == CHK_SUM_BLOCK ? (size_t)r * b->out_count + j : j;
        acc = 0;
        for (int p = 0; p < n; p++)
            acc += val(dt, p, m);
        return acc;
    case CHK_MAX:
    case CHK_MIN:
        acc = val(dt, 0, j);
        for (int p = 1; p < n; p++) {
            double v = val(dt, p, j);
            acc = (chk == CHK_MAX ? v > acc : v < acc) ? v : acc;
        }
        return acc;
    case CHK_GATHER: /* rank p's input at block p */
        m = b->in_count;
        return val(dt, (int)(j / m), j % m);
    case CHK_EXCHANGE: /* block p: block r of rank p's input */
        m = b->out_count / (size_t)n;
        return val(dt, (int)(j / m), (size_t)r * m + j % m);
    case CHK_SHIFT:
        return val(dt, (r + n - 1) % n, j);
    case CHK_ROOT:
        return val(dt, 0, j);
    default:
        return 0;
    }
}

uint64_t bench_count_wrong(const struct bench *b)
{
    shmesh_dtype odt = out_dtype(b);
    size_t oesz = shmesh_dtype_size(odt);
    const char *res = ops[b->op].layout == LAY_IN_PLACE ? b->in : b->out;
    uint64_t wrong = 0;
    unsigned char want[8];
    if (ops[b->op].check == CHK_NONE)
        return 0;
    for (size_t j = 0; j < b->out_count; j++) {
        put(want, odt, expected(b, j));
        wrong += memcmp(want, res + j * oesz, oesz) != 0;
    }
    return wrong;
}
