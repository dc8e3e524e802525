/* cuda_sharing: what processes sharing one NVIDIA GPU pay, and what CUDA's
 * IPC handles do, measured without shmesh (docs/devices.md, "Measurements";
 * the facts the fake runtime, tests/fake_gpu, is held to).
 *
 *   nvcc -O2 -o cuda-sharing bench/cuda_sharing.cu -lcuda
 *   ./cuda-sharing launch [PROCS...]   (default 1 2 4 8)
 *   ./cuda-sharing ipc
 *
 * launch: PROCS processes (forked before any CUDA call) on device 0 at
 * once, each timing 2000 of (an empty kernel + cudaStreamSynchronize) and
 * of (an 8-byte device-to-device copy + sync); the slowest process's
 * median, per count.
 *
 * ipc: two processes.  The exporter allocates, exports and hands over a
 * handle; the importer times cudaIpcOpenMemHandle (first), a second open
 * of the same handle (what CUDA answers, and whether the pointer is the
 * same), cudaIpcCloseMemHandle, the attributes of the mapped memory
 * (device ordinal, buffer id, range); then the exporter frees the buffer
 * while it is mapped, reports the free memory before and after, allocates
 * again (the address it gets, the old one or not), and the importer closes
 * its mapping (free memory again). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            printf("pid %d: %s: %s (%s)\n", getpid(), #x, cudaGetErrorString(e_),              \
                   cudaGetErrorName(e_));                                                         \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

__global__ void empty_kernel(int *p)
{
    if (p && threadIdx.x == 1000000)
        *p = 1;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp);
    return t[n / 2];
}

/* One process of `launch`: its two medians written to fd. */
static void launch_child(int fd, int start_fd)
{
    CK(cudaSetDevice(0));
    int *a, *b;
    CK(cudaMalloc(&a, 8));
    CK(cudaMalloc(&b, 8));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 100; i++) {
        empty_kernel<<<1, 32, 0, s>>>(a);
        CK(cudaStreamSynchronize(s));
    }
    char go;
    if (read(start_fd, &go, 1) != 1) /* every process ready: start together */
        exit(1);
    static double t[2000];
    double m[2];
    for (int i = 0; i < 2000; i++) {
        double t0 = now_us();
        empty_kernel<<<1, 32, 0, s>>>(a);
        CK(cudaStreamSynchronize(s));
        t[i] = now_us() - t0;
    }
    m[0] = median(t, 2000);
    for (int i = 0; i < 2000; i++) {
        double t0 = now_us();
        CK(cudaMemcpyAsync(b, a, 8, cudaMemcpyDeviceToDevice, s));
        CK(cudaStreamSynchronize(s));
        t[i] = now_us() - t0;
    }
    m[1] = median(t, 2000);
    if (write(fd, m, sizeof m) != sizeof m)
        exit(1);
    exit(0);
}

static void launch(int procs)
{
    if (procs < 1 || procs > 64) {
        printf("launch: 1 to 64 processes, not %d\n", procs);
        return;
    }
    int res[2], start[2];
    if (pipe(res) || pipe(start))
        exit(1);
    for (int p = 0; p < procs; p++)
        if (fork() == 0) {
            close(res[0]);
            close(start[1]);
            launch_child(res[1], start[0]);
        }
    close(res[1]);
    close(start[0]);
    usleep(2000000); /* contexts created */
    char go[64] = {0};
    if (write(start[1], go, (size_t)procs) != procs)
        exit(1);
    double worst[2] = {0, 0}, m[2];
    for (int p = 0; p < procs; p++) {
        if (read(res[0], m, sizeof m) != sizeof m) {
            printf("launch: a process failed\n");
            break;
        }
        for (int k = 0; k < 2; k++)
            worst[k] = m[k] > worst[k] ? m[k] : worst[k];
    }
    while (wait(NULL) > 0)
        ;
    printf("launch: %d process%s on one GPU: kernel + sync %.1f us, 8-byte copy + sync %.1f us "
           "(slowest process's median of 2000)\n",
           procs, procs == 1 ? "" : "es", worst[0], worst[1]);
    fflush(stdout);
}

static size_t free_bytes(void)
{
    size_t f, t;
    CK(cudaMemGetInfo(&f, &t));
    return f;
}

static void attrs(const char *what, void *p)
{
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    unsigned type = 0, legacy = 0;
    int ordinal = -9;
    unsigned long long id = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *data[] = {&type, &ordinal, &id, &start, &size, &legacy};
    CUresult r = cuPointerGetAttributes(6, which, data, (CUdeviceptr)p);
    printf("ipc: %s %p: cuPointerGetAttributes %d: type %u, ordinal %d, buffer id %llu, range "
           "%p + %zu, legacy IPC %u\n",
           what, p, (int)r, type, ordinal, id, (void *)start, size, legacy);
}

static void ipc(void)
{
    int h2i[2], i2h[2];
    if (pipe(h2i) || pipe(i2h))
        exit(1);
    const size_t bytes = 64 << 20;
    pid_t importer = fork();
    if (importer == 0) {
        CK(cudaSetDevice(0));
        CK(cudaFree(0));
        cudaIpcMemHandle_t h;
        if (read(h2i[0], &h, sizeof h) != sizeof h)
            exit(1);
        void *p = NULL, *q = NULL;
        double t0 = now_us();
        CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
        double t1 = now_us();
        cudaError_t e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
        double t2 = now_us();
        (void)cudaGetLastError();
        printf("ipc: first open %.1f us; the same handle opened again: %s (%s) in %.1f us, "
               "pointer %s\n",
               t1 - t0, cudaGetErrorString(e), cudaGetErrorName(e), t2 - t1,
               e != cudaSuccess ? "none" : q == p ? "the same" : "another");
        attrs("mapped", p);
        if (e == cudaSuccess) {
            t0 = now_us();
            CK(cudaIpcCloseMemHandle(q));
            printf("ipc: closing the second open: %.1f us\n", now_us() - t0);
        }
        char c = 1;
        if (write(i2h[1], &c, 1) != 1) /* mapped: the exporter frees now */
            exit(1);
        if (read(h2i[0], &c, 1) != 1)
            exit(1);
        size_t before = free_bytes();
        t0 = now_us();
        CK(cudaIpcCloseMemHandle(p));
        t1 = now_us();
        printf("ipc: close after the exporter freed it: %.1f us; free memory %+lld bytes by "
               "the close\n",
               t1 - t0, (long long)free_bytes() - (long long)before);
        /* reopen cost of a new handle, then its close */
        if (read(h2i[0], &h, sizeof h) != sizeof h)
            exit(1);
        t0 = now_us();
        CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
        t1 = now_us();
        CK(cudaIpcCloseMemHandle(p));
        t2 = now_us();
        printf("ipc: a new allocation's handle: open %.1f us, close %.1f us\n", t1 - t0, t2 - t1);
        fflush(stdout);
        exit(0);
    }
    CK(cudaSetDevice(0));
    void *a;
    CK(cudaMalloc(&a, bytes));
    attrs("exported", a);
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, a));
    if (write(h2i[1], &h, sizeof h) != sizeof h)
        exit(1);
    char c;
    if (read(i2h[0], &c, 1) != 1)
        exit(1);
    size_t before = free_bytes();
    CK(cudaFree(a));
    size_t after = free_bytes();
    void *b;
    CK(cudaMalloc(&b, bytes));
    printf("ipc: the exporter freed %zu bytes mapped by the importer: free memory %+lld bytes; "
           "allocated again: %s address\n",
           bytes, (long long)after - (long long)before, b == a ? "the same" : "another");
    attrs("reallocated", b);
    fflush(stdout);
    if (write(h2i[1], &c, 1) != 1)
        exit(1);
    CK(cudaIpcGetMemHandle(&h, b));
    if (write(h2i[1], &h, sizeof h) != sizeof h)
        exit(1);
    waitpid(importer, NULL, 0);
    CK(cudaFree(b));
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "ipc")) {
        ipc();
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "launch")) {
        fprintf(stderr, "usage: %s launch [PROCS...] | ipc\n", argv[0]);
        return 2;
    }
    if (argc == 2) {
        int counts[] = {1, 2, 4, 8};
        for (int i = 0; i < 4; i++)
            launch(counts[i]);
    }
    for (int i = 2; i < argc; i++)
        launch(atoi(argv[i]));
    return 0;
}
