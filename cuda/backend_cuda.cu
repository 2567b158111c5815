// backend_cuda.cu: the CUDA backend's core: device discovery, memory, the cuBLAS handle, scratch
// buffers, and the assembly of the op table from the kernel files (one file per kernel family:
// linear.cu, elementwise.cu, norm.cu, attention.cu, optim.cu). Every op is checked against
// backend_cpu.c by tests/test_cuda.c. Until the table is complete (backend_missing_op) the
// backend reports itself unavailable rather than run a partial table.
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"

// ----------------------------------------------------------------------------
// memory: every device allocation is counted, so that the peak is known (cuda_memory_peak)

static size_t g_in_use, g_peak;

// Sizes of the live allocations, by pointer (open addressing; the model holds a few hundred).
#define ALLOC_SLOTS 8192
static struct { void *p; size_t n; } g_allocs[ALLOC_SLOTS];

static size_t alloc_slot(void *p) {
    size_t h = ((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 51) % ALLOC_SLOTS;
}
static void alloc_remember(void *p, size_t n) {
    for (size_t i = alloc_slot(p), k = 0; k < ALLOC_SLOTS; k++, i = (i + 1) % ALLOC_SLOTS)
        if (!g_allocs[i].p) {
            g_allocs[i].p = p, g_allocs[i].n = n;
            g_in_use += n;
            if (g_in_use > g_peak) g_peak = g_in_use;
            return;
        }
    fc_die("CUDA backend: more than %d live device allocations", ALLOC_SLOTS);
}
static void alloc_forget(void *p) {
    for (size_t i = alloc_slot(p), k = 0; k < ALLOC_SLOTS && g_allocs[i].p; k++, i = (i + 1) % ALLOC_SLOTS)
        if (g_allocs[i].p == p) {
            g_in_use -= g_allocs[i].n;
            // Re-insert the rest of the probe run so that lookups stay correct.
            g_allocs[i].p = NULL;
            for (size_t j = (i + 1) % ALLOC_SLOTS; g_allocs[j].p; j = (j + 1) % ALLOC_SLOTS) {
                void *q = g_allocs[j].p;
                size_t n = g_allocs[j].n;
                g_allocs[j].p = NULL;
                g_in_use -= n;
                alloc_remember(q, n);
            }
            return;
        }
}

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess)
        fc_die("out of GPU memory allocating %.1f MiB (%.1f MiB in use): %s (hint: lower batch_size or the frame "
               "size)",
               bytes / 1048576.0, g_in_use / 1048576.0, cudaGetErrorString(err));
    cudaCheck(cudaMemset(p, 0, bytes));
    alloc_remember(p, bytes);
    return p;
}
static void cuda_free(void *p) {
    if (!p) return;
    alloc_forget(p);
    cudaCheck(cudaFree(p));
}
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

// Checkpoint downloads run on a side stream so that training goes on while they copy. Every kernel,
// cuBLAS call and cudaMemcpy of the backend is issued on the legacy default stream (0); a
// non-blocking stream does not synchronise with it, so each copy is ordered after the work issued
// so far by an event. The other direction (nothing may write a tensor before its copy has landed)
// is the caller's: it calls download_wait before it issues the optimizer step.
static cudaStream_t g_copy_stream;
static cudaEvent_t g_compute_done;

static void cuda_download_async(void *dst, const void *src, size_t n) {
    if (!g_copy_stream) {
        cudaCheck(cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&g_compute_done, cudaEventDisableTiming));
    }
    cudaCheck(cudaEventRecord(g_compute_done, 0));
    cudaCheck(cudaStreamWaitEvent(g_copy_stream, g_compute_done, 0));
    cudaCheck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g_copy_stream));
}
// Synchronising the stream itself (not a shared event) is safe from any host thread: the trainer
// and the checkpoint writer may both wait.
static void cuda_download_wait(void) {
    if (g_copy_stream) cudaCheck(cudaStreamSynchronize(g_copy_stream));
}

extern "C" size_t cuda_memory_peak(void) { return g_peak; }
extern "C" size_t cuda_memory_in_use(void) { return g_in_use; }

// ----------------------------------------------------------------------------
// shared resources of the kernel files

static void *g_scratch[SCRATCH_COUNT];
static size_t g_scratch_bytes[SCRATCH_COUNT];

void *fc_cuda_scratch(int which, size_t bytes) {
    if (bytes > g_scratch_bytes[which]) {
        cudaCheck(cudaDeviceSynchronize());
        cuda_free(g_scratch[which]);
        g_scratch[which] = cuda_alloc(bytes);
        g_scratch_bytes[which] = bytes;
    }
    return g_scratch[which];
}

cublasHandle_t fc_cublas(void) {
    static cublasHandle_t handle;
    if (!handle) {
        cublasCheck(cublasCreate(&handle));
        // fp32 math without TF32, and no atomics: the same bytes on every run on one GPU.
        cublasCheck(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
        cublasCheck(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    }
    return handle;
}

// ----------------------------------------------------------------------------
// the op table

static char g_description[256];

static const char *cuda_describe(void) { return g_description; }

static Backend cuda_backend;

extern "C" const Backend *backend_cuda(const char **why) {
    static char reason[256];
    static int ready;
    if (ready) return &cuda_backend;
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
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    if (driver < runtime) {
        snprintf(reason, sizeof reason,
                 "the NVIDIA driver supports CUDA %d.%d but this build needs %d.%d (hint: update the driver)",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        if (why) *why = reason;
        return NULL;
    }
    snprintf(g_description, sizeof g_description, "cuda (%s, sm_%d%d, %.1f GiB, fp32, CUDA %d.%d)", prop.name,
             prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0, runtime / 1000, runtime % 1000 / 10);
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
    cuda_backend.download_async = cuda_download_async;
    cuda_backend.download_wait = cuda_download_wait;
    cuda_backend.memory_peak = cuda_memory_peak;
    cuda_register_linear(&cuda_backend);
    cuda_register_elementwise(&cuda_backend);
    cuda_register_norm(&cuda_backend);
    cuda_register_attention(&cuda_backend);
    cuda_register_optim(&cuda_backend);
    const char *missing = backend_missing_op(&cuda_backend);
    if (missing) {
        snprintf(reason, sizeof reason, "%s found, but this build's CUDA backend has no kernel for '%s' yet", prop.name,
                 missing);
        if (why) *why = reason;
        return NULL;
    }
    ready = 1;
    return &cuda_backend;
}
