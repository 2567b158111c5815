// attention_gemm.cu: the attn_gemm route (cuda_common.cuh) for the bf16 table's long sequences (the
// spatial attention): softmax attention as batched cuBLAS GEMMs around two row kernels, with the
// (len, len) scores of a chunk of (sequence, head) pairs held in scratch, where attention_tc.cu runs
// its flash kernels. The same math and the same saved values (lse, Dvec; attention.cu's header):
//   forward   S = scale Q K^T (fp32)  ->  row kernel: m, l, lse = m + log l, P = exp(S - m) / l (bf16)
//             O = P V (bf16 out)
//   backward  S again, dP = dO V^T (fp32)  ->  row kernel: P = exp(S - lse), dS = P (dP - Dvec) scale
//             (both bf16);  dV = P^T dO,  dK = dS^T Q,  dQ = dS K  (fp32, written into dqkv)
// Each GEMM is one cublasGemmBatchedEx over the chunk's pairs (bf16 operands, fp32 accumulation), its
// pointer arrays filled on the device. Row i of a pair's S (and dP) lies at S + i * lds floats; the
// row kernel reads the whole row into shared memory before it writes the row's bf16 result over the
// first half of the same bytes, so P (dS) is a bf16 matrix with leading dimension 2 * lds in S's (dP's)
// buffer and no second buffer is needed. The row kernels reduce in a fixed order: the same bytes on
// every run, as cuBLAS without atomics gives (backend_cuda.cu).
//
// Why: the flash kernels keep S in registers but run their products at a fraction of the tensor
// cores' rate; cuBLAS runs them near peak, and the scores' round trip through memory is what this
// route pays instead. Which is faster is measured (BENCHMARKS.md), not assumed.
//
// Scratch: SCRATCH_ATTN_DS, attention_tc.cu's dS buffer, no larger than the memory plan counts for it
// (attn_ds_scratch_bytes): the two paths never run at once.
#include "cuda_common.cuh"  // first: it includes the C headers with C linkage
#include "attention_common.cuh"
#include "backend/attn_scratch.h"

typedef __nv_bfloat16 bf16;

enum {
    ROW_THREADS = 256,                  // threads per block of the row kernels (one row a block)
    ROW_SMEM_MAX = 48 * 1024,           // the row kernels' shared memory without an opt-in
    N_PTRS = 12,                        // pointer arrays per chunk (GemmPtrs)
};

// The pointer arrays of a chunk of np pairs, each np long, in this order in scratch.
enum { P_Q, P_K, P_V, P_O, P_DO, P_DQ, P_DK, P_DV, P_S, P_DP, P_P16, P_DS16 };

// Floats per row of a pair's score matrix: rows on 32 bytes.
static int scores_ld(int len) { return (len + 7) / 8 * 8; }

// Thread p fills entry p of every array for pair pair0 + p. dout16: (H, rows, dh), fc_bf16_heads.
__global__ void gemm_attn_pointers_kernel(void **ptrs, const bf16 *qkv, bf16 *out, const bf16 *dout16, float *dqkv,
                                          float *scores, AttnLayout lay, long rows, int D, int H, int DH, int lds,
                                          long pair0, long np, int with_dp) {
    long p = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= np) return;
    long seq = (pair0 + p) / H, base = attn_seq_base(lay, seq);
    int h = (int)((pair0 + p) % H);
    long head = base * 3L * D + (long)h * DH;
    float *s = scores + p * (with_dp ? 2L : 1L) * lay.len * lds, *dp = s + (long)lay.len * lds;
    ptrs[P_Q * np + p] = (void *)(qkv + head);
    ptrs[P_K * np + p] = (void *)(qkv + head + D);
    ptrs[P_V * np + p] = (void *)(qkv + head + 2L * D);
    ptrs[P_O * np + p] = out ? (void *)(out + base * D + (long)h * DH) : NULL;
    ptrs[P_DO * np + p] = dout16 ? (void *)(dout16 + ((long)h * rows + base) * DH) : NULL;
    ptrs[P_DQ * np + p] = dqkv ? (void *)(dqkv + head) : NULL;
    ptrs[P_DK * np + p] = dqkv ? (void *)(dqkv + head + D) : NULL;
    ptrs[P_DV * np + p] = dqkv ? (void *)(dqkv + head + 2L * D) : NULL;
    ptrs[P_S * np + p] = s;
    ptrs[P_DP * np + p] = with_dp ? dp : NULL;
    ptrs[P_P16 * np + p] = s;
    ptrs[P_DS16 * np + p] = with_dp ? dp : NULL;
}

// Sum or maximum over the block (every thread calls it; all get the same bits): warps by shuffles,
// then warp 0 over the warps' results, in a fixed order.
template <int MAX>
__device__ float block_reduce(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    __syncthreads();  // red is free (an earlier call's readers are done)
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? red[lane] : (MAX ? -INFINITY : 0.f);
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = MAX ? fmaxf(v, w) : v + w;
        }
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}

// The token row (of qkv, out, lse) of query i of chunk pair p.
__device__ __forceinline__ long query_row(const AttnLayout &lay, int H, long pair0, long p, int i) {
    return attn_seq_base(lay, (pair0 + p) / H) + (long)i * lay.tok_stride;
}

// Forward: block b is row i = b % len of pair p = b / len. The row's scores (fp32) -> its lse and its
// probabilities (bf16, over the row's first half).
__global__ void __launch_bounds__(ROW_THREADS) gemm_attn_softmax_kernel(float *scores, float *lse, AttnLayout lay,
                                                                          int H, int lds, long pair0) {
    extern __shared__ __align__(16) unsigned char smem[];
    float *row = (float *)smem;  // (len)
    __shared__ float red[33];
    int len = lay.len, i = (int)(blockIdx.x % len);
    long p = blockIdx.x / len;
    float *s = scores + (p * len + i) * (long)lds;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) row[j] = s[j], m = fmaxf(m, row[j]);
    m = block_reduce<1>(m, red);
    float l = 0.f;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        float e = expf(row[j] - m);
        row[j] = e, l += e;
    }
    l = block_reduce<0>(l, red);  // its __syncthreads also orders the reads of s before the writes
    bf16 *p16 = (bf16 *)s;
    float inv = 1.f / l;
    for (int j = threadIdx.x; j < len; j += blockDim.x) p16[j] = __float2bfloat16_rn(row[j] * inv);
    if (threadIdx.x == 0) lse[query_row(lay, H, pair0, p, i) * H + (int)((pair0 + p) % H)] = m + logf(l);
}

// Backward: block b is row i of pair p; S's row and dP's row (fp32) -> P and dS (bf16, over the first
// half of each).
__global__ void __launch_bounds__(ROW_THREADS) gemm_attn_ds_kernel(float *scores, const float *lse,
                                                                     const float *dvec, AttnLayout lay, int H,
                                                                     int lds, long pair0, float scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    float *row = (float *)smem;  // (2, len): S, then dP
    int len = lay.len, i = (int)(blockIdx.x % len);
    long p = blockIdx.x / len;
    float *s = scores + (2 * p * len + i) * (long)lds, *dp = s + (long)len * lds;
    for (int j = threadIdx.x; j < len; j += blockDim.x) row[j] = s[j], row[len + j] = dp[j];
    const float L = lse[query_row(lay, H, pair0, p, i) * H + (int)((pair0 + p) % H)];
    const float Dv = dvec[(pair0 + p) * len + i];
    __syncthreads();  // every read of the row before any write over it
    bf16 *p16 = (bf16 *)s, *ds16 = (bf16 *)dp;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        float pr = expf(row[j] - L);
        p16[j] = __float2bfloat16_rn(pr);
        ds16[j] = __float2bfloat16_rn(pr * (row[len + j] - Dv) * scale);
    }
}

// C[p] (m, n, ldc) = alpha op(A[p]) op(B[p]) over the chunk's np pairs: bf16 operands, fp32
// accumulation, C fp32 or bf16 (c16), beta 0.
static void batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, void **A, int lda,
                    void **B, int ldb, void **C, int ldc, int c16, long np) {
    const float zero = 0.0f;
    cublasHandle_t hd = fc_cublas_bf16();
    cublasCheck(cublasSetPointerMode(hd, CUBLAS_POINTER_MODE_HOST));
    cublasCheck(cublasGemmBatchedEx(hd, ta, tb, m, n, k, &alpha, (const void **)A, CUDA_R_16BF, lda,
                                    (const void **)B, CUDA_R_16BF, ldb, &zero, C, c16 ? CUDA_R_16BF : CUDA_R_32F, ldc,
                                    (int)np, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// How many pairs a chunk holds: the scores of `mats` (len, lds) fp32 matrices a pair and the pointers,
// within the bytes the memory plan counts for attention's dS scratch.
static long chunk_pairs(long pairs, int len, int mats, size_t *bytes) {
    size_t budget = attn_ds_scratch_bytes(pairs, len, fc_attn_ds_cap());
    size_t per = (size_t)mats * len * scores_ld(len) * sizeof(float) + N_PTRS * sizeof(void *);
    long chunk = (long)(budget / per);
    if (chunk < 1) chunk = 1;
    if (chunk > pairs) chunk = pairs;
    *bytes = (N_PTRS * sizeof(void *) * (size_t)chunk + 255) / 256 * 256;  // the pointers, then the scores
    *bytes += (size_t)chunk * mats * len * scores_ld(len) * sizeof(float);
    return chunk;
}

// Whether the route takes this shape: sequences longer than attention_tc.cu packs, the row kernels'
// rows in shared memory without an opt-in, a head dimension on 16 bytes.
static int route_takes(const AttnLayout &lay, int DH) {
    return fc_routes.attn_gemm && lay.len > ATTN_PACK_MAX && 2 * sizeof(float) * lay.len <= ROW_SMEM_MAX &&
           DH % 8 == 0;
}

// What the forward and the backward share: the shapes, the chunking and the scratch of one call.
struct GemmAttnCall {
    AttnLayout lay;
    int D, H, DH, len, lds, ldq;
    long pairs, rows, chunk;
    void **ptrs;
    float *scores;
    // mats: (len, lds) fp32 matrices a pair (1: S; 2: S and dP).
    GemmAttnCall(AttnLayout l, int d, int h, int mats)
        : lay(l), D(d), H(h), DH(d / h), len(l.len), lds(scores_ld(l.len)), ldq((int)(l.tok_stride * 3 * d)) {
        long n_seq = (long)lay.n_outer * lay.n_inner;
        pairs = n_seq * H, rows = n_seq * len;
        size_t bytes;
        chunk = chunk_pairs(pairs, len, mats, &bytes);
        char *scratch = (char *)fc_cuda_scratch(SCRATCH_ATTN_DS, bytes);
        ptrs = (void **)scratch;
        scores = (float *)(scratch + (N_PTRS * sizeof(void *) * (size_t)chunk + 255) / 256 * 256);
    }
    // The pointer arrays of the chunk of pairs from p0; its number of pairs.
    long fill(long p0, const bf16 *qkv, bf16 *out, const bf16 *dout16, float *dqkv, int with_dp) const {
        long np = pairs - p0 < chunk ? pairs - p0 : chunk;
        gemm_attn_pointers_kernel<<<fc_cdiv(np, 128), 128>>>(ptrs, qkv, out, dout16, dqkv, scores, lay, rows, D, H, DH,
                                                             lds, p0, np, with_dp);
        kernelCheck();
        return np;
    }
};

int fc_attn_gemm_fwd(bf16 *out, float *lse, const bf16 *qkv, AttnLayout lay, int D, int H) {
    if (!route_takes(lay, D / H)) return 0;
    const GemmAttnCall a(lay, D, H, 1);
    const int len = a.len, lds = a.lds, ldq = a.ldq, ldo = (int)(lay.tok_stride * D);
    const float scale = attn_scale(a.DH);
    for (long p0 = 0; p0 < a.pairs; p0 += a.chunk) {
        long np = a.fill(p0, qkv, out, nullptr, nullptr, 0);
        void **P = a.ptrs;
        // S^T (len_k, len_q) = K (len_k, DH) Q^T: row i of S is query i's scores.
        batched(CUBLAS_OP_T, CUBLAS_OP_N, len, len, a.DH, scale, P + P_K * np, ldq, P + P_Q * np, ldq, P + P_S * np,
                lds, 0, np);
        gemm_attn_softmax_kernel<<<(unsigned)(np * len), ROW_THREADS, sizeof(float) * len>>>(a.scores, lse, lay, H,
                                                                                              lds, p0);
        kernelCheck();
        // O^T (DH, len_q) = V^T (DH, len_k) P^T (len_k, len_q).
        batched(CUBLAS_OP_N, CUBLAS_OP_N, a.DH, len, len, 1.0f, P + P_V * np, ldq, P + P_P16 * np, 2 * lds,
                P + P_O * np, ldo, 1, np);
    }
    return 1;
}

int fc_attn_gemm_bwd(float *dqkv, const float *dout, const bf16 *qkv, const float *lse, const float *dvec,
                     AttnLayout lay, int D, int H) {
    if (!route_takes(lay, D / H)) return 0;
    const GemmAttnCall a(lay, D, H, 2);
    const int len = a.len, lds = a.lds, ldq = a.ldq, DH = a.DH, ldo = (int)(lay.tok_stride * DH);
    const bf16 *dout16 = fc_bf16_heads(dout, a.rows, D, H, DH, SCRATCH_BF16_B);
    const float scale = attn_scale(DH);
    for (long p0 = 0; p0 < a.pairs; p0 += a.chunk) {
        long np = a.fill(p0, qkv, nullptr, dout16, dqkv, 1);
        void **P = a.ptrs;
        batched(CUBLAS_OP_T, CUBLAS_OP_N, len, len, DH, scale, P + P_K * np, ldq, P + P_Q * np, ldq, P + P_S * np,
                lds, 0, np);
        // dP^T (len_k, len_q) = V (len_k, DH) dO^T (DH, len_q).
        batched(CUBLAS_OP_T, CUBLAS_OP_N, len, len, DH, 1.0f, P + P_V * np, ldq, P + P_DO * np, ldo, P + P_DP * np,
                lds, 0, np);
        gemm_attn_ds_kernel<<<(unsigned)(np * len), ROW_THREADS, 2 * sizeof(float) * len>>>(a.scores, lse, dvec, lay,
                                                                                             H, lds, p0, scale);
        kernelCheck();
        // dV^T (DH, len_k) = dO^T (DH, len_q) P (len_q, len_k); dK^T = Q^T dS; dQ^T (DH, len_q) = K^T dS^T.
        int ldd = (int)(lay.tok_stride * 3 * D);
        batched(CUBLAS_OP_N, CUBLAS_OP_T, DH, len, len, 1.0f, P + P_DO * np, ldo, P + P_P16 * np, 2 * lds,
                P + P_DV * np, ldd, 0, np);
        batched(CUBLAS_OP_N, CUBLAS_OP_T, DH, len, len, 1.0f, P + P_Q * np, ldq, P + P_DS16 * np, 2 * lds,
                P + P_DK * np, ldd, 0, np);
        batched(CUBLAS_OP_N, CUBLAS_OP_N, DH, len, len, 1.0f, P + P_K * np, ldq, P + P_DS16 * np, 2 * lds,
                P + P_DQ * np, ldd, 0, np);
    }
    return 1;
}
