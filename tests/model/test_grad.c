// test_grad.c: every op's backward, and the whole network's gradients, against central finite
// differences. Built with -DFC_DOUBLE: the same backend and model sources, in double precision,
// so that the finite differences are exact to ~1e-9 and a wrong derivative cannot hide.
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "check.h"
#include "base/config.h"
#include "model/flow.h"
#include "model/model.h"
#include "base/philox.h"

#ifndef FC_DOUBLE
#error "test_grad is built with -DFC_DOUBLE"
#endif

// ----------------------------------------------------------------------------
// the harness: L = sum(y * w) for a fixed random w; backward with dy = w must give dL/dx.

typedef struct {
    const char *name;
    real *x, *dx;
    size_t n;
    int overwrite;  // the op's contract is dx = ... (backend.h), not dx += ...
} Arg;

typedef struct {
    const char *name;
    void (*fwd)(void *ctx);
    void (*bwd)(void *ctx);  // reads dy, adds into (or, for an `overwrite` arg, writes) the args' dx
    void *ctx;
    Arg args[6];
    int nargs;
    real *y, *dy;
    size_t ny;
    double h;  // finite-difference step
} OpCheck;

static const Backend *be;

// The op checks' buffers, freed together at the end (so the sanitizer build sees no leak).
static void *g_allocs[512];
static int g_nallocs;
static void *talloc(size_t count, size_t size) {
    if (g_nallocs == 512) fc_die("test_grad: too many buffers");
    return g_allocs[g_nallocs++] = fc_calloc(count, size);
}
static void tfree_all(void) {
    while (g_nallocs) free(g_allocs[--g_nallocs]);
}
static uint32_t g_stream_offset = 0;

static real *randbuf(size_t n, double lo, double hi) {
    real *p = talloc(n, sizeof(real));
    philox_fill_uniform(p, n, lo, hi, 77, 0, RNG_TEST, g_stream_offset);
    g_stream_offset += (uint32_t)n + 1;
    return p;
}

static double loss_of(OpCheck *c) {
    c->fwd(c->ctx);
    double l = 0;
    for (size_t i = 0; i < c->ny; i++) l += (double)c->y[i] * c->dy[i];
    return l;
}

static void gradcheck(OpCheck *c, double tol) {
    c->fwd(c->ctx);
    philox_fill_uniform(c->dy, c->ny, -1, 1, 99, 0, RNG_TEST, g_stream_offset++);
    // Pre-fill every gradient with 0.25: backward must add to it, or overwrite it where the
    // contract says so (either way a mistake shows as 0.25 more or less).
    for (int a = 0; a < c->nargs; a++)
        for (size_t i = 0; i < c->args[a].n; i++) c->args[a].dx[i] = 0.25;
    c->bwd(c->ctx);
    for (int a = 0; a < c->nargs; a++) {
        Arg *g = &c->args[a];
        double worst = 0, scale = 1e-12;
        size_t stride = g->n > 64 ? g->n / 61 : 1;  // every element of a small tensor, ~64 of a large one
        for (size_t i = 0; i < g->n; i += stride) {
            real orig = g->x[i];
            double h = c->h * fmax(1.0, fabs(orig));
            g->x[i] = orig + h;
            double lp = loss_of(c);
            g->x[i] = orig - h;
            double lm = loss_of(c);
            g->x[i] = orig;
            double num = (lp - lm) / (2 * h), ana = g->dx[i] - (g->overwrite ? 0 : 0.25);
            worst = worse(worst, fabs(num - ana));
            scale = fmax(scale, fmax(fabs(num), fabs(ana)));
        }
        char name[128];
        snprintf(name, sizeof name, "grad_op_%s_d%s", c->name, g->name);
        check(worst / scale < tol, name, "max |fd - analytic| / max |grad| = %.2e (max |grad| %.3g)", worst / scale,
              scale);
    }
    c->fwd(c->ctx);
}

// ----------------------------------------------------------------------------
// one context per op family

typedef struct {
    int M, K, N, S, T, D, H, C, HW, P, n;
    long ms;
    AttnLayout lay;
    real scale;
    real *x, *w, *b, *mod, *h, *qkv, *qw, *kw, *pos, *temb, *target, *mask;
    real *dx, *dw, *db, *dmod, *dh, *dqkv, *dqw, *dkw, *dtemb;
    real *y, *dy, *mean, *rstd, *lse, *stats;
    GradMode pmode;  // the parameter gradients' mode, where the op takes one
} Ctx;

static void linear_f(void *p) { Ctx *c = p; be->linear_fwd(c->y, c->x, c->w, c->b, c->M, c->K, c->N); }
static void linear_b(void *p) {
    Ctx *c = p;
    be->linear_bwd(c->dx, GRAD_ADD, c->dw, c->db, GRAD_ADD, c->dy, c->x, c->w, c->M, c->K, c->N);
}
static void linear_b_set(void *p) {  // dx, dw and db overwritten
    Ctx *c = p;
    be->linear_bwd(c->dx, GRAD_SET, c->dw, c->db, GRAD_SET, c->dy, c->x, c->w, c->M, c->K, c->N);
}

// The backward of the MLP's second linear fused with the GELU before it (linear_gelu_bwd), checked
// as the function it differentiates: pre (M, K) -> y (M, N) = linear(GELU(pre)); h holds GELU(pre),
// stats holds pre.
static void gelu_linear_f(void *p) {
    Ctx *c = p;
    be->gelu_fwd(c->h, c->stats, (size_t)c->M * c->K);
    be->linear_fwd(c->y, c->h, c->w, c->b, c->M, c->K, c->N);
}
static void gelu_linear_b(void *p) {
    Ctx *c = p;
    be->linear_gelu_bwd(c->dh, c->dw, c->db, c->pmode, c->dy, c->h, c->w, c->stats, c->M, c->K, c->N);
}

static void ln_f(void *p) {
    Ctx *c = p;
    be->ln_mod_fwd(c->y, c->mean, c->rstd, c->x, c->mod, c->mod + c->D, c->ms, c->S, c->N, c->D);
}
static void ln_b(void *p) {
    Ctx *c = p;
    be->ln_mod_bwd(c->dx, c->dmod, c->dmod + c->D, c->dy, c->x, c->mean, c->rstd, c->mod + c->D, c->ms, c->S, c->N,
                   c->D);
}

static void gate_f(void *p) {
    Ctx *c = p;
    be->gated_add_fwd(c->y, c->x, c->h, c->mod + 2 * c->D, c->ms, c->S, c->N, c->D);
}
static void gate_b(void *p) {
    Ctx *c = p;
    be->gated_add_bwd(c->dx, c->dh, c->dmod + 2 * c->D, c->dy, c->h, c->mod + 2 * c->D, c->ms, c->S, c->N, c->D);
}

static void qkn_f(void *p) { Ctx *c = p; be->qk_norm_fwd(c->y, c->stats, c->qkv, c->qw, c->kw, c->T, c->D, c->H); }
static void qkn_b(void *p) {
    Ctx *c = p;
    be->qk_norm_bwd(c->dqkv, c->dqw, c->dkw, c->pmode, c->dy, c->qkv, c->stats, c->qw, c->kw, c->T, c->D, c->H);
}

static void attn_f(void *p) { Ctx *c = p; be->attn_fwd(c->y, c->lse, c->qkv, c->lay, c->D, c->H); }
static void attn_b(void *p) { Ctx *c = p; be->attn_bwd(c->dqkv, c->dy, c->y, c->qkv, c->lse, c->lay, c->D, c->H); }

static void gelu_f(void *p) { Ctx *c = p; be->gelu_fwd(c->y, c->x, c->n); }
static void gelu_b(void *p) { Ctx *c = p; be->gelu_bwd(c->dx, c->dy, c->x, c->n); }
static void silu_f(void *p) { Ctx *c = p; be->silu_fwd(c->y, c->x, c->n); }
static void silu_b(void *p) { Ctx *c = p; be->silu_bwd(c->dx, c->dy, c->x, c->n); }

static void patch_f(void *p) { Ctx *c = p; be->patchify_fwd(c->y, c->x, c->S, c->C, c->HW, c->HW, c->P); }
static void patch_b(void *p) { Ctx *c = p; be->patchify_bwd(c->dx, c->dy, c->S, c->C, c->HW, c->HW, c->P); }
static void unpatch_f(void *p) { Ctx *c = p; be->unpatchify_fwd(c->y, c->x, c->S, c->C, c->HW, c->HW, c->P); }
static void unpatch_b(void *p) { Ctx *c = p; be->unpatchify_bwd(c->dx, c->dy, c->S, c->C, c->HW, c->HW, c->P); }

static void sin_f(void *p) { Ctx *c = p; be->sinusoid_fwd(c->y, c->x, c->scale, c->M, c->D); }
static void sin_b(void *p) { Ctx *c = p; be->sinusoid_bwd(c->dx, c->dy, c->x, c->scale, c->M, c->D); }

static void apt_f(void *p) { Ctx *c = p; be->add_pos_time_fwd(c->y, c->x, c->pos, c->temb, c->S, c->N, c->D); }
static void apt_b(void *p) { Ctx *c = p; be->add_pos_time_bwd(c->dx, c->dtemb, c->dy, c->S, c->N, c->D); }

static void mse_f(void *p) { Ctx *c = p; be->mse_masked_fwd(c->y, c->x, c->target, c->mask, c->S, c->M); }
static void mse_b(void *p) { Ctx *c = p; be->mse_masked_bwd(c->dx, c->x, c->target, c->mask, c->dy[0], c->S, c->M); }

#define ARG(nm, xp, dxp, cnt) ((Arg){nm, (xp), (dxp) = talloc((cnt), sizeof(real)), (cnt), 0})
#define ARG_SET(nm, xp, dxp, cnt) ((Arg){nm, (xp), (dxp) = talloc((cnt), sizeof(real)), (cnt), 1})  // dx = ...

static OpCheck op(const char *name, void (*f)(void *), void (*b)(void *), Ctx *c, size_t ny) {
    c->y = talloc(ny, sizeof(real));
    c->dy = talloc(ny, sizeof(real));
    return (OpCheck){.name = name, .fwd = f, .bwd = b, .ctx = c, .y = c->y, .dy = c->dy, .ny = ny, .h = 1e-6};
}

static void test_ops(void) {
    const double tol = 1e-6;
    {
        Ctx c = {.M = 5, .K = 7, .N = 6};
        c.x = randbuf(35, -1, 1), c.w = randbuf(42, -1, 1), c.b = randbuf(6, -1, 1);
        OpCheck k = op("linear", linear_f, linear_b, &c, 30);
        k.args[0] = ARG("x", c.x, c.dx, 35), k.args[1] = ARG("w", c.w, c.dw, 42), k.args[2] = ARG("b", c.b, c.db, 6);
        k.nargs = 3;
        gradcheck(&k, tol);
        OpCheck s = op("linear_set", linear_f, linear_b_set, &c, 30);
        s.args[0] = ARG_SET("x", c.x, c.dx, 35), s.args[1] = ARG_SET("w", c.w, c.dw, 42);
        s.args[2] = ARG_SET("b", c.b, c.db, 6);
        s.nargs = 3;
        gradcheck(&s, tol);
    }
    {  // the MLP's second linear with the GELU before it: pre (5, 6) -> y (5, 7)
        int M = 5, K = 6, N = 7;
        Ctx c = {.M = M, .K = K, .N = N};
        c.stats = randbuf((size_t)M * K, -3, 3), c.w = randbuf((size_t)N * K, -1, 1), c.b = randbuf(N, -1, 1);
        c.h = talloc((size_t)M * K, sizeof(real));
        for (c.pmode = GRAD_SET; c.pmode <= GRAD_ADD; c.pmode++) {  // dw, db overwritten, then added into
            OpCheck k = op(c.pmode == GRAD_SET ? "linear_gelu_set" : "linear_gelu", gelu_linear_f, gelu_linear_b, &c,
                           (size_t)M * N);
            int set = c.pmode == GRAD_SET;
            k.args[0] = ARG_SET("pre", c.stats, c.dh, (size_t)M * K);
            k.args[1] = (Arg){"w", c.w, c.dw = talloc((size_t)N * K, sizeof(real)), (size_t)N * K, set};
            k.args[2] = (Arg){"b", c.b, c.db = talloc(N, sizeof(real)), (size_t)N, set}, k.nargs = 3;
            gradcheck(&k, tol);
        }
    }
    // modulation rows with a stride of 3D, as the adaLN chunks have; then a width that is no multiple
    // of the row loops' 8 lanes (their tails)
    for (int wide = 0; wide < 2; wide++) {
        int S = wide ? 2 : 3, N = wide ? 3 : 4, D = wide ? 12 : 8;
        size_t n = (size_t)S * N * D, nm = (size_t)S * 3 * D;
        Ctx c = {.S = S, .N = N, .D = D, .ms = 3 * D};
        c.x = randbuf(n, -2, 2), c.mod = randbuf(nm, -0.5, 0.5);
        c.mean = talloc((size_t)S * N, sizeof(real)), c.rstd = talloc((size_t)S * N, sizeof(real));
        OpCheck k = op(wide ? "ln_mod_D12" : "ln_mod", ln_f, ln_b, &c, n);
        k.args[0] = ARG("x", c.x, c.dx, n), k.args[1] = ARG("shift_scale", c.mod, c.dmod, nm), k.nargs = 2;
        gradcheck(&k, tol);
        if (wide) continue;
        c.h = randbuf(n, -1, 1);
        OpCheck g = op("gated_add", gate_f, gate_b, &c, n);
        g.args[0] = ARG("x", c.x, c.dx, n), g.args[1] = ARG_SET("h", c.h, c.dh, n);
        g.args[2] = ARG("gate", c.mod, c.dmod, nm), g.nargs = 3;
        gradcheck(&g, tol);
    }
    for (int dh = 4; dh <= 12; dh += 8) {  // heads of 4 (a tail alone) and of 12 (8 lanes and a tail)
        int T = 5, H = 2, D = H * dh;
        size_t n = (size_t)T * 3 * D;
        Ctx c = {.T = T, .D = D, .H = H};
        c.qkv = randbuf(n, -2, 2), c.qw = randbuf(dh, 0.5, 1.5), c.kw = randbuf(dh, 0.5, 1.5);
        c.stats = talloc((size_t)T * 2 * H, sizeof(real));
        for (c.pmode = GRAD_SET; c.pmode <= GRAD_ADD; c.pmode++) {  // dqw, dkw overwritten, then added into
            char name[32];
            snprintf(name, sizeof name, "%s%s", c.pmode == GRAD_SET ? "qk_norm_set" : "qk_norm", dh == 4 ? "" : "_dh12");
            OpCheck k = op(name, qkn_f, qkn_b, &c, n);
            int set = c.pmode == GRAD_SET;
            k.args[0] = ARG_SET("qkv", c.qkv, c.dqkv, n);
            k.args[1] = (Arg){"qw", c.qw, c.dqw = talloc(dh, sizeof(real)), (size_t)dh, set};
            k.args[2] = (Arg){"kw", c.kw, c.dkw = talloc(dh, sizeof(real)), (size_t)dh, set}, k.nargs = 3;
            gradcheck(&k, tol);
        }
    }
    for (int temporal = 0; temporal < 2; temporal++) {
        int B = 2, F = 3, N = 4, D = 8, T = B * F * N;
        Ctx c = {.D = D, .H = 2};
        if (!temporal)
            c.lay = (AttnLayout){.n_outer = B * F, .n_inner = 1, .len = N, .tok_stride = 1, .outer_stride = N};
        else
            c.lay = (AttnLayout){.n_outer = B, .n_inner = N, .len = F, .tok_stride = N, .outer_stride = F * N,
                                 .inner_stride = 1};
        c.qkv = randbuf((size_t)T * 3 * D, -1.5, 1.5), c.lse = talloc(T * 2, sizeof(real));
        OpCheck k = op(temporal ? "attention_temporal" : "attention_spatial", attn_f, attn_b, &c, (size_t)T * D);
        k.args[0] = ARG_SET("qkv", c.qkv, c.dqkv, (size_t)T * 3 * D), k.nargs = 1;
        gradcheck(&k, tol);
    }
    {
        Ctx c = {.n = 41};
        c.x = randbuf(41, -4, 4);
        OpCheck k = op("gelu", gelu_f, gelu_b, &c, 41);
        k.args[0] = ARG_SET("x", c.x, c.dx, 41), k.nargs = 1;
        gradcheck(&k, tol);
        OpCheck s = op("silu", silu_f, silu_b, &c, 41);
        s.args[0] = ARG_SET("x", c.x, c.dx, 41), s.nargs = 1;
        gradcheck(&s, tol);
    }
    {
        Ctx c = {.S = 2, .C = 3, .HW = 8, .P = 4};
        size_t n = 2 * 3 * 64;
        c.x = randbuf(n, -1, 1);
        OpCheck k = op("patchify", patch_f, patch_b, &c, n);
        k.args[0] = ARG("frames", c.x, c.dx, n), k.nargs = 1;
        gradcheck(&k, tol);
        OpCheck u = op("unpatchify", unpatch_f, unpatch_b, &c, n);
        u.args[0] = ARG("patches", c.x, c.dx, n), u.nargs = 1;
        gradcheck(&u, tol);
    }
    for (int big = 0; big < 2; big++) {  // offsets (scale 1) and noise levels (scale 1000)
        Ctx c = {.M = 5, .D = 16, .scale = big ? 1000 : 1};
        c.x = big ? randbuf(5, 0, 1) : randbuf(5, -8, 8);
        OpCheck k = op(big ? "sinusoid_x1000" : "sinusoid", sin_f, sin_b, &c, 80);
        k.args[0] = ARG("x", c.x, c.dx, 5), k.nargs = 1;
        k.h = big ? 1e-9 : 1e-6;
        gradcheck(&k, big ? 1e-5 : tol);
    }
    {
        Ctx c = {.S = 3, .N = 4, .D = 8};
        c.x = randbuf(96, -1, 1), c.pos = randbuf(32, -1, 1), c.temb = randbuf(24, -1, 1);
        OpCheck k = op("add_pos_time", apt_f, apt_b, &c, 96);
        k.args[0] = ARG("x", c.x, c.dx, 96), k.args[1] = ARG("temb", c.temb, c.dtemb, 24), k.nargs = 2;
        gradcheck(&k, tol);
    }
    {
        Ctx c = {.S = 4, .M = 6};
        c.x = randbuf(24, -1, 1), c.target = randbuf(24, -1, 1), c.mask = talloc(4, sizeof(real));
        c.mask[1] = c.mask[3] = 1;  // slots 0 and 2 are conditioning: no loss, no gradient
        OpCheck k = op("mse_masked", mse_f, mse_b, &c, 1);
        k.args[0] = ARG("pred", c.x, c.dx, 24), k.nargs = 1;
        gradcheck(&k, tol);
        double leak = 0;
        for (int i = 0; i < 6; i++) leak += fabs(c.dx[i] - 0.25) + fabs(c.dx[12 + i] - 0.25);
        check(leak == 0, "mse_masked_ignores_conditioning_slots", "gradient on non-target slots: %g", leak);
    }
}

// ----------------------------------------------------------------------------
// forwards against their formulas, which finite differences cannot check (a forward and its
// backward wrong alike agree with each other), and the NULL-gradient contract

// LayerNorm without modulation (shift = scale = 0) against its formula with eps 1e-6, at a width
// with a tail (12) and on rows whose variance (about 3e-7) is below eps: there eps decides rstd.
static void test_ln_formula(void) {
    int S = 1, N = 4, D = 12;
    real *x = randbuf((size_t)N * D, -1, 1), *y = talloc((size_t)N * D, sizeof(real));
    real *mod = talloc((size_t)2 * D, sizeof(real)), *mean = talloc(N, sizeof(real)), *rstd = talloc(N, sizeof(real));
    for (int i = 2 * D; i < N * D; i++) x[i] = 0.5 + 1e-3 * x[i];  // rows 2 and 3: low variance
    be->ln_mod_fwd(y, mean, rstd, x, mod, mod + D, 2 * D, S, N, D);
    double worst = 0;
    for (int r = 0; r < N; r++) {
        double mu = 0, var = 0;
        for (int d = 0; d < D; d++) mu += x[r * D + d];
        mu /= D;
        for (int d = 0; d < D; d++) var += (x[r * D + d] - mu) * (x[r * D + d] - mu);
        double rs = 1 / sqrt(var / D + 1e-6);
        for (int d = 0; d < D; d++) worst = worse(worst, fabs(y[r * D + d] - (x[r * D + d] - mu) * rs));
    }
    check(worst < 1e-9, "ln_mod_forward_formula", "D=%d, two rows of variance under eps: worst |y - (x - mean) / "
          "sqrt(var + 1e-6)| %.1e (tol 1e-9)", D, worst);
}

// The q/k RMS norm against its formula with eps 1e-6, y = x / sqrt(mean(x^2) + 1e-6) w per head, at a
// head size with a tail (12, past the 8 lanes) and on rows whose mean square (about 3e-7) is below
// eps: there eps decides the scale. The v part is copied as it is.
static void test_rms_formula(void) {
    int T = 4, H = 2, D = 24, dh = D / H;
    real *qkv = randbuf((size_t)T * 3 * D, -1, 1), *y = talloc((size_t)T * 3 * D, sizeof(real));
    real *qw = randbuf(dh, 0.5, 1.5), *kw = randbuf(dh, 0.5, 1.5), *rstd = talloc((size_t)T * 2 * H, sizeof(real));
    for (int i = 2 * 3 * D; i < T * 3 * D; i++) qkv[i] *= 1e-3;  // tokens 2 and 3: mean square ~3e-7
    be->qk_norm_fwd(y, rstd, qkv, qw, kw, T, D, H);
    double worst = 0;
    int v_copied = 1;
    for (int t = 0; t < T; t++) {
        for (int part = 0; part < 2; part++)
            for (int h = 0; h < H; h++) {
                const real *x = qkv + (size_t)t * 3 * D + part * D + h * dh, *w = part ? kw : qw;
                const real *out = y + (size_t)t * 3 * D + part * D + h * dh;
                double ms = 0;
                for (int d = 0; d < dh; d++) ms += (double)x[d] * x[d];
                double r = 1 / sqrt(ms / dh + 1e-6);
                for (int d = 0; d < dh; d++) worst = worse(worst, fabs(out[d] - x[d] * r * w[d]));
            }
        v_copied &= !memcmp(y + (size_t)t * 3 * D + 2 * D, qkv + (size_t)t * 3 * D + 2 * D, sizeof(real) * D);
    }
    check(worst < 1e-9 && v_copied, "qk_rmsnorm_forward_formula", "dh=%d, two tokens of mean square under eps: worst "
          "|y - x / sqrt(mean(x^2) + 1e-6) w| %.1e (tol 1e-9); v copied: %d", dh, worst, v_copied);
}

// The sinusoid embedding: out[k] = cos(a), out[half + k] = sin(a), a = x scale 10000^(-k / half).
static void test_sinusoid_formula(void) {
    int M = 3, d = 16, half = d / 2;
    real x[3] = {0.3, -2.0, 7.5}, *out = talloc((size_t)M * d, sizeof(real));
    be->sinusoid_fwd(out, x, 1.5, M, d);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int k = 0; k < half; k++) {
            double a = x[m] * 1.5 * pow(10000.0, -(double)k / half);
            worst = worse(worst, worse(fabs(out[m * d + k] - cos(a)), fabs(out[m * d + half + k] - sin(a))));
        }
    check(worst < 1e-12, "sinusoid_forward_formula", "M=%d d=%d scale 1.5: worst error %.1e (tol 1e-12)", M, d,
          worst);
}

// ln_mod_bwd with one of dshift and dscale NULL (backend.h: a NULL gradient is not computed): the
// other the same bytes as with both, and dx too.
static void test_ln_null_grads(void) {
    int S = 2, N = 3, D = 12;
    long ms = 2 * D;
    size_t n = (size_t)S * N * D, nm = (size_t)S * ms;
    real *x = randbuf(n, -2, 2), *dy = randbuf(n, -1, 1), *mod = randbuf(nm, -0.5, 0.5), *y = talloc(n, sizeof(real));
    real *mean = talloc((size_t)S * N, sizeof(real)), *rstd = talloc((size_t)S * N, sizeof(real));
    be->ln_mod_fwd(y, mean, rstd, x, mod, mod + D, ms, S, N, D);
    real *g[3][3];  // [both, shift only, scale only][dx, dshift, dscale]
    for (int way = 0; way < 3; way++) {
        for (int k = 0; k < 3; k++) g[way][k] = talloc(k ? nm : n, sizeof(real));
        be->ln_mod_bwd(g[way][0], way == 2 ? NULL : g[way][1], way == 1 ? NULL : g[way][2], dy, x, mean, rstd,
                       mod + D, ms, S, N, D);
    }
    int same = !memcmp(g[0][0], g[1][0], n * sizeof(real)) && !memcmp(g[0][0], g[2][0], n * sizeof(real)) &&
               !memcmp(g[0][1], g[1][1], nm * sizeof(real)) && !memcmp(g[0][2], g[2][2], nm * sizeof(real));
    check(same, "ln_mod_backward_null_gradient", "dshift alone, dscale alone: %s as with both, and dx",
          same ? "the same bytes" : "NOT the same bytes");
}

// ----------------------------------------------------------------------------
// the whole network on the tiny config

static void network_loss_and_grads(Model *m, double *loss) {
    model_forward(m);
    *loss = model_loss(m);
}

// d loss / d xt from the gradient of the network's input xin (model.h): with cond_concat each
// slot's frame also feeds the slots that carry it as their anchor or reference (docs/network.md).
static void fold_input_grad(const Model *m, const real *dxin, real *dxt) {
    const Config *c = &m->cfg;
    int parts = config_input_frames(c), anchor = config_anchor_slot(c);
    size_t E = (size_t)m->E;
    memset(dxt, 0, sizeof(real) * m->S * E);
    for (int b = 0; b < m->B; b++)
        for (int f = 0; f < m->F; f++) {
            int from[3] = {f, anchor, config_reference_slot(c, f)};
            for (int k = 0; k < parts; k++)
                for (size_t e = 0; e < E; e++)
                    dxt[((size_t)b * m->F + from[k]) * E + e] += dxin[((size_t)b * m->F + f) * m->Ein + k * E + e];
        }
}

// The tiny config; depth > 0 overrides its depth, recompute re-makes the blocks' activations in
// backward, concat is a cond_concat value (each slot's input carries the given frames too).
static void test_network(const char *config_path, int depth, int recompute, const char *concat) {
    Config cfg;
    config_defaults(&cfg);
    config_load(&cfg, config_path);
    if (depth) cfg.depth = depth;
    cfg.recompute = recompute;
    // one context slot too, so that conditioning, anchor and target slots all appear
    config_set(&cfg, "plan=anchor:0 context:2 target:4 target:5 target:6", "test");
    char kv[64];
    snprintf(kv, sizeof kv, "cond_concat=%s", concat);
    config_set(&cfg, kv, "test");
    Model *m = build_model(&cfg, be, 2);
    m->want_input_grad = 1;
    model_init(m, 11, 1);
    size_t nx = (size_t)m->S * m->E;
    real *x0 = be->alloc(sizeof(real) * nx);
    philox_fill_uniform(x0, nx, -1, 1, 11, 0, RNG_TEST, 0);
    flow_prepare_batch(m, x0, 0, 11, 3);
    double loss;
    network_loss_and_grads(m, &loss);
    model_zero_grad(m);
    model_backward(m);
    real *dxt = fc_malloc(sizeof(real) * nx);
    fold_input_grad(m, m->d.dxt, dxt);

    int bad = 0, checked = 0;
    double worst_rel = 0;
    const char *worst_name = "";
    for (int ti = 0; ti <= m->n_tensors; ti++) {
        int is_input = ti == m->n_tensors;
        real *x = is_input ? m->in.xt : m->params_mem + m->info[ti].offset;
        real *g = is_input ? dxt : m->grads_mem + m->info[ti].offset;
        size_t n = is_input ? nx : m->info[ti].numel;
        const char *name = is_input ? "input.xt" : m->info[ti].name;
        double worst = 0, scale = 1e-12;
        for (int s = 0; s < 6; s++) {
            size_t i = s == 0 ? 0 : s == 5 ? n - 1 : philox_u32(5, ti, RNG_TEST, s) % n;
            real orig = x[i];
            double h = 1e-5 * fmax(1.0, fabs(orig)), lp, lm;
            x[i] = orig + h;
            network_loss_and_grads(m, &lp);
            x[i] = orig - h;
            network_loss_and_grads(m, &lm);
            x[i] = orig;
            double num = (lp - lm) / (2 * h);
            worst = worse(worst, fabs(num - g[i]));
            scale = fmax(scale, fmax(fabs(num), fabs(g[i])));
        }
        double rel = worst / scale;
        checked++;
        if (rel > 1e-5 || scale < 1e-9) {
            bad++;
            printf("  %s: rel %.2e, max |grad| %.2e\n", name, rel, scale);
        }
        if (rel > worst_rel) worst_rel = rel, worst_name = name;
    }
    char test[96];
    const char *suffix = recompute ? "_recompute" : "";
    if (cfg.cond_concat) suffix = cfg.cond_concat == CONCAT_ANCHOR ? "_concat_anchor" : "_concat_anchor_nearest";
    snprintf(test, sizeof test, "grad_network_tiny%s", suffix);
    check(bad == 0, test, "%d blocks, %d tensors (and the input) at 6 elements each, worst rel %.2e (%s), loss %.5f",
          cfg.depth, checked, worst_rel, worst_name, loss);

    // Backward again over a gradient scratch and parameter gradients of NaNs: every buffer it reads
    // must have been zeroed or written first in this pass (most are overwritten by their one
    // producer, backend.h), and every parameter's gradient overwritten (no zeroing before a step), so
    // the gradients are the same bytes as the first pass's.
    size_t np = m->n_params, nin = (size_t)m->S * m->Ein;
    real *g1 = fc_malloc(sizeof(real) * (np + nin));
    memcpy(g1, m->grads_mem, sizeof(real) * np), memcpy(g1 + np, m->d.dxt, sizeof(real) * nin);
    double loss2;
    network_loss_and_grads(m, &loss2);  // the activations of the unperturbed inputs again
    for (size_t i = 0; i < m->dscratch_bytes / sizeof(real); i++) ((real *)m->dscratch_mem)[i] = NAN;
    for (size_t i = 0; i < np; i++) m->grads_mem[i] = NAN;
    model_backward(m);
    int same = !memcmp(g1, m->grads_mem, sizeof(real) * np) && !memcmp(g1 + np, m->d.dxt, sizeof(real) * nin);
    snprintf(test, sizeof test, "backward_scratch_nan%s", suffix);
    check(same, test, "a second backward over NaN-filled gradients and scratch: %zu parameter gradients and the "
          "input's %s", np, same ? "the same bytes" : "DIFFER");
    free(g1), free(dxt);
    be->free(x0);
    free_model(m);
}

int main(int argc, char **argv) {
    fc_set_threads(fc_default_threads());
    be = backend_cpu();
    test_ops();
    test_ln_formula(), test_rms_formula(), test_sinusoid_formula(), test_ln_null_grads();
    const char *tiny = argc > 1 ? argv[1] : "configs/tiny/starter.conf";
    test_network(tiny, 0, 0, "none");
    test_network(tiny, 3, 1, "none");
    test_network(tiny, 0, 0, "anchor");
    test_network(tiny, 0, 0, "anchor+nearest");
    tfree_all();
    return g_failed ? 1 : 0;
}
