/* The HIP backend, libshmesh-device-hip.so: lib/device/runtime.h's calls
 * over the HIP runtime (libamdhip64), and the reduction kernels of
 * kernels.h compiled by hipcc for the AMD targets of -Dhip_arch
 * (lib/device/meson.build).
 *
 * The plugin links libamdhip64.so.5 dynamically: on a machine without the
 * HIP runtime it fails to load (a dlopen error naming the library), and on
 * one with the runtime but no AMD GPU, init() returns 0, or RT_ERR with the
 * runtime's sentence where the runtime itself cannot start.
 *
 * The calls mirror cuda.cu's, with HIP's differences written where they
 * fall: a pointer is classified by hipPointerGetAttributes (the one query
 * that is safe on any pointer in HIP 5.2), the allocation's range and id
 * come from two more calls, and the peer-access flag is the macro, whose
 * value changed between versions (0 in 5.2, 1 later).
 *
 * Devices: a call that touches memory makes the memory's device current
 * for its own duration and then gives the calling thread its device back
 * (the library runs on the application's threads). */
#include <hip/hip_runtime.h>
#include <string.h>

#include "device/backend.h"
#include "device/kernels.h"

using shmesh_backend::fail_call;
using shmesh_backend::fail_status;

namespace {

static_assert(sizeof(hipIpcMemHandle_t) == RT_HANDLE_BYTES, "an IPC handle fills rt_handle");

shmesh_backend::device_set used;

/* A runtime call failed: its sentence, and the runtime's error state
 * cleared (hipGetLastError), as cuda.cu does. */
int fail(const char *call, hipError_t e)
{
    (void)hipGetLastError();
    return fail_call(call, hipGetErrorString(e), hipGetErrorName(e));
}

/* `device` current until the end of the scope, then the caller's again;
 * -1 (memory of no device) leaves the current device as it is. */
class on_device {
    int prev = -1, want;

public:
    hipError_t status = hipSuccess;
    explicit on_device(int device) : want(device)
    {
        if (want < 0)
            return;
        used.add(want);
        if (hipGetDevice(&prev) != hipSuccess)
            prev = -1;
        if (prev != want)
            status = hipSetDevice(want);
    }
    ~on_device()
    {
        if (want >= 0 && prev >= 0 && prev != want)
            (void)hipSetDevice(prev);
    }
};

int hip_init(void)
{
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n); /* creates no context */
    if (e == hipErrorNoDevice) {
        fail("hipGetDeviceCount", e); /* kept for last_error() */
        return 0;
    }
    if (e != hipSuccess)
        return fail("hipGetDeviceCount", e);
    return n;
}

const char *hip_last_error(void)
{
    return shmesh_backend::error_text();
}

/* Device memory only.  Managed memory (hipMallocManaged) and host memory
 * the runtime knows (hipHostMalloc, hipHostRegister) answer 0: the host can
 * touch them, so the library treats them as host memory.  Memory the
 * runtime does not know answers 0 too (HIP 5.2 refuses it with
 * hipErrorInvalidValue, later versions call it unregistered).  Not
 * hipPointerGetAttribute(MEMORY_TYPE): in HIP 5.2 it reads a pointer it
 * does not know as a hipArray. */
int hip_range(const void *p, struct rt_range *r)
{
    hipPointerAttribute_t a;
    hipError_t e = hipPointerGetAttributes(&a, p);
    if (e == hipErrorInvalidValue) {
        (void)hipGetLastError();
        return 0;
    }
    if (e != hipSuccess)
        return fail("hipPointerGetAttributes", e);
#if HIP_VERSION_MAJOR >= 6
    hipMemoryType type = a.type;
#else
    hipMemoryType type = a.memoryType;
#endif
    if (type != hipMemoryTypeDevice || a.isManaged)
        return 0;
    hipDeviceptr_t base = nullptr;
    size_t size = 0;
    e = hipMemGetAddressRange(&base, &size, (hipDeviceptr_t)p);
    if (e != hipSuccess)
        return fail("hipMemGetAddressRange", e);
    /* HIP 5.2 writes 32 bits of the id, later versions 64: it starts at 0. */
    unsigned long long id = 0;
    e = hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID, (hipDeviceptr_t)p);
    if (e != hipSuccess)
        return fail("hipPointerGetAttribute(BUFFER_ID)", e);
    r->base = (uint64_t)(uintptr_t)base;
    r->size = size;
    r->id = id;
    r->device = a.device;
    return 1;
}

/* The device of p, or -1 for memory that is not device memory. */
int device_of(const void *p, int *device)
{
    struct rt_range r = {};
    int k = hip_range(p, &r);
    *device = k == 1 ? r.device : -1;
    return k < 0 ? k : 0;
}

int hip_ipc_export(void *base, struct rt_handle *h)
{
    int device;
    if (device_of(base, &device) < 0)
        return RT_ERR;
    /* Stream-ordered pools: HIP 5.2 has no such attribute (it answers
     * hipErrorNotSupported, and has no IPC-able pool memory either); later
     * versions name the pool. */
    void *pool = nullptr;
    if (hipPointerGetAttribute(&pool, HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                               (hipDeviceptr_t)base) != hipSuccess)
        pool = nullptr;
    (void)hipGetLastError();
    if (pool)
        return fail_status(RT_ERR_POOL,
                           "hipIpcGetMemHandle: %p is from a stream-ordered pool "
                           "(hipMallocAsync), which has no IPC handle: allocate it with "
                           "hipMalloc",
                           base);
    on_device on(device);
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipIpcMemHandle_t handle;
    hipError_t e = hipIpcGetMemHandle(&handle, base);
    if (e != hipSuccess)
        return fail("hipIpcGetMemHandle", e);
    memcpy(h->bytes, &handle, sizeof handle);
    return 0;
}

int hip_ipc_open(const struct rt_handle *h, int device, void **base)
{
    on_device on(device);
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipIpcMemHandle_t handle;
    memcpy(&handle, h->bytes, sizeof handle);
    hipError_t e = hipIpcOpenMemHandle(base, handle, hipIpcMemLazyEnablePeerAccess);
    return e == hipSuccess ? 0 : fail("hipIpcOpenMemHandle", e);
}

int hip_ipc_close(void *base)
{
    int device;
    if (device_of(base, &device) < 0)
        return RT_ERR;
    on_device on(device);
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipError_t e = hipIpcCloseMemHandle(base);
    return e == hipSuccess ? 0 : fail("hipIpcCloseMemHandle", e);
}

int hip_copy(void *dst, const void *src, size_t n, void *stream)
{
    if (n == 0)
        return 0;
    int device;
    if (device_of(dst, &device) < 0)
        return RT_ERR;
    if (device < 0 && device_of(src, &device) < 0)
        return RT_ERR;
    on_device on(device); /* -1: host to host, on the current device */
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipError_t e = hipMemcpyAsync(dst, src, n, hipMemcpyDefault, (hipStream_t)stream);
    return e == hipSuccess ? 0 : fail("hipMemcpyAsync", e);
}

int hip_reduce(const struct rt_reduce *r, void *stream)
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
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    int k = shmesh_kernels::reduce(r, stream);
    if (k == RT_ERR_NO_KERNEL)
        return fail_status(k, "reduce: no kernel for op %d on dtype %d with %d sources", r->op,
                           (int)r->dtype, r->nsrc);
    hipError_t e = hipGetLastError(); /* the launch's own error */
    return e == hipSuccess ? k : fail("reduce kernel launch", e);
}

int hip_takes(int op, shmesh_dtype dtype)
{
    return shmesh_kernels::takes(op, dtype);
}

int hip_sync(void *stream)
{
    hipError_t e;
    if (stream)
        e = hipStreamSynchronize((hipStream_t)stream);
    else {
        /* The default stream is one per device: wait on the current one's
         * and on each other one a call of this plugin used. */
        int current = -1;
        uint64_t devices = used.all();
        if (hipGetDevice(&current) != hipSuccess)
            current = -1;
        e = hipStreamSynchronize(nullptr);
        for (int d = 0; d < 64 && e == hipSuccess; d++) {
            if (!(devices >> d & 1) || d == current)
                continue;
            on_device on(d);
            e = on.status != hipSuccess ? on.status : hipStreamSynchronize(nullptr);
        }
    }
    return e == hipSuccess ? 0 : fail("hipStreamSynchronize", e);
}

int hip_alloc(int device, size_t n, void **p)
{
    on_device on(device);
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipError_t e = hipMalloc(p, n);
    return e == hipSuccess ? 0 : fail("hipMalloc", e);
}

int hip_free(void *p)
{
    if (!p)
        return 0;
    int device;
    if (device_of(p, &device) < 0)
        return RT_ERR;
    on_device on(device); /* -1: managed memory, or not the runtime's */
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipError_t e = hipFree(p);
    return e == hipSuccess ? 0 : fail("hipFree", e);
}

int hip_pci_bus_id(int device, char *buf, int len)
{
    hipError_t e = hipDeviceGetPCIBusId(buf, len, device);
    if (e != hipSuccess)
        return fail("hipDeviceGetPCIBusId", e);
    shmesh_backend::lower_case(buf);
    return 0;
}

const struct rt_ops ops = {
    RT_ABI,
    "hip",
    "HIP_VISIBLE_DEVICES",
    hip_init,
    hip_last_error,
    hip_range,
    hip_ipc_export,
    hip_ipc_open,
    hip_ipc_close,
    hip_copy,
    hip_reduce,
    hip_takes,
    hip_sync,
    hip_alloc,
    hip_free,
    hip_pci_bus_id,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const struct rt_ops *
shmesh_device_runtime_v1(void)
{
    return &ops;
}
