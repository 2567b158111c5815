// metrics.h: how close a made frame is to the real one (PSNR, SSIM) and what drift shows (a frame's
// mean, contrast and sharpness, as ratios to frame 0's). All work on RGB24 frames, (S, S, 3) bytes,
// as the dataset stores them and as frame_to_rgb writes them.
#ifndef FRAMECHAIN_METRICS_H
#define FRAMECHAIN_METRICS_H

#include <stdint.h>

#define METRICS_PSNR_CAP 99.0     // dB: identical frames (MSE 0), and anything closer
#define METRICS_SSIM_MIN_SIZE 11  // the SSIM window is 11x11 and only used where it fits

// PSNR in dB of 8-bit RGB frames (peak 255, the MSE over every value of the three channels), at most
// METRICS_PSNR_CAP.
double frame_psnr(const uint8_t *a, const uint8_t *b, int S);

// SSIM (Wang et al. 2004): an 11x11 Gaussian window of sigma 1.5, C1 = (0.01 * 255)^2,
// C2 = (0.03 * 255)^2, on each channel of the 8-bit values, the map averaged over the positions
// where the window fits ("valid": (S - 10)^2 of them), then over the three channels. 1 for identical
// frames; NaN when S < METRICS_SSIM_MIN_SIZE.
double frame_ssim(const uint8_t *a, const uint8_t *b, int S);

// How much a picture moved from frame a to frame b: the mean absolute difference of their 8-bit
// values (every value of the three channels); 0 for a still picture. Beside the real clip's, it
// tells a chain that holds its first frame from one that moves as the footage does.
double frame_motion(const uint8_t *a, const uint8_t *b, int S);

// What drift shows: mean and contrast (standard deviation) of every 8-bit value of the frame, and
// sharpness, the mean absolute 4-neighbour Laplacian of the luminance 0.299 R + 0.587 G + 0.114 B
// over the interior pixels (NaN fields when S < 3 for sharpness).
typedef struct {
    double mean, contrast, sharpness;
} FrameStats;
FrameStats frame_stats(const uint8_t *rgb, int S);

// s as ratios to s0, field by field: NaN where s0's field is under FRAME_STATS_FLOOR (a quarter of an
// 8-bit step), which a frame barely has (a flat frame's sharpness is a rounding remainder of 1e-15:
// ratios to it were 1e16).
#define FRAME_STATS_FLOOR 0.25
FrameStats frame_stats_ratio(FrameStats s, FrameStats s0);
// 1 where the frame is one colour: each channel's values spread (standard deviation) under 1 (8-bit).
// (Its contrast, over the three channels together, is 120 for a saturated blue.)
int frame_one_colour(const uint8_t *rgb, int S);

#endif
