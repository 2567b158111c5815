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
#include "model/autoencoder.h"
#include "model/model.h"
#include "chain/chain_plan.h"

// ----------------------------------------------------------------------------
// the three models

typedef struct {
    Model *m[3];    // by enum Role: starter, extrapolate, interpolate (batch 1, EMA weights)
    int step[3];    // the step of the checkpoint each was loaded from
    int size, channels;
    char autoencoder[320];  // models trained on latents: the autoencoder's identity (dataset/latents.h); "": frames
    long guard_outside[2];  // frames the chains sampled so far left outside the colour guard's band, and
                            // above the sharpness guard's top (DriftGuardAction.outside): chain_guards_note
} ChainModels;

// Load the three runs (by enum Role) and check that each is the role it is given as and that their
// frames agree: the same size and channels, and RGB frames or the latents of one autoencoder for all
// three. Returns 0, or -1 with one line in err; nothing is left allocated then.
int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen);
void chain_models_free(ChainModels *cm);

// The autoencoder of models trained on latents: the file at vae (--vae), with its encoder and decoder,
// and the very file they were trained with (its SHA-256 against their record), set to the scaling they
// were trained with, into *ae; *ae NULL for models trained on frames and no vae. 0, or -1 with one line
// (vae missing, another file, vae given to models of frames). who: the command, for the line.
int chain_load_autoencoder(const ChainModels *cm, const char *vae, const char *who, const Backend *be, Autoencoder **ae,
                           char *err, size_t errlen);

// ----------------------------------------------------------------------------
// sampling

#define SAMPLE_DEFAULT_NOISE_AUG 0.1
#define SAMPLE_DEFAULT_GUIDANCE 1.0
#define SAMPLE_GUARD_DEFAULT (-1.0)         // SampleOptions' guards: the default for the models (settled below)
#define SAMPLE_DEFAULT_SHARPNESS_GUARD 0.05  // for frames of pixels; off for latents
#define SAMPLE_DEFAULT_COLOUR_GUARD 0.0
#define SAMPLE_DEFAULT_COLOUR_RAMP 96        // frames after the last given one to the colour band's full hold
#define SAMPLE_MODEL_TEMPERATURE (-1.0)  // SampleOptions.temperature: each model's sample_temperature

typedef struct {
    int steps;         // Euler steps per window; 0: each model's own (its config's sample_steps)
    uint64_t seed;     // of the sampling noise
    double noise_aug;  // the level t every context frame is noised to
    double guidance;   // history guidance w: v = v_uncond + w (v_cond - v_uncond); 1: the conditional alone
    double temperature;  // the targets start from noise of this standard deviation (1: the trained prior);
                         // SAMPLE_MODEL_TEMPERATURE (negative): each model's own (its config's sample_temperature)
    double sharpness_guard;  // drift_guard.h, frames of pixels only: 0 off, else each made frame's
                             // sharpness held at most (1 + this) of frame 0's; SAMPLE_GUARD_DEFAULT
                             // until chain_settle_options
    double colour_guard;     // 0 off, else each made frame's channel means and contrasts held within
                             // (1 +- this) of frame 0's; SAMPLE_GUARD_DEFAULT as sharpness_guard
    int colour_ramp;         // the colour band narrows to colour_guard over this many frames after the
                             // last given frame (drift_guard_colour_band); 0: the full hold at once
    int latent;        // the frames are latents: made values are not clamped to [-1, 1] as pixels are
    int quiet;         // no progress line
} SampleOptions;

// Settle o's defaults for these models (a guard left at SAMPLE_GUARD_DEFAULT: its default for frames of
// pixels, off for latents) and check that they can sample with it: 0, or -1 with one line: guidance
// other than 1 needs the models that run trained with cond_drop (the unconditional model it trains:
// not the starter from `given` frames past frame 0, whose window is given); a drift guard
// asked for needs RGB frames.
int chain_settle_options(const ChainModels *cm, SampleOptions *o, int given, char *err, size_t errlen);
// The frames the drift guards could not bring within their bands in the chains sampled so far (pixels
// clipped at black or white), out of `made`: 1 with one line in buf, 0 when every frame was.
int chain_guards_note(const ChainModels *cm, long made, char *buf, size_t len);
// The models that run and condition on context frames learnt them noised to levels up to their
// noise_aug_max: a chain at a higher level shows them frames noisier than any they saw. 1 with one
// line in buf naming them and the highest level they all saw; 0 when each saw this one.
int chain_noise_aug_unseen(const ChainModels *cm, double level, int given, char *buf, size_t len);

// "5 Euler steps", or with steps 0 and models of different sample_steps "Euler steps 5 / 5 / 20 (starter
// / extrapolate / interpolate)": what chain_sample will do, for the header lines of generate and eval.
void chain_describe_steps(const ChainModels *cm, int steps, char *buf, size_t len);
// The temperature m samples with when asked for `temperature`: that, or (SAMPLE_MODEL_TEMPERATURE)
// the model's sample_temperature.
double sample_temperature_of(const Model *m, double temperature);
// "temperature 0.85", or with SAMPLE_MODEL_TEMPERATURE and models of different sample_temperature
// "temperature 1 / 0.85 / 0.85 (starter / extrapolate / interpolate)", as chain_describe_steps.
void chain_describe_temperature(const ChainModels *cm, double temperature, char *buf, size_t len);
// "drift guards: sharpness at most 1.05x frame 0's, colour off": the guards of SampleOptions, for the
// header lines of generate and eval; from `given` frames, the anchor is the last of them (frame 6's).
void chain_describe_guards(const SampleOptions *o, int given, char *buf, size_t len);

// Run the windows of plan p. frames: (p->last_frame + 1, C, S, S) host values in [-1, 1] with the
// given frames filled in; every other frame is made (and clamped to [-1, 1]). Every frame is kept:
// eval's way, which scores them all. 0, or -1 with one line in err (a model that made NaN values).
int chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o, char *err, size_t errlen);

// m->B windows of m's own plan at once, as the chain samples one (the same steps, noise levels and
// guidance; window b's draws keyed by first + b as a chain's window k's by k, so that windows sampled
// in groups of m->B get the draws of one batch): windows (B, F, C, S, S) host values in [-1, 1], each
// given slot (anchor, context) holding its frame; every target slot is overwritten with the frame
// made (clamped to [-1, 1]). Used by the previews of a training run.
void sample_plan_windows(Model *m, real *windows, int first, const SampleOptions *o);

// Takes frame f of 0..N-1 (C, S, S values, read only during the call). 0, or -1 with one line in err.
typedef int (*ChainEmit)(void *ctx, int f, const real *frame, char *err, size_t errlen);

// The same frames as chain_sample's, streamed: from the first `given` frames (first: (given, C, S, S)),
// each frame of 0..N-1 goes to emit, in order, as soon as it and every frame before it are made, and
// a frame is held only until it is handed on and no later window reads it (frame 0, the anchor, to
// the end). The buffers, chain_frames_held of them, are allocated before the first window. Returns 0,
// or -1 with one line in err: emit's failure (which stops the chain), or no memory for the frames.
int chain_sample_stream(ChainModels *cm, const ChainPlan *p, const real *first, int given, const SampleOptions *o,
                        ChainEmit emit, void *ctx, char *err, size_t errlen);

// The most frames chain_sample_stream holds at once for plan p (-1: no memory to work it out).
// The environment variable FRAMECHAIN_TEST_HOLD_ALL_FRAMES=1 makes it hold every frame and hand
// them on after the last window, as the chain did before it streamed: the tests compare the two.
int chain_frames_held(const ChainPlan *p);

// ----------------------------------------------------------------------------
// frames

// The first K frames of PATH as (K, 3, S, S) in [-1, 1]: a video's first K, a folder of frames' first
// K (frame_folder.h: PNG or JPEG images in name order), or (K = 1) a PNG/JPEG; shapes:N the built-in
// moving-shapes clip N. Returns 0, or -1 with one line in err.
int load_first_frames(const char *path, int S, int K, real *out, char *err, size_t errlen);

// shapes:N, the built-in moving-shapes clip N (0 .. 4294967295): 1 with *clip where path is one, 0 where
// it does not start with "shapes:", -1 with one line in err where the rest is no such number (a
// mistyped first frame, which a command says before any model is loaded).
int first_frame_shapes(const char *path, uint32_t *clip, char *err, size_t errlen);

// The same frames one at a time, so that a long clip is never held whole (autoencode). Opening reads
// what can be checked before the first frame (the path, an image, a video's size); NULL with one line
// in err. first_frames_next gives frame k of 0..K-1 as (3, S, S), in order: 0, or -1 with the line
// load_first_frames would give (a bad frame, fewer frames than K).
typedef struct FirstFrames FirstFrames;
FirstFrames *first_frames_open(const char *path, int S, int K, char *err, size_t errlen);
int first_frames_next(FirstFrames *r, real *out, char *err, size_t errlen);
void first_frames_close(FirstFrames *r);
// The frame rate of a video opened so (its container's), 0 for an image, a folder or shapes:N.
double first_frames_fps(const FirstFrames *r);

#endif
