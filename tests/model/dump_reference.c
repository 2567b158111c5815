// dump_reference.c: one forward and backward pass of a config's network, written as a
// safetensors file for tools/reference.py (the independent PyTorch implementation) and for the
// determinism test: the weights (the `random` init, so every gradient is non-trivial), the inputs
// of one rectified-flow step, the prediction, the loss and every gradient.
//
// usage: dump_reference --config FILE --out FILE [--seed N] [--threads N] [--set key=value ...]
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "model/flow.h"
#include "model/model.h"
#include "base/philox.h"
#include "formats/safetensors.h"

int main(int argc, char **argv) {
    const char *config = NULL, *out = NULL;
    uint64_t seed = 1234;
    int threads = 1;
    Config c;
    config_defaults(&c);
    const char *sets[32];
    int nsets = 0;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) fc_die("dump_reference: option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--set") && nsets < 32) sets[nsets++] = argv[i + 1];
        else fc_die("dump_reference: unknown option %s", argv[i]);
    }
    if (!config || !out) fc_die("usage: dump_reference --config FILE --out FILE [--seed N] [--threads N]");
    config_load(&c, config);
    for (int i = 0; i < nsets; i++) config_set(&c, sets[i], "--set");
    fc_set_threads(threads);

    const Backend *be = backend_cpu();
    Model *m = build_model(&c, be, c.batch_size);
    m->want_input_grad = 1;
    model_init(m, seed, 1);
    size_t nx = (size_t)m->S * m->E;
    real *x0 = be->alloc(sizeof(real) * nx);
    philox_fill_uniform(x0, nx, -1, 1, seed, 0, RNG_TEST, 0);  // clean frames in [-1, 1]
    flow_prepare_batch(m, x0, 0, seed, 0);
    model_forward(m);
    model_loss(m);
    model_zero_grad(m);
    model_backward(m);

    // Everything on the CPU backend is host memory: write it straight out.
    int cap = 2 * m->n_tensors + 16, n = 0;
    StTensor *t = fc_calloc(cap, sizeof(StTensor));
    char(*names)[80] = fc_calloc(cap, sizeof *names);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        for (int g = 0; g < 2; g++) {
            snprintf(names[n], sizeof names[n], "%s%s", g ? "grad." : "", pi->name);
            t[n] = (StTensor){names[n], "F32", pi->ndim, {pi->shape[0], pi->shape[1]},
                              (g ? m->grads_mem : m->params_mem) + pi->offset};
            n++;
        }
    }
    long B = m->B, F = m->F, C = c.channels, S = c.frame_size;
    const char *frame_names[] = {"input.xt", "input.v", "output.pred", "grad.input.xin"};
    real *frame_data[] = {m->in.xt, m->in.v, m->a.pred, m->d.dxt};
    for (int i = 0; i < 4; i++)  // the last: the gradient of the network's input, with its m->Cin channels
        t[n++] = (StTensor){frame_names[i], "F32", 5, {B, F, i == 3 ? m->Cin : C, S, S}, frame_data[i]};
    const char *slot_names[] = {"input.t", "input.offset", "input.mask"};
    real *slot_data[] = {m->in.t, m->in.offset, m->in.mask};
    for (int i = 0; i < 3; i++) t[n++] = (StTensor){slot_names[i], "F32", 2, {B, F}, slot_data[i]};
    t[n++] = (StTensor){"output.loss", "F32", 1, {1}, m->a.loss};

    const char *keys[] = {"frame_size", "channels", "patch", "width", "depth", "heads",
                          "mlp_ratio",  "freq_dim", "batch_size", "plan", "cond_concat"};
    enum { NK = sizeof keys / sizeof keys[0] };
    char values[NK + 1][1024];  // a plan of MAX_SLOTS slots is some 330 characters
    StMeta meta[NK + 1];
    for (int i = 0; i < NK; i++) {
        config_get(&c, keys[i], values[i], sizeof values[i]);
        meta[i] = (StMeta){keys[i], values[i]};
    }
    snprintf(values[NK], sizeof values[NK], "%d", c.slots);
    meta[NK] = (StMeta){"slots", values[NK]};
    char err[512];
    if (st_write(out, t, n, meta, NK + 1, err, sizeof err)) fc_die("%s", err);
    printf("dump_reference: %s: %zu parameters, loss %.6f\n", out, m->n_params, (double)m->a.loss[0]);
    free(t);
    free(names);
    be->free(x0);
    free_model(m);
    return 0;
}
