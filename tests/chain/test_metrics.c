// test_metrics.c: the scores eval prints (src/chain/metrics.c) on frames whose answer is known by hand.
#include <math.h>
#include <string.h>

#include "chain/metrics.h"
#include "check.h"

enum { S = 16, BYTES = S * S * 3 };

int main(void) {
    static uint8_t a[BYTES], b[BYTES];
    // a: a ramp; b: a with every value of one pixel in four raised by 8, the rest lowered by 2
    for (int i = 0; i < BYTES; i++) {
        a[i] = (uint8_t)(40 + (i * 7) % 150);
        b[i] = (uint8_t)((i / 3) % 4 == 0 ? a[i] + 8 : a[i] - 2);
    }
    double motion = frame_motion(a, b, S), still = frame_motion(a, a, S);
    double want = (8.0 + 3 * 2.0) / 4;  // one pixel in four moved by 8, three by 2
    check(fabs(motion - want) < 1e-12 && still == 0 && frame_motion(b, a, S) == motion, "frame_motion",
          "%.6f (by hand %.6f), a frame against itself %.1f, symmetric", motion, want, still);

    double mse = (64.0 + 3 * 4.0) / 4, psnr = frame_psnr(a, b, S);
    double want_psnr = 10 * log10(255.0 * 255.0 / mse);
    check(fabs(psnr - want_psnr) < 1e-9 && frame_psnr(a, a, S) == METRICS_PSNR_CAP, "frame_psnr",
          "%.6f dB (by hand %.6f), identical frames %.0f (the cap)", psnr, want_psnr, frame_psnr(a, a, S));

    double same = frame_ssim(a, a, S), diff = frame_ssim(a, b, S);
    check(fabs(same - 1) < 1e-12 && diff < 1 && diff > 0.5, "frame_ssim",
          "identical frames %.6f, the changed frame %.4f (below 1, the ramp kept)", same, diff);

    // SSIM against its definition computed the long way: at every position where the 11x11 window
    // fits, the 2-D Gaussian weights (sigma 1.5, centred on the window) applied directly, no separable
    // passes; random frames, and frames that differ in one pixel of the last row the window reaches.
    static uint8_t r1[BYTES], r2[BYTES], r3[BYTES];
    uint32_t h = 12345;
    for (int i = 0; i < BYTES; i++) {
        h = h * 1664525u + 1013904223u, r1[i] = (uint8_t)(h >> 24);
        h = h * 1664525u + 1013904223u, r2[i] = (uint8_t)(r1[i] / 2 + (h >> 25));
    }
    memcpy(r3, r1, sizeof r3);
    r3[((S - 1) * S + S - 1) * 3 + 1] ^= 0x80;  // the bottom-right pixel's green
    double g[11], gs = 0;
    for (int k = 0; k < 11; k++) g[k] = exp(-(k - 5.0) * (k - 5.0) / (2 * 1.5 * 1.5)), gs += g[k];
    double longhand[2] = {0, 0};
    const uint8_t *other[2] = {r2, r3};
    const double C1 = 6.5025, C2 = 58.5225;  // (0.01 * 255)^2, (0.03 * 255)^2
    for (int pair = 0; pair < 2; pair++) {
        double total = 0;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y + 11 <= S; y++)
                for (int x = 0; x + 11 <= S; x++) {
                    double mx = 0, my = 0, xx = 0, yy = 0, xy = 0;
                    for (int ky = 0; ky < 11; ky++)
                        for (int kx = 0; kx < 11; kx++) {
                            double w = g[ky] * g[kx] / (gs * gs);
                            double u = r1[((y + ky) * S + x + kx) * 3 + c], v = other[pair][((y + ky) * S + x + kx) * 3 + c];
                            mx += w * u, my += w * v, xx += w * u * u, yy += w * v * v, xy += w * u * v;
                        }
                    double vx = xx - mx * mx, vy = yy - my * my, cxy = xy - mx * my;
                    total += (2 * mx * my + C1) * (2 * cxy + C2) / ((mx * mx + my * my + C1) * (vx + vy + C2));
                }
        longhand[pair] = total / (3.0 * (S - 10) * (S - 10));
    }
    double s12 = frame_ssim(r1, r2, S), s13 = frame_ssim(r1, r3, S);
    check(fabs(s12 - longhand[0]) < 1e-9 && fabs(s13 - longhand[1]) < 1e-9 && s13 < 1, "frame_ssim_definition",
          "random frames %.9f (the definition, the long way: %.9f); one pixel changed at the window's last reach "
          "%.9f (%.9f)", s12, longhand[0], s13, longhand[1]);

    // The drift statistics: the top half of the frame black, the bottom half white. Mean and contrast
    // are 127.5; the Laplacian of the luminance is 255 on each of the two rows beside the edge (the
    // S - 2 interior pixels of each), 0 elsewhere: sharpness 2 (S - 2) 255 / (S - 2)^2.
    static uint8_t half[BYTES];
    for (int i = 0; i < BYTES; i++) half[i] = i < BYTES / 2 ? 0 : 255;
    FrameStats st = frame_stats(half, S);
    double want_sharp = 2.0 * 255 / (S - 2);
    check(fabs(st.mean - 127.5) < 1e-9 && fabs(st.contrast - 127.5) < 1e-9 && fabs(st.sharpness - want_sharp) < 1e-9,
          "frame_stats", "half black, half white: mean %.6f, contrast %.6f (both 127.5 by hand), sharpness %.6f "
          "(%.6f by hand)", st.mean, st.contrast, st.sharpness, want_sharp);
    FrameStats r = frame_stats_ratio((FrameStats){1, 2, 3}, (FrameStats){2, 8, 0});
    check(r.mean == 0.5 && r.contrast == 0.25 && isnan(r.sharpness), "frame_stats_ratio",
          "(1, 2, 3) over (2, 8, 0): %g, %g, %g (0.5, 0.25 and NaN where frame 0's is 0)", r.mean, r.contrast,
          r.sharpness);
    return g_failed ? 1 : 0;
}
