// cuda_emu_runtime.cpp: the CUDA runtime and cuBLAS calls the backend makes, on the CPU, for the
// emulation build (cuda_emu.h). Device memory is host memory; the default stream's work runs when
// it is issued, a non-blocking stream's copies when something waits for them ("streams and
// events" below); the devices it reports are sm_89 cards (an RTX 4090: the RTX 3090's limits, 99 KiB
// of shared memory a block at most, the smallest opt-in of the GPUs framechain targets, and fp8
// tensor cores), two of them, so that ranks of one machine each take their own ("devices and host
// threads" below). GEMMs run through OpenBLAS: bf16 and fp8 operands are widened to fp32 (exactly) and
// multiplied with fp32 accumulation, as the tensor cores do.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda_emu.h"

void fc_emu_allow_smem(const void *kernel, int bytes);

#define EMU_SMEM_OPTIN 101376  // sm_86 and sm_89: 99 KiB of shared memory per block at most

// ----------------------------------------------------------------------------
// devices and host threads
//
// A host thread starts on GPU 0 and stays on the GPU its last cudaSetDevice chose; its first call
// that works on a GPU opens that GPU's context for the process (several hundred MiB of that GPU's
// memory). framechain is one GPU a process (a rank), so a second GPU's context is always a bug: a
// thread that forgot cudaSetDevice (the checkpoint writer, a loader) working for a rank on GPU 1
// opens a context on GPU 0, and every rank's does: the first GPU fills up on a machine of eight. The
// emulation stops the program at that call. FRAMECHAIN_EMU_GPUS sets how many it reports (1 to 8).

static thread_local int t_device;               // this host thread's current GPU
static std::atomic<int> g_context_device{-1};  // the GPU whose context the process opened (-1: none yet)

static int emu_gpu_count(void) {
    static int count;
    if (!count) {
        const char *env = getenv("FRAMECHAIN_EMU_GPUS");
        int n = env ? atoi(env) : 2;
        if (n < 1 || n > 8) fc_die("FRAMECHAIN_EMU_GPUS=%s: the CUDA emulation reports 1 to 8 GPUs", env);
        count = n;
    }
    return count;
}

// A call of this thread that works on its current GPU (call: what it is, for the message).
static void on_device(const char *call) {
    int expected = -1;
    if (g_context_device.compare_exchange_strong(expected, t_device) || expected == t_device) return;
    fc_die("CUDA emulation: %s on GPU %d from a host thread that did not select this process's GPU %d: the CUDA "
           "runtime opens a second context there, on a GPU another rank may use (hint: cudaSetDevice(%d) in "
           "this thread first: the current GPU is per host thread)",
           call, t_device, expected, expected);
}

// ----------------------------------------------------------------------------
// streams and events
//
// Work on the legacy default stream (0: kernels, GEMMs, cudaMemcpy, cudaMemset) runs when it is
// issued. A copy on a non-blocking stream is held until something waits for that stream
// (cudaStreamSynchronize, cudaDeviceSynchronize, cudaFree, or the default stream waiting for an
// event recorded on it): the latest moment a GPU may run it, so a caller that reads its
// destination before waiting gets what a GPU could give it. A GPU may also run such a copy before
// the default stream's work issued ahead of it, unless the stream waits for an event recorded after
// that work: a copy without that order stops the program, as a race. And until the thread that
// issued a copy has waited for it, the copy's source must not change: the default stream's work
// may not write it, even after another thread's wait ran the copy (a GPU's copy may take longer
// than this thread's next kernels; the emulation does not follow the threads' own locks, so it
// asks the issuing thread to wait). Each piece of default-stream work compares the sources of the
// copies so watched with what they held at the issue; a change stops the program.

struct EmuCopy {
    void *dst;
    const void *src;
    size_t count;
    std::thread::id issuer;
    std::vector<unsigned char> issued;  // the source's bytes at the issue, while watched
};
struct EmuStream {
    bool nonblocking;
    unsigned long ordered;      // the default stream's work counter this stream has waited for
    std::vector<EmuCopy> held;  // copies issued, not yet run
};
struct EmuEvent {
    EmuStream *stream;     // where it was recorded (NULL: the default stream)
    unsigned long covers;  // the default stream's work counter when it was recorded
};
static std::atomic<unsigned long> g_default_work;  // work issued on the default stream so far
static std::recursive_mutex g_streams_mutex;      // the checkpoint writer's thread waits too
static std::vector<EmuStream *> g_streams;
static std::vector<EmuCopy> g_watched;  // copies whose issuing thread has not waited for them yet

static void check_unchanged(const EmuCopy &c) {
    if (memcmp(c.src, c.issued.data(), c.count))
        fc_die("CUDA emulation: the source of a %zu-byte copy on a non-blocking stream was written on the "
               "default stream before the thread that issued the copy waited for it (hint: "
               "cudaStreamSynchronize on the copy's stream first): a GPU may still be copying it",
               c.count);
}
static void default_stream_work(const char *call) {
    on_device(call);
    g_default_work++;
    std::lock_guard<std::recursive_mutex> lock(g_streams_mutex);
    for (const EmuStream *s : g_streams)
        for (const EmuCopy &c : s->held) check_unchanged(c);
    for (const EmuCopy &c : g_watched) check_unchanged(c);
}
void fc_emu_default_stream_work(void) { default_stream_work("a kernel launch"); }  // cuda_emu.cpp

// The held copies of stream s run (by a wait of this thread); those this thread issued are no
// longer watched, the others are until their issuer waits.
static void run_held(EmuStream *s) {
    std::lock_guard<std::recursive_mutex> lock(g_streams_mutex);
    std::thread::id me = std::this_thread::get_id();
    for (EmuCopy &c : s->held) {
        memmove(c.dst, c.src, c.count);
        if (c.issuer != me) g_watched.push_back(std::move(c));
    }
    s->held.clear();
    for (size_t i = 0; i < g_watched.size();)
        if (g_watched[i].issuer == me) g_watched.erase(g_watched.begin() + i);
        else i++;
}
// Every held copy runs, and none is watched any longer (cudaDeviceSynchronize, cudaFree: the
// device is idle, and a freed source must not be read).
static void run_all_held(void) {
    std::lock_guard<std::recursive_mutex> lock(g_streams_mutex);
    for (EmuStream *s : g_streams) run_held(s);
    g_watched.clear();
}

extern "C" {

cudaError_t cudaMalloc(void **ptr, size_t size) {
    on_device("cudaMalloc");
    *ptr = aligned_alloc(256, (size + 255) / 256 * 256);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *ptr) {
    on_device("cudaFree");
    run_all_held();  // cudaFree waits for the device
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeHost(void *ptr) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    default_stream_work("cudaMemcpy");
    memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) {
    EmuStream *st = (EmuStream *)s;
    on_device("cudaMemcpyAsync");
    if (!st || !st->nonblocking) {  // the default stream, or a blocking stream that runs in its order
        default_stream_work("cudaMemcpyAsync");
        memmove(dst, src, count);
        return cudaSuccess;
    }
    if (st->ordered < g_default_work)
        fc_die("CUDA emulation: a copy of %zu bytes on a non-blocking stream is not ordered after the default "
               "stream's work before it (hint: cudaEventRecord on stream 0, then cudaStreamWaitEvent on this "
               "stream): a GPU may run it first",
               count);
    std::lock_guard<std::recursive_mutex> lock(g_streams_mutex);
    const unsigned char *bytes = (const unsigned char *)src;
    st->held.push_back(
        {dst, src, count, std::this_thread::get_id(), std::vector<unsigned char>(bytes, bytes + count)});
    return cudaSuccess;
}
cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    default_stream_work("cudaMemset");
    memset(ptr, value, count);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    on_device("cudaDeviceSynchronize");
    run_all_held();
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    on_device("cudaStreamCreateWithFlags");
    std::lock_guard<std::recursive_mutex> lock(g_streams_mutex);
    EmuStream *s = new EmuStream{(flags & cudaStreamNonBlocking) != 0, 0, {}};
    g_streams.push_back(s);
    *stream = (cudaStream_t)s;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    on_device("cudaEventCreateWithFlags");
    *event = (cudaEvent_t) new EmuEvent{NULL, 0};
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    on_device("cudaEventRecord");
    EmuEvent *e = (EmuEvent *)event;
    e->stream = (EmuStream *)stream, e->covers = g_default_work;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    on_device("cudaStreamWaitEvent");
    EmuStream *st = (EmuStream *)stream;
    EmuEvent *e = (EmuEvent *)event;
    if (!e->stream && st) st->ordered = std::max(st->ordered, e->covers);  // after the default stream's work
    if (e->stream && !st) run_held(e->stream);  // the default stream after that stream's copies
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    on_device("cudaStreamSynchronize");
    if (stream) run_held((EmuStream *)stream);
    return cudaSuccess;
}
// A bad launch stops the program where it happens (fc_emu_run_grid), so none is pending here.
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t error) {
    return error == cudaSuccess ? "no error" : error == cudaErrorMemoryAllocation ? "out of memory" : "error";
}
cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *version) {
    *version = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *count) {
    *count = emu_gpu_count();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu_gpu_count()) return cudaErrorInvalidDevice;
    t_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= emu_gpu_count()) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulation on the CPU");
    prop->major = 8, prop->minor = 9;
    prop->totalGlobalMem = (size_t)24 << 30;
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->multiProcessorCount = 1;
    prop->maxThreadsPerMultiProcessor = 1536;  // an sm_89 card's (RTX 4090)
    prop->sharedMemPerMultiprocessor = 100 << 10;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    on_device("cudaFuncSetAttribute");
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    if (value > EMU_SMEM_OPTIN) return cudaErrorInvalidValue;  // as an sm_86 or sm_89 card answers
    fc_emu_allow_smem(func, value);
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// cuBLAS: column-major GEMMs

struct cublasContext {
    cublasPointerMode_t pointer_mode;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    on_device("cublasCreate");
    *handle = new cublasContext{CUBLAS_POINTER_MODE_HOST};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

static CBLAS_TRANSPOSE cblas_op(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

// The checks cuBLAS makes on the shapes (status INVALID_VALUE), then C = alpha op(A) op(B) + beta C.
static cublasStatus_t sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc) {
    if (h->pointer_mode != CUBLAS_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
        ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    cblas_sgemm(CblasColMajor, cblas_op(ta), cblas_op(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    default_stream_work("a cuBLAS call");
    return sgemm(h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

// A (rows, cols) column-major bf16 matrix with leading dimension ld, widened to fp32 with the same
// ld; only the rows in use are read (the rest of each column may lie beyond the allocation).
static float *widen(const void *src, int rows, int ld, int cols) {
    const __nv_bfloat16 *s = (const __nv_bfloat16 *)src;
    size_t n = (size_t)std::max(ld, 0) * std::max(cols, 0);
    float *d = (float *)calloc(n ? n : 1, sizeof(float));
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows && r < ld; r++) d[(size_t)c * ld + r] = __bfloat162float(s[(size_t)c * ld + r]);
    return d;
}

// The same for a matrix of E4M3 or E5M2 bytes (cuda_fp8.h's conversion: every fp8 value is a float).
static float *widen_fp8(const void *src, int rows, int ld, int cols, bool e5m2) {
    const __nv_fp8_e4m3 *s4 = (const __nv_fp8_e4m3 *)src;
    const __nv_fp8_e5m2 *s5 = (const __nv_fp8_e5m2 *)src;
    size_t n = (size_t)std::max(ld, 0) * std::max(cols, 0);
    float *d = (float *)calloc(n ? n : 1, sizeof(float));
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows && r < ld; r++) {
            size_t i = (size_t)c * ld + r;
            d[i] = e5m2 ? (float)s5[i] : (float)s4[i];
        }
    return d;
}

// One GEMM of bf16 A and B into fp32 C (cublasGemmEx's one combination the backend uses).
static cublasStatus_t gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const void *alpha, const void *A, int lda, const void *B, int ldb, const void *beta,
                                void *C, int ldc) {
    float *a = widen(A, ta == CUBLAS_OP_N ? m : k, lda, ta == CUBLAS_OP_N ? k : m);
    float *b = widen(B, tb == CUBLAS_OP_N ? k : n, ldb, tb == CUBLAS_OP_N ? n : k);
    cublasStatus_t st = sgemm(h, ta, tb, m, n, k, *(const float *)alpha, a, lda, b, ldb, *(const float *)beta,
                              (float *)C, ldc);
    free(a), free(b);
    return st;
}

static bool bf16_types(cudaDataType Atype, cudaDataType Btype, cudaDataType Ctype, cublasComputeType_t compute) {
    return Atype == CUDA_R_16BF && Btype == CUDA_R_16BF && Ctype == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    default_stream_work("a cuBLAS call");
    if (!bf16_types(Atype, Btype, Ctype, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_bf16(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// One GEMM of bf16 A and B into bf16 C (the attn_gemm route's attention output): computed in fp32
// as above, then rounded to nearest even; beta 0 only (the backend never adds into a bf16 C).
static cublasStatus_t gemm_bf16_out(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                    int k, const void *alpha, const void *A, int lda, const void *B, int ldb,
                                    const void *beta, void *C, int ldc) {
    if (*(const float *)beta != 0.0f) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    float *c = (float *)calloc((size_t)std::max(m, 1) * std::max(n, 1), sizeof(float));
    cublasStatus_t st = gemm_bf16(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, c, std::max(m, 1));
    if (st == CUBLAS_STATUS_SUCCESS)
        for (int col = 0; col < n; col++)
            for (int r = 0; r < m; r++)
                ((__nv_bfloat16 *)C)[(size_t)col * ldc + r] = __float2bfloat16_rn(c[(size_t)col * m + r]);
    free(c);
    return st;
}

// The pointer arrays live in device memory (here: the host's), one GEMM per entry; C fp32 or bf16.
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *const A[], cudaDataType Atype, int lda,
                                   const void *const B[], cudaDataType Btype, int ldb, const void *beta,
                                   void *const C[], cudaDataType Ctype, int ldc, int batch,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    default_stream_work("a cuBLAS call");
    int c16 = Ctype == CUDA_R_16BF;
    if (!bf16_types(Atype, Btype, c16 ? CUDA_R_32F : Ctype, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t st = (c16 ? gemm_bf16_out : gemm_bf16)(h, ta, tb, m, n, k, alpha, A[i], lda, B[i], ldb, beta,
                                                              C[i], ldc);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// ----------------------------------------------------------------------------
// cuBLASLt: the subset the linear layer uses (cuda/linear.cu): bf16 A and B, fp32 C and D, fp32
// compute and scale, the default, bias, GELU_AUX(_BIAS) and DGELU epilogues (the GELU in its tanh
// form, in float; the aux matrix fp32, D's shape, its leading dimension a multiple of 8). And fp8:
// E4M3 or E5M2 A and B (not both E5M2), each with its scale factor in device memory
// (A_SCALE_POINTER, B_SCALE_POINTER; 1 when not set), under the rules cuBLAS's documentation gives
// its fp8 kernels on sm_89 and sm_90: A transposed and B not, leading dimensions and pointers on 16
// bytes, an fp32 D with a bf16 bias; D = scale_A scale_B alpha op(A) op(B) + bias, the products of
// the widened bytes summed in fp32. An H200 with CUDA 13.0's cuBLASLt refused every such GEMM of
// test_cuda (2026-11-29) for a reason these rules do not know yet: test_cuda's cuda_fp8_probe line
// shows on a card which of the configuration's neighbours it takes, the rule to add here.
// Descriptors keep their state in the library's own opaque storage. The heuristic offers one algorithm, which remembers what it was
// chosen for (the problem and the minimum alignments of the preference); a matmul it does not fit
// is refused (INVALID_VALUE), and an operand less aligned than the algorithm was chosen for stops
// the program, as the kernel would fault on a GPU. Attributes and types the backend does not use
// answer NOT_SUPPORTED.

struct cublasLtContext {
    int unused;
};

namespace {
struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t ta, tb;
    uint32_t epilogue;
    int32_t bias_type;  // -1: D's type
    const void *bias;
    const void *aux;
    int64_t aux_ld;
    const float *scale_a, *scale_b;  // fp8 A and B: device pointers to their scale factors (NULL: 1)
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct EmuLtPref {
    uint64_t workspace;
    uint32_t align[4];  // A, B, C, D: bytes
};
struct EmuLtAlgo {
    uint64_t magic;
    int32_t ta, tb;
    uint32_t epilogue;
    uint64_t m, n, k;
    uint32_t align[4];
};
const uint64_t EMU_LT_ALGO_MAGIC = 0x656d754c74416c67ull;
const uintptr_t EMU_LT_BIAS_ALIGN = 16;  // fused-bias kernels read the bias vector in 16-byte pieces
const uintptr_t EMU_LT_AUX_ALIGN = 16;   // and the GELU epilogues' aux matrix in 16-byte pieces

bool lt_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

bool lt_bias_epilogue(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool lt_aux_epilogue(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
bool lt_known_epilogue(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || lt_bias_epilogue(e) || lt_aux_epilogue(e);
}

// GELU in its tanh form, x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3), and its derivative.
float emu_gelu_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
float emu_gelu(float x) { return x * emu_gelu_sigmoid(x); }
float emu_gelu_grad(float x) {
    float s = emu_gelu_sigmoid(x);
    return s + 2.0f * x * s * (1.0f - s) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename T, typename O>
T *lt_state(O *opaque) {
    static_assert(sizeof(T) <= sizeof(opaque->data), "the state fits the opaque storage");
    return reinterpret_cast<T *>(opaque->data);
}
template <typename T>
cublasStatus_t lt_get(T *dst, const void *buf, size_t size) {
    if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, sizeof(T));
    return CUBLAS_STATUS_SUCCESS;
}

// The test hook's state (fc_emu_cublaslt_hook).
int g_lt_refuse;
long g_lt_products, g_lt_gelu_products[2];  // all; with GELU_AUX(_BIAS) and with DGELU
long g_lt_fp8_products;                     // with fp8 A and B

// Types and shapes of D = alpha op(A) op(B) + beta C (+ bias): NOT_SUPPORTED for what the backend
// does not use, INVALID_VALUE for a problem that does not fit together, as cuBLASLt answers.
cublasStatus_t lt_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, uint64_t *m, uint64_t *n, uint64_t *k) {
    if (!desc || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
    const EmuLtDesc *s = lt_state<EmuLtDesc>(desc);
    const EmuLtLayout *A = lt_state<EmuLtLayout>(a), *B = lt_state<EmuLtLayout>(b), *C = lt_state<EmuLtLayout>(c),
                      *D = lt_state<EmuLtLayout>(d);
    bool fp8 = lt_fp8(A->type) && lt_fp8(B->type) && !(A->type == CUDA_R_8F_E5M2 && B->type == CUDA_R_8F_E5M2);
    if (s->compute != CUBLAS_COMPUTE_32F || s->scale != CUDA_R_32F || (!fp8 && A->type != CUDA_R_16BF) ||
        (!fp8 && B->type != CUDA_R_16BF) || C->type != CUDA_R_32F || D->type != CUDA_R_32F ||
        !lt_known_epilogue(s->epilogue) ||
        (lt_bias_epilogue(s->epilogue) && !fp8 && s->bias_type != -1 && s->bias_type != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // fp8 (sm_89, sm_90): "TN" only, no GELU epilogues here, a bf16 bias with the fp32 D, leading
    // dimensions of multiples of 16 bytes; scale factors only on fp8 operands
    if (fp8 && (s->ta != CUBLAS_OP_T || s->tb != CUBLAS_OP_N || lt_aux_epilogue(s->epilogue) ||
                (lt_bias_epilogue(s->epilogue) && s->bias_type != CUDA_R_16BF) || A->ld % 16 || B->ld % 16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!fp8 && (s->scale_a || s->scale_b)) return CUBLAS_STATUS_INVALID_VALUE;
    *m = D->rows, *n = D->cols, *k = s->ta == CUBLAS_OP_N ? A->cols : A->rows;
    uint64_t am = s->ta == CUBLAS_OP_N ? A->rows : A->cols;
    uint64_t bk = s->tb == CUBLAS_OP_N ? B->rows : B->cols, bn = s->tb == CUBLAS_OP_N ? B->cols : B->rows;
    for (const EmuLtLayout *l : {A, B, C, D})
        if (l->ld < (int64_t)std::max<uint64_t>(1, l->rows)) return CUBLAS_STATUS_INVALID_VALUE;
    if (am != *m || bk != *k || bn != *n || C->rows != D->rows || C->cols != D->cols || C->ld != D->ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lt_bias_epilogue(s->epilogue) && !s->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (lt_aux_epilogue(s->epilogue) && (!s->aux || s->aux_ld % 8 || s->aux_ld < (int64_t)*m))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

void lt_check_align(const char *what, const void *p, uint32_t align) {
    if ((uintptr_t)p % align)
        fc_die("CUDA emulation: cublasLtMatmul: %s at %p is not on the %u bytes its algorithm was chosen for "
               "(a GPU kernel would fault or misread)",
               what, p, align);
}
}  // namespace

extern "C" {

// A test hook (tests/cuda/test_cuda.c links it weakly): from now on the heuristic finds no algorithm
// (mode 1) or cublasLtMatmul answers NOT_SUPPORTED (mode 2), as cuBLASLt does for a configuration
// it has no kernel for; mode 0: back to normal; a negative mode changes nothing. Returns the number
// of products cublasLtMatmul has computed so far.
long fc_emu_cublaslt_hook(int mode) {
    if (mode >= 0) g_lt_refuse = mode;
    return g_lt_products;
}
// Another test hook: the products computed so far with the GELU epilogue (backward 0) or DGELU (1).
long fc_emu_cublaslt_gelu_products(int backward) { return g_lt_gelu_products[backward != 0]; }
// And those with fp8 A and B (the fp8 routes).
long fc_emu_cublaslt_fp8_products(void) { return g_lt_fp8_products; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    on_device("cublasLtCreate");
    *handle = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    *desc = new cublasLtMatmulDescOpaque_t();
    *lt_state<EmuLtDesc>(*desc) = EmuLtDesc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, -1,
                                            NULL, NULL, 0, NULL, NULL};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    EmuLtDesc *s = lt_state<EmuLtDesc>(desc);
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return lt_get(&s->ta, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return lt_get(&s->tb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return lt_get(&s->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return lt_get(&s->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return lt_get(&s->bias_type, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return lt_get(&s->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return lt_get(&s->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return lt_get(&s->scale_a, buf, size);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return lt_get(&s->scale_b, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated: the backend does not set it
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    *layout = new cublasLtMatrixLayoutOpaque_t();
    *lt_state<EmuLtLayout>(*layout) = EmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    *pref = new cublasLtMatmulPreferenceOpaque_t();
    *lt_state<EmuLtPref>(*pref) = EmuLtPref{0, {256, 256, 256, 256}};  // cuBLASLt's defaults
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    EmuLtPref *s = lt_state<EmuLtPref>(pref);
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return lt_get(&s->workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return lt_get(&s->align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return lt_get(&s->align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return lt_get(&s->align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return lt_get(&s->align[3], buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (requested <= 0 || !pref) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    cublasStatus_t st = lt_problem(desc, a, b, c, d, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (g_lt_refuse == 1) return CUBLAS_STATUS_NOT_SUPPORTED;  // the test hook: no kernel for this
    const EmuLtDesc *s = lt_state<EmuLtDesc>(desc);
    const EmuLtPref *p = lt_state<EmuLtPref>(pref);
    for (uint32_t al : p->align)
        if (al == 0 || (al & (al - 1))) return CUBLAS_STATUS_INVALID_VALUE;
    memset(&results[0], 0, sizeof results[0]);
    EmuLtAlgo *algo = lt_state<EmuLtAlgo>(&results[0].algo);
    *algo = EmuLtAlgo{EMU_LT_ALGO_MAGIC, s->ta, s->tb, s->epilogue, m, n, k,
                      {p->align[0], p->align[1], p->align[2], p->align[3]}};
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    default_stream_work("a cuBLAS call");
    uint64_t m, n, k;
    cublasStatus_t st = lt_problem(desc, a, b, c, d, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo) return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated: the backend always passes the heuristic's
    const EmuLtDesc *s = lt_state<EmuLtDesc>(desc);
    const EmuLtAlgo *al = lt_state<EmuLtAlgo>(const_cast<cublasLtMatmulAlgo_t *>(algo));
    if (al->magic != EMU_LT_ALGO_MAGIC || al->ta != s->ta || al->tb != s->tb || al->epilogue != s->epilogue ||
        al->m != m || al->n != n || al->k != k)
        return CUBLAS_STATUS_INVALID_VALUE;  // an algorithm found for another problem
    if (g_lt_refuse == 2) return CUBLAS_STATUS_NOT_SUPPORTED;  // the test hook
    lt_check_align("A", A, al->align[0]), lt_check_align("B", B, al->align[1]);
    lt_check_align("C", C, al->align[2]), lt_check_align("D", D, al->align[3]);
    if (lt_bias_epilogue(s->epilogue)) lt_check_align("the bias vector", s->bias, EMU_LT_BIAS_ALIGN);
    if (lt_aux_epilogue(s->epilogue)) lt_check_align("the epilogue's aux matrix", s->aux, EMU_LT_AUX_ALIGN);
    const EmuLtLayout *la = lt_state<EmuLtLayout>(a), *lb = lt_state<EmuLtLayout>(b), *lc = lt_state<EmuLtLayout>(c);
    float fa = *(const float *)alpha, fb = *(const float *)beta, *dst = (float *)D;
    const float *src = (const float *)C;
    int64_t ld = lc->ld;
    bool fp8 = lt_fp8(la->type);
    if (fp8) {  // the scale factors multiply alpha (the kernels' fp32 epilogue: scale_A scale_B alpha)
        lt_check_align("A", A, 16), lt_check_align("B", B, 16);
        if (s->scale_a) fa *= *s->scale_a;
        if (s->scale_b) fa *= *s->scale_b;
    }
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    // beta C into D first (beta 0: C is not read), then D += alpha op(A) op(B), then the bias per row of D.
    for (uint64_t j = 0; j < n; j++)
        for (uint64_t i = 0; i < m; i++) dst[i + j * ld] = fb == 0.0f ? 0.0f : fb * src[i + j * ld];
    if (k > 0) {
        float *wa = fp8 ? widen_fp8(A, (int)la->rows, (int)la->ld, (int)la->cols, la->type == CUDA_R_8F_E5M2)
                        : widen(A, (int)la->rows, (int)la->ld, (int)la->cols);
        float *wb = fp8 ? widen_fp8(B, (int)lb->rows, (int)lb->ld, (int)lb->cols, lb->type == CUDA_R_8F_E5M2)
                        : widen(B, (int)lb->rows, (int)lb->ld, (int)lb->cols);
        cblas_sgemm(CblasColMajor, cblas_op((cublasOperation_t)s->ta), cblas_op((cublasOperation_t)s->tb), (int)m,
                    (int)n, (int)k, fa, wa, (int)la->ld, wb, (int)lb->ld, 1.0f, dst, (int)ld);
        free(wa), free(wb);
    }
    if (lt_bias_epilogue(s->epilogue)) {  // fp32, or bf16 with fp8 A and B
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++)
                dst[i + j * ld] +=
                    fp8 ? __bfloat162float(((const __nv_bfloat16 *)s->bias)[i]) : ((const float *)s->bias)[i];
    }
    if (fp8) g_lt_fp8_products++;
    if (lt_aux_epilogue(s->epilogue)) {  // GELU: aux = D, D = GELU(D); DGELU: D *= GELU'(aux)
        float *aux = (float *)const_cast<void *>(s->aux);
        bool dgelu = s->epilogue == CUBLASLT_EPILOGUE_DGELU;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float &v = dst[i + j * ld], &a = aux[i + j * s->aux_ld];
                if (dgelu) v *= emu_gelu_grad(a);
                else a = v, v = emu_gelu(v);
            }
        g_lt_gelu_products[dgelu]++;
    }
    g_lt_products++;
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
