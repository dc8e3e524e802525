/* Description: the device kernels (lib/device/kernels.h) and the fake GPU
 * runtime that runs them in CI (tests/fake_gpu), loaded with dlopen as
 * libshmesh loads a runtime plugin.
 *
 * The kernels: every reduction (sum, max, min, mean) of every dtype, from
 * 1, 2, 3 and 7 sources of 0 to 100003 elements, copied to device memory,
 * reduced there, copied back and compared bit for bit with the host's
 * reduce_run (NaNs with payloads, signalling ones, -0.0, infinities, ties,
 * integer extremes among the values), also in place (dst is src[0]), and
 * nothing written past n; the pairs taken are exactly sum/max/min of the
 * integers, float32 and float64 and the mean of the two floats, and every
 * other one is refused with RT_ERR_NO_KERNEL.
 *
 * The fake itself, since the library's tests trust it to catch mistakes:
 * devices and visibility from its environment; copies and kernels run only
 * at their stream's sync; device pointers fault in host code (a child that
 * reads one dies of SIGSEGV), a freed one too; range() on bases, interiors,
 * ends and host memory; a free then an alloc gives the same address with a
 * new id; bad pointers refused when queued, with a message; IPC between two
 * processes through a pipe (open, read, write, close, counted), stale
 * handles (freed, or the exporter gone) and one's own refused, pool memory
 * refused with RT_ERR_POOL, an injected open failure; range() from a
 * second thread while the first allocates and frees. */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "device/runtime.h"
#include "fake_gpu.h"
#include "harness.h"
#include "kernels/reduce.h"

static const struct rt_ops *rt;
static fake_gpu_alloc_pool_fn alloc_pool;
static fake_gpu_counters_fn counters;
static fake_gpu_fail_next_open_fn fail_next_open;

/* A runtime call that must succeed. */
#define RT(call)                                                                               \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != 0)                                                                          \
            fail_msg("%s returned %d, expected 0: %s", #call, rc_, rt->last_error());          \
    } while (0)

/* A runtime call that must fail with `want`, saying `words`. */
#define RT_FAILS(call, want, words)                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != (want))                                                                     \
            fail_msg("%s returned %d, expected %d", #call, rc_, (want));                       \
        if (!strstr(rt->last_error(), (words)))                                                \
            fail_msg("%s: the error \"%s\" does not say \"%s\"", #call, rt->last_error(),      \
                     (words));                                                                 \
    } while (0)

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p)
        print_error("%s has no %s: %s\n", FAKE_GPU_PATH, name, dlerror());
    return p;
}

static int load(void **state)
{
    unsetenv("SHMESH_FAKE_GPUS");
    unsetenv("SHMESH_FAKE_VISIBLE_DEVICES");
    void *h = dlopen(FAKE_GPU_PATH, RTLD_NOW);
    if (!h) {
        print_error("dlopen %s: %s\n", FAKE_GPU_PATH, dlerror());
        return -1;
    }
    /* POSIX's way from dlsym's void * to a function pointer. */
    rt_entry_fn entry;
    *(void **)&entry = sym(h, RT_ENTRY);
    *(void **)&alloc_pool = sym(h, "fake_gpu_alloc_pool");
    *(void **)&counters = sym(h, "fake_gpu_counters");
    *(void **)&fail_next_open = sym(h, "fake_gpu_fail_next_open");
    if (!entry || !alloc_pool || !counters || !fail_next_open)
        return -1;
    rt = entry();
    if (rt->init() != 2) {
        print_error("init() gave %d devices, expected SHMESH_FAKE_GPUS's default, 2\n",
                    rt->init());
        return -1;
    }
    return 0;
}

/* ---- the kernels against the host reductions ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool is_float(shmesh_dtype dt) { return dt == SHMESH_FLOAT32 || dt == SHMESH_FLOAT64; }
static bool is_int(shmesh_dtype dt) { return dt >= SHMESH_INT8 && dt <= SHMESH_UINT64; }

/* The pairs kernels.h's header promises, written out independently. */
static bool expected_taken(int op, shmesh_dtype dt)
{
    if (op == RT_MEAN)
        return is_float(dt);
    return (op == RT_SUM || op == RT_MAX || op == RT_MIN) && (is_int(dt) || is_float(dt));
}

/* Values that trip reductions up, as bit patterns. */
static const uint32_t f32_special[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* ±0, ±inf */
    0x7fc12345u, 0xffc00001u, 0x7f800001u, 0xff812345u, /* quiet and signalling NaNs */
    0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, /* denormals, ±max */
    0x3f800000u, 0xbf800000u,
};
static const uint64_t f64_special[] = {
    0, UINT64_C(0x8000000000000000), UINT64_C(0x7ff0000000000000),
    UINT64_C(0xfff0000000000000), UINT64_C(0x7ff8000000012345), UINT64_C(0xfff8000000000001),
    UINT64_C(0x7ff0000000000001), UINT64_C(0xfff0000000abcdef), UINT64_C(0x0000000000000001),
    UINT64_C(0x800fffffffffffff), UINT64_C(0x7fefffffffffffff), UINT64_C(0xffefffffffffffff),
    UINT64_C(0x3ff0000000000000), UINT64_C(0xbff0000000000000),
};

/* Element i of source k: a special value, a tie with source 0, a small
 * ordinary number (so that sums are not all NaN), or random bits. */
static uint64_t element(shmesh_dtype dt, size_t esz, const unsigned char *src0, int k, size_t i)
{
    uint64_t r = next(), u = next();
    switch (r % 8) {
    case 0:
        if (dt == SHMESH_FLOAT32)
            return f32_special[u % (sizeof f32_special / sizeof *f32_special)];
        if (dt == SHMESH_FLOAT64)
            return f64_special[u % (sizeof f64_special / sizeof *f64_special)];
        /* 0, all ones (-1, the unsigned maximum), the sign bit alone (the
         * signed minimum), all but it (the signed maximum), 1 */
        switch (u % 5) {
        case 0: return 0;
        case 1: return ~UINT64_C(0);
        case 2: return UINT64_C(1) << (8 * esz - 1);
        case 3: return (UINT64_C(1) << (8 * esz - 1)) - 1;
        default: return 1;
        }
    case 1:
        if (k > 0) {
            uint64_t t = 0;
            memcpy(&t, src0 + i * esz, esz);
            return t;
        }
        return u;
    case 2:
    case 3:
    case 4: {
        double d = (double)((int64_t)(u % 4001) - 2000) / 16.0;
        if (dt == SHMESH_FLOAT32) {
            float f = (float)d;
            uint32_t b;
            memcpy(&b, &f, 4);
            return b;
        }
        if (dt == SHMESH_FLOAT64) {
            memcpy(&u, &d, 8);
            return u;
        }
        return (uint64_t)(int64_t)(d * 16);
    }
    default: return u;
    }
}

enum { MAXN = 100003, MAXSRC = 7 };
static const int nsrcs[] = {1, 2, 3, 7};
static const size_t lengths[] = {0, 1, 5, 1000, MAXN};
static const char *const op_names[] = {"sum", "max", "min", "mean"};

static uint64_t bits(const unsigned char *p, size_t esz, size_t i)
{
    uint64_t u = 0;
    memcpy(&u, p + i * esz, esz);
    return u;
}

/* Device buffers for the matrix, allocated once. */
struct bufs {
    void *dev[MAXSRC], *dst;
    unsigned char *host[MAXSRC], *out, *want, *poison;
};

/* One reduction, into dst or in place into src[0]: compares every element
 * and checks that the one after the last is untouched. */
static void check_one(struct bufs *b, int op, shmesh_dtype dt, int nsrc, size_t n, int mean_n,
                      bool in_place, void *stream)
{
    size_t esz = shmesh_dtype_size(dt);
    size_t bytes = n * esz, check = (n < MAXN ? n + 1 : n) * esz;
    for (int k = 0; k < nsrc; k++)
        RT(rt->copy(b->dev[k], b->host[k], check, stream));
    RT(rt->copy(b->dst, b->poison, check, stream));
    struct rt_reduce r = {.op = op, .dtype = dt, .nsrc = nsrc, .n = n, .mean_n = mean_n};
    r.dst = in_place ? b->dev[0] : b->dst;
    for (int k = 0; k < nsrc; k++)
        r.src[k] = b->dev[k];
    RT(rt->reduce(&r, stream));
    RT(rt->copy(b->out, r.dst, check, stream));
    RT(rt->sync(stream));

    const void *src[MAXSRC];
    for (int k = 0; k < nsrc; k++)
        src[k] = b->host[k];
    reduce_run((enum red_op)op, dt, dt, b->want, src, nsrc, n, mean_n);
    if (check > bytes) /* past n: what was there before */
        memcpy(b->want + bytes, in_place ? b->host[0] + bytes : b->poison + bytes, esz);
    if (!memcmp(b->out, b->want, check))
        return;
    size_t i = 0;
    while (bits(b->out, esz, i) == bits(b->want, esz, i))
        i++;
    char srcs[MAXSRC * 20] = "", *p = srcs;
    for (int k = 0; k < nsrc && i < n; k++)
        p += sprintf(p, " 0x%llx", (unsigned long long)bits(b->host[k], esz, i));
    fail_msg("%s of %s, %d sources, %zu elements%s: element %zu is 0x%llx, expected 0x%llx "
             "(%s%s)",
             op_names[op], shmesh_dtype_name(dt), nsrc, n, in_place ? ", in place" : "", i,
             (unsigned long long)bits(b->out, esz, i), (unsigned long long)bits(b->want, esz, i),
             i < n ? "sources" : "past the end, must be left alone", srcs);
}

static void kernels_match_the_host_bit_for_bit(void **state)
{
    struct bufs b;
    for (int k = 0; k < MAXSRC; k++) {
        RT(rt->alloc(k % 2, MAXN * 8, &b.dev[k]));
        b.host[k] = malloc(MAXN * 8);
    }
    RT(rt->alloc(1, MAXN * 8, &b.dst));
    b.out = malloc(MAXN * 8);
    b.want = malloc(MAXN * 8);
    b.poison = malloc(MAXN * 8);
    memset(b.poison, 0x5a, MAXN * 8);

    unsigned ran = 0, cases = 0, taken = 0;
    for (int dt = 0; dt < SHMESH_DTYPE_COUNT; dt++) {
        size_t esz = shmesh_dtype_size((shmesh_dtype)dt);
        for (int k = 0; k < MAXSRC; k++)
            for (size_t i = 0; i < MAXN; i++) {
                uint64_t u = element((shmesh_dtype)dt, esz, b.host[0], k, i);
                memcpy(b.host[k] + i * esz, &u, esz);
            }
        for (int op = RT_SUM; op <= RT_MEAN; op++) {
            if (rt->takes(op, (shmesh_dtype)dt) != expected_taken(op, (shmesh_dtype)dt))
                fail_msg("takes(%s, %s) is %d, expected %d", op_names[op],
                         shmesh_dtype_name((shmesh_dtype)dt), rt->takes(op, (shmesh_dtype)dt),
                         expected_taken(op, (shmesh_dtype)dt));
            if (!expected_taken(op, (shmesh_dtype)dt))
                continue;
            taken++;
            for (size_t s = 0; s < sizeof nsrcs / sizeof *nsrcs; s++)
                for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++) {
                    if (!test_sampled(cases++))
                        continue;
                    ran++;
                    /* The default stream and two others; means over the
                     * sources' count and over other counts. */
                    void *stream = (void *)(uintptr_t)(cases % 3);
                    int mean_n = cases % 2 ? nsrcs[s] : 3 + (int)(cases % 5);
                    for (int in_place = 0; in_place < 2; in_place++)
                        check_one(&b, op, (shmesh_dtype)dt, nsrcs[s], lengths[l], mean_n,
                                  in_place, stream);
                }
        }
    }
    assert_int_equal(taken, 8 * 3 + 2 * 3 + 2);
    test_sample_note("reductions", ran, cases);
    for (int k = 0; k < MAXSRC; k++) {
        RT(rt->free(b.dev[k]));
        free(b.host[k]);
    }
    RT(rt->free(b.dst));
    free(b.out);
    free(b.want);
    free(b.poison);
}

static void other_reductions_have_no_kernel(void **state)
{
    void *a, *d;
    RT(rt->alloc(0, 64, &a));
    RT(rt->alloc(0, 64, &d));
    struct rt_reduce r = {.dst = d, .src = {a, a}, .nsrc = 2, .n = 5, .mean_n = 2};
    for (int op = RT_SUM; op <= RT_MEAN + 1; op++)
        for (int dt = 0; dt < SHMESH_DTYPE_COUNT; dt++) {
            if (op <= RT_MEAN && expected_taken(op, (shmesh_dtype)dt))
                continue;
            assert_int_equal(rt->takes(op, (shmesh_dtype)dt), 0);
            r.op = op;
            r.dtype = (shmesh_dtype)dt;
            RT_FAILS(rt->reduce(&r, NULL), RT_ERR_NO_KERNEL, "no kernel");
        }
    RT(rt->sync(NULL));
    RT(rt->free(a));
    RT(rt->free(d));
}

/* ---- the fake's own behaviour ---- */

static void devices_come_from_the_environment(void **state)
{
    char bus[16];
    assert_int_equal(rt->abi, RT_ABI);
    assert_string_equal(rt->name, "fake");
    assert_string_equal(rt->visible_env, "SHMESH_FAKE_VISIBLE_DEVICES");
    assert_int_equal(rt->init(), 2);
    RT(rt->pci_bus_id(1, bus, sizeof bus));
    assert_string_equal(bus, "0000:81:00.0");
    RT_FAILS(rt->pci_bus_id(2, bus, sizeof bus), RT_ERR, "device 2");
    RT_FAILS(rt->pci_bus_id(0, bus, 8), RT_ERR, "room");

    void *p;
    setenv("SHMESH_FAKE_GPUS", "0", 1);
    assert_int_equal(rt->init(), 0);
    RT_FAILS(rt->alloc(0, 64, &p), RT_ERR, "sees no devices");
    setenv("SHMESH_FAKE_GPUS", "4", 1);
    assert_int_equal(rt->init(), 4);
    /* Renumbered in the list's order; the PCI address stays the GPU's. */
    setenv("SHMESH_FAKE_VISIBLE_DEVICES", "3,1", 1);
    assert_int_equal(rt->init(), 2);
    RT(rt->pci_bus_id(0, bus, sizeof bus));
    assert_string_equal(bus, "0000:83:00.0");
    RT(rt->pci_bus_id(1, bus, sizeof bus));
    assert_string_equal(bus, "0000:81:00.0");
    setenv("SHMESH_FAKE_VISIBLE_DEVICES", "", 1);
    assert_int_equal(rt->init(), 0);
    setenv("SHMESH_FAKE_VISIBLE_DEVICES", "1,4", 1);
    RT_FAILS(rt->init(), RT_ERR, "SHMESH_FAKE_VISIBLE_DEVICES=\"1,4\"");
    setenv("SHMESH_FAKE_VISIBLE_DEVICES", "1,1", 1);
    RT_FAILS(rt->init(), RT_ERR, "twice");
    setenv("SHMESH_FAKE_GPUS", "two", 1);
    RT_FAILS(rt->init(), RT_ERR, "SHMESH_FAKE_GPUS=\"two\"");

    unsetenv("SHMESH_FAKE_GPUS");
    unsetenv("SHMESH_FAKE_VISIBLE_DEVICES");
    assert_int_equal(rt->init(), 2);
    RT_FAILS(rt->alloc(2, 64, &p), RT_ERR, "device 2");
    RT(rt->alloc(0, 0, &p)); /* nothing, as cudaMalloc(0) */
    assert_null(p);
    RT(rt->free(NULL));
}

static void work_waits_for_its_stream(void **state)
{
    enum { N = 10000 };
    unsigned char a[N], back[N], host[N];
    void *d;
    for (int i = 0; i < N; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    RT(rt->alloc(0, N, &d));
    void *s1 = (void *)0x11, *s2 = (void *)0x22;
    RT(rt->copy(d, a, N, s1));
    RT(rt->sync(s1));
    memset(back, 0, N);
    RT(rt->copy(back, d, N, s1));
    assert_int_equal(back[1], 0); /* queued, not run */
    RT(rt->sync(s2));             /* another stream's sync runs nothing of s1 */
    RT(rt->sync(NULL));
    assert_int_equal(back[1], 0);
    RT(rt->sync(s1));
    assert_memory_equal(back, a, N);

    /* Host to host waits too, and work on one stream runs in order. */
    memset(host, 0, N);
    RT(rt->copy(host, a, N, NULL));
    RT(rt->copy(d, host, N, NULL)); /* reads host after the copy above */
    RT(rt->copy(back, d, N, NULL));
    assert_int_equal(host[1], 0);
    RT(rt->sync(NULL));
    assert_memory_equal(host, a, N);
    assert_memory_equal(back, a, N);

    /* A kernel's result too. */
    float one = 1.0f, out = 0;
    RT(rt->copy(d, &one, sizeof one, s2));
    struct rt_reduce r = {.op = RT_SUM, .dtype = SHMESH_FLOAT32, .dst = d, .src = {d, d, d},
                          .nsrc = 3, .n = 1};
    RT(rt->reduce(&r, s2));
    RT(rt->copy(&out, d, sizeof out, s2));
    assert_true(out == 0.0f);
    RT(rt->sync(s2));
    assert_true(out == 3.0f);
    RT(rt->free(d));
}

/* Whether a child that reads p dies of SIGSEGV. */
static void reading_faults(const void *p, const char *what)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(10);
        /* The default action, not a sanitizer's report: this fault is the
         * expected outcome (ASan lets a program set its own SEGV action). */
        signal(SIGSEGV, SIG_DFL);
        unsigned char c[8];
        memcpy(c, p, sizeof c);
        fprintf(stderr, "read %s %p: got 0x%02x, expected SIGSEGV\n", what, p, c[0]);
        _exit(1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("a child reading %s %p: wait status 0x%x, expected death by SIGSEGV", what, p,
                 st);
}

static void device_pointers_fault_in_host_code(void **state)
{
    void *d;
    RT(rt->alloc(1, 100, &d));
    reading_faults(d, "device memory");
    reading_faults((char *)d + 50, "the inside of device memory");
    RT(rt->free(d));
    reading_faults(d, "freed device memory");
}

static void range_knows_allocations(void **state)
{
    void *a, *b;
    struct rt_range r, r2;
    int local;
    RT(rt->alloc(0, 10000, &a));
    RT(rt->alloc(1, 1, &b));
    assert_int_equal(rt->range(a, &r), 1);
    assert_true(r.base == (uintptr_t)a && r.size == 10000 && r.device == 0);
    assert_int_equal(rt->range((char *)a + 9999, &r2), 1);
    assert_true(r2.base == r.base && r2.size == r.size && r2.id == r.id && r2.device == 0);
    assert_int_equal(rt->range((char *)a + 10000, &r2), 0); /* its page, not its bytes */
    assert_int_equal(rt->range(b, &r2), 1);
    assert_true(r2.device == 1 && r2.size == 1 && r2.id != r.id);
    void *heap = malloc(16);
    assert_int_equal(rt->range(heap, &r2), 0);
    assert_int_equal(rt->range(&local, &r2), 0);
    assert_int_equal(rt->range(NULL, &r2), 0);
    free(heap);
    RT(rt->free(a));
    RT(rt->free(b));
}

static void a_free_keeps_the_address_for_a_new_id(void **state)
{
    void *a, *b, *c;
    struct rt_range r;
    RT(rt->alloc(0, 3 * 4096, &a));
    assert_int_equal(rt->range(a, &r), 1);
    uint64_t id = r.id;
    RT(rt->free(a));
    assert_int_equal(rt->range(a, &r), 0);
    char host[8] = "abcdefg";
    RT_FAILS(rt->copy(a, host, 8, NULL), RT_ERR, "freed");
    RT_FAILS(rt->free(a), RT_ERR, "freed");
    RT(rt->alloc(1, 3 * 4096, &b));
    assert_ptr_equal(a, b);
    assert_int_equal(rt->range(b, &r), 1);
    assert_true(r.id > id && r.device == 1);
    /* A smaller one fits in a freed range too; a larger one goes elsewhere. */
    RT(rt->free(b));
    RT(rt->alloc(0, 100, &b));
    assert_ptr_equal(a, b);
    RT(rt->alloc(0, 1 << 20, &c));
    assert_true((uintptr_t)c >= (uintptr_t)a + 3 * 4096 ||
                (uintptr_t)c + (1 << 20) <= (uintptr_t)a);
    RT_FAILS(rt->free((char *)c + 8), RT_ERR, "inside");
    RT_FAILS(rt->free(host), RT_ERR, "not device memory");
    RT(rt->free(b));
    RT(rt->free(c));
}

static void bad_pointers_are_refused_when_queued(void **state)
{
    void *d;
    char host[64] = {0};
    RT(rt->alloc(0, 100, &d));
    RT_FAILS(rt->copy((char *)d + 96, host, 8, NULL), RT_ERR, "past the end");
    RT_FAILS(rt->copy(host, (char *)d + 100, 8, NULL), RT_ERR, "outside allocation");
    RT_FAILS(rt->copy(host, NULL, 8, NULL), RT_ERR, "NULL");
    struct rt_reduce r = {.op = RT_SUM, .dtype = SHMESH_INT32, .dst = d, .src = {d, host},
                          .nsrc = 2, .n = 4};
    RT_FAILS(rt->reduce(&r, NULL), RT_ERR, "src[1]");
    r.src[1] = d;
    r.n = 26;
    RT_FAILS(rt->reduce(&r, NULL), RT_ERR, "past the end");
    r.n = 4;
    r.nsrc = 0;
    RT_FAILS(rt->reduce(&r, NULL), RT_ERR, "0 sources");
    r.nsrc = 2;
    r.op = RT_MEAN;
    r.dtype = SHMESH_FLOAT32;
    r.mean_n = 0;
    RT_FAILS(rt->reduce(&r, NULL), RT_ERR, "mean over 0");
    RT(rt->sync(NULL)); /* nothing was queued: nothing runs */
    RT(rt->free(d));
}

/* Children of the IPC tests: a failed check prints and exits 1. */
static void child_check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void child_check(bool ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "child: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s)\n", rt->last_error());
    va_end(ap);
    _exit(1);
}

/* A child's verdict comes through a pipe, not its exit status: under
 * valgrind (meson test --setup valgrind) a forked child exits 99 for the
 * blocks it inherited, which look lost from there. */
static int verdict[2];

static pid_t start_child(void)
{
    assert_int_equal(pipe(verdict), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(verdict[0]);
        alarm(20); /* never outlive a stuck test */
    } else
        close(verdict[1]);
    return pid;
}

static void child_done(void)
{
    child_check(write(verdict[1], "k", 1) == 1, "the verdict pipe");
    _exit(0);
}

static void child_passed(pid_t pid)
{
    char c = 0;
    ssize_t k = read(verdict[0], &c, 1); /* 0 (end of file) when the child failed */
    close(verdict[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (k != 1 || c != 'k')
        fail_msg("the child failed (its words above); wait status 0x%x", st);
}

static void send_handle(int fd, const struct rt_handle *h)
{
    assert_int_equal(write(fd, h, sizeof *h), sizeof *h);
}

static void receive_handle(int fd, struct rt_handle *h)
{
    child_check(read(fd, h, sizeof *h) == sizeof *h, "no handle came through the pipe");
}

static void ipc_between_two_processes(void **state)
{
    enum { N = (1 << 20) + 5 };
    unsigned char *data = malloc(N), *back = malloc(N);
    for (size_t i = 0; i < N; i++)
        data[i] = (unsigned char)(i * 13 + (i >> 9));
    void *d;
    struct rt_range mine;
    struct fake_gpu_counters c0, c1;
    RT(rt->alloc(0, N, &d));
    RT(rt->copy(d, data, N, NULL));
    RT(rt->sync(NULL));
    assert_int_equal(rt->range(d, &mine), 1);
    counters(&c0);

    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = start_child();
    if (pid == 0) {
        struct rt_handle h;
        void *base;
        struct rt_range r;
        struct fake_gpu_counters k0, k1;
        close(p[1]);
        receive_handle(p[0], &h);
        counters(&k0);
        child_check(rt->ipc_open(&h, 2, &base) == RT_ERR, "ipc_open on device 2 of 2 worked");
        child_check(rt->ipc_open(&h, 1, &base) == 0, "ipc_open failed");
        /* As CUDA on an H100: the same handle again is the same pointer,
         * one reference more, and the mapping lives until the last close. */
        void *again = NULL;
        child_check(rt->ipc_open(&h, 1, &again) == 0 && again == base,
                    "a second open of the same handle gave %p, expected the first's %p", again,
                    base);
        child_check(rt->ipc_close(again) == 0 && rt->range(base, &r) == 1,
                    "the first of two closes unmapped the memory");
        child_check(rt->range(base, &r) == 1, "range() does not know the mapping");
        child_check(r.base == (uintptr_t)base && r.size == N && r.id == mine.id && r.device == 1,
                    "range() of the mapping: base %p size %llu id %llu device %d, expected %p %d "
                    "%llu 1",
                    (void *)(uintptr_t)r.base, (unsigned long long)r.size,
                    (unsigned long long)r.id, r.device, base, N, (unsigned long long)mine.id);
        memset(back, 0, N);
        child_check(rt->copy(back, base, N, NULL) == 0, "copy from the mapping");
        child_check(back[N - 1] == 0, "the copy ran before sync");
        /* Closing under queued work is the library's bug. */
        child_check(rt->ipc_close(base) == RT_ERR && strstr(rt->last_error(), "queued"),
                    "ipc_close with a copy queued on the mapping worked");
        child_check(rt->sync(NULL) == 0, "sync");
        child_check(!memcmp(back, data, N), "the peer's bytes differ");
        child_check(rt->copy((char *)base + 7, "child", 5, NULL) == 0 && rt->sync(NULL) == 0,
                    "copy into the mapping");
        child_check(rt->ipc_export(base, &h) == RT_ERR, "exporting an opened mapping worked");
        child_check(rt->ipc_close((char *)base + 1) == RT_ERR, "ipc_close inside a mapping worked");
        child_check(rt->ipc_close(base) == 0, "ipc_close");
        child_check(rt->range(base, &r) == 0, "range() knows a closed mapping");
        child_check(rt->copy(back, base, 8, NULL) == RT_ERR && strstr(rt->last_error(), "freed"),
                    "a copy from a closed mapping was queued");
        counters(&k1);
        child_check(k1.opens == k0.opens + 2 && k1.closes == k0.closes + 2 &&
                        k1.live_mappings == k0.live_mappings,
                    "counters: %llu opens, %llu closes, %llu live, expected two opens and two "
                    "closes more, as many live",
                    (unsigned long long)(k1.opens - k0.opens),
                    (unsigned long long)(k1.closes - k0.closes),
                    (unsigned long long)k1.live_mappings);
        /* An injected failure fails one open. */
        fail_next_open();
        child_check(rt->ipc_open(&h, 0, &base) == RT_ERR &&
                        strstr(rt->last_error(), "fake_gpu_fail_next_open"),
                    "ipc_open after fake_gpu_fail_next_open() worked");
        child_check(rt->ipc_open(&h, 0, &base) == 0, "the open after the injected failure");
        child_check(rt->ipc_close(base) == 0, "ipc_close");
        child_done();
    }
    close(p[0]);
    struct rt_handle h;
    RT(rt->ipc_export(d, &h));
    send_handle(p[1], &h);
    close(p[1]);
    child_passed(pid);
    RT(rt->copy(back, d, N, NULL));
    RT(rt->sync(NULL));
    assert_memory_equal(back + 7, "child", 5);
    assert_memory_equal(back + 12, data + 12, N - 12);
    counters(&c1);
    assert_int_equal(c1.exports, c0.exports + 1);
    RT(rt->free(d));
    free(data);
    free(back);
}

static void stale_handles_do_not_open(void **state)
{
    /* Freed: alone, then with a new allocation in its place (same
     * address, likely the same fd number). */
    void *a, *b;
    struct rt_handle ha, hb, hgone;
    struct rt_range rb;
    RT(rt->alloc(0, 4096, &a));
    RT(rt->ipc_export(a, &ha));
    RT(rt->free(a));
    RT(rt->alloc(0, 4096, &b));
    RT(rt->ipc_export(b, &hb));
    assert_int_equal(rt->range(b, &rb), 1);

    /* The exporter gone. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = start_child();
    if (pid == 0) {
        void *x;
        struct rt_handle h;
        child_check(rt->alloc(1, 4096, &x) == 0 && rt->ipc_export(x, &h) == 0, "export");
        child_check(write(p[1], &h, sizeof h) == sizeof h, "write");
        child_done();
    }
    close(p[1]);
    child_passed(pid);
    assert_int_equal(read(p[0], &hgone, sizeof hgone), sizeof hgone);
    close(p[0]);

    pid = start_child();
    if (pid == 0) {
        void *x;
        struct rt_range r;
        child_check(rt->ipc_open(&ha, 0, &x) == RT_ERR && strstr(rt->last_error(), "stale"),
                    "a freed allocation's handle opened");
        child_check(rt->ipc_open(&hgone, 0, &x) == RT_ERR && strstr(rt->last_error(), "stale"),
                    "the handle of an exited process opened");
        child_check(rt->ipc_open(&hb, 0, &x) == 0 && rt->range(x, &r) == 1 && r.id == rb.id,
                    "the new allocation's handle");
        child_done();
    }
    child_passed(pid);
    RT(rt->free(b));
}

static void own_and_foreign_handles_do_not_open(void **state)
{
    void *d, *x;
    struct rt_handle h;
    RT(rt->alloc(0, 64, &d));
    RT(rt->ipc_export(d, &h));
    RT_FAILS(rt->ipc_open(&h, 0, &x), RT_ERR, "own");
    memset(&h, 0x33, sizeof h);
    RT_FAILS(rt->ipc_open(&h, 0, &x), RT_ERR, "not the fake's");
    RT_FAILS(rt->ipc_export((char *)d + 1, &h), RT_ERR, "inside");
    RT_FAILS(rt->ipc_export(&h, &h), RT_ERR, "not device memory");
    RT_FAILS(rt->ipc_close(d), RT_ERR, "own");
    RT(rt->free(d));
}

static void pool_memory_has_no_handle(void **state)
{
    void *d;
    struct rt_handle h;
    struct rt_range r;
    uint64_t v = 0x0123456789abcdefull, back = 0;
    RT(alloc_pool(1, 8, &d));
    assert_int_equal(rt->range(d, &r), 1);
    assert_int_equal(r.device, 1);
    RT_FAILS(rt->ipc_export(d, &h), RT_ERR_POOL, "pool");
    RT(rt->copy(d, &v, 8, NULL));
    RT(rt->copy(&back, d, 8, NULL));
    RT(rt->sync(NULL));
    assert_true(back == v);
    RT(rt->free(d));
}

static void counters_count(void **state)
{
    struct fake_gpu_counters a, b;
    void *d;
    struct rt_handle h;
    int32_t v = 5;
    counters(&a);
    RT(rt->alloc(0, 4, &d));
    RT(rt->copy(d, &v, 4, NULL));
    struct rt_reduce r = {.op = RT_SUM, .dtype = SHMESH_INT32, .dst = d, .src = {d}, .nsrc = 1,
                          .n = 1};
    RT(rt->reduce(&r, NULL));
    RT(rt->copy(&v, d, 4, NULL));
    RT(rt->sync(NULL));
    RT(rt->ipc_export(d, &h));
    counters(&b);
    assert_int_equal(b.copies - a.copies, 2);
    assert_int_equal(b.kernels - a.kernels, 1);
    assert_int_equal(b.syncs - a.syncs, 1);
    assert_int_equal(b.exports - a.exports, 1);
    assert_int_equal(b.opens - a.opens, 0);
    assert_int_equal(b.live_mappings, a.live_mappings);
    RT(rt->free(d));
}

struct looker {
    void *p;
    uint64_t id;
    int bad;
};

static void *look(void *arg)
{
    struct looker *l = arg;
    for (int i = 0; i < 20000; i++) {
        struct rt_range r;
        if (rt->range((char *)l->p + i % 4096, &r) != 1 || r.id != l->id)
            l->bad++;
    }
    return NULL;
}

static void range_from_a_second_thread(void **state)
{
    struct looker l = {0};
    struct rt_range r;
    RT(rt->alloc(0, 4096, &l.p));
    assert_int_equal(rt->range(l.p, &r), 1);
    l.id = r.id;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, look, &l), 0);
    for (int i = 0; i < 300; i++) {
        void *x;
        RT(rt->alloc(i % 2, 1 + (size_t)i * 100, &x));
        RT(rt->free(x));
    }
    pthread_join(t, NULL);
    assert_int_equal(l.bad, 0);
    RT(rt->free(l.p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_match_the_host_bit_for_bit),
        cmocka_unit_test(other_reductions_have_no_kernel),
        cmocka_unit_test(devices_come_from_the_environment),
        cmocka_unit_test(work_waits_for_its_stream),
        cmocka_unit_test(device_pointers_fault_in_host_code),
        cmocka_unit_test(range_knows_allocations),
        cmocka_unit_test(a_free_keeps_the_address_for_a_new_id),
        cmocka_unit_test(bad_pointers_are_refused_when_queued),
        cmocka_unit_test(ipc_between_two_processes),
        cmocka_unit_test(stale_handles_do_not_open),
        cmocka_unit_test(own_and_foreign_handles_do_not_open),
        cmocka_unit_test(pool_memory_has_no_handle),
        cmocka_unit_test(counters_count),
        cmocka_unit_test(range_from_a_second_thread),
    };
    return cmocka_run_group_tests(tests, load, NULL);
}
