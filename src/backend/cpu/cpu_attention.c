// cpu_attention.c: the CPU backend's softmax attention (attn_fwd, attn_bwd; contracts in
// backend.h). One task per (sequence, head), spread by OpenMP; inside a task the head's q, k, v
// (and dout, out) are gathered into contiguous (len, dh) matrices and every product is one GEMM
// (OpenBLAS, single-threaded inside the task; plain loops for the few-token sequences of the
// temporal attention), with the softmax between them:
//   forward   S = scale Q K^T, P = softmax_rows(S), O = P V, lse = rowmax + log(rowsum)
//   backward  P = exp(scale Q K^T - lse), dV = P^T dO, dP = dO V^T, dS = P (dP - Dvec) scale,
//             dQ = dS K, dK = dS^T Q          (Dvec_i = dout_i . out_i, summed in double)
// A task holds two (len, len) matrices: the CPU has the memory, and the GEMMs run at its peak where
// row-by-row loops did not. Each task writes only its own head's columns, in a fixed order, so the
// bytes do not depend on the number of threads.
#include "backend/cpu/cpu_attention.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/exp_poly.h"

#ifdef FC_DOUBLE
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#else
#define GEMM cblas_sgemm
#define EXP exp_poly  // vectorised (exp_poly.h)
#define LOG logf
#endif

// row[k] = e^(row[k] - m) for k < n: the softmax's exponentials, a vectorised loop.
CPU_VECTOR_CLONES static void exp_shifted(real *row, int n, real m) {
    for (int k = 0; k < n; k++) row[k] = EXP(row[k] - m);
}

// A product under this many multiply-adds (the temporal attention's sequences of a few tokens) runs
// as plain loops: OpenBLAS's cost per call (its dispatch and packing) was most of its time.
#define SMALL_GEMM_MACS 16384

// The rows a and b (n) dotted, in eight fixed lanes: a vectorised loop, the same order every time.
static inline real dot_rows(const real *a, const real *b, int n) {
    real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[k + l] * b[k + l];
    real sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < n; k++) sum += a[k] * b[k];
    return sum;
}

// attn_gemm's plain loops. C[i][j] = alpha a_i . b_j (tb: B transposed, the rows of A and B
// dotted), or C[i] = alpha sum over k of op(A)[i][k] B[k] (B's rows combined, k in order).
CPU_VECTOR_CLONES static void small_gemm(int ta, int tb, int M, int N, int K, real alpha, const real *A, int lda,
                                         const real *B, int ldb, real *C, int ldc) {
    for (int i = 0; i < M; i++) {
        real *c = C + (size_t)i * ldc;
        if (tb) {
            for (int j = 0; j < N; j++) c[j] = alpha * dot_rows(A + (size_t)i * lda, B + (size_t)j * ldb, K);
            continue;
        }
        for (int j = 0; j < N; j++) c[j] = 0;
        for (int k = 0; k < K; k++) {
            real a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
            const real *b = B + (size_t)k * ldb;
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
        for (int j = 0; j < N; j++) c[j] *= alpha;
    }
}

// C (M, N) = alpha op(A) op(B), row-major (beta 0): OpenBLAS, or small_gemm below SMALL_GEMM_MACS.
static void attn_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, real alpha, const real *A,
                      int lda, const real *B, int ldb, real *C, int ldc) {
    if ((long)M * N * K > SMALL_GEMM_MACS) {
        GEMM(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0, C, ldc);
        return;
    }
    if (ta == CblasTrans && tb == CblasTrans) fc_die("attn_gemm: both operands transposed");  // not used
    small_gemm(ta == CblasTrans, tb == CblasTrans, M, N, K, alpha, A, lda, B, ldb, C, ldc);
}

static inline long attn_row(const AttnLayout *lay, int o, int i, int k) {
    return o * lay->outer_stride + i * lay->inner_stride + k * lay->tok_stride;
}

// dst (len, dh) = the columns col .. col+dh-1 of the sequence's rows of src (rows of ld values).
static void gather(real *dst, const real *src, long ld, long col, const AttnLayout *lay, int o, int i, int dh) {
    for (int k = 0; k < lay->len; k++) memcpy(dst + (size_t)k * dh, src + attn_row(lay, o, i, k) * ld + col, sizeof(real) * dh);
}

// The columns col .. of the sequence's rows of dst (rows of ld values) = src (len, dh).
static void scatter(real *dst, const real *src, long ld, long col, const AttnLayout *lay, int o, int i, int dh) {
    for (int k = 0; k < lay->len; k++) memcpy(dst + attn_row(lay, o, i, k) * ld + col, src + (size_t)k * dh, sizeof(real) * dh);
}

// Per-thread buffers of one task: five (len, dh) matrices and two (len, len).
typedef struct {
    real *q, *k, *v, *a, *b;  // (len, dh): q, k, v; dout and out, or results
    real *s, *p;              // (len, len)
    double *dvec;             // (len)
} AttnWork;

// The head h's q, k and v of sequence (o, i) into w.q, w.k, w.v.
static void gather_qkv(AttnWork *w, const real *qkv, const AttnLayout *lay, int o, int i, int h, int D, int dh) {
    for (int part = 0; part < 3; part++)
        gather(part == 0 ? w->q : part == 1 ? w->k : w->v, qkv, 3L * D, (long)part * D + (long)h * dh, lay, o, i, dh);
}

static AttnWork work_alloc(int len, int dh) {
    size_t m = (size_t)len * dh, ss = (size_t)len * len;
    real *mem = fc_malloc(sizeof(real) * (5 * m + 2 * ss));
    AttnWork w = {mem, mem + m, mem + 2 * m, mem + 3 * m, mem + 4 * m, mem + 5 * m, mem + 5 * m + ss,
                  fc_malloc(sizeof(double) * len)};
    return w;
}
static void work_free(AttnWork *w) { free(w->q), free(w->dvec); }

void cpu_attn_fwd(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H) {
    real *out = out_op;
    const real *qkv = qkv_op;
    int dh = D / H, L = lay.len;
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        AttnWork w = work_alloc(L, dh);
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h = (int)(task % H), seq = (int)(task / H);
            int o = seq / lay.n_inner, i = seq % lay.n_inner;
            gather_qkv(&w, qkv, &lay, o, i, h, D, dh);
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, scale, w.q, dh, w.k, dh, w.s, L);
            for (int j = 0; j < L; j++) {  // the softmax of row j, kept unnormalised; lse_j
                real *row = w.s + (size_t)j * L, mx = row[0];
                for (int k = 1; k < L; k++) mx = row[k] > mx ? row[k] : mx;
                double l = 0;
                exp_shifted(row, L, mx);
                for (int k = 0; k < L; k++) l += row[k];
                w.dvec[j] = 1.0 / l;
                lse[attn_row(&lay, o, i, j) * H + h] = (real)(mx + LOG((real)l));
            }
            attn_gemm(CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, w.v, dh, w.a, dh);
            for (int j = 0; j < L; j++) {
                real *dst = out + attn_row(&lay, o, i, j) * D + (long)h * dh;
                for (int c = 0; c < dh; c++) dst[c] = (real)(w.a[(size_t)j * dh + c] * w.dvec[j]);
            }
        }
        work_free(&w);
    }
}

void cpu_attn_bwd(real *dqkv, const real *dout, const Operand *out_op, const Operand *qkv_op, const real *lse,
                  AttnLayout lay, int D, int H) {
    const real *out = out_op, *qkv = qkv_op;
    int dh = D / H, L = lay.len;
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        AttnWork w = work_alloc(L, dh);
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h = (int)(task % H), seq = (int)(task / H);
            int o = seq / lay.n_inner, i = seq % lay.n_inner;
            gather_qkv(&w, qkv, &lay, o, i, h, D, dh);
            gather(w.a, dout, D, (long)h * dh, &lay, o, i, dh);
            gather(w.b, out, D, (long)h * dh, &lay, o, i, dh);
            for (int j = 0; j < L; j++) {
                double s = 0;
                for (int c = 0; c < dh; c++) s += (double)w.a[(size_t)j * dh + c] * w.b[(size_t)j * dh + c];
                w.dvec[j] = s;
            }
            // P = exp(scale Q K^T - lse) into s; dP = dO V^T into p
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, scale, w.q, dh, w.k, dh, w.s, L);
            for (int j = 0; j < L; j++) {
                real m = lse[attn_row(&lay, o, i, j) * H + h], *row = w.s + (size_t)j * L;
                exp_shifted(row, L, m);
            }
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, 1.0, w.a, dh, w.v, dh, w.p, L);
            // dV = P^T dO, into b (out is no longer needed)
            attn_gemm(CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, w.a, dh, w.b, dh);
            scatter(dqkv, w.b, 3L * D, 2L * D + (long)h * dh, &lay, o, i, dh);
            // dS = P (dP - Dvec) scale, into p
            for (int j = 0; j < L; j++) {
                const real *pr = w.s + (size_t)j * L;
                real *dp = w.p + (size_t)j * L, dv = (real)w.dvec[j];
                for (int k = 0; k < L; k++) dp[k] = pr[k] * (dp[k] - dv) * scale;
            }
            // dQ = dS K, dK = dS^T Q (into a and b: dout and dV are done)
            attn_gemm(CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, w.k, dh, w.a, dh);
            attn_gemm(CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, w.q, dh, w.b, dh);
            scatter(dqkv, w.a, 3L * D, (long)h * dh, &lay, o, i, dh);
            scatter(dqkv, w.b, 3L * D, D + (long)h * dh, &lay, o, i, dh);
        }
        work_free(&w);
    }
}
