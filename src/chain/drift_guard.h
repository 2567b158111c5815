// drift_guard.h: keeps a long chain's frames near the statistics of its first frame. A chain of
// windows builds every frame on frames it made itself, so small errors compound: over a thousand
// frames of a camera pan the detail the network adds piles up into speckle (sharpness 10x frame 0's)
// and the content that comes into view darkens and flattens. Two guards, each a band around the
// anchor's (frame 0's) statistics, applied to every frame the chain makes before any later window
// reads it; a frame within a band is left as it is by that guard, byte for byte:
//   sharpness: the mean absolute Laplacian of luma (eval's drift measure) at most (1 + tol) times
//              frame 0's: a frame past it is blended with its blur, as little as brings it down;
//   colour:    each channel's mean and standard deviation within (1 +- tol) of frame 0's: a frame
//              past it is shifted and scaled. Global, so it also recolours what did not drift (the
//              background of a frame a bright shape has left): docs/quality.md measures the cost.
#ifndef FRAMECHAIN_DRIFT_GUARD_H
#define FRAMECHAIN_DRIFT_GUARD_H

#include "base/common.h"

// The largest tolerance either guard takes (a fraction of frame 0's statistics).
#define DRIFT_GUARD_MAX 1.0

// What the guards changed in one frame (for the tests).
typedef struct {
    int mean_moved;      // channels whose mean was pulled into the band
    int contrast_moved;  // channels whose contrast was scaled into the band
    int smoothed;        // 1 when the frame was blended with its blur to bring its sharpness down
    int outside;         // the bands the frame ends outside of: DRIFT_GUARD_COLOUR_OUTSIDE (pixels
                         // clipped at black or white, or a channel of one value, keep its mean or
                         // contrast from the band), DRIFT_GUARD_SHARPNESS_OUTSIDE (the colour's last
                         // pass sharpened it past its top)
} DriftGuardAction;
#define DRIFT_GUARD_COLOUR_OUTSIDE 1
#define DRIFT_GUARD_SHARPNESS_OUTSIDE 2

// frame: (3, S, S) RGB values in [-1, 1], corrected in place (and left in [-1, 1]); anchor: (3, S, S)
// frame 0. sharpness_tol, colour_tol: the bands (0: that guard off; at most DRIFT_GUARD_MAX). Means
// and standard deviations are of values mapped to [0, 1]. With both on, a few rounds settle them
// together and end on the colour: the sharpness is then within its band to a few thousandths, unless
// the frame's pixels clip at black or white (neither band can then always be met: `outside` says
// which was not, to a part in a thousand). A
// sharpness under the band is left alone: sharpening would amplify the noise, and nothing restores
// detail that is not there. A statistic frame 0 barely has (a black or flat first frame: under a
// quarter of an 8-bit step) is not held: it gives no scale to hold a frame to.
DriftGuardAction drift_guard_apply(real *frame, const real *anchor, int S, double sharpness_tol, double colour_tol);

// The colour band for a frame made `distance` frames after the last given frame (1: the first made):
// tol from `ramp` frames after it on (at once with ramp 0), wider nearer the given frames, where the
// motion they set is still carried: tol + (1 - tol)(1 - distance / ramp), linear from (0, 2x) frame
// 0's at the last given frame to (1 +- tol) at `ramp`; 0 (off) stays 0. README, "Drift guards": the
// colours a pan brings into view in its first frames are kept, those the chain invents later held.
double drift_guard_colour_band(double tol, int distance, int ramp);

// The frame's sharpness as drift_guard_apply measures it: mean |4 y - up - down - left - right| of
// luma y (0.299 R + 0.587 G + 0.114 B, values mapped to [0, 1]) over the interior pixels; 0 for S < 3.
double drift_guard_sharpness(const real *frame, int S);

#endif
