// cmd_generate.c: `framechain generate`: the three models chained into a long video from one first
// frame (chain/sampler.h), written out by chain/generate.h.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/common.h"
#include "base/clock.h"
#include "base/commit.h"
#include "chain/chain_plan.h"
#include "chain/sampler.h"
#include "chain/generate.h"
#include "model/autoencoder.h"
#include "video/video.h"
#include "cli.h"
#include "commands.h"
#include "sample_opts.h"

static const char *HELP_GENERATE =
    "usage: framechain generate --starter RUN --extrapolate RUN --interpolate RUN --first-frame IMG\n"
    "                           --frames N --out PATH [--steps S] [--seed K] [--noise-aug L]\n"
    "                           [--given K] [--guidance W] [--temperature T] [--sharpness-guard TOL]\n"
    "                           [--colour-guard TOL] [--colour-ramp F] [--fps F] [--quiet] [--overwrite]\n"
    "                           [--vae FILE]\n"
    "\n"
    "From one first frame, the starter makes the first window, the extrapolate model jumps ahead in\n"
    "keyframes at a stride of 4 and the interpolate model fills the gaps, until N frames exist.\n"
    "\n"
    "  --first-frame IMG  a PNG or JPEG (centre-cropped and resized to the models' frame size; at least\n"
    "                     that size on its shorter side), or a video, whose first frame is used (its\n"
    "                     first K with --given), or a folder of PNG or JPEG frames, read as prepare\n"
    "                     reads one (in natural order of their names); shapes:N is the built-in\n"
    "                     moving-shapes clip N\n"
    "  --out PATH         .mp4/.m4v/.mov/.mkv/.avi (H.264 where the build has it, else MPEG-4), .gif, or\n"
    "                     any other name: a new folder of numbered PNGs; written as the frames are made,\n"
    "                     under a temporary name in the same folder, renamed into place when whole;\n"
    "                     checked before sampling: its folder must exist, and PATH must not (see\n"
    "                     --overwrite); SIGINT, SIGTERM or SIGHUP removes what was written and exits\n"
    "                     with 128 + the signal\n"
    "  --overwrite        replace an existing PATH: a file by a video, or a folder of frame PNGs by a new\n"
    "                     one (never the --first-frame file or folder, nor a folder holding it)\n"
    "  --frames N         exactly N frames (at least 7)\n"
    "  --given K          continue the video's first K frames: 1 (default), or the starter's window (7\n"
    "                     for the shipped plans), the starter then skipped; they are the output's first K\n"
    "  --steps S          Euler steps per window (default: each model's sample_steps, 20 unless its\n"
    "                     config says otherwise)\n"
    "  --noise-aug L      the noise level t of every conditioning frame but the first (default 0.1;\n"
    "                     0 trusts generated frames fully; SNR = ((1-t)/t)^2)\n"
    "  --guidance W       history guidance: v = v_uncond + W (v_cond - v_uncond), v_uncond with the given\n"
    "                     frames dropped (default 1: off; needs models trained with cond_drop > 0)\n"
    "  --temperature T    the generated frames start from noise of standard deviation T (default: each\n"
    "                     model's sample_temperature, 1 unless its config says otherwise: the prior the\n"
    "                     models were trained from; below 1 trades variety for steadiness)\n"
    "  --sharpness-guard TOL  hold every frame made at most (1 + TOL) times frame 0's sharpness (mean\n"
    "                     absolute Laplacian; with --given 7, frame 6's, here and in --colour-guard):\n"
    "                     one past it is blended with its blur, as little as brings\n"
    "                     it down; stops speckle piling up over a long chain (default 0.05; 0: off;\n"
    "                     models of latents have no pixels to measure: off, and refused if asked for)\n"
    "  --colour-guard TOL hold every frame's channel means and contrasts within (1 +- TOL) times frame\n"
    "                     0's from F frames after the last given one on (--colour-ramp), in a band that\n"
    "                     narrows to it from 0-2x over those F frames: stops the colours fading over a\n"
    "                     long chain and leaves the motion the given frames set alone; a shift and a\n"
    "                     scale of the whole frame, which also makes what the chain smeared bold\n"
    "                     (default 0: off; off for latents)\n"
    "  --colour-ramp F    frames after the last given one to the colour guard's full hold (default 96;\n"
    "                     0: held from the first frame made)\n"
    "  --seed K           seed of the sampling noise (default 1)\n"
    "  --fps F            frame rate of the video written (default 12)\n"
    "  --quiet            no progress line\n"
    "  --vae FILE         models trained on latents (prepare --vae): the autoencoder they were trained\n"
    "                     with (its SHA-256 is checked against what their checkpoints record). The first\n"
    "                     frame is encoded, the chain runs on latents, every frame written is decoded\n"
    "                     (the given ones too: the output shows the autoencoder's round trip of them)\n"
    "\n"
    "Only the frames later windows still read are kept in memory (9 with the shipped plans, whatever\n"
    "N); the header says how many and how much.\n"
    "\n"
    "Each run folder gives the EMA weights of its newest usable checkpoint; the runs must have been\n"
    "trained with role = starter, extrapolate and interpolate, on frames of one size.\n";

// What the command line asks for.
typedef struct {
    const char *runs[3];  // by enum Role
    const char *first_frame, *out, *vae;
    int frames, given, overwrite;
    double fps;
    SampleOptions sample;
} GenerateRequest;

// Returns 1 when --help was asked for; dies with status 2 on a bad command line.
static int parse_generate(int argc, char **argv, GenerateRequest *g) {
    Opt opts[] = {{"--starter", 1}, {"--extrapolate", 1}, {"--interpolate", 1}, {"--first-frame", 1},
                  {"--frames", 1}, {"--out", 1}, {"--steps", 1}, {"--seed", 1}, {"--noise-aug", 1}, {"--fps", 1},
                  {"--guidance", 1}, {"--temperature", 1}, {"--given", 1}, {"--quiet", 0}, {"--overwrite", 0}, {"--vae", 1},
                  {"--sharpness-guard", 1}, {"--colour-guard", 1}, {"--colour-ramp", 1}, {NULL}};
    if (parse_opts(argc, argv, 2, opts, NULL)) return 1;
    const char *req[] = {"--starter", "--extrapolate", "--interpolate", "--first-frame", "--out"};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) required(opts, req[i]);
    uint32_t clip;
    char why[512];
    if (first_frame_shapes(opt(opts, "--first-frame")->value, &clip, why, sizeof why) < 0)  // before any model
        usage_error("--first-frame %s", why);
    long frames = parse_whole("--frames", required(opts, "--frames"), 7, 1000000);  // the starter's window at least
    SampleOptions so = parse_sample_options(opts);
    if (opt(opts, "--noise-aug")->count)
        so.noise_aug = parse_number("--noise-aug", opt(opts, "--noise-aug")->value, 0, 0.95);
    double fps = opt(opts, "--fps")->count ? parse_number("--fps", opt(opts, "--fps")->value, 0.1, 1000) : 12;
    const char *out = opt(opts, "--out")->value, *ext = out ? strrchr(out, '.') : NULL;
    if (ext && !strcasecmp(ext, ".gif") && fps > VIDEO_GIF_MAX_FPS)  // before any sampling
        usage_error("--fps %g: a GIF's frame delays are whole hundredths of a second, at least 2, so at most %d frames "
                    "a second (or write an .mp4)", fps, VIDEO_GIF_MAX_FPS);
    if (opt(opts, "--fps")->count && out && !generate_is_video_path(out))  // said, not dropped without a word
        fc_warn("--fps %g: %s is a folder of PNGs, which has no frame rate (a video name, .mp4 or another, has one)",
                fps, out);
    so.quiet = opt(opts, "--quiet")->count > 0;
    *g = (GenerateRequest){.runs = {opt(opts, "--starter")->value, opt(opts, "--extrapolate")->value,
                                    opt(opts, "--interpolate")->value},
                           .first_frame = opt(opts, "--first-frame")->value, .out = opt(opts, "--out")->value,
                           .frames = (int)frames, .fps = fps, .sample = so,
                           .overwrite = opt(opts, "--overwrite")->count > 0,
                           .vae = opt(opts, "--vae")->count ? opt(opts, "--vae")->value : NULL,
                           .given = opt(opts, "--given")->count
                                        ? (int)parse_positive("--given", opt(opts, "--given")->value, 1000000)
                                        : 1};
    if (g->given >= g->frames)  // the output would hold the given frames alone
        usage_error("--frames %d: not more than --given %d: there is nothing to generate", g->frames, g->given);
    return 0;
}

// Where the chain's frames go: the output, through the decoder for latents.
typedef struct {
    GenerateOutput *out;
    Autoencoder *ae;  // NULL: the frames are pixels
    int n;            // the latents' side
    real *pixels;     // (3, n f, n f) a decoded frame
    const char *kept; // the output --overwrite was to replace, still as it was until the end; NULL: none
} Emit;

// chain_sample_stream hands the frames over in order, each as soon as it is final: straight to the output.
// SIGINT, SIGTERM or SIGHUP while the chain is sampled: the frame being handed out is the last; the partial
// output is removed and generate exits with 128 + the signal. A second signal ends it at once (the
// next generate into the same folder removes what that leaves).

static int emit_frame(void *ctx, int f, const real *frame, char *err, size_t errlen) {
    Emit *e = ctx;
    if (fc_stop_signal())
        return fc_errf(err, errlen, "stopped by %s at frame %d: the partial output is removed, %s%s",
                       fc_signal_name(fc_stop_signal()), f, e->kept ? e->kept : "nothing written",
                       e->kept ? " kept as it was" : "");
    if (!e->ae) return generate_output_add(e->out, frame, err, errlen);
    if (autoencoder_decode(e->ae, frame, 1, e->n, e->n, e->pixels, err, errlen)) return -1;
    return generate_output_add(e->out, e->pixels, err, errlen);
}

static void format_bytes(char *buf, size_t len, double bytes) {
    if (bytes >= 1e9) snprintf(buf, len, "%.1f GB", bytes / 1e9);
    else snprintf(buf, len, "%.1f MB", bytes / 1e6);
}

// What the generation holds in memory, from the plan, before anything is sampled.
static void print_memory_plan(const GenerateRequest *g, const ChainModels *cm, const ChainPlan *plan, int held,
                              const Autoencoder *ae) {
    int S = cm->size;
    double weights = 0;
    for (int r = 0; r < 3; r++) weights += (double)cm->m[r]->n_params * sizeof(real);
    // the plan: its windows, and what the sampler keeps for each frame (chain_frame_use, the buffer map)
    double planned = (double)plan->count * sizeof(ChainWindow) +
                     ((double)plan->last_frame + 1) * (3 * sizeof(int) + sizeof(real *));
    char frames_mb[32], weights_mb[32], plan_mb[32];
    format_bytes(frames_mb, sizeof frames_mb, (double)held * cm->channels * S * S * sizeof(real));
    format_bytes(weights_mb, sizeof weights_mb, weights);
    format_bytes(plan_mb, sizeof plan_mb, planned);
    // a video's container keeps its index in memory until it closes: a long video's share grows with it
    int index_bytes = video_index_bytes_per_frame(g->out);
    char index_mb[32], index_text[160] = "";
    if (index_bytes) {
        format_bytes(index_mb, sizeof index_mb, (double)index_bytes * g->frames);
        snprintf(index_text, sizeof index_text, ", %s for the video's index (about %d bytes a frame, held until it "
                 "closes)", index_mb, index_bytes);
    }
    printf("generate: memory: at most %d of the %d frames held at once (%s of %dx%d frames), %s of model weights, "
           "%s for the plan%s\n", held, g->frames, frames_mb, S, S, weights_mb, plan_mb, index_text);
    if (ae) {
        int P = S * autoencoder_factor(ae);
        char ae_mb[32], scratch_mb[32];
        format_bytes(ae_mb, sizeof ae_mb, autoencoder_memory_bytes(ae, 1, P, P));
        format_bytes(scratch_mb, sizeof scratch_mb, autoencoder_scratch_bytes(ae, P, P));
        printf("generate: memory: the autoencoder %s (weights and a %dx%d frame's activations) and %s of its "
               "convolutions' scratch\n", ae_mb, P, P, scratch_mb);
    }
}

// What made the video, for its comment tag: the build, the models and their checkpoints' steps, the
// first frame, and every setting that changes the frames as the header lines say them (the per-model
// steps and temperatures settled), the seed and the backend; not --out, --fps, --quiet or --overwrite.
// Paths as printable UTF-8 (fc_printable_line). NULL when out of memory.
static char *describe_generation(const GenerateRequest *g, const ChainModels *cm, const Backend *be, int P,
                                 const char *steps, const char *temperature, const char *guards) {
    static const char *const roles[3] = {"starter", "extrapolate", "interpolate"};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "%s generate:", fc_build_name());
    for (int r = 0; r < 3; r++) fprintf(f, " %s %s (step %d)%s", roles[r], g->runs[r], cm->step[r], r < 2 ? "," : ";");
    fprintf(f, " first frame %s (given %d)", g->first_frame, g->given);
    if (g->vae) fprintf(f, ", vae %s", g->vae);
    fprintf(f, "; %d frames of %dx%d on %s; %s; noise augmentation %.15g; guidance %.15g; %s; %s; seed %llu", g->frames,
            P, P, be->name, steps, g->sample.noise_aug, g->sample.guidance, temperature, guards,
            (unsigned long long)g->sample.seed);
    if (fclose(f) || !text) return free(text), NULL;
    fc_printable_line(text);
    return text;
}

// Sample the chain from the first frame (or frames), each frame written out as it is made. Returns
// the exit status.
static int generate(const GenerateRequest *g, ChainModels *cm, const ChainPlan *plan, const Backend *be,
                    Autoencoder *ae) {
    char err[2048];
    int S = cm->size, P = ae ? S * autoencoder_factor(ae) : S;  // the chain's side, the output's
    size_t E = (size_t)cm->channels * S * S, EP = (size_t)3 * P * P;
    real *first = fc_malloc(sizeof(real) * E * g->given), *pixels = fc_malloc(sizeof(real) * EP * g->given);
    int held = chain_frames_held(plan), rc = 0;
    GenerateOutput *out = NULL;
    struct stat had;
    const char *kept = g->overwrite && !stat(g->out, &had) ? g->out : NULL;  // (checked replaceable before)
    if (load_first_frames(g->first_frame, P, g->given, ae ? pixels : first, err, sizeof err) ||
        (held < 0 && fc_errf(err, sizeof err, "out of host memory for the bookkeeping of %d frames: lower --frames",
                             g->frames)))
        rc = -1;
    for (int k = 0; k < g->given && ae && !rc; k++)
        rc = autoencoder_encode(ae, pixels + k * EP, 1, P, P, first + k * E, err, sizeof err);
    char steps[128], temperature[128], guards[256];
    chain_describe_steps(cm, g->sample.steps, steps, sizeof steps);
    chain_describe_temperature(cm, g->sample.temperature, temperature, sizeof temperature);
    chain_describe_guards(&g->sample, g->given, guards, sizeof guards);
    char *comment = rc ? NULL : describe_generation(g, cm, be, P, steps, temperature, guards);
    if (!rc && !comment) rc = fc_errf(err, sizeof err, "out of host memory");
    if (!rc && fc_stop_signal())  // came while the models loaded
        rc = fc_errf(err, sizeof err, "stopped by %s before the first frame: nothing written%s%s%s",
                     fc_signal_name(fc_stop_signal()), kept ? ", " : "", kept ? kept : "", kept ? " kept as it was" : "");
    if (rc || !(out = generate_output_open(g->out, P, g->fps, g->overwrite, comment, err, sizeof err))) {
        fprintf(stderr, "framechain: %s\n", err);
        free(first), free(pixels), free(comment);
        return fc_stop_signal() ? 128 + fc_stop_signal() : 1;
    }
    free(comment);
    if (ae) printf("generate: in the latents of %s (%d, %d, %d), decoded to %dx%d\n", g->vae, cm->channels, S, S, P, P);
    printf("generate: %d frames of %dx%d on %s: %d window%s (starter step %d, extrapolate step %d, interpolate "
           "step %d), %s, noise augmentation %.3g, guidance %.3g, %s\n", g->frames, P, P, be->name, plan->count,
           plan->count == 1 ? "" : "s", cm->step[0], cm->step[1], cm->step[2], steps, g->sample.noise_aug, g->sample.guidance, temperature);
    printf("generate: %s\n", guards);
    print_memory_plan(g, cm, plan, held, ae);
    fflush(stdout);
    double t0 = fc_now_s();
    Emit emit = {out, ae, S, pixels, kept};
    SampleOptions so = g->sample;
    so.latent = ae != NULL;
    rc = chain_sample_stream(cm, plan, first, g->given, &so, emit_frame, &emit, err, sizeof err);
    if (rc) generate_output_discard(out);
    else rc = generate_output_finish(out, err, sizeof err);
    if (!rc) fc_stdout_is_report();
    if (!rc) fc_test_hold("FINISHED_DELAY_MS", "the output in place");
    if (rc) fprintf(stderr, "framechain: %s\n", err);
    else printf("generate: wrote %s (%d frames in %.2f s)\n", FC_ESCAPED(g->out), g->frames, fc_now_s() - t0);
    char note[512];
    if (!rc && chain_guards_note(cm, g->frames - g->given, note, sizeof note)) fc_warn("%s", note);
    // only once the report is out: a stop between the rename and its line ended the process with the
    // video in place and no word of it (a script took the status for a failure, and a rerun was refused)
    fflush(stdout);
    fc_release_stop_signals();
    free(first), free(pixels);
    return rc && fc_stop_signal() ? 128 + fc_stop_signal() : rc ? 1 : 0;
}

int cmd_generate(int argc, char **argv, const Backend *be) {
    GenerateRequest g;
    if (parse_generate(argc, argv, &g)) return fputs(HELP_GENERATE, stdout), 0;
    char err[2048];
    // caught from the start: a script's background job starts with SIGINT ignored, and one sent while
    // the models load would be lost (the command stops before its first frame)
    fc_catch_stop_signals();
    fc_test_hold("START_DELAY_MS", "the start");
    // the output first: a path that cannot be written fails now, not after the sampling
    if (generate_check_output(g.out, g.first_frame, g.vae, g.overwrite, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        return 1;
    }
    ChainModels cm;
    if (chain_models_load(&cm, g.runs, be, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        return 1;
    }
    ChainPlan plan;
    if (chain_settle_options(&cm, &g.sample, g.given, err, sizeof err) ||
        chain_build_given(&plan, &cm.m[0]->cfg, &cm.m[1]->cfg, &cm.m[2]->cfg, g.frames, g.given, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        chain_models_free(&cm);
        return 1;
    }
    char unseen[512];
    if (chain_noise_aug_unseen(&cm, g.sample.noise_aug, g.given, unseen, sizeof unseen)) fc_warn("%s", unseen);
    Autoencoder *ae = NULL;
    if (chain_load_autoencoder(&cm, g.vae, "generate", be, &ae, err, sizeof err) ||
        (ae && autoencoder_check_address_space(ae, g.vae, cm.size * autoencoder_factor(ae), "--threads", err,
                                               sizeof err))) {
        free_autoencoder(ae);
        fprintf(stderr, "framechain: %s\n", err);
        chain_free(&plan);
        chain_models_free(&cm);
        return 1;
    }
    int rc = generate(&g, &cm, &plan, be, ae);
    free_autoencoder(ae);
    chain_free(&plan);
    chain_models_free(&cm);
    return rc;
}
