/* The device layer (see device.h): loading the runtime, its memory kind,
 * the handle caches, device scratch, and the public device functions. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "core/entry.h"
#include "core/debug.h"
#include "core/fail.h"
#include "core/plugin.h"
#include "device/gpu.h"
#include "memory/kind.h"

/* ---- Loading ---- */

/* The runtime table of a plugin's entry point `sym` (dl its handle): 0, or
 * SHMESH_ERR_SYSTEM with why (dl closed) for another version's. */
static int adopt(void *sym, const char *path, void **dl, const struct rt_ops **rt, char *why,
                 size_t len)
{
    rt_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* POSIX: a function's address as dlsym gives it */
    *rt = entry();
    if (!*rt || (*rt)->abi != RT_ABI) {
        snprintf(why, len, "%.300s: a plugin of another version of shmesh (its ABI differs)",
                 path);
        dlclose(*dl);
        *dl = NULL;
        return SHMESH_ERR_SYSTEM;
    }
    return 0;
}

/* Opens the plugin at `path`: 0, or SHMESH_ERR_SYSTEM with why it could not
 * be loaded. */
static int load(const char *path, void **dl, const struct rt_ops **rt, char *why, size_t len)
{
    void *sym = plugin_open(path, RT_ENTRY, "device", dl, why, len);
    return sym ? adopt(sym, path, dl, rt, why, len) : SHMESH_ERR_SYSTEM;
}

/* The plugin of backend `name` from beside the library: 0, or SHMESH_ERR_SYSTEM
 * with why. */
static int load_named(const char *name, void **dl, const struct rt_ops **rt, char *why,
                      size_t len)
{
    char file[64], path[PLUGIN_PATH_MAX];
    snprintf(file, sizeof file, "libshmesh-device-%s.so", name);
    void *sym = plugin_open_beside("device", file, RT_ENTRY, "device", dl, path, why, len);
    if (sym)
        return adopt(sym, path, dl, rt, why, len);
    if (!why[0]) {
        char dir[4096];
        plugin_library_dir(dir, sizeof dir);
        snprintf(why, len, "no %s beside libshmesh (%.400s)", file,
                 dir[0] ? dir : "its folder is unknown");
    }
    return SHMESH_ERR_SYSTEM;
}

static bool claims(void *arg, const void *p, uint64_t len)
{
    const struct device_layer *d = arg;
    struct rt_range r;
    if (d->rt->range(p, &r) != 1)
        return false;
    /* A buffer running past its allocation is the caller's error; the
     * runtime would fault on it, so it is claimed and refused later
     * (device_export) rather than handed to memcpy. */
    (void)len;
    return true;
}

/* auto: whether the kernel has a driver for the backend's GPUs at all.
 * Loading a GPU runtime costs tens of milliseconds per process (and HIP
 * more), which a machine without such a GPU should not pay at every init. */
static bool driver_present(const char *name)
{
    if (!strcmp(name, "cuda"))
        return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia", F_OK) == 0;
    if (!strcmp(name, "hip"))
        return access("/dev/kfd", F_OK) == 0;
    return true;
}

int device_open(shmesh_ctx *c, const char *choice, char *why, size_t len)
{
    if (choice && !strcmp(choice, "none"))
        return 0;
    bool automatic = !choice || !strcmp(choice, "auto");
    static const char *const autos[] = {"cuda", "hip"};
    const char *const *names = automatic ? autos : &choice;
    size_t nnames = automatic ? 2 : 1;
    void *dl = NULL;
    const struct rt_ops *rt = NULL;
    int devices = 0;
    char err[512] = "";
    for (size_t i = 0; i < nnames; i++) {
        if (automatic && !driver_present(names[i])) {
            if (c->debug & DEBUG_PATHS)
                debug_line(c, "device: no %s backend: no %s driver on this machine", names[i],
                           !strcmp(names[i], "cuda") ? "NVIDIA (/dev/nvidiactl)" : "AMD (/dev/kfd)");
            continue;
        }
        int rc = strchr(names[i], '/') ? load(names[i], &dl, &rt, err, sizeof err)
                                       : load_named(names[i], &dl, &rt, err, sizeof err);
        if (rc == 0) {
            devices = rt->init();
            if (devices > 0)
                break;
            const char *said = rt->last_error();
            snprintf(err, sizeof err, "the %s runtime %s%s%s", rt->name,
                     devices == 0 ? "sees no device" : "failed",
                     said && *said ? ": " : "", said ? said : "");
            dlclose(dl);
            dl = NULL;
        }
        if (c->debug & DEBUG_PATHS)
            debug_line(c, "device: no %s backend: %s", names[i], err);
        if (!automatic) {
            snprintf(why, len, "SHMESH_DEVICE=%s: %s", choice, err);
            return SHMESH_ERR_INVALID;
        }
    }
    if (!dl)
        return 0; /* auto, and no GPU: host memory only */
    struct device_layer *d = calloc(1, sizeof *d);
    uint64_t *gens = calloc((size_t)c->world, sizeof *gens);
    if (!d || !gens) {
        free(d);
        free(gens);
        dlclose(dl);
        snprintf(why, len, "out of memory");
        return SHMESH_ERR_NOMEM;
    }
    d->dl = dl;
    d->rt = rt;
    d->devices = devices;
    d->peer_gen = gens;
    d->scratch_device = -1;
    snprintf(d->stats.backend, sizeof d->stats.backend, "%s", rt->name);
    d->stats.devices = devices;
    c->dev = d;
    struct mem_backend b = {.name = rt->name, .claims = claims, .arg = d};
    int rc = mem_register(c, &b);
    if (rc) {
        snprintf(why, len, "%s", c->err);
        device_close(c);
        return rc;
    }
    if (c->debug & DEBUG_PATHS)
        debug_line(c, "device: %s backend, %d device%s visible", rt->name, devices,
                   devices == 1 ? "" : "s");
    return 0;
}

void device_close(shmesh_ctx *c)
{
    struct device_layer *d = c->dev;
    if (!d)
        return;
    for (int i = 0; i < d->nimports; i++)
        d->rt->ipc_close(d->imports[i].mapped);
    if (d->scratch)
        d->rt->free(d->scratch);
    /* The plugin stays loaded: a runtime may keep threads and state that
     * do not survive being unloaded, and the process may use it itself. */
    for (int i = 0; i < DEVICE_POOLS; i++)
        free(d->spare[i]);
    free(d->peer_gen);
    free(d->zeros);
    free(d);
    c->dev = NULL;
}

/* ---- Handles ---- */

/* Before a new export: the allocations exported from here that are gone
 * (their base no longer device memory, or another allocation's) are
 * forgotten, and the generation counts it once, so that every importer
 * closes what it mapped of this rank.  A peer's mapping keeps the freed
 * memory allocated on the GPU until it is closed, and CUDA gives a freed
 * address out again only later, if ever (bench/cuda_sharing.cu, the GPU
 * run of docs/devices.md): waiting for an allocation at the same base to
 * notice would hold freed memory in every peer.  One range() per export
 * kept, and only when a buffer is exported for the first time. */
static void exports_sweep(struct device_layer *d)
{
    int kept = 0;
    bool gone = false;
    for (int i = 0; i < d->nexports; i++) {
        struct rt_range r;
        const struct dev_export *e = &d->exports[i];
        if (d->rt->range((const void *)(uintptr_t)e->base, &r) == 1 && r.base == e->base &&
            r.id == e->id)
            d->exports[kept++] = *e;
        else
            gone = true;
    }
    d->nexports = kept;
    if (gone)
        d->gen++;
}

int device_export(shmesh_ctx *c, const void *p, uint64_t bytes, struct dev_buf *out, char *why,
                  size_t len)
{
    struct device_layer *d = c->dev;
    struct rt_range r;
    memset(out, 0, sizeof *out);
    int rc = d->rt->range(p, &r);
    if (rc != 1) {
        snprintf(why, len, "%p is no longer device memory%s%s", p, rc < 0 ? ": " : "",
                 rc < 0 ? d->rt->last_error() : "");
        return RT_ERR;
    }
    uint64_t at = (uint64_t)(uintptr_t)p - r.base;
    if (at > r.size || bytes > r.size - at) {
        snprintf(why, len,
                 "the buffer %p (%" PRIu64 " bytes) runs past the end of its allocation "
                 "(%" PRIu64 " bytes from 0x%" PRIx64 ")",
                 p, bytes, r.size, r.base);
        return RT_ERR;
    }
    *out = (struct dev_buf){.base = r.base, .id = r.id, .size = r.size, .off = at, .bytes = bytes};
    for (int i = 0; i < d->nexports; i++)
        if (d->exports[i].base == r.base && d->exports[i].id == r.id) {
            out->h = d->exports[i].h;
            return 0;
        }
    exports_sweep(d);
    struct rt_handle h;
    rc = d->rt->ipc_export((void *)(uintptr_t)r.base, &h);
    if (rc) {
        snprintf(why, len, "%s", rc == RT_ERR_POOL ? "it comes from a stream-ordered pool "
                                                     "(cudaMallocAsync, hipMallocAsync), which "
                                                     "has no IPC handle: allocate it with "
                                                     "cudaMalloc or hipMalloc"
                                                   : d->rt->last_error());
        return rc;
    }
    d->stats.ipc_exports++;
    if (d->nexports == DEVICE_EXPORTS_MAX) { /* forget the oldest: it can be exported again */
        memmove(d->exports, d->exports + 1, sizeof *d->exports * (DEVICE_EXPORTS_MAX - 1));
        d->nexports--;
    }
    d->exports[d->nexports++] = (struct dev_export){.base = r.base, .id = r.id, .h = h};
    out->h = h;
    return 0;
}

static void import_drop(struct device_layer *d, int i)
{
    d->rt->ipc_close(d->imports[i].mapped);
    d->stats.ipc_closes++;
    d->imports[i] = d->imports[--d->nimports];
}

/* Opens rank r's allocation of b and caches the mapping, with its size as
 * the runtime here gives it (the peer's word is not taken for it): the
 * entry, or NULL with the runtime's words in why. */
static struct dev_import *import_open(struct device_layer *d, int r, const struct dev_buf *b,
                                      int device, char *why, size_t len)
{
    if (d->nimports == DEVICE_IMPORTS_MAX) {
        int lru = 0;
        for (int i = 1; i < d->nimports; i++)
            if (d->imports[i].used < d->imports[lru].used)
                lru = i;
        import_drop(d, lru);
    }
    void *mapped = NULL;
    if (d->rt->ipc_open(&b->h, device, &mapped)) {
        snprintf(why, len, "%s", d->rt->last_error());
        return NULL;
    }
    d->stats.ipc_opens++;
    /* On CUDA the range of a mapped allocation is the mapping, base and
     * size (seen on an H100); where the mapping starts inside the range,
     * what lies from it to the range's end. */
    struct rt_range range;
    uint64_t at = (uint64_t)(uintptr_t)mapped;
    int rc = d->rt->range(mapped, &range);
    if (rc != 1 || at - range.base >= range.size) {
        if (rc == 1)
            snprintf(why, len,
                     "rank %d's allocation, opened at %p, lies outside the range the runtime "
                     "gives for it (0x%" PRIx64 ", %" PRIu64 " bytes)",
                     r, mapped, range.base, range.size);
        else
            snprintf(why, len,
                     "rank %d's allocation, opened at %p, is not device memory to the "
                     "runtime%s%s",
                     r, mapped, rc < 0 ? ": " : "", rc < 0 ? d->rt->last_error() : "");
        d->rt->ipc_close(mapped);
        d->stats.ipc_closes++;
        return NULL;
    }
    struct dev_import *e = &d->imports[d->nimports++];
    *e = (struct dev_import){.rank = r, .base = b->base, .id = b->id, .mapped = mapped,
                             .size = range.base + range.size - at, .used = d->clock};
    return e;
}

int device_import(shmesh_ctx *c, int r, const struct dev_buf *b, const char *what, uint64_t gen,
                  int device, void **at, char *why, size_t len)
{
    struct device_layer *d = c->dev;
    d->clock++;
    *at = NULL;
    if (d->peer_gen[r] != gen) { /* r freed something it had exported */
        for (int i = d->nimports - 1; i >= 0; i--)
            if (d->imports[i].rank == r)
                import_drop(d, i);
        d->peer_gen[r] = gen;
    }
    struct dev_import *e = NULL;
    for (int i = 0; i < d->nimports; i++) {
        struct dev_import *x = &d->imports[i];
        if (x->rank != r || x->base != b->base)
            continue;
        if (x->id == b->id) {
            e = x;
            e->used = d->clock;
            d->stats.ipc_hits++;
        } else {
            import_drop(d, i); /* freed, and allocated again at the same address */
        }
        break;
    }
    if (!e) {
        if (!(e = import_open(d, r, b, device, why, len)))
            return RT_ERR;
        if (c->debug & DEBUG_PATHS)
            debug_line(c, "device: opened rank %d's allocation 0x%" PRIx64 " (id %" PRIu64
                          ", %" PRIu64 " bytes, %" PRIu64 " mapped) at %p",
                       r, b->base, b->id, b->size, e->size, e->mapped);
    }
    /* The peer's offset, length and size only passed the checks against
     * each other (paths/device_ipc.c); a copy past the mapping would read
     * or write whatever lies beyond it. */
    if (b->off > e->size || b->bytes > e->size - b->off) {
        snprintf(why, len,
                 "the runtime maps %" PRIu64 " bytes of rank %d's %s allocation here, but rank "
                 "%d published its %s as %" PRIu64 " bytes at offset %" PRIu64 " of %" PRIu64,
                 e->size, r, what, r, what, b->bytes, b->off, b->size);
        return DEVICE_PAST_END;
    }
    *at = (unsigned char *)e->mapped + b->off;
    return 0;
}

void *device_scratch(shmesh_ctx *c, uint64_t bytes, int device)
{
    struct device_layer *d = c->dev;
    if (d->scratch && d->scratch_bytes >= bytes && d->scratch_device == device)
        return d->scratch;
    if (d->scratch) {
        d->rt->free(d->scratch);
        d->scratch = NULL;
    }
    uint64_t want = bytes < (1u << 20) ? (1u << 20) : bytes;
    if (d->rt->alloc(device, (size_t)want, &d->scratch)) {
        d->scratch = NULL;
        return NULL;
    }
    d->scratch_bytes = want;
    d->scratch_device = device;
    return d->scratch;
}

const void *device_zeros(shmesh_ctx *c)
{
    struct device_layer *d = c->dev;
    if (!d->zeros)
        d->zeros = calloc(1, DEVICE_ZEROS_BYTES);
    return d->zeros;
}

/* A pool's block: its capacity, then the bytes (past a cache line of
 * their own). */
struct host_buf {
    uint64_t cap;
    unsigned char pad[SEG_CACHE_LINE - sizeof(uint64_t)];
    unsigned char data[];
};

void *device_host_take(shmesh_ctx *c, enum device_pool pool, uint64_t bytes)
{
    struct host_buf *b = __atomic_exchange_n(&c->dev->spare[pool], NULL, __ATOMIC_ACQ_REL);
    if (b && b->cap >= bytes)
        return b->data;
    free(b);
    if (bytes > SIZE_MAX - sizeof *b)
        return NULL;
    b = malloc(sizeof *b + (size_t)bytes);
    if (!b)
        return NULL;
    b->cap = bytes;
    return b->data;
}

void device_host_give(shmesh_ctx *c, enum device_pool pool, void *p)
{
    if (!p)
        return;
    struct device_layer *d = c->dev;
    struct host_buf *b = (struct host_buf *)((unsigned char *)p - offsetof(struct host_buf, data));
    struct host_buf *old = __atomic_exchange_n(&d->spare[pool], b, __ATOMIC_ACQ_REL);
    if (old && old->cap > b->cap) {
        b = __atomic_exchange_n(&d->spare[pool], old, __ATOMIC_ACQ_REL);
        old = b;
    }
    free(old);
}

int device_home(const shmesh_ctx *c, const void *p)
{
    struct rt_range r;
    if (!c->dev || !p || c->dev->rt->range(p, &r) != 1)
        return -1;
    return r.device;
}

/* ---- The public functions ---- */

/* A local device function's entry: the context, and a runtime to use. */
static int enter(shmesh_ctx *c, const char *op)
{
    int rc = ctx_enter_local(c, op);
    if (rc)
        return rc;
    if (!c->dev) {
        /* Explained while still inside: the explanation is the context's. */
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "%s: this rank has no GPU runtime (SHMESH_DEVICE=none, or auto found "
                      "none: SHMESH_DEBUG=paths says why)",
                      op);
        ctx_leave(c);
    }
    return rc;
}

static int runtime_fail(shmesh_ctx *c, const char *op, const char *what)
{
    int rc = ctx_fail(c, SHMESH_ERR_SYSTEM, "%s: %s: %s", op, what, c->dev->rt->last_error());
    ctx_leave(c);
    return rc;
}

int shmesh_device_stats_get(const shmesh_ctx *c, shmesh_device_stats *stats)
{
    if (!c || !stats)
        return SHMESH_ERR_INVALID;
    if (c->dev) {
        *stats = c->dev->stats;
        return 0;
    }
    memset(stats, 0, sizeof *stats);
    snprintf(stats->backend, sizeof stats->backend, "none");
    return 0;
}

int shmesh_set_stream(shmesh_ctx *c, void *stream)
{
    int rc = enter(c, "shmesh_set_stream");
    if (rc)
        return rc;
    c->dev->stream = stream;
    ctx_leave(c);
    return 0;
}

int shmesh_device_alloc(shmesh_ctx *c, int device, size_t bytes, void **ptr)
{
    int rc = enter(c, "shmesh_device_alloc");
    if (rc)
        return rc;
    if (!ptr || device < 0 || device >= c->dev->devices) {
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "shmesh_device_alloc: expected a device from 0 to %d and a place for the "
                      "pointer, found device %d and %s",
                      c->dev->devices - 1, device, ptr ? "a place" : "NULL");
        ctx_leave(c);
        return rc;
    }
    *ptr = NULL;
    if (c->dev->rt->alloc(device, bytes ? bytes : 1, ptr)) {
        *ptr = NULL;
        return runtime_fail(c, "shmesh_device_alloc", "the runtime refused the allocation");
    }
    ctx_leave(c);
    return 0;
}

int shmesh_device_free(shmesh_ctx *c, void *ptr)
{
    if (!ptr)
        return 0;
    int rc = enter(c, "shmesh_device_free");
    if (rc)
        return rc;
    if (c->dev->rt->free(ptr))
        return runtime_fail(c, "shmesh_device_free", "the runtime refused to free it");
    ctx_leave(c);
    return 0;
}

int shmesh_device_copy(shmesh_ctx *c, void *dst, const void *src, size_t bytes)
{
    int rc = enter(c, "shmesh_device_copy");
    if (rc)
        return rc;
    if (bytes && (!dst || !src)) {
        rc = ctx_fail(c, SHMESH_ERR_INVALID,
                      "shmesh_device_copy: %zu bytes from %p to %p: a NULL pointer", bytes, src,
                      dst);
        ctx_leave(c);
        return rc;
    }
    const struct rt_ops *rt = c->dev->rt;
    if (bytes && (rt->copy(dst, src, bytes, c->dev->stream) || rt->sync(c->dev->stream)))
        return runtime_fail(c, "shmesh_device_copy", "the copy failed");
    ctx_leave(c);
    return 0;
}
