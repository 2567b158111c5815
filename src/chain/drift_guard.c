// drift_guard.c: the chain's frames held near frame 0's statistics (drift_guard.h).
#include "chain/drift_guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double unit(real v) { return 0.5 * ((double)v + 1); }  // [-1, 1] -> [0, 1]

static double luma_at(const real *f, size_t plane, size_t i) {
    return 0.299 * unit(f[i]) + 0.587 * unit(f[plane + i]) + 0.114 * unit(f[2 * plane + i]);
}

double drift_guard_sharpness(const real *f, int S) {
    if (S < 3) return 0;
    size_t P = (size_t)S * S;
    double lap = 0;
    for (int y = 1; y < S - 1; y++)
        for (int x = 1; x < S - 1; x++) {
            size_t i = (size_t)y * S + x;
            lap += fabs(4 * luma_at(f, P, i) - luma_at(f, P, i - S) - luma_at(f, P, i + S) - luma_at(f, P, i - 1) -
                        luma_at(f, P, i + 1));
        }
    return lap / ((double)(S - 2) * (S - 2));
}

// Mean and standard deviation of one channel's values mapped to [0, 1].
static void channel_stats(const real *p, size_t n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++) s += unit(p[i]);
    *mean = s / n;
    for (size_t i = 0; i < n; i++) q += (unit(p[i]) - *mean) * (unit(p[i]) - *mean);
    *sd = sqrt(q / n);
}

static double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

// A statistic of frame 0 below this (in [0, 1] units: a quarter of an 8-bit step) gives no scale to
// hold a frame to: a first frame that is black or flat leaves that guard off rather than blurring or
// darkening every frame towards nothing.
#define DRIFT_GUARD_FLOOR 1e-3

// Each channel's mean and contrast into the band around the anchor's; the channels moved as bits of
// *mean_moved and *contrast_moved.
static void hold_channel_stats(real *f, const real *anchor, int S, double tol, int *mean_moved, int *contrast_moved) {
    size_t P = (size_t)S * S;
    for (int c = 0; c < 3; c++) {
        real *p = f + c * P;
        double m, sd, m0, sd0;
        channel_stats(p, P, &m, &sd);
        channel_stats(anchor + c * P, P, &m0, &sd0);
        double mt = m0 > DRIFT_GUARD_FLOOR ? clamp(m, m0 * (1 - tol), m0 * (1 + tol)) : m;
        double st = sd > 0 && sd0 > DRIFT_GUARD_FLOOR ? clamp(sd, sd0 * (1 - tol), sd0 * (1 + tol)) : sd;
        if (mt == m && st == sd) continue;
        *mean_moved |= (mt != m) << c, *contrast_moved |= (st != sd) << c;
        double k = sd > 0 ? st / sd : 1;
        for (size_t i = 0; i < P; i++) {
            double u = clamp(mt + k * (unit(p[i]) - m), 0, 1);
            p[i] = (real)(2 * u - 1);
        }
    }
}

// blur: (3, S, S) the frame under a 3x3 binomial filter, edges repeated.
static void blur3(const real *f, int S, real *blur) {
    for (int c = 0; c < 3; c++) {
        const real *p = f + (size_t)c * S * S;
        real *q = blur + (size_t)c * S * S;
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double acc = 0;
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) {
                        int yy = y + dy < 0 ? 0 : y + dy >= S ? S - 1 : y + dy;
                        int xx = x + dx < 0 ? 0 : x + dx >= S ? S - 1 : x + dx;
                        acc += (dy ? 1 : 2) * (dx ? 1 : 2) * (double)p[yy * S + xx];
                    }
                q[y * S + x] = (real)(acc / 16);
            }
    }
}

// Sharpness down to the band's top: the frame blended with its blur, a f + (1 - a) blur, with the
// largest a (found by bisection) that meets it; where the blur itself is too sharp, the frame is
// blurred again first (up to 8 times). Returns 1 when the frame was changed.
static int hold_sharpness(real *f, const real *anchor, int S, double tol, real *blur, real *trial) {
    double s0 = drift_guard_sharpness(anchor, S), top = (1 + tol) * s0;
    if (s0 <= DRIFT_GUARD_FLOOR || drift_guard_sharpness(f, S) <= top) return 0;
    size_t n = (size_t)3 * S * S;
    blur3(f, S, blur);
    for (int pass = 1; pass < 8 && drift_guard_sharpness(blur, S) > top; pass++) {
        memcpy(f, blur, sizeof(real) * n);
        blur3(f, S, blur);
    }
    double lo = 0, hi = 1;  // sharpness(lo) meets the top (or lo = 0: the blur, as near as it gets)
    for (int it = 0; it < 14; it++) {
        double a = 0.5 * (lo + hi);
        for (size_t i = 0; i < n; i++) trial[i] = (real)(a * f[i] + (1 - a) * blur[i]);
        if (drift_guard_sharpness(trial, S) <= top) lo = a;
        else hi = a;
    }
    for (size_t i = 0; i < n; i++) f[i] = (real)(lo * f[i] + (1 - lo) * blur[i]);
    return 1;
}

double drift_guard_colour_band(double tol, int distance, int ramp) {
    if (!(tol > 0) || ramp <= 0 || distance >= ramp) return tol;  // off stays off
    double open = 1 - (distance > 0 ? (double)distance : 0) / ramp;  // 1 at the last given frame
    return tol + (DRIFT_GUARD_MAX - tol) * open;
}

// Which bands a frame ends outside of (DriftGuardAction.outside), each by more than a part in a
// thousand of frame 0's statistic: the guards' own rounding is far under that.
static int bands_missed(const real *f, const real *anchor, int S, double sharpness_tol, double colour_tol) {
    const double slack = 1e-3;
    int missed = 0;
    size_t P = (size_t)S * S;
    for (int c = 0; c < 3 && colour_tol > 0; c++) {
        double m, sd, m0, sd0;
        channel_stats(f + c * P, P, &m, &sd);
        channel_stats(anchor + c * P, P, &m0, &sd0);
        if ((m0 > DRIFT_GUARD_FLOOR && fabs(m - m0) > (colour_tol + slack) * m0) ||
            (sd0 > DRIFT_GUARD_FLOOR && fabs(sd - sd0) > (colour_tol + slack) * sd0))
            missed |= DRIFT_GUARD_COLOUR_OUTSIDE;
    }
    double s0 = sharpness_tol > 0 ? drift_guard_sharpness(anchor, S) : 0;
    if (s0 > DRIFT_GUARD_FLOOR && drift_guard_sharpness(f, S) > (1 + sharpness_tol + slack) * s0)
        missed |= DRIFT_GUARD_SHARPNESS_OUTSIDE;
    return missed;
}

DriftGuardAction drift_guard_apply(real *frame, const real *anchor, int S, double sharpness_tol, double colour_tol) {
    size_t n = (size_t)3 * S * S;
    real *blur = fc_malloc(sizeof(real) * n * 2), *trial = blur + n;
    int mean_moved = 0, contrast_moved = 0, smoothed = 0;
    // Bringing the contrast back up sharpens, and a blur lowers the contrast: a few rounds settle both.
    for (int round = 0; round < 4; round++) {
        if (colour_tol > 0) hold_channel_stats(frame, anchor, S, colour_tol, &mean_moved, &contrast_moved);
        if (!(sharpness_tol > 0) || !hold_sharpness(frame, anchor, S, sharpness_tol, blur, trial)) break;
        smoothed = 1;
        if (round == 3 && colour_tol > 0) hold_channel_stats(frame, anchor, S, colour_tol, &mean_moved, &contrast_moved);
    }
    free(blur);
    return (DriftGuardAction){__builtin_popcount(mean_moved), __builtin_popcount(contrast_moved), smoothed,
                              bands_missed(frame, anchor, S, sharpness_tol, colour_tol)};
}
