// cmd_score.c: `framechain score`: each clip of a dataset scored by a run's loss on it (chain/score.h),
// and optionally the worst of them written as an exclude list (dataset/exclude.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/paths.h"
#include "chain/score.h"
#include "dataset/exclude.h"
#include "formats/safetensors.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_SCORE =
    "usage: framechain score --run RUN --data DIR --out FILE.tsv [--reference RUN2] [--levels K]\n"
    "                        [--top F --exclude-out FILE] [--batch B] [--overwrite]\n"
    "\n"
    "Score every clip of a dataset by RUN's training loss on it (the EMA weights of its newest usable\n"
    "checkpoint, as generate loads them), at fixed draws so that scores compare and repeat: the clip's\n"
    "first window (no flip, crop or speed-up), K noise levels t (the (k + 0.5) / K quantiles of the\n"
    "logit-normal RUN trains with), the same noise for every clip, context frames clean. The loss is\n"
    "the mean over the levels. With --reference, the score is RUN's loss minus RUN2's (the reducible\n"
    "loss); without, the loss. Noise and scene cuts score high. From the frames alone: motion (the\n"
    "mean change from one frame to the next, 8-bit values) and order (that change over the change in\n"
    "4 frames: footage about 0.3-0.4, frames out of order or noise about 1); a clip that does not move\n"
    "(motion under 0.1) is noted 'frozen', one whose frames change as much in 1 as in 4 (order above\n"
    "0.6, motion at least 1) 'unordered'. Noted clips come first. Clips of frames only: a run on\n"
    "latents (prepare --vae) cannot be scored; score one trained on the same footage without --vae.\n"
    "\n"
    "  --out FILE.tsv     one line a clip, noted clips first, then by score: shard, clip (in the shard),\n"
    "                     dataset clip, source, first frame, loss[, ref_loss, score], motion, order, note;\n"
    "                     damaged clips last, noted, with no numbers. Written through a temporary file,\n"
    "                     then renamed\n"
    "  --reference RUN2   a second run (e.g. trained on clean data) whose loss is subtracted: the same\n"
    "                     plan and targets as RUN (its loss of the same windows)\n"
    "  --levels K         noise levels (default 4, at most 64)\n"
    "  --top F            with --exclude-out: the fraction F (0 < F < 1) of the scored clips with the\n"
    "                     highest scores (rounded up; refused where that is every one) ...\n"
    "  --exclude-out FILE ... written as an exclude list: 'shard-NNNNN.safetensors K' a line, what\n"
    "                     'train --set exclude=FILE' reads\n"
    "  --batch B          windows a forward pass (default 16; at most the dataset's clips)\n"
    "  --overwrite        replace an existing --out or --exclude-out (refused otherwise; never a file score\n"
    "                     reads: the dataset's own files, the runs' checkpoints and metrics.jsonl)\n";

// The clips --top F takes of n: the fraction, rounded up.
static int top_clips(double top, int n) { return (int)ceil(top * n - 1e-9); }

int cmd_score(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--run", 1}, {"--data", 1}, {"--out", 1}, {"--reference", 1}, {"--levels", 1}, {"--top", 1},
                  {"--exclude-out", 1}, {"--batch", 1}, {"--overwrite", 0}, {NULL}};
    fc_memory_hint("lower --batch");
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_SCORE, stdout), 0;
    ScoreOptions so = {.run = required(opts, "--run"), .levels = SCORE_DEFAULT_LEVELS, .batch = SCORE_DEFAULT_BATCH};
    const char *data = required(opts, "--data"), *out = required(opts, "--out");
    if (opt(opts, "--reference")->count) so.reference = opt(opts, "--reference")->value;
    if (opt(opts, "--levels")->count)
        so.levels = (int)parse_positive("--levels", opt(opts, "--levels")->value, SCORE_MAX_LEVELS);
    if (opt(opts, "--batch")->count) so.batch = (int)parse_positive("--batch", opt(opts, "--batch")->value, 4096);
    int has_top = opt(opts, "--top")->count > 0, has_ex = opt(opts, "--exclude-out")->count > 0;
    if (has_top != has_ex) usage_error("--top and --exclude-out go together (the fraction, and where its list goes)");
    double top = has_top ? parse_fraction("--top", opt(opts, "--top")->value) : 0;
    const char *ex = has_ex ? opt(opts, "--exclude-out")->value : NULL;
    int overwrite = opt(opts, "--overwrite")->count > 0;
    // SIGINT, SIGTERM or SIGHUP stop the scoring before its next batch, nothing written (caught from the
    // start: a script's background job starts with SIGINT ignored)
    fc_catch_stop_signals();
    fc_test_hold("START_DELAY_MS", "the start");
    char err[2048];
    // both outputs checked before any scoring (a bad path would cost the whole run, or leave one file);
    // the list's stale temporary names go even where --out is refused (a cut between the two renames)
    if (ex) fc_remove_stale_temps(ex);
    if (fc_check_output_file("--out", out, overwrite, err, sizeof err) ||
        (ex && fc_check_output_file("--exclude-out", ex, overwrite, err, sizeof err)))
        fc_die("%s", err);  // a file that is there, or a folder that is not: 1, as generate says it
    if (ex && fc_same_file_name(out, ex)) usage_error("--out and --exclude-out name one file: %s", out);
    // neither may replace what score reads, --overwrite or not
    static const char *const run_flags[2] = {"--run", "--reference"};
    const char *runs[2] = {so.run, so.reference};
    FcInputs in = {.data = data, .runs = runs, .run_flag = run_flags, .n_runs = 2};
    if (fc_check_not_an_input("--out", out, &in, err, sizeof err) ||
        (ex && fc_check_not_an_input("--exclude-out", ex, &in, err, sizeof err)))
        fc_die("%s", err);

    Dataset *d = dataset_open(data, err, sizeof err);
    if (!d) fc_die("%s", err);
    if (dataset_latent(d))
        fc_die("%s holds latents: score reads clips of frames, and a run on latents cannot be scored; score a run "
               "trained on the same footage prepared without --vae", data);
    int n = dataset_clips(d), scored = 0;
    // a list of every clip is one train refuses: said now when the fraction alone makes it so
    if (ex && top_clips(top, n) >= n)
        fc_die("--top %g: the top %d of the %d clips of %s are all of them, and an exclude list of every clip "
               "leaves nothing to train on: give a smaller fraction", top, top_clips(top, n), n, data);
    ClipScore *s;
    if (score_clips(&so, d, be, &s, err, sizeof err)) fc_die("%s", err);
    int noted[3] = {0};
    for (int i = 0; i < n; i++) scored += !s[i].damaged, noted[s[i].note]++;
    // damaged clips are never drawn either: a list of every scored clip leaves train nothing. Where the
    // list is refused the scores are still written (they say why); where it is made, both files are
    // written and synced before either replaces what was there (a full disk leaves both as they were)
    const char *refused = NULL;
    char why[1024];
    if (ex && !scored)
        refused = why, snprintf(why, sizeof why, "%s: every one of its %d clips is damaged, none scored: %s not written "
                                "(re-prepare the dataset)", data, n, ex);
    else if (ex && top_clips(top, scored) >= scored)
        refused = why, snprintf(why, sizeof why, "--top %g: the top %d of the %d scored clips of %s are every clip not "
                                "damaged (%d damaged), and train would have nothing to draw: %s not written (the scores "
                                "are in %s)", top, scored, scored, data, n - scored, ex, out);
    size_t len[2];
    char *text[2] = {score_tsv_text(d, s, n, so.reference != NULL, &len[0], err, sizeof err), NULL};
    if (!text[0]) fc_die("%s", err);
    int k = ex && !refused ? top_clips(top, scored) : 0;
    if (ex && !refused) {
        int *clips = malloc(sizeof(int) * (k ? k : 1));
        if (!clips) FC_OUT_OF_MEMORY("the exclude list's clips");
        for (int i = 0; i < k; i++) clips[i] = s[i].clip;  // sorted: the scored clips come first
        text[1] = exclude_list_text(d, clips, k, &len[1], err, sizeof err);
        free(clips);
        if (!text[1]) fc_die("%s", err);
        const char *paths[2] = {out, ex};
        const void *bytes[2] = {text[0], text[1]};
        if (st_write_outputs(paths, bytes, len, overwrite, err, sizeof err)) fc_die("%s", err);
    } else if (st_write_output(out, text[0], len[0], overwrite, err, sizeof err)) {
        fc_die("%s", err);
    }
    free(text[0]), free(text[1]);
    fc_stdout_is_report();  // the scores are in --out
    // the dataset's folder escaped as prepare prints a name: a newline in it would split the line
    char *shown_data = fc_escaped_name(fc_malloc(4 * strlen(data) + 1), 4 * strlen(data) + 1, data);
    printf("scored %d clips of %s (%d damaged, not scored) under %s%s%s: %s\n", scored, shown_data, n - scored,
           FC_ESCAPED(so.run), so.reference ? " minus " : "", so.reference ? FC_ESCAPED(so.reference) : "", FC_ESCAPED(out));
    free(shown_data);
    if (noted[SCORE_NOTE_FROZEN] || noted[SCORE_NOTE_UNORDERED])
        printf("noted, listed first: %d frozen, %d unordered\n", noted[SCORE_NOTE_FROZEN], noted[SCORE_NOTE_UNORDERED]);
    if (refused) fc_die("%s", refused);
    if (ex) printf("excluded the top %d of %d scored clips (--top %g): %s\n", k, scored, top, FC_ESCAPED(ex));
    free(s);
    dataset_close(d);
    return 0;
}
