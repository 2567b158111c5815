// attention_tc.cu: softmax attention on the tensor cores, for the "cuda" (bf16) op table. The same
// flash-attention algorithm as attention.cu (read its header first: layouts, scale, lse, Dvec, the
// split of the backward pass into a dQ kernel and a dK/dV kernel, no atomics), with every product
// of two tiles an mma.sync.m16n8k16 on bf16 operands accumulating in fp32 registers:
//   forward  S = Q K^T, O += P V                  (P rounded to bf16; the softmax itself in fp32)
//   dK/dV    S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q
//            (dS = P (dP - Dvec) scale, rounded to bf16)
//   dQ       dQ += dS K. For sequences longer than TC_PACK_MAX (the spatial attention) the dK/dV
//            kernel also stores dS (bf16, (len, len) per sequence and head, in chunks of at most
//            ATTN_DS_CAP bytes) and one batched cuBLAS GEMM a chunk takes dQ from it. Packed short
//            sequences recompute S = Q K^T and dP = dO V^T in a dQ kernel instead. Storing dS saves
//            two of the backward's seven tile products and keeps dQ free of atomics.
// qkv and the output are bf16 operands (backend.h): the q/k norm writes qkv in bf16, and the
// projection's GEMM and the backward's Dvec read the output. dout is an fp32 gradient: one pass
// first rounds it to bf16, head by head (fc_bf16_heads: each head's rows contiguous, in the GEMMs'
// scratch). The kernels copy tiles of both into shared memory with cp.async in 16-byte pieces,
// without passing through registers: a head's row of qkv is dh contiguous values, 16-byte aligned
// when qkv is (D is a multiple of 16; an unaligned qkv is copied to scratch first). A tile that is
// the B operand of a product along its rows (V in P V, K in dS K, dO and Q in dK/dV) is read
// transposed by ldmatrix.trans, two 8-column blocks at a time (x4).
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
// CUDA emulation of make test (tests/cuda/emu) runs its warps as far apart as the barriers allow
// and makes a copy's bytes NaN from issue to wait, so a missing wait or barrier fails there. Each
// warp handles its rows in a fixed order and every output element is written once, by one thread
// (or by the dQ GEMM): the same bytes on every run. dqkv is overwritten (backend.h).
//
// Short sequences (the temporal attention over a window of ~7 frames) would leave a 64-row block
// mostly padding: up to TC_PACK_MAX tokens, 64 / len whole sequences share a block's row space
// (TokenMap), every row a query and a key, and a score is masked unless both rows belong to the same
// sequence. The window's 7 tokens: 9 sequences a block, 63 of 64 rows in use.
#include <math.h>

#include "cuda_common.cuh"  // first: it includes the C headers with C linkage
#include "attention_common.cuh"
#include "backend/attn_scratch.h"
#include "backend_cuda.h"

typedef __nv_bfloat16 bf16;

#define TC_THREADS 128  // 4 warps
#define TC_ROWS 64      // rows a block owns: 16 per warp
#define TC_TILE 32      // rows of a streamed tile (keys forward and in dQ, queries in dK/dV), two buffers
#define TC_PACK_MAX ATTN_PACK_MAX  // sequences this short are packed, 64 / len to a block (the temporal attention)

// ----------------------------------------------------------------------------
// fragments

// d += a b, one m16n8k16 product: bf16 operands, fp32 accumulation.
__device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef FC_EMU  // tests/cuda/emu: the same product on the CPU
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

// Four 8x8 bf16 blocks from shared memory by one ldmatrix.x4 (.trans: each block transposed): lane
// l gives the address of row l % 8 of block l / 8 and gets, of each block i, r[i] = its row l / 4,
// elements 2 (l % 4) and 2 (l % 4) + 1.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const bf16 *row) {
#ifdef FC_EMU
    fc_emu_ldmatrix(r, 4, row, TRANS);
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
#endif
}

// The B fragments (16 k x 8 n) whose column n is row n of m (row-major, ld), for two k steps at
// once: b[0], b[1] for columns 0..15 of m, b[2], b[3] for columns 16..31 (load_bt for kb and
// kb + 1): the four 8x8 blocks of columns 8i .. 8i+7, in one load instead of four a lane.
__device__ __forceinline__ void load_bt2(uint32_t b[4], const bf16 *m, int ld, int lane) {
    ldmatrix_x4<false>(b, m + (lane & 7) * ld + (lane >> 3) * 8);
}

// The B fragments (16 k x 8 n) of the two blocks at m and m + 8 (columns n and n + 1 of 8) of a
// row-major (k, n) matrix (ld elements per row), read transposed: b[0], b[1] for the first, b[2],
// b[3] for the second (lanes 0-15 address the first block's 16 rows, lanes 16-31 the second's).
__device__ __forceinline__ void load_b2(uint32_t b[4], const bf16 *m, int ld, int lane) {
    ldmatrix_x4<true>(b, m + (lane & 15) * ld + (lane >> 4) * 8);
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
// staging: cp.async from qkv and the heads' bf16 copy of dout (fc_bf16_heads) into shared memory

// Shared-memory row lengths (elements): bf16 rows padded by 8 so that rows start on different banks
// and every 32-bit fragment load stays aligned; a row is a whole number of 16-byte pieces.
template <int DH>
struct TcLd {
    static constexpr int ROW = DH + 8;
    // (K, V) x 2; Q first lands in the second pair
    static constexpr int FWD_BYTES = 2 * 4 * TC_TILE * ROW;
    // Q, dO; K, V x 2; lse, Dvec
    static constexpr int DQ_BYTES = 2 * (2 * TC_ROWS + 4 * TC_TILE) * ROW + 2 * TC_ROWS * 4;
    // K, V; Q, dO x 2; lse, Dvec x 2
    static constexpr int DKDV_BYTES = 2 * (2 * TC_ROWS + 4 * TC_TILE) * ROW + 4 * TC_TILE * 4;
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

// Which token each row of a block's row space is. Unpacked (pack 1): row k is token k of the block's
// sequence, len rows. Packed (sequences of at most 32 tokens, the temporal attention over a window):
// pack = 64 / len whole sequences share one 64-row space, row r being token r % len of sequence
// seq0 + r / len, and a query sees only the keys of its own sequence. nrows: the rows in use. A
// token's row in qkv, out, dout and every head's copy: its sequence's base + token * tok_stride.
struct TokenMap {
    long seq0, base0;  // base0: the base of sequence seq0 (the unpacked case's only one)
    int len, pack, nrows;
    AttnLayout lay;
    __device__ TokenMap(const AttnLayout &l, long s0, int pk, long n_seq)
        : seq0(s0), base0(attn_seq_base(l, s0)), len(l.len), pack(pk),
          nrows(pk == 1 ? l.len : (int)((n_seq - s0 < pk ? n_seq - s0 : pk) * l.len)), lay(l) {}
    __device__ long row(int r) const {
        if (pack == 1) return base0 + (long)r * lay.tok_stride;
        return attn_seq_base(lay, seq0 + r / len) + (long)(r % len) * lay.tok_stride;
    }
    __device__ bool valid(int r) const { return r < nrows; }
    __device__ bool sees(int q, int k) const { return q < nrows && k < nrows && (pack == 1 || q / len == k / len); }
    // Row r's entry of Dvec (n_seq, H, len).
    __device__ long dvec_at(int r, int H, int h) const {
        long seq = pack == 1 ? seq0 : seq0 + r / len;
        return (seq * H + h) * len + (pack == 1 ? r : r % len);
    }
};

// Starts copying rows r0 .. r0+NROWS-1 of the row space from one head's bf16 rows (DH values each,
// ld apart: 3D in qkv, DH in dout's copy) into dst (NROWS rows of TcLd::ROW); rows not in use are
// zeros. DH / 8 pieces of 16 bytes per row, spread over the block's threads.
template <int DH, int NROWS>
__device__ __forceinline__ void stage_async(bf16 *dst, const bf16 *__restrict__ head, const TokenMap &map, int r0,
                                            int ld) {
    constexpr int PIECES = DH / 8, TOTAL = NROWS * PIECES;
#pragma unroll
    for (int i = 0; i < (TOTAL + TC_THREADS - 1) / TC_THREADS; i++) {
        int idx = threadIdx.x + i * TC_THREADS;
        if (TOTAL % TC_THREADS != 0 && idx >= TOTAL) break;
        int r = idx / PIECES, c = (idx % PIECES) * 8;
        bool valid = map.valid(r0 + r);
        cp_async16(dst + r * TcLd<DH>::ROW + c, valid ? head + map.row(r0 + r) * ld + c : head, valid);
    }
}

// A block's place, from its index bid = (group * H + h) * ntiles + tile (a group: one sequence, or
// pack of them): its head and token map, the first of the 64 rows it owns (queries forward and in dQ,
// keys in dK/dV), the lane's fragment coordinates, and where the head's rows start: of q, k and v in
// qkv (T, 3D), qkv.ld = 3D apart, and of dO in its (rows, DH) block of the heads' copy (ldo = DH).
template <int DH>
struct TcBlock {
    AttnBlockIndex at;
    int h, own0;
    int warp, lane, g, t;
    TokenMap map;
    QkvHead<const bf16> qkv;
    const bf16 *dout;
    int ldo;
    __device__ TcBlock(const AttnLayout &lay, int H, int ntiles, int pack, const bf16 *qkv16, const bf16 *dout16,
                       long rows, unsigned bid)
        : at(bid, H, ntiles), h(at.h), own0(at.tile * TC_ROWS), warp(threadIdx.x / 32), lane(threadIdx.x % 32),
          g(lane / 4), t(lane % 4), map(lay, (long)at.group * pack, pack, (long)lay.n_outer * lay.n_inner),
          qkv(qkv16, H * DH, h, DH), dout(dout16 ? dout16 + (long)h * rows * DH : nullptr), ldo(DH) {}
};

// acc (a warp's 16 rows, DH) += X B: X (16, TC_TILE) the accumulators of its score tiles (rounded to
// bf16 here), B (TC_TILE, DH) a tile in shared memory, read transposed. Forward O += P V, dQ += dS K.
template <int DH>
__device__ __forceinline__ void mma_scores_tile(float acc[DH / 8][4], const float x[TC_TILE / 8][4], const bf16 *B,
                                                int lane) {
    constexpr int ROW = TcLd<DH>::ROW;
    for (int kk = 0; kk < TC_TILE / 16; kk++) {
        uint32_t a[4];
        c_to_a(a, x[2 * kk], x[2 * kk + 1]);
        for (int n = 0; n < DH / 8; n += 2) {  // DH / 8 is even
            uint32_t b[4];
            load_b2(b, B + kk * 16 * ROW + n * 8, ROW, lane);
            mma16816(acc[n], a, b[0], b[1]), mma16816(acc[n + 1], a, b[2], b[3]);
        }
    }
}

// Row r (0: the thread's row g, 1: row g + 8) of a warp's fp32 accumulators (16, DH): the thread's
// columns 2t, 2t+1 of every 8, dst pointing at column 2t of the head's row.
template <int DH>
__device__ __forceinline__ void store_acc_row(float *dst, const float acc[DH / 8][4], int r) {
    for (int n = 0; n < DH / 8; n++) dst[n * 8] = acc[n][2 * r], dst[n * 8 + 1] = acc[n][2 * r + 1];
}

// ----------------------------------------------------------------------------
// forward. Block b = (seq * H + h) * ntiles + tile owns queries tile*64 .. +63 and streams over
// tiles of TC_TILE keys, the next tile's copy in flight while this one is computed. A thread's rows:
// queries q and q + 8 (q = own0 + 16 warp + g).

// S (16 queries, TC_TILE keys) = Q K^T: qa the warp's query fragments, Kt the key tile.
template <int DH>
__device__ __forceinline__ void fwd_scores(float s[TC_TILE / 8][4], const uint32_t qa[DH / 16][4], const bf16 *Kt,
                                           int lane, int g, int t) {
    constexpr int ROW = TcLd<DH>::ROW;
    for (int j = 0; j < TC_TILE / 8; j++)
        if constexpr (DH >= 32) {
            for (int kb = 0; kb < DH / 16; kb += 2) {
                uint32_t b[4];
                load_bt2(b, Kt + j * 8 * ROW + kb * 16, ROW, lane);
                mma16816(s[j], qa[kb], b[0], b[1]);
                mma16816(s[j], qa[kb + 1], b[2], b[3]);
            }
        } else {
            uint32_t b0, b1;
            load_bt(b0, b1, Kt + j * 8 * ROW, ROW, g, t);
            mma16816(s[j], qa[0], b0, b1);
        }
}

// The online softmax over the tile of keys at k0: masks and scales the scores, takes the running max
// m and this thread's running sum l of rows q and q + 8 to the tile, rescales their output rows o,
// and leaves the probabilities in s.
template <int DH>
__device__ __forceinline__ void fwd_softmax(float s[TC_TILE / 8][4], float o[DH / 8][4], float m[2], float l[2],
                                            const TokenMap &map, int q, int k0, float scale, int t) {
    float mx[2] = {-INFINITY, -INFINITY};
    for (int j = 0; j < TC_TILE / 8; j++)
        for (int e = 0; e < 4; e++) {
            bool seen = map.sees(q + 8 * (e / 2), k0 + j * 8 + 2 * t + (e & 1));
            s[j][e] = seen ? s[j][e] * scale : -INFINITY;
            mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
        }
    float alpha[2];
    float base[2];  // what the scores are taken from: the running max, 0 while a row has seen no key
    for (int r = 0; r < 2; r++) {  // a row may see no key of a tile (packed sequences, padding rows)
        float mn = fmaxf(m[r], quad_max(mx[r]));
        base[r] = mn == -INFINITY ? 0.f : mn;
        alpha[r] = expf(m[r] - base[r]), m[r] = mn, l[r] *= alpha[r];  // exp(-inf) = 0: nothing to rescale
    }
    for (int j = 0; j < TC_TILE / 8; j++)
        for (int e = 0; e < 4; e++) {
            s[j][e] = expf(s[j][e] - base[e / 2]);  // a masked key: exp(-inf) = 0
            l[e / 2] += s[j][e];
        }
    for (int n = 0; n < DH / 8; n++)
        o[n][0] *= alpha[0], o[n][1] *= alpha[0], o[n][2] *= alpha[1], o[n][3] *= alpha[1];
}

// out = o / l (bf16) and lse = m + log(l) of rows q and q + 8 (the sums completed across the quad).
template <int DH>
__device__ __forceinline__ void fwd_store(bf16 *out, float *lse, const float o[DH / 8][4], const float m[2],
                                          const float l[2], const TokenMap &map, int q, int D, int H, int h, int t) {
    for (int r = 0; r < 2; r++) {
        float sum = quad_sum(l[r]);
        if (!map.valid(q + 8 * r)) continue;  // a valid row sees at least itself: sum >= 1
        long row = map.row(q + 8 * r);
        bf16 *dst = out + row * D + (long)h * DH + 2 * t;  // an even element: 4 bytes aligned (tc_fwd)
        for (int n = 0; n < DH / 8; n++)
            *(__nv_bfloat162 *)(dst + n * 8) = __floats2bfloat162_rn(o[n][2 * r] / sum, o[n][2 * r + 1] / sum);
        if (t == 0) lse[row * H + h] = m[r] + logf(sum);
    }
}

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_fwd_kernel(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ qkv16, long rows,
                       AttnLayout lay, int D, int H, int ntiles, int pack, float scale) {
    using L = TcLd<DH>;
    extern __shared__ __align__(16) unsigned char smem[];
    // Two buffers of (K tile, V tile), 2 x TC_TILE rows each. The queries are read into registers
    // once, so they are staged in buffer 1 (64 = 2 x TC_TILE rows) before its first refill: the
    // block needs the shared memory of the K and V buffers only (35 KiB at dh 128: two blocks a
    // multiprocessor on an sm_86 or sm_89 card, where Q beside them would allow one).
    static_assert(TC_ROWS == 2 * TC_TILE, "the query rows fill one (K, V) buffer");
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TC_TILE * L::ROW;  // buffer i: Ks/Vs + i * 2 * TC_TILE rows
    bf16 *Qs = Ks + 2 * TC_TILE * L::ROW;                  // (64, ROW): buffer 1, until tile 1 is staged
    const TcBlock<DH> b(lay, H, ntiles, pack, qkv16, nullptr, rows, blockIdx.x);
    const int q = b.own0 + b.warp * 16 + b.g;
    auto stage_keys = [&](int buf, int k0) {
        stage_async<DH, TC_TILE>(Ks + buf * 2 * TC_TILE * L::ROW, b.qkv.k, b.map, k0, b.qkv.ld);
        stage_async<DH, TC_TILE>(Vs + buf * 2 * TC_TILE * L::ROW, b.qkv.v, b.map, k0, b.qkv.ld);
    };

    stage_async<DH, TC_ROWS>(Qs, b.qkv.q, b.map, b.own0, b.qkv.ld);
    cp_async_commit();
    stage_keys(0, 0);
    cp_async_commit();
    cp_async_wait<1>();  // Q
    __syncthreads();
    uint32_t qa[DH / 16][4];
    for (int kb = 0; kb < DH / 16; kb++) load_a(qa[kb], Qs + b.warp * 16 * L::ROW + kb * 16, L::ROW, b.g, b.t);
    __syncthreads();  // every warp has its queries before buffer 1 is refilled
    float o[DH / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g+8: running max, this thread's sum
    const int ntk = (b.map.nrows + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntk; it++) {
        const int k0 = it * TC_TILE, cur = it & 1;
        if (it + 1 < ntk) stage_keys(cur ^ 1, k0 + TC_TILE);  // the other buffer: last read before the last barrier
        cp_async_commit();
        cp_async_wait<1>();  // this tile's copies (all but the newest group)
        __syncthreads();     // ... and every other thread's
        float s[TC_TILE / 8][4] = {};
        fwd_scores<DH>(s, qa, Ks + cur * 2 * TC_TILE * L::ROW, b.lane, b.g, b.t);
        fwd_softmax<DH>(s, o, m, l, b.map, q, k0, scale, b.t);
        mma_scores_tile<DH>(o, s, Vs + cur * 2 * TC_TILE * L::ROW, b.lane);  // O += P V
        __syncthreads();  // every warp is done with this buffer before it is refilled
    }
    fwd_store<DH>(out, lse, o, m, l, b.map, q, D, H, b.h, b.t);
}

// The two score products of the backward kernels for a warp's 16 rows: x += A B^T and y += C E^T,
// A and C the warp's rows (shared memory, row-major), B and E tiles of TC_TILE rows. dQ: S = Q K^T
// and dP = dO V^T; dK/dV: S^T = K Q^T and dP^T = V dO^T. PAIRED: two k steps at a time, the B
// fragments by ldmatrix.x4 (a quarter of the load instructions, 8 more registers: the dK/dV kernel
// takes it; the dQ kernel would drop from three blocks a multiprocessor to two at dh 128).
template <int DH, bool PAIRED>
__device__ __forceinline__ void score_pair(float x[TC_TILE / 8][4], float y[TC_TILE / 8][4], const bf16 *A,
                                           const bf16 *C, const bf16 *B, const bf16 *E, int g, int t) {
    constexpr int ROW = TcLd<DH>::ROW;
    if constexpr (PAIRED && DH >= 32) {
        const int lane = 4 * g + t;
        for (int kb = 0; kb < DH / 16; kb += 2) {
            uint32_t a[2][4], c[2][4];
            for (int h = 0; h < 2; h++) {
                load_a(a[h], A + (kb + h) * 16, ROW, g, t);
                load_a(c[h], C + (kb + h) * 16, ROW, g, t);
            }
            for (int j = 0; j < TC_TILE / 8; j++) {
                uint32_t b[4];
                load_bt2(b, B + j * 8 * ROW + kb * 16, ROW, lane);
                mma16816(x[j], a[0], b[0], b[1]), mma16816(x[j], a[1], b[2], b[3]);
                load_bt2(b, E + j * 8 * ROW + kb * 16, ROW, lane);
                mma16816(y[j], c[0], b[0], b[1]), mma16816(y[j], c[1], b[2], b[3]);
            }
        }
    } else {
        for (int kb = 0; kb < DH / 16; kb++) {
            uint32_t a[4], c[4];
            load_a(a, A + kb * 16, ROW, g, t);
            load_a(c, C + kb * 16, ROW, g, t);
            for (int j = 0; j < TC_TILE / 8; j++) {
                uint32_t b0, b1;
                load_bt(b0, b1, B + j * 8 * ROW + kb * 16, ROW, g, t);
                mma16816(x[j], a, b0, b1);
                load_bt(b0, b1, E + j * 8 * ROW + kb * 16, ROW, g, t);
                mma16816(y[j], c, b0, b1);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// backward: dQ. Block as in the forward pass; streams over tiles of TC_TILE keys and values.

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_bwd_dq_kernel(float *__restrict__ dqkv, const bf16 *__restrict__ qkv16, const bf16 *__restrict__ dout16,
                          long rows, const float *__restrict__ lse, const float *__restrict__ dvec, AttnLayout lay,
                          int D, int H, int ntiles, int pack, float scale) {
    using L = TcLd<DH>;
    constexpr int NT = TC_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *DOs = Qs + TC_ROWS * L::ROW;                   // (64, ROW) each
    bf16 *Ks = DOs + TC_ROWS * L::ROW, *Vs = Ks + 2 * TC_TILE * L::ROW;       // 2 x (TC_TILE, ROW) each
    float *Lse = (float *)(Vs + 2 * TC_TILE * L::ROW), *Dv = Lse + TC_ROWS;  // (64) each
    const TcBlock<DH> b(lay, H, ntiles, pack, qkv16, dout16, rows, blockIdx.x);
    const int h = b.h, q0 = b.own0, r0 = b.warp * 16, g = b.g, t = b.t;
    const TokenMap &map = b.map;
    auto stage_keys = [&](int buf, int k0) {
        stage_async<DH, TC_TILE>(Ks + buf * TC_TILE * L::ROW, b.qkv.k, map, k0, b.qkv.ld);
        stage_async<DH, TC_TILE>(Vs + buf * TC_TILE * L::ROW, b.qkv.v, map, k0, b.qkv.ld);
    };

    stage_async<DH, TC_ROWS>(Qs, b.qkv.q, map, q0, b.qkv.ld);
    stage_async<DH, TC_ROWS>(DOs, b.dout, map, q0, b.ldo);
    cp_async_commit();
    stage_keys(0, 0);
    cp_async_commit();
    for (int r = threadIdx.x; r < TC_ROWS; r += blockDim.x) {
        bool in = map.valid(q0 + r);
        Lse[r] = in ? lse[map.row(q0 + r) * H + h] : 0.f;
        Dv[r] = in ? dvec[map.dvec_at(q0 + r, H, h)] : 0.f;
    }
    float dq[DH / 8][4] = {};
    const int ntk = (map.nrows + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntk; it++) {
        const int k0 = it * TC_TILE, cur = it & 1;
        if (it + 1 < ntk) stage_keys(cur ^ 1, k0 + TC_TILE);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16 *Kt = Ks + cur * TC_TILE * L::ROW, *Vt = Vs + cur * TC_TILE * L::ROW;
        float s[NT][4] = {}, dp[NT][4] = {};
        score_pair<DH, false>(s, dp, Qs + r0 * L::ROW, DOs + r0 * L::ROW, Kt, Vt, g, t);  // S = Q K^T, dP = dO V^T
        for (int j = 0; j < NT; j++)
            for (int e = 0; e < 4; e++) {
                int r = r0 + g + 8 * (e / 2);
                float p = map.sees(q0 + r, k0 + j * 8 + 2 * t + (e & 1)) ? expf(s[j][e] * scale - Lse[r]) : 0.f;
                s[j][e] = p * (dp[j][e] - Dv[r]) * scale;  // dS
            }
        mma_scores_tile<DH>(dq, s, Kt, b.lane);  // dQ += dS K
        __syncthreads();
    }
    const QkvHead<float> dhead(dqkv, D, h, DH);
    for (int r = 0; r < 2; r++) {
        int q = q0 + r0 + g + 8 * r;
        if (map.valid(q)) store_acc_row<DH>(dhead.q + map.row(q) * dhead.ld + 2 * t, dq, r);
    }
}

// ----------------------------------------------------------------------------
// backward: dK and dV. Block b owns keys tile*64 .. +63 and streams over tiles of TC_TILE queries
// (q, dout, lse, Dvec). A thread's rows: keys k and k + 8 (k = own0 + 16 warp + g).

// Starts copying the lse and Dvec of query rows q0 .. q0+TC_TILE-1 (zeros for rows not in use):
// threads 0 .. TC_TILE-1 one lse each, the next TC_TILE one Dvec each.
__device__ __forceinline__ void stage_stats_async(float *Lse, float *Dv, const float *__restrict__ lse,
                                                  const float *__restrict__ dvec, const TokenMap &map, int h, int H,
                                                  int q0) {
    int c = threadIdx.x % TC_TILE;
    bool valid = map.valid(q0 + c);
    if (threadIdx.x < TC_TILE) cp_async4(Lse + c, valid ? lse + map.row(q0 + c) * H + h : lse, valid);
    else if (threadIdx.x < 2 * TC_TILE) cp_async4(Dv + c, valid ? dvec + map.dvec_at(q0 + c, H, h) : dvec, valid);
}

// From S^T and dP^T of the tile of queries at q0 (their lse Lt and Dvec Dt): P^T into st, dS^T into dpt.
__device__ __forceinline__ void dkdv_probs(float st[TC_TILE / 8][4], float dpt[TC_TILE / 8][4], const TokenMap &map,
                                           int k, int q0, const float *Lt, const float *Dt, float scale, int t) {
    for (int j = 0; j < TC_TILE / 8; j++)
        for (int e = 0; e < 4; e++) {
            int c = j * 8 + 2 * t + (e & 1);
            float p = map.sees(q0 + c, k + 8 * (e / 2)) ? expf(st[j][e] * scale - Lt[c]) : 0.f;
            st[j][e] = p, dpt[j][e] = p * (dpt[j][e] - Dt[c]) * scale;  // P^T, dS^T
        }
}

// dS^T of keys k and k + 8 against the tile of queries at q0 as the products round it (bf16), into
// slot (len, ldds) for the dQ GEMM (tc_dq_gemm).
__device__ __forceinline__ void store_ds(bf16 *slot, int ldds, const float dsT[TC_TILE / 8][4], const TokenMap &map,
                                         int k, int q0, int t) {
    for (int r = 0; r < 2; r++) {
        if (!map.valid(k + 8 * r)) continue;
        bf16 *row = slot + (long)(k + 8 * r) * ldds;
        for (int j = 0; j < TC_TILE / 8; j++) {
            int q = q0 + j * 8 + 2 * t;  // q + 1 may be the padding column: never read
            if (map.valid(q)) *(uint32_t *)(row + q) = pack(dsT[j][2 * r], dsT[j][2 * r + 1]);
        }
    }
}

// dV += P^T dO and dK += dS^T Q for the warp's 16 keys, P^T and dS^T in the score accumulators pT and
// dsT, the two products of each step side by side.
template <int DH>
__device__ __forceinline__ void dkdv_accumulate(float dk[DH / 8][4], float dv[DH / 8][4],
                                                const float pT[TC_TILE / 8][4], const float dsT[TC_TILE / 8][4],
                                                const bf16 *Qt, const bf16 *DOt, int lane) {
    constexpr int ROW = TcLd<DH>::ROW;
    for (int kk = 0; kk < TC_TILE / 16; kk++) {
        uint32_t pa[4], sa[4];
        c_to_a(pa, pT[2 * kk], pT[2 * kk + 1]);
        c_to_a(sa, dsT[2 * kk], dsT[2 * kk + 1]);
        for (int n = 0; n < DH / 8; n += 2) {
            uint32_t b[4];
            load_b2(b, DOt + kk * 16 * ROW + n * 8, ROW, lane);
            mma16816(dv[n], pa, b[0], b[1]), mma16816(dv[n + 1], pa, b[2], b[3]);
            load_b2(b, Qt + kk * 16 * ROW + n * 8, ROW, lane);
            mma16816(dk[n], sa, b[0], b[1]), mma16816(dk[n + 1], sa, b[2], b[3]);
        }
    }
}

template <int DH>
__global__ void __launch_bounds__(TC_THREADS)
    tc_attn_bwd_dkdv_kernel(float *__restrict__ dqkv, bf16 *__restrict__ ds, int ldds, unsigned block0,
                            const bf16 *__restrict__ qkv16, const bf16 *__restrict__ dout16, long rows,
                            const float *__restrict__ lse, const float *__restrict__ dvec, AttnLayout lay, int D,
                            int H, int ntiles, int pack, float scale) {
    using L = TcLd<DH>;
    constexpr int NT = TC_TILE / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TC_ROWS * L::ROW;                    // (64 keys, ROW) each
    bf16 *Qs = Vs + TC_ROWS * L::ROW, *DOs = Qs + 2 * TC_TILE * L::ROW;       // 2 x (TC_TILE queries, ROW) each
    float *Lse = (float *)(DOs + 2 * TC_TILE * L::ROW), *Dv = Lse + 2 * TC_TILE;  // 2 x (TC_TILE) each
    const TcBlock<DH> b(lay, H, ntiles, pack, qkv16, dout16, rows, block0 + blockIdx.x);
    const int h = b.h, k0 = b.own0, lane = b.lane, g = b.g, t = b.t, r0 = b.warp * 16;
    const TokenMap &map = b.map;
    auto stage_queries = [&](int buf, int q0) {
        stage_async<DH, TC_TILE>(Qs + buf * TC_TILE * L::ROW, b.qkv.q, map, q0, b.qkv.ld);
        stage_async<DH, TC_TILE>(DOs + buf * TC_TILE * L::ROW, b.dout, map, q0, b.ldo);
        stage_stats_async(Lse + buf * TC_TILE, Dv + buf * TC_TILE, lse, dvec, map, h, H, q0);
    };

    stage_async<DH, TC_ROWS>(Ks, b.qkv.k, map, k0, b.qkv.ld);
    stage_async<DH, TC_ROWS>(Vs, b.qkv.v, map, k0, b.qkv.ld);
    cp_async_commit();
    stage_queries(0, 0);
    cp_async_commit();
    float dk[DH / 8][4] = {}, dv[DH / 8][4] = {};
    const int ntq = (map.nrows + TC_TILE - 1) / TC_TILE;
    for (int it = 0; it < ntq; it++) {
        const int q0 = it * TC_TILE, cur = it & 1, nxt = cur ^ 1;
        if (it + 1 < ntq) stage_queries(nxt, q0 + TC_TILE);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16 *Qt = Qs + cur * TC_TILE * L::ROW, *DOt = DOs + cur * TC_TILE * L::ROW;
        const float *Lt = Lse + cur * TC_TILE, *Dt = Dv + cur * TC_TILE;
        float st[NT][4] = {}, dpt[NT][4] = {};  // (16 keys, TC_TILE queries): S^T and dP^T
        score_pair<DH, true>(st, dpt, Ks + r0 * L::ROW, Vs + r0 * L::ROW, Qt, DOt, g, t);
        dkdv_probs(st, dpt, map, k0 + r0 + g, q0, Lt, Dt, scale, t);
        if (ds)  // this block's (sequence, head) pair of the chunk: blocks count from block0
            store_ds(ds + (long)(blockIdx.x / ntiles) * lay.len * ldds, ldds, dpt, map, k0 + r0 + g, q0, t);
        dkdv_accumulate<DH>(dk, dv, st, dpt, Qt, DOt, lane);
        __syncthreads();
    }
    for (int r = 0; r < 2; r++) {
        int k = k0 + r0 + g + 8 * r;
        if (!map.valid(k)) continue;
        float *dst = dqkv + map.row(k) * 3L * D + D + (long)h * DH + 2 * t;
        for (int n = 0; n < DH / 8; n++) {
            dst[n * 8] = dk[n][2 * r], dst[n * 8 + 1] = dk[n][2 * r + 1];
            dst[D + n * 8] = dv[n][2 * r], dst[D + n * 8 + 1] = dv[n][2 * r + 1];
        }
    }
}

// ----------------------------------------------------------------------------
// host side

// How a call is cut into blocks: sequences of at most TC_PACK_MAX tokens are packed, 64 / len to a
// block's row space (one tile); longer ones get ceil(len / 64) blocks of 64 rows each.
struct TcGrid {
    int pack, ntiles;
    unsigned blocks;
};
static TcGrid tc_grid(long n_seq, int len, int H) {
    TcGrid g;
    g.pack = len <= TC_PACK_MAX ? TC_ROWS / len : 1;
    g.ntiles = g.pack > 1 ? 1 : (len + TC_ROWS - 1) / TC_ROWS;
    long blocks = (n_seq + g.pack - 1) / g.pack * H * g.ntiles;
    if (blocks > 0x7fffffffL) fc_die("attention: %ld blocks is more than one CUDA grid holds", blocks);
    g.blocks = (unsigned)blocks;
    return g;
}

// The kernels may need more than the default 48 KiB of shared memory: opt in once per kernel.
template <typename K>
static void tc_opt_in(K kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Every token of the layout is one row of qkv (and out, dout): n_seq * len rows.
template <int DH>
static void tc_fwd(bf16 *out, float *lse, const bf16 *qkv16, AttnLayout lay, int D, int H, long n_seq) {
    static int ready;
    if (!ready) tc_opt_in(tc_attn_fwd_kernel<DH>, TcLd<DH>::FWD_BYTES), ready = 1;
    long rows = n_seq * lay.len;
    TcGrid grid = tc_grid(n_seq, lay.len, H);
    float scale = attn_scale(DH);
    tc_attn_fwd_kernel<DH><<<grid.blocks, TC_THREADS, TcLd<DH>::FWD_BYTES>>>(out, lse, qkv16, rows, lay, D, H, grid.ntiles, grid.pack, scale);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// dQ from the stored dS (sequences longer than TC_PACK_MAX): for each (sequence, head) pair of a
// chunk, dQ^T (DH, len) = K^T (DH, len) dS^T (len, len), all of the chunk's pairs in one batched
// cuBLAS GEMM (bf16 operands, fp32 accumulation, written into dqkv with beta 0). Column-major: K^T
// is the head's columns of qkv with lda = tok_stride * 3D; dS^T is slot p of ds read as op T of the
// (ldds, len) matrix the dK/dV kernel wrote; dQ^T lies in dqkv with ldc = tok_stride * 3D. The
// pointer arrays are filled on the device, so nothing waits for the host.

static size_t g_ds_cap = ATTN_DS_CAP;  // the most bytes of dS held at once (backend_cuda_set_attn_ds_cap)

extern "C" void backend_cuda_set_attn_ds_cap(size_t bytes) { g_ds_cap = bytes ? bytes : ATTN_DS_CAP; }
size_t fc_attn_ds_cap(void) { return g_ds_cap; }

// Thread p: the operands of pair pair0 + p of the chunk.
__global__ void tc_dq_pointers_kernel(const void **A, const void **B, void **C, const bf16 *__restrict__ k16,
                                      const bf16 *__restrict__ ds, float *__restrict__ dqkv, AttnLayout lay, int D,
                                      int H, int DH, int ldds, long pair0, long npairs) {
    long p = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= npairs) return;
    long seq = (pair0 + p) / H, base = attn_seq_base(lay, seq);
    int h = (int)((pair0 + p) % H);
    A[p] = k16 + base * 3L * D + (long)h * DH;
    B[p] = ds + p * lay.len * (long)ldds;
    C[p] = dqkv + base * 3L * D + (long)h * DH;
}

static void tc_dq_gemm(float *dqkv, const bf16 *k16, const bf16 *ds, void **ptrs, AttnLayout lay, int D, int H,
                       int DH, int ldds, long pair0, long npairs) {
    const void **A = (const void **)ptrs, **B = A + npairs;
    void **C = ptrs + 2 * npairs;
    tc_dq_pointers_kernel<<<fc_cdiv(npairs, 128), 128>>>(A, B, C, k16, ds, dqkv, lay, D, H, DH, ldds, pair0, npairs);
    kernelCheck();
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t hd = fc_cublas_bf16();
    cublasCheck(cublasSetPointerMode(hd, CUBLAS_POINTER_MODE_HOST));
    cublasCheck(cublasGemmBatchedEx(hd, CUBLAS_OP_N, CUBLAS_OP_T, DH, lay.len, lay.len, &one, A, CUDA_R_16BF,
                                    (int)(lay.tok_stride * 3 * D), B, CUDA_R_16BF, ldds, &zero, C, CUDA_R_32F,
                                    (int)(lay.tok_stride * 3 * D), (int)npairs, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

template <int DH>
static void tc_bwd(float *dqkv, const float *dout, const bf16 *qkv16, const float *lse, const float *dvec,
                   AttnLayout lay, int D, int H, long n_seq) {
    static int ready;
    if (!ready) {
        tc_opt_in(tc_attn_bwd_dq_kernel<DH>, TcLd<DH>::DQ_BYTES);
        tc_opt_in(tc_attn_bwd_dkdv_kernel<DH>, TcLd<DH>::DKDV_BYTES);
        ready = 1;
    }
    long rows = n_seq * lay.len;
    const bf16 *dout16 = fc_bf16_heads(dout, rows, D, H, DH, SCRATCH_BF16_B);
    TcGrid grid = tc_grid(n_seq, lay.len, H);
    float scale = attn_scale(DH);
    if (grid.pack > 1) {  // packed short sequences: the dQ kernel, then dK/dV
        tc_attn_bwd_dq_kernel<DH><<<grid.blocks, TC_THREADS, TcLd<DH>::DQ_BYTES>>>(dqkv, qkv16, dout16, rows, lse, dvec, lay, D, H, grid.ntiles, grid.pack, scale);
        kernelCheck();
        tc_attn_bwd_dkdv_kernel<DH><<<grid.blocks, TC_THREADS, TcLd<DH>::DKDV_BYTES>>>(dqkv, nullptr, 0, 0, qkv16, dout16, rows, lse, dvec, lay, D, H, grid.ntiles, grid.pack, scale);
        kernelCheck();
        return;
    }
    // dK/dV store dS, chunk by chunk of (sequence, head) pairs, and a batched GEMM takes dQ from it.
    long pairs = n_seq * H, chunk = attn_ds_chunk_pairs(pairs, lay.len, g_ds_cap);
    int ldds = attn_ds_ld(lay.len);
    char *scratch = (char *)fc_cuda_scratch(SCRATCH_ATTN_DS, attn_ds_scratch_bytes(pairs, lay.len, g_ds_cap));
    void **ptrs = (void **)scratch;
    bf16 *ds = (bf16 *)(scratch + attn_ds_pointer_bytes(chunk));
    const bf16 *k16 = qkv16 + D;
    for (long p0 = 0; p0 < pairs; p0 += chunk) {
        long np = pairs - p0 < chunk ? pairs - p0 : chunk;
        tc_attn_bwd_dkdv_kernel<DH><<<(unsigned)(np * grid.ntiles), TC_THREADS, TcLd<DH>::DKDV_BYTES>>>(dqkv, ds, ldds, (unsigned)(p0 * grid.ntiles), qkv16, dout16, rows, lse, dvec, lay, D, H, grid.ntiles, 1, scale);
        kernelCheck();
        tc_dq_gemm(dqkv, k16, ds, ptrs, lay, D, H, DH, ldds, p0, np);
    }
}

// qkv (rows, 3D) as the kernels read it: the operand itself, or its copy in scratch where it is not
// on 16 bytes (cp.async's pieces; D is a multiple of 16, so every head's rows then are).
static const bf16 *tc_qkv(const Operand *qkv, long rows, int D) {
    if ((uintptr_t)qkv % 16 == 0) return (const bf16 *)qkv;
    size_t bytes = sizeof(bf16) * (size_t)rows * 3 * D;
    bf16 *copy = (bf16 *)fc_cuda_scratch(SCRATCH_BF16_A, bytes);
    cudaCheck(cudaMemcpyAsync(copy, qkv, bytes, cudaMemcpyDeviceToDevice, 0));
    return copy;
}

// The kernels take the head dimensions attention.cu's do (any sequence length).
static void tc_attn_fwd(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_fwd");
    if (call.empty()) return;
    bf16 *out = (bf16 *)out_op;
    if ((uintptr_t)out % 4) fc_die("attn_fwd: the bf16 output is not on 4 bytes (it is stored in pairs)");
    const bf16 *qkv = tc_qkv(qkv_op, call.n_seq * lay.len, D);
    if (fc_attn_short_fwd(out_op, lse, (const Operand *)qkv, lay, D, H, 1)) return;  // the attn_short route
    if (fc_attn_gemm_fwd(out, lse, qkv, lay, D, H)) return;  // the attn_gemm route, where it is on
    call.dispatch([&](auto dh) { tc_fwd<decltype(dh)::value>(out, lse, qkv, lay, D, H, call.n_seq); });
}

static void tc_attn_bwd(real *dqkv, const real *dout, const Operand *out, const Operand *qkv_op, const real *lse,
                        AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_bwd");
    if (call.empty() || !dqkv) return;
    const bf16 *qkv = tc_qkv(qkv_op, call.n_seq * lay.len, D);
    if (fc_attn_short_bwd(dqkv, dout, out, (const Operand *)qkv, lse, lay, D, H, 1)) return;
    const float *dvec = fc_attn_dvec(dout, out, lay, D, H, 1);
    if (fc_attn_gemm_bwd(dqkv, dout, qkv, lse, dvec, lay, D, H)) return;
    call.dispatch([&](auto dh) { tc_bwd<decltype(dh)::value>(dqkv, dout, qkv, lse, dvec, lay, D, H, call.n_seq); });
}

void cuda_register_attention_tc(Backend *be) {
    be->attn_fwd = tc_attn_fwd;
    be->attn_bwd = tc_attn_bwd;
}
