// half.h: IEEE 754 binary16 (F16) values, as latent datasets store them and safetensors files hold
// them.
#ifndef FRAMECHAIN_HALF_H
#define FRAMECHAIN_HALF_H

#include <stddef.h>
#include <stdint.h>

// The F16 nearest to v (ties to even); beyond the largest finite F16 (65504) the infinity of its
// sign, NaN a NaN.
uint16_t half_from_float(float v);
// The value of an F16, exactly.
float half_to_float(uint16_t h);
// The first of n little-endian F16 values at bytes that is inf or NaN (its exponent all ones), or -1.
long half_first_nonfinite(const uint8_t *bytes, size_t n);

#endif
