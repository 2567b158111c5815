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

int main(void) {
    fc_set_threads(fc_default_threads());
    test_exp_poly();
    return g_failed ? 1 : 0;
}
