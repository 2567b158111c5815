// memplan.c: the memory plan (see memplan.h). The counts come from the same layout code that
// allocates the model (model_counts) and the same rule the optimizer uses (optim.h), so the plan
// and the allocation cannot drift apart.
#include "model/memplan.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/common.h"
#include "backend/attn_scratch.h"
#include "model/model.h"
#include "model/optim.h"

// The dS scratch of an attention over sequences of len tokens, pairs (sequence, head) pairs.
static size_t attn_ds_plan_bytes(long pairs, long len) {
    return len > ATTN_PACK_MAX ? attn_ds_scratch_bytes(pairs, (int)len, ATTN_DS_CAP) : 0;
}

MemPlan memory_plan(const Config *c, int B, PlanDevice dev) {
    // Operands (backend.h) are bf16 on the bf16 GPU backend, real elsewhere.
    ModelCounts k = model_counts(c, B, dev == PLAN_GPU_BF16 ? 2 : sizeof(real));
    MemPlan p = {0};
    double r = sizeof(real);
    p.params = k.params;
    p.weights = r * k.params, p.gradients = r * k.params, p.ema = r * k.params;
    double opt = 2 * QUANT8_TABLE * sizeof(float);  // the two code maps' encoder tables
    for (int i = 0; i < k.n_tensors; i++) {
        size_t n = k.info[i].numel;
        if (c->optimizer == OPT_ADAMW8BIT && n >= OPTIM_MIN_8BIT)
            opt += 2.0 * n + 2.0 * sizeof(float) * ((n + ADAM8_BLOCK - 1) / ADAM8_BLOCK);
        else
            opt += 2.0 * sizeof(float) * n;
    }
    p.optimizer = opt;
    // The checkpoint's tensors (checkpoint.c's table): each tensor's weights and EMA, the moments and
    // absmax as the optimizer holds them, the two code maps' 256 values (not their encoder tables).
    p.staging = p.weights + p.ema + opt - 2.0 * QUANT8_TABLE * sizeof(float) + 2.0 * 256 * sizeof(float);
    for (int i = 0; i < k.n_tensors; i++)  // (every tensor of the file is at most its weights' size)
        if (r * k.info[i].numel > p.resume_read) p.resume_read = r * k.info[i].numel;
    p.activations = (double)k.acts_bytes + k.dscratch_bytes;
    // the step's clean windows (x0) beside the model's inputs
    double window = r * B * c->slots * c->channels * (double)c->frame_size * c->frame_size;
    p.inputs = (double)k.inputs_bytes + window;
    p.model = p.weights + p.gradients + p.activations + (double)k.inputs_bytes;
    // Backend scratch: attention's per-row statistics and the column-sum partials are a few
    // floats per token row; 64 MiB covers them and linear.cu's 32 MiB cuBLASLt workspace. On bf16,
    // a linear backward converts its output gradient into scratch, or attention's its (tokens,
    // width): at most (tokens, max(mlp ratio, 3) width).
    p.workspace = dev != PLAN_CPU ? 64.0 * 1048576 : 0;
    if (dev == PLAN_CPU) {
        // attention over a sequence of L tokens holds (L, dh) + 2 (L, L) + L reals and L doubles in each
        // thread (cpu_attention.c's work_alloc), for the longer of the two attentions: at 4096 tokens a
        // frame, 128 MiB a thread
        double L = (double)(c->frame_size / c->patch) * (c->frame_size / c->patch);
        if (c->slots > L) L = c->slots;
        p.workspace = fc_threads() * (r * (L * (c->width / c->heads) + 2 * L * L + L) + sizeof(double) * L);
    }
    if (dev == PLAN_GPU_BF16) {
        double tokens = (double)B * c->slots * (c->frame_size / c->patch) * (c->frame_size / c->patch);
        p.weights_bf16 = 2.0 * k.params;
        p.workspace += 2.0 * tokens * (c->mlp_ratio > 3 ? c->mlp_ratio : 3) * c->width;
        // the attention backward's stored dS (backend.h), for the longer of the two attentions
        long N = (long)(c->frame_size / c->patch) * (c->frame_size / c->patch), F = c->slots;
        size_t spatial = attn_ds_plan_bytes((long)B * F * c->heads, N);
        size_t temporal = attn_ds_plan_bytes((long)B * N * c->heads, F);
        p.workspace += (double)(spatial > temporal ? spatial : temporal);
    }
    // train.c's params_aside, and the sampler's windows (sampler.c, window_buffers_alloc: x, pred and their
    // unguided twins for the B windows, one reference window, three reals a slot and window)
    double one = r * c->slots * c->channels * (double)c->frame_size * c->frame_size;  // a window
    p.previews = c->sample_every > 0 ? p.weights + (4.0 * B + 1) * one + 3 * r * c->slots * B : 0;
    p.cpu = dev == PLAN_CPU;
    memory_plan_sum(&p);
    free(k.info);
    return p;
}

void memory_plan_sum(MemPlan *p) {
    double after_resume = p->staging + p->previews;  // (rank 0's staging always holds the resume's buffer)
    p->host = (after_resume > p->resume_read ? after_resume : p->resume_read) + p->host_grads + p->loader + p->program;
    p->total = p->weights + p->weights_bf16 + p->gradients + p->optimizer + p->ema + p->activations + p->inputs +
               p->workspace + p->routes + p->autoencoder + (p->cpu ? p->host : 0);
}

int memory_plan_resolve(Config *c, int B, PlanDevice dev, double budget) {
    if (c->keep_blocks != KEEP_BLOCKS_AUTO) return c->keep_blocks;
    c->keep_blocks = 0;
    if (dev == PLAN_CPU || !c->recompute) return 0;
    double limit = budget - KEEP_BLOCKS_AUTO_RESERVE_GIB * 1073741824.0;
    Config t = *c;
    for (t.keep_blocks = 1; t.keep_blocks <= c->depth; t.keep_blocks++)  // each kept block adds memory
        if (memory_plan(&t, B, dev).total > limit) break;
    return c->keep_blocks = t.keep_blocks - 1;
}

double model_step_flops(const Config *c, int B) {
    double n = c->frame_size / c->patch, N = n * n, F = c->slots, S = (double)B * F, T = S * N;
    double D = c->width, RD = (double)c->mlp_ratio * D, PPC = (double)c->patch * c->patch * c->channels;
    double Fd = c->freq_dim, PPCin = PPC * config_input_frames(c);
    double embed = T * PPCin * D + 2 * S * Fd * D + S * D * D;  // multiply-adds of patches, offsets, t
    double block = S * D * 9 * D                                // adaLN
                   + 2 * (T * D * 3 * D + T * D * D)            // qkv and proj, spatial and temporal
                   + 2 * T * D * RD                             // MLP
                   + 2 * (S * N * N * D + (double)B * N * F * F * D);  // scores and weighted sums
    double final = S * D * 2 * D + T * D * PPC;
    return 3 * 2 * (embed + c->depth * block + final);
}

double memory_plan_routes(const Config *c, int B, const Backend *be) {
    if (!be->route_scratch) return 0;
    ModelCounts k = model_counts(c, B, be->operand_bytes);
    free(k.info);
    return (double)be->route_scratch(k.linear_in, k.linear_out, k.linear_weight);
}

PlanDevice plan_device(const char *backend_name, const char *precision) {
    if (!strcmp(backend_name, "cpu")) return PLAN_CPU;
    return !strcmp(precision, "bf16") ? PLAN_GPU_BF16 : PLAN_GPU_FP32;
}

static void line(FILE *out, const char *what, double bytes) {
    const char *unit;
    double value = fc_bytes_in_unit(bytes, &unit);
    fprintf(out, "  %-14s %9.2f %s\n", what, value, unit);
}

void memory_plan_host_grads(MemPlan *p, int on) {
    p->host_grads = on && !p->cpu ? (double)sizeof(real) * p->params : 0;
    memory_plan_sum(p);
}

void memory_plan_per_rank(MemPlan *p, int ranks, int shard) {
    if (ranks <= 1 || !shard) return;
    p->optimizer /= ranks, p->ema /= ranks;  // rank 0 still stages the whole checkpoint
    memory_plan_sum(p);
}

void memory_plan_other_rank(MemPlan *p, int shard) {
    p->staging = shard ? p->ema + p->optimizer : 0;  // checkpoint_parts.c: the sender's scratch
    p->previews = shard && p->previews > 0 ? p->weights : 0;  // its weights set aside for the gathered EMA; rank 0 samples
    memory_plan_sum(p);
}

double memory_plan_rank_savings(const Config *c, int B, PlanDevice dev, int ranks, int shard) {
    MemPlan p = memory_plan(c, B, dev);
    double whole = p.total;
    memory_plan_per_rank(&p, ranks, shard);
    return whole - p.total;
}

void memory_plan_print(FILE *out, const MemPlan *p, const char *device, double budget) {
    fprintf(out, "memory plan (%s, %zu parameters):\n", device, p->params);
    line(out, "weights", p->weights);
    if (p->weights_bf16 > 0) line(out, "weights bf16", p->weights_bf16);
    line(out, "gradients", p->gradients);
    line(out, "optimizer", p->optimizer);
    line(out, "EMA", p->ema);
    line(out, "activations", p->activations);
    line(out, "inputs", p->inputs);
    if (p->workspace > 0) line(out, "workspace", p->workspace);
    if (p->routes > 0) line(out, "routes", p->routes);
    if (p->autoencoder > 0) line(out, "autoencoder", p->autoencoder);
    if (!p->cpu) {  // a GPU's total and budget, then the host's lines
        line(out, "total", p->total);
        if (budget > 0) {
            line(out, "budget", budget);
            fprintf(out, "  %s\n", p->total <= budget ? "fits the budget" : "EXCEEDS the budget");
        }
        fprintf(out, "  on the host:\n");
    }
    line(out, "ckpt staging", p->staging);
    if (p->previews > 0) line(out, "previews", p->previews);
    if (p->resume_read > p->staging + p->previews) line(out, "resume read", p->resume_read);
    if (p->host_grads > 0) line(out, "MPI gradients", p->host_grads);
    if (p->loader > 0) line(out, "data loader", p->loader);
    if (p->program > 0) line(out, "program", p->program);
    line(out, p->cpu ? "total" : "host total", p->cpu ? p->total : p->host);
}
