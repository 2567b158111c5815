// attention.cu: softmax attention (attn_fwd, attn_bwd) in the flash-attention style: the (len, len)
// score matrix of a sequence is never stored in global memory; tiles of keys/values (forward, dQ)
// or of queries/output gradients (dK/dV) are staged in shared memory and streamed over.
//
// Reference: cpu_attn_fwd / cpu_attn_bwd in src/backend/cpu/cpu_backend.c. qkv (T, 3D) holds per row q at
// columns [0, D), k at [D, 2D), v at [2D, 3D); head h owns columns h*dh .. h*dh+dh-1 of each part.
// scale = 1/sqrt(dh); s_ij = scale * q_i . k_j.
//
// Forward, per (sequence, head, tile of queries): the online softmax. Each query keeps a running
// max m, a running sum l and an accumulator acc (dh) in registers; keys are scored KC at a time,
// then m_new = max(m, those scores), l and acc are rescaled by exp(m - m_new) once, and the KC
// probabilities exp(s - m_new) are added in. At the end out = acc / l and lse = m + log(l): the
// natural-log log-sum-exp of the SCALED scores, exactly what the CPU saves.
//
// Backward (flash-attention-2, deterministic: no atomics; every gradient element is owned by one
// thread, which sums its terms in a fixed order and writes the total into dqkv once):
//   1. Dvec[seq, h, i] = sum_c dout_ic * out_ic               (scratch, n_seq * H * len floats)
//   2. dQ kernel, per tile of queries, streaming over key/value tiles in order:
//        p_ij = exp(s_ij - lse_i), dp_ij = dout_i . v_j, ds_ij = p_ij (dp_ij - Dvec_i) scale,
//        dq_i = sum_j ds_ij k_j
//   3. dK/dV kernel, per tile of keys, streaming over query tiles (q, dout, lse, Dvec) in order:
//        dv_j = sum_i p_ij dout_i,  dk_j = sum_i ds_ij q_i
//   Both recompute p from q, k and the saved lse. dqkv is OVERWRITTEN: every element of its q, k
//   and v columns belongs to one query or key of one sequence.
//
// Thread mapping (all kernels): a group of TPR consecutive lanes serves one "owned" row (a query
// in forward and dQ, a key in dK/dV). Lane t of the group owns the columns
//     4*(j*TPR + t) + e,   j < CPT/4, e < 4          (CPT = dh / TPR columns per thread)
// so that the TPR lanes of a group read consecutive float4s of a shared-memory row (no bank
// conflicts; every group of the warp reads the same row: a broadcast). A dot product is summed
// over the lane's own columns, then across the group with an xor butterfly (__shfl_xor_sync),
// which leaves the same bits in every lane of the group (IEEE addition commutes).
//   forward: CPT = min(dh, 32)  -> TPR 1, 1, 2, 4 for dh 16, 32, 64, 128; registers q, acc
//   backward: CPT = min(dh, 16) -> TPR 1, 2, 4, 8;  registers q, dout, dq (dQ) or k, v, dk, dv (dK/dV)
// A block owns up to 64 rows (32 for dh 128 in the backward pass). Short sequences (temporal
// attention, len = F, e.g. 7) get smaller blocks: rows rounded up to a whole warp.
//
// Shared memory (dynamic, per block): two (trows, dh) fp32 tiles, trows = TILE = 64 keys/queries
// for dh <= 64 and 32 for dh 128, or the sequence rounded up to 16 rows when it is shorter: at most
// 32 KiB (plus 512 B of lse/Dvec in dK/dV).
//
// Limits: dh in {16, 32, 64, 128} (others die with a message); any len >= 1 and any AttnLayout
// strides; grids are 1-D (blocks ordered tile-fastest so that the blocks of one (sequence, head)
// run together and share its K/V in L2). Precision fp32 with expf/logf; Dvec is a compensated float sum.
// The element type of q/k/v loads is a template parameter (`Elem`, only float is instantiated)
// so that a bf16 qkv can be added later by a load_elem overload.
#include <math.h>

#include "cuda_common.cuh"
#include "attention_common.cuh"

static_assert(sizeof(real) == sizeof(float), "the CUDA backend is fp32 at the interface");

// ----------------------------------------------------------------------------
// configuration

// Forward kernel: columns per thread, threads per row, rows per block, keys per shared tile, keys
// per online-softmax step.
template <int DH>
struct FwdCfg {
    static constexpr int CPT = DH < 32 ? DH : 32;
    static constexpr int TPR = DH / CPT;
    static constexpr int ROWS = 64;
    static constexpr int TILE = DH <= 64 ? 64 : 32;
    static constexpr int KC = 16;
    static_assert(TILE % KC == 0, "the key tile is a whole number of softmax steps");
    static_assert(CPT % 4 == 0 && 32 % TPR == 0, "float4 columns, groups inside a warp");
};

// Backward kernels (dQ and dK/dV share it): rows owned per block, rows per streamed shared tile.
template <int DH>
struct BwdCfg {
    static constexpr int CPT = DH < 16 ? DH : 16;
    static constexpr int TPR = DH / CPT;
    static constexpr int ROWS = DH <= 64 ? 64 : 32;
    static constexpr int TILE = DH <= 64 ? 64 : 32;
    static_assert(CPT % 4 == 0 && 32 % TPR == 0, "float4 columns, groups inside a warp");
};

// ----------------------------------------------------------------------------
// device helpers

// One element of q/k/v as fp32 (a bf16 overload would go here).
__device__ __forceinline__ float load_elem(const float *p) { return *p; }

// Lane t's share of the dot product of its registers a (CPT) with the shared-memory row srow (DH).
template <int CPT, int TPR>
__device__ __forceinline__ float dot_own(const float *a, const float *srow, int t) {
    const float4 *r4 = reinterpret_cast<const float4 *>(srow);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < CPT / 4; j++) {
        float4 b = r4[j * TPR + t];
        s = fmaf(a[4 * j + 0], b.x, s);
        s = fmaf(a[4 * j + 1], b.y, s);
        s = fmaf(a[4 * j + 2], b.z, s);
        s = fmaf(a[4 * j + 3], b.w, s);
    }
    return s;
}

// acc (lane t's CPT columns) += w * srow (its columns).
template <int CPT, int TPR>
__device__ __forceinline__ void axpy_own(float *acc, float w, const float *srow, int t) {
    const float4 *r4 = reinterpret_cast<const float4 *>(srow);
#pragma unroll
    for (int j = 0; j < CPT / 4; j++) {
        float4 b = r4[j * TPR + t];
        acc[4 * j + 0] = fmaf(w, b.x, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(w, b.y, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(w, b.z, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(w, b.w, acc[4 * j + 3]);
    }
}

// Global column (within the head) of lane t's register 4*j + e.
template <int TPR>
__device__ __forceinline__ int own_col(int j, int e, int t) {
    return 4 * (j * TPR + t) + e;
}

// Lane t's CPT columns of a global row (src points at the head's first column); zeros if !valid.
template <int CPT, int TPR, typename Elem>
__device__ __forceinline__ void load_own(float *dst, const Elem *src, bool valid, int t) {
#pragma unroll
    for (int j = 0; j < CPT / 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dst[4 * j + e] = valid ? load_elem(src + own_col<TPR>(j, e, t)) : 0.f;
}

// dst (global, the head's first column) = lane t's CPT columns.
template <int CPT, int TPR>
__device__ __forceinline__ void store_own(float *dst, const float *src, int t) {
#pragma unroll
    for (int j = 0; j < CPT / 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dst[own_col<TPR>(j, e, t)] = src[4 * j + e];
}

// Stage rows r0 .. r0+n-1 of a sequence's K and V (one head's columns) into Ks, Vs (nz rows, DH): rows
// n .. nz-1 are zero-filled (nz: the rows the caller reads). Coalesced: consecutive threads read
// consecutive columns; each thread issues STAGE_LOADS elements of K and of V before it stores any,
// so that a tile waits for global memory a few times, not once per element.
#define STAGE_LOADS 8
template <int DH, typename Elem>
__device__ __forceinline__ void stage_kv(float (*Ks)[DH], float (*Vs)[DH], const QkvHead<const Elem> &head,
                                         long base, long tok, int r0, int n, int nz) {
    const int total = nz * DH, step = blockDim.x;
    for (int i0 = threadIdx.x; i0 < total; i0 += STAGE_LOADS * step) {
        float kv[STAGE_LOADS], vv[STAGE_LOADS];
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++) {
            int idx = i0 + u * step, r = idx / DH, c = idx % DH;
            kv[u] = vv[u] = 0.f;
            if (idx < total && r < n) {
                const long off = (base + (long)(r0 + r) * tok) * head.ld + c;
                kv[u] = load_elem(head.k + off);
                vv[u] = load_elem(head.v + off);
            }
        }
#pragma unroll
        for (int u = 0; u < STAGE_LOADS; u++) {
            int idx = i0 + u * step;
            if (idx < total) Ks[idx / DH][idx % DH] = kv[u], Vs[idx / DH][idx % DH] = vv[u];
        }
    }
}

// A block's rows: block b = (seq * H + h) * ntiles + tile owns the rows tile*rows .. +rows-1 of
// (seq, h), rows = blockDim.x / TPR (queries in forward and dQ, keys in dK/dV); thread = (group g = its
// row of the tile, lane t). own: that row's token; row: the token's row of qkv, out and dout. An idle
// row past the end (valid false) computes on zeros from token 0's row and writes nothing.
template <int TPR>
struct RowBlock {
    AttnBlockIndex at;
    int len, g, t, own;
    bool valid;
    long base, tok, row;
    __device__ RowBlock(const AttnLayout &lay, int H, int ntiles)
        : at(blockIdx.x, H, ntiles), len(lay.len), g(threadIdx.x / TPR), t(threadIdx.x % TPR),
          own(at.tile * (int)(blockDim.x / TPR) + g), valid(own < len), base(attn_seq_base(lay, at.group)),
          tok(lay.tok_stride), row(base + (long)(valid ? own : 0) * tok) {}
};

// Rows per block for a sequence of length len: the configured maximum, or len rounded up to whole
// warps when the sequence is shorter (temporal attention).
static int rows_per_block(int len, int max_rows, int tpr) {
    if (len >= max_rows) return max_rows;
    int step = 32 / tpr;
    int rows = (len + step - 1) / step * step;
    return rows < max_rows ? rows : max_rows;
}

// Rows of a streamed tile: the configured size, or len rounded up to 16 (the forward pass's softmax
// step) when the whole sequence is shorter, so that short sequences (temporal attention over ~7
// frames) stage and reserve only what they use and more blocks fit on a multiprocessor.
static int tile_rows(int len, int tile) {
    int rows = (len + 15) / 16 * 16;
    return rows < tile ? rows : tile;
}

// ----------------------------------------------------------------------------
// forward
//
// Launch bounds: the block size only. ptxas then keeps the forward kernels at 128 registers with a
// few bytes of spill (dh 32..128); forcing no spill (157 registers) measured as fast or slower on an
// H100 (fewer resident warps), so the default stays.
//
// Block b = (seq * H + h) * ntiles + tile owns the queries tile*rows .. +rows-1 of (seq, h);
// thread = (group g = query within the tile, lane t within the group).
// out (T, D), lse (T, H), qkv (T, 3D).

template <int DH, typename Elem>
__global__ void __launch_bounds__(FwdCfg<DH>::ROWS *FwdCfg<DH>::TPR)
    attn_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const Elem *__restrict__ qkv, AttnLayout lay,
                    int D, int H, int ntiles, int trows, float scale) {
    using C = FwdCfg<DH>;
    constexpr int CPT = C::CPT, TPR = C::TPR, KC = C::KC;
    extern __shared__ __align__(16) unsigned char smem[];
    float(*Ks)[DH] = reinterpret_cast<float(*)[DH]>(smem);  // (trows, DH)
    float(*Vs)[DH] = Ks + trows;                               // (trows, DH)
    const RowBlock<TPR> b(lay, H, ntiles);  // b.own: this thread's query
    const QkvHead<const Elem> head(qkv, D, b.at.h, DH);
    const int len = b.len, t = b.t;

    float q[CPT], acc[CPT];
    load_own<CPT, TPR>(q, head.q + b.row * head.ld, b.valid, t);
#pragma unroll
    for (int c = 0; c < CPT; c++) acc[c] = 0.f;
    float m = -INFINITY, l = 0.f;

    for (int k0 = 0; k0 < len; k0 += trows) {
        const int nk = min(trows, len - k0);  // the same in every thread: loops below stay uniform
        __syncthreads();                      // the previous tile is no longer read
        // the softmax steps read whole groups of KC keys: zeros up to the next multiple of KC
        stage_kv<DH>(Ks, Vs, head, b.base, b.tok, k0, nk, min(trows, (nk + KC - 1) / KC * KC));
        __syncthreads();

        for (int kc = 0; kc < nk; kc += KC) {  // KC keys per step; kc < nk: at least one is real
            float s[KC];
            float smax = -INFINITY;
#pragma unroll
            for (int u = 0; u < KC; u++) {
                float d = group_sum<TPR>(dot_own<CPT, TPR>(q, Ks[kc + u], t));
                s[u] = kc + u < nk ? d * scale : -INFINITY;  // rows past nk are zeros: masked
                smax = fmaxf(smax, s[u]);
            }
            const float m_new = fmaxf(m, smax);  // finite
            const float corr = expf(m - m_new);  // exp(-inf) = 0 on the first step
            l *= corr;
#pragma unroll
            for (int c = 0; c < CPT; c++) acc[c] *= corr;
#pragma unroll
            for (int u = 0; u < KC; u++) {
                const float p = expf(s[u] - m_new);  // 0 for the masked keys
                l += p;
                axpy_own<CPT, TPR>(acc, p, Vs[kc + u], t);
            }
            m = m_new;
        }
    }

    if (b.valid) {
        const float inv = 1.f / l;  // l >= 1: the maximum contributes exp(0)
        float o[CPT];
#pragma unroll
        for (int c = 0; c < CPT; c++) o[c] = acc[c] * inv;
        store_own<CPT, TPR>(out + b.row * D + b.at.h * DH, o, t);
        if (t == 0) lse[b.row * H + b.at.h] = m + logf(l);
    }
}

// ----------------------------------------------------------------------------
// backward 1: Dvec (n_seq, H, len) = rowwise dout . out per head, in float with compensation
// (CompSum: it is subtracted from dp, where cancellation would magnify its error). One warp per
// (seq, h, token): the lanes stride over the head's dh columns (each step of the warp reads 128
// contiguous bytes of both rows) and a butterfly merges the lanes' sums.

#define DVEC_WARPS 8  // warps per block

template <typename OpT>
__global__ void attn_dvec_kernel(float *__restrict__ dvec, const float *__restrict__ dout,
                                 const OpT *__restrict__ out, AttnLayout lay, int D, int H, int dh, long total) {
    const long idx = (long)blockIdx.x * DVEC_WARPS + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (idx >= total) return;  // the whole warp leaves together
    const int len = lay.len;
    const int i = (int)(idx % len);
    const long sh = idx / len;
    const int h = (int)(sh % H), seq = (int)(sh / H);
    const long off = (attn_seq_base(lay, seq) + (long)i * lay.tok_stride) * D + (long)h * dh;
    CompSum s = COMP_SUM_ZERO;
    for (int c = lane; c < dh; c += 32) s.add(__fmul_rn(dout[off + c], op_load(out + off + c)));
    for (int o = 16; o > 0; o >>= 1) {
        CompSum other = {__shfl_xor_sync(0xffffffffu, s.s, o), __shfl_xor_sync(0xffffffffu, s.c, o)};
        s.merge(other);
    }
    if (lane == 0) dvec[idx] = s.value();
}

// ----------------------------------------------------------------------------
// backward 2: dQ. Block b = (seq * H + h) * ntiles + tile owns the queries tile*rows .. +rows-1;
// thread = (group g = query, lane t). Registers: q, dout, dq (CPT each); shared: K, V tiles.

template <int DH, typename Elem>
__global__ void __launch_bounds__(BwdCfg<DH>::ROWS *BwdCfg<DH>::TPR)
    attn_bwd_dq_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const Elem *__restrict__ qkv,
                       const float *__restrict__ lse, const float *__restrict__ dvec, AttnLayout lay, int D, int H,
                       int ntiles, int trows, float scale) {
    using C = BwdCfg<DH>;
    constexpr int CPT = C::CPT, TPR = C::TPR;
    extern __shared__ __align__(16) unsigned char smem[];
    float(*Ks)[DH] = reinterpret_cast<float(*)[DH]>(smem);  // (trows, DH)
    float(*Vs)[DH] = Ks + trows;                               // (trows, DH)
    // This thread's query b.own; an idle one has q = dout = 0, lse = Dvec = 0: finite, never written.
    const RowBlock<TPR> b(lay, H, ntiles);
    const QkvHead<const Elem> head(qkv, D, b.at.h, DH);
    const int len = b.len, t = b.t;
    const bool valid = b.valid;

    float q[CPT], dO[CPT], dq[CPT];
    load_own<CPT, TPR>(q, head.q + b.row * head.ld, valid, t);
    load_own<CPT, TPR>(dO, dout + b.row * D + b.at.h * DH, valid, t);
#pragma unroll
    for (int c = 0; c < CPT; c++) dq[c] = 0.f;
    const float Li = valid ? lse[b.row * H + b.at.h] : 0.f;
    const float Di = valid ? dvec[(long)b.at.pair * len + b.own] : 0.f;

    for (int k0 = 0; k0 < len; k0 += trows) {
        const int nk = min(trows, len - k0);
        __syncthreads();
        stage_kv<DH>(Ks, Vs, head, b.base, b.tok, k0, nk, nk);
        __syncthreads();
        for (int j = 0; j < nk; j++) {  // keys in order
            const float s = group_sum<TPR>(dot_own<CPT, TPR>(q, Ks[j], t));
            const float dp = group_sum<TPR>(dot_own<CPT, TPR>(dO, Vs[j], t));
            const float p = expf(s * scale - Li);
            const float ds = p * (dp - Di) * scale;
            axpy_own<CPT, TPR>(dq, ds, Ks[j], t);
        }
    }
    if (valid) {
        const QkvHead<float> dhead(dqkv, D, b.at.h, DH);
        store_own<CPT, TPR>(dhead.q + b.row * dhead.ld, dq, t);
    }
}

// ----------------------------------------------------------------------------
// backward 3: dK and dV. Block b = (seq * H + h) * ntiles + tile owns the keys tile*rows .. +rows-1;
// thread = (group g = key, lane t). Registers: k, v, dk, dv (CPT each); shared: tiles of q and dout
// (TILE, DH) with their lse and Dvec (TILE), streamed over all queries of the sequence in order.

template <int DH, typename Elem>
__global__ void __launch_bounds__(BwdCfg<DH>::ROWS *BwdCfg<DH>::TPR)
    attn_bwd_dkdv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const Elem *__restrict__ qkv,
                         const float *__restrict__ lse, const float *__restrict__ dvec, AttnLayout lay, int D,
                         int H, int ntiles, int trows, float scale) {
    using C = BwdCfg<DH>;
    constexpr int CPT = C::CPT, TPR = C::TPR;
    extern __shared__ __align__(16) unsigned char smem[];
    float(*Qs)[DH] = reinterpret_cast<float(*)[DH]>(smem);  // (trows, DH)
    float(*dOs)[DH] = Qs + trows;                              // (trows, DH)
    float *Ls = (float *)(dOs + trows), *Ds = Ls + trows;      // (trows) each
    const RowBlock<TPR> b(lay, H, ntiles);  // b.own: this thread's key
    const QkvHead<const Elem> head(qkv, D, b.at.h, DH);
    const int len = b.len, t = b.t, h = b.at.h;
    const long base = b.base, tok = b.tok;

    float k[CPT], v[CPT], dk[CPT], dv[CPT];
    load_own<CPT, TPR>(k, head.k + b.row * head.ld, b.valid, t);
    load_own<CPT, TPR>(v, head.v + b.row * head.ld, b.valid, t);
#pragma unroll
    for (int c = 0; c < CPT; c++) dk[c] = dv[c] = 0.f;

    for (int q0 = 0; q0 < len; q0 += trows) {
        const int nq = min(trows, len - q0);
        __syncthreads();
        // the nq rows read below, STAGE_LOADS elements of each matrix in flight per thread
        for (int i0 = threadIdx.x; i0 < nq * DH; i0 += STAGE_LOADS * blockDim.x) {
            float qv[STAGE_LOADS], gv[STAGE_LOADS];
#pragma unroll
            for (int u = 0; u < STAGE_LOADS; u++) {
                int idx = i0 + u * blockDim.x, r = idx / DH, c = idx % DH;
                qv[u] = gv[u] = 0.f;
                if (idx < nq * DH) {
                    long row = base + (long)(q0 + r) * tok;
                    qv[u] = load_elem(head.q + row * head.ld + c);
                    gv[u] = dout[row * D + h * DH + c];
                }
            }
#pragma unroll
            for (int u = 0; u < STAGE_LOADS; u++) {
                int idx = i0 + u * blockDim.x;
                if (idx < nq * DH) Qs[idx / DH][idx % DH] = qv[u], dOs[idx / DH][idx % DH] = gv[u];
            }
        }
        for (int r = threadIdx.x; r < nq; r += blockDim.x) {
            Ls[r] = lse[(base + (long)(q0 + r) * tok) * H + h];
            Ds[r] = dvec[(long)b.at.pair * len + q0 + r];
        }
        __syncthreads();
        for (int i = 0; i < nq; i++) {  // queries in order
            const float s = group_sum<TPR>(dot_own<CPT, TPR>(k, Qs[i], t));
            const float dp = group_sum<TPR>(dot_own<CPT, TPR>(v, dOs[i], t));
            const float p = expf(s * scale - Ls[i]);
            const float ds = p * (dp - Ds[i]) * scale;
            axpy_own<CPT, TPR>(dv, p, dOs[i], t);
            axpy_own<CPT, TPR>(dk, ds, Qs[i], t);
        }
    }
    if (b.valid) {
        const QkvHead<float> dhead(dqkv, D, h, DH);
        store_own<CPT, TPR>(dhead.k + b.row * dhead.ld, dk, t);
        store_own<CPT, TPR>(dhead.v + b.row * dhead.ld, dv, t);
    }
}

// ----------------------------------------------------------------------------
// host side: shape checks, launch configuration, dispatch on the head dimension

// Blocks of a 1-D grid of n_seq * H * ntiles; dies if it does not fit.
static unsigned attn_grid(long n_seq, int H, int ntiles) {
    long blocks = n_seq * H * ntiles;
    if (blocks > 0x7fffffffL) fc_die("attention: %ld blocks is more than one CUDA grid holds", blocks);
    return (unsigned)blocks;
}

// The head sizes the kernels are instantiated for (HeadDimCall's dispatch).
static int cuda_attn_head_dim_ok(int dh) { return dh == 16 || dh == 32 || dh == 64 || dh == 128; }

int fc_attn_head_dim(int D, int H, const char *op) {
    if (H <= 0 || D % H != 0) fc_die("%s: D = %d is not a multiple of H = %d", op, D, H);
    int dh = D / H;
    if (!cuda_attn_head_dim_ok(dh))
        fc_die("%s: head dim %d (D = %d, H = %d) is not supported by the CUDA backend (16, 32, 64 or 128)", op, dh,
               D, H);
    return dh;
}

// The launch of a kernel configured by C (FwdCfg or BwdCfg): rows a block owns, rows of a streamed
// tile, blocks per (sequence, head), and the two (trows, DH) fp32 tiles of shared memory.
template <int DH, typename C>
struct RowLaunch {
    int rows, trows, ntiles;
    unsigned grid, threads;
    size_t smem;
    RowLaunch(const AttnLayout &lay, int H, long n_seq)
        : rows(rows_per_block(lay.len, C::ROWS, C::TPR)), trows(tile_rows(lay.len, C::TILE)),
          ntiles((lay.len + rows - 1) / rows), grid(attn_grid(n_seq, H, ntiles)), threads(rows * C::TPR),
          smem(2 * sizeof(float) * trows * DH) {}
};

template <int DH>
static void attn_fwd_launch(float *out, float *lse, const float *qkv, AttnLayout lay, int D, int H, long n_seq) {
    const RowLaunch<DH, FwdCfg<DH>> l(lay, H, n_seq);
    const float scale = attn_scale(DH);
    attn_fwd_kernel<DH, float><<<l.grid, l.threads, l.smem>>>(out, lse, qkv, lay, D, H, l.ntiles, l.trows, scale);
    kernelCheck();
}

template <int DH>
static void attn_bwd_launch(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *dvec,
                            AttnLayout lay, int D, int H, long n_seq) {
    const RowLaunch<DH, BwdCfg<DH>> l(lay, H, n_seq);
    const float scale = attn_scale(DH);
    attn_bwd_dq_kernel<DH, float><<<l.grid, l.threads, l.smem>>>(dqkv, dout, qkv, lse, dvec, lay, D, H, l.ntiles, l.trows, scale);
    kernelCheck();
    const size_t smem = l.smem + 2 * sizeof(float) * l.trows;  // lse and Dvec of the query tile
    attn_bwd_dkdv_kernel<DH, float><<<l.grid, l.threads, smem>>>(dqkv, dout, qkv, lse, dvec, lay, D, H, l.ntiles, l.trows, scale);
    kernelCheck();
}

// The "cuda-fp32" table's operands are floats.
static void cuda_attn_fwd(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_fwd");
    if (call.empty()) return;
    if (fc_attn_short_fwd(out_op, lse, qkv_op, lay, D, H, 0)) return;  // the attn_short route, where it is on
    float *out = (float *)out_op;
    const float *qkv = (const float *)qkv_op;
    call.dispatch([&](auto dh) { attn_fwd_launch<decltype(dh)::value>(out, lse, qkv, lay, D, H, call.n_seq); });
}

const float *fc_attn_dvec(const float *dout, const Operand *out, AttnLayout lay, int D, int H, int bf16) {
    long total = (long)lay.n_outer * lay.n_inner * H * lay.len;
    float *dvec = (float *)fc_cuda_scratch(SCRATCH_ATTN, sizeof(float) * (size_t)(total ? total : 1));
    if (total > 0) {
        unsigned grid = fc_cdiv((size_t)total, DVEC_WARPS), threads = DVEC_WARPS * 32;
        const __nv_bfloat16 *o16 = (const __nv_bfloat16 *)out;
        if (bf16) attn_dvec_kernel<__nv_bfloat16><<<grid, threads>>>(dvec, dout, o16, lay, D, H, D / H, total);
        else attn_dvec_kernel<float><<<grid, threads>>>(dvec, dout, (const float *)out, lay, D, H, D / H, total);
        kernelCheck();
    }
    return dvec;
}

static void cuda_attn_bwd(real *dqkv, const real *dout, const Operand *out, const Operand *qkv_op, const real *lse,
                          AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_bwd");
    if (call.empty() || !dqkv) return;
    if (fc_attn_short_bwd(dqkv, dout, out, qkv_op, lse, lay, D, H, 0)) return;
    const float *qkv = (const float *)qkv_op;
    const float *dvec = fc_attn_dvec(dout, out, lay, D, H, 0);
    call.dispatch([&](auto dh) {
        attn_bwd_launch<decltype(dh)::value>(dqkv, dout, qkv, lse, dvec, lay, D, H, call.n_seq);
    });
}

void cuda_register_attention(Backend *be) {
    be->attn_fwd = cuda_attn_fwd;
    be->attn_bwd = cuda_attn_bwd;
    be->attn_head_dim_ok = cuda_attn_head_dim_ok;  // the tensor-core kernels dispatch on the same sizes
}
