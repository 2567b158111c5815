// cuda_common.cuh: what every kernel file of the CUDA backend shares: error checks that name the
// file and line, the cuBLAS and cuBLASLt handles, per-family scratch buffers, and the registration functions
// through which each file fills in its part of the op table.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/backend.h"
}

#define cudaCheck(call) fc_cuda_check((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) fc_cublas_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad launch configuration is reported where it happened.
#define kernelCheck() fc_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline void fc_cuda_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess)
        fc_die("CUDA error at %s:%d: %s: %s (hint: check nvidia-smi and the driver version)", file, line, what,
               cudaGetErrorString(err));
}
// A cuBLAS status by its name (the number where it has none here).
static inline const char *fc_cublas_status_name(cublasStatus_t st) {
    switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "LICENSE_ERROR";
    default: return "(unknown status)";
    }
}
static inline void fc_cublas_check(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS)
        fc_die("cuBLAS error at %s:%d: %s: status %d %s (hint: an unsupported shape or an old cuBLAS)", file, line,
               what, (int)st, fc_cublas_status_name(st));
}

static inline unsigned fc_cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Kernels over n independent elements: FLAT_THREADS a block, at most FLAT_MAX_BLOCKS blocks, and a
// grid-stride loop for the rest.
#define FLAT_THREADS 256
#define FLAT_MAX_BLOCKS 4096
static inline unsigned flat_grid(size_t n) {
    unsigned b = fc_cdiv(n, FLAT_THREADS);
    return b < FLAT_MAX_BLOCKS ? b : FLAT_MAX_BLOCKS;
}
#define GRID_STRIDE_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// Operands (backend.h): float on "cuda-fp32", bf16 on "cuda". A kernel that writes or reads one is a
// template on its type; these store and load it as float (bf16: rounded to nearest even).
static __device__ __forceinline__ void op_store(float *p, float v) { *p = v; }
static __device__ __forceinline__ void op_store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
static __device__ __forceinline__ float op_load(const float *p) { return *p; }
static __device__ __forceinline__ float op_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
// Four consecutive values with one store; p aligned to four of them (op_aligned4).
static __device__ __forceinline__ void op_store4(float *p, float4 v) { *(float4 *)p = v; }
static __device__ __forceinline__ void op_store4(__nv_bfloat16 *p, float4 v) {
    __align__(8) __nv_bfloat162 h[2];
    h[0] = __floats2bfloat162_rn(v.x, v.y), h[1] = __floats2bfloat162_rn(v.z, v.w);
    *(uint2 *)p = *(const uint2 *)h;
}
template <typename OpT>
static inline bool op_aligned4(const void *p) { return (uintptr_t)p % (4 * sizeof(OpT)) == 0; }

// A float sum with Neumaier's compensation: s is the float sum of the terms, c the sum of the
// rounding errors of those additions, each found exactly (two-sum), so s + c is the sum of a few
// thousand terms to about double's accuracy, even where they cancel, at float speed: the column
// sums of the backward, where doubles would run at 1/64 of the float rate on a GeForce card. The
// __f*_rn intrinsics keep nvcc from contracting or reordering the error terms. An aggregate
// (no constructor, so that it may live in shared memory): start one at COMP_SUM_ZERO.
struct CompSum {
    float s, c;
    __device__ __forceinline__ void add(float x) {
        float t = __fadd_rn(s, x);
        float e = fabsf(s) >= fabsf(x) ? __fadd_rn(__fsub_rn(s, t), x) : __fadd_rn(__fsub_rn(x, t), s);
        c = __fadd_rn(c, e);
        s = t;
    }
    __device__ __forceinline__ void merge(const CompSum &o) {
        add(o.s);
        c = __fadd_rn(c, o.c);
    }
    __device__ __forceinline__ float value() const { return __fadd_rn(s, c); }
};
#define COMP_SUM_ZERO {0.f, 0.f}

// out[s * ostride + d] = (add: +=) sum over n < N of a[s, n, d] * (b ? b[s, n, d] : 1), a and b
// (S, N, D); a16, when not NULL, gets a in bf16. Deterministic; N = 0 gives 0 (colsum.cu).
// amax, when not NULL (with a16), gets each block's largest |a16| (a NaN as inf), in
// fc_cuda_colsum_blocks(S, N, D) floats: the fp8 routes' scale of a16 without a pass of their own.
void fc_cuda_colsum(float *out, long ostride, int add, __nv_bfloat16 *a16, float *amax, const float *a,
                    const float *b, int S, int N, int D, const char *op);
int fc_cuda_colsum_blocks(int S, int N, int D);

// Scratch memory owned by the backend, one buffer per user so that two op families never
// share one; grows on demand (the device is synchronised first), never shrinks.
enum {
    SCRATCH_LINEAR, SCRATCH_ELEMENTWISE, SCRATCH_NORM, SCRATCH_ATTN, SCRATCH_OPTIM,
    SCRATCH_BF16_W, SCRATCH_BF16_A, SCRATCH_BF16_B,  // bf16 operands of one GEMM (bf16.cu)
    SCRATCH_ATTN_DS,  // attention's stored dS and its dQ GEMM's pointers (attention_tc.cu)
    SCRATCH_COLSUM,   // the chunks' sums of a column sum (colsum.cu)
    SCRATCH_CONV,     // a convolution's im2col tile (conv.cu)
    SCRATCH_FP8_A, SCRATCH_FP8_W, SCRATCH_FP8_MAX,  // the fp8_fwd route's operands and maxima (fp8.cu)
    SCRATCH_FP8_DY,   // the backward's dy maxima from its bias pass (linear.cu, colsum.cu)
    SCRATCH_COUNT
};
void *fc_cuda_scratch(int which, size_t bytes);
// The one cuBLAS handle (fp32 math, no TF32: results comparable with the CPU backend).
cublasHandle_t fc_cublas(void);
// The handle for bf16 GEMMs on tensor cores (fp32 accumulation; no atomics either).
cublasHandle_t fc_cublas_bf16(void);
// The cuBLASLt handle: the bf16 linear forward with its bias in the GEMM's epilogue (linear.cu).
cublasLtHandle_t fc_cublaslt(void);
// Device memory, counted towards the peak (backend_cuda.cu).
void *fc_cuda_alloc(size_t bytes);
void fc_cuda_free(void *ptr);

// bf16 operands (bf16.cu). fc_bf16_weights: w (n) as bf16, from the mirror of a registered
// parameter allocation when w lies in one; fc_bf16_operand: x (n) converted into scratch `which`
// (SCRATCH_BF16_A or _B). fc_cuda_weights_touched: bytes at dst may have changed (the ops that
// write backend memory call it, so a mirror is rebuilt before it is read again).
const __nv_bfloat16 *fc_bf16_weights(const float *w, size_t n);
const __nv_bfloat16 *fc_bf16_operand(const float *x, size_t n, int which);
// The heads of a (rows, ld) fp32 matrix, head p at columns p*dh .. p*dh+dh-1, as (nheads, rows, dh)
// bf16 in scratch `which` (bf16.cu); dh a multiple of 8.
const __nv_bfloat16 *fc_bf16_heads(const float *src, long rows, long ld, int nheads, int dh, int which);
void fc_cuda_weights_touched(const void *dst, size_t bytes);
// For an op that writes the parameters at p (n) and, in the same pass, their bf16 mirror (the
// optimizer): the mirror at the same offsets, or NULL where p lies in no registered allocation or
// its mirror is stale already (the op then calls fc_cuda_weights_touched instead).
__nv_bfloat16 *fc_bf16_mirror_to_write(const float *p, size_t n);

// GELU forward into an operand (bf16 != 0: bf16) and backward (elementwise.cu; the MLP's linears
// run them beside their GEMMs).
void fc_gelu_fwd(Operand *y, const real *x, size_t n, int bf16);
void fc_gelu_bwd(real *dx, const real *dy, const real *x, size_t n);

// Routes: a second way to run an op, chosen per process (FRAMECHAIN_CUDA_ROUTES, backend_cuda.cu). A
// route is the default only where hardware measured it faster (BENCHMARKS.md); make test-cuda checks
// both ways against the CPU (backend_cuda_set_route).
struct CudaRoutes {
    int dgelu_epilogue;  // the MLP's GELU backward in cuBLASLt's DGELU epilogue (linear.cu)
    int attn_gemm;       // long sequences' attention as batched GEMMs (attention_gemm.cu)
    int attn_short;      // short sequences' attention with a sequence in registers (attention_short.cu)
    int qk_norm_fused;   // the q/k norm's backward in one pass over its inputs (norm.cu)
    int ln_mod_fused;    // the modulated LayerNorm's backward in one pass over its inputs (norm.cu)
    int adam8_warp;      // the 8-bit AdamW with a warp per quantisation block (optim.cu)
    int fp8_fwd;         // the bf16 linear forward's GEMM on E4M3 operands, where cuBLASLt has one (linear.cu)
    int fp8_dgrad;       // the backward's dx GEMM on E4M3 weights and E5M2 output gradients (linear.cu)
    int fp8_wgrad;       // the backward's dw GEMM on E4M3 inputs and E5M2 output gradients (linear.cu)
};
extern CudaRoutes fc_routes;
// The calls each route has taken, for tests (backend_cuda_route_calls).
struct CudaRouteCalls {
    long attn_short, qk_norm_fused, ln_mod_fused, adam8_warp, fp8_fwd, fp8_dgrad, fp8_wgrad;
    long fp8_dy_scale;  // linear backwards whose dy scale (fp8_dgrad, fp8_wgrad) came from the bias pass
    long fp8_amax;      // the fp8 routes' passes over an operand for its maximum (fp8.cu)
};
extern CudaRouteCalls fc_route_calls;
// The GPU's multiprocessors (backend_cuda.cu, at start), for grids sized to the card.
extern int fc_sm_count;
// The SM's most resident threads and shared memory (cudaDeviceProp): what a grid meant to be resident
// at once sizes itself by (0: not known).
extern int fc_sm_threads;
extern size_t fc_sm_smem;

// Each kernel file fills in its ops; bf16: the "cuda" table (bf16 operands), else "cuda-fp32".
void cuda_register_linear(Backend *be, int bf16);       // cuda/linear.cu: bf16 or fp32 GEMMs
void cuda_register_bf16(Backend *be);                   // cuda/bf16.cu: the weights' bf16 mirrors, operands
void cuda_register_elementwise(Backend *be, int bf16);  // cuda/elementwise.cu
void cuda_register_norm(Backend *be, int bf16);         // cuda/norm.cu
void cuda_register_attention(Backend *be);              // cuda/attention.cu: fp32 flash attention
void cuda_register_attention_tc(Backend *be);  // cuda/attention_tc.cu: bf16 on tensor cores (the "cuda" table)

// The fp8 routes' operands (fp8.cu): y (n) = x as E4M3 (e5m2: E5M2) bytes with one power-of-two
// scale for the tensor, scale[0] = 2^e (quantise) and scale[1] = 2^-e (dequantise), both in device
// memory; the same for x (rows, cols) written transposed, y (cols, rows); and a bias (n) in bf16, as
// cuBLASLt's fp8 kernels read it.
void fc_fp8_quantize(__nv_fp8_storage_t *y, float *scale, const __nv_bfloat16 *x, size_t n, int e5m2);
void fc_fp8_quantize_transposed(__nv_fp8_storage_t *y, float *scale, const __nv_bfloat16 *x, int rows, int cols,
                                int e5m2);
void fc_fp8_bias(__nv_bfloat16 *y, const float *b, size_t n);
// The scratch of the maximum's first pass (SCRATCH_FP8_MAX), whatever the operand's size.
size_t fc_fp8_max_scratch_bytes(void);
// fc_fp8_scale_from: scale[0..1] as fc_fp8_quantize makes them, from count partial maxima
// (fc_cuda_colsum's amax). fc_fp8_cast: y = x (rows, cols) in fp8 with scale[0], written as it is
// or transposed: the conversions of fc_fp8_quantize*, without their maximum's pass.
void fc_fp8_scale_from(float *scale, const float *partial, int count, int e5m2);
void fc_fp8_cast(__nv_fp8_storage_t *y, const float *scale, const __nv_bfloat16 *x, int rows, int cols,
                 int transposed, int e5m2);

// The head dimension D / H, or a clear death where no attention kernel has it (16, 32, 64, 128);
// and the backward pass's Dvec (n_seq, H, len) = rowwise dout . out per head, in scratch, out an
// operand (bf16 != 0: bf16). attention.cu.
int fc_attn_head_dim(int D, int H, const char *op);
const float *fc_attn_dvec(const float *dout, const Operand *out, AttnLayout lay, int D, int H, int bf16);
// The attn_gemm route (attention_gemm.cu), bf16 qkv and out: 0 where it does not take the shape (the
// caller then runs the flash kernels). fc_attn_ds_cap: the bytes of dS attention_tc.cu holds at once.
int fc_attn_gemm_fwd(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, AttnLayout lay, int D, int H);
int fc_attn_gemm_bwd(float *dqkv, const float *dout, const __nv_bfloat16 *qkv, const float *lse, const float *dvec,
                     AttnLayout lay, int D, int H);
size_t fc_attn_ds_cap(void);
// The attn_short route (attention_short.cu), either table (bf16 != 0: bf16 qkv and out): 0 where it
// does not take the call (the caller then runs its flash kernels).
int fc_attn_short_fwd(Operand *out, real *lse, const Operand *qkv, AttnLayout lay, int D, int H, int bf16);
int fc_attn_short_bwd(real *dqkv, const real *dout, const Operand *out, const Operand *qkv, const real *lse,
                      AttnLayout lay, int D, int H, int bf16);
void cuda_register_optim(Backend *be);        // cuda/optim.cu
void cuda_register_conv(Backend *be);         // cuda/conv.cu: the autoencoders' ops (forward, fp32)
