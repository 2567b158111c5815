// optim.cu: the optimizer ops of the CUDA backend, ports of src/backend/cpu/cpu_optim.c: AdamW with fp32
// moments (adamw_fp32), AdamW with 8-bit block-wise quantised moments (adamw_8bit, one fused
// kernel: dequantise, update, block absmax, requantise with the encoder of src/backend/quant8.c), the sum
// of squares behind the gradient norm (sum_squares) and the EMA of the weights (ema_update). The
// AdamW kernels also write the bf16 copy of each new parameter into the GEMMs' weight mirror when
// it is current (bf16.cu), which saves rebuilding the mirror from 4 bytes a parameter every step.
//
// The per-element math is the CPU's, operation for operation, in the same precision (float for
// AdamW and the EMA: double runs at 1/64 of the float rate on GeForce cards): the step's constants
// come from the CPU's adam_const, and the device arithmetic uses the __*_rn intrinsics so that
// nvcc cannot fuse a product and a sum into an FMA (the CPU build rounds each one). Division and
// square root are IEEE-rounded on both. So parameters, moments and 8-bit codes are the CPU's bytes
// given the same inputs.
#include <math.h>

#include "cuda_common.cuh"

extern "C" {
#include "backend/adam_const.h"  // AdamConst, adam_const
#include "backend/quant8.h"      // QUANT8_ENCODER, QUANT8_TABLE, the index
}

enum {
    ELEM_THREADS = 256,  // threads per block of the one-thread-per-element kernels
    SS_CHUNK = 4096,     // elements of one partial sum of sum_squares (one block)
    SS_THREADS = 256,    // threads per block of the chunk kernel: SS_CHUNK / SS_THREADS elements each
    SS_COMBINE = 1024,   // threads of the single block that adds the chunks' partial sums
};
static_assert(ADAM8_BLOCK == 256, "adamw_8bit_kernel gives one thread to each element of a block and of a code map");
static_assert(SS_CHUNK % SS_THREADS == 0, "sum_squares chunks split evenly among the threads");

// ----------------------------------------------------------------------------
// AdamW

// The step for one element whose (scaled) gradient g is ADAM_GRAD_USABLE: adam_elem of src/backend/cpu/cpu_optim.c;
// updates m, v and returns the new parameter.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  p = (p - p lr wd) - step_size m / (sqrt(v / bc2) + eps)
static __device__ __forceinline__ float adam_elem(const AdamConst &c, float p, float g, float &m, float &v) {
    m = __fadd_rn(__fmul_rn(c.b1, m), __fmul_rn(c.one_m_b1, g));
    v = __fadd_rn(__fmul_rn(c.b2, v), __fmul_rn(__fmul_rn(c.one_m_b2, g), g));
    float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(v, c.bc2)), c.eps);
    return __fsub_rn(__fsub_rn(p, __fmul_rn(p, c.lr_wd)), __fdiv_rn(__fmul_rn(c.step_size, m), denom));
}

// The new parameter p of element i, and its bf16 copy where the GEMMs' mirror is kept current.
static __device__ __forceinline__ void store_param(real *param, __nv_bfloat16 *mirror, size_t i, float p) {
    param[i] = p;
    if (mirror) mirror[i] = __float2bfloat16_rn(p);
}

// After a kernel that wrote param (n) and, unless it was NULL, its mirror: a mirror not written is stale.
static void mirror_end(const __nv_bfloat16 *mirror, const real *param, size_t n) {
    if (!mirror) fc_cuda_weights_touched(param, sizeof(real) * n);
}

// The EMA's step for element i, from the parameter p after the update (cpu_optim.c's ema_elem).
static __device__ __forceinline__ void ema_elem(real *ema, size_t i, float d, float w, float p) {
    ema[i] = __fadd_rn(__fmul_rn(d, ema[i]), __fmul_rn(w, p));
}

// One thread per element i of param, grad, m, v (n); mirror and ema (n) or NULL.
static __global__ void adamw_fp32_kernel(real *param, __nv_bfloat16 *mirror, real *ema, const real *grad, float *m,
                                         float *v, size_t n, AdamConst c) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gs = __fmul_rn(grad[i], c.scale), p = param[i];
    if (ADAM_GRAD_USABLE(gs)) {  // a NaN, infinite or overflowing gradient leaves p, m, v (and the mirror) as they are
        float mi = m[i], vi = v[i];
        p = adam_elem(c, p, gs, mi, vi);
        store_param(param, mirror, i, p);
        m[i] = mi;
        v[i] = vi;
    }
    if (ema) ema_elem(ema, i, c.ema_d, c.ema_w, p);
}

static void cuda_adamw_fp32(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    if (n == 0) return;
    __nv_bfloat16 *mirror = fc_bf16_mirror_to_write(param, n);
    adamw_fp32_kernel<<<fc_cdiv(n, ELEM_THREADS), ELEM_THREADS>>>(param, mirror, h.ema, grad, m, v, n, c);
    kernelCheck();
    mirror_end(mirror, param, n);
}

// quant8_encode_table of src/backend/quant8.c: index of the entry of a code map (its encoder table: 256
// ascending values, then the rounding thresholds) nearest to x, ties to the lower index; beyond
// either end that end, NaN 0. The branch-free binary search of src/backend/quant8.c (largest i with
// code[i] <= x) over the first QUANT8_ENCODER floats, where the CPU reads its index instead, and
// the rounding as one float comparison with the threshold (the exact midpoint test, made once per
// map on the CPU): no double arithmetic, which a GeForce card runs at 1/64 of the float rate.
static __device__ __forceinline__ uint8_t encode8(const float *table, float x) {
    unsigned i = 0;
    for (unsigned step = 128; step > 0; step >>= 1) i += step * (unsigned)(table[i + step] <= x);
    unsigned lo = i < 255 ? i : 254;
    return (uint8_t)(lo + (unsigned)(x >= table[256 + lo]));
}

// Maximum over the threads of a block of ADAM8_BLOCK threads; every thread gets it. Exact (max
// does not depend on the order). `shared` holds one value per warp.
static __device__ __forceinline__ float block_max(float x, float *shared) {
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = y > x ? y : x;
    }
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
    __syncthreads();
    x = shared[0];
    for (int w = 1; w < ADAM8_BLOCK / 32; w++) x = shared[w] > x ? shared[w] : x;
    return x;
}

// One block of ADAM8_BLOCK threads per quantisation block b, one thread per element
// i = b * ADAM8_BLOCK + threadIdx.x (the last block may be partial). m8, v8, param, grad, and mirror
// and ema (or NULL): (n); absmax_m, absmax_v: (ceil(n / ADAM8_BLOCK)); code_m, code_v: the code
// maps' encoder tables (QUANT8_TABLE), whose first QUANT8_ENCODER floats are copied to shared memory.
// As cpu_adamw_8bit: dequantise to float, update in float (a non-finite gradient leaves p and the
// dequantised moments as they are), new absmax = the block's max |m| and max v, requantise.
static __global__ void __launch_bounds__(ADAM8_BLOCK)
    adamw_8bit_kernel(real *param, __nv_bfloat16 *mirror, real *ema, const real *grad, uint8_t *m8, uint8_t *v8,
                      float *absmax_m, float *absmax_v, const float *code_m, const float *code_v, size_t n,
                      AdamConst c) {
    __shared__ float cm[QUANT8_ENCODER], cv[QUANT8_ENCODER];
    __shared__ float max_m_w[ADAM8_BLOCK / 32], max_v_w[ADAM8_BLOCK / 32];
    int j = threadIdx.x;
    size_t b = blockIdx.x, i = b * ADAM8_BLOCK + j;
    bool live = i < n;
    for (int k = j; k < QUANT8_ENCODER; k += ADAM8_BLOCK) cm[k] = code_m[k], cv[k] = code_v[k];
    // Every thread reads the old absmax before thread 0 overwrites it (after the barriers below).
    float am = absmax_m[b], av = absmax_v[b];
    __syncthreads();

    float mi = 0.0f, vi = 0.0f;
    if (live) {
        // a zero absmax (the zero-filled state) dequantises every code to 0
        mi = __fmul_rn(cm[m8[i]], am), vi = __fmul_rn(cv[v8[i]], av);
        float gs = __fmul_rn(grad[i], c.scale);
        float p = param[i];
        if (ADAM_GRAD_USABLE(gs)) p = adam_elem(c, p, gs, mi, vi), store_param(param, mirror, i, p);
        if (ema) ema_elem(ema, i, c.ema_d, c.ema_w, p);
    }
    // The CPU's running max starts at 0 and takes a value only when it is greater (never a NaN).
    float abs_m = fabsf(mi);
    float new_am = block_max(abs_m > 0.0f ? abs_m : 0.0f, max_m_w);
    float new_av = block_max(vi > 0.0f ? vi : 0.0f, max_v_w);
    if (j == 0) absmax_m[b] = new_am, absmax_v[b] = new_av;
    if (live) {
        m8[i] = new_am > 0.0f ? encode8(cm, __fdiv_rn(mi, new_am)) : 0;
        v8[i] = new_av > 0.0f ? encode8(cv, __fdiv_rn(vi, new_av)) : 0;
    }
}

// The adam8_warp route: one warp per quantisation block, lane l taking elements l, l + 32, ...,
// l + 224 of it (each load and store of a warp 32 neighbours), the block's absmax by shuffles alone
// (no barrier), the encoder by the CPU's index (quant8_encode_table: one lookup and one comparison
// instead of eight dependent steps), and a grid of at most ADAM8_WARP_BLOCKS_PER_SM blocks of
// ADAM8_WARPS warps an SM, each loading the two code tables into shared memory once and then
// walking the quantisation blocks. The same arithmetic as adamw_8bit_kernel, so the same bytes.
// Up to 4 blocks of 16 warps an SM (2048 threads and 116 KiB of tables: an H100's), as many as its
// threads and shared memory hold at once (3 on an RTX 3090 or 4090: 1536 threads, 100 KiB), so that
// all of the grid is resident (a block not resident would start its share of the walk late).
// The default kernel instead reads 4 KiB of tables from L2 for every 256 elements (15 GB a step
// at the 24 GB preset).
enum { ADAM8_WARPS = 16, ADAM8_WARP_BLOCKS_PER_SM = 4 };

// The maximum over a warp; every lane gets it. Exact (max does not depend on the order).
static __device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = y > x ? y : x;
    }
    return x;
}

// Arguments as adamw_8bit_kernel's; nb = ceil(n / ADAM8_BLOCK) quantisation blocks.
static __global__ void __launch_bounds__(ADAM8_WARPS * 32)
    adamw_8bit_warp_kernel(real *param, __nv_bfloat16 *mirror, real *ema, const real *grad, uint8_t *m8, uint8_t *v8,
                           float *absmax_m, float *absmax_v, const float *code_m, const float *code_v, size_t n,
                           size_t nb, AdamConst c) {
    __shared__ float cm[QUANT8_TABLE], cv[QUANT8_TABLE];  // (QUANT8_TABLE) each: codes, thresholds, index
    for (int k = threadIdx.x; k < QUANT8_TABLE; k += blockDim.x) cm[k] = code_m[k], cv[k] = code_v[k];
    __syncthreads();
    const int lane = threadIdx.x % 32, per = ADAM8_BLOCK / 32;
    for (size_t b = (size_t)blockIdx.x * ADAM8_WARPS + threadIdx.x / 32; b < nb; b += (size_t)gridDim.x * ADAM8_WARPS) {
        // every lane reads the old absmax before lane 0 overwrites it (after the shuffles below)
        float am = absmax_m[b], av = absmax_v[b];
        float mi[ADAM8_BLOCK / 32], vi[ADAM8_BLOCK / 32], max_m = 0.0f, max_v = 0.0f;
        for (int k = 0; k < per; k++) {
            size_t i = b * ADAM8_BLOCK + (size_t)k * 32 + lane;
            mi[k] = 0.0f, vi[k] = 0.0f;
            if (i < n) {
                mi[k] = __fmul_rn(cm[m8[i]], am), vi[k] = __fmul_rn(cv[v8[i]], av);
                float gs = __fmul_rn(grad[i], c.scale);
                float p = param[i];
                if (ADAM_GRAD_USABLE(gs)) p = adam_elem(c, p, gs, mi[k], vi[k]), store_param(param, mirror, i, p);
                if (ema) ema_elem(ema, i, c.ema_d, c.ema_w, p);
            }
            // the CPU's running max starts at 0 and takes a value only when it is greater (never a NaN)
            float abs_m = fabsf(mi[k]);
            max_m = abs_m > max_m ? abs_m : max_m;
            max_v = vi[k] > max_v ? vi[k] : max_v;
        }
        float new_am = warp_max(max_m), new_av = warp_max(max_v);
        if (lane == 0) absmax_m[b] = new_am, absmax_v[b] = new_av;
        for (int k = 0; k < per; k++) {
            size_t i = b * ADAM8_BLOCK + (size_t)k * 32 + lane;
            if (i >= n) break;
            m8[i] = new_am > 0.0f ? quant8_encode_table(cm, __fdiv_rn(mi[k], new_am)) : 0;
            v8[i] = new_av > 0.0f ? quant8_encode_table(cv, __fdiv_rn(vi[k], new_av)) : 0;
        }
    }
}

static void cuda_adamw_8bit(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m,
                            float *absmax_v, const float *code_m, const float *code_v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    if (n == 0) return;
    __nv_bfloat16 *mirror = fc_bf16_mirror_to_write(param, n);
    if (fc_routes.adam8_warp) {
        size_t nb = fc_cdiv(n, ADAM8_BLOCK), blocks = fc_cdiv(nb, ADAM8_WARPS);
        size_t per_sm = ADAM8_WARP_BLOCKS_PER_SM, table = 2 * sizeof(float) * QUANT8_TABLE + 1024;  // + the runtime's
        if (fc_sm_threads > 0 && (size_t)fc_sm_threads / (ADAM8_WARPS * 32) < per_sm)
            per_sm = (size_t)fc_sm_threads / (ADAM8_WARPS * 32);
        if (fc_sm_smem > 0 && fc_sm_smem / table < per_sm) per_sm = fc_sm_smem / table;
        size_t most = (size_t)fc_sm_count * (per_sm > 0 ? per_sm : 1);
        adamw_8bit_warp_kernel<<<blocks < most ? blocks : most, ADAM8_WARPS * 32>>>(
            param, mirror, h.ema, grad, m8, v8, absmax_m, absmax_v, code_m, code_v, n, nb, c);
        fc_route_calls.adam8_warp++;
    } else {
        adamw_8bit_kernel<<<fc_cdiv(n, ADAM8_BLOCK), ADAM8_BLOCK>>>(param, mirror, h.ema, grad, m8, v8, absmax_m,
                                                                    absmax_v, code_m, code_v, n, c);
    }
    kernelCheck();
    mirror_end(mirror, param, n);
}

// Each job's launch in turn: the kernels are wide enough that a launch a tensor costs little here.
static void cuda_adamw_8bit_jobs(const Adam8Job *jobs, int njobs, const float *code_m, const float *code_v) {
    for (int j = 0; j < njobs; j++)
        cuda_adamw_8bit(jobs[j].param, jobs[j].grad, jobs[j].m8, jobs[j].v8, jobs[j].absmax_m, jobs[j].absmax_v,
                        code_m, code_v, jobs[j].n, jobs[j].h);
}

// ----------------------------------------------------------------------------
// sum of squares: fixed chunks of SS_CHUNK elements, each summed by one block in a fixed order
// (each thread its elements in order, then a fixed tree over the threads); then one block adds
// the chunks' sums (each thread a fixed strided set in order, then a fixed tree). The same bytes
// on every run and every GPU.

// Fixed tree sum over the blockDim.x (a power of two) threads of a block; the result in sum[0], bad[0].
static __device__ void block_tree_sum(double *sum, unsigned long long *bad) {
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < s) sum[threadIdx.x] += sum[threadIdx.x + s], bad[threadIdx.x] += bad[threadIdx.x + s];
    }
    __syncthreads();
}

// One block of SS_THREADS per chunk k: thread t sums elements k*SS_CHUNK + t + q*SS_THREADS for
// q = 0, 1, ... in order (coalesced). part, part_bad: (nchunks).
static __global__ void sum_squares_chunk_kernel(double *part, unsigned long long *part_bad, const real *x, size_t n) {
    __shared__ double sum[SS_THREADS];
    __shared__ unsigned long long bad[SS_THREADS];
    size_t i0 = (size_t)blockIdx.x * SS_CHUNK;
    double s = 0.0;
    unsigned long long nb = 0;
    for (int q = 0; q < SS_CHUNK / SS_THREADS; q++) {
        size_t i = i0 + (size_t)q * SS_THREADS + threadIdx.x;
        if (i >= n) break;
        double xi = x[i];
        if (isfinite(xi))
            s = __dadd_rn(s, __dmul_rn(xi, xi));
        else
            nb++;
    }
    sum[threadIdx.x] = s, bad[threadIdx.x] = nb;
    block_tree_sum(sum, bad);
    if (threadIdx.x == 0) part[blockIdx.x] = sum[0], part_bad[blockIdx.x] = bad[0];
}

// One block of SS_COMBINE threads: thread t adds chunks t, t + SS_COMBINE, ... in order, then a tree.
static __global__ void sum_squares_combine_kernel(double *total, unsigned long long *total_bad, const double *part,
                                                  const unsigned long long *part_bad, size_t nchunks) {
    __shared__ double sum[SS_COMBINE];
    __shared__ unsigned long long bad[SS_COMBINE];
    double s = 0.0;
    unsigned long long nb = 0;
    for (size_t k = threadIdx.x; k < nchunks; k += SS_COMBINE) s += part[k], nb += part_bad[k];
    sum[threadIdx.x] = s, bad[threadIdx.x] = nb;
    block_tree_sum(sum, bad);
    if (threadIdx.x == 0) *total = sum[0], *total_bad = bad[0];
}

static double cuda_sum_squares(const real *x, size_t n, size_t *nonfinite) {
    if (n == 0) {
        if (nonfinite) *nonfinite = 0;
        return 0.0;
    }
    size_t nchunks = fc_cdiv(n, SS_CHUNK);
    // scratch: [total, total_bad, part (nchunks), part_bad (nchunks)], all 8-byte values
    double *total = (double *)fc_cuda_scratch(SCRATCH_OPTIM, (2 + 2 * nchunks) * 8);
    unsigned long long *total_bad = (unsigned long long *)(total + 1);
    double *part = total + 2;
    unsigned long long *part_bad = (unsigned long long *)(part + nchunks);
    sum_squares_chunk_kernel<<<(unsigned)nchunks, SS_THREADS>>>(part, part_bad, x, n);
    kernelCheck();
    sum_squares_combine_kernel<<<1, SS_COMBINE>>>(total, total_bad, part, part_bad, nchunks);
    kernelCheck();
    struct {
        double total;
        unsigned long long bad;
    } result;
    static_assert(sizeof result == 16, "total and total_bad lie side by side in the scratch");
    cudaCheck(cudaMemcpy(&result, total, sizeof result, cudaMemcpyDeviceToHost));
    if (nonfinite) *nonfinite = (size_t)result.bad;
    return result.total;
}

// ----------------------------------------------------------------------------
// EMA of the weights: one thread per element, ema = decay * ema + (1 - decay) * param in float
// (cpu_ema_update).

static __global__ void ema_update_kernel(real *ema, const real *param, float d, float w, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    ema_elem(ema, i, d, w, param[i]);
}

static void cuda_ema_update(real *ema, const real *param, float decay, size_t n) {
    if (n == 0) return;
    float d = decay, w = (float)(1.0 - (double)decay);
    ema_update_kernel<<<fc_cdiv(n, ELEM_THREADS), ELEM_THREADS>>>(ema, param, d, w, n);
    kernelCheck();
}

void cuda_register_optim(Backend *be) {
    be->adamw_fp32 = cuda_adamw_fp32;
    be->adamw_8bit = cuda_adamw_8bit;
    be->adamw_8bit_jobs = cuda_adamw_8bit_jobs;
    be->sum_squares = cuda_sum_squares;
    be->ema_update = cuda_ema_update;
}
