// test_exp_poly.c: the CPU backend's vectorised exponential (exp_poly.h) against exp.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "backend/cpu/exp_poly.h"

// exp_poly (the CPU backend's vectorised exp) against exp in double: every 997th float (some 4.3
// million, both signs, normal and subnormal inputs and results) within 2 ulp of the exact value
// rounded to float (an ulp of a subnormal result being the smallest subnormal), and the edges.
static double ulps_from(float got, double want) {
    float w = (float)want;
    if (isinf(w)) return isinf(got) && got > 0 ? 0 : INFINITY;
    double ulp = w < 1.1754943508222875e-38f ? 1.401298464324817e-45 : nextafterf(w, INFINITY) - w;
    return fabs((double)got - want) / ulp;
}
static void test_exp_poly(void) {
    double worst = 0;
    float at = 0;
    long n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu; u += 997) {
        uint32_t bits = (uint32_t)u;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x)) continue;
        double e = ulps_from(exp_poly(x), exp((double)x));
        n++;
        if (!(e <= worst)) worst = e, at = x;
    }
    check(worst <= 2, "exp_poly_within_2_ulp", "%ld floats: worst %.2f ulp, at x = %.9g", n, worst, at);
    float big = exp_poly(89.f), tiny = exp_poly(-110.f), sub = exp_poly(-100.f), nan = exp_poly(NAN);
    check(isinf(exp_poly(INFINITY)) && exp_poly(-INFINITY) == 0 && isinf(big) && tiny == 0 && isnan(nan) &&
              sub > 0 && ulps_from(sub, exp(-100.0)) <= 2 && exp_poly(0.f) == 1,
          "exp_poly_edges", "e^inf %g, e^-inf %g, e^89 %g, e^-110 %g, e^-100 %g (a subnormal), e^NaN %g, e^0 %g",
          exp_poly(INFINITY), exp_poly(-INFINITY), big, tiny, sub, nan, exp_poly(0.f));
}

// CPU_VECTOR_CLONES compiles a loop for AVX-512, AVX2 and the baseline, and promises the same bytes
// from each: none may fuse a multiply and an add (the build's -ffp-contract=off) or round otherwise.
// The same loop as GELU's (exp_poly inside, a multiply and an add after it) compiled for each target
// by hand, run on a million values, compared byte for byte; a target this CPU lacks is left out.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GELU_LIKE_SPAN(name, attr)                                                                          \
    attr static void name(float *y, const float *x, int n) {                                                \
        for (int i = 0; i < n; i++) {                                                                       \
            float v = x[i], u = 0.7978845608f * (v + 0.044715f * v * v * v);                                \
            y[i] = v * (1 / (1 + exp_poly(-2 * u))) + 0.25f * v * x[n - 1 - i];                             \
        }                                                                                                   \
    }
GELU_LIKE_SPAN(span_avx512, __attribute__((target("avx512f"))))
GELU_LIKE_SPAN(span_avx2, __attribute__((target("avx2"))))
GELU_LIKE_SPAN(span_baseline, )

static void test_vector_clones(void) {
    enum { N = 1 << 20 };
    float *x = fc_malloc(sizeof(float) * N), *base = fc_malloc(sizeof(float) * N), *y = fc_malloc(sizeof(float) * N);
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) s = s * 1664525u + 1013904223u, x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 20;
    span_baseline(base, x, N);
    char tried[64] = "baseline";
    long differ = 0;
    if (__builtin_cpu_supports("avx2")) {
        span_avx2(y, x, N);
        for (int i = 0; i < N; i++) differ += memcmp(&y[i], &base[i], sizeof(float)) != 0;
        strcat(tried, ", AVX2");
    }
    if (__builtin_cpu_supports("avx512f")) {
        span_avx512(y, x, N);
        for (int i = 0; i < N; i++) differ += memcmp(&y[i], &base[i], sizeof(float)) != 0;
        strcat(tried, ", AVX-512");
    }
    check(differ == 0, "vector_clones_same_bytes", "%s on %d values of a GELU-like loop: %ld values differ from the "
          "baseline's", tried, N, differ);
    free(x), free(base), free(y);
}
#else
static void test_vector_clones(void) {}
#endif

int main(void) {
    fc_set_threads(fc_default_threads());
    test_exp_poly();
    test_vector_clones();
    return g_failed ? 1 : 0;
}
