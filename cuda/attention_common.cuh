// attention_common.cuh: what the two attention paths share (attention.cu: fp32; attention_tc.cu: bf16
// on the tensor cores): where a sequence's tokens and a head's q, k and v columns lie, how a block's
// index names its (sequence, head, tile), the softmax scale, and the entry points' checks and their
// dispatch on the head dimension. Include it after cuda_common.cuh.
#pragma once

#include <math.h>

#include <type_traits>

// Row (of qkv, out, dout) of token 0 of sequence seq = o * n_inner + i (the CPU's task order); token k
// lies k * tok_stride rows further. Index: the caller's type of sequence numbers (int or long).
template <typename Index>
__device__ __forceinline__ long attn_seq_base(const AttnLayout &lay, Index seq) {
    return (long)(seq / lay.n_inner) * lay.outer_stride + (long)(seq % lay.n_inner) * lay.inner_stride;
}

// Sum over the TPR lanes of a group (aligned inside the warp); every lane gets the same bits.
// The whole warp must be converged here.
template <int TPR>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
    for (int off = 1; off < TPR; off <<= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// One head's columns of a (T, 3D) matrix laid out as qkv (or its gradient dqkv): q at columns [0, D),
// k at [D, 2D), v at [2D, 3D), head h owning dh columns of each part; row r of q is q + r * ld.
template <typename T>
struct QkvHead {
    T *q, *k, *v;
    int ld;
    __device__ QkvHead(T *qkv, int D, int h, int dh)
        : q(qkv + (long)h * dh), k(q + D), v(q + 2L * D), ld(3 * D) {}
};

// Block bid of a 1-D attention grid = (group * H + h) * ntiles + tile, the tile fastest so that the
// blocks of one (group, head) run together and share its K and V in L2. A group is one sequence (or
// in attention_tc.cu a pack of short ones); pair = group * H + h.
struct AttnBlockIndex {
    unsigned pair, group;
    int h, tile;
    __device__ AttnBlockIndex(unsigned bid, int H, int ntiles)
        : pair(bid / ntiles), group(pair / H), h((int)(pair % H)), tile((int)(bid % ntiles)) {}
};

// s_ij = scale * q_i . k_j, scale = 1 / sqrt(dh) as the CPU rounds it.
static inline float attn_scale(int dh) { return (float)(1.0 / sqrt((double)dh)); }

// What every entry point first works out: the head dimension (fc_attn_head_dim dies where no kernel
// takes it) and the number of sequences, 0 when the layout holds no token (nothing to launch).
struct AttnCall {
    int dh;
    long n_seq;
    AttnCall(const AttnLayout &lay, int D, int H, const char *op)
        : dh(fc_attn_head_dim(D, H, op)), n_seq(lay.len > 0 ? (long)lay.n_outer * lay.n_inner : 0) {}
    bool empty() const { return n_seq <= 0; }
    // launch(std::integral_constant<int, dh>()): the kernels are templates on the head dimension.
    template <typename Launch>
    void dispatch(Launch &&launch) const {
        switch (dh) {
        case 16: launch(std::integral_constant<int, 16>()); break;
        case 32: launch(std::integral_constant<int, 32>()); break;
        case 64: launch(std::integral_constant<int, 64>()); break;
        default: launch(std::integral_constant<int, 128>()); break;
        }
    }
};
