// backend.h: the op contract. The network (src/model/model.c) is written once against this table;
// each backend fills it in: src/backend/cpu/ (the reference) and cuda/. This header holds only the
// contract: which backends a build has, and choosing one, is src/backend/registry.h.
//
// How to add an op, in this order:
//   1. its contract here: a field of Backend with a comment that gives shapes and what it writes;
//   2. the CPU op (src/backend/cpu/), the reference, and its name in op_table.c's list;
//   3. the CUDA op (cuda/, one file per kernel family), filling the same field;
//   4. tests/model/test_grad.c: the op's backward against finite differences of its forward;
//   5. tests/cuda/test_cuda.c: the CUDA op against the CPU op on random inputs (also run on the
//      emulation, tests/cuda/emu);
//   6. tools/reference.py: the same op in PyTorch, where the network uses it;
//   7. docs/network.md: where it sits in the network and its math.
//
// Conventions every backend keeps:
// - Pointers are backend memory (host for the CPU, device for CUDA), fp32 `real` at the interface,
//   except the GEMM operands (`Operand`, below).
// - Row-major. Tokens are ordered (b, f, i, j); a "slot" is one frame of one window (b, f), and the
//   N tokens of a slot are contiguous rows. Per-slot vectors (shift, scale, gate) are rows of a
//   modulation matrix with a row stride `ms` (they are chunks of the adaLN output).
// - Backward ops ACCUMULATE into the gradients they produce (dx += ..., dw += ...; the caller
//   zeroes), except the activation gradients that one op alone produces in the network, which a
//   contract below marks "=" (overwritten: the gated residual's dh, the q/k norm's and attention's
//   dqkv, GELU's and SiLU's dx; linear's dx when asked with GRAD_SET), and the parameter gradients
//   asked with GRAD_SET (pmode: each has one producer in the network's backward), so that no pass
//   zeroes them first. A NULL gradient pointer means "not needed" and is skipped.
// - Results do not depend on the number of threads: no reduction is split by thread.
#ifndef FRAMECHAIN_BACKEND_H
#define FRAMECHAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"  // real

// Where the sequences of an attention lie among the token rows: sequence (o, i), for
// o < n_outer and i < n_inner, has its token k at row o*outer_stride + i*inner_stride + k*tok_stride.
//   spatial  (the N tokens of one slot):     n_outer = B*F, n_inner = 1, len = N, tok_stride = 1, outer_stride = N
//   temporal (one patch across the F slots): n_outer = B, n_inner = N, len = F, tok_stride = N,
//                                            outer_stride = F*N, inner_stride = 1
typedef struct {
    int n_outer, n_inner, len;
    long tok_stride, outer_stride, inner_stride;
} AttnLayout;

// The layout of the spatial (temporal = 0) or temporal (1) attention over tokens (B, F, N).
static inline AttnLayout attn_layout_tokens(int B, int F, int N, int temporal) {
    if (temporal)
        return (AttnLayout){.n_outer = B, .n_inner = N, .len = F, .tok_stride = N, .outer_stride = (long)F * N,
                            .inner_stride = 1};
    return (AttnLayout){.n_outer = B * F, .n_inner = 1, .len = N, .tok_stride = 1, .outer_stride = N,
                        .inner_stride = 0};
}

// The pointwise functions of act_fwd: SiLU x / (1 + e^-x), ReLU max(x, 0), and 3 tanh(x / 3) (the
// soft clamp to [-3, 3] the tiny autoencoders' decoders start with).
enum Act { ACT_SILU = 0, ACT_RELU = 1, ACT_TANH_CLAMP = 2 };

// A GEMM operand: an activation that, once made, is read only by GEMMs and attention (a linear's x,
// attention's q, k, v and its output, which its backward reads too). It is stored in the backend's
// operand format, operand_bytes a value: fp32 `real` on the CPU and cuda-fp32, bf16 on cuda, whose
// GEMMs and attention round every operand to bf16 anyway. Its producer (LayerNorm, the q/k norm,
// attention, the activations, patchify, the sinusoid embedding) writes that format directly, so no
// pass converts it first, and it takes half the memory on cuda. Gradients stay `real`.
typedef void Operand;

// How a backward op writes a gradient that may be either: overwrite it, or add into it.
typedef enum { GRAD_SET, GRAD_ADD } GradMode;

// Hyper-parameters of one AdamW step (decoupled weight decay, bias-corrected moments).
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;          // t >= 1, the number of this update, for the bias correction
    float grad_scale;  // every gradient is multiplied by this first (gradient-norm clipping)
    // The EMA of the weights, in the same pass when ema is not NULL (n elements, like param): after
    // the step, ema = ema_decay * ema + (1 - ema_decay) * param, the bytes ema_update would give.
    real *ema;
    float ema_decay;
} AdamHyper;

// 8-bit AdamW quantises the moments in blocks of this many elements, one fp32 absmax per block.
#define ADAM8_BLOCK 256

// One tensor's 8-bit AdamW step: adamw_8bit's arguments but the code maps, which all share.
typedef struct {
    real *param;
    const real *grad;
    uint8_t *m8, *v8;
    float *absmax_m, *absmax_v;
    size_t n;
    AdamHyper h;
} Adam8Job;

typedef struct Backend {
    const char *name;
    const char *precision;          // of the GEMMs: "fp32", or "bf16" (operands rounded, fp32 accumulation)
    const char *(*describe)(void);  // one line for --version: precision, threads, libraries
    size_t operand_bytes;           // bytes of one value of an Operand: sizeof(real), or 2 (bf16)

    // ---- memory ----
    void *(*alloc)(size_t bytes);  // zero-filled; dies with a clear message when out of memory
    void (*free)(void *ptr);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *ptr, size_t bytes);
    void (*sync)(void);
    // Host memory for transfers (the loader's batches, checkpoint staging): page-locked where the
    // backend has its own memory, so that copies can run asynchronously; zero-filled.
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *ptr);
    // Asynchronous download (checkpoint staging): copies `bytes` of backend memory into host memory
    // from host_alloc, after all the work issued so far and without blocking the host, on a side
    // stream that training does not wait for. The source must not be changed until download_wait
    // has returned: the caller waits before it issues anything that writes it.
    void (*download_async)(void *host_dst, const void *src, size_t bytes);
    // Blocks until every download_async issued so far has landed; callable from any thread.
    void (*download_wait)(void);
    // n values of an Operand from or to host `real`s, converted (bf16: rounded to nearest even).
    void (*operand_upload)(Operand *dst, const real *host_src, size_t n);
    void (*operand_download)(real *host_dst, const Operand *src, size_t n);
    // The most backend memory held at once so far, in bytes (the CPU: the process's peak RSS).
    size_t (*memory_peak)(void);
    // The bytes the backend's routes switched on for this process hold beside the memory plan's
    // lines (the fp8 routes' operand copies, cuda/linear.cu), for a model whose linears' largest
    // input, output and weight hold in, out and weight values (model.h: ModelCounts); 0 where none is
    // on. NULL: a backend without such routes.
    size_t (*route_scratch)(size_t in, size_t out, size_t weight);
    // The model's parameters live at params (n). A backend whose GEMMs read bf16 keeps a bf16 copy
    // of them at the same offsets and rebuilds it after they change (upload, copy, zero and the
    // optimizer ops are seen; nothing else writes parameters). Others do nothing.
    void (*register_weights)(const real *params, size_t n);
    void (*unregister_weights)(const real *params);

    // ---- randomness (Philox, see philox.h): out[i] = element offset+i of (seed, step, stream) ----
    void (*randn)(real *out, size_t n, real mean, real std, uint64_t seed, uint32_t step, uint32_t stream,
                  uint64_t offset);

    // ---- linear: y (M, N) = x (M, K) @ w^T (w: (N, K)) + b (N); b may be NULL. Backward:
    //      dx = or += dy @ w (dx_mode), dw = or += dy^T @ x, db = or += the column sums of dy (pmode) ----
    void (*linear_fwd)(real *y, const Operand *x, const real *w, const real *b, int M, int K, int N);
    void (*linear_bwd)(real *dx, GradMode dx_mode, real *dw, real *db, GradMode pmode, const real *dy,
                       const Operand *x, const real *w, int M, int K, int N);

    // ---- the MLP's two linears, each fused with the GELU between them, so that a backend can run
    //      the GELU in its GEMM's epilogue (the CPU runs the composition below):
    //      linear_gelu_fwd: pre (M, N) = x @ w^T + b, y = GELU(pre) (linear_fwd, then gelu_fwd);
    //      linear_gelu_bwd, the backward of a linear whose input is x = GELU(pre) (M, K):
    //      dpre = (dy @ w) * GELU'(pre) (overwritten), dw and db as linear_bwd's (pmode)
    //      (linear_bwd with dx_mode GRAD_SET, then gelu_bwd in place) ----
    void (*linear_gelu_fwd)(real *pre, Operand *y, const Operand *x, const real *w, const real *b, int M, int K,
                            int N);
    void (*linear_gelu_bwd)(real *dpre, real *dw, real *db, GradMode pmode, const real *dy, const Operand *x,
                            const real *w, const real *pre, int M, int K, int N);

    // ---- LayerNorm (no affine, eps 1e-6) with adaLN modulation ----
    // y = LN(x) * (1 + scale[s]) + shift[s] for the N rows of slot s; x, y (S*N, D); mean, rstd (S*N).
    void (*ln_mod_fwd)(Operand *y, real *mean, real *rstd, const real *x, const real *shift, const real *scale,
                       long ms, int S, int N, int D);
    void (*ln_mod_bwd)(real *dx, real *dshift, real *dscale, const real *dy, const real *x, const real *mean,
                       const real *rstd, const real *scale, long ms, int S, int N, int D);

    // ---- gated residual: out = x + gate[s] * h; out may alias x. Backward: dx += dout,
    //      dh = gate[s] * dout (overwritten), dgate += the slot's sum of dout * h ----
    void (*gated_add_fwd)(real *out, const real *x, const real *h, const real *gate, long ms, int S, int N,
                          int D);
    void (*gated_add_bwd)(real *dx, real *dh, real *dgate, const real *dout, const real *h, const real *gate,
                          long ms, int S, int N, int D);

    // ---- q/k RMS norm: qkv (T, 3D) -> out (T, 3D, an operand: attention's input) with each head of q
    //      and k RMS-normalised and scaled by qw / kw (dh); v copied. rstd (T, 2*H). Backward: dqkv =
    //      (overwritten, v's columns = dout's), dqw and dkw = or += (pmode) ----
    void (*qk_norm_fwd)(Operand *out, real *rstd, const real *qkv, const real *qw, const real *kw, int T, int D,
                        int H);
    void (*qk_norm_bwd)(real *dqkv, real *dqw, real *dkw, GradMode pmode, const real *dout, const real *qkv,
                        const real *rstd, const real *qw, const real *kw, int T, int D, int H);

    // ---- softmax attention over the sequences of `lay`; qkv (T, 3D) and out (T, D) operands, lse (T,
    //      H) holds each query's log-sum-exp so that backward recomputes the probabilities (never
    //      stored). Backward: dqkv = (overwritten) ----
    void (*attn_fwd)(Operand *out, real *lse, const Operand *qkv, AttnLayout lay, int D, int H);
    // Whether attn_fwd and attn_bwd take heads of dh values (D / H): a backend whose kernels are
    // built for a few head sizes says so before a model is allocated (model_backend_check).
    // NULL: any size.
    int (*attn_head_dim_ok)(int dh);
    void (*attn_bwd)(real *dqkv, const real *dout, const Operand *out, const Operand *qkv, const real *lse,
                     AttnLayout lay, int D, int H);

    // ---- elementwise activations: y = f(x) (an operand: activations feed GEMMs); dx = dy * f'(x)
    //      (overwritten; dx may be dy) ----
    void (*gelu_fwd)(Operand *y, const real *x, size_t n);
    void (*gelu_bwd)(real *dx, const real *dy, const real *x, size_t n);
    void (*silu_fwd)(Operand *y, const real *x, size_t n);
    void (*silu_bwd)(real *dx, const real *dy, const real *x, size_t n);

    // ---- patchify: frames (S, C, H, W) <-> patches (S, (H/P)*(W/P), P*P*C), vector order (py, px, c).
    //      patchify_bwd: dframes += unpatchify(dpatches); unpatchify_bwd: dpatches += patchify(dframes).
    //      The patches are the patch embedding's operand; the final layer's output is not. ----
    void (*patchify_fwd)(Operand *patches, const real *frames, int S, int C, int H, int W, int P);
    void (*patchify_bwd)(real *dframes, const real *dpatches, int S, int C, int H, int W, int P);
    void (*unpatchify_fwd)(real *frames, const real *patches, int S, int C, int H, int W, int P);
    void (*unpatchify_bwd)(real *dpatches, const real *dframes, int S, int C, int H, int W, int P);

    // ---- sinusoid embedding: out (M, d, an operand) = [cos(x*scale*w_k), sin(x*scale*w_k)],
    //      w_k = 10000^(-k/(d/2));
    //      bwd: dx (M) += d out / d x ----
    void (*sinusoid_fwd)(Operand *out, const real *x, real scale, int M, int d);
    void (*sinusoid_bwd)(real *dx, const real *dout, const real *x, real scale, int M, int d);

    // ---- token embedding add: out (S*N, D) = x + pos[n] (N, D, fixed) + temb[s] (S, D) ----
    void (*add_pos_time_fwd)(real *out, const real *x, const real *pos, const real *temb, int S, int N, int D);
    void (*add_pos_time_bwd)(real *dx, real *dtemb, const real *dout, int S, int N, int D);

    // ---- masked MSE: loss[0] = sum_s mask[s] * sum_e (pred - target)^2 / (sum(mask) * E);
    //      pred, target (S, E), mask (S); bwd: dpred += dloss * d loss / d pred ----
    void (*mse_masked_fwd)(real *loss, const real *pred, const real *target, const real *mask, int S, long E);
    void (*mse_masked_bwd)(real *dpred, const real *pred, const real *target, const real *mask, real dloss,
                           int S, long E);

    // ---- rectified flow: per slot s with level t[s], xt = (1 - t) x0 + t e, v = e - x0; (S, E) ----
    void (*flow_mix)(real *xt, real *v, const real *x0, const real *e, const real *t, int S, long E);

    // ---- the autoencoders' ops: forward only (a per-frame autoencoder reads frames into latents and back,
    //      docs/autoencoders.md). Images are (B, C, H, W), fp32 `real` in and out. ----
    // conv2d_fwd: y (B, Cout, Ho, Wo) = b (Cout; NULL: none) + the cross-correlation of x (B, Cin, H, W),
    //      zero-padded by pad = {top, left, bottom, right}, with w (Cout, Cin, k, k) at stride s:
    //      Ho = (H + top + bottom - k) / s + 1, Wo = (W + left + right - k) / s + 1 (PyTorch's Conv2d;
    //      its padding p is {p, p, p, p}; AutoencoderKL's downsampling pads {0, 0, 1, 1}). y != x.
    void (*conv2d_fwd)(real *y, const real *x, const real *w, const real *b, int B, int Cin, int H, int W, int Cout,
                       int k, int stride, const int pad[4]);
    // group_norm_fwd: per image b and group g of C / groups channels, y = (x - mean) / sqrt(var + eps) *
    //      gamma[c] + beta[c], mean and the biased variance over the group's (C / groups) * HW values
    //      (PyTorch's GroupNorm); x, y (B, C, HW); y may be x.
    void (*group_norm_fwd)(real *y, const real *x, const real *gamma, const real *beta, int B, int C, long HW,
                           int groups, real eps);
    // act_fwd: y = f(x) elementwise, f by enum Act (below); y may be x.
    void (*act_fwd)(real *y, const real *x, size_t n, int act);
    // upsample2x_fwd: y (B, C, 2H, 2W), each value of x (B, C, H, W) copied to its 2 x 2 block (nearest).
    void (*upsample2x_fwd)(real *y, const real *x, int B, int C, int H, int W);
    // affine_fwd: y = x * a + b, n values; y may be x.
    void (*affine_fwd)(real *y, const real *x, size_t n, real a, real b);
    // add_fwd: y = a + b, n values; y may be a or b.
    void (*add_fwd)(real *y, const real *a, const real *b, size_t n);
    // image_attn_fwd: one head of attention over the N positions of a map, channels as features (the
    //      mid-block of AutoencoderKL): out[b, c, i] = sum_j p_ij v[b, c, j], p_ij = softmax over j of
    //      sum_c' q[b, c', i] k[b, c', j] / sqrt(C). q, k, v, out (B, C, N); out differs from q, k, v.
    void (*image_attn_fwd)(real *out, const real *q, const real *k, const real *v, int B, int C, long N);
    // The most scratch one conv2d_fwd or image_attn_fwd call takes (its im2col tile, its chunk of
    // scores), in bytes: what a memory plan counts beside an autoencoder's maps.
    size_t (*conv_tile_bytes)(void);

    // ---- optimizer (src/backend/cpu/cpu_optim.c on the CPU). An element whose gradient is NaN or Inf keeps its
    //      parameter and moments unchanged. ----
    // fp32 AdamW: param, grad, m, v (n).
    void (*adamw_fp32)(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h);
    // 8-bit AdamW: m8 and v8 (n) are indices into the 256-entry code maps code_m (signed) and code_v
    // (each given as its encoder table, quant8.h: the 256 values, then the rounding thresholds)
    // (unsigned), scaled per block of ADAM8_BLOCK by absmax_m and absmax_v (ceil(n / ADAM8_BLOCK)).
    void (*adamw_8bit)(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m, float *absmax_v,
                       const float *code_m, const float *code_v, size_t n, AdamHyper h);
    // The 8-bit AdamW steps of njobs tensors: the bytes of adamw_8bit on each job, as one pass (the
    //      CPU: one parallel region over all their blocks, where a call a tensor opened one each; CUDA:
    //      adamw_8bit's launches one after another).
    void (*adamw_8bit_jobs)(const Adam8Job *jobs, int njobs, const float *code_m, const float *code_v);
    // Sum of squares of the finite elements of x (n), returned to the host; *nonfinite counts the others.
    double (*sum_squares)(const real *x, size_t n, size_t *nonfinite);
    // ema = decay * ema + (1 - decay) * param (n). Training fuses it into AdamW (AdamHyper.ema).
    void (*ema_update)(real *ema, const real *param, float decay, size_t n);
} Backend;

#endif
