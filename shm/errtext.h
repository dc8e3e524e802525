/* A failure's sentence into a caller's buffer: the one formatter of shm/,
 * of the settings parser (lib/core/settings.c) and of the launcher and
 * tools, which have no context to explain a failure in (lib/ explains in
 * its context instead: ctx_fail, core/error.h).  docs/internals.md, "Errors
 * inside the library". */
#ifndef SHMESH_SHM_ERRTEXT_H
#define SHMESH_SHM_ERRTEXT_H

#include <stddef.h>

/* Writes the sentence into err (nothing when err is NULL or errlen 0; cut
 * to fit) and returns code: `return errtext_set(err, errlen, -EINVAL, ...)`. */
int errtext_set(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
