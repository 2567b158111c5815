// attention_short.cu: the attn_short route, the attention of short sequences (the temporal attention
// over a window of at most SHORT_MAX frames) with a whole sequence in registers, for both op tables
// (qkv and out in fp32 or bf16). The same math as attention.cu's header and the CPU's
// cpu_attn_fwd / cpu_attn_bwd: s_ij = scale * q_i . k_j, lse_i = m_i + log(l_i); backward
// p_ij = exp(s_ij - lse_i), Dvec_i = dout_i . out_i, dp_ij = dout_i . v_j,
// ds_ij = p_ij (dp_ij - Dvec_i) scale, dq_i = sum_j ds_ij k_j, dk_j = sum_i ds_ij q_i,
// dv_j = sum_i p_ij dout_i; dqkv is overwritten.
//
// Why a path of its own: at 7 tokens a sequence the flash kernels leave most of a tile as padding
// (attention.cu) or mask 88% of every tensor-core score tile (attention_tc.cu, 9 sequences packed to
// 64 rows), and their backward makes four passes over memory (Dvec, dout to bf16, dQ, dK/dV). The
// work itself is small: 2 * 7 * 7 * dh multiply-adds a sequence and head, against 7 * dh values of
// each of q, k, v, out and dout to read. Here a group of TPR = dh / 4 lanes owns one (sequence,
// head) pair, each lane four columns of it (one float4 or four bf16s a row); the forward reads
// q, k and v once and writes out and lse, the backward reads q, k, v, out, dout and lse once (q
// twice: again for dK, from the cache) and writes dq, dk and dv, in one kernel each. A dot product
// is the lane's four products, then an xor butterfly over the group (group_sum), which leaves the
// same bits in every lane; every sum runs in a fixed order and every output element is written by
// one thread: the same bytes on every run. All loops over tokens run to SHORT_MAX with the rows
// past len masked, so that the per-token arrays stay in registers (the indices known after
// unrolling).
//
// Registers of a lane in the backward: dout (SHORT_MAX x 4), k (SHORT_MAX x 4), the probabilities
// and then dS (SHORT_MAX x SHORT_MAX), Dvec: about 140 floats at SHORT_MAX 8.
//
// Taken where the route is on (the default; FRAMECHAIN_CUDA_ROUTES=attn_short=0 turns it off),
// len <= SHORT_MAX, and every pointer lies on the 16 bytes (fp32) or 8 bytes (bf16) of its
// four-value loads and stores; else the caller runs its flash kernels.
#include <math.h>

#include "cuda_common.cuh"  // first: it includes the C headers with C linkage
#include "attention_common.cuh"
#include "backend/attn_scratch.h"

typedef __nv_bfloat16 bf16;

#define SHORT_MAX ATTN_SHORT_MAX  // the longest sequence the route takes
#define SHORT_WARPS 4  // warps per block

// ----------------------------------------------------------------------------
// four consecutive values of a row, as floats

__device__ __forceinline__ void load4(float v[4], const float *p) {
    const float4 x = *reinterpret_cast<const float4 *>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
__device__ __forceinline__ void load4(float v[4], const bf16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const bf16 *h = reinterpret_cast<const bf16 *>(&u);
    for (int e = 0; e < 4; e++) v[e] = __bfloat162float(h[e]);
}
__device__ __forceinline__ void store4(float *p, const float v[4]) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(bf16 *p, const float v[4]) {
    uint2 u;
    bf16 *h = reinterpret_cast<bf16 *>(&u);
    for (int e = 0; e < 4; e++) h[e] = __float2bfloat16_rn(v[e]);
    *reinterpret_cast<uint2 *>(p) = u;
}
__device__ __forceinline__ float dot4(const float a[4], const float b[4]) {
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
}

// The (sequence, head) pair of this lane's group, and where its rows lie. An idle group past the
// last pair (valid false) computes on zeros from pair 0's rows and writes nothing; it still takes
// part in every shuffle, so the warp stays converged.
template <int DH>
struct ShortPair {
    static constexpr int TPR = DH / 4;      // lanes a pair
    static constexpr int PPW = 32 / TPR;    // pairs a warp
    int t, h, len;                          // t: the lane within its group: columns 4t .. 4t+3
    bool valid;
    long base, tok;
    __device__ ShortPair(const AttnLayout &lay, int H, long pairs) {
        const int lane = threadIdx.x % 32;
        const long pair = ((long)blockIdx.x * SHORT_WARPS + threadIdx.x / 32) * PPW + lane / TPR;
        valid = pair < pairs;
        const long p = valid ? pair : 0;
        t = lane % TPR, h = (int)(p % H), len = lay.len;
        base = attn_seq_base(lay, p / H), tok = lay.tok_stride;
    }
    // Row (of qkv, out, dout) of token j; token 0's where j is past the sequence.
    __device__ long row(int j) const { return base + (long)(j < len ? j : 0) * tok; }
    // Whether token j exists and belongs to a real pair: the rows loaded and stored.
    __device__ bool live(int j) const { return valid && j < len; }
};

// rows[j] = this lane's four columns of the pair's token j of src (row stride ld); zeros past the
// sequence and in an idle group.
template <int DH, typename Elem>
__device__ __forceinline__ void load_rows(float (&rows)[SHORT_MAX][4], const ShortPair<DH> &a, const Elem *src,
                                          long ld) {
#pragma unroll
    for (int j = 0; j < SHORT_MAX; j++) {
        for (int e = 0; e < 4; e++) rows[j][e] = 0.f;
        if (a.live(j)) load4(rows[j], src + a.row(j) * ld);
    }
}

// For each token r of the pair: dst's row r (stride ld) = sum_i w(r, i) rows[i], w = P[r][i], or
// P[i][r] where TRANS, summed in order of i (P is 0 past the sequence).
template <bool TRANS, int DH>
__device__ __forceinline__ void store_mix(float *dst, long ld, const float (&P)[SHORT_MAX][SHORT_MAX],
                                          const float (&rows)[SHORT_MAX][4], const ShortPair<DH> &a) {
#pragma unroll
    for (int r = 0; r < SHORT_MAX; r++) {
        if (r >= a.len) break;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < SHORT_MAX; i++)
            for (int e = 0; e < 4; e++) acc[e] += (TRANS ? P[i][r] : P[r][i]) * rows[i][e];
        if (a.valid) store4(dst + a.row(r) * ld, acc);
    }
}

// ----------------------------------------------------------------------------
// forward: out (T, D), lse (T, H), qkv (T, 3D)

template <int DH, typename Elem>
__global__ void __launch_bounds__(SHORT_WARPS * 32)
    short_attn_fwd_kernel(Elem *__restrict__ out, float *__restrict__ lse, const Elem *__restrict__ qkv,
                          AttnLayout lay, int D, int H, long pairs, float scale) {
    const ShortPair<DH> a(lay, H, pairs);
    const long ld = 3L * D;
    const Elem *q0 = qkv + (long)a.h * DH + 4 * a.t, *k0 = q0 + D, *v0 = q0 + 2L * D;
    float k[SHORT_MAX][4], v[SHORT_MAX][4];
    load_rows(k, a, k0, ld), load_rows(v, a, v0, ld);
#pragma unroll
    for (int i = 0; i < SHORT_MAX; i++) {
        if (i >= a.len) break;  // the same in every lane: the shuffles below stay uniform
        float q[4] = {0.f, 0.f, 0.f, 0.f};
        if (a.valid) load4(q, q0 + a.row(i) * ld);
        float s[SHORT_MAX], m = -INFINITY;
#pragma unroll
        for (int j = 0; j < SHORT_MAX; j++) {
            s[j] = j < a.len ? group_sum<DH / 4>(dot4(q, k[j])) * scale : -INFINITY;
            m = fmaxf(m, s[j]);
        }
        float l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < SHORT_MAX; j++) {
            const float p = expf(s[j] - m);  // 0 past the sequence
            l += p;
            for (int e = 0; e < 4; e++) acc[e] += p * v[j][e];
        }
        if (!a.valid) continue;
        const float inv = 1.f / l;  // l >= 1: the maximum contributes exp(0)
        for (int e = 0; e < 4; e++) acc[e] *= inv;
        store4(out + a.row(i) * D + (long)a.h * DH + 4 * a.t, acc);
        if (a.t == 0) lse[a.row(i) * H + a.h] = m + logf(l);
    }
}

// ----------------------------------------------------------------------------
// backward: dqkv (T, 3D) overwritten; dout (T, D) fp32; out (T, D) and qkv as the forward's

template <int DH, typename Elem>
__global__ void __launch_bounds__(SHORT_WARPS * 32)
    short_attn_bwd_kernel(float *__restrict__ dqkv, const float *__restrict__ dout, const Elem *__restrict__ out,
                          const Elem *__restrict__ qkv, const float *__restrict__ lse, AttnLayout lay, int D, int H,
                          long pairs, float scale) {
    constexpr int TPR = DH / 4;
    const ShortPair<DH> a(lay, H, pairs);
    const long ld = 3L * D, col = (long)a.h * DH + 4 * a.t;
    const Elem *q0 = qkv + col, *k0 = q0 + D, *v0 = q0 + 2L * D;
    float *dq0 = dqkv + col, *dk0 = dq0 + D, *dv0 = dq0 + 2L * D;

    // dout, and Dvec from dout and out
    float dO[SHORT_MAX][4], Dv[SHORT_MAX];
#pragma unroll
    for (int i = 0; i < SHORT_MAX; i++) {
        float o[4] = {0.f, 0.f, 0.f, 0.f};
        for (int e = 0; e < 4; e++) dO[i][e] = 0.f;
        if (a.live(i)) load4(dO[i], dout + a.row(i) * D + col), load4(o, out + a.row(i) * D + col);
        Dv[i] = i < a.len ? group_sum<TPR>(dot4(dO[i], o)) : 0.f;
    }
    // the keys, and the probabilities from q and lse
    float k[SHORT_MAX][4], P[SHORT_MAX][SHORT_MAX];
    load_rows(k, a, k0, ld);
#pragma unroll
    for (int i = 0; i < SHORT_MAX; i++) {
        float q[4] = {0.f, 0.f, 0.f, 0.f};
        if (a.live(i)) load4(q, q0 + a.row(i) * ld);
        const float L = a.live(i) ? lse[a.row(i) * H + a.h] : 0.f;
#pragma unroll
        for (int j = 0; j < SHORT_MAX; j++)
            P[i][j] = i < a.len && j < a.len ? expf(group_sum<TPR>(dot4(q, k[j])) * scale - L) : 0.f;
    }
    store_mix<true>(dv0, ld, P, dO, a);  // dV_j = sum_i p_ij dout_i
    // dS in place of P
#pragma unroll
    for (int j = 0; j < SHORT_MAX; j++) {
        if (j >= a.len) break;
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (a.valid) load4(v, v0 + a.row(j) * ld);
#pragma unroll
        for (int i = 0; i < SHORT_MAX; i++)
            if (i < a.len) P[i][j] = P[i][j] * (group_sum<TPR>(dot4(dO[i], v)) - Dv[i]) * scale;
    }
    store_mix<false>(dq0, ld, P, k, a);  // dQ_i = sum_j ds_ij k_j
    // dK_j = sum_i ds_ij q_i: q read again (from the cache) rather than held beside k and dout
    float q[SHORT_MAX][4];
    load_rows(q, a, q0, ld);
    store_mix<true>(dk0, ld, P, q, a);
}

// ----------------------------------------------------------------------------
// host side

static bool on(const void *p, size_t bytes) { return (uintptr_t)p % bytes == 0; }

static unsigned short_grid(long pairs, int dh) {
    const long per_block = (long)SHORT_WARPS * (32 / (dh / 4));
    const long blocks = (pairs + per_block - 1) / per_block;
    if (blocks > 0x7fffffffL) fc_die("attention: %ld blocks is more than one CUDA grid holds", blocks);
    return (unsigned)blocks;
}

// Whether the route takes the call: on, short enough, every pointer on its loads' bytes.
static bool short_takes(const AttnLayout &lay, size_t elem, const void *a, const void *b, const void *c,
                        const void *d) {
    const size_t v = 4 * elem;
    return fc_routes.attn_short && lay.len >= 1 && lay.len <= SHORT_MAX && on(a, v) && on(b, v) && (!c || on(c, 16)) &&
           (!d || on(d, 16));
}

template <typename Elem>
static void short_fwd(Elem *out, float *lse, const Elem *qkv, AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_fwd");
    const long pairs = call.n_seq * H;
    const float scale = attn_scale(call.dh);
    call.dispatch([&](auto dh) {
        constexpr int DH = decltype(dh)::value;
        short_attn_fwd_kernel<DH, Elem><<<short_grid(pairs, DH), SHORT_WARPS * 32>>>(out, lse, qkv, lay, D, H, pairs, scale);
        kernelCheck();
    });
}

template <typename Elem>
static void short_bwd(float *dqkv, const float *dout, const Elem *out, const Elem *qkv, const float *lse,
                      AttnLayout lay, int D, int H) {
    const AttnCall call(lay, D, H, "attn_bwd");
    const long pairs = call.n_seq * H;
    const float scale = attn_scale(call.dh);
    call.dispatch([&](auto dh) {
        constexpr int DH = decltype(dh)::value;
        short_attn_bwd_kernel<DH, Elem><<<short_grid(pairs, DH), SHORT_WARPS * 32>>>(dqkv, dout, out, qkv, lse, lay, D, H, pairs, scale);
        kernelCheck();
    });
}

int fc_attn_short_fwd(Operand *out, real *lse, const Operand *qkv, AttnLayout lay, int D, int H, int half) {
    const size_t elem = half ? sizeof(bf16) : sizeof(float);
    if (!short_takes(lay, elem, out, qkv, NULL, NULL)) return 0;
    fc_route_calls.attn_short++;
    if (half) short_fwd((bf16 *)out, lse, (const bf16 *)qkv, lay, D, H);
    else short_fwd((float *)out, lse, (const float *)qkv, lay, D, H);
    return 1;
}

int fc_attn_short_bwd(real *dqkv, const real *dout, const Operand *out, const Operand *qkv, const real *lse,
                      AttnLayout lay, int D, int H, int half) {
    const size_t elem = half ? sizeof(bf16) : sizeof(float);
    if (!short_takes(lay, elem, out, qkv, dqkv, dout)) return 0;
    fc_route_calls.attn_short++;
    if (half) short_bwd(dqkv, dout, (const bf16 *)out, (const bf16 *)qkv, lse, lay, D, H);
    else short_bwd(dqkv, dout, (const float *)out, (const float *)qkv, lse, lay, D, H);
    return 1;
}
