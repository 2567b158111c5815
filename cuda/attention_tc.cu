// attention_tc.cu: softmax attention on the tensor cores, for the "cuda" (bf16) op table. The same
// flash-attention algorithm as attention.cu (read its header first: layouts, scale, lse, Dvec, the
// split of the backward pass into a dQ kernel and a dK/dV kernel, no atomics), with every product
// of two tiles an mma.sync.m16n8k16 on bf16 operands accumulating in fp32 registers:
//   forward  S = Q K^T, O += P V                  (P rounded to bf16; the softmax itself in fp32)
//   dQ       S = Q K^T, dP = dO V^T, dQ += dS K    (dS = P (dP - Dvec) scale, rounded to bf16)
//   dK/dV    S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q
// q, k, v and dout are fp32 in memory: one pass first rounds them to bf16, head by head
// (fc_bf16_heads: each head's rows contiguous, in the GEMMs' scratch), so that the kernels copy
// tiles into shared memory with cp.async in 16-byte pieces, whatever D and the alignment of qkv,
// without passing through registers. A tile that is the B operand of a product along its rows (V
// in P V, K in dS K, dO and Q in dK/dV) is read transposed by ldmatrix.trans.
//
// Fragments (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A (16x16) holds rows g and g+8,
// columns 2t, 2t+1 and 2t+8, 2t+9; B (16x8) holds k rows 2t, 2t+1, 2t+8, 2t+9 of column g; the
// accumulator C (16x8) holds rows g and g+8, columns 2t, 2t+1. So a thread owns two rows of every
// score tile: the online softmax rescales its accumulator rows in registers, row maxima and sums
// are completed across the 4 threads of a quad by shuffles, and the C fragments of two adjacent
// score tiles are exactly the A fragment of the probabilities for the next product.
//
// A block is 4 warps owning 64 rows (16 per warp: queries in forward and dQ, keys in dK/dV) and
// streams over tiles of 32 rows of the other side through two shared-memory buffers: the copy of
// tile i+1 is in flight while tile i is computed (cp.async groups: issue i+1, commit, wait for all
// but the newest group, __syncthreads, compute, __syncthreads before the buffer is refilled). The
// CUDA emulation of make test (tests/cuda_emu) runs its warps as far apart as the barriers allow
// and makes a copy's bytes NaN from issue to wait, so a missing wait or barrier fails there. Each warp handles its
// rows in a fixed order and every output element is written (or added into dqkv) once, by one
// thread: the same bytes on every run. Sequences shorter than TC_MIN_LEN (temporal attention over
// a window of ~7 frames) would be mostly padding: they go to attention.cu's fp32 kernels.
#include <math.h>

#include "cuda_common.cuh"

typedef __nv_bfloat16 bf16;

#define TC_THREADS 128  // 4 warps
#define TC_ROWS 64      // rows a block owns: 16 per warp
#define TC_TILE 32      // rows of a streamed tile (keys forward and in dQ, queries in dK/dV), two buffers
#define TC_MIN_LEN 64

// ----------------------------------------------------------------------------
// fragments

// d += a b, one m16n8k16 product: bf16 operands, fp32 accumulation.
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef FC_EMU  // tests/cuda_emu: the same product on the CPU
    fc_emu_mma16816_bf16(d, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *(const uint32_t *)p; }

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

// The A fragment of the 16x16 block at m (row-major, ld elements per row).
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16 *m, int ld, int g, int t) {
    a[0] = ld32(m + g * ld + 2 * t), a[1] = ld32(m + (g + 8) * ld + 2 * t);
    a[2] = ld32(m + g * ld + 2 * t + 8), a[3] = ld32(m + (g + 8) * ld + 2 * t + 8);
}

// The B fragment (16 k x 8 n) whose column n is row n of m (row-major, ld): B = m^T.
__device__ __forceinline__ void load_bt(uint32_t &b0, uint32_t &b1, const bf16 *m, int ld, int g, int t) {
    b0 = ld32(m + g * ld + 2 * t), b1 = ld32(m + g * ld + 2 * t + 8);
}

// The B fragment (16 k x 8 n) of the block at m of a row-major (k, n) matrix (ld elements per row),
// read transposed by ldmatrix: lanes 0-15 give the addresses of its 16 rows.
__device__ __forceinline__ void load_b(uint32_t &b0, uint32_t &b1, const bf16 *m, int ld, int lane) {
#ifdef FC_EMU
    uint32_t r[2];
    fc_emu_ldmatrix(r, 2, m + (lane & 15) * ld, true);
    b0 = r[0], b1 = r[1];
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(m + (lane & 15) * ld);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(addr));
#endif
}

// The A fragment of probabilities from the accumulators of score tiles 2kk and 2kk+1.
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = pack(c0[0], c0[1]), a[1] = pack(c0[2], c0[3]), a[2] = pack(c1[0], c1[1]), a[3] = pack(c1[2], c1[3]);
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ----------------------------------------------------------------------------
// staging: cp.async from the heads' bf16 copy (fc_bf16_heads) into shared memory

// Shared-memory row lengths (elements): bf16 rows padded by 8 so that rows start on different banks
// and every 32-bit fragment load stays aligned; a row is a whole number of 16-byte pieces.
template <int DH>
struct TcLd {
    static constexpr int ROW = DH + 8;
    static constexpr int FWD_BYTES = 2 * (TC_ROWS + 4 * TC_TILE) * ROW;                   // Q; K, V x 2
    static constexpr int DQ_BYTES = 2 * (2 * TC_ROWS + 4 * TC_TILE) * ROW + 2 * TC_ROWS * 4;  // Q, dO; K, V x 2; lse, Dvec
    static constexpr int DKDV_BYTES = 2 * (2 * TC_ROWS + 4 * TC_TILE) * ROW + 4 * TC_TILE * 4;  // K, V; Q, dO x 2; lse, Dvec x 2
};

// 16 (or 4) bytes from global to shared memory without passing through registers; !valid writes
// zeros (src-size 0, nothing is read). A group of copies is closed by commit; wait<N> returns when
// all but the N newest groups of this thread have landed (then __syncthreads for the others').
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
#ifdef FC_EMU
    fc_emu_cp_async(dst, src, 16, valid);
#else
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
#ifdef FC_EMU
    fc_emu_cp_async(dst, src, 4, valid);
#else
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef FC_EMU
    fc_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef FC_EMU
    fc_emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Where the tokens of one sequence lie: token k of sequence seq is row base + k * tok of qkv, out,
// dout and of every head's copy (computed once per block: the divisions are not cheap on a GPU).
struct SeqRows {
    long base, tok;
    __device__ SeqRows(const AttnLayout &lay, long seq)
        : base(seq / lay.n_inner * lay.outer_stride + seq % lay.n_inner * lay.inner_stride), tok(lay.tok_stride) {}
    __device__ long operator()(int k) const { return base + (long)k * tok; }
};

// Starts copying tokens r0 .. r0+NROWS-1 of a sequence from one head's (rows, DH) bf16 block into
// dst (NROWS rows of TcLd::ROW); tokens at or past len are zeros. DH / 8 pieces of 16 bytes per
// row, spread over the block's threads.
template <int DH, int NROWS>
__device__ __forceinline__ void stage_async(bf16 *dst, const bf16 *__restrict__ head, const SeqRows &sr, int r0,
                                            int len) {
    constexpr int PIECES = DH / 8, TOTAL = NROWS * PIECES;
#pragma unroll
    for (int i = 0; i < (TOTAL + TC_THREADS - 1) / TC_THREADS; i++) {
        int idx = threadIdx.x + i * TC_THREADS;
        if (TOTAL % TC_THREADS != 0 && idx >= TOTAL) break;
        int r = idx / PIECES, c = (idx % PIECES) * 8;
        bool valid = r0 + r < len;
        cp_async16(dst + r * TcLd<DH>::ROW + c, valid ? head + sr(r0 + r) * DH + c : head, valid);
    }
}

// A block's place, from blockIdx = (seq * H + h) * ntiles + tile: its (sequence, head), the first
// of the 64 rows it owns (queries forward and in dQ, keys in dK/dV), the lane's fragment
// coordinates, and the head's (rows, DH) bf16 blocks of q, k, v (and dO in the backward pass).
template <int DH>
struct TcBlock {
    long sh;  // seq * H + h
    int h, len, own0;
    int warp, lane, g, t;
    SeqRows sr;
    const bf16 *q, *k, *v, *dout;
    __device__ TcBlock(const AttnLayout &lay, int H, int ntiles, const bf16 *qkv16, const bf16 *dout16, long rows)
        : sh(blockIdx.x / ntiles), h((int)(sh % H)), len(lay.len), own0((int)(blockIdx.x % ntiles) * TC_ROWS),
          warp(threadIdx.x / 32), lane(threadIdx.x % 32), g(lane / 4), t(lane % 4), sr(lay, sh / H),
          q(qkv16 + (long)h * rows * DH), k(qkv16 + (long)(H + h) * rows * DH),
          v(qkv16 + (long)(2 * H + h) * rows * DH), dout(dout16 ? dout16 + (long)h * rows * DH : nullptr) {}
};

// ----------------------------------------------------------------------------
// forward. Block b = (seq * H + h) * ntiles + tile owns queries tile*64 .. +63 and streams over
// tiles of TC_TILE keys, the next tile's copy in flight while this one is computed.

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ qkv16, long rows,
                       AttnLayout lay, int D, int H, int ntiles, float scale) {
    using L = TcLd<DH>;
    constexpr int NT = TC_TILE / 8;  // score tiles of 8 keys
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem;               // (64, ROW)
    bf16 *Ks = Qs + TC_ROWS * L::ROW;      // 2 x (TC_TILE, ROW)
    bf16 *Vs = Ks + 2 * TC_TILE * L::ROW;  // 2 x (TC_TILE, ROW)
    const TcBlock<DH> b(lay, H, ntiles, qkv16, nullptr, rows);
    const int h = b.h, len = b.len, q0 = b.own0, warp = b.warp, lane = b.lane, g = b.g, t = b.t;
    const SeqRows &sr = b.sr;
    const bf16 *q16 = b.q, *k16 = b.k, *v16 = b.v;

    stage_async<DH, TC_ROWS>(Qs, q16, sr, q0, len);
    cp_async_commit();
    stage_async<DH, TC_TILE>(Ks, k16, sr, 0, len);
    stage_async<DH, TC_TILE>(Vs, v16, sr, 0, len);
    cp_async_commit();
    cp_async_wait<1>();  // Q
    __syncthreads();
    uint32_t qa[DH / 16][4];
    for (int kb = 0; kb < DH / 16; kb++) load_a(qa[kb], Qs + warp * 16 * L::ROW + kb * 16, L::ROW, g, t);
    float o[DH / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g+8: running max, this thread's sum

    const int ntk = (len + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntk; it++) {
        const int k0 = it * TC_TILE, cur = it & 1;
        if (it + 1 < ntk) {  // the other buffer was last read before the previous __syncthreads
            stage_async<DH, TC_TILE>(Ks + (cur ^ 1) * TC_TILE * L::ROW, k16, sr, k0 + TC_TILE, len);
            stage_async<DH, TC_TILE>(Vs + (cur ^ 1) * TC_TILE * L::ROW, v16, sr, k0 + TC_TILE, len);
        }
        cp_async_commit();
        cp_async_wait<1>();  // this tile's copies (all but the newest group)
        __syncthreads();     // ... and every other thread's
        const bf16 *Kt = Ks + cur * TC_TILE * L::ROW, *Vt = Vs + cur * TC_TILE * L::ROW;
        float s[NT][4] = {};
        for (int j = 0; j < NT; j++)
            for (int kb = 0; kb < DH / 16; kb++) {
                uint32_t b0, b1;
                load_bt(b0, b1, Kt + j * 8 * L::ROW + kb * 16, L::ROW, g, t);
                mma16816(s[j], qa[kb], b0, b1);
            }
        float mx[2] = {-INFINITY, -INFINITY};
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++) {
                bool valid = k0 + j * 8 + 2 * t + (e & 1) < len;
                s[j][e] = valid ? s[j][e] * scale : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
            }
        float alpha[2];
        for (int r = 0; r < 2; r++) {
            float mn = fmaxf(m[r], quad_max(mx[r]));  // finite: the tile has at least one key
            alpha[r] = expf(m[r] - mn), m[r] = mn, l[r] *= alpha[r];
        }
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++) {
                s[j][e] = expf(s[j][e] - m[e / 2]);  // a masked key: exp(-inf) = 0
                l[e / 2] += s[j][e];
            }
        for (int n = 0; n < DH / 8; n++)
            o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[4];
            c_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < DH / 8; n++) {
                uint32_t b0, b1;
                load_b(b0, b1, Vt + kk * 16 * L::ROW + n * 8, L::ROW, lane);
                mma16816(o[n], pa, b0, b1);
            }
        }
        __syncthreads();  // every warp is done with this buffer before it is refilled
    }
    for (int r = 0; r < 2; r++) {
        int q = q0 + warp * 16 + g + 8 * r;
        float sum = quad_sum(l[r]);
        if (q >= len) continue;
        long row = sr(q);
        float *dst = out + row * D + (long)h * DH + 2 * t;
        for (int n = 0; n < DH / 8; n++) dst[n * 8] = o[n][2 * r] / sum, dst[n * 8 + 1] = o[n][2 * r + 1] / sum;
        if (t == 0) lse[row * H + h] = m[r] + logf(sum);
    }
}

// ----------------------------------------------------------------------------
// backward: dQ. Block as in the forward pass; streams over tiles of TC_TILE keys and values.

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_bwd_dq_kernel(float *__restrict__ dqkv, const bf16 *__restrict__ qkv16, const bf16 *__restrict__ dout16,
                          long rows, const float *__restrict__ lse, const float *__restrict__ dvec, AttnLayout lay,
                          int D, int H, int ntiles, float scale) {
    using L = TcLd<DH>;
    constexpr int NT = TC_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *DOs = Qs + TC_ROWS * L::ROW;                   // (64, ROW) each
    bf16 *Ks = DOs + TC_ROWS * L::ROW, *Vs = Ks + 2 * TC_TILE * L::ROW;       // 2 x (TC_TILE, ROW) each
    float *Lse = (float *)(Vs + 2 * TC_TILE * L::ROW), *Dv = Lse + TC_ROWS;  // (64) each
    const TcBlock<DH> b(lay, H, ntiles, qkv16, dout16, rows);
    const int h = b.h, len = b.len, q0 = b.own0, warp = b.warp, lane = b.lane, g = b.g, t = b.t;
    const long sh = b.sh, ld = 3L * D;
    const SeqRows &sr = b.sr;
    const bf16 *q16 = b.q, *k16 = b.k, *v16 = b.v, *do16 = b.dout;

    stage_async<DH, TC_ROWS>(Qs, q16, sr, q0, len);
    stage_async<DH, TC_ROWS>(DOs, do16, sr, q0, len);
    cp_async_commit();
    stage_async<DH, TC_TILE>(Ks, k16, sr, 0, len);
    stage_async<DH, TC_TILE>(Vs, v16, sr, 0, len);
    cp_async_commit();
    for (int r = threadIdx.x; r < TC_ROWS; r += blockDim.x) {
        bool in = q0 + r < len;
        Lse[r] = in ? lse[sr(q0 + r) * H + h] : 0.f;
        Dv[r] = in ? dvec[sh * len + q0 + r] : 0.f;
    }
    const int r0 = warp * 16;
    float dq[DH / 8][4] = {};
    const int ntk = (len + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntk; it++) {
        const int k0 = it * TC_TILE, cur = it & 1;
        if (it + 1 < ntk) {
            stage_async<DH, TC_TILE>(Ks + (cur ^ 1) * TC_TILE * L::ROW, k16, sr, k0 + TC_TILE, len);
            stage_async<DH, TC_TILE>(Vs + (cur ^ 1) * TC_TILE * L::ROW, v16, sr, k0 + TC_TILE, len);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16 *Kt = Ks + cur * TC_TILE * L::ROW, *Vt = Vs + cur * TC_TILE * L::ROW;
        float s[NT][4] = {}, dp[NT][4] = {};
        for (int kb = 0; kb < DH / 16; kb++) {
            uint32_t qa[4], da[4];
            load_a(qa, Qs + r0 * L::ROW + kb * 16, L::ROW, g, t);
            load_a(da, DOs + r0 * L::ROW + kb * 16, L::ROW, g, t);
            for (int j = 0; j < NT; j++) {
                uint32_t b0, b1;
                load_bt(b0, b1, Kt + j * 8 * L::ROW + kb * 16, L::ROW, g, t);
                mma16816(s[j], qa, b0, b1);
                load_bt(b0, b1, Vt + j * 8 * L::ROW + kb * 16, L::ROW, g, t);
                mma16816(dp[j], da, b0, b1);
            }
        }
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++) {
                int r = r0 + g + 8 * (e / 2);
                float p = k0 + j * 8 + 2 * t + (e & 1) < len ? expf(s[j][e] * scale - Lse[r]) : 0.f;
                s[j][e] = p * (dp[j][e] - Dv[r]) * scale;  // dS
            }
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t a[4];
            c_to_a(a, s[2 * kk], s[2 * kk + 1]);
            for (int n = 0; n < DH / 8; n++) {
                uint32_t b0, b1;
                load_b(b0, b1, Kt + kk * 16 * L::ROW + n * 8, L::ROW, lane);
                mma16816(dq[n], a, b0, b1);
            }
        }
        __syncthreads();
    }
    for (int r = 0; r < 2; r++) {
        int q = q0 + r0 + g + 8 * r;
        if (q >= len) continue;
        float *dst = dqkv + sr(q) * ld + (long)h * DH + 2 * t;
        for (int n = 0; n < DH / 8; n++) dst[n * 8] += dq[n][2 * r], dst[n * 8 + 1] += dq[n][2 * r + 1];
    }
}

// ----------------------------------------------------------------------------
// backward: dK and dV. Block b owns keys tile*64 .. +63 and streams over tiles of TC_TILE queries
// (q, dout, lse, Dvec).

// Starts copying the lse and Dvec of queries q0 .. q0+TC_TILE-1 (zeros past len): threads
// 0 .. TC_TILE-1 one lse each, the next TC_TILE one Dvec each.
__device__ __forceinline__ void stage_stats_async(float *Lse, float *Dv, const float *__restrict__ lse,
                                                  const float *__restrict__ dvec, const SeqRows &sr, long sh, int h,
                                                  int H, int q0, int len) {
    int c = threadIdx.x % TC_TILE;
    bool valid = q0 + c < len;
    if (threadIdx.x < TC_TILE) cp_async4(Lse + c, valid ? lse + sr(q0 + c) * H + h : lse, valid);
    else if (threadIdx.x < 2 * TC_TILE) cp_async4(Dv + c, valid ? dvec + sh * len + q0 + c : dvec, valid);
}

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_bwd_dkdv_kernel(float *__restrict__ dqkv, const bf16 *__restrict__ qkv16,
                            const bf16 *__restrict__ dout16, long rows, const float *__restrict__ lse,
                            const float *__restrict__ dvec, AttnLayout lay, int D, int H, int ntiles, float scale) {
    using L = TcLd<DH>;
    constexpr int NT = TC_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TC_ROWS * L::ROW;                    // (64 keys, ROW) each
    bf16 *Qs = Vs + TC_ROWS * L::ROW, *DOs = Qs + 2 * TC_TILE * L::ROW;       // 2 x (TC_TILE queries, ROW) each
    float *Lse = (float *)(DOs + 2 * TC_TILE * L::ROW), *Dv = Lse + 2 * TC_TILE;  // 2 x (TC_TILE) each
    const TcBlock<DH> b(lay, H, ntiles, qkv16, dout16, rows);
    const int h = b.h, len = b.len, k0 = b.own0, warp = b.warp, lane = b.lane, g = b.g, t = b.t;
    const long sh = b.sh, ld = 3L * D;
    const SeqRows &sr = b.sr;
    const bf16 *q16 = b.q, *k16 = b.k, *v16 = b.v, *do16 = b.dout;

    stage_async<DH, TC_ROWS>(Ks, k16, sr, k0, len);
    stage_async<DH, TC_ROWS>(Vs, v16, sr, k0, len);
    cp_async_commit();
    stage_async<DH, TC_TILE>(Qs, q16, sr, 0, len);
    stage_async<DH, TC_TILE>(DOs, do16, sr, 0, len);
    stage_stats_async(Lse, Dv, lse, dvec, sr, sh, h, H, 0, len);
    cp_async_commit();
    const int r0 = warp * 16;
    float dk[DH / 8][4] = {}, dv[DH / 8][4] = {};
    const int ntq = (len + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntq; it++) {
        const int q0 = it * TC_TILE, cur = it & 1, nxt = cur ^ 1;
        if (it + 1 < ntq) {
            stage_async<DH, TC_TILE>(Qs + nxt * TC_TILE * L::ROW, q16, sr, q0 + TC_TILE, len);
            stage_async<DH, TC_TILE>(DOs + nxt * TC_TILE * L::ROW, do16, sr, q0 + TC_TILE, len);
            stage_stats_async(Lse + nxt * TC_TILE, Dv + nxt * TC_TILE, lse, dvec, sr, sh, h, H, q0 + TC_TILE, len);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16 *Qt = Qs + cur * TC_TILE * L::ROW, *DOt = DOs + cur * TC_TILE * L::ROW;
        const float *Lt = Lse + cur * TC_TILE, *Dt = Dv + cur * TC_TILE;
        float st[NT][4] = {}, dpt[NT][4] = {};  // (16 keys, TC_TILE queries): S^T and dP^T
        for (int kb = 0; kb < DH / 16; kb++) {
            uint32_t ka[4], va[4];
            load_a(ka, Ks + r0 * L::ROW + kb * 16, L::ROW, g, t);
            load_a(va, Vs + r0 * L::ROW + kb * 16, L::ROW, g, t);
            for (int j = 0; j < NT; j++) {
                uint32_t b0, b1;
                load_bt(b0, b1, Qt + j * 8 * L::ROW + kb * 16, L::ROW, g, t);
                mma16816(st[j], ka, b0, b1);
                load_bt(b0, b1, DOt + j * 8 * L::ROW + kb * 16, L::ROW, g, t);
                mma16816(dpt[j], va, b0, b1);
            }
        }
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++) {
                int c = j * 8 + 2 * t + (e & 1);
                float p = q0 + c < len ? expf(st[j][e] * scale - Lt[c]) : 0.f;
                st[j][e] = p, dpt[j][e] = p * (dpt[j][e] - Dt[c]) * scale;  // P^T, dS^T
            }
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[4], sa[4];
            c_to_a(pa, st[2 * kk], st[2 * kk + 1]);
            c_to_a(sa, dpt[2 * kk], dpt[2 * kk + 1]);
            for (int n = 0; n < DH / 8; n++) {
                uint32_t b0, b1;
                load_b(b0, b1, DOt + kk * 16 * L::ROW + n * 8, L::ROW, lane);
                mma16816(dv[n], pa, b0, b1);
                load_b(b0, b1, Qt + kk * 16 * L::ROW + n * 8, L::ROW, lane);
                mma16816(dk[n], sa, b0, b1);
            }
        }
        __syncthreads();
    }
    for (int r = 0; r < 2; r++) {
        int k = k0 + r0 + g + 8 * r;
        if (k >= len) continue;
        float *dst = dqkv + sr(k) * ld + D + (long)h * DH + 2 * t;
        for (int n = 0; n < DH / 8; n++) {
            dst[n * 8] += dk[n][2 * r], dst[n * 8 + 1] += dk[n][2 * r + 1];
            dst[D + n * 8] += dv[n][2 * r], dst[D + n * 8 + 1] += dv[n][2 * r + 1];
        }
    }
}

// ----------------------------------------------------------------------------
// host side

static unsigned tc_grid(long n_seq, int H, int ntiles) {
    long blocks = n_seq * H * ntiles;
    if (blocks > 0x7fffffffL) fc_die("attention: %ld blocks is more than one CUDA grid holds", blocks);
    return (unsigned)blocks;
}

// The kernels may need more than the default 48 KiB of shared memory: opt in once per kernel.
template <typename K>
static void tc_opt_in(K kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Every token of the layout is one row of qkv (and out, dout): n_seq * len rows.
template <int DH>
static void tc_fwd(float *out, float *lse, const float *qkv, AttnLayout lay, int D, int H, long n_seq) {
    static int ready;
    if (!ready) tc_opt_in(tc_attn_fwd_kernel<DH>, TcLd<DH>::FWD_BYTES), ready = 1;
    long rows = n_seq * lay.len;
    const bf16 *qkv16 = fc_bf16_heads(qkv, rows, 3L * D, 3 * H, DH, SCRATCH_BF16_A);
    int ntiles = (lay.len + TC_ROWS - 1) / TC_ROWS;
    float scale = (float)(1.0 / sqrt((double)DH));
    tc_attn_fwd_kernel<DH><<<tc_grid(n_seq, H, ntiles), TC_THREADS, TcLd<DH>::FWD_BYTES>>>(out, lse, qkv16, rows, lay, D, H, ntiles, scale);
    kernelCheck();
}

template <int DH>
static void tc_bwd(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dvec,
                   AttnLayout lay, int D, int H, long n_seq) {
    static int ready;
    if (!ready) {
        tc_opt_in(tc_attn_bwd_dq_kernel<DH>, TcLd<DH>::DQ_BYTES);
        tc_opt_in(tc_attn_bwd_dkdv_kernel<DH>, TcLd<DH>::DKDV_BYTES);
        ready = 1;
    }
    long rows = n_seq * lay.len;
    const bf16 *qkv16 = fc_bf16_heads(qkv, rows, 3L * D, 3 * H, DH, SCRATCH_BF16_A);
    const bf16 *dout16 = fc_bf16_heads(dout, rows, D, H, DH, SCRATCH_BF16_B);
    int ntiles = (lay.len + TC_ROWS - 1) / TC_ROWS;
    unsigned grid = tc_grid(n_seq, H, ntiles);
    float scale = (float)(1.0 / sqrt((double)DH));
    tc_attn_bwd_dq_kernel<DH><<<grid, TC_THREADS, TcLd<DH>::DQ_BYTES>>>(dqkv, qkv16, dout16, rows, lse, dvec, lay, D, H, ntiles, scale);
    kernelCheck();
    tc_attn_bwd_dkdv_kernel<DH><<<grid, TC_THREADS, TcLd<DH>::DKDV_BYTES>>>(dqkv, qkv16, dout16, rows, lse, dvec, lay, D, H, ntiles, scale);
    kernelCheck();
}

// The head dimension when the tensor-core kernels take this call, else 0 (attention.cu's kernels).
static int tc_head_dim(AttnLayout lay, int D, int H) {
    if (H <= 0 || D % H != 0 || lay.len < TC_MIN_LEN) return 0;
    int dh = D / H;
    return dh == 16 || dh == 32 || dh == 64 || dh == 128 ? dh : 0;
}

static void tc_attn_fwd(real *out, real *lse, const real *qkv, AttnLayout lay, int D, int H) {
    int dh = tc_head_dim(lay, D, H);
    long n_seq = (long)lay.n_outer * lay.n_inner;
    if (!dh) return fc_attn_fwd_fp32(out, lse, qkv, lay, D, H);
    if (n_seq <= 0) return;
    switch (dh) {
    case 16: tc_fwd<16>(out, lse, qkv, lay, D, H, n_seq); break;
    case 32: tc_fwd<32>(out, lse, qkv, lay, D, H, n_seq); break;
    case 64: tc_fwd<64>(out, lse, qkv, lay, D, H, n_seq); break;
    default: tc_fwd<128>(out, lse, qkv, lay, D, H, n_seq); break;
    }
}

static void tc_attn_bwd(real *dqkv, const real *dout, const real *out, const real *qkv, const real *lse,
                        AttnLayout lay, int D, int H) {
    int dh = tc_head_dim(lay, D, H);
    long n_seq = (long)lay.n_outer * lay.n_inner;
    if (!dh) return fc_attn_bwd_fp32(dqkv, dout, out, qkv, lse, lay, D, H);
    if (n_seq <= 0 || !dqkv) return;
    const float *dvec = fc_attn_dvec(dout, out, lay, D, H);
    switch (dh) {
    case 16: tc_bwd<16>(dqkv, dout, qkv, lse, dvec, lay, D, H, n_seq); break;
    case 32: tc_bwd<32>(dqkv, dout, qkv, lse, dvec, lay, D, H, n_seq); break;
    case 64: tc_bwd<64>(dqkv, dout, qkv, lse, dvec, lay, D, H, n_seq); break;
    default: tc_bwd<128>(dqkv, dout, qkv, lse, dvec, lay, D, H, n_seq); break;
    }
}

void cuda_register_attention_tc(Backend *be) {
    be->attn_fwd = tc_attn_fwd;
    be->attn_bwd = tc_attn_bwd;
}
