// cpu_conv.h: the CPU backend's autoencoder ops (convolution, GroupNorm, pointwise functions, nearest
// upsampling, addition, attention over a map's positions). See backend.h for their contracts.
#ifndef FRAMECHAIN_CPU_CONV_H
#define FRAMECHAIN_CPU_CONV_H

#include "backend/backend.h"

void cpu_conv2d_fwd(real *y, const real *x, const real *w, const real *b, int B, int Cin, int H, int W, int Cout, int k,
                    int stride, const int pad[4]);
void cpu_group_norm_fwd(real *y, const real *x, const real *gamma, const real *beta, int B, int C, long HW, int groups,
                        real eps);
void cpu_act_fwd(real *y, const real *x, size_t n, int act);
void cpu_upsample2x_fwd(real *y, const real *x, int B, int C, int H, int W);
void cpu_affine_fwd(real *y, const real *x, size_t n, real a, real b);
void cpu_add_fwd(real *y, const real *a, const real *b, size_t n);
size_t cpu_conv_tile_bytes(void);
void cpu_image_attn_fwd(real *out, const real *q, const real *k, const real *v, int B, int C, long N);

#endif
