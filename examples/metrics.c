/* Metrics: per-step logging from every rank through ordered effects, while
 * the collectives run asynchronously (docs/effects.md walks through it).
 *
 *   shmesh-run -n 4 -- build/examples/metrics [steps]
 *   shmesh-run -n 2 --devices-per-rank 2 -- build/examples/metrics
 *
 * A data-parallel toy: every device holds a parameter vector w (P floats,
 * the same on every device) and, each step, a batch of targets t of its
 * own; its loss is mean((w - t)^2) / 2, its gradient w - t, and w moves by
 * the mean gradient (from w = 0, every loss falls from about 0.17).  Each
 * step, on every rank:
 *   1. compute the gradient and dispatch psum_async of it (the collective
 *      runs on the progress thread from here on);
 *   2. meanwhile compute the loss and the next step's batch;
 *   3. dispatch a callback on the effect "rank-loss" (ORDERED_SHARDABLE,
 *      placed on every device): each device prints its own loss line;
 *   4. dispatch psum_async of the losses, then a callback on the effect
 *      "mean-loss" (ORDERED, placed on device 0): rank 0 alone prints the
 *      mean, read from the psum's output, which the dispatcher has written by
 *      the time the callback runs;
 *   5. wait for the gradient's token and take the step.
 * Nothing is printed by the main loop: every line comes from a callback, on
 * a progress thread, yet the lines come out in step order.  All of step k's
 * rank lines appear before any line of step k+1 (the shardable effect's
 * rule, across processes); the mean line of step k comes after all of them,
 * because on rank 0 it follows the loss psum in the dispatch queue, which
 * no rank joins before its own step-k line is out.  Inside one step the
 * rank lines come in any order.  shmesh_effects_barrier then waits for
 * every effect, as jax.barrier() does, before the summary. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

#define P (1 << 16) /* parameters: a 256 KiB gradient */
#define MAXLOCAL 64

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0) {                                                                         \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", shmesh_rank(ctx), #call,           \
                    shmesh_strerror(rc_), shmesh_last_error(ctx));                             \
            shmesh_abort(ctx, 1, "metrics: a call failed");                                    \
        }                                                                                      \
    } while (0)

/* What one step's callbacks print.  The record outlives the dispatch: the
 * callbacks run later, on the progress thread, so each step has its own. */
struct step_log {
    int step, rank, devices, nlocal;
    int ids[MAXLOCAL];       /* this rank's devices, mesh order */
    float loss[MAXLOCAL];    /* each local device's loss (psum input) */
    float sum[MAXLOCAL];     /* psum of the losses over "data" (its output) */
};

/* A deterministic value in [-1, 1) from its coordinates. */
static float noise(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x9e3779b97f4a7c15u ^ b * 0xbf58476d1ce4e5b9u ^ c * 0x94d049bb133111ebu;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    x ^= x >> 31;
    return (float)((double)(x >> 11) / 4503599627370496.0 - 1.0);
}

/* Device d's batch for a step: a centre shared by every device, an offset
 * of the device's own and a little noise of the step's. */
static void make_batch(float *t, int device, int step)
{
    for (int i = 0; i < P; i++)
        t[i] = noise(1, (uint64_t)i, 0) + 0.1f * noise(2, (uint64_t)device, (uint64_t)i) +
               0.05f * noise(3 + (uint64_t)step, (uint64_t)device, (uint64_t)i);
}

/* "rank-loss", on every device: this device's line of the step. */
static void log_rank(void *arg, int device)
{
    const struct step_log *s = arg;
    for (int l = 0; l < s->nlocal; l++)
        if (s->ids[l] == device) {
            if (s->nlocal == 1)
                printf("step %2d rank %d loss %.6f\n", s->step, s->rank, s->loss[l]);
            else
                printf("step %2d rank %d device %d loss %.6f\n", s->step, s->rank, device,
                       s->loss[l]);
        }
    /* Out before the callback returns: the effect's order is the order of
     * the writes only if each line is written when its part finishes. */
    fflush(stdout);
}

/* "mean-loss", on device 0 alone: the psum of the losses has run before
 * this callback in the dispatch queue, so sum[0] holds it. */
static void log_mean(void *arg, int device)
{
    const struct step_log *s = arg;
    (void)device;
    printf("step %2d: mean loss %.6f over %d devices\n", s->step, s->sum[0] / s->devices,
           s->devices);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    if (steps < 1 || steps > 100000) {
        fprintf(stderr, "usage: %s [steps, 1 to 100000]\n", argv[0]);
        return 2;
    }
    shmesh_ctx *ctx = NULL;
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    int devices = shmesh_device_count(ctx), rank = shmesh_rank(ctx);
    int nl = shmesh_local_device_count(ctx);
    if (nl > MAXLOCAL) {
        fprintf(stderr, "metrics: at most %d devices per rank, got %d\n", MAXLOCAL, nl);
        shmesh_finalize(ctx);
        return 2;
    }
    const char *names[] = {"data"};
    shmesh_mesh *mesh;
    CHECK(shmesh_mesh_create(ctx, 1, names, &devices, NULL, &mesh));
    int ids[MAXLOCAL];
    shmesh_mesh_local_devices(mesh, ids, MAXLOCAL);

    /* The effects, registered alike on every rank (collective). */
    shmesh_effect *rank_loss, *mean_loss;
    CHECK(shmesh_effect_create(ctx, "rank-loss", SHMESH_EFFECT_ORDERED_SHARDABLE, &rank_loss));
    CHECK(shmesh_effect_create(ctx, "mean-loss", SHMESH_EFFECT_ORDERED, &mean_loss));

    float *w = calloc(P, sizeof *w);
    float *t = malloc(sizeof *t * P * (size_t)nl);
    float *g = malloc(sizeof *g * P * (size_t)nl);
    float *gsum = malloc(sizeof *gsum * P * (size_t)nl);
    struct step_log *log = calloc((size_t)steps, sizeof *log);
    if (!w || !t || !g || !gsum || !log) {
        fprintf(stderr, "metrics: out of memory\n");
        shmesh_abort(ctx, 1, "metrics: out of memory");
    }
    shmesh_array a_g[MAXLOCAL], a_gsum[MAXLOCAL];
    for (int l = 0; l < nl; l++) {
        make_batch(t + (size_t)l * P, ids[l], 0);
        a_g[l] = (shmesh_array){.data = g + (size_t)l * P, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {P}};
        a_gsum[l] = (shmesh_array){.data = gsum + (size_t)l * P, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {P}};
    }
    if (rank == 0) {
        printf("metrics: %d ranks x %d devices, %d parameters, %d steps; psum_async of the "
               "gradient, losses logged through ordered effects\n",
               shmesh_world_size(ctx), nl, P, steps);
        fflush(stdout); /* before the callbacks' lines */
    }

    const float lr = 0.2f;
    for (int step = 0; step < steps; step++) {
        struct step_log *s = &log[step];
        *s = (struct step_log){.step = step, .rank = rank, .devices = devices, .nlocal = nl};
        memcpy(s->ids, ids, sizeof ids);

        /* 1. The gradient, reduced in the background: g and gsum belong to
         * the library until the token is done. */
        for (int l = 0; l < nl; l++)
            for (int i = 0; i < P; i++)
                g[(size_t)l * P + i] = w[i] - t[(size_t)l * P + i];
        shmesh_token grad_done;
        CHECK(shmesh_psum_async(mesh, "data", NULL, a_g, a_gsum, &grad_done));

        /* 2. Meanwhile: the loss of this step and the batch of the next. */
        for (int l = 0; l < nl; l++) {
            float *tl = t + (size_t)l * P;
            double sq = 0;
            for (int i = 0; i < P; i++)
                sq += (double)(w[i] - tl[i]) * (w[i] - tl[i]);
            s->loss[l] = (float)(sq / P / 2);
            make_batch(tl, ids[l], step + 1);
        }

        /* 3. Every device's line: point `step` of the shardable effect. */
        CHECK(shmesh_callback(ctx, rank_loss, SHMESH_PLACE_ALL, log_rank, s, NULL));

        /* 4. The mean, once, on device 0, after the losses' psum. */
        shmesh_array a_loss[MAXLOCAL], a_sum[MAXLOCAL];
        for (int l = 0; l < nl; l++) {
            a_loss[l] = (shmesh_array){.data = &s->loss[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
            a_sum[l] = (shmesh_array){.data = &s->sum[l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
        }
        shmesh_token sum_done; /* not waited for: the runtime token covers it */
        CHECK(shmesh_psum_async(mesh, "data", NULL, a_loss, a_sum, &sum_done));
        CHECK(shmesh_callback(ctx, mean_loss, 0, log_mean, s, NULL));

        /* 5. The step needs the reduced gradient: the only wait. */
        CHECK(shmesh_token_wait(grad_done));
        for (int i = 0; i < P; i++)
            w[i] -= lr * gsum[i] / (float)devices;
    }

    /* jax.barrier(): every effect's last program point, on every rank. */
    CHECK(shmesh_effects_barrier(ctx));
    if (rank == 0)
        printf("metrics: %d steps; the mean loss went from %.6f to %.6f\n", steps,
               log[0].sum[0] / devices, log[steps - 1].sum[0] / devices);
    free(log);
    free(gsum);
    free(g);
    free(t);
    free(w);
    shmesh_mesh_destroy(mesh);
    return shmesh_finalize(ctx) ? 1 : 0;
}
