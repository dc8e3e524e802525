/* shmesh-test-effects-ordered-all: an ORDERED effect on every device is
 * refused (2+ devices); placed on one device it runs once, there, and every
 * rank's token waits for it.
 *
 *   shmesh-run -n P [--devices-per-rank K] -- shmesh-test-effects-ordered-all
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_board.h"

static void placed_cb(void *arg, int device)
{
    (void)arg;
    atomic_fetch_add(&board->runs, 1);
    atomic_store(&board->ran_rank, rank);
    atomic_store(&board->ran_device, device);
    sleep_us(50000);
    atomic_store(&board->flag, 1);
}

static void placed_log_cb(void *arg, int device)
{
    (void)device;
    int64_t n = atomic_load(&board->log_n);
    if (n < BOARD_LOG)
        board->log[n] = *(const int *)arg;
    sleep_us(1000);
    atomic_store(&board->log_n, n + 1);
}

static void placed_once(shmesh_effect *e, int target)
{
    board_reset();
    int owner = shmesh_device_process(ctx, target);
    shmesh_token tok;
    char what[96];
    snprintf(what, sizeof what, "ordered on device %d", target);
    MUST(shmesh_callback(ctx, e, target, placed_cb, NULL, &tok));
    MUST(shmesh_token_wait(tok));
    if (atomic_load(&board->flag) != 1)
        bad("%s: the token is done but the callback (on rank %d) has not finished", what, owner);
    /* Twenty more in a row: they run there in program order, and the last
     * token means all of them ran. */
    int idx[20];
    for (int i = 0; i < 20; i++) {
        idx[i] = i;
        MUST(shmesh_callback(ctx, e, target, placed_log_cb, &idx[i], &tok));
    }
    MUST(shmesh_token_wait(tok));
    int64_t n = atomic_load(&board->log_n);
    if (n != 20)
        bad("%s: after the last token, %" PRId64 " of 20 callbacks had run", what, n);
    for (int i = 0; i < n && i < 20; i++)
        if (board->log[i] != i) {
            bad("%s: log[%d] = %" PRId64 ": not in program order", what, i, board->log[i]);
            break;
        }
    MUST(shmesh_effects_barrier(ctx));
    MUST(shmesh_barrier(ctx));
    int64_t runs = atomic_load(&board->runs), where = atomic_load(&board->ran_rank),
            dev = atomic_load(&board->ran_device);
    if (runs != 1 || where != owner || dev != target)
        bad("%s: ran %" PRId64 " times, on rank %" PRId64 " with device %" PRId64
            "; expected once, on rank %d with device %d",
            what, runs, where, dev, owner, target);
    else
        printf("rank %d: %s: ran once, on rank %d, token done after it ran\n", rank, what,
               owner);
    MUST(shmesh_barrier(ctx)); /* nobody resets the board before all have read it */
}

static int ordered_all(void)
{
    board_setup();
    shmesh_effect *e;
    MUST(shmesh_effect_create(ctx, "metrics", SHMESH_EFFECT_ORDERED, &e));
    shmesh_token tok = {ctx, 12345};
    int rc = shmesh_callback(ctx, e, SHMESH_PLACE_ALL, count_cb, NULL, &tok);
    if (ndev > 1) {
        expect("ordered on every device", rc, SHMESH_ERR_INVALID);
        if (rc == SHMESH_ERR_INVALID)
            expect_in_message("ordered on every device", "metrics");
        if (!token_is_none(tok))
            bad("a refused dispatch left the token {%p, %" PRIu64 "}, expected {NULL, 0}",
                (void *)tok.ctx, tok.seq);
    } else {
        expect("ordered on the only device", rc, 0);
    }
    /* The context is usable: a barrier and an async one. */
    MUST(shmesh_barrier(ctx));
    shmesh_token bt;
    MUST(shmesh_barrier_async(ctx, &bt));
    MUST(shmesh_token_wait(bt));
    MUST(shmesh_effects_barrier(ctx));
    int ran = atomic_load(&never_runs);
    if (ran != (ndev > 1 ? 0 : 1))
        bad("the callback on every device ran %d times, expected %d", ran, ndev > 1 ? 0 : 1);
    printf("rank %d: usable after the refusal\n", rank);
    /* This rank's devices: one is fine, several have no total order. */
    atomic_store(&never_runs, 0);
    tok = (shmesh_token){ctx, 12345};
    rc = shmesh_callback(ctx, e, SHMESH_PLACE_SELF, count_cb, NULL, &tok);
    if (nlocal > 1) {
        expect("ordered on this rank's devices", rc, SHMESH_ERR_INVALID);
        if (rc == SHMESH_ERR_INVALID)
            expect_in_message("ordered on this rank's devices", "metrics");
    } else {
        expect("ordered on this rank's device", rc, 0);
    }
    MUST(shmesh_effects_barrier(ctx));
    if (atomic_load(&never_runs) != (nlocal > 1 ? 0 : 1))
        bad("the callback on this rank's devices ran %d times, expected %d",
            atomic_load(&never_runs), nlocal > 1 ? 0 : 1);

    placed_once(e, ndev > 1 ? 1 : 0);
    if (ndev - 1 > 1)
        placed_once(e, ndev - 1);
    /* An unordered effect on every device runs once per device. */
    atomic_store(&never_runs, 0);
    shmesh_effect *u;
    MUST(shmesh_effect_create(ctx, "free", SHMESH_EFFECT_UNORDERED, &u));
    MUST(shmesh_callback(ctx, u, SHMESH_PLACE_ALL, count_cb, NULL, &tok));
    MUST(shmesh_token_wait(tok));
    if (atomic_load(&never_runs) != nlocal)
        bad("an unordered callback on every device ran %d times here, expected %d",
            atomic_load(&never_runs), nlocal);
    return failures ? 4 : 0;
}

int main(void)
{
    effects_start();
    return effects_end(ordered_all());
}
