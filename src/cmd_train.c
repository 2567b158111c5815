// cmd_train.c: `framechain train`: one model of the chain from a config (train/train.h).
#include <limits.h>
#include <stdio.h>

#include "base/config.h"
#include "model/memplan.h"
#include "train/train.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_TRAIN =
    "usage: framechain train --config FILE --run DIR [--data DIR] [--steps N] [--set key=value ...]\n"
    "                        [--vram-budget GIB] [--sync-checkpoints]\n"
    "\n"
    "Train one model of the chain. The config names the network, the frame plan (the role) and the\n"
    "optimisation; --set overrides any key. Checkpoints (weights, EMA and the 8-bit AdamW state) are\n"
    "written to RUN crash-safely; running the same command again resumes from the newest good one.\n"
    "--data DIR is a dataset made by 'framechain prepare'; without it, the built-in moving-shapes set.\n"
    "SIGINT or SIGTERM writes a checkpoint and exits with 128 + the signal number.\n"
    "A checkpoint is copied into page-locked host memory and written by a background thread while\n"
    "training goes on; --sync-checkpoints waits for each write instead (the same files; the log's\n"
    "'blocked' figure compares the two).\n"
    "The memory plan is printed before the first step; on a GPU a plan above --vram-budget (default\n"
    "24 GiB) is refused, and the measured peak is printed at the end.\n"
    "\n"
    "config keys:\n";

int cmd_train(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--config", 1}, {"--data", 1}, {"--run", 1}, {"--steps", 1}, {"--set", 1, 1}, {"--vram-budget", 1},
                  {"--sync-checkpoints", 0}, {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) {
        fputs(HELP_TRAIN, stdout);
        print_config_keys();
        return 0;
    }
    Config c = load_config(opts);
    const char *run = required(opts, "--run");
    const char *data = opt(opts, "--data")->count ? opt(opts, "--data")->value : NULL;
    c.dataset = data ? DATA_SHARDS : DATA_SHAPES;  // so a checkpoint made on other data is refused
    if (opt(opts, "--steps")->count) {
        c.steps = (int)parse_positive("--steps", opt(opts, "--steps")->value, INT_MAX);
        if (c.warmup_steps > c.steps) c.warmup_steps = c.steps;
    }
    double budget = opt(opts, "--vram-budget")->count
                        ? parse_number("--vram-budget", opt(opts, "--vram-budget")->value, 0.01, 1e6)
                        : DEFAULT_VRAM_BUDGET_GIB;
    if (c.keep_blocks == KEEP_BLOCKS_AUTO)
        printf("keep_blocks = auto: %d of %d blocks keep their activations on %s\n",
               memory_plan_resolve(&c, c.batch_size, plan_device(be->name, be->precision), budget * 1073741824.0),
               c.depth, be->name);
    return train_run(&c, run, data, be, budget * 1073741824.0, opt(opts, "--sync-checkpoints")->count > 0);
}
