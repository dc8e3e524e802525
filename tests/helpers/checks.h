/* What the helper programs that run as ranks under shmesh-run share: the
 * rank's context, and the lines the suites read.  Included once, by a
 * program's .c file, after shmesh.h.
 *
 *   MUST(call)     a call that must succeed: else "rank R: FAIL: call (line
 *                  N) -> SHMESH_ERR_...: <why>" and exit status 3
 *   check(ok, ...) "rank R: ok: ..." or "rank R: FAILED: ...", counted in
 *                  `failures` */
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

#endif
