// synthetic.c: moving shapes, camera pans and zooms as footage (see synthetic.h).
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"
#include "base/philox.h"
#include "base/reflect.h"
#include "video/video.h"
#include "dataset/moving_shapes.h"
#include "dataset/synthetic.h"

enum { SHAPES, PAN, ZOOM };

struct SyntheticSource {
    int kind;        // SHAPES, PAN or ZOOM
    int size, frames;
    int image_side;  // pan, zoom: the image's shorter side in its own pixels (0: shapes)
    uint32_t clip;   // shapes: the clip number
    uint8_t *world;  // pan, zoom: (2 size, 2 size, 3) the image
    uint8_t *half;   // zoom: (size, size, 3) the image at half its size (2x2 means), for the wide crops
    double x0, y0, vx, vy;  // pan: the first crop's corner and its velocity, in pixels
    double u0, du, fx, fy;  // zoom: the first crop's log side over size, its change a frame, the focus
    real *planes;    // shapes: (3, size, size) scratch
};

int synthetic_is_spec(const char *text) {
    return !strncmp(text, "shapes:", 7) || !strncmp(text, "pan:", 4) || !strncmp(text, "zoom:", 5);
}

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

// A shapes spec's clip number K (shapes:K:FRAMES): 0 with *clip, else -1.
static int shapes_clip(const char *spec, uint32_t *clip) {
    const char *body = spec + 7, *last = strrchr(spec, ':');
    char *end;
    errno = 0;
    unsigned long k = strtoul(body, &end, 10);
    if (end == body || end != last || errno || k > 0xffffffffu || *body < '0' || *body > '9') return -1;
    *clip = (uint32_t)k;
    return 0;
}

int synthetic_check_spec(const char *spec, char *err, size_t errlen) {
    if (frame_count(spec) < 0)
        return fc_errf(err, errlen, "%s: expected shapes:K:FRAMES, pan:IMAGE:FRAMES or zoom:IMAGE:FRAMES, FRAMES from "
                       "1 to %d", spec, SYNTHETIC_MAX_FRAMES);
    uint32_t clip;
    if (!strncmp(spec, "shapes:", 7)) {
        if (shapes_clip(spec, &clip)) return fc_errf(err, errlen, "%s: expected shapes:K:FRAMES with K a clip number", spec);
        return 0;
    }
    const char *body = strchr(spec, ':') + 1;
    size_t len = (size_t)(strrchr(spec, ':') - body);
    if (len == 0 || len >= 4096)
        return fc_errf(err, errlen, "%s: expected %s:IMAGE:FRAMES", spec, strncmp(spec, "zoom:", 5) ? "pan" : "zoom");
    return 0;
}

// The IMAGE of a pan:IMAGE:N or zoom:IMAGE:N spec into path (cap bytes): its length, or -1.
static long spec_image(const char *spec, char *path, size_t cap) {
    const char *body = strchr(spec, ':') + 1;
    size_t len = (size_t)(strrchr(spec, ':') - body);
    if (len == 0 || len >= cap) return -1;
    memcpy(path, body, len), path[len] = 0;
    return (long)len;
}

int synthetic_same(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    long frames = frame_count(a);
    if (frames < 0 || frame_count(b) != frames) return 0;
    int shapes_a = !strncmp(a, "shapes:", 7), shapes_b = !strncmp(b, "shapes:", 7);
    uint32_t ca, cb;
    if (shapes_a || shapes_b) return shapes_a && shapes_b && !shapes_clip(a, &ca) && !shapes_clip(b, &cb) && ca == cb;
    if (strncmp(a, b, 4)) return 0;  // a pan against a zoom
    // pan:/zoom: the same image file under the same file name (the motion is a function of the name)
    char pa[4096], pb[4096];
    long la = spec_image(a, pa, sizeof pa), lb = spec_image(b, pb, sizeof pb);
    struct stat sa, sb;
    return la > 0 && lb > 0 && !stat(pa, &sa) && !stat(pb, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino &&
           name_hash(pa, (size_t)la) == name_hash(pb, (size_t)lb);
}

SyntheticSource *synthetic_open(const char *spec, int size, char *err, size_t errlen) {
    if (synthetic_check_spec(spec, err, errlen)) return NULL;
    SyntheticSource *s = fc_calloc(1, sizeof *s);
    s->size = size, s->frames = (int)frame_count(spec);
    if (!strncmp(spec, "shapes:", 7)) {
        shapes_clip(spec, &s->clip);
        s->planes = fc_malloc(sizeof(real) * 3 * size * size);
        return s;
    }
    char path[4096];
    size_t len = (size_t)spec_image(spec, path, sizeof path);  // (its length checked above)
    int zoom = !strncmp(spec, "zoom:", 5);
    s->kind = zoom ? ZOOM : PAN;
    s->world = fc_malloc((size_t)4 * size * size * 3);
    int iw, ih;
    if (image_load_square_size(path, 2 * size, s->world, &iw, &ih, err, errlen)) {
        free(s->world), free(s);
        return NULL;
    }
    s->image_side = iw < ih ? iw : ih;
    uint64_t h = name_hash(path, len);
    if (zoom) {
        // the crop's side is size e^u, u bouncing in [0, ln 2]: a point half the frame from the focus
        // (the point of the image that stays where it is on the screen) moves SYNTHETIC_ZOOM_SPEED
        // pixels a frame; the focus, the first side and the direction are pure functions of IMAGE's name
        s->u0 = M_LN2 * philox_uniform(h, 0, RNG_DATA, 0);
        s->du = SYNTHETIC_ZOOM_SPEED / (size / 2.0) * (philox_uniform(h, 0, RNG_DATA, 3) < 0.5 ? -1 : 1);
        s->fx = philox_uniform(h, 0, RNG_DATA, 1), s->fy = philox_uniform(h, 0, RNG_DATA, 2);
        s->half = fc_malloc((size_t)size * size * 3);
        int W = 2 * size;
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++)
                for (int c = 0; c < 3; c++) {
                    const uint8_t *p = s->world + ((size_t)(2 * y) * W + 2 * x) * 3 + c;
                    int sum = p[0] + p[3] + p[3 * W] + p[3 * W + 3];
                    s->half[((size_t)y * size + x) * 3 + c] = (uint8_t)((sum + 2) / 4);
                }
        return s;
    }
    double angle = 2 * M_PI * philox_uniform(h, 0, RNG_DATA, 0);
    s->x0 = size * philox_uniform(h, 0, RNG_DATA, 1), s->y0 = size * philox_uniform(h, 0, RNG_DATA, 2);
    s->vx = SYNTHETIC_PAN_SPEED * cos(angle), s->vy = SYNTHETIC_PAN_SPEED * sin(angle);
    return s;
}

int synthetic_frames(const SyntheticSource *s) { return s->frames; }
int synthetic_image_side(const SyntheticSource *s) { return s->image_side; }

// Channel c of an (n, n, 3) image at (fy, fx), bilinear; the coordinates inside [0, n - 1].
static double sample_rgb(const uint8_t *img, int n, double fy, double fx, int c) {
    int y0 = (int)fy, x0 = (int)fx;
    int y1 = y0 + 1 < n ? y0 + 1 : y0, x1 = x0 + 1 < n ? x0 + 1 : x0;
    double wy = fy - y0, wx = fx - x0;
    const uint8_t *r0 = img + (size_t)y0 * n * 3, *r1 = img + (size_t)y1 * n * 3;
    double top = (1 - wx) * r0[3 * x0 + c] + wx * r0[3 * x1 + c];
    double bottom = (1 - wx) * r1[3 * x0 + c] + wx * r1[3 * x1 + c];
    return (1 - wy) * top + wy * bottom;
}

// A zoom's frame: a crop of side k size (k = e^u in [1, 2]) whose corner is the focus's share of the
// room left, (2 size - k size) (fx, fy), sampled at the pixels' centres from the image and from its
// half-size copy, blended by log2 k (a wide crop reads the copy, which has no aliasing at 2:1).
static void zoom_frame(const SyntheticSource *s, int index, uint8_t *rgb) {
    int S = s->size;
    double u = reflect_fold(s->u0 + s->du * index, M_LN2), k = exp(u), blend = u / M_LN2;
    double cx = (2.0 * S - k * S) * s->fx, cy = (2.0 * S - k * S) * s->fy;
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            double wy = cy + (y + 0.5) * k, wx = cx + (x + 0.5) * k;  // in the image's units, edges at 0, 2S
            double fy0 = fmin(fmax(wy - 0.5, 0), 2 * S - 1), fx0 = fmin(fmax(wx - 0.5, 0), 2 * S - 1);
            double fy1 = fmin(fmax(wy / 2 - 0.5, 0), S - 1), fx1 = fmin(fmax(wx / 2 - 0.5, 0), S - 1);
            for (int c = 0; c < 3; c++) {
                double v = (1 - blend) * sample_rgb(s->world, 2 * S, fy0, fx0, c) +
                           blend * sample_rgb(s->half, S, fy1, fx1, c);
                rgb[((size_t)y * S + x) * 3 + c] = (uint8_t)lrint(v);
            }
        }
}

void synthetic_frame(const SyntheticSource *s, int index, uint8_t *rgb) {
    int S = s->size;
    if (s->kind == SHAPES) {
        shapes_frame(s->planes, 3, S, 1, 0, s->clip, index);
        frame_to_rgb(rgb, s->planes, S);
        return;
    }
    if (s->kind == ZOOM) {
        zoom_frame(s, index, rgb);
        return;
    }
    // bilinear samples of the world at the crop's sub-pixel corner, which bounces off the image's edges
    int W = 2 * S;
    double cx = reflect_fold(s->x0 + s->vx * index, S - 1), cy = reflect_fold(s->y0 + s->vy * index, S - 1);
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
    free(s->world), free(s->half), free(s->planes), free(s);
}
