// philox.h: the one source of randomness, Philox4x32-10 keyed by (seed, step, stream, index).
// Stateless: the same (seed, step, stream, index) gives the same number on any backend and
// after any resume, so a checkpoint needs no generator state beyond the step counter.
#ifndef FRAMECHAIN_PHILOX_H
#define FRAMECHAIN_PHILOX_H

#include <stdint.h>

#include "base/common.h"

// Streams separate the uses of randomness within one step.
enum {
    RNG_INIT = 1,      // parameter initialisation (step 0)
    RNG_NOISE = 2,     // the diffusion noise e
    RNG_TIME = 3,      // the diffusion time t of target slots
    RNG_DATA = 4,      // which clip and window a step sees
    RNG_AUG = 5,       // noise augmentation of context slots
    RNG_DROP = 6,      // which windows' given frames are dropped (cond_drop)
    RNG_REF = 7,       // the pixel noise of context frames (ref_noise)
    RNG_TEST = 100,    // inputs made up by the tests
};

// One Philox4x32-10 block: 4 random words for the 128-bit counter and 64-bit key.
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

// Element `index` of the stream (seed, step, stream), as a 32-bit word, a uniform in (0, 1),
// or a standard normal (Box-Muller in double on the block's word pairs).
uint32_t philox_u32(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index);
double philox_uniform(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index);
double philox_normal(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index);

// Fill out[i] with element offset+i of the stream; parallel and independent of the thread count.
void philox_fill_uniform(real *out, size_t n, real lo, real hi, uint64_t seed, uint32_t step,
                         uint32_t stream, uint64_t offset);
void philox_fill_normal(real *out, size_t n, real mean, real std, uint64_t seed, uint32_t step,
                        uint32_t stream, uint64_t offset);

#endif
