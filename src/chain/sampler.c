// sampler.c: the three models, one window's Euler steps and the chain's loop (see sampler.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "base/clock.h"
#include "base/philox.h"
#include "video/video.h"
#include "dataset/moving_shapes.h"
#include "train/checkpoint.h"
#include "model/flow.h"
#include "chain/sampler.h"

// ----------------------------------------------------------------------------
// the first frame

// The first K frames of a video, which must be at least S x S. Returns 0, or -1 with one line in err.
static int load_video_frames(const char *path, int S, int K, uint8_t *rgb, char *err, size_t errlen) {
    VideoReader *v = video_open(path, err, errlen);
    if (!v) return -1;
    int rc = 0, w = video_width(v), h = video_height(v);
    if (w < S || h < S)
        rc = fc_errf(err, errlen, "%s: the video is %dx%d, smaller than the %dx%d frames it must fill", path, w, h, S, S);
    for (int k = 0; k < K && rc == 0; k++) {
        int got = video_next_frame(v, S, rgb + (size_t)k * S * S * 3, NULL, err, errlen);
        if (got == 0 && k == 0) rc = fc_errf(err, errlen, "%s: the video has no frame", path);
        else if (got == 0) rc = fc_errf(err, errlen, "%s: the video has %d frames, fewer than the %d given", path, k, K);
        else if (got < 0) rc = -1;
    }
    video_close(v);
    return rc;
}

int load_first_frames(const char *path, int S, int K, real *out, char *err, size_t errlen) {
    size_t E = (size_t)3 * S * S;
    if (!strncmp(path, "shapes:", 7)) {  // the built-in moving-shapes clip of that number (demos, tests)
        char *end;
        unsigned long clip = strtoul(path + 7, &end, 10);
        if (*end || end == path + 7) return fc_errf(err, errlen, "%s: expected shapes:NUMBER", path);
        for (int k = 0; k < K; k++) shapes_frame(out + k * E, 3, S, 1, 0, (uint32_t)clip, k);
        return 0;
    }
    if (K > 1 && is_image_path(path))
        return fc_errf(err, errlen, "%s: an image is one frame; %d given frames need a video", path, K);
    uint8_t *rgb = fc_malloc((size_t)K * S * S * 3);
    int rc = is_image_path(path) ? image_load_square_min(path, S, S, rgb, err, errlen)
                                 : load_video_frames(path, S, K, rgb, err, errlen);
    for (int k = 0; k < K && rc == 0; k++) frame_from_rgb(out + k * E, rgb + (size_t)k * S * S * 3, S);
    free(rgb);
    return rc;
}

// ----------------------------------------------------------------------------
// the models

// Whether the model loaded from run can serve as role r. Returns 0, or -1 with one line in err.
static int check_role(const Model *m, int r, const char *run, char *err, size_t errlen) {
    const Config *c = &m->cfg;
    if (c->role != r)
        return fc_errf(err, errlen, "--%s %s: that run trained a %s model (role = %s in its config)",
                       config_role_name(r), run, config_role_name(c->role), config_role_name(c->role));
    if (c->channels != 3)
        return fc_errf(err, errlen, "--%s %s: the model makes %d-channel frames; generate writes RGB (3 channels)",
                       config_role_name(r), run, c->channels);
    return 0;
}

int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen) {
    memset(cm, 0, sizeof *cm);
    for (int r = 0; r < 3; r++) {
        char why[1024];
        cm->m[r] = checkpoint_load_for_generation(runs[r], be, 1, &cm->step[r], why, sizeof why);
        if (!cm->m[r]) fc_errf(err, errlen, "--%s %s", config_role_name(r), why);
        if (!cm->m[r] || check_role(cm->m[r], r, runs[r], err, errlen)) {
            chain_models_free(cm);
            return -1;
        }
    }
    cm->size = cm->m[0]->cfg.frame_size, cm->channels = 3;
    return 0;
}

void chain_models_free(ChainModels *cm) {
    for (int r = 0; r < 3; r++)
        if (cm->m[r]) free_model(cm->m[r]);
    memset(cm, 0, sizeof *cm);
}

// ----------------------------------------------------------------------------
// sampling

// A window's starting point: targets pure noise at t = 1, context frames noised to the fixed level,
// the anchor (and context without augmentation) clean. Fills x, t and off for every slot.
static void window_start(const Model *m, const ChainWindow *w, int index, const real *frames,
                         const SampleOptions *o, real *x, real *t, real *off) {
    const Config *c = &m->cfg;
    size_t E = (size_t)m->E;
    double L = o->noise_aug;
    for (int i = 0; i < w->slots; i++) {
        real *xi = x + i * E;
        const real *src = frames + (size_t)w->frame[i] * E;
        off[i] = w->offset[i];
        if (c->slot_kind[i] == SLOT_TARGET) {
            philox_fill_normal(xi, E, 0, (real)o->temperature, o->seed, (uint32_t)index, RNG_NOISE, i * E);
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

// The network's velocity for the window x at levels t, into pred (F, E).
static void predict(Model *m, const real *x, const real *t, real *pred) {
    const Backend *be = m->be;
    be->upload(m->in.t, t, sizeof(real) * m->F);
    be->upload(m->in.xt, x, sizeof(real) * m->F * m->E);
    model_forward(m);
    be->download(pred, m->a.pred, sizeof(real) * m->F * m->E);
}

// Sampling scratch: the window, the prediction, and guidance's unconditional window and prediction.
typedef struct {
    real *x, *pred, *xu, *pred_u;  // (F, E) each, F the largest window
    real *reference;               // (F, E): the delta targets' reference frames
} WindowBuffers;

// One window: targets from pure noise to t = 0 in o->steps (or the model's sample_steps) Euler steps of the velocity the network
// predicts (v = e - x0, so x moves by -dt * v), the conditioning slots held fixed. With guidance w
// != 1, v = v_u + w (v_c - v_u), v_u predicted with the given frames dropped. A model trained on
// deltas makes each target as its reference frame plus the sampled delta / delta_scale.
static void sample_window(Model *m, const ChainWindow *w, int index, real *frames, const SampleOptions *o,
                          WindowBuffers *wb) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    size_t E = (size_t)m->E;
    real t[MAX_SLOTS], tu[MAX_SLOTS], off[MAX_SLOTS];
    real *x = wb->x, *pred = wb->pred;
    window_start(m, w, index, frames, o, x, t, off);
    be->upload(m->in.offset, off, sizeof(real) * w->slots);
    int guided = o->guidance != 1.0, steps = o->steps ? o->steps : c->sample_steps;
    for (int k = 0; k < steps; k++) {
        double t_now = 1.0 - (double)k / steps, t_next = 1.0 - (double)(k + 1) / steps;
        for (int i = 0; i < w->slots; i++)
            if (c->slot_kind[i] == SLOT_TARGET) t[i] = (real)t_now;
        predict(m, x, t, pred);
        if (guided) {
            drop_given(m, index, o, x, t, wb->xu, tu);
            predict(m, wb->xu, tu, wb->pred_u);
            for (size_t e = 0; e < (size_t)w->slots * E; e++)
                pred[e] = (real)(wb->pred_u[e] + o->guidance * (pred[e] - wb->pred_u[e]));
        }
        double dt = t_now - t_next;
        for (int i = 0; i < w->slots; i++)
            if (c->slot_kind[i] == SLOT_TARGET)
                for (size_t e = 0; e < E; e++) x[i * E + e] -= (real)(dt * pred[i * E + e]);
    }
    if (c->targets == TARGETS_DELTAS) {
        const real *given[MAX_SLOTS];  // the window's given frames as the chain has them
        for (int i = 0; i < w->slots; i++) given[i] = frames + (size_t)w->frame[i] * E;
        flow_references(c, given, w->offset, wb->reference);
    }
    for (int i = 0; i < w->slots; i++)
        if (c->slot_kind[i] == SLOT_TARGET) {
            real *dst = frames + (size_t)w->frame[i] * E, *xi = x + i * E;
            if (c->targets == TARGETS_DELTAS) flow_delta_to_frame(c, xi, xi, wb->reference + i * E, E);
            for (size_t e = 0; e < E; e++) dst[e] = xi[e] < -1 ? -1 : xi[e] > 1 ? 1 : xi[e];
        }
}

void chain_describe_steps(const ChainModels *cm, int steps, char *buf, size_t len) {
    int s[3];
    for (int r = 0; r < 3; r++) s[r] = steps ? steps : cm->m[r]->cfg.sample_steps;
    if (s[0] == s[1] && s[1] == s[2]) snprintf(buf, len, "%d Euler steps", s[0]);
    else snprintf(buf, len, "Euler steps %d / %d / %d (starter / extrapolate / interpolate)", s[0], s[1], s[2]);
}

int chain_check_guidance(const ChainModels *cm, double guidance, char *err, size_t errlen) {
    if (guidance == 1.0) return 0;
    for (int r = 0; r < 3; r++)
        if (cm->m[r]->cfg.cond_drop <= 0)
            return fc_errf(err, errlen, "--guidance %g: the %s model was trained with cond_drop = 0, so it has no "
                           "unconditional half to guide with (train with --set cond_drop=0.1)", guidance,
                           config_role_name(r));
    return 0;
}

void chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o) {
    size_t E = (size_t)cm->m[0]->E;
    int fmax = 0;
    for (int r = 0; r < 3; r++) fmax = cm->m[r]->F > fmax ? cm->m[r]->F : fmax;
    size_t bytes = sizeof(real) * fmax * E;
    WindowBuffers wb = {fc_malloc(bytes), fc_malloc(bytes), fc_malloc(bytes), fc_malloc(bytes), fc_malloc(bytes)};
    double t0 = fc_now_s(), t_line = 0;
    int done = 1;  // frames of 0..N-1 made (frame 0 is given)
    int tty = isatty(STDERR_FILENO);  // one updated line on a terminal, a line every 10 s in a log
    for (int k = 0; k < p->count; k++) {
        const ChainWindow *w = &p->w[k];
        sample_window(cm->m[w->role], w, k, frames, o, &wb);
        for (int i = 0; i < w->slots; i++) done += w->keep[i];
        double el = fc_now_s() - t0;
        if (!o->quiet && (tty || el - t_line >= 10 || k == p->count - 1)) {
            char eta[32];
            fc_format_duration(eta, sizeof eta, el / (k + 1) * (p->count - k - 1));
            fprintf(stderr, "%sgenerate: %d/%d frames, window %d/%d (%s), %.2f s/window, ETA %s%s", tty ? "\r" : "",
                    done, p->frames, k + 1, p->count, config_role_name(w->role), el / (k + 1), eta, tty ? "   " : "\n");
            fflush(stderr);
            t_line = el;
        }
    }
    if (!o->quiet && tty) fprintf(stderr, "\n");
    free(wb.x), free(wb.pred), free(wb.xu), free(wb.pred_u), free(wb.reference);
}
