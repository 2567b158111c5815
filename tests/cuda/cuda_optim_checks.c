// cuda_optim_checks.c: the optimizer's ops of test_cuda (see test_cuda.c) on CUDA against the CPU:
// AdamW fp32 and 8-bit with the EMA in the same pass, the EMA alone, and the gradient norm's sum of
// squares; then their determinism (section 2). AdamW and the EMA repeat the CPU's float operations
// in its order, each IEEE-rounded: the same bytes, so the tolerance is 0 (and no 8-bit code may
// differ). make_grads, hyper and the 8-bit state are shared with test_cuda.c (cuda_harness.h).
#include "cuda/cuda_harness.h"

// x ~ N(0, 1) with the given elements made NaN, +Inf, -Inf in turn.
static void t_sum_squares(size_t n, const size_t *bad, int nbad) {
    Buf x = bnormal(n, 0, 1);
    for (int k = 0; k < nbad; k++) R(x)[bad[k]] = k % 3 == 0 ? NAN : k % 3 == 1 ? INFINITY : -INFINITY;
    breset(&x);
    double s[2];
    size_t nf[2];
    BOTH(s[side_] = be->sum_squares(P(x), n, &nf[side_]));
    double rel = fabs(s[1] - s[0]) / fmax(fabs(s[0]), 1e-300);
    check(nf[0] == nf[1] && rel <= 1e-12, "cuda_sum_squares",
          "n=%zu with %d non-finite: count cuda %zu cpu %zu, sum cuda %.17g cpu %.17g, rel err %.1e (tol 1e-12)", n,
          nbad, nf[1], nf[0], s[1], s[0], rel);
    bfree(&x);
}

static void t_ema(size_t n, float decay) {
    Buf ema = bnormal(n, 0, 1), p = bnormal(n, 0, 1);
    WHAT("n=%zu decay %g, 3 updates", n, decay);
    for (int k = 0; k < 3; k++) BOTH(be->ema_update(P(ema), P(p), decay, n));
    compare("cuda_ema_update", "", &ema, NULL);
    FREE(&ema, &p);
}

// Gradients of step t: N(0, 0.01^2), 1% of them times a heavy-tailed factor, others shrunk over 6
// decades (eps matters), a few NaN and Inf elements, and one finite one whose square is not a float
// (skipped as they are: ADAM_GRAD_USABLE) beside one just under the limit (taken).
void make_grads(Buf *g, int t) {
    size_t n = g->n;
    for (size_t i = 0; i < n; i++) {
        double z = philox_normal(g_seed, t, RNG_TEST + 1, i), u = philox_uniform(g_seed, t, RNG_TEST + 2, i);
        R(*g)[i] = (real)(0.01 * z * (u < 0.01 ? 1 / sqrt(u / 0.01) : u > 0.9 ? pow(10, -60 * (u - 0.9)) : 1));
    }
    R(*g)[(17 * t) % n] = NAN, R(*g)[(n / 2 + t) % n] = INFINITY, R(*g)[(n - 1 - t) % n] = -INFINITY;
    R(*g)[(n / 3 + t) % n] = -1e30f, R(*g)[(n / 5 + t) % n] = 2.5e19f;  // times grad_scale 0.7: over and under 1.8e19
    breset(g);
}

AdamHyper hyper(int t) {
    return (AdamHyper){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .step = t,
                       .grad_scale = 0.7f};
}
// Step t with the EMA updated in the same pass on odd steps (as training does every step), alone on even ones.
static AdamHyper hyper_ema(int t, real *ema) {
    AdamHyper h = hyper(t);
    if (t % 2) h.ema = ema, h.ema_decay = 0.99f;
    return h;
}

#define ADAM8_CALL(be, a, t)                                                                                       \
    be->adamw_8bit(P((a).p), P((a).g), PU((a).m8), PU((a).v8), P((a).am), P((a).av), P((a).cm), P((a).cv), (a).n, \
                   hyper_ema(t, P((a).ema)))

// The same step through adamw_8bit_jobs: the state cut into two jobs at a block boundary (the second
// without the EMA), so that the CPU's one pass over both jobs' blocks meets the CUDA side's launches.
static int g_adam8_jobs;  // 1 while the steps go through adamw_8bit_jobs
static void adam8_jobs_call(const Backend *be, int side_, Adam8 *a, int t) {
    size_t cut = (a->nb / 2) * ADAM8_BLOCK, nb1 = a->nb / 2;
    AdamHyper h = hyper_ema(t, P(a->ema)), h2 = h;
    h2.ema = NULL, h2.weight_decay = 0.02f;
    Adam8Job jobs[2] = {
        {P(a->p), P(a->g), PU(a->m8), PU(a->v8), P(a->am), P(a->av), cut, h},
        {P(a->p) + cut, P(a->g) + cut, PU(a->m8) + cut, PU(a->v8) + cut, P(a->am) + nb1, P(a->av) + nb1, a->n - cut,
         h2}};
    be->adamw_8bit_jobs(jobs, 2, P(a->cm), P(a->cv));
}
#define ADAM8_STEP(be, a, t) \
    (g_adam8_jobs ? adam8_jobs_call(be, side_, &(a), t) : ADAM8_CALL(be, a, t))

// fp32 AdamW from the zero state; each step is compared, then the CUDA side takes the CPU's state.
static void t_adamw_fp32(size_t n, int steps) {
    Buf p = bnormal(n, 0, 0.1), g = bnormal(n, 0, 1), m = bnormal(n, 0, 1), v = bnormal(n, 0, 1);
    Buf ema = bnormal(n, 0, 0.1);
    memset(m.init, 0, n * sizeof(float)), memset(v.init, 0, n * sizeof(float));
    breset(&m), breset(&v);
    for (int t = 1; t <= steps; t++) {
        make_grads(&g, t);
        WHAT("n=%zu step %d of %d, NaN/Inf gradients%s", n, t, steps, t % 2 ? ", with the EMA" : "");
        BOTH(be->adamw_fp32(P(p), P(g), P(m), P(v), n, hyper_ema(t, P(ema))));
        compare("cuda_adamw_fp32", "param", &p, "m", &m, "v", &v, "ema", &ema, NULL);
        bshare(&p), bshare(&m), bshare(&v), bshare(&ema);
    }
    FREE(&p, &g, &m, &v, &ema);
}

Adam8 adam8_new(size_t n) {
    Adam8 a = {.n = n, .nb = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK};
    a.p = bnormal(n, 0, 0.1), a.g = bnormal(n, 0, 1), a.m8 = bcodes(n), a.v8 = bcodes(n), a.ema = bnormal(n, 0, 0.1);
    a.am = bnormal(a.nb, 0, 1), a.av = bnormal(a.nb, 0, 1), a.cm = bnormal(QUANT8_TABLE, 0, 1),
    a.cv = bnormal(QUANT8_TABLE, 0, 1);
    memset(a.am.init, 0, a.nb * sizeof(float)), memset(a.av.init, 0, a.nb * sizeof(float));
    quant8_signed_code(a.cm.init), quant8_unsigned_code(a.cv.init), quant8_table(a.cm.init), quant8_table(a.cv.init);
    breset(&a.am), breset(&a.av), breset(&a.cm), breset(&a.cv);
    return a;
}

void adam8_free(Adam8 *a) { FREE(&a->p, &a->g, &a->m8, &a->v8, &a->am, &a->av, &a->cm, &a->cv, &a->ema); }

// Several steps; each from the same state on both sides (the CUDA side takes the CPU's after the
// comparison), so that every step is compared on its own.
static const char *g_adam8_route = "";  // ", adam8_warp route" while that route is on

static void t_adamw_8bit(size_t n, int steps) {
    Adam8 a = adam8_new(n);
    size_t dm = 0, dv = 0;
    int maxd = 0, guard = 0;
    double ep = 0, eam = 0, eav = 0, ee = 0;
    for (int t = 1; t <= steps; t++) {
        make_grads(&a.g, t);
        if (t == 1 && a.nb > 4)  // a block of zero gradients: its absmax stays 0
            memset(R(a.g) + 3 * ADAM8_BLOCK, 0, ADAM8_BLOCK * sizeof(real)), breset(&a.g);
        BOTH(ADAM8_STEP(be, a, t));
        ep = fmax(ep, berr(&a.p, &guard)), eam = fmax(eam, berr(&a.am, &guard)), eav = fmax(eav, berr(&a.av, &guard));
        ee = fmax(ee, berr(&a.ema, &guard));
        bget(&a.m8), bget(&a.v8);
        guard |= guard_changed(&a.m8) || guard_changed(&a.v8);
        dm += codes_differ(a.m8.hc, a.m8.hg, n, &maxd), dv += codes_differ(a.v8.hc, a.v8.hg, n, &maxd);
        bshare(&a.p), bshare(&a.m8), bshare(&a.v8), bshare(&a.am), bshare(&a.av), bshare(&a.ema);
    }
    double frac = (double)(dm + dv) / (2.0 * n * steps);
    check(!guard && dm + dv == 0 && ep <= g_tol && eam <= g_tol && eav <= g_tol && ee <= g_tol, "cuda_adamw_8bit",
          "n=%zu (tail block of %zu), %d steps (the EMA on odd ones): codes differing m8 %zu v8 %zu of %zu per step "
          "(%.2e, max %d index; tol 0), absmax rel err m %.1e v %.1e, param rel err %.1e, EMA %.1e (tol %.0e)%s%s", n,
          n % ADAM8_BLOCK, steps, dm, dv, n, frac, maxd, eam, eav, ep, ee, g_tol, g_adam8_route,
          guard ? "; WROTE OUTSIDE ITS OUTPUT (guard changed)" : "");
    adam8_free(&a);
}

void cuda_optim_cases(void) {
    // 1050 chunks: more than the combining block's 1024 threads, so some threads add two chunks (the
    // last non-finite element lies in one of those)
    size_t bad1[] = {17, 4096, 4300000}, bad2[] = {2};
    t_sum_squares(4300001, bad1, 3), t_sum_squares(5, bad2, 1), t_sum_squares(0, NULL, 0);
    t_sum_squares(4096 * 37 + 5, NULL, 0);
    double tol = g_tol;
    g_tol = 0;
    t_ema(100003, 0.999f);
    t_adamw_fp32(100003, 4), t_adamw_fp32(1000, 2);
    t_adamw_8bit(100003, 5), t_adamw_8bit(4096, 3);
    g_adam8_jobs = 1, g_adam8_route = ", two jobs in one adamw_8bit_jobs call";
    t_adamw_8bit(100003, 3), t_adamw_8bit(300, 2);
    g_adam8_jobs = 0, g_adam8_route = "";
    // the adam8_warp route (cuda/optim.cu): the same cases, a state shorter than one quantisation
    // block, and more blocks than its grid has warps (each warp then walks several); every call
    // through the route, none while it is off
    for (int route = 1; route >= 0; route--) {
        backend_cuda_set_route("adam8_warp", route);
        long calls0 = backend_cuda_route_calls("adam8_warp");
        g_adam8_route = route ? ", adam8_warp route" : "";
        if (route) t_adamw_8bit(100003, 5), t_adamw_8bit(4096, 3), t_adamw_8bit(77, 2);
        t_adamw_8bit((size_t)ADAM8_BLOCK * 64 * 3 + 129, 2);  // the emulation's grid: 4 blocks of 16 warps
        long taken = backend_cuda_route_calls("adam8_warp") - calls0, want = route ? 5 + 3 + 2 + 2 : 0;
        if (g_gpu != g_cpu)
            check(taken == want, "cuda_adam8_warp_taken", "%ld of the %d optimizer calls through the route%s (want %ld)",
                  taken, route ? 12 : 2, g_adam8_route, want);
    }
    g_adam8_route = "";
    g_tol = tol;
}

void cuda_optim_determinism(void) {
    for (int route = 0; route < 2; route++) {  // 8-bit AdamW: two steps from the zero state, both kernels
        backend_cuda_set_route("adam8_warp", route);
        Adam8 a = adam8_new((1u << 20) + 77);
        int same = 1;
        for (int rep = 0; rep < 2; rep++) {
            breset(&a.p), breset(&a.m8), breset(&a.v8), breset(&a.am), breset(&a.av), breset(&a.ema);
            for (int t = 1; t <= 2; t++) {
                make_grads(&a.g, t);
                int side_ = 1;
                ADAM8_CALL(g_gpu, a, t);
            }
            same &= det_capture(&a.p, rep) & det_capture(&a.m8, rep) & det_capture(&a.v8, rep) &
                    det_capture(&a.am, rep) & det_capture(&a.av, rep) & det_capture(&a.ema, rep);
        }
        check(same, "cuda_determinism_adamw_8bit", "n=%zu, 2 steps%s: param, codes, absmax, EMA %s", a.n,
              route ? ", adam8_warp route" : "", SAME(same));
        adam8_free(&a);
        backend_cuda_set_route("adam8_warp", 0);
    }
    {  // the gradient norm's sum of squares
        Buf x = bnormal(5000011, 0, 1);
        size_t nf[2];
        double s[2];
        for (int rep = 0; rep < 2; rep++) s[rep] = g_gpu->sum_squares(x.g, x.n, &nf[rep]);
        check(!memcmp(&s[0], &s[1], sizeof(double)) && nf[0] == nf[1], "cuda_determinism_sum_squares",
              "n=%zu: %.17g and %.17g", x.n, s[0], s[1]);
        bfree(&x);
    }
}
