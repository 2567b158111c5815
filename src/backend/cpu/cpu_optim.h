// cpu_optim.h: the CPU backend's optimizer ops (AdamW in fp32 and 8 bits, gradient norm, EMA).
// See backend.h for their contracts.
#ifndef FRAMECHAIN_CPU_OPTIM_H
#define FRAMECHAIN_CPU_OPTIM_H

#include "backend/backend.h"

void cpu_adamw_fp32(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h);
void cpu_adamw_8bit(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m, float *absmax_v,
                    const float *code_m, const float *code_v, size_t n, AdamHyper h);
void cpu_adamw_8bit_jobs(const Adam8Job *jobs, int njobs, const float *code_m, const float *code_v);
// 1 (default): cpu_adamw_8bit and cpu_adamw_8bit_jobs take its AVX2 form where the CPU has one; 0: the scalar reference
// form only (the tests compare the two byte for byte).
void cpu_adamw_8bit_vector(int on);
double cpu_sum_squares(const real *x, size_t n, size_t *nonfinite);
void cpu_ema_update(real *ema, const real *param, float decay, size_t n);

#endif
