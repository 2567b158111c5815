// global_motion.c: a global translation by exhaustive search (small frames: a few hundred
// candidates of a few thousand values each), and the bilinear shift that applies it; a zoom beside
// it; the same per tile, and the forward carry that applies a field of tile motions.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/global_motion.h"

void motion_shift(real *out, const real *in, int C, int N, double dx, double dy) {
    for (int ch = 0; ch < C; ch++) {
        const real *plane = in + (size_t)ch * N * N;
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) out[((size_t)ch * N + y) * N + x] = (real)motion_sample(plane, N, y - dy, x - dx);
    }
}

// in(fy, fx) of one (N, N) plane, bilinear, the coordinates taken modulo N (the plane wrapped around).
static double wrapped_sample(const real *plane, int N, double fy, double fx) {
    fy = fmod(fy, N), fx = fmod(fx, N);
    fy += fy < 0 ? N : 0, fx += fx < 0 ? N : 0;
    int y0 = (int)fy < N ? (int)fy : N - 1, x0 = (int)fx < N ? (int)fx : N - 1;
    return motion_taps(plane, N, y0, (y0 + 1) % N, x0, (x0 + 1) % N, fy - y0, fx - x0);
}

void motion_shift_fill(real *out, const real *in, int C, int N, double dx, double dy, double fill) {
    motion_shift_fill_from(out, in, C, N, dx, dy, fill, in, dx, dy);
}

void motion_shift_fill_from(real *out, const real *in, int C, int N, double dx, double dy, double fill,
                            const real *wrap, double wdx, double wdy) {
    if (!(fill > 0)) {
        motion_shift(out, in, C, N, dx, dy);
        return;
    }
    for (int ch = 0; ch < C; ch++) {
        const real *plane = in + (size_t)ch * N * N, *far = wrap + (size_t)ch * N * N;
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                double fy = y - dy, fx = x - dx, v = motion_sample(plane, N, fy, fx);
                double oy = fy < 0 ? -fy : fy > N - 1 ? fy - (N - 1) : 0;
                double ox = fx < 0 ? -fx : fx > N - 1 ? fx - (N - 1) : 0, d = ox > oy ? ox : oy;
                if (d > 0) {
                    double w = exp(-d / fill);
                    v = w * v + (1 - w) * wrapped_sample(far, N, y - wdy, x - wdx);
                }
                out[((size_t)ch * N + y) * N + x] = (real)v;
            }
    }
}

// The pixels of `to` that a shift is scored on: rows [y0, y1), columns [x0, x1).
typedef struct {
    int y0, y1, x0, x1;
} Window;

// Mean squared difference of to(y, x) and from(y - dy, x - dx) over the window; a sample outside the
// frame takes the clamped edge (never, for the whole frame's window `radius` from every edge).
static double shifted_mse(const real *from, const real *to, int C, int N, Window w, double dx, double dy) {
    double sum = 0;
    for (int ch = 0; ch < C; ch++) {
        const real *a = from + (size_t)ch * N * N, *b = to + (size_t)ch * N * N;
        for (int y = w.y0; y < w.y1; y++)
            for (int x = w.x0; x < w.x1; x++) {
                double d = b[y * N + x] - motion_sample(a, N, y - dy, x - dx);
                sum += d * d;
            }
    }
    return sum / ((double)C * (w.y1 - w.y0) * (w.x1 - w.x0));
}

void motion_search(ShiftScorer score, const void *ctx, int radius, double bound, double base_x, double base_y,
                   double *dx, double *dy) {
    double still, best, bx = base_x, by = base_y;
    score(ctx, 1, &base_x, &base_y, &still);
    best = still;
    *dx = base_x, *dy = base_y;
    int side = 2 * radius + 1, n = side * side > 49 ? side * side : 49;
    double *sx = malloc(sizeof(double) * 3 * n), *sy = sx + n, *e = sy + n;
    if (!sx) fc_die("out of memory (the motion search's %d candidates)", n);
    for (int y = -radius, k = 0; y <= radius; y++)  // whole pixels
        for (int x = -radius; x <= radius; x++, k++) sx[k] = x, sy[k] = y;
    score(ctx, side * side, sx, sy, e);
    for (int k = 0; k < side * side; k++)
        if (e[k] < best) best = e[k], bx = sx[k], by = sy[k];
    for (double step = 0.25; step >= 0.0625; step /= 4) {  // quarter, then sixteenth pixels
        double cx = bx, cy = by;
        for (int y = -3, k = 0; y <= 3; y++)
            for (int x = -3; x <= 3; x++, k++) {
                sx[k] = cx + x * step, sy[k] = cy + y * step;
                if (fabs(sx[k]) > bound || fabs(sy[k]) > bound) sx[k] = NAN;
            }
        score(ctx, 49, sx, sy, e);
        for (int k = 0; k < 49; k++)
            if (!isnan(e[k]) && e[k] < best) best = e[k], bx = sx[k], by = sy[k];
    }
    free(sx);
    if (best < 0.5 * still) *dx = bx, *dy = by;
}

// A window's shifts, scored in parallel: each is one thread's serial sum, so the bytes do not
// depend on the thread count.
typedef struct {
    const real *from, *to;
    int C, N;
    Window w;
} WindowShifts;

static void score_window(const void *ctx, int n, const double *sx, const double *sy, double *e) {
    const WindowShifts *a = ctx;
#pragma omp parallel for schedule(dynamic, 1) if (n > 8)
    for (int k = 0; k < n; k++)
        e[k] = isnan(sx[k]) ? NAN : shifted_mse(a->from, a->to, a->C, a->N, a->w, sx[k], sy[k]);
}

// The search of motion_estimate over one window.
static void search_shift(const real *from, const real *to, int C, int N, Window w, int radius, double base_x,
                         double base_y, double *dx, double *dy) {
    WindowShifts a = {from, to, C, N, w};
    motion_search(score_window, &a, radius, radius, base_x, base_y, dx, dy);
}

static int motion_radius(int N) { return N / 8 > 2 ? N / 8 : 2; }

void motion_estimate(const real *from, const real *to, int C, int N, double *dx, double *dy) {
    int radius = motion_radius(N);
    *dx = *dy = 0;
    if (N <= 2 * radius + 2) return;  // too small a frame to tell a shift from new content
    search_shift(from, to, C, N, (Window){radius, N - radius, radius, N - radius}, radius, 0, 0, dx, dy);
}

// ---- zooms: to(p) = from(cen + (p - cen - d) e^-ls), cen the frame's centre ----

// from at the point that lands on (y, x) under the zoom: (fy, fx) = cen + ((y, x) - cen - d) k, k = e^-ls.
static inline double zoom_sample(const real *plane, int N, double k, double dx, double dy, int y, int x) {
    double cen = (N - 1) / 2.0;
    return motion_sample(plane, N, cen + (y - cen - dy) * k, cen + (x - cen - dx) * k);
}

static double zoomed_mse(const real *from, const real *to, int C, int N, Window w, double dx, double dy, double ls) {
    double sum = 0, k = exp(-ls);
    for (int ch = 0; ch < C; ch++) {
        const real *a = from + (size_t)ch * N * N, *b = to + (size_t)ch * N * N;
        for (int y = w.y0; y < w.y1; y++)
            for (int x = w.x0; x < w.x1; x++) {
                double d = b[y * N + x] - zoom_sample(a, N, k, dx, dy, y, x);
                sum += d * d;
            }
    }
    return sum / ((double)C * (w.y1 - w.y0) * (w.x1 - w.x0));
}

// n candidates (dx[i], dy[i], ls[i]) scored in parallel, each one thread's serial sum.
static void score_zooms(const real *from, const real *to, int C, int N, Window w, int n, const double *dx,
                        const double *dy, const double *ls, double *e) {
#pragma omp parallel for schedule(dynamic, 1) if (n > 8)
    for (int i = 0; i < n; i++) e[i] = zoomed_mse(from, to, C, N, w, dx[i], dy[i], ls[i]);
}

// The best of n candidates, or the current one (*best its score) where none is lower: 1 if one was.
static int take_best(int n, const double *dx, const double *dy, const double *ls, const double *e, double *best,
                     double *bx, double *by, double *bl) {
    int k = -1;
    for (int i = 0; i < n; i++)
        if (e[i] < *best) *best = e[i], k = i;
    if (k >= 0) *bx = dx[k], *by = dy[k], *bl = ls[k];
    return k >= 0;
}

void motion_estimate_zoom(const real *from, const real *to, int C, int N, double *dx, double *dy, double *ls) {
    motion_estimate(from, to, C, N, dx, dy);
    *ls = 0;
    int radius = motion_radius(N), K = N / 4;
    if (N <= 2 * radius + 2) return;
    Window w = {radius, N - radius, radius, N - radius};
    double translated = shifted_mse(from, to, C, N, w, *dx, *dy);  // what the translation leaves
    enum { MOST = 64 };
    double cx[MOST], cy[MOST], cl[MOST], e[MOST], best = translated, bx = *dx, by = *dy, bl = 0;
    // scales at the translation: the frame's edge N/2 from the centre moved by up to N/8 pixels, in
    // steps of half a pixel (coarser on frames over 128 pixels, for at most MOST candidates)
    int n = 0, stride = 1 + 2 * K / MOST;
    for (int k = -K; k <= K; k += stride)
        if (k) cx[n] = bx, cy[n] = by, cl[n] = (double)k / N, n++;
    score_zooms(from, to, C, N, w, n, cx, cy, cl, e);
    if (!take_best(n, cx, cy, cl, e, &best, &bx, &by, &bl)) return;
    // then the translation at that scale (whole, quarter and sixteenth pixels), then the scale finer
    for (double step = 1; step >= 0.0625; step /= 4) {
        n = 0;
        for (int y = -3; y <= 3; y++)
            for (int x = -3; x <= 3; x++)
                if ((x || y) && (step < 1 || (abs(x) <= 1 && abs(y) <= 1)))
                    cx[n] = bx + x * step, cy[n] = by + y * step, cl[n] = bl, n++;
        score_zooms(from, to, C, N, w, n, cx, cy, cl, e);
        take_best(n, cx, cy, cl, e, &best, &bx, &by, &bl);
    }
    for (double step = 0.25 / N; step >= 0.0625 / N; step /= 4) {
        n = 0;
        for (int k = -3; k <= 3; k++)
            if (k) cx[n] = bx, cy[n] = by, cl[n] = bl + k * step, n++;
        score_zooms(from, to, C, N, w, n, cx, cy, cl, e);
        take_best(n, cx, cy, cl, e, &best, &bx, &by, &bl);
    }
    if (best < 0.5 * translated) *dx = bx, *dy = by, *ls = bl;
}

void motion_zoom(real *out, const real *in, int C, int N, double dx, double dy, double ls) {
    if (ls == 0) {
        motion_shift(out, in, C, N, dx, dy);
        return;
    }
    double k = exp(-ls);
    for (int ch = 0; ch < C; ch++) {
        const real *plane = in + (size_t)ch * N * N;
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++)
                out[((size_t)ch * N + y) * N + x] = (real)zoom_sample(plane, N, k, dx, dy, y, x);
    }
}

void motion_estimate_tiles(const real *from, const real *to, int C, int N, int tiles, double base_x, double base_y,
                           double *dx, double *dy) {
    int side = N / tiles, radius = motion_radius(N);
    for (int ty = 0; ty < tiles; ty++)
        for (int tx = 0; tx < tiles; tx++) {
            Window w = {ty * side, (ty + 1) * side, tx * side, (tx + 1) * side};
            search_shift(from, to, C, N, w, radius, base_x, base_y, &dx[ty * tiles + tx], &dy[ty * tiles + tx]);
        }
}

void motion_carry_tiles(real *out, const real *in, int C, int N, int tiles, const double *dx, const double *dy,
                        double scale) {
    size_t plane = (size_t)N * N;
    double *acc = calloc(plane * (C + 1), sizeof(double)), *weight = acc + plane * C;
    if (!acc) fc_die("out of memory (the motion carry of a %dx%d frame)", N, N);
    int side = N / tiles;
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) {
            int t = (y / side) * tiles + x / side;
            if (dx[t] == 0 && dy[t] == 0) continue;  // a still tile: in's own values, below
            double fy = y + scale * dy[t], fx = x + scale * dx[t];
            int y0 = (int)floor(fy), x0 = (int)floor(fx);
            double wy = fy - y0, wx = fx - x0;
            for (int k = 0; k < 4; k++) {
                int yy = y0 + (k >> 1), xx = x0 + (k & 1);
                double w = ((k >> 1) ? wy : 1 - wy) * ((k & 1) ? wx : 1 - wx);
                if (yy < 0 || yy >= N || xx < 0 || xx >= N || w <= 0) continue;  // carried out of the frame
                size_t q = (size_t)yy * N + xx;
                weight[q] += w;
                for (int ch = 0; ch < C; ch++) acc[ch * plane + q] += w * in[ch * plane + (size_t)y * N + x];
            }
        }
    // Where nothing landed: what comes into view behind content that moved on, taken from behind it
    // (in at the pixel less its tile's carry, clamped to the frame); in itself on a still tile.
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) {
            size_t q = (size_t)y * N + x;
            int t = (y / side) * tiles + x / side;
            for (int ch = 0; ch < C; ch++)
                out[ch * plane + q] = weight[q] >= 0.5 ? (real)(acc[ch * plane + q] / weight[q])
                                                       : (real)motion_sample(in + ch * plane, N, y - scale * dy[t],
                                                                             x - scale * dx[t]);
        }
    free(acc);
}
