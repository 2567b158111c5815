// test_references.c: the frames delta targets are taken from (src/model/flow.c's flow_references, with
// src/model/global_motion.c and src/model/object_motion.c): the global motion of a pan and of a zoom,
// tiles that move on their own, objects over a flat background (and each of their rules on its own),
// anchor_snap, reference_fill and reference_fill_from. Each reference is checked against the window it was made for: a pan's or a zoom's
// deltas all but vanish where the nearest frame's do not.
#include <math.h>
#include <string.h>

#include "check.h"
#include "base/config.h"
#include "base/philox.h"
#include "model/flow.h"
#include "model/global_motion.h"
#include "base/reflect.h"
#include "model/object_motion.h"

// A (C, N, N) texture: a sum of waves of random direction, frequency and phase per channel.
static void make_texture(real *out, int C, int N, uint64_t seed) {
    for (int ch = 0; ch < C; ch++) {
        double fx[6], fy[6], ph[6];
        for (int k = 0; k < 6; k++) {
            uint64_t at = ((uint64_t)ch * 6 + k) * 3;
            double angle = 6.2832 * philox_uniform(seed, 0, RNG_TEST, at), freq = 0.3 + 0.9 * philox_uniform(seed, 0, RNG_TEST, at + 1);
            fx[k] = freq * cos(angle), fy[k] = freq * sin(angle), ph[k] = 6.2832 * philox_uniform(seed, 0, RNG_TEST, at + 2);
        }
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                double v = 0;
                for (int k = 0; k < 6; k++) v += sin(fx[k] * x + fy[k] * y + ph[k]) / 6;
                out[((size_t)ch * N + y) * N + x] = (real)v;
            }
    }
}

static double rms(const real *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s / n);
}

// delta_reference = moved: the global motion found, a still or noisy scene left still, and a pan's
// deltas reduced to what the pan brings into view.
static void test_global_motion(void) {
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N;
    real *tex = fc_malloc(sizeof(real) * E), *moved = fc_malloc(sizeof(real) * E), *noisy = fc_malloc(sizeof(real) * E);
    make_texture(tex, C, N, 21);
    double shifts[3][2] = {{1.5, -0.75}, {-2.25, 0.5}, {0.4375, 3.0}}, worst = 0, dx, dy;
    for (int k = 0; k < 3; k++) {
        motion_shift(moved, tex, C, N, shifts[k][0], shifts[k][1]);
        motion_estimate(tex, moved, C, N, &dx, &dy);
        worst = worse(worst, worse(fabs(dx - shifts[k][0]), fabs(dy - shifts[k][1])));
    }
    check(worst < 1.0 / 32, "motion_estimate_shifts", "three shifts up to 3 pixels found within %.4f pixel", worst);
    double sx, sy;
    motion_estimate(tex, tex, C, N, &dx, &dy);
    // two noisy takes of a still scene: a fractional shift would smooth the noise away, not move it
    philox_fill_normal(noisy, E, 0, 0.1, 22, 0, RNG_TEST, 0);
    philox_fill_normal(moved, E, 0, 0.1, 23, 0, RNG_TEST, 0);
    for (size_t e = 0; e < E; e++) noisy[e] += tex[e], moved[e] += tex[e];
    motion_estimate(moved, noisy, C, N, &sx, &sy);
    check(dx == 0 && dy == 0 && sx == 0 && sy == 0, "motion_estimate_still",
          "the same frame: (%g, %g); two takes with noise of std 0.1: (%g, %g); both (0, 0)", dx, dy, sx, sy);

    // An extrapolate window of a pan at (0.3, -0.2) pixel a frame: frame at offset o = tex moved by o v.
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/small/extrapolate.conf");  // anchor:-12 context:-8 -4 0 target:4 8 12
    c.delta_scale = 1, c.anchor_snap = 0;
    real *win = fc_malloc(sizeof(real) * c.slots * E), *near = fc_malloc(sizeof(real) * c.slots * E);
    for (int f = 0; f < c.slots; f++) motion_shift(win + f * E, tex, C, N, 0.3 * c.slot_offset[f], -0.2 * c.slot_offset[f]);
    memcpy(near, win, sizeof(real) * c.slots * E);
    c.delta_reference = DELTA_REF_NEAREST;
    flow_delta_targets(&c, 1, near);
    real *mov = fc_malloc(sizeof(real) * c.slots * E), *refs = fc_malloc(sizeof(real) * c.slots * E);
    real *back = fc_malloc(sizeof(real) * E);
    memcpy(mov, win, sizeof(real) * c.slots * E);
    c.delta_reference = DELTA_REF_MOVED;
    flow_delta_targets(&c, 1, mov);
    // the interior: what the pan has not yet brought into view from outside the frame
    double r_near = 0, r_mov = 0, inverse = 0;
    const real *given[MAX_SLOTS];
    for (int f = 0; f < c.slots; f++) given[f] = win + f * E;
    flow_references(&c, given, c.slot_offset, refs);
    for (int f = 0; f < c.slots; f++) {
        if (c.slot_kind[f] != SLOT_TARGET) continue;
        real in_near[C * 16 * 16], in_mov[C * 16 * 16];
        int k = 0;
        for (int ch = 0; ch < C; ch++)
            for (int y = 8; y < 24; y++)
                for (int x = 8; x < 24; x++, k++) {
                    size_t at = f * E + ((size_t)ch * N + y) * N + x;
                    in_near[k] = near[at], in_mov[k] = mov[at];
                }
        r_near = fmax(r_near, rms(in_near, k)), r_mov = fmax(r_mov, rms(in_mov, k));
        flow_delta_to_frame(&c, back, mov + f * E, refs + f * E, E);
        for (size_t e = 0; e < E; e++) inverse = fmax(inverse, fabs(back[e] - win[f * E + e]));
    }
    check(r_mov < 0.1 * r_near && inverse < 1e-6, "delta_reference_moved",
          "a pan's deltas in the frame's middle: rms %.4f moved against %.4f from the nearest frame; the "
          "sampler's inverse within %.1e", r_mov, r_near, inverse);
    free(tex), free(moved), free(noisy), free(win), free(near), free(mov), free(refs), free(back);
}

// A zoom found (its scale to 1/250, its translation to 1/10 pixel), a translation left as
// motion_estimate finds it to the bit, a noisy still scene still; and an extrapolate window of a
// camera zooming in while it pans: the moved reference, zoomed, leaves a tenth of the deltas that
// the nearest frame does in the frame's middle.
static void test_global_zoom(void) {
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N;
    real *tex = fc_malloc(sizeof(real) * E), *moved = fc_malloc(sizeof(real) * E), *noisy = fc_malloc(sizeof(real) * E);
    make_texture(tex, C, N, 31);
    double zooms[3][3] = {{0, 0, 0.0625}, {0.5, -0.25, -0.05}, {-1.0, 0.75, 0.03}}, worst_l = 0, worst_d = 0;
    double dx, dy, ls, tx, ty;
    for (int k = 0; k < 3; k++) {
        motion_zoom(moved, tex, C, N, zooms[k][0], zooms[k][1], zooms[k][2]);
        motion_estimate_zoom(tex, moved, C, N, &dx, &dy, &ls);
        worst_l = fmax(worst_l, fabs(ls - zooms[k][2]));
        worst_d = fmax(worst_d, fmax(fabs(dx - zooms[k][0]), fabs(dy - zooms[k][1])));
    }
    motion_shift(moved, tex, C, N, 1.5, -0.75);
    motion_estimate_zoom(tex, moved, C, N, &dx, &dy, &ls);
    motion_estimate(tex, moved, C, N, &tx, &ty);
    int translation = ls == 0 && dx == tx && dy == ty;
    philox_fill_normal(noisy, E, 0, 0.1, 32, 0, RNG_TEST, 0);
    philox_fill_normal(moved, E, 0, 0.1, 33, 0, RNG_TEST, 0);
    for (size_t e = 0; e < E; e++) noisy[e] += tex[e], moved[e] += tex[e];
    double sx, sy, sl;
    motion_estimate_zoom(moved, noisy, C, N, &sx, &sy, &sl);
    check(worst_l < 0.004 && worst_d < 0.1 && translation && sx == 0 && sy == 0 && sl == 0, "motion_estimate_zoom",
          "three zooms found within %.4f of their scale and %.3f pixel; a translation: (%g, %g, %g) against "
          "motion_estimate's (%g, %g); a noisy still scene: (%g, %g, %g)", worst_l, worst_d, dx, dy, ls, tx, ty, sx,
          sy, sl);

    // the window: the frame at offset o is tex zoomed by 0.015 o about the centre and moved by
    // (0.2, -0.1) a frame, each frame's motion applied after the last's
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/small/extrapolate.conf");  // anchor:-12 context:-8 -4 0 target:4 8 12
    c.delta_scale = 1, c.anchor_snap = 0, c.reference_zoom = 1;
    real *win = fc_malloc(sizeof(real) * c.slots * E), *near = fc_malloc(sizeof(real) * c.slots * E);
    real *mov = fc_malloc(sizeof(real) * c.slots * E);
    for (int f = 0; f < c.slots; f++) {
        double o = c.slot_offset[f], l = 0.015, u = expm1(l * o) / expm1(l);
        motion_zoom(win + f * E, tex, C, N, 0.2 * u, -0.1 * u, l * o);
    }
    memcpy(near, win, sizeof(real) * c.slots * E), memcpy(mov, win, sizeof(real) * c.slots * E);
    c.delta_reference = DELTA_REF_NEAREST;
    flow_delta_targets(&c, 1, near);
    c.delta_reference = DELTA_REF_MOVED;
    flow_delta_targets(&c, 1, mov);
    double r_near = 0, r_mov = 0;
    for (int f = 0; f < c.slots; f++) {
        if (c.slot_kind[f] != SLOT_TARGET) continue;
        double a = 0, b = 0;
        for (int ch = 0; ch < C; ch++)
            for (int y = 8; y < 24; y++)
                for (int x = 8; x < 24; x++) {
                    size_t at = f * E + ((size_t)ch * N + y) * N + x;
                    a += (double)near[at] * near[at], b += (double)mov[at] * mov[at];
                }
        r_near = fmax(r_near, sqrt(a / (C * 256))), r_mov = fmax(r_mov, sqrt(b / (C * 256)));
    }
    check(r_mov < 0.1 * r_near, "delta_reference_moved_zoom",
          "a zooming pan's deltas in the frame's middle: rms %.4f moved against %.4f from the nearest frame", r_mov,
          r_near);
    free(tex), free(moved), free(noisy), free(win), free(near), free(mov);
}

// A square of side `side` with its top-left corner at (x0, y0) (fractional: edge pixels take the
// covered fraction) of value v drawn over plane (N, N) of every channel.
static void draw_square(real *frame, int C, int N, double x0, double y0, int side, double v) {
    for (int y = 0; y < N; y++)
        for (int x = 0; x < N; x++) {
            double cy = fmax(0, fmin(y + 1, y0 + side) - fmax(y, y0)), cx = fmax(0, fmin(x + 1, x0 + side) - fmax(x, x0));
            double a = cx * cy;
            for (int ch = 0; ch < C; ch++) frame[((size_t)ch * N + y) * N + x] = (real)((1 - a) * frame[((size_t)ch * N + y) * N + x] + a * v);
        }
}

// The worst target's delta rms of window `win` (one window of c's plan, (F, E)) with reference `kind`,
// and the sampler's inverse: the largest |reference + delta / delta_scale - frame| into *inverse (a max).
static double worst_delta_rms(Config *c, int kind, const real *win, size_t E, double *inverse) {
    real *d = fc_malloc(sizeof(real) * c->slots * E), *refs = fc_malloc(sizeof(real) * c->slots * E);
    real *back = fc_malloc(sizeof(real) * E);
    const real *given[MAX_SLOTS];
    for (int f = 0; f < c->slots; f++) given[f] = win + f * E;
    c->delta_reference = kind;
    memcpy(d, win, sizeof(real) * c->slots * E);
    flow_delta_targets(c, 1, d);
    flow_references(c, given, c->slot_offset, refs);
    double worst = 0;
    for (int f = 0; f < c->slots; f++) {
        if (c->slot_kind[f] != SLOT_TARGET) continue;
        worst = worse(worst, rms(d + f * E, E));
        flow_delta_to_frame(c, back, d + f * E, refs + f * E, E);
        for (size_t e = 0; e < E; e++) *inverse = fmax(*inverse, fabs(back[e] - win[f * E + e]));
    }
    free(d), free(refs), free(back);
    return worst;
}

// An extrapolate window (configs/small's plan, delta_scale 1, no snap) of two squares moving their
// own ways over a flat ground of -0.5: A right at 0.25 pixel a frame, B up at 0.125. (F, C, N, N).
static real *two_squares_window(Config *c, int C, int N) {
    size_t E = (size_t)C * N * N;
    config_defaults(c);
    config_load(c, "configs/small/extrapolate.conf");  // anchor:-12 context:-8 -4 0 target:4 8 12
    c->delta_scale = 1, c->anchor_snap = 0;
    real *win = fc_malloc(sizeof(real) * c->slots * E);
    for (int f = 0; f < c->slots; f++) {
        double o = c->slot_offset[f];
        for (size_t e = 0; e < E; e++) win[f * E + e] = -0.5;
        draw_square(win + f * E, C, N, 9 + 0.25 * o, 5, 6, 0.8);
        draw_square(win + f * E, C, N, 19, 20 - 0.125 * o, 6, 0.2);
    }
    return win;
}

// delta_reference = local: two squares moving their own ways over a still background (what the
// global motion cannot follow: it moves one, or neither). Each target's deltas over the whole frame
// against those of moved and nearest, and the sampler's inverse.
static void test_local_motion(void) {
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N;
    Config c;
    real *win = two_squares_window(&c, C, N);
    const int kinds[3] = {DELTA_REF_NEAREST, DELTA_REF_MOVED, DELTA_REF_LOCAL};
    double r[3], inverse = 0;
    for (int k = 0; k < 3; k++) r[k] = worst_delta_rms(&c, kinds[k], win, E, &inverse);
    check(r[2] < 0.5 * fmin(r[0], r[1]) && inverse < 1e-6, "delta_reference_local",
          "two squares moving apart: the worst target's delta rms %.4f local against %.4f moved and %.4f from the "
          "nearest frame; the sampler's inverse within %.1e", r[2], r[1], r[0], inverse);
    free(win);
}

// delta_reference = objects: the two squares of test_local_motion and a disc at rest, over a flat
// background. The frame cut into background and three objects; each target's deltas against those of
// local, moved and nearest; the sampler's inverse; and a textured pan (no flat background), whose
// reference is moved's, byte for byte.
static void test_objects_motion(void) {
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N;
    Config c;
    real *win = two_squares_window(&c, C, N), *refs = fc_malloc(sizeof(real) * c.slots * E);
    for (int f = 0; f < c.slots; f++)  // and a disc still
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++)
                if ((x - 5.5) * (x - 5.5) + (y - 25.5) * (y - 25.5) <= 9)
                    for (int ch = 0; ch < C; ch++) win[f * E + ((size_t)ch * N + y) * N + x] = ch == 0 ? 0.9f : -0.9f;
    ObjectScene scene;
    objects_segment(&scene, win + 3 * E, C, N, 0.1);  // slot 3: offset 0
    int objects = scene.count;
    double bg = scene.background[0];
    objects_free(&scene);
    real *ramp = fc_malloc(sizeof(real) * E);  // a gradient whose steps chain into one region: no flat ground
    for (size_t e = 0; e < E; e++) ramp[e] = (real)(-1 + 0.0625 * (e % N));
    draw_square(ramp, C, N, 9, 5, 6, 0.8);
    objects_segment(&scene, ramp, C, N, 0.1);
    int ramp_objects = scene.count;
    objects_free(&scene);
    free(ramp);
    const int kinds[4] = {DELTA_REF_NEAREST, DELTA_REF_MOVED, DELTA_REF_LOCAL, DELTA_REF_OBJECTS};
    double r[4], inverse = 0;
    for (int k = 0; k < 4; k++) r[k] = worst_delta_rms(&c, kinds[k], win, E, &inverse);
    check(objects == 3 && fabs(bg + 0.5) < 1e-6 && ramp_objects == -1, "objects_segment",
          "two squares and a disc over a flat ground: %d objects (3), the background's mean %.4f (-0.5); a square "
          "on a gradient: %d (-1: no flat background)", objects, bg, ramp_objects);
    check(r[3] < 0.5 * fmin(r[2], fmin(r[0], r[1])) && inverse < 1e-6, "delta_reference_objects",
          "two squares moving apart, a disc still: the worst target's delta rms %.4f objects against %.4f local, "
          "%.4f moved and %.4f from the nearest frame; the sampler's inverse within %.1e", r[3], r[2], r[1], r[0],
          inverse);
    // a textured pan: no flat background, so moved's reference
    const real *given[MAX_SLOTS];
    for (int f = 0; f < c.slots; f++) given[f] = win + f * E;
    real *tex = fc_malloc(sizeof(real) * E), *mov = fc_malloc(sizeof(real) * c.slots * E);
    make_texture(tex, C, N, 24);
    for (int f = 0; f < c.slots; f++) motion_shift(win + f * E, tex, C, N, 0.3 * c.slot_offset[f], -0.2 * c.slot_offset[f]);
    c.delta_reference = DELTA_REF_MOVED;
    flow_references(&c, given, c.slot_offset, mov);
    c.delta_reference = DELTA_REF_OBJECTS;
    flow_references(&c, given, c.slot_offset, refs);
    int same = 1, moved_any = 0;
    for (int f = 0; f < c.slots; f++) {
        if (c.slot_kind[f] != SLOT_TARGET) continue;
        same &= memcmp(refs + f * E, mov + f * E, sizeof(real) * E) == 0;
        moved_any |= memcmp(mov + f * E, win + 3 * E, sizeof(real) * E) != 0;
    }
    check(same && moved_any, "delta_reference_objects_pan",
          "a textured pan has no flat background: the objects reference is moved's, byte for byte (%s)",
          same ? "the same" : "differs");
    // the config's object_bounce reaches the reference: a square of 6 at columns 24-29 at offset 0,
    // moving right a pixel a frame; the target 12 frames ahead has it at columns 16-21 (2 to the wall,
    // 10 back) with the key, out of the frame without
    for (int f = 0; f < c.slots; f++) {
        for (size_t e = 0; e < E; e++) win[f * E + e] = -0.5;
        draw_square(win + f * E, C, N, 24 + c.slot_offset[f], 10, 6, 0.8);
    }
    int last = c.slots - 1;  // target:12
    double at[2];
    int placed[2] = {1, 1};  // every pixel of the reference: the square where it should be, else the ground
    for (int b = 0; b < 2; b++) {
        c.object_bounce = b;
        flow_references(&c, given, c.slot_offset, refs);
        at[b] = refs[last * E + (size_t)12 * N + 18];  // channel 0, row 12, column 18
        for (int ch = 0; ch < C; ch++)
            for (int y = 0; y < N; y++)
                for (int x = 0; x < N; x++) {
                    int in = b && x >= 16 && x <= 21 && y >= 10 && y <= 15;
                    placed[b] &= fabs(refs[last * E + ((size_t)ch * N + y) * N + x] - (in ? 0.8 : -0.5)) < 1e-6;
                }
    }
    // the other references ignore the key (a config that sets delta_reference = moved over configs/small's keeps it)
    c.delta_reference = DELTA_REF_MOVED;
    flow_references(&c, given, c.slot_offset, refs);  // object_bounce 1 from the loop
    c.object_bounce = 0;
    flow_references(&c, given, c.slot_offset, mov);
    int ignored = 1;
    for (int f = 0; f < c.slots; f++)
        if (c.slot_kind[f] == SLOT_TARGET) ignored &= memcmp(refs + f * E, mov + f * E, sizeof(real) * E) == 0;
    check(c.slot_offset[last] == 12 && placed[0] && placed[1] && ignored,
          "objects_bounce_key",
          "a square moving right into the edge, 12 frames ahead: column 18 holds %.3f with object_bounce 1 (0.8: "
          "the square, back off the wall, %s at columns 16-21), %.3f with 0 (-0.5: the ground, %s); delta_reference "
          "moved's references %s with and without the key", at[1], placed[1] ? "every pixel" : "NOT every pixel",
          at[0], placed[0] ? "the square gone" : "NOT all ground", ignored ? "the same" : "DIFFER");
    free(win), free(refs), free(tex), free(mov);
}

// The rules of objects_segment, objects_shift and objects_carry one at a time, and the tiles' order of
// motion_estimate_tiles: a background of a quarter to a half of the frame is still one; a speck of
// OBJECT_MIN pixels is an object and a smaller one is not; an object moved 6 pixels at 32x32 is found
// (the search reaches N/4); where two moving objects land on each other the smaller is in front;
// tile t = ty * tiles + tx.
static void test_objects_details(void) {
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N;
    real *a = fc_malloc(sizeof(real) * E), *b = fc_malloc(sizeof(real) * E), *out = fc_malloc(sizeof(real) * E);
    ObjectScene s;
    // two rectangles of 16 x 19 pixels (30% of the frame each) beside a background of 40%
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    for (int y = 0; y < N; y++)
        for (int x = 0; x < 19; x++)
            for (int ch = 0; ch < C; ch++) a[((size_t)ch * N + y) * N + x] = y < 16 ? 0.3f : 0.8f;
    objects_segment(&s, a, C, N, 0.1);
    int two_fifths = s.count;
    double bg = s.background[0];
    objects_free(&s);
    // specks of 3 and of 2 pixels, apart from each other, on a flat ground
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    for (int ch = 0; ch < C; ch++)
        for (int k = 0; k < 3; k++) a[((size_t)ch * N + 5) * N + 5 + k] = 0.5f, a[((size_t)ch * N + 20) * N + 20 + k % 2] = 0.5f;
    objects_segment(&s, a, C, N, 0.1);
    int specks = s.count, speck_size = s.count > 0 ? s.size[0] : 0;
    objects_free(&s);
    // a square of 5 moved 6 pixels right and 1 down
    for (size_t e = 0; e < E; e++) a[e] = b[e] = -0.5;
    draw_square(a, C, N, 8, 12, 5, 0.6);
    draw_square(b, C, N, 14, 13, 5, 0.6);
    objects_segment(&s, b, C, N, 0.1);
    double dx[OBJECT_MAX] = {0}, dy[OBJECT_MAX] = {0};
    if (s.count == 1) objects_shift(&s, a, b, C, dx, dy);
    int far_count = s.count;
    objects_free(&s);
    // a square of 6 moving 8 right onto a square of 3 moving 1 right: where they meet, the small one
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    draw_square(a, C, N, 4, 4, 6, 0.2);
    draw_square(a, C, N, 13, 6, 3, 0.9);
    objects_segment(&s, a, C, N, 0.1);
    for (int k = 0; k < s.count; k++) s.dx[k] = s.size[k] == 36 ? 8 : 1, s.dy[k] = 0;
    objects_carry(out, a, &s, C, 1.0, 0);
    int carried = s.count;
    objects_free(&s);
    double front = out[(size_t)7 * N + 15], big = out[(size_t)5 * N + 12];  // channel 0, rows 7 and 5
    check(two_fifths == 2 && fabs(bg + 0.5) < 1e-6 && specks == 1 && speck_size == 3 && far_count == 1 &&
              fabs(dx[0] - 6) < 1e-6 && fabs(dy[0] - 1) < 1e-6 && carried == 2 && fabs(front - 0.9) < 1e-6 &&
              fabs(big - 0.2) < 1e-6,
          "objects_rules",
          "a background of 40%% beside two rectangles: %d objects (2), its mean %.3f (-0.5); specks of 3 and 2 "
          "pixels: %d object (1) of %d pixels (3); a square moved (6, 1): %d object, found at (%.4f, %.4f); two "
          "moving squares meeting: %d objects, the small one in front (%.3f, 0.9), the big one where it alone "
          "lands (%.3f, 0.2)", two_fifths, bg, specks, speck_size, far_count, dx[0], dy[0], carried, front, big);
    // a speck joins the object it touches: a 5x5 square (columns 8-12, rows 12-16) at 0.6 with a speck of
    // 2 pixels at 0.1 along its right edge (column 13, rows 13-14), 0.5 from both square and ground, so
    // its own region, too small (under OBJECT_MIN) to be an object: both its pixels touch the square,
    // and the one object is 25 + 2 = 27 pixels, the speck labelled as it (not left as ground)
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    draw_square(a, C, N, 8, 12, 5, 0.6);
    for (int ch = 0; ch < C; ch++) a[((size_t)ch * N + 13) * N + 13] = a[((size_t)ch * N + 14) * N + 13] = 0.1f;
    objects_segment(&s, a, C, N, 0.1);
    int joined = s.count, joined_size = s.count > 0 ? s.size[0] : 0;
    int speck_label = s.label[13 * N + 13], speck_label2 = s.label[14 * N + 13];
    objects_free(&s);
    check(joined == 1 && joined_size == 27 && speck_label == 0 && speck_label2 == 0, "objects_speck_joins",
          "a 5x5 square with a 2-pixel speck on its edge: %d object (1) of %d pixels (27), the speck's pixels "
          "labelled %d and %d (0, the square's)", joined, joined_size, speck_label, speck_label2);
    // an object's shift is scored with the ground around it: a 3x3 square at 0.6 moved 3 right (columns
    // 12-14 to 15-17, rows 12-14) above a still 5x5 square of the same value (columns 12-16, rows 18-22).
    // On its own pixels alone the small square matches itself anywhere inside the big one (shifts
    // (1..3, -8..-6), searched before (3, 0)); with the ground ring only (3, 0) matches. The big one is still.
    for (size_t e = 0; e < E; e++) a[e] = b[e] = -0.5;
    draw_square(a, C, N, 12, 12, 3, 0.6), draw_square(b, C, N, 15, 12, 3, 0.6);
    draw_square(a, C, N, 12, 18, 5, 0.6), draw_square(b, C, N, 12, 18, 5, 0.6);
    objects_segment(&s, b, C, N, 0.1);
    double rdx[OBJECT_MAX] = {0}, rdy[OBJECT_MAX] = {0};
    int pair = s.count, lone = -1, still = -1;
    for (int k = 0; k < s.count; k++) lone = s.size[k] == 9 ? k : lone, still = s.size[k] == 25 ? k : still;
    if (lone >= 0 && still >= 0) objects_shift(&s, a, b, C, rdx, rdy);
    objects_free(&s);
    check(pair == 2 && lone >= 0 && still >= 0 && rdx[lone] == 3 && rdy[lone] == 0 && rdx[still] == 0 &&
              rdy[still] == 0, "objects_shift_ground_ring",
          "a 3x3 square moved (3, 0) beside a still 5x5 one of its colour: %d objects (2), the small one found at "
          "(%g, %g) (3, 0), the big one at (%g, %g) (0, 0)", pair, lone >= 0 ? rdx[lone] : NAN, lone >= 0 ? rdy[lone] : NAN,
          still >= 0 ? rdx[still] : NAN, still >= 0 ? rdy[still] : NAN);
    // like colour is a difference under tol: a square 0.25 from the ground at tol 0.25 is an object
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    draw_square(a, C, N, 10, 10, 3, -0.25);
    objects_segment(&s, a, C, N, 0.25);
    int at_tol = s.count;
    objects_free(&s);
    check(at_tol == 1, "objects_like_colour", "a square 0.25 from its ground cut at a tolerance of 0.25: %d object "
          "(1: like colour is a difference under the tolerance)", at_tol);
    // object_bounce, every pixel of every channel checked. A square of 4 at columns 26-29 moving 2
    // right, carried 3 frames: with the bounce it reaches the wall (2 pixels) and comes back 4, to
    // columns 24-27; without, it has left the frame. One moving 2 up and 1 left from row 1 bounces off
    // the top too (rows 5-8) and goes on left. One at columns 2-5 carried 3 frames back in time (the
    // interpolate model's lead before its reference) at 2 right: 6 left, off the left edge to columns
    // 4-7. A bar as wide as the frame (along its top: the ground stays one region) moving right stays.
    int bounced = 1, left = 1, top = 1, back = 1, bar = 1;
    const struct { double x, y; int w, h; double dx, dy, scale; int bounce, x0, y0; } cases[5] = {
        {26, 10, 4, 4, 2, 0, 3, 1, 24, 10}, {26, 10, 4, 4, 2, 0, 3, 0, -1, -1}, {12, 1, 4, 4, -1, -2, 3, 1, 9, 5},
        {2, 20, 4, 4, 2, 0, -3, 1, 4, 20}, {0, 0, 32, 2, 1, 0, 3, 1, 0, 0}};
    int *verdict[5] = {&bounced, &left, &top, &back, &bar};
    for (int k = 0; k < 5; k++) {
        for (size_t e = 0; e < E; e++) a[e] = -0.5;
        for (int y = 0; y < cases[k].h; y++)
            for (int x = 0; x < cases[k].w; x++)
                for (int ch = 0; ch < C; ch++) a[((size_t)ch * N + (int)cases[k].y + y) * N + (int)cases[k].x + x] = 0.7f;
        objects_segment(&s, a, C, N, 0.1);
        *verdict[k] = s.count == 1;
        s.dx[0] = cases[k].dx, s.dy[0] = cases[k].dy;
        objects_carry(out, a, &s, C, cases[k].scale, cases[k].bounce);
        for (int ch = 0; ch < C; ch++)
            for (int y = 0; y < N; y++)
                for (int x = 0; x < N; x++) {
                    int in = cases[k].x0 >= 0 && x >= cases[k].x0 && x < cases[k].x0 + cases[k].w && y >= cases[k].y0 &&
                             y < cases[k].y0 + cases[k].h;
                    *verdict[k] &= fabs(out[((size_t)ch * N + y) * N + x] - (in ? 0.7 : -0.5)) < 1e-6;
                }
        objects_free(&s);
    }
    // the fold itself: back and forth across [0, 4], several spans away, and no room at all
    int fold = reflect_fold(-1, 4) == 1 && reflect_fold(6, 4) == 2 && reflect_fold(9, 4) == 1 &&
               reflect_fold(-9, 4) == 1 && reflect_fold(17.5, 4) == 1.5 && reflect_fold(4, 4) == 4 &&
               reflect_fold(3, 0) == 0 && reflect_fold(3, -1) == 0;
    check(bounced && left && top && back && bar && fold, "objects_bounce",
          "a square at the right edge carried 6 pixels right: %s with object_bounce 1 (columns 24-27), %s without "
          "(out of the frame); one carried 6 up and 3 left from row 1: %s (rows 5-8, columns 9-12); one carried 6 "
          "left from columns 2-5 (a lead of -3): %s (columns 4-7); a bar as wide as the frame: %s; reflect_fold %s",
          bounced ? "back off the wall" : "NOT back off the wall", left ? "gone" : "NOT gone",
          top ? "off the top" : "NOT off the top", back ? "off the left edge" : "NOT off the left edge",
          bar ? "still" : "MOVED", fold ? "right on 8 points" : "WRONG");
    // tiles: only the top-right of 2 x 2 tiles moves, 2 pixels right
    real *tex = fc_malloc(sizeof(real) * E), *moved = fc_malloc(sizeof(real) * E);
    make_texture(tex, C, N, 41);
    motion_shift(moved, tex, C, N, 2, 0);
    memcpy(b, tex, sizeof(real) * E);
    for (int ch = 0; ch < C; ch++)
        for (int y = 0; y < N / 2; y++)
            for (int x = N / 2; x < N; x++) b[((size_t)ch * N + y) * N + x] = moved[((size_t)ch * N + y) * N + x];
    double tdx[4], tdy[4];
    motion_estimate_tiles(tex, b, C, N, 2, 0, 0, tdx, tdy);
    check(fabs(tdx[1] - 2) < 0.07 && fabs(tdy[1]) < 0.07 && tdx[0] == 0 && tdx[2] == 0 && tdx[3] == 0 && tdy[2] == 0,
          "motion_tiles_order", "the top-right tile moved (2, 0): tiles (top-left, top-right, bottom-left, "
          "bottom-right) dx %.3f %.3f %.3f %.3f, dy of the moved one %.3f", tdx[0], tdx[1], tdx[2], tdx[3], tdy[1]);
    // the carry: the top-left tile (8 pixels at 16x16) moves 0.75 pixel left; its right column then
    // takes a quarter of a pixel of what lands (under half: not enough), so it shows what was behind,
    // in at x + 0.75: three quarters of the still tile's first column and a quarter of its own
    enum { M = 16 };
    double cdx[4] = {-0.75, 0, 0, 0}, cdy[4] = {0, 0, 0, 0};
    make_texture(tex, C, M, 43);
    motion_carry_tiles(out, tex, C, M, 2, cdx, cdy, 1.0);
    double behind = 0, landed = 0;
    for (int ch = 0; ch < C; ch++)
        for (int y = 0; y < M / 2; y++) {
            size_t q = ((size_t)ch * M + y) * M + 7;
            behind = fmax(behind, fabs(out[q] - (0.25 * tex[q] + 0.75 * tex[q + 1])));
            landed = fmax(landed, fabs(out[q - 1] - (0.75 * tex[q] + 0.25 * tex[q - 1])));  // x = 6: weight 1
        }
    check(behind < 1e-6 && landed < 1e-6, "motion_carry_tiles_uncovered",
          "a tile moved 0.75 pixel left: its last column shows what was behind it (worst %.1e), the column before it "
          "what landed (%.1e)", behind, landed);
    // a frame too small to tell a shift from new content: no motion (6x6: 2 pixels inside the search's margin)
    enum { T = 6 };
    real small[3 * T * T], small_moved[3 * T * T];
    make_texture(small, C, T, 44);
    motion_shift(small_moved, small, C, T, 1, 0);
    double sdx = 9, sdy = 9;
    motion_estimate(small, small_moved, C, T, &sdx, &sdy);
    check(sdx == 0 && sdy == 0, "motion_estimate_small_frame", "a 6x6 frame shifted a pixel: (%g, %g), no motion "
          "measured on so few pixels", sdx, sdy);
    free(a), free(b), free(out), free(tex), free(moved);
}

// anchor_snap: a reference pixel within the threshold of the anchor's in every channel takes the
// anchor's values; one channel past it keeps the pixel as made; no pixel moves by more than it.
static void test_anchor_snap(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/small/extrapolate.conf");  // anchor:-12 context:-8 -4 0 target:4 8 12
    config_set(&c, "delta_reference=nearest", "test");
    config_set(&c, "anchor_snap=0.05", "test");
    enum { C = 3, N = 32 };
    size_t E = (size_t)C * N * N, plane = (size_t)N * N;
    real *win = fc_malloc(sizeof(real) * c.slots * E), *refs = fc_malloc(sizeof(real) * c.slots * E);
    make_texture(win, C, N, 31);  // slot 0: the anchor
    const real *anchor = win;
    // every context slot: the anchor plus noise of std 0.02, and in the left half a change of 0.3
    // in one channel only (the channel cycles with the row)
    for (int f = 1; f < c.slots; f++) {
        philox_fill_normal(win + f * E, E, 0, 0.02, 32, (uint32_t)f, RNG_TEST, 0);
        for (size_t e = 0; e < E; e++) win[f * E + e] += anchor[e];
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N / 2; x++) win[f * E + (size_t)(y % C) * plane + y * N + x] += 0.3f;
    }
    const real *given[MAX_SLOTS];
    for (int f = 0; f < c.slots; f++) given[f] = win + f * E;
    flow_references(&c, given, c.slot_offset, refs);
    long snapped = 0, kept = 0, wrong = 0;
    double moved = 0;
    for (int f = 0; f < c.slots; f++) {
        if (c.slot_kind[f] != SLOT_TARGET) continue;
        const real *ref = refs + f * E, *made = given[config_reference_slot(&c, f)];
        for (size_t p = 0; p < plane; p++) {
            int near = 1, same_anchor = 1, same_made = 1;
            for (int ch = 0; ch < C; ch++) {
                size_t e = ch * plane + p;
                near &= fabs((double)made[e] - anchor[e]) < 0.05;
                same_anchor &= ref[e] == anchor[e];
                same_made &= ref[e] == made[e];
                moved = fmax(moved, fabs((double)ref[e] - made[e]));
            }
            if (near ? !same_anchor : !same_made) wrong++;
            snapped += near && same_anchor, kept += !near && same_made;
        }
    }
    long pixels = 3 * (long)plane;  // three targets
    check(wrong == 0 && snapped > pixels / 4 && kept >= pixels / 2 && moved < 0.05, "anchor_snap",
          "%ld of %ld reference pixels snapped to the anchor, %ld kept (the changed half and the noisiest), "
          "%ld wrong; the largest move %.4f (threshold 0.05)", snapped, pixels, kept, wrong, moved);

    // Only a still reference is snapped. The same window with delta_reference = moved: its camera
    // stands still (no motion measured), so the references are those above. A pan of the texture at
    // (0.5, -0.25) pixel a frame, the anchor included: its moved references are the same with and
    // without the snap, though a flat texture would meet the anchor's values by chance.
    real *still = fc_malloc(sizeof(real) * c.slots * E);
    memcpy(still, refs, sizeof(real) * c.slots * E);
    config_set(&c, "delta_reference=moved", "test");
    flow_references(&c, given, c.slot_offset, refs);
    long still_same = 0;
    for (int f = 0; f < c.slots; f++)
        if (c.slot_kind[f] == SLOT_TARGET) still_same += !memcmp(refs + f * E, still + f * E, sizeof(real) * E);
    real *tex = fc_malloc(sizeof(real) * E), *no_snap = fc_malloc(sizeof(real) * c.slots * E);
    make_texture(tex, C, N, 33);
    for (size_t e = 0; e < E; e++) tex[e] *= 0.05f;  // flat: most of the pan is within 0.05 of the anchor
    for (int f = 0; f < c.slots; f++) motion_shift(win + f * E, tex, C, N, 0.5 * c.slot_offset[f], -0.25 * c.slot_offset[f]);
    flow_references(&c, given, c.slot_offset, refs);
    config_set(&c, "anchor_snap=0", "test");
    flow_references(&c, given, c.slot_offset, no_snap);
    long pan_same = 0, near_anchor = 0;
    for (int f = 0; f < c.slots; f++) {
        if (c.slot_kind[f] != SLOT_TARGET) continue;
        pan_same += !memcmp(refs + f * E, no_snap + f * E, sizeof(real) * E);
        for (size_t p = 0; p < plane; p++) {
            int near = 1;
            for (int ch = 0; ch < C; ch++) near &= fabs((double)no_snap[f * E + ch * plane + p] - win[ch * plane + p]) < 0.05;
            near_anchor += near;
        }
    }
    check(still_same == 3 && pan_same == 3 && near_anchor > pixels / 4, "anchor_snap_still_only",
          "moved reference, still camera: %ld of 3 targets' references the snapped ones above; a pan: %ld of 3 "
          "the same with and without the snap, though %ld of their %ld pixels are within 0.05 of the anchor's",
          still_same, pan_same, near_anchor, pixels);
    free(win), free(refs), free(still), free(tex), free(no_snap);
}

// reference_fill: what a shift brings into view fades from the repeated edge into the frame wrapped
// around. Every pixel of every channel against the same formula written here on a 3x3 tiling of the
// frame; fill 0 is motion_shift's bytes; the config's key reaches flow_references, which changes a
// pan's reference only where the pan brings something into view.
static void test_reference_fill(void) {
    enum { C = 3, N = 16 };
    size_t E = (size_t)C * N * N;
    real *tex = fc_malloc(sizeof(real) * E), *a = fc_malloc(sizeof(real) * E), *b = fc_malloc(sizeof(real) * E);
    real *tiled = fc_malloc(sizeof(real) * 9 * E);
    make_texture(tex, C, N, 31);
    for (int ch = 0; ch < C; ch++)  // the frame tiled 3x3: the wrapped frame at (y + N, x + N)
        for (int y = 0; y < 3 * N; y++)
            for (int x = 0; x < 3 * N; x++) tiled[((size_t)ch * 3 * N + y) * 3 * N + x] = tex[((size_t)ch * N + y % N) * N + x % N];
    double shifts[3][2] = {{5.5, -2.25}, {-3.75, 0}, {0.5, 7.125}}, fill = 4, worst = 0;
    int same0 = 1, strip = 0;
    for (int k = 0; k < 3; k++) {
        double dx = shifts[k][0], dy = shifts[k][1];
        motion_shift(a, tex, C, N, dx, dy);
        motion_shift_fill(b, tex, C, N, dx, dy, 0);
        same0 &= !memcmp(a, b, sizeof(real) * E);
        motion_shift_fill(b, tex, C, N, dx, dy, fill);
        for (int ch = 0; ch < C; ch++)
            for (int y = 0; y < N; y++)
                for (int x = 0; x < N; x++) {
                    double fy = y - dy, fx = x - dx;
                    double cy = fy < 0 ? 0 : fy > N - 1 ? N - 1 : fy, cx = fx < 0 ? 0 : fx > N - 1 ? N - 1 : fx;
                    double d = fmax(fabs(fy - cy), fabs(fx - cx)), w = exp(-d / fill);
                    // bilinear on the tiling: the wrapped frame
                    double ty = fy + N, tx = fx + N;
                    int y0 = (int)floor(ty), x0 = (int)floor(tx);
                    double wy = ty - y0, wx = tx - x0;
                    const real *t = tiled + (size_t)ch * 9 * N * N;
                    double wrapped = (t[y0 * 3 * N + x0] * (1 - wx) + t[y0 * 3 * N + x0 + 1] * wx) * (1 - wy) +
                                     (t[(y0 + 1) * 3 * N + x0] * (1 - wx) + t[(y0 + 1) * 3 * N + x0 + 1] * wx) * wy;
                    size_t at = ((size_t)ch * N + y) * N + x;
                    double want = d > 0 ? w * a[at] + (1 - w) * wrapped : a[at];
                    worst = fmax(worst, fabs(b[at] - want));
                    strip += d > 0 && ch == 0;
                }
    }
    check(same0 && worst < 1e-6 && strip > 0, "reference_fill_shift",
          "fill 0 %s motion_shift's bytes; fill 4 over three shifts: %d pixels brought into view, every pixel "
          "within %.2g of the repeated edge faded into the wrapped frame",
          same0 ? "gives" : "does NOT give", strip, worst);

    // the key in flow_references: a pan of (0.5, -0.25) pixel a frame in an extrapolate window
    enum { M = 32 };
    size_t F = (size_t)C * M * M;
    real *pic = fc_malloc(sizeof(real) * F);
    make_texture(pic, C, M, 32);
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/small/extrapolate.conf");
    c.delta_scale = 1, c.anchor_snap = 0, c.delta_reference = DELTA_REF_MOVED;
    real *win = fc_malloc(sizeof(real) * c.slots * F), *r0 = fc_malloc(sizeof(real) * c.slots * F);
    real *r1 = fc_malloc(sizeof(real) * c.slots * F);
    const real *given[MAX_SLOTS];
    for (int f = 0; f < c.slots; f++) {
        motion_shift(win + f * F, pic, C, M, 0.5 * c.slot_offset[f], -0.25 * c.slot_offset[f]);
        given[f] = win + f * F;
    }
    c.reference_fill = 0;
    flow_references(&c, given, c.slot_offset, r0);
    c.reference_fill = fill;
    flow_references(&c, given, c.slot_offset, r1);
    // the target 12 frames ahead has moved 6 pixels right and 3 up: columns 0-5 and rows 29-31 are new
    int f12 = c.slots - 1, inside_same = 1, edge_changed = 0;
    for (int ch = 0; ch < C; ch++)
        for (int y = 0; y < M; y++)
            for (int x = 0; x < M; x++) {
                size_t at = f12 * F + ((size_t)ch * M + y) * M + x;
                int interior = x >= 7 && y <= 27;  // well away from what the pan brings in
                if (interior) inside_same &= r0[at] == r1[at];
                if (x <= 4 && y <= 27) edge_changed += r0[at] != r1[at];
            }
    check(c.slot_kind[f12] == SLOT_TARGET && c.slot_offset[f12] == 12 && inside_same && edge_changed > 0,
          "reference_fill_key", "a pan's reference 12 frames ahead with reference_fill %g: the interior %s, %d "
          "values of the strip the pan brings in changed", fill, inside_same ? "the same" : "CHANGED", edge_changed);
    // nearest shifts nothing, so the key has nothing to fill there (configs/small ship it, and a run
    // that sets delta_reference=nearest over them keeps the nearest frame's bytes)
    c.delta_reference = DELTA_REF_NEAREST;
    c.reference_fill = 0;
    flow_references(&c, given, c.slot_offset, r0);
    c.reference_fill = fill;
    flow_references(&c, given, c.slot_offset, r1);
    size_t differ = 0, compared = 0;  // the targets' references: the only slots flow_references writes
    for (int f = 0; f < c.slots; f++)
        for (size_t i = 0; c.slot_kind[f] == SLOT_TARGET && i < F; i++)
            differ += r0[f * F + i] != r1[f * F + i], compared++;
    check(differ == 0 && compared > 0, "reference_fill_nearest", "delta_reference nearest with reference_fill %g: "
          "%zu of the targets' %zu reference values differ from reference_fill 0's", fill, differ, compared);

    // reference_fill_from = anchor: past the fade, the anchor (slot 0, 12 frames before the context at 0)
    // moved by the pan since it (24 frames to the target at 12), wrapped; the edge's share as before
    c.delta_reference = DELTA_REF_MOVED, c.reference_fill = fill, c.reference_fill_from = FILL_FROM_ANCHOR;
    flow_references(&c, given, c.slot_offset, r1);
    int an = config_anchor_slot(&c), r = config_reference_slot(&c, f12);
    double lead = c.slot_offset[f12] - c.slot_offset[r], since = c.slot_offset[f12] - c.slot_offset[an];
    // whole-pixel shifts (6 right and 3 up since the reference, 12 and 6 since the anchor): each value
    // written out, w of the clamped reference pixel and 1 - w of the anchor's pixel modulo M
    double worst_from = 0;
    size_t strip_from = 0;
    for (int ch = 0; ch < C; ch++)
        for (int y = 0; y < M; y++)
            for (int x = 0; x < M; x++) {
                int sy = y + 3, sx = x - 6, d = sx < 0 ? -sx : 0, oy = sy > M - 1 ? sy - (M - 1) : 0;
                d = oy > d ? oy : d;
                sy = sy > M - 1 ? M - 1 : sy, sx = sx < 0 ? 0 : sx;
                double want = given[r][((size_t)ch * M + sy) * M + sx];
                if (d > 0) {
                    double w = exp(-d / fill);
                    want = w * want + (1 - w) * given[an][((size_t)ch * M + (y + 6) % M) * M + (x - 12 + M) % M];
                }
                double e = fabs(r1[f12 * F + ((size_t)ch * M + y) * M + x] - want);
                worst_from = e > worst_from ? e : worst_from;
            }
    motion_shift_fill(r0, given[r], C, M, 0.5 * lead, -0.25 * lead, fill);  // the frame's own wrap
    for (size_t i = 0; i < F; i++) strip_from += r1[f12 * F + i] != r0[i];
    check(an == 0 && since == 24 && worst_from < 1e-6 && strip_from > 0, "reference_fill_from_anchor",
          "the target 12 frames ahead, the anchor %g frames before it: every value within %.2g of the formula (the "
          "reference clamped, faded into the anchor moved 24 frames' pan and wrapped), %zu values other than the "
          "frame's own wrap", since, worst_from, strip_from);
    free(tex), free(a), free(b), free(tiled), free(pic), free(win), free(r0), free(r1);
}

int main(void) {
    fc_set_threads(fc_default_threads());
    test_global_motion();
    test_global_zoom();
    test_local_motion();
    test_objects_motion();
    test_objects_details();
    test_anchor_snap();
    test_reference_fill();
    return g_failed ? 1 : 0;
}
