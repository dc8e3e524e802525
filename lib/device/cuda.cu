/* The CUDA backend, libshmesh-device-cuda.so: lib/device/runtime.h's calls
 * over the CUDA runtime, and the reduction kernels of kernels.h compiled
 * by nvcc (lib/device/meson.build).
 *
 * No driver, no crash: the plugin links the CUDA runtime statically
 * (cudart_static) and does not link the driver, libcuda.so.1, at all.  It
 * therefore loads on every Linux machine; the runtime opens the driver
 * itself on the first call, and where there is none (or no device) init()
 * returns 0, last_error() says why, and the library unloads the plugin.
 * The one driver call the runtime has no equivalent for,
 * cuPointerGetAttributes (an allocation's range and id), is reached
 * through the runtime's driver entry points, looked up once by init().
 *
 * Devices: a call that touches memory makes the memory's device current
 * for its own duration and then gives the calling thread its device back.
 * The library runs on the application's threads; leaving another device
 * current would move the application's next cudaMalloc or launch. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <string.h>

#include "device/backend.h"
#include "device/kernels.h"

using shmesh_backend::fail_call;
using shmesh_backend::fail_status;

namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == RT_HANDLE_BYTES, "an IPC handle fills rt_handle");

/* The driver's calls, from the runtime's entry points (init). */
struct driver_calls {
    decltype(&cuPointerGetAttributes) pointer_attributes;
    decltype(&cuGetErrorName) error_name;
    decltype(&cuGetErrorString) error_string;
} drv;

shmesh_backend::device_set used;

/* A runtime call failed: its sentence, and the runtime's error state
 * cleared, so that a later launch's check does not report it again. */
int fail(const char *call, cudaError_t e)
{
    (void)cudaGetLastError();
    return fail_call(call, cudaGetErrorString(e), cudaGetErrorName(e));
}

int fail_driver(const char *call, CUresult r)
{
    const char *name = "CUDA_ERROR_UNKNOWN", *text = "unknown error";
    drv.error_name(r, &name);
    drv.error_string(r, &text);
    return fail_call(call, text, name);
}

/* `device` current until the end of the scope, then the caller's again;
 * -1 (memory of no device) leaves the current device as it is. */
class on_device {
    int prev = -1, want;

public:
    cudaError_t status = cudaSuccess;
    explicit on_device(int device) : want(device)
    {
        if (want < 0)
            return;
        used.add(want);
        if (cudaGetDevice(&prev) != cudaSuccess)
            prev = -1;
        if (prev != want)
            status = cudaSetDevice(want);
    }
    ~on_device()
    {
        if (want >= 0 && prev >= 0 && prev != want)
            (void)cudaSetDevice(prev);
    }
};

template <typename F> int entry_point(const char *symbol, F *fn)
{
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    /* The symbol as CUDA 12.0 defined it: none of ours changed since. */
    cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
#else
    cudaError_t e = cudaGetDriverEntryPoint(symbol, &p, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess)
        return fail("cudaGetDriverEntryPoint", e);
    if (found != cudaDriverEntryPointSuccess || !p)
        return fail_status(RT_ERR, "cudaGetDriverEntryPoint: the driver has no %s", symbol);
    *fn = reinterpret_cast<F>(p);
    return 0;
}

int cuda_init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n); /* creates no context */
    if (e == cudaErrorInsufficientDriver) {
        /* Also what the runtime says when there is no driver at all. */
        (void)cudaGetLastError();
        fail_status(RT_ERR, "cudaGetDeviceCount: %s (%s): no NVIDIA driver (libcuda.so.1), or "
                    "one older than the CUDA %d.%d runtime this plugin was built with",
                    cudaGetErrorString(e), cudaGetErrorName(e), CUDART_VERSION / 1000,
                    CUDART_VERSION % 1000 / 10);
        return 0;
    }
    if (e == cudaErrorNoDevice) {
        fail("cudaGetDeviceCount", e); /* kept for last_error() */
        return 0;
    }
    if (e != cudaSuccess)
        return fail("cudaGetDeviceCount", e);
    if (n == 0)
        return 0;
    if (entry_point("cuPointerGetAttributes", &drv.pointer_attributes) < 0 ||
        entry_point("cuGetErrorName", &drv.error_name) < 0 ||
        entry_point("cuGetErrorString", &drv.error_string) < 0)
        return RT_ERR;
    return n;
}

const char *cuda_last_error(void)
{
    return shmesh_backend::error_text();
}

/* Device memory only.  Managed memory (cudaMallocManaged) and host memory
 * the runtime knows (cudaHostAlloc, cudaHostRegister) answer 0: the host
 * can touch them, so the library treats them as host memory.  Memory the
 * driver does not know at all answers 0 too: cuPointerGetAttributes then
 * succeeds with every attribute zero, so the common case, a host buffer,
 * costs one driver call and leaves no error behind. */
int cuda_range(const void *p, struct rt_range *r)
{
    unsigned type = 0, managed = 0;
    int ordinal = -1;
    unsigned long long id = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    };
    void *data[] = {&type, &managed, &ordinal, &id, &start, &size};
    if (!drv.pointer_attributes)
        return fail_status(RT_ERR, "range: called before init() found a device");
    CUresult res = drv.pointer_attributes(6, which, data, (CUdeviceptr)p);
    if (res != CUDA_SUCCESS)
        return fail_driver("cuPointerGetAttributes", res);
    if (type != CU_MEMORYTYPE_DEVICE || managed)
        return 0;
    r->base = start;
    r->size = size;
    r->id = id;
    r->device = ordinal;
    return 1;
}

/* The device of p, or -1 for memory that is not device memory. */
int device_of(const void *p, int *device)
{
    struct rt_range r = {};
    int k = cuda_range(p, &r);
    *device = k == 1 ? r.device : -1;
    return k < 0 ? k : 0;
}

int cuda_ipc_export(void *base, struct rt_handle *h)
{
    CUmemoryPool pool = nullptr;
    unsigned legacy = 0;
    int ordinal = -1;
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    };
    void *data[] = {&pool, &legacy, &ordinal};
    if (!drv.pointer_attributes)
        return fail_status(RT_ERR, "ipc_export: called before init() found a device");
    CUresult res = drv.pointer_attributes(3, which, data, (CUdeviceptr)base);
    if (res != CUDA_SUCCESS)
        return fail_driver("cuPointerGetAttributes", res);
    if (pool)
        return fail_status(RT_ERR_POOL,
                           "cudaIpcGetMemHandle: %p is from a stream-ordered pool "
                           "(cudaMallocAsync), which has no IPC handle: allocate it with "
                           "cudaMalloc",
                           base);
    on_device on(ordinal);
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaIpcMemHandle_t handle;
    cudaError_t e = cudaIpcGetMemHandle(&handle, base);
    if (e != cudaSuccess) {
        if (!legacy) {
            (void)cudaGetLastError();
            return fail_status(RT_ERR,
                               "cudaIpcGetMemHandle: %s (%s): %p is not cudaMalloc memory "
                               "(cuMemCreate/cuMemMap memory, as expandable-segment "
                               "allocators make, has no legacy IPC handle)",
                               cudaGetErrorString(e), cudaGetErrorName(e), base);
        }
        return fail("cudaIpcGetMemHandle", e);
    }
    memcpy(h->bytes, &handle, sizeof handle);
    return 0;
}

int cuda_ipc_open(const struct rt_handle *h, int device, void **base)
{
    on_device on(device);
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaIpcMemHandle_t handle;
    memcpy(&handle, h->bytes, sizeof handle);
    cudaError_t e = cudaIpcOpenMemHandle(base, handle, cudaIpcMemLazyEnablePeerAccess);
    return e == cudaSuccess ? 0 : fail("cudaIpcOpenMemHandle", e);
}

int cuda_ipc_close(void *base)
{
    int device;
    if (device_of(base, &device) < 0)
        return RT_ERR;
    on_device on(device);
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaError_t e = cudaIpcCloseMemHandle(base);
    return e == cudaSuccess ? 0 : fail("cudaIpcCloseMemHandle", e);
}

int cuda_copy(void *dst, const void *src, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    int device;
    if (device_of(dst, &device) < 0)
        return RT_ERR;
    if (device < 0 && device_of(src, &device) < 0)
        return RT_ERR;
    on_device on(device); /* -1: host to host, on the current device */
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream);
    return e == cudaSuccess ? 0 : fail("cudaMemcpyAsync", e);
}

int cuda_reduce(const struct rt_reduce *r, void *stream)
{
    if (!shmesh_kernels::takes(r->op, r->dtype))
        return fail_status(RT_ERR_NO_KERNEL, "reduce: no kernel for op %d on dtype %d (kernels.h)",
                           r->op, (int)r->dtype);
    int device;
    if (device_of(r->dst, &device) < 0)
        return RT_ERR;
    if (device < 0)
        return fail_status(RT_ERR, "reduce: the destination %p is not device memory", r->dst);
    on_device on(device);
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    int k = shmesh_kernels::reduce(r, stream);
    if (k == RT_ERR_NO_KERNEL)
        return fail_status(k, "reduce: no kernel for op %d on dtype %d with %d sources", r->op,
                           (int)r->dtype, r->nsrc);
    cudaError_t e = cudaGetLastError(); /* the launch's own error */
    return e == cudaSuccess ? k : fail("reduce kernel launch", e);
}

int cuda_takes(int op, shmesh_dtype dtype)
{
    return shmesh_kernels::takes(op, dtype);
}

int cuda_sync(void *stream)
{
    cudaError_t e;
    if (stream)
        e = cudaStreamSynchronize((cudaStream_t)stream);
    else {
        /* The default stream is one per device: wait on the current one's
         * and on each other one a call of this plugin used. */
        int current = -1;
        uint64_t devices = used.all();
        if (cudaGetDevice(&current) != cudaSuccess)
            current = -1;
        e = cudaStreamSynchronize(nullptr);
        for (int d = 0; d < 64 && e == cudaSuccess; d++) {
            if (!(devices >> d & 1) || d == current)
                continue;
            on_device on(d);
            e = on.status != cudaSuccess ? on.status : cudaStreamSynchronize(nullptr);
        }
    }
    return e == cudaSuccess ? 0 : fail("cudaStreamSynchronize", e);
}

int cuda_alloc(int device, size_t n, void **p)
{
    on_device on(device);
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaError_t e = cudaMalloc(p, n);
    return e == cudaSuccess ? 0 : fail("cudaMalloc", e);
}

int cuda_free(void *p)
{
    if (!p)
        return 0;
    int device;
    if (device_of(p, &device) < 0)
        return RT_ERR;
    on_device on(device); /* -1: managed memory, or not the runtime's */
    if (on.status != cudaSuccess)
        return fail("cudaSetDevice", on.status);
    cudaError_t e = cudaFree(p);
    return e == cudaSuccess ? 0 : fail("cudaFree", e);
}

int cuda_pci_bus_id(int device, char *buf, int len)
{
    cudaError_t e = cudaDeviceGetPCIBusId(buf, len, device);
    if (e != cudaSuccess)
        return fail("cudaDeviceGetPCIBusId", e);
    shmesh_backend::lower_case(buf);
    return 0;
}

const struct rt_ops ops = {
    RT_ABI,
    "cuda",
    "CUDA_VISIBLE_DEVICES",
    cuda_init,
    cuda_last_error,
    cuda_range,
    cuda_ipc_export,
    cuda_ipc_open,
    cuda_ipc_close,
    cuda_copy,
    cuda_reduce,
    cuda_takes,
    cuda_sync,
    cuda_alloc,
    cuda_free,
    cuda_pci_bus_id,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const struct rt_ops *
shmesh_device_runtime_v1(void)
{
    return &ops;
}
