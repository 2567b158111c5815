// cuda_emu_runtime.cpp: the CUDA runtime and cuBLAS calls the backend makes, on the CPU, for the
// emulation build (cuda_emu.h). Device memory is host memory; streams and events are synchronous;
// the device it reports is an sm_86 card (an RTX 3090: the smallest shared-memory opt-in of the
// GPUs framechain targets, 99 KiB). GEMMs run through OpenBLAS: bf16 operands are widened to fp32
// (exactly) and multiplied with fp32 accumulation, as the tensor cores do.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_emu.h"

void fc_emu_allow_smem(const void *kernel, int bytes);

#define EMU_SMEM_OPTIN 101376  // sm_86 and sm_89: 99 KiB of shared memory per block at most

extern "C" {

cudaError_t cudaMalloc(void **ptr, size_t size) {
    *ptr = aligned_alloc(256, (size + 255) / 256 * 256);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *ptr) {
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaMalloc(ptr, size); }
cudaError_t cudaFreeHost(void *ptr) { return cudaFree(ptr); }
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) {
    memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    memset(ptr, value, count);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    static int token;
    *stream = (cudaStream_t)&token;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    static int token;
    *event = (cudaEvent_t)&token;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return cudaSuccess; }
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
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CUDA emulation on the CPU");
    prop->major = 8, prop->minor = 6;
    prop->totalGlobalMem = (size_t)24 << 30;
    prop->sharedMemPerBlock = 48 << 10;
    prop->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
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
    if (!bf16_types(Atype, Btype, Ctype, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_bf16(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The pointer arrays live in device memory (here: the host's), one GEMM per entry.
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *const A[], cudaDataType Atype, int lda,
                                   const void *const B[], cudaDataType Btype, int ldb, const void *beta,
                                   void *const C[], cudaDataType Ctype, int ldc, int batch,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (!bf16_types(Atype, Btype, Ctype, compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t st = gemm_bf16(h, ta, tb, m, n, k, alpha, A[i], lda, B[i], ldb, beta, C[i], ldc);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
