// preview.c: previews of a training run (see preview.h): the windows chosen once, sampled by the
// model with its EMA weights, drawn as a PNG.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/preview.h"
#include "base/common.h"
#include "base/paths.h"
#include "chain/sampler.h"
#include "dataset/clip_window.h"
#include "dataset/latents.h"
#include "dataset/moving_shapes.h"
#include "formats/shards.h"
#include "report/plot.h"

#define PREVIEW_NOISE_AUG 0.1  // the context frames' noise level, as generate's default

struct Preview {
    Config c;
    char dir[4200];        // RUN/samples
    char run[4096];
    int K;                 // windows shown
    int order[MAX_SLOTS];  // the slots in time order
    size_t E;              // values in a frame (the model's: latents for a run on latents)
    Autoencoder *ae;       // a run on latents: the decoder of its frames; NULL: frames
    int P;                 // the side of a frame drawn: frame_size, or the decoded frames'
    real *pixels;          // (3, P, P): a decoded frame
    real *truth_px;        // (K, F, 3, P, P): the real windows decoded, once
    real *truth;           // (B, F, E): the windows as the footage has them (windows K..B-1 repeat window 0)
    real *made;            // (B, F, E): the same with the target slots sampled
    char what[512];        // preview_describe
    char *tsv;             // windows.tsv's text, written by the first preview (the run's lock is held then)
    char vae[4096];        // the autoencoder's file
    int recorded;
};

// ----------------------------------------------------------------------------
// the windows

// The clip shown as window k of K from a dataset of n clips: evenly spaced, the middle of each share.
static int spaced_clip(int k, int K, int n) { return (int)(((2 * (long)k + 1) * n) / (2 * (long)K)); }

// A run on latents: --vae is the file the data was made with (its SHA-256 against dataset.json's). 0, or -1.
static int check_vae(Preview *p, const Dataset *d, char *err, size_t errlen) {
    char whose[4200];
    snprintf(whose, sizeof whose, "%s was made with", dataset_dir(d));
    if (latent_check_file(p->ae, p->vae, dataset_latent(d), whose, err, errlen)) return -1;
    if (!autoencoder_has_decoder(p->ae))
        return fc_errf(err, errlen, "--vae %s: %s: previews need the decoder", p->vae, autoencoder_describe(p->ae));
    p->P = dataset_latent(d)->image_size;
    return 0;
}

// A run on latents previewed on other data (preview_data): those latents were made as the training
// data's were (the same file, frame size and scaling), or the previews would feed the model inputs
// of another kind and decode its outputs with another autoencoder. 0, or -1 with err.
static int same_latents_as_data(const char *preview_data, const char *data, char *err, size_t errlen) {
    char why[1024], a[LATENT_ID_TEXT], b[LATENT_ID_TEXT];
    Dataset *dp = dataset_open(preview_data, why, sizeof why), *dt = dp ? dataset_open(data, why, sizeof why) : NULL;
    int rc = 0;
    if (!dp || !dt) rc = fc_errf(err, errlen, "%s", why);
    else if (!dataset_latent(dt) || !dataset_latent(dp))
        rc = fc_errf(err, errlen, "preview_data %s and --data %s: one holds latents, the other frames", preview_data,
                     data);
    else {
        latent_identity_text(dataset_latent(dp), a, sizeof a);
        latent_identity_text(dataset_latent(dt), b, sizeof b);
        if (!latent_identity_same(a, b))
            rc = fc_errf(err, errlen, "preview_data %s holds latents of %s; --data %s of %s: the previews need "
                         "latents made as the training data", preview_data, a, data, b);
    }
    if (dp) dataset_close(dp);
    if (dt) dataset_close(dt);
    return rc;
}

// The first window of latent clip `clip` into window (F, C, n, n): slot f is frame offset[f] - lo, unmirrored.
static int latent_first_window(Preview *p, const Dataset *d, int lo, int clip, real *window, char *err,
                               size_t errlen) {
    int F = p->c.slots, frames[MAX_SLOTS];
    for (int f = 0; f < F; f++) frames[f] = (int)p->c.slot_offset[f] - lo;
    float *vals = fc_malloc(sizeof(float) * F * p->E);
    int rc = dataset_read_latent_frames(d, clip, F, frames, 0, vals, err, errlen);
    for (size_t e = 0; e < (size_t)F * p->E && rc == 0; e++) window[e] = (real)vals[e];
    free(vals);
    return rc;
}

// Window k from clip `want` of d, or the next clip that is not damaged. Appends its windows.tsv line.
// 0, or -1 with err (a shard that cannot be read, every clip damaged).
static int read_window(Preview *p, const Dataset *d, int lo, int k, int want, uint8_t *raw, char *tsv, size_t tsvlen,
                       char *err, size_t errlen) {
    int n = dataset_clips(d);
    for (int tries = 0; tries < n; tries++) {
        int clip = (want + tries) % n;
        real *window = p->truth + (size_t)k * p->c.slots * p->E;
        int got = p->ae ? latent_first_window(p, d, lo, clip, window, err, errlen)
                        : dataset_read_clip(d, clip, raw, err, errlen);
        if (got == DATASET_CLIP_DAMAGED) continue;
        if (got) return -1;
        if (!p->ae) clip_first_window(&p->c, lo, raw, window);
        char source[1024] = "?";
        long first = 0;
        ClipLocation where = {0};
        char why[256];
        if (dataset_clip_origin(d, clip, source, sizeof source, &first, why, sizeof why)) snprintf(source, sizeof source, "?");
        dataset_clip_location(d, clip, &where);
        size_t used = strlen(tsv);
        snprintf(tsv + used, tsvlen - used, "%d\t%s\t%d\t%s\t%ld\n", k, where.shard ? where.shard : "?", where.index,
                 source, first);
        return 0;
    }
    return fc_errf(err, errlen, "%s: every clip is damaged: no window to preview", dataset_dir(d));
}

// The windows of a dataset folder into p->truth, their lines into tsv. 0, or -1 with err.
// key: where the folder was named ("preview_data", "--data"), for the error line.
static int dataset_windows(Preview *p, const char *folder, const char *key, char *tsv, size_t tsvlen, char *err,
                           size_t errlen) {
    char why[1024];
    Dataset *d = dataset_open(folder, why, sizeof why);
    if (!d) return fc_errf(err, errlen, "%s: %s", key, why);
    if (!dataset_latent(d) != !p->ae) {
        fc_errf(err, errlen, dataset_latent(d) ? "%s: %s holds latents: its previews are decoded by the autoencoder "
                "it was made with: give train --vae FILE (or set sample_every = 0)" : "%s: %s holds frames: --vae is "
                "for the previews of a run on latents", key, folder);
        dataset_close(d);
        return -1;
    }
    if (p->ae && check_vae(p, d, err, errlen)) {
        dataset_close(d);
        return -1;
    }
    int lo, rc = clip_window_fits(&p->c, "the run's config", d, &lo, why, sizeof why);
    if (rc) fc_errf(err, errlen, "%s: %s", key, why);
    int n = dataset_clips(d);
    if (rc == 0) {
        p->K = p->K < n ? p->K : n;
        uint8_t *raw = fc_malloc(dataset_clip_bytes(d));
        snprintf(tsv, tsvlen, "# the windows previewed: the first window of each clip, from %s\n"
                              "window\tshard\tclip\tsource\tfirst_frame\n", folder);
        for (int k = 0; k < p->K && rc == 0; k++)
            rc = read_window(p, d, lo, k, spaced_clip(k, p->K, n), raw, tsv, tsvlen, err, errlen);
        free(raw);
    }
    if (rc == 0)
        snprintf(p->what, sizeof p->what, "%d window%s of %s (%d clips)", p->K, p->K == 1 ? "" : "s", folder, n);
    dataset_close(d);
    return rc;
}

// windows.tsv as text: written when it is not there or says something else. 0, or -1 with err.
static int record_windows(const Preview *p, const char *text, char *err, size_t errlen) {
    char path[4300], tmp[4400], why[4400];
    snprintf(path, sizeof path, "%s/windows.tsv", p->dir);
    // not a plain fopen: a FIFO at the name would hold the run at the open for good, deaf to SIGTERM
    FILE *f = fc_fopen_regular(path, why, sizeof why);
    if (!f && errno != ENOENT) return fc_errf(err, errlen, "%s", why);
    if (f) {
        char old[16384];
        size_t n = fread(old, 1, sizeof old - 1, f);
        old[n] = 0;
        fclose(f);
        if (!strcmp(old, text)) return 0;
        printf("previews: the windows differ from those %s names (the data changed): written again\n", path);
    }
    // the process's own temporary name, not one a link could wait at (run_folder.c removes a killed run's)
    if (fc_temp_name(tmp, sizeof tmp, path, ".tmp-")) return fc_errf(err, errlen, "%.200s...: path too long", path);
    f = fopen(tmp, "w");
    if (f) fputs(text, f);  // a failure stays in ferror(f)
    if (!f || fc_commit_file(f, tmp, path)) return fc_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

Preview *preview_open(const Config *c, const char *run, const char *train_data, Autoencoder *ae, const char *vae,
                      char *err, size_t errlen) {
    Preview *p = fc_calloc(1, sizeof *p);
    p->c = *c;
    p->ae = ae, p->P = c->frame_size;
    if (ae) p->pixels = fc_malloc(sizeof(real) * 3 * (size_t)c->frame_size * autoencoder_factor(ae) *
                                  c->frame_size * autoencoder_factor(ae));
    snprintf(p->vae, sizeof p->vae, "%s", vae ? vae : "");
    snprintf(p->run, sizeof p->run, "%s", run);
    snprintf(p->dir, sizeof p->dir, "%s/samples", run);
    int F = c->slots, B = c->batch_size;
    p->E = (size_t)c->channels * c->frame_size * c->frame_size;
    p->K = B < PREVIEW_WINDOWS ? B : PREVIEW_WINDOWS;
    p->truth = fc_malloc(sizeof(real) * B * F * p->E);
    p->made = fc_malloc(sizeof(real) * B * F * p->E);
    for (int i = 0; i < F; i++) p->order[i] = i;
    for (int i = 1; i < F; i++)  // insertion sort by time offset: the plan may list its slots in any order
        for (int j = i; j > 0 && c->slot_offset[p->order[j]] < c->slot_offset[p->order[j - 1]]; j--) {
            int s = p->order[j];
            p->order[j] = p->order[j - 1], p->order[j - 1] = s;
        }
    char tsv[16384];
    const char *folder = c->preview_data[0] ? c->preview_data : train_data;
    int rc = 0;
    if (ae && !folder) rc = fc_errf(err, errlen, "--vae: the previews of a run on latents need its --data");
    else if (folder) {
        rc = dataset_windows(p, folder, c->preview_data[0] ? "preview_data" : "--data", tsv, sizeof tsv, err, errlen);
        if (rc == 0 && ae && c->preview_data[0] && train_data)
            rc = same_latents_as_data(c->preview_data, train_data, err, errlen);
    } else {  // the moving shapes of step 0: training draws steps 1, 2, ...
        shapes_batch(p->truth, c, B, 0, (uint64_t)c->seed, 0);
        snprintf(tsv, sizeof tsv, "# the windows previewed: the built-in moving shapes of seed %lld, step 0 (no "
                 "training step draws them)\nwindow\tshapes_step\tshapes_window\n", (long long)c->seed);
        for (int k = 0; k < p->K; k++) {
            size_t used = strlen(tsv);
            snprintf(tsv + used, sizeof tsv - used, "%d\t0\t%d\n", k, k);
        }
        snprintf(p->what, sizeof p->what, "%d window%s of moving shapes no step draws", p->K, p->K == 1 ? "" : "s");
    }
    if (rc == 0) {  // nothing is written until the first preview: the run's lock is held then
        p->tsv = fc_malloc(strlen(tsv) + 1);
        strcpy(p->tsv, tsv);
    }
    if (rc) {
        preview_close(p);
        return NULL;
    }
    size_t W = (size_t)F * p->E;
    for (int b = p->K; b < B; b++) memcpy(p->truth + b * W, p->truth, sizeof(real) * W);  // padding, not shown
    return p;
}

const char *preview_describe(const Preview *p) { return p->what; }

void preview_close(Preview *p) {
    if (!p) return;
    free(p->truth);
    free(p->made);
    free(p->tsv);
    free(p->pixels), free(p->truth_px);
    free(p);
}

// ----------------------------------------------------------------------------
// the image

#define GIVEN_BORDER ((Rgb){150, 150, 150})
#define MADE_BORDER ((Rgb){235, 120, 20})
#define REAL_BORDER ((Rgb){60, 60, 60})

// Frame (3, N, N) in [-1, 1] at (x, y), each pixel z x z, inside a 2-pixel border of colour `border`.
static void draw_frame(Canvas *cv, const real *frame, int N, int z, int x, int y, Rgb border) {
    canvas_fill(cv, x, y, x + z * N + 3, y + z * N + 3, border);
    size_t plane = (size_t)N * N;
    for (int py = 0; py < N; py++)
        for (int px = 0; px < N; px++) {
            uint8_t rgb[3];
            for (int ch = 0; ch < 3; ch++) {
                double v = (frame[ch * plane + (size_t)py * N + px] + 1.0) * 127.5 + 0.5;
                rgb[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
            int x0 = x + 2 + px * z, y0 = y + 2 + py * z;
            canvas_fill(cv, x0, y0, x0 + z - 1, y0 + z - 1, (Rgb){rgb[0], rgb[1], rgb[2]});
        }
}

// A run on latents: the real windows decoded into p->truth_px, once. 0, or -1 with err.
static int decode_truth(Preview *p, char *err, size_t errlen) {
    if (!p->ae || p->truth_px) return 0;
    size_t px = (size_t)3 * p->P * p->P;
    int n = p->c.frame_size, frames = p->K * p->c.slots;
    p->truth_px = fc_malloc(sizeof(real) * px * frames);
    for (int i = 0; i < frames; i++)
        if (autoencoder_decode(p->ae, p->truth + i * p->E, 1, n, n, p->truth_px + i * px, err, errlen)) {
            free(p->truth_px);
            p->truth_px = NULL;
            return -1;
        }
    return 0;
}

// Slot s of window k as the frame drawn (3, P, P): made (the model's) or real; a latent one decoded.
static const real *shown_frame(Preview *p, int k, int s, int made, char *err, size_t errlen) {
    size_t W = (size_t)p->c.slots * p->E;
    if (!p->ae) return (made ? p->made : p->truth) + k * W + s * p->E;
    if (!made) return p->truth_px + ((size_t)k * p->c.slots + s) * 3 * p->P * p->P;
    int n = p->c.frame_size;
    return autoencoder_decode(p->ae, p->made + k * W + s * p->E, 1, n, n, p->pixels, err, errlen) ? NULL : p->pixels;
}

// The preview image of p->made beside p->truth into cv (initialised here). 0, or -1 with err.
// The figure's layout: frames of N pixels zoomed z times (at least 96 pixels a side), in cells of
// F slots a row, K windows of two rows (made, real).
typedef struct {
    int z, cell, gap, margin, th, label_w, top, width, height;
} Layout;

static Layout layout(int N, int F, int K) {
    Layout l = {.z = N >= 96 ? 1 : (96 + N - 1) / N, .gap = 6, .margin = 10, .th = text_height(1)};
    l.cell = l.z * N + 4, l.label_w = text_width("made", 1) + 10;
    l.width = 2 * l.margin + l.label_w + F * l.cell + (F - 1) * l.gap;
    l.top = l.margin + l.th + 6 + l.th + 2;  // the title, then the slots' time offsets
    l.height = l.top + K * (2 * l.cell + 4) + (K - 1) * 12 + l.margin;
    return l;
}

double preview_plan_bytes(const Config *c, int factor, int with_windows) {
    int N = c->frame_size * factor, K = c->batch_size < PREVIEW_WINDOWS ? c->batch_size : PREVIEW_WINDOWS;
    Layout l = layout(N, c->slots, K);
    double canvas = 3.0 * l.width * l.height;
    double bytes = 3 * canvas;  // the canvas, and stb's filtered rows and their deflated copy as it writes the PNG
    if (factor > 1) bytes += sizeof(real) * 3.0 * N * N * K * c->slots;  // the real windows decoded (decode_truth)
    if (with_windows)  // preview_open's: the windows the previews show, the real ones and the made ones
        bytes += 2.0 * sizeof(real) * c->batch_size * c->slots * c->channels * c->frame_size * c->frame_size;
    return bytes;
}

static int draw_preview(Preview *p, int step, Canvas *cv, char *err, size_t errlen) {
    const Config *c = &p->c;
    int N = p->P, F = c->slots;
    Layout l = layout(N, F, p->K);
    int z = l.z, cell = l.cell, gap = l.gap, margin = l.margin, th = l.th, label_w = l.label_w, width = l.width;
    char title[512];
    snprintf(title, sizeof title, "%s, step %d: the EMA model's frames (orange) from those given (grey), above the "
             "real ones", p->run, step);
    char line[512];
    text_fit(line, sizeof line, title, width - 2 * margin, 1);
    int top = l.top, height = l.height;
    if (canvas_init(cv, width, height, err, errlen)) return -1;
    canvas_text(cv, margin, margin, line, RGB_TEXT, 1);
    for (int j = 0; j < F; j++) {
        char off[32];
        snprintf(off, sizeof off, "%+g", (double)c->slot_offset[p->order[j]]);
        int x = margin + label_w + j * (cell + gap);
        canvas_text(cv, x + (cell - text_width(off, 1)) / 2, margin + th + 6, off, RGB_TEXT, 1);
    }
    if (decode_truth(p, err, errlen)) return -1;
    for (int k = 0; k < p->K; k++) {
        int y = top + k * (2 * cell + 4 + 12);
        canvas_text(cv, margin, y + (cell - th) / 2, "made", RGB_TEXT, 1);
        canvas_text(cv, margin, y + cell + 4 + (cell - th) / 2, "real", RGB_TEXT, 1);
        for (int j = 0; j < F; j++) {
            int s = p->order[j], x = margin + label_w + j * (cell + gap), target = c->slot_kind[s] == SLOT_TARGET;
            const real *made = shown_frame(p, k, s, 1, err, errlen);
            if (!made) return -1;
            draw_frame(cv, made, N, z, x, y, target ? MADE_BORDER : GIVEN_BORDER);
            draw_frame(cv, shown_frame(p, k, s, 0, err, errlen), N, z, x, y + cell + 4, REAL_BORDER);
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// a preview

int preview_missing(void *preview, int step) {
    const Preview *p = preview;
    char path[4300];
    snprintf(path, sizeof path, "%s/step-%08d.png", p->dir, step);
    return access(path, F_OK) != 0;
}

int preview_take(void *preview, Model *m, int step) {
    Preview *p = preview;
    size_t window = (size_t)p->c.slots * p->E;
    memcpy(p->made, p->truth, sizeof(real) * p->c.batch_size * window);
    SampleOptions o = {.steps = 0, .seed = (uint64_t)p->c.seed, .noise_aug = PREVIEW_NOISE_AUG, .guidance = 1.0,
                       .temperature = SAMPLE_MODEL_TEMPERATURE, .quiet = 1, .latent = p->ae != NULL};
    // m holds a rank's share of the batch (m->B windows; the batch on one rank): the K windows shown go
    // through it m->B at a time (the batch is a multiple of m->B, so the last group stays inside it)
    for (int k0 = 0; k0 < p->K; k0 += m->B) sample_plan_windows(m, p->made + k0 * window, k0, &o);
    Canvas cv = {0};
    char path[4300], err[4400];
    snprintf(path, sizeof path, "%s/step-%08d.png", p->dir, step);
    int rc = 0;
    if (!p->recorded) {  // the folder and the windows' record, once
        rc = fc_mkdir_p(p->dir, err, sizeof err);
        if (rc == 0) rc = record_windows(p, p->tsv, err, sizeof err);
        p->recorded = rc == 0;
    }
    if (rc || draw_preview(p, step, &cv, err, sizeof err) || canvas_save_png(&cv, path, 1, err, sizeof err)) {
        fc_line(stderr, "preview of step %d skipped: %s", step, err);
        rc = -1;
    }
    canvas_free(&cv);
    return rc;
}
