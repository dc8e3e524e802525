/* The fake GPU runtime's extras for tests (tests/fake_gpu/fake_gpu.cpp, the
 * "fake" plugin of lib/device/runtime.h, built as libshmesh-device-fake.so).
 *
 * The module is loaded, never linked: a test program dlopen()s it
 * (RTLD_NOW), as the library does, takes the runtime from
 * shmesh_device_runtime_v1() and these functions with dlsym() by name (the
 * typedefs below).  Nothing of the test then depends on which process loads
 * the module first.
 *
 * What the fake is: see fake_gpu.cpp.  Its environment:
 *   SHMESH_FAKE_GPUS             GPUs on the node (default 2; 0 to 64)
 *   SHMESH_FAKE_VISIBLE_DEVICES  its visibility variable (rt_ops.visible_env):
 *                                a comma list of ids, renumbered 0.. in that
 *                                order; empty: none; unset: all
 *   SHMESH_FAKE_ADDRESS_REUSE    1 (default): an allocation takes the most
 *                                recently freed addresses that fit; 0: freed
 *                                addresses are never given out again
 * Device d's PCI address is "0000:BB:00.0" with BB = 0x80 + its physical id
 * (two processes that see the same GPU under different numbers agree). */
#ifndef SHMESH_FAKE_GPU_H
#define SHMESH_FAKE_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What this process did since it loaded the module (a forked child starts
 * from its parent's counts). */
struct fake_gpu_counters {
    uint64_t exports;       /* ipc_export that gave a handle */
    uint64_t opens;         /* ipc_open that mapped one */
    uint64_t closes;        /* ipc_close that unmapped one */
    uint64_t copies;        /* copy calls queued */
    uint64_t kernels;       /* reduce calls queued */
    uint64_t syncs;         /* sync calls */
    uint64_t live_mappings; /* mappings opened and not closed yet */
};

/* Device memory from a stream-ordered pool (as cudaMallocAsync's): like
 * alloc, but ipc_export refuses it with RT_ERR_POOL.  free() frees it. */
int fake_gpu_alloc_pool(int device, size_t n, void **p);
void fake_gpu_counters(struct fake_gpu_counters *c);
/* The next ipc_open of this process fails (RT_ERR), whatever its handle. */
void fake_gpu_fail_next_open(void);
/* From now on range() of this process says the allocation at `base` (one of
 * its own) holds `size` bytes (0: the truth again), as a lying or corrupt
 * exporter would publish; its IPC handle, what peers map, and every access
 * keep the real size.  0, or RT_ERR (last_error() says why). */
int fake_gpu_lie_size(void *base, size_t size);

typedef int (*fake_gpu_alloc_pool_fn)(int device, size_t n, void **p);
typedef void (*fake_gpu_counters_fn)(struct fake_gpu_counters *c);
typedef void (*fake_gpu_fail_next_open_fn)(void);
typedef int (*fake_gpu_lie_size_fn)(void *base, size_t size);

#ifdef __cplusplus
}
#endif

#endif
