/* Description: a GPU backend plugin (lib/device/runtime.h) loads with every
 * symbol resolved (RTLD_NOW), gives a table of the ABI libshmesh expects
 * with its own name and visibility variable and every call filled, says
 * which reductions its kernels take exactly as lib/device/kernels.h does,
 * and starts without crashing where its GPU is missing: the CUDA plugin's
 * init() answers 0 devices on a machine without a driver or GPU (or the
 * plugin fails to load because libcuda.so.1 is missing: skipped, "no
 * driver"); the HIP plugin's answers 0 or refuses with the runtime's
 * sentence.  Where init() finds a device (tools/gpu-check.sh), buffers go
 * through alloc, range, copy, two reduction kernels (one in place), sync,
 * ipc_export and free on device 0, checked element by element, and the
 * refusals (an op no kernel takes, a handle that opens nothing) come with
 * a sentence.
 *
 * Usage: device_plugin PLUGIN.so NAME VISIBLE_ENV
 *        device_plugin --absent NAME REASON      (a plugin not built: skipped)
 * Exit 0 pass, 1 fail, 77 skip. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/runtime.h"

static int failures;

static void check(int ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    failures++;
}

/* kernels.h's contract, restated: sum, max and min of every integer dtype,
 * float32 and float64; the mean of float32 and float64; nothing else. */
static int kernels_take(int op, shmesh_dtype dt)
{
    int fl = dt == SHMESH_FLOAT32 || dt == SHMESH_FLOAT64;
    int in = dt >= SHMESH_INT8 && dt <= SHMESH_UINT64;
    if (op == RT_SUM || op == RT_MAX || op == RT_MIN)
        return fl || in;
    return op == RT_MEAN && fl;
}

static void check_table(const struct rt_ops *rt, const char *name, const char *visible)
{
    check(rt->abi == RT_ABI, "abi %d, libshmesh expects %d", rt->abi, RT_ABI);
    check(rt->name && !strcmp(rt->name, name), "name '%s', expected '%s'",
          rt->name ? rt->name : "(null)", name);
    check(rt->visible_env && !strcmp(rt->visible_env, visible), "visible_env '%s', expected '%s'",
          rt->visible_env ? rt->visible_env : "(null)", visible);
    const struct {
        const char *call;
        int set;
    } calls[] = {
        {"init", !!rt->init},         {"last_error", !!rt->last_error},
        {"range", !!rt->range},       {"ipc_export", !!rt->ipc_export},
        {"ipc_open", !!rt->ipc_open}, {"ipc_close", !!rt->ipc_close},
        {"copy", !!rt->copy},         {"reduce", !!rt->reduce},
        {"takes", !!rt->takes},       {"sync", !!rt->sync},
        {"alloc", !!rt->alloc},       {"free", !!rt->free},
        {"pci_bus_id", !!rt->pci_bus_id},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        check(calls[i].set, "%s is NULL", calls[i].call);
    if (!rt->takes)
        return;
    for (int op = -1; op <= RT_MEAN + 1; op++)
        for (int dt = 0; dt < SHMESH_DTYPE_COUNT; dt++)
            check(rt->takes(op, (shmesh_dtype)dt) == kernels_take(op, (shmesh_dtype)dt),
                  "takes(op %d, dtype %d) = %d, kernels.h: %d", op, dt,
                  rt->takes(op, (shmesh_dtype)dt), kernels_take(op, (shmesh_dtype)dt));
}

static int getenv_is(const char *var, const char *value)
{
    const char *v = getenv(var);
    return v && !strcmp(v, value);
}

enum { N = 4096 };

/* On a machine with a device: the calls the library makes, on device 0. */
static void check_device(const struct rt_ops *rt)
{
    char bus[32] = "";
    unsigned dom, b, d, f;
    char tail;
    check(rt->pci_bus_id(0, bus, sizeof bus) == 0, "pci_bus_id: %s", rt->last_error());
    check(sscanf(bus, "%x:%x:%x.%x%c", &dom, &b, &d, &f, &tail) == 4 && !strpbrk(bus, "ABCDEF"),
          "pci_bus_id gave '%s', not sysfs's 0000:17:00.0", bus);

    struct rt_range r;
    int local = 0;
    check(rt->range(&local, &r) == 0, "range(stack variable) is not 0: %s", rt->last_error());
    float *host = malloc(3 * N * sizeof *host);
    check(rt->range(host, &r) == 0, "range(malloc'd memory) is not 0");

    char *dev = NULL;
    size_t bytes = 3 * N * sizeof(float);
    if (rt->alloc(0, bytes, (void **)&dev) != 0) {
        check(0, "alloc(0, %zu): %s", bytes, rt->last_error());
        free(host);
        return;
    }
    check(rt->range(dev + 100, &r) == 1, "range(device memory + 100) is not 1: %s",
          rt->last_error());
    check(r.base == (uint64_t)(uintptr_t)dev && r.size >= bytes && r.device == 0,
          "range: base %#llx size %llu device %d, expected base %p, size >= %zu, device 0",
          (unsigned long long)r.base, (unsigned long long)r.size, r.device, (void *)dev, bytes);
    uint64_t first_id = r.id;

    /* a[i] = i, b[i] = 2i - 3 (exact in float32); c = a + b, then c = max(c, a). */
    float *a = host, *bv = host + N, *c = host + 2 * N;
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        bv[i] = (float)(2 * i - 3);
    }
    float *da = (float *)dev, *db = da + N, *dc = db + N;
    check(rt->copy(da, a, 2 * N * sizeof(float), NULL) == 0, "copy to device: %s",
          rt->last_error());
    struct rt_reduce red = {.op = RT_SUM, .dtype = SHMESH_FLOAT32, .dst = dc, .nsrc = 2, .n = N};
    red.src[0] = da;
    red.src[1] = db;
    check(rt->reduce(&red, NULL) == 0, "reduce(sum): %s", rt->last_error());
    red.op = RT_MAX;
    red.src[0] = dc; /* in place: dst is a source */
    red.src[1] = da;
    check(rt->reduce(&red, NULL) == 0, "reduce(max, in place): %s", rt->last_error());
    check(rt->copy(c, dc, N * sizeof(float), NULL) == 0, "copy to host: %s", rt->last_error());
    check(rt->sync(NULL) == 0, "sync: %s", rt->last_error());
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        float want = (float)(3 * i - 3) > (float)i ? (float)(3 * i - 3) : (float)i;
        if (c[i] != want && wrong++ < 3)
            check(0, "element %d: %g, expected %g", i, c[i], want);
    }
    check(wrong == 0, "%d elements of %d wrong", wrong, N);

    red.op = RT_MEAN;
    red.dtype = SHMESH_INT32;
    red.mean_n = 2;
    check(rt->reduce(&red, NULL) == RT_ERR_NO_KERNEL && *rt->last_error(),
          "reduce(mean of int32) is not RT_ERR_NO_KERNEL with a sentence");

    struct rt_handle h;
    check(rt->ipc_export(dev, &h) == 0, "ipc_export(cudaMalloc'd memory): %s", rt->last_error());
    struct rt_handle junk;
    memset(&junk, 0x5a, sizeof junk);
    void *mapped = NULL;
    check(rt->ipc_open(&junk, 0, &mapped) == RT_ERR && *rt->last_error(),
          "ipc_open(a handle of nothing) is not RT_ERR with a sentence");
    printf("a handle that opens nothing: %s\n", rt->last_error());

    check(rt->free(dev) == 0, "free: %s", rt->last_error());
    check(rt->range(dev, &r) == 0, "range(freed memory) is not 0");
    if (rt->alloc(0, bytes, (void **)&dev) == 0) {
        check(rt->range(dev, &r) == 1 && r.id != first_id,
              "a new allocation has the id of a freed one (%llu)", (unsigned long long)first_id);
        rt->free(dev);
    }
    free(host);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--absent")) {
        printf("skipped: the %s plugin is not built: %s\n", argv[2], argv[3]);
        return 77;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: %s PLUGIN.so NAME VISIBLE_ENV | --absent NAME REASON\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *name = argv[2], *visible = argv[3];
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        if (!strcmp(name, "cuda") && strstr(why, "libcuda") &&
            !getenv_is("SHMESH_TEST_DEVICE", name)) {
            printf("skipped: no driver (%s)\n", why);
            return 77;
        }
        printf("FAIL: dlopen: %s\n", why);
        return 1;
    }
    void *sym = dlsym(lib, RT_ENTRY);
    rt_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* ISO C has no object-to-function cast */
    if (!sym) {
        printf("FAIL: %s exports no %s: %s\n", path, RT_ENTRY, dlerror());
        return 1;
    }
    const struct rt_ops *rt = entry();
    if (!rt) {
        printf("FAIL: %s returned NULL\n", RT_ENTRY);
        return 1;
    }
    check_table(rt, name, visible);
    if (failures || !rt->init)
        return 1;

    /* gpu-check.sh asks for the real device: then finding none fails. */
    int n = rt->init();
    if (n <= 0 && getenv_is("SHMESH_TEST_DEVICE", name)) {
        check(0, "SHMESH_TEST_DEVICE=%s asks for a device, and init() = %d: %s", name, n,
              rt->last_error());
    } else if (n > 0) {
        printf("%s: %d device(s)\n", name, n);
        check_device(rt);
    } else if (n == 0) {
        printf("%s: no device (%s)\n", name, *rt->last_error() ? rt->last_error() : "none said");
    } else if (!strcmp(name, "hip") && *rt->last_error()) {
        printf("%s: the runtime does not start here: %s\n", name, rt->last_error());
    } else {
        check(0, "init() = %d: %s", n, rt->last_error());
    }
    /* The plugin stays loaded: a runtime's exit handlers run from it. */
    printf("%s\n", failures ? "FAIL" : "pass");
    return failures ? 1 : 0;
}
