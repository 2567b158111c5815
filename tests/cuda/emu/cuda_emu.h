// cuda_emu.h: the CUDA kernel language on the CPU, so that the CUDA backend's own code (cuda/*.cu)
// runs under tests/cuda/test_cuda.c on a machine without a GPU. The build (Makefile: build/emu/) rewrites
// every `kernel<<<grid, block, smem>>>(args)` into `fc_emu_launch(kernel, "kernel", grid, block, smem)(args)`
// and each `extern __shared__ T name[]` into a pointer to the block's dynamic shared memory, follows
// each static `__shared__` declaration with fc_emu_shared for its names, then compiles the file as C++
// with this header included first.
//
// Semantics (tests/cuda/emu/cuda_emu.cpp): the blocks of a grid run one after another; the threads
// of a block are fibers on one host thread, each running until it finishes or waits at
// __syncthreads (the whole block) or at a warp-collective op (__shfl_xor_sync, mma.sync, ldmatrix).
// cp.async copies are held back until the thread waits for their group.
// A barrier is released when every live thread of its scope waits at it; threads waiting at
// different barriers that can never all be released are reported as a deadlock. The warp ops are
// computed by the scheduler from the lanes' operands as the PTX ISA defines them. The launch
// configuration is checked as the driver would (threads per block, grid limits, dynamic shared memory
// beyond 48 KiB without cudaFuncSetAttribute), and shared memory, dynamic and static, starts each
// block as NaN bytes.
//
// What it cannot show: speed, memory-model races between threads that a real GPU interleaves
// differently, and anything the PTX text itself gets wrong (the asm blocks have C++ twins here).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>

extern "C" void fc_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// ---- the kernel language: qualifiers become plain C++ ----
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time, so a function-local static is exactly one block's shared memory. The
// build follows each such declaration with fc_emu_shared for every name it declares: the first thread
// of a block to pass it fills the variable with NaN bytes, as a new block's shared memory is undefined
// on a GPU (a read before the block's own write, say past a missing barrier, then shows).
#define __shared__ static
void fc_emu_shared(void *var, size_t bytes);

// ---- the current thread's coordinates ----
struct FcEmuCoords {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
const FcEmuCoords *fc_emu_coords(void);
#define threadIdx (fc_emu_coords()->thread)
#define blockIdx (fc_emu_coords()->block)
#define blockDim (fc_emu_coords()->block_dim)
#define gridDim (fc_emu_coords()->grid_dim)
unsigned char *fc_emu_dynamic_smem(void);

// ---- synchronisation and warp-collective ops ----
void __syncthreads(void);
uint64_t fc_emu_shfl_xor(uint64_t bits, int lane_mask);
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 64 bits");
    if (mask != 0xffffffffu) fc_die("CUDA emulation: __shfl_xor_sync with a partial mask is not emulated");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = fc_emu_shfl_xor(bits, lane_mask);
    memcpy(&v, &bits, sizeof v);
    return v;
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d = c in place; fragments as in the PTX ISA.
void fc_emu_mma16816_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
// ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16 (num 1, 2 or 4): lanes 0 .. 8 num - 1 give the
// addresses of the rows of the num 8x8 matrices; r[i] receives this lane's part of matrix i.
void fc_emu_ldmatrix(uint32_t *r, int num, const void *row_address, bool trans);

// cp.async (global to shared): the copy joins this thread's open group; commit closes the group;
// wait(n) completes every committed group but the n newest. From the issue until then the bytes are
// NaN, so a read that does not wait for its copy, or a warp still reading a buffer that another
// refills, sees them. !valid: zeros (src-size 0).
void fc_emu_cp_async(void *smem, const void *gmem, int bytes, bool valid);
void fc_emu_cp_async_commit(void);
void fc_emu_cp_async_wait(int n);

// ---- arithmetic intrinsics: correctly rounded, never contracted (the build uses -ffp-contract=off) ----
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
using std::max;
using std::min;

// cuda_runtime.h declares this overload for nvcc only.
template <typename T>
static inline cudaError_t cudaFuncSetAttribute(T *kernel, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)kernel, attr, value);
}

// ---- launches ----
void fc_emu_run_grid(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem,
                     const std::function<void()> &body);

template <typename... P>
struct FcEmuLaunch {
    void (*kernel)(P...);
    const char *name;
    dim3 grid, block;
    size_t smem;
    // The arguments convert to the parameter types at the call, as they do at a real launch.
    template <typename... A>
    void operator()(A... args) const {
        void (*k)(P...) = kernel;
        fc_emu_run_grid((const void *)k, name, grid, block, smem, [=]() { k(args...); });
    }
};

template <typename... P>
static inline FcEmuLaunch<P...> fc_emu_launch(void (*kernel)(P...), const char *name, dim3 grid, dim3 block,
                                              size_t smem = 0) {
    return FcEmuLaunch<P...>{kernel, name, grid, block, smem};
}
