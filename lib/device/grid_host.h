/* The CUDA/HIP dialect's grid on the host, for the fake runtime
 * (tests/fake_gpu): a launch runs every thread of a small grid one after
 * the other, each through the kernel's own grid-stride loop, so the
 * kernels' indexing runs as well as their arithmetic.  The grid is cut
 * to a few blocks of a few threads: the loop strides over the rest. */
#ifndef SHMESH_DEVICE_GRID_HOST_H
#define SHMESH_DEVICE_GRID_HOST_H

#define __global__
#define __device__
#define __host__

namespace shmesh_grid {
struct dim {
    unsigned x, y, z;
};
} // namespace shmesh_grid

static thread_local shmesh_grid::dim blockIdx, threadIdx, blockDim, gridDim;

#define KSTREAM(s) (s)
#define KLAUNCH(kernel, grid, block, stream, arg)                                              \
    do {                                                                                       \
        unsigned g_ = (grid) < 3u ? (unsigned)(grid) : 3u;                                     \
        unsigned b_ = (block) < 5u ? (unsigned)(block) : 5u;                                   \
        gridDim = {g_, 1, 1};                                                                  \
        blockDim = {b_, 1, 1};                                                                 \
        for (unsigned bx = 0; bx < g_; bx++)                                                   \
            for (unsigned tx = 0; tx < b_; tx++) {                                             \
                blockIdx = {bx, 0, 0};                                                         \
                threadIdx = {tx, 0, 0};                                                        \
                kernel(arg);                                                                   \
            }                                                                                  \
    } while (0)

#endif
