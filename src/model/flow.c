// flow.c: the rectified-flow objective (docs/network.md, "Objective").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/flow.h"
#include "base/philox.h"
#include "model/global_motion.h"
#include "model/object_motion.h"

void flow_slot_levels(const Config *c, int B, int b0, uint64_t seed, uint32_t step, real *t, real *offset, real *mask) {
    for (int b = 0; b < B; b++) {
        uint64_t w = (uint64_t)b0 + (uint64_t)b;  // the window's index in the global batch
        double z = philox_normal(seed, step, RNG_TIME, w);
        double tb = 1.0 / (1.0 + exp(-(c->t_logit_mean + c->t_logit_std * z)));
        int drop = c->cond_drop > 0 && philox_uniform(seed, step, RNG_DROP, w) < c->cond_drop;
        for (int f = 0; f < c->slots; f++) {
            int target = c->slot_kind[f] == SLOT_TARGET;
            // Noise augmentation: a context slot (never the anchor) is noised to its own level, so that
            // the model learns not to trust generated conditioning frames blindly.
            double aug = c->slot_kind[f] == SLOT_CONTEXT
                             ? c->noise_aug_max * philox_uniform(seed, step, RNG_AUG, w * MAX_SLOTS + f)
                             : 0.0;
            t[b * c->slots + f] = target ? (real)tb : drop ? 1 : (real)aug;
            offset[b * c->slots + f] = c->slot_offset[f];
            mask[b * c->slots + f] = (real)target;
        }
    }
}

void flow_prepare_batch(Model *m, const real *x0, int b0, uint64_t seed, uint32_t step) {
    const Backend *be = m->be;
    size_t bytes = sizeof(real) * m->S;
    real *host = fc_malloc(3 * bytes);
    flow_slot_levels(&m->cfg, m->B, b0, seed, step, host, host + m->S, host + 2 * m->S);
    be->upload(m->in.t, host, bytes);
    be->upload(m->in.offset, host + m->S, bytes);
    be->upload(m->in.mask, host + 2 * m->S, bytes);
    free(host);
    be->randn(m->in.noise, (size_t)m->S * m->E, 0, 1, seed, step, RNG_NOISE, (uint64_t)b0 * m->F * m->E);
    be->flow_mix(m->in.xt, m->in.v, x0, m->in.noise, m->in.t, m->S, m->E);
}

void flow_corrupt_context(const Config *c, int B, int b0, real *x0, uint64_t seed, uint32_t step) {
    if (c->ref_noise <= 0) return;
    size_t E = (size_t)c->channels * c->frame_size * c->frame_size;
    real *noise = fc_malloc(sizeof(real) * E);
    for (int b = 0; b < B; b++)
        for (int f = 0; f < c->slots; f++) {
            if (c->slot_kind[f] != SLOT_CONTEXT) continue;
            size_t at = ((size_t)b * c->slots + f) * E;
            philox_fill_normal(noise, E, 0, (real)c->ref_noise, seed, step, RNG_REF, at + (size_t)b0 * c->slots * E);
            for (size_t e = 0; e < E; e++) x0[at + e] += noise[e];
        }
    free(noise);
}

// The context slots next to r in time, one before and one after (-1 where there is none). Not the
// anchor: the chain gives it the plan's offset whatever its distance (chain_plan.h), so its offset is
// no time to divide a shift by.
static void context_neighbours(const Config *c, const float *offset, int r, int *before, int *after) {
    *before = *after = -1;
    for (int i = 0; i < c->slots; i++) {
        if (c->slot_kind[i] != SLOT_CONTEXT || i == r) continue;
        float o = offset[i] - offset[r];
        if (o < 0 && (*before < 0 || o > offset[*before] - offset[r])) *before = i;
        if (o > 0 && (*after < 0 || o < offset[*after] - offset[r])) *after = i;
    }
}

// The frames' motion over `lead` frames of one that moves by (vx, vy) and zooms by ls a frame, each
// frame's zoom about the frame's centre: the translation of the whole lead, the zoom's own translations
// carried by the zooms after them (vx lead where ls = 0).
static double zoom_lead(double ls, double lead) { return ls == 0 ? lead : expm1(ls * lead) / expm1(ls); }

// The velocity (pixels a frame) and, with reference_zoom, the zoom (ls a frame, global_motion.h) of
// the global motion at reference slot r: from the context slots next to r in time, by least squares.
static void reference_velocity(const Config *c, const real *const *given, const float *offset, int r, double *vx,
                               double *vy, double *ls) {
    int before, after;
    context_neighbours(c, offset, r, &before, &after);
    // Each neighbour g was moved onto r by v * (offset r - offset g): v by least squares.
    double sx = 0, sy = 0, ss = 0, gaps[2] = {0, 0}, dx[2] = {0, 0}, dy[2] = {0, 0}, dl[2] = {0, 0}, sl = 0;
    for (int k = 0; k < 2; k++) {
        int g = k ? after : before;
        if (g < 0) continue;
        double gap = offset[r] - offset[g];
        if (c->reference_zoom)
            motion_estimate_zoom(given[g], given[r], c->channels, c->frame_size, &dx[k], &dy[k], &dl[k]);
        else
            motion_estimate(given[g], given[r], c->channels, c->frame_size, &dx[k], &dy[k]);
        sx += dx[k] * gap, sy += dy[k] * gap, ss += gap * gap, sl += dl[k] * gap, gaps[k] = gap;
    }
    *vx = ss > 0 ? sx / ss : 0, *vy = ss > 0 ? sy / ss : 0, *ls = 0;
    if (sl == 0 || ss == 0) return;  // no zoom: the translation alone, as it always was
    // a zoom: neighbour k's translation is v zoom_lead(ls, gap k); v by least squares again
    *ls = sl / ss;
    double ux = 0, uy = 0, uu = 0;
    for (int k = 0; k < 2; k++) {
        if (gaps[k] == 0) continue;
        double u = zoom_lead(*ls, gaps[k]);
        ux += dx[k] * u, uy += dy[k] * u, uu += u * u;
    }
    *vx = ux / uu, *vy = uy / uu;
}

// delta_reference = local: the motion of each MOTION_TILE-pixel square of reference slot r, as
// reference_velocity finds the global one (least squares over the context slots next to r in time),
// into vx, vy (tiles x tiles).
#define MOTION_TILE 8
static void reference_velocity_tiles(const Config *c, const real *const *given, const float *offset, int r, int tiles,
                                     double *vx, double *vy) {
    int before, after;
    context_neighbours(c, offset, r, &before, &after);
    int n = tiles * tiles;
    double *dx = fc_malloc(sizeof(double) * 2 * n), *dy = dx + n, ss = 0;
    for (int t = 0; t < n; t++) vx[t] = vy[t] = 0;
    for (int k = 0; k < 2; k++) {
        int g = k ? after : before;
        if (g < 0) continue;
        double gap = offset[r] - offset[g], gx, gy;
        motion_estimate(given[g], given[r], c->channels, c->frame_size, &gx, &gy);  // the camera's, the base
        motion_estimate_tiles(given[g], given[r], c->channels, c->frame_size, tiles, gx, gy, dx, dy);
        for (int t = 0; t < n; t++) vx[t] += dx[t] * gap, vy[t] += dy[t] * gap;
        ss += gap * gap;
    }
    for (int t = 0; t < n; t++) vx[t] = ss > 0 ? vx[t] / ss : 0, vy[t] = ss > 0 ? vy[t] / ss : 0;
    free(dx);
}

// The tiles a side of delta_reference = local at this frame size; 0 where the frame is no whole
// number of tiles (or too small for two), where the global motion stands in.
static int local_tiles(const Config *c) {
    int N = c->frame_size;
    return N % MOTION_TILE == 0 && N >= 2 * MOTION_TILE ? N / MOTION_TILE : 0;
}

// anchor_snap: each pixel of the reference within the threshold of the anchor's in every channel takes
// the anchor's values. The anchor is the one given frame the chain never made; snapping to it drops a
// made frame's small errors (speckle) wherever the scene has not changed, instead of carrying them on
// to the next window, and moves no pixel by more than the threshold. Only a reference that stands
// still is snapped: under a moving camera the anchor's pixel at the same place is another point of
// the scene, met by chance in flat regions (docs/quality.md: +0.55-0.59 dB on the pans in three
// seeds, the real set as it was).
static void snap_to_anchor(const Config *c, real *ref, const real *anchor) {
    size_t plane = (size_t)c->frame_size * c->frame_size;
    for (size_t p = 0; p < plane; p++) {
        int near = 1;
        for (int ch = 0; ch < c->channels && near; ch++)
            near = fabs((double)ref[ch * plane + p] - anchor[ch * plane + p]) < c->anchor_snap;
        if (near)
            for (int ch = 0; ch < c->channels; ch++) ref[ch * plane + p] = anchor[ch * plane + p];
    }
}

// delta_reference = objects: reference slot r's frame cut into background and objects, each object's
// velocity by least squares over the context slots next to r in time (as reference_velocity finds
// the global one). Returns whether any object moves; s->count < 0 where r has no flat background.
#define OBJECT_TOL 0.1  // neighbours within this in every channel are one region of like colour
static int reference_objects(const Config *c, const real *const *given, const float *offset, int r, ObjectScene *s) {
    int N = c->frame_size;
    objects_segment(s, given[r], c->channels, N, OBJECT_TOL);
    if (s->count <= 0) return 0;
    int before, after, moving = 0;
    context_neighbours(c, offset, r, &before, &after);
    double dx[OBJECT_MAX], dy[OBJECT_MAX], ss = 0;
    for (int k = 0; k < 2; k++) {
        int g = k ? after : before;
        if (g < 0) continue;
        double gap = offset[r] - offset[g];
        objects_shift(s, given[g], given[r], c->channels, dx, dy);
        for (int o = 0; o < s->count; o++) s->dx[o] += dx[o] * gap, s->dy[o] += dy[o] * gap;
        ss += gap * gap;
    }
    for (int o = 0; o < s->count; o++) s->dx[o] = ss > 0 ? s->dx[o] / ss : 0, s->dy[o] = ss > 0 ? s->dy[o] / ss : 0;
    for (int o = 0; o < s->count; o++) moving |= s->dx[o] != 0 || s->dy[o] != 0;
    return moving;
}

void flow_references(const Config *c, const real *const *given, const float *offset, real *refs) {
    int N = c->frame_size;
    size_t E = (size_t)c->channels * N * N;
    double vx[MAX_SLOTS], vy[MAX_SLOTS], zl[MAX_SLOTS] = {0};  // zl: the zoom, ls a frame (global_motion.h)
    int measured[MAX_SLOTS] = {0};  // targets sharing a reference slot share its motion: measured once (local:
                                    // 2 where its tiles move apart; objects: 3 where its objects move)
    int tiles = c->delta_reference == DELTA_REF_LOCAL ? local_tiles(c) : 0, n = tiles * tiles;
    double *tvx = tiles ? fc_malloc(sizeof(double) * 2 * MAX_SLOTS * n) : NULL;
    double *tvy = tiles ? tvx + MAX_SLOTS * n : NULL;
    ObjectScene scene[MAX_SLOTS];
    for (int f = 0; f < c->slots; f++) scene[f].label = NULL;
    for (int f = 0; f < c->slots; f++) {
        if (c->slot_kind[f] != SLOT_TARGET) continue;
        int r = config_reference_slot(c, f);
        double lead = offset[f] - offset[r];
        if (c->delta_reference == DELTA_REF_OBJECTS && !measured[r]) {  // over a flat background: objects
            int moving = reference_objects(c, given, offset, r, &scene[r]);
            if (moving) measured[r] = 3;
            else if (scene[r].count >= 0) vx[r] = vy[r] = 0, measured[r] = 1;  // a still scene: nearest's
            // else no flat background: moved's global motion, below
        }
        if (measured[r] == 3) {  // each object moved along its own motion
            objects_carry(refs + f * E, given[r], &scene[r], c->channels, lead, c->object_bounce);
            continue;  // its objects move: not snapped
        }
        if (tiles && !measured[r]) {  // delta_reference = local: a field of tile motions
            reference_velocity_tiles(c, given, offset, r, tiles, tvx + r * n, tvy + r * n);
            int uniform = 1;
            for (int t = 1; t < n; t++) uniform &= tvx[r * n + t] == tvx[r * n] && tvy[r * n + t] == tvy[r * n];
            vx[r] = tvx[r * n], vy[r] = tvy[r * n];
            measured[r] = uniform ? 1 : 2;  // one motion for all tiles: moved's shift
        }
        if (measured[r] == 2) {  // each tile carried along its own motion
            motion_carry_tiles(refs + f * E, given[r], c->channels, N, tiles, tvx + r * n, tvy + r * n, lead);
            continue;  // its tiles move: not snapped
        }
        if (!measured[r]) {
            vx[r] = vy[r] = zl[r] = 0;
            if (c->delta_reference != DELTA_REF_NEAREST)
                reference_velocity(c, given, offset, r, &vx[r], &vy[r], &zl[r]);
            measured[r] = 1;
        }
        if (vx[r] == 0 && vy[r] == 0 && zl[r] == 0) {
            memcpy(refs + f * E, given[r], sizeof(real) * E);
            if (c->anchor_snap > 0) snap_to_anchor(c, refs + f * E, given[config_anchor_slot(c)]);
        } else if (zl[r] == 0) {  // moved: not snapped
            // what comes into view past the fade: r's frame wrapped, or the anchor moved by the motion since it
            int a = c->reference_fill_from == FILL_FROM_ANCHOR ? config_anchor_slot(c) : r;
            double since = offset[f] - offset[a];
            motion_shift_fill_from(refs + f * E, given[r], c->channels, N, vx[r] * lead, vy[r] * lead, c->reference_fill,
                                   given[a], vx[r] * since, vy[r] * since);
        } else {  // moved and zoomed: the lead's frames' motions composed
            double u = zoom_lead(zl[r], lead);
            motion_zoom(refs + f * E, given[r], c->channels, N, vx[r] * u, vy[r] * u, zl[r] * lead);
        }
    }
    free(tvx);
    for (int f = 0; f < c->slots; f++)
        if (scene[f].label) objects_free(&scene[f]);
}

void flow_delta_targets(const Config *c, int B, real *x0) {
    if (c->targets != TARGETS_DELTAS) return;
    size_t E = (size_t)c->channels * c->frame_size * c->frame_size;
    real *refs = fc_malloc(sizeof(real) * c->slots * E);
    const real *given[MAX_SLOTS];
    for (int b = 0; b < B; b++) {
        real *w = x0 + (size_t)b * c->slots * E;
        for (int f = 0; f < c->slots; f++) given[f] = w + (size_t)f * E;
        flow_references(c, given, c->slot_offset, refs);
        for (int f = 0; f < c->slots; f++) {
            if (c->slot_kind[f] != SLOT_TARGET) continue;
            const real *ref = refs + f * E;
            for (size_t e = 0; e < E; e++) w[f * E + e] = (real)((w[f * E + e] - ref[e]) * c->delta_scale);
        }
    }
    free(refs);
}

void flow_delta_to_frame(const Config *c, real *frame, const real *delta, const real *reference, size_t E) {
    for (size_t e = 0; e < E; e++) frame[e] = (real)(reference[e] + delta[e] / c->delta_scale);
}
