/* What the helper programs that run as ranks under shmesh-run share: the
 * rank's context, and the lines the suites read.  Included once, by a
 * program's .c file, after shmesh.h.
 *
 *   MUST(call)     a call that must succeed: else "rank R: FAIL: call (line
 *                  N) -> SHMESH_ERR_...: <why>" and exit status 3
 *   check(ok, ...) "rank R: ok: ..." or "rank R: FAILED: ...", counted in
 *                  `failures`
 *   start_four(...) a program run as `shmesh-run -n 4 -- PROG MODE ...` */
#ifndef SHMESH_TESTS_CHECKS_H
#define SHMESH_TESTS_CHECKS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "shmesh.h"

/* Not every program uses all three. */
static __attribute__((unused)) shmesh_ctx *ctx;
static __attribute__((unused)) int rank, failures;

/* The context's last sentence, or init's when there is none. */
static inline const char *why(void)
{
    const char *m = shmesh_last_error(ctx);
    return m && *m ? m : shmesh_last_error(NULL);
}

#define MUST(call)                                                                             \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ < 0) {                                                                         \
            printf("rank %d: FAIL: %s (line %d) -> %s: %s\n", rank, #call, __LINE__,           \
                   shmesh_error_name(rc_), why());                                             \
            exit(3);                                                                           \
        }                                                                                      \
    } while (0)

static inline void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void check(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("rank %d: %s: ", rank, ok ? "ok" : "FAILED");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    failures += !ok;
}

/* A program run as `shmesh-run -n 4 -- PROG MODE ...` starts: stdout line
 * buffered, the context and this rank, a mesh "i" of 4 and a grid "x" of 2
 * by "y" of 2 (row-major ids); exit status 2 and why when it cannot. */
static __attribute__((unused)) void start_four(int argc, char **argv, shmesh_mesh **line,
                                               shmesh_mesh **grid)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || shmesh_init(&ctx)) {
        fprintf(stderr, "usage: shmesh-run -n 4 -- %s MODE (%s)\n", argv[0],
                shmesh_last_error(NULL));
        exit(2);
    }
    rank = shmesh_rank(ctx);
    const char *i_name[] = {"i"}, *xy[] = {"x", "y"};
    int four[] = {4}, two_two[] = {2, 2};
    if (shmesh_world_size(ctx) != 4 || shmesh_mesh_create(ctx, 1, i_name, four, NULL, line) ||
        shmesh_mesh_create(ctx, 2, xy, two_two, NULL, grid)) {
        fprintf(stderr, "needs 4 ranks: %s\n", shmesh_last_error(ctx));
        exit(2);
    }
}

#endif
