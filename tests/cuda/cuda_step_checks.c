// cuda_step_checks.c: sections 3 and 4 of test_cuda (see test_cuda.c): one whole training step of
// the tiny config on the CPU and on CUDA (the flow inputs, prediction, loss, every gradient, the
// step's determinism, recompute, one optimizer step), and the informative timings.
#include "cuda/cuda_harness.h"

// ============================================================================
// 3. one training step of the tiny config on both backends

// The worst tensor of two copies of a parameter-shaped array (host): its index, and *err; *zeros
// counts the tensors that are all zero in ref.
static int worst_tensor(const Model *m, const real *got, const real *ref, double *err, int *zeros) {
    int worst = 0;
    *err = 0, *zeros = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const real *r = ref + m->info[i].offset;
        double e = rel_err(got + m->info[i].offset, r, m->info[i].numel), mx = 0;
        for (size_t j = 0; j < m->info[i].numel; j++) mx = fmax(mx, fabs(r[j]));
        if (!(e <= *err)) *err = e, worst = i;
        *zeros += mx == 0;
    }
    return worst;
}

// The error of n elements of backend memory: pc on the CPU, pg on CUDA.
static double dev_err(const real *pc, const real *pg, size_t n) {
    real *hc = fetch(g_cpu, pc, n), *hg = fetch(g_gpu, pg, n);
    double e = rel_err(hg, hc, n);
    free(hc), free(hg);
    return e;
}

// The config file at path (relative to the repository root); 0 when it is not there, which is a
// failure when `required`, otherwise only said.
static int load_config(Config *c, const char *path, int required) {
    if (access(path, R_OK)) {
        if (required) check(0, "cuda_config", "%s not found (run from the repository root)", path);
        else printf("INFO %s not found (run from the repository root)\n", path);
        return 0;
    }
    config_defaults(c);
    config_load(c, path);
    return 1;
}

static void section_train_step(void) {
    printf("---- 3%s. one training step of %s on %s and the CPU ----\n", *g_mode ? "b" : "", TINY, g_gpu->name);
    Config c;
    if (!load_config(&c, TINY, 1)) return;
    // the given frames concatenated to every slot's input (the copies and the wider patch embedding)
    config_set(&c, "cond_concat=anchor+nearest", "test");
    Model *m[2];
    real *x0[2], *ema[2], loss[2];
    Optimizer *o[2];
    size_t nx = (size_t)c.batch_size * c.slots * c.channels * c.frame_size * c.frame_size;
    real *hx0 = fc_malloc(sizeof(real) * nx);
    philox_fill_uniform(hx0, nx, -1, 1, g_seed, 0, RNG_TEST, 0);  // clean frames in [-1, 1]
    for (int k = 0; k < 2; k++) {
        const Backend *be = k ? g_gpu : g_cpu;
        m[k] = build_model(&c, be, c.batch_size);
        m[k]->want_input_grad = 1;  // patchify_bwd too
        model_init(m[k], g_seed, 1);
        be->upload(x0[k] = be->alloc(sizeof(real) * nx), hx0, sizeof(real) * nx);
        flow_prepare_batch(m[k], x0[k], 0, g_seed, 1);  // the same Philox draws on both sides
        model_forward(m[k]), loss[k] = model_loss(m[k]);
        model_backward(m[k]);
    }
    Model *mc = m[0], *mg = m[1];
    size_t S = mc->S, E = mc->E, np = mc->n_params;
    double e_noise = dev_err(mc->in.noise, mg->in.noise, S * E), e_xt = dev_err(mc->in.xt, mg->in.xt, S * E);
    double e_v = dev_err(mc->in.v, mg->in.v, S * E);
    check(e_noise <= TOL && e_xt <= TOL && e_v <= TOL, nm("cuda_train_inputs"),
          "flow_prepare_batch (seed %llu, step 1): rel err noise %.1e xt %.1e v %.1e (tol %.0e)",
          (unsigned long long)g_seed, e_noise, e_xt, e_v, TOL);
    double e_loss = fabs((double)loss[1] - loss[0]) / fmax(fabs(loss[0]), 1e-30);
    double e_pred = dev_err(mc->a.pred, mg->a.pred, S * E);
    check(e_loss <= g_tol && e_pred <= g_tol_net, nm("cuda_train_forward"),
          "loss cuda %.9g cpu %.9g rel err %.1e (tol %.0e), pred rel err %.1e (tol %.0e)", loss[1], loss[0], e_loss,
          g_tol, e_pred, g_tol_net);

    real *gc = fetch(g_cpu, mc->grads_mem, np), *gg = fetch(g_gpu, mg->grads_mem, np);
    double e_grad, e_dxt = dev_err(mc->d.dxt, mg->d.dxt, S * mc->Ein);
    int zero_tensors, wi = worst_tensor(mc, gg, gc, &e_grad, &zero_tensors);
    check(e_grad <= g_tol_net && e_dxt <= g_tol_net && zero_tensors == 0, nm("cuda_train_gradients"),
          "%d tensors, %zu parameters: worst %s rel err %.1e, input gradient dxt %.1e (tol %.0e); %d all-zero "
          "gradient tensors (expect 0)", mc->n_tensors, np, mc->info[wi].name, e_grad, e_dxt, g_tol_net, zero_tensors);

    // The same step again on CUDA: the same bytes (a resumed run repeats the uninterrupted one).
    model_forward(mg);
    real again = model_loss(mg);
    model_backward(mg);  // over the first pass's gradients: overwritten, never added to
    real *gg2 = fetch(g_gpu, mg->grads_mem, np);
    int same = !memcmp(&again, &loss[1], sizeof again) && !memcmp(gg, gg2, sizeof(real) * np);
    check(same, nm("cuda_determinism_train_step"), "forward, loss and every gradient twice on %s: %s", g_gpu->name,
          SAME(same));
    free(gg2);

    for (int rc = 1; rc <= 2; rc++) {  // recompute re-runs deterministic kernels: the same bytes as keeping all
        Config cr = c;
        cr.recompute = rc;
        Model *mr = build_model(&cr, g_gpu, c.batch_size);
        mr->want_input_grad = 1;
        model_init(mr, g_seed, 1);
        flow_prepare_batch(mr, x0[1], 0, g_seed, 1);
        model_forward(mr);
        real lr = model_loss(mr);
        model_backward(mr);
        real *gr = fetch(g_gpu, mr->grads_mem, np), *dr = fetch(g_gpu, mr->d.dxt, S * mc->Ein);
        real *dg = fetch(g_gpu, mg->d.dxt, S * mc->Ein);
        int same = !memcmp(&lr, &loss[1], sizeof lr) && !memcmp(gr, gg, sizeof(real) * np) &&
                   !memcmp(dr, dg, sizeof(real) * S * mc->Ein);
        check(same && mr->acts_bytes < mg->acts_bytes,
              nm(rc == 1 ? "cuda_recompute_identical" : "cuda_recompute2_identical"),
              "recompute = %d: loss, %zu gradients and the input gradient %s; %zu activation bytes, %zu without", rc,
              np, SAME(same), mr->acts_bytes, mg->acts_bytes);
        free(gr), free(dr), free(dg);
        free_model(mr);
    }

    // One optimizer step from the same gradients: a gradient element at the noise level may
    // legitimately differ in sign, which Adam's first step turns into a +-lr difference. So the CUDA
    // side takes the CPU's gradients; the step itself (8-bit and fp32 tensors, norm, clipping) is compared.
    g_gpu->upload(mg->grads_mem, gc, sizeof(real) * np);
    OptStepInfo info[2];
    for (int k = 0; k < 2; k++) {
        const Backend *be = m[k]->be;
        o[k] = build_optimizer(m[k], &c);
        ema[k] = be->alloc(sizeof(real) * np);
        be->copy(ema[k], m[k]->params_mem, sizeof(real) * np);
        info[k] = optimizer_step(o[k], m[k], &c, 1, c.lr, ema[k], c.ema_decay);
    }
    real *pc = fetch(g_cpu, mc->params_mem, np), *pg = fetch(g_gpu, mg->params_mem, np);
    double e_param, e_ema = dev_err(ema[0], ema[1], np), e_mom = 0, e_absmax = 0;
    int zp, pi = worst_tensor(mc, pg, pc, &e_param, &zp), maxd = 0;
    size_t n8 = 0, codes_diff = 0;
    for (int i = 0; i < o[0]->n; i++) {  // the states: fp32 moments; 8-bit codes and absmax
        OptTensor *tc = &o[0]->t[i], *tg = &o[1]->t[i];
        if (!tc->is8bit) {
            e_mom = fmax(e_mom, fmax(dev_err(tc->m32, tg->m32, tc->numel), dev_err(tc->v32, tg->v32, tc->numel)));
            continue;
        }
        e_absmax = fmax(e_absmax, fmax(dev_err(tc->absmax_m, tg->absmax_m, tc->blocks),
                                       dev_err(tc->absmax_v, tg->absmax_v, tc->blocks)));
        uint8_t *qc = fc_malloc(2 * tc->numel), *qg = fc_malloc(2 * tc->numel);
        g_cpu->download(qc, tc->m8, tc->numel), g_cpu->download(qc + tc->numel, tc->v8, tc->numel);
        g_gpu->download(qg, tg->m8, tc->numel), g_gpu->download(qg + tc->numel, tg->v8, tc->numel);
        codes_diff += codes_differ(qc, qg, 2 * tc->numel, &maxd);
        n8 += 2 * tc->numel;
        free(qc), free(qg);
    }
    double gn_err = fabs(info[1].grad_norm - info[0].grad_norm) / fmax(info[0].grad_norm, 1e-300);
    check(e_param <= TOL_NET && e_ema <= TOL_NET && e_mom <= TOL_NET && e_absmax <= TOL_NET && gn_err <= 1e-12 &&
              info[1].nonfinite == info[0].nonfinite && codes_diff <= n8 / 1000 && maxd <= 1,
          nm("cuda_train_optimizer"),
          "1 step at lr %g: worst parameter %s rel err %.1e, EMA %.1e, fp32 moments %.1e, absmax %.1e (tol %.0e); "
          "8-bit codes differing %zu of %zu (max %d index; tol 0.1%%, 1); grad norm cuda %.12g cpu %.12g (rel %.1e, "
          "tol 1e-12), non-finite %zu / %zu", c.lr, mc->info[pi].name, e_param, e_ema, e_mom, e_absmax, TOL_NET,
          codes_diff, n8, maxd, info[1].grad_norm, info[0].grad_norm, gn_err, info[1].nonfinite, info[0].nonfinite);
    for (int k = 0; k < 2; k++) {
        m[k]->be->free(x0[k]), m[k]->be->free(ema[k]);
        free_optimizer(o[k]);
        free_model(m[k]);
    }
    free(hx0), free(gc), free(gg), free(pc), free(pg);
}

// ============================================================================
// 4. timings (informative)

static void time_config(const char *path, const char *label) {
    Config c;
    if (!load_config(&c, path, 0)) return;
    const Backend *be = g_gpu;
    Model *m = build_model(&c, be, c.batch_size);
    Optimizer *o = build_optimizer(m, &c);
    model_init(m, g_seed, 1);
    size_t nx = (size_t)m->S * m->E;
    real *hx0 = fc_malloc(sizeof(real) * nx), *x0 = be->alloc(sizeof(real) * nx);
    real *ema = be->alloc(sizeof(real) * m->n_params);  // as in training, updated in the optimizer's pass
    philox_fill_uniform(hx0, nx, -1, 1, g_seed, 0, RNG_TEST, 0);
    be->upload(x0, hx0, sizeof(real) * nx);
    flow_prepare_batch(m, x0, 0, g_seed, 1);
    int reps = g_quick ? 3 : 10;
    double t_fb = 0, t_opt = 0;
    for (int it = -2; it < reps; it++) {  // two warmup steps
        be->sync();
        double t0 = now();
        model_forward(m), model_loss(m);
        model_backward(m);
        be->sync();
        double t1 = now();
        optimizer_step(o, m, &c, it + 3, 1e-6, ema, c.ema_decay);
        be->sync();
        if (it >= 0) t_fb += t1 - t0, t_opt += now() - t1;
    }
    printf("INFO cuda_time%s %s: %.2f ms per forward+backward, %.2f ms per optimizer step with the EMA (B=%d, %d "
           "tokens, D=%d, %d blocks, %.2fM parameters; mean of %d after 2 warmup)\n",
           g_mode, label, 1e3 * t_fb / reps, 1e3 * t_opt / reps, m->B, m->T, m->D, c.depth, m->n_params / 1e6, reps);
    be->free(x0), be->free(ema), free(hx0);
    free_optimizer(o);
    free_model(m);
}

// The memory plan of this backend (operands of its size, bf16's weight mirror aside) counts exactly
// what build_model allocates on it, at each recompute setting (test_model checks the CPU's).
static void plan_matches_allocation(void) {
    Config c;
    if (!load_config(&c, TINY, 1)) return;
    for (int rc = 0; rc <= 3; rc++) {
        c.recompute = rc < 3 ? rc : 2, c.keep_blocks = rc < 3 ? 0 : 1;  // last: recompute 2, one block kept
        Model *m = build_model(&c, g_gpu, c.batch_size);
        MemPlan p = memory_plan(&c, c.batch_size, plan_device(g_gpu->name, g_gpu->precision));
        check((double)model_memory_bytes(m) == p.model, nm("cuda_memory_plan_is_allocation"),
              "%s, recompute %d, keep_blocks %d: %zu bytes allocated, %.0f planned", TINY, c.recompute, c.keep_blocks,
              model_memory_bytes(m), p.model);
        free_model(m);
    }
}

// The plan's routes line (memory_plan_routes: route_scratch from the model's largest linears)
// holds the fp8 scratch the step's GEMMs asked for, and is that scratch exactly with all three fp8
// routes on (the tiny config's largest linears all take them); 0 with none on.
static void plan_holds_route_scratch(size_t seen) {
    Config c;
    if (!load_config(&c, TINY, 1)) return;
    double planned = memory_plan_routes(&c, c.batch_size, g_gpu);
    const char *routes = g_gpu == g_cpu ? "" : backend_cuda_routes();
    int on = !!strstr(routes, "fp8_fwd=1") + !!strstr(routes, "fp8_dgrad=1") + !!strstr(routes, "fp8_wgrad=1");
    check((double)seen <= planned && (on < 3 || (double)seen == planned) && (on > 0 || planned == 0),
          nm("cuda_memory_plan_routes"), "%d of the 3 fp8 routes on: %zu bytes of fp8 scratch asked for by the step's "
          "GEMMs, %.0f planned", on, seen, planned);
}

void cuda_test_train_step(void) {
    backend_cuda_fp8_scratch_seen(1);
    section_train_step();
    plan_holds_route_scratch(backend_cuda_fp8_scratch_seen(0));
    plan_matches_allocation();
}

void cuda_time_config(const char *path, const char *label) { time_config(path, label); }
