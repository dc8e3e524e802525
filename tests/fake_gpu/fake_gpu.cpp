/* The fake GPU runtime: lib/device/runtime.h's "fake" plugin, CI's GPU.
 * Built as libshmesh-device-fake.so; tests reach its extras through
 * fake_gpu.h.  Each piece is made to catch a mistake of the library:
 *
 * - Device memory is a memfd mapped twice: the PROT_NONE view is the
 *   "device pointer" the library gets, so one that reaches memcpy or a load
 *   in host code faults at once; the read-write alias is the fake's own.
 * - A freed allocation's addresses stay reserved (PROT_NONE), so a use after
 *   free faults too, and the next allocation that fits takes them: "freed
 *   and reallocated at the same address, with a new id", the case a cache
 *   keyed by address alone gets wrong.  SHMESH_FAKE_ADDRESS_REUSE=0 gives
 *   them out never again, as CUDA did on the GPU: the case a cache that
 *   learns of frees only from reused addresses gets wrong.  A closed IPC mapping's addresses
 *   stay reserved too: a cache that keeps one finds it refused.
 * - IPC: a handle names the exporter's pid and memfd; another process opens
 *   /proc/<pid>/fd/<fd> (a handle open already gives the same pointer and
 *   counts a reference, as CUDA does), and the memfd's name (allocation id and a random
 *   nonce) proves it is still the allocation exported, not a later one that
 *   got the same fd number: a stale handle fails.
 * - Copies and kernels wait on their stream until sync() of that stream
 *   (or a free, which waits for the device as cudaFree does): a library
 *   that reads a result, or lets a peer read it, before synchronising finds
 *   the old bytes.  Their pointers are checked when they are queued, so a
 *   bad one fails the call that gave it; kernels take device memory only.
 * - fake_gpu_lie_size makes range() report more than an allocation holds,
 *   the handle and every access keeping the real size: an exporter whose
 *   published size a peer must not trust.
 * - The kernels are lib/device/kernels.h, compiled for the host
 *   (grid_host.h), so CI checks their arithmetic.
 *
 * One mutex guards everything (the library calls range() from its progress
 * thread too); lists are searched linearly: a process holds few
 * allocations. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <mutex>
#include <vector>

#define SHMESH_KERNELS_HOST
#include "device/kernels.h"
#include "fake_gpu.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const uint32_t MAGIC = 0x4b414646; /* "FFAK" */
const int MAX_GPUS = 64;
const int PCI_BUS0 = 0x80;

/* An allocation of this process, or another's opened here. */
struct mapping {
    uintptr_t base; /* the device view, PROT_NONE */
    size_t size;    /* as asked for: range() reports it, accesses stay inside */
    size_t span;    /* mapped: size in whole pages */
    char *rw;       /* the fake's alias of the same memory */
    int fd;         /* own allocations' memfd; -1 for opened ones */
    uint64_t id, nonce;
    int device;
    bool opened, pool;
    int refs; /* opened: ipc_open calls not closed yet (CUDA counts them) */
    size_t claimed; /* fake_gpu_lie_size: what range() says instead of size; 0: size */
};

/* An IPC handle's bytes. */
struct handle {
    uint32_t magic;
    int32_t pid, fd;
    uint32_t unused;
    uint64_t size, id, nonce;
};
static_assert(sizeof(handle) <= RT_HANDLE_BYTES, "a handle fits rt_handle");

/* Addresses kept reserved after a free. */
struct hole {
    uintptr_t base;
    size_t span;
};

/* A copy or a kernel waiting on its stream, pointers already translated. */
struct work {
    bool kernel;
    void *dst;
    const void *src;
    size_t n;
    rt_reduce r;
};

std::mutex mu;
std::vector<mapping> maps;
std::vector<hole> holes;
std::map<void *, std::deque<work>> streams;
uint64_t next_id = 1;
int ngpus = -1;           /* -1: the environment not read yet */
std::vector<int> visible; /* physical id of each visible device */
struct fake_gpu_counters counts;
bool fail_next_open;
bool reuse_addresses = true; /* SHMESH_FAKE_ADDRESS_REUSE */
thread_local char err[512];

__attribute__((format(printf, 1, 2))) int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(err, sizeof err, "fake GPU runtime: ");
    vsnprintf(err + k, sizeof err - (size_t)k, fmt, ap);
    va_end(ap);
    return RT_ERR;
}

size_t page_size()
{
    static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

unsigned long long ull(uint64_t v) { return (unsigned long long)v; }

/* Reads SHMESH_FAKE_GPUS and SHMESH_FAKE_VISIBLE_DEVICES: the visible
 * count, or RT_ERR (and nothing changed).  A malformed value is an error,
 * not a guess as CUDA makes: the tests that set it mean it. */
int load_devices()
{
    long n = 2;
    const char *s = getenv("SHMESH_FAKE_GPUS");
    if (s) {
        char *end;
        n = strtol(s, &end, 10);
        if (end == s || *end || n < 0 || n > MAX_GPUS)
            return fail("init: SHMESH_FAKE_GPUS=\"%s\", expected a count from 0 to %d", s,
                        MAX_GPUS);
    }
    std::vector<int> vis;
    const char *v = getenv("SHMESH_FAKE_VISIBLE_DEVICES");
    if (!v) {
        for (int i = 0; i < n; i++)
            vis.push_back(i);
    } else {
        for (const char *p = v; *p;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',') || id < 0 || id >= n)
                return fail("init: SHMESH_FAKE_VISIBLE_DEVICES=\"%s\", expected a comma list "
                            "of device ids below %ld (SHMESH_FAKE_GPUS)",
                            v, n);
            for (int seen : vis)
                if (seen == id)
                    return fail("init: SHMESH_FAKE_VISIBLE_DEVICES=\"%s\" names device %ld "
                                "twice",
                                v, id);
            vis.push_back((int)id);
            p = *end ? end + 1 : end;
        }
    }
    const char *reuse = getenv("SHMESH_FAKE_ADDRESS_REUSE");
    if (reuse && strcmp(reuse, "0") && strcmp(reuse, "1"))
        return fail("init: SHMESH_FAKE_ADDRESS_REUSE=\"%s\", expected 0 or 1", reuse);
    reuse_addresses = !reuse || !strcmp(reuse, "1");
    ngpus = (int)n;
    visible = vis;
    return (int)vis.size();
}

int check_device(const char *call, int device)
{
    if (ngpus < 0 && load_devices() < 0)
        return RT_ERR;
    if (visible.empty())
        return fail("%s: device %d, but this process sees no devices", call, device);
    if (device < 0 || device >= (int)visible.size())
        return fail("%s: device %d, expected 0 to %d (the devices this process sees)", call,
                    device, (int)visible.size() - 1);
    return 0;
}

/* The allocation p lies in (between base and base + size), or nullptr. */
mapping *find(uintptr_t p)
{
    for (mapping &m : maps)
        if (p - m.base < m.size)
            return &m;
    return nullptr;
}

bool overlaps(uintptr_t a, size_t n, uintptr_t base, size_t span)
{
    return a < base + span && base < a + (n ? n : 1);
}

/* Where the fake reads or writes n bytes at p (call and what name it in
 * errors): a device pointer's alias, or p itself for host memory where
 * host_ok. */
int translate(const char *call, const char *what, const void *p, size_t n, bool host_ok,
              void **out)
{
    uintptr_t a = (uintptr_t)p;
    if (mapping *m = find(a)) {
        if (n > m->size - (a - m->base))
            return fail("%s: %s %p + %zu bytes runs past the end of its allocation (id %llu at "
                        "%p, %zu bytes)",
                        call, what, p, n, ull(m->id), (void *)m->base, m->size);
        *out = m->rw + (a - m->base);
        return 0;
    }
    for (const mapping &m : maps)
        if (overlaps(a, n, m.base, m.span))
            return fail("%s: %s %p + %zu bytes lies outside allocation %llu (%p, %zu bytes) "
                        "but touches its pages",
                        call, what, p, n, ull(m.id), (void *)m.base, m.size);
    for (const hole &h : holes)
        if (overlaps(a, n, h.base, h.span))
            return fail("%s: %s %p lies in device memory that was freed or closed (%p, %zu "
                        "bytes)",
                        call, what, p, (void *)h.base, h.span);
    if (!host_ok)
        return fail("%s: %s %p is not device memory (a kernel reads and writes device memory "
                    "only)",
                    call, what, p);
    if (!p && n)
        return fail("%s: %s is NULL", call, what);
    *out = (void *)p;
    return 0;
}

size_t dtype_bytes(shmesh_dtype dt)
{
    switch (dt) {
    case SHMESH_BOOL:
    case SHMESH_INT8:
    case SHMESH_UINT8: return 1;
    case SHMESH_INT16:
    case SHMESH_UINT16:
    case SHMESH_FLOAT16:
    case SHMESH_BFLOAT16: return 2;
    case SHMESH_INT32:
    case SHMESH_UINT32:
    case SHMESH_FLOAT32: return 4;
    default: return 8;
    }
}

void run(const work &w)
{
    if (w.kernel)
        shmesh_kernels::reduce(&w.r, nullptr);
    else if (w.n)
        memmove(w.dst, w.src, w.n);
}

void drain(void *stream)
{
    auto it = streams.find(stream);
    if (it == streams.end())
        return;
    for (const work &w : it->second)
        run(w);
    streams.erase(it);
}

bool queued_on(const mapping &m, void **stream)
{
    auto in = [&](const void *p) { return (uintptr_t)p - (uintptr_t)m.rw < m.span; };
    for (auto &s : streams)
        for (const work &w : s.second) {
            bool uses = w.kernel ? in(w.r.dst) : in(w.dst) || in(w.src);
            for (int k = 0; w.kernel && k < w.r.nsrc; k++)
                uses = uses || in(w.r.src[k]);
            if (uses) {
                *stream = s.first;
                return true;
            }
        }
    return false;
}

/* Maps fd's span bytes twice: the device view at `at` (nullptr: anywhere;
 * else over a reserved hole) and the alias.  0, or RT_ERR (nothing mapped,
 * but a hole at `at` may be lost). */
int map_twice(const char *call, int fd, size_t span, void *at, uintptr_t *base, char **rw)
{
    void *alias = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (alias == MAP_FAILED)
        return fail("%s: mmap of %zu bytes: %s", call, span, strerror(errno));
    void *dev = mmap(at, span, PROT_NONE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    if (dev == MAP_FAILED) {
        int e = errno;
        munmap(alias, span);
        return fail("%s: mmap of the device view, %zu bytes: %s", call, span, strerror(e));
    }
    *base = (uintptr_t)dev;
    *rw = (char *)alias;
    return 0;
}

int alloc_locked(const char *call, int device, size_t n, void **p, bool pool)
{
    if (check_device(call, device) < 0)
        return RT_ERR;
    if (n == 0) { /* as cudaMalloc */
        *p = nullptr;
        return 0;
    }
    if (n > SIZE_MAX / 2)
        return fail("%s: %zu bytes is more than any device has", call, n);
    size_t span = (n + page_size() - 1) / page_size() * page_size();
    mapping m = {};
    m.size = n;
    m.span = span;
    m.id = next_id++;
    m.device = device;
    m.pool = pool;
    if (getrandom(&m.nonce, sizeof m.nonce, 0) != (ssize_t)sizeof m.nonce)
        m.nonce = (uint64_t)time(nullptr) ^ ((uint64_t)getpid() << 32) ^ m.id;
    char name[64];
    snprintf(name, sizeof name, "shmesh-fake-gpu-%llu-%016llx", ull(m.id), ull(m.nonce));
    m.fd = memfd_create(name, MFD_CLOEXEC);
    if (m.fd < 0)
        return fail("%s: memfd_create: %s", call, strerror(errno));
    if (ftruncate(m.fd, (off_t)span) < 0) {
        int e = errno;
        close(m.fd);
        return fail("%s: %zu bytes of memfd: %s", call, span, strerror(e));
    }
    /* The most recently freed range that fits: free then alloc gives back
     * the same address.  With SHMESH_FAKE_ADDRESS_REUSE=0, as CUDA on an
     * H100 did (docs/devices.md), a freed range is never given out again:
     * a library that waits for an allocation at the same base to notice a
     * free then keeps every peer's stale mapping open. */
    size_t h = holes.size();
    for (size_t i = holes.size(); reuse_addresses && i-- > 0;)
        if (holes[i].span >= span) {
            h = i;
            break;
        }
    void *at = h < holes.size() ? (void *)holes[h].base : nullptr;
    if (map_twice(call, m.fd, span, at, &m.base, &m.rw) < 0) {
        close(m.fd);
        return RT_ERR;
    }
    if (at) {
        holes[h].base += span;
        holes[h].span -= span;
        if (!holes[h].span)
            holes.erase(holes.begin() + (long)h);
    }
    maps.push_back(m);
    *p = (void *)m.base;
    return 0;
}

/* The mapping whose base is p, or nullptr after an error saying what p is. */
mapping *find_base(const char *call, const void *p, bool opened)
{
    mapping *m = find((uintptr_t)p);
    const char *want = opened ? "a base from ipc_open" : "an allocation's base";
    if (!m) {
        for (const hole &h : holes)
            if ((uintptr_t)p - h.base < h.span) {
                fail("%s: %p lies in device memory that was freed or closed, expected %s", call,
                     p, want);
                return nullptr;
            }
        fail("%s: %p is not device memory, expected %s", call, p, want);
    } else if (m->base != (uintptr_t)p)
        fail("%s: %p lies %zu bytes inside allocation %llu (%p), expected %s", call, p,
             (size_t)((uintptr_t)p - m->base), ull(m->id), (void *)m->base, want);
    else if (m->opened != opened)
        fail("%s: %p is %s, expected %s", call, p,
             m->opened ? "another process's allocation opened with ipc_open"
                       : "this process's own allocation",
             want);
    else
        return m;
    return nullptr;
}

/* Unmaps m and forgets it, keeping its device addresses reserved. */
void unmap(const mapping *m)
{
    munmap(m->rw, m->span);
    void *keep = mmap((void *)m->base, m->span, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (keep == MAP_FAILED) /* the range is free for anyone: never reuse it */
        munmap((void *)m->base, m->span);
    else
        holes.push_back({m->base, m->span});
    if (m->fd >= 0)
        close(m->fd);
    maps.erase(maps.begin() + (m - maps.data()));
}

int fake_init()
{
    std::lock_guard<std::mutex> l(mu);
    return load_devices();
}

const char *fake_last_error() { return err; }

int fake_range(const void *p, struct rt_range *r)
{
    std::lock_guard<std::mutex> l(mu);
    const mapping *m = find((uintptr_t)p);
    if (!m)
        return 0;
    r->base = m->base;
    r->size = m->claimed ? m->claimed : m->size;
    r->id = m->id;
    r->device = m->device;
    return 1;
}

int fake_ipc_export(void *base, struct rt_handle *h)
{
    std::lock_guard<std::mutex> l(mu);
    const mapping *m = find_base("ipc_export", base, false);
    if (!m)
        return RT_ERR;
    if (m->pool) {
        fail("ipc_export: %p is stream-ordered pool memory (fake_gpu_alloc_pool), which has no "
             "IPC handle",
             base);
        return RT_ERR_POOL;
    }
    handle x = {MAGIC, (int32_t)getpid(), m->fd, 0, m->size, m->id, m->nonce};
    memset(h->bytes, 0, sizeof h->bytes);
    memcpy(h->bytes, &x, sizeof x);
    counts.exports++;
    return 0;
}

int fake_ipc_open(const struct rt_handle *hb, int device, void **base)
{
    std::lock_guard<std::mutex> l(mu);
    handle h;
    memcpy(&h, hb->bytes, sizeof h);
    if (h.magic != MAGIC)
        return fail("ipc_open: the handle starts 0x%08x, expected 0x%08x (not the fake's)",
                    h.magic, MAGIC);
    if (check_device("ipc_open", device) < 0)
        return RT_ERR;
    if (fail_next_open) {
        fail_next_open = false;
        return fail("ipc_open: failing, as fake_gpu_fail_next_open() asked");
    }
    if (h.pid == getpid())
        return fail("ipc_open: allocation %llu is this process's own (pid %d); like CUDA, "
                    "the fake opens other processes' handles only",
                    ull(h.id), (int)h.pid);
    /* A handle this process has open already: as CUDA does (seen on an
     * H100, bench/cuda_sharing.cu), the same pointer, one reference more;
     * each open needs its close. */
    for (mapping &o : maps)
        if (o.opened && o.id == h.id && o.nonce == h.nonce) {
            o.refs++;
            counts.opens++;
            *base = (void *)o.base;
            return 0;
        }
    char path[64], want[128], got[128];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return fail("ipc_open: allocation %llu of pid %d: %s: %s (exporter gone, or the "
                    "allocation freed: a stale handle)",
                    ull(h.id), (int)h.pid, path, strerror(errno));
    /* What was opened, read from our own fd: no race with the exporter. */
    snprintf(want, sizeof want, "/memfd:shmesh-fake-gpu-%llu-%016llx (deleted)", ull(h.id),
             ull(h.nonce));
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(self, got, sizeof got - 1);
    got[k < 0 ? 0 : k] = 0;
    struct stat st;
    size_t span = (h.size + page_size() - 1) / page_size() * page_size();
    if (strcmp(got, want) || fstat(fd, &st) < 0 || (size_t)st.st_size < span) {
        close(fd);
        return fail("ipc_open: %s is \"%s\", expected \"%s\": allocation %llu of pid %d was "
                    "freed (a stale handle)",
                    path, got, want, ull(h.id), (int)h.pid);
    }
    mapping m = {};
    m.size = h.size;
    m.span = span;
    m.fd = -1;
    m.id = h.id;
    m.nonce = h.nonce;
    m.device = device;
    m.opened = true;
    m.refs = 1;
    int rc = map_twice("ipc_open", fd, span, nullptr, &m.base, &m.rw);
    close(fd); /* the mappings hold the memory */
    if (rc < 0)
        return rc;
    maps.push_back(m);
    counts.opens++;
    counts.live_mappings++;
    *base = (void *)m.base;
    return 0;
}

int fake_ipc_close(void *base)
{
    std::lock_guard<std::mutex> l(mu);
    mapping *m = find_base("ipc_close", base, true);
    if (!m)
        return RT_ERR;
    if (m->refs > 1) { /* another open of the same handle still holds it */
        m->refs--;
        counts.closes++;
        return 0;
    }
    /* Stricter than CUDA, which may not say: unmapping under queued work
     * is the library's bug. */
    void *stream;
    if (queued_on(*m, &stream))
        return fail("ipc_close: %p (allocation %llu of another process) is still used by work "
                    "queued on stream %p: sync it first",
                    base, ull(m->id), stream);
    unmap(m);
    counts.closes++;
    counts.live_mappings--;
    return 0;
}

int fake_copy(void *dst, const void *src, size_t n, void *stream)
{
    std::lock_guard<std::mutex> l(mu);
    if (n) { /* no bytes touch nothing: any pointers do, as for a kernel */
        work w = {};
        void *s;
        if (translate("copy", "destination", dst, n, true, &w.dst) < 0 ||
            translate("copy", "source", src, n, true, &s) < 0)
            return RT_ERR;
        w.src = s;
        w.n = n;
        streams[stream].push_back(w);
    }
    counts.copies++;
    return 0;
}

int fake_takes(int op, shmesh_dtype dt) { return shmesh_kernels::takes(op, dt); }

int fake_reduce(const struct rt_reduce *r, void *stream)
{
    std::lock_guard<std::mutex> l(mu);
    if (!shmesh_kernels::takes(r->op, r->dtype)) {
        static const char *const op_names[] = {"sum", "max", "min", "mean"};
        static const char *const dtype_names[] = {"bool",    "int8",    "int16",    "int32",
                                                  "int64",   "uint8",   "uint16",   "uint32",
                                                  "uint64",  "float16", "bfloat16", "float32",
                                                  "float64"};
        static_assert(sizeof dtype_names / sizeof *dtype_names == SHMESH_DTYPE_COUNT,
                      "a name a dtype");
        const char *op = r->op >= 0 && r->op < 4 ? op_names[r->op] : "unknown reduction";
        const char *dt = (unsigned)r->dtype < SHMESH_DTYPE_COUNT ? dtype_names[r->dtype] : "?";
        fail("reduce: no kernel for the %s of %s (op %d, dtype %d; takes() says so)", op, dt,
             r->op, (int)r->dtype);
        return RT_ERR_NO_KERNEL;
    }
    if (r->nsrc < 1 || r->nsrc > RT_MAX_SRC)
        return fail("reduce: %d sources, expected 1 to %d", r->nsrc, RT_MAX_SRC);
    if (r->op == RT_MEAN && r->mean_n < 1)
        return fail("reduce: a mean over %d, expected 1 or more", r->mean_n);
    size_t esz = dtype_bytes(r->dtype);
    if (r->n > SIZE_MAX / esz)
        return fail("reduce: %llu elements overflow", ull(r->n));
    size_t bytes = (size_t)(r->n * esz);
    work w = {};
    w.kernel = true;
    w.r = *r;
    if (bytes) { /* no elements touch no memory, as on a GPU */
        void *p;
        if (translate("reduce", "dst", r->dst, bytes, false, &w.r.dst) < 0)
            return RT_ERR;
        for (int k = 0; k < r->nsrc; k++) {
            char what[16];
            snprintf(what, sizeof what, "src[%d]", k);
            if (translate("reduce", what, r->src[k], bytes, false, &p) < 0)
                return RT_ERR;
            w.r.src[k] = p;
        }
        streams[stream].push_back(w);
    }
    counts.kernels++;
    return 0;
}

int fake_sync(void *stream)
{
    std::lock_guard<std::mutex> l(mu);
    drain(stream);
    counts.syncs++;
    return 0;
}

int fake_alloc(int device, size_t n, void **p)
{
    std::lock_guard<std::mutex> l(mu);
    return alloc_locked("alloc", device, n, p, false);
}

int fake_free(void *p)
{
    std::lock_guard<std::mutex> l(mu);
    if (!p) /* as cudaFree */
        return 0;
    const mapping *m = find_base("free", p, false);
    if (!m)
        return RT_ERR;
    /* cudaFree waits for the device: queued work runs first. */
    while (!streams.empty())
        drain(streams.begin()->first);
    unmap(m);
    return 0;
}

int fake_pci_bus_id(int device, char *buf, int len)
{
    std::lock_guard<std::mutex> l(mu);
    if (check_device("pci_bus_id", device) < 0)
        return RT_ERR;
    int k = snprintf(buf, len > 0 ? (size_t)len : 0, "0000:%02x:00.0",
                     PCI_BUS0 + visible[(size_t)device]);
    if (k >= len)
        return fail("pci_bus_id: %d bytes of room, %d needed", len, k + 1);
    return 0;
}

const struct rt_ops ops = {
    RT_ABI,        "fake",     "SHMESH_FAKE_VISIBLE_DEVICES",
    fake_init,     fake_last_error,
    fake_range,    fake_ipc_export,
    fake_ipc_open, fake_ipc_close,
    fake_copy,     fake_reduce,
    fake_takes,    fake_sync,
    fake_alloc,    fake_free,
    fake_pci_bus_id,
};

} // namespace

EXPORT const struct rt_ops *shmesh_device_runtime_v1(void) { return &ops; }

EXPORT int fake_gpu_alloc_pool(int device, size_t n, void **p)
{
    std::lock_guard<std::mutex> l(mu);
    return alloc_locked("fake_gpu_alloc_pool", device, n, p, true);
}

EXPORT void fake_gpu_counters(struct fake_gpu_counters *c)
{
    std::lock_guard<std::mutex> l(mu);
    *c = counts;
}

EXPORT void fake_gpu_fail_next_open(void)
{
    std::lock_guard<std::mutex> l(mu);
    fail_next_open = true;
}

EXPORT int fake_gpu_lie_size(void *base, size_t size)
{
    std::lock_guard<std::mutex> l(mu);
    mapping *m = find_base("fake_gpu_lie_size", base, false);
    if (!m)
        return RT_ERR;
    m->claimed = size;
    return 0;
}
