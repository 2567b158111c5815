// exp_poly.h: e^x in float for the CPU backend's hot loops (GELU, the softmax of attention), in
// plain arithmetic that the compiler vectorises: a call to the C library's expf keeps a loop
// scalar. Within 2 ulp of the exact value over the whole float range (tests/backend/test_exp_poly.c checks
// it against exp in double), the same bytes on every machine and C library.
//
// e^x = 2^n e^r, n = round(x / ln 2), r = x - n ln 2 (in two parts, ln 2 = LN2_HI + LN2_LO, LN2_HI
// with enough trailing zero bits that n LN2_HI is exact); e^r, |r| <= ln 2 / 2, by its Taylor
// series to r^7 (the first term left out, r^8 / 8!, is below 6e-9 of the sum); 2^n as two powers
// of two built in the exponent bits, so that subnormal results come out right.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#define EXP_POLY_MAX 88.72283935546875f  // above: overflow, +inf (the largest x with e^x finite)
#define EXP_POLY_MIN -104.0f             // below: 0 (e^-104 is under half the smallest subnormal)

static inline float exp_poly_pow2(int32_t n) {  // 2^n, -126 <= n <= 127
    int32_t bits = (int32_t)((uint32_t)(n + 127) << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float exp_poly(float x) {
    const float LOG2E = 1.44269504088896341f, LN2_HI = 0.693145751953125f, LN2_LO = 1.42860682030941723e-6f;
    const float ROUND = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    float xc = x < EXP_POLY_MIN ? EXP_POLY_MIN : x > EXP_POLY_MAX ? EXP_POLY_MAX : x;
    xc = xc == xc ? xc : 0.f;  // NaN: computed on 0, returned as NaN below
    float nf = (xc * LOG2E + ROUND) - ROUND;
    float r = (xc - nf * LN2_HI) - nf * LN2_LO;
    float p = 1.f / 5040;
    p = p * r + 1.f / 720;
    p = p * r + 1.f / 120;
    p = p * r + 1.f / 24;
    p = p * r + 1.f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.f;
    p = p * r + 1.f;
    int32_t n = (int32_t)nf, n1 = n >> 1;  // n in [-150, 128]: two halves in [-75, 64]
    float y = p * exp_poly_pow2(n1) * exp_poly_pow2(n - n1);
    y = x > EXP_POLY_MAX ? INFINITY : y;
    return x == x ? y : x;
}

// A loop over such arithmetic in its own function, compiled three times on x86-64: for AVX-512 (16
// floats a vector), for AVX2 (8) and for the baseline (SSE2, 4), chosen when the program loads. No
// FMA in any (the build's -ffp-contract=off keeps the AVX-512 clone from fusing), so all round every
// operation alike: the same bytes on every x86-64 CPU. (The build's -fno-trapping-math lets the
// compiler turn the range checks into selects, so that such loops vectorise at all.)
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPU_VECTOR_CLONES
#endif
