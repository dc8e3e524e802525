/* Batched axes: a program written for a mesh of 8 devices, run by 2
 * processes.  The mesh has the axis x = 2 over the processes, and a batched
 * axis b = 4 inside each of them (shmesh_mesh_batch; in JAX,
 * vmap(axis_name="b", axis_size=4) inside shard_map): mesh position
 * (x, b) = (p, k) is position k of the batch that rank p holds in one
 * array, its batch dimension first (in.bdim = 0).
 *
 *   shmesh-run -n 2 -- build/examples/batched
 *
 * Every position's value is its global index 4p + k, so rank p holds
 * [4p, 4p+1, 4p+2, 4p+3].  Each position then computes, as it would with
 * one device of its own:
 *   psum over (x, b)        the sum of all eight values: 28
 *   axis_index over (x, b)  its global index again
 *   all_gather over b       the four values of its row of x
 * and gathers each result over (x, b), so that rank 0, whose positions
 * then hold every position's results, prints them, one entry (or row) per
 * position. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "shmesh.h"

#define B 4 /* positions of the batched axis in each process */
#define N 8 /* positions in the mesh: 2 processes times B */

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0) {                                                                         \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", shmesh_rank(ctx), #call,           \
                    shmesh_strerror(rc_), explain(ctx));                                       \
            shmesh_abort(ctx, 1, "batched: a call failed");                                    \
        }                                                                                      \
    } while (0)

/* The context's sentence for its last failure, else the calling thread's
 * (shmesh_init's, or a local function's that has no context). */
static const char *explain(const shmesh_ctx *ctx)
{
    const char *m = shmesh_last_error(ctx);
    return m && *m ? m : shmesh_last_error(NULL);
}

/* An int32 array of this process's B positions, the batch at dimension 0:
 * each position's value has shape `shape` (nd dimensions). */
static shmesh_array batch_of(int32_t *data, int nd, const int64_t *shape)
{
    shmesh_array a = {.data = data, .dtype = SHMESH_INT32, .ndim = nd + 1, .shape = {B}};
    for (int k = 0; k < nd; k++)
        a.shape[k + 1] = shape[k];
    return a;
}

static void print_row(const char *label, const int32_t *v, int n)
{
    printf("%-25s[", label);
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", (int)v[i]);
    printf("]\n");
}

int main(void)
{
    shmesh_ctx *ctx = NULL;
    CHECK(shmesh_init(&ctx));
    int rank = shmesh_rank(ctx);
    if (shmesh_world_size(ctx) != 2) {
        fprintf(stderr, "batched: run it as 2 processes (shmesh-run -n 2)\n");
        shmesh_finalize(ctx);
        return 2;
    }

    /* The mesh x = 2 over the processes, then b = 4 batched in each. */
    const char *names[] = {"x"};
    int sizes[] = {2};
    shmesh_mesh *procs, *mesh;
    CHECK(shmesh_mesh_create(ctx, 1, names, sizes, NULL, &procs));
    CHECK(shmesh_mesh_batch(procs, "b", B, &mesh));
    shmesh_mesh_destroy(procs);

    /* Each position's value (a scalar): its global index. */
    int32_t value[B];
    for (int k = 0; k < B; k++)
        value[k] = B * rank + k;
    shmesh_array in = batch_of(value, 0, NULL);

    int32_t sum[B], index[B], row[B][B];
    shmesh_array sum_a = batch_of(sum, 0, NULL), index_a = batch_of(index, 0, NULL);
    CHECK(shmesh_psum(mesh, "x,b", NULL, &in, &sum_a));
    CHECK(shmesh_axis_index_array(mesh, "x,b", &index_a));
    const int64_t four[] = {B};
    shmesh_array row_a = batch_of(&row[0][0], 1, four);
    CHECK(shmesh_all_gather(mesh, "b", NULL, 0, false, &in, &row_a));

    /* Every position's results, on every position: gathered over (x, b). */
    const int64_t eight[] = {N}, eight_by_four[] = {N, B};
    int32_t all_value[B][N], all_sum[B][N], all_index[B][N], all_row[B][N][B];
    shmesh_array out = batch_of(&all_value[0][0], 1, eight);
    CHECK(shmesh_all_gather(mesh, "x,b", NULL, 0, false, &in, &out));
    out = batch_of(&all_sum[0][0], 1, eight);
    CHECK(shmesh_all_gather(mesh, "x,b", NULL, 0, false, &sum_a, &out));
    out = batch_of(&all_index[0][0], 1, eight);
    CHECK(shmesh_all_gather(mesh, "x,b", NULL, 0, false, &index_a, &out));
    out = batch_of(&all_row[0][0][0], 2, eight_by_four);
    CHECK(shmesh_all_gather(mesh, "x,b", NULL, 0, false, &row_a, &out));

    if (rank == 0) {
        printf("batched: 2 processes, mesh x=2 over them and b=%d batched in each: %d "
               "positions\n", B, N);
        print_row("value (global index):", all_value[0], N);
        print_row("psum over (x, b):", all_sum[0], N);
        print_row("axis_index over (x, b):", all_index[0], N);
        printf("all_gather over b:\n");
        for (int q = 0; q < N; q++) {
            printf("%s[", q ? " " : "[");
            for (int j = 0; j < B; j++)
                printf("%s%d", j ? " " : "", (int)all_row[0][q][j]);
            printf("]%s\n", q == N - 1 ? "]" : "");
        }
    }
    shmesh_mesh_destroy(mesh);
    int rc = shmesh_finalize(ctx);
    if (rc < 0) {
        fprintf(stderr, "shmesh_finalize: %s\n", shmesh_strerror(rc));
        return 1;
    }
    return 0;
}
