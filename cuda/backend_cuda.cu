// backend_cuda.cu: the CUDA backend. This file holds the device discovery and memory half of the
// op table; the compute kernels (cuBLASLt GEMMs, fused attention, the rest) each get a file of
// their own in cuda/ and are checked op by op against backend_cpu.c. Until the table is complete
// (backend_missing_op) the backend reports itself unavailable rather than run a partial table.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "../src/backend.h"
}

#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
static void cuda_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess)
        fc_die("CUDA error at %s:%d: %s: %s (hint: check nvidia-smi and the driver version)", file, line, what,
               cudaGetErrorString(err));
}

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        fc_die("out of GPU memory: %zu bytes: %s (hint: lower batch_size or the frame size)", bytes,
               cudaGetErrorString(err));
    cudaCheck(cudaMemset(p, 0, bytes));
    return p;
}
static void cuda_free(void *p) { cudaCheck(cudaFree(p)); }
static void cuda_upload(void *dst, const void *src, size_t n) { cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice)); }
static void cuda_download(void *dst, const void *src, size_t n) { cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)); }
static void cuda_copy(void *dst, const void *src, size_t n) { cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice)); }
static void cuda_zero(void *p, size_t n) { cudaCheck(cudaMemset(p, 0, n)); }
static void cuda_sync(void) { cudaCheck(cudaDeviceSynchronize()); }
static void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t err = cudaMallocHost(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        fc_die("cannot allocate %zu bytes of page-locked host memory: %s", bytes, cudaGetErrorString(err));
    memset(p, 0, bytes);
    return p;
}
static void cuda_host_free(void *p) { cudaCheck(cudaFreeHost(p)); }

static char g_description[256];

static const char *cuda_describe(void) { return g_description; }

static Backend cuda_backend;

extern "C" const Backend *backend_cuda(const char **why) {
    static char reason[256];
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(reason, sizeof reason, "no usable GPU (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no device found");
        if (why) *why = reason;
        return NULL;
    }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    snprintf(g_description, sizeof g_description, "cuda (%s, sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    cuda_backend.name = "cuda";
    cuda_backend.describe = cuda_describe;
    cuda_backend.alloc = cuda_alloc;
    cuda_backend.free = cuda_free;
    cuda_backend.upload = cuda_upload;
    cuda_backend.download = cuda_download;
    cuda_backend.copy = cuda_copy;
    cuda_backend.zero = cuda_zero;
    cuda_backend.sync = cuda_sync;
    cuda_backend.host_alloc = cuda_host_alloc;
    cuda_backend.host_free = cuda_host_free;
    const char *missing = backend_missing_op(&cuda_backend);
    if (missing) {
        snprintf(reason, sizeof reason, "%s found, but this build's CUDA backend has no kernel for '%s' yet", prop.name,
                 missing);
        if (why) *why = reason;
        return NULL;
    }
    return &cuda_backend;
}
