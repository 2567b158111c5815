// norm.cu: the normalisation ops of the CUDA backend: LayerNorm with adaLN modulation
// (ln_mod_fwd/bwd) and the per-head RMS norm of q and k (qk_norm_fwd/bwd). Same math as
// src/backend/cpu/cpu_backend.c: LN eps 1e-6 (no affine), RMS eps 1e-6.
//
// Forward ops and the per-row part of the backward ops give one warp to each row (or head vector);
// its lanes stride over the columns and a butterfly shuffle sums their partial sums.
// The column gradients (dshift, dscale per slot; dqw, dkw over every token and head) are summed
// in a fixed order without atomics, in float with compensation (CompSum, cuda_common.cuh): pass 1
// gives each thread one column of a fixed range of rows (LN_ROWS_PER_PART rows,
// QK_TOKENS_PER_PART tokens) and sums them in the CPU's order; pass 2 gives each thread one column
// and adds the partial sums of pass 1 in order. The chunking depends only on the shapes, so
// results are the same bytes on every run.
//
// Where the CPU rounds a product before adding it, the __*_rn intrinsics stop nvcc from fusing
// the two into an FMA, so that elementwise results follow the CPU's roundings.
#include "cuda_common.cuh"

#define LN_EPS 1e-6
#define RMS_EPS 1e-6

enum {
    WARP = 32,
    ROW_WARPS = 8,            // rows (warps) per block of the warp-per-row kernels
    QK_THREADS = 128,         // threads per block (one token) of the qk_norm row kernels
    COL_THREADS = 256,        // threads per block of the column-sum kernels
    LN_ROWS_PER_PART = 32,    // rows of one slot summed by one thread in pass 1 of ln_mod_bwd
    QK_TOKENS_PER_PART = 8,   // tokens summed by one thread in pass 1 of qk_norm_bwd (more threads in flight)
};

// Products and sums in `real` that are rounded on their own (never fused into an FMA).
#ifdef FC_DOUBLE
static __device__ __forceinline__ real r_mul(real a, real b) { return __dmul_rn(a, b); }
static __device__ __forceinline__ real r_add(real a, real b) { return __dadd_rn(a, b); }
#else
static __device__ __forceinline__ real r_mul(real a, real b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ real r_add(real a, real b) { return __fadd_rn(a, b); }
#endif

// The row statistics and per-row gradients (mean, rstd, the two means of the backward, the RMS
// norm's dot product) are float: the GeForce cards framechain targets run doubles at 1/64 of the
// float rate, and these are several operations an element of every activation. The CPU computes
// them in double; the two agree to the fp32 tolerance of tests/cuda/test_cuda.c. So are the column
// sums (dshift, dscale, dqw, dkw): their terms are float products, their sums compensated.
typedef float stat_t;
static __device__ __forceinline__ stat_t s_mul(stat_t a, stat_t b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ stat_t s_sub(stat_t a, stat_t b) { return __fsub_rn(a, b); }

// Sum over the 32 lanes of a warp (every lane must call it); every lane gets the same bits.
template <typename T>
static __device__ __forceinline__ T warp_sum(T v) {
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Component e (0..3) of a float4, and its setter; with e known after unrolling they are registers.
static __device__ __forceinline__ float at4(const float4 &v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }
static __device__ __forceinline__ void set4(float4 &v, int e, float x) {
    if (e == 0) v.x = x;
    else if (e == 1) v.y = x;
    else if (e == 2) v.z = x;
    else v.w = x;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ----------------------------------------------------------------------------
// LayerNorm with adaLN modulation

// One warp per row r of x, y (S*N, D); ROW_WARPS rows per block. Lanes stride over the D columns.
// shift, scale: row s = r / N of a matrix with row stride ms. y is an operand (OpT: float or bf16).
template <typename OpT>
static __global__ void ln_mod_fwd_kernel(OpT *y, real *mean, real *rstd, const real *x, const real *shift,
                                         const real *scale, long ms, long rows, int N, int D) {
    long r = (long)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;  // the whole warp leaves together
    const real *xr = x + r * D;
    const real *sh = shift + (r / N) * ms, *sc = scale + (r / N) * ms;
    stat_t sum = 0;
    for (int d = lane; d < D; d += WARP) sum += xr[d];
    stat_t mu = warp_sum(sum) / D;
    stat_t sq = 0;
    for (int d = lane; d < D; d += WARP) {
        stat_t c = xr[d] - mu;
        sq += c * c;
    }
    stat_t rs = (stat_t)1 / sqrt(warp_sum(sq) / D + (stat_t)LN_EPS);
    if (lane == 0) mean[r] = (real)mu, rstd[r] = (real)rs;
    OpT *yr = y + r * D;
    for (int d = lane; d < D; d += WARP) {
        real xhat = (real)((xr[d] - mu) * rs);
        op_store(yr + d, r_add(r_mul(xhat, (real)1 + sc[d]), sh[d]));
    }
}

// dx (S*N, D) += d y / d x: one warp per row, as the forward.
static __global__ void ln_mod_bwd_dx_kernel(real *dx, const real *dy, const real *x, const real *mean,
                                            const real *rstd, const real *scale, long ms, long rows, int N, int D) {
    long r = (long)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (r >= rows) return;
    const real *xr = x + r * D, *dyr = dy + r * D, *sc = scale + (r / N) * ms;
    stat_t mu = mean[r], rs = rstd[r];
    stat_t g_mean = 0, gx_mean = 0;
    for (int d = lane; d < D; d += WARP) {
        stat_t g = dyr[d] * ((stat_t)1 + sc[d]);
        g_mean += g;
        gx_mean += g * (xr[d] - mu) * rs;
    }
    g_mean = warp_sum(g_mean) / D;
    gx_mean = warp_sum(gx_mean) / D;
    real *dxr = dx + r * D;
    for (int d = lane; d < D; d += WARP) {
        stat_t g = dyr[d] * ((stat_t)1 + sc[d]);
        stat_t xhat = (xr[d] - mu) * rs;
        dxr[d] += (real)s_mul(rs, s_sub(s_sub(g, g_mean), s_mul(xhat, gx_mean)));
    }
}

// Pass 1 of dshift/dscale. One thread per (slot s, part p, column d), d fastest (coalesced):
// sums rows n in [p*LN_ROWS_PER_PART, min(N, (p+1)*LN_ROWS_PER_PART)) of slot s in order, with
// compensation (CompSum). psh, psc: (S, nparts, D) partial sums.
static __global__ void ln_mod_bwd_cols_kernel(CompSum *psh, CompSum *psc, const real *dy, const real *x,
                                              const real *mean, const real *rstd, int S, int N, int D, int nparts) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)S * nparts * D) return;
    int d = (int)(idx % D);
    long sp = idx / D;
    int p = (int)(sp % nparts), s = (int)(sp / nparts);
    int n0 = p * LN_ROWS_PER_PART, n1 = min(N, n0 + LN_ROWS_PER_PART);
    CompSum ash = COMP_SUM_ZERO, asc = COMP_SUM_ZERO;
    for (int n = n0; n < n1; n++) {
        long r = (long)s * N + n;
        float g = dy[r * D + d];
        ash.add(g);
        asc.add(r_mul(r_mul(g, r_add(x[r * D + d], -mean[r])), rstd[r]));
    }
    psh[idx] = ash;
    psc[idx] = asc;
}

// Pass 2: one thread per (slot s, column d); adds the nparts partial sums in order.
static __global__ void ln_mod_bwd_cols_sum_kernel(real *dshift, real *dscale, const CompSum *psh,
                                                  const CompSum *psc, long ms, int S, int D, int nparts) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)S * D) return;
    int d = (int)(idx % D), s = (int)(idx / D);
    CompSum ash = COMP_SUM_ZERO, asc = COMP_SUM_ZERO;
    for (int p = 0; p < nparts; p++) {
        long k = ((long)s * nparts + p) * D + d;
        ash.merge(psh[k]);
        asc.merge(psc[k]);
    }
    if (dshift) dshift[s * ms + d] += ash.value();
    if (dscale) dscale[s * ms + d] += asc.value();
}

// The vector path of the two row kernels: a warp holds its row in registers as float4s (float4 j
// of the row in lane j % 32, register j / 32; NV registers), so x and dy are read from memory once,
// four floats per load. Same formulas as the kernels above; the per-lane partial sums are grouped
// differently, so the statistics may differ from them in the last bits.
template <int NV, typename OpT>
static __global__ void ln_mod_fwd_vec_kernel(OpT *y, real *mean, real *rstd, const real *x, const real *shift,
                                             const real *scale, long ms, long rows, int N, int D) {
    long r = (long)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP, D4 = D / 4;
    if (r >= rows) return;  // the whole warp leaves together
    const float4 *xr = (const float4 *)(x + r * D);
    float4 v[NV] = {};
    stat_t sum = 0;
#pragma unroll
    for (int k = 0; k < NV; k++)
        if (lane + WARP * k < D4) {
            v[k] = xr[lane + WARP * k];
            sum += (stat_t)v[k].x + v[k].y + v[k].z + v[k].w;
        }
    stat_t mu = warp_sum(sum) / D;
    stat_t sq = 0;
#pragma unroll
    for (int k = 0; k < NV; k++)
        if (lane + WARP * k < D4)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                stat_t c = at4(v[k], e) - mu;
                sq += c * c;
            }
    stat_t rs = (stat_t)1 / sqrt(warp_sum(sq) / D + (stat_t)LN_EPS);
    if (lane == 0) mean[r] = (real)mu, rstd[r] = (real)rs;
    const float4 *sh = (const float4 *)(shift + (r / N) * ms), *sc = (const float4 *)(scale + (r / N) * ms);
    OpT *yr = y + r * D;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int j = lane + WARP * k;
        if (j >= D4) continue;
        float4 a = sc[j], b = sh[j], o = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            real xhat = (real)((at4(v[k], e) - mu) * rs);
            set4(o, e, r_add(r_mul(xhat, (real)1 + at4(a, e)), at4(b, e)));
        }
        op_store4(yr + 4 * j, o);
    }
}

// One row of the vector backward, by one warp: loads the row's x and dy into xv and gv (NV float4s
// a lane: the fused kernel below reuses them), takes the row's two means and adds d y / d x into
// dxr where `store` (a warp computing on a stand-in row stores nothing; it still joins the shuffles).
template <int NV>
__device__ __forceinline__ void ln_bwd_row_vec(float4 (&xv)[NV], float4 (&gv)[NV], float4 *dxr, const float4 *xr,
                                               const float4 *dyr, const float4 *sc, stat_t mu, stat_t rs, int lane,
                                               int D, bool store) {
    const int D4 = D / 4;
    stat_t g_mean = 0, gx_mean = 0;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int j = lane + WARP * k;
        xv[k] = gv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (j >= D4) continue;
        xv[k] = xr[j], gv[k] = dyr[j];
        float4 a = sc[j];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            stat_t g = at4(gv[k], e) * ((stat_t)1 + at4(a, e));
            g_mean += g;
            gx_mean += g * (at4(xv[k], e) - mu) * rs;
        }
    }
    g_mean = warp_sum(g_mean) / D;
    gx_mean = warp_sum(gx_mean) / D;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        int j = lane + WARP * k;
        if (j >= D4 || !store) continue;
        float4 a = sc[j], o = dxr[j];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            stat_t g = at4(gv[k], e) * ((stat_t)1 + at4(a, e));
            stat_t xhat = (at4(xv[k], e) - mu) * rs;
            set4(o, e, at4(o, e) + (real)s_mul(rs, s_sub(s_sub(g, g_mean), s_mul(xhat, gx_mean))));
        }
        dxr[j] = o;
    }
}

template <int NV>
static __global__ void ln_mod_bwd_dx_vec_kernel(real *dx, const real *dy, const real *x, const real *mean,
                                                const real *rstd, const real *scale, long ms, long rows, int N,
                                                int D) {
    long r = (long)blockIdx.x * ROW_WARPS + threadIdx.x / WARP;
    if (r >= rows) return;
    float4 xv[NV], gv[NV];
    ln_bwd_row_vec<NV>(xv, gv, (float4 *)(dx + r * D), (const float4 *)(x + r * D), (const float4 *)(dy + r * D),
                       (const float4 *)(scale + (r / N) * ms), mean[r], rstd[r], threadIdx.x % WARP, D, true);
}

// The ln_mod_fused route: dx and pass 1 of dshift/dscale in one pass over dy and x (the kernels above
// read both twice). One block of ROW_WARPS warps per (slot s, part p) of LN_ROWS_PER_PART rows: in
// round k warp w takes row n0 + k * ROW_WARPS + w as ln_mod_bwd_dx_vec_kernel does, then leaves the
// row's dshift terms (dy) and then its dscale terms in shared memory (ROW_WARPS, D), and each thread
// adds those of its columns to its sums, rows in order: the same terms in the same order as
// ln_mod_bwd_cols_kernel, so the same bytes. Each thread owns the columns threadIdx.x + 256 j.
template <int NV>
static __global__ void ln_mod_bwd_fused_kernel(real *dx, CompSum *psh, CompSum *psc, const real *dy, const real *x,
                                               const real *mean, const real *rstd, const real *scale, long ms, int N,
                                               int D, int nparts) {
    constexpr int THREADS = ROW_WARPS * WARP, COLS = (4 * WARP * NV + THREADS - 1) / THREADS;
    extern __shared__ __align__(16) unsigned char smem[];
    real *terms = (real *)smem;  // (ROW_WARPS, D): one round's rows
    const int s = blockIdx.x / nparts, p = blockIdx.x % nparts;
    const int n0 = p * LN_ROWS_PER_PART, n1 = min(N, n0 + LN_ROWS_PER_PART);
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, D4 = D / 4;
    const float4 *sc = (const float4 *)(scale + s * ms);
    CompSum ash[COLS], asc[COLS];
#pragma unroll
    for (int j = 0; j < COLS; j++) ash[j] = asc[j] = COMP_SUM_ZERO;
    for (int k = 0; n0 + k * ROW_WARPS < n1; k++) {
        const int n = n0 + k * ROW_WARPS + warp, in_round = min((int)ROW_WARPS, n1 - n0 - k * ROW_WARPS);
        const bool valid = n < n1;  // the same in every lane of a warp
        const long r = (long)s * N + (valid ? n : n0);
        const real mean_r = mean[r], rstd_r = rstd[r];
        float4 xv[NV], gv[NV];
        ln_bwd_row_vec<NV>(xv, gv, (float4 *)(dx + r * D), (const float4 *)(x + r * D), (const float4 *)(dy + r * D),
                           sc, mean_r, rstd_r, lane, D, valid);
        for (int part = 0; part < 2; part++) {  // the dshift terms, then the dscale terms
            __syncthreads();                    // the previous terms are added
            if (valid)
#pragma unroll
                for (int q = 0; q < NV; q++) {
                    int j = lane + WARP * q;
                    if (j >= D4) continue;
                    float4 t = gv[q];
                    if (part)
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            set4(t, e, r_mul(r_mul(at4(gv[q], e), r_add(at4(xv[q], e), -mean_r)), rstd_r));
                    ((float4 *)(terms + (size_t)warp * D))[j] = t;
                }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < COLS; j++) {
                int d = threadIdx.x + THREADS * j;
                if (d >= D) continue;
                for (int w = 0; w < in_round; w++) {  // a branch, not an indexed pick: the sums stay in registers
                    if (part) asc[j].add(terms[(size_t)w * D + d]);
                    else ash[j].add(terms[(size_t)w * D + d]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < COLS; j++) {
        int d = threadIdx.x + THREADS * j;
        if (d >= D) continue;
        long idx = ((long)s * nparts + p) * D + d;
        psh[idx] = ash[j], psc[idx] = asc[j];
    }
}

// Registers (float4s per lane) for the vector path of a row of D floats, or 0 when it does not
// apply: D or the modulation stride not a multiple of 4, a pointer off 16 bytes, or a row longer
// than 32 * max_nv float4s. max_nv: 16 forward (D <= 2048); 12 backward (D <= 1536), which holds
// two rows and would spill at 16 (ptxas).
static int ln_vec_regs(int max_nv, int D, long ms, const void *a, const void *b, const void *c, const void *d,
                       const void *e) {
    if (D % 4 || ms % 4 || !aligned16(a) || !aligned16(b) || !aligned16(c) || !aligned16(d) || !aligned16(e)) return 0;
    static const int choices[] = {1, 2, 4, 8, 12, 16};
    for (int nv : choices)
        if (nv <= max_nv && D / 4 <= WARP * nv) return nv;
    return 0;
}

// Launches kernel<NV, ...> (the template's other arguments, if any, in the last parameter) for the
// NV that ln_vec_regs chose; false when it chose none.
#define LN_VEC_LAUNCH_T(nv, kernel, rest, grid, ...)                                           \
    [&]() {                                                                                    \
        switch (nv) {                                                                          \
        case 1: kernel<1 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;          \
        case 2: kernel<2 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;          \
        case 4: kernel<4 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;          \
        case 8: kernel<8 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;          \
        case 12: kernel<12 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;        \
        case 16: kernel<16 rest><<<grid, ROW_WARPS * WARP>>>(__VA_ARGS__); return true;        \
        default: return false;                                                                 \
        }                                                                                      \
    }()
#define LN_VEC_LAUNCH(nv, kernel, grid, ...) LN_VEC_LAUNCH_T(nv, kernel, , grid, __VA_ARGS__)
#define COMMA ,

// y: the operand, OpT (bf16 on the "cuda" table). Its vector path stores four values at a time.
template <typename OpT>
static void cuda_ln_mod_fwd(Operand *y_op, real *mean, real *rstd, const real *x, const real *shift,
                            const real *scale, long ms, int S, int N, int D) {
    long rows = (long)S * N;
    if (rows <= 0 || D <= 0) return;
    OpT *y = (OpT *)y_op;
    int nv = op_aligned4<OpT>(y) ? ln_vec_regs(16, D, ms, x, shift, scale, x, x) : 0;
    unsigned grid = fc_cdiv(rows, ROW_WARPS);
    if (!LN_VEC_LAUNCH_T(nv, ln_mod_fwd_vec_kernel, COMMA OpT, grid, y, mean, rstd, x, shift, scale, ms, rows, N, D))
        ln_mod_fwd_kernel<OpT><<<grid, ROW_WARPS * WARP>>>(y, mean, rstd, x, shift, scale, ms, rows, N, D);
    kernelCheck();
}

static void cuda_ln_mod_bwd(real *dx, real *dshift, real *dscale, const real *dy, const real *x, const real *mean,
                            const real *rstd, const real *scale, long ms, int S, int N, int D) {
    long rows = (long)S * N;
    if (rows <= 0 || D <= 0) return;
    int fused_nv = fc_routes.ln_mod_fused && dx && (dshift || dscale) ? ln_vec_regs(12, D, ms, dx, dy, x, scale, scale) : 0;
    if (fused_nv) {  // the ln_mod_fused route: dx and pass 1 in one kernel, then pass 2
        int nparts = (int)fc_cdiv(N, LN_ROWS_PER_PART);
        size_t count = (size_t)S * nparts * D, smem = sizeof(real) * ROW_WARPS * D;
        CompSum *psh = (CompSum *)fc_cuda_scratch(SCRATCH_NORM, 2 * count * sizeof(CompSum)), *psc = psh + count;
        fc_route_calls.ln_mod_fused++;
        unsigned grid = (unsigned)(S * nparts);
        switch (fused_nv) {
#define LN_FUSED(nv) \
    case nv: ln_mod_bwd_fused_kernel<nv><<<grid, ROW_WARPS * WARP, smem>>>(dx, psh, psc, dy, x, mean, rstd, scale, ms, N, D, nparts); break;
            LN_FUSED(1) LN_FUSED(2) LN_FUSED(4) LN_FUSED(8) LN_FUSED(12)
#undef LN_FUSED
        }
        kernelCheck();
        ln_mod_bwd_cols_sum_kernel<<<fc_cdiv((size_t)S * D, COL_THREADS), COL_THREADS>>>(dshift, dscale, psh, psc,
                                                                                         ms, S, D, nparts);
        kernelCheck();
        return;
    }
    if (dx) {
        int nv = ln_vec_regs(12, D, ms, dx, dy, x, scale, scale);
        unsigned grid = fc_cdiv(rows, ROW_WARPS);
        if (!LN_VEC_LAUNCH(nv, ln_mod_bwd_dx_vec_kernel, grid, dx, dy, x, mean, rstd, scale, ms, rows, N, D))
            ln_mod_bwd_dx_kernel<<<grid, ROW_WARPS * WARP>>>(dx, dy, x, mean, rstd, scale, ms, rows, N, D);
        kernelCheck();
    }
    if (dshift || dscale) {
        int nparts = (int)fc_cdiv(N, LN_ROWS_PER_PART);
        size_t count = (size_t)S * nparts * D;
        CompSum *psh = (CompSum *)fc_cuda_scratch(SCRATCH_NORM, 2 * count * sizeof(CompSum)), *psc = psh + count;
        ln_mod_bwd_cols_kernel<<<fc_cdiv(count, COL_THREADS), COL_THREADS>>>(psh, psc, dy, x, mean, rstd, S, N, D,
                                                                             nparts);
        kernelCheck();
        ln_mod_bwd_cols_sum_kernel<<<fc_cdiv((size_t)S * D, COL_THREADS), COL_THREADS>>>(dshift, dscale, psh, psc,
                                                                                         ms, S, D, nparts);
        kernelCheck();
    }
}

// ----------------------------------------------------------------------------
// RMS norm of the q and k heads. qkv, out, dout, dqkv: (T, 3D) rows [q | k | v]; rstd (T, 2H) with
// column part*H + h (part 0 = q, 1 = k); qw, kw, dqw, dkw: (dh), dh = D / H.

// One block of QK_THREADS per token t. Warp w normalises the head vectors hh = w, w + 4, ... of the
// 2H (hh = part*H + h), its lanes striding over the dh entries; then the block copies v. out is an
// operand (OpT: float, or bf16 on the "cuda" table: attention's input).
template <typename OpT>
static __global__ void qk_norm_fwd_kernel(OpT *out, real *rstd, const real *qkv, const real *qw, const real *kw,
                                          int D, int H) {
    int t = blockIdx.x, dh = D / H;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const real *row = qkv + (size_t)t * 3 * D;
    OpT *orow = out + (size_t)t * 3 * D;
    for (int hh = warp; hh < 2 * H; hh += QK_THREADS / WARP) {
        int part = hh / H, h = hh % H;
        const real *w = part ? kw : qw;
        const real *v = row + part * D + h * dh;
        OpT *o = orow + part * D + h * dh;
        stat_t sq = 0;
        for (int i = lane; i < dh; i += WARP) sq += (stat_t)v[i] * v[i];
        stat_t r = (stat_t)1 / sqrt(warp_sum(sq) / dh + (stat_t)RMS_EPS);
        if (lane == 0) rstd[(size_t)t * 2 * H + hh] = (real)r;
        for (int i = lane; i < dh; i += WARP) op_store(o + i, r_mul((real)(v[i] * r), w[i]));
    }
    for (int i = threadIdx.x; i < D; i += QK_THREADS) op_store(orow + 2 * D + i, row[2 * D + i]);
}

// dqkv = d out / d qkv (overwritten): one block per token, the warps over its 2H head vectors as
// the forward; the v part is dout's.
static __global__ void qk_norm_bwd_dx_kernel(real *dqkv, const real *dout, const real *qkv, const real *rstd,
                                             const real *qw, const real *kw, int D, int H) {
    int t = blockIdx.x, dh = D / H;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const real *row = qkv + (size_t)t * 3 * D, *drow = dout + (size_t)t * 3 * D;
    real *dxrow = dqkv + (size_t)t * 3 * D;
    for (int hh = warp; hh < 2 * H; hh += QK_THREADS / WARP) {
        int part = hh / H, h = hh % H;
        const real *w = part ? kw : qw;
        const real *x = row + part * D + h * dh, *dy = drow + part * D + h * dh;
        real *dx = dxrow + part * D + h * dh;
        stat_t r = rstd[(size_t)t * 2 * H + hh];
        stat_t dot = 0;
        for (int i = lane; i < dh; i += WARP) dot += (stat_t)dy[i] * w[i] * x[i];
        dot = warp_sum(dot);
        stat_t coef = r * r * r * dot / dh;
        for (int i = lane; i < dh; i += WARP)
            dx[i] = (real)s_sub(s_mul(s_mul(r, (stat_t)w[i]), (stat_t)dy[i]), s_mul((stat_t)x[i], coef));
    }
    for (int i = threadIdx.x; i < D; i += QK_THREADS) dxrow[2 * D + i] = drow[2 * D + i];
}

// Pass 1 of dqw/dkw. One thread per (chunk c, part, entry i), i fastest: sums the tokens
// t in [c*QK_TOKENS_PER_PART, ...) and, within a token, the heads h in order (the CPU's order),
// with compensation (CompSum). part_sums: (nchunks, 2, dh).
static __global__ void qk_norm_bwd_w_kernel(CompSum *part_sums, const real *dout, const real *qkv, const real *rstd,
                                            int T, int D, int H, int nchunks) {
    int dh = D / H;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)nchunks * 2 * dh) return;
    int i = (int)(idx % dh), part = (int)(idx / dh % 2), c = (int)(idx / dh / 2);
    int t0 = c * QK_TOKENS_PER_PART, t1 = min(T, t0 + QK_TOKENS_PER_PART);
    CompSum acc = COMP_SUM_ZERO;
    for (int t = t0; t < t1; t++) {
        size_t col = (size_t)t * 3 * D + part * D + i;
        const real *rs = rstd + (size_t)t * 2 * H + part * H;
        for (int h = 0; h < H; h++) acc.add(r_mul(r_mul(dout[col + h * dh], qkv[col + h * dh]), rs[h]));
    }
    part_sums[idx] = acc;
}

// Pass 2: one thread per (part, entry i); adds the nchunks partial sums in order.
static __global__ void qk_norm_bwd_w_sum_kernel(real *dqw, real *dkw, const CompSum *part_sums, int dh, int nchunks,
                                                 int add) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= 2 * dh) return;
    int part = idx / dh, i = idx % dh;
    real *dw = part ? dkw : dqw;
    if (!dw) return;
    CompSum acc = COMP_SUM_ZERO;
    for (int c = 0; c < nchunks; c++) acc.merge(part_sums[((long)c * 2 + part) * dh + i]);
    dw[i] = add ? r_add(dw[i], acc.value()) : acc.value();
}

// The vector path of the two row kernels (dh % 4 == 0, dh <= 128, qkv-shaped rows on 16 bytes):
// lane l < dh / 4 holds float4 l of a head vector, one load per array; the weights are read as
// scalars (they lie wherever the parameter allocation puts them). Same formulas as above.
template <typename OpT>
static __global__ void qk_norm_fwd_vec_kernel(OpT *out, real *rstd, const real *qkv, const real *qw, const real *kw,
                                              int D, int H) {
    int t = blockIdx.x, dh = D / H, dh4 = dh / 4;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const real *row = qkv + (size_t)t * 3 * D;
    OpT *orow = out + (size_t)t * 3 * D;
    for (int hh = warp; hh < 2 * H; hh += QK_THREADS / WARP) {
        int part = hh / H, h = hh % H;
        const real *w = (part ? kw : qw) + 4 * lane;
        float4 x = lane < dh4 ? ((const float4 *)(row + part * D + h * dh))[lane] : make_float4(0.f, 0.f, 0.f, 0.f);
        stat_t sq = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) sq += (stat_t)at4(x, e) * at4(x, e);
        stat_t r = (stat_t)1 / sqrt(warp_sum(sq) / dh + (stat_t)RMS_EPS);
        if (lane == 0) rstd[(size_t)t * 2 * H + hh] = (real)r;
        if (lane >= dh4) continue;
        float4 o = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int e = 0; e < 4; e++) set4(o, e, r_mul((real)(at4(x, e) * r), w[e]));
        op_store4(orow + part * D + h * dh + 4 * lane, o);
    }
    const float4 *src = (const float4 *)(row + 2 * D);
    for (int i = threadIdx.x; i < D / 4; i += QK_THREADS) op_store4(orow + 2 * D + 4 * i, src[i]);
}

// One token's q and k head vectors of the vector backward and its v part, by the block: warp w takes
// the head vectors hh = w, w + 4, ... (dqkv's row dxrow from dout's drow, qkv's row); where terms is
// not NULL, lane l < dh / 4 also leaves the weight gradients' terms dout * qkv * rstd of its four
// entries at terms + hh * dh (the fused kernel below).
__device__ __forceinline__ void qk_bwd_token_vec(real *dxrow, real *terms, const real *row, const real *drow,
                                                 const real *rs, const real *qw, const real *kw, int D, int H) {
    const int dh = D / H, dh4 = dh / 4, warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    for (int hh = warp; hh < 2 * H; hh += QK_THREADS / WARP) {
        int part = hh / H, h = hh % H;
        const real *w = (part ? kw : qw) + 4 * lane;
        size_t off = (size_t)part * D + h * dh;
        float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        float4 x = lane < dh4 ? ((const float4 *)(row + off))[lane] : zero;
        float4 dy = lane < dh4 ? ((const float4 *)(drow + off))[lane] : zero;
        float wv[4] = {0.f, 0.f, 0.f, 0.f};
        if (lane < dh4) wv[0] = w[0], wv[1] = w[1], wv[2] = w[2], wv[3] = w[3];
        const real rr = rs[hh];
        stat_t r = rr;
        stat_t dot = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) dot += (stat_t)at4(dy, e) * wv[e] * at4(x, e);
        dot = warp_sum(dot);
        stat_t coef = r * r * r * dot / dh;
        if (lane >= dh4) continue;
        float4 d, term;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            set4(d, e, (real)s_sub(s_mul(s_mul(r, (stat_t)wv[e]), (stat_t)at4(dy, e)),
                                   s_mul((stat_t)at4(x, e), coef)));
            set4(term, e, r_mul(r_mul(at4(dy, e), at4(x, e)), rr));
        }
        ((float4 *)(dxrow + off))[lane] = d;
        if (terms) ((float4 *)(terms + (size_t)hh * dh))[lane] = term;
    }
    const float4 *src = (const float4 *)(drow + 2 * D);
    float4 *dst = (float4 *)(dxrow + 2 * D);
    for (int i = threadIdx.x; i < D / 4; i += QK_THREADS) dst[i] = src[i];
}

static __global__ void qk_norm_bwd_dx_vec_kernel(real *dqkv, const real *dout, const real *qkv, const real *rstd,
                                                 const real *qw, const real *kw, int D, int H) {
    size_t t = blockIdx.x;
    qk_bwd_token_vec(dqkv + t * 3 * D, NULL, qkv + t * 3 * D, dout + t * 3 * D, rstd + t * 2 * H, qw, kw, D, H);
}

// The qk_norm_fused route: dqkv and pass 1 of dqw/dkw in one pass over dout and qkv (the two kernels
// above read the q and k parts of both twice). One block per chunk of QK_TOKENS_PER_PART tokens; for
// each token in order, the warps take its head vectors as qk_norm_bwd_dx_vec_kernel does and leave
// the terms dout * qkv * rstd of the weight gradients in shared memory (2H, dh), and thread (part,
// entry) adds its heads' terms in order: the same terms in the same order as qk_norm_bwd_w_kernel,
// so the same bytes. Shared memory: 2D floats (D <= 6144).
static __global__ void qk_norm_bwd_fused_kernel(real *dqkv, CompSum *part_sums, const real *dout, const real *qkv,
                                                const real *rstd, const real *qw, const real *kw, int T, int D,
                                                int H) {
    extern __shared__ __align__(16) unsigned char smem[];
    real *terms = (real *)smem;  // (2H, dh): one token's
    const int c = blockIdx.x, dh = D / H;
    const int t0 = c * QK_TOKENS_PER_PART, t1 = min(T, t0 + QK_TOKENS_PER_PART);
    constexpr int OWN = 2 * 4 * WARP / QK_THREADS;  // (part, entry) pairs a thread owns: 2 dh <= 256
    CompSum acc[OWN];
#pragma unroll
    for (int j = 0; j < OWN; j++) acc[j] = COMP_SUM_ZERO;
    for (int t = t0; t < t1; t++) {
        qk_bwd_token_vec(dqkv + (size_t)t * 3 * D, terms, qkv + (size_t)t * 3 * D, dout + (size_t)t * 3 * D,
                         rstd + (size_t)t * 2 * H, qw, kw, D, H);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < OWN; j++) {
            const int idx = threadIdx.x + QK_THREADS * j, part = idx / dh, i = idx % dh;
            if (idx < 2 * dh)
                for (int h = 0; h < H; h++) acc[j].add(terms[(size_t)(part * H + h) * dh + i]);
        }
        __syncthreads();  // the terms are read before the next token's overwrite them
    }
#pragma unroll
    for (int j = 0; j < OWN; j++) {
        const int idx = threadIdx.x + QK_THREADS * j, part = idx / dh, i = idx % dh;
        if (idx < 2 * dh) part_sums[((long)c * 2 + part) * dh + i] = acc[j];
    }
}

// Whether the vector path takes a (T, 3D) layout with heads of D / H.
static bool qk_vec(int D, int H, const void *a, const void *b, const void *c) {
    int dh = D / H;
    return dh % 4 == 0 && dh <= 4 * WARP && aligned16(a) && aligned16(b) && aligned16(c);
}

template <typename OpT>
static void cuda_qk_norm_fwd(Operand *out_op, real *rstd, const real *qkv, const real *qw, const real *kw, int T,
                             int D, int H) {
    if (T <= 0 || D <= 0) return;
    OpT *out = (OpT *)out_op;
    if (op_aligned4<OpT>(out) && qk_vec(D, H, qkv, qkv, qkv))
        qk_norm_fwd_vec_kernel<OpT><<<T, QK_THREADS>>>(out, rstd, qkv, qw, kw, D, H);
    else
        qk_norm_fwd_kernel<OpT><<<T, QK_THREADS>>>(out, rstd, qkv, qw, kw, D, H);
    kernelCheck();
}

static void cuda_qk_norm_bwd(real *dqkv, real *dqw, real *dkw, GradMode pmode, const real *dout, const real *qkv,
                             const real *rstd, const real *qw, const real *kw, int T, int D, int H) {
    if (T <= 0 && D > 0 && pmode == GRAD_SET)  // sums over no tokens: zero
        for (real *dw : {dqw, dkw})
            if (dw) cudaCheck(cudaMemset(dw, 0, sizeof(real) * (size_t)(D / H)));
    if (T <= 0 || D <= 0) return;
    if (fc_routes.qk_norm_fused && dqkv && (dqw || dkw) && qk_vec(D, H, dqkv, dout, qkv) && D <= 6144) {
        int dh = D / H, nchunks = (int)fc_cdiv(T, QK_TOKENS_PER_PART);
        CompSum *part_sums = (CompSum *)fc_cuda_scratch(SCRATCH_NORM, (size_t)nchunks * 2 * dh * sizeof(CompSum));
        fc_route_calls.qk_norm_fused++;
        qk_norm_bwd_fused_kernel<<<nchunks, QK_THREADS, sizeof(real) * 2 * D>>>(dqkv, part_sums, dout, qkv, rstd, qw, kw, T, D, H);
        kernelCheck();
        qk_norm_bwd_w_sum_kernel<<<fc_cdiv(2 * dh, COL_THREADS), COL_THREADS>>>(dqw, dkw, part_sums, dh, nchunks,
                                                                                pmode == GRAD_ADD);
        kernelCheck();
        return;
    }
    if (dqkv) {
        if (qk_vec(D, H, dqkv, dout, qkv)) qk_norm_bwd_dx_vec_kernel<<<T, QK_THREADS>>>(dqkv, dout, qkv, rstd, qw, kw, D, H);
        else qk_norm_bwd_dx_kernel<<<T, QK_THREADS>>>(dqkv, dout, qkv, rstd, qw, kw, D, H);
        kernelCheck();
    }
    if (dqw || dkw) {
        int dh = D / H, nchunks = (int)fc_cdiv(T, QK_TOKENS_PER_PART);
        size_t count = (size_t)nchunks * 2 * dh;
        CompSum *part_sums = (CompSum *)fc_cuda_scratch(SCRATCH_NORM, count * sizeof(CompSum));
        qk_norm_bwd_w_kernel<<<fc_cdiv(count, COL_THREADS), COL_THREADS>>>(part_sums, dout, qkv, rstd, T, D, H,
                                                                           nchunks);
        kernelCheck();
        qk_norm_bwd_w_sum_kernel<<<fc_cdiv(2 * dh, COL_THREADS), COL_THREADS>>>(dqw, dkw, part_sums, dh, nchunks,
                                                                                pmode == GRAD_ADD);
        kernelCheck();
    }
}

void cuda_register_norm(Backend *be, int bf16) {
    be->ln_mod_fwd = bf16 ? cuda_ln_mod_fwd<__nv_bfloat16> : cuda_ln_mod_fwd<float>;
    be->ln_mod_bwd = cuda_ln_mod_bwd;
    be->qk_norm_fwd = bf16 ? cuda_qk_norm_fwd<__nv_bfloat16> : cuda_qk_norm_fwd<float>;
    be->qk_norm_bwd = cuda_qk_norm_bwd;
}
