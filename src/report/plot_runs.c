// plot_runs.c: the training figure (figures.h): each run's metrics.jsonl read line by line (the
// lines train/train.c's write_metrics writes), then four panels against the step.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "report/figures.h"
#include "report/plot.h"
#include "train/metrics_line.h"

enum { K_STEP, K_LOSS, K_SMOOTH, K_LR, K_GRAD, K_WAIT, NKEYS };
static const char *const KEYS[NKEYS] = {"step", "loss", "smooth_loss", "lr", "grad_norm", "data_wait_ms"};

typedef struct {
    double v[NKEYS];
} Row;

typedef struct {
    char path[4200];  // RUN/metrics.jsonl
    char name[256];   // the legend's
    Row *rows;
    int n, cap;
    int skipped[NKEYS];  // values that are not finite, by key
} Run;

static int by_step(const void *a, const void *b) {
    double x = ((const Row *)a)->v[K_STEP], y = ((const Row *)b)->v[K_STEP];
    return (x > y) - (x < y);
}

// ----------------------------------------------------------------------------
// a run

static int read_run(Run *r, const char *dir, char *err, size_t errlen) {
    snprintf(r->path, sizeof r->path, "%s/metrics.jsonl", dir);
    struct stat st;
    if (stat(dir, &st))
        return errno == ENOENT ? fc_errf(err, errlen, "%s: no such run folder", dir)
                               : fc_errf(err, errlen, "%s: cannot read: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return fc_errf(err, errlen, "%s: not a run folder (give the folder train wrote)", dir);
    FILE *f = fc_fopen_regular(r->path, err, errlen);  // a FIFO is refused, not waited on
    if (!f) return -1;
    char *line = NULL, why[256];
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0, sorted = 1;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;  // a blank line (a NUL byte makes a line none)
        Row row;
        if (metrics_line_record(line, (size_t)len, KEYS, NKEYS, row.v, why, sizeof why)) {
            if (line[len - 1] != '\n' && fgetc(f) == EOF) {  // the unfinished last line of a run still writing
                fc_warn("%s: line %d is unfinished (a run still writing?): left out", r->path, lineno);
                break;
            }
            rc = fc_errf(err, errlen, "%s: line %d does not parse: %s", r->path, lineno, why);
            break;
        }
        for (int k = 1; k < NKEYS; k++) r->skipped[k] += !isfinite(row.v[k]);
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 1024;
            Row *grown = realloc(r->rows, (size_t)r->cap * sizeof *grown);
            if (!grown) {
                rc = fc_errf(err, errlen, "%s: no memory for %d lines", r->path, r->cap);
                break;
            }
            r->rows = grown;
        }
        if (r->n && row.v[K_STEP] < r->rows[r->n - 1].v[K_STEP]) sorted = 0;
        r->rows[r->n++] = row;
    }
    int read_error = rc ? 0 : fc_getline_error(f);
    if (read_error) rc = fc_errf(err, errlen, "%s: cannot read: %s", r->path, strerror(read_error));
    free(line);
    fclose(f);
    if (!rc && !r->n) rc = fc_errf(err, errlen, "%s: empty: no step recorded yet", r->path);
    if (!rc && !sorted) qsort(r->rows, (size_t)r->n, sizeof *r->rows, by_step);
    return rc;
}

// The folder's name ("runs/a/" -> "a"; "." or "runs/a/.." by the folder it names: plot run from
// inside a run folder); the path as given when two runs share a name.
static void name_runs(Run *runs, const char *const *dirs, int n) {
    for (int i = 0; i < n; i++) {
        char buf[PATH_MAX + 1], real[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", dirs[i]);
        size_t len = strlen(buf);
        while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
        const char *slash = strrchr(buf, '/'), *base = slash && slash[1] ? slash + 1 : buf;
        if ((!strcmp(base, ".") || !strcmp(base, "..")) && realpath(dirs[i], real) && strcmp(real, "/"))
            base = strrchr(real, '/') + 1;  // realpath's answer is absolute: it has a '/'
        snprintf(runs[i].name, sizeof runs[i].name, "%s", base);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (!strcmp(runs[i].name, runs[j].name)) {
                for (int k = 0; k < n; k++) snprintf(runs[k].name, sizeof runs[k].name, "%s", dirs[k]);
                return;
            }
}

// ----------------------------------------------------------------------------
// the panels

typedef struct {
    const char *name, *title;  // for axes_describe; the panel's title
    int key, raw_key;          // the solid curve's key; a light curve's under it (or -1)
    int log_if_wide;           // a log y axis when the values span more than a factor of 20
} Panel;

static const Panel PANELS[4] = {
    {"loss", "loss: smoothed (light: each step)", K_SMOOTH, K_LOSS, 1},
    {"lr", "learning rate", K_LR, -1, 0},
    {"grad_norm", "gradient norm", K_GRAD, -1, 1},
    {"data_wait", "data wait (ms)", K_WAIT, -1, 0},
};

// One run's values of a key as a column, beside its steps.
static void column(const Run *r, int key, double *x, double *y) {
    for (int i = 0; i < r->n; i++) x[i] = r->rows[i].v[K_STEP], y[i] = r->rows[i].v[key];
}

// The panel in box (x0, y0, x1, y1, and whether it is on the bottom row, where "step" is written).
static void draw_panel(Canvas *c, const Panel *p, const Run *runs, int n, const int box[5], int scale,
                       const FigureOptions *o, double *x, double *y) {
    Range xr = {0}, yr = {0}, pos = {0};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < runs[i].n; j++) {
            const double *v = runs[i].rows[j].v;
            range_add(&xr, v[K_STEP], 0);
            for (int pass = 0; pass < 2; pass++) {
                int key = pass ? p->raw_key : p->key;
                if (key < 0) continue;
                range_add(&yr, v[key], 0);
                range_add(&pos, v[key], 1);
            }
        }
    int ylog = p->log_if_wide && pos.n && pos.hi > 20 * pos.lo;
    Axes a = {0};
    axes_range(&a, xr, ylog ? pos : yr, ylog);
    axes_place(&a, box[0], box[1], box[2], box[3], scale, box[4]);
    axes_draw(c, &a, p->title, box[4] ? "step" : NULL);
    if (p->raw_key >= 0)
        for (int i = 0; i < n; i++) {
            column(&runs[i], p->raw_key, x, y);
            axes_plot(c, &a, x, y, runs[i].n, rgb_light(plot_colour(i), 0.35), 1, 0);
        }
    for (int i = 0; i < n; i++) {
        column(&runs[i], p->key, x, y);
        axes_plot(c, &a, x, y, runs[i].n, plot_colour(i), 2, 0);
    }
    if (!yr.n) {  // an older metrics.jsonl without this key, or nothing finite in it
        const char *none = "no data";
        canvas_text(c, (a.x0 + a.x1 - text_width(none, scale)) / 2, (a.y0 + a.y1 - text_height(scale)) / 2, none,
                    RGB_FRAME, scale);
    }
    if (o->verbose) axes_describe(&a, p->name, stdout);
}

int figure_runs(Canvas *c, const char *const *dirs, int n, const FigureOptions *o, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (n < 1 || n > FIGURE_MAX_RUNS) return fc_errf(err, errlen, "give 1 to %d runs (one colour each)", FIGURE_MAX_RUNS);
    Run *runs = fc_calloc((size_t)n, sizeof *runs);
    int rc = 0, most = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = read_run(&runs[i], dirs[i], err, errlen);
        if (!rc && runs[i].n > most) most = runs[i].n;
    }
    if (!rc) rc = canvas_init(c, o->width, o->height, err, errlen);
    if (!rc) {
        name_runs(runs, dirs, n);
        char title[1024];
        LegendItem items[FIGURE_MAX_RUNS];
        int len = snprintf(title, sizeof title, "framechain training: ");
        for (int i = 0; i < n; i++) {
            items[i] = (LegendItem){runs[i].name, plot_colour(i)};
            len += snprintf(title + len, sizeof title - (size_t)len, "%s%s", i ? ", " : "", runs[i].name);
            if (len >= (int)sizeof title) len = (int)sizeof title - 1;
        }
        int s = figure_scale(c->w, c->h), m = figure_margin(s);
        int top = figure_header(c, title, items, n, s);
        int midx = c->w / 2, midy = top + (c->h - top) / 2;
        int boxes[4][5] = {{m, top, midx - m, midy - m, 0},
                           {midx + m, top, c->w - 1 - m, midy - m, 0},
                           {m, midy, midx - m, c->h - 1 - m, 1},
                           {midx + m, midy, c->w - 1 - m, c->h - 1 - m, 1}};
        double *x = fc_malloc((size_t)most * sizeof *x), *y = fc_malloc((size_t)most * sizeof *y);
        for (int p = 0; p < 4; p++) draw_panel(c, &PANELS[p], runs, n, boxes[p], s, o, x, y);
        free(x), free(y);
        for (int i = 0; i < n; i++) {
            const Run *r = &runs[i];
            printf("plot: %s: %d steps, %.0f to %.0f", FC_ESCAPED(r->name), r->n, r->rows[0].v[K_STEP], r->rows[r->n - 1].v[K_STEP]);
            for (int k = 1; k < NKEYS; k++)
                if (r->skipped[k]) printf("; %d %s values missing or not finite, left out", r->skipped[k], KEYS[k]);
            printf("\n");
        }
    }
    for (int i = 0; i < n; i++) free(runs[i].rows);
    free(runs);
    if (rc) canvas_free(c);
    return rc;
}
