// cpu_conv.c: the autoencoder ops of the reference backend (backend.h, "the autoencoders' ops"). A
// convolution is a GEMM over an im2col tile of output rows (bounded memory at any frame size), cut
// into blocks of columns independent of the thread count; the other ops are loops over independent
// outputs. Sums are in double, one thread a sum: the same bytes for any thread count.
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_conv.h"

#ifdef FC_DOUBLE
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

#define CONV_TILE_BYTES ((size_t)32 << 20)  // the most an im2col tile takes

// C (M, N) = alpha op(A) op(B) + beta C (row-major), cut into blocks of GEMM_COLS columns of C that
// OpenMP spreads over the threads, each a GEMM of its own (OpenBLAS runs one thread inside a parallel
// region). The cut depends on the shape alone, so the bytes do not depend on the thread count: called
// outside a parallel region, the OpenMP build of OpenBLAS would take every thread and cut the product
// by their number, and its kernels round by the shape of what each thread gets.
#define GEMM_COLS 256
static void gemm_by_columns(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, real alpha, const real *A,
                            int lda, const real *B, int ldb, real beta, real *C, int ldc) {
    int parts = (N + GEMM_COLS - 1) / GEMM_COLS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++) {
        int c0 = p * GEMM_COLS, nc = N - c0 < GEMM_COLS ? N - c0 : GEMM_COLS;
        const real *Bp = tb == CblasNoTrans ? B + c0 : B + (size_t)c0 * ldb;
        GEMM(CblasRowMajor, ta, tb, M, nc, K, alpha, A, lda, Bp, ldb, beta, C + c0, ldc);
    }
}

// The tile's bytes: CONV_TILE_BYTES, or FRAMECHAIN_TEST_CONV_TILE_BYTES (the tests split small images).
size_t cpu_conv_tile_bytes(void) {
    long t = fc_test_hook("CONV_TILE_BYTES");
    return t > 0 ? (size_t)t : CONV_TILE_BYTES;
}

// The im2col rows of output rows [r0, r0 + rows) of one image: col (Cin k k, rows Wo), row (ci, ky, kx)
// holding x at the tap (ky, kx) of channel ci for each output position, 0 in the padding.
static void im2col(real *col, const real *x, int Cin, int H, int W, int k, int stride, const int pad[4], int r0,
                   int rows, int Wo) {
    long K = (long)Cin * k * k, N = (long)rows * Wo;
#pragma omp parallel for schedule(static)
    for (long q = 0; q < K; q++) {
        int ci = (int)(q / (k * k)), ky = (int)(q / k % k), kx = (int)(q % k);
        const real *plane = x + (size_t)ci * H * W;
        real *out = col + q * N;
        // The outputs [lo, hi) of a row have their tap ix = ox stride - pad + kx inside it: at
        // stride 1 one copy, the padding's outputs on either side 0.
        int shift = kx - pad[1];
        int lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
        int hi = W - 1 - shift < 0 ? 0 : (W - 1 - shift) / stride + 1;
        if (hi > Wo) hi = Wo;
        if (lo > hi) lo = hi;
        for (int oy = 0; oy < rows; oy++) {
            int iy = (r0 + oy) * stride - pad[0] + ky;
            real *o = out + (long)oy * Wo;
            if (iy < 0 || iy >= H) {
                memset(o, 0, sizeof(real) * Wo);
                continue;
            }
            const real *src = plane + (size_t)iy * W;
            memset(o, 0, sizeof(real) * lo);
            if (stride == 1) memcpy(o + lo, src + lo + shift, sizeof(real) * (hi - lo));
            else for (int ox = lo; ox < hi; ox++) o[ox] = src[ox * stride + shift];
            memset(o + hi, 0, sizeof(real) * (Wo - hi));
        }
    }
}

void cpu_conv2d_fwd(real *y, const real *x, const real *w, const real *b, int B, int Cin, int H, int W, int Cout, int k,
                    int stride, const int pad[4]) {
    int Ho = (H + pad[0] + pad[2] - k) / stride + 1, Wo = (W + pad[1] + pad[3] - k) / stride + 1;
    if (B <= 0 || Cout <= 0 || Ho <= 0 || Wo <= 0) return;
    long K = (long)Cin * k * k;
    size_t out_plane = (size_t)Ho * Wo;
    // A 1x1 convolution at stride 1 without padding reads x as it is: its rows are the GEMM's.
    int direct = k == 1 && stride == 1 && !pad[0] && !pad[1] && !pad[2] && !pad[3];
    size_t row_bytes = sizeof(real) * (size_t)K * Wo;
    size_t tile = cpu_conv_tile_bytes();
    int R = direct ? Ho : (int)(tile / row_bytes > 0 ? tile / row_bytes : 1);
    if (R > Ho) R = Ho;
    real *col = direct ? NULL : fc_malloc(row_bytes * R);
    for (int n = 0; n < B; n++) {
        const real *xn = x + (size_t)n * Cin * H * W;
        real *yn = y + (size_t)n * Cout * out_plane;
        for (int r0 = 0; r0 < Ho; r0 += R) {
            int rows = Ho - r0 < R ? Ho - r0 : R;
            long N = (long)rows * Wo;
            real *yt = yn + (size_t)r0 * Wo;
#pragma omp parallel for schedule(static)
            for (int co = 0; co < Cout; co++) {  // the bias, which the GEMM adds to
                real *row = yt + (size_t)co * out_plane, v = b ? b[co] : 0;
                for (long i = 0; i < N; i++) row[i] = v;
            }
            if (direct) {
                gemm_by_columns(CblasNoTrans, CblasNoTrans, Cout, (int)N, (int)K, 1, w, (int)K, xn + (size_t)r0 * Wo,
                                (int)out_plane, 1, yt, (int)out_plane);
            } else {
                im2col(col, xn, Cin, H, W, k, stride, pad, r0, rows, Wo);
                gemm_by_columns(CblasNoTrans, CblasNoTrans, Cout, (int)N, (int)K, 1, w, (int)K, col, (int)N, 1, yt,
                                (int)out_plane);
            }
        }
    }
    free(col);
}

void cpu_group_norm_fwd(real *y, const real *x, const real *gamma, const real *beta, int B, int C, long HW, int groups,
                        real eps) {
    int cg = C / groups;
    size_t n = (size_t)cg * HW;
#pragma omp parallel for schedule(static)
    for (long bg = 0; bg < (long)B * groups; bg++) {
        const real *xg = x + (size_t)bg * n;  // the group's channels are contiguous
        real *yg = y + (size_t)bg * n;
        double sum = 0, sq = 0;
        for (size_t i = 0; i < n; i++) sum += xg[i];
        double mean = sum / (double)n;
        for (size_t i = 0; i < n; i++) sq += (xg[i] - mean) * (xg[i] - mean);
        double rstd = 1 / sqrt(sq / (double)n + eps);
        int c0 = (int)(bg % groups) * cg;
        for (int c = 0; c < cg; c++) {
            double scale = rstd * gamma[c0 + c], shift = beta[c0 + c] - mean * scale;
            for (long i = 0; i < HW; i++) yg[c * HW + i] = (real)(xg[c * HW + i] * scale + shift);
        }
    }
}

void cpu_act_fwd(real *y, const real *x, size_t n, int act) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (real)(act == ACT_SILU ? v / (1 + exp(-v)) : act == ACT_RELU ? (v > 0 ? v : 0) : 3 * tanh(v / 3));
    }
}

void cpu_upsample2x_fwd(real *y, const real *x, int B, int C, int H, int W) {
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)B * C; p++)
        for (int iy = 0; iy < H; iy++) {
            const real *in = x + ((size_t)p * H + iy) * W;
            real *top = y + ((size_t)p * 2 * H + 2 * iy) * 2 * W, *bottom = top + 2 * W;
            for (int ix = 0; ix < W; ix++) top[2 * ix] = top[2 * ix + 1] = in[ix];
            memcpy(bottom, top, sizeof(real) * 2 * W);
        }
}

void cpu_affine_fwd(real *y, const real *x, size_t n, real a, real b) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

void cpu_add_fwd(real *y, const real *a, const real *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

// Rows of queries a chunk: their scores (rows, N) take at most CONV_TILE_BYTES.
void cpu_image_attn_fwd(real *out, const real *q, const real *k, const real *v, int B, int C, long N) {
    if (B <= 0 || C <= 0 || N <= 0) return;
    size_t tile = cpu_conv_tile_bytes(), row_bytes = sizeof(real) * (size_t)N;
    long R = (long)(tile / row_bytes > 0 ? tile / row_bytes : 1);
    if (R > N) R = N;
    real *p = fc_malloc(row_bytes * R);
    double scale = 1 / sqrt((double)C);
    for (int b = 0; b < B; b++) {
        const real *qb = q + (size_t)b * C * N, *kb = k + (size_t)b * C * N, *vb = v + (size_t)b * C * N;
        real *ob = out + (size_t)b * C * N;
        for (long i0 = 0; i0 < N; i0 += R) {
            long rows = N - i0 < R ? N - i0 : R;
            // scores (rows, N) = q[:, i0 .. i0 + rows]^T k / sqrt(C)
            gemm_by_columns(CblasTrans, CblasNoTrans, (int)rows, (int)N, C, (real)scale, qb + i0, (int)N, kb, (int)N, 0,
                            p, (int)N);
#pragma omp parallel for schedule(static)
            for (long r = 0; r < rows; r++) {  // softmax of each row, in double
                real *row = p + r * N;
                double m = row[0], sum = 0;
                for (long j = 1; j < N; j++) m = row[j] > m ? row[j] : m;
                for (long j = 0; j < N; j++) sum += exp(row[j] - m);
                for (long j = 0; j < N; j++) row[j] = (real)(exp(row[j] - m) / sum);
            }
            // out[:, i0 .. i0 + rows] = v (C, N) p^T (N, rows)
            gemm_by_columns(CblasNoTrans, CblasTrans, C, (int)rows, (int)N, 1, vb, (int)N, p, (int)N, 0, ob + i0,
                            (int)N);
        }
    }
    free(p);
}
