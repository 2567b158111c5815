// cpu_attention.c: the CPU backend's softmax attention (attn_fwd, attn_bwd; contracts in
// backend.h). One task per (sequence, head), spread by OpenMP; inside a task the head's q, k, v
// (and dout, out) are gathered into contiguous (len, dh) matrices and every product is one GEMM
// (OpenBLAS, single-threaded inside the task), with the softmax between them:
//   forward   S = scale Q K^T, P = softmax_rows(S), O = P V, lse = rowmax + log(rowsum)
//   backward  P = exp(scale Q K^T - lse), dV = P^T dO, dP = dO V^T, dS = P (dP - Dvec) scale,
//             dQ = dS K, dK = dS^T Q          (Dvec_i = dout_i . out_i, summed in double)
// A task holds two (len, len) matrices: the CPU has the memory, and the GEMMs run at its peak where
// row-by-row loops did not. Each task writes only its own head's columns, in a fixed order, so the
// bytes do not depend on the number of threads.
#include "cpu_attention.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

#include "exp_poly.h"

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
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dh, scale, w.q, dh, w.k, dh, 0.0, w.s, L);
            for (int j = 0; j < L; j++) {  // the softmax of row j, kept unnormalised; lse_j
                real *row = w.s + (size_t)j * L, mx = row[0];
                for (int k = 1; k < L; k++) mx = row[k] > mx ? row[k] : mx;
                double l = 0;
                exp_shifted(row, L, mx);
                for (int k = 0; k < L; k++) l += row[k];
                w.dvec[j] = 1.0 / l;
                lse[attn_row(&lay, o, i, j) * H + h] = (real)(mx + LOG((real)l));
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, w.v, dh, 0.0, w.a, dh);
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
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dh, scale, w.q, dh, w.k, dh, 0.0, w.s, L);
            for (int j = 0; j < L; j++) {
                real m = lse[attn_row(&lay, o, i, j) * H + h], *row = w.s + (size_t)j * L;
                exp_shifted(row, L, m);
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dh, 1.0, w.a, dh, w.v, dh, 0.0, w.p, L);
            // dV = P^T dO, into b (out is no longer needed)
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, w.a, dh, 0.0, w.b, dh);
            scatter(dqkv, w.b, 3L * D, 2L * D + (long)h * dh, &lay, o, i, dh);
            // dS = P (dP - Dvec) scale, into p
            for (int j = 0; j < L; j++) {
                const real *pr = w.s + (size_t)j * L;
                real *dp = w.p + (size_t)j * L, dv = (real)w.dvec[j];
                for (int k = 0; k < L; k++) dp[k] = pr[k] * (dp[k] - dv) * scale;
            }
            // dQ = dS K, dK = dS^T Q (into a and b: dout and dV are done)
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, w.k, dh, 0.0, w.a, dh);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, w.q, dh, 0.0, w.b, dh);
            scatter(dqkv, w.a, 3L * D, (long)h * dh, &lay, o, i, dh);
            scatter(dqkv, w.b, 3L * D, D + (long)h * dh, &lay, o, i, dh);
        }
        work_free(&w);
    }
}
