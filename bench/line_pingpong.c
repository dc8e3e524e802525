/* line_pingpong: the floor under a small collective on this machine, what
 * moving one cache line between two processes costs (docs/performance.md,
 * "How far the small calls are from the floor").
 *
 *   line_pingpong [--csv] [-n ITERS] [-r ROUNDS] [--no-pin]
 *
 * Two processes (this one and a child it forks) share one anonymous
 * MAP_SHARED mapping; each owns one 64-byte line of it and only reads the
 * other's.  Two loops, each timed over ITERS iterations (default 1000000),
 * ROUNDS rounds (default 7), after as many untimed ones:
 *   pingpong  A writes i into its line and waits for B's line to say i; B
 *             waits for A's i, then writes i: one round trip, a line each
 *             way, one after the other
 *   exchange  both write i into their own line, then wait for the
 *             other's i: what every member of a 2-member call that meets
 *             its peer pays at least, a line each way, both at once
 * Prints each loop's median, fastest and slowest round in ns per
 * iteration (--csv: loop,median_ns,min_ns,max_ns).  The processes are
 * pinned to the first two CPUs this process may use (--no-pin: left to
 * the scheduler); with fewer than two, the numbers are a scheduler's, not
 * a cache's, and it says so.  Waits spin with `pause`, never yield. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE 64

struct shared {
    _Alignas(LINE) _Atomic uint64_t a; /* written by the parent only */
    _Alignas(LINE) _Atomic uint64_t b; /* written by the child only */
    _Alignas(LINE) _Atomic uint64_t go; /* the parent starts each loop */
    _Alignas(LINE) double ns[2][1000]; /* the parent's results, per loop and round */
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void relax(void) { __builtin_ia32_pause(); }

/* Until *w reaches v (in the exchange the peer may be one ahead already). */
static void wait_for(_Atomic uint64_t *w, uint64_t v)
{
    while (atomic_load_explicit(w, memory_order_acquire) < v)
        relax();
}

/* One loop of `iters` from value `base`; `first`: the parent's side. */
static void loop(struct shared *s, int kind, bool first, uint64_t base, long iters)
{
    _Atomic uint64_t *mine = first ? &s->a : &s->b, *theirs = first ? &s->b : &s->a;
    for (long i = 1; i <= iters; i++) {
        uint64_t v = base + (uint64_t)i;
        if (kind == 0 && !first) { /* pingpong: B answers */
            wait_for(theirs, v);
            atomic_store_explicit(mine, v, memory_order_release);
        } else {
            atomic_store_explicit(mine, v, memory_order_release);
            wait_for(theirs, v);
        }
    }
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    long iters = 1000000;
    int rounds = 7;
    bool csv = false, pinned = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv"))
            csv = true;
        else if (!strcmp(argv[i], "--no-pin"))
            pinned = false;
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: line_pingpong [--csv] [-n ITERS] [-r ROUNDS] [--no-pin]\n"
                            "  -n ITERS   iterations per round, 1 to 100000000 (default 1000000)\n"
                            "  -r ROUNDS  rounds per loop, 1 to 1000 (default 7)\n");
            return 2;
        }
    }
    if (iters < 1 || iters > 100000000 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "line_pingpong: expected -n from 1 to 100000000 and -r from 1 to 1000, "
                        "found -n %ld -r %d\n", iters, rounds);
        return 2;
    }
    cpu_set_t set;
    int cpus[2] = {-1, -1}, n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
            if (CPU_ISSET(c, &set))
                cpus[n++] = c;
    if (n < 2)
        fprintf(stderr, "line_pingpong: only %d CPU allowed: the processes take turns on it, and "
                        "the times are the scheduler's, not a cache line's\n", n);
    pinned = pinned && n == 2;

    struct shared *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("line_pingpong: mmap");
        return 1;
    }
    memset(s, 0, sizeof *s);
    pid_t child = fork();
    if (child < 0) {
        perror("line_pingpong: fork");
        return 1;
    }
    bool first = child != 0;
    if (pinned)
        pin(cpus[first ? 0 : 1]);
    uint64_t base = 0;
    for (int kind = 0; kind < 2; kind++) {
        for (int r = -1; r < rounds; r++) { /* round -1: warm-up */
            /* Both sides start the loop together: the parent announces it. */
            uint64_t token = (uint64_t)(kind * 1001 + r + 2);
            if (first)
                atomic_store_explicit(&s->go, token, memory_order_release);
            else
                wait_for(&s->go, token);
            double t0 = now_ns();
            loop(s, kind, first, base, iters);
            double t = (now_ns() - t0) / (double)iters;
            base += (uint64_t)iters;
            if (first && r >= 0)
                s->ns[kind][r] = t;
            /* Ends in step: the child's last write is what the parent's last
             * wait read, and the next loop's values are all above it. */
        }
    }
    if (!first)
        _exit(0);
    int status;
    waitpid(child, &status, 0);
    const char *names[2] = {"pingpong", "exchange"};
    if (!csv)
        printf("# line_pingpong: 2 processes%s, %ld iterations x %d rounds; ns per iteration\n"
               "# loop        median      min      max\n",
               pinned ? " pinned to 2 CPUs" : " (not pinned)", iters, rounds);
    else
        printf("loop,median_ns,min_ns,max_ns\n");
    for (int kind = 0; kind < 2; kind++) {
        double v[1000];
        memcpy(v, s->ns[kind], sizeof(double) * (size_t)rounds);
        qsort(v, (size_t)rounds, sizeof *v, cmp);
        double med = rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2;
        if (csv)
            printf("%s,%.1f,%.1f,%.1f\n", names[kind], med, v[0], v[rounds - 1]);
        else
            printf("  %-10s %8.1f %8.1f %8.1f\n", names[kind], med, v[0], v[rounds - 1]);
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
