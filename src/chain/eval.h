// eval.h: how good the chain is on held-out footage (`framechain eval`). From each held-out clip's
// real first frame (or first window, --given) the chain makes N frames; every made frame is compared
// with the real one (PSNR, SSIM; metrics.h) beside the baseline of holding the last frame known, and
// how much each frame moved from the one before, beside the real clip's motion. A long generation
// shows drift: each frame's mean, contrast and sharpness as a ratio to frame 0's. Every
// noise-augmentation level asked for gets its own run, with the same sampling noise, so the levels
// compare pair for pair.
#ifndef FRAMECHAIN_EVAL_H
#define FRAMECHAIN_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "chain/sampler.h"

#define EVAL_MAX_LEVELS 18  // as many as plot --eval tells apart (report/plot_eval.c asserts it)
#define EVAL_DEFAULT_CLIPS 8
#define EVAL_DEFAULT_LONG 181
#define EVAL_DEFAULT_LEVELS "0,0.1"

typedef struct {
    const char *runs[3];   // by enum Role: starter, extrapolate, interpolate
    const char *data;      // the held-out dataset (framechain prepare)
    int clips;             // the first K clips (fewer when the dataset has fewer)
    int frames;            // N frames per clip; 0: the dataset's clip length
    int long_frames;       // M frames of the drift run (from the first clip whose first frame is not
                           // flat); 0: no drift run
    int n_levels;          // noise-augmentation levels, each evaluated on its own
    double levels[EVAL_MAX_LEVELS];
    int given;             // the chain starts from each clip's first `given` real frames (1, or the
                           // starter's window: the starter is skipped); the baseline holds the last
    SampleOptions sample;  // Euler steps, guidance, temperature and the drift guards, as generate takes
                           // them; clip k (and a drift run from it) samples with a seed made from
                           // (sample.seed, k), clip 0 with sample.seed itself; each run sets its own
                           // noise_aug (levels), quiet and latent
    const char *tsv;       // every per-frame number after the settings ('#' lines), or NULL
    int overwrite;         // an existing tsv file is replaced (else refused before any work)
    const char *vae;       // models trained on latents: the autoencoder they were trained with (the chain
                           // runs on latents, every frame decoded and scored in pixels); NULL for frames
} EvalOptions;

// Parse "L1,L2,..." (each in [0, max]) into levels. Returns the count, or -1 with one line in err.
int eval_parse_levels(const char *text, double max, double *levels, int cap, char *err, size_t errlen);

// Run the evaluation: progress on stderr, the tables on stdout, o->tsv written through FILE.tmp.
// Returns the exit status (0, or 1 with one line on stderr).
int eval_run(const EvalOptions *o, const Backend *be);

#endif
