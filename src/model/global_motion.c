// global_motion.c: a global translation by exhaustive search (small frames: a few hundred
// candidates of a few thousand values each), and the bilinear shift that applies it.
#include <math.h>

#include "model/global_motion.h"

// in(fy, fx) of one (N, N) plane, bilinear, the coordinates clamped to the plane.
static double sample_clamped(const real *plane, int N, double fy, double fx) {
    fy = fy < 0 ? 0 : fy > N - 1 ? N - 1 : fy;
    fx = fx < 0 ? 0 : fx > N - 1 ? N - 1 : fx;
    int y0 = (int)fy, x0 = (int)fx;
    int y1 = y0 + 1 < N ? y0 + 1 : y0, x1 = x0 + 1 < N ? x0 + 1 : x0;
    double wy = fy - y0, wx = fx - x0;
    double top = plane[y0 * N + x0] * (1 - wx) + plane[y0 * N + x1] * wx;
    double bottom = plane[y1 * N + x0] * (1 - wx) + plane[y1 * N + x1] * wx;
    return top * (1 - wy) + bottom * wy;
}

void motion_shift(real *out, const real *in, int C, int N, double dx, double dy) {
    for (int ch = 0; ch < C; ch++) {
        const real *plane = in + (size_t)ch * N * N;
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) out[((size_t)ch * N + y) * N + x] = (real)sample_clamped(plane, N, y - dy, x - dx);
    }
}

// Mean squared difference of to(y, x) and from(y - dy, x - dx) over the pixels `margin` or more
// from every edge; with |dx|, |dy| <= margin no sample needs the clamp.
static double shifted_mse(const real *from, const real *to, int C, int N, int margin, double dx, double dy) {
    double sum = 0;
    for (int ch = 0; ch < C; ch++) {
        const real *a = from + (size_t)ch * N * N, *b = to + (size_t)ch * N * N;
        for (int y = margin; y < N - margin; y++)
            for (int x = margin; x < N - margin; x++) {
                double d = b[y * N + x] - sample_clamped(a, N, y - dy, x - dx);
                sum += d * d;
            }
    }
    return sum / ((double)C * (N - 2 * margin) * (N - 2 * margin));
}

void motion_estimate(const real *from, const real *to, int C, int N, double *dx, double *dy) {
    int radius = N / 8 > 2 ? N / 8 : 2;
    *dx = *dy = 0;
    if (N <= 2 * radius + 2) return;  // too small a frame to tell a shift from new content
    double still = shifted_mse(from, to, C, N, radius, 0, 0), best = still;
    double bx = 0, by = 0;
    for (int y = -radius; y <= radius; y++)  // whole pixels
        for (int x = -radius; x <= radius; x++) {
            double e = shifted_mse(from, to, C, N, radius, x, y);
            if (e < best) best = e, bx = x, by = y;
        }
    for (double step = 0.25; step >= 0.0625; step /= 4) {  // quarter, then sixteenth pixels
        double cx = bx, cy = by;
        for (int y = -3; y <= 3; y++)
            for (int x = -3; x <= 3; x++) {
                double sx = cx + x * step, sy = cy + y * step;
                if (fabs(sx) > radius || fabs(sy) > radius) continue;
                double e = shifted_mse(from, to, C, N, radius, sx, sy);
                if (e < best) best = e, bx = sx, by = sy;
            }
    }
    if (best < 0.5 * still) *dx = bx, *dy = by;
}
