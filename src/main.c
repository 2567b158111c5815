// main.c: the command line. framechain [--threads N] [--device D] <command> [options]
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "backend/registry.h"
#include "base/common.h"
#include "base/config.h"
#include "chain/eval.h"
#include "chain/generate.h"
#include "model/memplan.h"
#include "model/model.h"
#include "dataset/prepare.h"
#include "formats/safetensors.h"
#include <zlib.h>
#include "train/train.h"

// ----------------------------------------------------------------------------
// help texts

static const char *USAGE =
    "framechain " FC_VERSION ": train video diffusion models on one GPU and chain them into long videos\n"
    "\n"
    "usage: framechain [--threads N] [--device cpu|cuda|cuda-fp32|auto] <command> [options]\n"
    "\n"
    "commands:\n"
    "  prepare   turn videos or folders of frames into training clips (shards)\n"
    "  train     train one model (starter, extrapolate or interpolate) from a config; resumes by itself\n"
    "  generate  chain the three models into a long video from one first frame\n"
    "  eval      score the chain on held-out clips: PSNR, SSIM against the real frames; drift\n"
    "  inspect   show a config's network (parameters, memory) or a checkpoint's contents\n"
    "\n"
    "global options:\n"
    "  --threads N   CPU threads for OpenMP and OpenBLAS (default: all cores)\n"
    "  --device D    cpu, cuda (bf16 GEMMs, fp32 master weights), cuda-fp32 (fp32 throughout) or auto\n"
    "                (default auto: cuda where a GPU is found)\n"
    "  --version     version and the backends this build has\n"
    "  -h, --help    this text; 'framechain <command> --help' for a command\n";

static const char *HELP_PREPARE =
    "usage: framechain prepare --input PATH [--input PATH ...] --out DIR --size N --clip-frames N\n"
    "                          [--fps F] [--overlap K] [--shard-mb M]\n"
    "\n"
    "Decode every input (a video file in any format FFmpeg reads, a folder of videos, or a folder of\n"
    "PNG/JPEG frames taken as one clip), scale (area filter) and centre-crop the frames to N x N RGB,\n"
    "optionally resample to F frames per second, cut them into clips of --clip-frames frames (K frames\n"
    "shared by consecutive clips with --overlap) and write them to DIR as shards of at most M MiB\n"
    "(default 256) with a CRC per clip, zlib-compressed where that pays, plus manifest.tsv (each clip's\n"
    "source and first frame) and dataset.json, written last. An unreadable, damaged or too short input\n"
    "is reported in one line and skipped; the exit status is 1 only when no clip came out.\n";

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

static const char *HELP_GENERATE =
    "usage: framechain generate --starter RUN --extrapolate RUN --interpolate RUN --first-frame IMG\n"
    "                           --frames N --out PATH [--steps S] [--seed K] [--noise-aug L]\n"
    "\n"
    "From one first frame, the starter makes the first window, the extrapolate model jumps ahead in\n"
    "keyframes at a stride of 4 and the interpolate model fills the gaps, until N frames exist.\n"
    "\n"
    "  --first-frame IMG  a PNG or JPEG (centre-cropped and resized to the models' frame size; at least\n"
    "                     that size on its shorter side), or a video, whose first frame is used;\n"
    "                     shapes:K is the first frame of the built-in moving-shapes clip K\n"
    "  --out PATH         .mp4/.mkv/.avi (H.264 where the build has it, else MPEG-4), .gif, or any other\n"
    "                     name: a new folder of numbered PNGs; written under a temporary name first\n"
    "  --frames N         exactly N frames (at least 7)\n"
    "  --steps S          Euler steps per window (default 20)\n"
    "  --noise-aug L      the noise level t of every conditioning frame but the first (default 0.1;\n"
    "                     0 trusts generated frames fully; SNR = ((1-t)/t)^2)\n"
    "  --seed K           seed of the sampling noise (default 1)\n"
    "  --fps F            frame rate of the video written (default 12)\n"
    "  --quiet            no progress line\n"
    "\n"
    "Each run folder gives the EMA weights of its newest usable checkpoint; the runs must have been\n"
    "trained with role = starter, extrapolate and interpolate, on frames of one size.\n";

static const char *HELP_EVAL =
    "usage: framechain eval --starter RUN --extrapolate RUN --interpolate RUN --data DIR [--clips K]\n"
    "                       [--frames N] [--long M] [--noise-aug L1,L2,...] [--steps S] [--seed K] [--tsv FILE]\n"
    "\n"
    "On held-out clips (a dataset made by 'framechain prepare', at the models' frame size, from footage\n"
    "the models did not train on), start the chain from each clip's real first frame and compare every\n"
    "frame it makes with the real one: PSNR and SSIM (8-bit RGB; SSIM with the 11x11 Gaussian window of\n"
    "Wang et al. 2004), beside the baseline of holding frame 0. Then drift: one long chain from the first\n"
    "clip whose first frame is not flat (one colour, as when footage opens on black), each frame's mean,\n"
    "contrast (standard deviation) and sharpness (mean absolute Laplacian of the luminance) as ratios to\n"
    "frame 0's, beside the same for that real clip. Each noise-augmentation level is run on its own with\n"
    "the same sampling noise. Progress goes to stderr, the tables to stdout.\n"
    "\n"
    "  --data DIR         the held-out dataset\n"
    "  --clips K          its first K clips (default 8)\n"
    "  --frames N         frames per clip, at least 7 (default and most: the dataset's clip length)\n"
    "  --long M           frames of the drift run (default 181; 0: no drift run)\n"
    "  --noise-aug LIST   the levels to compare, comma-separated, each 0 to 0.95 (default 0,0.1)\n"
    "  --steps S          Euler steps per window (default 20)\n"
    "  --seed K           seed of the sampling noise (default 1); each clip gets its own, made from K and\n"
    "                     its number; clip 1 gets K itself ('generate --seed K' from its first frame makes\n"
    "                     the frames scored here)\n"
    "  --tsv FILE         also write every per-frame number to FILE (through FILE.tmp): one header, then\n"
    "                     'quality' rows (clip means per frame) and 'drift' rows; nan where there is no number\n"
    "\n"
    "Each run folder gives the EMA weights of its newest usable checkpoint, as for generate.\n";

static const char *HELP_INSPECT =
    "usage: framechain inspect --config FILE [--set key=value ...] [--params]\n"
    "       framechain inspect CHECKPOINT.safetensors\n"
    "\n"
    "With --config: the network the config describes, its parameter count and the memory one\n"
    "training step takes on the CPU backend; --params lists every tensor (name, shape).\n"
    "With a checkpoint: its step, config, every tensor (name, dtype, shape) and whether its CRC checks;\n"
    "the exit status is 1 when any CRC fails.\n";

// ----------------------------------------------------------------------------
// option parsing: every command declares its options; anything else is an error.

typedef struct {
    const char *name;  // "--config"
    int takes_value;
    int repeatable;
    const char *value;       // last value seen
    const char *values[64];  // every value, for repeatable options
    int count;
} Opt;

static const char *g_cmd = "framechain";
static const Backend *g_backend;  // chosen by --device

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
#include <stdarg.h>
static void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see %s --help)\n", g_cmd);
    va_end(ap);
    exit(2);
}

// Parse argv[i..] into opts; positional arguments go to *positional (at most one allowed when
// positional != NULL). Returns 1 when --help was asked for.
static int parse_opts(int argc, char **argv, int i, Opt *opts, const char **positional) {
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (a[0] != '-' || a[1] == 0) {
            if (!positional) usage_error("unexpected argument '%s'", a);
            if (*positional) usage_error("unexpected second argument '%s'", a);
            *positional = a;
            continue;
        }
        char name[64];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, a, len);
        name[len] = 0;
        Opt *o = NULL;
        for (Opt *p = opts; p && p->name; p++)
            if (!strcmp(p->name, name)) o = p;
        if (!o) usage_error("unknown option '%s'", name);
        const char *value = NULL;
        if (o->takes_value) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else usage_error("option %s needs a value", name);
        } else if (eq) {
            usage_error("option %s takes no value", name);
        }
        if (o->count && !o->repeatable) usage_error("option %s given twice", name);
        if (o->count >= 64) usage_error("option %s given more than 64 times", name);
        o->values[o->count++] = value;
        o->value = value ? value : "1";
    }
    return 0;
}

static Opt *opt(Opt *opts, const char *name) {
    for (Opt *p = opts; p->name; p++)
        if (!strcmp(p->name, name)) return p;
    fc_die("internal: option %s is not declared", name);
}

static const char *required(Opt *opts, const char *name) {
    Opt *o = opt(opts, name);
    if (!o->count) usage_error("missing %s", name);
    return o->value;
}

static long parse_whole(const char *flag, const char *text, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi)
        usage_error("%s %s: expected a whole number from %ld to %ld", flag, text, lo, hi);
    return v;
}

static long parse_positive(const char *flag, const char *text, long max) { return parse_whole(flag, text, 1, max); }

static double parse_number(const char *flag, const char *text, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= lo && v <= hi))
        usage_error("%s %s: expected a number from %g to %g", flag, text, lo, hi);
    return v;
}

static void print_config_keys(void) {
    Config c;
    config_defaults(&c);
    config_write(&c, stdout);
}

// Load --config and apply every --set, in order; dies with one clear line on any problem.
static Config load_config(Opt *opts) {
    Config c;
    config_defaults(&c);
    const char *path = required(opts, "--config");
    config_load(&c, path);
    Opt *set = opt(opts, "--set");
    for (int i = 0; i < set->count; i++) config_set(&c, set->values[i], "--set");
    config_validate(&c, path);
    return c;
}

// ----------------------------------------------------------------------------
// commands

static int cmd_prepare(int argc, char **argv) {
    Opt opts[] = {{"--input", 1, 1}, {"--out", 1}, {"--size", 1}, {"--clip-frames", 1}, {"--fps", 1},
                  {"--overlap", 1}, {"--shard-mb", 1}, {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_PREPARE, stdout), 0;
    PrepareOptions o = {0};
    required(opts, "--input");
    o.inputs = opt(opts, "--input")->values, o.n_inputs = opt(opts, "--input")->count;
    o.out = required(opts, "--out");
    o.size = (int)parse_positive("--size", required(opts, "--size"), 4096);
    o.clip_frames = (int)parse_positive("--clip-frames", required(opts, "--clip-frames"), 100000);
    if (opt(opts, "--fps")->count) o.fps = parse_number("--fps", opt(opts, "--fps")->value, 0.01, 1000);
    if (opt(opts, "--overlap")->count)
        o.overlap = (int)parse_whole("--overlap", opt(opts, "--overlap")->value, 0, o.clip_frames - 1);
    o.max_shard_bytes = (size_t)256 << 20;
    if (opt(opts, "--shard-mb")->count)
        o.max_shard_bytes = (size_t)parse_positive("--shard-mb", opt(opts, "--shard-mb")->value, 1 << 20) << 20;
    return prepare_run(&o);
}

static int cmd_train(int argc, char **argv) {
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
               memory_plan_resolve(&c, c.batch_size, plan_device(g_backend->name, g_backend->precision),
                                   budget * 1073741824.0),
               c.depth, g_backend->name);
    return train_run(&c, run, data, g_backend, budget * 1073741824.0, opt(opts, "--sync-checkpoints")->count > 0);
}

static int cmd_generate(int argc, char **argv) {
    Opt opts[] = {{"--starter", 1}, {"--extrapolate", 1}, {"--interpolate", 1}, {"--first-frame", 1},
                  {"--frames", 1}, {"--out", 1}, {"--steps", 1}, {"--seed", 1}, {"--noise-aug", 1}, {"--fps", 1},
                  {"--quiet", 0}, {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_GENERATE, stdout), 0;
    const char *req[] = {"--starter", "--extrapolate", "--interpolate", "--first-frame", "--out"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) required(opts, req[i]);
    long frames = parse_positive("--frames", required(opts, "--frames"), 1000000);
    if (frames < 7) usage_error("--frames %ld: the chain makes at least 7 frames", frames);
    SampleOptions so = {.steps = GENERATE_DEFAULT_STEPS, .seed = 1, .noise_aug = GENERATE_DEFAULT_NOISE_AUG};
    if (opt(opts, "--steps")->count) so.steps = (int)parse_positive("--steps", opt(opts, "--steps")->value, 100000);
    if (opt(opts, "--seed")->count) so.seed = (uint64_t)parse_number("--seed", opt(opts, "--seed")->value, 0, 9e15);
    if (opt(opts, "--noise-aug")->count)
        so.noise_aug = parse_number("--noise-aug", opt(opts, "--noise-aug")->value, 0, 0.95);
    double fps = opt(opts, "--fps")->count ? parse_number("--fps", opt(opts, "--fps")->value, 0.1, 1000) : 12;
    so.quiet = opt(opts, "--quiet")->count > 0;
    const char *runs[3] = {opt(opts, "--starter")->value, opt(opts, "--extrapolate")->value,
                           opt(opts, "--interpolate")->value};
    return generate_cli(runs, opt(opts, "--first-frame")->value, (int)frames, opt(opts, "--out")->value, fps, &so,
                        g_backend);
}

static int cmd_eval(int argc, char **argv) {
    Opt opts[] = {{"--starter", 1}, {"--extrapolate", 1}, {"--interpolate", 1}, {"--data", 1}, {"--clips", 1},
                  {"--frames", 1}, {"--long", 1}, {"--noise-aug", 1}, {"--steps", 1}, {"--seed", 1}, {"--tsv", 1},
                  {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_EVAL, stdout), 0;
    EvalOptions eo = {.clips = EVAL_DEFAULT_CLIPS, .long_frames = EVAL_DEFAULT_LONG, .steps = GENERATE_DEFAULT_STEPS,
                      .seed = 1};
    const char *roles[3] = {"--starter", "--extrapolate", "--interpolate"};
    for (int r = 0; r < 3; r++) eo.runs[r] = required(opts, roles[r]);
    eo.data = required(opts, "--data");
    if (opt(opts, "--clips")->count) eo.clips = (int)parse_positive("--clips", opt(opts, "--clips")->value, 1000000);
    if (opt(opts, "--frames")->count) {
        eo.frames = (int)parse_positive("--frames", opt(opts, "--frames")->value, 1000000);
        if (eo.frames < 7) usage_error("--frames %d: the chain makes at least 7 frames", eo.frames);
    }
    if (opt(opts, "--long")->count) {
        eo.long_frames = (int)parse_whole("--long", opt(opts, "--long")->value, 0, 1000000);
        if (eo.long_frames && eo.long_frames < 7) usage_error("--long %d: at least 7 frames, or 0", eo.long_frames);
    }
    char err[512];
    const char *levels = opt(opts, "--noise-aug")->count ? opt(opts, "--noise-aug")->value : EVAL_DEFAULT_LEVELS;
    eo.n_levels = eval_parse_levels(levels, 0.95, eo.levels, EVAL_MAX_LEVELS, err, sizeof err);
    if (eo.n_levels < 0) usage_error("%s", err);
    if (opt(opts, "--steps")->count) eo.steps = (int)parse_positive("--steps", opt(opts, "--steps")->value, 100000);
    if (opt(opts, "--seed")->count) eo.seed = (uint64_t)parse_number("--seed", opt(opts, "--seed")->value, 0, 9e15);
    if (opt(opts, "--tsv")->count) eo.tsv = opt(opts, "--tsv")->value;
    return eval_cli(&eo, g_backend);
}

// A checkpoint (or any safetensors file): its trainer state, its config, every tensor and its CRC.
static int inspect_file(const char *path) {
    StFile f;
    char err[1024];
    if (st_read(path, &f, err, sizeof err)) fc_die("%s", err);
    const char *keys[] = {"format", "format_version", "step", "seed", "data_cursor", "smooth_loss"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = st_meta(&f, keys[i]);
        if (!v) continue;
        if (!strcmp(keys[i], "smooth_loss"))
            printf("%-15s %.6f\n", keys[i], strtod(v, NULL));
        else
            printf("%-15s %s\n", keys[i], v);
    }
    const char *config = st_meta(&f, "config");
    if (config) printf("config:\n%s", config);
    int bad = 0, unchecked = 0;
    size_t bytes = 0;
    printf("tensors:\n");
    for (int i = 0; i < f.n; i++) {
        const StEntry *e = &f.entries[i];
        char key[256], shape[128] = "(";
        snprintf(key, sizeof key, "crc32.%s", e->name);
        const char *want = st_meta(&f, key);
        const char *status = "no CRC";
        if (want) {
            unsigned long got = crc32(0L, st_data(&f, e), (uInt)(e->end - e->begin));
            status = strtoul(want, NULL, 16) == got ? "CRC ok" : "CRC BAD";
            bad += status[4] == 'B';
        } else {
            unchecked++;
        }
        size_t used = 1;
        for (int d = 0; d < e->ndim && used < sizeof shape; d++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%ld", d ? ", " : "", e->shape[d]);
        if (used < sizeof shape - 1) strcat(shape, ")");
        printf("  %-48s %-4s %-16s %s\n", e->name, e->dtype, shape, status);
        bytes += e->end - e->begin;
    }
    printf("%d tensors, %zu bytes of data: %s\n", f.n, bytes,
           bad ? "SOME CRCs FAIL" : unchecked ? "no CRC for some tensors" : "every CRC checks");
    st_free(&f);
    return bad ? 1 : 0;
}

static int cmd_inspect(int argc, char **argv) {
    Opt opts[] = {{"--config", 1}, {"--set", 1, 1}, {"--params", 0}, {NULL}};
    const char *file = NULL;
    if (parse_opts(argc, argv, 2, opts, &file)) return fputs(HELP_INSPECT, stdout), 0;
    if (file && opt(opts, "--config")->count) usage_error("give either a checkpoint or --config, not both");
    if (file) return inspect_file(file);
    if (!opt(opts, "--config")->count) usage_error("missing a checkpoint or --config");
    Config c = load_config(opts);
    ModelCounts k = model_counts(&c, c.batch_size, sizeof(real));  // the layout alone: nothing is allocated
    config_write(&c, stdout);
    printf("\n");
    if (opt(opts, "--params")->count) {
        for (int i = 0; i < k.n_tensors; i++) {
            const ParamInfo *pi = &k.info[i];
            if (pi->ndim == 2)
                printf("%-40s (%d, %d)\n", pi->name, pi->shape[0], pi->shape[1]);
            else
                printf("%-40s (%d)\n", pi->name, pi->shape[0]);
        }
        printf("\n");
    }
    int n = c.frame_size / c.patch;
    printf("%-28s %zu in %d tensors\n", "parameters", k.params, k.n_tensors);
    printf("%-28s %d x %d slots x %d tokens = %d\n", "tokens per step", c.batch_size, c.slots, n * n,
           c.batch_size * c.slots * n * n);
    // The plans that matter: the CPU's, and the GPU's in bf16 against the default budget (each with
    // keep_blocks = auto resolved for it).
    Config on_cpu = c, on_gpu = c;
    double budget = DEFAULT_VRAM_BUDGET_GIB * 1073741824.0;
    memory_plan_resolve(&on_cpu, c.batch_size, PLAN_CPU, 0);
    if (c.keep_blocks == KEEP_BLOCKS_AUTO)
        printf("%-28s %d of %d blocks on --device cuda (as many as keep its plan %.0f GiB under the budget), "
               "none on the CPU\n", "keep_blocks = auto",
               memory_plan_resolve(&on_gpu, c.batch_size, PLAN_GPU_BF16, budget), c.depth,
               KEEP_BLOCKS_AUTO_RESERVE_GIB);
    MemPlan cpu = memory_plan(&on_cpu, c.batch_size, PLAN_CPU), gpu = memory_plan(&on_gpu, c.batch_size, PLAN_GPU_BF16);
    memory_plan_print(stdout, &cpu, "training on the CPU", 0);
    memory_plan_print(stdout, &gpu, "training on --device cuda, bf16", budget);
    free(k.info);
    return 0;
}

// ----------------------------------------------------------------------------

int main(int argc, char **argv) {
    int threads = 0;
    const char *device = "auto";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return fputs(USAGE, stdout), 0;
        if (!strcmp(a, "--version")) {
            fc_set_threads(threads ? threads : fc_default_threads());
            printf("framechain %s\n", FC_VERSION);
            backend_print_versions(stdout);
            return 0;
        }
        if (!strcmp(a, "--threads") || !strcmp(a, "--device")) {
            if (i + 1 >= argc) usage_error("option %s needs a value", a);
            if (a[2] == 't') threads = (int)parse_positive("--threads", argv[++i], 1024);
            else device = argv[++i];
            continue;
        }
        usage_error("unknown option '%s'", a);
    }
    if (i >= argc) usage_error("no command given: prepare, train, generate, eval or inspect");
    fc_set_threads(threads ? threads : fc_default_threads());
    const char *cmd = argv[i];
    static char cmdname[64];
    snprintf(cmdname, sizeof cmdname, "framechain %s", cmd);
    g_cmd = cmdname;
    // A --device that cannot be had ends here, before any work.
    g_backend = backend_select(device);
    // The subcommand sees its own name as argv[1].
    argc -= i - 1, argv += i - 1;
    if (!strcmp(cmd, "prepare")) return cmd_prepare(argc, argv);
    if (!strcmp(cmd, "train")) return cmd_train(argc, argv);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc, argv);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    g_cmd = "framechain";
    usage_error("unknown command '%s'", cmd);
}
