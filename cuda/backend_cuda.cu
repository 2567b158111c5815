// backend_cuda.cu: the CUDA backend's core: device discovery, memory, the cuBLAS handles, scratch
// buffers, and the assembly of the op table from the kernel files (cuda/*.cu, one file per kernel
// family). Every op is checked against
// cpu_backend.c by tests/cuda/test_cuda.c. Until the table is complete (backend_missing_op) the
// backend reports itself unavailable rather than run a partial table.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"  // first: it includes the C headers with C linkage
#include "backend/op_table.h"
#include "backend_cuda.h"

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

void *fc_cuda_alloc(size_t bytes) {
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
void fc_cuda_free(void *p) {
    if (!p) return;
    alloc_forget(p);
    cudaCheck(cudaFree(p));
}
// The ops that write backend memory tell bf16.cu, so that a weights' mirror is rebuilt.
static void cuda_upload(void *dst, const void *src, size_t n) {
    cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
    fc_cuda_weights_touched(dst, n);
}
static void cuda_download(void *dst, const void *src, size_t n) { cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost)); }
static void cuda_copy(void *dst, const void *src, size_t n) {
    cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
    fc_cuda_weights_touched(dst, n);
}
static void cuda_zero(void *p, size_t n) {
    cudaCheck(cudaMemset(p, 0, n));
    fc_cuda_weights_touched(p, n);
}
static void cuda_sync(void) { cudaCheck(cudaDeviceSynchronize()); }
// The fp32 table's operands are floats (bf16.cu has the bf16 table's).
static void cuda_operand_upload_fp32(Operand *dst, const real *src, size_t n) {
    cuda_upload(dst, src, sizeof(real) * n);
}
static void cuda_operand_download_fp32(real *dst, const Operand *src, size_t n) {
    cuda_download(dst, src, sizeof(real) * n);
}
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
static int g_device_index;  // backend_cuda_set_device: this rank's GPU index (modulo the GPUs found)
static int g_device;        // the GPU the backend opened (the trainer's thread's)

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
// and the checkpoint writer may both wait. The device is per host thread: the writer's thread would
// otherwise be on GPU 0 and open a second context there for every rank on another GPU.
static void cuda_download_wait(void) {
    if (!g_copy_stream) return;
    cudaCheck(cudaSetDevice(g_device));
    cudaCheck(cudaStreamSynchronize(g_copy_stream));
}

static size_t cuda_memory_peak(void) { return g_peak; }

// ----------------------------------------------------------------------------
// shared resources of the kernel files

static void *g_scratch[SCRATCH_COUNT];
static size_t g_scratch_bytes[SCRATCH_COUNT];

void *fc_cuda_scratch(int which, size_t bytes) {
    if (bytes > g_scratch_bytes[which]) {
        cudaCheck(cudaDeviceSynchronize());
        fc_cuda_free(g_scratch[which]);
        g_scratch[which] = fc_cuda_alloc(bytes);
        g_scratch_bytes[which] = bytes;
    }
    return g_scratch[which];
}

// A cuBLAS handle that never uses atomics (the same bytes on every run on one GPU), in a math mode.
static cublasHandle_t deterministic_cublas(cublasMath_t mode) {
    cublasHandle_t handle;
    cublasCheck(cublasCreate(&handle));
    cublasCheck(cublasSetMathMode(handle, mode));
    cublasCheck(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    return handle;
}

// fp32 math without TF32.
cublasHandle_t fc_cublas(void) {
    static cublasHandle_t handle;
    if (!handle) handle = deterministic_cublas(CUBLAS_PEDANTIC_MATH);
    return handle;
}

// Tensor cores allowed (bf16 operands, fp32 accumulation).
cublasHandle_t fc_cublas_bf16(void) {
    static cublasHandle_t handle;
    if (!handle) handle = deterministic_cublas(CUBLAS_DEFAULT_MATH);
    return handle;
}

// cuBLASLt has no math or atomics mode: what a matmul may do is chosen per call, by its descriptors,
// its preference and the algorithm (linear.cu).
cublasLtHandle_t fc_cublaslt(void) {
    static cublasLtHandle_t handle;
    if (!handle) cublasCheck(cublasLtCreate(&handle));
    return handle;
}

// ----------------------------------------------------------------------------
// routes (cuda_common.cuh): the defaults are what the hardware measured faster (BENCHMARKS.md)

CudaRoutes fc_routes = {
    0,  // dgelu_epilogue: H200, the preset's fc2 backward: 0.738 ms fused against 0.537 apart
    0,  // attn_gemm: H200, the preset's spatial attention: 0.545 / 0.981 ms (fwd / bwd) against 0.349 / 0.849
    1,  // attn_short: H200, the preset's temporal attention: 0.077 / 0.263 ms (fwd / bwd) against 0.104 / 0.368
    1,  // qk_norm_fused: H200, the preset's q/k norm backward: 0.171 ms in one pass against 0.214 in two
    0,  // ln_mod_fused: H200, the preset's LayerNorm backward: 0.181 ms in one pass against 0.123 in two
    1,  // adam8_warp: H200, the preset's 8-bit AdamW with the EMA: 11.44 ms a step against 14.79; the step 123.41
        // against 124.49 ms (1.007x, 1.007-1.009 over 3 pairs)
    0,  // fp8_fwd: the H200's cuBLASLt (CUDA 13.0) refused every fp8 GEMM of make test-cuda (2026-11-29):
        // not yet run on hardware; the fp8 probe (fp8_probe.cu) says why on the next card
    0,  // fp8_dgrad: the same
    0,  // fp8_wgrad: the same
};
int fc_sm_count = 1;
int fc_sm_threads = 0;
size_t fc_sm_smem = 0;

CudaRouteCalls fc_route_calls;

static struct {
    const char *name;
    int *flag;
    long *calls;    // the calls it has taken, where the route counts them
    int bf16_only;  // a route of the bf16 GEMMs: "cuda-fp32" never takes it
} g_route_names[] = {{"dgelu_epilogue", &fc_routes.dgelu_epilogue, NULL, 1},
                     {"attn_gemm", &fc_routes.attn_gemm, NULL, 0},
                     {"attn_short", &fc_routes.attn_short, &fc_route_calls.attn_short, 0},
                     {"qk_norm_fused", &fc_routes.qk_norm_fused, &fc_route_calls.qk_norm_fused, 0},
                     {"ln_mod_fused", &fc_routes.ln_mod_fused, &fc_route_calls.ln_mod_fused, 0},
                     {"adam8_warp", &fc_routes.adam8_warp, &fc_route_calls.adam8_warp, 0},
                     {"fp8_fwd", &fc_routes.fp8_fwd, &fc_route_calls.fp8_fwd, 1},
                     {"fp8_dgrad", &fc_routes.fp8_dgrad, &fc_route_calls.fp8_dgrad, 1},
                     {"fp8_wgrad", &fc_routes.fp8_wgrad, &fc_route_calls.fp8_wgrad, 1}};
enum { N_ROUTES = sizeof g_route_names / sizeof g_route_names[0] };

extern "C" long backend_cuda_route_calls(const char *name) {
    if (!strcmp(name, "fp8_dy_scale")) return fc_route_calls.fp8_dy_scale;
    if (!strcmp(name, "fp8_amax")) return fc_route_calls.fp8_amax;
    for (int i = 0; i < N_ROUTES; i++)
        if (!strcmp(name, g_route_names[i].name)) return g_route_names[i].calls ? *g_route_names[i].calls : -1;
    return -1;
}

extern "C" int backend_cuda_set_route(const char *name, int on) {
    for (int i = 0; i < N_ROUTES; i++)
        if (!strcmp(name, g_route_names[i].name)) return *g_route_names[i].flag = !!on, 0;
    return -1;
}

// The routes as "name=0|1,...": all of them, or (fp32_only) those "cuda-fp32" can take.
static const char *routes_text(int fp32_only) {
    static char text[2][256];
    char *t = text[fp32_only];
    size_t n = 0;
    t[0] = 0;
    for (int i = 0; i < N_ROUTES; i++)
        if (!(fp32_only && g_route_names[i].bf16_only))
            n += snprintf(t + n, sizeof text[0] - n, "%s%s=%d", n ? "," : "", g_route_names[i].name,
                          *g_route_names[i].flag);
    return t;
}

extern "C" const char *backend_cuda_routes(void) { return routes_text(0); }

// FRAMECHAIN_CUDA_ROUTES=name=0|1[,name=0|1...]: a malformed list stops the program with one line.
static void routes_from_env(void) {
    const char *env = getenv("FRAMECHAIN_CUDA_ROUTES");
    if (!env || !*env) return;
    char list[256];
    if (strlen(env) >= sizeof list) fc_die("FRAMECHAIN_CUDA_ROUTES: longer than %zu characters", sizeof list - 1);
    strcpy(list, env);
    for (char *save = NULL, *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq || (strcmp(eq + 1, "0") && strcmp(eq + 1, "1")))
            fc_die("FRAMECHAIN_CUDA_ROUTES: '%s' is not name=0 or name=1 (routes: %s)", item, backend_cuda_routes());
        *eq = 0;
        if (backend_cuda_set_route(item, eq[1] == '1'))
            fc_die("FRAMECHAIN_CUDA_ROUTES: no route '%s' (routes: %s)", item, backend_cuda_routes());
    }
}

// ----------------------------------------------------------------------------
// the op table: two backends on one GPU that differ only in their GEMMs. "cuda": bf16 operands
// on the tensor cores (the default); "cuda-fp32": SGEMM without TF32, for comparisons with the CPU
// to 1e-5 and for debugging.

static char g_description[2][384];

static const char *cuda_describe_bf16(void) { return g_description[1]; }
static const char *cuda_describe_fp32(void) { return g_description[0]; }
static void no_register_weights(const real *params, size_t n) { (void)params, (void)n; }
static void no_unregister_weights(const real *params) { (void)params; }

static Backend cuda_backend[2];  // [0] cuda-fp32, [1] cuda (bf16)

static void fill_table(Backend *be, int bf16) {
    be->name = bf16 ? "cuda" : "cuda-fp32";
    be->precision = bf16 ? "bf16" : "fp32";
    be->describe = bf16 ? cuda_describe_bf16 : cuda_describe_fp32;
    be->alloc = fc_cuda_alloc;
    be->free = fc_cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->copy = cuda_copy;
    be->zero = cuda_zero;
    be->sync = cuda_sync;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->download_async = cuda_download_async;
    be->download_wait = cuda_download_wait;
    be->memory_peak = cuda_memory_peak;
    cuda_register_linear(be, bf16);
    if (bf16) {
        cuda_register_bf16(be);
    } else {
        be->register_weights = no_register_weights, be->unregister_weights = no_unregister_weights;
        be->operand_bytes = sizeof(real);
        be->operand_upload = cuda_operand_upload_fp32, be->operand_download = cuda_operand_download_fp32;
    }
    cuda_register_elementwise(be, bf16);
    cuda_register_norm(be, bf16);
    cuda_register_attention(be);
    if (bf16) cuda_register_attention_tc(be);
    cuda_register_optim(be);
    cuda_register_conv(be);
}

extern "C" void backend_cuda_set_device(int index) { g_device_index = index; }

// The CUDA backend computing in bf16 (bf16 != 0) or fp32, or NULL with *why.
extern "C" const Backend *backend_cuda_precision(int bf16, const char **why) {
    static char reason[256];
    static int ready;
    if (ready) return &cuda_backend[bf16 ? 1 : 0];
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        snprintf(reason, sizeof reason, "no usable GPU (%s)",
                 err != cudaSuccess ? cudaGetErrorString(err) : "no device found");
        if (why) *why = reason;
        return NULL;
    }
    int device = g_device = g_device_index % count;
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    fc_sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    fc_sm_threads = prop.maxThreadsPerMultiProcessor, fc_sm_smem = prop.sharedMemPerMultiprocessor;
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
    if (prop.major < 8) {
        snprintf(reason, sizeof reason, "%s is sm_%d%d; framechain's CUDA backend needs sm_80 or newer (bf16)",
                 prop.name, prop.major, prop.minor);
        if (why) *why = reason;
        return NULL;
    }
    routes_from_env();
    for (int k = 0; k < 2; k++) {
        snprintf(g_description[k], sizeof g_description[k], "%s (%s, sm_%d%d, %.1f GiB, %s, CUDA %d.%d)",
                 k ? "cuda" : "cuda-fp32", prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0,
                 k ? "bf16 GEMMs on tensor cores, fp32 master weights" : "fp32, no TF32", runtime / 1000,
                 runtime % 1000 / 10);
        if (getenv("FRAMECHAIN_CUDA_ROUTES"))  // a benchmark's log says which way it ran
            snprintf(g_description[k] + strlen(g_description[k]) - 1, sizeof g_description[k] - strlen(g_description[k]) + 1,
                     ", routes %s)", routes_text(!k));
        fill_table(&cuda_backend[k], k);
        const char *missing = backend_missing_op(&cuda_backend[k]);
        if (missing) {
            snprintf(reason, sizeof reason, "%s found, but this build's CUDA backend has no kernel for '%s' yet",
                     prop.name, missing);
            if (why) *why = reason;
            return NULL;
        }
    }
    ready = 1;
    return &cuda_backend[bf16 ? 1 : 0];
}

extern "C" const Backend *backend_cuda(const char **why) { return backend_cuda_precision(1, why); }
