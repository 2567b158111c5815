// quant8.h: the 8-bit codes of the optimizer state: dynamic (non-linear) code maps, and
// block-wise quantisation against them.
#ifndef FRAMECHAIN_QUANT8_H
#define FRAMECHAIN_QUANT8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

// The 256 values of the signed dynamic code (for the first moment) and of the unsigned one (for the
// second moment), in [-1, 1] and [0, 1], sorted ascending, each containing 0 and 1 exactly.
void quant8_signed_code(float code[256]);
void quant8_unsigned_code(float code[256]);

// Index of the code value nearest to x (x already divided by the absmax): round to nearest, ties to
// the lower index; x beyond either end of the code gives that end's index, NaN gives 0.
uint8_t quant8_encode(const float code[256], float x);

// The optimizer's encoder table of a code map: the 256 values, then up[i] for i < 255, the smallest
// float x with 2x > code[i] + code[i + 1] exactly (and up[255] = +inf). quant8_encode decides the
// rounding by that midpoint test in double; the table turns it into one float comparison, which
// matters where double runs at 1/64 of the float rate (GeForce cards, cuda/optim.cu). Those
// QUANT8_ENCODER floats are all a binary search needs (the GPU's). Then, for the CPU, an index by
// the float's sign, exponent (2^-24 to 2^0; smaller and larger ones are clamped to the ends) and
// top 8 fraction bits, as bytes: the code of each bucket's smallest member. A bucket (under 0.4%
// of its values) is narrower than the gap between two thresholds (over 0.7%), so it holds at most
// one (quant8_table checks it): one lookup and one comparison replace the eight dependent steps of
// the search.
#define QUANT8_ENCODER 512
#define QUANT8_INDEX_EXP0 103  // the exponent field of 2^-24: the index's first row
#define QUANT8_INDEX_ROWS 25   // exponent fields 103 .. 127 (2^-24 .. 2^0)
#define QUANT8_INDEX_BYTES (2 * QUANT8_INDEX_ROWS * 256)
#define QUANT8_TABLE (QUANT8_ENCODER + QUANT8_INDEX_BYTES / 4)
// Fills table[256..] from the code map in table[0..255].
void quant8_table(float table[QUANT8_TABLE]);

// quant8_encode(table, x) for every x, by the table's index (tests/backend/test_optim.c checks every 251st
// float, every threshold and its neighbour, against the midpoint test). Also the CUDA backend's, on a
// table in shared memory (cuda/optim.cu, the adam8_warp route).
#ifdef __CUDACC__
#define QUANT8_HOST_DEVICE __host__ __device__
#else
#define QUANT8_HOST_DEVICE
#endif
static inline QUANT8_HOST_DEVICE uint8_t quant8_encode_table(const float table[QUANT8_TABLE], float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t e = (u >> 23) & 255, last = QUANT8_INDEX_EXP0 + QUANT8_INDEX_ROWS - 1;
    e = e < QUANT8_INDEX_EXP0 ? QUANT8_INDEX_EXP0 : e > last ? last : e;
    const uint8_t *index = (const uint8_t *)(table + QUANT8_ENCODER);
    unsigned c = index[((u >> 31) * QUANT8_INDEX_ROWS + (e - QUANT8_INDEX_EXP0)) * 256 + ((u >> 15) & 255)];
    c += (unsigned)(x >= table[256 + c]);  // past the bucket's threshold (up[255] = +inf: +inf itself)
    c = c < 255 ? c : 255;
    return (uint8_t)(x == x ? c : 0);  // NaN: 0, as the midpoint test
}

#endif
