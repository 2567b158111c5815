// bf16.cu: bf16 operands for the tensor-core GEMMs of the "cuda" backend (the "cuda-fp32" backend
// never calls these). Master weights, gradients and optimizer state stay fp32; what a GEMM reads
// is rounded to bf16 (round to nearest even) and it accumulates in fp32:
// - weights: the model registers its one parameter allocation (register_weights); a bf16 mirror of
//   it, at the same offsets, is rebuilt in one pass the first time a GEMM reads a weight after the
//   parameters changed (upload, copy and zero mark them changed), so a training step converts its
//   weights at most once, not once per GEMM. The optimizer ops write the mirror themselves, in the
//   pass that updates the parameters (fc_bf16_mirror_to_write), so that a current mirror stays
//   current and training does not rebuild it at all. A weight outside every registered allocation
//   (the op tests) is converted on each call.
// - activations: the operands (backend.h) are bf16 in memory, written so by the ops that make
//   them; operand_upload and operand_download convert on the host. An activation gradient a GEMM
//   reads is converted on each call into per-operand scratch (fc_bf16_operand), unless the bias
//   gradient's pass rounds it (linear.cu). Attention's output gradient is converted head by head
//   (fc_bf16_heads) into the same scratch, so that its kernels copy whole 16-byte pieces.
#include <cuda_bf16.h>

#include "cuda_common.cuh"

#define BF16_THREADS 256

// dst[i] = bf16(src[i]) (grid-stride). vec (src on 16 bytes, dst on 8): four elements per thread,
// one float4 load and one 8-byte store of two bf16x2, then the n % 4 last elements one per thread;
// otherwise one element per thread. The same bytes either way (round to nearest even).
static __global__ void to_bf16_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src, size_t n,
                                      int vec) {
    size_t stride = (size_t)gridDim.x * blockDim.x, t = (size_t)blockIdx.x * blockDim.x + threadIdx.x, done = 0;
    if (vec) {
        size_t n4 = n / 4;
        for (size_t i = t; i < n4; i += stride) {
            float4 v = ((const float4 *)src)[i];
            __align__(8) __nv_bfloat162 h[2];
            h[0] = __floats2bfloat162_rn(v.x, v.y), h[1] = __floats2bfloat162_rn(v.z, v.w);
            ((uint2 *)dst)[i] = *(const uint2 *)h;
        }
        done = 4 * n4;
    }
    for (size_t i = done + t; i < n; i += stride) dst[i] = __float2bfloat16_rn(src[i]);
}

static void to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    if (!n) return;
    int vec = (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0;
    size_t threads = vec ? (n / 4 > 3 ? n / 4 : 3) : n;  // the vector path's tail needs up to 3
    unsigned blocks = fc_cdiv(threads, BF16_THREADS);
    if (blocks > 8192) blocks = 8192;
    to_bf16_kernel<<<blocks, BF16_THREADS>>>(dst, src, n, vec);
    kernelCheck();
}

// ----------------------------------------------------------------------------
// the registered parameter allocations and their mirrors (generation holds three models at once)

#define MAX_ARENAS 8
static struct {
    const float *base;      // (n) the fp32 parameters
    size_t n;
    __nv_bfloat16 *mirror;  // (n) bf16 copy, valid when !stale
    int stale;
} g_arena[MAX_ARENAS];

static void cuda_register_weights(const real *params, size_t n) {
    for (int i = 0; i < MAX_ARENAS; i++)
        if (!g_arena[i].base) {
            g_arena[i].base = params, g_arena[i].n = n, g_arena[i].stale = 1;
            g_arena[i].mirror = (__nv_bfloat16 *)fc_cuda_alloc(sizeof(__nv_bfloat16) * (n ? n : 1));
            return;
        }
    fc_die("CUDA backend: more than %d models registered at once", MAX_ARENAS);
}

static void cuda_unregister_weights(const real *params) {
    for (int i = 0; i < MAX_ARENAS; i++)
        if (g_arena[i].base == params) {
            fc_cuda_free(g_arena[i].mirror);
            g_arena[i].base = NULL, g_arena[i].mirror = NULL, g_arena[i].n = 0;
        }
}

void fc_cuda_weights_touched(const void *dst, size_t bytes) {
    const char *lo = (const char *)dst, *hi = lo + bytes;
    for (int i = 0; i < MAX_ARENAS; i++) {
        const char *b = (const char *)g_arena[i].base, *e = b + sizeof(float) * g_arena[i].n;
        if (b && lo < e && b < hi) g_arena[i].stale = 1;
    }
}

const __nv_bfloat16 *fc_bf16_weights(const float *w, size_t n) {
    for (int i = 0; i < MAX_ARENAS; i++) {
        const float *b = g_arena[i].base;
        if (b && w >= b && w + n <= b + g_arena[i].n) {
            if (g_arena[i].stale) to_bf16(g_arena[i].mirror, b, g_arena[i].n), g_arena[i].stale = 0;
            return g_arena[i].mirror + (w - b);
        }
    }
    __nv_bfloat16 *dst = (__nv_bfloat16 *)fc_cuda_scratch(SCRATCH_BF16_W, sizeof(__nv_bfloat16) * (n ? n : 1));
    to_bf16(dst, w, n);
    return dst;
}

__nv_bfloat16 *fc_bf16_mirror_to_write(const float *p, size_t n) {
    for (int i = 0; i < MAX_ARENAS; i++) {
        const float *b = g_arena[i].base;
        if (b && p >= b && p + n <= b + g_arena[i].n) return g_arena[i].stale ? NULL : g_arena[i].mirror + (p - b);
    }
    return NULL;
}

const __nv_bfloat16 *fc_bf16_operand(const float *x, size_t n, int which) {
    __nv_bfloat16 *dst = (__nv_bfloat16 *)fc_cuda_scratch(which, sizeof(__nv_bfloat16) * (n ? n : 1));
    to_bf16(dst, x, n);
    return dst;
}

// dst (nheads, rows, dh) bf16 = columns p*dh .. p*dh+dh-1 of src (rows, ld) fp32 for head p: the
// heads of attention's output gradient (T, D), nheads H, each head's rows contiguous so that
// attention copies them in 16-byte pieces whatever D is. One thread per 8
// elements (one 16-byte store); float4 loads where the source allows. dh % 8 == 0.
static __global__ void to_bf16_heads_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src,
                                            long rows, long ld, int nheads, int dh) {
    size_t n8 = (size_t)nheads * rows * dh / 8, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += stride) {
        size_t e = i * 8, rest = e / dh;
        int c = (int)(e % dh), p = (int)(rest / rows);
        long r = (long)(rest % rows);
        const float *s = src + r * ld + (long)p * dh + c;
        float v[8];
        if (((uintptr_t)s & 15) == 0) {
            float4 a = ((const float4 *)s)[0], b = ((const float4 *)s)[1];
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
            for (int k = 0; k < 8; k++) v[k] = s[k];
        }
        __align__(16) __nv_bfloat162 h[4];  // read back as one uint4
        for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        *(uint4 *)(dst + e) = *(const uint4 *)h;
    }
}

const __nv_bfloat16 *fc_bf16_heads(const float *src, long rows, long ld, int nheads, int dh, int which) {
    if (dh % 8) fc_die("fc_bf16_heads: head dim %d is not a multiple of 8", dh);
    size_t n = (size_t)nheads * rows * dh;
    __nv_bfloat16 *dst = (__nv_bfloat16 *)fc_cuda_scratch(which, sizeof(__nv_bfloat16) * (n ? n : 1));
    if (!n) return dst;
    unsigned blocks = fc_cdiv(n / 8, BF16_THREADS);
    if (blocks > 8192) blocks = 8192;
    to_bf16_heads_kernel<<<blocks, BF16_THREADS>>>(dst, src, rows, ld, nheads, dh);
    kernelCheck();
    return dst;
}

// Operands from and to the host: converted there (round to nearest even), one transfer each way.
static void cuda_operand_upload(Operand *dst, const real *src, size_t n) {
    __nv_bfloat16 *h = (__nv_bfloat16 *)fc_malloc(sizeof(__nv_bfloat16) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16_rn(src[i]);
    cudaCheck(cudaMemcpy(dst, h, sizeof(__nv_bfloat16) * n, cudaMemcpyHostToDevice));
    free(h);
}
static void cuda_operand_download(real *dst, const Operand *src, size_t n) {
    __nv_bfloat16 *h = (__nv_bfloat16 *)fc_malloc(sizeof(__nv_bfloat16) * (n ? n : 1));
    cudaCheck(cudaMemcpy(h, src, sizeof(__nv_bfloat16) * n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = __bfloat162float(h[i]);
    free(h);
}

void cuda_register_bf16(Backend *be) {
    be->operand_bytes = sizeof(__nv_bfloat16);
    be->operand_upload = cuda_operand_upload;
    be->operand_download = cuda_operand_download;
    be->register_weights = cuda_register_weights;
    be->unregister_weights = cuda_unregister_weights;
}
