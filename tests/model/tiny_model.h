// tiny_model.h: one training step of the tiny config on the CPU, for the tests of the model and the
// layers above it.
#ifndef FRAMECHAIN_TEST_TINY_MODEL_H
#define FRAMECHAIN_TEST_TINY_MODEL_H

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "model/flow.h"
#include "model/model.h"

// Forward, loss and backward of the tiny config at `depth` blocks, with recompute `rc` and its last
// `keep` blocks keeping everything, from the random init and one batch; the model is returned for its
// outputs and gradients.
static inline Model *tiny_step(int depth, int rc, int keep, real *loss) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.depth = depth, c.recompute = rc, c.keep_blocks = keep;
    Model *m = build_model(&c, backend_cpu(), c.batch_size);
    m->want_input_grad = 1;
    model_init(m, 21, 1);
    size_t nx = (size_t)m->S * m->E;
    real *x0 = fc_malloc(sizeof(real) * nx);
    philox_fill_uniform(x0, nx, -1, 1, 21, 0, RNG_TEST, 0);
    flow_prepare_batch(m, x0, 0, 21, 4);
    free(x0);
    model_forward(m);
    *loss = model_loss(m);
    model_zero_grad(m);
    model_backward(m);
    return m;
}

#endif
