/* The trace's event clock: the x86 time-stamp counter where it is
 * invariant (one rate, the same on every core: about 10 ns a reading
 * against about 30 for clock_gettime), else CLOCK_MONOTONIC nanoseconds.
 * Header only: the ranks read it (lib/trace/trace.c) and so does the
 * launcher, which turns ticks into nanoseconds (launcher/trace.c). */
#ifndef SHMESH_SHM_TRACE_CLOCK_H
#define SHMESH_SHM_TRACE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

enum trace_clock_kind {
    TRACE_CLOCK_NS = 0,  /* ticks are CLOCK_MONOTONIC nanoseconds */
    TRACE_CLOCK_TSC = 1, /* ticks are the invariant TSC's */
};

static inline int64_t trace_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The clock this machine gives: the TSC when CPUID says it is invariant
 * (leaf 0x80000007, EDX bit 8). */
static inline enum trace_clock_kind trace_clock_pick(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8)))
        return TRACE_CLOCK_TSC;
#endif
    return TRACE_CLOCK_NS;
}

static inline uint64_t trace_ticks(enum trace_clock_kind kind)
{
#if defined(__x86_64__) || defined(__i386__)
    if (kind == TRACE_CLOCK_TSC)
        return __rdtsc();
#endif
    (void)kind;
    return (uint64_t)trace_mono_ns();
}

/* A reading of both clocks taken together (the TSC read between two
 * clock_gettime calls, paired with their middle): the tightest of a few
 * tries.  A try the thread was interrupted in (a VM exit, a preemption:
 * microseconds or more between the two calls) would put this rank's events
 * that far from the others' in the trace, and a collective's ranks out of
 * order. */
static inline void trace_clock_pair(enum trace_clock_kind kind, uint64_t *ticks, int64_t *ns)
{
    int64_t best = INT64_MAX;
    for (int i = 0; i < 16 && best > 200; i++) {
        int64_t a = trace_mono_ns();
        uint64_t t = trace_ticks(kind);
        int64_t b = trace_mono_ns();
        if (b - a < best) {
            best = b - a;
            *ticks = t;
            *ns = a + (b - a) / 2;
        }
    }
}

/* Nanoseconds (CLOCK_MONOTONIC) of `t`, from two pairs of readings of the
 * same clock: (t0, ns0) early and (t1, ns1) later; the rate is theirs. */
static inline int64_t trace_ticks_to_ns(enum trace_clock_kind kind, uint64_t t, uint64_t t0,
                                        int64_t ns0, uint64_t t1, int64_t ns1)
{
    if (kind != TRACE_CLOCK_TSC || t1 <= t0)
        return kind == TRACE_CLOCK_TSC ? ns0 : (int64_t)t;
    double rate = (double)(ns1 - ns0) / (double)(t1 - t0);
    return ns0 + (int64_t)((double)((int64_t)(t - t0)) * rate);
}

#endif
