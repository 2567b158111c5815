// cuda_conv_checks.c: the autoencoders' ops of test_cuda (see test_cuda.c) on CUDA against the CPU,
// on random inputs: convolutions (kernels 1 and 3, strides 1 and 2, PyTorch's and AutoencoderKL's
// paddings, with and without bias, an output split into several im2col tiles), GroupNorm (in place
// too, a group per channel, a group of a whole image), the pointwise functions, nearest upsampling,
// addition, and attention over a map's positions (queries in chunks too; scores in the hundreds). fp32 on both tables (the "cuda" table's GEMMs here are fp32 too): the CPU's numbers
// within the fp32 tolerance on both.
#include <stdlib.h>

#include "cuda/cuda_harness.h"

static void t_conv(int B, int Cin, int H, int W, int Cout, int k, int stride, int pt, int pl, int pb, int pr, int bias) {
    int pad[4] = {pt, pl, pb, pr};
    int Ho = (H + pt + pb - k) / stride + 1, Wo = (W + pl + pr - k) / stride + 1;
    Buf x = bnormal((size_t)B * Cin * H * W, 0, 1), w = bnormal((size_t)Cout * Cin * k * k, 0, 0.2);
    Buf b = bnormal(Cout, 0, 1), y = bnormal((size_t)B * Cout * Ho * Wo, 0, 1);
    WHAT("B=%d Cin=%d %dx%d -> Cout=%d %dx%d k=%d s=%d pad {%d,%d,%d,%d}%s", B, Cin, H, W, Cout, Ho, Wo, k, stride, pt,
         pl, pb, pr, bias ? " bias" : "");
    BOTH(be->conv2d_fwd(P(y), P(x), P(w), bias ? P(b) : NULL, B, Cin, H, W, Cout, k, stride, pad));
    compare("cuda_conv2d_fwd", "", &y, NULL);
    FREE(&x, &w, &b, &y);
}

static void t_group_norm(int B, int C, long HW, int groups, int in_place) {
    size_t n = (size_t)B * C * HW;
    Buf x = bnormal(n, 0.7, 2), g = buniform(C, 0.5, 1.5), bt = bnormal(C, 0, 1), y = bnormal(n, 0, 1);
    WHAT("B=%d C=%d HW=%ld groups=%d%s", B, C, HW, groups, in_place ? ", in place" : "");
    if (in_place) {
        BOTH(be->group_norm_fwd(P(x), P(x), P(g), P(bt), B, C, HW, groups, (real)1e-6));
        compare("cuda_group_norm_fwd", "", &x, NULL);
    } else {
        BOTH(be->group_norm_fwd(P(y), P(x), P(g), P(bt), B, C, HW, groups, (real)1e-6));
        compare("cuda_group_norm_fwd", "", &y, NULL);
    }
    FREE(&x, &g, &bt, &y);
}

static void t_pointwise(size_t n) {
    const char *names[] = {"cuda_act_silu", "cuda_act_relu", "cuda_act_tanh_clamp"};
    Buf x = bnormal(n, 0, 4), a = bnormal(n, 0, 1), y = bnormal(n, 0, 1);
    WHAT("n=%zu", n);
    for (int act = ACT_SILU; act <= ACT_TANH_CLAMP; act++) {
        breset(&y);
        BOTH(be->act_fwd(P(y), P(x), n, act));
        compare(names[act], "", &y, NULL);
    }
    BOTH(be->affine_fwd(P(y), P(x), n, 0.18215f, -0.5f));
    compare("cuda_affine_fwd", "", &y, NULL);
    BOTH(be->add_fwd(P(a), P(a), P(x), n));  // in place
    compare("cuda_add_fwd", "y aliasing a", &a, NULL);
    FREE(&x, &a, &y);
}

static void t_upsample(int B, int C, int H, int W) {
    Buf x = bnormal((size_t)B * C * H * W, 0, 1), y = bnormal((size_t)B * C * 4 * H * W, 0, 1);
    WHAT("B=%d C=%d %dx%d", B, C, H, W);
    BOTH(be->upsample2x_fwd(P(y), P(x), B, C, H, W));
    compare("cuda_upsample2x_fwd", "", &y, NULL);
    FREE(&x, &y);
}

static void t_image_attn(int B, int C, long N) {
    size_t n = (size_t)B * C * N;
    Buf q = bnormal(n, 0, 1), k = bnormal(n, 0, 1), v = bnormal(n, 0, 1), out = bnormal(n, 0, 1);
    WHAT("B=%d C=%d N=%ld", B, C, N);
    BOTH(be->image_attn_fwd(P(out), P(q), P(k), P(v), B, C, N));
    compare("cuda_image_attn_fwd", "", &out, NULL);
    FREE(&q, &k, &v, &out);
}

// Scores in the hundreds: q and k hold integers (their dot products, and the scores at C = 64, exact
// in any order of summation), the keys of the second half of the positions 16 times larger. The
// softmax must subtract the row's true maximum; a maximum taken over part of the row leaves
// exponentials that overflow.
static void t_image_attn_peaked(int B, int C, long N) {
    size_t n = (size_t)B * C * N;
    Buf q = bnormal(n, 0, 2), k = bnormal(n, 0, 2), v = bnormal(n, 0, 1), out = bnormal(n, 0, 1);
    for (size_t i = 0; i < n; i++) {
        R(q)[i] = rintf(R(q)[i]);
        R(k)[i] = rintf(R(k)[i]) * ((long)(i % N) >= N / 2 ? 16 : 1);
    }
    breset(&q), breset(&k);
    WHAT("B=%d C=%d N=%ld, integer q and k, scores up to some 200", B, C, N);
    BOTH(be->image_attn_fwd(P(out), P(q), P(k), P(v), B, C, N));
    compare("cuda_image_attn_fwd_peaked", "", &out, NULL);
    FREE(&q, &k, &v, &out);
}

void cuda_conv_cases(void) {
    double tol = g_tol;
    g_tol = TOL;  // fp32 arithmetic on both tables
    t_conv(2, 3, 9, 7, 5, 3, 1, 1, 1, 1, 1, 1);     // PyTorch padding 1
    t_conv(2, 4, 8, 8, 6, 3, 2, 0, 0, 1, 1, 1);     // AutoencoderKL's downsampling
    t_conv(1, 4, 9, 9, 3, 3, 2, 1, 1, 1, 1, 0);     // TAESD's, no bias
    t_conv(2, 5, 6, 7, 4, 1, 1, 0, 0, 0, 0, 1);     // 1x1: the GEMM reads x directly
    t_conv(1, 3, 6, 5, 2, 1, 2, 0, 0, 0, 0, 1);     // 1x1 at stride 2
    t_conv(1, 1, 2, 2, 1, 3, 1, 1, 1, 1, 1, 1);     // more padding than image
    t_conv(1, 64, 64, 64, 64, 3, 1, 1, 1, 1, 1, 1); // a resnet conv of a small decoder
    setenv("FRAMECHAIN_TEST_CONV_TILE_BYTES", "600", 1);  // im2col tiles of 1 or 2 output rows, both sides
    t_conv(2, 3, 13, 11, 4, 3, 1, 1, 1, 1, 1, 1), t_conv(1, 2, 12, 10, 3, 3, 2, 0, 0, 1, 1, 1);
    unsetenv("FRAMECHAIN_TEST_CONV_TILE_BYTES");
    if (!g_quick) t_conv(1, 128, 256, 256, 128, 3, 1, 1, 1, 1, 1, 1);  // 288 MB of im2col: 5 tiles of 64 MB
    t_group_norm(2, 8, 30, 4, 0), t_group_norm(1, 6, 17, 1, 1), t_group_norm(1, 32, 5, 32, 0);
    t_group_norm(1, 64, 4096, 32, 0);  // AutoencoderKL's 32 groups
    t_pointwise(100003), t_pointwise(1);
    t_upsample(2, 3, 5, 4), t_upsample(1, 64, 32, 32);
    t_image_attn(2, 8, 30), t_image_attn(1, 64, 256), t_image_attn_peaked(1, 64, 256);
    setenv("FRAMECHAIN_TEST_CONV_TILE_BYTES", "600", 1);  // queries in chunks of a few rows, both sides
    t_image_attn(1, 16, 64);
    unsetenv("FRAMECHAIN_TEST_CONV_TILE_BYTES");
    g_tol = tol;
}
