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
 * Here: starting the runtime, classifying pointers and exporting; the
 * calls whose logic HIP shares (copies, kernels, syncs, allocation, opening
 * handles, which device is current) are backend.h's, over `api` below. */
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

int cuda_range(const void *p, struct rt_range *r);

/* The CUDA runtime's names for the calls backend.h writes once. */
struct api {
    using error = cudaError_t;
    static constexpr error ok = cudaSuccess;
    static constexpr const char *prefix = "cuda";
    static error get_device(int *d) { return cudaGetDevice(d); }
    static error set_device(int d) { return cudaSetDevice(d); }
    static error get_last_error() { return cudaGetLastError(); }
    static const char *error_string(error e) { return cudaGetErrorString(e); }
    static const char *error_name(error e) { return cudaGetErrorName(e); }
    static error ipc_open(void **base, const struct rt_handle *h)
    {
        cudaIpcMemHandle_t handle;
        memcpy(&handle, h->bytes, sizeof handle);
        return cudaIpcOpenMemHandle(base, handle, cudaIpcMemLazyEnablePeerAccess);
    }
    static error ipc_close(void *base) { return cudaIpcCloseMemHandle(base); }
    static error memcpy_async(void *dst, const void *src, size_t n, void *stream)
    {
        return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream);
    }
    static error stream_sync(void *stream) { return cudaStreamSynchronize((cudaStream_t)stream); }
    static error malloc(void **p, size_t n) { return cudaMalloc(p, n); }
    static error free(void *p) { return cudaFree(p); }
    static error pci_bus_id(char *buf, int len, int device)
    {
        return cudaDeviceGetPCIBusId(buf, len, device);
    }
    static int range(const void *p, struct rt_range *r) { return cuda_range(p, r); }
};

using calls = shmesh_backend::calls<api>;

int fail(const char *call, cudaError_t e)
{
    return calls::fail(call, e);
}

int fail_driver(const char *call, CUresult r)
{
    const char *name = "CUDA_ERROR_UNKNOWN", *text = "unknown error";
    drv.error_name(r, &name);
    drv.error_string(r, &text);
    return fail_call(call, text, name);
}

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
    calls::on_device on(ordinal);
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

const struct rt_ops ops = calls::table("cuda", "CUDA_VISIBLE_DEVICES", cuda_init, cuda_ipc_export);

} // namespace

extern "C" __attribute__((visibility("default"))) const struct rt_ops *
shmesh_device_runtime_v1(void)
{
    return &ops;
}
