// cpu_attention.c: the CPU backend's softmax attention (attn_fwd, attn_bwd; contracts in
// backend.h). One task per (sequence, head), spread by OpenMP; inside a task every product of the
// head's q, k, v (and dout, out) is one GEMM (OpenBLAS, single-threaded inside the task) on the
// matrices where they lie, with the softmax between them; the few-token
// sequences of the temporal attention take a path of their own without BLAS (below, "short
// sequences"), the same bytes:
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

// The largest of row[0 .. n), in eight lanes: the same value as a scan from row[0] that takes each
// larger one (a NaN is never larger; a NaN at row[0] stays).
CPU_VECTOR_CLONES static real row_max(const real *row, int n) {
    real mx = row[0];
    int k = 0;
    if (n >= 16) {
        real m[8];
        for (int l = 0; l < 8; l++) m[l] = -INFINITY;
        for (; k + 8 <= n; k += 8)
            for (int l = 0; l < 8; l++) m[l] = row[k + l] > m[l] ? row[k + l] : m[l];
        for (int l = 0; l < 8; l++) mx = m[l] > mx ? m[l] : mx;
    }
    for (; k < n; k++) mx = row[k] > mx ? row[k] : mx;
    return mx;
}

// The softmax of the rows 0 .. L-1 of s (L values each, rows ld apart), kept unnormalised: row j
// becomes e^(row - mx[j]), mx[j] its largest value, sum[j] its values' sum in double. Each row is
// summed in order from its first value; four rows at a time, so that four sums are in flight. The
// exponentials run over all ld values of a row: the columns past L are scratch that nothing reads
// (the short path's pads; ld = L on the long path), and a whole row of vectors is faster than the
// scalar tail a row of 7 values would be (the same bytes: a value's arithmetic is the same in a
// vector as alone).
static void softmax_rows(real *s, long ld, int L, real *mx, double *sum) {
    for (int j = 0; j < L; j++) {
        real *row = s + (size_t)j * ld;
        mx[j] = row_max(row, L);
        exp_shifted(row, (int)ld, mx[j]);
    }
    int j = 0;
    for (; j + 4 <= L; j += 4) {
        const real *r0 = s + (size_t)j * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        double l0 = 0, l1 = 0, l2 = 0, l3 = 0;
        for (int k = 0; k < L; k++) l0 += r0[k], l1 += r1[k], l2 += r2[k], l3 += r3[k];
        sum[j] = l0, sum[j + 1] = l1, sum[j + 2] = l2, sum[j + 3] = l3;
    }
    for (; j < L; j++) {
        const real *row = s + (size_t)j * ld;
        double l = 0;
        for (int k = 0; k < L; k++) l += row[k];
        sum[j] = l;
    }
}

// dvec[j] = a_j . b_j (rows of n values, ld apart) in double, each summed in order; four rows at a
// time, so that four sums are in flight.
static void row_dots(double *dvec, const real *a, const real *b, long ld, int L, int n) {
    int j = 0;
    for (; j + 4 <= L; j += 4) {
        const real *a0 = a + (size_t)j * ld, *b0 = b + (size_t)j * ld;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int c = 0; c < n; c++) {
            s0 += (double)a0[c] * b0[c], s1 += (double)a0[ld + c] * b0[ld + c];
            s2 += (double)a0[2 * ld + c] * b0[2 * ld + c], s3 += (double)a0[3 * ld + c] * b0[3 * ld + c];
        }
        dvec[j] = s0, dvec[j + 1] = s1, dvec[j + 2] = s2, dvec[j + 3] = s3;
    }
    for (; j < L; j++) {
        double s = 0;
        for (int c = 0; c < n; c++) s += (double)a[(size_t)j * ld + c] * b[(size_t)j * ld + c];
        dvec[j] = s;
    }
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

// Task `task`'s head h and sequence (o, i): the tasks run over the heads of each sequence in turn.
static inline void task_head(const AttnLayout *lay, int H, long task, int *h, int *o, int *i) {
    int seq = (int)(task / H);
    *h = (int)(task % H), *o = seq / lay->n_inner, *i = seq % lay->n_inner;
}

// dst (len, dh; rows ldd apart) = the columns col .. col+dh-1 of the sequence's rows of src (rows of
// ld values).
static void gather(real *dst, int ldd, const real *src, long ld, long col, const AttnLayout *lay, int o, int i,
                   int dh) {
    for (int k = 0; k < lay->len; k++)
        memcpy(dst + (size_t)k * ldd, src + attn_row(lay, o, i, k) * ld + col, sizeof(real) * dh);
}

// The columns col .. of the sequence's rows of dst (rows of ld values) = src (len, dh; rows lds apart).
static void scatter(real *dst, const real *src, int lds, long ld, long col, const AttnLayout *lay, int o, int i,
                    int dh) {
    for (int k = 0; k < lay->len; k++)
        memcpy(dst + attn_row(lay, o, i, k) * ld + col, src + (size_t)k * lds, sizeof(real) * dh);
}

// Per-thread buffers of one task of the long path (its q, k, v, dout, out and gradients stay where
// they lie): the forward's unnormalised output and two (len, len).
typedef struct {
    real *a;       // (len, dh): the forward's P V before the rows' 1 / sum
    real *s, *p;   // (len, len)
    real *mx;      // (len): the rows' largest scores
    double *dvec;  // (len)
} AttnWork;

// The forward's softmax of the scores s (rows ld apart), kept unnormalised, with head h's log-sum-exps
// into lse and each row's 1 / sum into inv.
static void softmax_lse(real *s, long ld, const AttnLayout *lay, int o, int i, int H, int h, real *mx, double *inv,
                        real *lse) {
    softmax_rows(s, ld, lay->len, mx, inv);
    for (int j = 0; j < lay->len; j++) {
        lse[attn_row(lay, o, i, j) * H + h] = (real)(mx[j] + LOG((real)inv[j]));
        inv[j] = 1.0 / inv[j];
    }
}

// Head h's columns of the sequence's output rows = the rows of a (rows lda apart) times inv.
static void write_out(real *out, const real *a, int lda, const double *inv, const AttnLayout *lay, int o, int i, int D,
                      int h, int dh) {
    for (int j = 0; j < lay->len; j++) {
        real *dst = out + attn_row(lay, o, i, j) * D + (long)h * dh;
        for (int c = 0; c < dh; c++) dst[c] = (real)(a[(size_t)j * lda + c] * inv[j]);
    }
}

// The backward's P = exp(scores - lse) in place, from the forward's log-sum-exps of head h (over
// all ld values of a row, as softmax_rows).
static void probs_from_lse(real *s, long ld, const AttnLayout *lay, int o, int i, int H, int h, const real *lse) {
    for (int j = 0; j < lay->len; j++) exp_shifted(s + (size_t)j * ld, (int)ld, lse[attn_row(lay, o, i, j) * H + h]);
}

// dS = P (dP - Dvec) scale, into dp (P and dP rows ld apart, L of each).
static void scores_grad(real *dp, const real *P, long ld, int L, const double *dvec, real scale) {
    for (int j = 0; j < L; j++) {
        const real *pr = P + (size_t)j * ld;
        real *row = dp + (size_t)j * ld, dv = (real)dvec[j];
        for (int k = 0; k < L; k++) row[k] = pr[k] * (row[k] - dv) * scale;
    }
}

// The head h's q, k and v of sequence (o, i) into q, k, v (rows ldd apart).
static void gather_qkv(real *q, real *k, real *v, int ldd, const real *qkv, const AttnLayout *lay, int o, int i, int h,
                       int D, int dh) {
    for (int part = 0; part < 3; part++)
        gather(part == 0 ? q : part == 1 ? k : v, ldd, qkv, 3L * D, (long)part * D + (long)h * dh, lay, o, i, dh);
}

static AttnWork work_alloc(int len, int dh) {
    size_t m = (size_t)len * dh, ss = (size_t)len * len;
    real *mem = fc_malloc(sizeof(real) * (m + 2 * ss + len));
    AttnWork w = {mem, mem + m, mem + m + ss, mem + m + 2 * ss, fc_malloc(sizeof(double) * len)};
    return w;
}
static void work_free(AttnWork *w) { free(w->a), free(w->dvec); }

// The long path's products read q, k, v, dout and out where they lie and write dq, dk, dv there: a
// sequence's rows are tok_stride rows apart, so a head's (len, dh) matrix is its columns at a leading
// dimension of tok_stride rows. OpenBLAS packs its operands whatever their leading dimension, and
// its arithmetic does not depend on it: the same bytes as gathering them into contiguous copies,
// without the copies.
static inline long head_at(const AttnLayout *lay, int o, int i, long ld, int h, int dh) {
    return attn_row(lay, o, i, 0) * ld + (long)h * dh;
}

void cpu_attn_fwd_long(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H) {
    real *out = out_op;
    const real *qkv = qkv_op;
    int dh = D / H, L = lay.len;
    int lq = (int)(lay.tok_stride * 3 * D);  // the leading dimension of a head's q, k and v
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        AttnWork w = work_alloc(L, dh);
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h, o, i;
            task_head(&lay, H, task, &h, &o, &i);
            const real *q = qkv + head_at(&lay, o, i, 3L * D, h, dh), *k = q + D, *v = q + 2 * D;
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, scale, q, lq, k, lq, w.s, L);
            softmax_lse(w.s, L, &lay, o, i, H, h, w.mx, w.dvec, lse);
            attn_gemm(CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, v, lq, w.a, dh);
            write_out(out, w.a, dh, w.dvec, &lay, o, i, D, h, dh);
        }
        work_free(&w);
    }
}

void cpu_attn_bwd_long(real *dqkv, const real *dout, const Operand *out_op, const Operand *qkv_op, const real *lse,
                       AttnLayout lay, int D, int H) {
    const real *out = out_op, *qkv = qkv_op;
    int dh = D / H, L = lay.len;
    int lq = (int)(lay.tok_stride * 3 * D), lo = (int)(lay.tok_stride * D);  // q, k, v and their grads; dout, out
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        AttnWork w = work_alloc(L, dh);
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h, o, i;
            task_head(&lay, H, task, &h, &o, &i);
            long at = head_at(&lay, o, i, 3L * D, h, dh), ato = head_at(&lay, o, i, D, h, dh);
            const real *q = qkv + at, *k = q + D, *v = q + 2 * D, *dO = dout + ato;
            real *dq = dqkv + at, *dk = dq + D, *dv = dq + 2 * D;
            row_dots(w.dvec, dO, out + ato, lo, L, dh);
            // P = exp(scale Q K^T - lse) into s; dP = dO V^T into p
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, scale, q, lq, k, lq, w.s, L);
            probs_from_lse(w.s, L, &lay, o, i, H, h, lse);
            attn_gemm(CblasNoTrans, CblasTrans, L, L, dh, 1.0, dO, lo, v, lq, w.p, L);
            // dV = P^T dO
            attn_gemm(CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.s, L, dO, lo, dv, lq);
            // dS = P (dP - Dvec) scale, into p; dQ = dS K, dK = dS^T Q
            scores_grad(w.p, w.s, L, L, w.dvec, scale);
            attn_gemm(CblasNoTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, k, lq, dq, lq);
            attn_gemm(CblasTrans, CblasNoTrans, L, dh, L, 1.0, w.p, L, q, lq, dk, lq);
        }
        work_free(&w);
    }
}

// ----------------------------------------------------------------------------
// short sequences: register tiles instead of small_gemm's loops
//
// Where every product of a task is under SMALL_GEMM_MACS (the temporal attention's sequences of a
// few frames), the long path's cost was not its arithmetic but small_gemm making one element at a
// time. Here the rows are read where they lie when a head's columns fill whole tiles, else gathered
// into buffers padded to whole tiles (the pads zero; short_inputs), the products
// of two rows (the scores, dP) are dot_rows as small_gemm makes them, and the others (P V, P^T dO,
// dS K, dS^T Q) are tiles of registers (tile_mm), each element summed over k in order from zero, as
// small_gemm sums it (neither clone of either fuses a multiply and an add): the same bytes as the
// long path, which tests/backend/test_attention.c checks.

#define TILE_M 4
#define TILE_N (64 / (int)sizeof(real))  // two vectors of 32 bytes: 16 floats

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// C (M, N) = A (M, K) B (K, N). N is a multiple of TILE_N; rows up to M rounded up to TILE_M are
// read from A and written to C (the pad rows of A are zero, so are those of C). A tile is TILE_M
// rows of two GCC vectors (32 bytes each), its eight sums named so that they stay in registers.
typedef real vreal __attribute__((vector_size(32)));

#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v))

CPU_VECTOR_CLONES static void tile_mm(real *C, int ldc, const real *A, int lda, const real *B, int ldb, int M, int N,
                                      int K) {
    const int half = TILE_N / 2;
    for (int i0 = 0; i0 < M; i0 += TILE_M)
        for (int j0 = 0; j0 < N; j0 += TILE_N) {
            vreal c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
            const real *a = A + (size_t)i0 * lda, *b = B + j0;
            for (int k = 0; k < K; k++, b += ldb) {
                vreal b0, b1;
                VLOAD(b0, b), VLOAD(b1, b + half);
                real a0 = a[k], a1 = a[lda + k], a2 = a[2L * lda + k], a3 = a[3L * lda + k];
                c00 += a0 * b0, c01 += a0 * b1, c10 += a1 * b0, c11 += a1 * b1;
                c20 += a2 * b0, c21 += a2 * b1, c30 += a3 * b0, c31 += a3 * b1;
            }
            real *c = C + (size_t)i0 * ldc + j0;
            memcpy(c, &c00, sizeof c00), memcpy(c + half, &c01, sizeof c01), c += ldc;
            memcpy(c, &c10, sizeof c10), memcpy(c + half, &c11, sizeof c11), c += ldc;
            memcpy(c, &c20, sizeof c20), memcpy(c + half, &c21, sizeof c21), c += ldc;
            memcpy(c, &c30, sizeof c30), memcpy(c + half, &c31, sizeof c31);
        }
}

// dst (cols, rows) = src (rows, cols) transposed.
static void transpose(real *dst, int ldd, const real *src, int lds, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

// Per-thread buffers of one task, padded: Lp = len rounded up to TILE_N, dhp = dh rounded up to TILE_N.
typedef struct {
    int L, Lp, dh, dhp;
    real *q, *k, *v, *a, *b;  // (Lp, dhp): q, k, v; dout and out, or results
    real *s, *p, *t;          // (Lp, Lp): scores or P, dP or dS, a transpose
    real *mx;                 // (len): the rows' largest scores
    double *dvec;             // (len)
} ShortWork;

static ShortWork short_alloc(int L, int dh) {
    ShortWork w = {L, round_up(L, TILE_N), dh, round_up(dh, TILE_N)};
    size_t m = (size_t)w.Lp * w.dhp, ss = (size_t)w.Lp * w.Lp;
    // The pads start zero; the pad rows, which tile_mm reads, stay zero (the scores' pad columns are
    // the softmax's scratch, which nothing reads).
    real *mem = fc_calloc(5 * m + 3 * ss + (size_t)L, sizeof(real));
    w.q = mem, w.k = mem + m, w.v = mem + 2 * m, w.a = mem + 3 * m, w.b = mem + 4 * m;
    w.s = mem + 5 * m, w.p = w.s + ss, w.t = w.p + ss, w.mx = w.t + ss;
    w.dvec = fc_malloc(sizeof(double) * L);
    return w;
}
static void short_free(ShortWork *w) { free(w->q), free(w->dvec); }

// C (L, Lp) = alpha A B^T for A, B (L, dh; rows lda and ldb apart): each element alpha
// dot_rows(a_i, b_j), as small_gemm makes it (the same bytes as the products of the long path at
// these sizes).
static void short_dots(real *C, int ldc, const real *A, long lda, const real *B, long ldb, const ShortWork *w,
                       real alpha) {
    for (int i = 0; i < w->L; i++)
        for (int j = 0; j < w->L; j++)
            C[(size_t)i * ldc + j] = alpha * dot_rows(A + (size_t)i * lda, B + (size_t)j * ldb, w->dh);
}

// A task's inputs: where a head's columns fill whole tiles (dh a multiple of TILE_N, as at every
// shipped width), the products read q, k, v, dout and out where they lie, rows a sequence's row
// stride apart; else padded copies (gathers). The same values either way, so the same bytes.
typedef struct {
    const real *q, *k, *v, *dout, *out;
    long ld, ldo;  // q, k, v's rows; dout's and out's
} ShortIn;

static ShortIn short_inputs(ShortWork *w, const real *qkv, const real *dout, const real *out, const AttnLayout *lay,
                            int o, int i, int h, int D) {
    int dh = w->dh;
    if (dh == w->dhp) {
        const real *q = qkv + head_at(lay, o, i, 3L * D, h, dh);
        long ato = head_at(lay, o, i, D, h, dh), step = lay->tok_stride;
        return (ShortIn){q, q + D, q + 2 * D, dout ? dout + ato : NULL, out ? out + ato : NULL, step * 3 * D, step * D};
    }
    gather_qkv(w->q, w->k, w->v, w->dhp, qkv, lay, o, i, h, D, dh);
    if (dout) gather(w->a, w->dhp, dout, D, (long)h * dh, lay, o, i, dh);
    if (out) gather(w->b, w->dhp, out, D, (long)h * dh, lay, o, i, dh);
    return (ShortIn){w->q, w->k, w->v, w->a, w->b, w->dhp, w->dhp};
}

static void attn_fwd_short(real *out, real *lse, const real *qkv, AttnLayout lay, int D, int H) {
    int dh = D / H, L = lay.len;
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        ShortWork w = short_alloc(L, dh);
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h, o, i;
            task_head(&lay, H, task, &h, &o, &i);
            ShortIn in = short_inputs(&w, qkv, NULL, NULL, &lay, o, i, h, D);
            short_dots(w.s, w.Lp, in.q, in.ld, in.k, in.ld, &w, scale);
            softmax_lse(w.s, w.Lp, &lay, o, i, H, h, w.mx, w.dvec, lse);
            tile_mm(w.a, w.dhp, w.s, w.Lp, in.v, (int)in.ld, L, w.dhp, L);
            write_out(out, w.a, w.dhp, w.dvec, &lay, o, i, D, h, dh);
        }
        short_free(&w);
    }
}

static void attn_bwd_short(real *dqkv, const real *dout, const real *out, const real *qkv, const real *lse,
                           AttnLayout lay, int D, int H) {
    int dh = D / H, L = lay.len;
    long tasks = (long)lay.n_outer * lay.n_inner * H;
    real scale = (real)(1.0 / sqrt((double)dh));
#pragma omp parallel
    {
        ShortWork w = short_alloc(L, dh);
        int Lp = w.Lp, dhp = w.dhp;
#pragma omp for schedule(static)
        for (long task = 0; task < tasks; task++) {
            int h, o, i;
            task_head(&lay, H, task, &h, &o, &i);
            ShortIn in = short_inputs(&w, qkv, dout, out, &lay, o, i, h, D);
            int ld = (int)in.ld, ldo = (int)in.ldo;
            row_dots(w.dvec, in.dout, in.out, ldo, L, dh);
            // P = exp(scale Q K^T - lse) into s (the forward's scores, the same arithmetic)
            short_dots(w.s, Lp, in.q, ld, in.k, ld, &w, scale);
            probs_from_lse(w.s, Lp, &lay, o, i, H, h, lse);
            // dP = dO V^T into p
            short_dots(w.p, Lp, in.dout, ldo, in.v, ld, &w, 1.0);
            // dV = P^T dO, into b (out is no longer needed)
            transpose(w.t, Lp, w.s, Lp, L, L);
            tile_mm(w.b, dhp, w.t, Lp, in.dout, ldo, L, dhp, L);
            scatter(dqkv, w.b, dhp, 3L * D, 2L * D + (long)h * dh, &lay, o, i, dh);
            // dS = P (dP - Dvec) scale, into p
            scores_grad(w.p, w.s, Lp, L, w.dvec, scale);
            // dQ = dS K, dK = dS^T Q (into a and b: dout and dV are done)
            tile_mm(w.a, dhp, w.p, Lp, in.k, ld, L, dhp, L);
            transpose(w.t, Lp, w.p, Lp, L, L);
            tile_mm(w.b, dhp, w.t, Lp, in.q, ld, L, dhp, L);
            scatter(dqkv, w.a, dhp, 3L * D, (long)h * dh, &lay, o, i, dh);
            scatter(dqkv, w.b, dhp, 3L * D, D + (long)h * dh, &lay, o, i, dh);
        }
        short_free(&w);
    }
}

// The short path where the long one would make every product with small_gemm.
static int attn_short(AttnLayout lay, int D, int H) { return (long)lay.len * lay.len * (D / H) <= SMALL_GEMM_MACS; }

void cpu_attn_fwd(Operand *out, real *lse, const Operand *qkv, AttnLayout lay, int D, int H) {
    if (attn_short(lay, D, H)) attn_fwd_short(out, lse, qkv, lay, D, H);
    else cpu_attn_fwd_long(out, lse, qkv, lay, D, H);
}

void cpu_attn_bwd(real *dqkv, const real *dout, const Operand *out, const Operand *qkv, const real *lse, AttnLayout lay,
                  int D, int H) {
    if (attn_short(lay, D, H)) attn_bwd_short(dqkv, dout, out, qkv, lse, lay, D, H);
    else cpu_attn_bwd_long(dqkv, dout, out, qkv, lse, lay, D, H);
}
