// quant8.h: the 8-bit codes of the optimizer state: dynamic (non-linear) code maps, and
// block-wise quantisation against them.
#ifndef FRAMECHAIN_QUANT8_H
#define FRAMECHAIN_QUANT8_H

#include <stddef.h>
#include <stdint.h>

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
// matters where double runs at 1/64 of the float rate (GeForce cards, cuda/optim.cu).
#define QUANT8_TABLE 512
// Fills table[256..511] from the code map in table[0..255].
void quant8_table(float table[QUANT8_TABLE]);
// quant8_encode(table, x) for every x, by the table.
uint8_t quant8_encode_table(const float table[QUANT8_TABLE], float x);

#endif
