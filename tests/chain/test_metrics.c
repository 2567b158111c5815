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
    return g_failed ? 1 : 0;
}
