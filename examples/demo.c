/* The demo job: each rank integrates its share of 4/(1+x^2) over [0,1],
 * shmesh_world_sum adds the shares, and rank 0 prints pi.
 *
 *   shmesh-run -n 4 -- build/examples/shmesh-demo [intervals]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "shmesh.h"

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0) {                                                                         \
            fprintf(stderr, "%s failed: %s: %s\n", #call, shmesh_strerror(rc_),                \
                    shmesh_last_error(ctx));                                                   \
            shmesh_finalize(ctx);                                                              \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv)
{
    long intervals = argc > 1 ? atol(argv[1]) : 10000000;
    if (intervals < 1) {
        fprintf(stderr, "usage: %s [intervals >= 1]\n", argv[0]);
        return 2;
    }
    shmesh_ctx *ctx = NULL;
    CHECK(shmesh_init(&ctx));
    int rank = shmesh_rank(ctx), world = shmesh_world_size(ctx);

    /* Rank r takes intervals r, r+world, r+2*world, ... */
    double h = 1.0 / (double)intervals, part = 0.0;
    for (long i = rank; i < intervals; i += world) {
        double x = h * ((double)i + 0.5);
        part += 4.0 / (1.0 + x * x);
    }
    double sums[2] = {part * h, 1.0}; /* [pi, number of ranks] */
    CHECK(shmesh_world_sum(ctx, sums, 2, SHMESH_FLOAT64));

    /* A vector sum too: element i is the sum over ranks of rank * (i + 1). */
    long long v[4];
    for (int i = 0; i < 4; i++)
        v[i] = (long long)rank * (i + 1);
    CHECK(shmesh_world_sum(ctx, v, 4, SHMESH_INT64));
    CHECK(shmesh_barrier(ctx));

    if (rank == 0) {
        printf("shmesh demo: %d ranks (%s notifier), %ld intervals\n", world,
               shmesh_notifier(ctx), intervals);
        printf("  pi ~= %.15f  (error %.1e)\n", sums[0], fabs(sums[0] - M_PI));
        printf("  ranks counted by world_sum: %.0f\n", sums[1]);
        printf("  sum over ranks of rank*[1 2 3 4] = [%lld %lld %lld %lld]\n", v[0], v[1], v[2],
               v[3]);
    }
    int rc = shmesh_finalize(ctx);
    if (rc < 0) {
        fprintf(stderr, "shmesh_finalize: %s\n", shmesh_strerror(rc));
        return 1;
    }
    return 0;
}
