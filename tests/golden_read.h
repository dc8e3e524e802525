/* What the golden readers (golden_coll.c, golden_sharding.c) share to read
 * a file: where they are in it, and the sentence that says why it is
 * malformed.  Header-only: each reader is one program of one file. */
#ifndef SHMESH_TESTS_GOLDEN_READ_H
#define SHMESH_TESTS_GOLDEN_READ_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static const char *path; /* the file being read */
static long lineno;      /* its line being read, from 1 */
static char parse_err[512];

/* Records "PATH:LINE: why" in parse_err; returns false, for
 * `return bad(...)` in the readers' bool functions. */
static bool bad(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static bool bad(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(parse_err, sizeof parse_err, "%s:%ld: %s", path, lineno, msg);
    return false;
}

#endif
