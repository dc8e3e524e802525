/* shmesh-test-top: a job for shmesh-top to look at (tests/test_top.c), under
 * shmesh-run -n 4.  After shmesh_init every rank creates one mesh ("i" over
 * the 4 ranks) and makes PSUMS psums of one float; then:
 *
 *   sleep   rank 2 sleeps SECS (default 60) outside any call, and every
 *           rank makes one more psum: ranks 0, 1 and 3 wait in it for
 *           rank 2, whose last call is the PSUMS-th psum
 *   stuck   rank 3 sleeps SECS without the next psum, then exits without
 *           finalizing: ranks 0-2 are stuck in that psum
 *   effect  every rank registers the ORDERED effect "log" and dispatches a
 *           callback placed on device 0 whose part (on rank 0) sleeps SECS;
 *           then each waits for the callback's token: ranks 1-3's
 *           dispatch queues wait for rank 0 to pass point 1 of "log", and
 *           every rank's main thread waits for a token
 *
 * Each rank prints "rank R: ready" before the sleep and flushes, so the test
 * knows the job got that far.  Exit status 0, 1 when a call failed (a job
 * ended by the test's SIGTERM fails its calls), 2 for bad usage. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shmesh.h"

#define PSUMS 3

static shmesh_ctx *ctx;
static shmesh_mesh *mesh;
static int rank;

static void check(int rc, const char *what)
{
    if (!rc)
        return;
    printf("rank %d: %s: %s: %s\n", rank, what, shmesh_error_name(rc), shmesh_last_error(ctx));
    fflush(stdout);
    exit(1);
}

static void psum(void)
{
    float x = (float)rank, y = 0;
    shmesh_array in = {.data = &x, .dtype = SHMESH_FLOAT32, .ndim = 0};
    shmesh_array out = {.data = &y, .dtype = SHMESH_FLOAT32, .ndim = 0};
    check(shmesh_psum(mesh, "i", NULL, &in, &out), "psum");
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void sleep_cb(void *arg, int device)
{
    (void)device;
    sleep_s(*(const double *)arg);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 ||
        (strcmp(argv[1], "sleep") && strcmp(argv[1], "stuck") && strcmp(argv[1], "effect"))) {
        fprintf(stderr, "usage: shmesh-test-top sleep|stuck|effect [SECS]\n");
        return 2;
    }
    static double secs;
    secs = argc > 2 ? atof(argv[2]) : 60;
    bool stuck = !strcmp(argv[1], "stuck");
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 2;
    }
    rank = shmesh_rank(ctx);
    int n = shmesh_world_size(ctx);
    const char *names[] = {"i"};
    check(shmesh_mesh_create(ctx, 1, names, &n, NULL, &mesh), "mesh_create");
    for (int i = 0; i < PSUMS; i++)
        psum();
    if (!strcmp(argv[1], "effect")) {
        shmesh_effect *e;
        shmesh_token t;
        check(shmesh_effect_create(ctx, "log", SHMESH_EFFECT_ORDERED, &e), "effect_create");
        check(shmesh_callback(ctx, e, 0, sleep_cb, &secs, &t), "callback");
        printf("rank %d: ready\n", rank);
        fflush(stdout);
        check(shmesh_token_wait(t), "token_wait");
        check(shmesh_finalize(ctx), "finalize");
        return 0;
    }
    printf("rank %d: ready\n", rank);
    fflush(stdout);
    int sleeper = stuck ? 3 : 2;
    if (rank == sleeper) {
        sleep_s(secs);
        if (stuck)
            return 0; /* without the psum the others wait in, nor finalize */
    }
    psum();
    check(shmesh_finalize(ctx), "finalize");
    return 0;
}
