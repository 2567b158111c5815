// moving_shapes.c: the built-in moving-shapes dataset (see moving_shapes.h).
#include <math.h>
#include <string.h>

#include "base/philox.h"
#include "base/reflect.h"
#include "dataset/moving_shapes.h"

// A clip's random parameters: element k of the Philox stream (seed, step, RNG_DATA) at clip * 64 + k.
static double clip_uniform(uint64_t seed, uint32_t step, uint32_t clip, int k) {
    return philox_uniform(seed, step, RNG_DATA, (uint64_t)clip * 64 + (uint64_t)k);
}

// Position in [lo, hi] of a point moving at constant speed that bounces off both ends.
static double bounce(double x0, double speed, double time, double lo, double hi) {
    return lo + reflect_fold(x0 - lo + speed * time, hi - lo);
}

int shapes_at(Shape *sh, double *bg, int S, uint64_t seed, uint32_t step, uint32_t clip, double time) {
    int k = 0;
    for (int c = 0; c < 3; c++) bg[c] = 0.6 * clip_uniform(seed, step, clip, k++) - 0.8;  // darkish
    int nshapes = 1 + (int)(clip_uniform(seed, step, clip, k++) * SHAPES_MAX);
    if (nshapes > SHAPES_MAX) nshapes = SHAPES_MAX;
    for (int i = 0; i < nshapes; i++) {
        double r = S * (0.08 + 0.12 * clip_uniform(seed, step, clip, k++));
        double x0 = clip_uniform(seed, step, clip, k++) * S, y0 = clip_uniform(seed, step, clip, k++) * S;
        double angle = 6.283185307179586 * clip_uniform(seed, step, clip, k++);
        double speed = S * (0.01 + 0.04 * clip_uniform(seed, step, clip, k++));  // pixels per frame
        sh[i].x = bounce(x0, speed * cos(angle), time, r, S - r);
        sh[i].y = bounce(y0, speed * sin(angle), time, r, S - r);
        sh[i].r = r;
        sh[i].square = clip_uniform(seed, step, clip, k++) < 0.5;
        for (int c = 0; c < 3; c++) sh[i].colour[c] = 1.6 * clip_uniform(seed, step, clip, k++) - 0.6;  // brightish
    }
    return nshapes;
}

void shapes_frame(real *out, int C, int S, uint64_t seed, uint32_t step, uint32_t clip, double time) {
    double bg[3];
    Shape sh[SHAPES_MAX];
    int nshapes = shapes_at(sh, bg, S, seed, step, clip, time);
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            double px[3] = {bg[0], bg[1], bg[2]};
            for (int i = 0; i < nshapes; i++) {  // later shapes are drawn over earlier ones
                double dx = x + 0.5 - sh[i].x, dy = y + 0.5 - sh[i].y;
                int inside = sh[i].square ? fabs(dx) <= sh[i].r && fabs(dy) <= sh[i].r
                                          : dx * dx + dy * dy <= sh[i].r * sh[i].r;
                if (inside) memcpy(px, sh[i].colour, sizeof px);
            }
            for (int c = 0; c < C; c++) out[((size_t)c * S + y) * S + x] = (real)px[c % 3];
        }
}

void shapes_batch(real *out, const Config *c, int B, int b0, uint64_t seed, uint32_t step) {
    size_t frame = (size_t)c->channels * c->frame_size * c->frame_size;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int f = 0; f < c->slots; f++) {
            uint32_t clip = (uint32_t)(b0 + b);
            double start = 100 * clip_uniform(seed, step, clip, 63);
            shapes_frame(out + ((size_t)b * c->slots + f) * frame, c->channels, c->frame_size, seed, step, clip,
                         start + c->slot_offset[f]);
        }
}
