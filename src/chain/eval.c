// eval.c: `framechain eval` and its metrics (see eval.h).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chain/eval.h"
#include "chain/generate.h"
#include "formats/shards.h"
#include "base/clock.h"


// ----------------------------------------------------------------------------
// metrics

double frame_psnr(const uint8_t *a, const uint8_t *b, int S) {
    size_t n = (size_t)S * S * 3;
    double se = 0;  // integer squared errors: exact in a double up to 2^53 / 255^2 values
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0) return EVAL_PSNR_CAP;
    double p = 10 * log10(255.0 * 255.0 / (se / n));
    return p > EVAL_PSNR_CAP ? EVAL_PSNR_CAP : p;
}

#define SSIM_WIN 11
#define SSIM_SIGMA 1.5

// The 1-D Gaussian, normalised; the 2-D window is its outer product (separable filtering).
static void ssim_kernel(double g[SSIM_WIN]) {
    double sum = 0;
    for (int k = 0; k < SSIM_WIN; k++) {
        double x = k - SSIM_WIN / 2;
        g[k] = exp(-x * x / (2 * SSIM_SIGMA * SSIM_SIGMA));
        sum += g[k];
    }
    for (int k = 0; k < SSIM_WIN; k++) g[k] /= sum;
}

// One channel c: the Gaussian-weighted local means of x, y, x^2, y^2 and xy at every valid position,
// then the SSIM map's mean. h: scratch of 5 * S * V doubles (V = S - 10).
static double ssim_channel(const uint8_t *a, const uint8_t *b, int S, int c, const double *g, double *h) {
    const double C1 = (0.01 * 255) * (0.01 * 255), C2 = (0.03 * 255) * (0.03 * 255);
    int V = S - SSIM_WIN + 1;
    size_t plane = (size_t)S * V;
    // horizontal pass: h[q] is (S, V)
    for (int y = 0; y < S; y++)
        for (int x = 0; x < V; x++) {
            double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
            for (int k = 0; k < SSIM_WIN; k++) {
                size_t i = ((size_t)y * S + x + k) * 3 + c;
                double u = a[i], v = b[i], w = g[k];
                sx += w * u, sy += w * v, sxx += w * u * u, syy += w * v * v, sxy += w * u * v;
            }
            size_t o = (size_t)y * V + x;
            h[o] = sx, h[plane + o] = sy, h[2 * plane + o] = sxx, h[3 * plane + o] = syy, h[4 * plane + o] = sxy;
        }
    // vertical pass, straight into the map: (V, V) positions
    double total = 0;
    for (int y = 0; y < V; y++)
        for (int x = 0; x < V; x++) {
            double m[5] = {0};
            for (int k = 0; k < SSIM_WIN; k++) {
                size_t o = (size_t)(y + k) * V + x;
                for (int q = 0; q < 5; q++) m[q] += g[k] * h[q * plane + o];
            }
            double mx = m[0], my = m[1];
            double vx = m[2] - mx * mx, vy = m[3] - my * my, cxy = m[4] - mx * my;
            total += ((2 * mx * my + C1) * (2 * cxy + C2)) / ((mx * mx + my * my + C1) * (vx + vy + C2));
        }
    return total / ((double)V * V);
}

double frame_ssim(const uint8_t *a, const uint8_t *b, int S) {
    if (S < EVAL_SSIM_MIN_SIZE) return NAN;
    double g[SSIM_WIN];
    ssim_kernel(g);
    double *h = fc_malloc(sizeof(double) * 5 * (size_t)S * (S - SSIM_WIN + 1));
    double sum = 0;
    for (int c = 0; c < 3; c++) sum += ssim_channel(a, b, S, c, g, h);
    free(h);
    return sum / 3;
}

static double luma(const uint8_t *rgb, int S, int y, int x) {
    const uint8_t *p = rgb + ((size_t)y * S + x) * 3;
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
}

FrameStats frame_stats(const uint8_t *rgb, int S) {
    FrameStats s;
    size_t n = (size_t)S * S * 3;
    double sum = 0, sq = 0;  // sums of integers: exact
    for (size_t i = 0; i < n; i++) sum += rgb[i], sq += (double)rgb[i] * rgb[i];
    s.mean = sum / n;
    double var = sq / n - s.mean * s.mean;
    s.contrast = sqrt(var > 0 ? var : 0);
    if (S < 3) {
        s.sharpness = NAN;
        return s;
    }
    double lap = 0;
    for (int y = 1; y < S - 1; y++)
        for (int x = 1; x < S - 1; x++)
            lap += fabs(4 * luma(rgb, S, y, x) - luma(rgb, S, y - 1, x) - luma(rgb, S, y + 1, x) -
                        luma(rgb, S, y, x - 1) - luma(rgb, S, y, x + 1));
    s.sharpness = lap / ((double)(S - 2) * (S - 2));
    return s;
}

static double ratio(double v, double v0) { return v0 != 0 ? v / v0 : NAN; }

FrameStats frame_stats_ratio(FrameStats s, FrameStats s0) {
    return (FrameStats){ratio(s.mean, s0.mean), ratio(s.contrast, s0.contrast), ratio(s.sharpness, s0.sharpness)};
}

// ----------------------------------------------------------------------------
// options

int eval_parse_levels(const char *text, double max, double *levels, int cap, char *err, size_t errlen) {
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || (*end && *end != ',') || errno || !(v >= 0 && v <= max)) {
            snprintf(err, errlen, "--noise-aug %s: expected levels from 0 to %g separated by commas", text, max);
            return -1;
        }
        if (n == cap) {
            snprintf(err, errlen, "--noise-aug %s: at most %d levels", text, cap);
            return -1;
        }
        levels[n++] = v;
        if (!*end) return n;
        p = end + 1;
    }
}

// ----------------------------------------------------------------------------
// framechain eval

// Each clip its own sampling noise; the first clip the seed itself, so that `framechain generate
// --seed K` from its first frame makes the very frames scored here.
static uint64_t clip_seed(uint64_t seed, int k) { return seed + (uint64_t)k * 0x9E3779B97F4A7C15ull; }

// Everything one run gathers, per level (l) and frame (f).
typedef struct {
    int L, N, M, real_frames;  // levels, frames per clip, drift frames, real frames of the drift clip
    int drift_clip;            // which clip the drift run starts from
    FrameStats first;          // its first frame's stats, the 1 of every ratio
    double *psnr, *ssim;       // (L, N): clip sums of the chain's frames; frame 0 unused
    double *psnr_copy, *ssim_copy;  // (N): clip sums of the copy baseline (the same at every level)
    FrameStats *drift;         // (L, M): ratios to frame 0
    FrameStats *real;          // (real_frames): ratios to frame 0 of the real clip
} Results;

static void print_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6f", v);
    else fprintf(f, "nan");
}

// One row: the means over clips and over frames a..b of level l.
static void quality_row(const Results *r, int l, double level, int a, int b, int clips, const char *label) {
    const double *ps = r->psnr + (size_t)l * r->N, *ss = r->ssim + (size_t)l * r->N;
    double s[4] = {0};
    for (int f = a; f <= b; f++) s[0] += ps[f], s[1] += r->psnr_copy[f], s[2] += ss[f], s[3] += r->ssim_copy[f];
    double d = (double)clips * (b - a + 1);
    char range[32];
    if (a == b) snprintf(range, sizeof range, "%d", a);
    else snprintf(range, sizeof range, "%d-%d", a, b);
    printf("%-10g %-10s %11.2f %11.2f %11.4f %11.4f\n", level, label ? label : range, s[0] / d, s[1] / d, s[2] / d,
           s[3] / d);
}

// Frame ranges 1-6, 7-12, 13-24, 25-48, ... (each twice the last), the last cut at N-1; then all.
static void print_quality(const Results *r, const double *levels, int clips) {
    printf("\nquality against the real frames (means over %d clip%s and the frames of each range; copy: frame 0 "
           "held)\n", clips, clips == 1 ? "" : "s");
    printf("%-10s %-10s %11s %11s %11s %11s\n", "noise-aug", "frames", "PSNR chain", "PSNR copy", "SSIM chain",
           "SSIM copy");
    int last = r->N - 1;
    for (int l = 0; l < r->L; l++) {
        for (int lo = 1, hi = 6; lo <= last; lo = hi + 1, hi *= 2)
            quality_row(r, l, levels[l], lo, hi < last ? hi : last, clips, NULL);
        quality_row(r, l, levels[l], 1, last, clips, "all");
    }
}

// Frames 0, M/8, 2M/8, ..., M-1.
static void print_drift(const Results *r, const double *levels, int clip_frames) {
    printf("\ndrift over %d frames from clip %d's first frame (ratios to frame 0; real: the clip itself, %d frames)\n",
           r->M, r->drift_clip + 1, clip_frames);
    if (r->first.contrast < EVAL_FLAT_CONTRAST)
        printf("(every first frame is flat, a single colour: ratios to it mean nothing)\n");
    else if (r->drift_clip == 1)
        printf("(clip 1's first frame is flat, a single colour: ratios to it would mean nothing)\n");
    else if (r->drift_clip > 1)
        printf("(the first frames of clips 1 to %d are flat, a single colour: ratios to them would mean nothing)\n",
               r->drift_clip);
    printf("frame 0: mean %.2f, contrast %.2f, sharpness %.2f (8-bit values)\n", r->first.mean, r->first.contrast,
           r->first.sharpness);
    printf("%-10s %6s %8s %9s %10s %10s %14s %15s\n", "noise-aug", "frame", "mean", "contrast", "sharpness",
           "real mean", "real contrast", "real sharpness");
    for (int l = 0; l < r->L; l++) {
        int prev = -1;
        for (int k = 0; k <= 8; k++) {
            int f = k < 8 ? (int)((long)k * r->M / 8) : r->M - 1;
            if (f == prev) continue;  // short runs repeat a frame
            prev = f;
            FrameStats d = r->drift[(size_t)l * r->M + f];
            printf("%-10g %6d %8.3f %9.3f %10.3f", levels[l], f, d.mean, d.contrast, d.sharpness);
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
               "real_mean\treal_contrast\treal_sharpness\n");
    for (int l = 0; l < r->L; l++)
        for (int f = 1; f < r->N; f++) {
            size_t i = (size_t)l * r->N + f;
            fprintf(out, "quality\t%g\t%d\t%.4f\t%.4f\t%.6f\t%.6f\tnan\tnan\tnan\tnan\tnan\tnan\n", levels[l], f,
                    r->psnr[i] / clips, r->psnr_copy[f] / clips, r->ssim[i] / clips, r->ssim_copy[f] / clips);
        }
    for (int l = 0; l < r->L; l++)
        for (int f = 0; f < r->M; f++) {
            FrameStats d = r->drift[(size_t)l * r->M + f];
            FrameStats q = f < r->real_frames ? r->real[f] : (FrameStats){NAN, NAN, NAN};
            fprintf(out, "drift\t%g\t%d\tnan\tnan\tnan\tnan", levels[l], f);
            double v[6] = {d.mean, d.contrast, d.sharpness, q.mean, q.contrast, q.sharpness};
            for (int k = 0; k < 6; k++) fputc('\t', out), print_num(out, v[k]);
            fputc('\n', out);
        }
    return ferror(out) ? -1 : 0;
}

int eval_cli(const EvalOptions *o, const Backend *be) {
    char err[2048];
    double t_start = fc_now_s();
    ChainModels cm;
    if (chain_models_load(&cm, o->runs, be, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        return 1;
    }
    Dataset *ds = dataset_open(o->data, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "framechain: %s\n", err);
        chain_models_free(&cm);
        return 1;
    }
    int S = cm.size, F = dataset_clip_frames(ds), N = o->frames ? o->frames : F, M = o->long_frames;
    int K = o->clips < dataset_clips(ds) ? o->clips : dataset_clips(ds), L = o->n_levels;
    ChainPlan plan = {0}, long_plan = {0};
    FILE *tsv = NULL;
    char tsv_tmp[4200];
    snprintf(tsv_tmp, sizeof tsv_tmp, "%s.tmp", o->tsv ? o->tsv : "");
    // every check before any sampling: a mistake costs seconds, not the whole run
    err[0] = 0;
    if (K < 1)
        snprintf(err, sizeof err, "%s: the dataset holds no clip", o->data);
    else if (dataset_frame_size(ds) != S)
        snprintf(err, sizeof err, "%s: its frames are %dx%d, but the models make %dx%d (prepare the held-out footage "
                 "with --size %d)", o->data, dataset_frame_size(ds), dataset_frame_size(ds), S, S, S);
    else if (F < 7)
        snprintf(err, sizeof err, "%s: clips of %d frames; eval needs at least 7 (the starter's window)", o->data, F);
    else if (N > F)
        snprintf(err, sizeof err, "--frames %d: the clips of %s have only %d frames", N, o->data, F);
    else if (S < EVAL_SSIM_MIN_SIZE)
        snprintf(err, sizeof err, "the models make %dx%d frames; SSIM needs at least %dx%d", S, S, EVAL_SSIM_MIN_SIZE,
                 EVAL_SSIM_MIN_SIZE);
    else if (chain_build(&plan, &cm.m[0]->cfg, &cm.m[1]->cfg, &cm.m[2]->cfg, N, err, sizeof err) ||
             (M > 0 && chain_build(&long_plan, &cm.m[0]->cfg, &cm.m[1]->cfg, &cm.m[2]->cfg, M, err, sizeof err))) {
        // err says which plan does not fit
    }
    if (!err[0] && o->tsv && !(tsv = fopen(tsv_tmp, "w")))
        snprintf(err, sizeof err, "%s: cannot create: %s", tsv_tmp, strerror(errno));
    if (err[0]) {
        fprintf(stderr, "framechain: %s\n", err);
        chain_free(&plan), chain_free(&long_plan);
        dataset_close(ds);
        chain_models_free(&cm);
        return 1;
    }

    printf("eval: the first %d clip%s of %s (%d frames of %dx%d each)", K, K == 1 ? "" : "s", o->data, F, S, S);
    if (K < o->clips) printf("; the dataset has only %d, --clips asked for %d", K, o->clips);
    printf("\neval: %d frames per clip, drift over %d, %d Euler steps, seed %llu, on %s; starter step %d, extrapolate "
           "step %d, interpolate step %d\n", N, M, o->steps, (unsigned long long)o->seed, be->name, cm.step[0],
           cm.step[1], cm.step[2]);
    fflush(stdout);

    size_t E = (size_t)3 * S * S, frame_bytes = (size_t)S * S * 3;
    Results r = {.L = L, .N = N, .M = M, .real_frames = F < M ? F : M};
    r.psnr = fc_calloc((size_t)L * N, sizeof(double)), r.ssim = fc_calloc((size_t)L * N, sizeof(double));
    r.psnr_copy = fc_calloc(N, sizeof(double)), r.ssim_copy = fc_calloc(N, sizeof(double));
    r.drift = fc_calloc((size_t)L * M + 1, sizeof(FrameStats));
    r.real = fc_calloc((size_t)r.real_frames + 1, sizeof(FrameStats));
    uint8_t *clip = fc_malloc(dataset_clip_bytes(ds));       // (F, S, S, 3)
    uint8_t *first = fc_malloc(frame_bytes), *rgb = fc_malloc(frame_bytes);  // (S, S, 3)
    real *video = fc_malloc(sizeof(real) * E * ((size_t)plan.last_frame + 1));  // (last_frame + 1, 3, S, S)
    int rc = 0;

    // ---- quality: every clip, every level, paired by the clip's seed
    for (int k = 0; k < K && rc == 0; k++) {
        if (dataset_read_clip(ds, k, clip, err, sizeof err)) {
            fprintf(stderr, "framechain: %s\n", err);
            rc = 1;
            break;
        }
        // The drift run starts from the first clip whose first frame is not flat (ratios to a single
        // colour mean nothing; footage often opens on black), from clip 0 when every one is.
        FrameStats s0 = frame_stats(clip, S);
        int flat = s0.contrast < EVAL_FLAT_CONTRAST;
        if (M > 0 && (k == 0 || (!flat && r.first.contrast < EVAL_FLAT_CONTRAST))) {
            r.drift_clip = k, r.first = s0;
            memcpy(first, clip, frame_bytes);
            for (int f = 0; f < r.real_frames; f++)
                r.real[f] = frame_stats_ratio(frame_stats(clip + f * frame_bytes, S), s0);
        }
        for (int f = 1; f < N; f++) {  // the baseline: the last known frame, frame 0, held
            r.psnr_copy[f] += frame_psnr(clip, clip + f * frame_bytes, S);
            r.ssim_copy[f] += frame_ssim(clip, clip + f * frame_bytes, S);
        }
        for (int l = 0; l < L; l++) {
            fprintf(stderr, "eval: clip %d/%d, noise-aug %g: %d frames ... ", k + 1, K, o->levels[l], N);
            fflush(stderr);
            double t0 = fc_now_s();
            SampleOptions so = {.steps = o->steps, .seed = clip_seed(o->seed, k), .noise_aug = o->levels[l],
                                .quiet = 1};
            frame_from_rgb(video, clip, S);
            chain_sample(&cm, &plan, video, &so);
            for (int f = 1; f < N; f++) {
                frame_to_rgb(rgb, video + f * E, S);
                r.psnr[(size_t)l * N + f] += frame_psnr(rgb, clip + f * frame_bytes, S);
                r.ssim[(size_t)l * N + f] += frame_ssim(rgb, clip + f * frame_bytes, S);
            }
            fprintf(stderr, "%.1f s\n", fc_now_s() - t0);
        }
    }

    // ---- drift: one long chain per level from that clip's first frame, with that clip's seed
    if (rc == 0 && M > 0) {
        free(video);
        video = fc_malloc(sizeof(real) * E * ((size_t)long_plan.last_frame + 1));
        for (int l = 0; l < L; l++) {
            fprintf(stderr, "eval: drift from clip %d, noise-aug %g: %d frames ... ", r.drift_clip + 1, o->levels[l],
                    M);
            fflush(stderr);
            double t0 = fc_now_s();
            SampleOptions so = {.steps = o->steps, .seed = clip_seed(o->seed, r.drift_clip),
                                .noise_aug = o->levels[l], .quiet = 1};
            frame_from_rgb(video, first, S);
            chain_sample(&cm, &long_plan, video, &so);
            FrameStats s0 = {0};
            for (int f = 0; f < M; f++) {
                frame_to_rgb(rgb, video + f * E, S);
                FrameStats s = frame_stats(rgb, S);
                if (f == 0) s0 = s;  // the real first frame, back through [-1, 1]: the same bytes
                r.drift[(size_t)l * M + f] = frame_stats_ratio(s, s0);
            }
            fprintf(stderr, "%.1f s\n", fc_now_s() - t0);
        }
    }

    if (rc == 0) {
        print_quality(&r, o->levels, K);
        if (M > 0) print_drift(&r, o->levels, F);
        fflush(stdout);
    }
    if (tsv) {
        int bad = rc || write_tsv(tsv, &r, o->levels, K);
        bad |= fflush(tsv) != 0 || fsync(fileno(tsv)) != 0;
        bad |= fclose(tsv) != 0;
        if (rc == 0 && (bad || rename(tsv_tmp, o->tsv))) {
            fprintf(stderr, "framechain: %s: cannot write: %s\n", o->tsv, strerror(errno));
            rc = 1;
        }
        if (rc) unlink(tsv_tmp);
        else printf("\neval: wrote %s\n", o->tsv);
    }
    if (rc == 0) fprintf(stderr, "eval: done in %.1f s\n", fc_now_s() - t_start);

    free(video), free(clip), free(first), free(rgb);
    free(r.psnr), free(r.ssim), free(r.psnr_copy), free(r.ssim_copy), free(r.drift), free(r.real);
    chain_free(&plan), chain_free(&long_plan);
    dataset_close(ds);
    chain_models_free(&cm);
    return rc;
}
