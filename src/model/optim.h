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

// One parameter tensor's optimizer state (backend memory): of its elements first .. first + count - 1,
// the part this optimizer updates (all of them, but for ZeRO-1's parts below).
typedef struct {
    int is8bit;
    size_t numel, blocks;     // the whole tensor's; blocks = ceil(numel / ADAM8_BLOCK) when is8bit
    size_t first, count;      // the part kept here; first is a multiple of ADAM8_BLOCK when is8bit
    uint8_t *m8, *v8;         // (count) codes, when is8bit
    float *absmax_m, *absmax_v;  // (ceil(count / ADAM8_BLOCK)), when is8bit
    float *m32, *v32;         // (count), when !is8bit
    float weight_decay;       // the config's on 2-D weights, 0 on biases and norm weights
} OptTensor;

typedef struct {
    const Backend *be;
    size_t lo, hi;            // the part of the flat parameters it updates: [0, n_params) but for a part
    int n;                    // one per model parameter tensor, in the model's order
    OptTensor *t;
    void *mem;                // every tensor's state, one allocation
    size_t bytes;
    float *code_m, *code_v;   // (QUANT8_TABLE) the signed and unsigned code maps' encoder tables, backend memory
    float host_code_m[QUANT8_TABLE], host_code_v[QUANT8_TABLE];  // the same (the 256 values first)
} Optimizer;

Optimizer *build_optimizer(const Model *m, const Config *c);
// ZeRO-1 (docs/distributed.md): the state of part `part` of `parts` only. The flat parameters are
// cut near part * n_params / parts, at a tensor's start or, inside a tensor of 8-bit moments, at a
// multiple of ADAM8_BLOCK of it (a tensor of fp32 moments stays whole), so that every 8-bit block is
// one part's and the parts' updates are, byte for byte, those of the whole optimizer.
Optimizer *build_optimizer_part(const Model *m, const Config *c, int part, int parts);
// Where part `part` of `parts` begins in the flat parameters (part = parts: n_params).
size_t optimizer_part_start(const Model *m, const Config *c, int part, int parts);
void free_optimizer(Optimizer *o);

typedef struct {
    double grad_norm;     // before clipping, over the finite elements
    size_t nonfinite;     // gradient elements that were NaN or Inf (their parameters were left alone)
    double lr;
} OptStepInfo;

// Update m's parameters from m's gradients: update number t (1-based) with learning rate lr. ema
// (backend memory, the parameters' layout from o->lo: (o->hi - o->lo) values), unless NULL, is
// updated in the same pass with the new parameters: ema = ema_decay * ema + (1 - ema_decay) * param.
// Only the part [o->lo, o->hi) is updated; the gradient norm (for clipping) is the whole gradient's.
OptStepInfo optimizer_step(Optimizer *o, Model *m, const Config *c, int t, double lr, real *ema, double ema_decay);

// Learning rate of update number t (1-based): linear warmup, then cosine decay to lr * lr_min_ratio at
// schedule_end (steps when 0), then that rate.
double lr_schedule(const Config *c, int t);

#endif
