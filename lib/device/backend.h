/* What the two GPU plugins (cuda.cu, hip.cpp) share: the sentence
 * last_error() gives, the devices they made current, the PCI address in
 * sysfs's spelling, and the calls whose logic is the same in both runtimes
 * (`calls<R>`: copies, kernels, syncs, allocation, opening and closing
 * handles), written once over a runtime's names.
 *
 * Where CUDA and HIP differ (starting the runtime, how a pointer is
 * classified, how pool memory shows), the code stays in each file, written
 * out with the runtime's own names. */
#ifndef SHMESH_DEVICE_BACKEND_H
#define SHMESH_DEVICE_BACKEND_H

#include <atomic>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/kernels.h"
#include "device/runtime.h"

namespace shmesh_backend {

/* The last failure's sentence, per thread: a call that fails on one thread
 * never changes what another thread reads. */
inline char *error_text()
{
    static thread_local char text[320];
    return text;
}

/* Keeps the sentence and returns `status` (RT_ERR unless told). */
__attribute__((format(printf, 2, 3))) inline int fail_status(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_text(), 320, fmt, ap);
    va_end(ap);
    return status;
}

/* "cudaIpcOpenMemHandle: invalid argument (cudaErrorInvalidValue)": the
 * call, the runtime's description of the error, and the error's name
 * (HIP 5.2 describes an error by its name: then once). */
inline int fail_call(const char *call, const char *text, const char *name)
{
    if (!strcmp(text, name))
        return fail_status(RT_ERR, "%s: %s", call, name);
    return fail_status(RT_ERR, "%s: %s (%s)", call, text, name);
}

/* The devices a plugin made current, process-wide (the library may queue
 * work on one thread and wait on another): sync(NULL) waits on each one's
 * default stream, since "the default stream" is one per device. */
class device_set {
    std::atomic<uint64_t> bits{0};

public:
    void add(int device)
    {
        if (device >= 0 && device < 64 && !(bits.load(std::memory_order_relaxed) >> device & 1))
            bits.fetch_or(uint64_t(1) << device, std::memory_order_relaxed);
    }
    uint64_t all() const { return bits.load(std::memory_order_relaxed); }
};

/* Runtimes spell the bus id in upper case ("0000:1A:00.0"); sysfs, where
 * the launcher looks it up, in lower case. */
inline void lower_case(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* The shared calls over runtime R, a struct of the runtime's names:
 *   error, ok                 its error type and success value
 *   prefix                    "cuda", "hip": messages name "<prefix>SetDevice"
 *   get_device, set_device, get_last_error, error_string, error_name,
 *   ipc_open(base, handle), ipc_close, memcpy_async (cudaMemcpyDefault),
 *   stream_sync, malloc, free, pci_bus_id(buf, len, device)
 *   range                     the plugin's rt_ops.range
 * Devices: a call that touches memory makes the memory's device current
 * for its own duration and then gives the calling thread its device back
 * (the library runs on the application's threads; leaving another device
 * current would move the application's next allocation or launch). */
template <class R> struct calls {
    using error = typename R::error;

    static device_set &used()
    {
        static device_set devices;
        return devices;
    }

    /* A runtime call failed: its sentence, and the runtime's error state
     * cleared, so that a later launch's check does not report it again.
     * `call` is named with the runtime's prefix when `prefixed`. */
    static int fail(const char *call, error e, bool prefixed = false)
    {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefixed ? R::prefix : "", call);
        (void)R::get_last_error();
        return fail_call(name, R::error_string(e), R::error_name(e));
    }

    /* `device` current until the end of the scope, then the caller's again;
     * -1 (memory of no device) leaves the current device as it is. */
    class on_device {
        int prev = -1, want;

    public:
        error status = R::ok;
        explicit on_device(int device) : want(device)
        {
            if (want < 0)
                return;
            used().add(want);
            if (R::get_device(&prev) != R::ok)
                prev = -1;
            if (prev != want)
                status = R::set_device(want);
        }
        ~on_device()
        {
            if (want >= 0 && prev >= 0 && prev != want)
                (void)R::set_device(prev);
        }
    };

    /* The device of p, or -1 for memory that is not device memory. */
    static int device_of(const void *p, int *device)
    {
        struct rt_range r = {};
        int k = R::range(p, &r);
        *device = k == 1 ? r.device : -1;
        return k < 0 ? k : 0;
    }

    static int ipc_open(const struct rt_handle *h, int device, void **base)
    {
        on_device on(device);
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        error e = R::ipc_open(base, h);
        return e == R::ok ? 0 : fail("IpcOpenMemHandle", e, true);
    }

    static int ipc_close(void *base)
    {
        int device;
        if (device_of(base, &device) < 0)
            return RT_ERR;
        on_device on(device);
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        error e = R::ipc_close(base);
        return e == R::ok ? 0 : fail("IpcCloseMemHandle", e, true);
    }

    static int copy(void *dst, const void *src, size_t n, void *stream)
    {
        if (n == 0)
            return 0;
        int device;
        if (device_of(dst, &device) < 0)
            return RT_ERR;
        if (device < 0 && device_of(src, &device) < 0)
            return RT_ERR;
        on_device on(device); /* -1: host to host, on the current device */
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        error e = R::memcpy_async(dst, src, n, stream);
        return e == R::ok ? 0 : fail("MemcpyAsync", e, true);
    }

    static int reduce(const struct rt_reduce *r, void *stream)
    {
        if (!shmesh_kernels::takes(r->op, r->dtype))
            return fail_status(RT_ERR_NO_KERNEL,
                               "reduce: no kernel for op %d on dtype %d (kernels.h)", r->op,
                               (int)r->dtype);
        int device;
        if (device_of(r->dst, &device) < 0)
            return RT_ERR;
        if (device < 0)
            return fail_status(RT_ERR, "reduce: the destination %p is not device memory",
                               r->dst);
        on_device on(device);
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        int k = shmesh_kernels::reduce(r, stream);
        if (k == RT_ERR_NO_KERNEL)
            return fail_status(k, "reduce: no kernel for op %d on dtype %d with %d sources",
                               r->op, (int)r->dtype, r->nsrc);
        error e = R::get_last_error(); /* the launch's own error */
        return e == R::ok ? k : fail("reduce kernel launch", e);
    }

    static int takes(int op, shmesh_dtype dtype) { return shmesh_kernels::takes(op, dtype); }

    static int sync(void *stream)
    {
        error e;
        if (stream) {
            e = R::stream_sync(stream);
        } else {
            /* The default stream is one per device: wait on the current
             * one's and on each other one a call of this plugin used. */
            int current = -1;
            uint64_t devices = used().all();
            if (R::get_device(&current) != R::ok)
                current = -1;
            e = R::stream_sync(nullptr);
            for (int d = 0; d < 64 && e == R::ok; d++) {
                if (!(devices >> d & 1) || d == current)
                    continue;
                on_device on(d);
                e = on.status != R::ok ? on.status : R::stream_sync(nullptr);
            }
        }
        return e == R::ok ? 0 : fail("StreamSynchronize", e, true);
    }

    static int alloc(int device, size_t n, void **p)
    {
        on_device on(device);
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        error e = R::malloc(p, n);
        return e == R::ok ? 0 : fail("Malloc", e, true);
    }

    static int free(void *p)
    {
        if (!p)
            return 0;
        int device;
        if (device_of(p, &device) < 0)
            return RT_ERR;
        on_device on(device); /* -1: managed memory, or not the runtime's */
        if (on.status != R::ok)
            return fail("SetDevice", on.status, true);
        error e = R::free(p);
        return e == R::ok ? 0 : fail("Free", e, true);
    }

    static int pci_bus_id(int device, char *buf, int len)
    {
        error e = R::pci_bus_id(buf, len, device);
        if (e != R::ok)
            return fail("DeviceGetPCIBusId", e, true);
        lower_case(buf);
        return 0;
    }

    static const char *last_error(void) { return error_text(); }

    /* The plugin's table: its own init, range and export, the rest shared. */
    static struct rt_ops table(const char *name, const char *visible_env, int (*init)(void),
                               int (*ipc_export)(void *, struct rt_handle *))
    {
        return rt_ops{RT_ABI, name,     visible_env, init, last_error, R::range, ipc_export,
                      ipc_open, ipc_close, copy, reduce, takes, sync, alloc, free, pci_bus_id};
    }
};

} // namespace shmesh_backend

#endif
