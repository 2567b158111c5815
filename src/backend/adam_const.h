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

// A scaled gradient the step takes: no larger than 1.8e19, whose square (in v) is still a float
// (FLT_MAX is 1.84e19 squared). A larger one, as a run blowing up without grad_clip makes, is skipped
// as a NaN or infinite one is (p, m and v stay as they are): v would become infinite, the next step's
// update 0 / inf, and the 8-bit state's dequantisation of a zero code NaN weights. False for NaN.
#define ADAM_GRAD_MAX 1.8e19f
#define ADAM_GRAD_USABLE(gs) (fabsf(gs) <= ADAM_GRAD_MAX)

#endif
