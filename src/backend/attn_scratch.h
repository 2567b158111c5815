// attn_scratch.h: the scratch memory of the CUDA tensor-core attention's backward, sized here so that
// cuda/attention_tc.cu allocates exactly what the memory plan (src/model/memplan.c) counts.
//
// The kernels pack sequences of up to ATTN_PACK_MAX tokens several to a block. For longer ones the
// backward stores dS, so that one batched GEMM computes dQ: bf16, (len, attn_ds_ld(len)) per
// (sequence, head) pair, three pointers a pair, in chunks of pairs of at most ATTN_DS_CAP bytes (one
// pair at least).
#ifndef FRAMECHAIN_ATTN_SCRATCH_H
#define FRAMECHAIN_ATTN_SCRATCH_H

#include <stddef.h>

#define ATTN_PACK_MAX 32
// The longest sequence the attn_short route takes (cuda/attention_short.cu: no scratch, a sequence
// in registers); here so that its tests know it too.
#define ATTN_SHORT_MAX 8
#define ATTN_DS_CAP ((size_t)256 << 20)

static inline int attn_ds_ld(int len) { return (len + 7) / 8 * 8; }  // rows of whole 16-byte pieces

// Pairs of one chunk, for `pairs` (sequence, head) pairs of `len` tokens under `cap` bytes.
static inline long attn_ds_chunk_pairs(long pairs, int len, size_t cap) {
    long per_pair = 2L * len * attn_ds_ld(len) + 3 * (long)sizeof(void *);
    long chunk = (long)(cap / (size_t)per_pair);
    if (chunk < 1) chunk = 1;
    return chunk < pairs ? chunk : pairs;
}
static inline size_t attn_ds_pointer_bytes(long chunk) {
    return (3 * sizeof(void *) * (size_t)chunk + 255) / 256 * 256;
}
static inline size_t attn_ds_scratch_bytes(long pairs, int len, size_t cap) {
    long chunk = attn_ds_chunk_pairs(pairs, len, cap);
    return attn_ds_pointer_bytes(chunk) + 2 * (size_t)chunk * len * attn_ds_ld(len);
}

#endif
