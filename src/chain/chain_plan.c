// chain_plan.c: the order of windows of a long video (see chain_plan.h and docs/chain.md).
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "chain/chain_plan.h"
#include "base/common.h"

// What the chain needs to know of one plan: its offsets by kind, as whole frames.
typedef struct {
    int n_ctx, n_tgt;
    int ctx[MAX_SLOTS], tgt[MAX_SLOTS];  // ascending
    int has_zero_ctx;                     // a context slot at offset 0
} PlanShape;

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static int plan_shape(const Config *c, const char *role, int want_role, PlanShape *ps, char *err, size_t errlen) {
    if (c->role != want_role)
        return fc_errf(err, errlen, "the %s model was trained as role = %s", role, config_role_name(c->role));
    memset(ps, 0, sizeof *ps);
    for (int i = 0; i < c->slots; i++) {
        float o = c->slot_offset[i];
        if (o != floorf(o)) return fc_errf(err, errlen, "the %s plan: offset %g is not a whole frame", role, o);
        if (c->slot_kind[i] == SLOT_CONTEXT) ps->ctx[ps->n_ctx++] = (int)o, ps->has_zero_ctx |= o == 0;
        if (c->slot_kind[i] == SLOT_TARGET) ps->tgt[ps->n_tgt++] = (int)o;
    }
    qsort(ps->ctx, (size_t)ps->n_ctx, sizeof(int), cmp_int);
    qsort(ps->tgt, (size_t)ps->n_tgt, sizeof(int), cmp_int);
    return 0;
}

// The known frame nearest to f (ties to the earlier one): a context the video does not have yet.
static int nearest_known(const unsigned char *known, int limit, int f) {
    for (int d = 0; d <= limit; d++) {
        if (f - d >= 0 && f - d <= limit && known[f - d]) return f - d;
        if (f + d >= 0 && f + d <= limit && known[f + d]) return f + d;
    }
    return 0;  // frame 0 is always known
}

// Append the window of model c at reference frame n, its anchor the video frame `anchor`; marks the
// frames it makes as known.
static void add_window(ChainPlan *p, const Config *c, int n, int anchor, unsigned char *known, int limit) {
    ChainWindow *w = &p->w[p->count++];
    memset(w, 0, sizeof *w);
    w->role = c->role, w->n = n, w->slots = c->slots;
    for (int i = 0; i < c->slots; i++) {
        int kind = c->slot_kind[i], f = n + (int)c->slot_offset[i];
        w->kind[i] = (unsigned char)kind;
        if (kind == SLOT_ANCHOR) {
            // The anchor is the newest given frame (the first frame, or the last of the starter's
            // window when that is given); the network is told the plan's offset, the distance it
            // saw in training.
            w->frame[i] = anchor, w->offset[i] = c->slot_offset[i];
        } else if (kind == SLOT_CONTEXT) {
            w->frame[i] = nearest_known(known, limit, f), w->offset[i] = (float)(w->frame[i] - n);
        } else {
            w->frame[i] = f, w->offset[i] = (float)(f - n), w->keep[i] = f < p->frames;
        }
    }
    for (int i = 0; i < c->slots; i++)
        if (c->slot_kind[i] == SLOT_TARGET) known[w->frame[i]] = 1;
}

void chain_window_distances(const ChainWindow *w, float *distance) {
    for (int i = 0; i < w->slots; i++)
        distance[i] = w->kind[i] == SLOT_ANCHOR ? (float)(w->frame[i] - w->n) : w->offset[i];
}

int chain_build(ChainPlan *p, const Config *st, const Config *ex, const Config *in, int N, char *err,
                size_t errlen) {
    return chain_build_given(p, st, ex, in, N, 1, err, errlen);
}

int chain_build_given(ChainPlan *p, const Config *st, const Config *ex, const Config *in, int N, int given, char *err,
                      size_t errlen) {
    memset(p, 0, sizeof *p);
    PlanShape s, e, t;
    if (plan_shape(st, "starter", ROLE_STARTER, &s, err, errlen) ||
        plan_shape(ex, "extrapolate", ROLE_EXTRAPOLATE, &e, err, errlen) ||
        plan_shape(in, "interpolate", ROLE_INTERPOLATE, &t, err, errlen))
        return -1;
    if (st->frame_size != ex->frame_size || st->frame_size != in->frame_size || st->channels != ex->channels ||
        st->channels != in->channels)
        return fc_errf(err, errlen, "the models make frames of different sizes: starter %dx%dx%d, extrapolate %dx%dx%d, "
                    "interpolate %dx%dx%d", st->frame_size, st->frame_size, st->channels, ex->frame_size,
                    ex->frame_size, ex->channels, in->frame_size, in->frame_size, in->channels);
    // starter: the anchor at 0, no context, targets 1..n0
    for (int i = 0; i < st->slots; i++)
        if (st->slot_kind[i] == SLOT_ANCHOR && st->slot_offset[i] != 0)
            return fc_errf(err, errlen, "the starter plan: its anchor must be at offset 0 (the first frame)");
    if (s.n_ctx) return fc_errf(err, errlen, "the starter plan has context slots; it starts from the first frame alone");
    for (int i = 0; i < s.n_tgt; i++)
        if (s.tgt[i] != i + 1) return fc_errf(err, errlen, "the starter plan: its targets must be frames 1, 2, ... in a row");
    int n0 = s.tgt[s.n_tgt - 1];
    // extrapolate: contexts at or before its reference frame (one at 0), targets at stride, 2 stride, ...
    int stride = e.tgt[0];
    if (!e.has_zero_ctx || e.ctx[e.n_ctx - 1] > 0)
        return fc_errf(err, errlen, "the extrapolate plan: needs a context slot at offset 0 and none after it");
    for (int i = 0; i < e.n_tgt; i++)
        if (stride < 1 || e.tgt[i] != stride * (i + 1))
            return fc_errf(err, errlen, "the extrapolate plan: its targets must be at offsets s, 2s, 3s, ... (s >= 1)");
    // interpolate: contexts at 0 and at the stride (the keyframes around a gap), targets 1..stride-1
    int has_far = 0;
    for (int i = 0; i < t.n_ctx; i++) has_far |= t.ctx[i] == stride;
    if (!t.has_zero_ctx || !has_far)
        return fc_errf(err, errlen, "the interpolate plan: needs context slots at 0 and at %d (the extrapolate stride)",
                    stride);
    if (t.n_tgt != stride - 1)
        return fc_errf(err, errlen, "the interpolate plan: %d targets, but a gap between keyframes %d frames apart has %d",
                    t.n_tgt, stride, stride - 1);
    for (int i = 0; i < t.n_tgt; i++)
        if (t.tgt[i] != i + 1) return fc_errf(err, errlen, "the interpolate plan: its targets must be at 1 .. %d", stride - 1);
    if (N < n0 + 1) return fc_errf(err, errlen, "%d frames: the chain makes at least %d (the starter's window)", N, n0 + 1);
    if (given != 1 && given != n0 + 1)
        return fc_errf(err, errlen, "--given %d: the chain starts from 1 (the first frame) or %d (the starter's "
                       "window, for these models)", given, n0 + 1);

    // Keyframes at n0 + j * stride; each extrapolate window makes e.n_tgt of them.
    int advance = e.tgt[e.n_tgt - 1];
    int rounds = N - 1 > n0 ? (N - 1 - n0 + advance - 1) / advance : 0;
    int limit = n0 + rounds * advance;
    p->frames = N, p->last_frame = limit;
    size_t windows = (size_t)1 + (size_t)rounds * (1 + e.n_tgt);
    p->w = calloc(windows, sizeof(ChainWindow));
    unsigned char *known = calloc((size_t)limit + 1, 1);
    if (!p->w || !known) {
        free(p->w), free(known);
        memset(p, 0, sizeof *p);
        return fc_errf(err, errlen, "%d frames: out of host memory for the chain's plan of %zu windows (%.0f MB)", N,
                       windows, (double)windows * sizeof(ChainWindow) / 1e6);
    }
    // The anchor: the newest real frame. Given the starter's window, frame n0: the anchor grounds what the
    // chain makes (anchor_snap, the drift guards), and an older given frame would pull the frames after
    // n0 back to it, undoing the motion of the given ones.
    int anchor = given - 1;
    known[0] = 1;
    if (given == 1) add_window(p, st, 0, anchor, known, limit);
    else memset(known, 1, (size_t)n0 + 1);
    for (int r = 0, n = n0; r < rounds; r++, n += advance) {
        add_window(p, ex, n, anchor, known, limit);
        for (int j = 0; j < e.n_tgt && n + j * stride + 1 <= N - 1; j++)
            add_window(p, in, n + j * stride, anchor, known, limit);
    }
    free(known);
    return 0;
}

void chain_frame_use(const ChainPlan *p, int *made, int *last_read) {
    for (int f = 0; f <= p->last_frame; f++) made[f] = last_read[f] = -1;
    for (int k = 0; k < p->count; k++) {
        const ChainWindow *w = &p->w[k];
        for (int i = 0; i < w->slots; i++) {
            if (w->kind[i] == SLOT_TARGET) made[w->frame[i]] = k;
            last_read[w->frame[i]] = k;  // windows come in order: the last one seen reads it last
        }
    }
}

void chain_free(ChainPlan *p) {
    free(p->w);
    memset(p, 0, sizeof *p);
}
