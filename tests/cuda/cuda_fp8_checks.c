// cuda_fp8_checks.c: the fp8 routes of test_cuda (see test_cuda.c; cuda/fp8.cu, cuda/linear.cu), on
// the "cuda" table. fp8_fwd runs the linear forward's GEMM on E4M3 copies of x and w, fp8_dgrad the
// backward's dx GEMM on w in E4M3 and dy in E5M2, fp8_wgrad its dw GEMM on x in E4M3 and dy in
// E5M2; each copy with one power-of-two scale, where cuBLASLt has fp8 kernels (sm_89, sm_90).
// Each route is checked
//  - against a reference of its own arithmetic, written here apart from the kernels: the bf16
//    values (the same on both sides; dy rounded to bf16 as the backward rounds it) scaled by 2^e,
//    e the largest integer that keeps the tensor's absolute maximum within the format's largest
//    value (448, 57344), rounded to the nearest fp8 value (ties to even), multiplied in double and
//    scaled back, plus the bias rounded to bf16 (TOL_FP8_EXACT), row by row;
//  - against the CPU's fp32 linear: what fp8 costs (3 or 2 bits of mantissa), within 1e-1 (2e-1 for
//    E5M2) of the output's largest value;
//  - for the calls it takes: every shape with M, K and N multiples of 16, no other (those take the
//    bf16 GEMM, the same bytes as with the route off, as do the outputs a route does not make);
//    cuBLASLt refusing (the emulation's hook) sends the call to the bf16 path too;
//  - on a zero x (scale 1: the output is the bias), inputs of very different sizes (the scale
//    follows), one row far larger than the others (the other rows then reach the format's
//    subnormals, where a scale off by a power of two shows), a NaN or inf in x (the output NaN,
//    never silently finite), and for the same bytes twice.
#include <math.h>

#include "cuda/cuda_harness.h"

extern long fc_emu_cublaslt_hook(int mode) __attribute__((weak));

// The route against its own arithmetic in double. The emulation sums the products in fp32 (about
// 1e-7); Hopper's fp8 tensor cores keep about 14 bits inside an instruction's partial sum before
// cuBLASLt promotes it to fp32 (DeepSeek-V3's report measured it on an H800), so some 1e-4.
#define TOL_FP8_EXACT 5e-4
#define TOL_FP8 1e-1        // the route against the CPU's fp32 linear

// The two fp8 formats: bits of mantissa, the smallest normal exponent, the largest value.
typedef struct {
    int mant, emin;
    double max;
} Fp8Format;
static const Fp8Format E4M3 = {3, -6, 448}, E5M2 = {2, -14, 57344};

// The nearest value of format f to x (ties to even), saturating at +-f.max; subnormals spaced
// 2^(emin - mant). NaN stays NaN.
static double fp8_round(double x, Fp8Format f) {
    if (x != x) return x;
    double a = fabs(x);
    if (a >= f.max) return x < 0 ? -f.max : f.max;
    int ex;
    frexp(a, &ex);  // a in [2^(ex-1), 2^ex)
    int e = ex - 1 < f.emin ? f.emin : ex - 1;
    double step = ldexp(1, e - f.mant);
    double r = nearbyint(a / step) * step;  // the default rounding: to nearest, ties to even
    return x < 0 ? -r : r;
}
static double e4m3_round(double x) { return fp8_round(x, E4M3); }

// The exponent e of the routes' scale 2^e for values v (n): largest with max |v| 2^e <= max.
static int fp8_exponent_for(const real *v, size_t n, double max) {
    double amax = 0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(v[i]));
    if (amax == 0) return 0;
    int e = 0;
    while (ldexp(amax, e + 1) <= max) e++;
    while (ldexp(amax, e) > max) e--;
    return e;
}
static int fp8_exponent(const real *v, size_t n) { return fp8_exponent_for(v, n, 448); }

static float bf16_value(float f) {  // the nearest bf16 value (round to nearest even)
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

// y (M, N) as the route computes it, in double, from x (M, K) and w (N, K) (bf16 values) and b (N).
static void fp8_reference(double *y, const real *x, const real *w, const real *b, int M, int K, int N) {
    int ex = fp8_exponent(x, (size_t)M * K), ew = fp8_exponent(w, (size_t)N * K);
    double *qx = fc_malloc(sizeof(double) * ((size_t)M * K + 1)), *qw = fc_malloc(sizeof(double) * ((size_t)N * K + 1));
    for (size_t i = 0; i < (size_t)M * K; i++) qx[i] = e4m3_round(ldexp(x[i], ex));
    for (size_t i = 0; i < (size_t)N * K; i++) qw[i] = e4m3_round(ldexp(w[i], ew));
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += qx[(size_t)m * K + k] * qw[(size_t)n * K + k];
            y[(size_t)m * N + n] = ldexp(s, -ex - ew) + (b ? bf16_value(b[n]) : 0);
        }
    free(qx), free(qw);
}

// The largest error of a row of got (M, N) against ref relative to that row's largest value: a row
// of small values (an x row far under the tensor's maximum, near E4M3's subnormals) counts as much
// as the others.
static double max_row_rel(const real *got, const double *ref, int M, int N) {
    double worst = 0;
    for (int m = 0; m < M; m++) {
        double d = 0, r = 0;
        for (int n = 0; n < N; n++) {
            double e = fabs(got[(size_t)m * N + n] - ref[(size_t)m * N + n]);
            if (!(e <= d)) d = e;
            r = fmax(r, fabs(ref[(size_t)m * N + n]));
        }
        double e = r > 0 ? d / r : d;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

// One forward at (M, K, N), x ~ N(0, xstd^2) (zero: xstd 0; outlier: its first row 4096 times
// larger, so that the others lie near E4M3's subnormals once scaled), the MLP's first linear with
// its GELU when gelu; then the route's calls, its error against its arithmetic (row by row) and
// against the CPU's fp32 linear, and the same bytes twice. refuse: the emulation's cuBLASLt refuses
// (hook mode 1).
static void t_fp8_linear_at(int M, int K, int N, int bias, int gelu, double xstd, int refuse, int outlier) {
    Buf x = bop(bnormal((size_t)M * K, 0, xstd > 0 ? xstd : 1)), w = bnormal((size_t)N * K, 0, 0.2);
    Buf b = bnormal(N, 0, 1), y = bnormal((size_t)M * N, 0, 1), g = bop(bnormal((size_t)M * N, 0, 1));
    if (xstd == 0 || outlier) {
        if (xstd == 0) memset(x.init, 0, sizeof(real) * x.n);
        for (int k = 0; outlier && k < K; k++) R(x)[k] *= 4096;
        x = bop(x);
    }
    for (size_t i = 0; i < w.n; i++) R(w)[i] = bf16_value(R(w)[i]);  // the bf16 mirror is w itself
    breset(&w);
    int takes = M % 16 == 0 && K % 16 == 0 && N % 16 == 0 && M > 0 && !refuse;
    WHAT("M=%d K=%d N=%d%s%s, x std %g%s%s", M, K, N, bias ? " bias" : "", gelu ? " +GELU" : "", xstd,
         outlier ? ", its first row 4096 times larger" : "", refuse ? ", cuBLASLt refusing" : "");
    if (refuse) fc_emu_cublaslt_hook(1);
    long c0 = backend_cuda_route_calls("fp8_fwd");
    if (gelu) BOTH(be->linear_gelu_fwd(P(y), PO(g, 0), PO(x, 0), P(w), bias ? P(b) : NULL, M, K, N))
    else BOTH(be->linear_fwd(P(y), PO(x, 0), P(w), bias ? P(b) : NULL, M, K, N))
    long taken = backend_cuda_route_calls("fp8_fwd") - c0;
    if (refuse) fc_emu_cublaslt_hook(0);
    check(taken == takes, nm("cuda_fp8_taken"), "%s: %ld calls through the route (want %d)", g_what, taken, takes);
    if (refuse)  // the shape the route takes, refused by cuBLASLt: the refusal is on record
        check(!!strstr(backend_cuda_fp8_refusal(), "fp8_fwd: cublasLtMatmulAlgoGetHeuristic answered NOT_SUPPORTED"),
              nm("cuda_fp8_refusal"), "%s: the refusal on record: '%s'", g_what, backend_cuda_fp8_refusal());
    real *got = fetch(g_gpu, y.g, y.n);
    if (takes) {
        double *ref = fc_malloc(sizeof(double) * y.n);
        fp8_reference(ref, R(x), R(w), bias ? R(b) : NULL, M, K, N);
        double e = max_row_rel(got, ref, M, N);
        check(e <= TOL_FP8_EXACT, nm("cuda_fp8_linear_arithmetic"), "%s: rel err %.1e (the worst row) against "
              "E4M3 operands multiplied in double (tol %.0e)", g_what, e, TOL_FP8_EXACT);
        free(ref);
        double tol = g_tol;
        g_tol = TOL_FP8;
        compare("cuda_fp8_linear", "y", &y, gelu ? "gelu" : NULL, &g, NULL);
        g_tol = tol;
    } else {  // the bf16 GEMM: the same bytes as with the route off
        backend_cuda_set_route("fp8_fwd", 0);
        gput(&y, y.init);
        if (gelu) g_gpu->linear_gelu_fwd(y.g, g.g, x.g, w.g, bias ? b.g : NULL, M, K, N);
        else g_gpu->linear_fwd(y.g, x.g, w.g, bias ? b.g : NULL, M, K, N);
        backend_cuda_set_route("fp8_fwd", 1);
        real *off = fetch(g_gpu, y.g, y.n);
        int same = !memcmp(off, got, sizeof(real) * y.n);
        check(same, nm("cuda_fp8_not_taken"), "%s: the output against the route off %s", g_what, SAME(same));
        free(off);
    }
    if (takes) {  // the same bytes again
        gput(&y, y.init);
        g_gpu->linear_fwd(y.g, x.g, w.g, bias ? b.g : NULL, M, K, N);
        real *again = fetch(g_gpu, y.g, y.n);
        int same = !memcmp(again, got, sizeof(real) * y.n);
        check(same, nm("cuda_fp8_determinism"), "%s: twice %s", g_what, SAME(same));
        free(again);
    }
    free(got);
    FREE(&x, &w, &b, &y, &g);
}

static void t_fp8_linear(int M, int K, int N, int bias, int gelu, double xstd, int refuse) {
    t_fp8_linear_at(M, K, N, bias, gelu, xstd, refuse, 0);
}

// The backward's fp8 routes, dy (M, N) rounded to bf16 (as the backward does) and then to E5M2 with
// its scale: fp8_dgrad, dx = or += dy w with w (N, K) in E4M3; fp8_wgrad, dw = or += dy^T x with x
// (M, K) in E4M3. The output the route makes against its arithmetic row by row (TOL_FP8_EXACT) and against
// the CPU (TOL_FP8_BWD); the others (dw and db, or dx and db) the bytes of the route off; the
// calls it takes. dystd: the output gradient's size; outlier: its first row 2^26 times larger (E5M2's
// 32 binades: the other rows then reach its subnormals, where a scale off by a power of two shows).
#define TOL_FP8_BWD 2e-1  // E5M2 keeps 2 bits of mantissa
static void t_fp8_bwd(int wgrad, int M, int K, int N, int bias, GradMode mode, double dystd, int outlier) {
    const char *route = wgrad ? "fp8_wgrad" : "fp8_dgrad";
    Buf x = bop(bnormal((size_t)M * K, 0, 1)), w = bnormal((size_t)N * K, 0, 0.2);
    Buf dy = bnormal((size_t)M * N, 0, dystd);
    Buf dx = bnormal((size_t)M * K, 0, 1), dw = bnormal((size_t)N * K, 0, 1), db = bnormal(N, 0, 1);
    for (size_t i = 0; i < w.n; i++) R(w)[i] = bf16_value(R(w)[i]);
    for (int n = 0; outlier && n < N; n++) R(dy)[n] *= 67108864;
    breset(&w), breset(&dy);
    int takes = M % 16 == 0 && K % 16 == 0 && N % 16 == 0 && M > 0;
    Buf *made = wgrad ? &dw : &dx;  // the route's output
    GradMode dx_mode = wgrad ? GRAD_ADD : mode, pmode = wgrad ? mode : GRAD_ADD;
    WHAT("%s M=%d K=%d N=%d%s, %s %s, dy std %g%s", route, M, K, N, bias ? " bias" : "", wgrad ? "dw" : "dx",
         mode == GRAD_ADD ? "added into" : "set", dystd, outlier ? ", its first row 2^26 times larger" : "");
    long c0 = backend_cuda_route_calls(route), s0 = backend_cuda_route_calls("fp8_dy_scale");
    BOTH(be->linear_bwd(P(dx), dx_mode, P(dw), bias ? P(db) : NULL, pmode, P(dy), PO(x, 0), P(w), M, K, N));
    long taken = backend_cuda_route_calls(route) - c0, scaled = backend_cuda_route_calls("fp8_dy_scale") - s0;
    check(taken == takes && scaled == (takes && bias), nm("cuda_fp8_bwd_taken"), "%s: %ld calls through the route "
          "(want %d), dy's scale from the bias pass %ld times (want %d)", g_what, taken, takes, scaled, takes && bias);
    Buf *outs[] = {&dx, &dw, &db};
    real *on[3] = {fetch(g_gpu, dx.g, dx.n), fetch(g_gpu, dw.g, dw.n), bias ? fetch(g_gpu, db.g, db.n) : NULL};
    if (takes) {
        real *dyb = fc_malloc(sizeof(real) * dy.n);
        for (size_t i = 0; i < dy.n; i++) dyb[i] = bf16_value(R(dy)[i]);
        const real *other = wgrad ? R(x) : R(w);  // the E4M3 operand
        size_t no = wgrad ? x.n : w.n;
        int ed = fp8_exponent_for(dyb, dy.n, E5M2.max), eo = fp8_exponent(other, no);
        double *qd = fc_malloc(sizeof(double) * dy.n), *qo = fc_malloc(sizeof(double) * no);
        double *ref = fc_malloc(sizeof(double) * made->n);
        for (size_t i = 0; i < dy.n; i++) qd[i] = fp8_round(ldexp(dyb[i], ed), E5M2);
        for (size_t i = 0; i < no; i++) qo[i] = e4m3_round(ldexp(other[i], eo));
        int rows = wgrad ? N : M, inner = wgrad ? M : N;
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < K; k++) {
                double acc = 0;
                for (int j = 0; j < inner; j++)  // dx[m,k] = sum_n dy[m,n] w[n,k]; dw[n,k] = sum_m dy[m,n] x[m,k]
                    acc += qd[wgrad ? (size_t)j * N + r : (size_t)r * N + j] * qo[(size_t)j * K + k];
                ref[(size_t)r * K + k] = ldexp(acc, -ed - eo) + (mode == GRAD_ADD ? R(*made)[(size_t)r * K + k] : 0);
            }
        double e = max_row_rel(on[wgrad], ref, rows, K);
        check(e <= TOL_FP8_EXACT, nm("cuda_fp8_bwd_arithmetic"), "%s: rel err %.1e (the worst row) against E5M2 "
              "dy and E4M3 %s multiplied in double (tol %.0e)", g_what, e, wgrad ? "x" : "w", TOL_FP8_EXACT);
        free(dyb), free(qd), free(qo), free(ref);
        double tol = g_tol;
        g_tol = TOL_FP8_BWD;
        compare("cuda_fp8_bwd", wgrad ? "dw" : "dx", made, NULL);
        g_tol = tol;
    }
    // the other outputs (all three where the route does not take the shape) as with the route off
    for (int i = 0; i < 3; i++) gput(outs[i], outs[i]->init);
    backend_cuda_set_route(route, 0);
    g_gpu->linear_bwd(dx.g, dx_mode, dw.g, bias ? db.g : NULL, pmode, dy.g, x.g, w.g, M, K, N);
    backend_cuda_set_route(route, 1);
    int same = 1;
    for (int i = 0; i < (bias ? 3 : 2); i++) {
        if (takes && i == wgrad) continue;
        real *off = fetch(g_gpu, outs[i]->g, outs[i]->n);
        same &= !memcmp(off, on[i], sizeof(real) * outs[i]->n);
        free(off);
    }
    check(same, nm("cuda_fp8_bwd_rest"), "%s: %s against the route off %s", g_what,
          !takes ? "dx, dw and db" : wgrad ? "dx and db" : "dw and db", SAME(same));
    free(on[0]), free(on[1]), free(on[2]);
    FREE(&x, &w, &dy, &dx, &dw, &db);
}

// Both backward routes at once: with the bias, dy's scale comes from the bias gradient's pass (its
// blocks' maxima) and serves both GEMMs, whose passes for a maximum are then w's and x's alone;
// without it, from a pass of each GEMM's own. The same scale, so dx and dw must be the same bytes
// either way: with an outlier (dy's last value 2^26 times larger: the scale set by the bias pass's
// last block) and with a NaN in dy (every dx and dw value then NaN, never finite).
static void t_fp8_bwd_shared(int M, int K, int N, int outlier, int nan) {
    Buf x = bop(bnormal((size_t)M * K, 0, 1)), w = bnormal((size_t)N * K, 0, 0.2), dy = bnormal((size_t)M * N, 0, 1);
    if (outlier) R(dy)[(size_t)M * N - 1] *= 67108864;
    if (nan) R(dy)[(size_t)(M / 2) * N + 3] = NAN;
    breset(&dy);
    Buf dx = bnormal((size_t)M * K, 0, 1), dw = bnormal((size_t)N * K, 0, 1), db = bnormal(N, 0, 1);
    long s0 = backend_cuda_route_calls("fp8_dy_scale"), a0 = backend_cuda_route_calls("fp8_amax");
    g_gpu->linear_bwd(dx.g, GRAD_SET, dw.g, db.g, GRAD_SET, dy.g, x.g, w.g, M, K, N);
    long scaled = backend_cuda_route_calls("fp8_dy_scale") - s0, passes = backend_cuda_route_calls("fp8_amax") - a0;
    real *dx1 = fetch(g_gpu, dx.g, dx.n), *dw1 = fetch(g_gpu, dw.g, dw.n);
    a0 = backend_cuda_route_calls("fp8_amax");
    g_gpu->linear_bwd(dx.g, GRAD_SET, dw.g, NULL, GRAD_SET, dy.g, x.g, w.g, M, K, N);
    long passes_alone = backend_cuda_route_calls("fp8_amax") - a0;
    real *dx2 = fetch(g_gpu, dx.g, dx.n), *dw2 = fetch(g_gpu, dw.g, dw.n);
    int same = !memcmp(dx1, dx2, sizeof(real) * dx.n) && !memcmp(dw1, dw2, sizeof(real) * dw.n);
    size_t finite = 0;
    for (size_t i = 0; i < dx.n; i++) finite += isfinite(dx1[i]) != 0;
    for (size_t i = 0; i < dw.n; i++) finite += isfinite(dw1[i]) != 0;
    check(scaled == 1 && passes == 2 && passes_alone == 4 && same && (nan ? finite == 0 : finite == dx.n + dw.n),
          nm("cuda_fp8_bwd_shared_scale"), "fp8_dgrad and fp8_wgrad M=%d K=%d N=%d%s%s: dy's scale from the bias "
          "pass %ld times (want 1), passes for a maximum %ld (want 2), without the bias %ld (want 4); dx and dw with "
          "the bias pass against those without it: %s; %zu of %zu values finite", M, K, N,
          outlier ? ", dy's last value 2^26 times larger" : "", nan ? ", a NaN in dy" : "", scaled, passes,
          passes_alone, SAME(same), finite, dx.n + dw.n);
    free(dx1), free(dw1), free(dx2), free(dw2);
    FREE(&x, &w, &dy, &dx, &dw, &db);
}

// x with one NaN (or inf): the route's scale is NaN, and so is every output; never finite numbers.
static void t_fp8_nonfinite(int nan) {
    int M = 32, K = 32, N = 16;
    Buf x = bnormal((size_t)M * K, 0, 1), w = bnormal((size_t)N * K, 0, 0.2), y = bnormal((size_t)M * N, 0, 1);
    R(x)[5 * K + 7] = nan ? NAN : INFINITY;
    x = bop(x);
    g_gpu->linear_fwd(y.g, x.g, w.g, NULL, M, K, N);
    real *got = fetch(g_gpu, y.g, y.n);
    size_t finite = 0;
    for (size_t i = 0; i < y.n; i++) finite += isfinite(got[i]) != 0;
    check(finite == 0, nm("cuda_fp8_nonfinite"), "M=%d K=%d N=%d, one %s in x: %zu of %zu outputs finite (want 0)",
          M, K, N, nan ? "NaN" : "inf", finite, y.n);
    free(got);
    FREE(&x, &w, &y);
}

// What this card's cuBLASLt says to the routes' GEMMs and their neighbours (cuda/fp8_probe.cu): the
// routes' three configurations must run (the emulation's rules are the sm_89 and sm_90 cards' as
// documented; a card that answers otherwise shows here which change it would take).
static void t_fp8_probe(void) {
    char probe[1024];
    backend_cuda_fp8_probe(probe, sizeof probe);
    int runs = 0;
    static const char *mine[] = {"fwd as the route: matmul SUCCESS", "fwd+bias as the route: matmul SUCCESS",
                                 "bwd as the route: matmul SUCCESS"};
    for (int i = 0; i < 3; i++) runs += strstr(probe, mine[i]) != NULL;
    check(runs == 3, nm("cuda_fp8_probe"), "%d of the routes' 3 fp8 GEMM configurations run here; cuBLASLt: %s",
          runs, probe);
}

void cuda_fp8_cases(void) {
    if (g_gpu == g_cpu) {
        printf("INFO cuda_fp8: left out with --cpu-as-cuda (the CPU has no fp8 route)\n");
        return;
    }
    t_fp8_probe();
    backend_cuda_set_route("fp8_fwd", 1);
    // the tiny and small configs' linears: qkv, proj, fc1 (with its GELU), fc2; the patch embedding
    // (K = 48); the final layer (N = 48)
    t_fp8_linear(896, 64, 192, 1, 0, 1, 0), t_fp8_linear(896, 64, 64, 1, 0, 1, 0);
    t_fp8_linear(896, 64, 256, 1, 1, 1, 0), t_fp8_linear(896, 256, 64, 1, 0, 1, 0);
    t_fp8_linear(448, 128, 384, 1, 0, 1, 0), t_fp8_linear(448, 48, 128, 1, 0, 1, 0);
    t_fp8_linear(448, 128, 48, 1, 0, 1, 0);
    t_fp8_linear(48, 48, 32, 0, 0, 1, 0), t_fp8_linear(16, 16, 16, 1, 0, 1, 0);  // small
    t_fp8_linear(64, 32, 32, 1, 0, 1e-3, 0), t_fp8_linear(64, 32, 32, 1, 0, 300, 0);  // the scale follows x
    t_fp8_linear(64, 32, 32, 1, 0, 0, 0);                                           // x zero: the bias
    t_fp8_linear_at(64, 32, 32, 0, 0, 1, 0, 1), t_fp8_linear_at(16, 64, 16, 0, 0, 3, 0, 1);  // subnormals
    t_fp8_linear(32, 40, 32, 1, 0, 1, 0), t_fp8_linear(32, 32, 24, 1, 1, 1, 0);   // K, N off 16: bf16
    t_fp8_linear(37, 48, 32, 0, 0, 1, 0), t_fp8_linear(1, 16, 16, 1, 0, 1, 0);    // M off 16: bf16
    if (fc_emu_cublaslt_hook && !strcmp(g_gpu->name, "cuda")) t_fp8_linear(48, 80, 48, 1, 0, 1, 1);
    else printf("INFO cuda_fp8_refused_bf16: left out: the cuBLASLt refusal hook is the CUDA emulation's\n");
    if (!g_quick) t_fp8_linear(1792, 1536, 512, 1, 0, 1, 0);  // the preset's width
    t_fp8_nonfinite(1), t_fp8_nonfinite(0);
    backend_cuda_set_route("fp8_fwd", 0);

    // the backward's routes: the tiny config's qkv, proj, fc1, fc2; the output set and added into;
    // with and without the bias pass that rounds dy; gradients of 1e-4 and 1e3 (the scale follows);
    // an outlier row; M, K or N off 16
    for (int wg = 0; wg < 2; wg++) {
        const char *route = wg ? "fp8_wgrad" : "fp8_dgrad";
        backend_cuda_set_route(route, 1);
        t_fp8_bwd(wg, 896, 64, 192, 1, GRAD_ADD, 1, 0), t_fp8_bwd(wg, 896, 64, 64, 0, GRAD_SET, 1, 0);
        t_fp8_bwd(wg, 896, 64, 256, 1, GRAD_SET, 1, 0), t_fp8_bwd(wg, 896, 256, 64, 1, GRAD_ADD, 1, 0);
        t_fp8_bwd(wg, 48, 48, 32, 1, GRAD_ADD, 1e-4, 0), t_fp8_bwd(wg, 64, 32, 32, 0, GRAD_ADD, 1e3, 0);
        t_fp8_bwd(wg, 64, 32, 48, 1, GRAD_SET, 1, 1), t_fp8_bwd(wg, 16, 64, 16, 0, GRAD_ADD, 3, 1);
        t_fp8_bwd(wg, 33, 40, 32, 1, GRAD_ADD, 1, 0), t_fp8_bwd(wg, 33, 32, 24, 1, GRAD_SET, 1, 0);
        t_fp8_bwd(wg, 37, 48, 32, 1, GRAD_ADD, 1, 0);
        if (!g_quick) t_fp8_bwd(wg, 1792, 1536, 512, 1, GRAD_ADD, 1, 0);  // the preset's width
        backend_cuda_set_route(route, 0);
    }
    backend_cuda_set_route("fp8_dgrad", 1), backend_cuda_set_route("fp8_wgrad", 1);
    t_fp8_bwd_shared(896, 64, 256, 0, 0), t_fp8_bwd_shared(272, 48, 80, 1, 0), t_fp8_bwd_shared(64, 32, 48, 0, 1);
    t_fp8_bwd_shared(1040, 16, 48, 0, 0);  // five chunks of rows in the bias pass: their maxima too
    backend_cuda_set_route("fp8_dgrad", 0), backend_cuda_set_route("fp8_wgrad", 0);
    const char *refusal = backend_cuda_fp8_refusal();
    if (*refusal) printf("INFO cuda_fp8_refusal: the first fp8 GEMM cuBLASLt refused: %s\n", refusal);
}
