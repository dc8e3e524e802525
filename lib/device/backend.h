/* What the two GPU plugins (cuda.cu, hip.cpp) share: the sentence
 * last_error() gives, the devices they made current, and the PCI address
 * in sysfs's spelling.
 *
 * The runtime calls themselves stay in each file, written out with the
 * runtime's own names: CUDA and HIP differ exactly where it matters (how a
 * pointer is classified, how pool memory shows, which flags exist in which
 * version), and a table of wrappers over both would hide that behind a
 * third vocabulary for what are, per call, two or three lines. */
#ifndef SHMESH_DEVICE_BACKEND_H
#define SHMESH_DEVICE_BACKEND_H

#include <atomic>
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

} // namespace shmesh_backend

#endif
