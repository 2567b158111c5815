// generate.h: long videos from one first frame. The three models (EMA weights of each run's newest
// usable checkpoint) run the windows of the chain (chain.h): rectified-flow sampling with Euler
// steps from t = 1 to 0 on the target slots, the anchor clean, every other conditioning frame
// noised to one fixed level (--noise-aug).
#ifndef FRAMECHAIN_GENERATE_H
#define FRAMECHAIN_GENERATE_H

#include "chain/chain_plan.h"
#include "model/model.h"

typedef struct {
    Model *m[3];    // by enum Role: starter, extrapolate, interpolate (batch 1, EMA weights)
    int step[3];    // the step of the checkpoint each was loaded from
    int size, channels;
} ChainModels;

// Load the three runs (by enum Role) and check that each is the role it is given as and that their
// frames agree. Returns 0, or -1 with one line in err; nothing is left allocated then.
int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen);
void chain_models_free(ChainModels *cm);

#define GENERATE_DEFAULT_STEPS 20
#define GENERATE_DEFAULT_NOISE_AUG 0.1

typedef struct {
    int steps;         // Euler steps per window
    uint64_t seed;     // of the sampling noise
    double noise_aug;  // the level t every context frame is noised to
    int quiet;         // no progress line
} SampleOptions;

// Run the windows of plan p. frames: (p->last_frame + 1, C, S, S) host values in [-1, 1] with frame 0
// filled in; every other frame is made (and clamped to [-1, 1]).
void chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o);

// framechain generate: load, build the plan, sample, write PATH (.mp4/.mkv/.avi/.gif, else a folder
// of PNGs) through a temporary name. Returns the exit status; errors are one line on stderr.
int generate_cli(const char *const runs[3], const char *first_frame, int frames, const char *out, double fps,
                 const SampleOptions *o, const Backend *be);

// Frame conversions between [-1, 1] planes (C, S, S) and RGB24 (S, S, 3).
void frame_from_rgb(real *dst, const uint8_t *rgb, int S);
void frame_to_rgb(uint8_t *rgb, const real *src, int S);
// The first frame of IMG (PNG/JPEG, or the first frame of a video) as (3, S, S) in [-1, 1].
int load_first_frame(const char *path, int S, real *out, char *err, size_t errlen);

#endif
