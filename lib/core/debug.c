/* SHMESH_DEBUG lines. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h"
#include "core/debug.h"

void debug_line(const shmesh_ctx *c, const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof line, "shmesh rank %d: ", c->job_rank);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n += m < 0 ? 0 : m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    /* One write: lines of several ranks interleave whole. */
    ssize_t rc = write(STDERR_FILENO, line, (size_t)n);
    (void)rc;
}

int64_t debug_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
