// synthetic.c: moving shapes and camera pans as footage (see synthetic.h).
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/philox.h"
#include "video/video.h"
#include "dataset/moving_shapes.h"
#include "dataset/synthetic.h"

struct SyntheticSource {
    int pan;         // 0: moving shapes, 1: a pan
    int size, frames;
    uint32_t clip;   // shapes: the clip number
    uint8_t *world;  // pan: (2 size, 2 size, 3) the image
    double x0, y0, vx, vy;  // pan: the first crop's corner and its velocity, in pixels
    real *planes;    // shapes: (3, size, size) scratch
};

int synthetic_is_spec(const char *text) { return !strncmp(text, "shapes:", 7) || !strncmp(text, "pan:", 4); }

// The text after the last ':' of spec as a frame count in 1 .. SYNTHETIC_MAX_FRAMES; -1 otherwise.
static long frame_count(const char *spec) {
    const char *colon = strrchr(spec, ':');
    char *end;
    errno = 0;
    long n = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || end == colon + 1 || *end || errno || n < 1 || n > SYNTHETIC_MAX_FRAMES) return -1;
    return n;
}

// FNV-1a of the image's file name, so that a pan's direction does not depend on where the file is.
static uint64_t name_hash(const char *path, size_t len) {
    const char *p = path, *end = path + len;
    for (const char *q = path; q < end; q++)
        if (*q == '/') p = q + 1;
    uint64_t h = 1469598103934665603ull;
    for (; p < end; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

SyntheticSource *synthetic_open(const char *spec, int size, char *err, size_t errlen) {
    long n = frame_count(spec);
    if (n < 0) {
        fc_errf(err, errlen, "%s: expected shapes:K:FRAMES or pan:IMAGE:FRAMES, FRAMES from 1 to %d", spec,
                SYNTHETIC_MAX_FRAMES);
        return NULL;
    }
    SyntheticSource *s = fc_calloc(1, sizeof *s);
    s->size = size, s->frames = (int)n;
    const char *body = strchr(spec, ':') + 1, *last = strrchr(spec, ':');
    if (!strncmp(spec, "shapes:", 7)) {
        char *end;
        errno = 0;
        unsigned long k = strtoul(body, &end, 10);
        if (end == body || end != last || errno || k > 0xffffffffu) {
            fc_errf(err, errlen, "%s: expected shapes:K:FRAMES with K a clip number", spec);
            free(s);
            return NULL;
        }
        s->clip = (uint32_t)k;
        s->planes = fc_malloc(sizeof(real) * 3 * size * size);
        return s;
    }
    char path[4096];
    size_t len = (size_t)(last - body);
    if (len == 0 || len >= sizeof path) {
        fc_errf(err, errlen, "%s: expected pan:IMAGE:FRAMES", spec);
        free(s);
        return NULL;
    }
    memcpy(path, body, len), path[len] = 0;
    s->pan = 1;
    s->world = fc_malloc((size_t)4 * size * size * 3);
    if (image_load_square(path, 2 * size, s->world, err, errlen)) {
        free(s->world), free(s);
        return NULL;
    }
    uint64_t h = name_hash(body, len);
    double angle = 2 * M_PI * philox_uniform(h, 0, RNG_DATA, 0);
    s->x0 = size * philox_uniform(h, 0, RNG_DATA, 1), s->y0 = size * philox_uniform(h, 0, RNG_DATA, 2);
    s->vx = SYNTHETIC_PAN_SPEED * cos(angle), s->vy = SYNTHETIC_PAN_SPEED * sin(angle);
    return s;
}

int synthetic_frames(const SyntheticSource *s) { return s->frames; }

// p folded into [0, span] by reflection at both ends: the camera bounces off the image's edges.
static double bounce(double p, double span) {
    double m = fmod(p, 2 * span);
    if (m < 0) m += 2 * span;
    return m <= span ? m : 2 * span - m;
}

void synthetic_frame(const SyntheticSource *s, int index, uint8_t *rgb) {
    int S = s->size;
    if (!s->pan) {
        shapes_frame(s->planes, 3, S, 1, 0, s->clip, index);
        frame_to_rgb(rgb, s->planes, S);
        return;
    }
    // bilinear samples of the world at the crop's sub-pixel corner
    int W = 2 * S;
    double cx = bounce(s->x0 + s->vx * index, S - 1), cy = bounce(s->y0 + s->vy * index, S - 1);
    int ix = (int)cx, iy = (int)cy;
    double fx = cx - ix, fy = cy - iy;
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            const uint8_t *p = s->world + ((size_t)(iy + y) * W + ix + x) * 3;
            for (int c = 0; c < 3; c++) {
                const uint8_t *q = p + 3 * W;  // the row below
                double v = (1 - fy) * ((1 - fx) * p[c] + fx * p[3 + c]) + fy * ((1 - fx) * q[c] + fx * q[3 + c]);
                rgb[((size_t)y * S + x) * 3 + c] = (uint8_t)lrint(v);
            }
        }
}

void synthetic_close(SyntheticSource *s) {
    if (!s) return;
    free(s->world), free(s->planes), free(s);
}
