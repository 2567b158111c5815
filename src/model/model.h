// model.h: the video diffusion transformer (docs/network.md), written once against the op table.
#ifndef FRAMECHAIN_MODEL_H
#define FRAMECHAIN_MODEL_H

#include "backend/backend.h"
#include "base/config.h"

// How a parameter tensor starts out (docs/network.md, "Initialisation").
typedef enum { INIT_XAVIER, INIT_NORMAL_002, INIT_ZERO, INIT_BIAS, INIT_NORM } InitRule;

typedef struct {
    char name[96];   // PyTorch-style dotted name, e.g. blocks.3.attn_t.qkv.weight
    int ndim;
    int shape[2];
    size_t offset;   // in elements, from the start of the one parameter allocation
    size_t numel;
    InitRule init;
    int fan_in, fan_out;
} ParamInfo;

// One attention sub-layer's weights (spatial or temporal).
typedef struct {
    real *qkv_w;   // (3D, D)
    real *qkv_b;   // (3D)
    real *q_norm;  // (dh)
    real *k_norm;  // (dh)
    real *proj_w;  // (D, D)
    real *proj_b;  // (D)
} AttnParams;

typedef struct {
    real *ada_w;     // (9D, D)
    real *ada_b;     // (9D)
    AttnParams attn[2];  // [0] spatial, [1] temporal
    real *fc1_w;     // (R*D, D)
    real *fc1_b;     // (R*D)
    real *fc2_w;     // (D, R*D)
    real *fc2_b;     // (D)
} BlockParams;

// Pointers into one allocation; the same struct addresses the parameters and their gradients.
typedef struct {
    real *patch_w;   // (D, PPCin)
    real *patch_b;   // (D)
    real *off_w;     // (D, Fd)
    real *off_b;     // (D)
    real *t0_w;      // (D, Fd)
    real *t0_b;      // (D)
    real *t2_w;      // (D, D)
    real *t2_b;      // (D)
    BlockParams *blocks;  // (L)
    real *final_ada_w;  // (2D, D)
    real *final_ada_b;  // (2D)
    real *final_w;   // (PPC, D)
    real *final_b;   // (PPC)
} ParamPtrs;

// What one attention sub-layer keeps for the backward pass. Operands (backend.h) are in the
// backend's operand format: fp32, or bf16 on cuda.
typedef struct {
    Operand *ln;   // (T, D) modulated LayerNorm output, operand
    real *mean;  // (T)
    real *rstd;  // (T)
    real *qkv;   // (T, 3D)
    Operand *qkn;  // (T, 3D) q and k RMS-normalised, operand
    real *qrstd; // (T, 2H)
    Operand *att;  // (T, D) attention output, heads concatenated, operand
    real *lse;   // (T, H)   log-sum-exp of each query's scores
    real *proj;  // (T, D)
} AttnActs;

// One block's activations. With cfg.recompute each block owns only mod and res[2] (recompute = 2:
// also its attention outputs and log-sum-exps, attn[].att and attn[].lse); every other field of
// every block points at one shared set, which model_backward refills block by block. The
// last cfg.keep_blocks blocks own all of theirs and are not re-made.
typedef struct {
    real *mod;       // (S, 9D)  adaLN output: shift/scale/gate x (spatial, temporal, mlp)
    AttnActs attn[2];
    Operand *mln;    // (T, D)    operand
    real *mmean;     // (T)
    real *mrstd;     // (T)
    real *fc1;       // (T, R*D)
    Operand *gelu;   // (T, R*D)  operand
    real *fc2;       // (T, D)
    real *res[3];    // (T, D) residual stream after the spatial, temporal and MLP sub-layers
} BlockActs;

typedef struct {
    real *xin;         // (S, Cin*H*W) the network's input: each slot's frame, then the given frames
                       // concatenated to it (cond_concat); in.xt itself when nothing is concatenated
    Operand *patches;  // (T, PPCin)  operand
    real *emb;       // (T, D)    patch embedding
    real *x0;        // (T, D)    + positions + time offset embedding: the first residual state
    Operand *osin;   // (S, Fd)   sinusoid of the slot offsets, operand
    real *oe;        // (S, D)    offset embedding
    Operand *tsin;   // (S, Fd)   sinusoid of 1000 t, operand
    real *t1;        // (S, D)
    Operand *t1s;    // (S, D)    SiLU(t1), operand
    real *c;         // (S, D)    per-slot conditioning vector
    Operand *sc;     // (S, D)    SiLU(c), the input of every adaLN, operand
    BlockActs *blocks;  // (L)
    real *fmod;      // (S, 2D)   final shift, scale
    Operand *fln;    // (T, D)    operand
    real *fmean;     // (T)
    real *frstd;     // (T)
    real *fout;      // (T, PPC)
    real *pred;      // (S, C*H*W) the predicted velocity e - x0, as frames
    real *loss;      // (1)
} Acts;

// Gradient scratch for the backward pass; block buffers are reused block after block. The
// sub-layers' activation gradients are each read only by the op after the one that writes them
// (dfc2 -> dfc1 -> dln in the MLP; dproj -> datt -> dqkn -> dqkv -> dln in attention), so they
// alternate between two buffers: no op reads and writes the same one, and 7 (T, D) buffers' worth
// of memory is saved at mlp_ratio 4.
typedef struct {
    real *dres;      // (T, D) gradient of the residual stream, updated in place
    real *dbuf_a;    // (T, 3D): dfc2, dproj, dqkn and dln
    real *dbuf_b;    // (T, max(R, 3) * D): dfc1, datt and dqkv
    real *dln;       // (T, D)    in dbuf_a
    real *dqkv;      // (T, 3D)   in dbuf_b
    real *dqkn;      // (T, 3D)   in dbuf_a
    real *datt;      // (T, D)    in dbuf_b
    real *dproj;     // (T, D)    in dbuf_a
    real *dfc1;      // (T, R*D)  in dbuf_b
    real *dfc2;      // (T, D)    in dbuf_a
    real *dmod;      // (S, 9D)
    real *dsc;       // (S, D)
    real *dc;        // (S, D)
    real *dt1s;      // (S, D)
    real *dt1;       // (S, D)
    real *doe;       // (S, D)
    real *dfmod;     // (S, 2D)
    real *dfout;     // (T, PPC)
    real *dpatches;  // (T, PPCin)
    real *dpred;     // (S, C*H*W)
    real *dxt;       // (S, Cin*H*W) gradient of the network's input a.xin (filled when want_input_grad)
} Grads;

// The model's inputs for one batch, in backend memory.
typedef struct {
    real *xt;      // (B, F, C, H, W) noisy window
    real *t;       // (B, F) noise level per slot
    real *offset;  // (B, F) time offset per slot
    real *v;       // (B, F, C, H, W) target velocity e - x0
    real *mask;    // (B, F) 1 on target slots
    real *noise;   // (B, F, C, H, W) the diffusion noise e of this batch
} Inputs;

typedef struct {
    Config cfg;
    const Backend *be;
    int B, F, N, T, S;  // batch, slots, tokens per slot, tokens, slots in the batch (B*F)
    int D, H, RD, PPC, E;  // width, heads, MLP width, patch vector, values per frame (C*H*W)
    int Cin, PPCin, Ein;   // input channels (C, or more with cond_concat), input patch vector, input values a slot

    int n_tensors;
    ParamInfo *info;     // (n_tensors)
    size_t n_params;
    real *params_mem;    // (n_params), one allocation
    real *grads_mem;     // (n_params), same layout
    ParamPtrs p, g;      // views into params_mem and grads_mem

    real *pos;           // (N, D) fixed 2-D sin-cos positions
    Inputs in;
    Acts a;
    Grads d;
    void *acts_mem, *dscratch_mem, *inputs_mem;
    size_t acts_bytes, dscratch_bytes, inputs_bytes;
    int want_input_grad;
    // Called by model_backward as each part of the gradients becomes final, so that their sum over
    // the ranks can start while the backward goes on: the flat values [lo, hi) of grads_mem, in
    // descending order (the final layer, blocks depth-1 .. 0, then the embeddings), covering
    // [0, n_params) once. Nothing in the backward writes a part again after its call. NULL: none.
    void (*grads_ready)(void *ctx, size_t lo, size_t hi);
    void *grads_ready_ctx;
} Model;

// What a model of batch B holds without allocating it (the memory plan): parameters in elements,
// the rest in bytes, with operands of operand_bytes (backend.h) a value.
typedef struct {
    size_t params, acts_bytes, dscratch_bytes, inputs_bytes;
    int n_tensors;
    ParamInfo *info;  // (n_tensors), malloc'ed: the caller frees it
    // The largest input (M K), output (M N) and weight (N K), in values, among the linears a step
    // runs (y (M, N) = x (M, K) w^T): what a backend's routes size their copies of operands by.
    size_t linear_in, linear_out, linear_weight;
} ModelCounts;
ModelCounts model_counts(const Config *cfg, int B, size_t operand_bytes);

// 0 where the backend runs the network cfg describes; else -1 and one line in err naming the key
// (a backend's kernels may take only some head sizes: width / heads). Checked before anything is
// allocated or written, so that a run refused on a GPU costs nothing.
int model_backend_check(const Config *cfg, const Backend *be, char *err, size_t errlen);

// Allocate the parameters, gradients, activations for batch B, and the fixed positions.
Model *build_model(const Config *cfg, const Backend *be, int B);
void free_model(Model *m);

// Initialise the parameters from (seed, RNG_INIT); random != 0 makes every parameter non-zero (tests).
void model_init(Model *m, uint64_t seed, int random);
void model_zero_grad(Model *m);  // (model_backward overwrites every gradient: for callers that add)
// m->in -> m->a.pred
void model_forward(Model *m);
// Masked MSE of m->a.pred against m->in.v; returns the loss.
real model_loss(Model *m);
// d loss / d params into m->grads_mem, overwritten (each parameter's gradient has one producer,
// which writes it with GRAD_SET: nothing needs zeroing first), and into m->d.dxt when
// want_input_grad, from the activations of the model_forward just before (with recompute, re-made
// block by block from them).
void model_backward(Model *m);

const ParamInfo *model_find_param(const Model *m, const char *name);
// Bytes of backend memory the model holds (parameters, gradients, activations, scratch).
size_t model_memory_bytes(const Model *m);

#endif
