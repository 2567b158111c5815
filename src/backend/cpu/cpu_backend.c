// cpu_backend.c: the reference backend. fp32, OpenMP across independent outputs, GEMMs through
// CBLAS (OpenBLAS). Every other backend is tested against this file. Reductions are never split
// across threads, so the results are the same bytes for any thread count.
#include <math.h>
#include <string.h>
#include <sys/resource.h>

#include <cblas.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_optim.h"
#include "backend/cpu/exp_poly.h"
#include "base/philox.h"

#ifdef FC_DOUBLE
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

#define LN_EPS 1e-6
#define RMS_EPS 1e-6

// ----------------------------------------------------------------------------
// memory

static void *cpu_alloc(size_t bytes) { return fc_calloc(1, bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_sync(void) {}
// The CPU's operands are `real`s: a plain copy.
static void cpu_operand_upload(Operand *dst, const real *src, size_t n) { memmove(dst, src, sizeof(real) * n); }
static void cpu_operand_download(real *dst, const Operand *src, size_t n) { memmove(dst, src, sizeof(real) * n); }
// The CPU backend's memory is the process's: its peak resident set.
static size_t cpu_memory_peak(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? 0 : (size_t)ru.ru_maxrss * 1024;
}

static void cpu_randn(real *out, size_t n, real mean, real std, uint64_t seed, uint32_t step, uint32_t stream,
                      uint64_t offset) {
    philox_fill_normal(out, n, mean, std, seed, step, stream, offset);
}

// ----------------------------------------------------------------------------
// linear. OpenBLAS runs single-threaded (common.c); the GEMMs are cut into blocks by their shape,
// which OpenMP spreads over the threads. The blocks do not depend on the thread count, so neither
// do the bytes of the result (OpenBLAS's own threading would change them). The cut itself does
// change roundings (OpenBLAS's kernels sum by the block's shape): changing it moves a trained
// model's figures by hundredths of a dB (docs/quality.md).

#define GEMM_BLOCK 128

// How a (rows, cols) output is cut: into an even number of equal blocks of rows (at most
// GEMM_BLOCK, a multiple of 8), so that two or four threads share them evenly; an output of one
// block (a few rows: the modulation's linears) is cut into two halves of its columns instead. The
// cut depends on the shape alone, never on the thread count.
typedef struct {
    int rows_per, row_blocks, col_parts, tasks;
} GemmTasks;

static GemmTasks gemm_tasks(int rows, int cols) {
    int nb = (rows + GEMM_BLOCK - 1) / GEMM_BLOCK;
    if (nb > 1 && nb % 2) nb++;
    int per = nb > 1 ? ((rows + nb - 1) / nb + 7) / 8 * 8 : rows;
    GemmTasks t = {per > 0 ? per : 1, 0, 1, 0};
    t.row_blocks = (rows + t.rows_per - 1) / t.rows_per;
    if (t.row_blocks == 1 && cols >= 32) t.col_parts = 2;
    t.tasks = t.row_blocks * t.col_parts;
    return t;
}

// Task k's rows [*r0, *r0 + *nr) and columns [*c0, *c0 + *nc) (column halves at a multiple of 16).
static void gemm_task(const GemmTasks *t, int k, int rows, int cols, int *r0, int *nr, int *c0, int *nc) {
    int blk = k / t->col_parts, part = k % t->col_parts, half = (cols / 2 + 15) / 16 * 16;
    *r0 = blk * t->rows_per, *nr = rows - *r0 < t->rows_per ? rows - *r0 : t->rows_per;
    *c0 = t->col_parts == 1 ? 0 : part * half;
    *nc = t->col_parts == 1 ? cols : part ? cols - half : half;
}

// GELU over a block of a GEMM's output (defined with the activations below): the MLP's linears
// apply it to each task's block as soon as the block is made, while it is in the cache.
static void gelu_fwd_block(real *y, const real *pre, int rows, int cols, long ld);
static void gelu_bwd_block(real *d, const real *pre, int rows, int cols, long ld);

// y (M, N) = x (M, K) @ w^T + b; gelu: also gelu = GELU(y), block by block.
static void linear_fwd_gelu(real *y, real *gelu, const real *x, const real *w, const real *b, int M, int K, int N) {
    GemmTasks t = gemm_tasks(M, N);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < t.tasks; k++) {
        int m0, rows, n0, cols;
        gemm_task(&t, k, M, N, &m0, &rows, &n0, &cols);
        if (b)
            for (int m = m0; m < m0 + rows; m++) memcpy(y + (size_t)m * N + n0, b + n0, sizeof(real) * cols);
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, K, 1.0, x + (size_t)m0 * K, K, w + (size_t)n0 * K, K,
             b ? 1.0 : 0.0, y + (size_t)m0 * N + n0, N);
        if (gelu) gelu_fwd_block(gelu + (size_t)m0 * N + n0, y + (size_t)m0 * N + n0, rows, cols, N);
    }
}

static void cpu_linear_fwd(real *y, const Operand *x_op, const real *w, const real *b, int M, int K, int N) {
    linear_fwd_gelu(y, NULL, x_op, w, b, M, K, N);
}

// A linear's backward as one parallel region, its tasks independent of each other (none writes what
// another reads):
//   dx (M, K) = or += dy (M, N) @ w (N, K), by blocks of rows (N = 0: BLAS scales by beta); with
//       gelu_pre, then dx *= GELU'(gelu_pre), block by block;
//   dw (N, K) = or += dy^T (N, M) @ x (M, K), by blocks of dw's longer side;
//   db (N) = or += the columns of dy summed, by blocks of 64 columns, each over the rows in order.
// One region instead of three: at a small width the bias's one or two blocks and the weight's few
// kept one thread busy while the other waited. Tasks are taken as threads come free; each task's
// arithmetic is the same whichever thread runs it, so the bytes do not depend on the schedule.
typedef struct {
    real *dx, *dw, *db;
    const real *dy, *x, *w, *gelu_pre;
    GradMode dx_mode, pmode;
    int M, K, N, by_rows;
    GemmTasks tdx, tdw;
} LinearBwd;

static void linear_bwd_dx_task(const LinearBwd *a, int k) {
    int m0, rows, k0, cols, K = a->K, N = a->N;
    gemm_task(&a->tdx, k, a->M, K, &m0, &rows, &k0, &cols);
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, N, 1.0, a->dy + (size_t)m0 * N, N, a->w + k0, K,
         a->dx_mode == GRAD_ADD ? 1.0 : 0.0, a->dx + (size_t)m0 * K + k0, K);
    if (a->gelu_pre) gelu_bwd_block(a->dx + (size_t)m0 * K + k0, a->gelu_pre + (size_t)m0 * K + k0, rows, cols, K);
}

static void linear_bwd_dw_task(const LinearBwd *a, int k) {
    int o, cnt, s0, slen, M = a->M, K = a->K, N = a->N;  // o, cnt along the longer side; s0, slen the other
    real beta = a->pmode == GRAD_ADD ? 1.0 : 0.0;
    gemm_task(&a->tdw, k, a->by_rows ? N : K, a->by_rows ? K : N, &o, &cnt, &s0, &slen);
    if (a->by_rows)
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, cnt, slen, M, 1.0, a->dy + o, N, a->x + s0, K, beta,
             a->dw + (size_t)o * K + s0, K);
    else
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, slen, cnt, M, 1.0, a->dy + s0, N, a->x + o, K, beta,
             a->dw + (size_t)s0 * K + o, K);
}

// (Each column summed over the rows in order; the columns side by side in vectors.)
CPU_VECTOR_CLONES static void column_sums(double *acc, const real *dy, int M, int N, int n0, int n1) {
    for (int m = 0; m < M; m++) {
        const real *row = dy + (size_t)m * N;
        for (int n = n0; n < n1; n++) acc[n - n0] += row[n];
    }
}

static void linear_bwd_db_task(const LinearBwd *a, int blk) {
    int N = a->N, n0 = blk * 64, n1 = n0 + 64 < N ? n0 + 64 : N;
    double acc[64] = {0};
    column_sums(acc, a->dy, a->M, N, n0, n1);
    real *db = a->db;
    for (int n = n0; n < n1; n++) db[n] = a->pmode == GRAD_ADD ? db[n] + (real)acc[n - n0] : (real)acc[n - n0];
}

static void linear_bwd(real *dx, GradMode dx_mode, const real *gelu_pre, real *dw, real *db, GradMode pmode,
                       const real *dy, const real *x, const real *w, int M, int K, int N) {
    LinearBwd a = {dx, dw, db, dy, x, w, gelu_pre, dx_mode, pmode, M, K, N, N >= K, {0}, {0}};
    int ndx = 0, ndw = 0, ndb = db ? (N + 63) / 64 : 0;
    if (dx) a.tdx = gemm_tasks(M, K), ndx = a.tdx.tasks;
    if (dw) a.tdw = a.by_rows ? gemm_tasks(N, K) : gemm_tasks(K, N), ndw = a.tdw.tasks;
    // The GEMMs' tasks first, the bias's short ones last, to fill in at the end.
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < ndx + ndw + ndb; k++) {
        if (k < ndx) linear_bwd_dx_task(&a, k);
        else if (k < ndx + ndw) linear_bwd_dw_task(&a, k - ndx);
        else linear_bwd_db_task(&a, k - ndx - ndw);
    }
}

static void cpu_linear_bwd(real *dx, GradMode dx_mode, real *dw, real *db, GradMode pmode, const real *dy,
                           const Operand *x_op, const real *w, int M, int K, int N) {
    linear_bwd(dx, dx_mode, NULL, dw, db, pmode, dy, x_op, w, M, K, N);
}

// ----------------------------------------------------------------------------
// LayerNorm with adaLN modulation

// A row's sum in double, in eight fixed lanes combined in a fixed tree: the same bytes every time,
// and a loop the compiler vectorises (a single serial sum would not be).
#define LANES 8
static inline double lanes_total(const double *a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// The row's mean and 1 / standard deviation (two passes, in double).
CPU_VECTOR_CLONES static void ln_row_stats(const real *x, int D, double *mean, double *rstd) {
    double acc[LANES] = {0};
    int d = 0;
    for (; d + LANES <= D; d += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += x[d + l];
    double sum = lanes_total(acc);
    for (; d < D; d++) sum += x[d];
    double mu = sum / D;
    for (int l = 0; l < LANES; l++) acc[l] = 0;
    for (d = 0; d + LANES <= D; d += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (x[d + l] - mu) * (x[d + l] - mu);
    double sq = lanes_total(acc);
    for (; d < D; d++) sq += (x[d] - mu) * (x[d] - mu);
    *mean = mu, *rstd = 1.0 / sqrt(sq / D + LN_EPS);
}

CPU_VECTOR_CLONES static void ln_row_apply(real *y, const real *x, int D, double mu, double rs, const real *shift,
                                           const real *scale) {
    for (int d = 0; d < D; d++) y[d] = (real)((x[d] - mu) * rs) * (1 + scale[d]) + shift[d];
}

// The input gradient of one row: dx += rs (g - mean(g) - xhat mean(g xhat)), g = dy (1 + scale).
CPU_VECTOR_CLONES static void ln_row_bwd(real *dx, const real *dy, const real *x, const real *scale, int D,
                                         double mu, double rs) {
    double ag[LANES] = {0}, agx[LANES] = {0};
    int d = 0;
    for (; d + LANES <= D; d += LANES)
        for (int l = 0; l < LANES; l++) {
            double g = dy[d + l] * (1.0 + scale[d + l]);
            ag[l] += g;
            agx[l] += g * (x[d + l] - mu) * rs;
        }
    double g_mean = lanes_total(ag), gx_mean = lanes_total(agx);
    for (; d < D; d++) {
        double g = dy[d] * (1.0 + scale[d]);
        g_mean += g;
        gx_mean += g * (x[d] - mu) * rs;
    }
    g_mean /= D, gx_mean /= D;
    for (d = 0; d < D; d++) {
        double g = dy[d] * (1.0 + scale[d]);
        double xhat = (x[d] - mu) * rs;
        dx[d] += (real)(rs * (g - g_mean - xhat * gx_mean));
    }
}

// One row's share of the shift and scale gradients' column sums.
CPU_VECTOR_CLONES static void ln_row_colsums(double *ash, double *asc, const real *dy, const real *x, int D, real mu,
                                             double rs) {
    for (int d = 0; d < D; d++) {
        double g = dy[d];
        ash[d] += g;
        asc[d] += g * (x[d] - mu) * rs;
    }
}

static void cpu_ln_mod_fwd(Operand *y_op, real *mean, real *rstd, const real *x, const real *shift, const real *scale,
                           long ms, int S, int N, int D) {
    long rows = (long)S * N;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        double mu, rs;
        ln_row_stats(x + r * D, D, &mu, &rs);
        mean[r] = (real)mu;
        rstd[r] = (real)rs;
        ln_row_apply((real *)y_op + r * D, x + r * D, D, mu, rs, shift + (r / N) * ms, scale + (r / N) * ms);
    }
}

static void cpu_ln_mod_bwd(real *dx, real *dshift, real *dscale, const real *dy, const real *x, const real *mean,
                           const real *rstd, const real *scale, long ms, int S, int N, int D) {
    long rows = (long)S * N;
    if (dx) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++)
            ln_row_bwd(dx + r * D, dy + r * D, x + r * D, scale + (r / N) * ms, D, mean[r], rstd[r]);
    }
    if (dshift || dscale) {  // each column summed over the slot's rows in order, the rows read in memory order
#pragma omp parallel for schedule(static)
        for (int s = 0; s < S; s++) {
            double *ash = fc_malloc(sizeof(double) * 2 * (D > 0 ? D : 1)), *asc = ash + D;
            for (int d = 0; d < D; d++) ash[d] = asc[d] = 0;
            for (int n = 0; n < N; n++) {
                long r = (long)s * N + n;
                ln_row_colsums(ash, asc, dy + r * D, x + r * D, D, mean[r], rstd[r]);
            }
            for (int d = 0; d < D; d++) {
                if (dshift) dshift[s * ms + d] += (real)ash[d];
                if (dscale) dscale[s * ms + d] += (real)asc[d];
            }
            free(ash);
        }
    }
}

// ----------------------------------------------------------------------------
// gated residual add

static void cpu_gated_add_fwd(real *out, const real *x, const real *h, const real *gate, long ms, int S, int N,
                              int D) {
    long rows = (long)S * N;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const real *g = gate + (r / N) * ms;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] + g[d] * h[r * D + d];
    }
}

static void cpu_gated_add_bwd(real *dx, real *dh, real *dgate, const real *dout, const real *h, const real *gate,
                              long ms, int S, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        const real *g = gate + s * ms;
        for (int n = 0; n < N; n++) {
            long r = ((long)s * N + n) * D;
            for (int d = 0; d < D; d++) {
                if (dx) dx[r + d] += dout[r + d];
                if (dh) dh[r + d] = g[d] * dout[r + d];
            }
        }
        if (dgate) {  // each column in row order, the rows read in memory order
            double *acc = fc_malloc(sizeof(double) * (D > 0 ? D : 1));
            for (int d = 0; d < D; d++) acc[d] = 0;
            for (int n = 0; n < N; n++) {
                long r = ((long)s * N + n) * D;
                for (int d = 0; d < D; d++) acc[d] += (double)dout[r + d] * h[r + d];
            }
            for (int d = 0; d < D; d++) dgate[s * ms + d] += (real)acc[d];
            free(acc);
        }
    }
}

// ----------------------------------------------------------------------------
// RMS norm of the q and k heads

// One head's RMS norm: out = v / rms(v) * w; returns 1 / rms (the sum of squares in eight double lanes).
CPU_VECTOR_CLONES static real rms_norm_head(real *out, const real *v, const real *w, int dh) {
    double acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= dh; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += (double)v[i + l] * v[i + l];
    double sq = lanes_total(acc);
    for (; i < dh; i++) sq += (double)v[i] * v[i];
    double r = 1.0 / sqrt(sq / dh + RMS_EPS);
    for (i = 0; i < dh; i++) out[i] = (real)(v[i] * r) * w[i];
    return (real)r;
}

// One head's backward: acc[i] += dy x r (the weight's gradient), and dx = r w dy - x r^3 (dy.w.x) / dh.
CPU_VECTOR_CLONES static void rms_norm_head_bwd(real *dx, double *acc, const real *dy, const real *x, const real *w,
                                                double r, int dh) {
    if (acc)
        for (int i = 0; i < dh; i++) acc[i] += (double)dy[i] * x[i] * r;
    if (!dx) return;
    double lanes[LANES] = {0};
    int i = 0;
    for (; i + LANES <= dh; i += LANES)
        for (int l = 0; l < LANES; l++) lanes[l] += (double)dy[i + l] * w[i + l] * x[i + l];
    double dot = lanes_total(lanes);
    for (; i < dh; i++) dot += (double)dy[i] * w[i] * x[i];
    double coef = r * r * r * dot / dh;
    for (i = 0; i < dh; i++) dx[i] = (real)(r * w[i] * dy[i] - x[i] * coef);
}

static void cpu_qk_norm_fwd(Operand *out, real *rstd, const real *qkv, const real *qw, const real *kw, int T, int D,
                            int H) {
    int dh = D / H;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const real *row = qkv + (size_t)t * 3 * D;
        real *orow = (real *)out + (size_t)t * 3 * D;
        for (int part = 0; part < 2; part++) {
            const real *w = part ? kw : qw;
            for (int h = 0; h < H; h++)
                rstd[(size_t)t * 2 * H + part * H + h] = rms_norm_head(orow + part * D + h * dh, row + part * D + h * dh,
                                                                       w, dh);
        }
        memcpy(orow + 2 * D, row + 2 * D, sizeof(real) * D);
    }
}

// The weight gradients' chunks of tokens: fixed by T, not by the thread count, so that the sums are
// the same bytes with any number of threads.
enum { QK_NORM_CHUNK = 64 };

static void cpu_qk_norm_bwd(real *dqkv, real *dqw, real *dkw, GradMode pmode, const real *dout, const real *qkv,
                            const real *rstd, const real *qw, const real *kw, int T, int D, int H) {
    int dh = D / H, nchunks = (T + QK_NORM_CHUNK - 1) / QK_NORM_CHUNK, want_w = dqw || dkw;
    // part[c] (2, dh): chunk c's sums for dqw and dkw, its tokens and heads in order.
    double *part = want_w ? calloc((size_t)(nchunks > 0 ? nchunks : 1) * 2 * (dh > 0 ? dh : 1), sizeof(double)) : NULL;
    if (want_w && !part) fc_die("out of memory (qk_norm_bwd's partial sums)");
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nchunks; c++) {
        int t1 = (c + 1) * QK_NORM_CHUNK < T ? (c + 1) * QK_NORM_CHUNK : T;
        for (int t = c * QK_NORM_CHUNK; t < t1; t++) {
            const real *row = qkv + (size_t)t * 3 * D, *drow = dout + (size_t)t * 3 * D;
            for (int p = 0; p < 2; p++) {
                const real *w = p ? kw : qw;
                double *acc = want_w ? part + ((size_t)c * 2 + p) * dh : NULL;
                for (int h = 0; h < H; h++) {
                    const real *x = row + p * D + h * dh, *dy = drow + p * D + h * dh;
                    double r = rstd[(size_t)t * 2 * H + p * H + h];
                    rms_norm_head_bwd(dqkv ? dqkv + (size_t)t * 3 * D + p * D + h * dh : NULL, acc, dy, x, w, r, dh);
                }
            }
            if (dqkv) memcpy(dqkv + (size_t)t * 3 * D + 2 * D, drow + 2 * D, sizeof(real) * D);
        }
    }
    // The weight gradients: the chunks' sums added in chunk order.
    for (int p = 0; p < 2 && want_w; p++) {
        real *dw = p ? dkw : dqw;
        if (!dw) continue;
        for (int i = 0; i < dh; i++) {
            double sum = 0;
            for (int c = 0; c < nchunks; c++) sum += part[((size_t)c * 2 + p) * dh + i];
            dw[i] = pmode == GRAD_ADD ? dw[i] + (real)sum : (real)sum;
        }
    }
    free(part);
}

// ----------------------------------------------------------------------------
// elementwise activations

#define GELU_C 0.7978845608028654  // sqrt(2/pi)

// GELU (tanh form) as v * sigmoid(2u), u = GELU_C (v + 0.044715 v^3): 0.5 (1 + tanh u) = sigmoid(2u).
// One exp in the precision of `real` (glibc's tanhf is four times slower than expf; a double tanh per
// element was a quarter of a small network's step); no cancellation for either sign of u. In float
// the exp is exp_poly, so that the loops below vectorise.
#ifdef FC_DOUBLE
#define EXP exp
#else
#define EXP exp_poly
#endif
#define GELU_SPAN 256  // elements a thread's loops take at a time (a stack buffer's)

static inline real gelu_sigmoid(real v) {
    real u = (real)GELU_C * (v + (real)0.044715 * v * v * v);
    return 1 / (1 + EXP(-2 * u));
}

CPU_VECTOR_CLONES static void gelu_fwd_span(real *y, const real *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] * gelu_sigmoid(x[i]);
}

// d/dv [v sig(2u)] = sig + v 2 sig (1 - sig) du/dv, du/dv = GELU_C (1 + 3 * 0.044715 v^2); n <=
// GELU_SPAN. The derivative goes to a buffer of its own first: dx may be dy (the MLP's backward
// works in place), which would keep a single loop scalar.
CPU_VECTOR_CLONES static void gelu_bwd_span(real *dx, const real *dy, const real *x, size_t n) {
    real d[GELU_SPAN];
    for (size_t i = 0; i < n; i++) {
        real v = x[i], sg = gelu_sigmoid(v);
        d[i] = sg + 2 * v * sg * (1 - sg) * (real)GELU_C * (1 + (real)(3 * 0.044715) * v * v);
    }
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * d[i];
}

static void cpu_gelu_fwd(Operand *y_op, const real *x, size_t n) {
    real *y = y_op;
    long spans = (long)((n + GELU_SPAN - 1) / GELU_SPAN);
#pragma omp parallel for schedule(static)
    for (long s = 0; s < spans; s++) {
        size_t i0 = (size_t)s * GELU_SPAN;
        gelu_fwd_span(y + i0, x + i0, n - i0 < GELU_SPAN ? n - i0 : GELU_SPAN);
    }
}

static void cpu_gelu_bwd(real *dx, const real *dy, const real *x, size_t n) {
    long spans = (long)((n + GELU_SPAN - 1) / GELU_SPAN);
#pragma omp parallel for schedule(static)
    for (long s = 0; s < spans; s++) {
        size_t i0 = (size_t)s * GELU_SPAN;
        gelu_bwd_span(dx + i0, dy + i0, x + i0, n - i0 < GELU_SPAN ? n - i0 : GELU_SPAN);
    }
}

// The MLP's linears with the GELU between them, as backend.h defines them (a linear, then the
// GELU), the GELU applied to each GEMM task's block while it is in the cache: the same bytes as the
// two ops apart.
static void gelu_fwd_block(real *y, const real *pre, int rows, int cols, long ld) {
    for (int r = 0; r < rows; r++) gelu_fwd_span(y + r * ld, pre + r * ld, (size_t)cols);
}
static void gelu_bwd_block(real *d, const real *pre, int rows, int cols, long ld) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c += GELU_SPAN)
            gelu_bwd_span(d + r * ld + c, d + r * ld + c, pre + r * ld + c, cols - c < GELU_SPAN ? cols - c : GELU_SPAN);
}
static void cpu_linear_gelu_fwd(real *pre, Operand *y, const Operand *x, const real *w, const real *b, int M, int K,
                                int N) {
    linear_fwd_gelu(pre, y, x, w, b, M, K, N);
}
static void cpu_linear_gelu_bwd(real *dpre, real *dw, real *db, GradMode pmode, const real *dy, const Operand *x,
                                const real *w, const real *pre, int M, int K, int N) {
    linear_bwd(dpre, GRAD_SET, pre, dw, db, pmode, dy, x, w, M, K, N);
}

static void cpu_silu_fwd(Operand *y_op, const real *x, size_t n) {
    real *y = y_op;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = (real)(x[i] / (1.0 + exp(-(double)x[i])));
}

static void cpu_silu_bwd(real *dx, const real *dy, const real *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        dx[i] = (real)(dy[i] * s * (1.0 + x[i] * (1.0 - s)));
    }
}

// ----------------------------------------------------------------------------
// patchify / unpatchify: one pass that maps (slot, patch, py, px, c) to its pixel; `to_patches`
// picks the direction and `accumulate` whether the destination is added to.

static void patch_map(real *dst, const real *src, int S, int C, int H, int W, int P, int to_patches,
                      int accumulate) {
    int nh = H / P, nw = W / P, ppc = P * P * C;
    long patches = (long)S * nh * nw;
#pragma omp parallel for schedule(static)
    for (long sp = 0; sp < patches; sp++) {
        long s = sp / (nh * nw);
        int pi = (int)(sp % (nh * nw)), i = pi / nw, j = pi % nw;
        for (int py = 0; py < P; py++)
            for (int px = 0; px < P; px++)
                for (int c = 0; c < C; c++) {
                    long pix = ((s * C + c) * H + (long)i * P + py) * W + (long)j * P + px;
                    long pat = sp * ppc + (py * P + px) * C + c;
                    long d = to_patches ? pat : pix, from = to_patches ? pix : pat;
                    dst[d] = accumulate ? dst[d] + src[from] : src[from];
                }
    }
}

static void cpu_patchify_fwd(Operand *patches, const real *frames, int S, int C, int H, int W, int P) {
    patch_map(patches, frames, S, C, H, W, P, 1, 0);
}
static void cpu_patchify_bwd(real *dframes, const real *dpatches, int S, int C, int H, int W, int P) {
    patch_map(dframes, dpatches, S, C, H, W, P, 0, 1);
}
static void cpu_unpatchify_fwd(real *frames, const real *patches, int S, int C, int H, int W, int P) {
    patch_map(frames, patches, S, C, H, W, P, 0, 0);
}
static void cpu_unpatchify_bwd(real *dpatches, const real *dframes, int S, int C, int H, int W, int P) {
    patch_map(dpatches, dframes, S, C, H, W, P, 1, 1);
}

// ----------------------------------------------------------------------------
// sinusoid embedding

static double sinusoid_freq(int k, int half) { return exp(-log(10000.0) * k / half); }

static void cpu_sinusoid_fwd(Operand *out_op, const real *x, real scale, int M, int d) {
    real *out = out_op;
    int half = d / 2;
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++)
        for (int k = 0; k < half; k++) {
            double a = (double)x[m] * scale * sinusoid_freq(k, half);
            out[(size_t)m * d + k] = (real)cos(a);
            out[(size_t)m * d + half + k] = (real)sin(a);
        }
}

static void cpu_sinusoid_bwd(real *dx, const real *dout, const real *x, real scale, int M, int d) {
    int half = d / 2;
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) {
        double acc = 0;
        for (int k = 0; k < half; k++) {
            double w = scale * sinusoid_freq(k, half), a = (double)x[m] * w;
            acc += -dout[(size_t)m * d + k] * sin(a) * w + dout[(size_t)m * d + half + k] * cos(a) * w;
        }
        dx[m] += (real)acc;
    }
}

// ----------------------------------------------------------------------------
// token embedding add

static void cpu_add_pos_time_fwd(real *out, const real *x, const real *pos, const real *temb, int S, int N, int D) {
    long rows = (long)S * N;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        const real *p = pos + (r % N) * D, *te = temb + (r / N) * D;
        for (int d = 0; d < D; d++) out[r * D + d] = x[r * D + d] + p[d] + te[d];
    }
}

static void cpu_add_pos_time_bwd(real *dx, real *dtemb, const real *dout, int S, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        for (int n = 0; n < N; n++) {
            long r = ((long)s * N + n) * D;
            if (dx)
                for (int d = 0; d < D; d++) dx[r + d] += dout[r + d];
        }
        if (dtemb)
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int n = 0; n < N; n++) acc += dout[((long)s * N + n) * D + d];
                dtemb[(long)s * D + d] += (real)acc;
            }
    }
}

// ----------------------------------------------------------------------------
// masked MSE and the rectified-flow mix

static double mask_sum(const real *mask, int S) {
    double m = 0;
    for (int s = 0; s < S; s++) m += mask[s];
    return m;
}

static void cpu_mse_masked_fwd(real *loss, const real *pred, const real *target, const real *mask, int S, long E) {
    double total = 0, msum = mask_sum(mask, S);
    for (int s = 0; s < S; s++) {
        if (mask[s] == 0) continue;
        double acc = 0;
        const real *p = pred + s * E, *t = target + s * E;
        for (long e = 0; e < E; e++) acc += ((double)p[e] - t[e]) * ((double)p[e] - t[e]);
        total += mask[s] * acc;
    }
    loss[0] = msum > 0 ? (real)(total / (msum * E)) : 0;
}

static void cpu_mse_masked_bwd(real *dpred, const real *pred, const real *target, const real *mask, real dloss,
                               int S, long E) {
    double msum = mask_sum(mask, S);
    if (msum <= 0) return;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++) {
        if (mask[s] == 0) continue;
        double c = 2.0 * dloss * mask[s] / (msum * E);
        for (long e = 0; e < E; e++) dpred[s * E + e] += (real)(c * ((double)pred[s * E + e] - target[s * E + e]));
    }
}

static void cpu_flow_mix(real *xt, real *v, const real *x0, const real *e, const real *t, int S, long E) {
#pragma omp parallel for schedule(static)
    for (int s = 0; s < S; s++)
        for (long i = 0; i < E; i++) {
            long k = s * E + i;
            xt[k] = (1 - t[s]) * x0[k] + t[s] * e[k];
            v[k] = e[k] - x0[k];
        }
}

// ----------------------------------------------------------------------------
// the table

// The CPU computes in fp32 throughout: no lower-precision copy of the weights.
static void cpu_register_weights(const real *params, size_t n) { (void)params, (void)n; }
static void cpu_unregister_weights(const real *params) { (void)params; }

static const char *cpu_describe(void) {
    static char buf[256];
    snprintf(buf, sizeof buf, "cpu (%s, OpenMP, %d thread%s, %s)", sizeof(real) == 8 ? "fp64" : "fp32",
             fc_threads(), fc_threads() == 1 ? "" : "s", openblas_get_config());
    return buf;
}

static const Backend cpu_backend = {
    .name = "cpu",
    .precision = sizeof(real) == 8 ? "fp64" : "fp32",
    .operand_bytes = sizeof(real),
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .download_async = cpu_copy,  // the CPU has no side stream: the copy is done on return
    .download_wait = cpu_sync,
    .operand_upload = cpu_operand_upload,
    .operand_download = cpu_operand_download,
    .memory_peak = cpu_memory_peak,
    .register_weights = cpu_register_weights,
    .unregister_weights = cpu_unregister_weights,
    .randn = cpu_randn,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .ln_mod_fwd = cpu_ln_mod_fwd,
    .ln_mod_bwd = cpu_ln_mod_bwd,
    .gated_add_fwd = cpu_gated_add_fwd,
    .gated_add_bwd = cpu_gated_add_bwd,
    .qk_norm_fwd = cpu_qk_norm_fwd,
    .qk_norm_bwd = cpu_qk_norm_bwd,
    .attn_fwd = cpu_attn_fwd,
    .attn_bwd = cpu_attn_bwd,
    .linear_gelu_fwd = cpu_linear_gelu_fwd,
    .linear_gelu_bwd = cpu_linear_gelu_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .silu_fwd = cpu_silu_fwd,
    .silu_bwd = cpu_silu_bwd,
    .patchify_fwd = cpu_patchify_fwd,
    .patchify_bwd = cpu_patchify_bwd,
    .unpatchify_fwd = cpu_unpatchify_fwd,
    .unpatchify_bwd = cpu_unpatchify_bwd,
    .sinusoid_fwd = cpu_sinusoid_fwd,
    .sinusoid_bwd = cpu_sinusoid_bwd,
    .add_pos_time_fwd = cpu_add_pos_time_fwd,
    .add_pos_time_bwd = cpu_add_pos_time_bwd,
    .mse_masked_fwd = cpu_mse_masked_fwd,
    .mse_masked_bwd = cpu_mse_masked_bwd,
    .flow_mix = cpu_flow_mix,
    .conv2d_fwd = cpu_conv2d_fwd,
    .group_norm_fwd = cpu_group_norm_fwd,
    .act_fwd = cpu_act_fwd,
    .upsample2x_fwd = cpu_upsample2x_fwd,
    .affine_fwd = cpu_affine_fwd,
    .add_fwd = cpu_add_fwd,
    .image_attn_fwd = cpu_image_attn_fwd,
    .conv_tile_bytes = cpu_conv_tile_bytes,
    .adamw_fp32 = cpu_adamw_fp32,
    .adamw_8bit = cpu_adamw_8bit,
    .adamw_8bit_jobs = cpu_adamw_8bit_jobs,
    .sum_squares = cpu_sum_squares,
    .ema_update = cpu_ema_update,
};

const Backend *backend_cpu(void) { return &cpu_backend; }
