// fp8.cu: operands of the fp8 routes (linear.cu: fp8_fwd, fp8_dgrad, fp8_wgrad): a bf16 matrix as fp8 bytes,
// E4M3 (weights and activations: 3 bits of mantissa, up to 448) or E5M2 (gradients: 2 bits, up to
// 57344), with one scale for the whole tensor ("current scaling": the scale comes from this tensor's
// own absolute maximum, not from an earlier step's). The scale is a power of two, 2^e with e the
// largest integer that keeps absmax * 2^e within the format's largest value: multiplying by it is
// exact, so each byte is the nearest fp8 value (ties to even, cvt's satfinite) of the bf16 value
// times 2^e, and cuBLASLt's dequantisation factor 2^-e is exact too. A tensor whose maximum is not
// finite gets a NaN scale, so that an inf or NaN in it still reaches the GEMM's output as NaN. The
// weight of the backward's dx GEMM, and x and dy of its dw GEMM, are written transposed (cuBLASLt's
// fp8 kernels read A transposed and B as it is).
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
enum { FP8_TILE = 32 };  // the transposed conversion's tiles (FP8_TILE x FP8_TILE, 8 rows of threads)

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
// maximum of partial (count); a zero tensor gets 1 and 1, a non-finite maximum NaN and NaN. e5m2:
// the largest value is 57344 = 0.875 2^16, else 448 = 0.875 2^9.
static __global__ void fp8_scale_kernel(float *scale, const float *partial, int count, int e5m2) {
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
        float frac = frexpf(amax, &ex);  // amax = frac 2^ex, frac in [0.5, 1)
        e = (frac <= 0.875f ? 9 : 8) + (e5m2 ? 7 : 0) - ex;
        e = e > 126 ? 126 : e < -126 ? -126 : e;
    }
    scale[0] = ldexpf(1.0f, e);
    scale[1] = ldexpf(1.0f, -e);
}

static __device__ __forceinline__ __nv_fp8_storage_t to_fp8(float v, int e5m2) {
    return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

// y[i] = fp8(x[i] * scale[0]), saturating at the format's largest value (NaN stays NaN).
static __global__ void fp8_cast_kernel(__nv_fp8_storage_t *y, const __nv_bfloat16 *x, const float *scale, size_t n,
                                       int e5m2) {
    float s = scale[0];
    GRID_STRIDE_LOOP(i, n) y[i] = to_fp8(__bfloat162float(x[i]) * s, e5m2);
}

// y (cols, rows) = fp8(x^T * scale[0]) for x (rows, cols): a block per 32x32 tile, read along x's
// rows and written along y's through shared memory (both sides coalesced).
static __global__ void fp8_cast_transpose_kernel(__nv_fp8_storage_t *y, const __nv_bfloat16 *x, const float *scale,
                                                 int rows, int cols, int e5m2) {
    __shared__ float tile[FP8_TILE][FP8_TILE + 1];
    float s = scale[0];
    int c0 = blockIdx.x * FP8_TILE, r0 = blockIdx.y * FP8_TILE;
    for (int r = threadIdx.y; r < FP8_TILE; r += blockDim.y) {
        int rr = r0 + r, cc = c0 + threadIdx.x;
        tile[r][threadIdx.x] = rr < rows && cc < cols ? __bfloat162float(x[(size_t)rr * cols + cc]) * s : 0.0f;
    }
    __syncthreads();
    for (int c = threadIdx.y; c < FP8_TILE; c += blockDim.y) {
        int cc = c0 + c, rr = r0 + threadIdx.x;
        if (cc < cols && rr < rows) y[(size_t)cc * rows + rr] = to_fp8(tile[threadIdx.x][c], e5m2);
    }
}

void fc_fp8_scale_from(float *scale, const float *partial, int count, int e5m2) {
    fp8_scale_kernel<<<1, FP8_THREADS>>>(scale, partial, count, e5m2);
    kernelCheck();
}

// The tensor's scale into scale[0..1] (its maximum in two passes).
static void fp8_scale(float *scale, const __nv_bfloat16 *x, size_t n, int e5m2) {
    unsigned blocks = fc_cdiv(n ? n : 1, FP8_THREADS);
    if (blocks > FP8_MAX_BLOCKS) blocks = FP8_MAX_BLOCKS;
    float *partial = (float *)fc_cuda_scratch(SCRATCH_FP8_MAX, sizeof(float) * FP8_MAX_BLOCKS);
    fp8_absmax_kernel<<<blocks, FP8_THREADS>>>(partial, x, n);
    kernelCheck();
    fc_route_calls.fp8_amax++;
    fc_fp8_scale_from(scale, partial, (int)blocks, e5m2);
}

size_t fc_fp8_max_scratch_bytes(void) { return sizeof(float) * FP8_MAX_BLOCKS; }

void fc_fp8_cast(__nv_fp8_storage_t *y, const float *scale, const __nv_bfloat16 *x, int rows, int cols,
                 int transposed, int e5m2) {
    if (rows <= 0 || cols <= 0) return;
    if (transposed) {
        dim3 grid(fc_cdiv(cols, FP8_TILE), fc_cdiv(rows, FP8_TILE)), block(FP8_TILE, 8);
        fp8_cast_transpose_kernel<<<grid, block>>>(y, x, scale, rows, cols, e5m2);
    } else {
        size_t n = (size_t)rows * cols;
        fp8_cast_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, x, scale, n, e5m2);
    }
    kernelCheck();
}

void fc_fp8_quantize(__nv_fp8_storage_t *y, float *scale, const __nv_bfloat16 *x, size_t n, int e5m2) {
    fp8_scale(scale, x, n, e5m2);
    if (!n) return;
    fp8_cast_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, x, scale, n, e5m2);
    kernelCheck();
}

void fc_fp8_quantize_transposed(__nv_fp8_storage_t *y, float *scale, const __nv_bfloat16 *x, int rows, int cols,
                                int e5m2) {
    fp8_scale(scale, x, (size_t)rows * cols, e5m2);
    fc_fp8_cast(y, scale, x, rows, cols, 1, e5m2);
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
