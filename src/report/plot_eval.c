// plot_eval.c: the eval figure (figures.h): the TSV `framechain eval --tsv` writes (chain/eval.c's
// write_tsv), its columns found by the header's names, its 'quality' rows drawn per frame; the '#'
// lines before the header (the settings, eval.c's write_settings) are passed over.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "chain/eval.h"
#include "report/figures.h"
#include "report/plot.h"

enum { C_SECTION, C_LEVEL, C_FRAME, C_PSNR, C_PSNR_COPY, C_PSNR_HOLD0, C_SSIM, C_SSIM_COPY, C_SSIM_HOLD0, C_MOTION,
       C_MOTION_REAL, NCOLS };
static const char *const COLS[NCOLS] = {"section",    "noise_aug", "frame",      "psnr_chain",   "psnr_copy",  "psnr_hold0",
                                        "ssim_chain", "ssim_copy", "ssim_hold0", "motion_chain", "motion_real"};
#define REQUIRED_COLS 4  // section, noise_aug, frame, psnr_chain
#define MAX_FIELDS 256
#define MAX_LEVELS PLOT_SERIES  // each its own curve: a colour, or the colour again dashed
_Static_assert(EVAL_MAX_LEVELS == MAX_LEVELS, "eval --noise-aug takes as many levels as plot --eval tells apart");

static const Rgb HOLD0 = {0, 0, 0}, COPY = {150, 150, 150}, REAL = {0, 110, 110};

typedef struct {
    double v[NCOLS];  // v[C_SECTION] unused; NAN where the TSV has no number (or no such column)
    int line;         // its line in the file
} Row;

typedef struct {
    const char *path;
    int col[NCOLS];  // field index of each column, -1 when the TSV has none
    int nfields;     // the header's
    Row *rows;       // the 'quality' rows
    int n, cap;
    double levels[MAX_LEVELS];
    int L;
} Tsv;

// ----------------------------------------------------------------------------
// reading

// The fields of a line split at tabs, in place (the line end removed): their count, at most max.
static int split(char *line, char **f, int max) {
    line[strcspn(line, "\r\n")] = 0;
    int n = 0;
    for (char *s = line;;) {
        if (n == max) return max + 1;
        f[n++] = s;
        char *tab = strchr(s, '\t');
        if (!tab) return n;
        *tab = 0;
        s = tab + 1;
    }
}

static int header(Tsv *t, char *line, int lineno, char *err, size_t errlen) {
    char *f[MAX_FIELDS];
    int n = split(line, f, MAX_FIELDS);
    if (n > MAX_FIELDS) return fc_errf(err, errlen, "%s: line %d: more than %d columns", t->path, lineno, MAX_FIELDS);
    t->nfields = n;
    for (int c = 0; c < NCOLS; c++) {
        t->col[c] = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(f[i], COLS[c])) t->col[c] = i;
        if (c < REQUIRED_COLS && t->col[c] < 0)
            return fc_errf(err, errlen, "%s: line %d: no column '%s': not a TSV written by 'framechain eval --tsv'",
                           t->path, lineno, COLS[c]);
    }
    return 0;
}

static int row(Tsv *t, char *line, int lineno, char *err, size_t errlen) {
    char *f[MAX_FIELDS];
    int n = split(line, f, MAX_FIELDS);
    if (n != t->nfields)
        return fc_errf(err, errlen, "%s: line %d does not parse: %d tab-separated fields where the header has %d",
                       t->path, lineno, n > MAX_FIELDS ? MAX_FIELDS : n, t->nfields);
    if (strcmp(f[t->col[C_SECTION]], "quality")) return 0;  // drift rows, and sections newer than this reader
    Row r;
    for (int c = 1; c < NCOLS; c++) {
        r.v[c] = NAN;
        if (t->col[c] < 0) continue;
        const char *s = f[t->col[c]];
        char *end;
        r.v[c] = strtod(s, &end);
        if (!*s || *end)
            return fc_errf(err, errlen, "%s: line %d does not parse: column '%s' holds '%.40s', not a number", t->path,
                           lineno, COLS[c], s);
    }
    if (!isfinite(r.v[C_LEVEL]) || !(r.v[C_FRAME] >= 0 && r.v[C_FRAME] < 1e9 && r.v[C_FRAME] == floor(r.v[C_FRAME])))
        return fc_errf(err, errlen, "%s: line %d does not parse: the noise_aug or frame column is no number", t->path,
                       lineno);
    int l = 0;
    while (l < t->L && t->levels[l] != r.v[C_LEVEL]) l++;
    if (l == t->L) {
        if (t->L == MAX_LEVELS)
            return fc_errf(err, errlen, "%s: line %d: more than %d noise-augmentation levels (one curve style each)",
                           t->path, lineno, MAX_LEVELS);
        t->levels[t->L++] = r.v[C_LEVEL];
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        Row *grown = realloc(t->rows, (size_t)t->cap * sizeof *grown);
        if (!grown) return fc_errf(err, errlen, "%s: no memory for %d rows", t->path, t->cap);
        t->rows = grown;
    }
    r.line = lineno;
    t->rows[t->n++] = r;
    return 0;
}

// Rows by level, then frame (each curve drawn left to right, whatever order a hand-made file has).
static int by_level_frame(const void *a, const void *b) {
    const Row *x = a, *y = b;
    if (x->v[C_LEVEL] != y->v[C_LEVEL]) return x->v[C_LEVEL] < y->v[C_LEVEL] ? -1 : 1;
    if (x->v[C_FRAME] != y->v[C_FRAME]) return x->v[C_FRAME] < y->v[C_FRAME] ? -1 : 1;
    return x->line - y->line;
}

// The rows sorted, and the levels with them (the figure is the table's whatever its rows' order); a
// frame of a level given twice (two tables in one file) refused, naming both lines.
static int sort_rows(Tsv *t, char *err, size_t errlen) {
    qsort(t->rows, (size_t)t->n, sizeof *t->rows, by_level_frame);
    t->L = 0;
    for (int i = 0; i < t->n; i++)
        if (!i || t->rows[i].v[C_LEVEL] != t->rows[i - 1].v[C_LEVEL]) t->levels[t->L++] = t->rows[i].v[C_LEVEL];
    for (int i = 1; i < t->n; i++) {
        const Row *a = &t->rows[i - 1], *b = &t->rows[i];
        if (a->v[C_LEVEL] == b->v[C_LEVEL] && a->v[C_FRAME] == b->v[C_FRAME])
            return fc_errf(err, errlen, "%s: lines %d and %d both hold frame %.0f at noise_aug %g: two tables in one "
                           "file? (plot each on its own: --eval A.tsv --out A.png)", t->path, a->line, b->line,
                           a->v[C_FRAME], a->v[C_LEVEL]);
    }
    return 0;
}

static int read_tsv(Tsv *t, char *err, size_t errlen) {
    FILE *f = fc_fopen_regular(t->path, err, errlen);  // a FIFO is refused, not waited on
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0, have_header = 0;
    while (!rc && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[0] == '#') continue;  // the settings eval writes before the header (a TSV before them has none)
        if (!have_header) rc = header(t, line, lineno, err, errlen), have_header = 1;
        else if (line[strspn(line, " \t\r\n")]) rc = row(t, line, lineno, err, errlen);  // blank lines skipped
    }
    int read_error = rc ? 0 : fc_getline_error(f);
    if (read_error) rc = fc_errf(err, errlen, "%s: cannot read: %s", t->path, strerror(read_error));
    free(line);
    fclose(f);
    if (!rc && !have_header)
        rc = fc_errf(err, errlen, "%s: empty%s", t->path, lineno ? ": no header after its '#' lines" : "");
    if (!rc && t->n == 0) rc = fc_errf(err, errlen, "%s: no 'quality' rows: nothing to plot", t->path);
    if (!rc) rc = sort_rows(t, err, errlen);
    return rc;
}

// ----------------------------------------------------------------------------
// the panels

typedef struct {
    const char *name, *title;
    int chain, copy, hold0, real;  // columns (or -1)
} Panel;

// Column col of the rows of level l (the first level's: the baselines, the same at every level).
static int series(const Tsv *t, int l, int col, double *x, double *y) {
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].v[C_LEVEL] == t->levels[l]) x[n] = t->rows[i].v[C_FRAME], y[n++] = t->rows[i].v[col];
    return n;
}

// Whether column col has a finite value (and, with other >= 0, differs from that column somewhere).
static int shown(const Tsv *t, int col, int other) {
    if (col < 0 || t->col[col] < 0) return 0;
    int any = 0, differs = other < 0 || t->col[other] < 0;
    for (int i = 0; i < t->n; i++) {
        const double *v = t->rows[i].v;
        any |= isfinite(v[col]) != 0;
        if (other >= 0 && isfinite(v[col]) && !(fabs(v[col] - v[other]) < 1e-3)) differs = 1;
    }
    return any && differs;
}

static void draw_panel(Canvas *c, const Tsv *t, const Panel *p, const int box[5], int scale, const FigureOptions *o,
                       double *x, double *y) {
    Range xr = {0}, yr = {0};
    int cols[3] = {shown(t, p->hold0, -1) ? p->hold0 : -1, shown(t, p->copy, p->hold0) ? p->copy : -1,
                   shown(t, p->real, -1) ? p->real : -1};
    const Rgb colours[3] = {HOLD0, COPY, REAL};
    for (int i = 0; i < t->n; i++) {
        range_add(&xr, t->rows[i].v[C_FRAME], 0);
        range_add(&yr, t->rows[i].v[p->chain], 0);
        for (int k = 0; k < 3; k++)
            if (cols[k] >= 0 && t->rows[i].v[C_LEVEL] == t->levels[0]) range_add(&yr, t->rows[i].v[cols[k]], 0);
    }
    Axes a = {0};
    axes_range(&a, xr, yr, 0);
    axes_place(&a, box[0], box[1], box[2], box[3], scale, box[4]);
    axes_draw(c, &a, p->title, box[4] ? "frame" : NULL);
    for (int k = 0; k < 3; k++)
        if (cols[k] >= 0) axes_plot(c, &a, x, y, series(t, 0, cols[k], x, y), colours[k], 2, 0);
    for (int l = 0; l < t->L; l++) axes_plot(c, &a, x, y, series(t, l, p->chain, x, y), plot_colour(l), 2,
                                              plot_dashed(l));
    if (o->verbose) axes_describe(&a, p->name, stdout);
}

int figure_eval(Canvas *c, const char *path, const FigureOptions *o, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    Tsv t = {.path = path};
    int rc = read_tsv(&t, err, errlen);
    if (!rc) rc = canvas_init(c, o->width, o->height, err, errlen);
    if (rc) {
        free(t.rows);
        return rc;
    }
    double first = INFINITY, last = -INFINITY;
    for (int i = 0; i < t.n; i++) first = fmin(first, t.rows[i].v[C_FRAME]), last = fmax(last, t.rows[i].v[C_FRAME]);
    // The copy baseline holds the frame before the first scored one; with one given frame that is frame 0.
    char copy_label[64], level_labels[MAX_LEVELS][48];
    snprintf(copy_label, sizeof copy_label, "hold frame %.0f (the last given)", first - 1);
    Panel panels[3] = {{"psnr", "PSNR against the real frames (dB)", C_PSNR, C_PSNR_COPY, C_PSNR_HOLD0, -1},
                       {"ssim", "SSIM against the real frames", C_SSIM, C_SSIM_COPY, C_SSIM_HOLD0, -1},
                       {"motion", "motion per frame (mean change, 8-bit)", C_MOTION, -1, -1, C_MOTION_REAL}};
    int np = 0;
    for (int p = 0; p < 3; p++)
        if (shown(&t, panels[p].chain, -1)) panels[np++] = panels[p];
    if (!np) {  // a chain that made no finite score (a diverged model): its baselines, and the figure says so
        panels[np++] = (Panel){"psnr", "PSNR against the real frames (dB); the chain's: none finite", C_PSNR,
                               C_PSNR_COPY, C_PSNR_HOLD0, -1};
        printf("plot: %s: none of the chain's scores is finite (NaN or infinite): its baselines alone are drawn\n",
               FC_ESCAPED(path));
    }

    LegendItem items[MAX_LEVELS + 3];
    int ni = 0;
    for (int l = 0; l < t.L; l++) {
        snprintf(level_labels[l], sizeof level_labels[l], "chain, noise-aug %g", t.levels[l]);
        items[ni++] = (LegendItem){level_labels[l], plot_colour(l), plot_dashed(l)};
    }
    int hold0 = 0, copy = 0, real = 0;
    for (int p = 0; p < np; p++) {
        hold0 |= shown(&t, panels[p].hold0, -1);
        copy |= shown(&t, panels[p].copy, panels[p].hold0);
        real |= shown(&t, panels[p].real, -1);
    }
    if (hold0) items[ni++] = (LegendItem){"hold frame 0", HOLD0};
    if (copy) items[ni++] = (LegendItem){copy_label, COPY};
    if (real) items[ni++] = (LegendItem){"real clip", REAL};

    const char *slash = strrchr(path, '/');
    char title[600];
    snprintf(title, sizeof title, "framechain eval: %s (frames %.0f to %.0f)", slash ? slash + 1 : path, first, last);
    int s = figure_scale(c->w, c->h), m = figure_margin(s);
    int top = figure_header(c, title, items, ni, s), midx = c->w / 2, bottom = c->h - 1 - m;
    int split_y = np == 1 ? bottom : top + (np == 3 ? 55 : 50) * (c->h - top) / 100;
    int boxes[3][5] = {{m, top, c->w - 1 - m, np == 1 ? bottom : split_y - m, np == 1}};
    if (np == 2) memcpy(boxes[1], (int[5]){m, split_y, c->w - 1 - m, bottom, 1}, sizeof boxes[1]);
    if (np == 3) {
        memcpy(boxes[1], (int[5]){m, split_y, midx - m, bottom, 1}, sizeof boxes[1]);
        memcpy(boxes[2], (int[5]){midx + m, split_y, c->w - 1 - m, bottom, 1}, sizeof boxes[2]);
    }
    double *x = fc_malloc((size_t)t.n * sizeof *x), *y = fc_malloc((size_t)t.n * sizeof *y);
    for (int p = 0; p < np; p++) draw_panel(c, &t, &panels[p], boxes[p], s, o, x, y);
    printf("plot: %s: frames %.0f to %.0f, %d noise-augmentation level%s\n", FC_ESCAPED(path), first, last, t.L, t.L == 1 ? "" : "s");
    free(x), free(y), free(t.rows);
    return 0;
}
