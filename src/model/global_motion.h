// global_motion.h: the global translation (and zoom) between two frames, and a frame moved by one. Used by
// targets = deltas with delta_reference = moved (docs/network.md, "Conditioning"): a target's
// reference is then its nearest given frame moved along the camera's motion, so that a pan's
// deltas are what the pan cannot explain (new content at an edge, things that move on their own).
#ifndef FRAMECHAIN_GLOBAL_MOTION_H
#define FRAMECHAIN_GLOBAL_MOTION_H

#include "base/common.h"

// The bilinear blend of one (N, N) plane's four taps: rows y0, y1 and columns x0, x1, weighted wy and wx
// toward the second of each.
static inline double motion_taps(const real *plane, int N, int y0, int y1, int x0, int x1, double wy, double wx) {
    double top = plane[y0 * N + x0] * (1 - wx) + plane[y0 * N + x1] * wx;
    double bottom = plane[y1 * N + x0] * (1 - wx) + plane[y1 * N + x1] * wx;
    return top * (1 - wy) + bottom * wy;
}

// in(fy, fx) of one (N, N) plane, bilinear, the coordinates clamped to the plane.
static inline double motion_sample(const real *plane, int N, double fy, double fx) {
    fy = fy < 0 ? 0 : fy > N - 1 ? N - 1 : fy;
    fx = fx < 0 ? 0 : fx > N - 1 ? N - 1 : fx;
    int y0 = (int)fy, x0 = (int)fx;
    int y1 = y0 + 1 < N ? y0 + 1 : y0, x1 = x0 + 1 < N ? x0 + 1 : x0;
    return motion_taps(plane, N, y0, y1, x0, x1, fy - y0, fx - x0);
}

// Scores n candidate shifts (sx[k], sy[k]) into e[k]; NAN where sx[k] is NAN (a candidate skipped).
typedef void (*ShiftScorer)(const void *ctx, int n, const double *sx, const double *sy, double *e);

// The search every motion here uses, on what `score` measures (a mean squared difference): the score
// at (base_x, base_y), then whole pixels within radius of (0, 0), then quarter and sixteenth pixels
// around the best (none past `bound` in x or y: the frame's search stays within its radius, an
// object's does not), each stage scored at once and its first best in scan order taken;
// (base_x, base_y) unless the best halves its score.
void motion_search(ShiftScorer score, const void *ctx, int radius, double bound, double base_x, double base_y,
                   double *dx, double *dy);

// The shift (dx, dy) in pixels (x to the right, y down) that best moves `from` onto `to`, both
// (C, N, N): the one that minimises the mean squared difference between to(y, x) and
// from(y - dy, x - dx) (bilinear) over the pixels at least R = max(2, N/8) from every edge,
// searched on whole pixels within R and refined to 1/16 pixel. (0, 0) unless the best shift
// halves the difference that no shift leaves: a still camera stays still, and the smoothing of a
// fractional shift, which lowers the difference of noisy frames by up to 3/8 on its own, does not
// move it.
void motion_estimate(const real *from, const real *to, int C, int N, double *dx, double *dy);

// The global motion as a zoom and a translation: to(p) = from(cen + (p - cen - d) e^-ls) with cen the
// frame's centre ((N - 1) / 2 on both axes): ls > 0 zooms in (things grow by e^ls). motion_estimate's
// translation and ls = 0 unless a zoom (scales whose edge moves up to N/8 pixels, then the
// translation at that scale to 1/16 pixel, then the scale to 1/16 of 1/N) halves the difference that
// translation leaves: every motion without a zoom is motion_estimate's, to the bit.
void motion_estimate_zoom(const real *from, const real *to, int C, int N, double *dx, double *dy, double *ls);

// out(p) = in(cen + (p - cen - d) e^-ls), bilinear, the coordinates clamped to the frame; motion_shift
// where ls = 0. (C, N, N) each, out != in.
void motion_zoom(real *out, const real *in, int C, int N, double dx, double dy, double ls);

// out(y, x) = in(y - dy, x - dx), bilinear, the coordinates clamped to the frame (an edge that
// comes into view repeats the edge pixels); (C, N, N) each, out != in.
void motion_shift(real *out, const real *in, int C, int N, double dx, double dy);

// motion_shift with another fill of what comes into view: where the source point lies d pixels
// outside the frame (the larger of its overshoots across and down), e^(-d / fill) of the repeated
// edge and the rest of the frame wrapped around (what leaves at one edge comes in at the other), so
// that a long pan keeps the scene's colours instead of taking its leading edge's; fill 0 is
// motion_shift, to the bit. Used by reference_fill (docs/network.md).
void motion_shift_fill(real *out, const real *in, int C, int N, double dx, double dy, double fill);
// The same, the wrapped part read from `wrap` (C, N, N) moved by (wdx, wdy) instead of from `in` moved
// by (dx, dy) (reference_fill_from = anchor: the anchor moved by the motion since it); with wrap = in
// and (wdx, wdy) = (dx, dy), motion_shift_fill, to the bit.
void motion_shift_fill_from(real *out, const real *in, int C, int N, double dx, double dy, double fill,
                            const real *wrap, double wdx, double wdy);

// The motion of each of the tiles x tiles squares of `to` (tile t = ty * tiles + tx, N / tiles pixels a
// side; N a multiple of tiles): the shift that best moves `from` onto that square, by the same search
// as motion_estimate over the square's pixels alone, and the base shift (the global motion) where no
// shift halves the base's difference (the camera's motion, a flat square). Used by delta_reference =
// local: things that move on their own, each at its own speed.
void motion_estimate_tiles(const real *from, const real *to, int C, int N, int tiles, double base_x, double base_y,
                           double *dx, double *dy);

// out = in with the pixels of each tile carried scale * (dx, dy) of their tile (forward: each pixel is
// spread bilinearly over the four pixels around where it lands). A pixel that content lands on takes
// the landed content (the mean of what lands there, by weight), where at least half a pixel's weight
// lands; elsewhere, where a moving tile leaves a pixel uncovered, in at the pixel less its tile's carry
// (what was behind the content that moved on), and on a still tile in's own value. (C, N, N) each,
// out != in.
void motion_carry_tiles(real *out, const real *in, int C, int N, int tiles, const double *dx, const double *dy,
                        double scale);

#endif
