/* shmesh-test-effects-ordered-log: N (10 000) ORDERED callbacks placed on
 * this rank, dispatched asynchronously among psums, append to a log: it must
 * read 0..N-1.
 *
 *   shmesh-run -n P -- shmesh-test-effects-ordered-log [N]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

struct logstate {
    int *log;
    int cap;
    atomic_int n, inside, overlaps;
};
static struct logstate lg;

static void log_cb(void *arg, int device)
{
    (void)device;
    if (atomic_fetch_add(&lg.inside, 1) != 0)
        atomic_fetch_add(&lg.overlaps, 1);
    int n = atomic_load(&lg.n);
    if (n < lg.cap)
        lg.log[n] = *(const int *)arg;
    atomic_store(&lg.n, n + 1);
    atomic_fetch_sub(&lg.inside, 1);
}

static int ordered_log(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    const int every = 100;
    if (n <= 0)
        return 2;
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "log", SHMESH_EFFECT_ORDERED, &e));
    shmesh_mesh *m = line_mesh();
    int *idx = xcalloc((size_t)n, sizeof *idx);
    lg.log = xcalloc((size_t)n, sizeof *lg.log);
    lg.cap = n;
    int npsum = (n + every - 1) / every;
    int32_t(*pin)[4] = xcalloc((size_t)npsum, sizeof *pin);
    int32_t(*pout)[4] = xcalloc((size_t)npsum, sizeof *pout);
    shmesh_token *ptok = xcalloc((size_t)npsum, sizeof *ptok);
    shmesh_token prev = {NULL, 0};
    int p = 0;
    int64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        if (i % every == 0) {
            for (int j = 0; j < 4; j++)
                pin[p][j] = rank + 1 + j * p;
            shmesh_array in = arr1(pin[p], SHMESH_INT32, 4), out = arr1(pout[p], SHMESH_INT32, 4);
            MUST(shmesh_psum_async(m, "i", NULL, &in, &out, &ptok[p]));
            p++;
        }
        idx[i] = i;
        shmesh_token tok;
        MUST(shmesh_callback(ctx, e, SHMESH_PLACE_SELF, log_cb, &idx[i], &tok));
        if (tok.ctx != ctx || tok.seq <= prev.seq) {
            bad("callback %d: token {%p, %" PRIu64 "} after {%p, %" PRIu64 "}: expected a "
                "later position of this context's dispatch queue",
                i, (void *)tok.ctx, tok.seq, (void *)prev.ctx, prev.seq);
            break;
        }
        shmesh_token et = shmesh_effect_token(e);
        if (et.ctx != tok.ctx || et.seq != tok.seq) {
            bad("after callback %d the effect's token is {%p, %" PRIu64 "}, expected the "
                "callback's {%p, %" PRIu64 "}",
                i, (void *)et.ctx, et.seq, (void *)tok.ctx, tok.seq);
            break;
        }
        prev = tok;
    }
    double dispatch_ms = ms_since(t0);
    MUST(shmesh_effects_barrier(ctx));
    double total_ms = ms_since(t0);
    int got = atomic_load(&lg.n);
    if (got != n)
        bad("the log has %d entries after shmesh_effects_barrier, expected %d", got, n);
    for (int i = 0; i < n && i < got; i++)
        if (lg.log[i] != i) {
            bad("log[%d] = %d: not in program order", i, lg.log[i]);
            break;
        }
    if (atomic_load(&lg.overlaps))
        bad("%d callbacks of the ordered effect ran while another was running",
            atomic_load(&lg.overlaps));
    int t = shmesh_token_test(shmesh_effect_token(e));
    if (t != 1)
        bad("the effect's token after shmesh_effects_barrier: test -> %d, expected 1 (done)", t);
    t = shmesh_token_test(shmesh_runtime_token(ctx));
    if (t != 1)
        bad("the runtime token after shmesh_effects_barrier: test -> %d, expected 1 (done)", t);
    t = shmesh_token_test(prev);
    if (t != 1)
        bad("the last callback's token after shmesh_effects_barrier: test -> %d", t);
    for (int q = 0; q < p; q++) {
        t = shmesh_token_test(ptok[q]);
        if (t != 1)
            bad("psum %d's token after shmesh_effects_barrier: test -> %d", q, t);
        for (int j = 0; j < 4; j++) {
            int32_t want = 0;
            for (int r = 0; r < world; r++)
                want += r + 1 + j * q;
            if (pout[q][j] != want) {
                bad("psum %d element %d = %d, expected %d", q, j, pout[q][j], want);
                break;
            }
        }
    }
    printf("rank %d: ordered log of %d callbacks with %d psums: %s (dispatch %.0f ms, "
           "total %.0f ms)\n",
           rank, n, p, failures ? "WRONG" : "in program order", dispatch_ms, total_ms);
    shmesh_mesh_destroy(m);
    free(idx);
    free(lg.log);
    free(pin);
    free(pout);
    free(ptok);
    return failures ? 4 : 0;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(ordered_log(argc, argv));
}
