// test_conv.c: the CPU backend's autoencoder ops against their definitions written out as loops in
// double: convolution (kernels 1 and 3, strides 1 and 2, symmetric and asymmetric padding, with and
// without bias, the output split into im2col tiles of a few rows), GroupNorm, the pointwise
// functions, nearest upsampling, addition, attention over a map's positions; the same bytes on any
// number of threads. The CPU ops are the reference the CUDA ops are tested
// against (tests/cuda/test_cuda.c): here they are checked themselves.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/philox.h"
#include "../check.h"

static const Backend *be;

static real *randn(size_t n, uint64_t seed) {
    real *x = malloc(sizeof(real) * (n ? n : 1));
    philox_fill_normal(x, n, 0, 1, seed, 0, 0, 0);
    return x;
}

// The largest |a - b| / (1 + |b|) over n values.
static double worst(const real *a, const double *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
        if (!(e <= w)) w = e;  // a NaN is the worst
    }
    return w;
}

static void t_conv(int B, int Cin, int H, int W, int Cout, int k, int stride, int t, int l, int bo, int r, int bias,
                   long tile) {
    int pad[4] = {t, l, bo, r};
    int Ho = (H + t + bo - k) / stride + 1, Wo = (W + l + r - k) / stride + 1;
    size_t ny = (size_t)B * Cout * Ho * Wo;
    real *x = randn((size_t)B * Cin * H * W, 1), *w = randn((size_t)Cout * Cin * k * k, 2), *b = randn(Cout, 3);
    real *y = malloc(sizeof(real) * ny);
    double *want = malloc(sizeof(double) * ny);
    for (int n = 0; n < B; n++)
        for (int co = 0; co < Cout; co++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double s = bias ? b[co] : 0;
                    for (int ci = 0; ci < Cin; ci++)
                        for (int ky = 0; ky < k; ky++)
                            for (int kx = 0; kx < k; kx++) {
                                int iy = oy * stride - t + ky, ix = ox * stride - l + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                s += (double)w[((co * Cin + ci) * k + ky) * k + kx] * x[((n * Cin + ci) * H + iy) * W + ix];
                            }
                    want[((n * Cout + co) * Ho + oy) * Wo + ox] = s;
                }
    char value[32];
    snprintf(value, sizeof value, "%ld", tile);
    if (tile > 0) setenv("FRAMECHAIN_TEST_CONV_TILE_BYTES", value, 1);
    be->conv2d_fwd(y, x, w, bias ? b : NULL, B, Cin, H, W, Cout, k, stride, pad);
    unsetenv("FRAMECHAIN_TEST_CONV_TILE_BYTES");
    double e = worst(y, want, ny);
    char name[64];
    snprintf(name, sizeof name, "conv2d_k%d_s%d", k, stride);
    check(e < 1e-5, name, "B=%d Cin=%d %dx%d -> Cout=%d %dx%d, pad {%d,%d,%d,%d}%s%s: worst error %.2e", B, Cin, H, W,
          Cout, Ho, Wo, t, l, bo, r, bias ? ", bias" : "", tile > 0 ? ", tiles of a few rows" : "", e);
    free(x), free(w), free(b), free(y), free(want);
}

// x ~ 0.7 + N(0, spread^2): off zero, off unit scale; at a spread of 1e-3 a group's variance is
// about eps (1e-6), which then decides the scale.
static void t_group_norm(int B, int C, long HW, int groups, int in_place, double spread) {
    size_t n = (size_t)B * C * HW;
    real *x = randn(n, 4), *g = randn(C, 5), *bt = randn(C, 6), *y = malloc(sizeof(real) * n);
    for (size_t i = 0; i < n; i++) x[i] = (real)(x[i] * spread + 0.7);
    double *want = malloc(sizeof(double) * n);
    int cg = C / groups;
    for (int b = 0; b < B; b++)
        for (int gi = 0; gi < groups; gi++) {
            double s = 0, sq = 0, m = (double)cg * HW;
            for (int c = gi * cg; c < (gi + 1) * cg; c++)
                for (long i = 0; i < HW; i++) s += x[((size_t)b * C + c) * HW + i];
            for (int c = gi * cg; c < (gi + 1) * cg; c++)
                for (long i = 0; i < HW; i++) {
                    double d = x[((size_t)b * C + c) * HW + i] - s / m;
                    sq += d * d;
                }
            for (int c = gi * cg; c < (gi + 1) * cg; c++)
                for (long i = 0; i < HW; i++) {
                    size_t at = ((size_t)b * C + c) * HW + i;
                    want[at] = (x[at] - s / m) / sqrt(sq / m + 1e-6) * g[c] + bt[c];
                }
        }
    if (in_place) {
        memcpy(y, x, sizeof(real) * n);
        be->group_norm_fwd(y, y, g, bt, B, C, HW, groups, (real)1e-6);
    } else {
        be->group_norm_fwd(y, x, g, bt, B, C, HW, groups, (real)1e-6);
    }
    double e = worst(y, want, n);
    check(e < 1e-5, "group_norm", "B=%d C=%d HW=%ld groups=%d%s, x spread %g: worst error %.2e", B, C, HW, groups,
          in_place ? ", in place" : "", spread, e);
    free(x), free(g), free(bt), free(y), free(want);
}

static void t_pointwise(size_t n) {
    real *x = randn(n, 7), *a = randn(n, 8), *y = malloc(sizeof(real) * n);
    double *want = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) x[i] *= 4;
    const char *names[] = {"act_silu", "act_relu", "act_tanh_clamp"};
    for (int act = ACT_SILU; act <= ACT_TANH_CLAMP; act++) {
        for (size_t i = 0; i < n; i++) {
            double v = x[i];
            want[i] = act == ACT_SILU ? v / (1 + exp(-v)) : act == ACT_RELU ? fmax(v, 0) : 3 * tanh(v / 3);
        }
        be->act_fwd(y, x, n, act);
        double e = worst(y, want, n);
        check(e < 1e-6, names[act], "n=%zu, x ~ N(0, 16): worst error %.2e", n, e);
    }
    for (size_t i = 0; i < n; i++) want[i] = (double)(x[i] * 0.5f) + 0.25;
    be->affine_fwd(y, x, n, 0.5f, 0.25f);
    check(worst(y, want, n) < 1e-6, "affine", "n=%zu, y = x 0.5 + 0.25: worst error %.2e", n, worst(y, want, n));
    for (size_t i = 0; i < n; i++) want[i] = (double)x[i] + a[i];
    be->add_fwd(x, x, a, n);  // in place
    check(worst(x, want, n) < 1e-6, "add", "n=%zu, y aliasing a: worst error %.2e", n, worst(x, want, n));
    free(x), free(a), free(y), free(want);
}

static void t_upsample(int B, int C, int H, int W) {
    size_t n = (size_t)B * C * H * W;
    real *x = randn(n, 9), *y = malloc(sizeof(real) * n * 4);
    be->upsample2x_fwd(y, x, B, C, H, W);
    long bad = 0;
    for (int p = 0; p < B * C; p++)
        for (int oy = 0; oy < 2 * H; oy++)
            for (int ox = 0; ox < 2 * W; ox++)
                bad += y[((size_t)p * 2 * H + oy) * 2 * W + ox] != x[((size_t)p * H + oy / 2) * W + ox / 2];
    check(bad == 0, "upsample2x", "B=%d C=%d %dx%d -> %dx%d: %ld values wrong", B, C, H, W, 2 * H, 2 * W, bad);
    free(x), free(y);
}

static void t_image_attn(int B, int C, long N, long tile) {
    size_t n = (size_t)B * C * N;
    real *q = randn(n, 10), *k = randn(n, 11), *v = randn(n, 12), *out = malloc(sizeof(real) * n);
    double *want = malloc(sizeof(double) * n), *p = malloc(sizeof(double) * N);
    for (int b = 0; b < B; b++)
        for (long i = 0; i < N; i++) {
            double m = -INFINITY, sum = 0;
            for (long j = 0; j < N; j++) {
                double s = 0;
                for (int c = 0; c < C; c++) s += (double)q[((size_t)b * C + c) * N + i] * k[((size_t)b * C + c) * N + j];
                p[j] = s / sqrt((double)C);
                m = fmax(m, p[j]);
            }
            for (long j = 0; j < N; j++) sum += p[j] = exp(p[j] - m);
            for (int c = 0; c < C; c++) {
                double o = 0;
                for (long j = 0; j < N; j++) o += p[j] / sum * v[((size_t)b * C + c) * N + j];
                want[((size_t)b * C + c) * N + i] = o;
            }
        }
    char value[32];
    snprintf(value, sizeof value, "%ld", tile);
    if (tile > 0) setenv("FRAMECHAIN_TEST_CONV_TILE_BYTES", value, 1);
    be->image_attn_fwd(out, q, k, v, B, C, N);
    unsetenv("FRAMECHAIN_TEST_CONV_TILE_BYTES");
    double e = worst(out, want, n);
    check(e < 1e-5, "image_attn", "B=%d C=%d N=%ld%s: worst error %.2e", B, C, N,
          tile > 0 ? ", queries in chunks of a few rows" : "", e);
    free(q), free(k), free(v), free(out), free(want), free(p);
}

// The same bytes on 1 and 2 threads, at sizes where OpenBLAS would cut a product by the threads on its
// own (conv2d's GEMM of 32 x 1024 x 72, image attention's of 1024 x 1024 x 64).
static void t_thread_count(void) {
    int pad[4] = {1, 1, 1, 1}, Cin = 8, H = 32, Cout = 32, C = 64;
    long N = 1024;
    real *x = randn((size_t)Cin * H * H, 20), *w = randn((size_t)Cout * Cin * 9, 21), *b = randn(Cout, 22);
    real *q = randn((size_t)C * N, 23), *k = randn((size_t)C * N, 24), *v = randn((size_t)C * N, 25);
    size_t ny = (size_t)Cout * H * H, no = (size_t)C * N;
    real *y[2] = {malloc(sizeof(real) * ny), malloc(sizeof(real) * ny)}, *o[2] = {malloc(sizeof(real) * no),
                                                                                 malloc(sizeof(real) * no)};
    int threads = fc_threads();
    for (int t = 0; t < 2; t++) {
        fc_set_threads(t + 1);
        be->conv2d_fwd(y[t], x, w, b, 1, Cin, H, H, Cout, 3, 1, pad);
        be->image_attn_fwd(o[t], q, k, v, 1, C, N);
    }
    fc_set_threads(threads);
    size_t dy = 0, dout = 0;
    for (size_t i = 0; i < ny; i++) dy += memcmp(&y[0][i], &y[1][i], sizeof(real)) != 0;
    for (size_t i = 0; i < no; i++) dout += memcmp(&o[0][i], &o[1][i], sizeof(real)) != 0;
    check(dy == 0 && dout == 0, "conv_image_attn_thread_count", "1 thread against 2: %zu of %zu convolution outputs and "
          "%zu of %zu attention outputs differ", dy, ny, dout, no);
    free(x), free(w), free(b), free(q), free(k), free(v), free(y[0]), free(y[1]), free(o[0]), free(o[1]);
}

int main(void) {
    be = backend_cpu();
    t_thread_count();
    t_conv(2, 3, 9, 7, 5, 3, 1, 1, 1, 1, 1, 1, 0);  // PyTorch padding 1
    t_conv(2, 4, 8, 8, 6, 3, 2, 0, 0, 1, 1, 1, 0);  // AutoencoderKL's downsampling
    t_conv(1, 4, 9, 9, 3, 3, 2, 1, 1, 1, 1, 0, 0);  // TAESD's, no bias
    t_conv(2, 5, 6, 7, 4, 1, 1, 0, 0, 0, 0, 1, 0);  // 1x1: the GEMM reads x directly
    t_conv(1, 3, 6, 5, 2, 1, 2, 0, 0, 0, 0, 1, 0);  // 1x1 at stride 2
    t_conv(2, 3, 13, 11, 4, 3, 1, 1, 1, 1, 1, 1, 600);  // im2col tiles of 1 or 2 rows
    t_conv(1, 2, 12, 10, 3, 3, 2, 0, 0, 1, 1, 1, 500);
    t_conv(1, 1, 2, 2, 1, 3, 1, 1, 1, 1, 1, 1, 0);  // more padding than image
    t_group_norm(2, 8, 30, 4, 0, 2);
    t_group_norm(1, 6, 17, 1, 1, 2);
    t_group_norm(1, 32, 5, 32, 0, 2);  // a group per channel
    t_group_norm(1, 4, 16, 2, 0, 1e-3);  // variance about eps
    t_pointwise(1001);
    t_upsample(2, 3, 5, 4);
    t_image_attn(2, 8, 30, 0), t_image_attn(1, 16, 64, 500);  // the second: 3 query rows a chunk
    return g_failed != 0;
}
