/* shmesh-test-effects-shardable: an ORDERED_SHARDABLE effect on every device,
 * each part sleeping 0-2 ms: no part of point k+1 may start before every part
 * of point k finished (unordered: an UNORDERED effect on each rank's own
 * devices, where the checks must see violations; mixed: every seventh point
 * placed on one device).
 *
 *   shmesh-run -n P [--devices-per-rank K] -- shmesh-test-effects-shardable
 *       SEED [POINTS] [mixed|unordered]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_board.h"

static uint64_t rng_state[MAXDEV];
static atomic_int shard_local_violations;
static char first_violation[256];

static void note_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_violation(const char *fmt, ...)
{
    atomic_fetch_add(&board->violations, 1);
    if (atomic_fetch_add(&shard_local_violations, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_violation, sizeof first_violation, fmt, ap);
        va_end(ap);
    }
}

/* Where point k runs: every device (-1), or in "mixed" runs every seventh
 * point on one device; and so how many parts it has. */
static int shard_points, shard_place[MAXPOINTS];

static int64_t parts_of(int k) { return shard_place[k] < 0 ? ndev : 1; }

static void shard_cb(void *arg, int device)
{
    int k = *(const int *)arg;
    if (device < 0 || device >= ndev || shmesh_device_process(ctx, device) != rank ||
        (shard_place[k] >= 0 && device != shard_place[k])) {
        note_violation("point %d ran with device %d, not one of this rank's or not its place",
                       k, device);
        return;
    }
    if (k > 0) {
        int64_t f = atomic_load(&board->finished[k - 1]);
        if (f != parts_of(k - 1))
            note_violation("device %d began point %d when %" PRId64 " of the %" PRId64
                           " parts of point %d had finished",
                           device, k, f, parts_of(k - 1), k - 1);
    }
    atomic_fetch_add(&board->started[k], 1);
    rng_state[device] = mix(rng_state[device]);
    sleep_us((long)(rng_state[device] % 2001));
    if (k + 1 < shard_points && atomic_load(&board->started[k + 1]))
        note_violation("a part of point %d began while device %d was still in point %d", k + 1,
                       device, k);
    atomic_fetch_add(&board->finished[k], 1);
}

/* SEED POINTS [unordered|mixed] */
static int shardable(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    uint64_t seed = strtoull(argv[1], NULL, 10);
    int points = argc > 2 ? atoi(argv[2]) : 200;
    /* "unordered": the same with an UNORDERED effect, each rank's parts
     * dispatched on its own devices (SHMESH_PLACE_SELF: no step among the
     * ranks, so no order across them), where the checks below must find
     * violations (they can see one).  "mixed": every seventh point is
     * placed on one device instead of every device. */
    bool control = argc > 3 && !strcmp(argv[3], "unordered");
    bool mixed = argc > 3 && !strcmp(argv[3], "mixed");
    if (ndev > MAXDEV || points <= 0 || points > MAXPOINTS) {
        printf("rank %d: FAIL: at most %d devices and %d points\n", rank, MAXDEV, MAXPOINTS);
        return 2;
    }
    shard_points = points;
    for (int k = 0; k < points; k++)
        shard_place[k] = mixed && k % 7 == 3 ? (k / 7) % ndev : SHMESH_PLACE_ALL;
    for (int d = 0; d < MAXDEV; d++)
        rng_state[d] = mix(seed * 1000003u + (uint64_t)d);
    board_reset();
    shmesh_effect *e;
    shmesh_effect_kind kind = control ? SHMESH_EFFECT_UNORDERED : SHMESH_EFFECT_ORDERED_SHARDABLE;
    MUST(shmesh_effect_create(ctx, "steps", kind, &e));
    if (shmesh_effect_kind_of(e) != kind || strcmp(shmesh_effect_name(e), "steps"))
        bad("the effect reads back as '%s' of kind %d", shmesh_effect_name(e),
            (int)shmesh_effect_kind_of(e));
    shmesh_mesh *m = line_mesh();
    int *ks = xcalloc((size_t)points, sizeof *ks);
    int npsum = points / 50 + 1;
    float *pin = xcalloc((size_t)npsum * (size_t)nlocal, sizeof *pin);
    float *pout = xcalloc((size_t)npsum * (size_t)nlocal, sizeof *pout);
    shmesh_token last = {NULL, 0};
    int p = 0;
    int64_t t0 = now_ns();
    for (int k = 0; k < points; k++) {
        if (k % 50 == 25) {
            shmesh_array in[MAXDEV], out[MAXDEV];
            for (int l = 0; l < nlocal; l++) {
                pin[p * nlocal + l] = 1.0f;
                in[l] = (shmesh_array){.data = &pin[p * nlocal + l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
                out[l] = (shmesh_array){.data = &pout[p * nlocal + l], .dtype = SHMESH_FLOAT32, .ndim = 0, .shape = {0}};
            }
            MUST(shmesh_psum_async(m, "i", NULL, in, out, NULL));
            p++;
        }
        ks[k] = k;
        MUST(shmesh_callback(ctx, e, control ? SHMESH_PLACE_SELF : shard_place[k], shard_cb,
                             &ks[k], &last));
    }
    double dispatch_ms = ms_since(t0);
    MUST(shmesh_effects_barrier(ctx));
    double total_ms = ms_since(t0);
    if (control)
        MUST(shmesh_barrier(ctx)); /* an unordered effect's barrier is this rank's */
    /* After the barrier every part of every point is done, everywhere. */
    for (int k = 0; k < points; k++) {
        int64_t f = atomic_load(&board->finished[k]);
        if (f != parts_of(k)) {
            bad("after shmesh_effects_barrier %" PRId64 " of the %" PRId64
                " parts of point %d had finished",
                f, parts_of(k), k);
            break;
        }
    }
    if (shmesh_token_test(last) != 1)
        bad("the last callback's token is not done after shmesh_effects_barrier");
    for (int i = 0; i < p * nlocal; i++)
        if (pout[i] != (float)ndev) {
            bad("psum %d = %g, expected %d", i / nlocal, pout[i], ndev);
            break;
        }
    int mine = atomic_load(&shard_local_violations);
    if (mine && !control)
        bad("%d ordering violations seen here; the first: %s", mine, first_violation);
    MUST(shmesh_barrier(ctx));
    int64_t all = atomic_load(&board->violations);
    printf("rank %d: %s seed %" PRIu64 ": %d points x %d devices, %" PRId64
           " violations in the job (dispatch %.0f ms, total %.0f ms)\n",
           rank, control ? "unordered" : mixed ? "shardable mixed" : "shardable", seed, points,
           ndev, all, dispatch_ms, total_ms);
    if (control && mine)
        printf("rank %d: unordered: first violation seen here: %s\n", rank, first_violation);
    shmesh_mesh_destroy(m);
    free(ks);
    free(pin);
    free(pout);
    return failures ? 4 : 0;
}

int main(int argc, char **argv)
{
    effects_start();
    board_setup();
    return effects_end(shardable(argc, argv));
}
