// elementwise.cu: the CUDA backend's elementwise and small-reduction ops, each a port of its
// counterpart in src/backend/cpu/cpu_backend.c with the same formulas and constants:
//   randn (Philox4x32-10 + Box-Muller, src/base/philox.c), gelu, silu, the gated residual add,
//   patchify / unpatchify, the sinusoid embedding, the position + time embedding add, the masked
//   MSE loss and the rectified-flow mix.
// Backward ops accumulate (+=) and skip NULL gradients, except those backend.h marks "=" (GELU's
// and SiLU's dx, the gated residual's dh), which overwrite. Every reduction runs in a fixed order that
// depends only on the shapes (fixed chunks, then fixed shared-memory trees), never on atomics or
// on the GPU, so results are the same bytes on every run. Where the CPU computes in float, the
// products and sums are written with __fmul_rn / __fadd_rn so that nvcc does not contract them
// into FMAs (the CPU build does not either), and the results match the CPU bit for bit.
#include <math.h>

#include "cuda_common.cuh"

static_assert(sizeof(real) == sizeof(float), "the CUDA backend is built with real = float");

// Flat kernels: flat_grid, FLAT_THREADS and GRID_STRIDE_LOOP (cuda_common.cuh).

// Four consecutive elements (group i4 of a flat array) with one float4 access when VEC (the caller
// checked that the pointers are 16-byte aligned), else four scalar ones: either way four loads in
// flight per thread, not one.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float *p, size_t i4) {
    if (VEC) return ((const float4 *)p)[i4];
    const float *q = p + 4 * i4;
    return make_float4(q[0], q[1], q[2], q[3]);
}
template <bool VEC>
__device__ __forceinline__ void store4(float *p, size_t i4, float4 v) {
    if (VEC) {
        ((float4 *)p)[i4] = v;
        return;
    }
    float *q = p + 4 * i4;
    q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
}
static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Per-slot kernels put the slot in gridDim.y (or z), which holds at most 65535.
static void check_slots(int S, const char *op) {
    if (S > 65535) fc_die("CUDA %s: %d slots is more than this kernel's grid holds (65535)", op, S);
}

// ----------------------------------------------------------------------------
// randomness: Philox4x32-10, the same counter and key layout as src/base/philox.c

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// One block of 4 words for counter (block, step, stream) and key seed, as philox_block().
__device__ __forceinline__ void philox_block_dev(uint64_t seed, uint32_t step, uint32_t stream, uint64_t block,
                                                 uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = step, c3 = stream;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        uint32_t hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// The top 24 bits of u, centred in their interval: a uniform in (0, 1) (exact in double).
__device__ __forceinline__ double u32_to_uniform_dev(uint32_t u) {
    return ((double)(u >> 8) + 0.5) * (1.0 / 16777216.0);
}

// out[i] = mean + std * normal(offset + i). Element index e lies in Philox block e / 4; words
// (0, 1) and (2, 3) of a block are one Box-Muller pair, giving elements 4b, 4b+1 (cos, sin) and
// 4b+2, 4b+3. One thread per Philox block that the range touches (grid-stride), so each block is
// computed once; its up to 4 elements are written where they fall inside [offset, offset + n).
__global__ void randn_kernel(float *__restrict__ out, size_t n, float mean, float std, uint64_t seed, uint32_t step,
                             uint32_t stream, uint64_t offset) {
    uint64_t first = offset >> 2, nblocks = ((offset + n - 1) >> 2) - first + 1;
    GRID_STRIDE_LOOP(t, nblocks) {
        uint64_t block = first + t;
        uint32_t r[4];
        philox_block_dev(seed, step, stream, block, r);
        for (int pair = 0; pair < 4; pair += 2) {
            uint64_t e0 = block * 4 + pair, e1 = e0 + 1;  // the cos and the sin element of this pair
            bool want0 = e0 >= offset && e0 - offset < n, want1 = e1 >= offset && e1 - offset < n;
            if (!want0 && !want1) continue;
            double radius = sqrt(-2.0 * log(u32_to_uniform_dev(r[pair])));
            double angle = 6.283185307179586 * u32_to_uniform_dev(r[pair + 1]);
            // mean + std * z, without contraction into an FMA (as the CPU computes it)
            if (want0) out[e0 - offset] = (float)__dadd_rn((double)mean, __dmul_rn((double)std, radius * cos(angle)));
            if (want1) out[e1 - offset] = (float)__dadd_rn((double)mean, __dmul_rn((double)std, radius * sin(angle)));
        }
    }
}

static void cuda_randn(real *out, size_t n, real mean, real std, uint64_t seed, uint32_t step, uint32_t stream,
                       uint64_t offset) {
    if (n == 0) return;
    size_t nblocks = (size_t)(((offset + n - 1) >> 2) - (offset >> 2) + 1);
    randn_kernel<<<flat_grid(nblocks), FLAT_THREADS>>>(out, n, mean, std, seed, step, stream, offset);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// elementwise activations, one thread per element (grid-stride). GELU (tanh form) as the CPU
// computes it: in float, 0.5 (1 + tanh u) written as the sigmoid 1 / (1 + exp(-2u)), one expf and
// no double arithmetic (double runs at 1/64 of the float rate on the GeForce cards framechain
// targets). SiLU in double, as on the CPU (it only sees the few conditioning vectors).

#define GELU_C 0.7978845608028654f  // sqrt(2/pi)

__device__ __forceinline__ float gelu_sigmoid_dev(float v) {
    float u = GELU_C * (v + 0.044715f * v * v * v);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gelu_dev(float v) { return v * gelu_sigmoid_dev(v); }

// d/dv [v sig(2u)] = sig + 2 v sig (1 - sig) du/dv, du/dv = GELU_C (1 + 3 * 0.044715 v^2).
__device__ __forceinline__ float gelu_grad_dev(float v) {
    float sg = gelu_sigmoid_dev(v);
    return sg + 2.0f * v * sg * (1.0f - sg) * GELU_C * (1.0f + (float)(3 * 0.044715) * v * v);
}

// Groups of four elements (grid-stride), then the last n % 4 one per thread. y is an operand (OpT).
template <bool VEC, typename OpT>
__global__ void gelu_fwd_kernel(OpT *y, const float *x, size_t n) {
    size_t n4 = n / 4;
    GRID_STRIDE_LOOP(i, n4) {
        float4 v = load4<VEC>(x, i), g = make_float4(gelu_dev(v.x), gelu_dev(v.y), gelu_dev(v.z), gelu_dev(v.w));
        OpT *q = y + 4 * i;
        if (VEC) op_store4(q, g);
        else op_store(q, g.x), op_store(q + 1, g.y), op_store(q + 2, g.z), op_store(q + 3, g.w);
    }
    GRID_STRIDE_LOOP(i, n - 4 * n4) op_store(y + 4 * n4 + i, gelu_dev(x[4 * n4 + i]));
}

template <bool VEC>
__global__ void gelu_bwd_kernel(float *dx, const float *dy, const float *x, size_t n) {
    size_t n4 = n / 4;
    GRID_STRIDE_LOOP(i, n4) {
        float4 v = load4<VEC>(x, i), g = load4<VEC>(dy, i);
        store4<VEC>(dx, i, make_float4(g.x * gelu_grad_dev(v.x), g.y * gelu_grad_dev(v.y), g.z * gelu_grad_dev(v.z),
                                       g.w * gelu_grad_dev(v.w)));
    }
    GRID_STRIDE_LOOP(i, n - 4 * n4) dx[4 * n4 + i] = dy[4 * n4 + i] * gelu_grad_dev(x[4 * n4 + i]);
}

template <typename OpT>
__global__ void silu_fwd_kernel(OpT *y, const float *x, size_t n) {
    GRID_STRIDE_LOOP(i, n) op_store(y + i, (float)(x[i] / (1.0 + exp(-(double)x[i]))));
}

__global__ void silu_bwd_kernel(float *dx, const float *dy, const float *x, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        dx[i] = (float)(dy[i] * s * (1.0 + x[i] * (1.0 - s)));
    }
}

template <typename OpT>
static void gelu_fwd(OpT *y, const real *x, size_t n) {
    if (n == 0) return;
    unsigned grid = flat_grid((n + 3) / 4);
    if (op_aligned4<OpT>(y) && aligned16(x)) gelu_fwd_kernel<true, OpT><<<grid, FLAT_THREADS>>>(y, x, n);
    else gelu_fwd_kernel<false, OpT><<<grid, FLAT_THREADS>>>(y, x, n);
    kernelCheck();
}
void fc_gelu_fwd(Operand *y, const real *x, size_t n, int bf16) {
    if (bf16) gelu_fwd((__nv_bfloat16 *)y, x, n);
    else gelu_fwd((float *)y, x, n);
}
template <typename OpT>
static void cuda_gelu_fwd(Operand *y, const real *x, size_t n) {
    gelu_fwd((OpT *)y, x, n);
}
void fc_gelu_bwd(real *dx, const real *dy, const real *x, size_t n) {
    if (n == 0 || !dx) return;
    unsigned grid = flat_grid((n + 3) / 4);
    if (aligned16(dx) && aligned16(dy) && aligned16(x)) gelu_bwd_kernel<true><<<grid, FLAT_THREADS>>>(dx, dy, x, n);
    else gelu_bwd_kernel<false><<<grid, FLAT_THREADS>>>(dx, dy, x, n);
    kernelCheck();
}
template <typename OpT>
static void cuda_silu_fwd(Operand *y, const real *x, size_t n) {
    if (n == 0) return;
    silu_fwd_kernel<OpT><<<flat_grid(n), FLAT_THREADS>>>((OpT *)y, x, n);
    kernelCheck();
}
static void cuda_silu_bwd(real *dx, const real *dy, const real *x, size_t n) {
    if (n == 0 || !dx) return;
    silu_bwd_kernel<<<flat_grid(n), FLAT_THREADS>>>(dx, dy, x, n);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// per-slot column sums: out[s * ostride + d] += sum over n < N of a[s, n, d] * (b ? b[s, n, d] : 1),
// a and b (S, N, D) (colsum.cu). Used by gated_add_bwd (dgate) and add_pos_time_bwd (dtemb).
static void slot_colsum(real *out, long ostride, const real *a, const real *b, int S, int N, int D,
                        const char *op) {
    fc_cuda_colsum(out, ostride, 1, NULL, NULL, a, b, S, N, D, op);
}

// ----------------------------------------------------------------------------
// gated residual add: out = x + gate[s] * h, x, h, out (S*N, D), gate rows of stride ms

// One thread per group of four elements (grid-stride); D % 4 == 0, so a group lies in one row. It
// reads x before writing out, so out may alias x.
template <bool VEC>
__global__ void gated_add_fwd_kernel(float *out, const float *x, const float *h, const float *gate, long ms,
                                     size_t N, size_t D, size_t total) {
    GRID_STRIDE_LOOP(i4, total / 4) {
        size_t i = 4 * i4, row = i / D, d = i - row * D, s = row / N;
        const float *g = gate + s * ms + d;
        float4 a = load4<VEC>(x, i4), b = load4<VEC>(h, i4), o;
        o.x = __fadd_rn(a.x, __fmul_rn(g[0], b.x)), o.y = __fadd_rn(a.y, __fmul_rn(g[1], b.y));
        o.z = __fadd_rn(a.z, __fmul_rn(g[2], b.z)), o.w = __fadd_rn(a.w, __fmul_rn(g[3], b.w));
        store4<VEC>(out, i4, o);
    }
}

// dx += dout; dh = gate[s] * dout, by groups of four as the forward; either may be NULL.
template <bool VEC>
__global__ void gated_add_bwd_kernel(float *dx, float *dh, const float *dout, const float *gate, long ms, size_t N,
                                     size_t D, size_t total) {
    GRID_STRIDE_LOOP(i4, total / 4) {
        float4 go = load4<VEC>(dout, i4);
        if (dx) {
            float4 a = load4<VEC>(dx, i4);
            a.x = __fadd_rn(a.x, go.x), a.y = __fadd_rn(a.y, go.y), a.z = __fadd_rn(a.z, go.z), a.w = __fadd_rn(a.w, go.w);
            store4<VEC>(dx, i4, a);
        }
        if (dh) {
            size_t i = 4 * i4, row = i / D, d = i - row * D, s = row / N;
            const float *g = gate + s * ms + d;
            store4<VEC>(dh, i4, make_float4(__fmul_rn(g[0], go.x), __fmul_rn(g[1], go.y), __fmul_rn(g[2], go.z),
                                            __fmul_rn(g[3], go.w)));
        }
    }
}

// The same one element per thread, for D % 4 != 0.
__global__ void gated_add_fwd_scalar_kernel(float *out, const float *x, const float *h, const float *gate, long ms,
                                            size_t N, size_t D, size_t total) {
    GRID_STRIDE_LOOP(i, total) {
        size_t row = i / D, d = i - row * D, s = row / N;
        out[i] = __fadd_rn(x[i], __fmul_rn(gate[s * ms + d], h[i]));
    }
}

__global__ void gated_add_bwd_scalar_kernel(float *dx, float *dh, const float *dout, const float *gate, long ms,
                                            size_t N, size_t D, size_t total) {
    GRID_STRIDE_LOOP(i, total) {
        float go = dout[i];
        if (dx) dx[i] = __fadd_rn(dx[i], go);
        if (dh) {
            size_t row = i / D, d = i - row * D, s = row / N;
            dh[i] = __fmul_rn(gate[s * ms + d], go);
        }
    }
}

static void cuda_gated_add_fwd(real *out, const real *x, const real *h, const real *gate, long ms, int S, int N,
                               int D) {
    size_t total = (size_t)S * N * D;
    if (total == 0) return;
    if (D % 4)
        gated_add_fwd_scalar_kernel<<<flat_grid(total), FLAT_THREADS>>>(out, x, h, gate, ms, (size_t)N, (size_t)D, total);
    else if (aligned16(out) && aligned16(x) && aligned16(h))
        gated_add_fwd_kernel<true><<<flat_grid(total / 4), FLAT_THREADS>>>(out, x, h, gate, ms, (size_t)N, (size_t)D, total);
    else
        gated_add_fwd_kernel<false><<<flat_grid(total / 4), FLAT_THREADS>>>(out, x, h, gate, ms, (size_t)N, (size_t)D, total);
    kernelCheck();
}

static void cuda_gated_add_bwd(real *dx, real *dh, real *dgate, const real *dout, const real *h, const real *gate,
                               long ms, int S, int N, int D) {
    size_t total = (size_t)S * N * D;
    if (total > 0 && (dx || dh)) {
        if (D % 4)
            gated_add_bwd_scalar_kernel<<<flat_grid(total), FLAT_THREADS>>>(dx, dh, dout, gate, ms, (size_t)N, (size_t)D, total);
        else if (aligned16(dx) && aligned16(dh) && aligned16(dout))  // NULL is aligned
            gated_add_bwd_kernel<true><<<flat_grid(total / 4), FLAT_THREADS>>>(dx, dh, dout, gate, ms, (size_t)N, (size_t)D, total);
        else
            gated_add_bwd_kernel<false><<<flat_grid(total / 4), FLAT_THREADS>>>(dx, dh, dout, gate, ms, (size_t)N, (size_t)D, total);
        kernelCheck();
    }
    // dgate[s] += sum over the slot's rows of dout * h
    if (dgate) slot_colsum(dgate, ms, dout, h, S, N, D, "gated_add_bwd");
}

// ----------------------------------------------------------------------------
// patchify / unpatchify: frames (S, C, H, W) <-> patches (S, nh*nw, P*P*C), vector order (py, px, c).
// One thread per mapped element, indexed in the destination's order so that writes are
// coalesced; the map is one-to-one, so accumulating needs no atomics. Pixels beyond nh*P rows or
// nw*P columns (H or W not a multiple of P) belong to no patch and are left alone, as on the CPU.
// DstT: float, or bf16 for patchify's output on the "cuda" table (an operand).

template <bool to_patches, bool accumulate, typename DstT>
__global__ void patch_map_kernel(DstT *__restrict__ dst, const float *__restrict__ src, int C, int H, int W, int P,
                                 size_t total) {
    int nh = H / P, nw = W / P, ppc = P * P * C;
    GRID_STRIDE_LOOP(idx, total) {
        size_t s, pat, pix;
        int c, i, j, py, px;
        if (to_patches) {  // idx = ((s*nh + i)*nw + j)*ppc + (py*P + px)*C + c
            size_t t = idx;
            c = (int)(t % C), t /= C;
            px = (int)(t % P), t /= P;
            py = (int)(t % P), t /= P;
            j = (int)(t % nw), t /= nw;
            i = (int)(t % nh), s = t / nh;
        } else {  // idx = ((s*C + c)*(nh*P) + y)*(nw*P) + x, over the pixels that patches cover
            size_t t = idx;
            int x = (int)(t % ((size_t)nw * P));
            t /= (size_t)nw * P;
            int y = (int)(t % ((size_t)nh * P));
            t /= (size_t)nh * P;
            c = (int)(t % C), s = t / C;
            i = y / P, py = y % P, j = x / P, px = x % P;
        }
        pix = ((s * C + c) * H + (size_t)i * P + py) * W + (size_t)j * P + px;
        pat = ((s * nh + i) * nw + j) * ppc + (size_t)(py * P + px) * C + c;
        size_t d = to_patches ? pat : pix, from = to_patches ? pix : pat;
        if constexpr (accumulate) dst[d] = __fadd_rn(dst[d], src[from]);
        else op_store(dst + d, src[from]);
    }
}

template <bool to_patches, bool accumulate, typename DstT = float>
static void patch_map(DstT *dst, const real *src, int S, int C, int H, int W, int P) {
    if (!dst || P <= 0) return;
    size_t total = (size_t)S * (H / P) * (W / P) * P * P * C;
    if (total == 0) return;
    patch_map_kernel<to_patches, accumulate, DstT><<<flat_grid(total), FLAT_THREADS>>>(dst, src, C, H, W, P, total);
    kernelCheck();
}

template <typename OpT>
static void cuda_patchify_fwd(Operand *patches, const real *frames, int S, int C, int H, int W, int P) {
    patch_map<true, false>((OpT *)patches, frames, S, C, H, W, P);
}
static void cuda_patchify_bwd(real *dframes, const real *dpatches, int S, int C, int H, int W, int P) {
    patch_map<false, true>(dframes, dpatches, S, C, H, W, P);
}
static void cuda_unpatchify_fwd(real *frames, const real *patches, int S, int C, int H, int W, int P) {
    patch_map<false, false>(frames, patches, S, C, H, W, P);
}
static void cuda_unpatchify_bwd(real *dpatches, const real *dframes, int S, int C, int H, int W, int P) {
    patch_map<true, true>(dpatches, dframes, S, C, H, W, P);
}

// ----------------------------------------------------------------------------
// sinusoid embedding: out (M, d) = [cos(x*scale*w_k), sin(x*scale*w_k)], w_k = 10000^(-k/half)

#define LOG_10000 9.210340371976184  // log(10000.0), the double the CPU's log gives

__device__ __forceinline__ double sinusoid_freq_dev(int k, int half) { return exp(-LOG_10000 * k / half); }

// One thread per (m, k), k < half (grid-stride); it writes out[m, k] and out[m, half + k] (an operand).
template <typename OpT>
__global__ void sinusoid_fwd_kernel(OpT *out, const float *x, float scale, int d, size_t total) {
    int half = d / 2;
    GRID_STRIDE_LOOP(i, total) {
        size_t m = i / half;
        int k = (int)(i - m * half);
        double a = (double)x[m] * scale * sinusoid_freq_dev(k, half);
        op_store(out + m * d + k, (float)cos(a));
        op_store(out + m * d + half + k, (float)sin(a));
    }
}

// One thread per row m (grid-stride), summing over k in increasing order in double, as the CPU.
__global__ void sinusoid_bwd_kernel(float *dx, const float *dout, const float *x, float scale, int M, int d) {
    int half = d / 2;
    GRID_STRIDE_LOOP(m, (size_t)M) {
        const float *g = dout + m * d;
        double acc = 0;
        for (int k = 0; k < half; k++) {
            double w = scale * sinusoid_freq_dev(k, half), a = (double)x[m] * w;
            acc = __dadd_rn(acc, __dadd_rn(-g[k] * sin(a) * w, g[half + k] * cos(a) * w));
        }
        dx[m] = __fadd_rn(dx[m], (float)acc);
    }
}

template <typename OpT>
static void cuda_sinusoid_fwd(Operand *out, const real *x, real scale, int M, int d) {
    size_t total = (size_t)M * (d / 2);
    if (total == 0) return;
    sinusoid_fwd_kernel<OpT><<<flat_grid(total), FLAT_THREADS>>>((OpT *)out, x, scale, d, total);
    kernelCheck();
}
static void cuda_sinusoid_bwd(real *dx, const real *dout, const real *x, real scale, int M, int d) {
    if (!dx || M <= 0) return;
    sinusoid_bwd_kernel<<<flat_grid((size_t)M), FLAT_THREADS>>>(dx, dout, x, scale, M, d);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// token embedding add: out (S*N, D) = x + pos[n] (N, D) + temb[s] (S, D)

// One thread per element (grid-stride), summed in the CPU's order (x + pos) + temb.
__global__ void add_pos_time_fwd_kernel(float *out, const float *x, const float *pos, const float *temb, size_t N,
                                        size_t D, size_t total) {
    GRID_STRIDE_LOOP(i, total) {
        size_t row = i / D, d = i - row * D, n = row % N, s = row / N;
        out[i] = __fadd_rn(__fadd_rn(x[i], pos[n * D + d]), temb[s * D + d]);
    }
}

// dx += dout, one thread per element (grid-stride).
__global__ void add_kernel(float *dx, const float *dout, size_t total) {
    GRID_STRIDE_LOOP(i, total) dx[i] = __fadd_rn(dx[i], dout[i]);
}

static void cuda_add_pos_time_fwd(real *out, const real *x, const real *pos, const real *temb, int S, int N, int D) {
    size_t total = (size_t)S * N * D;
    if (total == 0) return;
    add_pos_time_fwd_kernel<<<flat_grid(total), FLAT_THREADS>>>(out, x, pos, temb, (size_t)N, (size_t)D, total);
    kernelCheck();
}

static void cuda_add_pos_time_bwd(real *dx, real *dtemb, const real *dout, int S, int N, int D) {
    size_t total = (size_t)S * N * D;
    if (dx && total > 0) {
        add_kernel<<<flat_grid(total), FLAT_THREADS>>>(dx, dout, total);
        kernelCheck();
    }
    // dtemb[s] += sum over the slot's rows of dout
    if (dtemb) slot_colsum(dtemb, D, dout, NULL, S, N, D, "add_pos_time_bwd");
}

// ----------------------------------------------------------------------------
// masked MSE: loss = sum_s mask[s] * sum_e (pred - target)^2 / (sum(mask) * E); pred, target (S, E)

#define MSE_THREADS 256
#define MSE_CHUNK (MSE_THREADS * 16)  // elements of one slot per block of pass 1

// Pass 1. Block (chunk, s) sums (pred - target)^2 over elements [chunk*MSE_CHUNK, +MSE_CHUNK) of
// slot s in double: thread t takes elements t, t + 256, ... in order, then a fixed shared-memory
// tree (t += t + 128, t += t + 64, ..., t += t + 1) gives partial[s][chunk]. Slots with mask 0
// are skipped, as on the CPU (their partials are never read).
__global__ void mse_partial_kernel(double *__restrict__ partial, const float *__restrict__ pred,
                                   const float *__restrict__ target, const float *__restrict__ mask, long E) {
    __shared__ double acc[MSE_THREADS];
    int s = blockIdx.y, t = threadIdx.x;
    if (mask[s] == 0) return;  // the whole block leaves together
    long e0 = (long)blockIdx.x * MSE_CHUNK, e1 = e0 + MSE_CHUNK < E ? e0 + MSE_CHUNK : E;
    const float *p = pred + (size_t)s * E, *g = target + (size_t)s * E;
    double sum = 0;
    for (long e = e0 + t; e < e1; e += MSE_THREADS) {
        double diff = (double)p[e] - g[e];
        sum += diff * diff;
    }
    acc[t] = sum;
    __syncthreads();
    for (int half = MSE_THREADS / 2; half > 0; half /= 2) {
        if (t < half) acc[t] += acc[t + half];
        __syncthreads();
    }
    if (t == 0) partial[(size_t)s * gridDim.x + blockIdx.x] = acc[0];
}

// Pass 2, one block: thread t sums the chunks of slots t, t + 256, ... in chunk order into
// slot_sum[s]; then thread 0 sums the mask and the masked slot sums in slot order, as the CPU.
__global__ void mse_finish_kernel(float *loss, double *slot_sum, const double *partial, const float *mask, int S,
                                  long E, int nchunks) {
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        if (mask[s] == 0) continue;
        double sum = 0;
        for (int c = 0; c < nchunks; c++) sum += partial[(size_t)s * nchunks + c];
        slot_sum[s] = sum;
    }
    __syncthreads();  // makes the block's slot_sum writes visible to thread 0
    if (threadIdx.x != 0) return;
    double msum = 0, total = 0;
    for (int s = 0; s < S; s++) msum += mask[s];
    for (int s = 0; s < S; s++)
        if (mask[s] != 0) total = __dadd_rn(total, __dmul_rn((double)mask[s], slot_sum[s]));
    loss[0] = msum > 0 ? (float)(total / (msum * E)) : 0.0f;
}

static void cuda_mse_masked_fwd(real *loss, const real *pred, const real *target, const real *mask, int S, long E) {
    if (S < 0) S = 0;
    check_slots(S, "mse_masked_fwd");
    int nchunks = E > 0 ? (int)((E + MSE_CHUNK - 1) / MSE_CHUNK) : 0;
    size_t count = (size_t)S * nchunks + (size_t)S;  // partials, then per-slot sums
    double *scratch = (double *)fc_cuda_scratch(SCRATCH_ELEMENTWISE, sizeof(double) * (count ? count : 1));
    double *partial = scratch, *slot_sum = scratch + (size_t)S * nchunks;
    if (S > 0 && nchunks > 0) {
        mse_partial_kernel<<<dim3(nchunks, S), MSE_THREADS>>>(partial, pred, target, mask, E);
        kernelCheck();
    }
    mse_finish_kernel<<<1, MSE_THREADS>>>(loss, slot_sum, partial, mask, S, E, nchunks);
    kernelCheck();
}

// coef[0] = sum(mask) (in slot order, as the CPU); coef[1 + s] = 2 dloss mask[s] / (sum(mask) E).
// One block: thread 0 sums the mask, then the threads fill the coefficients.
__global__ void mse_coef_kernel(double *coef, const float *mask, float dloss, int S, long E) {
    __shared__ double msum;
    if (threadIdx.x == 0) {
        double m = 0;
        for (int s = 0; s < S; s++) m += mask[s];
        msum = m;
        coef[0] = m;
    }
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += blockDim.x) coef[1 + s] = 2.0 * dloss * mask[s] / (msum * E);
}

// dpred += coef[s] * (pred - target). Block (x, s): slot s; threads over its E elements
// (grid-stride in x). Nothing is added when sum(mask) <= 0 or mask[s] == 0, as on the CPU.
__global__ void mse_bwd_kernel(float *dpred, const float *pred, const float *target, const float *mask,
                               const double *coef, long E) {
    int s = blockIdx.y;
    if (coef[0] <= 0 || mask[s] == 0) return;
    double c = coef[1 + s];
    size_t base = (size_t)s * E;
    GRID_STRIDE_LOOP(e, (size_t)E) {
        size_t k = base + e;
        dpred[k] = __fadd_rn(dpred[k], (float)(c * ((double)pred[k] - target[k])));
    }
}

static void cuda_mse_masked_bwd(real *dpred, const real *pred, const real *target, const real *mask, real dloss,
                                int S, long E) {
    if (!dpred || S <= 0 || E <= 0) return;
    check_slots(S, "mse_masked_bwd");
    double *coef = (double *)fc_cuda_scratch(SCRATCH_ELEMENTWISE, sizeof(double) * (1 + (size_t)S));
    mse_coef_kernel<<<1, FLAT_THREADS>>>(coef, mask, dloss, S, E);
    kernelCheck();
    mse_bwd_kernel<<<dim3(flat_grid((size_t)E), S), FLAT_THREADS>>>(dpred, pred, target, mask, coef, E);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// rectified flow: xt = (1 - t[s]) x0 + t[s] e, v = e - x0, (S, E), in float as on the CPU.
// Block (x, s): slot s; threads over its E elements (grid-stride in x).

__global__ void flow_mix_kernel(float *xt, float *v, const float *x0, const float *e, const float *t, long E) {
    int s = blockIdx.y;
    float ts = t[s], one_minus = __fsub_rn(1.0f, ts);
    size_t base = (size_t)s * E;
    GRID_STRIDE_LOOP(i, (size_t)E) {
        size_t k = base + i;
        float a = x0[k], b = e[k];
        xt[k] = __fadd_rn(__fmul_rn(one_minus, a), __fmul_rn(ts, b));
        v[k] = __fsub_rn(b, a);
    }
}

static void cuda_flow_mix(real *xt, real *v, const real *x0, const real *e, const real *t, int S, long E) {
    if (S <= 0 || E <= 0) return;
    check_slots(S, "flow_mix");
    flow_mix_kernel<<<dim3(flat_grid((size_t)E), S), FLAT_THREADS>>>(xt, v, x0, e, t, E);
    kernelCheck();
}

// ----------------------------------------------------------------------------

void cuda_register_elementwise(Backend *be, int bf16) {
    be->randn = cuda_randn;
    be->gelu_fwd = bf16 ? cuda_gelu_fwd<__nv_bfloat16> : cuda_gelu_fwd<float>;
    be->gelu_bwd = fc_gelu_bwd;
    be->silu_fwd = bf16 ? cuda_silu_fwd<__nv_bfloat16> : cuda_silu_fwd<float>;
    be->silu_bwd = cuda_silu_bwd;
    be->gated_add_fwd = cuda_gated_add_fwd;
    be->gated_add_bwd = cuda_gated_add_bwd;
    be->patchify_fwd = bf16 ? cuda_patchify_fwd<__nv_bfloat16> : cuda_patchify_fwd<float>;
    be->patchify_bwd = cuda_patchify_bwd;
    be->unpatchify_fwd = cuda_unpatchify_fwd;
    be->unpatchify_bwd = cuda_unpatchify_bwd;
    be->sinusoid_fwd = bf16 ? cuda_sinusoid_fwd<__nv_bfloat16> : cuda_sinusoid_fwd<float>;
    be->sinusoid_bwd = cuda_sinusoid_bwd;
    be->add_pos_time_fwd = cuda_add_pos_time_fwd;
    be->add_pos_time_bwd = cuda_add_pos_time_bwd;
    be->mse_masked_fwd = cuda_mse_masked_fwd;
    be->mse_masked_bwd = cuda_mse_masked_bwd;
    be->flow_mix = cuda_flow_mix;
}
