/* shmesh-test-effects-callback-mismatch: (2 ranks) the ranks dispatch
 * different collective callbacks: an ORDERED effect on device 1 against
 * device 0 ("device"), effect "a" against "b" ("name"), each rank on its own
 * device ("own"), every device against device 0 ("all-vs-one"), an UNORDERED
 * effect against an ORDERED_SHARDABLE one ("kind"): the callback's token is
 * MISMATCH on every rank, naming both, and the callback runs nowhere.
 *
 *   shmesh-run -n 2 -- shmesh-test-effects-callback-mismatch [WHAT]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

static int callback_mismatch(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "device";
    if (world != 2 || nlocal != 1) {
        printf("rank %d: FAIL: callback-mismatch needs 2 ranks of one device\n", rank);
        return 2;
    }
    shmesh_effect *a, *b, *u, *s;
    MUST(shmesh_effect_create(ctx, "a", SHMESH_EFFECT_ORDERED, &a));
    MUST(shmesh_effect_create(ctx, "b", SHMESH_EFFECT_ORDERED, &b));
    MUST(shmesh_effect_create(ctx, "u", SHMESH_EFFECT_UNORDERED, &u));
    MUST(shmesh_effect_create(ctx, "s", SHMESH_EFFECT_ORDERED_SHARDABLE, &s));
    /* Rank 0's callback and rank 1's, and what names each in a sentence. */
    shmesh_effect *e;
    int place;
    const char *words[2];
    if (!strcmp(what, "device")) {
        e = a;
        place = rank == 0 ? 1 : 0;
        words[0] = "placement=1";
        words[1] = "placement=0";
    } else if (!strcmp(what, "name")) {
        e = rank == 0 ? a : b;
        place = 0;
        words[0] = "\"a\"";
        words[1] = "\"b\"";
    } else if (!strcmp(what, "own")) {
        e = a;
        place = rank;
        words[0] = "placement=0";
        words[1] = "placement=1";
    } else if (!strcmp(what, "all-vs-one")) {
        e = NULL;
        place = rank == 0 ? SHMESH_PLACE_ALL : 0;
        words[0] = "placement=-1";
        words[1] = "placement=0";
    } else if (!strcmp(what, "kind")) {
        e = rank == 0 ? u : s;
        place = SHMESH_PLACE_ALL;
        words[0] = "\"u\"";
        words[1] = "\"s\"";
    } else {
        return 2;
    }
    shmesh_token t;
    MUST(shmesh_callback(ctx, e, place, count_cb, NULL, &t));
    char line[96];
    snprintf(line, sizeof line, "callback-mismatch %s: the callback's token", what);
    int rc = expect(line, shmesh_token_wait(t), SHMESH_ERR_MISMATCH);
    if (rc == SHMESH_ERR_MISMATCH) {
        expect_in_message(line, words[0]);
        expect_in_message(line, words[1]);
    } else if (rc == 0) {
        /* It must not go unnoticed: the next collective, at least. */
        snprintf(line, sizeof line, "callback-mismatch %s: the barrier after it", what);
        expect(line, shmesh_barrier(ctx), SHMESH_ERR_MISMATCH);
    }
    /* Compared before it runs: it ran nowhere. */
    if (atomic_load(&never_runs))
        bad("callback-mismatch %s: the callback ran %d times here, expected none", what,
            atomic_load(&never_runs));
    printf("rank %d: callback-mismatch %s done\n", rank, what);
    return failures ? 4 : -1;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(callback_mismatch(argc, argv));
}
