// flow.h: the rectified-flow objective. x_t = (1 - t) x0 + t e, the network predicts v = e - x0,
// and the loss is taken on the plan's target slots only.
#ifndef FRAMECHAIN_FLOW_H
#define FRAMECHAIN_FLOW_H

#include "model/model.h"

// Per-slot noise level, time offset and loss mask for the windows of one step, on the host:
// target slots share one t per window, drawn logit-normal from (seed, step, RNG_TIME, window);
// the anchor gets t = 0, a context slot a level drawn uniformly in [0, noise_aug_max] from
// (seed, step, RNG_AUG, window * MAX_SLOTS + slot) (noise augmentation). With cond_drop, a window
// whose philox_uniform(seed, step, RNG_DROP, window) < cond_drop has every given slot (the anchor
// too) at t = 1, pure noise: the unconditional model of guidance. t, offset, mask: (B * F).
// `window` counts from b0: the windows b0 .. b0 + B - 1 of the step's global batch (a rank's part of
// it, dist.h; 0 for one rank), so that a window's draws do not depend on how many ranks share the batch.
void flow_slot_levels(const Config *c, int B, int b0, uint64_t seed, uint32_t step, real *t, real *offset, real *mask);

// From the clean windows x0 (backend memory, (B, F, C, H, W)) fill m->in for one training step:
// the levels above, e from (seed, step, RNG_NOISE) at element b0 * F * E onwards, x_t and the target v;
// the windows are b0 .. b0 + B - 1 of the global batch (as above).
void flow_prepare_batch(Model *m, const real *x0, int b0, uint64_t seed, uint32_t step);

// ref_noise: every context slot of the clean windows x0 (host, (B, F, C, H, W)) gets pixel noise
// of that std, from (seed, step, RNG_REF, (window * F + slot) * E + value), in place, standing in for
// the errors of the frames the chain made; with targets = deltas the deltas are then taken from the
// noised frame, so that the network learns to clean it. Nothing when ref_noise is 0. Windows b0 ..
// b0 + B - 1 of the global batch (as above).
void flow_corrupt_context(const Config *c, int B, int b0, real *x0, uint64_t seed, uint32_t step);
// The frames the window's delta targets are taken from: for every target slot f, (E) values at
// refs + f * E (refs: (F, E); other slots not written). With delta_reference = nearest, f's
// reference slot's frame (config_reference_slot); with moved, that frame shifted by the velocity
// of the global motion (global_motion.h) between it and the context slots next to it in time (one
// on each side, where there is one; least squares over the two; never the anchor) times f's offset
// from it, the velocity measured once per reference slot. With anchor_snap > 0, every pixel of a
// reference within anchor_snap of the anchor slot's in every channel then takes the anchor's values,
// where the reference stands still (no motion measured; a moved one is not snapped). With local,
// each 8x8 tile carried along its own motion; with objects, over a flat background each object moved
// along its own (object_motion.h), elsewhere moved's.
// given[i]: slot i's frame for every given slot of the window (target slots are not read);
// offset[i]: slot i's time offset (the plan's, or the chain window's where a frame stands in); the
// anchor's is its true distance (in training the plan's, in a chain the anchor's frame less the
// window's, which the network is not told), read by reference_fill_from = anchor and by a target's
// lead where the anchor is its reference slot.
void flow_references(const Config *c, const real *const *given, const float *offset, real *refs);
// targets = deltas: every target slot of the clean windows x0 (host, (B, F, C, H, W)) becomes
// (x0[slot] - its reference (flow_references)) * delta_scale, in place; the given slots stay.
// Nothing otherwise.
void flow_delta_targets(const Config *c, int B, real *x0);
// The inverse, for one sampled window: frame = reference + delta / delta_scale, (E) values.
void flow_delta_to_frame(const Config *c, real *frame, const real *delta, const real *reference, size_t E);

#endif
