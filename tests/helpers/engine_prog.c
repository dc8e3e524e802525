/* shmesh-test-engine: the engine through its internal interfaces, under
 * shmesh-run.  Modes:
 *   inflight   (4 ranks) three calls on different groups submitted before
 *              any is waited for, completed in order with right results;
 *              progress never blocks while peers are late
 *   device     (2 ranks) a test backend claims an inaccessible address
 *              range: buffers there are refused with a clear error, never
 *              copied (a copy would fault), and the job goes on
 *   cma-fault  (2 ranks) a single copy the kernel refuses fails that call on
 *              both ranks with the reason, and the next calls work: a
 *              ppermute, then a reshard (its transfers' rows)
 *   threads    (2 ranks) on rank 0 a second thread calls while the first is
 *              inside a barrier: refused with a clear error of its own, the
 *              barrier unharmed, and the context handed over afterwards
 *   heap-mix   (2 ranks) psum, all_gather and pbroadcast of 256 KiB, where
 *              zero copy needs the handshake, with the ranks' buffers in the
 *              shared heap or not in every arrangement (a member whose own
 *              buffers rule zero copy out collects the handshake late:
 *              engine/path.c): every result right; then a pbroadcast whose
 *              shapes differ between two such members fails as a mismatch on
 *              both, no output written
 * Where ranks must be late, they wait at a gate rank 0 opens (a file,
 * SHMESH_TEST_GATE, that the suite names and removes), not for a time.
 * Prints "rank R: ..." lines; exit 0 pass, 1 fail, 77 skip. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h"
#include "engine/call.h"
#include "engine/state.h"
#include "memory/kind.h"
#include "ops/ops.h"
#include "checks.h"
#include "shmesh.h"


static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rank 0 opens the gate; the others wait there (60 s at most: a "FAILED"
 * line then, and they go on). */
static void gate_open(void)
{
    const char *path = getenv("SHMESH_TEST_GATE");
    int fd = path ? open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        check(false, "cannot open the gate: SHMESH_TEST_GATE is %s", path ? path : "not set");
    else
        close(fd);
}

static void gate_wait(void)
{
    const char *path = getenv("SHMESH_TEST_GATE");
    double t0 = now();
    while (path && access(path, F_OK) != 0 && now() - t0 < 60)
        usleep(1000);
    if (!path || access(path, F_OK) != 0)
        check(false, "rank 0 never opened the gate %s (60 s)", path ? path : "(not set)");
}

#define ARR(p, dt, nd, d0) ((shmesh_array){.data = (p), .dtype = (dt), .ndim = (nd), .shape = {(d0)}})

/* Mesh x=2, y=2 over 4 ranks: rank = 2 * x + y. */
static int mode_inflight(void)
{
    const char *names[] = {"x", "y"};
    int sizes[] = {2, 2};
    shmesh_mesh *m;
    if (shmesh_mesh_create(ctx, 2, names, sizes, NULL, &m))
        return 1;
    int x = rank / 2, y = rank % 2;
    for (int round = 0; round < 3; round++) {
        int32_t a_in[3] = {rank, 10 * rank, round}, a_out[3] = {-1, -1, -1};
        int32_t b_in[2] = {rank, round}, b_out[4] = {-1, -1, -1, -1};
        int32_t c_in = 100 * rank + round, c_out = -1;
        shmesh_array ai = ARR(a_in, SHMESH_INT32, 1, 3), ao = ARR(a_out, SHMESH_INT32, 1, 3);
        shmesh_array bi = ARR(b_in, SHMESH_INT32, 1, 2), bo = ARR(b_out, SHMESH_INT32, 1, 4);
        shmesh_array ci = ARR(&c_in, SHMESH_INT32, 0, 0), co = ARR(&c_out, SHMESH_INT32, 0, 0);
        const int ring[4][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};
        struct call a, b, c;
        struct op_args pa = {.op = OP_PSUM, .m = m, .axes = "x", .in = &ai, .out = &ao};
        struct op_args pb = {.op = OP_ALL_GATHER, .m = m, .axes = "y", .tiled = true,
                             .in = &bi, .out = &bo};
        struct op_args pc = {.op = OP_PPERMUTE, .m = m, .axes = "x,y", .perm = ring,
                             .npairs = 4, .in = &ci, .out = &co};
        int rc = op_reduce_prepare(&a, &pa, 0);
        rc = rc ? rc : op_all_gather_prepare(&b, &pb, 0);
        rc = rc ? rc : op_ppermute_prepare(&c, &pc, 0);
        /* The callers' descriptions may go: the calls hold their own. */
        memset(&ai, 0xff, sizeof ai);
        memset(&bo, 0xff, sizeof bo);
        check(!rc, "round %d: three calls prepared (%s)", round, rc ? shmesh_last_error(ctx) : "");
        if (rc)
            return 1;
        check(a.s != b.s && b.s != c.s && a.s != c.s, "each call has its own scratch");
        if (round == 1 && rank == 0) {
            /* Peers come late (held at the gate until rank 0 has looked):
             * progress returns without blocking.  One that blocked would
             * wait for them until SHMESH_TIMEOUT (20 s), then fail. */
            call_submit(&a);
            double longest = 0;
            int waits = 0;
            for (int i = 0; i < 1000; i++) {
                double t = now();
                waits += call_progress(ctx) == CALL_WAIT;
                if (now() - t > longest)
                    longest = now() - t;
            }
            check(waits == 1000 && longest < 10 && a.state == CALL_QUEUED,
                  "call_progress returned CALL_WAIT %d times of 1000 while peers were late "
                  "(longest %.1f ms), the call still queued",
                  waits, longest * 1e3);
            gate_open();
        } else {
            if (round == 1)
                gate_wait();
            call_submit(&a);
        }
        call_submit(&b);
        call_submit(&c);
        check(a.seq + 1 == b.seq && b.seq + 1 == c.seq, "call numbers follow submission (%llu, "
              "%llu, %llu)", (unsigned long long)a.seq, (unsigned long long)b.seq,
              (unsigned long long)c.seq);
        if (round == 2) { /* the first one waited for first */
            rc = call_wait(&a);
            check(!rc && a.state == CALL_DONE, "waiting for the first call completes it");
        }
        /* Waiting for the last completes the others first, in order. */
        rc = call_wait(&c);
        check(!rc && a.state == CALL_DONE && b.state == CALL_DONE && c.state == CALL_DONE &&
                  !a.rc && !b.rc,
              "waiting for the last call completed all three (%s)",
              rc ? shmesh_last_error(ctx) : "ok");
        int peer_x = 2 * (1 - x) + y; /* the other member over "x" */
        check(a_out[0] == rank + peer_x && a_out[1] == 10 * (rank + peer_x) &&
                  a_out[2] == 2 * round,
              "psum over x: [%d %d %d]", a_out[0], a_out[1], a_out[2]);
        int r0 = 2 * x, r1 = 2 * x + 1; /* the members over "y", in order */
        check(b_out[0] == r0 && b_out[1] == round && b_out[2] == r1 && b_out[3] == round,
              "all_gather over y: [%d %d %d %d]", b_out[0], b_out[1], b_out[2], b_out[3]);
        int from = (rank + 3) % 4; /* "x,y" index = rank; the ring sends i to i+1 */
        check(c_out == 100 * from + round, "ppermute over x,y: %d from rank %d", c_out, from);
        call_release(&a);
        call_release(&b);
        call_release(&c);
    }
    shmesh_mesh_destroy(m);
    return 0;
}

/* The test backend: an address range it calls device memory. */
struct range {
    const unsigned char *lo, *hi;
};

static bool range_claims(void *arg, const void *p, uint64_t len)
{
    const struct range *r = arg;
    const unsigned char *q = p;
    return q < r->hi && q + len > r->lo;
}

static int expect_refused(const char *what, int rc, const char *words)
{
    const char *msg = shmesh_last_error(ctx);
    bool ok = rc == SHMESH_ERR_INVALID && strstr(msg, words) && strstr(msg, "'test-device'");
    check(ok, "%s refused: %s: %s", what, shmesh_error_name(rc), msg);
    return ok ? 0 : 1;
}

static int mode_device(void)
{
    size_t len = 1 << 20;
    /* Not even readable: a memcpy or a process_vm_readv of it would fail
     * (the first with SIGSEGV). */
    unsigned char *dev = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dev == MAP_FAILED)
        return 1;
    static struct range r;
    r = (struct range){dev, dev + len};
    struct mem_backend b = {"test-device", range_claims, &r};
    if (mem_register(ctx, &b))
        return 1;
    const char *names[] = {"i"};
    int sizes[] = {2};
    shmesh_mesh *m;
    if (shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m))
        return 1;

    int32_t host[1 << 14], *heap = shmesh_alloc(ctx, sizeof host);
    check(mem_classify(ctx, host, sizeof host, NULL, NULL) == MEM_HOST, "a stack array is host");
    check(heap && mem_classify(ctx, heap, sizeof host, NULL, NULL) == MEM_HEAP,
          "shmesh_alloc gives shared-heap memory");
    const char *who = NULL;
    check(mem_classify(ctx, dev + 64, 4, NULL, &who) == MEM_DEVICE && who &&
              !strcmp(who, "test-device"),
          "the claimed range is device memory of 'test-device'");

    int64_t n = 1 << 14; /* 64 KiB: large enough for zero copy */
    shmesh_array d = ARR(dev, SHMESH_INT32, 1, n), h = ARR(host, SHMESH_INT32, 1, n);
    int fails = 0;
    fails += expect_refused("psum from device memory",
                            shmesh_psum(m, "i", NULL, &d, &h), "in (");
    fails += expect_refused("psum into device memory",
                            shmesh_psum(m, "i", NULL, &h, &d), "out (");
    shmesh_array g = ARR(dev, SHMESH_INT32, 1, 2 * n);
    fails += expect_refused("all_gather into device memory",
                            shmesh_all_gather(m, "i", NULL, 0, true, &h, &g), "is device memory");
    fails += expect_refused("world_sum in device memory",
                            shmesh_world_sum(ctx, dev, (size_t)n, SHMESH_FLOAT32),
                            "is device memory");
    int64_t sizes4[2] = {1, 1}, offs[2] = {0, 1};
    shmesh_array op = ARR(host, SHMESH_INT32, 1, 4), out = ARR(host + 8, SHMESH_INT32, 1, 4);
    shmesh_array io = ARR(offs, SHMESH_INT64, 1, 2), ss = ARR(sizes4, SHMESH_INT64, 1, 2);
    shmesh_array bad = ARR(dev, SHMESH_INT64, 1, 2);
    fails += expect_refused("ragged_all_to_all with device index arrays",
                            shmesh_ragged_all_to_all(m, "i", NULL, &op, &out, &io, &bad, &io, &ss),
                            "send_sizes is device memory");
    /* Refused calls are not made: the job goes on. */
    for (int64_t i = 0; i < n; i++)
        heap[i] = (int32_t)(rank + i);
    shmesh_array hi = ARR(heap, SHMESH_INT32, 1, n);
    int rc = shmesh_psum(m, "i", NULL, &hi, &h);
    check(!rc && host[0] == 1 && host[n - 1] == (int32_t)(2 * (n - 1) + 1),
          "afterwards a psum works: %s", rc ? shmesh_last_error(ctx) : "ok");
    shmesh_free(ctx, heap);
    shmesh_mesh_destroy(m);
    munmap(dev, len);
    return fails;
}

static int mode_cma_fault(void)
{
    if (!engine_of(ctx)->cma_ok) {
        printf("rank %d: skip: this machine refuses process_vm_readv between the ranks\n", rank);
        return 77;
    }
    const char *names[] = {"i"};
    int sizes[] = {2};
    shmesh_mesh *m;
    if (shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m))
        return 1;
    int64_t n = 1 << 18; /* 1 MiB of int32: single copy (not in the heap) */
    size_t bytes = (size_t)n * 4;
    /* Rank 0's input cannot be read by anyone: rank 1's single copy of it
     * fails.  (Rank 0 receives nothing, so it never touches it.) */
    int32_t *in = rank == 0 ? mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                            : calloc((size_t)n, 4);
    int32_t *out = calloc((size_t)n, 4);
    shmesh_array a = ARR(in, SHMESH_INT32, 1, n), o = ARR(out, SHMESH_INT32, 1, n);
    const int pair[1][2] = {{0, 1}};
    int rc = shmesh_ppermute(m, "i", pair, 1, &a, &o);
    const char *msg = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_SYSTEM && strstr(msg, "rank 1 could not read rank 0's buffer with "
                                                 "process_vm_readv") &&
              strstr(msg, "failed on every member"),
          "the refused single copy fails the call on this rank: %s: %s", shmesh_error_name(rc),
          msg);
    /* The context is not poisoned: the job goes on. */
    int32_t x = rank + 1, y = 0;
    shmesh_array xs = ARR(&x, SHMESH_INT32, 0, 0), ys = ARR(&y, SHMESH_INT32, 0, 0);
    rc = shmesh_psum(m, "i", NULL, &xs, &ys);
    check(!rc && y == 3, "afterwards a psum works: %d (%s)", y, rc ? shmesh_last_error(ctx) : "ok");
    /* A reshard's transfers read by their rows (one copy out of the old
     * shards): rank 0's shard of P('i') cannot be read, so rank 1's read of
     * it for P() fails the reshard on both ranks; with the shard readable
     * again, the same reshard works. */
    shmesh_pspec split_spec, whole_spec;
    shmesh_sharding *split, *whole;
    shmesh_global_array *ga, *gb = NULL;
    int64_t shape[1] = {2 * n};
    if (shmesh_pspec_parse("i", &split_spec) || shmesh_pspec_parse("", &whole_spec) ||
        shmesh_sharding_create(m, &split_spec, &split) ||
        shmesh_sharding_create(m, &whole_spec, &whole))
        return 1;
    void *buffers[1] = {in};
    if (rank == 0)
        mprotect(in, bytes, PROT_READ | PROT_WRITE);
    for (int64_t i = 0; i < n; i++)
        in[i] = (int32_t)(rank * n + i);
    if (rank == 0)
        mprotect(in, bytes, PROT_NONE);
    if (shmesh_global_array_create(split, SHMESH_INT32, 1, shape, buffers, &ga))
        return 1;
    rc = shmesh_global_array_reshard(ga, whole, &gb);
    msg = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_SYSTEM && !gb &&
              strstr(msg, "shmesh_global_array_reshard") &&
              strstr(msg, "rank 1 could not read rank 0's buffer with process_vm_readv"),
          "a reshard reading an unreadable shard fails on this rank: %s: %s",
          shmesh_error_name(rc), msg);
    if (rank == 0)
        mprotect(in, bytes, PROT_READ | PROT_WRITE);
    rc = shmesh_global_array_reshard(ga, whole, &gb);
    const shmesh_shard *sh;
    bool right = !rc && shmesh_global_array_local_shards(gb, &sh) == 1;
    for (int64_t i = 0; right && i < 2 * n; i++)
        right = ((const int32_t *)sh[0].data.data)[i] == (int32_t)i;
    check(right, "then the shard readable, the reshard works (%s)",
          rc ? shmesh_last_error(ctx) : "ok");
    shmesh_global_array_destroy(gb);
    shmesh_global_array_destroy(ga);
    shmesh_sharding_destroy(split);
    shmesh_sharding_destroy(whole);
    shmesh_mesh_destroy(m);
    free(out);
    if (rank == 0)
        munmap(in, bytes);
    else
        free(in);
    return 0;
}

static void *barrier_thread(void *rc)
{
    *(int *)rc = shmesh_barrier(ctx);
    return NULL;
}

/* Arrangement `arr` (bit r: rank r's buffers in the heap), three rounds:
 * the elements of psum, all_gather and pbroadcast that were wrong. */
static int64_t heap_mix_round(shmesh_mesh *m, int32_t *in, int32_t *out, int64_t n, int rep)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        in[i] = rank * 1000 + (int32_t)(i % 1000) + rep;
    shmesh_array a = ARR(in, SHMESH_INT32, 1, n), b = ARR(out, SHMESH_INT32, 1, n),
                 g = ARR(out, SHMESH_INT32, 1, 2 * n);
    memset(out, 0xff, (size_t)n * 8);
    int rc = shmesh_psum(m, "i", NULL, &a, &b);
    for (int64_t i = 0; i < n; i++)
        bad += rc || out[i] != 1000 + 2 * ((int32_t)(i % 1000) + rep);
    memset(out, 0xff, (size_t)n * 8);
    rc = shmesh_all_gather(m, "i", NULL, 0, true, &a, &g);
    for (int q = 0; q < 2; q++)
        for (int64_t i = 0; i < n; i++)
            bad += rc || out[q * n + i] != q * 1000 + (int32_t)(i % 1000) + rep;
    memset(out, 0xff, (size_t)n * 8);
    int src = rep % 2;
    rc = shmesh_pbroadcast(m, "i", src, &a, &b);
    for (int64_t i = 0; i < n; i++)
        bad += rc || out[i] != src * 1000 + (int32_t)(i % 1000) + rep;
    return bad;
}

static int mode_heap_mix(void)
{
    const char *names[] = {"i"};
    int sizes[] = {2};
    shmesh_mesh *m;
    if (shmesh_mesh_create(ctx, 1, names, sizes, NULL, &m))
        return 1;
    const int64_t n = 1 << 16; /* 256 KiB of int32: zero copy's size, not single copy's */
    int32_t *hin = shmesh_alloc(ctx, (size_t)n * 8), *hout = shmesh_alloc(ctx, (size_t)n * 8);
    int32_t *min = malloc((size_t)n * 8), *mout = malloc((size_t)n * 8);
    if (!hin || !hout || !min || !mout) {
        free(min);
        free(mout);
        shmesh_mesh_destroy(m);
        return 1;
    }
    for (int arr = 0; arr < 4; arr++) {
        bool heap = (arr >> rank) & 1;
        int64_t bad = 0;
        for (int rep = 0; rep < 3; rep++)
            bad += heap_mix_round(m, heap ? hin : min, heap ? hout : mout, n, rep);
        check(!bad, "rank 0's buffers %s the heap, rank 1's %s: psum, all_gather and "
              "pbroadcast right (%lld elements wrong)", arr & 1 ? "in" : "outside",
              arr & 2 ? "in" : "outside", (long long)bad);
    }
    /* Both outside the heap: each goes on without the other's handshake,
     * and still finds the mismatch before it writes its output. */
    int64_t mine = rank ? n / 2 : n;
    memset(mout, 0x5a, (size_t)n * 4);
    shmesh_array a = ARR(min, SHMESH_INT32, 1, mine), b = ARR(mout, SHMESH_INT32, 1, mine);
    int rc = shmesh_pbroadcast(m, "i", 0, &a, &b);
    check(rc == SHMESH_ERR_MISMATCH, "a pbroadcast of %lld elements here and %lld there fails "
          "as a mismatch: %s", (long long)mine, (long long)(n + n / 2 - mine),
          rc ? shmesh_error_name(rc) : "no error");
    int64_t written = 0;
    for (int64_t i = 0; i < n; i++)
        written += mout[i] != 0x5a5a5a5a;
    check(!written, "its output untouched (%lld elements written)", (long long)written);
    free(min);
    free(mout);
    shmesh_free(ctx, hin);
    shmesh_free(ctx, hout);
    shmesh_mesh_destroy(m);
    return 0;
}

static int mode_threads(void)
{
    if (rank == 1) {
        /* Late, until rank 0's second thread has been refused: rank 0's
         * first barrier waits that long. */
        gate_wait();
        check(shmesh_barrier(ctx) == 0, "first barrier");
        check(shmesh_barrier(ctx) == 0, "second barrier");
        return 0;
    }
    int thread_rc = -1;
    pthread_t t;
    if (pthread_create(&t, NULL, barrier_thread, &thread_rc))
        return 1;
    /* Until the other thread is inside the library with the context (it
     * stays there: rank 1 is held at the gate); 60 s at most. */
    double t0 = now();
    while (!atomic_load(&ctx->busy) && now() - t0 < 60)
        usleep(100);
    double one = 1;
    int rc = shmesh_world_sum(ctx, &one, 1, SHMESH_FLOAT64);
    gate_open();
    const char *why = shmesh_last_error(ctx);
    check(rc == SHMESH_ERR_INVALID, "a second thread is refused (%s)", shmesh_error_name(rc));
    check(strstr(why, "rank 0: shmesh_world_sum called from thread ") &&
              strstr(why, "a context may be used by one thread at a time"),
          "with its own explanation: %s", why);
    pthread_join(t, NULL);
    check(thread_rc == 0, "the first thread's barrier is unharmed (%s)",
          shmesh_error_name(thread_rc));
    /* The context is this thread's now. */
    rc = shmesh_barrier(ctx);
    check(rc == 0 && !strstr(shmesh_last_error(ctx), "one thread at a time"),
          "handed over after the first thread left (%s)", shmesh_error_name(rc));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: shmesh-run -n N -- shmesh-test-engine "
                        "inflight|device|cma-fault|threads|heap-mix\n");
        return 2;
    }
    if (shmesh_init(&ctx)) {
        fprintf(stderr, "shmesh_init: %s\n", shmesh_last_error(NULL));
        return 1;
    }
    rank = shmesh_rank(ctx);
    int rc;
    if (!strcmp(argv[1], "inflight"))
        rc = mode_inflight();
    else if (!strcmp(argv[1], "device"))
        rc = mode_device();
    else if (!strcmp(argv[1], "cma-fault"))
        rc = mode_cma_fault();
    else if (!strcmp(argv[1], "threads"))
        rc = mode_threads();
    else if (!strcmp(argv[1], "heap-mix"))
        rc = mode_heap_mix();
    else
        rc = 2;
    if (rc == 77) {
        shmesh_finalize(ctx);
        return 77;
    }
    if (rc || failures)
        printf("rank %d: FAILED (%s)\n", rank, rc ? shmesh_last_error(ctx) : "checks");
    int frc = shmesh_finalize(ctx);
    if (!strcmp(argv[1], "heap-mix") && frc == SHMESH_ERR_MISMATCH)
        frc = 0; /* its last call's mismatch, as meant */
    return rc || failures || frc ? 1 : 0;
}
