// cpu_optim.c: the CPU backend's optimizer ops: AdamW with fp32 moments and with 8-bit block-wise
// quantised moments (bitsandbytes-style dynamic codes, quant8.h), the sum of squares behind the
// gradient norm, and the EMA of the weights. Contracts in backend.h.
//
// AdamW and the EMA compute in float, as torch does: cuda/optim.cu repeats this math operation for
// operation, and in double it would run at 1/64 of the float rate on the GeForce cards framechain
// targets (a 0.95 B model's optimizer step: some 1e11 double operations, most of a second on an
// RTX 3090). The sum of squares stays in double: two operations an element.
//
// Every loop runs over independent elements or blocks, and every reduction is split into fixed
// chunks combined in order, so the results are the same bytes for any number of threads.
#include "backend/cpu/cpu_optim.h"

#include <math.h>

#include "backend/adam_const.h"
#include "backend/quant8.h"

// The step for one element whose gradient g (already scaled) is finite; updates *m, *v and returns
// the new parameter. torch.optim.AdamW: p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v / bc2) + eps),
// with p (1 - lr wd) as p - p (lr wd): 1 - 1e-6 rounded to float would be off by up to 3e-8, a 3%
// error in the decay itself. cuda/optim.cu does the same operations in the same order.
static inline float adam_elem(const AdamConst *c, float p, float g, float *m, float *v) {
    *m = c->b1 * *m + c->one_m_b1 * g;
    *v = c->b2 * *v + c->one_m_b2 * g * g;
    return (p - p * c->lr_wd) - c->step_size * *m / (sqrtf(*v / c->bc2) + c->eps);
}

// The EMA's step for one element (cpu_ema_update's formula): d ema + w p.
static inline float ema_elem(float d, float w, float ema, float p) { return d * ema + w * p; }

void cpu_adamw_fp32(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    real *ema = h.ema;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        // a NaN/Inf gradient leaves p, m and v as they are
        if (isfinite(g)) param[i] = adam_elem(&c, param[i], g * c.scale, &m[i], &v[i]);
        if (ema) ema[i] = ema_elem(c.ema_d, c.ema_w, ema[i], param[i]);
    }
}

void cpu_adamw_8bit(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m, float *absmax_v,
                    const float *code_m, const float *code_v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    size_t nblocks = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        size_t i0 = b * ADAM8_BLOCK, len = n - i0 < ADAM8_BLOCK ? n - i0 : ADAM8_BLOCK;
        // The block's moments between the dequantisation and the requantisation: the floats fp32
        // AdamW would hold. A zero absmax (the zero-filled state) dequantises every code to 0.
        float mb[ADAM8_BLOCK], vb[ADAM8_BLOCK];
        float am = absmax_m[b], av = absmax_v[b];
        float max_m = 0.0f, max_v = 0.0f;
        for (size_t j = 0; j < len; j++) {
            size_t i = i0 + j;
            float mi = code_m[m8[i]] * am, vi = code_v[v8[i]] * av;
            float g = grad[i];
            // a non-finite gradient: p unchanged, the moments keep their dequantised values
            if (isfinite(g)) param[i] = adam_elem(&c, param[i], g * c.scale, &mi, &vi);
            if (h.ema) h.ema[i] = ema_elem(c.ema_d, c.ema_w, h.ema[i], param[i]);
            mb[j] = mi, vb[j] = vi;
            if (fabsf(mi) > max_m) max_m = fabsf(mi);
            if (vi > max_v) max_v = vi;
        }
        absmax_m[b] = max_m, absmax_v[b] = max_v;
        for (size_t j = 0; j < len; j++) {
            m8[i0 + j] = max_m > 0.0f ? quant8_encode_table(code_m, mb[j] / max_m) : 0;
            v8[i0 + j] = max_v > 0.0f ? quant8_encode_table(code_v, vb[j] / max_v) : 0;
        }
    }
}

// Chunks of the sum of squares, and how many chunks one parallel pass sums (their partial sums live
// on the stack, then are added in chunk order).
enum { SS_CHUNK = 4096, SS_GROUP = 256 };

double cpu_sum_squares(const real *x, size_t n, size_t *nonfinite) {
    size_t nchunks = (n + SS_CHUNK - 1) / SS_CHUNK, bad = 0;
    double total = 0.0;
    for (size_t g0 = 0; g0 < nchunks; g0 += SS_GROUP) {
        int count = nchunks - g0 < SS_GROUP ? (int)(nchunks - g0) : SS_GROUP;
        double part[SS_GROUP];
        size_t part_bad[SS_GROUP];
#pragma omp parallel for schedule(static)
        for (int k = 0; k < count; k++) {
            size_t i0 = (g0 + k) * SS_CHUNK, i1 = i0 + SS_CHUNK < n ? i0 + SS_CHUNK : n, nb = 0;
            // four accumulators in a fixed pattern: no serial add chain, still a fixed order
            double s[4] = {0, 0, 0, 0};
            for (size_t i = i0; i < i1; i++) {
                double xi = x[i];
                if (isfinite(xi))
                    s[i & 3] += xi * xi;
                else
                    nb++;
            }
            part[k] = (s[0] + s[1]) + (s[2] + s[3]);
            part_bad[k] = nb;
        }
        for (int k = 0; k < count; k++) total += part[k], bad += part_bad[k];
    }
    if (nonfinite) *nonfinite = bad;
    return total;
}

void cpu_ema_update(real *ema, const real *param, float decay, size_t n) {
    float d = decay, w = (float)(1.0 - (double)decay);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) ema[i] = ema_elem(d, w, ema[i], param[i]);
}
