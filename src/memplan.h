// memplan.h: the memory plan of a training run, from its config alone, before anything is
// allocated: what `train` prints before the first step and checks against --vram-budget.
#ifndef FRAMECHAIN_MEMPLAN_H
#define FRAMECHAIN_MEMPLAN_H

#include <stdio.h>

#include "config.h"

typedef struct {
    double weights;      // fp32 master weights
    double gradients;    // fp32
    double optimizer;    // 8-bit moments with their absmax (fp32 moments for small tensors)
    double ema;          // fp32 EMA of the weights
    double activations;  // what the backward pass keeps, plus its gradient scratch
    double inputs;       // the step's windows, noise, targets, positions
    double workspace;    // the backend's scratch (attention statistics, reductions), estimated
    double total;
    size_t params;
} MemPlan;

// gpu: add the GPU backend's workspace.
MemPlan memory_plan(const Config *c, int B, int gpu);
// The plan as lines on `out`; budget_bytes > 0 adds the budget and the headroom.
void memory_plan_print(FILE *out, const MemPlan *p, const char *device, double budget_bytes);

#endif
