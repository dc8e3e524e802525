/* shmesh-test-plan: calls that repeat their op's last call are prepared
 * from its plan (lib/front/plan.h); every change a plan must notice, made
 * between two calls of one op, gives the right result.  Under
 * shmesh-run -n 4: a mesh x=2, y=2.  Prints "rank R: CASE ok" per case,
 * "rank R: FAILED ..." for a wrong result, and "rank R: plans ok" at the
 * end; exit 0, or 1 when a case failed. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"

static shmesh_ctx *ctx;
static int rank, failed;

static void check(bool ok, const char *what, const char *detail)
{
    if (!ok) {
        failed = 1;
        printf("rank %d: FAILED %s: %s\n", rank, what, detail);
    }
}

static shmesh_array arr(void *data, shmesh_dtype dt, int64_t n)
{
    return (shmesh_array){.data = data, .dtype = dt, .ndim = 1, .shape = {n},
                          .bdim = SHMESH_NOT_MAPPED};
}

#define MUST(call)                                                                             \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_)                                                                               \
            check(false, #call, shmesh_last_error(ctx));                                       \
    } while (0)

/* Rank r sits at x = r / 2, y = r % 2 of the 2x2 mesh (row-major ids). */
static int x_of(int r) { return r / 2; }
static int y_of(int r) { return r % 2; }

/* The sum of v(r) over the ranks of this rank's group along `axes`. */
static float group_sum(const char *axes, float (*v)(int))
{
    float s = 0;
    for (int r = 0; r < 4; r++) {
        bool same_x = x_of(r) == x_of(rank), same_y = y_of(r) == y_of(rank);
        bool member = !strcmp(axes, "x")   ? same_y /* x varies */
                      : !strcmp(axes, "y") ? same_x
                                           : true;
        if (member)
            s += v(r);
    }
    return s;
}

static float one_plus(int r) { return (float)(r + 1); }

/* psum over each axes text, several times, with other buffers each time;
 * the axes held in one buffer whose text changes between calls. */
static void axes_and_buffers(shmesh_mesh *m)
{
    char axes[8];
    const char *order[] = {"x", "x", "y", "y", "x,y", "x", "x,y", "y"};
    for (int i = 0; i < 8; i++) {
        strcpy(axes, order[i]);
        float in[3], out[3];
        for (int j = 0; j < 3; j++) {
            in[j] = (float)(rank + 1) * (float)(j + 1);
            out[j] = -1;
        }
        shmesh_array a = arr(in, SHMESH_FLOAT32, 3), o = arr(out, SHMESH_FLOAT32, 3);
        MUST(shmesh_psum(m, axes, NULL, &a, &o));
        float want = group_sum(order[i], one_plus);
        for (int j = 0; j < 3; j++)
            if (out[j] != want * (float)(j + 1)) {
                char d[96];
                snprintf(d, sizeof d, "psum over \"%s\" (call %d): %g, expected %g", order[i], i,
                         out[j], want * (float)(j + 1));
                check(false, "axes", d);
                return;
            }
    }
    printf("rank %d: axes and buffers ok\n", rank);
}

/* The same buffers, other shapes and dtypes; in place after apart. */
static void shapes_and_dtypes(shmesh_mesh *m)
{
    static int64_t buf[16], res[16];
    const int64_t counts[] = {4, 4, 6, 2, 6};
    for (int i = 0; i < 5; i++) {
        shmesh_dtype dt = i == 3 ? SHMESH_INT64 : SHMESH_INT32;
        int64_t n = counts[i];
        for (int j = 0; j < n; j++) {
            if (dt == SHMESH_INT64)
                buf[j] = rank + 1 + j;
            else
                ((int32_t *)buf)[j] = rank + 1 + j;
        }
        shmesh_array a = arr(buf, dt, n), o = arr(i == 4 ? buf : res, dt, n);
        MUST(shmesh_psum(m, "x,y", NULL, &a, &o));
        const void *r = i == 4 ? (const void *)buf : (const void *)res;
        for (int j = 0; j < n; j++) {
            int64_t got = dt == SHMESH_INT64 ? ((const int64_t *)r)[j] : ((const int32_t *)r)[j];
            if (got != 10 + 4 * j) {
                char d[96];
                snprintf(d, sizeof d, "call %d (%s[%lld]%s): element %d = %lld, expected %d", i,
                         shmesh_dtype_name(dt), (long long)n, i == 4 ? ", in place" : "", j,
                         (long long)got, 10 + 4 * j);
                check(false, "shapes", d);
                return;
            }
        }
    }
    printf("rank %d: shapes and dtypes ok\n", rank);
}

/* The op's own arguments: all_gather's axis and tiling, all_to_all's axes,
 * pbroadcast's source, each changed between two calls. */
static void op_arguments(shmesh_mesh *m)
{
    float in[4], out[16];
    for (int j = 0; j < 4; j++)
        in[j] = (float)(10 * rank + j);
    /* all_gather over x,y: tiled along axis 0, then untiled (a new axis 0). */
    for (int tiled = 1; tiled >= 0; tiled--) {
        shmesh_array a = arr(in, SHMESH_FLOAT32, 4);
        shmesh_array o = tiled ? arr(out, SHMESH_FLOAT32, 16)
                               : (shmesh_array){.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2,
                                                .shape = {4, 4}, .bdim = SHMESH_NOT_MAPPED};
        memset(out, 0, sizeof out);
        MUST(shmesh_all_gather(m, "x,y", NULL, 0, tiled, &a, &o));
        for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++)
                if (out[4 * r + j] != (float)(10 * r + j)) {
                    check(false, "all_gather", tiled ? "tiled" : "untiled");
                    return;
                }
    }
    /* all_to_all over x,y of a [4, 1] array: split 0, concat 0, then split
     * 0, concat 1 (out [1, 4]): rank r gets element r of every rank. */
    for (int concat = 0; concat <= 1; concat++) {
        shmesh_array a = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {4, 1},
                          .bdim = SHMESH_NOT_MAPPED};
        shmesh_array o = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2,
                          .shape = {concat ? 1 : 4, concat ? 4 : 1}, .bdim = SHMESH_NOT_MAPPED};
        memset(out, 0, sizeof out);
        MUST(shmesh_all_to_all(m, "x,y", NULL, 0, concat, true, &a, &o));
        for (int r = 0; r < 4; r++)
            if (out[r] != (float)(10 * r + rank)) {
                check(false, "all_to_all", concat ? "concat_axis 1" : "concat_axis 0");
                return;
            }
    }
    /* pbroadcast from each source in turn, the same arrays every time. */
    for (int source = 0; source < 4; source++) {
        float b[4];
        shmesh_array a = arr(in, SHMESH_FLOAT32, 4), o = arr(b, SHMESH_FLOAT32, 4);
        MUST(shmesh_pbroadcast(m, "x,y", source, &a, &o));
        for (int j = 0; j < 4; j++)
            if (b[j] != (float)(10 * source + j)) {
                char d[64];
                snprintf(d, sizeof d, "source %d: %g, expected %g", source, b[j],
                         (float)(10 * source + j));
                check(false, "pbroadcast", d);
                return;
            }
    }
    printf("rank %d: op arguments ok\n", rank);
}

/* Meshes destroyed and made again (an allocator may hand out the same
 * address): the new mesh's groups, never the old one's. */
static void meshes_made_again(void)
{
    const char *names2[] = {"x", "y"}, *names1[] = {"x"};
    for (int round = 0; round < 6; round++) {
        bool flat = round % 2;
        shmesh_mesh *m;
        MUST(flat ? shmesh_mesh_create(ctx, 1, names1, (int[]){4}, NULL, &m)
                  : shmesh_mesh_create(ctx, 2, names2, (int[]){2, 2}, NULL, &m));
        float v = (float)(rank + 1), s = -1;
        shmesh_array a = arr(&v, SHMESH_FLOAT32, 1), o = arr(&s, SHMESH_FLOAT32, 1);
        MUST(shmesh_psum(m, "x", NULL, &a, &o));
        float want = flat ? 10.0f : group_sum("x", one_plus);
        shmesh_mesh_destroy(m);
        if (s != want) {
            char d[64];
            snprintf(d, sizeof d, "round %d: %g, expected %g", round, s, want);
            check(false, "meshes made again", d);
            return;
        }
    }
    printf("rank %d: meshes made again ok\n", rank);
}

/* Blocking repeats run their plan's kept call again (engine/call.h:
 * call_again): each with its own buffers, of the stack, the shared heap
 * (another memory kind: the kept call is dropped, the call prepared in
 * full) and the stack again, in place and apart, pbroadcast from each
 * source in turn and psum between them; a refused repeat in the middle. */
static void kept_calls(shmesh_mesh *m)
{
    float *heap = shmesh_alloc(ctx, 4 * sizeof(float));
    check(heap != NULL, "shmesh_alloc", shmesh_last_error(ctx));
    if (!heap)
        return;
    float a[4], b[4], out[4], out2[4];
    for (int i = 0; i < 24; i++) {
        float *in = i % 6 == 4 ? heap : i % 2 ? b : a;
        int source = i / 6 % 2; /* the source's x; six repeats each */
        bool in_place = i % 6 == 5;
        float *dst = in_place ? in : i % 3 ? out : out2;
        for (int j = 0; j < 4; j++) {
            in[j] = (float)(100 * i + 10 * rank + j);
            out[j] = out2[j] = -1;
        }
        shmesh_array x = arr(in, SHMESH_FLOAT32, 4), o = arr(dst, SHMESH_FLOAT32, 4);
        MUST(shmesh_pbroadcast(m, "x", source, &x, &o));
        int src_rank = 2 * source + y_of(rank); /* x = source, this rank's y */
        for (int j = 0; j < 4; j++)
            if (dst[j] != (float)(100 * i + 10 * src_rank + j)) {
                char d[96];
                snprintf(d, sizeof d, "pbroadcast call %d from x=%d: [%d] %g, expected %d", i,
                         source, j, dst[j], 100 * i + 10 * src_rank + j);
                check(false, "kept pbroadcast", d);
                goto out;
            }
        if (i == 9) { /* refused: NULL output, then the next repeat is right */
            shmesh_array none = arr(NULL, SHMESH_FLOAT32, 4);
            int rc = shmesh_pbroadcast(m, "x", source, &x, &none);
            check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), "data is NULL"),
                  "NULL out after kept calls", shmesh_last_error(ctx));
        }
        shmesh_array s = arr(in, SHMESH_FLOAT32, 1), so = arr(out, SHMESH_FLOAT32, 1);
        in[0] = (float)(rank + 1);
        MUST(shmesh_psum(m, "x,y", NULL, &s, &so));
        if (out[0] != 10) {
            check(false, "kept psum", "wrong sum");
            goto out;
        }
    }
    printf("rank %d: kept calls ok\n", rank);
out:
    shmesh_free(ctx, heap);
}

/* `_async` repeats run kept calls too, one per call in flight: rounds of
 * three psum_async of one shape in flight at once, each with its own
 * buffers (the buffers trade places between rounds), then eight of
 * another shape queued behind three of the first, so that the plan
 * changes (and gives up its kept calls) while they are in flight. */
static void kept_async(shmesh_mesh *m)
{
    static float in[3][4], out[3][4], in2[8][2], out2[8][2];
    shmesh_token t[11];
    for (int round = 0; round < 12; round++) {
        for (int c = 0; c < 3; c++) {
            int b = (c + round) % 3;
            for (int j = 0; j < 4; j++) {
                in[b][j] = (float)((rank + 1) * (round + 1) + j);
                out[b][j] = -1;
            }
            shmesh_array x = arr(in[b], SHMESH_FLOAT32, 4), o = arr(out[b], SHMESH_FLOAT32, 4);
            MUST(shmesh_psum_async(m, "x,y", NULL, &x, &o, &t[c]));
        }
        int queued = 3;
        if (round % 4 == 3) /* the other shape, behind them */
            for (int c = 0; c < 8; c++, queued++) {
                in2[c][0] = (float)(rank + c);
                in2[c][1] = 1;
                shmesh_array x = arr(in2[c], SHMESH_FLOAT32, 2);
                shmesh_array o = arr(out2[c], SHMESH_FLOAT32, 2);
                MUST(shmesh_psum_async(m, "x,y", NULL, &x, &o, &t[queued]));
            }
        for (int c = 0; c < queued; c++)
            MUST(shmesh_token_wait(t[c]));
        for (int b = 0; b < 3; b++)
            for (int j = 0; j < 4; j++)
                if (out[b][j] != (float)(10 * (round + 1) + 4 * j)) {
                    char d[96];
                    snprintf(d, sizeof d, "round %d buffer %d [%d]: %g, expected %d", round, b,
                             j, out[b][j], 10 * (round + 1) + 4 * j);
                    check(false, "kept psum_async", d);
                    return;
                }
        for (int c = 0; queued > 3 && c < 8; c++)
            if (out2[c][0] != (float)(6 + 4 * c) || out2[c][1] != 4) {
                check(false, "psum_async of the other shape", "wrong sum");
                return;
            }
    }
    printf("rank %d: kept async calls ok\n", rank);
}

/* A refused call after planned ones is refused with its own reason, and
 * the next good call is right; the async form repeats alike. */
static void refusals_and_async(shmesh_mesh *m)
{
    float in[2] = {(float)rank, 1}, out[2];
    shmesh_array a = arr(in, SHMESH_FLOAT32, 2), o = arr(out, SHMESH_FLOAT32, 2);
    MUST(shmesh_psum(m, "x,y", NULL, &a, &o));
    MUST(shmesh_psum(m, "x,y", NULL, &a, &o));
    shmesh_array none = arr(NULL, SHMESH_FLOAT32, 2);
    int rc = shmesh_psum(m, "x,y", NULL, &a, &none);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), "data is NULL"),
          "NULL out after planned calls", shmesh_last_error(ctx));
    float big[8] = {0};
    shmesh_array part = arr(big + 4, SHMESH_FLOAT32, 2), part_out = arr(big, SHMESH_FLOAT32, 4);
    MUST(shmesh_all_gather(m, "x", NULL, 0, true, &part, &part_out)); /* apart: planned */
    part = arr(big + 1, SHMESH_FLOAT32, 2);
    rc = shmesh_all_gather(m, "x", NULL, 0, true, &part, &part_out);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(ctx), "overlap"),
          "overlapping all_gather after a planned one", shmesh_last_error(ctx));
    for (int i = 0; i < 5; i++) {
        shmesh_token t;
        out[0] = out[1] = -1;
        MUST(shmesh_psum_async(m, "x,y", NULL, &a, &o, &t));
        MUST(shmesh_token_wait(t));
        if (out[0] != 6 || out[1] != 4) {
            check(false, "psum_async repeated", "wrong sum");
            return;
        }
        /* A blocking repeat with a quiet dispatcher runs the kept call;
         * behind a queued psum_async, it is dispatched. */
        out[0] = out[1] = -1;
        MUST(shmesh_psum(m, "x,y", NULL, &a, &o));
        float queued[2] = {-1, -1};
        shmesh_array q = arr(queued, SHMESH_FLOAT32, 2);
        MUST(shmesh_psum_async(m, "x,y", NULL, &a, &q, &t));
        if (out[0] != 6 || out[1] != 4) {
            check(false, "psum after psum_async", "wrong sum");
            return;
        }
        out[0] = out[1] = -1;
        MUST(shmesh_psum(m, "x,y", NULL, &a, &o));
        MUST(shmesh_token_wait(t));
        if (out[0] != 6 || out[1] != 4 || queued[0] != 6 || queued[1] != 4) {
            check(false, "psum behind a psum_async", "wrong sum");
            return;
        }
    }
    printf("rank %d: refusals and async ok\n", rank);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh-test-plan: %s\n", shmesh_last_error(NULL));
        return 2;
    }
    rank = shmesh_rank(ctx);
    if (shmesh_world_size(ctx) != 4) {
        fprintf(stderr, "shmesh-test-plan: expected 4 ranks\n");
        return 2;
    }
    const char *names[] = {"x", "y"};
    shmesh_mesh *m;
    MUST(shmesh_mesh_create(ctx, 2, names, (int[]){2, 2}, NULL, &m));
    axes_and_buffers(m);
    shapes_and_dtypes(m);
    op_arguments(m);
    meshes_made_again();
    kept_calls(m);
    kept_async(m);
    refusals_and_async(m);
    shmesh_mesh_destroy(m);
    if (!failed)
        printf("rank %d: plans ok\n", rank);
    return shmesh_finalize(ctx) || failed;
}
