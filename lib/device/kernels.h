/* The device kernels, written once in the dialect CUDA and HIP share, and
 * compiled by every backend (lib/device/runtime.h): nvcc for cuda.cu, hipcc
 * for hip.cpp, and the host's C++ compiler for the fake runtime, which
 * defines SHMESH_KERNELS_HOST and so runs the same code over a grid
 * emulated by loops (lib/device/grid_host.h).  CI therefore checks the
 * kernels' arithmetic against the host reductions bit for bit on machines
 * without a GPU.
 *
 * The reductions repeat lib/kernels/reduce.c's order of operations exactly
 * (members in order, a sum starting from +0, floats' NaN and tie rules, the
 * mean as the sum times the reciprocal of n in the dtype), so a device psum
 * gives the same bits as a host one.  Each element is read from every source
 * and then written by the same thread, so dst may be one of the sources.
 *
 * Taken: sum, max, min of every integer dtype, float32 and float64; the mean
 * of float32 and float64.  Left to the host (staged): bool, float16,
 * bfloat16, integer means, arg reductions. */
#ifndef SHMESH_DEVICE_KERNELS_H
#define SHMESH_DEVICE_KERNELS_H

#include <stdint.h>

#if defined(SHMESH_KERNELS_HOST)
#include "device/grid_host.h"
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define KSTREAM(s) ((hipStream_t)(s))
#define KLAUNCH(kernel, grid, block, stream, arg) kernel<<<(grid), (block), 0, KSTREAM(stream)>>>(arg)
#else
#include <cuda_runtime.h>
#define KSTREAM(s) ((cudaStream_t)(s))
#define KLAUNCH(kernel, grid, block, stream, arg) kernel<<<(grid), (block), 0, KSTREAM(stream)>>>(arg)
#endif

#include "device/runtime.h"

namespace shmesh_kernels {

/* The kernel's argument: the request, by value (a few hundred bytes, well
 * under the 4 KiB kernels take), and the mean's reciprocal in the dtype. */
template <typename T> struct args {
    T *dst;
    const T *src[RT_MAX_SRC];
    int nsrc;
    uint64_t n;
    T recip;
};

template <typename T> struct is_float {
    static const bool value = false;
};
template <> struct is_float<float> {
    static const bool value = true;
};
template <> struct is_float<double> {
    static const bool value = true;
};

/* Whether v replaces the running a: floats take the first NaN, else the
 * strictly greater (smaller) value, so ties keep the earlier member's. */
template <typename T, bool MAX> __device__ __host__ inline bool takes_over(T a, T v)
{
    bool beyond = MAX ? v > a : v < a;
    if (is_float<T>::value)
        return (a == a) && (v != v || beyond);
    return beyond;
}

/* Sums of integers wrap: computed in the unsigned type of the same width (W). */
template <typename T, typename W, int OP> __global__ void reduce_kernel(args<T> a)
{
    uint64_t stride = (uint64_t)blockDim.x * gridDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride) {
        T acc;
        if (OP == RT_SUM || OP == RT_MEAN) {
            W s = (W)((W)a.src[0][i] + (W)0); /* floats: -0.0 becomes +0.0, as JAX sums */
            for (int k = 1; k < a.nsrc; k++)
                s = (W)(s + (W)a.src[k][i]);
            acc = (T)s;
            if (OP == RT_MEAN)
                acc = acc * a.recip;
        } else {
            acc = a.src[0][i];
            for (int k = 1; k < a.nsrc; k++) {
                T v = a.src[k][i];
                if (takes_over<T, OP == RT_MAX>(acc, v))
                    acc = v;
            }
        }
        a.dst[i] = acc;
    }
}

/* Threads per block, and at most this many blocks (the loop strides). */
static const unsigned BLOCK = 256, MAX_GRID = 4096;

template <typename T, typename W>
inline int launch(const struct rt_reduce *r, void *stream)
{
    args<T> a;
    a.dst = (T *)r->dst;
    for (int k = 0; k < r->nsrc; k++)
        a.src[k] = (const T *)r->src[k];
    a.nsrc = r->nsrc;
    a.n = r->n;
    a.recip = (T)0;
    if (r->op == RT_MEAN) {
        if (!is_float<T>::value)
            return RT_ERR_NO_KERNEL;
        a.recip = (T)((T)1 / (T)r->mean_n);
    }
    if (r->n == 0)
        return 0;
    uint64_t blocks = (r->n + BLOCK - 1) / BLOCK;
    unsigned grid = blocks < MAX_GRID ? (unsigned)blocks : MAX_GRID;
    (void)stream; /* the host's grid has no streams */
    switch (r->op) {
    case RT_SUM: KLAUNCH((reduce_kernel<T, W, RT_SUM>), grid, BLOCK, stream, a); break;
    case RT_MAX: KLAUNCH((reduce_kernel<T, W, RT_MAX>), grid, BLOCK, stream, a); break;
    case RT_MIN: KLAUNCH((reduce_kernel<T, W, RT_MIN>), grid, BLOCK, stream, a); break;
    case RT_MEAN: KLAUNCH((reduce_kernel<T, W, RT_MEAN>), grid, BLOCK, stream, a); break;
    default: return RT_ERR_NO_KERNEL;
    }
    return 0;
}

/* 1 when the kernels compute (op, dtype), else 0. */
inline int takes(int op, shmesh_dtype dt)
{
    bool fl = dt == SHMESH_FLOAT32 || dt == SHMESH_FLOAT64;
    bool in = dt == SHMESH_INT8 || dt == SHMESH_INT16 || dt == SHMESH_INT32 ||
              dt == SHMESH_INT64 || dt == SHMESH_UINT8 || dt == SHMESH_UINT16 ||
              dt == SHMESH_UINT32 || dt == SHMESH_UINT64;
    switch (op) {
    case RT_SUM:
    case RT_MAX:
    case RT_MIN: return fl || in;
    case RT_MEAN: return fl;
    default: return 0;
    }
}

/* Queues r on the stream: 0, or RT_ERR_NO_KERNEL (nothing queued). */
inline int reduce(const struct rt_reduce *r, void *stream)
{
    if (!takes(r->op, r->dtype) || r->nsrc < 1 || r->nsrc > RT_MAX_SRC)
        return RT_ERR_NO_KERNEL;
    switch (r->dtype) {
    case SHMESH_INT8: return launch<int8_t, uint8_t>(r, stream);
    case SHMESH_INT16: return launch<int16_t, uint16_t>(r, stream);
    case SHMESH_INT32: return launch<int32_t, uint32_t>(r, stream);
    case SHMESH_INT64: return launch<int64_t, uint64_t>(r, stream);
    case SHMESH_UINT8: return launch<uint8_t, uint8_t>(r, stream);
    case SHMESH_UINT16: return launch<uint16_t, uint16_t>(r, stream);
    case SHMESH_UINT32: return launch<uint32_t, uint32_t>(r, stream);
    case SHMESH_UINT64: return launch<uint64_t, uint64_t>(r, stream);
    case SHMESH_FLOAT32: return launch<float, float>(r, stream);
    case SHMESH_FLOAT64: return launch<double, double>(r, stream);
    default: return RT_ERR_NO_KERNEL;
    }
}

} // namespace shmesh_kernels

#endif
