/* The device layer: which GPU runtime serves this process (a plugin,
 * device/runtime.h), which buffers are its memory, and the IPC handles that
 * let members read each other's device buffers.
 *
 * Loading.  shmesh_init loads the plugin SHMESH_DEVICE names: "auto" (the
 * default) tries cuda then hip and keeps the first that loads and sees a
 * device, quietly using none where none does; "none" loads nothing; a name
 * or a path must load, or init fails.  Plugins are looked for beside
 * libshmesh, in shmesh/ (installed) and device/ (the build tree).
 *
 * Buffers.  The runtime claims device pointers (memory/kind.h), so a call
 * knows its device buffers before anything moves.  A call whose buffers are
 * device memory takes the device path (paths/device_ipc.c) when it can, and
 * otherwise is staged (paths/device_staged.c): its device buffers are
 * copied to host memory when it starts and back when it ends, and it runs
 * on the host paths.  The path table chooses; the layer keeps no call's
 * state, only what outlives calls: the plugin, the handle caches, and
 * scratch (device scratch, and the host memory pools calls take from).
 *
 * Handles.  Exporting costs a runtime call and opening one much more (155 us
 * measured on CUDA), and calls mostly repeat their buffers, so both are
 * cached.  Exports by allocation base; a peer's mapping by (rank, base,
 * allocation id): the id is never reused by the runtime, so memory freed and
 * allocated again at the same address is a new entry, never a stale one.
 * The old entry is closed then; when an exporter finds one of its
 * allocations gone it counts a generation, published with its handles, and
 * importers that see it change close all their mappings of that rank.  The
 * cache is bounded (least recently used entries are closed).  What a peer
 * publishes is not trusted for the bounds: when a mapping is opened, the
 * runtime is asked its size here, and every use checks the buffer against
 * it. */
#ifndef SHMESH_DEVICE_GPU_H
#define SHMESH_DEVICE_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "device/runtime.h"
#include "shmesh.h"

#define DEVICE_EXPORTS_MAX 64
#define DEVICE_IMPORTS_MAX 128

struct dev_export {
    uint64_t base, id;
    struct rt_handle h;
};

struct dev_import {
    int rank;
    uint64_t base, id; /* the exporter's */
    void *mapped;      /* where it lies here */
    uint64_t size;     /* bytes from `mapped`, as this process's runtime says */
    uint64_t used;     /* the layer's clock when last used */
};

/* The host memory pools (device_host_take). */
enum device_pool {
    DEVICE_POOL_STAGING, /* host staging's copies (paths/device_staged.c) */
    DEVICE_POOL_TABLE,   /* the device path's publications (paths/device_ipc.c) */
    DEVICE_POOLS,
};

struct device_layer {
    void *dl;
    const struct rt_ops *rt;
    int devices;
    void *stream;      /* shmesh_set_stream; NULL: the runtime's default */
    struct dev_export exports[DEVICE_EXPORTS_MAX];
    int nexports;
    struct dev_import imports[DEVICE_IMPORTS_MAX];
    int nimports;
    uint64_t gen;      /* this rank's: allocations found freed */
    uint64_t *peer_gen; /* each rank's, as last seen */
    uint64_t clock;
    /* Device scratch for blocks that are not one run (paths/device_ipc.c). */
    void *scratch;
    uint64_t scratch_bytes;
    int scratch_device;
    void *zeros; /* DEVICE_ZEROS_BYTES, once needed */
    /* Host memory kept between calls, by pool (device_host_take). */
    struct host_buf *spare[DEVICE_POOLS];
    shmesh_device_stats stats;
};

/* What a member publishes about one of its device buffers. */
struct dev_buf {
    struct rt_handle h;
    uint64_t base, id, size; /* the allocation, in the exporter's process */
    uint64_t off;            /* the buffer's offset in it */
    uint64_t bytes;          /* the buffer's length */
};

/* At init: loads the runtime `choice` names (SHMESH_DEVICE; NULL: auto) and
 * registers its memory kind.  0, or an error code with the reason in why. */
int device_open(shmesh_ctx *c, const char *choice, char *why, size_t len);
void device_close(shmesh_ctx *c);

/* Exports [p, p+bytes) of this rank's device memory: 0 or an rt_status,
 * with the runtime's words in why. */
int device_export(shmesh_ctx *c, const void *p, uint64_t bytes, struct dev_buf *out, char *why,
                  size_t len);
/* Rank r's buffer b (`what` names it in messages: "input"), mapped here
 * for use on `device` (opened once, then cached; gen is r's generation): 0
 * with the buffer's address here in *at; RT_ERR with the runtime's words in
 * why; or DEVICE_PAST_END when b runs past the allocation as this
 * process's runtime maps it (what r published cannot be right; why says
 * both sizes), and nothing may be copied. */
#define DEVICE_PAST_END 1
int device_import(shmesh_ctx *c, int r, const struct dev_buf *b, const char *what, uint64_t gen,
                  int device, void **at, char *why, size_t len);
/* Device scratch of at least `bytes` on `device`, kept for later calls. */
void *device_scratch(shmesh_ctx *c, uint64_t bytes, int device);
/* DEVICE_ZEROS_BYTES of zeros in host memory, kept (copies from it may
 * still be queued when a call ends); NULL without memory. */
#define DEVICE_ZEROS_BYTES (1u << 20)
const void *device_zeros(shmesh_ctx *c);
/* Host memory of at least `bytes` for a call to hold while it runs, from
 * the pool's spare when that is large enough, else new; NULL without
 * memory.  Give it back to the same pool: it is kept as the spare (the
 * larger one, when another came back first).  Taking and giving are
 * atomic: a call may take on the progress thread while another gives back
 * on the caller's.  The spare keeps its pages, so a trainer's repeated
 * staged calls fault memory in once, not at every call (on an H100, a 64
 * MiB bfloat16 psum spent most of 164 ms faulting in a fresh malloc's
 * pages: docs/devices.md). */
void *device_host_take(shmesh_ctx *c, enum device_pool pool, uint64_t bytes);
void device_host_give(shmesh_ctx *c, enum device_pool pool, void *p);
/* The device a pointer of this process lies on, or -1. */
int device_home(const shmesh_ctx *c, const void *p);

#endif
