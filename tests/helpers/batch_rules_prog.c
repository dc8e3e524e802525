/* The seed's batching rules, case by case, against hand-computed results:
 * shmesh-test-batch-rules B, run as 1 or 2 ranks (mesh x = the ranks, then
 * the batched axis b of size B).  Position (r, k) is global position
 * p = r * B + k; its operand's element j is p * 100 + j.
 *
 * Each check prints "rank R: ok: ..." or "rank R: FAILED: ..."; the last
 * line is "rank R: N checks ok" when every check passed (exit 0). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmesh.h"
#include "checks.h"

static int B, world;
static shmesh_mesh *bm;

static int32_t val(int p, int j) { return p * 100 + j; }

/* A batched int32 array: slice shape `shape` (nd dims) of each position k
 * from get(k, j), with the batch dimension inserted at bdim (or none:
 * SHMESH_NOT_MAPPED, then position 0's slice). */
static shmesh_array pack(int32_t *buf, int nd, const int64_t *shape, int bdim,
                         int32_t (*get)(int k, int j))
{
    shmesh_array a = {.data = buf, .dtype = SHMESH_INT32, .ndim = nd, .bdim = bdim};
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    if (bdim == SHMESH_NOT_MAPPED) {
        memcpy(a.shape, shape, sizeof *shape * (size_t)nd);
        for (int64_t j = 0; j < n; j++)
            buf[j] = get(0, (int)j);
        return a;
    }
    a.ndim = nd + 1;
    for (int d = 0, s = 0; d <= nd; d++)
        a.shape[d] = d == bdim ? B : shape[s++];
    /* Element (k, j) sits at: the slice's dimensions before bdim, k, the rest. */
    int64_t inner = 1;
    for (int d = bdim; d < nd; d++)
        inner *= shape[d];
    for (int k = 0; k < B; k++)
        for (int64_t j = 0; j < n; j++)
            buf[(j / inner * B + k) * inner + j % inner] = get(k, (int)j);
    return a;
}

/* Element j of position k of a result held with its batch dimension at
 * bdim (slice of n elements, `inner` of them after bdim). */
static int32_t at(const int32_t *buf, int64_t inner, int k, int64_t j)
{
    return buf[(j / inner * B + k) * inner + j % inner];
}

static int my_rank(void) { return shmesh_rank(ctx); }

static int32_t mine(int k, int j) { return val(my_rank() * B + k, j); }
static int32_t one_value(int k, int j) { return (void)k, val(my_rank() * B, j) + 7; }

/* psum over b at every bdim, over x, over x,b; the results' bdims. */
static void sums(void)
{
    int64_t shape[2] = {2, 3};
    int32_t in[1024], out[1024];
    for (int d = 0; d <= 2; d++) {
        shmesh_array a = pack(in, 2, shape, d, mine);
        shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 3, .shape = {B, 2, 3}};
        MUST(shmesh_psum(bm, "b", NULL, &a, &o));
        bool ok = true;
        for (int k = 0; k < B; k++)
            for (int j = 0; j < 6; j++) {
                int32_t want = 0;
                for (int q = 0; q < B; q++)
                    want += val(my_rank() * B + q, j);
                ok &= out[k * 6 + j] == want;
            }
        check(ok, "psum over b, operand bdim %d, out bdim 0: the batch's sum at every position", d);
        o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {2, 3},
                           .bdim = SHMESH_BDIM_AUTO};
        MUST(shmesh_psum(bm, "b", NULL, &a, &o));
        check(o.bdim == SHMESH_NOT_MAPPED, "psum over b is not mapped (bdim %d)", o.bdim);
        /* Over x: mapped, where the operand had it. */
        int64_t osh[3];
        for (int e = 0, s = 0; e < 3; e++)
            osh[e] = e == d ? B : shape[s++];
        o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 3,
                           .shape = {osh[0], osh[1], osh[2]}, .bdim = SHMESH_BDIM_AUTO};
        MUST(shmesh_psum(bm, "x", NULL, &a, &o));
        ok = o.bdim == d;
        int64_t inner = d == 0 ? 6 : d == 1 ? 3 : 1;
        for (int k = 0; k < B && ok; k++)
            for (int j = 0; j < 6; j++) {
                int32_t want = 0;
                for (int r = 0; r < world; r++)
                    want += val(r * B + k, j);
                ok &= at(out, inner, k, j) == want;
            }
        check(ok, "psum over x keeps bdim %d (got %d) and sums position k across ranks", d,
              o.bdim);
    }
    shmesh_array a = pack(in, 2, shape, 1, mine);
    int32_t all[6] = {0};
    for (int p = 0; p < world * B; p++)
        for (int j = 0; j < 6; j++)
            all[j] += val(p, j);
    const char *both[] = {"x,b", "b,x"};
    for (int i = 0; i < 2; i++) {
        shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {2, 3},
                          .bdim = SHMESH_NOT_MAPPED};
        MUST(shmesh_psum(bm, both[i], NULL, &a, &o));
        check(!memcmp(out, all, sizeof all), "psum over %s: every position's sum", both[i]);
    }
}

/* A not-mapped operand: B * x for sums (one product), x for max and min. */
static void not_mapped(void)
{
    int64_t shape[1] = {4};
    int32_t in[1024], out[1024];
    shmesh_array a = pack(in, 1, shape, SHMESH_NOT_MAPPED, one_value);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {4},
                      .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_psum(bm, "b", NULL, &a, &o));
    bool ok = o.bdim == SHMESH_NOT_MAPPED;
    for (int j = 0; j < 4; j++)
        ok &= out[j] == B * in[j];
    check(ok, "psum over b of a not-mapped operand is B * x, not mapped");
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {4},
                       .bdim = SHMESH_NOT_MAPPED};
    MUST(shmesh_psum(bm, "x,b", NULL, &a, &o));
    ok = true;
    for (int j = 0; j < 4; j++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want += B * (val(r * B, j) + 7);
        ok &= out[j] == want;
    }
    check(ok, "psum over x,b of a not-mapped operand: the sum over x of B * x");
    MUST(shmesh_pmax(bm, "b", NULL, &a, &o));
    check(!memcmp(out, in, sizeof *in * 4), "pmax over b of a not-mapped operand is x");
    float mean[4];
    shmesh_array m = {.data = mean, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {4},
                      .bdim = SHMESH_NOT_MAPPED};
    MUST(shmesh_pmean(bm, "b", NULL, &a, &m));
    ok = true;
    for (int j = 0; j < 4; j++)
        ok &= mean[j] == (float)(B * in[j]) * (1.0f / (float)B);
    check(ok, "pmean over b of a not-mapped int32 operand: (B * x) / B as float32");
    /* The product is rounded once.  With B >= 4 a sum of B copies can
     * round differently: find such an x so that the check tells the two
     * apart (with fewer the two agree, and the check is the product's). */
    float x = 1.1f, sumx = 0;
    for (int i = 0; i < 4096; i++) {
        x = 1.0f + (float)i / 4096.0f + 1e-7f * (float)(i % 7);
        sumx = 0;
        for (int k = 0; k < B; k++)
            sumx += x;
        if (sumx != x * (float)B)
            break;
    }
    float fo = -1;
    shmesh_array fa = {.data = &x, .dtype = SHMESH_FLOAT32, .ndim = 0,
                       .bdim = SHMESH_NOT_MAPPED};
    shmesh_array fb = {.data = &fo, .dtype = SHMESH_FLOAT32, .ndim = 0,
                       .bdim = SHMESH_NOT_MAPPED};
    MUST(shmesh_psum(bm, "b", NULL, &fa, &fb));
    check(fo == x * (float)B, "float32 psum over b of %.9g not mapped: %.9g = x * B (a sum of "
          "copies would give %.9g)", x, fo, sumx);
}

/* all_gather over b (not mapped after), and over x (the seed's bdim rule). */
static void gathers(void)
{
    int64_t shape[1] = {2};
    int32_t in[1024], out[1024];
    shmesh_array a = pack(in, 1, shape, 1, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {B, 2},
                      .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_all_gather(bm, "b", NULL, 0, false, &a, &o));
    bool ok = o.bdim == SHMESH_NOT_MAPPED;
    for (int q = 0; q < B; q++)
        for (int j = 0; j < 2; j++)
            ok &= out[q * 2 + j] == val(my_rank() * B + q, j);
    check(ok, "all_gather over b untiled: the batch stacked at axis 0, not mapped");
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {2 * B},
                       .bdim = SHMESH_NOT_MAPPED};
    MUST(shmesh_all_gather(bm, "b", NULL, 0, true, &a, &o));
    ok = true;
    for (int q = 0; q < B; q++)
        for (int j = 0; j < 2; j++)
            ok &= out[q * 2 + j] == val(my_rank() * B + q, j);
    check(ok, "all_gather over b tiled: the batch folded into axis 0");
    /* Over x, operand bdim 1 > gather axis 0, untiled: the seed moves the
     * batch dimension to 2. */
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 3, .shape = {world, 2, B},
                       .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_all_gather(bm, "x", NULL, 0, false, &a, &o));
    ok = o.bdim == 2;
    for (int k = 0; k < B; k++)
        for (int r = 0; r < world; r++)
            for (int j = 0; j < 2; j++)
                ok &= out[(r * 2 + j) * B + k] == val(r * B + k, j);
    check(ok, "all_gather over x with operand bdim 1: result bdim 2 (got %d), gathered by rank",
          o.bdim);
}

/* psum_scatter and all_to_all over b: mapped, where the seed says. */
static void scatters(void)
{
    int64_t shape[1] = {2 * B};
    int32_t in[1024], out[1024];
    shmesh_array a = pack(in, 1, shape, 0, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {B, 2},
                      .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_psum_scatter(bm, "b", NULL, 0, true, &a, &o));
    bool ok = o.bdim == 0;
    for (int k = 0; k < B; k++)
        for (int i = 0; i < 2; i++) {
            int32_t want = 0;
            for (int q = 0; q < B; q++)
                want += val(my_rank() * B + q, k * 2 + i);
            ok &= out[k * 2 + i] == want;
        }
    check(ok, "psum_scatter over b tiled: position k keeps block k of the batch's sum");
    a = pack(in, 1, shape, SHMESH_NOT_MAPPED, one_value);
    MUST(shmesh_psum_scatter(bm, "b", NULL, 0, true, &a, &o));
    ok = true;
    for (int k = 0; k < B; k++)
        for (int i = 0; i < 2; i++)
            ok &= out[k * 2 + i] == B * in[k * 2 + i];
    check(ok, "psum_scatter over b of a not-mapped operand: block k of B * x");
    a = pack(in, 1, shape, 0, mine);
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {B, 2 * B},
                       .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_all_to_all(bm, "b", NULL, 0, 0, true, &a, &o));
    ok = o.bdim == 0;
    for (int k = 0; k < B; k++)
        for (int q = 0; q < B; q++)
            for (int i = 0; i < 2; i++)
                ok &= out[k * 2 * B + q * 2 + i] == val(my_rank() * B + q, k * 2 + i);
    check(ok, "all_to_all over b tiled: position k gets block k of every position, in order");
}

/* ppermute, pshuffle and pbroadcast over b. */
static void moves(void)
{
    int64_t shape[1] = {3};
    int32_t in[1024], out[1024];
    int perm[8][2];
    for (int k = 0; k < B; k++)
        perm[k][0] = k, perm[k][1] = (k + 1) % B;
    shmesh_array a = pack(in, 1, shape, 1, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {3, B},
                      .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_ppermute(bm, "b", (const int(*)[2])perm, B, &a, &o));
    bool ok = o.bdim == 1;
    for (int k = 0; k < B; k++)
        for (int j = 0; j < 3; j++)
            ok &= at(out, 1, k, j) == val(my_rank() * B + (k + B - 1) % B, j);
    check(ok, "ppermute over b by k -> k+1: takes along the operand's bdim 1");
    a = pack(in, 1, shape, SHMESH_NOT_MAPPED, one_value);
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {3},
                       .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_ppermute(bm, "b", (const int(*)[2])perm, B, &a, &o));
    check(o.bdim == SHMESH_NOT_MAPPED && !memcmp(out, in, 12),
          "ppermute over b, full permutation, not-mapped operand: x, not mapped");
    if (B > 1) {
        o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {B, 3},
                           .bdim = SHMESH_BDIM_AUTO};
        MUST(shmesh_ppermute(bm, "b", (const int(*)[2])perm, 1, &a, &o));
        ok = o.bdim == 0;
        for (int k = 0; k < B; k++)
            for (int j = 0; j < 3; j++)
                ok &= out[k * 3 + j] == (k == 1 ? in[j] : 0);
        check(ok, "ppermute over b, only 0 -> 1, not-mapped operand: mapped, zeros elsewhere");
    }
    a = pack(in, 1, shape, 0, mine);
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {3},
                       .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_pbroadcast(bm, "b", B - 1, &a, &o));
    ok = o.bdim == SHMESH_NOT_MAPPED;
    for (int j = 0; j < 3; j++)
        ok &= out[j] == val(my_rank() * B + B - 1, j);
    check(ok, "pbroadcast over b from %d: that position's value, not mapped", B - 1);
}

/* axis_index over b, x,b and x. */
static void indices(void)
{
    int32_t idx[8] = {0}, one = -1;
    shmesh_array o = {.data = idx, .dtype = SHMESH_INT32, .ndim = 1, .shape = {B}};
    MUST(shmesh_axis_index_array(bm, "b", &o));
    bool ok = true;
    for (int k = 0; k < B; k++)
        ok &= idx[k] == k;
    check(ok, "axis_index over b: 0..B-1 along the batch");
    MUST(shmesh_axis_index_array(bm, "x,b", &o));
    ok = true;
    for (int k = 0; k < B; k++)
        ok &= idx[k] == my_rank() * B + k;
    check(ok, "axis_index over x,b: r * B + k");
    MUST(shmesh_axis_index_array(bm, "b,x", &o));
    ok = true;
    for (int k = 0; k < B; k++)
        ok &= idx[k] == k * world + my_rank();
    check(ok, "axis_index over b,x: k * world + r");
    shmesh_array s = {.data = &one, .dtype = SHMESH_INT32, .ndim = 0, .bdim = SHMESH_BDIM_AUTO};
    MUST(shmesh_axis_index_array(bm, "x", &s));
    check(one == my_rank() && s.bdim == SHMESH_NOT_MAPPED, "axis_index over x: a scalar, r");
    MUST(shmesh_axis_index_array(bm, "x", &o));
    ok = true;
    for (int k = 0; k < B; k++)
        ok &= idx[k] == my_rank();
    check(ok, "axis_index over x asked at bdim 0: r broadcast along the batch");
}

/* matchaxis: moved, broadcast, refused. */
static void match(void)
{
    int32_t in[24], out[24];
    for (int i = 0; i < 24; i++)
        in[i] = i;
    /* (2, 3, 4) with the batch (size 4) last, moved first. */
    shmesh_array a = {.data = in, .dtype = SHMESH_INT32, .ndim = 3, .shape = {2, 3, 4}, .bdim = 2};
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 3, .shape = {4, 2, 3}, .bdim = 0};
    MUST(shmesh_matchaxis(4, &a, &o));
    bool ok = true;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 6; j++)
            ok &= out[k * 6 + j] == in[j * 4 + k];
    check(ok, "matchaxis moves bdim 2 to 0");
    a = (shmesh_array){.data = in, .dtype = SHMESH_INT32, .ndim = 2, .shape = {2, 3},
                       .bdim = SHMESH_NOT_MAPPED};
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 3, .shape = {2, 4, 3}, .bdim = 1};
    MUST(shmesh_matchaxis(4, &a, &o));
    ok = true;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++)
                ok &= out[(i * 4 + k) * 3 + j] == in[i * 3 + j];
    check(ok, "matchaxis broadcasts a not-mapped value to bdim 1");
    a = (shmesh_array){.data = in, .dtype = SHMESH_INT32, .ndim = 2, .shape = {4, 3}, .bdim = 0};
    o = (shmesh_array){.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {3},
                       .bdim = SHMESH_NOT_MAPPED};
    int rc = shmesh_matchaxis(4, &a, &o);
    check(rc == SHMESH_ERR_INVALID && strstr(shmesh_last_error(NULL), "out_axes is None"),
          "matchaxis refuses a mapped value asked not mapped: %s", shmesh_last_error(NULL));
}

/* What is refused, with the reason; the context still works after. */
static void refusals(void)
{
    int32_t in[1024], out[1024];
    int64_t shape[1] = {2};
    shmesh_array a = pack(in, 1, shape, 0, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {2},
                      .bdim = SHMESH_NOT_MAPPED};
    int rc = shmesh_psum(bm, "x", NULL, &a, &o);
    check(rc == SHMESH_ERR_INVALID && strstr(why(), "out_axes is None"),
          "a mapped result asked not mapped: %s", why());
    a.bdim = 2;
    rc = shmesh_psum(bm, "b", NULL, &a, &o);
    check(rc == SHMESH_ERR_INVALID && strstr(why(), "in.bdim"), "in.bdim out of range: %s",
          why());
    shmesh_array wrong = {.data = in, .dtype = SHMESH_INT32, .ndim = 1, .shape = {B + 1}};
    rc = shmesh_psum(bm, "b", NULL, &wrong, &o);
    check(rc == SHMESH_ERR_INVALID && strstr(why(), "batch dimension"),
          "a batch dimension of the wrong size: %s", why());
    a.bdim = 0;
    shmesh_token t;
    rc = shmesh_psum_async(bm, "b", NULL, &a, &o, &t);
    check(rc == SHMESH_ERR_INVALID && strstr(why(), "not built"), "_async: %s", why());
    shmesh_mesh *twice = NULL;
    rc = shmesh_mesh_batch(bm, "c", 2, &twice);
    check(rc == SHMESH_ERR_INVALID && !twice, "a second batched axis: %s", why());
    shmesh_pspec spec;
    shmesh_sharding *sh = NULL;
    MUST(shmesh_pspec_parse("x", &spec));
    rc = shmesh_sharding_create(bm, &spec, &sh);
    check(rc == SHMESH_ERR_INVALID && !sh && strstr(why(), "batched"), "a sharding: %s", why());
    /* The wrong per-position output shape is named with the batch removed. */
    shmesh_array bad = {.data = out, .dtype = SHMESH_INT32, .ndim = 2, .shape = {B, 3}};
    rc = shmesh_psum(bm, "b", NULL, &a, &bad);
    check(rc == SHMESH_ERR_INVALID && strstr(why(), "without the batch dimension"),
          "a wrong output shape: %s", why());
    /* Said by the positions' call and noted by the batched layer as it was
     * said: one sentence, the rank named once, the note once, at the end. */
    char me[32];
    snprintf(me, sizeof me, "rank %d: ", my_rank());
    const char *w = why(), *note = strstr(w, " (on the batched mesh:");
    check(!strncmp(w, me, strlen(me)) && !strstr(w + 1, "rank ") && note &&
              !strstr(note + 2, "(on the batched mesh:") && w[strlen(w) - 1] == ')',
          "the refusal names the rank once and carries the note once: %s", w);
    /* The note is gone once the positions' call is over. */
    rc = shmesh_psum(bm, "b", NULL, &a, NULL);
    check(rc == SHMESH_ERR_INVALID && !strstr(why(), "on the batched mesh"),
          "a refusal of the batched call itself carries no note: %s", why());
    o.bdim = SHMESH_NOT_MAPPED;
    MUST(shmesh_psum(bm, "b", NULL, &a, &o));
    check(out[0] == B * (B - 1) / 2 * 100 + B * my_rank() * B * 100,
          "the context still works after the refusals");
}

/* A call over the batched axis alone runs inside each process when it
 * holds several positions: ranks may make different numbers of them (an
 * exchange would pair rank 0's extra call with rank 1's barrier: a
 * mismatch).  With B = 1 such a call is an ordinary call of one member. */
static void inside(void)
{
    if (B == 1)
        return;
    int32_t in[64], out[64];
    int64_t shape[1] = {2};
    shmesh_array a = pack(in, 1, shape, 0, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {2},
                      .bdim = SHMESH_NOT_MAPPED};
    bool ok = true;
    for (int i = 0; i <= my_rank() * 3; i++)
        ok &= shmesh_psum(bm, "b", NULL, &a, &o) == 0;
    ok &= shmesh_barrier(ctx) == 0;
    check(ok, "%d calls over b alone, then a barrier: nothing exchanged (%s)",
          my_rank() * 3 + 1, ok ? "no mismatch" : why());
}

/* The mesh as a value. */
static void accessors(void)
{
    int ids[64], local[8];
    check(shmesh_mesh_ndim(bm) == 2 && shmesh_mesh_size(bm) == world * B &&
              shmesh_mesh_batch_dim(bm) == 1 && !strcmp(shmesh_mesh_axis_name(bm, 1), "b"),
          "the batched mesh has axes x, b and %d positions", world * B);
    int n = shmesh_mesh_device_ids(bm, ids, 64);
    bool ok = n == world * B;
    for (int p = 0; p < n; p++)
        ok &= ids[p] == p / B;
    check(ok, "device_ids: the device holding each position");
    n = shmesh_mesh_local_devices(bm, local, 8);
    check(n == 1 && local[0] == my_rank(), "local_devices: this rank's one device");
}

/* Two devices per rank (mesh x = ranks, y = 2, then b): one batched array
 * per local device; position (r, l, k) holds (r * 2 + l) * B + k. */
static void two_devices(void)
{
    shmesh_mesh *m, *m2;
    MUST(shmesh_mesh_create(ctx, 2, (const char *[]){"x", "y"}, (int[]){world, 2}, NULL, &m));
    MUST(shmesh_mesh_batch(m, "b", B, &m2));
    shmesh_mesh_destroy(m);
    int32_t in[2][16], out[2][16];
    shmesh_array a[2], o[2];
    for (int l = 0; l < 2; l++) {
        for (int k = 0; k < B; k++)
            for (int j = 0; j < 2; j++)
                in[l][j * B + k] = val((my_rank() * 2 + l) * B + k, j);
        a[l] = (shmesh_array){.data = in[l], .dtype = SHMESH_INT32, .ndim = 2, .shape = {2, B},
                              .bdim = 1};
        o[l] = (shmesh_array){.data = out[l], .dtype = SHMESH_INT32, .ndim = 1, .shape = {2},
                              .bdim = SHMESH_NOT_MAPPED};
    }
    MUST(shmesh_psum(m2, "y,b", NULL, a, o));
    bool ok = true;
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 2; j++) {
            int32_t want = 0;
            for (int q = 0; q < 2 * B; q++)
                want += val(my_rank() * 2 * B + q, j);
            ok &= out[l][j] == want;
        }
    check(ok, "two devices per rank: psum over y,b sums this rank's 2 x %d positions", B);
    int32_t idx[2][8];
    for (int l = 0; l < 2; l++)
        o[l] = (shmesh_array){.data = idx[l], .dtype = SHMESH_INT32, .ndim = 1, .shape = {B}};
    MUST(shmesh_axis_index_array(m2, "x,y,b", o));
    ok = true;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < B; k++)
            ok &= idx[l][k] == (my_rank() * 2 + l) * B + k;
    check(ok, "two devices per rank: axis_index over x,y,b");
    int ids[8];
    check(shmesh_mesh_local_devices(m2, ids, 8) == 2 && ids[0] == my_rank() * 2 &&
              ids[1] == my_rank() * 2 + 1,
          "two devices per rank: local_devices lists each device once");
    shmesh_mesh_destroy(m2);
}

/* Ranks whose batched meshes differ only in the batch (B = 2 + rank) make
 * the "same" call across ranks: a mismatch on every rank, naming the
 * batches, not a wrong sum. */
static void batches_differ(void)
{
    shmesh_mesh *m, *m2;
    MUST(shmesh_mesh_create(ctx, 1, (const char *[]){"x"}, (int[]){world}, NULL, &m));
    B = 2 + my_rank();
    MUST(shmesh_mesh_batch(m, "b", B, &m2));
    int32_t in[16] = {0}, out[2];
    int64_t shape[1] = {2};
    shmesh_array a = pack(in, 1, shape, 0, mine);
    shmesh_array o = {.data = out, .dtype = SHMESH_INT32, .ndim = 1, .shape = {2},
                      .bdim = SHMESH_NOT_MAPPED};
    int rc = shmesh_psum(m2, "x,b", NULL, &a, &o);
    check(rc == SHMESH_ERR_MISMATCH && strstr(why(), "batched axis of"),
          "batches of different sizes on the ranks: %s", why());
    shmesh_mesh_destroy(m2);
    shmesh_mesh_destroy(m);
}

int main(int argc, char **argv)
{
    B = argc > 1 ? atoi(argv[1]) : 3;
    MUST(shmesh_init(&ctx));
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    if (argc > 2 && !strcmp(argv[2], "differ")) {
        batches_differ();
        shmesh_finalize(ctx); /* poisoned by the mismatch: it only releases */
        printf("rank %d: %s\n", rank, failures ? "checks FAILED" : "checks ok");
        return failures ? 1 : 0;
    }
    if (shmesh_local_device_count(ctx) == 2) {
        two_devices();
        MUST(shmesh_finalize(ctx));
        printf("rank %d: %s\n", rank, failures ? "checks FAILED" : "checks ok");
        return failures ? 1 : 0;
    }
    shmesh_mesh *m;
    MUST(shmesh_mesh_create(ctx, 1, (const char *[]){"x"}, (int[]){world}, NULL, &m));
    shmesh_mesh *no = NULL;
    int rc = shmesh_mesh_batch(m, "x", B, &no);
    check(rc == SHMESH_ERR_INVALID && !no && strstr(why(), "given twice"),
          "a batched axis named like a mesh axis: %s", why());
    rc = shmesh_mesh_batch(m, "b", 0, &no);
    check(rc == SHMESH_ERR_INVALID && !no && strstr(why(), "size 0"), "a batch of 0: %s", why());
    MUST(shmesh_mesh_batch(m, "b", B, &bm));
    shmesh_mesh_destroy(m); /* the batched mesh does not need it */
    accessors();
    sums();
    not_mapped();
    gathers();
    scatters();
    moves();
    indices();
    match();
    refusals();
    inside();
    shmesh_mesh_destroy(bm);
    MUST(shmesh_finalize(ctx));
    if (failures)
        printf("rank %d: %d checks FAILED\n", rank, failures);
    else
        printf("rank %d: checks ok\n", rank);
    return failures ? 1 : 0;
}
