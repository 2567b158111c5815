// optim.h: AdamW over the model's parameters: 8-bit block-wise moments for tensors of 4096
// elements or more, fp32 moments below that (or everywhere with optimizer = adamw), gradient-norm
// clipping, and the learning-rate schedule.
#ifndef FRAMECHAIN_OPTIM_H
#define FRAMECHAIN_OPTIM_H

#include "backend/backend.h"
#include "base/config.h"
#include "model/model.h"
#include "backend/quant8.h"

#define OPTIM_MIN_8BIT 4096  // tensors below this many elements keep fp32 moments

// One parameter tensor's optimizer state (backend memory).
typedef struct {
    int is8bit;
    size_t numel, blocks;     // blocks = ceil(numel / ADAM8_BLOCK) when is8bit
    uint8_t *m8, *v8;         // (numel) codes, when is8bit
    float *absmax_m, *absmax_v;  // (blocks), when is8bit
    float *m32, *v32;         // (numel), when !is8bit
    float weight_decay;       // the config's on 2-D weights, 0 on biases and norm weights
} OptTensor;

typedef struct {
    const Backend *be;
    int n;                    // one per model parameter tensor, in the model's order
    OptTensor *t;
    void *mem;                // every tensor's state, one allocation
    size_t bytes;
    float *code_m, *code_v;   // (QUANT8_TABLE) the signed and unsigned code maps' encoder tables, backend memory
    float host_code_m[QUANT8_TABLE], host_code_v[QUANT8_TABLE];  // the same (the 256 values first)
} Optimizer;

Optimizer *build_optimizer(const Model *m, const Config *c);
void free_optimizer(Optimizer *o);

typedef struct {
    double grad_norm;     // before clipping, over the finite elements
    size_t nonfinite;     // gradient elements that were NaN or Inf (their parameters were left alone)
    double lr;
} OptStepInfo;

// Update m's parameters from m's gradients: update number t (1-based) with learning rate lr. ema
// (backend memory, the parameters' layout), unless NULL, is updated in the same pass with the new
// parameters: ema = ema_decay * ema + (1 - ema_decay) * param.
OptStepInfo optimizer_step(Optimizer *o, Model *m, const Config *c, int t, double lr, real *ema, double ema_decay);

// Learning rate of update number t (1-based): linear warmup, then cosine decay to lr * lr_min_ratio at
// schedule_end (steps when 0), then that rate.
double lr_schedule(const Config *c, int t);

#endif
