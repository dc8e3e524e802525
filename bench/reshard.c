/* reshard: the time of shmesh_global_array_reshard between two partition
 * specs on a 2 x 4 mesh ("x", "y") of the job's devices, the most bytes a
 * rank receives (shmesh_traffic_get: the parts of its new blocks that its
 * devices do not hold already, which tests/helpers/garray_prog.c checks
 * exactly), and, for comparison, the time of an all_to_all moving as many
 * bytes per rank.
 *
 *   shmesh-run -n 8 -- build/bench/reshard [MIB] [--donate] [FROM TO]...
 *
 * MIB: the float32 array's size (default 64), a 2-D array of 1024 rows.
 * Each FROM TO pair is two specs in shmesh_pspec_parse's text ("x,y",
 * "y,x", "x", "" for P()); default: every pair of P('x','y'), P('y','x'),
 * P('x') and P().  Each reshard runs once, then 7 times; rank 0 prints
 * the median of the 7 and the first's time (its new shards' memory may be
 * fresh: SHMESH_ARRAY_CACHE=0 makes every reshard's so), the most any
 * rank received, and the all_to_all's median.  --donate: each pair also
 * times, on a fresh copy of the array per call (made before the clock
 * starts), shmesh_global_array_reshard_donate, whose local part moves its
 * pages where it can instead of copying them, and beside it (alternating)
 * shmesh_global_array_reshard then the copy's destroy: medians of 7.
 * Exit 1 when a reshard gives wrong data. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "shmesh.h"

#define fail(ctx, what, rc) bench_fail("reshard", ctx, what, rc)
#define ROWS 1024

static int64_t cols;

/* Element (r, c) of the global array: its row-major index, as float. */
static int fill(void *arg, const shmesh_shard *sh)
{
    (void)arg;
    float *p = sh->data.data;
    for (int64_t r = sh->index.start[0]; r < sh->index.stop[0]; r++)
        for (int64_t c = sh->index.start[1]; c < sh->index.stop[1]; c++)
            *p++ = (float)(r * cols + c);
    return 0;
}

static bool right(const shmesh_global_array *a)
{
    const shmesh_shard *ls;
    int n = shmesh_global_array_local_shards(a, &ls);
    for (int l = 0; l < n; l++) {
        const float *p = ls[l].data.data;
        for (int64_t r = ls[l].index.start[0]; r < ls[l].index.stop[0]; r++)
            for (int64_t c = ls[l].index.start[1]; c < ls[l].index.stop[1]; c++)
                if (*p++ != (float)(r * cols + c))
                    return false;
    }
    return true;
}

#define ROUNDS 7

/* The most any rank has received since `since` (every rank calls). */
static int64_t most_received(shmesh_ctx *ctx, const shmesh_traffic *since)
{
    shmesh_traffic now;
    shmesh_traffic_get(ctx, &now);
    int world = shmesh_world_size(ctx);
    int64_t *v = calloc((size_t)world, sizeof *v), most = 0;
    if (!v)
        fail(ctx, "calloc", SHMESH_ERR_NOMEM); /* ends the job */
    v[shmesh_rank(ctx)] = (int64_t)(now.received - since->received);
    shmesh_world_sum(ctx, v, (size_t)world, SHMESH_INT64);
    for (int r = 0; r < world; r++)
        most = v[r] > most ? v[r] : most;
    free(v);
    return most;
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64;
    bool donate = argc > 2 && !strcmp(argv[2], "--donate");
    int first_pair = donate ? 3 : 2;
    shmesh_ctx *ctx;
    if (mib < 1 || shmesh_init(&ctx)) {
        fprintf(stderr, "usage: shmesh-run -n 8 -- %s [MIB] [--donate] [FROM TO]... (%s)\n", argv[0],
                shmesh_last_error(NULL));
        return 2;
    }
    int rc, me = shmesh_rank(ctx), devices = shmesh_device_count(ctx);
    if (devices != 8)
        return fail(ctx, "the 2 x 4 mesh needs 8 devices (shmesh-run -n 8)", SHMESH_ERR_INVALID);
    const char *names[] = {"x", "y"};
    int sizes[] = {2, 4};
    shmesh_mesh *m;
    if ((rc = shmesh_mesh_create(ctx, 2, names, sizes, NULL, &m)))
        return fail(ctx, "shmesh_mesh_create", rc);
    cols = mib * (1 << 20) / (int64_t)sizeof(float) / ROWS;
    int64_t shape[2] = {ROWS, cols};
    static const char *const all[] = {"x,y", "y,x", "x", ""};
    const char *pairs[64][2];
    int npairs = 0;
    if (argc > first_pair + 1) {
        for (int a = first_pair; a + 1 < argc && npairs < 64; a += 2, npairs++) {
            pairs[npairs][0] = argv[a];
            pairs[npairs][1] = argv[a + 1];
        }
    } else {
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                if (i != j) {
                    pairs[npairs][0] = all[i];
                    pairs[npairs++][1] = all[j];
                }
    }
    int bad = 0;
    if (me == 0)
        printf("# reshard of a %ld MiB float32 array [%d, %" PRId64 "] on Mesh('x': 2, 'y': 4), "
               "%d ranks\n# from -> to: time (median of 7; the first call's), most received by a "
               "rank; an all_to_all of as many bytes per rank\n",
               mib, ROWS, cols, shmesh_world_size(ctx));
    for (int i = 0; i < npairs; i++) {
        shmesh_pspec ps[2];
        shmesh_sharding *s[2];
        for (int k = 0; k < 2; k++)
            if ((rc = shmesh_pspec_parse(pairs[i][k], &ps[k])) ||
                (rc = shmesh_sharding_create(m, &ps[k], &s[k])))
                return fail(ctx, "a partition spec", rc);
        shmesh_global_array *a, *b;
        if ((rc = shmesh_global_array_from_callback(s[0], SHMESH_FLOAT32, 2, shape, fill, NULL,
                                                    &a)))
            return fail(ctx, "shmesh_global_array_from_callback", rc);
        shmesh_traffic t0;
        shmesh_traffic_get(ctx, &t0);
        shmesh_barrier(ctx);
        double first = bench_now_us();
        if ((rc = shmesh_global_array_reshard(a, s[1], &b)))
            return fail(ctx, "shmesh_global_array_reshard", rc);
        first = bench_now_us() - first;
        int64_t moved = most_received(ctx, &t0);
        bad |= !right(b);
        shmesh_global_array_destroy(b);
        double t[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            shmesh_barrier(ctx);
            double u = bench_now_us();
            if ((rc = shmesh_global_array_reshard(a, s[1], &b)))
                return fail(ctx, "shmesh_global_array_reshard", rc);
            t[r] = bench_now_us() - u;
            shmesh_global_array_destroy(b);
        }
        /* An all_to_all whose every rank receives `moved` bytes: a block
         * of moved / (n - 1) from each of the n - 1 others. */
        int n = shmesh_world_size(ctx);
        int64_t blk = n > 1 ? moved / (n - 1) / (int64_t)sizeof(float) : 0;
        double ta[ROUNDS] = {0};
        if (blk > 0) {
            float *in = calloc((size_t)(blk * n), sizeof *in);
            float *out = calloc((size_t)(blk * n), sizeof *out);
            if (!in || !out)
                return fail(ctx, "calloc", SHMESH_ERR_NOMEM);
            const char *axes = "x,y";
            shmesh_array ai = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {blk * n}};
            shmesh_array ao = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {blk * n}};
            shmesh_all_to_all(m, axes, NULL, 0, 0, true, &ai, &ao);
            for (int r = 0; r < ROUNDS; r++) {
                shmesh_barrier(ctx);
                double u = bench_now_us();
                if ((rc = shmesh_all_to_all(m, axes, NULL, 0, 0, true, &ai, &ao)))
                    return fail(ctx, "shmesh_all_to_all", rc);
                ta[r] = bench_now_us() - u;
            }
            free(in);
            free(out);
        }
        double td[ROUNDS] = {0}, tc[ROUNDS] = {0};
        for (int r = 0; donate && r < 2 * ROUNDS; r++) {
            bool give = (r % 2) == ((r / 2) % 2); /* alternating which goes first */
            shmesh_global_array *c;
            if ((rc = shmesh_global_array_from_callback(s[0], SHMESH_FLOAT32, 2, shape, fill,
                                                        NULL, &c)))
                return fail(ctx, "shmesh_global_array_from_callback", rc);
            shmesh_barrier(ctx);
            double u = bench_now_us();
            if (give)
                rc = shmesh_global_array_reshard_donate(c, s[1], &b);
            else if (!(rc = shmesh_global_array_reshard(c, s[1], &b)))
                shmesh_global_array_destroy(c);
            if (rc)
                return fail(ctx, "a reshard of a fresh copy", rc);
            (give ? td : tc)[r / 2] = bench_now_us() - u;
            bad |= !right(b);
            shmesh_global_array_destroy(b);
        }
        double mt = median(t, ROUNDS), ma = median(ta, ROUNDS), md = median(td, ROUNDS);
        char donated[128] = "";
        if (donate)
            snprintf(donated, sizeof donated, "; fresh copy: donated %.1f ms (%.2fx), kept %.1f ms",
                     md / 1e3, ma > 0 ? md / ma : 0.0, median(tc, ROUNDS) / 1e3);
        if (me == 0)
            printf("P(%s) -> P(%s): %.1f ms (first %.1f), most received %" PRId64
                   " B (%.1f MiB); all_to_all %.1f ms (%.2fx)%s%s\n",
                   pairs[i][0], pairs[i][1], mt / 1e3, first / 1e3, moved,
                   (double)moved / (1 << 20),
                   ma / 1e3, ma > 0 ? mt / ma : 0.0, donated,
                   bad ? " WRONG" : "");
        shmesh_global_array_destroy(a);
        shmesh_sharding_destroy(s[0]);
        shmesh_sharding_destroy(s[1]);
    }
    shmesh_mesh_destroy(m);
    shmesh_finalize(ctx);
    return bad;
}
