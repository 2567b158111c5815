// fp8.cu: operands of the fp8_fwd route (linear.cu): a bf16 matrix as E4M3 bytes with one scale for
// the whole tensor ("current scaling": the scale comes from this tensor's own absolute maximum, not
// from an earlier step's). The scale is a power of two, 2^e with e the largest integer that keeps
// absmax * 2^e within E4M3's largest value, 448: multiplying by it is exact, so each byte is the
// nearest E4M3 value (ties to even, cvt's satfinite) of the bf16 value times 2^e, and cuBLASLt's
// dequantisation factor 2^-e is exact too. A tensor whose maximum is not finite gets a NaN scale,
// so that an inf or NaN in it still reaches the GEMM's output as NaN.
//
// Three kernels on the default stream, no atomics (the same bytes on every run): each block's
// absolute maximum of a grid-stride slice into scratch, one block for the maximum of those and the
// scale, then the conversion. The scales live in device memory, where cuBLASLt reads them
// (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER): nothing waits on the host.
#include <cuda_fp8.h>

#include "cuda_common.cuh"

enum {
    FP8_THREADS = 256,
    FP8_MAX_BLOCKS = 1024,  // blocks of the maximum's first pass (their maxima: 4 KiB of scratch)
};
#define FP8_E4M3_MAX 448.0f

// Largest |x| of a block's threads; every thread of the block must call it. shared: FP8_THREADS floats.
static __device__ float block_max(float v, float *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = FP8_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    return shared[0];
}

// partial[block] = max |x[i]| over the block's grid-stride slice of x (n), a NaN counted as inf
// (fmaxf would drop it).
static __global__ void fp8_absmax_kernel(float *partial, const __nv_bfloat16 *x, size_t n) {
    __shared__ float shared[FP8_THREADS];
    float m = 0.0f;
    GRID_STRIDE_LOOP(i, n) {
        float a = fabsf(__bfloat162float(x[i]));
        m = a != a ? INFINITY : fmaxf(m, a);
    }
    float b = block_max(m, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = b;
}

// scale[0] = 2^e (quantise), scale[1] = 2^-e (dequantise, cuBLASLt's scale pointer) from the
// maximum of partial (count); a zero tensor gets 1 and 1, a non-finite maximum NaN and NaN.
static __global__ void fp8_scale_kernel(float *scale, const float *partial, int count) {
    __shared__ float shared[FP8_THREADS];
    float m = 0.0f;
    for (int i = threadIdx.x; i < count; i += FP8_THREADS) m = fmaxf(m, partial[i]);
    float amax = block_max(m, shared);
    if (threadIdx.x != 0) return;
    if (!isfinite(amax)) {
        scale[0] = scale[1] = NAN;
        return;
    }
    int e = 0;
    if (amax > 0.0f) {
        int ex;
        float frac = frexpf(amax, &ex);  // amax = frac 2^ex, frac in [0.5, 1); 448 = 0.875 2^9
        e = (frac <= 0.875f ? 9 : 8) - ex;
        e = e > 126 ? 126 : e < -126 ? -126 : e;
    }
    scale[0] = ldexpf(1.0f, e);
    scale[1] = ldexpf(1.0f, -e);
}

// y[i] = E4M3(x[i] * scale[0]), saturating at +-448 (NaN stays NaN).
static __global__ void fp8_cast_kernel(__nv_fp8_storage_t *y, const __nv_bfloat16 *x, const float *scale, size_t n) {
    float s = scale[0];
    GRID_STRIDE_LOOP(i, n) y[i] = __nv_cvt_float_to_fp8(__bfloat162float(x[i]) * s, __NV_SATFINITE, __NV_E4M3);
}

void fc_fp8_quantize(__nv_fp8_storage_t *y, float *scale, const __nv_bfloat16 *x, size_t n) {
    unsigned blocks = fc_cdiv(n ? n : 1, FP8_THREADS);
    if (blocks > FP8_MAX_BLOCKS) blocks = FP8_MAX_BLOCKS;
    float *partial = (float *)fc_cuda_scratch(SCRATCH_FP8_MAX, sizeof(float) * FP8_MAX_BLOCKS);
    fp8_absmax_kernel<<<blocks, FP8_THREADS>>>(partial, x, n);
    kernelCheck();
    fp8_scale_kernel<<<1, FP8_THREADS>>>(scale, partial, (int)blocks);
    kernelCheck();
    if (!n) return;
    fp8_cast_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, x, scale, n);
    kernelCheck();
}

// The bias of an fp8 GEMM in bf16 (cuBLASLt's fp8 kernels with an fp32 output take a bf16 bias).
static __global__ void fp8_bias_kernel(__nv_bfloat16 *y, const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = __float2bfloat16_rn(b[i]);
}
void fc_fp8_bias(__nv_bfloat16 *y, const float *b, size_t n) {
    if (!n) return;
    fp8_bias_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, b, n);
    kernelCheck();
}
