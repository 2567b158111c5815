// memplan.h: the memory plan of a training run, from its config alone, before anything is
// allocated: what `train` prints before the first step and checks against --vram-budget.
#ifndef FRAMECHAIN_MEMPLAN_H
#define FRAMECHAIN_MEMPLAN_H

#include <stdio.h>

#include "base/config.h"

typedef struct {
    double weights;      // fp32 master weights
    double weights_bf16; // the bf16 copy the GEMMs read (GPU in bf16 only)
    double gradients;    // fp32
    double optimizer;    // 8-bit moments with their absmax (fp32 moments for small tensors)
    double ema;          // fp32 EMA of the weights
    double activations;  // what the backward pass keeps, plus its gradient scratch
    double inputs;       // the step's windows, noise, targets, positions
    double workspace;    // the backend's scratch (attention statistics, reductions), estimated
    double routes;       // what the backend's routes switched on add (memory_plan_routes); 0: none
    double autoencoder;  // an autoencoder resident for the previews of a run on latents (train --vae); 0: none
    // Host memory: on the CPU the same memory as the lines above, counted in the total; on a GPU
    // printed beside it, as host.
    double staging;      // the checkpoint's staging buffer: weights, EMA, optimizer state (checkpoint.c)
    double previews;     // a preview's: the weights set aside while the EMA samples, the sampler's windows
                         // (and what the command adds: TrainHooks.preview_host); 0: no previews
    double loader;       // the data loader's batches and its threads' clips (train --data); 0: none
    double resume_read;  // a resume's buffer: the checkpoint's largest tensor, read a tensor at a time
                         // (checkpoint.c) and freed before the two lines above are allocated
    double host_grads;   // GPU ranks that sum through MPI: the gradients' host copy (train.c); 0: none
    double program;      // the process's resident memory when the plan is made (code, libraries); 0: not known
    double total;        // what the device holds (on the CPU: with the host lines)
    double host;         // on a GPU: the host lines' sum (the resume's buffer where it exceeds the two
                         // lines it comes before)
    int cpu;             // a CPU plan: the host lines are the device's
    double model;        // of these, what build_model allocates (model_memory_bytes): exact
    size_t params;
} MemPlan;

// The GPU memory a training run may plan for unless --vram-budget says otherwise: a 24 GB card.
#define DEFAULT_VRAM_BUDGET_GIB 24.0

typedef enum { PLAN_CPU, PLAN_GPU_FP32, PLAN_GPU_BF16 } PlanDevice;
// The plan of training config c at batch B on `dev` (the GPU adds its workspace, bf16 its copies).
MemPlan memory_plan(const Config *c, int B, PlanDevice dev);
// keep_blocks = auto: leaves the GPU's plan this far under the budget, for what the plan does not
// count (the CUDA context, cuBLAS's own workspace, a desktop on the same card).
#define KEEP_BLOCKS_AUTO_RESERVE_GIB 2.0
// Resolves c->keep_blocks = auto for training at batch B on dev against budget_bytes: the most
// blocks (0 to depth) that keep the plan KEEP_BLOCKS_AUTO_RESERVE_GIB under the budget on a GPU, none
// on the CPU or without recompute. Returns the number; a set number is left as it is.
int memory_plan_resolve(Config *c, int B, PlanDevice dev, double budget_bytes);
// The PlanDevice of a backend.
PlanDevice plan_device(const char *backend_name, const char *precision);
// What the routes of backend be (backend.h: route_scratch) hold for training config c at batch B,
// in bytes, beside the plan's lines: the plan's `routes` line, which memory_plan, from the config
// alone, leaves at 0.
struct Backend;
double memory_plan_routes(const Config *c, int B, const struct Backend *be);
// The model FLOPs of one training step of config c at batch B: 3x the forward pass's multiply-adds
// x 2 (the usual MFU convention: activation recompute and elementwise work are not counted).
double model_step_flops(const Config *c, int B);

// One rank's plan of `ranks` (docs/distributed.md), from the plan at its batch (batch_size / ranks):
// with shard (ZeRO-1, shard_optimizer) its optimizer state and EMA a 1/ranks part (near: the parts
// are cut at 8-bit blocks and keep fp32-moment tensors whole).
void memory_plan_per_rank(MemPlan *p, int ranks, int shard);
// The plan of a rank other than rank 0 (after memory_plan_per_rank): it writes no checkpoint, so it
// stages only its part of the EMA and optimizer state for rank 0 (with shard; nothing without), and
// holds the weights aside during previews only with shard (rank 0 alone samples them otherwise).
void memory_plan_other_rank(MemPlan *p, int shard);
// What memory_plan_per_rank takes off a plan of c at batch B on dev: to add to a budget that
// memory_plan_resolve checks whole plans against, so that keep_blocks = auto counts ZeRO-1's savings.
double memory_plan_rank_savings(const Config *c, int B, PlanDevice dev, int ranks, int shard);

// GPU ranks whose gradients are summed through host memory and MPI (collectives = mpi, or no NCCL):
// their host copy, n_params fp32 values (on: 1), counted in the host lines; off: none.
void memory_plan_host_grads(MemPlan *p, int on);

// The total (and host) again from the lines, after a line was set.
void memory_plan_sum(MemPlan *p);

// The plan as lines on `out`; budget_bytes > 0 adds the budget and the headroom.
void memory_plan_print(FILE *out, const MemPlan *p, const char *device, double budget_bytes);

#endif
