// cmd_eval.c: `framechain eval`: the chain scored on held-out clips (chain/eval.h).
#include <stdio.h>

#include "chain/eval.h"
#include "cli.h"
#include "commands.h"
#include "sample_opts.h"

static const char *HELP_EVAL =
    "usage: framechain eval --starter RUN --extrapolate RUN --interpolate RUN --data DIR [--clips K]\n"
    "                       [--frames N] [--long M] [--noise-aug L1,L2,...] [--steps S] [--seed K]\n"
    "                       [--tsv FILE [--overwrite]]\n"
    "                       [--given K] [--guidance W] [--temperature T] [--vae FILE]\n"
    "                       [--sharpness-guard TOL] [--colour-guard TOL] [--colour-ramp F]\n"
    "\n"
    "On held-out clips (a dataset made by 'framechain prepare', at the models' frame size, from footage\n"
    "the models did not train on), start the chain from each clip's real first frame and compare every\n"
    "frame it makes with the real one: PSNR and SSIM (8-bit RGB; SSIM with the 11x11 Gaussian window of\n"
    "Wang et al. 2004), beside the baseline of holding frame 0. Then drift: one long chain from the first\n"
    "clip whose first frame is not flat (one colour, as when footage opens on black), each frame's mean,\n"
    "contrast (standard deviation) and sharpness (mean absolute Laplacian of the luminance) as ratios to\n"
    "frame 0's (nan where frame 0 has under a quarter of an 8-bit step of it), beside the same for that\n"
    "real clip. Each noise-augmentation level is run on its own with\n"
    "the same sampling noise. The spread behind the means follows: each clip's PSNR over the next 40\n"
    "frames (from 7 given; else all it made), chain minus baseline, as a mean with its standard error,\n"
    "the smallest, the largest, and the clips where the chain is over the baseline. Progress goes to\n"
    "stderr, the tables to stdout.\n"
    "\n"
    "  --data DIR         the held-out dataset\n"
    "  --clips K          its first K clips (default 8)\n"
    "  --frames N         frames per clip, at least 7 (default and most: the dataset's clip length)\n"
    "  --long M           frames of the drift run, more than --given (default 181; 0: no drift run)\n"
    "  --noise-aug LIST   the levels to compare, comma-separated, each 0 to 0.95, at most 18 (default 0,0.1)\n"
    "  --steps S          Euler steps per window (default: each model's sample_steps, 20 unless its\n"
    "                     config says otherwise)\n"
    "  --seed K           seed of the sampling noise (default 1); each clip gets its own, made from K and\n"
    "                     its number; clip 1 gets K itself ('generate --seed K' from its first frame makes\n"
    "                     the frames scored here)\n"
    "  --given K          start from each clip's first K real frames: 1 (default), or the starter's window\n"
    "                     (7 frames with the shipped plans; the starter is skipped), for motion that one\n"
    "                     frame cannot determine; the baseline then holds frame K-1\n"
    "  --guidance W       history guidance, as for generate (default 1: off)\n"
    "  --temperature T    the generated frames start from noise of standard deviation T (default: each\n"
    "                     model's sample_temperature, 1 unless its config says otherwise)\n"
    "  --sharpness-guard TOL, --colour-guard TOL, --colour-ramp F  the drift guards, as for generate\n"
    "                     (the same defaults)\n"
    "  --tsv FILE         also write every per-frame number to FILE (through a temporary file beside it;\n"
    "                     an existing FILE is refused unless --overwrite is given, and a file eval reads\n"
    "                     always: the dataset's, a run's checkpoint, --vae): the settings first, a\n"
    "                     '# key: value' line each (the models and their steps, --vae, the data, --clips,\n"
    "                     --frames, --given, --long, --noise-aug, --steps, --temperature, --guidance, the\n"
    "                     guards, --seed, the backend, framechain's version and commit), then one header,\n"
    "                     'quality' rows (clip means per frame), 'drift' rows and 'clip' rows (each clip's\n"
    "                     mean PSNR over the horizon above, chain and baseline; frame: the clip's number);\n"
    "                     nan where there is no number\n"
    "  --vae FILE         models trained on latents: the autoencoder they were trained with (checked by its\n"
    "                     SHA-256). DIR holds frames (prepared without --vae at the autoencoder's frame\n"
    "                     size); the given frames are encoded, every frame made is decoded and scored in\n"
    "                     pixels, and a line gives the autoencoder's own round trip of the same real frames:\n"
    "                     the best a chain in its latents can score\n"
    "\n"
    "Each run folder gives the EMA weights of its newest usable checkpoint, as for generate.\n";

int cmd_eval(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--starter", 1}, {"--extrapolate", 1}, {"--interpolate", 1}, {"--data", 1}, {"--clips", 1},
                  {"--frames", 1}, {"--long", 1}, {"--noise-aug", 1}, {"--steps", 1}, {"--seed", 1}, {"--tsv", 1},
                  {"--given", 1}, {"--guidance", 1}, {"--temperature", 1}, {"--vae", 1}, {"--sharpness-guard", 1},
                  {"--colour-guard", 1}, {"--colour-ramp", 1}, {"--overwrite", 0}, {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_EVAL, stdout), 0;
    EvalOptions eo = {.clips = EVAL_DEFAULT_CLIPS, .long_frames = EVAL_DEFAULT_LONG, .given = 1};
    const char *roles[3] = {"--starter", "--extrapolate", "--interpolate"};
    for (int r = 0; r < 3; r++) eo.runs[r] = required(opts, roles[r]);
    eo.data = required(opts, "--data");
    if (opt(opts, "--clips")->count) eo.clips = (int)parse_positive("--clips", opt(opts, "--clips")->value, 1000000);
    if (opt(opts, "--frames")->count) {
        eo.frames = (int)parse_whole("--frames", opt(opts, "--frames")->value, 7, 1000000);  // the starter's window
    }
    if (opt(opts, "--long")->count) {
        eo.long_frames = (int)parse_whole("--long", opt(opts, "--long")->value, 0, 1000000);
        if (eo.long_frames && eo.long_frames < 7) usage_error("--long %d: at least 7 frames, or 0", eo.long_frames);
    }
    char err[512];
    const char *levels = opt(opts, "--noise-aug")->count ? opt(opts, "--noise-aug")->value : EVAL_DEFAULT_LEVELS;
    eo.n_levels = eval_parse_levels(levels, 0.95, eo.levels, EVAL_MAX_LEVELS, err, sizeof err);
    if (eo.n_levels < 0) usage_error("%s", err);
    eo.sample = parse_sample_options(opts);
    if (opt(opts, "--given")->count) eo.given = (int)parse_positive("--given", opt(opts, "--given")->value, 1000000);
    if (eo.frames && eo.given >= eo.frames)
        usage_error("--frames %d: not more than --given %d: the chain would make no frame to score", eo.frames,
                    eo.given);
    if (eo.long_frames && eo.given >= eo.long_frames)
        usage_error("--long %d%s: the drift run would make none of its frames from --given %d (give --long more than %d, "
                    "or 0 for no drift run)", eo.long_frames, opt(opts, "--long")->count ? "" : " (the default)",
                    eo.given, eo.given);
    if (opt(opts, "--tsv")->count) eo.tsv = opt(opts, "--tsv")->value;
    eo.overwrite = opt(opts, "--overwrite")->count > 0;
    if (eo.overwrite && !eo.tsv) usage_error("--overwrite: it goes with --tsv FILE (eval writes no other file)");
    if (opt(opts, "--vae")->count) eo.vae = opt(opts, "--vae")->value;
    return eval_run(&eo, be);
}
