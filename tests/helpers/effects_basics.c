/* shmesh-test-effects-basics: tokens (test, wait, wait_all, wait_any, the
 * runtime token, the done token), async results bit for bit those of the
 * blocking calls, program order between async work, callbacks and blocking
 * calls, blocking calls on a quiet dispatch queue (their positions, a
 * failure at its position), refused arguments (effects, placements, async
 * calls).
 *
 *   shmesh-run -n P -- shmesh-test-effects-basics   (or alone: a job of one)
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

/* A callback held until the main thread opens its gate: what is checked
 * while it runs does not depend on how fast this machine is.  It gives up
 * after 60 s (a dispatch that waited for its work would deadlock), and
 * says so. */
struct gate {
    atomic_int open, done, gave_up;
    pthread_t thread;
};

static void gate_cb(void *arg, int device)
{
    (void)device;
    struct gate *g = arg;
    g->thread = pthread_self();
    int64_t t0 = now_ns();
    while (!atomic_load(&g->open))
        if (now_ns() - t0 > 60 * INT64_C(1000000000)) {
            atomic_store(&g->gave_up, 1);
            break;
        } else {
            sleep_us(1000);
        }
    atomic_store(&g->done, 1);
}

static void gate_check(const struct gate *g, const char *what)
{
    if (atomic_load(&g->gave_up))
        bad("%s: the callback waited 60 s for its gate to open: something waited for it", what);
}

/* Checks, when it runs, that a psum's output is there. */
struct reader {
    const int32_t *out;
    int n;
    int32_t want0; /* out[i] must be want0 + i * world */
    atomic_int ran, ok;
};

static void reader_cb(void *arg, int device)
{
    (void)device;
    struct reader *r = arg;
    bool ok = true;
    for (int i = 0; i < r->n; i++)
        if (r->out[i] != r->want0 + i * world)
            ok = false;
    atomic_store(&r->ok, ok);
    atomic_store(&r->ran, 1);
}

/* A callback that calls the library with its own context: refused, each
 * call explained, nothing deadlocks. */
struct reentry {
    shmesh_token own;
    atomic_int published, ran;
    int rc[3];
    char msg[3][320];
};

static void reentry_cb(void *arg, int device)
{
    (void)device;
    struct reentry *r = arg;
    for (int i = 0; i < 60000 && !atomic_load(&r->published); i++)
        sleep_us(1000);
    shmesh_token t;
    r->rc[0] = shmesh_barrier(ctx);
    snprintf(r->msg[0], sizeof r->msg[0], "%s", shmesh_last_error(ctx));
    r->rc[1] = shmesh_barrier_async(ctx, &t);
    snprintf(r->msg[1], sizeof r->msg[1], "%s", shmesh_last_error(ctx));
    r->rc[2] = shmesh_token_wait(r->own);
    snprintf(r->msg[2], sizeof r->msg[2], "%s", shmesh_last_error(ctx));
    atomic_store(&r->ran, 1);
}

static void same_bits(const char *what, const void *a, const void *b, size_t bytes)
{
    if (memcmp(a, b, bytes))
        bad("%s: the async result differs from the blocking one", what);
}

static void basics_tokens(shmesh_mesh *m)
{
    int f0 = failures;
    /* The done token, and nothing dispatched yet. */
    shmesh_token none = {NULL, 0};
    if (shmesh_token_test(none) != 1 || shmesh_token_wait(none) != 0)
        bad("the token {NULL, 0} is not done");
    if (shmesh_token_test(shmesh_runtime_token(ctx)) != 1)
        bad("the runtime token before any dispatch is not done");
    shmesh_effect *ord;
    MUST(shmesh_effect_create(ctx, "ord", SHMESH_EFFECT_ORDERED, &ord));
    if (shmesh_token_test(shmesh_effect_token(ord)) != 1)
        bad("a new effect's token is not done");
    if (strcmp(shmesh_effect_name(ord), "ord") ||
        shmesh_effect_kind_of(ord) != SHMESH_EFFECT_ORDERED)
        bad("the effect reads back as '%s' of kind %d", shmesh_effect_name(ord),
            (int)shmesh_effect_kind_of(ord));

    /* test before and after; dispatch does not wait for the work (the
     * callback is held until the gate opens, after the dispatch returned). */
    struct gate s = {0};
    shmesh_token a;
    MUST(shmesh_callback(ctx, ord, SHMESH_PLACE_SELF, gate_cb, &s, &a));
    if (atomic_load(&s.done))
        bad("dispatching a callback waited for it to run");
    int t = shmesh_token_test(a);
    if (t != 0)
        bad("token_test on a callback still held -> %d, expected 0", t);
    /* A psum behind it: wait_any over {psum, callback} names the callback
     * (it is earlier in dispatch order). */
    int32_t pin[4], pout[4];
    for (int i = 0; i < 4; i++)
        pin[i] = rank + i;
    shmesh_array in = arr1(pin, SHMESH_INT32, 4), out = arr1(pout, SHMESH_INT32, 4);
    shmesh_token b;
    MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &b));
    if (b.seq <= a.seq || b.ctx != ctx)
        bad("the psum's token {%p, %" PRIu64 "} is not after the callback's {%p, %" PRIu64 "}",
            (void *)b.ctx, b.seq, (void *)a.ctx, a.seq);
    if (shmesh_token_test(b) != 0)
        bad("the psum behind a held callback was done before it");
    shmesh_token pair[2] = {b, a};
    int index = -1;
    atomic_store(&s.open, 1);
    int rc = shmesh_token_wait_any(2, pair, &index);
    if (rc != 0 || index != 1)
        bad("wait_any({psum, held callback}) -> %s, index %d; expected 0, index 1",
            shmesh_error_name(rc), index);
    if (!atomic_load(&s.done))
        bad("wait_any returned before the callback finished");
    gate_check(&s, "token_test before and after");
    if (pthread_equal(s.thread, main_thread))
        bad("the callback ran on the dispatching thread, not the progress thread");
    MUST(shmesh_token_wait(b));
    if (shmesh_token_test(a) != 1 || shmesh_token_test(b) != 1)
        bad("token_test after the waits is not 1");
    for (int i = 0; i < 4; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want += r + i;
        if (pout[i] != want) {
            bad("async psum element %d = %d, expected %d", i, pout[i], want);
            break;
        }
    }
    /* Waiting twice is fine: a token is a value. */
    if (shmesh_token_wait(a) != 0 || shmesh_token_wait(b) != 0)
        bad("a second wait on a done token failed");

    /* wait_all over callbacks, psums and the done token; the runtime token
     * covers everything dispatched. */
    enum { N = 8 };
    shmesh_token toks[N + 1];
    int32_t ins[N][16], outs[N][16];
    struct sleeper ss[N];
    for (int k = 0; k < N; k++) {
        if (k % 2) {
            ss[k] = (struct sleeper){.us = 2000};
            MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &ss[k], &toks[k]));
        } else {
            for (int i = 0; i < 16; i++)
                ins[k][i] = k * 100 + i + rank;
            shmesh_array ki = arr1(ins[k], SHMESH_INT32, 16), ko = arr1(outs[k], SHMESH_INT32, 16);
            MUST(shmesh_psum_async(m, "i", NULL, &ki, &ko, &toks[k]));
        }
    }
    toks[N] = none;
    shmesh_token rt = shmesh_runtime_token(ctx);
    if (rt.ctx != ctx || rt.seq < toks[N - 1].seq)
        bad("the runtime token {%p, %" PRIu64 "} does not cover the last dispatch's %" PRIu64,
            (void *)rt.ctx, rt.seq, toks[N - 1].seq);
    MUST(shmesh_token_wait(rt));
    for (int k = 0; k < N; k++)
        if (shmesh_token_test(toks[k]) != 1) {
            bad("token %d is not done after the runtime token's wait", k);
            break;
        }
    MUST(shmesh_token_wait_all(N + 1, toks));
    for (int k = 0; k < N; k += 2)
        for (int i = 0; i < 16; i++) {
            int32_t want = 0;
            for (int r = 0; r < world; r++)
                want += k * 100 + i + r;
            if (outs[k][i] != want) {
                bad("psum %d element %d = %d, expected %d", k, i, outs[k][i], want);
                k = N;
                break;
            }
        }
    for (int k = 1; k < N; k += 2)
        if (!atomic_load(&ss[k].done))
            bad("callback %d had not run when wait_all returned", k);
    if (failures == f0)
        printf("rank %d: tokens ok\n", rank);
}

static void basics_results(shmesh_mesh *m)
{
    int f0 = failures;
    static const int64_t sizes[] = {1, 1000, 300000};
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        int64_t n = sizes[c];
        float *x = xcalloc((size_t)n, sizeof *x);
        fill_random(x, (size_t)n, 100 + (uint64_t)rank * 31 + c);
        size_t bytes = (size_t)n * sizeof(float);
        float *sa = xcalloc((size_t)n, sizeof(float)), *sb = xcalloc((size_t)n, sizeof(float));
        float *ga = xcalloc((size_t)n * world, sizeof(float)),
              *gb = xcalloc((size_t)n * world, sizeof(float));
        float *pa = xcalloc((size_t)n, sizeof(float)), *pb = xcalloc((size_t)n, sizeof(float));
        shmesh_array in = arr1(x, SHMESH_FLOAT32, n);
        shmesh_array sum_a = arr1(sa, SHMESH_FLOAT32, n), sum_b = arr1(sb, SHMESH_FLOAT32, n);
        shmesh_array gat_a = {.data = ga, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, n}},
                     gat_b = {.data = gb, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, n}};
        shmesh_array per_a = arr1(pa, SHMESH_FLOAT32, n), per_b = arr1(pb, SHMESH_FLOAT32, n);
        int(*perm)[2] = xcalloc((size_t)world, sizeof *perm);
        for (int i = 0; i < world; i++) {
            perm[i][0] = i;
            perm[i][1] = (i + 1) % world;
        }
        shmesh_token t[3];
        MUST(shmesh_psum_async(m, "i", NULL, &in, &sum_a, &t[0]));
        MUST(shmesh_all_gather_async(m, "i", NULL, 0, false, &in, &gat_a, &t[1]));
        MUST(shmesh_ppermute_async(m, "i", (const int(*)[2])perm, world, &in, &per_a, &t[2]));
        /* Blocking calls after async ones: the same dispatch queue, in order. */
        MUST(shmesh_psum(m, "i", NULL, &in, &sum_b));
        int done = shmesh_token_test(t[0]);
        if (done != 1)
            bad("an async psum dispatched before a blocking psum is not done after it (%d)",
                done);
        MUST(shmesh_all_gather(m, "i", NULL, 0, false, &in, &gat_b));
        MUST(shmesh_ppermute(m, "i", (const int(*)[2])perm, world, &in, &per_b));
        MUST(shmesh_token_wait_all(3, t));
        char what[64];
        snprintf(what, sizeof what, "psum of %" PRId64, n);
        same_bits(what, sa, sb, bytes);
        snprintf(what, sizeof what, "all_gather of %" PRId64, n);
        same_bits(what, ga, gb, bytes * (size_t)world);
        snprintf(what, sizeof what, "ppermute of %" PRId64, n);
        same_bits(what, pa, pb, bytes);
        /* and the gather holds every rank's data. */
        for (int r = 0; r < world; r++) {
            float *want = xcalloc((size_t)n, sizeof *want);
            fill_random(want, (size_t)n, 100 + (uint64_t)r * 31 + c);
            if (memcmp(ga + (size_t)r * (size_t)n, want, bytes))
                bad("all_gather_async of %" PRId64 ": rank %d's block is wrong", n, r);
            if (r == (rank + world - 1) % world && memcmp(pa, want, bytes))
                bad("ppermute_async of %" PRId64 ": not rank %d's data", n, r);
            free(want);
        }
        free(perm);
        free(x);
        free(sa);
        free(sb);
        free(ga);
        free(gb);
        free(pa);
        free(pb);
    }
    /* Heap buffers (zero-copy): async equals blocking. */
    int64_t n = 65536;
    float *hx = shmesh_alloc(ctx, (size_t)n * sizeof(float));
    float *ha = shmesh_alloc(ctx, (size_t)n * sizeof(float));
    float *hb = xcalloc((size_t)n, sizeof(float));
    if (!hx || !ha) {
        bad("shmesh_alloc of %" PRId64 " floats: %s", n, why());
    } else {
        fill_random(hx, (size_t)n, 900 + (uint64_t)rank);
        shmesh_array in = arr1(hx, SHMESH_FLOAT32, n), oa = arr1(ha, SHMESH_FLOAT32, n),
                     ob = arr1(hb, SHMESH_FLOAT32, n);
        shmesh_token t;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &oa, &t));
        MUST(shmesh_token_wait(t));
        MUST(shmesh_psum(m, "i", NULL, &in, &ob));
        same_bits("psum of heap buffers", ha, hb, (size_t)n * sizeof(float));
    }
    shmesh_free(ctx, hx);
    shmesh_free(ctx, ha);
    free(hb);
    if (failures == f0)
        printf("rank %d: async results equal blocking ones\n", rank);
}

/* Every other async form against its blocking form, on the same inputs. */
static void basics_all_ops(shmesh_mesh *m)
{
    int f0 = failures;
    const int64_t w = world, n = 4 * w;
    float x[4 * 64];
    fill_random(x, (size_t)n, 500 + (uint64_t)rank);
    float a[4 * 64], b[4 * 64];
    int32_t ia[4 * 64], ib[4 * 64];
    shmesh_array in = arr1(x, SHMESH_FLOAT32, n);
    shmesh_array in2 = {.data = x, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    int *rev = xcalloc((size_t)w, sizeof *rev);
    for (int i = 0; i < w; i++)
        rev[i] = (int)w - 1 - i;
    for (int op = 0; op < 10; op++) {
        memset(a, 0x5a, sizeof a);
        memset(b, 0x5a, sizeof b);
        memset(ia, 0x5a, sizeof ia);
        memset(ib, 0x5a, sizeof ib);
        shmesh_array oa = arr1(a, SHMESH_FLOAT32, n), ob = arr1(b, SHMESH_FLOAT32, n);
        shmesh_array qa = arr1(ia, SHMESH_INT32, n), qb = arr1(ib, SHMESH_INT32, n);
        shmesh_token t = {NULL, 0};
        const char *name = "?";
        int rca = 0, rcb = 0;
        switch (op) {
        case 0:
            name = "pmax";
            rca = shmesh_pmax_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmax(m, "i", NULL, &in, &ob);
            break;
        case 1:
            name = "pmin";
            rca = shmesh_pmin_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmin(m, "i", NULL, &in, &ob);
            break;
        case 2:
            name = "pmean";
            rca = shmesh_pmean_async(m, "i", NULL, &in, &oa, &t);
            rcb = shmesh_pmean(m, "i", NULL, &in, &ob);
            break;
        case 3:
            name = "pargmax";
            rca = shmesh_pargmax_async(m, "i", NULL, &in, &qa, &t);
            rcb = shmesh_pargmax(m, "i", NULL, &in, &qb);
            break;
        case 4:
            name = "pargmin";
            rca = shmesh_pargmin_async(m, "i", NULL, &in, &qa, &t);
            rcb = shmesh_pargmin(m, "i", NULL, &in, &qb);
            break;
        case 5:
            name = "psum_scatter";
            oa.shape[0] = ob.shape[0] = 4;
            rca = shmesh_psum_scatter_async(m, "i", NULL, 0, true, &in, &oa, &t);
            rcb = shmesh_psum_scatter(m, "i", NULL, 0, true, &in, &ob);
            break;
        case 6:
            name = "all_to_all";
            rca = shmesh_all_to_all_async(m, "i", NULL, 0, 0, true, &in, &oa, &t);
            rcb = shmesh_all_to_all(m, "i", NULL, 0, 0, true, &in, &ob);
            break;
        case 7: {
            name = "pswapaxes";
            shmesh_array a2 = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}}, b2 = {.data = b, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
            rca = shmesh_pswapaxes_async(m, "i", NULL, 0, &in2, &a2, &t);
            rcb = shmesh_pswapaxes(m, "i", NULL, 0, &in2, &b2);
            break;
        }
        case 8:
            name = "pshuffle";
            rca = shmesh_pshuffle_async(m, "i", rev, &in, &oa, &t);
            rcb = shmesh_pshuffle(m, "i", rev, &in, &ob);
            break;
        case 9:
            name = "pbroadcast";
            rca = shmesh_pbroadcast_async(m, "i", (int)w - 1, &in, &oa, &t);
            rcb = shmesh_pbroadcast(m, "i", (int)w - 1, &in, &ob);
            break;
        }
        if (rca || rcb) {
            bad("%s: async -> %s, blocking -> %s: %s", name, shmesh_error_name(rca),
                shmesh_error_name(rcb), why());
            break;
        }
        /* The blocking call came later in dispatch order: the async one is
         * done. */
        if (shmesh_token_test(t) != 1)
            bad("%s_async is not done after the blocking %s that followed it", name, name);
        MUST(shmesh_token_wait(t));
        if (memcmp(a, b, sizeof a) || memcmp(ia, ib, sizeof ia))
            bad("%s: the async result differs from the blocking one", name);
    }
    /* world_sum, in place. */
    int64_t wa[5], wb[5];
    for (int i = 0; i < 5; i++)
        wa[i] = wb[i] = (int64_t)(rank + 1) * (i + 1);
    shmesh_token t;
    MUST(shmesh_world_sum_async(ctx, wa, 5, SHMESH_INT64, &t));
    MUST(shmesh_world_sum(ctx, wb, 5, SHMESH_INT64));
    MUST(shmesh_token_wait(t));
    if (memcmp(wa, wb, sizeof wa) || wa[4] != 5 * w * (w + 1) / 2)
        bad("world_sum_async: %" PRId64 ", blocking %" PRId64 ", expected %" PRId64, wa[4], wb[4],
            5 * w * (w + 1) / 2);
    /* ragged_all_to_all: row i of this rank's operand goes to rank i, at
     * row `rank` there. */
    int32_t io[64], ss[64], oo[64], rs[64];
    for (int i = 0; i < w; i++) {
        io[i] = i;
        ss[i] = 1;
        oo[i] = rank;
        rs[i] = 1;
    }
    shmesh_array op = {.data = x, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    shmesh_array ra = {.data = a, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}}, rb = {.data = b, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {w, 4}};
    shmesh_array aio = arr1(io, SHMESH_INT32, w), ass = arr1(ss, SHMESH_INT32, w),
                 aoo = arr1(oo, SHMESH_INT32, w), ars = arr1(rs, SHMESH_INT32, w);
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    MUST(shmesh_ragged_all_to_all_async(m, "i", NULL, &op, &ra, &aio, &ass, &aoo, &ars, &t));
    MUST(shmesh_ragged_all_to_all(m, "i", NULL, &op, &rb, &aio, &ass, &aoo, &ars));
    int rc = shmesh_token_wait(t);
    if (rc) /* refused alike on every rank: the job goes on */
        bad("ragged_all_to_all_async -> %s where the blocking call succeeded: %s",
            shmesh_error_name(rc), why());
    else if (memcmp(a, b, sizeof a))
        bad("ragged_all_to_all: the async result differs from the blocking one");
    free(rev);
    if (failures == f0)
        printf("rank %d: every async form equals its blocking form\n", rank);
}

/* The runtime token is per thread: a thread that takes the context over
 * and has dispatched nothing has a done runtime token, whatever the
 * context's dispatch queue still holds; once it dispatches, its token
 * covers that. */
struct handoff {
    shmesh_mesh *m;
    struct gate *g; /* the main thread's callback, held until this thread dispatched */
    int before, after_dispatch;
    int32_t v, sum;
    int rc;
};

static void *handoff_thread(void *arg)
{
    struct handoff *h = arg;
    h->before = shmesh_token_test(shmesh_runtime_token(ctx));
    shmesh_array in = {.data = &h->v, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}}, out = {.data = &h->sum, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
    shmesh_token t;
    h->rc = shmesh_psum_async(h->m, "i", NULL, &in, &out, &t);
    shmesh_token rt = shmesh_runtime_token(ctx);
    h->after_dispatch = rt.ctx == ctx && rt.seq == t.seq;
    atomic_store(&h->g->open, 1);
    if (!h->rc)
        h->rc = shmesh_token_wait(rt);
    return NULL;
}

static void basics_threads(shmesh_mesh *m)
{
    int f0 = failures;
    struct gate s = {0};
    shmesh_token a;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, gate_cb, &s, &a));
    struct handoff h = {.m = m, .g = &s, .v = rank + 1};
    pthread_t th;
    if (pthread_create(&th, NULL, handoff_thread, &h)) {
        bad("pthread_create failed");
        return;
    }
    pthread_join(th, NULL);
    gate_check(&s, "runtime token per thread");
    if (h.before != 1)
        bad("a thread that dispatched nothing: its runtime token test -> %d, expected 1 (done) "
            "while another thread's callback is still held", h.before);
    if (!h.after_dispatch)
        bad("after a dispatch, the thread's runtime token is not that dispatch's token");
    if (h.rc)
        bad("the other thread's psum -> %s", shmesh_error_name(h.rc));
    else if (h.sum != world * (world + 1) / 2)
        bad("the other thread's psum = %d, expected %d", h.sum, world * (world + 1) / 2);
    if (!atomic_load(&s.done) || shmesh_token_test(a) != 1)
        bad("the psum the other thread dispatched after the callback finished first");
    if (failures == f0)
        printf("rank %d: runtime tokens per thread ok\n", rank);
}

static void basics_order(shmesh_mesh *m)
{
    int f0 = failures;
    /* A callback after an async psum sees its output (no effect, and an
     * unordered effect). */
    shmesh_effect *u;
    MUST(shmesh_effect_create(ctx, "unord", SHMESH_EFFECT_UNORDERED, &u));
    shmesh_effect *effs[2] = {NULL, u};
    for (int j = 0; j < 2; j++) {
        enum { N = 2048 };
        static int32_t in_[N], out_[N];
        for (int i = 0; i < N; i++) {
            in_[i] = rank + i + j;
            out_[i] = -1;
        }
        int32_t want0 = 0;
        for (int r = 0; r < world; r++)
            want0 += r + j;
        struct reader rd = {.out = out_, .n = N, .want0 = want0};
        shmesh_array in = arr1(in_, SHMESH_INT32, N), out = arr1(out_, SHMESH_INT32, N);
        shmesh_token t;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, NULL));
        MUST(shmesh_callback(ctx, effs[j], SHMESH_PLACE_SELF, reader_cb, &rd, &t));
        MUST(shmesh_token_wait(t));
        if (!atomic_load(&rd.ran) || !atomic_load(&rd.ok))
            bad("a callback (%s) dispatched after an async psum did not see its output",
                j ? "unordered effect" : "no effect");
    }
    /* A blocking call waits for the callback dispatched before it. */
    struct sleeper s = {.us = 100000};
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, sleep_cb, &s, NULL));
    MUST(shmesh_barrier(ctx));
    if (!atomic_load(&s.done))
        bad("a blocking barrier returned before the callback dispatched before it ran");
    /* Every device, no effect: once here (one device per rank). */
    struct sleeper s2 = {.us = 1000};
    shmesh_token t;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_ALL, sleep_cb, &s2, &t));
    MUST(shmesh_token_wait(t));
    if (!atomic_load(&s2.done))
        bad("a callback on every device did not run here");
    MUST(shmesh_effects_barrier(ctx));
    if (failures == f0)
        printf("rank %d: program order ok\n", rank);

    static struct reentry re;
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, reentry_cb, &re, &re.own));
    atomic_store(&re.published, 1);
    int64_t t0 = now_ns();
    MUST(shmesh_token_wait(re.own));
    static const char *const calls[] = {"shmesh_barrier", "shmesh_barrier_async",
                                        "shmesh_token_wait(its own token)"};
    for (int i = 0; i < 3; i++) {
        printf("rank %d: in a callback, %s -> %s: %s\n", rank, calls[i],
               shmesh_error_name(re.rc[i]), re.msg[i]);
        if (re.rc[i] != SHMESH_ERR_INVALID)
            bad("in a callback, %s returned %s, expected SHMESH_ERR_INVALID", calls[i],
                shmesh_error_name(re.rc[i]));
        else if (!strstr(re.msg[i], "callback"))
            bad("in a callback, %s: the explanation does not say why: '%s'", calls[i],
                re.msg[i]);
    }
    /* Refused, not waited: a wait here would be for ever (no SHMESH_TIMEOUT). */
    if (ms_since(t0) > 20000)
        bad("the callback calling the library took %.0f ms", ms_since(t0));
    MUST(shmesh_barrier(ctx)); /* still usable */
}

/* Work that fails alike on every rank (a ragged_all_to_all whose recv_sizes
 * disagree with what the peer sends) fails its own token only: the work
 * around it succeeds, wait_all reports it, the context stays usable. */
static void basics_failed_work(shmesh_mesh *m)
{
    if (world < 2)
        return;
    int f0 = failures;
    int32_t x[4] = {rank, rank, rank, rank}, y[4], z[4];
    shmesh_array xi = arr1(x, SHMESH_INT32, 4), yo = arr1(y, SHMESH_INT32, 4),
                 zo = arr1(z, SHMESH_INT32, 4);
    float op[64 * 4], out[64 * 4];
    fill_random(op, 4 * (size_t)world, 77);
    int32_t io[64], ss[64], oo[64], rs[64];
    for (int i = 0; i < world; i++) {
        io[i] = i;
        ss[i] = 1;
        oo[i] = rank;
        rs[i] = 1;
    }
    if (rank == 0)
        rs[1] = 2; /* rank 1 sends one row */
    shmesh_array aop = {.data = op, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}},
                 aout = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}};
    shmesh_array aio = arr1(io, SHMESH_INT32, world), ass = arr1(ss, SHMESH_INT32, world),
                 aoo = arr1(oo, SHMESH_INT32, world), ars = arr1(rs, SHMESH_INT32, world);
    shmesh_token t[3];
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &yo, &t[0]));
    MUST(shmesh_ragged_all_to_all_async(m, "i", NULL, &aop, &aout, &aio, &ass, &aoo, &ars, &t[1]));
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &zo, &t[2]));
    int rc = shmesh_token_wait_all(3, t);
    printf("rank %d: wait_all over a failing ragged_all_to_all -> %s: %s\n", rank,
           shmesh_error_name(rc), rc ? why() : "");
    if (rc != SHMESH_ERR_INVALID)
        bad("wait_all over a failing ragged_all_to_all -> %s, expected SHMESH_ERR_INVALID",
            shmesh_error_name(rc));
    else if (!strstr(why(), "recv_sizes"))
        bad("wait_all: the explanation does not name recv_sizes: %s", why());
    int t0 = shmesh_token_test(t[0]), t1 = shmesh_token_test(t[1]), t2 = shmesh_token_test(t[2]);
    if (t0 != 1 || t1 != SHMESH_ERR_INVALID || t2 != 1)
        bad("token_test of psum, failed ragged, psum -> %d, %d, %d; expected 1, %d, 1", t0, t1, t2,
            SHMESH_ERR_INVALID);
    int want = world * (world - 1) / 2;
    if (y[0] != want || z[3] != want)
        bad("the psums around the failed call gave %d and %d, expected %d", y[0], z[3], want);
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_barrier(ctx)); /* usable */
    if (failures == f0)
        printf("rank %d: failed work fails its own token only\n", rank);
}

/* Blocking calls on a quiet dispatch queue (everything dispatched is done):
 * the caller runs each at the dispatch queue's next position, which the
 * runtime token names; a failure there is that position's result, and the
 * job goes on (engine/dispatch.c, run_idle). */
static void basics_quiet(shmesh_mesh *m)
{
    int f0 = failures;
    int32_t x[4] = {rank, rank, rank, rank}, y[4] = {-1, -1, -1, -1};
    shmesh_array xi = arr1(x, SHMESH_INT32, 4), yo = arr1(y, SHMESH_INT32, 4);
    int want = world * (world - 1) / 2;
    shmesh_token t1, t2;
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &yo, &t1));
    MUST(shmesh_token_wait(t1));
    uint64_t next = t1.seq + 1;
    for (int k = 0; k < 3; k++, next++) {
        y[0] = -1;
        MUST(shmesh_psum(m, "i", NULL, &xi, &yo));
        shmesh_token rt = shmesh_runtime_token(ctx);
        if (rt.ctx != ctx || rt.seq != next || shmesh_token_test(rt) != 1)
            bad("blocking psum %d on a quiet dispatch queue: the runtime token is {%p, "
                "%" PRIu64
                "} (test -> %d), expected {%p, %" PRIu64 "}, done",
                k, (void *)rt.ctx, rt.seq, shmesh_token_test(rt), (void *)ctx, next);
        if (y[0] != want)
            bad("blocking psum %d on a quiet dispatch queue gave %d, expected %d", k, y[0],
                want);
    }
    if (world >= 2) { /* rank 0 expects two rows from rank 1, which sends one */
        float op[64 * 4], out[64 * 4];
        fill_random(op, 4 * (size_t)world, 78);
        int32_t io[64], ss[64], oo[64], rs[64];
        for (int i = 0; i < world; i++) {
            io[i] = i;
            ss[i] = 1;
            oo[i] = rank;
            rs[i] = 1;
        }
        if (rank == 0)
            rs[1] = 2;
        shmesh_array aop = {.data = op, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}},
                     aout = {.data = out, .dtype = SHMESH_FLOAT32, .ndim = 2, .shape = {world, 4}};
        shmesh_array aio = arr1(io, SHMESH_INT32, world), ass = arr1(ss, SHMESH_INT32, world),
                     aoo = arr1(oo, SHMESH_INT32, world), ars = arr1(rs, SHMESH_INT32, world);
        int rc = shmesh_ragged_all_to_all(m, "i", NULL, &aop, &aout, &aio, &ass, &aoo, &ars);
        if (rc != SHMESH_ERR_INVALID || !strstr(why(), "recv_sizes"))
            bad("a failing blocking ragged_all_to_all on a quiet dispatch queue -> %s (%s), "
                "expected SHMESH_ERR_INVALID naming recv_sizes",
                shmesh_error_name(rc), rc ? why() : "");
        shmesh_token rt = shmesh_runtime_token(ctx);
        int t = shmesh_token_test(rt);
        if (rt.seq != next || t != SHMESH_ERR_INVALID)
            bad("after the failed blocking call the runtime token is position %" PRIu64
                " (test -> %d), expected %" PRIu64 " failed with SHMESH_ERR_INVALID",
                rt.seq, t, next);
        next++;
    }
    y[0] = -1;
    MUST(shmesh_psum_async(m, "i", NULL, &xi, &yo, &t2));
    if (t2.seq != next)
        bad("the async psum after blocking calls on a quiet dispatch queue is position "
            "%" PRIu64
            ", expected %" PRIu64, t2.seq, next);
    MUST(shmesh_token_wait(t2));
    if (y[0] != want)
        bad("the async psum after them gave %d, expected %d", y[0], want);
    if (failures == f0)
        printf("rank %d: blocking calls on a quiet dispatch queue ok\n", rank);
}

static void basics_refusals(shmesh_mesh *m)
{
    shmesh_effect *e = NULL;
    char longname[SHMESH_MAX_EFFECT_NAME + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    expect("effect_create(NULL name)", shmesh_effect_create(ctx, NULL, SHMESH_EFFECT_ORDERED, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(empty name)", shmesh_effect_create(ctx, "", SHMESH_EFFECT_ORDERED, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(long name)",
           shmesh_effect_create(ctx, longname, SHMESH_EFFECT_ORDERED, &e), SHMESH_ERR_INVALID);
    expect_in_message("effect_create(long name)", "32 characters");
    if (strstr(why(), "got \"\""))
        bad("effect_create(long name): the message says the name found was empty: %s", why());
    expect("effect_create(kind 7)", shmesh_effect_create(ctx, "k", (shmesh_effect_kind)7, &e),
           SHMESH_ERR_INVALID);
    expect("effect_create(NULL out)", shmesh_effect_create(ctx, "k", SHMESH_EFFECT_ORDERED, NULL),
           SHMESH_ERR_INVALID);

    shmesh_token t = {ctx, 999};
    expect("callback(NULL fn)", shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, NULL, NULL, &t),
           SHMESH_ERR_INVALID);
    if (!token_is_none(t))
        bad("a refused callback left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    t = (shmesh_token){ctx, 999};
    expect("callback(placement -5)", shmesh_callback(ctx, NULL, -5, noop_cb, NULL, &t),
           SHMESH_ERR_INVALID);
    expect_in_message("callback(placement -5)", "-5");
    if (!token_is_none(t))
        bad("a refused callback left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    char found[16];
    snprintf(found, sizeof found, "%d", ndev);
    expect("callback(placement ndev)", shmesh_callback(ctx, NULL, ndev, noop_cb, NULL, &t),
           SHMESH_ERR_INVALID);
    expect_in_message("callback(placement ndev)", found);

    /* An async call with a wrong output shape: refused at once. */
    float v[4] = {0}, w[3], w4[4];
    shmesh_array in = arr1(v, SHMESH_FLOAT32, 4), out = arr1(w, SHMESH_FLOAT32, 3),
                 out4 = arr1(w4, SHMESH_FLOAT32, 4);
    t = (shmesh_token){ctx, 999};
    expect("psum_async(out of 3 for 4)", shmesh_psum_async(m, "i", NULL, &in, &out, &t),
           SHMESH_ERR_INVALID);
    if (!token_is_none(t))
        bad("a refused psum_async left its token {%p, %" PRIu64 "}", (void *)t.ctx, t.seq);
    expect("psum_async(axis 'nope')", shmesh_psum_async(m, "nope", NULL, &in, &out4, &t),
           SHMESH_ERR_INVALID);

    /* Tokens that name nothing dispatched, and bad token lists: refused,
     * never a wait.  Fifty times: a refusal that first waited one slice
     * (0.1 s, 1 s with io_uring) would take 15 s or more, where refusals
     * take microseconds, however busy the machine. */
    shmesh_token forged = {ctx, (uint64_t)1 << 40};
    int64_t t0 = now_ns();
    expect("token_wait(forged)", shmesh_token_wait(forged), SHMESH_ERR_INVALID);
    expect("token_test(forged)", shmesh_token_test(forged), SHMESH_ERR_INVALID);
    shmesh_token two[2] = {{NULL, 0}, forged};
    expect("token_wait_all(forged)", shmesh_token_wait_all(2, two), SHMESH_ERR_INVALID);
    for (int i = 1; i < 50; i++)
        if (shmesh_token_wait(forged) != SHMESH_ERR_INVALID ||
            shmesh_token_test(forged) != SHMESH_ERR_INVALID ||
            shmesh_token_wait_all(2, two) != SHMESH_ERR_INVALID) {
            bad("forged tokens: refused once, then not in round %d", i);
            break;
        }
    if (ms_since(t0) > 5000)
        bad("refusing forged tokens 50 times took %.0f ms", ms_since(t0));
    /* Lists naming no context: explained by shmesh_last_error(NULL). */
    int index = -7;
    for (int i = 0; i < 3; i++) {
        static const char *const what[] = {"token_wait_all(-1)", "token_wait_any(0)",
                                           "token_wait_any(NULL index)"};
        static const char *const needle[] = {"n = -1", "n = 0", "index NULL"};
        int rc = i == 0   ? shmesh_token_wait_all(-1, two)
                 : i == 1 ? shmesh_token_wait_any(0, two, &index)
                          : shmesh_token_wait_any(1, two, NULL);
        printf("rank %d: %s -> %s: %s\n", rank, what[i], shmesh_error_name(rc),
               shmesh_last_error(NULL));
        if (rc != SHMESH_ERR_INVALID)
            bad("%s -> %s, expected SHMESH_ERR_INVALID", what[i], shmesh_error_name(rc));
        else if (!strstr(shmesh_last_error(NULL), needle[i]))
            bad("%s: shmesh_last_error(NULL) does not say '%s': %s", what[i], needle[i],
                shmesh_last_error(NULL));
    }
    expect("token_wait_all(0, NULL)", shmesh_token_wait_all(0, NULL), 0);
    expect("token_wait_any(a done token)", shmesh_token_wait_any(1, two, &index), 0);
    if (index != 0)
        bad("wait_any over a done token: index %d, expected 0", index);

    /* Effects up to the limit (two exist: "ord" and "unord"), then one more. */
    int made = 2;
    for (; made < SHMESH_MAX_EFFECTS; made++) {
        char name[16];
        snprintf(name, sizeof name, "e%d", made);
        MUST(shmesh_effect_create(ctx, name, (shmesh_effect_kind)(made % 3), &e));
    }
    e = NULL;
    expect("effect_create(one too many)",
           shmesh_effect_create(ctx, "extra", SHMESH_EFFECT_ORDERED, &e), SHMESH_ERR_INVALID);
    char limit[16];
    snprintf(limit, sizeof limit, "%d", SHMESH_MAX_EFFECTS);
    expect_in_message("effect_create(one too many)", limit);

    /* Still usable. */
    MUST(shmesh_barrier(ctx));
    shmesh_token bt;
    MUST(shmesh_barrier_async(ctx, &bt));
    MUST(shmesh_token_wait(bt));
    printf("rank %d: errors: job usable\n", rank);
}

/* A mesh may be freed, or popped, once the work is dispatched. */
static void basics_mesh_lifetime(void)
{
    int f0 = failures;
    int32_t v[8], w1[8], w2[8];
    for (int i = 0; i < 8; i++)
        v[i] = rank * 10 + i;
    shmesh_array in = arr1(v, SHMESH_INT32, 8), o1 = arr1(w1, SHMESH_INT32, 8),
                 o2 = arr1(w2, SHMESH_INT32, 8);
    shmesh_mesh *m1 = line_mesh(), *m2 = line_mesh(); /* collective: before the gate */
    struct gate s = {0}; /* the work waits behind it */
    MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, gate_cb, &s, NULL));
    shmesh_token t1, t2;
    MUST(shmesh_psum_async(m1, "i", NULL, &in, &o1, &t1));
    shmesh_mesh_destroy(m1);
    MUST(shmesh_mesh_push(m2));
    MUST(shmesh_psum_async(NULL, "i", NULL, &in, &o2, &t2));
    MUST(shmesh_mesh_pop(m2));
    shmesh_mesh_destroy(m2);
    if (shmesh_token_test(t1) != 0)
        bad("the psum behind a held callback was done at once");
    atomic_store(&s.open, 1);
    MUST(shmesh_token_wait(t1));
    gate_check(&s, "meshes freed after dispatch");
    MUST(shmesh_token_wait(t2));
    for (int i = 0; i < 8; i++) {
        int32_t want = 0;
        for (int r = 0; r < world; r++)
            want += r * 10 + i;
        if (w1[i] != want || w2[i] != want) {
            bad("psums over a freed / popped mesh: element %d = %d, %d; expected %d", i, w1[i],
                w2[i], want);
            break;
        }
    }
    if (failures == f0)
        printf("rank %d: meshes freed after dispatch ok\n", rank);
}

/* Thousands of async psums in flight at once, each with its own buffers. */
static void basics_flood(shmesh_mesh *m)
{
    int f0 = failures;
    enum { N = 3000 };
    int32_t *in = xcalloc(N, sizeof *in), *out = xcalloc(N, sizeof *out);
    shmesh_token *t = xcalloc(N, sizeof *t);
    for (int i = 0; i < N; i++) {
        in[i] = i + rank;
        out[i] = -1;
        shmesh_array a = {.data = &in[i], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}}, b = {.data = &out[i], .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
        MUST(shmesh_psum_async(m, "i", NULL, &a, &b, &t[i]));
    }
    MUST(shmesh_token_wait_all(N, t));
    for (int i = 0; i < N; i++)
        if (out[i] != world * i + world * (world - 1) / 2) {
            bad("psum %d of %d in flight = %d, expected %d", i, N, out[i],
                world * i + world * (world - 1) / 2);
            break;
        }
    free(in);
    free(out);
    free(t);
    if (failures == f0)
        printf("rank %d: %d psums in flight ok\n", rank, N);
}

/* Records whether it ran on the main thread. */
static void where_cb(void *arg, int device)
{
    (void)device;
    atomic_int *on_main = arg;
    if (pthread_equal(pthread_self(), main_thread))
        atomic_fetch_add(on_main, 1);
}

/* A thread that waits for queued work runs collectives itself when the
 * progress thread has not taken them yet, never host callbacks: many
 * callbacks waited for at once, each the head of an idle queue (a waiter
 * that took them would run most of them), and psums waited for at once,
 * whoever runs them, give their results. */
static void basics_waiter_runs(shmesh_mesh *m)
{
    int f0 = failures;
    enum { N = 300 };
    atomic_int on_main = 0;
    int32_t x[2], y[2];
    shmesh_array in = arr1(x, SHMESH_INT32, 2), out = arr1(y, SHMESH_INT32, 2);
    for (int i = 0; i < N; i++) {
        shmesh_token t;
        MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, where_cb, &on_main, &t));
        MUST(shmesh_token_wait(t));
        x[0] = rank + i;
        x[1] = -rank;
        y[0] = y[1] = -1;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &t));
        MUST(shmesh_token_wait(t));
        int32_t want = world * i + world * (world - 1) / 2;
        if (y[0] != want || y[1] != -world * (world - 1) / 2) {
            bad("psum_async %d waited for at once = {%d, %d}, expected {%d, %d}", i, y[0], y[1],
                want, -world * (world - 1) / 2);
            break;
        }
    }
    if (atomic_load(&on_main))
        bad("%d of %d host callbacks waited for at once ran on the waiting thread, not the "
            "progress thread", atomic_load(&on_main), N);
    if (failures == f0)
        printf("rank %d: waited-for work ok\n", rank);
}

/* Polls t with shmesh_token_test, never waiting, for up to 10 s: whether
 * it finished (a failure is bad()). */
static bool finishes_unwaited(shmesh_token t, const char *what)
{
    for (int i = 0; i < 100000; i++) {
        int rc = shmesh_token_test(t);
        if (rc == 1)
            return true;
        if (rc) {
            bad("%s: shmesh_token_test -> %s", what, shmesh_error_name(rc));
            return false;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    bad("%s: not finished after 10 s of shmesh_token_test, never waited for", what);
    return false;
}

/* Work nobody waits for still runs once the caller got used to running
 * what it waits for (the thread then looks at its queue every
 * SHMESH_DISPATCH_POLL_NS instead of being woken: engine/dispatch.c): a
 * psum and a host callback right after such waits, and a psum once the
 * thread stopped looking (40 looks; 200 ms is past them at the default). */
static void basics_unwaited(shmesh_mesh *m)
{
    int f0 = failures;
    int32_t x = rank + 1, y = -1;
    shmesh_array in = {.data = &x, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
    shmesh_array out = {.data = &y, .dtype = SHMESH_INT32, .ndim = 0, .shape = {0}};
    int32_t want = world * (world + 1) / 2;
    atomic_int on_main = 0;
    for (int round = 0; round < 3; round++) {
        shmesh_token t;
        for (int i = 0; i < 20; i++) { /* waited for at once: the caller runs them */
            MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &t));
            MUST(shmesh_token_wait(t));
        }
        if (round == 2) {
            MUST(shmesh_barrier(ctx));
            struct timespec ts = {0, 200000000};
            nanosleep(&ts, NULL);
        }
        y = -1;
        MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &t));
        if (!finishes_unwaited(t, "psum_async after waited-for ones"))
            break;
        if (y != want) {
            bad("psum_async never waited for = %d, expected %d", y, want);
            break;
        }
        if (round == 1) {
            MUST(shmesh_callback(ctx, NULL, SHMESH_PLACE_SELF, where_cb, &on_main, &t));
            if (!finishes_unwaited(t, "host callback after waited-for psums"))
                break;
        }
    }
    if (failures == f0)
        printf("rank %d: work never waited for ok\n", rank);
}

static int basics(void)
{
    shmesh_mesh *m = line_mesh();
    basics_tokens(m);
    basics_results(m);
    basics_all_ops(m);
    basics_threads(m);
    basics_mesh_lifetime();
    basics_flood(m);
    basics_order(m);
    basics_failed_work(m);
    basics_quiet(m);
    basics_waiter_runs(m);
    basics_unwaited(m);
    basics_refusals(m);
    MUST(shmesh_effects_barrier(ctx));
    shmesh_mesh_destroy(m);
    printf("rank %d: basics %s\n", rank, failures ? "FAILED" : "ok");
    return failures ? 4 : 0;
}

int main(void)
{
    effects_start();
    return effects_end(basics());
}
