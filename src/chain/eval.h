// eval.h: how good the chain is on held-out footage (`framechain eval`). From each held-out clip's
// real first frame the chain makes N frames; every made frame is compared with the real one (PSNR,
// SSIM) beside the baseline of copying frame 0, the last frame known. A long generation shows drift:
// each frame's mean, contrast and sharpness as a ratio to frame 0's. Every noise-augmentation level
// asked for gets its own run, with the same sampling noise, so the levels compare pair for pair.
//
// The metric functions work on RGB24 frames, (S, S, 3) bytes, as the dataset stores them and as
// frame_to_rgb writes them.
#ifndef FRAMECHAIN_EVAL_H
#define FRAMECHAIN_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

// ---- metrics ----

#define EVAL_PSNR_CAP 99.0  // dB: identical frames (MSE 0), and anything closer
#define EVAL_SSIM_MIN_SIZE 11  // the SSIM window is 11x11 and only used where it fits
#define EVAL_FLAT_CONTRAST 1.0  // a frame whose contrast is under this is flat (one colour): no drift start

// PSNR in dB of 8-bit RGB frames (peak 255, the MSE over every value of the three channels), at most
// EVAL_PSNR_CAP.
double frame_psnr(const uint8_t *a, const uint8_t *b, int S);

// SSIM (Wang et al. 2004): an 11x11 Gaussian window of sigma 1.5, C1 = (0.01 * 255)^2,
// C2 = (0.03 * 255)^2, on each channel of the 8-bit values, the map averaged over the positions
// where the window fits ("valid": (S - 10)^2 of them), then over the three channels. 1 for identical
// frames; NaN when S < EVAL_SSIM_MIN_SIZE.
double frame_ssim(const uint8_t *a, const uint8_t *b, int S);

// What drift shows: mean and contrast (standard deviation) of every 8-bit value of the frame, and
// sharpness, the mean absolute 4-neighbour Laplacian of the luminance 0.299 R + 0.587 G + 0.114 B
// over the interior pixels (NaN fields when S < 3 for sharpness).
typedef struct {
    double mean, contrast, sharpness;
} FrameStats;
FrameStats frame_stats(const uint8_t *rgb, int S);

// s as ratios to s0, field by field (NaN where s0's field is 0).
FrameStats frame_stats_ratio(FrameStats s, FrameStats s0);

// ---- framechain eval ----

#define EVAL_MAX_LEVELS 16
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
    int steps;             // Euler steps per window
    uint64_t seed;         // clip k (and a drift run from it) samples with a seed made from (seed, k);
                           // clip 0 with seed itself
    const char *tsv;       // every per-frame number, or NULL
} EvalOptions;

// Parse "L1,L2,..." (each in [0, max]) into levels. Returns the count, or -1 with one line in err.
int eval_parse_levels(const char *text, double max, double *levels, int cap, char *err, size_t errlen);

// Run the evaluation: progress on stderr, the tables on stdout, o->tsv written through FILE.tmp.
// Returns the exit status (0, or 1 with one line on stderr).
int eval_cli(const EvalOptions *o, const Backend *be);

#endif
