/* shmesh-test-effects-effect-mismatch: rank 0 registers effect "alpha", the
 * others "beta" (WHAT "name"), or the same name of another kind ("kind"):
 * MISMATCH on every rank, naming both.
 *
 *   shmesh-run -n P -- shmesh-test-effects-effect-mismatch [name|kind]
 *
 * Every rank prints "rank R: ..." lines the suite reads (tests/test_effects.c),
 * and a line with "FAIL:" for each check that does not hold.  Exit status:
 * 0 when every check held on this rank, 3 when a call failed that should
 * not have, 4 when a check failed, 2 for bad usage. */
#include "effects_common.h"

static int effect_mismatch(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "name";
    shmesh_effect *e = NULL;
    int rc;
    if (!strcmp(what, "name"))
        rc = shmesh_effect_create(ctx, rank == 0 ? "alpha" : "beta", SHMESH_EFFECT_ORDERED, &e);
    else if (!strcmp(what, "kind"))
        rc = shmesh_effect_create(ctx, "gamma",
                                  rank == 0 ? SHMESH_EFFECT_ORDERED : SHMESH_EFFECT_UNORDERED,
                                  &e);
    else
        return 2;
    expect("effect_create", rc, SHMESH_ERR_MISMATCH);
    if (rc == SHMESH_ERR_MISMATCH) {
        if (!strcmp(what, "name")) {
            expect_in_message("effect_create", "alpha");
            expect_in_message("effect_create", "beta");
        } else {
            expect_in_message("effect_create", "gamma");
        }
    }
    return failures ? 4 : -1;
}

int main(int argc, char **argv)
{
    effects_start();
    return effects_end(effect_mismatch(argc, argv));
}
