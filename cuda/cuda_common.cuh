// cuda_common.cuh: what every kernel file of the CUDA backend shares: error checks that name the
// file and line, the cuBLAS handle, per-family scratch buffers, and the registration functions
// through which each file fills in its part of the op table.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "../src/backend.h"
}

#define cudaCheck(call) fc_cuda_check((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) fc_cublas_check((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad launch configuration is reported where it happened.
#define kernelCheck() fc_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline void fc_cuda_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess)
        fc_die("CUDA error at %s:%d: %s: %s (hint: check nvidia-smi and the driver version)", file, line, what,
               cudaGetErrorString(err));
}
static inline void fc_cublas_check(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS)
        fc_die("cuBLAS error at %s:%d: %s: status %d (hint: an unsupported shape or an old cuBLAS)", file, line,
               what, (int)st);
}

static inline unsigned fc_cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Scratch memory owned by the backend, one buffer per user so that two op families never
// share one; grows on demand (the device is synchronised first), never shrinks.
enum { SCRATCH_LINEAR, SCRATCH_ELEMENTWISE, SCRATCH_NORM, SCRATCH_ATTN, SCRATCH_OPTIM, SCRATCH_COUNT };
void *fc_cuda_scratch(int which, size_t bytes);
// The one cuBLAS handle (fp32 math, no TF32: results comparable with the CPU backend).
cublasHandle_t fc_cublas(void);

// Each kernel file fills in its ops.
void cuda_register_linear(Backend *be);       // cuda/linear.cu
void cuda_register_elementwise(Backend *be);  // cuda/elementwise.cu
void cuda_register_norm(Backend *be);         // cuda/norm.cu
void cuda_register_attention(Backend *be);    // cuda/attention.cu
void cuda_register_optim(Backend *be);        // cuda/optim.cu
