// cpu_optim.c: placeholder while the optimizer ops are written.
#include "cpu_optim.h"

void cpu_adamw_fp32(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h) { fc_die("adamw_fp32: not written yet"); }
void cpu_adamw_8bit(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m, float *absmax_v,
                    const float *code_m, const float *code_v, size_t n, AdamHyper h) { fc_die("adamw_8bit: not written yet"); }
double cpu_sum_squares(const real *x, size_t n, size_t *nonfinite) { fc_die("sum_squares: not written yet"); }
void cpu_ema_update(real *ema, const real *param, float decay, size_t n) { fc_die("ema_update: not written yet"); }
