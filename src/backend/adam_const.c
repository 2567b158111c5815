// adam_const.c: one AdamW step's constants (adam_const.h).
#include "backend/adam_const.h"

#include <math.h>

// The step's constants: computed in double, once, then rounded to float for the per-element math.
AdamConst adam_const(AdamHyper h) {
    if (h.step < 1) fc_die("adamw: step %d, must be >= 1 (the bias correction needs it)", h.step);
    double b1 = h.beta1, b2 = h.beta2;
    AdamConst c;
    c.b1 = (float)b1, c.b2 = (float)b2, c.one_m_b1 = (float)(1.0 - b1), c.one_m_b2 = (float)(1.0 - b2);
    c.eps = h.eps, c.scale = h.grad_scale;
    c.lr_wd = (float)((double)h.lr * h.weight_decay);
    c.step_size = (float)(h.lr / (1.0 - pow(b1, h.step)));
    c.bc2 = (float)(1.0 - pow(b2, h.step));
    c.ema_d = h.ema_decay, c.ema_w = (float)(1.0 - (double)h.ema_decay);
    return c;
}
