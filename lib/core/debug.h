/* SHMESH_DEBUG: one line on stderr per call, path choice or wait, off by
 * default and free when off (one test of a context field). */
#ifndef SHMESH_CORE_DEBUG_H
#define SHMESH_CORE_DEBUG_H

#include <stdint.h>

#include "core/settings.h"
#include "shmesh.h"

/* What SHMESH_DEBUG asks for (core/settings.h parses it). */
enum debug_what {
    DEBUG_PATHS = SETTINGS_DEBUG_PATHS, /* the path each exchange takes */
    DEBUG_WAITS = SETTINGS_DEBUG_WAITS, /* every wait past the first check: whom, how long */
    DEBUG_CALLS = SETTINGS_DEBUG_CALLS, /* every call: op, bytes, path, time, result */
};

/* "shmesh rank R: " + the line, written whole with one write(2). */
void debug_line(const shmesh_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Monotonic nanoseconds. */
int64_t debug_now(void);

#endif
