// eval.c: `framechain eval`, the evaluation itself (see eval.h); the metrics are metrics.c's.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/clock.h"
#include "base/commit.h"
#include "formats/shards.h"
#include "chain/chain_plan.h"
#include "chain/metrics.h"
#include "chain/sampler.h"
#include "chain/eval.h"
#include "video/video.h"
#include "base/paths.h"

// ----------------------------------------------------------------------------
// options

int eval_parse_levels(const char *text, double max, double *levels, int cap, char *err, size_t errlen) {
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        // decimal only, as every other number of the command line: strtod alone takes hex and blanks
        size_t len = strcspn(p, ","), digits = strspn(p, "0123456789.eE+-");
        double v = digits == len ? strtod(p, &end) + 0.0 : 0;  // (+ 0.0: -0 as 0, named "0" in the tables)
        if (digits != len || end == p || (*end && *end != ',') || errno || !(v >= 0 && v <= max))
            return fc_errf(err, errlen, "--noise-aug %s: expected levels from 0 to %g separated by commas", text,
                           max);
        if (n == cap) return fc_errf(err, errlen, "--noise-aug %s: at most %d levels", text, cap);
        // the tables name a level by 15 digits: two that print alike would read as one
        char a[32], b[32];
        snprintf(a, sizeof a, "%.15g", v);
        for (int k = 0; k < n; k++)
            if (snprintf(b, sizeof b, "%.15g", levels[k]), !strcmp(a, b))
                return fc_errf(err, errlen, "--noise-aug %s: level %s given twice", text, a);
        levels[n++] = v;
        if (!*end) return n;
        p = end + 1;
    }
}

// ----------------------------------------------------------------------------
// the results and their tables

// Everything one run gathers, per level (l) and frame (f).
typedef struct {
    int L, N, M, real_frames;  // levels, frames per clip, drift frames, real frames of the drift clip
    int given;                 // frames given to the chain (not scored); the copy baseline holds the last
    int drift_clip;            // which clip the drift run starts from
    int flat_before;           // clips scored before it, each passed over for its flat first frame
    FrameStats first;          // its first frame's stats, the 1 of every ratio
    int first_flat;            // that frame is one colour (frame_one_colour): every clip's first frame was
    double *psnr, *ssim;       // (L, N): clip sums of the chain's frames; the given frames unused
    double *psnr_copy, *ssim_copy;  // (N): clip sums of the copy baseline (the same at every level)
    double *psnr_hold0, *ssim_hold0;  // (N): the same for holding frame 0 (the copy itself when given = 1)
    double *motion;            // (L, N): clip sums of the chain's motion from frame f - 1 to f (frame_motion)
    double *motion_real;       // (N): the same for the real clip
    int K, h0, h1;             // clips; the frames of the headline horizon (set_horizon)
    const char *horizon;       // its name in the per-clip table
    double *clip_chain;        // (L, K): each clip's mean PSNR over the horizon, the chain's
    double *clip_copy;         // (K): the same for the copy baseline; a damaged clip's: NAN
    FrameStats *drift;         // (L, M): ratios to frame 0
    FrameStats *real;          // (real_frames): ratios to frame 0 of the real clip
} Results;

static void print_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6f", v);
    else fprintf(f, "nan");
}

// One row: the means over clips and over frames a..b of level l.
// With more than one given frame, holding frame 0 follows as two more columns.
static void quality_row(const Results *r, int l, double level, int a, int b, int clips, const char *label) {
    const double *ps = r->psnr + (size_t)l * r->N, *ss = r->ssim + (size_t)l * r->N;
    const double *mo = r->motion + (size_t)l * r->N;
    double s[8] = {0};
    for (int f = a; f <= b; f++) {
        s[0] += ps[f], s[1] += r->psnr_copy[f], s[2] += ss[f], s[3] += r->ssim_copy[f];
        s[4] += r->psnr_hold0[f], s[5] += r->ssim_hold0[f], s[6] += mo[f], s[7] += r->motion_real[f];
    }
    double d = (double)clips * (b - a + 1);
    char range[32];
    if (a == b) snprintf(range, sizeof range, "%d", a);
    else snprintf(range, sizeof range, "%d-%d", a, b);
    printf("%-10.15g %-10s %11.2f %11.2f %11.4f %11.4f", level, label ? label : range, s[0] / d, s[1] / d, s[2] / d,
           s[3] / d);
    if (r->given > 1) printf(" %11.2f %11.4f", s[4] / d, s[5] / d);
    printf(" %12.2f %11.2f\n", s[6] / d, s[7] / d);
}

// The frames each clip's own score covers: from more than one given frame the next 40 (when the
// clips are that long), else all the frames made.
static void set_horizon(Results *r) {
    int last = r->N - 1;
    r->h0 = r->given;
    if (r->given > 1 && r->given + 39 <= last) r->h1 = r->given + 39, r->horizon = "the next 40 frames";
    else r->h1 = last, r->horizon = "all frames made";
}

// The spread behind the means: each clip's PSNR over the horizon, chain minus copy, as a mean with its
// standard error over the clips (how far the mean could move on other clips of the same kind), the
// smallest and largest, and how many clips the chain scores over the copy on.
static void print_clips(const Results *r, const double *levels) {
    printf("\nper clip: PSNR chain - copy over %s (frames %d-%d), dB: the spread behind the means above\n",
           r->horizon, r->h0, r->h1);
    printf("%-10s %6s %8s %9s %8s %8s %10s\n", "noise-aug", "clips", "mean", "std err", "min", "max", "over copy");
    for (int l = 0; l < r->L; l++) {
        int n = 0, over = 0;
        double sum = 0, sum2 = 0, lo = INFINITY, hi = -INFINITY;
        for (int k = 0; k < r->K; k++) {
            double d = r->clip_chain[(size_t)l * r->K + k] - r->clip_copy[k];
            if (isnan(d)) continue;  // damaged, left out
            n++, sum += d, sum2 += d * d, over += d > 0;
            lo = d < lo ? d : lo, hi = d > hi ? d : hi;
        }
        double mean = sum / n, var = n > 1 ? (sum2 - n * mean * mean) / (n - 1) : 0;
        char se[32] = "n/a";  // of one clip: no spread to tell (as the drift table's columns past the clip)
        if (n > 1) snprintf(se, sizeof se, "%.2f", sqrt(var > 0 ? var / n : 0));
        printf("%-10.15g %6d %8.2f %9s %8.2f %8.2f %4d of %d\n", levels[l], n, mean, se, lo, hi, over, n);
    }
}

// Frame ranges 1-6, 7-12, 13-24, 25-48, ... (each twice the last), the last cut at N-1, the given
// frames left out; from more than one given frame, the next 40 frames (the horizon of the goal
// "beat repeating the last given frame", README "Quality"); then all.
static void print_quality(const Results *r, const double *levels, int clips) {
    printf("\nquality against the real frames (means over %d clip%s and the frames of each range; copy: frame %d "
           "held; motion: mean absolute change from the frame before, 8-bit values)\n", clips, clips == 1 ? "" : "s",
           r->given - 1);
    printf("%-10s %-10s %11s %11s %11s %11s", "noise-aug", "frames", "PSNR chain", "PSNR copy", "SSIM chain",
           "SSIM copy");
    if (r->given > 1) printf(" %11s %11s", "PSNR hold 0", "SSIM hold 0");
    printf(" %12s %11s\n", "motion chain", "motion real");
    int last = r->N - 1;
    for (int l = 0; l < r->L; l++) {
        for (int lo = 1, hi = 6; lo <= last; lo = hi + 1, hi *= 2)
            if (hi >= r->given)
                quality_row(r, l, levels[l], lo > r->given ? lo : r->given, hi < last ? hi : last, clips, NULL);
        if (r->given > 1 && r->given + 39 <= last) quality_row(r, l, levels[l], r->given, r->given + 39, clips, "next 40");
        quality_row(r, l, levels[l], r->given, last, clips, "all");
    }
}

// Frames 0, M/8, 2M/8, ..., M-1.
static void print_drift(const Results *r, const double *levels, int clip_frames) {
    printf("\ndrift over %d frames from clip %d's first frame (ratios to frame 0; real: the clip itself, %d frames)\n",
           r->M, r->drift_clip + 1, clip_frames);
    if (r->first_flat)
        printf("(every first frame is flat, a single colour: ratios to it mean nothing)\n");
    else if (r->flat_before > 0)  // (damaged clips, skipped, are not among them)
        printf("(the first frame%s of the %d clip%s scored before it %s flat, a single colour: ratios to %s would mean "
               "nothing)\n", r->flat_before > 1 ? "s" : "", r->flat_before, r->flat_before > 1 ? "s" : "",
               r->flat_before > 1 ? "are" : "is", r->flat_before > 1 ? "them" : "it");
    printf("frame 0: mean %.2f, contrast %.2f, sharpness %.2f (8-bit values)\n", r->first.mean, r->first.contrast,
           r->first.sharpness);
    if (!r->first_flat && (r->first.mean < FRAME_STATS_FLOOR || r->first.contrast < FRAME_STATS_FLOOR ||
                           r->first.sharpness < FRAME_STATS_FLOOR))
        printf("(a statistic frame 0 barely has, under a quarter of an 8-bit step, gives no ratio: nan)\n");
    printf("%-10s %6s %8s %9s %10s %10s %14s %15s\n", "noise-aug", "frame", "mean", "contrast", "sharpness",
           "real mean", "real contrast", "real sharpness");
    for (int l = 0; l < r->L; l++) {
        int prev = -1;
        for (int k = 0; k <= 8; k++) {
            int f = k < 8 ? (int)((long)k * r->M / 8) : r->M - 1;
            if (f == prev) continue;  // short runs repeat a frame
            prev = f;
            FrameStats d = r->drift[(size_t)l * r->M + f];
            printf("%-10.15g %6d %8.3f %9.3f %10.3f", levels[l], f, d.mean, d.contrast, d.sharpness);
            if (f < r->real_frames) {
                FrameStats q = r->real[f];
                printf(" %10.3f %14.3f %15.3f\n", q.mean, q.contrast, q.sharpness);
            } else {
                printf(" %10s %14s %15s\n", "n/a", "n/a", "n/a");
            }
        }
    }
}

// One header; a section column says which half of the columns a row fills; "nan": no number.
static int write_tsv(FILE *out, const Results *r, const double *levels, int clips) {
    fprintf(out, "section\tnoise_aug\tframe\tpsnr_chain\tpsnr_copy\tssim_chain\tssim_copy\tmean\tcontrast\tsharpness\t"
               "real_mean\treal_contrast\treal_sharpness\tpsnr_hold0\tssim_hold0\tmotion_chain\tmotion_real\n");
    for (int l = 0; l < r->L; l++)
        for (int f = r->given; f < r->N; f++) {
            size_t i = (size_t)l * r->N + f;
            fprintf(out, "quality\t%.15g\t%d\t%.4f\t%.4f\t%.6f\t%.6f\tnan\tnan\tnan\tnan\tnan\tnan\t%.4f\t%.6f\t%.4f\t%.4f\n",
                    levels[l], f, r->psnr[i] / clips, r->psnr_copy[f] / clips, r->ssim[i] / clips,
                    r->ssim_copy[f] / clips, r->psnr_hold0[f] / clips, r->ssim_hold0[f] / clips,
                    r->motion[i] / clips, r->motion_real[f] / clips);
        }
    for (int l = 0; l < r->L; l++)
        for (int f = 0; f < r->M; f++) {
            FrameStats d = r->drift[(size_t)l * r->M + f];
            FrameStats q = f < r->real_frames ? r->real[f] : (FrameStats){NAN, NAN, NAN};
            fprintf(out, "drift\t%.15g\t%d\tnan\tnan\tnan\tnan", levels[l], f);
            double v[6] = {d.mean, d.contrast, d.sharpness, q.mean, q.contrast, q.sharpness};
            for (int k = 0; k < 6; k++) fputc('\t', out), print_num(out, v[k]);
            fputs("\tnan\tnan\tnan\tnan\n", out);
        }
    for (int l = 0; l < r->L; l++)  // frame: the clip's number in the dataset
        for (int k = 0; k < r->K; k++) {
            double chain = r->clip_chain[(size_t)l * r->K + k];
            if (isnan(chain)) continue;
            fprintf(out, "clip\t%.15g\t%d\t%.4f\t%.4f\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\n",
                    levels[l], k + 1, chain, r->clip_copy[k]);
        }
    return ferror(out) ? -1 : 0;
}

// ----------------------------------------------------------------------------
// the evaluation, phase by phase

// Everything one evaluation holds: the models, the held-out data, the plans, the results, the buffers.
typedef struct {
    const EvalOptions *o;
    const Backend *be;
    ChainModels cm;
    Dataset *ds;
    int S, F, N, M, K, L;  // frame size, clip length, frames per clip, drift frames, clips, levels
    Autoencoder *ae;       // models trained on latents (--vae), else NULL
    size_t EC;             // values of one of the chain's frames: 3 S S, or the latents' C n n
    real *pixels;          // (3, S, S): a frame between the autoencoder and RGB
    double ceiling_psnr, ceiling_ssim;  // latents: the autoencoder's own round trip of the scored real frames
    long ceiling_frames;
    int scored, damaged;   // of the first K clips: those scored so far, and those skipped as damaged
    ChainPlan plan, long_plan;
    SampleOptions sample;    // the sampling options asked for, the drift guards' defaults settled for these models
    char tsv_tmp[4200];
    Results r;
    uint8_t *clip;           // (F, S, S, 3): the clip being scored
    uint8_t *first, *rgb;    // (given, S, S, 3): the drift run's given frames; (2, S, S, 3): a made frame
                             // and the one before it
    real *video;             // (last_frame + 1, EC): the chain's frames (latents with --vae)
    char err[2048];
} Eval;

// Each clip its own sampling noise; the first clip the seed itself, so that `framechain generate
// --seed K` from its first frame makes the very frames scored here.
static uint64_t clip_seed(uint64_t seed, int k) { return seed + (uint64_t)k * 0x9E3779B97F4A7C15ull; }

// One chain's sampling options: those asked for, with this run's seed and noise-augmentation level.
static SampleOptions sample_run_options(const Eval *ev, uint64_t seed, double noise_aug) {
    SampleOptions so = ev->sample;
    so.seed = seed, so.noise_aug = noise_aug, so.quiet = 1, so.latent = ev->ae != NULL;
    return so;
}

// The models, then the dataset. Returns 0, or -1 with ev->err.
static int eval_open(Eval *ev) {
    const EvalOptions *o = ev->o;
    if (chain_models_load(&ev->cm, o->runs, ev->be, ev->err, sizeof ev->err)) return -1;
    if (chain_load_autoencoder(&ev->cm, o->vae, "eval", ev->be, &ev->ae, ev->err, sizeof ev->err)) return -1;
    ev->ds = dataset_open(o->data, ev->err, sizeof ev->err);
    if (!ev->ds) return -1;
    if (dataset_latent(ev->ds))
        return fc_errf(ev->err, sizeof ev->err, "%s holds latents: eval compares frames; give it the same footage "
                       "prepared without --vae", o->data);
    ev->S = ev->ae ? ev->cm.size * autoencoder_factor(ev->ae) : ev->cm.size;  // eval scores pixels
    ev->EC = (size_t)ev->cm.channels * ev->cm.size * ev->cm.size;
    ev->F = dataset_clip_frames(ev->ds), ev->N = o->frames ? o->frames : ev->F;
    ev->M = o->long_frames, ev->L = o->n_levels;
    ev->K = o->clips < dataset_clips(ev->ds) ? o->clips : dataset_clips(ev->ds);
    if (o->tsv && fc_temp_name(ev->tsv_tmp, sizeof ev->tsv_tmp, o->tsv, ".tmp-"))
        return fc_errf(ev->err, sizeof ev->err, "--tsv %.200s...: path too long", o->tsv);
    return 0;
}

// Every check before any sampling, so that a mistake costs seconds, not the whole run; then the
// plans and the TSV's temporary file. Returns 0, or -1 with ev->err.
static int eval_check(Eval *ev) {
    const EvalOptions *o = ev->o;
    char *err = ev->err;
    size_t errlen = sizeof ev->err;
    int S = ev->S, F = ev->F, N = ev->N, size = dataset_frame_size(ev->ds);
    if (ev->K < 1) return fc_errf(err, errlen, "%s: the dataset holds no clip", o->data);
    if (size != S)
        return fc_errf(err, errlen, "%s: its frames are %dx%d, but the models make %dx%d (prepare the held-out "
                       "footage with --size %d)", o->data, size, size, S, S, S);
    if (F < 7)
        return fc_errf(err, errlen, "%s: clips of %d frames; eval needs at least 7 (the starter's window)", o->data, F);
    if (N > F) return fc_errf(err, errlen, "--frames %d: the clips of %s have only %d frames", N, o->data, F);
    if (S < METRICS_SSIM_MIN_SIZE)
        return fc_errf(err, errlen, "the models make %dx%d frames; SSIM needs at least %dx%d", S, S,
                       METRICS_SSIM_MIN_SIZE, METRICS_SSIM_MIN_SIZE);
    const Config *c[3] = {&ev->cm.m[0]->cfg, &ev->cm.m[1]->cfg, &ev->cm.m[2]->cfg};
    if (o->given >= N)
        return fc_errf(err, errlen, "--given %d: the chain would make none of the %d frames per clip to score (--frames "
                       "must be more than --given)", o->given, N);
    ev->sample = o->sample;
    if (chain_settle_options(&ev->cm, &ev->sample, o->given, err, errlen)) return -1;
    for (int l = 0; l < o->n_levels; l++) {
        char unseen[512];
        if (chain_noise_aug_unseen(&ev->cm, o->levels[l], o->given, unseen, sizeof unseen)) fc_warn("%s", unseen);
    }
    // err says which plan does not fit, or which counts --given may be
    if (chain_build_given(&ev->plan, c[0], c[1], c[2], N, o->given, err, errlen)) return -1;
    if (ev->M > 0 && o->given >= ev->M)  // its table would hold the given frames alone, the real clip's own
        return fc_errf(err, errlen, "--long %d: the drift run would make none of its frames from --given %d (give "
                       "--long more than %d, or 0 for no drift run)", ev->M, o->given, o->given);
    if (ev->M > 0 && chain_build_given(&ev->long_plan, c[0], c[1], c[2], ev->M, o->given, err, errlen)) return -1;
    return 0;
}

static void print_header(const Eval *ev) {
    const EvalOptions *o = ev->o;
    printf("eval: the first %d clip%s of %s (%d frames of %dx%d each)", ev->K, ev->K == 1 ? "" : "s", FC_ESCAPED(o->data), ev->F,
           ev->S, ev->S);
    if (ev->K < o->clips) printf("; the dataset has only %d (--clips %d)", ev->K, o->clips);
    char steps[128], temperature[128];
    chain_describe_steps(&ev->cm, o->sample.steps, steps, sizeof steps);
    chain_describe_temperature(&ev->cm, o->sample.temperature, temperature, sizeof temperature);
    printf("\neval: %d frames per clip from %d given, drift over %d, %s, guidance %g, %s, "
           "seed %llu, on %s; starter step %d, extrapolate step %d, interpolate step %d\n", ev->N, o->given, ev->M,
           steps, o->sample.guidance, temperature, (unsigned long long)o->sample.seed, ev->be->name, ev->cm.step[0],
           ev->cm.step[1], ev->cm.step[2]);
    char guards[256];
    chain_describe_guards(&ev->sample, o->given, guards, sizeof guards);
    printf("eval: %s\n", guards);
    if (ev->ae)
        printf("eval: the chain in the latents (%d, %d, %d) of %s, each frame decoded to %dx%d and scored in pixels\n",
               ev->cm.channels, ev->cm.size, ev->cm.size, FC_ESCAPED(o->vae), ev->S, ev->S);
    fflush(stdout);
}

static void alloc_buffers(Eval *ev) {
    int L = ev->L, N = ev->N, M = ev->M, S = ev->S;
    size_t E = (size_t)3 * S * S, frame_bytes = (size_t)S * S * 3;  // a pixel frame's values, bytes
    Results *r = &ev->r;
    *r = (Results){.L = L, .N = N, .M = M, .real_frames = ev->F < M ? ev->F : M, .given = ev->o->given, .K = ev->K};
    set_horizon(r);
    r->clip_chain = fc_malloc(sizeof(double) * L * ev->K), r->clip_copy = fc_malloc(sizeof(double) * ev->K);
    for (size_t i = 0; i < (size_t)L * ev->K; i++) r->clip_chain[i] = NAN;
    for (int k = 0; k < ev->K; k++) r->clip_copy[k] = NAN;
    r->psnr = fc_calloc((size_t)L * N, sizeof(double)), r->ssim = fc_calloc((size_t)L * N, sizeof(double));
    r->psnr_copy = fc_calloc(N, sizeof(double)), r->ssim_copy = fc_calloc(N, sizeof(double));
    r->psnr_hold0 = fc_calloc(N, sizeof(double)), r->ssim_hold0 = fc_calloc(N, sizeof(double));
    r->motion = fc_calloc((size_t)L * N, sizeof(double)), r->motion_real = fc_calloc(N, sizeof(double));
    r->drift = fc_calloc((size_t)L * M + 1, sizeof(FrameStats));
    r->real = fc_calloc((size_t)r->real_frames + 1, sizeof(FrameStats));
    ev->clip = fc_malloc(dataset_clip_bytes(ev->ds));
    ev->first = fc_malloc(frame_bytes * ev->o->given), ev->rgb = fc_malloc(2 * frame_bytes);
    ev->video = fc_malloc(sizeof(real) * ev->EC * ((size_t)ev->plan.last_frame + 1));
    ev->pixels = fc_malloc(sizeof(real) * E);
}

// One of the chain's frames as RGB bytes (S, S, 3): through the decoder for latents.
static void chain_frame_rgb(Eval *ev, const real *frame, uint8_t *rgb) {
    if (ev->ae) {
        if (autoencoder_decode(ev->ae, frame, 1, ev->cm.size, ev->cm.size, ev->pixels, ev->err, sizeof ev->err))
            fc_die("%s", ev->err);
        frame = ev->pixels;
    }
    frame_to_rgb(rgb, frame, ev->S);
}

// RGB bytes (S, S, 3) as one of the chain's frames: through the encoder for latents.
static void rgb_chain_frame(Eval *ev, const uint8_t *rgb, real *frame) {
    frame_from_rgb(ev->ae ? ev->pixels : frame, rgb, ev->S);
    if (ev->ae && autoencoder_encode(ev->ae, ev->pixels, 1, ev->S, ev->S, frame, ev->err, sizeof ev->err))
        fc_die("%s", ev->err);
}

// The drift run starts from the first clip whose first frame is not flat (ratios to a single colour
// mean nothing; footage often opens on black), from the first scored clip when every one is.
static void note_drift_start(Eval *ev, int k) {
    Results *r = &ev->r;
    size_t frame_bytes = (size_t)ev->S * ev->S * 3;
    FrameStats s0 = frame_stats(ev->clip, ev->S);
    int flat = frame_one_colour(ev->clip, ev->S);
    if (ev->M > 0 && (ev->scored == 0 || (!flat && r->first_flat))) {
        // the start moves only while every clip scored so far began flat
        r->drift_clip = k, r->first = s0, r->first_flat = flat, r->flat_before = ev->scored;
        memcpy(ev->first, ev->clip, frame_bytes * ev->o->given);
        for (int f = 0; f < r->real_frames; f++)
            r->real[f] = frame_stats_ratio(frame_stats(ev->clip + f * frame_bytes, ev->S), s0);
    }
}

// The baselines: the last known frame held, and frame 0 held.
static void score_copy(Eval *ev, int k) {
    size_t frame_bytes = (size_t)ev->S * ev->S * 3;
    const uint8_t *held = ev->clip + (size_t)(ev->o->given - 1) * frame_bytes;
    double clip_sum = 0;
    for (int f = ev->o->given; f < ev->N; f++) {
        const uint8_t *truth = ev->clip + f * frame_bytes;
        double psnr = frame_psnr(held, truth, ev->S);
        if (f >= ev->r.h0 && f <= ev->r.h1) clip_sum += psnr;
        ev->r.psnr_copy[f] += psnr, ev->r.ssim_copy[f] += frame_ssim(held, truth, ev->S);
        ev->r.psnr_hold0[f] += frame_psnr(ev->clip, truth, ev->S);
        ev->r.ssim_hold0[f] += frame_ssim(ev->clip, truth, ev->S);
        ev->r.motion_real[f] += frame_motion(truth - frame_bytes, truth, ev->S);
    }
    ev->r.clip_copy[k] = clip_sum / (ev->r.h1 - ev->r.h0 + 1);
    for (int f = ev->o->given; f < ev->N && ev->ae; f++) {  // the autoencoder's round trip: the ceiling
        const uint8_t *truth = ev->clip + f * frame_bytes;
        real *lat = ev->video;  // free until the chain samples
        rgb_chain_frame(ev, truth, lat);
        chain_frame_rgb(ev, lat, ev->rgb);
        ev->ceiling_psnr += frame_psnr(ev->rgb, truth, ev->S), ev->ceiling_ssim += frame_ssim(ev->rgb, truth, ev->S);
        ev->ceiling_frames++;
    }
}

// The chain's frames 0..given-1 from the real ones (S, S, 3 each).
static void set_given(Eval *ev, const uint8_t *rgb) {
    size_t frame_bytes = (size_t)ev->S * ev->S * 3;
    for (int f = 0; f < ev->o->given; f++) rgb_chain_frame(ev, rgb + f * frame_bytes, ev->video + f * ev->EC);
}

// The chain from clip k's first frame at level l, every made frame scored against the real one.
static void score_chain(Eval *ev, int k, int l) {
    const EvalOptions *o = ev->o;
    int S = ev->S, N = ev->N;
    size_t frame_bytes = (size_t)S * S * 3;
    fprintf(stderr, "eval: clip %d/%d, noise-aug %.15g: %d frames ... ", k + 1, ev->K, o->levels[l], N);
    fflush(stderr);
    double t0 = fc_now_s();
    SampleOptions so = sample_run_options(ev, clip_seed(o->sample.seed, k), o->levels[l]);
    set_given(ev, ev->clip);
    char err[512];
    if (chain_sample(&ev->cm, &ev->plan, ev->video, &so, err, sizeof err)) {
        fprintf(stderr, "\n");
        fc_die("eval: clip %d, noise-aug %.15g: %s", k + 1, o->levels[l], err);
    }
    double clip_sum = 0;
    for (int f = o->given; f < N; f++) {
        uint8_t *made = ev->rgb + (f & 1) * frame_bytes, *before = ev->rgb + !(f & 1) * frame_bytes;
        // the chain's own frame before: the last given as the chain holds it (through the autoencoder
        // and back where it works on latents, so that the round trip's loss is not counted as motion)
        if (f == o->given) chain_frame_rgb(ev, ev->video + (f - 1) * ev->EC, before);
        chain_frame_rgb(ev, ev->video + f * ev->EC, made);
        double psnr = frame_psnr(made, ev->clip + f * frame_bytes, S);
        if (f >= ev->r.h0 && f <= ev->r.h1) clip_sum += psnr;
        ev->r.psnr[(size_t)l * N + f] += psnr;
        ev->r.ssim[(size_t)l * N + f] += frame_ssim(made, ev->clip + f * frame_bytes, S);
        ev->r.motion[(size_t)l * N + f] += frame_motion(before, made, S);
    }
    ev->r.clip_chain[(size_t)l * ev->K + k] = clip_sum / (ev->r.h1 - ev->r.h0 + 1);
    fprintf(stderr, "%.1f s\n", fc_now_s() - t0);
}

// Clip k into ev->clip: 0; 1 when it is damaged (named on stderr and counted: an evaluation that may
// run for hours loses one held-out clip rather than everything, and says so beside its tables);
// -1 with ev->err when the dataset cannot be read at all.
static int read_scored_clip(Eval *ev, int k) {
    int rc = dataset_read_clip(ev->ds, k, ev->clip, ev->err, sizeof ev->err);
    if (rc != DATASET_CLIP_DAMAGED) return rc ? -1 : 0;
    // named as eval's progress and its TSV number clips (from 1), beside the dataset's own name of it
    fc_warn("eval's clip %d/%d is damaged and left out: %s (re-prepare the dataset)", k + 1, ev->K, ev->err);
    ev->damaged++;
    return 1;
}

// Quality: every clip, every level, paired by the clip's seed (its index in the dataset, whatever was
// skipped before it). Returns the exit status so far.
static int eval_quality(Eval *ev) {
    for (int k = 0; k < ev->K; k++) {
        if (fc_stop_signal()) {
            fprintf(stderr, "framechain: stopped by %s at clip %d of %d: no table written\n",
                    fc_signal_name(fc_stop_signal()), k + 1, ev->K);
            return 128 + fc_stop_signal();
        }
        int rc = read_scored_clip(ev, k);
        if (rc < 0) {
            fprintf(stderr, "framechain: %s\n", ev->err);
            return 1;
        }
        if (rc > 0) continue;
        note_drift_start(ev, k);
        score_copy(ev, k);
        for (int l = 0; l < ev->L; l++) score_chain(ev, k, l);
        ev->scored++;
    }
    if (!ev->scored) {
        fprintf(stderr, "framechain: %s: all of the first %d clips are damaged (framechain inspect %s names them): "
                "re-prepare it\n", ev->o->data, ev->K, ev->o->data);
        return 1;
    }
    if (ev->damaged)
        printf("eval: %d of the first %d clips of %s are damaged and left out: the means are over the other %d "
               "(framechain inspect %s names them; re-prepare it)\n", ev->damaged, ev->K, FC_ESCAPED(ev->o->data),
               ev->scored, FC_ESCAPED(ev->o->data));
    return 0;
}

// Drift: one long chain per level from the drift clip's first frame, with that clip's seed, streamed:
// each frame's statistics are taken as it is made, and only the frames the chain still reads are
// held (a drift run of --long 100000 at 256x256 frames would have held 75 GiB).
typedef struct {
    Eval *ev;
    int l;
} DriftRun;

static int drift_frame(void *ctx, int f, const real *frame, char *err, size_t errlen) {
    if (fc_stop_signal())
        return fc_errf(err, errlen, "stopped by %s at frame %d: no table written", fc_signal_name(fc_stop_signal()), f);
    DriftRun *d = ctx;
    Eval *ev = d->ev;
    chain_frame_rgb(ev, frame, ev->rgb);
    // ratios to the real first frame, as the real clip's are (with latents the chain's frame 0 is
    // that frame through the autoencoder and back, and its ratio says what the round trip lost)
    ev->r.drift[(size_t)d->l * ev->M + f] = frame_stats_ratio(frame_stats(ev->rgb, ev->S), ev->r.first);
    return 0;
}

static int eval_drift(Eval *ev) {
    const EvalOptions *o = ev->o;
    Results *r = &ev->r;
    int M = ev->M;
    for (int l = 0; l < ev->L; l++) {
        fprintf(stderr, "eval: drift from clip %d, noise-aug %.15g: %d frames ... ", r->drift_clip + 1, o->levels[l], M);
        fflush(stderr);
        double t0 = fc_now_s();
        SampleOptions so = sample_run_options(ev, clip_seed(o->sample.seed, r->drift_clip), o->levels[l]);
        set_given(ev, ev->first);  // into the first frames of ev->video: the chain's given frames
        DriftRun d = {ev, l};
        char err[512];
        if (chain_sample_stream(&ev->cm, &ev->long_plan, ev->video, o->given, &so, drift_frame, &d, err, sizeof err)) {
            fprintf(stderr, "\nframechain: eval: the drift run: %s\n", err);
            return fc_stop_signal() ? 128 + fc_stop_signal() : 1;
        }
        fprintf(stderr, "%.1f s\n", fc_now_s() - t0);
    }
    return 0;
}

// A path in a settings line: tab, newline, carriage return and backslash escaped (as manifest.tsv), so
// that the line stays one line.
static void put_escaped(FILE *out, const char *s) {
    for (; *s; s++) {
        const char *esc = *s == '\t' ? "\\t" : *s == '\n' ? "\\n" : *s == '\r' ? "\\r" : *s == '\\' ? "\\\\" : NULL;
        if (esc) fputs(esc, out);
        else fputc(*s, out);
    }
}

// A setting of each model: one value when the three agree, else "starter / extrapolate / interpolate".
static void put_per_model(FILE *out, const char *key, const double v[3]) {
    if (v[0] == v[1] && v[1] == v[2]) fprintf(out, "# %s: %.15g\n", key, v[0]);
    else fprintf(out, "# %s: %.15g / %.15g / %.15g (starter / extrapolate / interpolate)\n", key, v[0], v[1], v[2]);
}

// The settings the scores were made with, as '#' lines before the TSV's header (readers pass over
// them): the models (run folders and the checkpoints' steps), the data, the chain's options with the
// models' own defaults settled, the seed, the backend and framechain's version.
static void write_settings(FILE *out, const Eval *ev) {
    const EvalOptions *o = ev->o;
    static const char *const roles[3] = {"starter", "extrapolate", "interpolate"};
    fprintf(out, "# %s eval: the settings of these scores\n", fc_build_name());
    for (int r = 0; r < 3; r++) {
        fprintf(out, "# %s: ", roles[r]);
        put_escaped(out, o->runs[r]);
        fprintf(out, " (step %d)\n", ev->cm.step[r]);
    }
    fputs("# vae: ", out);
    put_escaped(out, o->vae ? o->vae : "none");
    fputs("\n# data: ", out);
    put_escaped(out, o->data);
    fprintf(out, "\n# clips: %d", ev->K);
    if (ev->damaged) fprintf(out, " (%d damaged, left out)", ev->damaged);
    fprintf(out, "\n# frames: %d\n# given: %d\n# long: %d\n# noise-aug: ", ev->N, o->given, ev->M);
    for (int l = 0; l < o->n_levels; l++) fprintf(out, "%s%.15g", l ? "," : "", o->levels[l]);
    double steps[3], temperature[3];
    for (int r = 0; r < 3; r++) {
        steps[r] = o->sample.steps ? o->sample.steps : ev->cm.m[r]->cfg.sample_steps;
        temperature[r] = sample_temperature_of(ev->cm.m[r], o->sample.temperature);
    }
    fputs("\n", out);
    put_per_model(out, "steps", steps);
    put_per_model(out, "temperature", temperature);
    fprintf(out, "# guidance: %.15g\n# sharpness-guard: %.15g\n# colour-guard: %.15g\n# colour-ramp: %d\n# seed: %llu\n"
            "# backend: %s\n", o->sample.guidance, ev->sample.sharpness_guard, ev->sample.colour_guard,
            ev->sample.colour_ramp, (unsigned long long)o->sample.seed, ev->be->name);
}

// The TSV written (when the run went well) into its temporary file, synced and renamed into place;
// the temporary file exists only for that moment, so an eval stopped part-way leaves none. Returns the
// exit status.
static int finish_tsv(Eval *ev, int rc) {
    const EvalOptions *o = ev->o;
    if (!o->tsv || rc) return rc;
    FILE *f = fopen(ev->tsv_tmp, "w");
    if (f) write_settings(f, ev), write_tsv(f, &ev->r, o->levels, ev->scored);  // write errors stay in ferror(f)
    long delay_ms = fc_test_hook("TSV_WRITE_DELAY_MS");  // the tests' file must be able to come meanwhile
    if (delay_ms > 0) usleep((useconds_t)delay_ms * 1000);
    if (!f || fc_commit_output(f, ev->tsv_tmp, o->tsv, o->overwrite)) {  // never over one that came meanwhile
        char why[4400];
        fc_output_error(why, sizeof why, o->tsv);
        fprintf(stderr, "framechain: %s\n", why);
        return 1;
    }
    fc_stdout_is_report();  // the tables printed above are in the TSV too
    printf("\neval: wrote %s\n", o->tsv);
    return 0;
}

static void eval_close(Eval *ev) {
    Results *r = &ev->r;
    free(ev->video), free(ev->clip), free(ev->first), free(ev->rgb), free(ev->pixels);
    free_autoencoder(ev->ae);
    free(r->psnr), free(r->ssim), free(r->psnr_copy), free(r->ssim_copy), free(r->drift), free(r->real);
    free(r->psnr_hold0), free(r->ssim_hold0), free(r->motion), free(r->motion_real);
    free(r->clip_chain), free(r->clip_copy);
    chain_free(&ev->plan), chain_free(&ev->long_plan);
    dataset_close(ev->ds);
    chain_models_free(&ev->cm);
}

// --tsv FILE never replaces a file eval reads, --overwrite or not (the table is renamed onto its name at
// the end): fc_check_not_an_input. Returns 0, or -1 with err.
static int check_tsv_not_input(const EvalOptions *o, char *err, size_t errlen) {
    static const char *const flags[3] = {"--starter", "--extrapolate", "--interpolate"};
    const char *runs[3] = {o->runs[0], o->runs[1], o->runs[2]};
    FcInputs in = {.data = o->data, .runs = runs, .run_flag = flags, .n_runs = 3, .file = o->vae, .file_flag = "the autoencoder --vae"};
    return fc_check_not_an_input("--tsv", o->tsv, &in, err, errlen);
}

int eval_run(const EvalOptions *o, const Backend *be) {
    // SIGINT, SIGTERM or SIGHUP stop eval before its next clip (or drift frame), no table written
    // (caught from the start: a script's background job starts with SIGINT ignored)
    fc_catch_stop_signals();
    fc_test_hold("START_DELAY_MS", "the start");
    double t_start = fc_now_s();
    Eval *ev = fc_calloc(1, sizeof *ev);
    ev->o = o, ev->be = be;
    int rc = 0;
    // the output first: a path refused after the models and the data had loaded would cost their time
    if ((o->tsv && (fc_check_output_file("--tsv", o->tsv, o->overwrite, ev->err, sizeof ev->err) ||
                    check_tsv_not_input(o, ev->err, sizeof ev->err))) ||
        eval_open(ev) || eval_check(ev)) {
        fprintf(stderr, "framechain: %s\n", ev->err);
        rc = 1;
    } else {
        print_header(ev);
        alloc_buffers(ev);
        rc = eval_quality(ev);
        if (rc == 0 && ev->M > 0) rc = eval_drift(ev);
        if (rc == 0) {
            print_quality(&ev->r, o->levels, ev->scored);
            print_clips(&ev->r, o->levels);
            if (ev->ae && ev->ceiling_frames)
                printf("\nthe autoencoder's own round trip of the same real frames (what a chain that made every "
                       "frame's latents exactly would score): PSNR %.2f dB, SSIM %.4f\n",
                       ev->ceiling_psnr / ev->ceiling_frames,
                       ev->ceiling_ssim / ev->ceiling_frames);
            if (ev->M > 0) print_drift(&ev->r, o->levels, ev->F);
            fflush(stdout);
        }
        rc = finish_tsv(ev, rc);
        char note[512];
        long made = (long)ev->scored * ev->L * (ev->N - o->given) + (ev->M > 0 ? (long)ev->L * (ev->M - o->given) : 0);
        if (rc == 0 && chain_guards_note(&ev->cm, made, note, sizeof note)) fc_warn("%s", note);
        if (rc == 0) fprintf(stderr, "eval: done in %.1f s\n", fc_now_s() - t_start);
    }
    eval_close(ev);
    free(ev);
    return rc;
}
