/* The trainer: linear regression trained data-parallel over mesh axis
 * "data" and tensor-parallel over "model", on synthetic data held as global
 * arrays.
 *
 *   shmesh-run -n 4 -- build/examples/shmesh-train [steps]
 *   shmesh-run -n 2 --devices-per-rank 2 -- build/examples/shmesh-train
 *
 * The job's devices form a mesh (data, model) of (devices / 2, 2).  The
 * inputs X (N x F) are sharded P('data', 'model'): each device holds a block
 * of rows and of features; the targets y (N) P('data'); the weights w (F)
 * P('model'), replicated over "data".  Each step, on every device:
 *   partial = X_blk w_blk               its features' share of the prediction
 *   pred    = psum(partial, "model")    the whole prediction of its rows
 *   err     = pred - y_blk
 *   loss    = psum(sum(err^2), "data") / N
 *   grad    = psum(X_blk^T err, "data") * 2 / N
 *   w_blk  -= lr * grad
 * Rank 0 prints the loss every few steps; it falls towards the noise's
 * variance.  At the end the weights are gathered and compared with the
 * ones the data was made from. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

#define N 256 /* samples */
#define F 16  /* features */
#define MAXLOCAL 64

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0) {                                                                         \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", shmesh_rank(ctx), #call,           \
                    shmesh_strerror(rc_), shmesh_last_error(ctx));                             \
            shmesh_abort(ctx, 1, "shmesh-train: a call failed");                               \
        }                                                                                      \
    } while (0)

/* Deterministic data: any device computes any element from its index. */
static double hash01(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    x ^= x >> 31;
    return (double)(x >> 11) / 9007199254740992.0;
}
static double x_at(int i, int j) { return 2.0 * hash01((uint64_t)i * F + (uint64_t)j) - 1.0; }
static double w_true(int j) { return (double)(j % 5) - 2.0 + 0.25 * j / F; }
static double y_at(int i)
{
    double s = 0.1 * (2.0 * hash01(1000003u + (uint64_t)i) - 1.0); /* noise */
    for (int j = 0; j < F; j++)
        s += x_at(i, j) * w_true(j);
    return s;
}

/* Callbacks filling a shard from its block of the global array. */
static int fill_x(void *arg, const shmesh_shard *sh)
{
    (void)arg;
    const shmesh_index *ix = &sh->index;
    float *p = sh->data.data;
    for (int64_t i = ix->start[0]; i < ix->stop[0]; i++)
        for (int64_t j = ix->start[1]; j < ix->stop[1]; j++)
            *p++ = (float)x_at((int)i, (int)j);
    return 0;
}
static int fill_y(void *arg, const shmesh_shard *sh)
{
    (void)arg;
    float *p = sh->data.data;
    for (int64_t i = sh->index.start[0]; i < sh->index.stop[0]; i++)
        *p++ = (float)y_at((int)i);
    return 0;
}
static int fill_zero(void *arg, const shmesh_shard *sh)
{
    (void)arg;
    memset(sh->data.data, 0, (size_t)(sh->index.stop[0] - sh->index.start[0]) * sizeof(float));
    return 0;
}

static shmesh_sharding *sharding(shmesh_ctx *ctx, shmesh_mesh *m, const char *text)
{
    shmesh_pspec spec;
    shmesh_sharding *s = NULL;
    if (shmesh_pspec_parse(text, &spec) || shmesh_sharding_create(m, &spec, &s)) {
        fprintf(stderr, "rank %d: sharding %s: %s\n", shmesh_rank(ctx), text,
                shmesh_last_error(NULL)[0] ? shmesh_last_error(NULL) : shmesh_last_error(ctx));
        shmesh_abort(ctx, 1, "shmesh-train: bad sharding");
    }
    return s;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    if (steps < 1) {
        fprintf(stderr, "usage: %s [steps >= 1]\n", argv[0]);
        return 2;
    }
    shmesh_ctx *ctx = NULL;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int devices = shmesh_device_count(ctx), rank = shmesh_rank(ctx);
    if (devices % 2 || N % (devices / 2) || devices / 2 > MAXLOCAL) {
        if (rank == 0)
            fprintf(stderr, "shmesh-train: needs an even number of devices dividing %d, got %d\n",
                    2 * N, devices);
        shmesh_finalize(ctx);
        return 2;
    }
    const char *names[] = {"data", "model"};
    int sizes[] = {devices / 2, 2};
    shmesh_mesh *mesh;
    CHECK(shmesh_mesh_create(ctx, 2, names, sizes, NULL, &mesh));
    CHECK(shmesh_mesh_push(mesh)); /* `with mesh:` — NULL below means this mesh */

    shmesh_sharding *sx = sharding(ctx, NULL, "data,model"), *sy = sharding(ctx, NULL, "data"),
                    *sw = sharding(ctx, NULL, "model");
    shmesh_global_array *X, *Y, *W;
    CHECK(shmesh_global_array_from_callback(sx, SHMESH_FLOAT32, 2, (int64_t[]){N, F}, fill_x,
                                            NULL, &X));
    CHECK(shmesh_global_array_from_callback(sy, SHMESH_FLOAT32, 1, (int64_t[]){N}, fill_y, NULL,
                                            &Y));
    CHECK(shmesh_global_array_from_callback(sw, SHMESH_FLOAT32, 1, (int64_t[]){F}, fill_zero,
                                            NULL, &W));
    const shmesh_shard *xs, *ys, *ws;
    int nl = shmesh_global_array_local_shards(X, &xs);
    shmesh_global_array_local_shards(Y, &ys);
    shmesh_global_array_local_shards(W, &ws);
    int rows = (int)xs[0].data.shape[0], cols = (int)xs[0].data.shape[1];
    if (rank == 0)
        printf("shmesh-train: %d ranks x %d devices, mesh (data=%d, model=2); X %dx%d sharded "
               "P('data', 'model'): %dx%d blocks\n",
               shmesh_world_size(ctx), nl, devices / 2, N, F, rows, cols);

    /* Per local device: partial predictions, errors, gradients, losses. */
    float part[MAXLOCAL][N], pred[MAXLOCAL][N], grad[MAXLOCAL][F], gsum[MAXLOCAL][F];
    float sq[MAXLOCAL], loss[MAXLOCAL];
    shmesh_array a_part[MAXLOCAL], a_pred[MAXLOCAL], a_grad[MAXLOCAL], a_gsum[MAXLOCAL],
        a_sq[MAXLOCAL], a_loss[MAXLOCAL];
    for (int l = 0; l < nl; l++) {
        a_part[l] = (shmesh_array){.data = part[l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {rows}};
        a_pred[l] = (shmesh_array){.data = pred[l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {rows}};
        a_grad[l] = (shmesh_array){.data = grad[l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {cols}};
        a_gsum[l] = (shmesh_array){.data = gsum[l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {cols}};
        a_sq[l] = (shmesh_array){.data = &sq[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
        a_loss[l] = (shmesh_array){.data = &loss[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
    }
    const float lr = 0.1f;
    for (int step = 0; step <= steps; step++) {
        for (int l = 0; l < nl; l++) {
            const float *x = xs[l].data.data, *w = ws[l].data.data;
            for (int i = 0; i < rows; i++) {
                float s = 0;
                for (int j = 0; j < cols; j++)
                    s += x[i * cols + j] * w[j];
                part[l][i] = s;
            }
        }
        CHECK(shmesh_psum(NULL, "model", NULL, a_part, a_pred));
        for (int l = 0; l < nl; l++) {
            const float *x = xs[l].data.data, *y = ys[l].data.data;
            sq[l] = 0;
            memset(grad[l], 0, sizeof grad[l]);
            for (int i = 0; i < rows; i++) {
                float e = pred[l][i] - y[i];
                sq[l] += e * e;
                for (int j = 0; j < cols; j++)
                    grad[l][j] += x[i * cols + j] * e;
            }
        }
        CHECK(shmesh_psum(NULL, "data", NULL, a_sq, a_loss));
        CHECK(shmesh_psum(NULL, "data", NULL, a_grad, a_gsum));
        for (int l = 0; l < nl; l++) {
            float *w = ws[l].data.data;
            for (int j = 0; j < cols; j++)
                w[j] -= lr * 2.0f / N * gsum[l][j];
        }
        if (rank == 0 && (step % (steps / 10 ? steps / 10 : 1) == 0 || step == steps))
            printf("step %4d  loss %.6f\n", step, loss[0] / N);
    }

    /* The weights, gathered on rank 0, against the ones that made the data. */
    float w_all[F];
    CHECK(shmesh_global_array_gather(W, 0, w_all));
    if (rank == 0) {
        double worst = 0;
        for (int j = 0; j < F; j++)
            worst = fmax(worst, fabs(w_all[j] - w_true(j)));
        printf("largest weight error %.4f against the weights the data was made from\n", worst);
    }
    shmesh_global_array_destroy(W);
    shmesh_global_array_destroy(Y);
    shmesh_global_array_destroy(X);
    shmesh_sharding_destroy(sw);
    shmesh_sharding_destroy(sy);
    shmesh_sharding_destroy(sx);
    CHECK(shmesh_mesh_pop(mesh));
    shmesh_mesh_destroy(mesh);
    return shmesh_finalize(ctx) ? 1 : 0;
}
