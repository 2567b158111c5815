// flow.c: the rectified-flow objective (docs/network.md, "Objective").
#include <math.h>

#include "model/flow.h"
#include "base/philox.h"

void flow_slot_levels(const Config *c, int B, uint64_t seed, uint32_t step, real *t, real *offset, real *mask) {
    for (int b = 0; b < B; b++) {
        double z = philox_normal(seed, step, RNG_TIME, (uint64_t)b);
        double tb = 1.0 / (1.0 + exp(-(c->t_logit_mean + c->t_logit_std * z)));
        int drop = c->cond_drop > 0 && philox_uniform(seed, step, RNG_DROP, (uint64_t)b) < c->cond_drop;
        for (int f = 0; f < c->slots; f++) {
            int target = c->slot_kind[f] == SLOT_TARGET;
            // Noise augmentation: a context slot (never the anchor) is noised to its own level, so that
            // the model learns not to trust generated conditioning frames blindly.
            double aug = c->slot_kind[f] == SLOT_CONTEXT
                             ? c->noise_aug_max * philox_uniform(seed, step, RNG_AUG, (uint64_t)b * MAX_SLOTS + f)
                             : 0.0;
            t[b * c->slots + f] = target ? (real)tb : drop ? 1 : (real)aug;
            offset[b * c->slots + f] = c->slot_offset[f];
            mask[b * c->slots + f] = (real)target;
        }
    }
}

void flow_prepare_batch(Model *m, const real *x0, uint64_t seed, uint32_t step) {
    const Backend *be = m->be;
    size_t bytes = sizeof(real) * m->S;
    real *host = fc_malloc(3 * bytes);
    flow_slot_levels(&m->cfg, m->B, seed, step, host, host + m->S, host + 2 * m->S);
    be->upload(m->in.t, host, bytes);
    be->upload(m->in.offset, host + m->S, bytes);
    be->upload(m->in.mask, host + 2 * m->S, bytes);
    free(host);
    be->randn(m->in.noise, (size_t)m->S * m->E, 0, 1, seed, step, RNG_NOISE, 0);
    be->flow_mix(m->in.xt, m->in.v, x0, m->in.noise, m->in.t, m->S, m->E);
}

void flow_corrupt_context(const Config *c, int B, real *x0, uint64_t seed, uint32_t step) {
    if (c->ref_noise <= 0) return;
    size_t E = (size_t)c->channels * c->frame_size * c->frame_size;
    real *noise = fc_malloc(sizeof(real) * E);
    for (int b = 0; b < B; b++)
        for (int f = 0; f < c->slots; f++) {
            if (c->slot_kind[f] != SLOT_CONTEXT) continue;
            size_t at = ((size_t)b * c->slots + f) * E;
            philox_fill_normal(noise, E, 0, (real)c->ref_noise, seed, step, RNG_REF, at);
            for (size_t e = 0; e < E; e++) x0[at + e] += noise[e];
        }
    free(noise);
}

void flow_delta_targets(const Config *c, int B, real *x0) {
    if (c->targets != TARGETS_DELTAS) return;
    size_t E = (size_t)c->channels * c->frame_size * c->frame_size;
    for (int b = 0; b < B; b++) {
        real *w = x0 + (size_t)b * c->slots * E;
        for (int f = 0; f < c->slots; f++) {
            if (c->slot_kind[f] != SLOT_TARGET) continue;
            const real *ref = w + (size_t)config_reference_slot(c, f) * E;
            for (size_t e = 0; e < E; e++) w[f * E + e] = (real)((w[f * E + e] - ref[e]) * c->delta_scale);
        }
    }
}

void flow_delta_to_frame(const Config *c, real *frame, const real *delta, const real *reference, size_t E) {
    for (size_t e = 0; e < E; e++) frame[e] = (real)(reference[e] + delta[e] / c->delta_scale);
}
