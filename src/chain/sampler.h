// sampler.h: the chain's sampler. The three models (EMA weights of each run's newest usable
// checkpoint) run the windows of the chain (chain_plan.h): rectified-flow sampling with Euler steps
// from t = 1 to 0 on the target slots, the anchor clean, every other conditioning frame noised to one
// fixed level (--noise-aug). Used by generate and eval alike.
#ifndef FRAMECHAIN_SAMPLER_H
#define FRAMECHAIN_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "backend/backend.h"
#include "model/model.h"
#include "chain/chain_plan.h"
#include "video/video.h"  // frame_from_rgb, frame_to_rgb

// ----------------------------------------------------------------------------
// the three models

typedef struct {
    Model *m[3];    // by enum Role: starter, extrapolate, interpolate (batch 1, EMA weights)
    int step[3];    // the step of the checkpoint each was loaded from
    int size, channels;
} ChainModels;

// Load the three runs (by enum Role) and check that each is the role it is given as and that their
// frames agree. Returns 0, or -1 with one line in err; nothing is left allocated then.
int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen);
void chain_models_free(ChainModels *cm);

// ----------------------------------------------------------------------------
// sampling

#define SAMPLE_DEFAULT_NOISE_AUG 0.1
#define SAMPLE_DEFAULT_GUIDANCE 1.0
#define SAMPLE_DEFAULT_TEMPERATURE 1.0

typedef struct {
    int steps;         // Euler steps per window; 0: each model's own (its config's sample_steps)
    uint64_t seed;     // of the sampling noise
    double noise_aug;  // the level t every context frame is noised to
    double guidance;   // history guidance w: v = v_uncond + w (v_cond - v_uncond); 1: the conditional alone
    double temperature;  // the targets start from noise of this standard deviation (1: the trained prior)
    int quiet;         // no progress line
} SampleOptions;

// "" when every model can sample with o->guidance, else one line naming a model trained without
// cond_drop (guidance other than 1 needs the unconditional model that cond_drop trains).
int chain_check_guidance(const ChainModels *cm, double guidance, char *err, size_t errlen);

// "5 Euler steps", or with steps 0 and models of different sample_steps "Euler steps 5 / 5 / 20 (starter
// / extrapolate / interpolate)": what chain_sample will do, for the header lines of generate and eval.
void chain_describe_steps(const ChainModels *cm, int steps, char *buf, size_t len);

// Run the windows of plan p. frames: (p->last_frame + 1, C, S, S) host values in [-1, 1] with frame 0
// filled in; every other frame is made (and clamped to [-1, 1]).
void chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o);

// ----------------------------------------------------------------------------
// frames

// The first K frames of PATH as (K, 3, S, S) in [-1, 1]: a video's first K, or (K = 1) a PNG/JPEG;
// shapes:N the built-in moving-shapes clip N. Returns 0, or -1 with one line in err.
int load_first_frames(const char *path, int S, int K, real *out, char *err, size_t errlen);

#endif
