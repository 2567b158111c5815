// cpu_attention.h: the CPU backend's softmax attention (cpu_attention.c); contracts in backend.h.
#ifndef FRAMECHAIN_CPU_ATTENTION_H
#define FRAMECHAIN_CPU_ATTENTION_H

#include "backend/backend.h"

void cpu_attn_fwd(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H);
void cpu_attn_bwd(real *dqkv, const real *dout, const Operand *out_op, const Operand *qkv_op, const real *lse,
                  AttnLayout lay, int D, int H);

// The same ops by the path of long sequences (OpenBLAS) at every length, which cpu_attn_fwd and
// cpu_attn_bwd take above a few dozen multiply-adds a product: tests/backend/test_attention.c
// checks that the short sequences' path gives the same bytes.
void cpu_attn_fwd_long(Operand *out_op, real *lse, const Operand *qkv_op, AttnLayout lay, int D, int H);
void cpu_attn_bwd_long(real *dqkv, const real *dout, const Operand *out_op, const Operand *qkv_op, const real *lse,
                       AttnLayout lay, int D, int H);

#endif
