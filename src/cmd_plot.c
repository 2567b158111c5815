// cmd_plot.c: `framechain plot`: training curves of runs, or an eval TSV per frame, as a PNG
// (report/figures.h), without Python.
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "report/figures.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_PLOT =
    "usage: framechain plot RUN [RUN ...] --out FILE.png [--width W] [--height H] [--overwrite] [--verbose]\n"
    "       framechain plot --eval FILE.tsv --out FILE.png [--width W] [--height H] [--overwrite] [--verbose]\n"
    "\n"
    "Draw a PNG, no Python needed. With runs: each RUN/metrics.jsonl (train's line per step) against the\n"
    "step in four panels: the loss (smoothed, solid; each step's, light), the learning rate, the gradient\n"
    "norm and the time a step waited for data. The runs are overlaid, one colour each (at most 9), named\n"
    "in the legend by their folders. The loss and the gradient norm get a log y axis when their values\n"
    "span more than a factor of 20 (the panel's title says so). A value that is not finite (a NaN loss)\n"
    "is left out of its curve; a line that does not parse is an error, but for the unfinished last line\n"
    "of a run still training (no newline yet), left out with a warning.\n"
    "With --eval: the TSV of 'framechain eval --tsv': the PSNR of each frame of the chain, one curve per\n"
    "noise-augmentation level (past the 9 colours they come round again, dashed; at most 18 levels),\n"
    "beside the baselines the TSV has (holding frame 0; copying the last given frame, when eval was given\n"
    "more than one); then SSIM and the motion per frame (the chain's beside the real clip's) the same way.\n"
    "\n"
    "  --out FILE.png   the image, written to a temporary file in the same folder and renamed; SIGINT,\n"
    "                   SIGTERM or SIGHUP stops plot with 128 + the signal: nothing is written before the\n"
    "                   image is, a write under way is finished (no temporary file is left)\n"
    "  --overwrite      replace FILE.png when it exists (otherwise refused)\n"
    "  --width W        its width in pixels (default 1200, 480 to 8000)\n"
    "  --height H       its height in pixels (default 900, 360 to 8000)\n"
    "  --verbose        also print each panel's plot area in pixels and its axis limits, one line each:\n"
    "                   'panel NAME: box X0 Y0 X1 Y1 x XMIN XMAX y YMIN YMAX linear|log' (X0 maps to XMIN,\n"
    "                   Y1, the bottom, to YMIN; a log axis maps log10 y linearly)\n";

// The options that take a value: what follows them is theirs, not a run.
static int takes_value(const Opt *opts, const char *a) {
    if (strncmp(a, "--", 2) || strchr(a, '=')) return 0;
    for (const Opt *p = opts; p->name; p++)
        if (!strcmp(p->name, a)) return p->takes_value;
    return 0;
}

int cmd_plot(int argc, char **argv, const Backend *be) {
    (void)be;
    Opt opts[] = {{"--out", 1}, {"--eval", 1}, {"--width", 1}, {"--height", 1}, {"--overwrite", 0}, {"--verbose", 0},
                  {NULL}};
    // The runs are the arguments that are neither options nor their values; the rest goes to parse_opts.
    const char *runs[CLI_MAX_VALUES];
    char *rest[CLI_MAX_VALUES * 2 + 8];
    int nruns = 0, nrest = 0;
    if (argc > (int)(sizeof rest / sizeof rest[0])) usage_error("too many arguments (%d)", argc);
    int options_end = 0;  // after "--" every argument is a run, even one that starts with '-'
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (i >= 2 && (options_end || a[0] != '-' || !a[1])) {
            if (nruns == CLI_MAX_VALUES) usage_error("more than %d runs", CLI_MAX_VALUES);
            if (strlen(a) > CLI_MAX_ARG) usage_error("a path of %zu characters: at most %d", strlen(a), CLI_MAX_ARG);
            runs[nruns++] = a;
            continue;
        }
        rest[nrest++] = argv[i];  // "--" too: parse_opts then refuses it as an option's value, as every command does
        if (i >= 2 && !strcmp(a, "--")) options_end = 1;
        // an option's value is the next argument unless that is an option (parse_opts says what is wrong)
        else if (i >= 2 && takes_value(opts, a) && i + 1 < argc && !cli_is_option(argv[i + 1]))
            rest[nrest++] = argv[++i];
    }
    if (parse_opts(nrest, rest, 2, opts, NULL)) return fputs(HELP_PLOT, stdout), 0;

    const char *out = required(opts, "--out"), *eval = opt(opts, "--eval")->count ? opt(opts, "--eval")->value : NULL;
    const char *dot = strrchr(out, '.');
    if (!dot || strcasecmp(dot, ".png")) usage_error("--out %s: the plot is a PNG: give a name ending in .png", out);
    if (eval && nruns) usage_error("give runs or --eval FILE.tsv, not both");
    if (!eval && !nruns) usage_error("nothing to plot: give one or more run folders, or --eval FILE.tsv");
    if (nruns > FIGURE_MAX_RUNS) usage_error("%d runs: at most %d in one plot (one colour each)", nruns, FIGURE_MAX_RUNS);
    FigureOptions fo = {.width = 1200, .height = 900, .verbose = opt(opts, "--verbose")->count > 0};
    if (opt(opts, "--width")->count) fo.width = (int)parse_whole("--width", opt(opts, "--width")->value, 480, 8000);
    if (opt(opts, "--height")->count) fo.height = (int)parse_whole("--height", opt(opts, "--height")->value, 360, 8000);
    Canvas c;
    char err[8192];
    int overwrite = opt(opts, "--overwrite")->count > 0;
    if (fc_check_output_file("--out", out, overwrite, err, sizeof err)) fc_die("%s", err);
    FcInputs read = {.file = eval, .file_flag = "--eval"};  // the table it reads, --overwrite or not
    if (eval && fc_check_not_an_input("--out", out, &read, err, sizeof err)) fc_die("%s", err);
    // SIGINT, SIGTERM or SIGHUP: before the PNG is written, nothing is; while it is, it is finished
    // (killed then, its temporary file would be left beside --out); a second one ends plot at once
    fc_catch_stop_signals();
    int rc = eval ? figure_eval(&c, eval, &fo, err, sizeof err) : figure_runs(&c, runs, nruns, &fo, err, sizeof err);
    if (!rc) {
        rc = fc_stop_signal() ? fc_errf(err, sizeof err, "stopped by %s: %s not written",
                                        fc_signal_name(fc_stop_signal()), out)
                              : canvas_save_png(&c, out, overwrite, err, sizeof err);
        canvas_free(&c);
    }
    if (rc) {
        fprintf(stderr, "framechain: %s\n", err);
    } else {
        fc_stdout_is_report();
        fc_test_hold("FINISHED_DELAY_MS", "the output in place");
        printf("plot: wrote %s (%d x %d)\n", FC_ESCAPED(out), fo.width, fo.height);
    }
    fflush(stdout);
    fc_release_stop_signals();  // after the line: a stop between the rename and it ended plot without a word
    // a stop that came while the PNG was written: it is whole, the status still says the stop
    return fc_stop_signal() ? 128 + fc_stop_signal() : rc ? 1 : 0;
}
