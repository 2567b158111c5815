// philox.c: Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as
// 1, 2, 3", SC 2011) and the uniform and normal draws built on it.
#include "base/philox.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void philox_block(uint64_t seed, uint32_t step, uint32_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), step, stream};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    philox4x32_10(ctr, key, out);
}

static double u32_to_uniform(uint32_t u) { return ((double)(u >> 8) + 0.5) * (1.0 / 16777216.0); }

uint32_t philox_u32(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index) {
    uint32_t r[4];
    philox_block(seed, step, stream, index >> 2, r);
    return r[index & 3];
}

double philox_uniform(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index) {
    return u32_to_uniform(philox_u32(seed, step, stream, index));
}

double philox_normal(uint64_t seed, uint32_t step, uint32_t stream, uint64_t index) {
    uint32_t r[4];
    philox_block(seed, step, stream, index >> 2, r);
    int pair = (int)(index & 2);  // words (0,1) or (2,3)
    double radius = sqrt(-2.0 * log(u32_to_uniform(r[pair])));
    double angle = 6.283185307179586 * u32_to_uniform(r[pair + 1]);
    return (index & 1) ? radius * sin(angle) : radius * cos(angle);
}

void philox_fill_uniform(real *out, size_t n, real lo, real hi, uint64_t seed, uint32_t step,
                         uint32_t stream, uint64_t offset) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = (real)(lo + (hi - lo) * philox_uniform(seed, step, stream, offset + i));
}

// philox_normal for the four indices of one block at once: one Philox block and one logarithm per
// pair instead of one of each per value; the same operations on each value, so the same bytes.
static void philox_normal4(uint64_t seed, uint32_t step, uint32_t stream, uint64_t block, double out[4]) {
    uint32_t r[4];
    philox_block(seed, step, stream, block, r);
    for (int pair = 0; pair < 4; pair += 2) {
        double radius = sqrt(-2.0 * log(u32_to_uniform(r[pair])));
        double angle = 6.283185307179586 * u32_to_uniform(r[pair + 1]);
        out[pair] = radius * cos(angle), out[pair + 1] = radius * sin(angle);
    }
}

// Blocks of 4 indices (the first and last may be partial), so that every value comes from its own
// index whatever the offset and the thread count.
void philox_fill_normal(real *out, size_t n, real mean, real std, uint64_t seed, uint32_t step,
                        uint32_t stream, uint64_t offset) {
    if (n == 0) return;
    uint64_t b0 = offset >> 2, b1 = (offset + n - 1) >> 2;
#pragma omp parallel for schedule(static)
    for (uint64_t b = b0; b <= b1; b++) {
        double v[4];
        philox_normal4(seed, step, stream, b, v);
        for (int k = 0; k < 4; k++) {
            uint64_t idx = 4 * b + k;
            if (idx >= offset && idx < offset + n) out[idx - offset] = (real)(mean + std * v[k]);
        }
    }
}
