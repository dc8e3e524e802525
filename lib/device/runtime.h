/* The device runtime: the few calls the library needs from a GPU runtime.
 *
 * A backend is a plugin, libshmesh-device-<name>.so, that exports one
 * function, shmesh_device_runtime_v1(), returning a table of these calls.
 * libshmesh loads it at init (lib/device/gpu.c) and never links a GPU
 * runtime itself, so it loads and runs on machines without one.  Plugins:
 *
 *   cuda   lib/device/cuda.cu, built by nvcc where CUDA is found (-Dcuda)
 *   hip    lib/device/hip.cpp, built by hipcc (-Dhip)
 *   fake   tests/fake_gpu/, CI's GPU: "device memory" is memfd memory the
 *          process cannot touch (mapped PROT_NONE), IPC handles other
 *          processes open through /proc, kernels run on the CPU
 *
 * The kernels are written once, in the CUDA/HIP dialect
 * (lib/device/kernels.h), and compiled by each plugin: nvcc, hipcc, and for
 * the fake the host compiler with a grid emulated by loops.
 *
 * Conventions: every call returns 0 on success or a negative rt_status;
 * after a failure last_error() gives the runtime's own words.  Calls that
 * touch memory find the device from the pointers (an allocation knows its
 * device) and make it current first.  `stream` is a cudaStream_t /
 * hipStream_t, NULL for the runtime's default stream.
 *
 * This header is C and C++ (the plugins are C++). */
#ifndef SHMESH_DEVICE_RUNTIME_H
#define SHMESH_DEVICE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "shmesh.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_ABI 1
#define RT_HANDLE_BYTES 64 /* cudaIpcMemHandle_t, hipIpcMemHandle_t */
#define RT_MAX_SRC 64      /* sources of one reduction kernel */

enum rt_status {
    RT_OK = 0,
    RT_ERR = -1,          /* the runtime failed: last_error() */
    RT_ERR_POOL = -2,     /* memory from a stream-ordered pool (cudaMallocAsync):
                             it has no IPC handle */
    RT_ERR_NO_KERNEL = -3, /* no kernel for this reduction and dtype */
};

/* An IPC handle: opaque bytes another process of the node opens. */
struct rt_handle {
    unsigned char bytes[RT_HANDLE_BYTES];
};

/* The allocation a device pointer lies in. */
struct rt_range {
    uint64_t base, size; /* the whole allocation, as cudaMalloc returned it */
    uint64_t id;         /* unique in the process, never reused after a free
                            (CU_POINTER_ATTRIBUTE_BUFFER_ID) */
    int device;          /* its device, as this process numbers them */
};

/* Reductions the kernels compute: the same values as lib/kernels/reduce.h's
 * (the library passes enum red_op through). */
enum rt_red { RT_SUM = 0, RT_MAX = 1, RT_MIN = 2, RT_MEAN = 3 };

/* One reduction: dst[i] = src[0][i] op src[1][i] op ... op src[nsrc-1][i],
 * combined in source order, bit for bit as lib/kernels/reduce.c computes it
 * on the host.  Sources and destination are device memory (a peer's mapped
 * through IPC included); dst may be one of the sources only when every
 * element is read before it is written, which the kernels guarantee (each
 * thread reads element i of every source, then writes element i). */
struct rt_reduce {
    int op;             /* enum rt_red */
    shmesh_dtype dtype; /* sources and destination alike */
    void *dst;
    const void *src[RT_MAX_SRC];
    int nsrc;           /* 1 .. RT_MAX_SRC */
    uint64_t n;         /* elements */
    int mean_n;         /* RT_MEAN: the divisor */
};

struct rt_ops {
    int abi;                 /* RT_ABI */
    const char *name;        /* "cuda", "hip", "fake" */
    const char *visible_env; /* the visibility variable: "CUDA_VISIBLE_DEVICES" */

    /* Starts the runtime without creating a context on any device: the
     * number of devices this process sees (0: none, the plugin is
     * unloaded), or RT_ERR. */
    int (*init)(void);
    const char *(*last_error)(void);

    /* 1 when p is device memory, with its allocation in *r; 0 when it is
     * not (host memory, or memory the runtime does not know); RT_ERR. */
    int (*range)(const void *p, struct rt_range *r);

    /* Exports an allocation (its base, from range()): RT_ERR_POOL for
     * stream-ordered pool memory. */
    int (*ipc_export)(void *base, struct rt_handle *h);
    /* Maps another process's exported allocation here (never one's own),
     * for use on `device` (the device of the buffer it will be combined
     * with): *base is where it lies in this process. */
    int (*ipc_open)(const struct rt_handle *h, int device, void **base);
    int (*ipc_close)(void *base);

    /* n bytes, either side host or device (the runtime tells which:
     * unified addressing), in stream order. */
    int (*copy)(void *dst, const void *src, size_t n, void *stream);
    /* Queues the reduction on the stream: RT_ERR_NO_KERNEL when the kernels
     * do not take (op, dtype); takes(op, dtype) says so beforehand. */
    int (*reduce)(const struct rt_reduce *r, void *stream);
    int (*takes)(int op, shmesh_dtype dtype);
    /* Waits until everything queued on the stream is done. */
    int (*sync)(void *stream);

    /* Device memory on the device `device` (this process's numbering), for
     * shmesh_device_alloc (tests, benchmarks, bindings). */
    int (*alloc)(int device, size_t n, void **p);
    int (*free)(void *p);
    /* The device's PCI address, "0000:17:00.0" (for placement). */
    int (*pci_bus_id)(int device, char *buf, int len);
};

/* What every plugin exports. */
typedef const struct rt_ops *(*rt_entry_fn)(void);
#define RT_ENTRY "shmesh_device_runtime_v1"

#ifdef __cplusplus
}
#endif

#endif
