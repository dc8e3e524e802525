/* What the effects suite's helper programs share (tests/test_effects.c runs
 * them under shmesh-run, one program per behaviour: effects_*.c): the job's
 * shape, checks that print "rank R: FAIL: ..." lines, a mesh of every device,
 * the callbacks several programs dispatch, and the start and end of every
 * program.  Included once, by a program's .c file; the public library only.
 *
 * Exit status of every program: 0 when every check held on this rank, 3
 * when a call failed that should not have, 4 when a check failed, 2 for bad
 * usage. */
#ifndef SHMESH_TESTS_EFFECTS_COMMON_H
#define SHMESH_TESTS_EFFECTS_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"
#include "shmesh.h"

#define MAXDEV 64

/* Not every program uses all of them. */
static __attribute__((unused)) int world, ndev, nlocal;
static __attribute__((unused)) pthread_t main_thread;

static inline void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void bad(const char *fmt, ...)
{
    va_list ap;
    printf("rank %d: FAIL: ", rank);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    failures++;
}

/* Prints "rank R: what -> NAME: message" and counts a failure when rc is
 * not `want`. */
static inline int expect(const char *what, int rc, int want)
{
    printf("rank %d: %s -> %s: %s\n", rank, what, shmesh_error_name(rc), rc ? why() : "");
    if (rc != want)
        bad("%s returned %s, expected %s", what, shmesh_error_name(rc), shmesh_error_name(want));
    return rc;
}

static inline void expect_in_message(const char *what, const char *needle)
{
    if (!strstr(why(), needle))
        bad("%s: the message does not name '%s': %s", what, needle, why());
}

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double ms_since(int64_t t0) { return (double)(now_ns() - t0) / 1e6; }

static inline void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static inline void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        printf("rank %d: FAIL: out of memory\n", rank);
        exit(3);
    }
    return p;
}

static inline uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline bool token_is_none(shmesh_token t) { return t.ctx == NULL && t.seq == 0; }

/* A mesh of every device on one axis "i". */
static inline shmesh_mesh *line_mesh(void)
{
    static const char *const names[] = {"i"};
    int sizes[] = {ndev};
    shmesh_mesh *m;
    MUST(shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m));
    return m;
}

static inline shmesh_array arr1(void *data, shmesh_dtype dt, int64_t n)
{
    shmesh_array a = {.data = data, .dtype = dt, .ndim = 1, .shape = {n}};
    return a;
}

/* A callback that does nothing. */
static inline void noop_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
}

/* Counts its runs (in a callback that must not run: none). */
static __attribute__((unused)) atomic_int never_runs;

static inline void count_cb(void *arg, int device)
{
    (void)arg;
    (void)device;
    atomic_fetch_add(&never_runs, 1);
}

/* Sleeps `us`, then says it is done and on which thread it ran. */
struct sleeper {
    long us;
    atomic_int done;
    pthread_t thread;
};

static inline void sleep_cb(void *arg, int device)
{
    (void)device;
    struct sleeper *s = arg;
    s->thread = pthread_self();
    sleep_us(s->us);
    atomic_store(&s->done, 1);
}

static inline void fill_random(float *x, size_t n, uint64_t salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(mix(salt * 7919u + i) >> 11) / 9007199254740992.0 * 200.0 - 100.0);
}

/* The start of every program: line-buffered output, the context, the job's
 * shape; exit status 3 when shmesh_init fails. */
static inline void effects_start(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    main_thread = pthread_self();
    int rc = shmesh_init(&ctx);
    if (rc) {
        printf("rank ?: FAIL: shmesh_init -> %s: %s\n", shmesh_error_name(rc),
               shmesh_last_error(NULL));
        exit(3);
    }
    rank = shmesh_rank(ctx);
    world = shmesh_world_size(ctx);
    ndev = shmesh_device_count(ctx);
    nlocal = shmesh_local_device_count(ctx);
}

/* The end of every program, given what it returned: > 0, its exit status
 * without finalize (the launcher stops the rest); 0, finalize, which must
 * succeed; < 0, the context is poisoned: finalize, whatever it returns. */
static inline int effects_end(int rc)
{
    if (rc > 0)
        return rc; /* a failed rank exits without finalize: the launcher stops the rest */
    bool poisoned = rc < 0;
    rc = shmesh_finalize(ctx);
    if (rc && !poisoned) {
        printf("rank %d: FAIL: shmesh_finalize -> %s: %s\n", rank, shmesh_error_name(rc),
               shmesh_last_error(NULL));
        return 3;
    }
    return 0;
}

#endif
