// quant8.c: the dynamic ("dynamic tree") 8-bit code maps of the optimizer state and the encoder that
// rounds a value to the nearest entry.
//
// How the values are formed (the structure of bitsandbytes' create_dynamic_map, 7 exponent bits):
// a code's bits read, after the sign bit of the signed map, as z leading zeros (the decimal exponent),
// an indicator 1, and f fraction bits. Its value is  sign * 10^-z * q,  where q is one of the 2^f
// midpoints of [0.1, 1] cut into 2^f equal parts: q_k = 0.1 + 0.9 * (k + 0.5) / 2^f. The decades
// z = 0..6 carry f = B - z fraction bits, B = 6 for the signed map (sign bit spent) and 7 for the
// unsigned one, so large values are resolved finely and tiny ones only by their decade:
//   signed:   2 * (64 + 32 + ... + 1) = 254 values in +-[5.5e-7, 0.99297], then 0 and 1.0;
//   unsigned:     128 + 64 + ... + 2  = 254 values in   [3.25e-7, 0.99648], then 0 and 1.0.
// The all-zero pattern is 0; the one pattern left over (the signed map's "-0", the unsigned map's
// decade 10^-7 with no fraction bits) is given to 1.0, so that a block's absmax is stored exactly.
// The signed map is symmetric except for that 1.0: its most negative value is -0.99297, not -1.
#include "backend/quant8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void dynamic_code(float code[256], int is_signed) {
    int n = 0;
    int bits = is_signed ? 6 : 7;  // fraction bits of the top decade
    double scale = 1.0;            // 10^-z
    for (int z = 0; z <= 6; z++, scale /= 10.0) {
        int f = bits - z, count = 1 << f;
        for (int k = 0; k < count; k++) {
            double q = 0.1 + 0.9 * (k + 0.5) / count;
            code[n++] = (float)(scale * q);
            if (is_signed) code[n++] = (float)(-scale * q);
        }
    }
    code[n++] = 0.0f;
    code[n++] = 1.0f;
    // n == 256 by construction (2 * 127 or 254, plus two)
    qsort(code, (size_t)n, sizeof(float), cmp_float);
}

void quant8_signed_code(float code[256]) { dynamic_code(code, 1); }

void quant8_unsigned_code(float code[256]) { dynamic_code(code, 0); }

// The lower of the two code values around x: the largest i with code[i] <= x (0 when x is below the
// range, or NaN), at most 254 (x at or above the top value: 254 and 255). A binary search whose
// steps sum to 255, so it never reads past the table; branch-free (the comparisons become
// arithmetic): the inputs are random, and mispredicted branches cost several times the search.
static inline unsigned quant8_lower(const float code[256], float x) {
    unsigned i = 0;
    for (unsigned step = 128; step > 0; step >>= 1) i += step * (unsigned)(code[i + step] <= x);
    return i < 255 ? i : 254;
}

uint8_t quant8_encode(const float code[256], float x) {
    unsigned lo = quant8_lower(code, x);
    // Round to the nearer of code[lo] and code[lo + 1]; ties go to lo. In double, 2x and the sum of
    // two neighbouring entries of our maps (within a factor 2^29 of each other, or one of them 0) are
    // exact, so this compares with the true midpoint. x >= the top value stays 255.
    return (uint8_t)(lo + (unsigned)(2.0 * (double)x > (double)code[lo] + (double)code[lo + 1]));
}

// The encoder table's rounding by binary search: the lower code value, then its threshold.
static unsigned encode_search(const float table[QUANT8_TABLE], float x) {
    unsigned lo = quant8_lower(table, x);
    return lo + (unsigned)(x >= table[256 + lo]);  // NaN: false, as the midpoint test
}

void quant8_table(float table[QUANT8_TABLE]) {
    for (int i = 0; i < 255; i++) {
        double mid = (double)table[i] + (double)table[i + 1];  // exact, as in quant8_encode
        float up = (float)(mid / 2);                            // within one step of the answer
        if (!(2.0 * (double)up > mid)) up = nextafterf(up, INFINITY);
        while (2.0 * (double)nextafterf(up, -INFINITY) > mid) up = nextafterf(up, -INFINITY);
        table[256 + i] = up;
    }
    table[511] = INFINITY;
    // The index: for each bucket of floats (sign, exponent, top 8 fraction bits), the code of its
    // smallest member by the binary search. A negative float's bits grow as its value falls, so the
    // smallest member has the bucket's largest bits there.
    uint8_t *index = (uint8_t *)(table + QUANT8_ENCODER);
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t row = 0; row < QUANT8_INDEX_ROWS; row++)
            for (uint32_t m = 0; m < 256; m++) {
                uint32_t bits = sign << 31 | (QUANT8_INDEX_EXP0 + row) << 23 | m << 15, ends[2] = {bits, bits | 0x7fff};
                float a, b;
                memcpy(&a, &ends[sign], sizeof a), memcpy(&b, &ends[!sign], sizeof b);  // a <= b
                unsigned c = encode_search(table, a);
                if (encode_search(table, b) > c + 1)
                    fc_die("quant8: [%g, %g] holds two rounding thresholds: too wide for the encoder's index", a, b);
                index[(sign * QUANT8_INDEX_ROWS + row) * 256 + m] = (uint8_t)c;
            }
}
