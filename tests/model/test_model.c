// test_model.c: the model layer: the parameter layout of the network and its initialisation, the
// flow objective, the memory plan against what build_model allocates, its total and a rank's part of
// it, keep_blocks = auto, and recompute against keeping every activation.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/tiny_model.h"
#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "model/flow.h"
#include "model/memplan.h"
#include "model/model.h"

static void test_param_layout(void) {
    Config c;
    config_defaults(&c);
    Model *m = build_model(&c, backend_cpu(), 1);
    int D = c.width, dh = D / c.heads, RD = c.mlp_ratio * D, PPC = c.patch * c.patch * c.channels;
    size_t per_attn = 3 * D * D + 3 * D + 2 * dh + D * D + D;
    size_t per_block = 9 * D * D + 9 * D + 2 * per_attn + RD * D + RD + D * RD + D;
    size_t expect = D * PPC + D + D * c.freq_dim + D + D * c.freq_dim + D + D * D + D + c.depth * per_block +
                    2 * D * D + 2 * D + PPC * D + PPC;
    check(m->n_params == expect, "param_count_formula", "%zu parameters, formula says %zu", m->n_params, expect);
    size_t off = 0;
    int contiguous = 1;
    for (int i = 0; i < m->n_tensors; i++) contiguous &= m->info[i].offset == off, off += m->info[i].numel;
    check(contiguous && off == m->n_params, "params_one_allocation", "%d tensors laid end to end", m->n_tensors);
    const ParamInfo *pi = model_find_param(m, "blocks.1.attn_t.qkv.weight");
    check(pi && pi->shape[0] == 3 * D && pi->shape[1] == D &&
              m->p.blocks[1].attn[1].qkv_w == m->params_mem + pi->offset,
          "param_names_and_pointers", "blocks.1.attn_t.qkv.weight (3D, D) at its pointer");
    // adaLN-Zero: the training init makes the network's output exactly 0
    model_init(m, 5, 0);
    philox_fill_normal(m->in.xt, (size_t)m->S * m->E, 0, 1, 5, 0, RNG_TEST, 0);
    for (int s = 0; s < m->S; s++) m->in.t[s] = (real)(s % 3) / 3, m->in.offset[s] = (real)s;
    model_forward(m);
    double mx = 0;
    for (size_t i = 0; i < (size_t)m->S * m->E; i++) mx = fmax(mx, fabs(m->a.pred[i]));
    check(mx == 0, "adaln_zero_init_output_is_zero", "max |pred| = %g", mx);
    free_model(m);
}

// The initialisation: every Xavier tensor uniform on +-sqrt(6 / (fan_in + fan_out)) of its shape (all
// inside, the largest near the bound, the mean square bound^2 / 3); with the random init, every norm's
// weight in [0.9, 1.1] and drawn apart from the others (no two norm tensors the same values).
static void test_param_init(void) {
    Config c;
    config_defaults(&c);
    Model *m = build_model(&c, backend_cpu(), 1);
    model_init(m, 5, 0);
    int xavier = 0, xavier_ok = 1;
    double worst_ratio = 1;
    const char *bad = "";
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        if (pi->init != INIT_XAVIER || pi->ndim != 2 || pi->numel < 1000) continue;
        double bound = sqrt(6.0 / ((double)pi->shape[0] + pi->shape[1])), mx = 0, sq = 0;
        const real *w = m->params_mem + pi->offset;
        for (size_t k = 0; k < pi->numel; k++) mx = fmax(mx, fabs(w[k])), sq += (double)w[k] * w[k];
        double ms_ratio = sq / pi->numel / (bound * bound / 3);
        int ok = mx <= bound && mx >= 0.95 * bound && fabs(ms_ratio - 1) < 0.1;
        if (!ok) xavier_ok = 0, bad = pi->name;
        worst_ratio = fabs(ms_ratio - 1) > fabs(worst_ratio - 1) ? ms_ratio : worst_ratio;
        xavier++;
    }
    check(xavier > 0 && xavier_ok, "param_init_xavier_bound",
          "%d Xavier weights of 1000+ values: max |w| in [0.95, 1] x sqrt(6 / (fan_in + fan_out)), mean square / "
          "(bound^2 / 3) worst %.3f%s%s", xavier, worst_ratio, *bad ? "; wrong: " : "", bad);
    model_init(m, 5, 1);
    int norms = 0, in_range = 1, repeats = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        if (pi->init != INIT_NORM) continue;
        norms++;
        const real *w = m->params_mem + pi->offset;
        for (size_t k = 0; k < pi->numel; k++) in_range &= w[k] >= (real)0.9 && w[k] <= (real)1.1;
        for (int j = 0; j < i; j++)
            if (m->info[j].init == INIT_NORM && m->info[j].numel == pi->numel &&
                !memcmp(w, m->params_mem + m->info[j].offset, sizeof(real) * pi->numel))
                repeats++;
    }
    check(norms > 1 && in_range && repeats == 0, "param_init_random_norms_distinct",
          "%d norm weights, random init: all in [0.9, 1.1] %d, pairs with identical values %d", norms, in_range,
          repeats);
    free_model(m);
}

// The training init against docs/network.md's rules, each tensor classed by its name (not by the
// rule the layout gave it, so that a tensor bound to the wrong rule is caught too): the t_embed MLP
// weights normal with std 0.02 (the sample std within 5%, the mean within 0.1 std); adaLN,
// final.adaLN and final.linear weights and every bias exactly 0; q_norm and k_norm weights exactly 1;
// every other weight Xavier-uniform, inside +-sqrt(6 / (fan_in + fan_out)).
static void test_param_init_rules(void) {
    Config c;
    config_defaults(&c);
    Model *m = build_model(&c, backend_cpu(), 1);
    model_init(m, 5, 0);
    int n_normal = 0, n_zero = 0, n_one = 0, n_xavier = 0, bad_count = 0;
    double worst_sd = 0;  // the largest |std / 0.02 - 1| of the normal tensors
    char bad[300] = "";
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        const char *nm = pi->name;
        const real *w = m->params_mem + pi->offset;
        size_t len = strlen(nm);
        int bias = len > 5 && !strcmp(nm + len - 5, ".bias");
        int ok = 1;
        char what[120] = "";
        if (bias || (strstr(nm, "adaLN.") || !strncmp(nm, "final.linear.", 13))) {
            for (size_t k = 0; k < pi->numel; k++) ok &= w[k] == 0;
            n_zero++;
            snprintf(what, sizeof what, "not all 0");
        } else if (strstr(nm, ".q_norm.") || strstr(nm, ".k_norm.")) {
            for (size_t k = 0; k < pi->numel; k++) ok &= w[k] == 1;
            n_one++;
            snprintf(what, sizeof what, "not all 1");
        } else if (!strncmp(nm, "t_embed.mlp.", 12)) {
            double sum = 0, sq = 0;
            for (size_t k = 0; k < pi->numel; k++) sum += w[k], sq += (double)w[k] * w[k];
            double mean = sum / pi->numel, sd = sqrt(sq / pi->numel - mean * mean);
            ok = fabs(sd / 0.02 - 1) < 0.05 && fabs(mean) < 0.002 && pi->numel >= 1000;
            worst_sd = worse(worst_sd, fabs(sd / 0.02 - 1));
            n_normal++;
            snprintf(what, sizeof what, "std %.4f, mean %.5f of %zu values", sd, mean, pi->numel);
        } else {
            double bound = sqrt(6.0 / ((double)pi->shape[0] + pi->shape[1])), mx = 0;
            for (size_t k = 0; k < pi->numel; k++) mx = fmax(mx, fabs(w[k]));
            ok = pi->ndim == 2 && mx <= bound && mx >= 0.5 * bound;
            n_xavier++;
            snprintf(what, sizeof what, "max |w| %.4f, bound %.4f", mx, bound);
        }
        if (!ok && bad_count++ < 2)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), "; %s: %s", nm, what);
    }
    check(bad_count == 0 && n_normal == 2 && n_zero > 0 && n_one > 0 && n_xavier > 0, "param_init_rules",
          "%d tensors: %d normal (std 0.02, worst off by %.1f%%), %d zero, %d one, %d Xavier; %d wrong%s",
          m->n_tensors, n_normal, 100 * worst_sd, n_zero, n_one, n_xavier, bad_count, bad);
    free_model(m);
}

static void test_flow(void) {
    Config c;
    config_defaults(&c);
    config_set(&c, "plan=anchor:0 context:4 target:8 target:12", "test");
    config_set(&c, "t_logit_mean=0.5", "test");
    config_set(&c, "t_logit_std=1.5", "test");
    c.frame_size = 8, c.patch = 4, c.width = 48, c.freq_dim = 8;
    Model *m = build_model(&c, backend_cpu(), 3);
    size_t nx = (size_t)m->S * m->E;
    real *x0 = fc_malloc(sizeof(real) * nx);
    philox_fill_uniform(x0, nx, -1, 1, 3, 0, RNG_TEST, 0);
    flow_prepare_batch(m, x0, 0, 3, 42);
    double worst = 0;
    int levels_ok = 1;
    for (int s = 0; s < m->S; s++) {
        int f = s % m->F, target = c.slot_kind[f] == SLOT_TARGET;
        real t = m->in.t[s];
        levels_ok &= target ? (t > 0 && t < 1 && t == m->in.t[(s / m->F) * m->F + 2]) : t == 0;
        levels_ok &= m->in.mask[s] == (real)target && m->in.offset[s] == c.slot_offset[f];
        for (long e = 0; e < m->E; e++) {
            size_t k = (size_t)s * m->E + e;
            double noise = philox_normal(3, 42, RNG_NOISE, k);
            worst = worse(worst, fabs(m->in.xt[k] - ((1 - t) * x0[k] + t * noise)));
            worst = worse(worst, fabs(m->in.v[k] - (noise - x0[k])));
            if (!target && m->in.xt[k] != x0[k]) levels_ok = 0;  // t = 0 slots are the clean frames, exactly
        }
    }
    check(levels_ok, "flow_slot_levels", "targets share one t in (0, 1) per window, anchor and context are clean");
    check(worst < 1e-6, "flow_xt_and_target", "x_t = (1-t) x0 + t e and v = e - x0 within %.1e", worst);
    // the target level is logit-normal: logit(t) has the configured mean and std
    enum { W = 20000 };
    real *t = fc_malloc(sizeof(real) * W * c.slots), *off = fc_malloc(sizeof(real) * W * c.slots);
    real *mask = fc_malloc(sizeof(real) * W * c.slots);
    flow_slot_levels(&c, W, 0, 5, 0, t, off, mask);
    double sum = 0, sq = 0;
    for (int b = 0; b < W; b++) {
        double z = log(t[b * c.slots + 2] / (1 - t[b * c.slots + 2]));
        sum += z, sq += z * z;
    }
    double mean = sum / W, sd = sqrt(sq / W - mean * mean);
    check(fabs(mean - 0.5) < 0.05 && fabs(sd - 1.5) < 0.05, "flow_t_logit_normal", "logit(t): mean %.3f std %.3f", mean,
          sd);
    free(t), free(off), free(mask), free(x0);
    free_model(m);
}

// Conditioning (docs/network.md): the reference slots of the shipped plans, the input the network
// assembles with cond_concat, delta targets and their inverse, and cond_drop's dropped windows.
static void test_conditioning(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/small/interpolate.conf");  // anchor:-8 context:-1 context:0 context:4 target:1 2 3
    int want[7] = {0, 1, 2, 3, 2, 2, 3};  // target 2 ties between offsets 0 and 4: the earlier slot
    int refs_ok = 1;
    for (int f = 0; f < c.slots; f++) refs_ok &= config_reference_slot(&c, f) == want[f];
    Config e;
    config_defaults(&e);
    config_load(&e, "configs/small/extrapolate.conf");  // anchor:-12 context:-8 -4 0 target:4 8 12
    for (int f = 4; f < 7; f++) refs_ok &= config_reference_slot(&e, f) == 3;
    check(refs_ok && config_anchor_slot(&c) == 0, "reference_slots",
          "interpolate targets 1, 2, 3 -> offsets 0, 0 (tie: the earlier), 4; extrapolate targets -> offset 0");

    // the assembled input: slot f carries its frame, the anchor's, then its reference's
    config_set(&c, "cond_concat=anchor+nearest", "test");
    c.frame_size = 8, c.patch = 4, c.width = 48, c.freq_dim = 8, c.depth = 1;
    Model *m = build_model(&c, backend_cpu(), 2);
    size_t nx = (size_t)m->S * m->E;
    philox_fill_uniform(m->in.xt, nx, -1, 1, 9, 0, RNG_TEST, 0);
    model_forward(m);
    int input_ok = m->Cin == 9 && m->Ein == 3 * m->E;
    for (int b = 0; b < m->B; b++)
        for (int f = 0; f < m->F; f++) {
            const real *in = m->a.xin + ((size_t)b * m->F + f) * m->Ein, *w = m->in.xt + (size_t)b * m->F * m->E;
            int from[3] = {f, 0, want[f]};
            for (int k = 0; k < 3; k++) input_ok &= !memcmp(in + k * m->E, w + from[k] * m->E, sizeof(real) * m->E);
        }
    check(input_ok, "cond_concat_input", "anchor+nearest: %d input channels, every slot's parts in place", m->Cin);
    free_model(m);

    // delta targets, and the sampler's inverse
    config_set(&c, "targets=deltas", "test");
    config_set(&c, "delta_scale=4", "test");
    config_set(&c, "delta_reference=nearest", "test");  // (moved: test_global_motion)
    config_set(&c, "anchor_snap=0", "test");             // (test_anchor_snap)
    size_t E = (size_t)c.channels * c.frame_size * c.frame_size, n = 2 * c.slots * E;
    real *x = fc_malloc(sizeof(real) * n), *d = fc_malloc(sizeof(real) * n), *back = fc_malloc(sizeof(real) * E);
    philox_fill_uniform(x, n, -1, 1, 4, 0, RNG_TEST, 0);
    memcpy(d, x, sizeof(real) * n);
    flow_delta_targets(&c, 2, d);
    double worst = 0;
    int given_same = 1;
    for (int b = 0; b < 2; b++)
        for (int f = 0; f < c.slots; f++) {
            const real *xf = x + ((size_t)b * c.slots + f) * E, *df = d + ((size_t)b * c.slots + f) * E;
            if (c.slot_kind[f] != SLOT_TARGET) {
                given_same &= !memcmp(xf, df, sizeof(real) * E);
                continue;
            }
            const real *ref = x + ((size_t)b * c.slots + want[f]) * E;
            for (size_t k = 0; k < E; k++) worst = worse(worst, fabs(df[k] - 4 * (xf[k] - ref[k])));
            flow_delta_to_frame(&c, back, df, ref, E);
            for (size_t k = 0; k < E; k++) worst = worse(worst, fabs(back[k] - xf[k]));
        }
    check(given_same && worst < 1e-6, "delta_targets",
          "targets = 4 (x - x[ref]) and back within %.1e; the given slots untouched", worst);

    // ref_noise: pixel noise of that std on the context slots only, the same for the same (seed, step)
    config_set(&c, "ref_noise=0.05", "test");
    memcpy(d, x, sizeof(real) * n);
    flow_corrupt_context(&c, 2, 0, d, 8, 3);
    double sq = 0;
    long cnt = 0;
    int others_same = 1;
    for (int b = 0; b < 2; b++)
        for (int f = 0; f < c.slots; f++) {
            size_t at = ((size_t)b * c.slots + f) * E;
            if (c.slot_kind[f] != SLOT_CONTEXT) {
                others_same &= !memcmp(x + at, d + at, sizeof(real) * E);
                continue;
            }
            for (size_t k = 0; k < E; k++) sq += (d[at + k] - x[at + k]) * (d[at + k] - x[at + k]), cnt++;
        }
    real *again = fc_malloc(sizeof(real) * n);
    memcpy(again, x, sizeof(real) * n);
    flow_corrupt_context(&c, 2, 0, again, 8, 3);
    double sd = sqrt(sq / cnt);
    check(others_same && fabs(sd - 0.05) < 0.005 && !memcmp(again, d, sizeof(real) * n), "ref_noise_context_only",
          "context slots noised with std %.4f (ref_noise 0.05) over %ld values, the same again; anchor and targets "
          "untouched", sd, cnt);
    free(again);
    free(x), free(d), free(back);

    // cond_drop: about that fraction of windows has every given slot at t = 1, the targets as before
    enum { W = 20000 };
    real *t = fc_malloc(sizeof(real) * W * c.slots), *t0 = fc_malloc(sizeof(real) * W * c.slots);
    real *off = fc_malloc(sizeof(real) * W * c.slots), *mask = fc_malloc(sizeof(real) * W * c.slots);
    config_set(&c, "cond_drop=0", "test");
    flow_slot_levels(&c, W, 0, 5, 7, t0, off, mask);
    config_set(&c, "cond_drop=0.2", "test");
    flow_slot_levels(&c, W, 0, 5, 7, t, off, mask);
    int dropped = 0, drop_ok = 1;
    for (int b = 0; b < W; b++) {
        const real *tb = t + b * c.slots, *t0b = t0 + b * c.slots;
        int drop = tb[0] == 1;
        dropped += drop;
        for (int f = 0; f < c.slots; f++)
            drop_ok &= c.slot_kind[f] == SLOT_TARGET ? tb[f] == t0b[f] : drop ? tb[f] == 1 : tb[f] == t0b[f];
    }
    check(drop_ok && fabs(dropped / (double)W - 0.2) < 0.01, "cond_drop_windows",
          "%.4f of %d windows dropped (cond_drop 0.2), all their given slots at t = 1, targets unchanged",
          dropped / (double)W, W);

    // noise augmentation: the anchor stays clean (t = 0), each context slot at its own level in
    // [0, noise_aug_max] (every window not dropped)
    config_set(&c, "noise_aug_max=0.3", "test");
    flow_slot_levels(&c, W, 0, 5, 7, t, off, mask);
    int anchor_clean = 1, in_range = 1;
    double lo = 1, hi = 0;
    for (int b = 0; b < W; b++) {
        const real *tb = t + b * c.slots;
        int drop = 1;
        for (int f = 0; f < c.slots; f++) drop &= c.slot_kind[f] == SLOT_TARGET || tb[f] == 1;
        for (int f = 0; f < c.slots && !drop; f++) {
            if (c.slot_kind[f] == SLOT_ANCHOR) anchor_clean &= tb[f] == 0;
            if (c.slot_kind[f] == SLOT_CONTEXT) in_range &= tb[f] >= 0 && tb[f] <= 0.3f, lo = fmin(lo, tb[f]), hi = fmax(hi, tb[f]);
        }
    }
    check(anchor_clean && in_range && lo < 0.01 && hi > 0.29, "noise_aug_levels",
          "noise_aug_max 0.3: the anchor at t = 0 in every window kept, the context slots' levels from %.4f to %.4f",
          lo, hi);

    // a window's draws do not depend on where the batch is cut (ranks, dist.h): windows 4-7 of a batch of
    // 8 are those of a batch of 4 that starts at window 4, levels (dropped or not) and ref_noise alike
    enum { B8 = 8 };
    real t8[B8 * MAX_SLOTS], t4[B8 * MAX_SLOTS], o8[B8 * MAX_SLOTS], m8[B8 * MAX_SLOTS];
    config_set(&c, "cond_drop=0.5", "test");
    flow_slot_levels(&c, B8, 0, 5, 9, t8, o8, m8);
    flow_slot_levels(&c, 4, 4, 5, 9, t4, o8, m8);
    int levels_same = !memcmp(t8 + 4 * c.slots, t4, sizeof(real) * 4 * c.slots);
    size_t nw = (size_t)c.slots * E;
    real *x8 = fc_malloc(sizeof(real) * B8 * nw), *x4 = fc_malloc(sizeof(real) * 4 * nw);
    philox_fill_uniform(x8, B8 * nw, -1, 1, 6, 0, RNG_TEST, 0);
    memcpy(x4, x8 + 4 * nw, sizeof(real) * 4 * nw);
    flow_corrupt_context(&c, B8, 0, x8, 8, 3);
    flow_corrupt_context(&c, 4, 4, x4, 8, 3);
    int noise_same = !memcmp(x8 + 4 * nw, x4, sizeof(real) * 4 * nw);
    check(levels_same && noise_same, "flow_windows_by_index", "windows 4-7 of a batch of 8 against a batch of 4 from "
          "window 4: levels %s, ref_noise %s", levels_same ? "the same" : "DIFFER", noise_same ? "the same" : "DIFFER");
    free(x8), free(x4);
    free(t), free(t0), free(off), free(mask);
}

// The memory plan counts exactly what build_model allocates (parameters, gradients, activations,
// their gradient scratch, inputs) at each recompute setting and batch: it comes from the same layout
// code, so it cannot drift from the allocation. (test_cuda checks the same on the GPU's plans.)
static void test_plan_matches_allocation(void) {
    for (int rc = 0; rc <= 2; rc++)
        for (int B = 1; B <= 2; B++) {
            Config c;
            config_defaults(&c);
            config_load(&c, "configs/tiny/starter.conf");
            c.recompute = rc, c.keep_blocks = B - 1;  // the tiny config's 2 blocks: none kept, then one
            c.cond_concat = rc == 1 ? CONCAT_ANCHOR_NEAREST : CONCAT_NONE;  // the assembled input counted too
            Model *m = build_model(&c, backend_cpu(), B);
            MemPlan p = memory_plan(&c, B, PLAN_CPU);
            char name[64];
            snprintf(name, sizeof name, "memory_plan_is_allocation_rc%d_batch%d_keep%d", rc, B, B - 1);
            check((double)model_memory_bytes(m) == p.model, name, "tiny config: %zu bytes allocated, %.0f planned",
                  model_memory_bytes(m), p.model);
            free_model(m);
        }
}

// The linears' largest input, output and weight that model_counts gives (what a backend's routes
// size their operand copies by: memory_plan_routes) are those of the calls a step makes: a spy
// backend, the CPU's with its linears wrapped, records every call's M K, M N and N K through a
// forward and a backward, at two batch sizes, on configs where a block's linears, the patches' (the
// input widened by cond_concat) or the adaLN's weight are the largest. Then the
// plan's routes line: 0 on the CPU (no route_scratch), what route_scratch answers, in the total.
static size_t g_spy_in, g_spy_out, g_spy_weight;
static void spy_shape(int M, int K, int N) {
    size_t mk = (size_t)M * K, mn = (size_t)M * N, nk = (size_t)N * K;
    g_spy_in = mk > g_spy_in ? mk : g_spy_in, g_spy_out = mn > g_spy_out ? mn : g_spy_out;
    g_spy_weight = nk > g_spy_weight ? nk : g_spy_weight;
}
static void spy_linear_fwd(real *y, const Operand *x, const real *w, const real *b, int M, int K, int N) {
    spy_shape(M, K, N), backend_cpu()->linear_fwd(y, x, w, b, M, K, N);
}
static void spy_linear_bwd(real *dx, GradMode dx_mode, real *dw, real *db, GradMode pmode, const real *dy,
                           const Operand *x, const real *w, int M, int K, int N) {
    spy_shape(M, K, N), backend_cpu()->linear_bwd(dx, dx_mode, dw, db, pmode, dy, x, w, M, K, N);
}
static void spy_linear_gelu_fwd(real *pre, Operand *y, const Operand *x, const real *w, const real *b, int M, int K,
                                int N) {
    spy_shape(M, K, N), backend_cpu()->linear_gelu_fwd(pre, y, x, w, b, M, K, N);
}
static void spy_linear_gelu_bwd(real *dpre, real *dw, real *db, GradMode pmode, const real *dy, const Operand *x,
                                const real *w, const real *pre, int M, int K, int N) {
    spy_shape(M, K, N), backend_cpu()->linear_gelu_bwd(dpre, dw, db, pmode, dy, x, w, pre, M, K, N);
}
static size_t spy_route_scratch(size_t in, size_t out, size_t weight) { return 3 * in + 5 * out + 7 * weight; }

static void test_linear_maxima(void) {
    Backend spy = *backend_cpu();
    spy.linear_fwd = spy_linear_fwd, spy.linear_bwd = spy_linear_bwd;
    spy.linear_gelu_fwd = spy_linear_gelu_fwd, spy.linear_gelu_bwd = spy_linear_gelu_bwd;
    for (int k = 0; k < 3; k++) {
        Config c;
        config_defaults(&c);
        config_load(&c, k < 2 ? "configs/tiny/starter.conf" : "configs/small/extrapolate.conf");
        int B = k == 1 ? 3 : 1;
        if (k == 1)  // three frames' patches (144 values) wider than the MLP (128): the patches' input the largest
            c.cond_concat = CONCAT_ANCHOR_NEAREST, c.mlp_ratio = 2;
        if (k == 2) c.mlp_ratio = 2;  // fc1's output under qkv's, the adaLN's weight the largest
        Model *m = build_model(&c, &spy, B);
        model_init(m, 3, 1);
        g_spy_in = g_spy_out = g_spy_weight = 0;
        model_forward(m);
        model_loss(m);
        model_backward(m);
        ModelCounts counts = model_counts(&c, B, sizeof(real));
        char name[64];
        snprintf(name, sizeof name, "linear_maxima_are_the_calls_%d", k);
        check(counts.linear_in == g_spy_in && counts.linear_out == g_spy_out && counts.linear_weight == g_spy_weight &&
                  g_spy_in > 0, name, "batch %d, %s: input %zu, output %zu, weight %zu values (the calls: %zu, %zu, %zu)",
              B, k == 1 ? "cond_concat, mlp_ratio 2" : k ? "the small extrapolate, mlp_ratio 2" : "the tiny starter", counts.linear_in,
              counts.linear_out, counts.linear_weight, g_spy_in, g_spy_out, g_spy_weight);
        if (k == 0) {
            MemPlan p = memory_plan(&c, B, PLAN_GPU_BF16);
            double before = p.total, cpu = memory_plan_routes(&c, B, backend_cpu());
            spy.route_scratch = spy_route_scratch;
            p.routes = memory_plan_routes(&c, B, &spy);
            memory_plan_sum(&p);
            double want = 3.0 * g_spy_in + 5.0 * g_spy_out + 7.0 * g_spy_weight;
            check(cpu == 0 && p.routes == want && p.total == before + want, "memory_plan_routes",
                  "the CPU's %.0f; a backend's route_scratch(in, out, weight) = %.0f bytes (expected %.0f), the total "
                  "%.0f from %.0f", cpu, p.routes, want, p.total, before);
            spy.route_scratch = NULL;
        }
        free(counts.info);
        free_model(m);
    }
}

// The plan's total is the sum of the lines it prints (on the CPU the host's lines too), its EMA as
// large as the weights; a rank's part under ZeRO-1 holds 1/N of the optimizer state and EMA, and a
// rank other than 0 stages only that part for rank 0's checkpoint (nothing without ZeRO-1), and sets its
// weights aside for the previews rank 0 samples (nothing without ZeRO-1).
static void test_plan_lines_and_ranks(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.sample_every = 10;  // previews: the weights set aside on the host, and the sampler's windows
    const PlanDevice devs[2] = {PLAN_CPU, PLAN_GPU_BF16};
    for (int d = 0; d < 2; d++) {
        MemPlan p = memory_plan(&c, 2, devs[d]);
        p.program = 1e6;  // as train.c sets it on the CPU: the process's own memory
        memory_plan_sum(&p);
        double host = p.staging + p.previews + p.program;
        double sum = p.weights + p.weights_bf16 + p.gradients + p.optimizer + p.ema + p.activations + p.inputs +
                     p.workspace + p.autoencoder + (d == 0 ? host : 0);
        double r = sizeof(real) * (double)p.params;
        // sampler.c's window_buffers_alloc for the 2 windows: x, pred and their unguided twins, one
        // reference window, three reals a slot and window
        double window = sizeof(real) * (double)c.slots * c.channels * c.frame_size * c.frame_size;
        double sampler = (4.0 * 2 + 1) * window + 3.0 * sizeof(real) * c.slots * 2;
        char name[64];
        snprintf(name, sizeof name, "memory_plan_total_is_its_lines_%s", d ? "gpu" : "cpu");
        check(fabs(p.total - sum) <= 1e-9 * sum && p.ema == r && p.weights == r && p.previews == r + sampler, name,
              "total %.0f, its lines %.0f; EMA %.0f, weights %.0f, previews %.0f bytes for %zu parameters", p.total, sum,
              p.ema, p.weights, p.previews, p.params);

        MemPlan whole = p, part = p, plain = p;
        memory_plan_per_rank(&part, 4, 1);
        memory_plan_per_rank(&plain, 4, 0);
        double saved = 0.75 * (whole.optimizer + whole.ema);
        double savings = memory_plan_rank_savings(&c, 2, devs[d], 4, 1);
        snprintf(name, sizeof name, "memory_plan_zero1_part_%s", d ? "gpu" : "cpu");
        check(part.optimizer == whole.optimizer / 4 && part.ema == whole.ema / 4 && part.weights == whole.weights &&
                  part.staging == whole.staging && fabs(whole.total - part.total - saved) <= 1e-9 * whole.total &&
                  fabs(savings - saved) <= 1e-9 * whole.total && plain.total == whole.total,
              name, "4 ranks: optimizer %.0f of %.0f, EMA %.0f of %.0f, total %.0f of %.0f (%.0f saved, savings %.0f); "
              "without ZeRO-1 %.0f", part.optimizer, whole.optimizer, part.ema, whole.ema, part.total, whole.total, saved,
              savings, plain.total);

        MemPlan other = part, other_plain = plain;
        memory_plan_other_rank(&other, 1);
        memory_plan_other_rank(&other_plain, 0);
        snprintf(name, sizeof name, "memory_plan_other_rank_%s", d ? "gpu" : "cpu");
        // a resume reads the checkpoint a tensor at a time on every rank: the largest (a block's adaLN
        // weights, (9 width, width)) in host memory, before anything is staged
        double largest = sizeof(real) * 9.0 * c.width * c.width;
        check(other.staging == part.ema + part.optimizer && other.previews == part.weights &&
                  other_plain.staging == 0 && other_plain.previews == 0 &&
                  (d == 0 ? other_plain.total < plain.total : other_plain.total == plain.total) &&
                  p.resume_read == largest && other_plain.host == p.program + largest &&
                  whole.host == whole.staging + whole.previews + whole.program,
              name, "ZeRO-1: stages %.0f (its part: EMA %.0f + optimizer %.0f); without: stages %.0f, previews %.0f, "
              "total %.0f of rank 0's %.0f; host %.0f with the resume's read of %.0f (the largest tensor: %.0f); "
              "rank 0's host %.0f", other.staging, part.ema, part.optimizer, other_plain.staging,
              other_plain.previews, other_plain.total, plain.total, other_plain.host, p.resume_read, largest,
              whole.host);
    }
}

// keep_blocks = auto keeps as many blocks as leave the GPU's plan KEEP_BLOCKS_AUTO_RESERVE_GIB under
// the budget: one more would not, and none are kept on the CPU, without recompute, or when set.
static void test_keep_blocks_auto(void) {
    const double GiB = 1073741824.0;
    struct { int B, recompute; PlanDevice dev; double budget_gib; } cases[] = {
        {1, 2, PLAN_GPU_BF16, 24}, {2, 2, PLAN_GPU_BF16, 24}, {1, 1, PLAN_GPU_FP32, 24},
        {1, 2, PLAN_GPU_BF16, 1000}, {1, 2, PLAN_CPU, 24}, {1, 0, PLAN_GPU_BF16, 24}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c;
        config_defaults(&c);
        config_load(&c, "configs/starter.conf");  // the 0.95 B preset: only planned, nothing allocated
        c.batch_size = cases[i].B, c.recompute = cases[i].recompute, c.keep_blocks = KEEP_BLOCKS_AUTO;
        double limit = (cases[i].budget_gib - KEEP_BLOCKS_AUTO_RESERVE_GIB) * GiB;
        int n = memory_plan_resolve(&c, c.batch_size, cases[i].dev, cases[i].budget_gib * GiB);
        Config more = c;
        more.keep_blocks = n + 1;
        double at = memory_plan(&c, c.batch_size, cases[i].dev).total;
        double next = n < c.depth ? memory_plan(&more, c.batch_size, cases[i].dev).total : INFINITY;
        int none = cases[i].dev == PLAN_CPU || !cases[i].recompute;
        int ok = c.keep_blocks == n && (none ? n == 0 : (n == 0 || at <= limit) && next > limit);
        char name[64];
        snprintf(name, sizeof name, "keep_blocks_auto_%zu", i);
        check(ok, name, "preset, batch %d, recompute %d, %s, budget %.0f GiB: %d of %d blocks kept, plan %.2f GiB, "
              "with one more %.2f (limit %.2f)", cases[i].B, cases[i].recompute,
              cases[i].dev == PLAN_CPU ? "cpu" : cases[i].dev == PLAN_GPU_FP32 ? "cuda-fp32" : "cuda",
              cases[i].budget_gib, n, c.depth, at / GiB, next / GiB, limit / GiB);
    }
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/starter.conf");
    c.keep_blocks = 5;
    check(memory_plan_resolve(&c, 1, PLAN_GPU_BF16, 24 * GiB) == 5 && c.keep_blocks == 5, "keep_blocks_set_stays",
          "keep_blocks = 5 resolves to %d", c.keep_blocks);
}

// Recompute re-runs deterministic ops on the same inputs, so every gradient must come out the same
// bytes as with every activation kept, in less memory, and the plan must count what is allocated.
// rc 2 keeps the attention outputs as well: more memory than rc 1, still less than none. The last
// `keep` blocks keep everything and are not re-run: memory between the two (all of it when every
// block is kept).
static void test_recompute_identical(int depth, int rc, int keep) {
    real l0, l1;
    Model *a = tiny_step(depth, 0, 0, &l0), *b = tiny_step(depth, rc, keep, &l1);
    size_t np = a->n_params, npred = (size_t)a->S * a->E;
    int same_loss = !memcmp(&l0, &l1, sizeof l0);
    int same_pred = !memcmp(a->a.pred, b->a.pred, sizeof(real) * npred);
    int same_grads = !memcmp(a->grads_mem, b->grads_mem, sizeof(real) * np);
    int same_dxt = !memcmp(a->d.dxt, b->d.dxt, sizeof(real) * npred);
    int bad_tensor = -1;
    for (int i = 0; i < a->n_tensors && bad_tensor < 0; i++)
        if (memcmp(a->grads_mem + a->info[i].offset, b->grads_mem + b->info[i].offset, sizeof(real) * a->info[i].numel))
            bad_tensor = i;
    double gmax = 0;
    for (size_t i = 0; i < np; i++) gmax = fmax(gmax, fabs(a->grads_mem[i]));
    char name[64];
    snprintf(name, sizeof name, "recompute%d_bit_identical_depth%d_keep%d", rc, depth, keep);
    check(same_loss && same_pred && same_grads && same_dxt && gmax > 0, name,
          "loss %.6f vs %.6f, pred %s, %zu gradients %s (first differing: %s), input gradient %s", l0, l1,
          same_pred ? "same" : "DIFFERS", np, same_grads ? "same" : "DIFFER",
          bad_tensor < 0 ? "none" : a->info[bad_tensor].name, same_dxt ? "same" : "DIFFERS");
    size_t ob = a->be->operand_bytes;
    ModelCounts ka = model_counts(&a->cfg, a->B, ob), kb = model_counts(&b->cfg, b->B, ob);
    snprintf(name, sizeof name, "recompute%d_fewer_activations_depth%d_keep%d", rc, depth, keep);
    int shared = depth - keep - 1;  // re-made blocks beside block 0, which own only a few tensors
    if (rc == 2 && shared > 0) {  // and more than recompute = 1, by those blocks' attention outputs
        Config c1 = b->cfg;
        c1.recompute = 1;
        ModelCounts k1 = model_counts(&c1, b->B, ob);
        size_t att = (ob * b->T * b->D + 15) / 16 * 16;  // an operand, rounded to 16 bytes (model.c)
        size_t extra = (size_t)shared * 2 * (att + sizeof(real) * b->T * b->H);
        check(kb.acts_bytes == k1.acts_bytes + extra, "recompute2_keeps_attention", "%zu activation bytes, recompute "
              "= 1: %zu, + %zu expected (2 attentions x (T x D operand + T x H) for each of %d blocks)", kb.acts_bytes,
              k1.acts_bytes, extra, shared);
        free(k1.info);
    }
    // fewer bytes while any block is re-made beside block 0; every block kept: the same as none re-made
    int fewer = shared > 0 ? b->acts_bytes < a->acts_bytes : b->acts_bytes == a->acts_bytes;
    check(fewer && ka.acts_bytes == a->acts_bytes && kb.acts_bytes == b->acts_bytes, name,
          "%zu activation bytes with recompute, %zu without (plan %zu, %zu); %zu vs %zu in all", b->acts_bytes,
          a->acts_bytes, kb.acts_bytes, ka.acts_bytes, model_memory_bytes(b), model_memory_bytes(a));
    free(ka.info), free(kb.info);
    free_model(a), free_model(b);
}

// grads_ready (model.h): the parts of the gradients model_backward says are final cover every
// parameter once, from the end down, one part for the final layer, one per block and one for the
// embeddings, each at a tensor's start; and they are final: each part is copied and then filled with
// a sentinel when it is said to be, and after the backward the copies equal the gradients of a
// backward without the calls while the sentinels are untouched (nothing wrote a part afterwards).
typedef struct {
    Model *m;
    real *copy;
    size_t lo[16], hi[16];
    int calls;
} ReadyLog;

static void log_ready(void *ctx, size_t lo, size_t hi) {
    ReadyLog *r = ctx;
    if (r->calls < 16) r->lo[r->calls] = lo, r->hi[r->calls] = hi;
    r->calls++;
    memcpy(r->copy + lo, r->m->grads_mem + lo, sizeof(real) * (hi - lo));
    for (size_t i = lo; i < hi; i++) r->m->grads_mem[i] = (real)1e30;
}

static void test_grads_ready(int rc) {
    real l0;
    int depth = 3;
    Model *ref = tiny_step(depth, rc, 0, &l0);
    Config c = ref->cfg;
    Model *m = build_model(&c, backend_cpu(), c.batch_size);
    m->want_input_grad = 1;
    model_init(m, 21, 1);
    size_t nx = (size_t)m->S * m->E, n = m->n_params;
    real *x0 = fc_malloc(sizeof(real) * nx);
    philox_fill_uniform(x0, nx, -1, 1, 21, 0, RNG_TEST, 0);
    flow_prepare_batch(m, x0, 0, 21, 4);
    model_forward(m);
    model_loss(m);
    ReadyLog r = {m, fc_calloc(n, sizeof(real)), {0}, {0}, 0};
    m->grads_ready = log_ready, m->grads_ready_ctx = &r;
    model_backward(m);
    int order_ok = r.calls == depth + 2 && r.hi[0] == n && r.lo[r.calls - 1] == 0;
    for (int i = 1; i < r.calls && i < 16; i++) order_ok &= r.hi[i] == r.lo[i - 1] && r.lo[i] < r.hi[i];
    int at_tensors = 1;
    for (int i = 0; i < r.calls && i < 16; i++) {
        int found = 0;
        for (int k = 0; k < m->n_tensors; k++) found |= m->info[k].offset == r.lo[i];
        at_tensors &= found;
    }
    int untouched = 1;
    for (size_t i = 0; i < n; i++) untouched &= m->grads_mem[i] == (real)1e30;
    int same = !memcmp(r.copy, ref->grads_mem, sizeof(real) * n);
    char name[64];
    snprintf(name, sizeof name, "grads_ready_parts_final_recompute%d", rc);
    check(order_ok && at_tensors && untouched && same, name,
          "%d parts (depth %d + 2), from %zu down to %zu, %s, at tensor starts %s; after its call no part written "
          "again: %s; the parts as told equal a plain backward's gradients: %s",
          r.calls, depth, r.calls ? r.hi[0] : 0, r.calls && r.calls <= 16 ? r.lo[r.calls - 1] : 0,
          order_ok ? "each beginning where the last ended" : "NOT in order", at_tensors ? "yes" : "NO",
          untouched ? "yes" : "NO", same ? "yes" : "NO");
    free(x0), free(r.copy);
    free_model(m), free_model(ref);
}

int main(void) {
    fc_set_threads(fc_default_threads());
    test_param_layout();
    test_param_init();
    test_param_init_rules();
    test_flow();
    test_conditioning();
    test_plan_matches_allocation();
    test_plan_lines_and_ranks();
    test_linear_maxima();
    test_keep_blocks_auto();
    test_recompute_identical(2, 1, 0);
    test_recompute_identical(3, 1, 0);
    test_recompute_identical(3, 2, 0);
    test_recompute_identical(3, 1, 1), test_recompute_identical(4, 2, 2);  // the last blocks kept
    test_recompute_identical(3, 2, 3);                                     // every block kept
    test_grads_ready(0), test_grads_ready(1);
    return g_failed ? 1 : 0;
}
