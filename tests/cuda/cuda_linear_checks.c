// cuda_linear_checks.c: test_cuda's linear family (section 1): the linear forward and backward at
// awkward sizes and the networks' shapes, with operands off their alignment and x and w already bf16
// values (exact against the CPU), the backward's rounding of dy, the MLP's linears fused with the
// GELU (cuBLASLt's DGELU epilogue and its refusals), the bf16 forward's fallback from cuBLASLt to
// cuBLAS, and the weights' bf16 mirror after every way parameters change.
#include "cuda/cuda_harness.h"

enum { NULL_DX = 1 };  // dx passed as NULL
#define OPT(flag, b) (nulls & (flag) ? NULL : (b))

// The bf16 forward goes through cuBLASLt (cuda/linear.cu). On the CUDA emulation this hook counts
// its products and can make it refuse as it does for a configuration it has no kernel for
// (tests/cuda/emu/cuda_emu_runtime.cpp); a GPU build has no such symbol.
extern long fc_emu_cublaslt_hook(int mode) __attribute__((weak));
static int lt_hooked(void) { return fc_emu_cublaslt_hook && !strcmp(g_gpu->name, "cuda"); }  // not --cpu-as-cuda
static long lt_products(void) { return fc_emu_cublaslt_hook ? fc_emu_cublaslt_hook(-1) : 0; }
extern long fc_emu_cublaslt_gelu_products(int backward) __attribute__((weak));  // GELU (0) or DGELU (1) epilogues
static long lt_gelu_products(int backward) {
    return fc_emu_cublaslt_gelu_products ? fc_emu_cublaslt_gelu_products(backward) : 0;
}
static int g_linear_fwds;  // linear forwards run on the CUDA side (with K > 0)

// `shift`: x, y and b start that many values into their buffers (x, a bf16 operand, off 16 bytes: a
// B operand cuBLASLt is told is on 2 to 8 bytes; y and b off 16 bytes: cuBLASLt on a 4-byte aligned D,
// and a bias it cannot read in place).
static void t_linear_at(int M, int K, int N, int bias, int nulls, int shift) {
    Buf x = bop(bnormal((size_t)M * K + shift, 0, 1)), w = bnormal((size_t)N * K, 0, 0.2), b = bnormal(N + shift, 0, 1);
    Buf y = bnormal((size_t)M * N + shift, 0, 1), dy = bnormal((size_t)M * N, 0, 1), dx = bnormal((size_t)M * K, 0, 1);
    Buf dw = bnormal((size_t)N * K, 0, 1), db = bnormal(N, 0, 1);
    WHAT("M=%d K=%d N=%d%s%s", M, K, N, bias ? " bias" : "", shift ? ", x y b unaligned" : "");
    BOTH(be->linear_fwd(P(y) + shift, PO(x, shift), P(w), bias ? P(b) + shift : NULL, M, K, N));
    g_linear_fwds += M > 0 && K > 0 && N > 0;
    compare("cuda_linear_fwd", "", &y, NULL);
    BOTH(be->linear_bwd(OPT(NULL_DX, P(dx)), GRAD_ADD, P(dw), bias ? P(db) : NULL, GRAD_ADD, P(dy), PO(x, shift),
                        P(w), M, K, N));
    compare("cuda_linear_bwd", "dx", OPT(NULL_DX, &dx), "dw", &dw, "db", bias ? &db : NULL, NULL);
    if (!(nulls & NULL_DX)) {  // GRAD_SET: dx, dw, db overwritten, whatever they held (random on both sides)
        Buf dx2 = bnormal((size_t)M * K, 0, 1), dw2 = bnormal((size_t)N * K, 0, 1), db2 = bnormal(N, 0, 1);
        BOTH(be->linear_bwd(P(dx2), GRAD_SET, P(dw2), bias ? P(db2) : NULL, GRAD_SET, P(dy), PO(x, shift), P(w), M, K,
                            N));
        compare("cuda_linear_bwd_set", "dx", &dx2, "dw", &dw2, "db", bias ? &db2 : NULL, NULL);
        FREE(&dx2, &dw2, &db2);
    }
    FREE(&x, &w, &b, &y, &dy, &dx, &dw, &db);
}
static void t_linear(int M, int K, int N, int bias, int nulls) { t_linear_at(M, K, N, bias, nulls, 0); }

// The nearest bf16 value (round to nearest even; finite inputs).
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

// x (an operand) and w already bf16 values, so that rounding them to bf16 changes nothing: the
// forward then matches the CPU to fp32 accuracy (1e-5) in bf16 too, and an element the weight's bf16
// conversion (bf16.cu) or a GEMM reading x gets wrong or leaves out shows. x and w start `shift`
// values into their buffers: w (unregistered, converted on each call) with shift 0 in float4s (N K
// odd: a tail), 1 to 3 one element at a time.
static void t_linear_exact(int M, int K, int N, int bias, int shift) {
    Buf x = bop(bnormal((size_t)M * K + shift, 0, 1)), w = bnormal((size_t)N * K + shift, 0, 0.2);
    Buf b = bnormal(N, 0, 1);
    Buf y = bnormal((size_t)M * N, 0, 1);
    for (size_t i = 0; i < w.n; i++) R(w)[i] = bf16_round(R(w)[i]);
    breset(&w);
    WHAT("M=%d K=%d N=%d%s, x and w bf16 values, %d values into their buffers", M, K, N, bias ? " bias" : "", shift);
    BOTH(be->linear_fwd(P(y), PO(x, shift), P(w) + shift, bias ? P(b) : NULL, M, K, N));
    g_linear_fwds++;
    double tol = g_tol;
    g_tol = TOL;
    compare("cuda_linear_fwd_exact", "", &y, NULL);
    g_tol = tol;
    FREE(&x, &w, &b, &y);
}

// The backward's rounding of dy to bf16 (round to nearest even, in the bias gradient's pass with
// db, in a pass of its own without): the CUDA side gets dy as it is, the CPU dy already rounded to
// the nearest bf16, with x and w bf16 values. Then dx = dy w and dw = dy^T x are the CPU's to fp32
// accuracy (1e-5), and a rounding of dy other than to nearest shows. ("cuda" only; db, summed from
// dy unrounded, is not compared.)
static void t_linear_bwd_rounding(int M, int K, int N, int bias) {
    Buf x = bnormal((size_t)M * K, 0, 1), w = bnormal((size_t)N * K, 0, 0.2), dy = bnormal((size_t)M * N, 0, 1);
    Buf dx = bnormal((size_t)M * K, 0, 1), dw = bnormal((size_t)N * K, 0, 1), db = bnormal(N, 0, 1);
    for (size_t i = 0; i < x.n; i++) R(x)[i] = bf16_round(R(x)[i]);
    for (size_t i = 0; i < w.n; i++) R(w)[i] = bf16_round(R(w)[i]);
    x = bop(x), breset(&w);
    real *dy_rounded = fc_malloc(bbytes(&dy));
    for (size_t i = 0; i < dy.n + GUARD; i++) dy_rounded[i] = bf16_round(R(dy)[i]);
    g_cpu->upload(dy.c, dy_rounded, bbytes(&dy));
    free(dy_rounded);
    WHAT("M=%d K=%d N=%d%s, x and w bf16 values, dy rounded to bf16 on the CPU side only", M, K, N,
         bias ? " bias" : "");
    BOTH(be->linear_bwd(P(dx), GRAD_SET, P(dw), bias ? P(db) : NULL, GRAD_SET, P(dy), PO(x, 0), P(w), M, K, N));
    double tol = g_tol;
    g_tol = TOL;
    compare("cuda_linear_bwd_rounding", "dx", &dx, "dw", &dw, NULL);
    g_tol = tol;
    FREE(&x, &w, &dy, &dx, &dw, &db);
}

// Awkward sizes, then the shapes of the tiny and small configs; `big`: the 24 GB preset's.
static void linear_cases(int big) {
    t_linear(300, 96, 200, 1, 0), t_linear(300, 96, 200, 0, NULL_DX), t_linear(77, 33, 5, 1, 0);
    t_linear(1, 17, 3, 1, 0), t_linear(5, 1000, 7, 1, 0);
    t_linear(896, 64, 192, 1, 0), t_linear(896, 256, 64, 1, 0);      // tiny: qkv, fc2
    t_linear(14, 64, 576, 1, 0), t_linear(896, 48, 64, 1, NULL_DX);  // tiny: adaLN, patch embedding
    t_linear(896, 128, 384, 1, 0), t_linear(896, 512, 128, 1, 0), t_linear(896, 192, 128, 1, NULL_DX);  // small
    if (big) t_linear(7168, 256, 768, 1, 0), t_linear(7168, 1024, 256, 1, 0);
    if (big) t_linear(1031, 1536, 4608, 1, 0), t_linear(1031, 6144, 1536, 1, 0), t_linear(7, 1536, 3072, 1, 0);
    // M, N, K off multiples of 8, with and without bias; operands off 16 bytes
    t_linear(77, 33, 5, 0, 0), t_linear(13, 7, 9, 1, NULL_DX), t_linear(1, 17, 3, 0, 0), t_linear(129, 15, 63, 1, 0);
    t_linear(6, 5, 0, 0, 0);  // N = 0: dy @ w is 0 (GRAD_SET must still write dx)
    t_linear(0, 5, 7, 1, 0);  // M = 0: sums over no rows (GRAD_SET must still write dw and db)
    t_linear_at(77, 33, 5, 1, 0, 1), t_linear_at(300, 96, 200, 1, 0, 3), t_linear_at(13, 8, 24, 0, 0, 2);
    t_linear_at(7, 64, 576, 1, 0, 2);
    for (int shift = 0; shift < 4; shift++) t_linear_exact(37, 51, 21, shift & 1, shift);  // N K = 1071: odd
    t_linear_exact(64, 64, 48, 1, 0), t_linear_exact(3, 1, 5, 1, 0), t_linear_exact(2, 1, 3, 0, 1);  // n 3, 2
}

// The MLP's linears fused with the GELU between them, against the CPU's compositions: x (M, K) ->
// pre, y = GELU(pre) (M, N), then the backward of a second linear (M, N) -> (M, K) whose input is
// y (an operand, as x). On bf16 the backward's GELU runs in cuBLASLt's epilogue (DGELU) where the
// aux matrix's rows are a multiple of 8 (N here); the emulation counts those products, unless
// `refuse` (its hook's mode, 1 or 2) makes cuBLASLt refuse, when it falls back on the GEMM and the
// GELU kernel. The forward is never fused (cuda/linear.cu): the emulation counts no GELU products.
static int g_dgelu_route;  // the dgelu_epilogue route (cuda_common.cuh) in this pass
static void t_linear_gelu(int M, int K, int N, int bias, int refuse) {
    Buf x = bop(bnormal((size_t)M * K, 0, 1)), w = bnormal((size_t)N * K, 0, 0.3), b = bnormal(N, 0, 1);
    Buf pre = bnormal((size_t)M * N, 0, 1), y = bop(bnormal((size_t)M * N, 0, 1));
    Buf w2 = bnormal((size_t)K * N, 0, 0.3), dy = bnormal((size_t)M * K, 0, 1), dpre = bnormal((size_t)M * N, 0, 1);
    Buf dw2 = bnormal((size_t)K * N, 0, 1), db2 = bnormal(K, 0, 1);
    WHAT("M=%d K=%d N=%d%s%s%s", M, K, N, bias ? " bias" : "", refuse ? ", cuBLASLt refusing" : "",
         g_dgelu_route ? ", DGELU route" : "");
    int hooked = lt_hooked();
    if (hooked && refuse) fc_emu_cublaslt_hook(refuse);
    long f0 = lt_gelu_products(0), d0 = lt_gelu_products(1);
    BOTH(be->linear_gelu_fwd(P(pre), P(y), P(x), P(w), bias ? P(b) : NULL, M, K, N));
    compare("cuda_linear_gelu_fwd", "pre", &pre, "y", &y, NULL);
    bshare(&y), bshare(&pre);  // the backward's inputs the same on both sides
    BOTH(be->linear_gelu_bwd(P(dpre), P(dw2), bias ? P(db2) : NULL, bias ? GRAD_ADD : GRAD_SET, P(dy), P(y), P(w2),
                             P(pre), M, N, K));  // the parameter gradients added into, or overwritten
    compare("cuda_linear_gelu_bwd", "dpre", &dpre, "dw", &dw2, "db", bias ? &db2 : NULL, NULL);
    if (hooked) {
        long f = lt_gelu_products(0) - f0, d = lt_gelu_products(1) - d0;
        long want = g_dgelu_route && !refuse && N % 8 == 0;
        if (refuse) fc_emu_cublaslt_hook(0);
        check(f == 0 && d == want, nm("cuda_linear_gelu_epilogue"),
              "%s: GELU epilogue products %ld, DGELU %ld (expected 0 and %ld)", g_what, f, d, want);
    }
    FREE(&x, &w, &b, &pre, &y, &w2, &dy, &dpre, &dw2, &db2);
}

// The epilogue's shapes (hidden width a multiple of 8), with and without a bias, one whose hidden
// width is not (the GELU kernels), the small config's MLP, and cuBLASLt refusing in either way.
// Both ways of the backward: the GEMM then the GELU kernel, and the dgelu_epilogue route.
static void linear_gelu_cases(void) {
    for (g_dgelu_route = 0; g_dgelu_route < 2; g_dgelu_route++) {
        backend_cuda_set_route("dgelu_epilogue", g_dgelu_route);
        t_linear_gelu(300, 96, 200, 1, 0), t_linear_gelu(7, 64, 576, 0, 0), t_linear_gelu(45, 64, 36, 1, 0);
        t_linear_gelu(896, 128, 512, 1, 0);
        t_linear_gelu(33, 40, 64, 1, 1), t_linear_gelu(33, 48, 64, 1, 2);
    }
    g_dgelu_route = 0, backend_cuda_set_route("dgelu_epilogue", 0);
}

// The bf16 forward's fallback: on the emulation, cuBLASLt refuses through the hook as it does for a
// configuration it has no kernel for, in the two places it can: cublasLtMatmul answers NOT_SUPPORTED
// for a configuration it took before, or the heuristic finds no algorithm. Either way the forward
// takes the cuBLAS path (bias kernel, GEMM with beta = 1), gives the same answer, and remembers it.
static void t_linear_lt_fallback(void) {
    if (!lt_hooked()) {
        printf("INFO cuda_linear_lt_fallback_bf16: left out: the cuBLASLt refusal hook is the CUDA emulation's\n");
        return;
    }
    int M = 45, K = 27, N = 19;
    Buf x = bop(bnormal((size_t)M * K, 0, 1)), w = bnormal((size_t)N * K, 0, 0.2), b = bnormal(N, 0, 1);
    Buf y = bnormal((size_t)M * N, 0, 1);
    WHAT("M=%d K=%d N=%d bias, cublasLtMatmul NOT_SUPPORTED after one product", M, K, N);
    long n0 = fc_emu_cublaslt_hook(0);
    g_gpu->linear_fwd(y.g, x.g, w.g, b.g, M, K, N);
    long n1 = fc_emu_cublaslt_hook(2);
    real *lt = fetch(g_gpu, y.g, y.n);
    breset(&y);
    BOTH(be->linear_fwd(P(y), P(x), P(w), P(b), M, K, N));  // refused: the cuBLAS path
    compare("cuda_linear_lt_fallback", "y", &y, NULL);
    long n2 = fc_emu_cublaslt_hook(0);
    real *fb = fetch(g_gpu, y.g, y.n);
    breset(&y);
    g_gpu->linear_fwd(y.g, x.g, w.g, b.g, M, K, N);  // the hook lifted: still the cuBLAS path
    long n3 = fc_emu_cublaslt_hook(-1);
    real *again = fetch(g_gpu, y.g, y.n);
    double d = rel_err(fb, lt, y.n);
    int same = !memcmp(again, fb, sizeof(real) * y.n);
    check(n1 == n0 + 1 && n2 == n1 && n3 == n2 && d <= TOL && same, nm("cuda_linear_lt_refused"),
          "%s: cuBLASLt products %ld before the refusal, %ld with it, %ld after it was lifted (1, 0, 0: the "
          "cuBLAS path remembered); cuBLAS path against cuBLASLt rel err %.1e (tol %.0e); once more %s",
          g_what, n1 - n0, n2 - n1, n3 - n2, d, TOL, SAME(same));
    free(lt), free(fb), free(again);
    FREE(&x, &w, &b, &y);

    long h0 = fc_emu_cublaslt_hook(1);  // no algorithm for two new configurations
    t_linear(23, 29, 31, 1, 0), t_linear(23, 29, 31, 0, 0);
    long h1 = fc_emu_cublaslt_hook(0);
    t_linear(23, 29, 31, 1, 0), t_linear(23, 29, 31, 0, 0);
    long h2 = fc_emu_cublaslt_hook(-1);
    check(h1 == h0 && h2 == h0, nm("cuda_linear_lt_no_algorithm"),
          "M=23 K=29 N=31 with and without bias, no algorithm from the heuristic: cuBLASLt products %ld, then %ld "
          "with the hook lifted (0, 0: the cuBLAS path remembered)",
          h1 - h0, h2 - h1);
}

// The bf16 mirror of registered weights follows every way the parameters change: a GEMM reading a
// weight after an upload, an optimizer step (which writes the mirror itself when it is current), a
// copy or a zero must see the new values. Against the CPU, and byte for byte against the same GEMM
// on the GPU from an unregistered copy of the weight (converted afresh on each call): the weight
// sits on a multiple of 128 elements, so both bf16 copies share their alignment and cuBLAS its
// choice of kernel.
static void t_weights_mirror(int M, int K, int N) {
    size_t nw = (size_t)N * K, off = (nw + 3 + 127) / 128 * 128, n = off + 2 * nw + 5;
    Buf arena = bnormal(n, 0, 0.2), other = bnormal(n, 0, 0.5), x = bop(bnormal((size_t)M * K, 0, 1));
    Buf y = bnormal((size_t)M * N, 0, 1), g = bnormal(n, 0, 1), m = bnormal(n, 0, 1), v = bnormal(n, 0, 1);
    Buf plain = bnormal(nw, 0, 1), y_plain = bnormal((size_t)M * N, 0, 1);
    memset(m.init, 0, n * sizeof(float)), memset(v.init, 0, n * sizeof(float));
    breset(&m), breset(&v);
    make_grads(&g, 1);
    size_t lo8 = off - 5, n8 = nw / 2 + 5;  // the 8-bit steps: part of the weight and what lies before it
    Adam8 a8 = adam8_new(n8);
    BOTH(be->register_weights(P(arena), n));
    const char *how[] = {"first use",  "after upload", "after adamw_fp32 (lr 0.5)",       "after copy",
                         "after zero", "after adamw_8bit on part", "after upload and adamw_8bit"};
    for (int k = 0; k < 7; k++) {
        if (k == 1 || k == 6) {
            philox_fill_normal(arena.init, n + GUARD, 0, 0.3f, g_seed, g_draw++, RNG_TEST, 0);
            breset(&arena);
        }
        if (k == 2) {
            AdamHyper h = hyper(1);
            h.lr = 0.5f;
            BOTH(be->adamw_fp32(P(arena), P(g), P(m), P(v), n, h));
        }
        if (k == 3) BOTH(be->copy(P(arena) + off, P(other), sizeof(real) * nw / 2));
        if (k == 4) BOTH(be->zero(P(arena) + off + nw / 3, sizeof(real) * nw / 3));
        if (k == 5 || k == 6) {
            AdamHyper h = hyper(k - 4);
            h.lr = 0.5f;
            BOTH(be->adamw_8bit(P(arena) + lo8, P(g), PU(a8.m8), PU(a8.v8), P(a8.am), P(a8.av), P(a8.cm), P(a8.cv),
                                n8, h));
        }
        WHAT("M=%d K=%d N=%d, weight at offset %zu of a registered allocation of %zu, %s", M, K, N, off, n, how[k]);
        BOTH(be->linear_fwd(P(y), P(x), P(arena) + off, NULL, M, K, N));
        compare("cuda_weights_mirror", "y", &y, NULL);
        g_gpu->copy(plain.g, (real *)arena.g + off, sizeof(real) * nw);
        g_gpu->linear_fwd(y_plain.g, x.g, plain.g, NULL, M, K, N);
        real *a = fetch(g_gpu, y.g, (size_t)M * N), *b = fetch(g_gpu, y_plain.g, (size_t)M * N);
        int same = !memcmp(a, b, sizeof(real) * M * N);
        check(same, nm("cuda_weights_mirror_bytes"), "%s: the GEMM from the mirror and from a fresh copy %s", g_what,
              SAME(same));
        free(a), free(b);
    }
    BOTH(be->unregister_weights(P(arena)));
    adam8_free(&a8);
    FREE(&arena, &other, &x, &y, &g, &m, &v, &plain, &y_plain);
}

// The mirror after writes that overlap the registered parameters only in part: a copy that starts
// before them and ends inside, a zero that starts inside and runs past their end. Either must
// make the GEMM see the new values.
static void t_weights_mirror_straddle(int M, int K, int N) {
    size_t nw = (size_t)N * K, pre = 128, n = pre + nw + 128;
    Buf arena = bnormal(n, 0, 0.2), other = bnormal(n, 0, 0.5), x = bop(bnormal((size_t)M * K, 0, 1));
    Buf y = bnormal((size_t)M * N, 0, 1);
    BOTH(be->register_weights(P(arena) + pre, nw));
    const char *how[] = {"first use", "after a copy from before them into their first half",
                         "after a zero from their second half to past their end"};
    for (int k = 0; k < 3; k++) {
        if (k == 1) BOTH(be->copy(P(arena) + pre / 2, P(other), sizeof(real) * (pre / 2 + nw / 2)));
        if (k == 2) BOTH(be->zero(P(arena) + pre + nw / 2, sizeof(real) * (nw - nw / 2 + 64)));
        WHAT("M=%d K=%d N=%d, weights registered %zu values into their allocation, %s", M, K, N, pre, how[k]);
        BOTH(be->linear_fwd(P(y), P(x), P(arena) + pre, NULL, M, K, N));
        compare("cuda_weights_mirror_straddle", "y", &y, NULL);
    }
    BOTH(be->unregister_weights(P(arena) + pre));
    FREE(&arena, &other, &x, &y);
}

void cuda_linear_cases(int big) {
    linear_cases(big);
    linear_gelu_cases();
}

void cuda_linear_bf16_cases(int big) {
    long lt0 = lt_products();
    g_linear_fwds = 0;
    linear_cases(big);
    if (lt_hooked())
        check(lt_products() - lt0 == g_linear_fwds, "cuda_linear_lt_used_bf16",
              "%ld of the %d forwards above through cublasLtMatmul", lt_products() - lt0, g_linear_fwds);
    t_linear_lt_fallback();
    linear_gelu_cases();
    t_weights_mirror(300, 96, 200), t_weights_mirror(7, 64, 576);
    t_weights_mirror_straddle(45, 27, 19);
    t_linear_bwd_rounding(77, 33, 21, 1), t_linear_bwd_rounding(77, 33, 21, 0);
}
