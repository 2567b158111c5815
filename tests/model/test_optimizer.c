// test_optimizer.c: the model's optimizer (src/model/optim.c) over the tiny config's parameters: which
// tensors weight decay reaches (the 2-D weights, never a bias or a norm's weight), and the gradient
// clipped to grad_clip before AdamW's moments see it. The AdamW arithmetic itself is test_optim's.
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "check.h"
#include "model/model.h"
#include "model/optim.h"

static Model *tiny_model(Config *c) {
    config_defaults(c);
    config_load(c, "configs/tiny/starter.conf");
    config_set(c, "optimizer=adamw", "test");  // fp32 moments: the first moment can be read back as it is
    config_set(c, "weight_decay=0.1", "test");
    config_set(c, "grad_clip=1", "test");
    config_validate(c, "configs/tiny/starter.conf");
    Model *m = build_model(c, backend_cpu(), 1);
    model_init(m, 3, 1);
    return m;
}

int main(void) {
    Config c;
    Model *m = tiny_model(&c);
    real *before = fc_malloc(sizeof(real) * m->n_params);

    // Zero gradients: AdamW's step is then the decay alone, p (1 - lr wd) on a 2-D weight, nothing elsewhere.
    const double lr = 0.01;
    memcpy(before, m->params_mem, sizeof(real) * m->n_params);
    memset(m->grads_mem, 0, sizeof(real) * m->n_params);
    Optimizer *o = build_optimizer(m, &c);
    optimizer_step(o, m, &c, 1, lr, NULL, 0);
    free_optimizer(o);
    double worst_2d = 0;
    int decayed = 0, kept = 0, moved_1d = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *p = &m->info[i];
        for (size_t k = 0; k < p->numel; k++) {
            double was = before[p->offset + k], now = m->params_mem[p->offset + k];
            if (p->ndim == 2) worst_2d = fmax(worst_2d, fabs(now - was * (1 - lr * 0.1)) / fmax(fabs(was), 1e-6));
            else moved_1d += now != was;
        }
        p->ndim == 2 ? decayed++ : kept++;
    }
    check(worst_2d < 1e-6 && moved_1d == 0 && decayed > 0 && kept > 0, "optimizer_weight_decay_2d_only",
          "zero gradients, lr %g, weight_decay 0.1: %d 2-D weights times (1 - lr wd) within %.1e relative; %d biases "
          "and norm weights, %d values of them moved (0)", lr, decayed, worst_2d, kept, moved_1d);

    // A gradient of norm 10 with grad_clip 1: the first moment after one step is (1 - beta1) g / 10.
    philox_fill_normal(m->grads_mem, m->n_params, 0, 1, 11, 0, RNG_TEST, 0);
    double sq = 0;
    for (size_t k = 0; k < m->n_params; k++) sq += (double)m->grads_mem[k] * m->grads_mem[k];
    for (size_t k = 0; k < m->n_params; k++) m->grads_mem[k] = (real)(m->grads_mem[k] * 10 / sqrt(sq));
    o = build_optimizer(m, &c);
    OptStepInfo info = optimizer_step(o, m, &c, 1, lr, NULL, 0);
    double worst_m = 0;
    for (int i = 0; i < o->n; i++) {
        const real *g = m->grads_mem + m->info[i].offset + o->t[i].first;
        for (size_t k = 0; k < o->t[i].count; k++) {
            double want = (1 - c.beta1) * g[k] / 10;
            worst_m = fmax(worst_m, fabs(o->t[i].m32[k] - want) / fmax(fabs(want), 1e-9));
        }
    }
    check(fabs(info.grad_norm - 10) < 1e-4 && worst_m < 1e-5, "optimizer_grad_clip",
          "a gradient of norm %.5f, grad_clip 1: the first moment (1 - beta1) g / 10 within %.1e relative", info.grad_norm,
          worst_m);
    free_optimizer(o);
    free(before), free_model(m);
    return g_failed ? 1 : 0;
}
