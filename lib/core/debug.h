/* SHMESH_DEBUG: one line on stderr per call, path choice or wait, off by
 * default and free when off (one test of a context field). */
#ifndef SHMESH_CORE_DEBUG_H
#define SHMESH_CORE_DEBUG_H

#include <stdint.h>

#include "shmesh.h"

enum debug_what {
    DEBUG_PATHS = 1, /* the path each exchange takes, and why */
    DEBUG_WAITS = 2, /* every wait that went past the first check: whom, how long */
    DEBUG_CALLS = 4, /* every call: op, bytes, path, time, result */
};

/* "shmesh rank R: " + the line, written whole with one write(2). */
void debug_line(const shmesh_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Monotonic nanoseconds. */
int64_t debug_now(void);

#endif
