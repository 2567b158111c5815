// plot.c: the canvas, lines, text, axes with round ticks, the legend (plot.h), and the PNG written
// through video/image.c's stb_image_write.
#include "report/plot.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "report/font.h"
#include "video/video.h"

// ----------------------------------------------------------------------------
// colours

Rgb plot_colour(int i) {
    static const Rgb P[PLOT_COLOURS] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189},
                                        {140, 86, 75},  {227, 119, 194}, {188, 189, 34}, {23, 190, 207}};
    return P[((i % PLOT_COLOURS) + PLOT_COLOURS) % PLOT_COLOURS];
}

int plot_dashed(int i) { return ((i / PLOT_COLOURS) % 2 + 2) % 2; }

Rgb rgb_light(Rgb c, double amount) {
    double k = 1 - amount;
    return (Rgb){(uint8_t)lround(c.r * amount + 255 * k), (uint8_t)lround(c.g * amount + 255 * k),
                 (uint8_t)lround(c.b * amount + 255 * k)};
}

// ----------------------------------------------------------------------------
// the canvas

int canvas_init(Canvas *c, int w, int h, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (w < 1 || h < 1 || (long)w * h > 100L * 1000 * 1000)
        return fc_errf(err, errlen, "a canvas of %d x %d pixels is out of range", w, h);
    c->px = malloc((size_t)w * h * 3);
    if (!c->px) return fc_errf(err, errlen, "no memory for a canvas of %d x %d pixels", w, h);
    memset(c->px, 255, (size_t)w * h * 3);
    c->w = w, c->h = h;
    canvas_unclip(c);
    return 0;
}

void canvas_free(Canvas *c) {
    free(c->px);
    c->px = NULL;
}

void canvas_clip(Canvas *c, int x0, int y0, int x1, int y1) {
    c->cx0 = x0 > 0 ? x0 : 0, c->cy0 = y0 > 0 ? y0 : 0;
    c->cx1 = x1 < c->w - 1 ? x1 : c->w - 1, c->cy1 = y1 < c->h - 1 ? y1 : c->h - 1;
}

void canvas_unclip(Canvas *c) { canvas_clip(c, 0, 0, c->w - 1, c->h - 1); }

void canvas_fill(Canvas *c, int x0, int y0, int x1, int y1, Rgb col) {
    if (x0 < c->cx0) x0 = c->cx0;
    if (y0 < c->cy0) y0 = c->cy0;
    if (x1 > c->cx1) x1 = c->cx1;
    if (y1 > c->cy1) y1 = c->cy1;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) {
            uint8_t *p = c->px + ((size_t)y * c->w + x) * 3;
            p[0] = col.r, p[1] = col.g, p[2] = col.b;
        }
}

// A width x width square around each point of the segment, one point per pixel of its longer side;
// with period > 0, only where the distance along the line (*along at the start, advanced here) is in
// the first 60% of a period: dashes that run on from one segment to the next.
static void draw_line(Canvas *c, double x0, double y0, double x1, double y1, Rgb col, int width, double period,
                      double *along) {
    double dx = x1 - x0, dy = y1 - y0, len = fmax(fabs(dx), fabs(dy));
    if (!isfinite(len) || len > 1e6) return;  // nothing sensible to draw
    int n = (int)ceil(len), px = INT32_MIN, py = INT32_MIN;
    double half = (width - 1) / 2.0, length = hypot(dx, dy);
    for (int i = 0; i <= n; i++) {
        double t = n ? (double)i / n : 0;
        if (period > 0 && fmod(*along + t * length, period) >= 0.6 * period) continue;  // a gap
        int x = (int)floor(x0 + dx * t - half + 0.5), y = (int)floor(y0 + dy * t - half + 0.5);
        if (x == px && y == py) continue;
        canvas_fill(c, x, y, x + width - 1, y + width - 1, col);
        px = x, py = y;
    }
    if (period > 0) *along += length;
}

void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, Rgb col, int width) {
    draw_line(c, x0, y0, x1, y1, col, width, 0, NULL);
}

// The bytes of the character at s: a whole UTF-8 sequence (a lead byte and its continuation bytes)
// is one character, drawn as one '?' (the font is ASCII); any other byte is a character of its own.
static size_t char_bytes(const char *s) {
    unsigned char b = (unsigned char)s[0];
    size_t n = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 1;
    for (size_t i = 1; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80) return 1;  // cut short (a NUL included): the lead alone
    return n;
}

static size_t text_chars(const char *s) {
    size_t n = 0;
    for (; *s; s += char_bytes(s)) n++;
    return n;
}

int text_width(const char *s, int scale) {
    size_t n = text_chars(s);
    return n ? (int)((n * FONT_ADVANCE - 1) * scale) : 0;
}

int text_height(int scale) { return FONT_H * scale; }

void canvas_text(Canvas *c, int x, int y, const char *s, Rgb col, int scale) {
    for (size_t len; *s; s += len, x += FONT_ADVANCE * scale) {
        len = char_bytes(s);
        const uint8_t *g = font_glyph(len > 1 ? '?' : (unsigned char)*s);
        for (int r = 0; r < FONT_H; r++)
            for (int k = 0; k < FONT_W; k++)
                if (g[r] & (0x10 >> k))
                    canvas_fill(c, x + k * scale, y + r * scale, x + (k + 1) * scale - 1, y + (r + 1) * scale - 1, col);
    }
}

void text_fit(char *out, size_t outlen, const char *s, int maxw, int scale) {
    snprintf(out, outlen, "%s", s);
    if (text_width(out, scale) <= maxw) return;
    // the longest run of whole characters that fits with "...": never a UTF-8 sequence cut in two
    out[0] = 0;
    for (size_t n = 0, len; s[n]; n += len) {
        len = char_bytes(s + n);
        char longer[4096];
        snprintf(longer, sizeof longer, "%.*s...", (int)(n + len), s);
        if (text_width(longer, scale) > maxw || strlen(longer) >= outlen) break;
        snprintf(out, outlen, "%s", longer);
    }
    if (!out[0] && text_width("...", scale) <= maxw && outlen > 3) snprintf(out, outlen, "...");
}

int canvas_save_png(const Canvas *c, const char *path, int overwrite, char *err, size_t errlen) {
    char tmp[4200];
    if (fc_temp_name(tmp, sizeof tmp, path, ".tmp-")) return fc_errf(err, errlen, "%.200s...: path too long", path);
    errno = 0;
    if (image_write_png(tmp, c->w, c->h, c->px)) {
        int e = errno;
        unlink(tmp);
        if (!e) return fc_errf(err, errlen, "%s: this build cannot write PNG files (no stb_image_write: install "
                               "libstb-dev and the FFmpeg libraries, then rebuild)", path);
        return fc_errf(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    long delay_ms = fc_test_hook("PNG_WRITE_DELAY_MS");  // the tests' kill must be able to land mid-write
    if (delay_ms > 0) usleep((useconds_t)delay_ms * 1000);
    // synced first: a power cut leaves the old plot or the new; never over one that came meanwhile
    if (fc_fsync_path(tmp) || fc_place_output(tmp, path, overwrite)) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return fc_output_error(err, errlen, path);
    }
    char dir[4096];
    fc_folder_of(dir, sizeof dir, path);
    fc_fsync_path(dir);  // the rename itself to disk; not every file system syncs a folder
    return 0;
}

// ----------------------------------------------------------------------------
// ranges and ticks

void range_add(Range *r, double v, int positive_only) {
    if (!isfinite(v) || (positive_only && v <= 0)) return;
    // a value past PLOT_RANGE_MAX (or, on a log axis, under its inverse: a denormal) widens the axis to
    // there and no further (a diverged run's 1e300 would overflow the axis's span and ticks); the curve
    // goes on off the axis
    v = fmax(-PLOT_RANGE_MAX, fmin(PLOT_RANGE_MAX, v));
    if (positive_only) v = fmax(1 / PLOT_RANGE_MAX, v);
    if (!r->n || v < r->lo) r->lo = v;
    if (!r->n || v > r->hi) r->hi = v;
    r->n++;
}

void axes_range(Axes *a, Range x, Range y, int ylog) {
    if (!x.n) x.lo = 0, x.hi = 1;
    if (x.hi - x.lo < 1e-9 * fmax(1, fabs(x.hi))) x.lo -= 1, x.hi += 1;
    if (x.lo > 0 && x.lo <= 0.05 * (x.hi - x.lo)) x.lo = 0;  // steps from 1, frames from 1: the axis from 0
    a->xmin = x.lo, a->xmax = x.hi;
    a->ylog = ylog && y.n && y.lo > 0;
    if (!y.n) y.lo = 0, y.hi = 1;
    if (a->ylog) {
        double lo = log10(y.lo), hi = log10(y.hi), m = fmax(0.04 * (hi - lo), 0.02);
        a->ymin = pow(10, lo - m), a->ymax = pow(10, hi + m);
        return;
    }
    double span = y.hi - y.lo;
    if (span <= 1e-12 * fmax(1, fabs(y.hi))) span = fabs(y.hi) > 0 ? 0.2 * fabs(y.hi) : 1;
    a->ymin = y.lo - 0.04 * span, a->ymax = y.hi + 0.04 * span;
    if (y.lo >= 0 && (a->ymin < 0 || y.lo <= 0.2 * y.hi)) a->ymin = 0;
}

// The round step (1, 2 or 5 x 10^k) whose ticks inside [lo, hi] number closest to target (rather more
// than fewer).
static double nice_step(double lo, double hi, int target) {
    double raw = (hi - lo) / target, p = pow(10, floor(log10(raw))), best = 0;
    static const double M[] = {0.5, 1, 2, 5, 10, 20};
    int best_d = 1 << 30;
    for (int i = 0; i < 6; i++) {
        double step = M[i] * p;
        int count = (int)(floor(hi / step + 1e-9) - ceil(lo / step - 1e-9)) + 1;
        int d = count < target ? 3 * (target - count) : 2 * (count - target) - 1;  // too few is worse
        if (count >= 2 && count <= AXES_MAX_TICKS && d < best_d) best = step, best_d = d;
    }
    return best > 0 ? best : M[3] * p;
}

// Decimals that show a multiple of step exactly (step a 1, 2 or 5 times a power of ten).
static int decimals_for(double step) {
    int d = (int)ceil(-log10(step) - 1e-9);
    return d < 0 ? 0 : d > 12 ? 12 : d;
}

// "1e-05" -> "1e-5", "1e+06" -> "1e6".
static void tidy_exponent(char *s) {
    char *e = strchr(s, 'e');
    if (!e) return;
    char *p = e + 1, *q = e + 1;
    if (*p == '+') p++;
    else if (*p == '-') p++, q++;
    while (*p == '0' && p[1]) p++;
    memmove(q, p, strlen(p) + 1);
}

// Linear ticks: multiples of a round step inside [lo, hi], about `target` of them.
static int linear_ticks(double lo, double hi, int target, double *t, double *step) {
    *step = nice_step(lo, hi, target > 2 ? target : 2);
    int n = 0;
    for (double k = ceil(lo / *step - 1e-9); k * *step <= hi + 1e-9 * *step && n < AXES_MAX_TICKS; k++)
        t[n++] = fabs(k) < 0.5 ? 0 : k * *step;
    return n;
}

static void format_linear(double v, double step, double unit, const char *suffix, char *out) {
    snprintf(out, 24, "%.*f%s", decimals_for(step / unit), v / unit, v == 0 ? "" : suffix);
}

// x: steps or frames; thousands as "k" and millions as "M" once the step is that large.
static void x_ticks(Axes *a, int target) {
    double step;
    a->nx = linear_ticks(a->xmin, a->xmax, target, a->xt, &step);
    double unit = step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : 1;
    const char *suffix = unit == 1e6 ? "M" : unit == 1e3 ? "k" : "";
    for (int i = 0; i < a->nx; i++) format_linear(a->xt[i], step, unit, suffix, a->xl[i]);
}

static void y_ticks(Axes *a, int target) {
    a->yunit[0] = 0;
    if (!a->ylog) {
        double step;
        a->ny = linear_ticks(a->ymin, a->ymax, target, a->yt, &step);
        double m = fmax(fabs(a->ymin), fabs(a->ymax)), unit = 1;
        if (m > 0 && (m < 1e-2 || m >= 1e5)) {
            int e = (int)floor(log10(m));
            unit = pow(10, e);
            snprintf(a->yunit, sizeof a->yunit, "(x 1e%d)", e);
        }
        for (int i = 0; i < a->ny; i++) format_linear(a->yt[i], step, unit, "", a->yl[i]);
        return;
    }
    // 1, 2 and 5 in every decade while they fit (about target of them), else powers of ten, every
    // stride-th; every mantissa when the range is too narrow for two of those
    double lo = log10(a->ymin), hi = log10(a->ymax);
    static const double M125[] = {1, 2, 5}, M1[] = {1}, M19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const double *m = M125;
    int nm = 3, stride = 1, done = 0;
    for (int tries = 0; tries < 400; tries++) {
        a->ny = 0;
        int over = 0;
        for (int e = (int)floor(lo) - 1; e <= (int)ceil(hi); e++) {
            if (((e % stride) + stride) % stride) continue;
            for (int k = 0; k < nm; k++) {
                double v = m[k] * pow(10, e);
                if (v < a->ymin * (1 - 1e-9) || v > a->ymax * (1 + 1e-9)) continue;
                if (a->ny < AXES_MAX_TICKS) a->yt[a->ny++] = v;
                else over = 1;
            }
        }
        if (a->ny < 2 && m == M1 && stride > 1) {  // one stride too far: the one before
            stride--, done = 1;
            continue;
        }
        if (a->ny < 2 && m == M125) {  // too narrow: every mantissa
            m = M19, nm = 9;
            continue;
        }
        if (m == M19 || (!over && a->ny <= target + 1) || a->ny <= 2 || done) break;
        if (m == M125) m = M1, nm = 1;
        else stride++;
    }
    for (int i = 0; i < a->ny; i++) {
        snprintf(a->yl[i], 24, "%g", a->yt[i]);
        tidy_exponent(a->yl[i]);
    }
}

// ----------------------------------------------------------------------------
// the axes

void axes_place(Axes *a, int bx0, int by0, int bx1, int by1, int scale, int has_xlabel) {
    int th = text_height(scale), gap = 4 * scale;
    a->scale = scale;
    a->y0 = by0 + th + 3 * gap;
    a->y1 = by1 - (th + 2 * gap) - (has_xlabel ? th + gap : 0);
    int spacing = th * 5 / 2 > 30 ? th * 5 / 2 : 30, ny_target = (a->y1 - a->y0) / spacing;
    y_ticks(a, ny_target < 2 ? 2 : ny_target > 10 ? 10 : ny_target);
    int wmax = 0;
    for (int i = 0; i < a->ny; i++) {
        int w = text_width(a->yl[i], scale);
        if (w > wmax) wmax = w;
    }
    a->x0 = bx0 + wmax + 2 * gap;
    a->x1 = bx1 - text_width("0000", scale) / 2;
    // x ticks: as many as fit with room between the labels
    for (int target = (a->x1 - a->x0) / (text_width("0000", scale) * 2); ; target--) {
        x_ticks(a, target < 2 ? 2 : target > 10 ? 10 : target);
        int used = 0;
        for (int i = 0; i < a->nx; i++) used += text_width(a->xl[i], scale) + 3 * gap;
        if (used <= a->x1 - a->x0 || target <= 2) break;
    }
}

// A position far off the canvas is held 100000 pixels out: a line towards it leaves the axis at much
// the same angle, and it stays within what draw_line steps along.
static double held(double p) { return fmax(-1e5, fmin(1e5, p)); }

double axes_px(const Axes *a, double x) { return held(a->x0 + (x - a->xmin) / (a->xmax - a->xmin) * (a->x1 - a->x0)); }

double axes_py(const Axes *a, double y) {
    double t = a->ylog ? (log10(y) - log10(a->ymin)) / (log10(a->ymax) - log10(a->ymin))
                       : (y / 2 - a->ymin / 2) / (a->ymax / 2 - a->ymin / 2);  // (halves: no overflow)
    return held(a->y1 - t * (a->y1 - a->y0));
}

void axes_draw(Canvas *c, const Axes *a, const char *title, const char *xlabel) {
    int s = a->scale, th = text_height(s), tick = 3 * s, gap = 4 * s;
    for (int i = 0; i < a->nx; i++) {
        int x = (int)lround(axes_px(a, a->xt[i]));
        canvas_fill(c, x, a->y0, x, a->y1, RGB_GRID);
        canvas_fill(c, x, a->y1, x, a->y1 + tick, RGB_FRAME);
        int w = text_width(a->xl[i], s);
        canvas_text(c, x - w / 2, a->y1 + tick + gap, a->xl[i], RGB_TEXT, s);
    }
    for (int i = 0; i < a->ny; i++) {
        int y = (int)lround(axes_py(a, a->yt[i]));
        canvas_fill(c, a->x0, y, a->x1, y, RGB_GRID);
        canvas_fill(c, a->x0 - tick, y, a->x0, y, RGB_FRAME);
        int w = text_width(a->yl[i], s);
        canvas_text(c, a->x0 - tick - gap - w, y - FONT_CAP * s / 2, a->yl[i], RGB_TEXT, s);
    }
    canvas_fill(c, a->x0, a->y0, a->x1, a->y0, RGB_FRAME);
    canvas_fill(c, a->x0, a->y1, a->x1, a->y1, RGB_FRAME);
    canvas_fill(c, a->x0, a->y0, a->x0, a->y1, RGB_FRAME);
    canvas_fill(c, a->x1, a->y0, a->x1, a->y1, RGB_FRAME);
    char full[512], fitted[512];
    snprintf(full, sizeof full, "%s%s%s%s", title, a->ylog ? ", log scale" : "", a->yunit[0] ? " " : "", a->yunit);
    text_fit(fitted, sizeof fitted, full, a->x1 - a->x0 + 2 * gap, s);  // within the panel
    canvas_text(c, a->x0, a->y0 - th - 2 * gap, fitted, RGB_BLACK, s);
    if (xlabel) {
        int w = text_width(xlabel, s);
        canvas_text(c, (a->x0 + a->x1 - w) / 2, a->y1 + tick + 2 * gap + th, xlabel, RGB_TEXT, s);
    }
}

void axes_plot(Canvas *c, const Axes *a, const double *x, const double *y, int n, Rgb col, int width, int dashed) {
    canvas_clip(c, a->x0 + 1, a->y0 + 1, a->x1 - 1, a->y1 - 1);
    double px = 0, py = 0, along = 0, period = dashed ? 8.0 * width * a->scale : 0;
    int have = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i]) || (a->ylog && y[i] <= 0)) continue;
        double qx = axes_px(a, x[i]), qy = axes_py(a, y[i]);
        if (have) draw_line(c, px, py, qx, qy, col, width, period, &along);
        else canvas_line(c, qx, qy, qx, qy, col, width);
        px = qx, py = qy, have = 1;
    }
    canvas_unclip(c);
}

void axes_describe(const Axes *a, const char *name, FILE *f) {
    fprintf(f, "panel %s: box %d %d %d %d x %.9g %.9g y %.9g %.9g %s\n", name, a->x0, a->y0, a->x1, a->y1, a->xmin,
            a->xmax, a->ymin, a->ymax, a->ylog ? "log" : "linear");
}

// ----------------------------------------------------------------------------
// the legend

// Where each item goes (x, row) and the rows; draws when c is not NULL.
static int legend_layout(Canvas *c, int x, int y, int maxw, const LegendItem *items, int n, int scale) {
    int swatch = 14 * scale, row_h = text_height(scale) + 3 * scale, cx = 0, rows = n ? 1 : 0;
    for (int i = 0; i < n; i++) {
        char label[256];
        text_fit(label, sizeof label, items[i].label, maxw - swatch - 4 * scale, scale);
        int w = swatch + 4 * scale + text_width(label, scale);
        if (cx > 0 && cx + w > maxw) cx = 0, rows++;
        if (c) {
            int ty = y + (rows - 1) * row_h, my = ty + FONT_CAP * scale / 2;
            int gap = items[i].dashed ? 4 * scale : 0;  // a dash each side of it
            canvas_fill(c, x + cx, my - scale, x + cx + (swatch - gap) / 2 - 1, my + scale, items[i].col);
            canvas_fill(c, x + cx + (swatch + gap) / 2, my - scale, x + cx + swatch - 1, my + scale, items[i].col);
            canvas_text(c, x + cx + swatch + 4 * scale, ty, label, RGB_TEXT, scale);
        }
        cx += w + 12 * scale;
    }
    return rows * row_h;
}

int legend_draw(Canvas *c, int x, int y, int maxw, const LegendItem *items, int n, int scale) {
    return legend_layout(c, x, y, maxw, items, n, scale);
}

// ----------------------------------------------------------------------------
// a figure

int figure_scale(int w, int h) { return w < 900 || h < 600 ? 1 : w <= 2000 && h <= 1400 ? 2 : 3; }

int figure_margin(int scale) { return 8 * scale; }

int figure_header(Canvas *c, const char *title, const LegendItem *items, int n, int scale) {
    int m = figure_margin(scale), y = m;
    char fitted[512];
    text_fit(fitted, sizeof fitted, title, c->w - 2 * m, scale + 1);
    canvas_text(c, m, y, fitted, RGB_BLACK, scale + 1);
    y += text_height(scale + 1) + 3 * scale;
    y += legend_draw(c, m, y, c->w - 2 * m, items, n, scale);
    return y + scale;
}
