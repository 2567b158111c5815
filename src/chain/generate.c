// generate.c: the chain's sampling loop and `framechain generate` (see generate.h).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train/checkpoint.h"
#include "chain/generate.h"
#include "base/philox.h"
#include "dataset/moving_shapes.h"
#include "video/video.h"
#include "base/clock.h"


// ----------------------------------------------------------------------------
// frames

void frame_from_rgb(real *dst, const uint8_t *rgb, int S) {
    size_t plane = (size_t)S * S;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) dst[c * plane + i] = (real)(rgb[3 * i + c] / 127.5 - 1.0);
}

void frame_to_rgb(uint8_t *rgb, const real *src, int S) {
    size_t plane = (size_t)S * S;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            double v = (src[c * plane + i] + 1.0) * 127.5;
            rgb[3 * i + c] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : lrint(v));
        }
}

int load_first_frame(const char *path, int S, real *out, char *err, size_t errlen) {
    if (!strncmp(path, "shapes:", 7)) {  // the built-in moving-shapes clip of that number (demos, tests)
        char *end;
        unsigned long clip = strtoul(path + 7, &end, 10);
        if (*end || end == path + 7) {
            snprintf(err, errlen, "%s: expected shapes:NUMBER", path);
            return -1;
        }
        shapes_frame(out, 3, S, 1, 0, (uint32_t)clip, 0);
        return 0;
    }
    uint8_t *rgb = fc_malloc((size_t)S * S * 3);
    int rc = -1;
    if (is_image_path(path)) {
        rc = image_load_square_min(path, S, S, rgb, err, errlen);
    } else {
        VideoReader *v = video_open(path, err, errlen);
        if (v) {
            int w = video_width(v), h = video_height(v);
            if (w < S || h < S)
                snprintf(err, errlen, "%s: the video is %dx%d, smaller than the %dx%d frames it must fill", path, w, h,
                         S, S);
            else if ((rc = video_next_frame(v, S, rgb, NULL, err, errlen)) == 0)
                snprintf(err, errlen, "%s: the video has no frame", path);
            rc = rc == 1 ? 0 : -1;
            video_close(v);
        }
    }
    if (rc == 0) frame_from_rgb(out, rgb, S);
    free(rgb);
    return rc;
}

// ----------------------------------------------------------------------------
// the models

int chain_models_load(ChainModels *cm, const char *const runs[3], const Backend *be, char *err, size_t errlen) {
    memset(cm, 0, sizeof *cm);
    for (int r = 0; r < 3; r++) {
        char why[1024];
        cm->m[r] = checkpoint_load_for_generation(runs[r], be, 1, &cm->step[r], why, sizeof why);
        if (!cm->m[r]) {
            snprintf(err, errlen, "--%s %s", config_role_name(r), why);
            chain_models_free(cm);
            return -1;
        }
        const Config *c = &cm->m[r]->cfg;
        if (c->role != r) {
            snprintf(err, errlen, "--%s %s: that run trained a %s model (role = %s in its config)", config_role_name(r),
                     runs[r], config_role_name(c->role), config_role_name(c->role));
            chain_models_free(cm);
            return -1;
        }
        if (c->channels != 3) {
            snprintf(err, errlen, "--%s %s: the model makes %d-channel frames; generate writes RGB (3 channels)",
                     config_role_name(r), runs[r], c->channels);
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

// One window: targets from pure noise to t = 0 in o->steps Euler steps of the velocity the network
// predicts (v = e - x0, so x moves by -dt * v), the conditioning slots held fixed.
static void sample_window(Model *m, const ChainWindow *w, int index, real *frames, const SampleOptions *o,
                          real *x, real *pred) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    size_t E = (size_t)m->E;
    real t[MAX_SLOTS], off[MAX_SLOTS];
    double L = o->noise_aug;
    for (int i = 0; i < w->slots; i++) {
        real *xi = x + i * E;
        const real *src = frames + (size_t)w->frame[i] * E;
        off[i] = w->offset[i];
        if (c->slot_kind[i] == SLOT_TARGET) {
            philox_fill_normal(xi, E, 0, 1, o->seed, (uint32_t)index, RNG_NOISE, i * E);
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
    be->upload(m->in.offset, off, sizeof(real) * w->slots);
    for (int k = 0; k < o->steps; k++) {
        double t_now = 1.0 - (double)k / o->steps, t_next = 1.0 - (double)(k + 1) / o->steps;
        for (int i = 0; i < w->slots; i++)
            if (c->slot_kind[i] == SLOT_TARGET) t[i] = (real)t_now;
        be->upload(m->in.t, t, sizeof(real) * w->slots);
        be->upload(m->in.xt, x, sizeof(real) * w->slots * E);
        model_forward(m);
        be->download(pred, m->a.pred, sizeof(real) * w->slots * E);
        double dt = t_now - t_next;
        for (int i = 0; i < w->slots; i++)
            if (c->slot_kind[i] == SLOT_TARGET)
                for (size_t e = 0; e < E; e++) x[i * E + e] -= (real)(dt * pred[i * E + e]);
    }
    for (int i = 0; i < w->slots; i++)
        if (c->slot_kind[i] == SLOT_TARGET) {
            real *dst = frames + (size_t)w->frame[i] * E;
            for (size_t e = 0; e < E; e++) {
                real v = x[i * E + e];
                dst[e] = v < -1 ? -1 : v > 1 ? 1 : v;
            }
        }
}

void chain_sample(ChainModels *cm, const ChainPlan *p, real *frames, const SampleOptions *o) {
    size_t E = (size_t)cm->m[0]->E;
    int fmax = 0;
    for (int r = 0; r < 3; r++) fmax = cm->m[r]->F > fmax ? cm->m[r]->F : fmax;
    real *x = fc_malloc(sizeof(real) * fmax * E), *pred = fc_malloc(sizeof(real) * fmax * E);
    double t0 = fc_now_s(), t_line = 0;
    int done = 1;  // frames of 0..N-1 made (frame 0 is given)
    int tty = isatty(STDERR_FILENO);  // one updated line on a terminal, a line every 10 s in a log
    for (int k = 0; k < p->count; k++) {
        const ChainWindow *w = &p->w[k];
        sample_window(cm->m[w->role], w, k, frames, o, x, pred);
        for (int i = 0; i < w->slots; i++) done += w->keep[i];
        double el = fc_now_s() - t0;
        if (!o->quiet && (tty || el - t_line >= 10 || k == p->count - 1)) {
            char eta[32];
            fc_format_duration(eta, sizeof eta, el / (k + 1) * (p->count - k - 1));
            fprintf(stderr, "%sgenerate: %d/%d frames, window %d/%d (%s), %.2f s/window, ETA %s%s", tty ? "\r" : "", done,
                    p->frames, k + 1, p->count, config_role_name(w->role), el / (k + 1), eta, tty ? "   " : "\n");
            fflush(stderr);
            t_line = el;
        }
    }
    if (!o->quiet && tty) fprintf(stderr, "\n");
    free(x), free(pred);
}

// ----------------------------------------------------------------------------
// output: a video, or a folder of PNGs; written under a temporary name and renamed when whole

static int is_video_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    const char *ext[] = {".mp4", ".m4v", ".mov", ".mkv", ".avi", ".gif"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int write_output(const char *out, const real *frames, int N, int S, double fps, char *err, size_t errlen) {
    char tmp[4200];
    uint8_t *rgb = fc_malloc((size_t)S * S * 3);
    int rc = 0;
    if (is_video_path(out)) {
        // the temporary name keeps the extension: it picks the container
        const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
        snprintf(tmp, sizeof tmp, "%.*s.partial-%d-%s", (int)(base - out), out, (int)getpid(), base);
        VideoWriter *vw = video_writer_open(tmp, S, S, fps, err, errlen);
        if (!vw) rc = -1;
        for (int f = 0; f < N && rc == 0; f++) {
            frame_to_rgb(rgb, frames + (size_t)f * 3 * S * S, S);
            rc = video_writer_add(vw, rgb, err, errlen);
        }
        char close_err[512];
        if (vw && video_writer_close(vw, close_err, sizeof close_err) && rc == 0) {
            snprintf(err, errlen, "%s", close_err);
            rc = -1;
        }
        if (rc == 0 && rename(tmp, out)) {
            snprintf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
            rc = -1;
        }
        if (rc) unlink(tmp);
    } else {
        struct stat sb;
        if (!stat(out, &sb)) {
            snprintf(err, errlen, "%s: already exists; give a new folder name for the PNG frames (or a .mp4/.gif path)",
                     out);
            free(rgb);
            return -1;
        }
        snprintf(tmp, sizeof tmp, "%s.partial-%d", out, (int)getpid());
        if (mkdir(tmp, 0777)) {
            snprintf(err, errlen, "%s: cannot create the folder: %s", tmp, strerror(errno));
            free(rgb);
            return -1;
        }
        for (int f = 0; f < N && rc == 0; f++) {
            char name[4300];
            snprintf(name, sizeof name, "%s/frame-%06d.png", tmp, f);
            frame_to_rgb(rgb, frames + (size_t)f * 3 * S * S, S);
            if (image_write_png(name, S, S, rgb)) {
                snprintf(err, errlen, "%s: cannot write: %s", name, strerror(errno));
                rc = -1;
            }
        }
        if (rc == 0 && rename(tmp, out)) {
            snprintf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
            rc = -1;
        }
        if (rc) {  // leave nothing half-written
            for (int f = 0; f < N; f++) {
                char name[4300];
                snprintf(name, sizeof name, "%s/frame-%06d.png", tmp, f);
                unlink(name);
            }
            rmdir(tmp);
        }
    }
    free(rgb);
    return rc;
}

int generate_cli(const char *const runs[3], const char *first_frame, int frames, const char *out, double fps,
                 const SampleOptions *o, const Backend *be) {
    char err[2048];
    ChainModels cm;
    if (chain_models_load(&cm, runs, be, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        return 1;
    }
    ChainPlan plan;
    if (chain_build(&plan, &cm.m[0]->cfg, &cm.m[1]->cfg, &cm.m[2]->cfg, frames, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        chain_models_free(&cm);
        return 1;
    }
    int S = cm.size;
    size_t E = (size_t)3 * S * S;
    real *video = fc_calloc((size_t)plan.last_frame + 1, sizeof(real) * E);
    int rc = 0;
    if (load_first_frame(first_frame, S, video, err, sizeof err)) {
        fprintf(stderr, "framechain: %s\n", err);
        rc = 1;
    } else {
        printf("generate: %d frames of %dx%d on %s: %d windows (starter step %d, extrapolate step %d, interpolate "
               "step %d), %d Euler steps, noise augmentation %.3g\n",
               frames, S, S, be->name, plan.count, cm.step[0], cm.step[1], cm.step[2], o->steps, o->noise_aug);
        fflush(stdout);
        double t0 = fc_now_s();
        chain_sample(&cm, &plan, video, o);
        if (write_output(out, video, frames, S, fps, err, sizeof err)) {
            fprintf(stderr, "framechain: %s\n", err);
            rc = 1;
        } else {
            printf("generate: wrote %s (%d frames, %.2f s)\n", out, frames, fc_now_s() - t0);
        }
    }
    free(video);
    chain_free(&plan);
    chain_models_free(&cm);
    return rc;
}
