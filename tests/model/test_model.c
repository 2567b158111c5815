// test_model.c: the model layer: the parameter layout of the network, the flow objective, the memory
// plan against what build_model allocates, keep_blocks = auto, and recompute against keeping every
// activation.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "model/tiny_model.h"
#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "model/flow.h"
#include "model/global_motion.h"
#include "model/object_motion.h"
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
            worst = fmax(worst, fabs(m->in.xt[k] - ((1 - t) * x0[k] + t * noise)));
            worst = fmax(worst, fabs(m->in.v[k] - (noise - x0[k])));
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
            for (size_t k = 0; k < E; k++) worst = fmax(worst, fabs(df[k] - 4 * (xf[k] - ref[k])));
            flow_delta_to_frame(&c, back, df, ref, E);
            for (size_t k = 0; k < E; k++) worst = fmax(worst, fabs(back[k] - xf[k]));
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
        worst = fmax(worst, fmax(fabs(dx - shifts[k][0]), fabs(dy - shifts[k][1])));
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
        worst = fmax(worst, rms(d + f * E, E));
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
    objects_carry(out, a, &s, C, 1.0);
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
    // like colour is a difference under tol: a square 0.25 from the ground at tol 0.25 is an object
    for (size_t e = 0; e < E; e++) a[e] = -0.5;
    draw_square(a, C, N, 10, 10, 3, -0.25);
    objects_segment(&s, a, C, N, 0.25);
    int at_tol = s.count;
    objects_free(&s);
    check(at_tol == 1, "objects_like_colour", "a square 0.25 from its ground cut at a tolerance of 0.25: %d object "
          "(1: like colour is a difference under the tolerance)", at_tol);
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
    test_flow();
    test_conditioning();
    test_global_motion();
    test_global_zoom();
    test_local_motion();
    test_objects_motion();
    test_objects_details();
    test_anchor_snap();
    test_plan_matches_allocation();
    test_keep_blocks_auto();
    test_recompute_identical(2, 1, 0);
    test_recompute_identical(3, 1, 0);
    test_recompute_identical(3, 2, 0);
    test_recompute_identical(3, 1, 1), test_recompute_identical(4, 2, 2);  // the last blocks kept
    test_recompute_identical(3, 2, 3);                                     // every block kept
    test_grads_ready(0), test_grads_ready(1);
    return g_failed ? 1 : 0;
}
