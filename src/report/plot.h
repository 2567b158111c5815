// plot.h: the drawing under `framechain plot`: an RGB canvas (white, written as a PNG), lines, text
// in the built-in bitmap font (font.h), and axes with ticks at round numbers (1, 2, 5 x 10^k) on a
// linear or a log y scale. No antialiasing: lines are 1 or 2 pixels wide.
#ifndef FRAMECHAIN_REPORT_PLOT_H
#define FRAMECHAIN_REPORT_PLOT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint8_t r, g, b;
} Rgb;

#define RGB_BLACK ((Rgb){0, 0, 0})
#define RGB_TEXT ((Rgb){30, 30, 30})
#define RGB_GRID ((Rgb){228, 228, 228})
#define RGB_FRAME ((Rgb){110, 110, 110})

// The colour of series i (runs, noise-augmentation levels), distinct from black and gray:
// PLOT_COLOURS of them, then they repeat, dashed (plot_dashed): PLOT_SERIES series told apart.
#define PLOT_COLOURS 9
#define PLOT_SERIES (2 * PLOT_COLOURS)
Rgb plot_colour(int i);
int plot_dashed(int i);  // 1 for the series whose colour repeats an earlier one's
// c mixed with white: a fraction `amount` of c (1: c itself).
Rgb rgb_light(Rgb c, double amount);

typedef struct {
    int w, h;
    uint8_t *px;                 // (h, w, 3), row 0 at the top
    int cx0, cy0, cx1, cy1;      // drawing is clipped to this rectangle (inclusive)
} Canvas;

// A white canvas (0), or -1 with err when w x h is out of range or memory runs out.
int canvas_init(Canvas *c, int w, int h, char *err, size_t errlen);
void canvas_free(Canvas *c);
void canvas_clip(Canvas *c, int x0, int y0, int x1, int y1);
void canvas_unclip(Canvas *c);
void canvas_fill(Canvas *c, int x0, int y0, int x1, int y1, Rgb col);  // inclusive corners
void canvas_line(Canvas *c, double x0, double y0, double x1, double y1, Rgb col, int width);
// Text with its top-left corner at (x, y), each font pixel a scale x scale block.
void canvas_text(Canvas *c, int x, int y, const char *s, Rgb col, int scale);
int text_width(const char *s, int scale);
int text_height(int scale);  // a line of text, descenders included
// s cut to at most maxw pixels at this scale, ending in "..." when it was cut.
void text_fit(char *out, size_t outlen, const char *s, int maxw, int scale);
// The PNG through a temporary file in the same folder, renamed over path: 0, or -1 with one line in
// err (no file left behind).
int canvas_save_png(const Canvas *c, const char *path, int overwrite, char *err, size_t errlen);

// ---- axes ----

#define AXES_MAX_TICKS 24

typedef struct {
    // what the caller sets: the data ranges (axes_range) and the outer box (axes_place)
    double xmin, xmax, ymin, ymax;  // the axis limits (axes_range adds the margins)
    int ylog;                       // log10 y axis
    int scale;                      // text scale
    // what axes_place works out: the plot area in pixels (inclusive; y0 the top) and the ticks
    int x0, y0, x1, y1;
    int nx, ny;
    double xt[AXES_MAX_TICKS], yt[AXES_MAX_TICKS];
    char xl[AXES_MAX_TICKS][24], yl[AXES_MAX_TICKS][24];
    char yunit[24];  // "(x 1e-4)" when the y labels are in units of 10^-4; "" otherwise
} Axes;

// A data range being gathered: the finite values (and with positive_only, only those above 0).
typedef struct {
    double lo, hi;
    int n;
} Range;
// The largest magnitude an axis reaches (a value past it is drawn off the axis): 1e100.
#define PLOT_RANGE_MAX 1e100
void range_add(Range *r, double v, int positive_only);

// The limits from the data ranges: x exactly (a single value widened; from 0 when the data start
// near it, as steps and frames from 1 do), y with a margin of 4% (in log units on a log axis),
// starting at 0 when the data come close to it.
void axes_range(Axes *a, Range x, Range y, int ylog);
// Fit the axes into the box (outer corners, inclusive): a title line on top, the x tick labels and
// (when xlabel) an x title below, the y tick labels on the left.
void axes_place(Axes *a, int bx0, int by0, int bx1, int by1, int scale, int has_xlabel);
// The frame, the grid at the ticks, the tick labels, the title (with "log scale" or the unit of the
// y labels added) and the x title.
void axes_draw(Canvas *c, const Axes *a, const char *title, const char *xlabel);
double axes_px(const Axes *a, double x);
double axes_py(const Axes *a, double y);
// A line through the points (x[i], y[i]) inside the plot area (dashed: in dashes along its length);
// points that are not finite (or not above 0 on a log axis) are skipped, the line joining those on
// either side.
void axes_plot(Canvas *c, const Axes *a, const double *x, const double *y, int n, Rgb col, int width, int dashed);
// One line for programs checking a plot: "panel NAME: box X0 Y0 X1 Y1 x XMIN XMAX y YMIN YMAX linear|log".
void axes_describe(const Axes *a, const char *name, FILE *f);

// ---- legend ----

typedef struct {
    const char *label;
    Rgb col;
    int dashed;  // its curve's (plot_dashed)
} LegendItem;

// The items in rows from (x, y), wrapped at width maxw: a short thick line of each colour (with a gap
// when dashed) and its label. Returns the height used.
int legend_draw(Canvas *c, int x, int y, int maxw, const LegendItem *items, int n, int scale);

// ---- a figure ----

// The text scale for a figure of w x h pixels: 1 below 900 x 600, 2 up to 2000 x 1400, then 3.
int figure_scale(int w, int h);
// The margin around a figure and between its panels.
int figure_margin(int scale);
// The title (one line, at scale + 1, cut to fit) and the legend under it, from the top of the canvas:
// returns the y where the panels may start.
int figure_header(Canvas *c, const char *title, const LegendItem *items, int n, int scale);

#endif
