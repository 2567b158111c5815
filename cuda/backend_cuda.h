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
// For tests: a smaller cap on the attention backward's dS scratch (bytes; 0 restores ATTN_DS_CAP,
// src/backend/attn_scratch.h), to exercise its chunks.
void backend_cuda_set_attn_ds_cap(size_t bytes);
// Turn a route (cuda_common.cuh: dgelu_epilogue, attn_gemm) on or off: 0, or -1 for an unknown name.
// FRAMECHAIN_CUDA_ROUTES=name=0|1[,...] sets them when the backend starts.
int backend_cuda_set_route(const char *name, int on);
// The routes as "name=0|1,...", for logs.
const char *backend_cuda_routes(void);
#ifdef __cplusplus
}
#endif

#endif
