// conv.cu: the autoencoder ops of the CUDA backend (backend.h, "the autoencoders' ops"), ports of
// src/backend/cpu/cpu_conv.c: a convolution as an im2col tile of output rows in scratch and one fp32
// cuBLAS GEMM a tile (no TF32: the CPU's numbers to fp32 accuracy), GroupNorm with one block a group
// and compensated float sums in a fixed tree (the same bytes on every run), and flat kernels for
// the pointwise functions, nearest upsampling and addition, and attention over a map's positions as two
// SGEMMs around a softmax kernel. Forward only, fp32 in and out on both
// the "cuda" and "cuda-fp32" tables.
#include <math.h>

#include "cuda_common.cuh"

#define CONV_TILE_BYTES ((size_t)64 << 20)  // the most an im2col tile takes
#define GN_THREADS 256

// The tile's bytes: CONV_TILE_BYTES, or FRAMECHAIN_TEST_CONV_TILE_BYTES (the tests split small images).
static size_t tile_bytes(void) {
    long t = fc_test_hook("CONV_TILE_BYTES");
    return t > 0 ? (size_t)t : CONV_TILE_BYTES;
}

// ----------------------------------------------------------------------------
// convolution

// col (Cin k k, rows Wo): row q = (ci, ky, kx) holds x at that tap for each output position of rows
// [r0, r0 + rows), 0 in the padding (cpu_conv.c's im2col).
__global__ void im2col_kernel(float *col, const float *x, int Cin, int H, int W, int k, int stride, int pad_top,
                              int pad_left, int r0, int rows, int Wo) {
    long N = (long)rows * Wo;
    size_t total = (size_t)Cin * k * k * N;
    GRID_STRIDE_LOOP(i, total) {
        long q = (long)(i / N), p = (long)(i % N);
        int ci = (int)(q / (k * k)), ky = (int)(q / k % k), kx = (int)(q % k);
        int oy = (int)(p / Wo), ox = (int)(p % Wo);
        int iy = (r0 + oy) * stride - pad_top + ky, ix = ox * stride - pad_left + kx;
        col[i] = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[((size_t)ci * H + iy) * W + ix] : 0.f;
    }
}

// y's tile (Cout rows of N values, row stride out_plane) = the bias (0 without one), which the GEMM adds to.
__global__ void conv_bias_kernel(float *y, const float *b, int Cout, long N, size_t out_plane) {
    size_t total = (size_t)Cout * N;
    GRID_STRIDE_LOOP(i, total) {
        int co = (int)(i / N);
        y[co * out_plane + i % N] = b ? b[co] : 0.f;
    }
}

static void cuda_conv2d_fwd(real *y, const real *x, const real *w, const real *b, int B, int Cin, int H, int W,
                            int Cout, int k, int stride, const int pad[4]) {
    int Ho = (H + pad[0] + pad[2] - k) / stride + 1, Wo = (W + pad[1] + pad[3] - k) / stride + 1;
    if (B <= 0 || Cout <= 0 || Ho <= 0 || Wo <= 0) return;
    long K = (long)Cin * k * k;
    size_t out_plane = (size_t)Ho * Wo;
    int direct = k == 1 && stride == 1 && !pad[0] && !pad[1] && !pad[2] && !pad[3];
    size_t row_bytes = sizeof(float) * (size_t)K * Wo;
    size_t tile = tile_bytes();
    int R = direct ? Ho : (int)(tile / row_bytes > 0 ? tile / row_bytes : 1);
    if (R > Ho) R = Ho;
    float *col = direct ? NULL : (float *)fc_cuda_scratch(SCRATCH_CONV, row_bytes * R);
    const float one = 1.f;
    for (int n = 0; n < B; n++) {
        const float *xn = x + (size_t)n * Cin * H * W;
        float *yn = y + (size_t)n * Cout * out_plane;
        for (int r0 = 0; r0 < Ho; r0 += R) {
            int rows = Ho - r0 < R ? Ho - r0 : R;
            long N = (long)rows * Wo;
            float *yt = yn + (size_t)r0 * Wo;
            conv_bias_kernel<<<flat_grid((size_t)Cout * N), FLAT_THREADS>>>(yt, b, Cout, N, out_plane);
            cudaCheck(cudaGetLastError());
            const float *A = xn + (size_t)r0 * Wo;
            long lda = (long)out_plane;
            if (!direct) {
                im2col_kernel<<<flat_grid((size_t)K * N), FLAT_THREADS>>>(col, xn, Cin, H, W, k, stride, pad[0],
                                                                           pad[1], r0, rows, Wo);
                cudaCheck(cudaGetLastError());
                A = col, lda = N;
            }
            // Row-major y (Cout, N) += w (Cout, K) col (K, N), as column-major: y^T (N, Cout) = col^T w^T.
            cublasCheck(cublasSgemm(fc_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, (int)N, Cout, (int)K, &one, A, (int)lda, w,
                                    (int)K, &one, yt, (int)out_plane));
        }
    }
}

// ----------------------------------------------------------------------------
// GroupNorm

// One block a group (blockIdx.x = b * groups + g): the mean, then the variance about it, each a
// compensated float sum per thread merged in a fixed tree; then y.
__global__ void group_norm_kernel(float *y, const float *x, const float *gamma, const float *beta, int groups, int cg,
                                  long HW, float eps) {
    __shared__ CompSum part[GN_THREADS];
    __shared__ float stats[2];
    size_t n = (size_t)cg * HW, base = (size_t)blockIdx.x * n;
    const float *xg = x + base;
    for (int pass = 0; pass < 2; pass++) {
        CompSum s = COMP_SUM_ZERO;
        float mean = pass ? stats[0] : 0.f;
        for (size_t i = threadIdx.x; i < n; i += GN_THREADS) {
            float v = xg[i];
            if (pass) v = __fmul_rn(__fsub_rn(v, mean), __fsub_rn(v, mean));
            s.add(v);
        }
        part[threadIdx.x] = s;
        __syncthreads();
        for (int half = GN_THREADS / 2; half > 0; half /= 2) {
            if ((int)threadIdx.x < half) part[threadIdx.x].merge(part[threadIdx.x + half]);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            float total = part[0].value() / (float)n;
            if (pass) stats[1] = 1.f / sqrtf(total + eps);
            else stats[0] = total;
        }
        __syncthreads();
    }
    float mean = stats[0], rstd = stats[1];
    int c0 = (int)(blockIdx.x % groups) * cg;
    for (size_t i = threadIdx.x; i < n; i += GN_THREADS) {
        int c = c0 + (int)(i / HW);
        float scale = rstd * gamma[c];
        y[base + i] = (xg[i] - mean) * scale + beta[c];
    }
}

static void cuda_group_norm_fwd(real *y, const real *x, const real *gamma, const real *beta, int B, int C, long HW,
                                int groups, real eps) {
    if (B <= 0 || C <= 0 || HW <= 0) return;
    if ((long)B * groups > 2147483647L) fc_die("CUDA group_norm: %d images of %d groups is more than a grid holds", B, groups);
    group_norm_kernel<<<B * groups, GN_THREADS>>>(y, x, gamma, beta, groups, C / groups, HW, eps);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// pointwise, upsampling, addition

__global__ void act_kernel(float *y, const float *x, size_t n, int act) {
    GRID_STRIDE_LOOP(i, n) {
        float v = x[i];
        y[i] = act == ACT_SILU ? v / (1.f + expf(-v)) : act == ACT_RELU ? fmaxf(v, 0.f) : 3.f * tanhf(v / 3.f);
    }
}

static void cuda_act_fwd(real *y, const real *x, size_t n, int act) {
    if (!n) return;
    act_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, x, n, act);
    cudaCheck(cudaGetLastError());
}

__global__ void upsample2x_kernel(float *y, const float *x, int H, int W, size_t total) {
    GRID_STRIDE_LOOP(i, total) {
        size_t ox = i % (2 * W), oy = i / (2 * W) % (2 * H), p = i / ((size_t)4 * H * W);
        y[i] = x[(p * H + oy / 2) * W + ox / 2];
    }
}

static void cuda_upsample2x_fwd(real *y, const real *x, int B, int C, int H, int W) {
    size_t total = (size_t)B * C * 4 * H * W;
    if (!total) return;
    upsample2x_kernel<<<flat_grid(total), FLAT_THREADS>>>(y, x, H, W, total);
    cudaCheck(cudaGetLastError());
}

__global__ void affine_kernel(float *y, const float *x, size_t n, float a, float b) {
    GRID_STRIDE_LOOP(i, n) y[i] = x[i] * a + b;
}

static void cuda_affine_fwd(real *y, const real *x, size_t n, real a, real b) {
    if (!n) return;
    affine_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, x, n, a, b);
    cudaCheck(cudaGetLastError());
}

__global__ void add_kernel(float *y, const float *a, const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) y[i] = a[i] + b[i];
}

static void cuda_add_fwd(real *y, const real *a, const real *b, size_t n) {
    if (!n) return;
    add_kernel<<<flat_grid(n), FLAT_THREADS>>>(y, a, b, n);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// attention over a map's positions

// Each row of p (rows, N) replaced by its softmax: one block a row, the maximum and the compensated
// sum of the exponentials in a fixed tree.
__global__ void softmax_rows_kernel(float *p, long N) {
    __shared__ float top[GN_THREADS];
    __shared__ CompSum part[GN_THREADS];
    float *row = p + (size_t)blockIdx.x * N;
    float m = -INFINITY;
    for (long j = threadIdx.x; j < N; j += GN_THREADS) m = fmaxf(m, row[j]);
    top[threadIdx.x] = m;
    __syncthreads();
    for (int half = GN_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) top[threadIdx.x] = fmaxf(top[threadIdx.x], top[threadIdx.x + half]);
        __syncthreads();
    }
    m = top[0];
    CompSum s = COMP_SUM_ZERO;
    for (long j = threadIdx.x; j < N; j += GN_THREADS) s.add(expf(row[j] - m));
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = GN_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) part[threadIdx.x].merge(part[threadIdx.x + half]);
        __syncthreads();
    }
    float inv = 1.f / part[0].value();
    for (long j = threadIdx.x; j < N; j += GN_THREADS) row[j] = expf(row[j] - m) * inv;
}

static void cuda_image_attn_fwd(real *out, const real *q, const real *k, const real *v, int B, int C, long N) {
    if (B <= 0 || C <= 0 || N <= 0) return;
    size_t tile = tile_bytes(), row_bytes = sizeof(float) * (size_t)N;
    long R = (long)(tile / row_bytes > 0 ? tile / row_bytes : 1);
    if (R > N) R = N;
    float *p = (float *)fc_cuda_scratch(SCRATCH_CONV, row_bytes * R);
    const float scale = 1.f / sqrtf((float)C), one = 1.f, zero = 0.f;
    for (int b = 0; b < B; b++) {
        const float *qb = q + (size_t)b * C * N, *kb = k + (size_t)b * C * N, *vb = v + (size_t)b * C * N;
        float *ob = out + (size_t)b * C * N;
        for (long i0 = 0; i0 < N; i0 += R) {
            int rows = (int)(N - i0 < R ? N - i0 : R);
            // row-major scores (rows, N) = q[:, i0 ..]^T k scale; column-major: p^T (N, rows) = k^T q[:, i0 ..]
            cublasCheck(cublasSgemm(fc_cublas(), CUBLAS_OP_N, CUBLAS_OP_T, (int)N, rows, C, &scale, kb, (int)N,
                                    qb + i0, (int)N, &zero, p, (int)N));
            softmax_rows_kernel<<<rows, GN_THREADS>>>(p, N);
            cudaCheck(cudaGetLastError());
            // row-major out[:, i0 ..] (C, rows) = v p^T; column-major: out^T (rows, C) = p v^T
            cublasCheck(cublasSgemm(fc_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, rows, C, (int)N, &one, p, (int)N, vb, (int)N,
                                    &zero, ob + i0, (int)N));
        }
    }
}

// ----------------------------------------------------------------------------

void cuda_register_conv(Backend *be) {
    be->conv2d_fwd = cuda_conv2d_fwd;
    be->group_norm_fwd = cuda_group_norm_fwd;
    be->act_fwd = cuda_act_fwd;
    be->upsample2x_fwd = cuda_upsample2x_fwd;
    be->affine_fwd = cuda_affine_fwd;
    be->add_fwd = cuda_add_fwd;
    be->image_attn_fwd = cuda_image_attn_fwd;
    be->conv_tile_bytes = tile_bytes;
}
