// test_sampler.c: the chain's sampler (src/chain/sampler.c) against what the flow says it must make.
// A network whose every weight is zero predicts its last layer's bias b at every token, whatever its
// input: the velocity v = e - x0 is then known, and Euler's steps from t = 1 to 0 must end at
// x0 = (the starting noise, of the temperature's standard deviation) - b on every target slot; with
// delta targets, the target's reference frame plus that over delta_scale. So the direction and length
// of the steps, the noise's draw and scale, which given frame each target is made from, and where a
// chain given 7 frames opens the colour guard's band are all checked against numbers the test works
// out by itself.
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "chain/chain_plan.h"
#include "chain/sampler.h"
#include "check.h"
#include "model/flow.h"
#include "model/model.h"

// The model of config `path` (with `keys` set) for B windows, every parameter zero but the last
// layer's bias, which is bias[k] = base + 0.4 sin(k + 1): a value for each of a patch's P*P*C outputs.
static Model *velocity_model(const char *path, const char *const *keys, int B, double base, real *bias) {
    Config c;
    config_defaults(&c);
    config_load(&c, path);
    for (; keys && *keys; keys++) config_set(&c, *keys, "test");
    config_validate(&c, path);
    Model *m = build_model(&c, backend_cpu(), B);
    memset(m->params_mem, 0, sizeof(real) * m->n_params);
    const ParamInfo *b = model_find_param(m, "final.linear.bias");
    for (size_t k = 0; k < b->numel; k++) bias[k] = m->params_mem[b->offset + k] = (real)(base + 0.4 * sin((double)k + 1));
    return m;
}


// The velocity the model predicts at pixel e (channel, row, column) of a frame: its bias for the
// patch element the pixel is (docs/network.md: y[(py*P + px)*C + c]).
static double velocity_at(const Config *c, const real *bias, size_t e) {
    int S = c->frame_size, P = c->patch, C = c->channels;
    int ch = (int)(e / ((size_t)S * S)), y = (int)(e / S % S), x = (int)(e % S);
    return bias[((y % P) * P + x % P) * C + ch];
}

static double clamp1(double v) { return v < -1 ? -1 : v > 1 ? 1 : v; }

// The starter (targets are frames): each target slot of window b must end at T e_b - b, clamped, where
// e_b is the window's noise (seed, window b, RNG_NOISE, at the slot's offset). Returns the worst
// difference over the windows' target slots.
static double starter_error(int steps, double temperature) {
    real bias[256];
    Model *m = velocity_model("configs/tiny/starter.conf", NULL, 2, 0, bias);
    size_t E = (size_t)m->E, W = (size_t)m->F * E;
    real *win = fc_malloc(sizeof(real) * 2 * W), *noise = fc_malloc(sizeof(real) * E);
    philox_fill_uniform(win, 2 * W, -1, 1, 5, 0, RNG_TEST, 0);  // the anchors; targets overwritten
    SampleOptions o = {.steps = steps, .seed = 77, .noise_aug = 0.1, .guidance = 1, .temperature = temperature};
    sample_plan_windows(m, win, 0, &o);
    double worst = 0;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < m->F; i++) {
            if (m->cfg.slot_kind[i] != SLOT_TARGET) continue;
            philox_fill_normal(noise, E, 0, (real)temperature, 77, (uint32_t)b, RNG_NOISE, i * E);
            for (size_t e = 0; e < E; e++) {
                double want = clamp1(noise[e] - velocity_at(&m->cfg, bias, e));
                worst = worse(worst, fabs(win[b * W + i * E + e] - want));
            }
        }
    free(win), free(noise), free_model(m);
    return worst;
}

// The windows of a plan sampled alone (training's previews) measure the anchor's distance as the
// plan's offset, as training's references do: extrapolate windows of a texture panning 0.5 pixel a
// frame, the moved reference with what comes into view filled from the anchor (where the anchor's
// distance moves what is read), at temperature 0: each target must end at its reference, worked out
// by flow_references with the plan's offsets, less b / delta_scale.
static void texture_at(real *f, const Config *c, double dx, double dy) {
    int S = c->frame_size;
    for (int ch = 0; ch < c->channels; ch++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double X = x - dx, Y = y - dy;
                f[((size_t)ch * S + y) * S + x] = (real)(0.5 * sin(0.7 * X + 0.3 * Y + ch) * cos(0.4 * Y - 0.2 * X + ch));
            }
}
static void test_preview_anchor_distance(void) {
    const char *keys[] = {"delta_reference=moved", "anchor_snap=0", "reference_fill=16", "reference_fill_from=anchor",
                          "delta_scale=2", NULL};
    real bias[256];
    Model *m = velocity_model("configs/small/extrapolate.conf", keys, 1, 0, bias);
    const Config *c = &m->cfg;
    size_t E = (size_t)m->E;
    real *win = fc_malloc(sizeof(real) * m->F * E), *refs = fc_malloc(sizeof(real) * m->F * E);
    const real *given[MAX_SLOTS];
    for (int i = 0; i < m->F; i++) {
        texture_at(win + i * E, c, 0.5 * c->slot_offset[i], -0.25 * c->slot_offset[i]);
        given[i] = win + i * E;
    }
    flow_references(c, given, c->slot_offset, refs);
    SampleOptions o = {.steps = 2, .seed = 3, .noise_aug = 0, .guidance = 1, .temperature = 0};
    sample_plan_windows(m, win, 0, &o);
    double worst = 0;
    for (int i = 0; i < m->F; i++)
        if (c->slot_kind[i] == SLOT_TARGET)
            for (size_t e = 0; e < E; e++)
                worst = worse(worst, fabs(win[i * E + e] - clamp1(refs[i * E + e] - velocity_at(c, bias, e) / 2)));
    check(worst < 1e-5, "sampler_preview_anchor_at_plan_offset",
          "extrapolate windows sampled alone, the fill read from the anchor at the plan's offset %g: worst "
          "difference from the references training makes %.2g", c->slot_offset[config_anchor_slot(c)], worst);
    free(win), free(refs), free_model(m);
}

// A chain given frames 0-6 (eval --given 7) with the colour guard over a ramp of 4 frames: the band
// is wide for the frames made just after the given ones and the guard's own from the 4th on, counted
// from frame 6, the last given one and the chain's anchor. Models that make every frame near -0.8 (far
// darker than the given frames): frame 7 is let stay dark, frame 12 is pulled to the anchor's mean.
static void test_colour_band_from_given(void) {
    real bias[256];
    ChainModels cm = {.size = 32, .channels = 3};
    const char *roles[3] = {"configs/tiny/starter.conf", "configs/tiny/extrapolate.conf", "configs/tiny/interpolate.conf"};
    for (int r = 0; r < 3; r++) cm.m[r] = velocity_model(roles[r], NULL, 1, 0.8, bias);
    ChainPlan p;
    char err[256];
    int rc = chain_build_given(&p, &cm.m[0]->cfg, &cm.m[1]->cfg, &cm.m[2]->cfg, 21, 7, err, sizeof err);
    if (rc) {
        check(0, "sampler_colour_band_from_given", "%s", err);
        for (int r = 0; r < 3; r++) free_model(cm.m[r]);
        return;
    }
    size_t E = (size_t)cm.m[0]->E, P = E / 3;
    real *frames = fc_malloc(sizeof(real) * (p.last_frame + 1) * E);
    philox_fill_uniform(frames, 7 * E, -0.5, 0.5, 3, 0, RNG_TEST, 0);  // the given frames 0-6
    SampleOptions o = {.steps = 2, .seed = 4, .noise_aug = 0.1, .guidance = 1, .temperature = 0, .colour_guard = 0.05,
                       .colour_ramp = 4, .quiet = 1};
    if (chain_sample(&cm, &p, frames, &o, err, sizeof err)) check(0, "sampler_colour_band_sampled", "%s", err);
    double ratio[2];  // the red channel's mean over frame 6's (anchor), values in [0, 1]: frames 7 and 12
    int at[2] = {7, 12};
    for (int k = 0; k < 2; k++) {
        double m = 0, m0 = 0;
        for (size_t i = 0; i < P; i++) m += 0.5 * (frames[at[k] * E + i] + 1), m0 += 0.5 * (frames[6 * E + i] + 1);
        ratio[k] = m / m0;
    }
    check(ratio[0] < 0.5 && fabs(ratio[1] - 1) <= 0.05 + 1e-6, "sampler_colour_band_from_given",
          "given frames 0-6, colour guard 0.05 over 4 frames: frame 7's mean %.3f of frame 6's (the band open "
          "after the last given frame), frame 12's %.3f (held within 5%%)", ratio[0], ratio[1]);
    chain_free(&p);
    free(frames);
    for (int r = 0; r < 3; r++) free_model(cm.m[r]);
}

// What the sampler feeds the network (the zero network ignores it, so the tests above cannot see it):
// after the last predict of an extrapolate window (anchor:-12, context at -8, -4 and 0, three targets)
// at 2 Euler steps, the anchor clean at t = 0, each context frame noised to the augmentation level L
// and told t = L (the level training showed it: docs/chain.md), the targets at the last step's 0.5.
// With guidance, the last predict is the unconditional one: every given slot noise at t = 1, as
// cond_drop trains it. Returns the worst difference of the inputs from these.
static double fed_error(double guidance, double *worst_t) {
    real bias[256];
    Model *m = velocity_model("configs/tiny/extrapolate.conf", NULL, 1, 0, bias);
    size_t E = (size_t)m->E, W = (size_t)m->F * E;
    real *win = fc_malloc(sizeof(real) * W), *given = fc_malloc(sizeof(real) * W), *noise = fc_malloc(sizeof(real) * E);
    philox_fill_uniform(given, W, -1, 1, 6, 0, RNG_TEST, 0);
    memcpy(win, given, sizeof(real) * W);
    const double L = 0.2;
    SampleOptions o = {.steps = 2, .seed = 31, .noise_aug = L, .guidance = guidance, .temperature = 1};
    sample_plan_windows(m, win, 0, &o);
    double worst = 0;
    *worst_t = 0;
    for (int i = 0; i < m->F; i++) {
        int kind = m->cfg.slot_kind[i];
        double want_t = kind == SLOT_TARGET ? 0.5 : guidance != 1 ? 1 : kind == SLOT_CONTEXT ? L : 0;
        *worst_t = worse(*worst_t, fabs(m->in.t[i] - want_t));
        if (kind == SLOT_TARGET) continue;
        if (guidance != 1) philox_fill_normal(noise, E, 0, 1, 31, 0, RNG_DROP, i * E);
        else if (kind == SLOT_CONTEXT) philox_fill_normal(noise, E, 0, 1, 31, 0, RNG_AUG, i * E);
        for (size_t e = 0; e < E; e++) {
            double g = given[i * E + e];
            double want = guidance != 1 ? noise[e] : kind == SLOT_CONTEXT ? (1 - L) * g + L * noise[e] : g;
            worst = worse(worst, fabs(m->in.xt[i * E + e] - want));
        }
    }
    free(win), free(given), free(noise), free_model(m);
    return worst;
}

// Guidance: v = v_u + w (v_c - v_u). At one Euler step from t = 1 a target ends at e - v, so the
// frames made at w = 0 (the unconditional prediction alone), 1 (no guidance: the conditional one) and
// 2 lie on a line: f1 - f0 = f2 - f1 = -(v_c - v_u), element by element where none is clamped. A
// starter with random weights, so that the two predictions differ.
static void test_guidance_line(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    config_validate(&c, "configs/tiny/starter.conf");
    Model *m = build_model(&c, backend_cpu(), 1);
    size_t E = (size_t)m->E, W = (size_t)m->F * E;
    real *f[3];
    for (int w = 0; w < 3; w++) {
        model_init(m, 12, 1);  // every parameter non-zero: the last layer is zero at a real init
        f[w] = fc_malloc(sizeof(real) * W);
        philox_fill_uniform(f[w], W, -1, 1, 8, 0, RNG_TEST, 0);
        SampleOptions o = {.steps = 1, .seed = 5, .noise_aug = 0, .guidance = w, .temperature = 0.5};
        sample_plan_windows(m, f[w], 0, &o);
    }
    double worst = 0, gap = 0;
    long used = 0, targets = 0;
    for (int i = 0; i < m->F; i++) {
        if (m->cfg.slot_kind[i] != SLOT_TARGET) continue;
        for (size_t e = i * E; e < (i + 1) * E; e++, targets++) {
            if (fabs(f[0][e]) > 0.99 || fabs(f[1][e]) > 0.99 || fabs(f[2][e]) > 0.99) continue;  // clamped
            worst = worse(worst, fabs((f[1][e] - f[0][e]) - (f[2][e] - f[1][e])));
            gap = worse(gap, fabs(f[1][e] - f[0][e]));
            used++;
        }
    }
    check(worst < 1e-5 && gap > 1e-3 && used > targets / 2, "sampler_guidance_line",
          "one Euler step at w = 0, 1, 2: (f1 - f0) - (f2 - f1) at most %.2g over %ld of %ld target values (the "
          "others clamped); the conditional and unconditional frames differ by up to %.3f", worst, used, targets,
          gap);
    for (int w = 0; w < 3; w++) free(f[w]);
    free_model(m);
}

int main(void) {
    double wt1, wt2, wx1 = fed_error(1, &wt1), wx2 = fed_error(2, &wt2);
    check(wx1 < 1e-6 && wt1 < 1e-7, "sampler_feeds_levels",
          "the network's inputs at the last step: the anchor clean at t = 0, context frames noised to 0.2 and "
          "told t = 0.2, targets at 0.5: worst level off by %.2g, worst input value by %.2g", wt1, wx1);
    check(wx2 < 1e-6 && wt2 < 1e-7, "sampler_guidance_drops_given",
          "guidance 2, the unconditional pass: every given slot noise told t = 1: worst level off by %.2g, worst "
          "input value by %.2g", wt2, wx2);
    test_guidance_line();

    // Euler's steps: x0 = x1 - v, for any number of steps, from noise of the temperature's scale.
    double e1 = starter_error(1, 1.0), e5 = starter_error(5, 1.0), e0 = starter_error(5, 0.0),
           eh = starter_error(3, 0.5);
    check(e1 < 1e-6 && e5 < 1e-6 && e0 < 1e-6 && eh < 1e-6, "sampler_euler_constant_velocity",
          "a network predicting v = b everywhere: every target frame ends at T e - b (clamped); worst difference "
          "%.2g at 1 step, %.2g at 5, %.2g at temperature 0, %.2g at 3 steps and temperature 0.5", e1, e5, e0, eh);

    // Delta targets: each target is made from its nearest given frame (a tie: the earlier one in the
    // plan) plus the sample over delta_scale. The interpolate plan anchor:-8 context:-1 context:0
    // context:4 target:1 target:2 target:3: targets 1 and 2 from the context at 0 (2 is a tie with 4),
    // target 3 from the context at 4. Every given frame a flat value of its own, window 1's others.
    const char *keys[] = {"delta_reference=nearest", "anchor_snap=0", "delta_scale=8", NULL};
    real bias[256];
    Model *m = velocity_model("configs/small/interpolate.conf", keys, 2, 0, bias);
    size_t E = (size_t)m->E, W = (size_t)m->F * E;
    real *win = fc_malloc(sizeof(real) * 2 * W);
    double value[2][8];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < m->F; i++) {
            value[b][i] = m->cfg.slot_kind[i] == SLOT_TARGET ? 0 : -0.6 + 0.3 * i + 0.1 * b;
            for (size_t e = 0; e < E; e++) win[b * W + i * E + e] = (real)value[b][i];
        }
    SampleOptions o = {.steps = 4, .seed = 9, .noise_aug = 0.1, .guidance = 1, .temperature = 0};
    sample_plan_windows(m, win, 0, &o);
    int from_slot[8] = {0};
    for (int i = 0; i < m->F; i++) {
        int best = -1;
        for (int j = 0; j < m->F; j++)
            if (m->cfg.slot_kind[j] != SLOT_TARGET &&
                (best < 0 || fabs(m->cfg.slot_offset[j] - m->cfg.slot_offset[i]) <
                                 fabs(m->cfg.slot_offset[best] - m->cfg.slot_offset[i])))
                best = j;
        from_slot[i] = best;
    }
    double worst = 0;
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < m->F; i++)
            if (m->cfg.slot_kind[i] == SLOT_TARGET)
                for (size_t e = 0; e < E; e++) {
                    double want = clamp1(value[b][from_slot[i]] - velocity_at(&m->cfg, bias, e) / 8);
                    worst = worse(worst, fabs(win[b * W + i * E + e] - want));
                }
    int ties_earlier = from_slot[5] == 2 && from_slot[6] == 3;  // target:2 from context:0, target:3 from 4
    check(worst < 1e-6 && ties_earlier, "sampler_delta_targets_nearest",
          "interpolate windows of flat given frames at temperature 0: each target is its nearest given frame "
          "- b / delta_scale, worst difference %.2g (target 2 made from slot %d, target 3 from slot %d)", worst,
          from_slot[5], from_slot[6]);
    free(win), free_model(m);
    test_preview_anchor_distance();
    test_colour_band_from_given();

    // the built-in clips as a first frame: clip numbers to 2^32 - 1, the next refused in one line
    real *first = fc_malloc(sizeof(real) * 3 * 16 * 16);
    char err[256] = "";
    int top = load_first_frames("shapes:4294967295", 16, 1, first, err, sizeof err);
    char err2[256] = "";
    int past = load_first_frames("shapes:4294967296", 16, 1, first, err2, sizeof err2);
    check(top == 0 && past == -1 && *err2 && !strchr(err2, '\n'), "first_frame_shapes_range",
          "shapes:4294967295 %s; shapes:4294967296: %s", top ? err : "read", past ? err2 : "accepted");
    free(first);
    return g_failed ? 1 : 0;
}
