// colsum.cu: the column sums of the CUDA backend's backward (the bias gradient of linear.cu;
// dgate and dtemb of elementwise.cu): out[s, d] = or += sum over rows n of a[s, n, d] (times
// b[s, n, d]), a and b (S, N, D).
//
// In float with Neumaier's compensation (CompSum, cuda_common.cuh), not in double: the GeForce
// cards framechain targets run doubles at 1/64 of the float rate, and these sums see every element
// of every linear layer's output gradient (about 1e10 additions a step at the 0.95 B preset). Each
// term is added exactly and its rounding error kept, so a column whose terms cancel (large
// gradients of both signs) keeps its small sum, where a plain float sum would keep mostly rounding
// error (tests/cuda/test_cuda.c, "cancelling").
//
// Deterministic, without atomics: pass 1 gives a block 32 columns of one chunk of rows; each
// thread sums rows ty, ty + 8, ... of its column in order, and a fixed tree in shared memory adds
// the 8 lanes. Pass 2, when there is more than one chunk, adds the chunks' sums in chunk order.
// The chunking depends only on the shape, so the result is the same bytes on every run and GPU.
#include "cuda_common.cuh"

#define COLSUM_COLS 32   // threadIdx.x: one column each (a warp reads 128 contiguous bytes of a row)
static_assert(COLSUM_COLS == 32, "a row of a block's threads is one warp (the maximum's shuffles)");
#define COLSUM_LANES 8   // threadIdx.y: row lanes, reduced by a fixed tree in shared memory
#define COLSUM_ROWS 256  // rows per chunk (doubled until the chunks fit in gridDim.y)
#define COLSUM_FINISH_THREADS 256

// out (= or += with add) the final sum; out may hold anything when it is overwritten.
static __device__ __forceinline__ void colsum_store(float *out, const CompSum &sum, int add) {
    float v = sum.value();
    *out = add ? __fadd_rn(*out, v) : v;
}

// Pass 1. Block (x, chunk, s): columns x*32 .. x*32+31 of slot s, rows [chunk*rows_per_chunk,
// +rows_per_chunk). With one chunk the sum goes straight to out, else to partial (S, nchunks, D).
// a16 (S, N, D), when not NULL, gets a rounded to bf16 on the way (linear.cu: dy for the bf16
// GEMMs, without a second pass over it).
// AMAX (a16 given): amax gets the block's largest |a16| at its index in the grid (x fastest, then
// chunk, then slot), a NaN counted as inf. A template, so that the sums without it (every bias
// gradient but an fp8 route's) run the loop without the maximum's instructions.
template <bool AMAX>
__global__ void colsum_partial_kernel(CompSum *__restrict__ partial, float *__restrict__ out, long ostride, int add,
                                      __nv_bfloat16 *__restrict__ a16, float *__restrict__ amax,
                                      const float *__restrict__ a, const float *__restrict__ b, int N, int D,
                                      int rows_per_chunk) {
    __shared__ CompSum acc[COLSUM_LANES][COLSUM_COLS];
    int tx = threadIdx.x, ty = threadIdx.y, s = blockIdx.z;
    int d = blockIdx.x * COLSUM_COLS + tx;
    long n0 = (long)blockIdx.y * rows_per_chunk;
    long n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
    size_t base = (size_t)s * N * D;
    CompSum sum = COMP_SUM_ZERO;
    float m = 0.0f;
    if (d < D)
        for (long n = n0 + ty; n < n1; n += COLSUM_LANES) {
            size_t k = base + (size_t)n * D + d;
            float v = a[k];
            if (a16) {
                __nv_bfloat16 h = __float2bfloat16_rn(v);
                a16[k] = h;
                if (AMAX) {
                    float r = fabsf(__bfloat162float(h));
                    m = r != r ? INFINITY : fmaxf(m, r);
                }
            }
            sum.add(b ? __fmul_rn(v, b[k]) : v);
        }
    if (AMAX) {  // the block's maximum (exact in any order): each warp's (one lane row), then the rows'
        __shared__ float big[COLSUM_LANES];
        for (int o = COLSUM_COLS / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (tx == 0) big[ty] = m;
        __syncthreads();
        if (ty == 0 && tx == 0) {
            for (int y = 1; y < COLSUM_LANES; y++) m = fmaxf(m, big[y]);
            amax[((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = m;
        }
    }
    acc[ty][tx] = sum;
    __syncthreads();
    for (int half = COLSUM_LANES / 2; half > 0; half /= 2) {
        if (ty < half) acc[ty][tx].merge(acc[ty + half][tx]);
        __syncthreads();
    }
    if (ty == 0 && d < D) {
        if (gridDim.y == 1)
            colsum_store(out + (size_t)s * ostride + d, acc[0][tx], add);
        else
            partial[((size_t)s * gridDim.y + blockIdx.y) * D + d] = acc[0][tx];
    }
}

// Pass 2: one thread per (s, d) adds its chunks' sums in chunk order.
__global__ void colsum_finish_kernel(float *__restrict__ out, long ostride, int add,
                                     const CompSum *__restrict__ partial, int S, int D, int nchunks) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)S * D;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t s = i / D, d = i % D;
        CompSum sum = COMP_SUM_ZERO;
        for (int c = 0; c < nchunks; c++) sum.merge(partial[(s * nchunks + c) * D + d]);
        colsum_store(out + s * ostride + d, sum, add);
    }
}

// The chunks of rows each column's sum is cut into (pass 1's gridDim.y).
static int colsum_chunks(int N, long *rows_per_chunk) {
    long rows = COLSUM_ROWS;
    while ((N + rows - 1) / rows > 65535) rows *= 2;
    int nchunks = (int)((N + rows - 1) / rows);
    if (rows_per_chunk) *rows_per_chunk = rows;
    return nchunks == 0 ? 1 : nchunks;  // N == 0: one empty chunk, a sum of 0 (as on the CPU)
}

int fc_cuda_colsum_blocks(int S, int N, int D) {
    return S <= 0 || D <= 0 ? 0 : (int)fc_cdiv(D, COLSUM_COLS) * colsum_chunks(N, NULL) * S;
}

void fc_cuda_colsum(float *out, long ostride, int add, __nv_bfloat16 *a16, float *amax, const float *a,
                    const float *b, int S, int N, int D, const char *op) {
    if (S <= 0 || D <= 0) return;
    if (S > 65535) fc_die("CUDA %s: %d slots is more than this kernel's grid holds (65535)", op, S);
    long rows_per_chunk;
    int nchunks = colsum_chunks(N, &rows_per_chunk);
    CompSum *partial = NULL;
    if (nchunks > 1)
        partial = (CompSum *)fc_cuda_scratch(SCRATCH_COLSUM, sizeof(CompSum) * (size_t)S * nchunks * D);
    dim3 block(COLSUM_COLS, COLSUM_LANES), grid(fc_cdiv(D, COLSUM_COLS), nchunks, S);
    int rows = (int)rows_per_chunk;
    if (a16 && amax)
        colsum_partial_kernel<true><<<grid, block>>>(partial, out, ostride, add, a16, amax, a, b, N, D, rows);
    else
        colsum_partial_kernel<false><<<grid, block>>>(partial, out, ostride, add, a16, (float *)NULL, a, b, N, D, rows);
    kernelCheck();
    if (nchunks > 1) {
        unsigned blocks = fc_cdiv((size_t)S * D, COLSUM_FINISH_THREADS);
        colsum_finish_kernel<<<blocks < 4096 ? blocks : 4096, COLSUM_FINISH_THREADS>>>(out, ostride, add, partial, S, D, nchunks);
        kernelCheck();
    }
}
