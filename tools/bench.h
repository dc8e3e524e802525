/* shmesh-bench internals: the operations it times (bench_ops.c) and the
 * driver that sizes, times and prints them (bench.c). */
#ifndef SHMESH_BENCH_H
#define SHMESH_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/optable.h"
#include "shmesh.h"

/* The ops the bench times: the lines of the op table (shm/optable.h)
 * whose bus column is not NONE, in its order, as BENCH_<ID>. */
#define BENCH_TIMED_NONE(...)
#define BENCH_TIMED_ZERO(...) __VA_ARGS__
#define BENCH_TIMED_ALLREDUCE(...) __VA_ARGS__
#define BENCH_TIMED_SPREAD(...) __VA_ARGS__
#define BENCH_TIMED_ONE(...) __VA_ARGS__

enum bench_op {
#define BENCH_OP_ID(ID, name, scope, bus, ...) BENCH_TIMED_##bus(BENCH_##ID, )
    SHMESH_OPS(BENCH_OP_ID)
#undef BENCH_OP_ID
    BENCH_OP_COUNT
};

/* The name given to -o and printed in the output. */
const char *bench_op_name(enum bench_op op);
/* BENCH_OP_COUNT when the name is unknown. */
enum bench_op bench_op_parse(const char *name);
/* Whether the op accepts the dtype (the op table's bool_in column). */
bool bench_op_takes(enum bench_op op, shmesh_dtype dt);
/* Whether it moves data (not barrier), and whether its result replaces its
 * input (world_sum: no output buffer). */
bool bench_op_has_data(enum bench_op op);
bool bench_op_in_place(enum bench_op op);
/* The names, "barrier, world_sum, ... or pbroadcast" (last: " or "; only
 * those refusing bool: refusing_bool), in buf[len] (cut, always terminated
 * when len > 0); the length of the whole list. */
size_t bench_op_list(char *buf, size_t len, bool refusing_bool, const char *last);
/* busbw / algbw for n ranks, as nccl-tests computes it (the bus column). */
double bench_bus_factor(enum bench_op op, int n);
/* The bus column as written there, lower case: "allreduce", "spread", ... */
const char *bench_op_bus_name(enum bench_op op);

/* One op on this rank, at the size last given to bench_size. */
struct bench {
    enum bench_op op;
    shmesh_ctx *ctx;
    shmesh_mesh *mesh; /* one axis "i" over every rank */
    int rank, n;
    shmesh_dtype dtype; /* of the input; the output's too except psum of bool (int32) */
    void *in, *out;     /* each at least cap bytes */
    size_t cap;
    /* Set by bench_size: */
    size_t requested; /* what it was asked for */
    size_t bytes, count; /* reported: the larger buffer per rank, its elements */
    size_t in_count, out_count;
    shmesh_array a_in, a_out;
    shmesh_array idx[4]; /* ragged: input_offsets, send_sizes, output_offsets, recv_sizes */
    int64_t *idx_data;   /* 4 x n */
    int (*perm)[2];      /* ppermute: the ring i -> i+1 mod n */
};

/* Prepares b (op, ctx, mesh, rank, n, dtype, in, out, cap set by the caller)
 * for its first size: the ragged and ppermute arguments.  0, or -1 when out
 * of memory. */
int bench_setup(struct bench *b);
void bench_teardown(struct bench *b);
/* The size to run for `requested` bytes: see docs/shmesh-bench.md.  Never
 * more than requested (so never more than cap when requested <= cap). */
void bench_size(struct bench *b, size_t requested);
/* One call of the op; its return code. */
int bench_run(struct bench *b);
/* Inputs with the check pattern, outputs with junk. */
void bench_fill(struct bench *b);
/* Output elements that differ from what the pattern predicts. */
uint64_t bench_count_wrong(const struct bench *b);

#endif
