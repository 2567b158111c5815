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

#endif
