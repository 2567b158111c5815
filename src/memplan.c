// memplan.c: the memory plan (see memplan.h). The counts come from the same layout code that
// allocates the model (model_counts) and the same rule the optimizer uses (optim.h), so the plan
// and the allocation cannot drift apart.
#include "memplan.h"

#include "backend.h"
#include "model.h"
#include "optim.h"

MemPlan memory_plan(const Config *c, int B, int gpu) {
    ModelCounts k = model_counts(c, B);
    MemPlan p = {0};
    double r = sizeof(real);
    p.params = k.params;
    p.weights = r * k.params, p.gradients = r * k.params, p.ema = r * k.params;
    double opt = 512 * sizeof(float);  // the two code maps
    for (int i = 0; i < k.n_tensors; i++) {
        size_t n = k.info[i].numel;
        if (c->optimizer == OPT_ADAMW8BIT && n >= OPTIM_MIN_8BIT)
            opt += 2.0 * n + 2.0 * sizeof(float) * ((n + ADAM8_BLOCK - 1) / ADAM8_BLOCK);
        else
            opt += 2.0 * sizeof(float) * n;
    }
    p.optimizer = opt;
    p.activations = r * (k.acts + k.dscratch);
    // the step's clean windows (x0) beside the model's inputs
    double window = r * B * c->slots * c->channels * (double)c->frame_size * c->frame_size;
    p.inputs = r * k.inputs + window;
    // Backend scratch: attention's per-row statistics and the column-sum partials are a few
    // floats per token row; 64 MiB covers them and cuBLAS's workspace.
    p.workspace = gpu ? 64.0 * 1048576 : 0;
    p.total = p.weights + p.gradients + p.optimizer + p.ema + p.activations + p.inputs + p.workspace;
    free(k.info);
    return p;
}

static void line(FILE *out, const char *what, double bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    fprintf(out, "  %-14s %9.2f %s\n", what, bytes, unit[u]);
}

void memory_plan_print(FILE *out, const MemPlan *p, const char *device, double budget) {
    fprintf(out, "memory plan (%s, %zu parameters):\n", device, p->params);
    line(out, "weights", p->weights);
    line(out, "gradients", p->gradients);
    line(out, "optimizer", p->optimizer);
    line(out, "EMA", p->ema);
    line(out, "activations", p->activations);
    line(out, "inputs", p->inputs);
    if (p->workspace > 0) line(out, "workspace", p->workspace);
    line(out, "total", p->total);
    if (budget > 0) {
        line(out, "budget", budget);
        fprintf(out, "  %s\n", p->total <= budget ? "fits the budget" : "EXCEEDS the budget");
    }
}
