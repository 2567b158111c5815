// figures.h: the two figures of `framechain plot`: training curves read from runs' metrics.jsonl
// (plot_runs.c), and the chain's quality per frame read from an eval TSV (plot_eval.c).
#ifndef FRAMECHAIN_REPORT_FIGURES_H
#define FRAMECHAIN_REPORT_FIGURES_H

#include <stddef.h>

#include "report/plot.h"

#define FIGURE_MAX_RUNS PLOT_COLOURS  // one colour each

typedef struct {
    int width, height;  // pixels
    int verbose;        // each panel's pixel box and axis limits on stdout (axes_describe)
} FigureOptions;

// Loss (each step, light, and smoothed), learning rate, gradient norm and data wait against the step,
// the runs overlaid, one colour each, named by their folders. A missing or empty metrics.jsonl, or a
// line that does not parse, is an error naming the file and the line; a value that is not finite is
// left out of its curve. Draws into c (initialised here; canvas_free it). 0, or -1 with err.
int figure_runs(Canvas *c, const char *const *runs, int n, const FigureOptions *o, char *err, size_t errlen);

// PSNR per frame of the chain (one curve per noise-augmentation level) beside the baselines the TSV
// has (holding frame 0, copying the last given frame); SSIM and motion the same way when the TSV has
// them. Columns are found by the header's names. 0, or -1 with err.
int figure_eval(Canvas *c, const char *tsv, const FigureOptions *o, char *err, size_t errlen);

#endif
