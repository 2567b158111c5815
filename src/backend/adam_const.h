// adam_const.h: one AdamW step's constants, computed once on the host and shared by the CPU's
// optimizer ops (src/backend/cpu/cpu_optim.c) and the CUDA kernels (cuda/optim.cu), so that both
// backends use the same floats.
#ifndef FRAMECHAIN_ADAM_CONST_H
#define FRAMECHAIN_ADAM_CONST_H

#include "backend/backend.h"  // AdamHyper

typedef struct {
    float b1, b2, one_m_b1, one_m_b2, eps, scale;
    float lr_wd;      // lr * weight_decay (decoupled weight decay, applied before the step)
    float step_size;  // lr / (1 - b1^t)
    float bc2;        // 1 - b2^t
    float ema_d, ema_w;  // the EMA's decay and 1 - decay (AdamHyper.ema)
} AdamConst;

AdamConst adam_const(AdamHyper h);

#endif
