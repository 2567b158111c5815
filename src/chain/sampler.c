// sampler.c: the three models, one window's Euler steps and the chain's loop (see sampler.h).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/clock.h"
#include "base/philox.h"
#include "video/video.h"
#include "dataset/frame_folder.h"
#include "dataset/latents.h"
#include "dataset/moving_shapes.h"
#include "train/checkpoint.h"
#include "model/flow.h"
#include "chain/sampler.h"
#include "chain/drift_guard.h"

// ----------------------------------------------------------------------------
// the first frame

struct FirstFrames {
    const char *path;
    int S, K, k;
    int shapes, image;    // shapes:N (clip N), a PNG or JPEG (read at the opening); else video or folder
    uint32_t clip;
    VideoReader *video;
    FrameFolder *folder;
    uint8_t *rgb;         // one frame
};

double first_frames_fps(const FirstFrames *r) { return r && r->video ? video_fps(r->video) : 0; }

void first_frames_close(FirstFrames *r) {
    if (!r) return;
    if (r->video) video_close(r->video);
    if (r->folder) frame_folder_close(r->folder);
    free(r->rgb);
    free(r);
}

int first_frame_shapes(const char *path, uint32_t *clip, char *err, size_t errlen) {
    if (strncmp(path, "shapes:", 7)) return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(path + 7, &end, 10);  // which would take "-1" as the largest number
    if (*end || end == path + 7 || path[7] < '0' || path[7] > '9' || errno || n > 0xffffffffUL)
        return fc_errf(err, errlen, "%s: expected shapes:NUMBER, a clip number from 0 to 4294967295", path);
    *clip = (uint32_t)n;
    return 1;
}

FirstFrames *first_frames_open(const char *path, int S, int K, char *err, size_t errlen) {
    FirstFrames *r = fc_calloc(1, sizeof *r);
    r->path = path, r->S = S, r->K = K;
    r->rgb = fc_malloc((size_t)3 * S * S);
    int rc = 0;
    struct stat st;
    int folder = !stat(path, &st) && S_ISDIR(st.st_mode);
    int shapes = first_frame_shapes(path, &r->clip, err, errlen);
    if (shapes) {  // the built-in moving-shapes clip of that number (demos, tests)
        rc = shapes < 0 ? -1 : 0;
        r->shapes = 1;
    } else if (K > 1 && is_image_path(path) && !folder) {
        rc = fc_errf(err, errlen, "%s: an image is one frame; %d given frames need a video or a folder of frames",
                     path, K);
    } else if (folder) {
        r->folder = frame_folder_open(path, err, errlen);
        rc = r->folder ? 0 : -1;
        int n = r->folder ? frame_folder_images(r->folder) : 0;
        if (!rc && n < K)  // its count is known now: said before any work, not where the frames end
            rc = fc_errf(err, errlen, "%s: the folder has %d frame%s, fewer than the %d asked for", path, n,
                         n == 1 ? "" : "s", K);
    } else if (is_image_path(path)) {
        r->image = 1;
        rc = image_load_square_min(path, S, S, r->rgb, err, errlen);
    } else if (!(r->video = video_open(path, err, errlen))) {
        rc = -1;
    } else if (video_width(r->video) < S || video_height(r->video) < S) {
        rc = fc_errf(err, errlen, "%s: the video is %dx%d, smaller than the %dx%d frames it must fill", path,
                     video_width(r->video), video_height(r->video), S, S);
    }
    if (rc) {
        first_frames_close(r);
        return NULL;
    }
    return r;
}

// The next frame as RGB24 in r->rgb. 0, or -1 with one line in err.
static int next_rgb(FirstFrames *r, char *err, size_t errlen) {
    const char *path = r->path;
    int S = r->S, K = r->K, k = r->k;
    if (r->image) return 0;  // read at the opening: K is 1
    if (r->video) {
        int got = video_next_frame(r->video, S, r->rgb, NULL, err, errlen);
        if (got == 0 && k == 0) return fc_errf(err, errlen, "%s: the video has no frame", path);
        if (got == 0 && k == 1)  // a still FFmpeg reads (BMP, TIFF, WebP, a JPEG under another name)
            return fc_errf(err, errlen, "%s: one frame (a still image?), fewer than the %d asked for", path, K);
        if (got == 0) return fc_errf(err, errlen, "%s: the video has %d frames, fewer than the %d asked for", path, k, K);
        return got < 0 ? -1 : 0;
    }
    char why[800];
    int got = frame_folder_next(r->folder, S, r->rgb, why, sizeof why), w, h;
    if (got < 0)
        return fc_errf(err, errlen, "%s: %s; %d frame%s before it, fewer than the %d asked for", path, why, k,
                       k == 1 ? "" : "s", K);
    if (got == 0)
        return fc_errf(err, errlen, "%s: the folder has %d frame%s, fewer than the %d asked for", path, k,
                       k == 1 ? "" : "s", K);
    frame_folder_size(r->folder, &w, &h);  // the first frame's, which every later one has
    if (k == 0 && (w < S || h < S))
        return fc_errf(err, errlen, "%s: its frames are %dx%d, smaller than the %dx%d frames they must fill", path, w,
                       h, S, S);
    return 0;
}

int first_frames_next(FirstFrames *r, real *out, char *err, size_t errlen) {
    if (r->k >= r->K) return fc_errf(err, errlen, "%s: read past the %d frames asked for", r->path, r->K);
    if (r->shapes) {
        // through 8 bits, as an image or a video is read and as the output writes it: the frame the chain
        // starts from is the one it writes as frame 0, and a prepared clip of these shapes gives it too
        shapes_frame(out, 3, r->S, 1, 0, r->clip, r->k);
        frame_to_rgb(r->rgb, out, r->S);
    } else if (next_rgb(r, err, errlen)) {
        return -1;
    }
    frame_from_rgb(out, r->rgb, r->S);
    r->k++;
    return 0;
}

int load_first_frames(const char *path, int S, int K, real *out, char *err, size_t errlen) {
    FirstFrames *r = first_frames_open(path, S, K, err, errlen);
    if (!r) return -1;
    int rc = 0;
    for (int k = 0; k < K && !rc; k++) rc = first_frames_next(r, out + (size_t)k * 3 * S * S, err, errlen);
    first_frames_close(r);
    return rc;
}

// ----------------------------------------------------------------------------
// the models

// Whether the model loaded from run can serve as role r. Returns 0, or -1 with one line in err.
static int check_role(const Model *m, int r, const char *run, const char *autoencoder, char *err, size_t errlen) {
    const Config *c = &m->cfg;
    if (c->role != r)
        return fc_errf(err, errlen, "--%s %s: that run trained %s %s model (role = %s in its config)",
                       config_role_name(r), run, strchr("aeiou", config_role_name(c->role)[0]) ? "an" : "a",
                       config_role_name(c->role), config_role_name(c->role));
    if (c->channels != 3 && !autoencoder[0])
        return fc_errf(err, errlen, "--%s %s: the model makes %d-channel frames; generate writes RGB (3 channels)",
                       config_role_name(r), run, c->channels);
    return 0;
}

int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen) {
    memset(cm, 0, sizeof *cm);
    for (int r = 0; r < 3; r++) {
        char why[1024], ae[320];
        cm->m[r] = checkpoint_load_for_generation(runs[r], be, 1, &cm->step[r], ae, why, sizeof why);
        if (!cm->m[r]) fc_errf(err, errlen, "--%s %s", config_role_name(r), why);
        int bad = !cm->m[r] || check_role(cm->m[r], r, runs[r], ae, err, errlen);
        if (!bad && r == 0) snprintf(cm->autoencoder, sizeof cm->autoencoder, "%s", ae);
        const Config *c = bad ? NULL : &cm->m[r]->cfg, *c0 = bad ? NULL : &cm->m[0]->cfg;
        if (!bad && !latent_identity_same(ae, cm->autoencoder))
            bad = fc_errf(err, errlen, "--%s %s was trained on %s%s, the starter on %s%s", config_role_name(r), runs[r],
                          ae[0] ? "the latents of " : "frames", ae, cm->autoencoder[0] ? "the latents of " : "frames",
                          cm->autoencoder);
        else if (!bad && (c->frame_size != c0->frame_size || c->channels != c0->channels))
            bad = fc_errf(err, errlen, "--%s %s makes %d-channel frames of %dx%d, the starter %d-channel ones of %dx%d",
                          config_role_name(r), runs[r], c->channels, c->frame_size, c->frame_size, c0->channels,
                          c0->frame_size, c0->frame_size);
        if (bad) {
            chain_models_free(cm);
            return -1;
        }
    }
    cm->size = cm->m[0]->cfg.frame_size, cm->channels = cm->m[0]->cfg.channels;
    return 0;
}

int chain_load_autoencoder(const ChainModels *cm, const char *vae, const char *who, const Backend *be, Autoencoder **ae,
                           char *err, size_t errlen) {
    *ae = NULL;
    if (!cm->autoencoder[0] && !vae) return 0;
    if (!cm->autoencoder[0])
        return fc_errf(err, errlen, "--vae %s: the models were trained on frames, not latents: leave --vae out", vae);
    LatentIdentity want;
    if (latent_identity_parse(cm->autoencoder, &want))
        return fc_errf(err, errlen, "the starter's checkpoint records an autoencoder that does not read: %s",
                       cm->autoencoder);
    if (!vae)
        return fc_errf(err, errlen, "the models were trained on latents (%s): give --vae FILE, that autoencoder's file",
                       cm->autoencoder);
    Autoencoder *a = autoencoder_load(vae, be, err, errlen);
    if (!a) return -1;
    int rc = 0;
    if (!autoencoder_has_encoder(a) || !autoencoder_has_decoder(a))
        rc = fc_errf(err, errlen, "%s: %s: %s needs the encoder (the given frames) and the decoder (the frames made)",
                     vae, autoencoder_describe(a), who);
    else
        rc = latent_check_file(a, vae, &want, "the models were trained with", err, errlen);
    if (rc) {
        free_autoencoder(a);
        return -1;
    }
    *ae = a;
    return 0;
}

void chain_models_free(ChainModels *cm) {
    for (int r = 0; r < 3; r++)
        if (cm->m[r]) free_model(cm->m[r]);
    memset(cm, 0, sizeof *cm);
}

// ----------------------------------------------------------------------------
// sampling

double sample_temperature_of(const Model *m, double temperature) {
    return temperature >= 0 ? temperature : m->cfg.sample_temperature;
}

// A window's starting point: targets pure noise at t = 1, context frames noised to the fixed level,
// the anchor (and context without augmentation) clean. Fills x, t and off for every slot.
static void window_start(const Model *m, const ChainWindow *w, int index, real *const *at,
                         const SampleOptions *o, real *x, real *t, real *off) {
    const Config *c = &m->cfg;
    size_t E = (size_t)m->E;
    double L = o->noise_aug;
    for (int i = 0; i < w->slots; i++) {
        real *xi = x + i * E;
        const real *src = at[w->frame[i]];
        off[i] = w->offset[i];
        if (c->slot_kind[i] == SLOT_TARGET) {
            philox_fill_normal(xi, E, 0, (real)sample_temperature_of(m, o->temperature), o->seed, (uint32_t)index, RNG_NOISE, i * E);
            t[i] = 1;
        } else if (c->slot_kind[i] == SLOT_CONTEXT && L > 0) {  // noise augmentation at the fixed level
            philox_fill_normal(xi, E, 0, 1, o->seed, (uint32_t)index, RNG_AUG, i * E);
            for (size_t k = 0; k < E; k++) xi[k] = (real)((1 - L) * src[k] + L * xi[k]);
            t[i] = (real)L;
        } else {  // the anchor, and context frames without augmentation: clean
            memcpy(xi, src, sizeof(real) * E);
            t[i] = 0;
        }
    }
}

// The unconditional input of guidance: x with every given slot replaced by noise at t = 1, as
// cond_drop trains it (a window's own draws from RNG_DROP).
static void drop_given(const Model *m, int index, const SampleOptions *o, const real *x, const real *t, real *xu,
                       real *tu) {
    size_t E = (size_t)m->E;
    for (int i = 0; i < m->F; i++) {
        if (m->cfg.slot_kind[i] == SLOT_TARGET) {
            memcpy(xu + i * E, x + i * E, sizeof(real) * E);
            tu[i] = t[i];
        } else {
            philox_fill_normal(xu + i * E, E, 0, 1, o->seed, (uint32_t)index, RNG_DROP, i * E);
            tu[i] = 1;
        }
    }
}

// The network's velocity for the m->B windows x at levels t, into pred (B, F, E).
static void predict(Model *m, const real *x, const real *t, real *pred) {
    const Backend *be = m->be;
    be->upload(m->in.t, t, sizeof(real) * m->S);
    be->upload(m->in.xt, x, sizeof(real) * m->S * m->E);
    model_forward(m);
    be->download(pred, m->a.pred, sizeof(real) * m->S * m->E);
}

// Sampling scratch for m->B windows: the windows, the prediction, and guidance's unconditional windows
// and prediction.
typedef struct {
    real *x, *pred, *xu, *pred_u;  // (B, F, E) each, F the largest window
    real *reference;               // (F, E): one window's delta targets' reference frames
    real *t, *tu, *off;            // (B, F) each: the slots' levels, guidance's levels, time offsets
} WindowBuffers;

static void window_buffers_alloc(WindowBuffers *wb, int F, size_t E, int B) {
    size_t bytes = sizeof(real) * F * E, slots = sizeof(real) * F * B;
    *wb = (WindowBuffers){fc_malloc(bytes * B), fc_malloc(bytes * B), fc_malloc(bytes * B), fc_malloc(bytes * B),
                          fc_malloc(bytes),     fc_malloc(slots),     fc_malloc(slots),     fc_malloc(slots)};
}

static void window_buffers_free(WindowBuffers *wb) {
    free(wb->x), free(wb->pred), free(wb->xu), free(wb->pred_u), free(wb->reference);
    free(wb->t), free(wb->tu), free(wb->off);
}

// The m->B windows w[b] of one model at once (all of its plan, m->F slots; b's noise draws keyed by
// index[b], its frames at[b]): targets from pure noise to t = 0 in o->steps (or the model's
// sample_steps) Euler steps of the velocity the network predicts (v = e - x0, so x moves by -dt * v),
// the conditioning slots held fixed. With guidance w != 1, v = v_u + w (v_c - v_u), v_u predicted with
// the given frames dropped. A model trained on deltas makes each target as its reference frame plus
// the sampled delta / delta_scale, its reference measuring time by the true distances of a chain's
// windows (chain_window_distances), or with plan_distances by the plan's offsets (windows sampled alone,
// whose frames are their slots: training's previews, as training's references measure them).
// Returns the number of NaN or infinite values the targets came out with (weights that blew up: the
// clamp below would make them black frames without a word); guard_outside (NULL: not counted) counts
// the frames made for the video that the drift guards left outside a band (colour, sharpness).
static size_t sample_windows(Model *m, const ChainWindow *const *w, const int *index, real *const *const *at,
                             int last_given, int plan_distances, const SampleOptions *o, WindowBuffers *wb,
                             long guard_outside[2]) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    int B = m->B, F = m->F;
    size_t E = (size_t)m->E, W = (size_t)F * E;
    real *t = wb->t, *tu = wb->tu, *off = wb->off, *x = wb->x, *pred = wb->pred;
    for (int b = 0; b < B; b++) window_start(m, w[b], index[b], at[b], o, x + b * W, t + b * F, off + b * F);
    be->upload(m->in.offset, off, sizeof(real) * m->S);
    int guided = o->guidance != 1.0, steps = o->steps ? o->steps : c->sample_steps;
    for (int k = 0; k < steps; k++) {
        double t_now = 1.0 - (double)k / steps, t_next = 1.0 - (double)(k + 1) / steps;
        for (int s = 0; s < m->S; s++)
            if (c->slot_kind[s % F] == SLOT_TARGET) t[s] = (real)t_now;
        predict(m, x, t, pred);
        if (guided) {
            for (int b = 0; b < B; b++) drop_given(m, index[b], o, x + b * W, t + b * F, wb->xu + b * W, tu + b * F);
            predict(m, wb->xu, tu, wb->pred_u);
            for (size_t e = 0; e < (size_t)B * W; e++)
                pred[e] = (real)(wb->pred_u[e] + o->guidance * (pred[e] - wb->pred_u[e]));
        }
        double dt = t_now - t_next;
        for (int s = 0; s < m->S; s++)
            if (c->slot_kind[s % F] == SLOT_TARGET)
                for (size_t e = 0; e < E; e++) x[s * E + e] -= (real)(dt * pred[s * E + e]);
    }
    size_t nonfinite = 0;
    for (int b = 0; b < B; b++) {
        real *xb = x + b * W;
        if (c->targets == TARGETS_DELTAS) {
            const real *given[MAX_SLOTS];  // the window's given frames as the chain has them
            float distance[MAX_SLOTS];     // ... and their true distances, the anchor's too (flow.h)
            for (int i = 0; i < F; i++) given[i] = at[b][w[b]->frame[i]];
            if (plan_distances) memcpy(distance, c->slot_offset, sizeof(float) * F);  // as training measures them
            else chain_window_distances(w[b], distance);
            flow_references(c, given, distance, wb->reference);
        }
        for (int i = 0; i < F; i++)
            if (c->slot_kind[i] == SLOT_TARGET) {
                real *dst = at[b][w[b]->frame[i]], *xi = xb + i * E;
                if (c->targets == TARGETS_DELTAS) flow_delta_to_frame(c, xi, xi, wb->reference + i * E, E);
                for (size_t e = 0; e < E; e++) nonfinite += !isfinite(xi[e]);
                if (o->latent) memcpy(dst, xi, sizeof(real) * E);
                else for (size_t e = 0; e < E; e++) dst[e] = xi[e] < -1 ? -1 : xi[e] > 1 ? 1 : xi[e];
                if ((o->sharpness_guard > 0 || o->colour_guard > 0) && !o->latent && c->channels == 3) {
                    DriftGuardAction a = drift_guard_apply(
                        dst, at[b][w[b]->frame[config_anchor_slot(c)]], c->frame_size,  // the anchor
                        o->sharpness_guard, drift_guard_colour_band(o->colour_guard, w[b]->frame[i] - last_given, o->colour_ramp));
                    if (guard_outside && w[b]->keep[i]) {  // a frame this window makes for the video
                        guard_outside[0] += (a.outside & DRIFT_GUARD_COLOUR_OUTSIDE) != 0;
                        guard_outside[1] += (a.outside & DRIFT_GUARD_SHARPNESS_OUTSIDE) != 0;
                    }
                }
            }
    }
    return nonfinite;
}

void sample_plan_windows(Model *m, real *windows, int first, const SampleOptions *o) {
    const Config *c = &m->cfg;
    int B = m->B, F = m->F;
    size_t E = (size_t)m->E;
    ChainWindow *w = fc_malloc(sizeof(ChainWindow) * B);
    const ChainWindow **wp = fc_malloc(sizeof(ChainWindow *) * B);
    int *index = fc_malloc(sizeof(int) * B);
    real **frames = fc_malloc(sizeof(real *) * B * F), ***at = fc_malloc(sizeof(real **) * B);
    for (int b = 0; b < B; b++) {
        memset(&w[b], 0, sizeof w[b]);
        w[b].role = c->role, w[b].slots = F;
        for (int i = 0; i < F; i++) {
            w[b].frame[i] = i, w[b].kind[i] = c->slot_kind[i], w[b].offset[i] = c->slot_offset[i];
            w[b].keep[i] = c->slot_kind[i] == SLOT_TARGET;
            frames[b * F + i] = windows + ((size_t)b * F + i) * E;
        }
        wp[b] = &w[b], index[b] = first + b, at[b] = frames + b * F;
    }
    int last_given = 0;  // the plan's given slots come before its targets
    while (last_given + 1 < F && c->slot_kind[last_given + 1] != SLOT_TARGET) last_given++;
    WindowBuffers wb;
    window_buffers_alloc(&wb, F, E, B);
    // its frames are its slots, not times: the references measure time by the plan's offsets, as in training
    sample_windows(m, wp, index, (real *const *const *)at, last_given, 1, o, &wb, NULL);
    window_buffers_free(&wb);
    free(w), free(wp), free(index), free(frames), free(at);
}

void chain_describe_steps(const ChainModels *cm, int steps, char *buf, size_t len) {
    int s[3];
    for (int r = 0; r < 3; r++) s[r] = steps ? steps : cm->m[r]->cfg.sample_steps;
    if (s[0] == s[1] && s[1] == s[2]) snprintf(buf, len, "%d Euler step%s", s[0], s[0] == 1 ? "" : "s");
    else snprintf(buf, len, "Euler steps %d / %d / %d (starter / extrapolate / interpolate)", s[0], s[1], s[2]);
}

void chain_describe_temperature(const ChainModels *cm, double temperature, char *buf, size_t len) {
    double T[3];
    for (int r = 0; r < 3; r++) T[r] = sample_temperature_of(cm->m[r], temperature);
    if (T[0] == T[1] && T[1] == T[2]) snprintf(buf, len, "temperature %g", T[0]);
    else snprintf(buf, len, "temperature %g / %g / %g (starter / extrapolate / interpolate)", T[0], T[1], T[2]);
}

void chain_describe_guards(const SampleOptions *o, int given, char *buf, size_t len) {
    char sharp[64] = "off", colour[160] = "off", anchor[32];
    snprintf(anchor, sizeof anchor, "frame %d's", given > 1 ? given - 1 : 0);  // the anchor of the windows
    if (o->sharpness_guard > 0) snprintf(sharp, sizeof sharp, "at most %gx %s", 1 + o->sharpness_guard, anchor);
    if (o->colour_guard > 0 && o->colour_ramp > 0)
        snprintf(colour, sizeof colour, "channel means and contrasts within %g-%gx %s from %d frames after "
                 "the last given one (a wider band before)", 1 - o->colour_guard, 1 + o->colour_guard, anchor,
                 o->colour_ramp);
    else if (o->colour_guard > 0)
        snprintf(colour, sizeof colour, "channel means and contrasts within %g-%gx %s", 1 - o->colour_guard,
                 1 + o->colour_guard, anchor);
    snprintf(buf, len, "drift guards: sharpness %s, colour %s", sharp, colour);
}

int chain_settle_options(const ChainModels *cm, SampleOptions *o, int given, char *err, size_t errlen) {
    int pixels = !cm->autoencoder[0] && cm->channels == 3;
    if (o->sharpness_guard == SAMPLE_GUARD_DEFAULT) o->sharpness_guard = pixels ? SAMPLE_DEFAULT_SHARPNESS_GUARD : 0;
    if (o->colour_guard == SAMPLE_GUARD_DEFAULT) o->colour_guard = pixels ? SAMPLE_DEFAULT_COLOUR_GUARD : 0;
    if ((o->sharpness_guard > 0 || o->colour_guard > 0) && !pixels)
        return fc_errf(err, errlen, "--%s-guard %g: the guard holds RGB frames' statistics; these models make %s "
                       "(--%s-guard 0 turns it off)", o->colour_guard > 0 ? "colour" : "sharpness",
                       o->colour_guard > 0 ? o->colour_guard : o->sharpness_guard,
                       cm->autoencoder[0] ? "latents" : "frames of other than 3 channels",
                       o->colour_guard > 0 ? "colour" : "sharpness");
    if (o->guidance == 1.0) return 0;
    for (int r = 0; r < 3; r++)  // (from given frames past frame 0 the starter is not run: its window is given)
        if (cm->m[r]->cfg.cond_drop <= 0 && !(r == ROLE_STARTER && given > 1))
            return fc_errf(err, errlen, "--guidance %g: the %s model was trained with cond_drop = 0, so it has no "
                           "unconditional half to guide with (train with --set cond_drop=0.1)", o->guidance,
                           config_role_name(r));
    return 0;
}

int chain_guards_note(const ChainModels *cm, long made, char *buf, size_t len) {
    long colour = cm->guard_outside[0], sharp = cm->guard_outside[1];
    if (!colour && !sharp) return 0;
    char a[128] = "", b[128] = "";
    if (colour) snprintf(a, sizeof a, "; the colour guard left %ld outside its band", colour);
    if (sharp) snprintf(b, sizeof b, "; the sharpness guard left %ld sharper than its top", sharp);
    snprintf(buf, len, "the drift guards could not hold every one of the %ld frames made (a frame whose pixels clip at "
             "black or white, or of one colour, cannot reach the colour band, and the colour's pass sharpens)%s%s", made,
             a, b);
    return 1;
}

int chain_noise_aug_unseen(const ChainModels *cm, double level, int given, char *buf, size_t len) {
    double seen = INFINITY, first = -1;
    char names[160] = "", maxes[160] = "";
    int n = 0, same = 1;
    for (int r = 0; r < 3; r++) {
        const Config *c = &cm->m[r]->cfg;
        int context = 0;
        for (int i = 0; i < c->slots; i++) context |= c->slot_kind[i] == SLOT_CONTEXT;
        if (!context || (r == ROLE_STARTER && given > 1) || level <= c->noise_aug_max) continue;
        size_t at = strlen(names), am = strlen(maxes);
        snprintf(names + at, sizeof names - at, "%s%s", n ? " and " : "", config_role_name(r));
        snprintf(maxes + am, sizeof maxes - am, "%s%g", n ? " and " : "", c->noise_aug_max);
        if (n && c->noise_aug_max != first) same = 0;
        if (!n) first = c->noise_aug_max;
        seen = fmin(seen, c->noise_aug_max), n++;
    }
    if (!n) return 0;
    if (same) snprintf(maxes, sizeof maxes, "%g", first);
    snprintf(buf, len, "noise augmentation %g: the %s model%s learnt context frames noised up to noise_aug_max = %s, so "
             "%s noisier ones than any %s trained on (--noise-aug %g keeps to what %s)", level, names,
             n > 1 ? "s" : "", maxes, n > 1 ? "they see" : "it sees", n > 1 ? "they were" : "it was", seen,
             n > 1 ? "they all saw" : "it saw");
    return 1;
}

// ----------------------------------------------------------------------------
// the frames held

// The frames a chain holds while it runs. A frame is handed on (to generate's output) once it and
// every frame before it are made, and its buffer goes back to the pool once it is handed on and no
// later window reads it: a long chain holds a few dozen frames, not all of them. Eval keeps every
// frame in its own array instead (backing). A dry store does the same bookkeeping without buffers,
// to count the frames held at most before anything is allocated.
typedef struct {
    const ChainPlan *p;
    size_t E;                 // values in a frame
    int *made, *last_read;    // chain_frame_use
    real **at;                // (last_frame + 1): each held frame's buffer
    real *backing;            // every frame in the caller's array (eval); NULL: buffers from the pool
    real *pool, **free_bufs;  // the pool's buffers and those free
    int n_free;
    int *held, n_held, peak;  // the frames held now, and the most held at once
    int next_emit;            // frames 0 .. next_emit - 1 have been handed on
    int hold_all;             // hand every frame on after the last window (a test hook: the unstreamed chain)
    int dry;
} FrameStore;

static void store_free(FrameStore *st) {
    free(st->made), free(st->last_read), free(st->at), free(st->held), free(st->pool), free(st->free_bufs);
    memset(st, 0, sizeof *st);
}

// The bookkeeping of plan p. Returns 0, or -1 with one line in err when memory runs out.
static int store_init(FrameStore *st, const ChainPlan *p, size_t E, real *backing, int dry, char *err,
                      size_t errlen) {
    memset(st, 0, sizeof *st);
    size_t n = (size_t)p->last_frame + 1;
    st->p = p, st->E = E, st->backing = backing, st->dry = dry;
    st->hold_all = fc_test_hook("HOLD_ALL_FRAMES") > 0;
    st->made = malloc(n * sizeof(int)), st->last_read = malloc(n * sizeof(int)), st->held = malloc(n * sizeof(int));
    st->at = calloc(n, sizeof(real *));
    if (!st->made || !st->last_read || !st->held || !st->at) {
        store_free(st);
        return fc_errf(err, errlen, "out of host memory for the bookkeeping of %d frames (%.0f MB): lower --frames",
                       p->frames, n * (3 * sizeof(int) + sizeof(real *)) / 1e6);
    }
    chain_frame_use(p, st->made, st->last_read);
    if (backing)
        for (size_t f = 0; f < n; f++) st->at[f] = backing + f * E;
    return 0;
}

// Buffers for `count` frames held at once, allocated before the first window so that memory runs out
// at the start if it does. Returns 0, or -1 with one line in err.
static int store_reserve(FrameStore *st, int count, int S, char *err, size_t errlen) {
    size_t bytes = (size_t)count * st->E * sizeof(real);
    st->pool = malloc(bytes ? bytes : 1), st->free_bufs = malloc(sizeof(real *) * (count ? count : 1));
    if (!st->pool || !st->free_bufs)
        return fc_errf(err, errlen, "out of host memory for the %d frames of %dx%d the chain holds at once (%.1f MB): "
                       "use models of a smaller frame size, or free memory", count, S, S, bytes / 1e6);
    for (int i = 0; i < count; i++) st->free_bufs[st->n_free++] = st->pool + (size_t)i * st->E;
    return 0;
}

// Frame f is held from now on, in a zeroed buffer (a pool's; the caller's array as it is with backing).
static int store_take(FrameStore *st, int f, char *err, size_t errlen) {
    st->held[st->n_held++] = f;
    if (st->n_held > st->peak) st->peak = st->n_held;
    if (st->dry || st->backing) return 0;
    if (!st->n_free) return fc_errf(err, errlen, "internal: frame %d finds the %d buffers held all in use", f, st->peak);
    st->at[f] = st->free_bufs[--st->n_free];
    memset(st->at[f], 0, sizeof(real) * st->E);
    return 0;
}

// After window k (-1: before the first): every frame now final, in order, handed to emit, and the
// buffers no later window reads given back. Returns 0, or -1 with emit's err.
static int store_settle(FrameStore *st, int k, ChainEmit emit, void *ctx, char *err, size_t errlen) {
    const ChainPlan *p = st->p;
    if (!st->hold_all || k == p->count - 1)
        for (; st->next_emit < p->frames && st->made[st->next_emit] <= k; st->next_emit++)
            if (!st->dry && emit && emit(ctx, st->next_emit, st->at[st->next_emit], err, errlen)) return -1;
    if (st->hold_all) return 0;
    for (int i = 0; i < st->n_held;) {
        int f = st->held[i];
        if ((f < st->next_emit || f >= p->frames) && st->last_read[f] <= k) {
            if (!st->dry && !st->backing) st->free_bufs[st->n_free++] = st->at[f], st->at[f] = NULL;
            st->held[i] = st->held[--st->n_held];
        } else {
            i++;
        }
    }
    return 0;
}

// The given frames held: those of 0..N-1 that no window makes. Returns their count.
static int store_take_given(FrameStore *st) {
    int given = 0;
    for (int f = 0; f < st->p->frames; f++)
        if (st->made[f] < 0) store_take(st, f, NULL, 0), given++;  // cannot fail: the pool is all free
    return given;
}

static int store_take_targets(FrameStore *st, const ChainWindow *w, char *err, size_t errlen) {
    for (int i = 0; i < w->slots; i++)
        if (w->kind[i] == SLOT_TARGET && store_take(st, w->frame[i], err, errlen)) return -1;
    return 0;
}

int chain_frames_held(const ChainPlan *p) {
    FrameStore st;
    char err[256];
    if (store_init(&st, p, 0, NULL, 1, err, sizeof err)) return -1;
    store_take_given(&st);
    store_settle(&st, -1, NULL, NULL, err, sizeof err);
    for (int k = 0; k < p->count; k++) {
        store_take_targets(&st, &p->w[k], err, sizeof err);
        store_settle(&st, k, NULL, NULL, err, sizeof err);
    }
    int peak = st.peak;
    store_free(&st);
    return peak;
}

// ----------------------------------------------------------------------------
// the chain

// Every window of plan p in order over the frames of st, with the progress line. Returns 0, or -1
// with one line in err (emit's).
static int run_windows(ChainModels *cm, const ChainPlan *p, FrameStore *st, const SampleOptions *o, ChainEmit emit,
                       void *ctx, char *err, size_t errlen) {
    size_t E = (size_t)cm->m[0]->E;
    int fmax = 0;
    for (int r = 0; r < 3; r++) fmax = cm->m[r]->F > fmax ? cm->m[r]->F : fmax;
    WindowBuffers wb;
    window_buffers_alloc(&wb, fmax, E, 1);
    double t0 = fc_now_s(), t_line = 0;
    int rc = 0, done = 0;  // frames of 0..N-1 made (or given)
    for (int f = 0; f < p->frames; f++) done += st->made[f] < 0;
    int last_given = 0;  // the given frames are 0..last_given
    while (last_given < p->last_frame && st->made[last_given + 1] < 0) last_given++;
    int tty = isatty(STDERR_FILENO);  // one updated line on a terminal, a line every 10 s in a log
    for (int k = 0; k < p->count && rc == 0; k++) {
        const ChainWindow *w = &p->w[k];
        if (store_take_targets(st, w, err, errlen)) {
            rc = -1;
            break;
        }
        real *const *at = st->at;
        size_t nonfinite = sample_windows(cm->m[w->role], &w, &k, &at, last_given, 0, o, &wb, cm->guard_outside);
        if (nonfinite) {
            rc = fc_errf(err, errlen, "window %d of %d: the %s model (step %d) made %zu NaN or infinite values: its "
                         "weights give no usable frames (a run whose loss blew up: use an earlier checkpoint, or "
                         "train it again with a lower lr)", k + 1, p->count, config_role_name(w->role),
                         cm->step[w->role], nonfinite);
            break;
        }
        for (int i = 0; i < w->slots; i++) done += w->keep[i];
        double el = fc_now_s() - t0;
        if (!o->quiet && (tty || el - t_line >= 10 || k == p->count - 1)) {
            char eta[32];
            fc_format_duration(eta, sizeof eta, el / (k + 1) * (p->count - k - 1));
            if (tty)
                fc_progress(stderr, "generate: %d/%d frames, window %d/%d (%s), %.2f s/window, ETA %s", done,
                            p->frames, k + 1, p->count, config_role_name(w->role), el / (k + 1), eta);
            else
                fprintf(stderr, "generate: %d/%d frames, window %d/%d (%s), %.2f s/window, ETA %s\n", done, p->frames,
                        k + 1, p->count, config_role_name(w->role), el / (k + 1), eta);
            fflush(stderr);
            t_line = el;
        }
        rc = store_settle(st, k, emit, ctx, err, errlen);
    }
    fc_progress_end();
    window_buffers_free(&wb);
    return rc;
}

int chain_sample_stream(ChainModels *cm, const ChainPlan *p, const real *first, int given, const SampleOptions *o,
                        ChainEmit emit, void *ctx, char *err, size_t errlen) {
    size_t E = (size_t)cm->m[0]->E;
    int held = chain_frames_held(p);
    FrameStore st;
    if (held < 0 || store_init(&st, p, E, NULL, 0, err, errlen))
        return held < 0 ? fc_errf(err, errlen, "out of host memory for the bookkeeping of %d frames: lower --frames",
                                  p->frames) : -1;
    int rc = store_reserve(&st, held, cm->size, err, errlen);
    if (rc == 0 && store_take_given(&st) != given)
        rc = fc_errf(err, errlen, "internal: %d frames given to a chain that starts from %d", given, st.n_held);
    for (int f = 0; f < given && rc == 0; f++) memcpy(st.at[f], first + (size_t)f * E, sizeof(real) * E);
    if (rc == 0) rc = store_settle(&st, -1, emit, ctx, err, errlen);
    if (rc == 0) rc = run_windows(cm, p, &st, o, emit, ctx, err, errlen);
    store_free(&st);
    return rc;
}

int chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o, char *err, size_t errlen) {
    FrameStore st;
    if (store_init(&st, p, (size_t)cm->m[0]->E, frames, 0, err, errlen)) return -1;
    store_take_given(&st);
    int rc = run_windows(cm, p, &st, o, NULL, NULL, err, errlen);  // without emit: only a model making NaN
    store_free(&st);
    return rc;
}
