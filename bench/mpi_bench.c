/* mpi_bench: the MPI reference for shmesh-bench.  Same loop, sizes and
 * output as shmesh-bench (nccl-tests conventions), over MPI collectives:
 *
 *   mpirun -np 2 build/bench-mpi/mpi_bench-openmpi -o allreduce -b 8 -e 1M -f 2
 *
 * "size" is the bytes of the larger buffer per rank: allreduce and bcast the
 * buffer, allgather the whole output (each rank gives size/n), reduce_scatter
 * the whole input (each rank keeps size/n), alltoall the whole send buffer
 * (size/n to each peer).  Those three round sizes down to a multiple of
 * element size x ranks.  Buffers are out of place (separate send and receive
 * buffers), like the mesh collectives of libshmesh; bcast has one buffer.
 *
 * Each size runs -w warm-up iterations, one checked call (-c 1), a barrier,
 * then -n timed iterations; time_us is the mean per iteration, the largest
 * over ranks.  algbw = bytes / time (GB/s, 1e9 bytes/s); busbw = algbw x
 * 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter and alltoall,
 * 1 for bcast. */
#include <getopt.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_ALLTOALL, OP_BCAST };
static const char *const op_names[] = {"allreduce", "allgather", "reduce_scatter", "alltoall",
                                       "bcast"};

enum dtype { DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_INT64 };
static const char *const dt_names[] = {"float32", "float64", "int32", "int64"};
static const size_t dt_sizes[] = {4, 8, 4, 8};

struct opts {
    enum op op;
    size_t min_bytes, max_bytes;
    double factor;
    enum dtype dtype;
    int warmup, iters;
    bool check, csv;
};

static int rank, world;

static void fail(const char *fmt, const char *arg)
{
    if (rank == 0) {
        fprintf(stderr, "mpi_bench: ");
        fprintf(stderr, fmt, arg);
        fputc('\n', stderr);
    }
    MPI_Finalize();
    exit(2);
}

static void check_mpi(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpi_bench: rank %d: %s: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        fail("bad size '%s'", s);
    switch (*end) {
    case 'K': case 'k': v *= 1024; end++; break;
    case 'M': case 'm': v *= 1024 * 1024; end++; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        fail("bad size '%s'", s);
    return (size_t)v;
}

static void usage(void)
{
    printf("Usage: mpirun -np N mpi_bench [options]\n"
           "  -o OP      allreduce (default) | allgather | reduce_scatter | alltoall | bcast\n"
           "  -b BYTES   smallest size (default 8; K, M, G suffixes)\n"
           "  -e BYTES   largest size (default 1M)\n"
           "  -f FACTOR  size multiplier between steps (default 2)\n"
           "  -d DTYPE   float32 (default), float64, int32, int64\n"
           "  -w N       warm-up iterations per size (default 20)\n"
           "  -n N       timed iterations per size (default 200)\n"
           "  -c 0|1     check results (default 1)\n"
           "  --csv      comma-separated output:\n"
           "             op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n"
           "Size is the bytes of the larger buffer per rank (nccl-tests conventions).\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){OP_ALLREDUCE, 8, 1 << 20, 2.0, DT_FLOAT32, 20, 200, true, false};
    static const struct option longs[] = {{"csv", no_argument, NULL, 'C'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    int c;
    opterr = rank == 0;
    while ((c = getopt_long(argc, argv, "o:b:e:f:d:w:n:c:h", longs, NULL)) != -1) {
        switch (c) {
        case 'o': {
            size_t i;
            for (i = 0; i < sizeof op_names / sizeof *op_names; i++)
                if (!strcmp(optarg, op_names[i]))
                    break;
            if (i == sizeof op_names / sizeof *op_names)
                fail("-o expects allreduce, allgather, reduce_scatter, alltoall or bcast, "
                     "got '%s'", optarg);
            o->op = (enum op)i;
            break;
        }
        case 'b': o->min_bytes = parse_size(optarg); break;
        case 'e': o->max_bytes = parse_size(optarg); break;
        case 'f': o->factor = atof(optarg); break;
        case 'd': {
            size_t i;
            for (i = 0; i < sizeof dt_names / sizeof *dt_names; i++)
                if (!strcmp(optarg, dt_names[i]))
                    break;
            if (i == sizeof dt_names / sizeof *dt_names)
                fail("-d expects float32, float64, int32 or int64, got '%s'", optarg);
            o->dtype = (enum dtype)i;
            break;
        }
        case 'w': o->warmup = atoi(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'c': o->check = atoi(optarg) != 0; break;
        case 'C': o->csv = true; break;
        case 'h':
            if (rank == 0)
                usage();
            MPI_Finalize();
            exit(0);
        default:
            if (rank == 0)
                usage();
            MPI_Finalize();
            exit(2);
        }
    }
    if (optind < argc)
        fail("unexpected argument '%s'", argv[optind]);
    if (o->factor <= 1.0)
        o->factor = 2.0;
    if (o->warmup < 0)
        o->warmup = 0;
    if (o->iters < 1)
        o->iters = 1;
    if (o->max_bytes < o->min_bytes)
        o->max_bytes = o->min_bytes;
}

static MPI_Datatype mpi_type(enum dtype dt)
{
    switch (dt) {
    case DT_FLOAT32: return MPI_FLOAT;
    case DT_FLOAT64: return MPI_DOUBLE;
    case DT_INT32: return MPI_INT32_T;
    default: return MPI_INT64_T;
    }
}

/* "openmpi", "mpich" or "mpi", from MPI_Get_library_version. */
static const char *impl_name(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    if (strstr(v, "Open MPI"))
        return "openmpi";
    if (strstr(v, "MPICH"))
        return "mpich";
    return "mpi";
}

/* Element i of rank r's send buffer: small integers, whose sums stay exact in
 * every dtype whatever the rank count. */
static int val(int r, size_t i)
{
    return (int)(((size_t)r + 1 + i) % 7);
}

static void put(void *buf, size_t i, enum dtype dt, double v)
{
    switch (dt) {
    case DT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case DT_FLOAT64: ((double *)buf)[i] = v; break;
    case DT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, size_t i, enum dtype dt)
{
    switch (dt) {
    case DT_FLOAT32: return ((const float *)buf)[i];
    case DT_FLOAT64: return ((const double *)buf)[i];
    case DT_INT32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

static double sum_over_ranks(size_t i)
{
    double s = 0;
    for (int r = 0; r < world; r++)
        s += val(r, i);
    return s;
}

/* Element counts of the send and receive buffers for `bytes` (already
 * rounded).  count is bytes / element size; per = count / ranks. */
struct shape {
    size_t count, per, send, recv;
};

static struct shape shape_of(enum op op, size_t bytes, size_t esz)
{
    struct shape s = {bytes / esz, 0, 0, 0};
    s.per = s.count / (size_t)world;
    switch (op) {
    case OP_ALLREDUCE: s.send = s.recv = s.count; break;
    case OP_ALLGATHER: s.send = s.per; s.recv = s.count; break;
    case OP_REDUCE_SCATTER: s.send = s.count; s.recv = s.per; break;
    case OP_ALLTOALL: s.send = s.recv = s.count; break;
    case OP_BCAST: s.send = s.recv = s.count; break;
    }
    return s;
}

static int run(enum op op, const struct shape *s, enum dtype dt, void *sbuf, void *rbuf)
{
    MPI_Datatype t = mpi_type(dt);
    /* MPI counts are int: sizes beyond 2^31 elements are refused in main. */
    int n = (int)s->count, per = (int)s->per;
    switch (op) {
    case OP_ALLREDUCE: return MPI_Allreduce(sbuf, rbuf, n, t, MPI_SUM, MPI_COMM_WORLD);
    case OP_ALLGATHER: return MPI_Allgather(sbuf, per, t, rbuf, per, t, MPI_COMM_WORLD);
    case OP_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(sbuf, rbuf, per, t, MPI_SUM, MPI_COMM_WORLD);
    case OP_ALLTOALL: return MPI_Alltoall(sbuf, per, t, rbuf, per, t, MPI_COMM_WORLD);
    case OP_BCAST: return MPI_Bcast(sbuf, n, t, 0, MPI_COMM_WORLD);
    }
    return MPI_ERR_OP;
}

/* Fills the inputs, runs the op once and counts this rank's wrong elements. */
static double check(enum op op, const struct shape *s, enum dtype dt, void *sbuf, void *rbuf)
{
    for (size_t i = 0; i < s->send; i++)
        put(sbuf, i, dt, op == OP_BCAST && rank != 0 ? -1 : val(rank, i));
    for (size_t i = 0; op != OP_BCAST && i < s->recv; i++)
        put(rbuf, i, dt, -1);
    check_mpi(run(op, s, dt, sbuf, rbuf), op_names[op]);
    double wrong = 0;
    switch (op) {
    case OP_ALLREDUCE:
        for (size_t i = 0; i < s->count; i++)
            wrong += get(rbuf, i, dt) != sum_over_ranks(i);
        break;
    case OP_ALLGATHER:
        for (size_t i = 0; i < s->count; i++)
            wrong += get(rbuf, i, dt) != val((int)(i / s->per), i % s->per);
        break;
    case OP_REDUCE_SCATTER:
        for (size_t j = 0; j < s->per; j++)
            wrong += get(rbuf, j, dt) != sum_over_ranks((size_t)rank * s->per + j);
        break;
    case OP_ALLTOALL:
        /* Block b came from rank b, which sent its block `rank`. */
        for (size_t i = 0; i < s->count; i++)
            wrong += get(rbuf, i, dt) != val((int)(i / s->per), (size_t)rank * s->per + i % s->per);
        break;
    case OP_BCAST:
        for (size_t i = 0; i < s->count; i++)
            wrong += get(sbuf, i, dt) != val(0, i);
        break;
    }
    return wrong;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    struct opts o;
    parse(argc, argv, &o);
    const char *opname = op_names[o.op], *impl = impl_name();
    size_t esz = dt_sizes[o.dtype];
    /* Sizes of the blocked ops are multiples of element size x ranks. */
    size_t unit = o.op == OP_ALLREDUCE || o.op == OP_BCAST ? esz : esz * (size_t)world;
    double busfactor = world <= 1                ? 0
                       : o.op == OP_ALLREDUCE ? 2.0 * (world - 1) / world
                       : o.op == OP_BCAST     ? 1.0
                                              : (double)(world - 1) / world;
    if (o.max_bytes / esz > INT32_MAX)
        fail("-e: more elements than an MPI count (int) can hold%s", "");

    if (rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(version, &len);
        char *nl = strchr(version, '\n');
        if (nl)
            *nl = '\0';
        if (o.csv)
            printf("op,ranks,impl,bytes,count,dtype,time_us,algbw_GBs,busbw_GBs,wrong\n");
        else {
            printf("# mpi_bench: %s, %d ranks, %s, warm-up %d, iterations %d%s\n", opname, world,
                   version, o.warmup, o.iters, o.check ? ", checked" : "");
            printf("# %12s %12s %9s %10s %10s %10s %7s\n", "size", "count", "type", "time_us",
                   "algbw_GBs", "busbw_GBs", "#wrong");
        }
        fflush(stdout);
    }

    size_t cap = o.max_bytes / unit * unit + unit;
    void *sbuf = malloc(cap), *rbuf = malloc(cap);
    if (!sbuf || !rbuf) {
        fprintf(stderr, "mpi_bench: rank %d: out of memory for %zu bytes\n", rank, cap);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(sbuf, 0, cap);
    memset(rbuf, 0, cap);
    int status = 0;
    for (size_t step = o.min_bytes;;) {
        size_t bytes = step / unit * unit;
        struct shape s = shape_of(o.op, bytes, esz);
        for (int it = 0; it < o.warmup; it++)
            check_mpi(run(o.op, &s, o.dtype, sbuf, rbuf), opname);
        double wrong = o.check ? check(o.op, &s, o.dtype, sbuf, rbuf) : 0;
        check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        double t0 = MPI_Wtime();
        for (int it = 0; it < o.iters; it++)
            check_mpi(run(o.op, &s, o.dtype, sbuf, rbuf), opname);
        double us = (MPI_Wtime() - t0) * 1e6 / o.iters, max_us = 0, total_wrong = 0;
        check_mpi(MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD),
                  "MPI_Reduce");
        check_mpi(MPI_Reduce(&wrong, &total_wrong, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD),
                  "MPI_Reduce");
        if (rank == 0) {
            double algbw = max_us > 0 ? (double)bytes / max_us / 1e3 : 0;
            if (o.csv)
                printf("%s,%d,%s,%zu,%zu,%s,%.3f,%.3f,%.3f,%.0f\n", opname, world, impl, bytes,
                       s.count, dt_names[o.dtype], max_us, algbw, algbw * busfactor,
                       total_wrong);
            else
                printf("  %12zu %12zu %9s %10.2f %10.3f %10.3f %7.0f\n", bytes, s.count,
                       dt_names[o.dtype], max_us, algbw, algbw * busfactor, total_wrong);
            fflush(stdout);
            if (total_wrong > 0)
                status = 1;
        }
        if (step >= o.max_bytes)
            break;
        size_t next = (size_t)((double)(step ? step : 1) * o.factor);
        step = next > o.max_bytes ? o.max_bytes : next;
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return status;
}
