// half.c: F16 conversion by bit manipulation (no hardware F16 needed): exact from F16, round to
// nearest even into it.
#include <math.h>
#include <string.h>

#include "base/half.h"

float half_to_float(uint16_t h) {
    int exp = h >> 10 & 31, mant = h & 1023;
    float v = exp == 0    ? ldexpf((float)mant, -24)
              : exp == 31 ? (mant ? NAN : INFINITY)
                          : ldexpf((float)(mant + 1024), exp - 25);
    return h >> 15 ? -v : v;
}

uint16_t half_from_float(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    uint32_t a = u & 0x7FFFFFFF;  // the float's exponent e (a >> 23) and fraction
    if (a > 0x7F800000) return sign | 0x7E00;   // NaN
    if (a >= 0x477FF000) return sign | 0x7C00;  // 65520 and up round to infinity
    if (a < 0x38800000) {                       // under 2^-14, the smallest normal F16: a subnormal
        if (a < 0x33000000) return sign;        // at most 2^-25, half the smallest subnormal: zero (a tie goes to 0)
        // value = mant 2^(e - 150); in units of the subnormals' 2^-24 that is mant >> (126 - e)
        uint32_t mant = (a & 0x7FFFFF) | 0x800000;
        int r = 126 - (int)(a >> 23);  // 14 .. 24
        uint32_t m = mant >> r, rest = mant & ((1u << r) - 1), halfway = 1u << (r - 1);
        if (rest > halfway || (rest == halfway && (m & 1))) m++;
        return sign | (uint16_t)m;  // m = 1024 is the smallest normal's bits, as it should be
    }
    uint32_t m = a >> 13, rest = a & 0x1FFF;  // the exponent and the top 10 fraction bits
    if (rest > 0x1000 || (rest == 0x1000 && (m & 1))) m++;  // a carry into the exponent is right
    return sign | (uint16_t)(m - (112u << 10));             // the exponent rebased from 127 to 15
}

long half_first_nonfinite(const uint8_t *bytes, size_t n) {
    for (size_t e = 0; e < n; e++)
        if ((bytes[2 * e + 1] & 0x7C) == 0x7C) return (long)e;
    return -1;
}
