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
 * Here are HIP's own: a pointer is classified by hipPointerGetAttributes
 * (the one query that is safe on any pointer in HIP 5.2), the allocation's
 * range and id come from two more calls, and the peer-access flag is the
 * macro, whose value changed between versions (0 in 5.2, 1 later).  The
 * calls whose logic CUDA shares (copies, kernels, syncs, allocation,
 * opening handles, which device is current) are backend.h's, over `api`
 * below. */
#include <hip/hip_runtime.h>
#include <string.h>

#include "device/backend.h"
#include "device/kernels.h"

using shmesh_backend::fail_call;
using shmesh_backend::fail_status;

namespace {

static_assert(sizeof(hipIpcMemHandle_t) == RT_HANDLE_BYTES, "an IPC handle fills rt_handle");

int hip_range(const void *p, struct rt_range *r);

/* The HIP runtime's names for the calls backend.h writes once. */
struct api {
    using error = hipError_t;
    static constexpr error ok = hipSuccess;
    static constexpr const char *prefix = "hip";
    static error get_device(int *d) { return hipGetDevice(d); }
    static error set_device(int d) { return hipSetDevice(d); }
    static error get_last_error() { return hipGetLastError(); }
    static const char *error_string(error e) { return hipGetErrorString(e); }
    static const char *error_name(error e) { return hipGetErrorName(e); }
    static error ipc_open(void **base, const struct rt_handle *h)
    {
        hipIpcMemHandle_t handle;
        memcpy(&handle, h->bytes, sizeof handle);
        return hipIpcOpenMemHandle(base, handle, hipIpcMemLazyEnablePeerAccess);
    }
    static error ipc_close(void *base) { return hipIpcCloseMemHandle(base); }
    static error memcpy_async(void *dst, const void *src, size_t n, void *stream)
    {
        return hipMemcpyAsync(dst, src, n, hipMemcpyDefault, (hipStream_t)stream);
    }
    static error stream_sync(void *stream) { return hipStreamSynchronize((hipStream_t)stream); }
    static error malloc(void **p, size_t n) { return hipMalloc(p, n); }
    static error free(void *p) { return hipFree(p); }
    static error pci_bus_id(char *buf, int len, int device)
    {
        return hipDeviceGetPCIBusId(buf, len, device);
    }
    static int range(const void *p, struct rt_range *r) { return hip_range(p, r); }
};

using calls = shmesh_backend::calls<api>;

int fail(const char *call, hipError_t e)
{
    return calls::fail(call, e);
}

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

int hip_ipc_export(void *base, struct rt_handle *h)
{
    int device;
    if (calls::device_of(base, &device) < 0)
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
    calls::on_device on(device);
    if (on.status != hipSuccess)
        return fail("hipSetDevice", on.status);
    hipIpcMemHandle_t handle;
    hipError_t e = hipIpcGetMemHandle(&handle, base);
    if (e != hipSuccess)
        return fail("hipIpcGetMemHandle", e);
    memcpy(h->bytes, &handle, sizeof handle);
    return 0;
}

const struct rt_ops ops = calls::table("hip", "HIP_VISIBLE_DEVICES", hip_init, hip_ipc_export);

} // namespace

extern "C" __attribute__((visibility("default"))) const struct rt_ops *
shmesh_device_runtime_v1(void)
{
    return &ops;
}
