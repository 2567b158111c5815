// backend_cuda.h: the CUDA backend's entry points, for C callers (the registry, the tests). In a
// build without the CUDA objects, src/backend/registry.c's weak definitions answer instead.
#ifndef FRAMECHAIN_BACKEND_CUDA_H
#define FRAMECHAIN_BACKEND_CUDA_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
// The CUDA backend (bf16 GEMMs), or NULL when this build or machine has none; *why says why.
const Backend *backend_cuda(const char **why);
// The CUDA backend with bf16 (bf16 != 0) or fp32 GEMMs ("cuda" / "cuda-fp32").
const Backend *backend_cuda_precision(int bf16, const char **why);
// The GPU the backend takes, as an index among the visible ones (taken modulo their count): a
// rank's local rank, so that the ranks on one machine spread over its GPUs. Before the first
// backend_cuda* call; 0 when never called.
void backend_cuda_set_device(int index);
// NCCL for the ranks of a run (cuda/nccl.cu): 0 once every rank has joined (err then names the NCCL
// version), or -1 with why (a build without NCCL); share(bytes, n) carries rank 0's bytes to every
// rank (dist_broadcast). Every rank calls it, and then each of the four below, together.
int backend_cuda_nccl_start(int rank, int size, void (*share)(void *bytes, size_t n), char *err, size_t errlen);
// 1 where this build's CUDA backend has NCCL (backend_cuda_nccl_start can start it), else 0: what the
// memory plan needs to know before anything starts.
int backend_cuda_nccl_built(void);
// In place over the ranks: the sum of n floats of device memory.
void backend_cuda_nccl_sum(float *dev, size_t n);
// The same without waiting, for the parts of the gradients the backward has made so far (model.h:
// grads_ready): each is summed once the kernels queued before the call are done, beside the ones
// queued after it. finish: whatever is queued after it waits for every started sum.
void backend_cuda_nccl_sum_start(float *dev, size_t n);
void backend_cuda_nccl_sum_finish(void);
// ZeRO-1's all-gather, in place: rank r's values [start[r], start[r + 1]) of dev to every rank.
void backend_cuda_nccl_gather(float *dev, const size_t *start);
// For tests: a smaller cap on the attention backward's dS scratch (bytes; 0 restores ATTN_DS_CAP,
// src/backend/attn_scratch.h), to exercise its chunks.
void backend_cuda_set_attn_ds_cap(size_t bytes);
// Turn a route (cuda_common.cuh's list: dgelu_epilogue, attn_gemm, attn_short, qk_norm_fused,
// ln_mod_fused, adam8_warp, fp8_fwd, fp8_dgrad, fp8_wgrad) on or off: 0, or -1 for an unknown name.
// FRAMECHAIN_CUDA_ROUTES=name=0|1[,...] sets them when the backend starts.
int backend_cuda_set_route(const char *name, int on);
// The routes as "name=0|1,...", for logs.
const char *backend_cuda_routes(void);
// For tests: how many calls a route has taken (attn_short: attention passes, forward or backward;
// qk_norm_fused, ln_mod_fused: backward calls; adam8_warp: optimizer calls; fp8_*: GEMMs), or -1 for
// a route that does not count them; "fp8_dy_scale": the linear backwards whose dy scale for the fp8
// dx and dw GEMMs came from the bias gradient's pass; "fp8_amax": the fp8 routes' passes over an
// operand for its maximum.
long backend_cuda_route_calls(const char *name);
// For tests: the fp8 scratch (backend.h: route_scratch) the fp8 GEMMs taken since the last reset
// asked for, in bytes; reset != 0 starts counting again.
size_t backend_cuda_fp8_scratch_seen(int reset);
// The first fp8 GEMM cuBLASLt refused since the start ("" where none): the route, the call and its
// status, the plan. A route on such a card runs its GEMMs in bf16 (and says so once on stderr).
const char *backend_cuda_fp8_refusal(void);
// Which fp8 GEMMs this card's cuBLASLt takes: the routes' configuration and its neighbours on one
// small problem, "name: answer; ..." into out (n bytes; cuda/fp8_probe.cu). For tests and logs.
void backend_cuda_fp8_probe(char *out, size_t n);
#ifdef __cplusplus
}
#endif

#endif
