/* shmesh-test-device: collectives on device buffers, under shmesh-run, with
 * whatever GPU runtime SHMESH_DEVICE names (the fake in CI, cuda or hip on
 * a GPU machine: tools/gpu-check.sh).  The public library only; the fake's
 * extras (tests/fake_gpu/fake_gpu.h) through dlopen where it is the one.
 * Modes:
 *   ops       every op over several dtypes and sizes on device buffers,
 *             compared bit for bit with the same op on host buffers; the
 *             device path and host staging both used
 *   cache     repeated calls open each peer buffer once (the library's
 *             counters, and the fake's own where it runs)
 *   realloc   a buffer freed and allocated again (at the same address with
 *             the fake) is opened again, never read stale
 *   pool      (fake) pool memory on rank 1: refused on every rank, naming
 *             it; the context stays usable
 *   openfail  (fake) an IPC open that fails on rank 1 fails the call on
 *             every rank; the context stays usable
 *   lie       (fake) rank 1's runtime claims its input's allocation is twice
 *             its size, and rank 1 passes a buffer that runs past the real
 *             allocation but inside the claim: refused before any copy on
 *             every rank (SHMESH_ERR_BAD_SEGMENT), in the library's words
 *   liecached the same on an allocation the peers mapped in a good call
 *             before (their cached mapping)
 *   async     psum_async on device buffers, then the token
 *   mixed     rank 0 device buffers, the others host: a mismatch naming both
 *   local2    (--devices-per-rank 2) device buffers with several devices per
 *             rank: refused with a clear error on every rank, the context
 *             usable
 *   refusals  the local device functions refused (a bad device, a NULL
 *             pointer, a free the runtime refuses): each sentence starts
 *             "rank R: " and names the rank that way once; the context
 *             usable
 * Prints "rank R: ok: ..." or "FAILED" lines; exit 0 pass, 1 fail, 77 skip. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_gpu.h"
#include "checks.h"
#include "shmesh.h"

#define MAX_RANKS 64

static shmesh_mesh *mesh;
static int n;

static void *must_alloc(size_t bytes)
{
    void *p = NULL;
    if (shmesh_device_alloc(ctx, 0, bytes, &p)) {
        printf("rank %d: FAILED: shmesh_device_alloc(%zu): %s\n", rank, bytes,
               shmesh_last_error(ctx));
        exit(1);
    }
    return p;
}

static void to_device(void *dev, const void *host, size_t bytes)
{
    if (shmesh_device_copy(ctx, dev, host, bytes)) {
        printf("rank %d: FAILED: copy to device: %s\n", rank, shmesh_last_error(ctx));
        exit(1);
    }
}

static void to_host(void *host, const void *dev, size_t bytes)
{
    if (shmesh_device_copy(ctx, host, dev, bytes)) {
        printf("rank %d: FAILED: copy to host: %s\n", rank, shmesh_last_error(ctx));
        exit(1);
    }
}

/* The fake's extras, when SHMESH_DEVICE names the fake's module: into *fn
 * (a function pointer), false when not there. */
static bool fake_sym(const char *name, void *fn, size_t size)
{
    const char *path = getenv("SHMESH_DEVICE");
    if (!path || !strstr(path, "libshmesh-device-fake"))
        return false;
    void *dl = dlopen(path, RTLD_NOW);
    void *sym = dl ? dlsym(dl, name) : NULL;
    if (sym)
        memcpy(fn, &sym, size); /* POSIX: a function's address as dlsym gives it */
    return sym != NULL;
}

static uint64_t seed = 88172645463325252ull;
static uint64_t rnd(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

/* Values every dtype can hold, with ties, negatives and for floats -0.0. */
static void fill(void *p, shmesh_dtype dt, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        int64_t v = (int64_t)(rnd() % 41) - 20;
        switch (dt) {
        case SHMESH_BOOL: ((uint8_t *)p)[i] = (uint8_t)(v & 1); break;
        case SHMESH_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
        case SHMESH_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
        case SHMESH_INT32: ((int32_t *)p)[i] = (int32_t)(v * 100003); break;
        case SHMESH_INT64: ((int64_t *)p)[i] = v * 1000000007ll; break;
        case SHMESH_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
        case SHMESH_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
        case SHMESH_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
        case SHMESH_UINT64: ((uint64_t *)p)[i] = (uint64_t)v * 0x9E3779B97F4A7C15ull; break;
        case SHMESH_FLOAT16:
        case SHMESH_BFLOAT16: ((uint16_t *)p)[i] = (uint16_t)(rnd() & 0x7bff); break;
        case SHMESH_FLOAT32: ((float *)p)[i] = v == 0 ? -0.0f : (float)v / 7.0f; break;
        default: ((double *)p)[i] = v == 0 ? -0.0 : (double)v / 7.0; break;
        }
    }
}

enum op { PSUM, PMAX, PMIN, PMEAN, GATHER0, GATHER1, SCATTER0, SCATTER1, A2A0, A2A1, PERMUTE,
          PERMUTE1, BROADCAST, RAGGED, NOPS };
static const char *const op_names[NOPS] = {
    "psum", "pmax", "pmin", "pmean", "all_gather(axis=0, tiled)", "all_gather(axis=1)",
    "psum_scatter(0, tiled)", "psum_scatter(1, tiled)", "all_to_all(0, 0, tiled)",
    "all_to_all(1, 0, tiled)", "ppermute(shift)", "ppermute(0 -> 1, zeros elsewhere)",
    "pbroadcast(last)", "ragged_all_to_all"};

/* The shapes of a case: the input [r, c] (r = 1 for 1-d ops) and the
 * output's. */
static void shapes(enum op op, int64_t m, shmesh_array *in, shmesh_array *out)
{
    int64_t N = n;
    *in = (shmesh_array){.data = NULL, .dtype = in->dtype, .ndim = 2, .shape = {4, m}};
    *out = *in;
    switch (op) {
    case GATHER0: in->ndim = 1, in->shape[0] = m; *out = *in; out->shape[0] = N * m; break;
    case GATHER1: out->ndim = 3, out->shape[1] = N, out->shape[2] = m; break;
    case SCATTER0: in->ndim = out->ndim = 1, in->shape[0] = N * m, out->shape[0] = m; break;
    case SCATTER1: in->shape[1] = N * m; break;
    case A2A0: in->ndim = 1, in->shape[0] = N * m; *out = *in; break;
    case A2A1: in->shape[1] = N * m; out->shape[0] = 4 * N; break;
    case RAGGED: in->shape[0] = 2 * N, in->shape[1] = m; *out = *in; break;
    default: break;
    }
    out->dtype = in->dtype;
    if (op == PSUM && in->dtype == SHMESH_BOOL)
        out->dtype = SHMESH_INT32;
    if (op == PMEAN && in->dtype != SHMESH_FLOAT32 && in->dtype != SHMESH_FLOAT64 &&
        in->dtype != SHMESH_FLOAT16 && in->dtype != SHMESH_BFLOAT16)
        out->dtype = SHMESH_FLOAT64;
}

static int run_op(enum op op, const shmesh_array *in, shmesh_array *out)
{
    int perm[MAX_RANKS][2];
    for (int i = 0; i < n; i++) {
        perm[i][0] = i;
        perm[i][1] = (i + 1) % n;
    }
    switch (op) {
    case PSUM: return shmesh_psum(mesh, "x", NULL, in, out);
    case PMAX: return shmesh_pmax(mesh, "x", NULL, in, out);
    case PMIN: return shmesh_pmin(mesh, "x", NULL, in, out);
    case PMEAN: return shmesh_pmean(mesh, "x", NULL, in, out);
    case GATHER0: return shmesh_all_gather(mesh, "x", NULL, 0, true, in, out);
    case GATHER1: return shmesh_all_gather(mesh, "x", NULL, 1, false, in, out);
    case SCATTER0: return shmesh_psum_scatter(mesh, "x", NULL, 0, true, in, out);
    case SCATTER1: return shmesh_psum_scatter(mesh, "x", NULL, 1, true, in, out);
    case A2A0: return shmesh_all_to_all(mesh, "x", NULL, 0, 0, true, in, out);
    case A2A1: return shmesh_all_to_all(mesh, "x", NULL, 1, 0, true, in, out);
    case PERMUTE: return shmesh_ppermute(mesh, "x", (const int(*)[2])perm, n, in, out);
    case PERMUTE1: return shmesh_ppermute(mesh, "x", (const int(*)[2])perm, 1, in, out);
    case BROADCAST: return shmesh_pbroadcast(mesh, "x", n - 1, in, out);
    case RAGGED: {
        /* Two rows to every member, at rows 2 * sender of its output. */
        int32_t io[MAX_RANKS], ss[MAX_RANKS], oo[MAX_RANKS],
            rs[MAX_RANKS];
        for (int i = 0; i < n; i++) {
            io[i] = 2 * i;
            ss[i] = rs[i] = 2;
            oo[i] = 2 * rank;
        }
        shmesh_array a_io = {.data = io, .dtype = SHMESH_INT32, .ndim = 1, .shape = {n}};
        shmesh_array a_ss = a_io, a_oo = a_io, a_rs = a_io;
        a_ss.data = ss;
        a_oo.data = oo;
        a_rs.data = rs;
        return shmesh_ragged_all_to_all(mesh, "x", NULL, in, out, &a_io, &a_ss, &a_oo, &a_rs);
    }
    default: return SHMESH_ERR_INVALID;
    }
}

static size_t bytes_of(const shmesh_array *a)
{
    size_t b = shmesh_dtype_size(a->dtype);
    for (int d = 0; d < a->ndim; d++)
        b *= (size_t)a->shape[d];
    return b;
}

/* One case: the op on host buffers, then on device buffers (in place for
 * whole-array reductions and pbroadcast when asked), the outputs compared
 * bit for bit. */
static void one_case(enum op op, shmesh_dtype dt, int64_t m, bool in_place)
{
    shmesh_array in = {.dtype = dt}, out;
    shapes(op, m, &in, &out);
    if ((in_place && ((op > PMEAN && op != BROADCAST) || out.dtype != in.dtype)) ||
        ((op == SCATTER0 || op == SCATTER1) && dt == SHMESH_BOOL)) /* JAX sums bools in psum only */
        return;
    size_t ib = bytes_of(&in), ob = bytes_of(&out);
    unsigned char *hin = malloc(ib), *want = calloc(1, ob), *got = calloc(1, ob);
    seed = 0x1234567ull * (uint64_t)(rank + 1) + (uint64_t)op * 977 + (uint64_t)dt * 31 + (uint64_t)m;
    fill(hin, dt, ib / shmesh_dtype_size(dt));
    in.data = hin;
    out.data = want;
    int rc = run_op(op, &in, &out);
    if (rc) {
        check(false, "%s %s[%lld] on host: %s", op_names[op], shmesh_dtype_name(dt),
              (long long)m, shmesh_last_error(ctx));
        goto done;
    }
    void *din = must_alloc(ib), *dout = in_place ? din : must_alloc(ob);
    to_device(din, hin, ib);
    if (!in_place) { /* junk where the host output started as zeros: written or zeroed */
        memset(got, 0x5a, ob);
        to_device(dout, got, ob);
        memset(got, 0, ob);
    }
    in.data = din;
    out.data = dout;
    shmesh_traffic t0, t1;
    shmesh_traffic_get(ctx, &t0);
    rc = run_op(op, &in, &out);
    shmesh_traffic_get(ctx, &t1);
    if (!rc)
        to_host(got, dout, ob);
    /* What the ranks sent between them is what they received, and for the
     * ops that move data, not nothing (lib/engine/traffic.h). */
    int64_t moved[2] = {(int64_t)(t1.sent - t0.sent), (int64_t)(t1.received - t0.received)};
    if (!rc && !shmesh_world_sum(ctx, moved, 2, SHMESH_INT64))
        check(moved[0] == moved[1] && (n == 1 || op == RAGGED || moved[0] > 0),
              "%s %s[%lld]%s on device: the ranks sent %lld bytes and received %lld",
              op_names[op], shmesh_dtype_name(dt), (long long)m, in_place ? " in place" : "",
              (long long)moved[0], (long long)moved[1]);
    check(!rc && !memcmp(got, want, ob), "%s %s[%lld]%s on device: %s", op_names[op],
          shmesh_dtype_name(dt), (long long)m, in_place ? " in place" : "",
          rc ? shmesh_last_error(ctx) : memcmp(got, want, ob) ? "differs from the host's" : "same bits as on host");
    shmesh_device_free(ctx, din);
    if (!in_place)
        shmesh_device_free(ctx, dout);
done:
    free(hin);
    free(want);
    free(got);
}

static int mode_ops(void)
{
    const shmesh_dtype dts[] = {SHMESH_FLOAT32, SHMESH_FLOAT64, SHMESH_INT32, SHMESH_INT8,
                                SHMESH_UINT64,  SHMESH_FLOAT16, SHMESH_BFLOAT16, SHMESH_BOOL};
    const int64_t ms[] = {3, 20000}; /* [4, 20000] float32: 320 KB, two-shot */
    for (int op = 0; op < NOPS; op++)
        for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
            for (size_t s = 0; s < 2; s++) {
                if (s == 1 && dts[t] != SHMESH_FLOAT32 && dts[t] != SHMESH_INT8)
                    continue; /* large cases: one wide and one narrow dtype */
                one_case((enum op)op, dts[t], ms[s], false);
                one_case((enum op)op, dts[t], ms[s], true);
            }
    shmesh_device_stats st;
    shmesh_device_stats_get(ctx, &st);
    check(st.device_calls > 0 && st.staged_calls > 0,
          "%llu calls device to device and %llu staged through host memory",
          (unsigned long long)st.device_calls, (unsigned long long)st.staged_calls);
    return 0;
}

/* psum of `count` float32 on device buffers, checked: every rank gives
 * rank + 1 + k for element k, so the sum is n(n+1)/2 + n k. */
static int psum_check(void *din, void *dout, size_t count, float base, const char *what)
{
    float *h = malloc(count * sizeof *h);
    for (size_t k = 0; k < count; k++)
        h[k] = base + (float)rank + 1 + (float)(k % 1000);
    to_device(din, h, count * sizeof *h);
    shmesh_array in = {.data = din, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}}, out = in;
    out.data = dout;
    int rc = shmesh_psum(mesh, "x", NULL, &in, &out);
    bool ok = !rc;
    if (ok) {
        to_host(h, dout, count * sizeof *h);
        for (size_t k = 0; k < count && ok; k++)
            ok = h[k] == (float)n * base + (float)(n * (n + 1) / 2) + (float)n * (float)(k % 1000);
    }
    check(ok, "%s: psum of %zu floats %s", what, count,
          rc ? shmesh_last_error(ctx) : ok ? "right" : "wrong");
    free(h);
    return rc;
}

static int mode_cache(void)
{
    fake_gpu_counters_fn counters = NULL;
    fake_sym("fake_gpu_counters", &counters, sizeof counters);
    size_t small = 1000, large = 200000; /* 4 KB one-shot, 800 KB two-shot */
    void *a = must_alloc(large * 4), *b = must_alloc(large * 4);
    shmesh_device_stats s0, s1, s2;
    shmesh_device_stats_get(ctx, &s0);
    for (int i = 0; i < 5; i++)
        psum_check(a, b, small, (float)i, "one-shot, again");
    shmesh_device_stats_get(ctx, &s1);
    check(s1.ipc_opens - s0.ipc_opens == (uint64_t)(n - 1),
          "5 one-shot calls opened %llu peer buffers (expected %d: each peer's input once)",
          (unsigned long long)(s1.ipc_opens - s0.ipc_opens), n - 1);
    check(s1.ipc_hits - s0.ipc_hits == 4ull * (uint64_t)(n - 1),
          "and found them mapped %llu times (expected %d)",
          (unsigned long long)(s1.ipc_hits - s0.ipc_hits), 4 * (n - 1));
    check(s1.ipc_exports - s0.ipc_exports == 2, "exported %llu allocations (expected 2)",
          (unsigned long long)(s1.ipc_exports - s0.ipc_exports));
    for (int i = 0; i < 3; i++)
        psum_check(a, b, large, (float)i, "two-shot, again");
    shmesh_device_stats_get(ctx, &s2);
    /* Two-shot writes peers' outputs: each peer's output opened once more. */
    check(s2.ipc_opens - s1.ipc_opens == (uint64_t)(n - 1),
          "3 two-shot calls on the same buffers opened %llu more (expected %d: peers' outputs)",
          (unsigned long long)(s2.ipc_opens - s1.ipc_opens), n - 1);
    if (counters) {
        struct fake_gpu_counters fc;
        counters(&fc);
        check(fc.opens == s2.ipc_opens && fc.exports == s2.ipc_exports,
              "the fake runtime counted %llu opens and %llu exports, as the library did",
              (unsigned long long)fc.opens, (unsigned long long)fc.exports);
    }
    shmesh_device_free(ctx, a);
    shmesh_device_free(ctx, b);
    return 0;
}

static int mode_realloc(void)
{
    size_t count = 4096;
    void *a = must_alloc(count * 4), *b = must_alloc(count * 4);
    psum_check(a, b, count, 1.0f, "before the free");
    shmesh_device_stats s0, s1;
    shmesh_device_stats_get(ctx, &s0);
    shmesh_device_free(ctx, a);
    void *a2 = must_alloc(count * 4);
    fake_gpu_counters_fn counters;
    bool fake = fake_sym("fake_gpu_counters", &counters, sizeof counters);
    const char *reuse = getenv("SHMESH_FAKE_ADDRESS_REUSE");
    if (fake)
        check(reuse && !strcmp(reuse, "0") ? a2 != a : a2 == a,
              "the new allocation lies %s the freed one (%p, freed %p)",
              reuse && !strcmp(reuse, "0") ? "elsewhere than" : "where", a2, a);
    psum_check(a2, b, count, 100.0f, "after free and alloc");
    shmesh_device_stats_get(ctx, &s1);
    check(s1.ipc_opens - s0.ipc_opens == (uint64_t)(n - 1),
          "the new input was opened by every peer (%llu opens, expected %d)",
          (unsigned long long)(s1.ipc_opens - s0.ipc_opens), n - 1);
    /* Wherever the new allocation lies (CUDA gave another address), the
     * peers' mapping of the freed one is closed: it would hold the freed
     * memory on the GPU. */
    check(s1.ipc_closes - s0.ipc_closes == (uint64_t)(n - 1),
          "and the stale mapping closed (%llu closes, expected %d)",
          (unsigned long long)(s1.ipc_closes - s0.ipc_closes), n - 1);
    shmesh_device_free(ctx, a2);
    shmesh_device_free(ctx, b);
    return 0;
}

static int mode_pool(void)
{
    fake_gpu_alloc_pool_fn pool;
    if (!fake_sym("fake_gpu_alloc_pool", &pool, sizeof pool)) {
        printf("rank %d: skip: pool memory needs the fake runtime\n", rank);
        return 77;
    }
    size_t count = 256;
    void *in = NULL, *out = must_alloc(count * 4);
    if (rank == 1)
        pool(0, count * 4, &in);
    else
        in = must_alloc(count * 4);
    float h[256] = {0};
    to_device(in, h, sizeof h);
    shmesh_array a = {.data = in, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}}, o = a;
    o.data = out;
    int rc = shmesh_psum(mesh, "x", NULL, &a, &o);
    const char *e = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_INVALID && strstr(e, "rank 1's input") && strstr(e, "stream-ordered"),
          "pool memory on rank 1 refused here: %s", e);
    psum_check(out, out, count, 0.0f, "the context still works");
    shmesh_device_free(ctx, in);
    shmesh_device_free(ctx, out);
    return 0;
}

static int mode_openfail(void)
{
    fake_gpu_fail_next_open_fn fail;
    if (!fake_sym("fake_gpu_fail_next_open", &fail, sizeof fail)) {
        printf("rank %d: skip: a failing open needs the fake runtime\n", rank);
        return 77;
    }
    size_t count = 256;
    void *a = must_alloc(count * 4), *b = must_alloc(count * 4);
    if (rank == 1)
        fail();
    float h[256] = {0};
    to_device(a, h, sizeof h);
    shmesh_array in = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}}, out = in;
    out.data = b;
    int rc = shmesh_psum(mesh, "x", NULL, &in, &out);
    const char *e = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_SYSTEM && strstr(e, "rank 1") && strstr(e, "every member"),
          "an IPC open failing on rank 1 failed the call here too: %s", e);
    psum_check(a, b, count, 2.0f, "the next call");
    shmesh_device_free(ctx, a);
    shmesh_device_free(ctx, b);
    return 0;
}

/* Rank 1's input allocation holds `real` floats; its runtime claims twice
 * that, and rank 1 passes 2 * real.  With `first`, a good call of `real`
 * floats first, so that the peers' mapping is cached. */
static int lie(bool first)
{
    fake_gpu_lie_size_fn lie_size;
    if (!fake_sym("fake_gpu_lie_size", &lie_size, sizeof lie_size)) {
        printf("rank %d: skip: a lying exporter needs the fake runtime\n", rank);
        return 77;
    }
    size_t real = 1024, count = 2 * real;
    void *a = must_alloc((rank == 1 ? real : count) * 4), *b = must_alloc(count * 4);
    if (first)
        psum_check(a, b, real, 1.0f, "within the allocation");
    if (rank == 1 && lie_size(a, count * 4)) {
        printf("rank %d: FAILED: fake_gpu_lie_size\n", rank);
        exit(1);
    }
    fake_gpu_counters_fn counters;
    fake_sym("fake_gpu_counters", &counters, sizeof counters);
    struct fake_gpu_counters c0, c1;
    counters(&c0);
    shmesh_array in = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}}, out = in;
    out.data = b;
    int rc = shmesh_psum(mesh, "x", NULL, &in, &out);
    const char *e = shmesh_last_error(ctx);
    counters(&c1);
    if (rank != 1) /* rank 1's own runtime believes its lie */
        check(c1.copies == c0.copies && c1.kernels == c0.kernels,
              "and nothing was queued (%llu copies, %llu kernels)",
              (unsigned long long)(c1.copies - c0.copies),
              (unsigned long long)(c1.kernels - c0.kernels));
    char want[160];
    snprintf(want, sizeof want,
             "the runtime maps %zu bytes of rank 1's input allocation here, but rank 1 published "
             "its input as %zu bytes at offset 0 of %zu",
             real * 4, count * 4, count * 4);
    check(rc == SHMESH_ERR_BAD_SEGMENT && strstr(e, want),
          "a buffer past rank 1's real allocation refused%s: %s", first ? " (cached mapping)" : "",
          e);
    shmesh_device_free(ctx, a);
    shmesh_device_free(ctx, b);
    return 0;
}

static int mode_async(void)
{
    size_t count = 100000;
    float *h = malloc(count * 4);
    void *a = must_alloc(count * 4), *b = must_alloc(count * 4);
    for (size_t k = 0; k < count; k++)
        h[k] = (float)(rank + 1);
    to_device(a, h, count * 4);
    shmesh_array in = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {(int64_t)count}}, out = in;
    out.data = b;
    shmesh_token t;
    int rc = shmesh_psum_async(mesh, "x", NULL, &in, &out, &t);
    if (!rc)
        rc = shmesh_token_wait(t);
    bool ok = !rc;
    if (ok) {
        to_host(h, b, count * 4);
        for (size_t k = 0; k < count && ok; k++)
            ok = h[k] == (float)(n * (n + 1) / 2);
    }
    check(ok, "psum_async on device buffers, then its token: %s",
          rc ? shmesh_last_error(ctx) : ok ? "right" : "wrong");
    shmesh_device_free(ctx, a);
    shmesh_device_free(ctx, b);
    free(h);
    return 0;
}

static int mode_mixed(void)
{
    float h[64] = {0}, o[64];
    void *d = must_alloc(sizeof h), *dout = must_alloc(sizeof h);
    shmesh_array in = {.data = rank == 0 ? d : h, .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {64}}, out = in;
    out.data = rank == 0 ? dout : o;
    int rc = shmesh_psum(mesh, "x", NULL, &in, &out);
    const char *e = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_MISMATCH && strstr(e, "on device"),
          "device buffers on rank 0 only: %s", e);
    return 0;
}

static int mode_local2(void)
{
    int k = shmesh_local_device_count(ctx);
    if (k < 2) {
        printf("rank %d: skip: local2 needs --devices-per-rank 2\n", rank);
        return 77;
    }
    float h[2][16] = {{0}};
    shmesh_array in[2], out[2];
    void *d[4];
    for (int l = 0; l < 2; l++) {
        d[2 * l] = must_alloc(sizeof h[l]);
        d[2 * l + 1] = must_alloc(sizeof h[l]);
        in[l] = (shmesh_array){.data = d[2 * l], .dtype = SHMESH_FLOAT32, .ndim = 1, .shape = {16}};
        out[l] = in[l];
        out[l].data = d[2 * l + 1];
    }
    int rc = shmesh_psum(mesh, "x", NULL, in, out);
    const char *e = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_INVALID && strstr(e, "several devices per rank"),
          "device buffers with 2 devices per rank refused: %s", e);
    for (int l = 0; l < 2; l++) { /* host buffers still work */
        in[l].data = h[l];
        out[l].data = h[l];
    }
    rc = shmesh_psum(mesh, "x", NULL, in, out);
    check(!rc, "then a psum of host buffers: %s", rc ? shmesh_last_error(ctx) : "fine");
    for (int i = 0; i < 4; i++)
        shmesh_device_free(ctx, d[i]);
    return 0;
}

/* e names this rank once, as its prefix: "rank R: <op>: ...". */
static void said_once(int rc, int want, const char *op, const char *what)
{
    const char *e = shmesh_last_error(ctx);
    char prefix[96], tag[32];
    snprintf(prefix, sizeof prefix, "rank %d: %s: ", rank, op);
    snprintf(tag, sizeof tag, "rank %d:", rank);
    int times = 0;
    for (const char *p = e; (p = strstr(p, tag)); p++)
        times++;
    check(rc == want && !strncmp(e, prefix, strlen(prefix)) && times == 1,
          "%s refused, the rank said once: %s", what, e);
}

static int mode_refusals(void)
{
    void *p = NULL;
    said_once(shmesh_device_alloc(ctx, -1, 64, &p), SHMESH_ERR_INVALID, "shmesh_device_alloc",
              "an allocation on device -1");
    said_once(shmesh_device_alloc(ctx, 0, 64, NULL), SHMESH_ERR_INVALID, "shmesh_device_alloc",
              "an allocation without a place for the pointer");
    char h[64] = {0};
    said_once(shmesh_device_copy(ctx, NULL, h, sizeof h), SHMESH_ERR_INVALID, "shmesh_device_copy",
              "a copy to NULL");
    said_once(shmesh_device_free(ctx, h), SHMESH_ERR_SYSTEM, "shmesh_device_free",
              "freeing host memory");
    void *a = must_alloc(256 * 4), *b = must_alloc(256 * 4);
    psum_check(a, b, 256, 1.0f, "the context still works");
    shmesh_device_free(ctx, a);
    shmesh_device_free(ctx, b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr,
                "usage: shmesh-test-device "
                "ops|cache|realloc|pool|openfail|lie|liecached|async|mixed|local2|refusals\n");
        return 2;
    }
    if (shmesh_init(&ctx)) {
        printf("FAILED: shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    n = shmesh_world_size(ctx);
    shmesh_device_stats st;
    shmesh_device_stats_get(ctx, &st);
    if (!strcmp(st.backend, "none")) {
        printf("rank %d: skip: no GPU runtime (SHMESH_DEVICE)\n", rank);
        shmesh_finalize(ctx);
        return 77;
    }
    const char *names[] = {"x"};
    int sizes[] = {shmesh_device_count(ctx)}; /* n, or n x --devices-per-rank */
    if (shmesh_mesh_create(ctx, 1, names, sizes, NULL, &mesh)) {
        printf("rank %d: FAILED: mesh: %s\n", rank, shmesh_last_error(ctx));
        return 1;
    }
    const char *m = argv[1];
    int rc = !strcmp(m, "ops")        ? mode_ops()
             : !strcmp(m, "cache")    ? mode_cache()
             : !strcmp(m, "realloc")  ? mode_realloc()
             : !strcmp(m, "pool")     ? mode_pool()
             : !strcmp(m, "openfail") ? mode_openfail()
             : !strcmp(m, "lie")      ? lie(false)
             : !strcmp(m, "liecached") ? lie(true)
             : !strcmp(m, "async")    ? mode_async()
             : !strcmp(m, "mixed")    ? mode_mixed()
             : !strcmp(m, "local2")   ? mode_local2()
             : !strcmp(m, "refusals") ? mode_refusals()
                                      : 2;
    if (rc == 2)
        fprintf(stderr, "shmesh-test-device: unknown mode '%s'\n", m);
    shmesh_mesh_destroy(mesh);
    /* Modes that leave the job poisoned: their finalize fails. */
    bool poisoned = !strcmp(m, "mixed") || !strncmp(m, "lie", 3);
    int frc = shmesh_finalize(ctx);
    if (frc && !poisoned)
        printf("rank %d: FAILED: finalize: %s\n", rank, shmesh_last_error(NULL));
    return rc ? rc : failures || (frc && !poisoned) ? 1 : 0;
}
