// test_drift_guard.c: the chain's drift guard (src/chain/drift_guard.c) on frames whose drift is made
// by hand: a frame within the band is left byte for byte; a darkened, flattened or speckled frame is
// brought into the band, and no further than its edge; the guard's sharpness is eval's measure.
#include <math.h>
#include <string.h>

#include "base/common.h"
#include "chain/drift_guard.h"
#include "chain/metrics.h"
#include "check.h"

enum { S = 32, P = S * S, N = 3 * P };

static uint64_t rng = 88172645463325252ull;
static double uniform(void) {  // xorshift64: [0, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

// A scene: smooth colour gradients and a few soft blobs, values in [-1, 1].
static void make_scene(real *f) {
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double v = 0.3 * sin(0.2 * x + c) + 0.25 * cos(0.15 * y - 0.5 * c) +
                           0.3 * exp(-((x - 10) * (x - 10) + (y - 20) * (y - 20)) / 20.0) - 0.1 * c;
                f[c * P + y * S + x] = (real)v;
            }
}

static double unit(real v) { return 0.5 * ((double)v + 1); }

static void channel_stats(const real *p, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < P; i++) s += unit(p[i]);
    *mean = s / P;
    for (int i = 0; i < P; i++) q += (unit(p[i]) - *mean) * (unit(p[i]) - *mean);
    *sd = sqrt(q / P);
}

// The largest |ratio - 1| over the channels' means and contrasts of f against a.
static double worst_stat_ratio(const real *f, const real *a) {
    double worst = 0;
    for (int c = 0; c < 3; c++) {
        double m, sd, m0, sd0;
        channel_stats(f + c * P, &m, &sd);
        channel_stats(a + c * P, &m0, &sd0);
        worst = worse(worst, worse(fabs(m / m0 - 1), fabs(sd / sd0 - 1)));
    }
    return worst;
}

static void to_bytes(const real *f, uint8_t *rgb) {  // (3, S, S) in [-1, 1] -> (S, S, 3) 8-bit
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < P; i++) {
            double u = unit(f[c * P + i]) * 255 + 0.5;
            rgb[i * 3 + c] = (uint8_t)(u < 0 ? 0 : u > 255 ? 255 : u);
        }
}

int main(void) {
    static real anchor[N], f[N], kept[N];
    const double tol = 0.05;
    make_scene(anchor);
    double s0 = drift_guard_sharpness(anchor, S);

    // within the band: a small shift and a little noise, nothing past 5%
    for (int i = 0; i < N; i++) f[i] = (real)(anchor[i] + 0.004 + 0.002 * (uniform() - 0.5));
    memcpy(kept, f, sizeof f);
    DriftGuardAction a = drift_guard_apply(f, anchor, S, tol, tol);
    check(memcmp(f, kept, sizeof f) == 0 && !a.mean_moved && !a.contrast_moved && !a.smoothed && !a.outside,
          "drift_guard_within_band",
          "a frame within %.0f%% of frame 0's statistics left byte for byte (worst ratio %.4f, sharpness %.4f)",
          tol * 100, worst_stat_ratio(kept, anchor), drift_guard_sharpness(kept, S) / s0);

    // darkened and flattened: values pulled towards black and towards their mean (no new detail)
    for (int i = 0; i < N; i++) f[i] = (real)(0.5 * (anchor[i] + 1) * 0.6 * 2 - 1) * 0.7f;
    double before = worst_stat_ratio(f, anchor);
    a = drift_guard_apply(f, anchor, S, tol, tol);
    double after = worst_stat_ratio(f, anchor);
    check(before > 0.2 && after <= tol + 1e-6 && after > tol * 0.9 && a.mean_moved == 3 && !a.outside,
          "drift_guard_mean_contrast",
          "worst mean/contrast ratio off by %.3f before, %.4f after (band %.2f: brought to its edge, not past it); "
          "%d means and %d contrasts moved", before, after, tol, a.mean_moved, a.contrast_moved);

    // brighter and with more contrast: each channel's deviation from its mean scaled by 1.5 and its mean
    // raised 15%, so both are above the band; the colour guard alone brings each down to the band's
    // top, (1 + tol) times frame 0's, exactly (no further, and not to a looser ceiling)
    for (int c = 0; c < 3; c++) {
        double m0, sd0;
        channel_stats(anchor + c * P, &m0, &sd0);
        for (int i = 0; i < P; i++) f[c * P + i] = (real)(2 * (1.15 * m0 + 1.5 * (unit(anchor[c * P + i]) - m0)) - 1);
    }
    int inside = 1;  // the made frame is in [-1, 1], so no value was clipped to make it
    for (int i = 0; i < N; i++) inside &= f[i] >= -1 && f[i] <= 1;
    a = drift_guard_apply(f, anchor, S, 0, tol);
    double mean_off = 0, sd_off = 0;  // the largest |ratio - (1 + tol)| over the channels
    for (int c = 0; c < 3; c++) {
        double m, sd, m0, sd0;
        channel_stats(f + c * P, &m, &sd);
        channel_stats(anchor + c * P, &m0, &sd0);
        mean_off = worse(mean_off, fabs(m / m0 - (1 + tol))), sd_off = worse(sd_off, fabs(sd / sd0 - (1 + tol)));
    }
    check(inside && a.mean_moved == 3 && a.contrast_moved == 3 && mean_off < 1e-5 && sd_off < 1e-5 && !a.outside,
          "drift_guard_ceiling", "a frame 15%% brighter with 1.5x the contrast: %d means and %d contrasts moved, each "
          "brought to %.2f x frame 0's within %.1e (mean) and %.1e (contrast) (tol 1e-5)", a.mean_moved,
          a.contrast_moved, 1 + tol, mean_off, sd_off);

    // speckled: frame 0 with strong pixel noise, the chain's drift over a long pan
    for (int i = 0; i < N; i++) f[i] = (real)(anchor[i] + 0.4 * (uniform() - 0.5));
    double sharp_before = drift_guard_sharpness(f, S) / s0, err_before = 0, err_after = 0;
    for (int i = 0; i < N; i++) err_before += (f[i] - anchor[i]) * (f[i] - anchor[i]);
    a = drift_guard_apply(f, anchor, S, tol, tol);
    double sharp_after = drift_guard_sharpness(f, S) / s0, stats_after = worst_stat_ratio(f, anchor);
    for (int i = 0; i < N; i++) err_after += (f[i] - anchor[i]) * (f[i] - anchor[i]);
    // the blur takes the speckle off, not the scene: the frame comes nearer frame 0
    check(a.smoothed && sharp_before > 2 && sharp_after <= 1 + tol + 1e-3 && sharp_after > 1 + tol - 0.01 &&
              stats_after <= tol + 1e-6 && err_after < 0.5 * err_before && !a.outside,
          "drift_guard_sharpness", "speckle at %.2fx frame 0's sharpness brought to %.4fx (band top %.2f, not below "
          "it by more than 0.01), mean and contrast within %.4f, squared error to frame 0 %.1f -> %.1f",
          sharp_before, sharp_after, 1 + tol, stats_after, err_before, err_after);

    // each guard alone: the sharpness guard leaves a faded frame (less sharp, not more) byte for byte,
    // and takes the speckle off without moving a mean or a contrast on purpose
    for (int i = 0; i < N; i++) f[i] = (real)((anchor[i] + 1) * 0.6 - 1) * 0.7f;
    memcpy(kept, f, sizeof f);
    DriftGuardAction faded = drift_guard_apply(f, anchor, S, tol, 0);
    int faded_kept = memcmp(f, kept, sizeof f) == 0;
    for (int i = 0; i < N; i++) f[i] = (real)(anchor[i] + 0.4 * (uniform() - 0.5));
    DriftGuardAction speckle = drift_guard_apply(f, anchor, S, tol, 0);
    double speckle_after = drift_guard_sharpness(f, S) / s0;
    // and the colour guard alone leaves the speckle's sharpness past the band
    for (int i = 0; i < N; i++) f[i] = (real)(anchor[i] + 0.4 * (uniform() - 0.5));
    DriftGuardAction colour = drift_guard_apply(f, anchor, S, 0, tol);
    double colour_after = drift_guard_sharpness(f, S) / s0;
    check(faded_kept && !faded.smoothed && speckle.smoothed && !speckle.mean_moved && !speckle.contrast_moved &&
              speckle_after <= 1 + tol + 1e-9 && !colour.smoothed && colour_after > 2,
          "drift_guard_each_alone", "sharpness guard alone: a faded frame kept byte for byte, speckle brought to "
          "%.4fx with no channel moved; colour guard alone: the speckle left at %.2fx", speckle_after, colour_after);

    // a black first frame (footage that fades in) gives no scale: a frame made after it is left as it
    // is by both guards, not blurred or darkened towards nothing
    static real black[N];
    for (int i = 0; i < N; i++) black[i] = -1, f[i] = (real)(anchor[i] + 0.4 * (uniform() - 0.5));
    memcpy(kept, f, sizeof f);
    DriftGuardAction after_black = drift_guard_apply(f, black, S, tol, tol);
    check(memcmp(f, kept, sizeof f) == 0 && !after_black.smoothed && !after_black.mean_moved &&
              !after_black.contrast_moved,
          "drift_guard_black_first_frame", "a speckled frame after a black frame 0 left byte for byte (sharpness "
          "%.4f against frame 0's %.4f)", drift_guard_sharpness(kept, S), drift_guard_sharpness(black, S));
    // nor reported outside a band: a black frame 0 has no mean or contrast to be outside of
    check(after_black.outside == 0, "drift_guard_black_first_frame_inside",
          "a frame after a black frame 0 reported outside the bands: %d (0)", after_black.outside);

    // nearly black, not black: frame 0 at -1 but for 1 pixel in 32 at 8-bit value 1 (1/255 in [0, 1]):
    // mean (1/255)/32 = 1.2e-4 and contrast (1/255) sqrt(31)/32 = 6.8e-4 per channel, both above 0 yet
    // under the guard's floor (1e-3), and sharpness ~8e-4, under it too: every guard stays off as for
    // black (a mean held within 5% of 1.2e-4 would darken the frame to black), nothing is reported
    static real dim[N];
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) dim[c * P + y * S + x] = x % 8 == 0 && y % 4 == 0 ? (real)(2.0 / 255 - 1) : -1;
    for (int i = 0; i < N; i++) f[i] = (real)(anchor[i] + 0.4 * (uniform() - 0.5));
    memcpy(kept, f, sizeof f);
    double dim_m0, dim_sd0;
    channel_stats(dim, &dim_m0, &dim_sd0);
    DriftGuardAction after_dim = drift_guard_apply(f, dim, S, tol, tol);
    check(dim_m0 > 0 && dim_m0 < 1e-3 && dim_sd0 < 1e-3 && memcmp(f, kept, sizeof f) == 0 && !after_dim.smoothed &&
              !after_dim.mean_moved && !after_dim.contrast_moved && after_dim.outside == 0,
          "drift_guard_dim_first_frame", "frame 0 mean %.2e, contrast %.2e, sharpness %.2e: a speckled frame after it "
          "left byte for byte (%s), %d means and %d contrasts moved, outside %d (all 0)", dim_m0, dim_sd0,
          drift_guard_sharpness(dim, S), memcmp(f, kept, sizeof f) ? "changed" : "kept", after_dim.mean_moved,
          after_dim.contrast_moved, after_dim.outside);

    // a flat frame at frame 0's mean colour: no contrast to scale, so the colour guard leaves it byte
    // for byte and reports no channel moved (its contrast is out of the band, but nothing can bring it in)
    for (int c = 0; c < 3; c++) {
        double m, sd;
        channel_stats(anchor + c * S * S, &m, &sd);
        for (int i = 0; i < S * S; i++) f[c * S * S + i] = (real)(2 * m - 1);
    }
    memcpy(kept, f, sizeof f);
    DriftGuardAction flat = drift_guard_apply(f, anchor, S, 0, tol);
    check(memcmp(f, kept, sizeof f) == 0 && !flat.mean_moved && !flat.contrast_moved &&
              flat.outside == DRIFT_GUARD_COLOUR_OUTSIDE, "drift_guard_flat_frame",
          "a flat frame at frame 0's mean colour: left byte for byte, %d channels' mean and %d channels' contrast "
          "reported moved (0 and 0), reported outside the colour band: %d", flat.mean_moved, flat.contrast_moved,
          flat.outside);

    // pixels clipped: frame 0 half black, half at 0.6; the frame made 90% black and 10% white (mean 0.1,
    // contrast 0.3 in [0, 1]). Raising its mean to the band's foot (0.285) pushes the white past 1,
    // where the clamp takes back part of the rise: the guard cannot reach the band, and says so.
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < P; i++) black[c * P + i] = i % 2 ? (real)0.2 : -1, f[c * P + i] = i % 10 ? -1 : 1;
    DriftGuardAction clipped = drift_guard_apply(f, black, S, 0, tol);
    double cm, csd, cm0, csd0;
    channel_stats(f, &cm, &csd);
    channel_stats(black, &cm0, &csd0);
    check(clipped.mean_moved == 3 && cm / cm0 < 1 - tol - 1e-3 && clipped.outside == DRIFT_GUARD_COLOUR_OUTSIDE,
          "drift_guard_clipped_said", "mean %.4f against frame 0's %.4f (%.3fx, band %.2f-%.2f), reported outside the "
          "colour band: %d", cm, cm0, cm / cm0, 1 - tol, 1 + tol, clipped.outside);

    // the guard's sharpness is eval's (metrics.c, on 8-bit frames, luma in 0-255) to within rounding
    for (int i = 0; i < N; i++) f[i] = (real)(0.8 * anchor[i] + 0.2 * (uniform() - 0.5));
    static uint8_t rf[N];
    to_bytes(f, rf);
    double eval_sharp = frame_stats(rf, S).sharpness, guard_sharp = 255 * drift_guard_sharpness(f, S);
    check(fabs(eval_sharp / guard_sharp - 1) < 0.02, "drift_guard_sharpness_is_evals",
          "%.4f by the guard (times 255), %.4f by eval's frame_stats", guard_sharp, eval_sharp);

    // the colour band over the frames after the last given one: open (0-2x) at it, narrowing linearly
    // to the guard's own band at the ramp's end and staying there; off stays off; ramp 0 holds at once
    // (strictly narrower at every frame of the ramp, from the first one made on: no flat step; then flat)
    int narrowing = 1;
    for (int d = 1; d <= 60; d++) {
        double band = drift_guard_colour_band(tol, d, 48), prev = drift_guard_colour_band(tol, d - 1, 48);
        narrowing &= d <= 48 ? band < prev : band == prev;
    }
    double at0 = drift_guard_colour_band(tol, 0, 48), mid = drift_guard_colour_band(tol, 24, 48);
    double at1 = drift_guard_colour_band(tol, 1, 48);
    check(narrowing && at0 == DRIFT_GUARD_MAX && fabs(mid - (tol + (1 - tol) / 2)) < 1e-12 &&
              fabs(at1 - (tol + (1 - tol) * 47.0 / 48)) < 1e-12 &&
              drift_guard_colour_band(tol, 48, 48) == tol && drift_guard_colour_band(tol, 1000, 48) == tol &&
              drift_guard_colour_band(tol, 1, 0) == tol && drift_guard_colour_band(0, 1, 48) == 0,
          "drift_guard_colour_band", "band %.3f at the last given frame, %.4f at the first made (1 of 48), %.4f half "
          "way (24 of 48), %.3f from frame 48 on (narrowing strictly before: %d); ramp 0: %.3f at once; a guard that "
          "is off stays off (%.3f)", at0, at1, mid,
          drift_guard_colour_band(tol, 48, 48), narrowing, drift_guard_colour_band(tol, 1, 0), drift_guard_colour_band(0, 1, 48));
    return g_failed ? 1 : 0;
}
