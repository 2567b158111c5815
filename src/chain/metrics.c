// metrics.c: PSNR, SSIM and the drift statistics of RGB24 frames (see metrics.h).
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/common.h"
#include "chain/metrics.h"

// ----------------------------------------------------------------------------
// PSNR and SSIM

double frame_psnr(const uint8_t *a, const uint8_t *b, int S) {
    size_t n = (size_t)S * S * 3;
    double se = 0;  // integer squared errors: exact in a double up to 2^53 / 255^2 values
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0) return METRICS_PSNR_CAP;
    double p = 10 * log10(255.0 * 255.0 / (se / n));
    return p > METRICS_PSNR_CAP ? METRICS_PSNR_CAP : p;
}

double frame_motion(const uint8_t *a, const uint8_t *b, int S) {
    size_t n = (size_t)S * S * 3;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += abs((int)a[i] - (int)b[i]);
    return sum / n;
}

#define SSIM_WIN 11
#define SSIM_SIGMA 1.5

// The 1-D Gaussian, normalised; the 2-D window is its outer product (separable filtering).
static void ssim_kernel(double g[SSIM_WIN]) {
    double sum = 0;
    for (int k = 0; k < SSIM_WIN; k++) {
        double x = k - SSIM_WIN / 2;
        g[k] = exp(-x * x / (2 * SSIM_SIGMA * SSIM_SIGMA));
        sum += g[k];
    }
    for (int k = 0; k < SSIM_WIN; k++) g[k] /= sum;
}

// One channel c: the Gaussian-weighted local means of x, y, x^2, y^2 and xy at every valid position,
// then the SSIM map's mean. h: scratch of 5 * S * V doubles (V = S - 10).
static double ssim_channel(const uint8_t *a, const uint8_t *b, int S, int c, const double *g, double *h) {
    const double C1 = (0.01 * 255) * (0.01 * 255), C2 = (0.03 * 255) * (0.03 * 255);
    int V = S - SSIM_WIN + 1;
    size_t plane = (size_t)S * V;
    // horizontal pass: h[q] is (S, V)
    for (int y = 0; y < S; y++)
        for (int x = 0; x < V; x++) {
            double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
            for (int k = 0; k < SSIM_WIN; k++) {
                size_t i = ((size_t)y * S + x + k) * 3 + c;
                double u = a[i], v = b[i], w = g[k];
                sx += w * u, sy += w * v, sxx += w * u * u, syy += w * v * v, sxy += w * u * v;
            }
            size_t o = (size_t)y * V + x;
            h[o] = sx, h[plane + o] = sy, h[2 * plane + o] = sxx, h[3 * plane + o] = syy, h[4 * plane + o] = sxy;
        }
    // vertical pass, straight into the map: (V, V) positions
    double total = 0;
    for (int y = 0; y < V; y++)
        for (int x = 0; x < V; x++) {
            double m[5] = {0};
            for (int k = 0; k < SSIM_WIN; k++) {
                size_t o = (size_t)(y + k) * V + x;
                for (int q = 0; q < 5; q++) m[q] += g[k] * h[q * plane + o];
            }
            double mx = m[0], my = m[1];
            double vx = m[2] - mx * mx, vy = m[3] - my * my, cxy = m[4] - mx * my;
            total += ((2 * mx * my + C1) * (2 * cxy + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2));
        }
    return total / ((double)V * V);
}

double frame_ssim(const uint8_t *a, const uint8_t *b, int S) {
    if (S < METRICS_SSIM_MIN_SIZE) return NAN;
    double g[SSIM_WIN];
    ssim_kernel(g);
    double *h = fc_malloc(sizeof(double) * 5 * (size_t)S * (S - SSIM_WIN + 1));
    double sum = 0;
    for (int c = 0; c < 3; c++) sum += ssim_channel(a, b, S, c, g, h);
    free(h);
    return sum / 3;
}

// ----------------------------------------------------------------------------
// drift statistics

static double luma(const uint8_t *rgb, int S, int y, int x) {
    const uint8_t *p = rgb + ((size_t)y * S + x) * 3;
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
}

FrameStats frame_stats(const uint8_t *rgb, int S) {
    FrameStats s;
    size_t n = (size_t)S * S * 3;
    double sum = 0, sq = 0;  // sums of integers: exact
    for (size_t i = 0; i < n; i++) sum += rgb[i], sq += (double)rgb[i] * rgb[i];
    s.mean = sum / n;
    double var = sq / n - s.mean * s.mean;
    s.contrast = sqrt(var > 0 ? var : 0);
    if (S < 3) {
        s.sharpness = NAN;
        return s;
    }
    double lap = 0;
    for (int y = 1; y < S - 1; y++)
        for (int x = 1; x < S - 1; x++)
            lap += fabs(4 * luma(rgb, S, y, x) - luma(rgb, S, y - 1, x) - luma(rgb, S, y + 1, x) -
                        luma(rgb, S, y, x - 1) - luma(rgb, S, y, x + 1));
    s.sharpness = lap / ((double)(S - 2) * (S - 2));
    return s;
}

static double ratio(double v, double v0) { return fabs(v0) >= FRAME_STATS_FLOOR ? v / v0 : NAN; }

int frame_one_colour(const uint8_t *rgb, int S) {
    size_t n = (size_t)S * S;
    for (int ch = 0; ch < 3; ch++) {
        double sum = 0, sq = 0;  // sums of integers: exact
        for (size_t i = 0; i < n; i++) sum += rgb[3 * i + ch], sq += (double)rgb[3 * i + ch] * rgb[3 * i + ch];
        double mean = sum / n, var = sq / n - mean * mean;
        if (var >= 1) return 0;
    }
    return 1;
}

FrameStats frame_stats_ratio(FrameStats s, FrameStats s0) {
    return (FrameStats){ratio(s.mean, s0.mean), ratio(s.contrast, s0.contrast), ratio(s.sharpness, s0.sharpness)};
}
