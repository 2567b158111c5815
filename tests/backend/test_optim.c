// test_optim.c: the optimizer ops of the CPU backend (src/backend/cpu/cpu_optim.c) and the 8-bit
// codes behind them (src/backend/quant8.c): the dynamic code maps (their values as bitsandbytes'
// create_dynamic_map forms them) and their encoder, fp32 AdamW against a plain-double AdamW written
// here, 8-bit AdamW against fp32 AdamW, non-finite gradients, tail blocks and the zero state, the same
// bytes for 1 and 2 threads, the sum of squares and the EMA.
#include <math.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"
#include "check.h"
#include "backend/cpu/cpu_optim.h"
#include "base/philox.h"
#include "backend/quant8.h"

static float g_code_s[QUANT8_TABLE], g_code_u[QUANT8_TABLE];  // encoder tables: the 256 values first

// fc_set_threads(k), then the size of the OpenMP team a parallel loop really gets. If that is not k,
// the OpenMP thread count is set again here so that the thread checks below compare what they say;
// g_threads_note tells the output why.
static int g_threads_note;

static int set_threads(int k) {
    fc_set_threads(k);
    int team = 1;
#ifdef _OPENMP
#pragma omp parallel
    {
        if (omp_get_thread_num() == 0) team = omp_get_num_threads();
    }
    if (team != k) {
        if (!g_threads_note++)
            printf("note: after fc_set_threads(%d) a parallel loop runs %d thread(s) (OpenBLAS's "
                   "openblas_set_num_threads resets the OpenMP count?); setting it again here\n", k, team);
        omp_set_num_threads(k);
#pragma omp parallel
        {
            if (omp_get_thread_num() == 0) team = omp_get_num_threads();
        }
    }
#endif
    return team;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The nearest code value by exhaustive search, the lowest index on a tie.
static int brute_nearest(const float *code, float x) {
    // clamped first: for x far outside the range the distances to the end values round to one double
    if (x > code[255]) x = code[255];
    if (x < code[0]) x = code[0];
    int best = 0;
    double bd = fabs((double)x - code[0]);
    for (int k = 1; k < 256; k++) {
        double d = fabs((double)x - code[k]);
        if (d < bd) bd = d, best = k;
    }
    return best;
}

static void test_code_maps(void) {
    const char *names[2] = {"signed", "unsigned"};
    float *codes[2] = {g_code_s, g_code_u};
    for (int s = 0; s < 2; s++) {
        const float *c = codes[s];
        int ascending = 1, zero = 0, one = c[255] == 1.0f, in_range = 1;
        for (int k = 0; k < 256; k++) {
            if (k && !(c[k] > c[k - 1])) ascending = 0;
            if (c[k] == 0.0f) zero++;
            if (c[k] > 1.0f || c[k] < (s == 0 ? -1.0f : 0.0f)) in_range = 0;
        }
        // The decades: 2^(B - z) positive values in [10^-(z+1), 10^-z), B = 6 signed, 7 unsigned.
        int decades_ok = 1, pos = 0;
        for (int z = 0; z <= 6; z++) {
            int cnt = 0;
            for (int k = 0; k < 256; k++) cnt += c[k] >= pow(10, -(z + 1)) && c[k] < pow(10, -z);
            decades_ok &= cnt == 1 << ((s == 0 ? 6 : 7) - z);
            pos += cnt;
        }
        char name[64];
        snprintf(name, sizeof name, "code_%s_map", names[s]);
        check(ascending && zero == 1 && one && in_range && decades_ok && pos == 254 - (s == 0 ? 127 : 0), name,
              "256 values strictly ascending %d, one 0 %d, 1.0 exact %d, range [%.6f, %.6f], %d values below 1 in "
              "the 7 decades as 2^(%d-z) %d, smallest nonzero %.3g",
              ascending, zero == 1, one, c[0], c[255], pos, s == 0 ? 6 : 7, decades_ok, c[s == 0 ? 128 : 1]);
    }
    // The signed map mirrors itself except for the 1.0, which takes the slot of "-0".
    int mirror = 1;
    for (int k = 0; k < 255; k++) mirror &= g_code_s[k] == -g_code_s[254 - k];
    check(mirror && g_code_s[0] < -0.99f && g_code_s[0] > -1.0f && g_code_s[127] == 0.0f, "code_signed_symmetric",
          "code[k] == -code[254-k] for k < 255: %d; most negative %.8f (bitsandbytes: -0.99296875)", mirror,
          g_code_s[0]);

    // The values themselves, built as bitsandbytes' create_dynamic_map builds them: in decade z, the
    // midpoints of linspace(0.1, 1, 2^f + 1) times 10^-z, f = B - z; the map is those (and their
    // negatives when signed), 0 and 1, in order.
    for (int s = 0; s < 2; s++) {
        double want[256];
        int n = 0;
        for (int z = 0; z <= 6; z++) {
            int parts = 1 << ((s == 0 ? 6 : 7) - z);
            for (int k = 0; k < parts; k++) {
                double lo = 0.1 + 0.9 * k / parts, hi = 0.1 + 0.9 * (k + 1) / parts;
                want[n++] = pow(10, -z) * (lo + hi) / 2;
                if (s == 0) want[n] = -want[n - 1], n++;
            }
        }
        want[n++] = 0, want[n++] = 1;
        for (int i = 1; i < n; i++)  // insertion sort: 256 values
            for (int j = i; j > 0 && want[j] < want[j - 1]; j--) {
                double t = want[j];
                want[j] = want[j - 1], want[j - 1] = t;
            }
        const float *c = codes[s];
        double worst = 0;
        for (int k = 0; k < 256 && n == 256; k++) worst = worse(worst, fabs(c[k] - want[k]) / fmax(fabs(want[k]), 1e-30));
        check(n == 256 && worst < 1e-6, s == 0 ? "code_signed_values" : "code_unsigned_values",
              "256 values against the decades' linspace midpoints: worst rel. diff %.2e", worst);
    }

    // The encoder against exhaustive search: random values over the range and over the decades, every
    // code value, every midpoint and its neighbours, and values outside the range. The encoder table
    // (what the optimizer runs) must give the same index as the midpoint test in double every time.
    for (int s = 0; s < 2; s++) {
        const float *c = codes[s];
        long tried = 0, wrong = 0, ties = 0, table_wrong = 0;
        float bad_x = 0;
#define TRY(xv)                                                                 \
    do {                                                                        \
        float x_ = (xv);                                                        \
        tried++;                                                                \
        if (quant8_encode(c, x_) != brute_nearest(c, x_)) wrong++, bad_x = x_; \
        table_wrong += quant8_encode_table(c, x_) != quant8_encode(c, x_);     \
    } while (0)
        for (int i = 0; i < 200000; i++) {
            double u = philox_uniform(11, s, RNG_TEST, i), w = philox_uniform(11, s, RNG_TEST + 1, i);
            TRY((float)(2.2 * u - 1.1));
            TRY((float)((w < 0.5 ? -1 : 1) * pow(10.0, -9.0 + 9.05 * u)));
        }
        for (int k = 0; k < 256; k++) {
            int own = quant8_encode(c, c[k]) == k;
            tried++, wrong += !own;
            if (!own) bad_x = c[k];
        }
        for (int k = 0; k < 255; k++) {
            double mid = ((double)c[k] + c[k + 1]) / 2;
            float fm = (float)mid;
            if ((double)fm == mid) {  // an exact tie: the lower index
                ties++;
                tried++;
                if (quant8_encode(c, fm) != k) wrong++, bad_x = fm;
            }
            TRY(fm);
            TRY(nextafterf(fm, 2.0f));
            TRY(nextafterf(fm, -2.0f));
        }
        float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.0000001f, 2.0f, -2.0f, 1e30f, -1e30f, 1e-40f, -1e-40f};
        for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) TRY(specials[k]);
#undef TRY
        float nonfinite[] = {NAN, INFINITY, -INFINITY};  // no nearest value: the table as the double test
        for (int k = 0; k < 3; k++)
            tried++, table_wrong += quant8_encode_table(c, nonfinite[k]) != quant8_encode(c, nonfinite[k]);
        for (int k = 0; k < 255; k++) {  // every threshold, and the float just below it
            float x = c[256 + k], below = nextafterf(x, -INFINITY);
            tried += 2;
            table_wrong += (quant8_encode_table(c, x) != quant8_encode(c, x)) +
                           (quant8_encode_table(c, below) != quant8_encode(c, below));
        }
        // every 251st float, from both sides of every bucket of the table's index to NaNs and infinities
        for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
            uint32_t bits = (uint32_t)u;
            float x;
            memcpy(&x, &bits, sizeof x);
            tried++, table_wrong += quant8_encode_table(c, x) != quant8_encode(c, x);
        }
        // speed, for the record: the midpoint test, and the table the optimizer uses
        double t0 = now();
        unsigned acc = 0;
        for (uint32_t i = 0; i < 1000000; i++)  // scrambled inputs in [-1, 1]
            acc += quant8_encode(c, (float)((i * 2654435761u) / 2147483648.0 - 1.0));
        double ns = (now() - t0) * 1e3;
        t0 = now();
        for (uint32_t i = 0; i < 1000000; i++)
            acc += quant8_encode_table(c, (float)((i * 2654435761u) / 2147483648.0 - 1.0));
        double ns_table = (now() - t0) * 1e3;
        char name[64];
        snprintf(name, sizeof name, "encode_nearest_%s", names[s]);
        check(wrong == 0 && table_wrong == 0, name,
              "%ld of %ld values differ from exhaustive search (last %.9g), %ld from the encoder table; %ld exact "
              "ties went to the lower index; %.1f ns per encode, %.1f by the table (%u)", wrong, tried, bad_x,
              table_wrong, ties, ns, ns_table, acc & 1);
    }
}

// Parameters N(0, 0.1^2) as in bitsandbytes' test.
static void init_params(real *p, size_t n, uint64_t seed) { philox_fill_normal(p, n, 0, 0.1f, seed, 0, RNG_TEST, 0); }

// Gradients N(0, 0.01^2), with 1% of the elements multiplied by a Pareto(alpha 2) factor >= 1 (heavy
// tails: the outliers set their block's absmax and squeeze the other elements into the lower codes).
static void make_grads(real *g, real *u, size_t n, uint64_t seed, uint32_t step) {
    philox_fill_normal(g, n, 0, 0.01f, seed, step, RNG_TEST, 0);
    philox_fill_uniform(u, n, 0, 1, seed, step, RNG_TEST + 1, 0);
    for (size_t i = 0; i < n; i++)
        if (u[i] < 0.01f && u[i] > 0) g[i] *= 1.0f / sqrtf(u[i] / 0.01f);
}

static void dequant(float *out, const uint8_t *q, const float *absmax, const float *code, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = code[q[i]] * absmax[i / ADAM8_BLOCK];
}

// Whether code index q is not the nearest to r (r: fp32's moment over the absmax). A near-tie may
// round either way (fp32 AdamW stores the moment rounded to float, the 8-bit op requantises it
// before that rounding): those are counted in *ties, not as errors.
static int off_nearest(const float *code, int q, double r, long *ties) {
    int ref = quant8_encode(code, (float)r);
    if (q == ref) return 0;
    if (fabs(r - code[q]) - fabs(r - code[ref]) <= 1e-6 * fabs(r) + 1e-12) return ++*ties, 0;
    return 1;
}

static double mean_rel_diff(const real *a, const real *ref, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs((double)a[i] - ref[i]) / (fabs((double)ref[i]) + 1e-8);
    return s / n;
}

// fp32 AdamW against AdamW written out in double here (torch.optim.AdamW's order: decay, moments,
// bias-corrected step). Gradients span 7 decades so that eps matters for some elements.
static void test_adamw_fp32(void) {
    enum { N = 1000, STEPS = 6 };
    real *p = fc_calloc(N, sizeof(real)), *g = fc_calloc(N, sizeof(real));
    float *m = fc_calloc(N, sizeof(float)), *v = fc_calloc(N, sizeof(float));
    double *rp = fc_calloc(N, sizeof(double)), *rm = fc_calloc(N, sizeof(double)), *rv = fc_calloc(N, sizeof(double));
    philox_fill_normal(p, N, 0, 1, 21, 0, RNG_TEST, 0);
    for (int i = 0; i < N; i++) rp[i] = p[i];
    AdamHyper h = {.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f,
                   .grad_scale = 0.37f};
    double ep = 0, em = 0, ev = 0;
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = (real)(philox_normal(21, t, RNG_TEST, i) * pow(10.0, -7 * philox_uniform(21, t, RNG_TEST + 1, i)));
        h.step = t;
        cpu_adamw_fp32(p, g, m, v, N, h);
        double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay, gs = h.grad_scale;
        for (int i = 0; i < N; i++) {
            double gi = g[i] * gs;
            rp[i] *= 1 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mhat = rm[i] / (1 - pow(b1, t)), vhat = rv[i] / (1 - pow(b2, t));
            rp[i] -= lr * mhat / (sqrt(vhat) + eps);
            // p against its own size (plus a step, near 0); m against the gradient scale sqrt(v), where
            // a moment that crosses 0 is compared; v relative
            ep = fmax(ep, fabs(p[i] - rp[i]) / (fabs(rp[i]) + lr));
            em = fmax(em, fabs(m[i] - rm[i]) / sqrt(rv[i]));
            ev = fmax(ev, fabs(v[i] - rv[i]) / rv[i]);
        }
    }
    check(ep < 3e-7 && em < 1e-6 && ev < 1e-6, "adamw_fp32_matches_double_reference",
          "%d steps, lr %g wd %g grad_scale %g beta (%g, %g) eps %g: max rel. error p %.2e, m %.2e, v %.2e", STEPS,
          h.lr, h.weight_decay, h.grad_scale, h.beta1, h.beta2, h.eps, ep, em, ev);
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

// One optimizer's state for the comparison: fp32 AdamW's parameters and moments, 8-bit AdamW's.
typedef struct {
    real *p32, *p8;
    float *m, *v, *am, *av;
    uint8_t *m8, *v8;
} Pair;

static Pair pair_new(const real *p0, size_t n, size_t nb) {
    Pair q = {fc_calloc(n, sizeof(real)), fc_calloc(n, sizeof(real)), fc_calloc(n, sizeof(float)),
              fc_calloc(n, sizeof(float)), fc_calloc(nb, sizeof(float)), fc_calloc(nb, sizeof(float)),
              fc_calloc(n, 1), fc_calloc(n, 1)};
    memcpy(q.p32, p0, n * sizeof(real)), memcpy(q.p8, p0, n * sizeof(real));
    return q;
}

static void pair_free(Pair *q) {
    free(q->p32), free(q->p8), free(q->m), free(q->v), free(q->am), free(q->av), free(q->m8), free(q->v8);
}

// 8-bit AdamW against fp32 AdamW on the same parameters and gradients, 4096 x 64, 50 steps of
// torch's Adam defaults (lr 1e-3, betas 0.9 / 0.999, eps 1e-8, no weight decay).
//
// bitsandbytes' test_optimizer8bit (tests/test_optim.py) takes p ~ 0.1 N(0,1) and g ~ 0.01 N(0,1),
// runs 50 steps of torch.optim.Adam against bnb.optim.Adam8bit (blocks of 256) and after EVERY step
// asserts mean(|p1 - p2| / (|p1| + 1e-9)) < 6e-4 for fp32 (<= 1.6e-3 for bf16), then copies the torch
// parameters into the 8-bit ones and the dequantised 8-bit moments into torch's. So it bounds one step
// from a shared state, and since the step itself uses the moments before requantisation, that is
// float rounding at most (exactly 0 here); the quantisation shows only in its check of the states, at
// an atol (3e-3) far above moments of 1e-3 and below.
//
// "resynced" does what bitsandbytes does (with +1e-8 in the denominator, immaterial at |p| ~ 0.1),
// with their fp32 bound, and checks the states properly: each block's absmax is the max of its
// updated moments, and every moment is stored as the code nearest to it.
// "free-running" never re-syncs, which is where quantisation shows: the parameters drift apart over
// the 50 steps. There mean(|p8 - p32| / (|p32| + 1e-8)) is about 2e-2, not 1.6e-3: the drift is about
// 2% of the distance the parameters moved, and dividing by |p32| weights the few parameters near 0
// most. (A torch simulation of bitsandbytes' algorithm against torch.optim.Adam drifts as far, mean
// |p8 - p32| 1.5e-4, ratio 1.2e-2 to 1.8e-2 on its own samples: it is the method's, not this code's.)
// The bounds are set from that: a correct implementation sits at about half of them; in that
// simulation, rounding down instead of to nearest gives 5x-6x them, a linear code 10x-20x. Our
// gradients also carry heavy-tailed outliers, which bitsandbytes' do not.
static void test_adamw_8bit_tracks_fp32(void) {
    const size_t n = 4096 * 64, nb = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    const int STEPS = 50;
    real *g = fc_calloc(n, sizeof(real)), *u = fc_calloc(n, sizeof(real)), *p0 = fc_calloc(n, sizeof(real));
    AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0, .grad_scale = 1};
    init_params(p0, n, 31);
    Pair fr = pair_new(p0, n, nb), rs = pair_new(p0, n, nb);  // free-running, re-synced after every step
    double worst = 0, t8 = 0, absmax_err = 0, qerr_m = 0, qerr_v = 0, mag_m = 0, mag_v = 0;
    long not_nearest = 0, near_ties = 0;
    for (int t = 1; t <= STEPS; t++) {
        make_grads(g, u, n, 31, t);
        h.step = t;
        cpu_adamw_fp32(fr.p32, g, fr.m, fr.v, n, h);
        double t0 = now();
        cpu_adamw_8bit(fr.p8, g, fr.m8, fr.v8, fr.am, fr.av, g_code_s, g_code_u, n, h);
        t8 += now() - t0;

        cpu_adamw_fp32(rs.p32, g, rs.m, rs.v, n, h);
        cpu_adamw_8bit(rs.p8, g, rs.m8, rs.v8, rs.am, rs.av, g_code_s, g_code_u, n, h);
        worst = worse(worst, mean_rel_diff(rs.p8, rs.p32, n));
        // the states against fp32's moments, which started this step from the same (dequantised) values
        for (size_t b = 0; b < nb; b++) {
            double mx_m = 0, mx_v = 0, am = rs.am[b], av = rs.av[b];
            for (size_t i = b * ADAM8_BLOCK; i < (b + 1) * ADAM8_BLOCK; i++) {
                mx_m = fmax(mx_m, fabs(rs.m[i])), mx_v = fmax(mx_v, rs.v[i]);
                not_nearest += off_nearest(g_code_s, rs.m8[i], rs.m[i] / am, &near_ties);
                not_nearest += off_nearest(g_code_u, rs.v8[i], rs.v[i] / av, &near_ties);
                qerr_m += fabs(g_code_s[rs.m8[i]] * am - rs.m[i]), mag_m += fabs(rs.m[i]);
                qerr_v += fabs(g_code_u[rs.v8[i]] * av - rs.v[i]), mag_v += rs.v[i];
            }
            absmax_err = fmax(absmax_err, fmax(fabs(am - mx_m) / mx_m, fabs(av - mx_v) / mx_v));
        }
        memcpy(rs.p8, rs.p32, n * sizeof(real));
        dequant(rs.m, rs.m8, rs.am, g_code_s, n);
        dequant(rs.v, rs.v8, rs.av, g_code_u, n);
    }
    double rel = mean_rel_diff(fr.p8, fr.p32, n), abs_err = 0, moved = 0;
    for (size_t i = 0; i < n; i++) abs_err += fabs(fr.p8[i] - fr.p32[i]), moved += fabs(fr.p32[i] - p0[i]);
    check(rel < 5e-2 && abs_err / moved < 5e-2, "adamw8bit_tracks_fp32_free_running",
          "%zu params, %d steps: mean |p8 - p32| / (|p32| + 1e-8) = %.3e (bound 5e-2), mean |p8 - p32| = %.2e = "
          "%.2f%% of the mean move %.2e (bound 5%%); %.1f ns per element per 8-bit step, %d threads",
          n, STEPS, rel, abs_err / n, 100 * abs_err / moved, moved / n, t8 / STEPS / n * 1e9, fc_threads());
    check(worst < 6e-4 && absmax_err < 1e-6 && not_nearest == 0, "adamw8bit_tracks_fp32_resynced",
          "re-synced every step as bitsandbytes does: worst step's mean rel. diff of p %.2e (their fp32 bound "
          "6e-4); absmax = block max within %.1e; %ld of %zu moments not stored as the nearest code (%ld near-ties "
          "went the other way); requantisation error mean |m8 - m| / mean |m| = %.2e, same for v %.2e",
          worst, absmax_err, not_nearest, 2 * n * STEPS, near_ties, qerr_m / mag_m, qerr_v / mag_v);
    pair_free(&fr), pair_free(&rs);
    free(g), free(u), free(p0);
}

// NaN and Inf gradients, and a finite one whose square is not a float (a run blowing up without
// grad_clip): that element's parameter and moments stay, the rest of its block moves. One just under
// the limit (ADAM_GRAD_MAX) moves, its v finite.
static void test_nonfinite_gradients(void) {
    enum { N = 600, NB = (N + ADAM8_BLOCK - 1) / ADAM8_BLOCK, NBAD = 4, HUGE_OK = 100 };
    static const int bad[NBAD] = {5, 300, 599, 450};  // blocks 0, 1 and the tail block 2
    real p32[N], p8[N], g[N], u[N], old32[N], old8[N];
    float m[N] = {0}, v[N] = {0}, am[NB] = {0}, av[NB] = {0}, oldm[N], oldv[N], dm[N], dv[N];
    uint8_t m8[N] = {0}, v8[N] = {0};
    AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                   .grad_scale = 0.5f};
    init_params(p32, N, 41);
    memcpy(p8, p32, sizeof p8);
    for (int t = 1; t <= 4; t++) {
        make_grads(g, u, N, 41, t);
        if (t == 4) g[bad[0]] = NAN, g[bad[1]] = INFINITY, g[bad[2]] = -INFINITY, g[bad[3]] = 1e30f;
        if (t == 4) g[HUGE_OK] = -3.5e19f;  // times grad_scale 0.5: 1.75e19, its square 3.1e38
        memcpy(old32, p32, sizeof p32), memcpy(old8, p8, sizeof p8);
        memcpy(oldm, m, sizeof m), memcpy(oldv, v, sizeof v);
        dequant(dm, m8, am, g_code_s, N), dequant(dv, v8, av, g_code_u, N);
        h.step = t;
        cpu_adamw_fp32(p32, g, m, v, N, h);
        cpu_adamw_8bit(p8, g, m8, v8, am, av, g_code_s, g_code_u, N, h);
    }
    // fp32: the three elements keep p, m, v bit for bit; every other parameter moved
    int kept32 = 1, moved32 = 0, moved8 = 0, kept8 = 1, requant = 1, finite = 1;
    for (int k = 0; k < NBAD; k++) {
        int i = bad[k];
        kept32 &= p32[i] == old32[i] && m[i] == oldm[i] && v[i] == oldv[i];
        kept8 &= p8[i] == old8[i];
        // 8-bit: the moment keeps its dequantised value, which is requantised against the block's new
        // absmax like every other element (so its code is the nearest to old / new absmax)
        int b = i / ADAM8_BLOCK;
        requant &= m8[i] == quant8_encode(g_code_s, dm[i] / am[b]) && v8[i] == quant8_encode(g_code_u, dv[i] / av[b]);
    }
    for (int i = 0; i < N; i++) {
        if (i == bad[0] || i == bad[1] || i == bad[2] || i == bad[3]) continue;
        moved32 += p32[i] != old32[i];
        moved8 += p8[i] != old8[i];
        finite &= isfinite(p8[i]) && isfinite(p32[i]) && isfinite(m[i]) && isfinite(v[i]);
    }
    for (int b = 0; b < NB; b++) finite &= isfinite(am[b]) && isfinite(av[b]) && am[b] > 0 && av[b] > 0;
    check(kept32 && moved32 == N - NBAD, "adamw_fp32_skips_nonfinite",
          "NaN, +Inf, -Inf, 1e30 gradients at %d, %d, %d, %d: p, m, v unchanged %d; %d of %d other parameters moved "
          "(one by a gradient of -3.5e19)", bad[0], bad[1], bad[2], bad[3], kept32, moved32, N - NBAD);
    check(kept8 && requant && moved8 == N - NBAD && finite, "adamw8bit_skips_nonfinite",
          "p unchanged %d; moments = old dequantised value requantised %d; %d of %d other parameters moved; "
          "all states and absmax finite %d", kept8, requant, moved8, N - NBAD, finite);
}

// A length that is not a multiple of 256, from the zero state: the tail block is updated, nothing
// past the end is touched, and the zero-filled state reads as zero moments (so the first step moves
// every parameter by lr * g / (|g| + eps) after the decay, exactly as fp32 AdamW from zeros does).
static void test_tail_and_zero_state(void) {
    enum { N = 1000, NB = (N + ADAM8_BLOCK - 1) / ADAM8_BLOCK, GUARD = 32 };
    real p32[N], p8[N + GUARD], g[N], u[N], p0[N];
    float m[N] = {0}, v[N] = {0}, am[NB + 1] = {0}, av[NB + 1] = {0};
    uint8_t m8[N + GUARD] = {0}, v8[N + GUARD] = {0};
    for (int i = N; i < N + GUARD; i++) p8[i] = 7.0f, m8[i] = 0xa5, v8[i] = 0x5a;
    am[NB] = av[NB] = 123.0f;
    AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
                   .grad_scale = 2.0f, .step = 1};
    init_params(p0, N, 51);
    memcpy(p32, p0, sizeof p32), memcpy(p8, p0, sizeof p32);
    make_grads(g, u, N, 51, 1);
    cpu_adamw_fp32(p32, g, m, v, N, h);
    cpu_adamw_8bit(p8, g, m8, v8, am, av, g_code_s, g_code_u, N, h);
    double e_first = 0, d8 = 0;
    for (int i = 0; i < N; i++) {
        double gs = (double)g[i] * h.grad_scale, decay = 1.0 - (double)h.lr * h.weight_decay;
        double expect = p0[i] * decay - h.lr * gs / (fabs(gs) + h.eps);
        e_first = fmax(e_first, fabs(p8[i] - expect) / h.lr);
        d8 = fmax(d8, fabs(p8[i] - p32[i]));
    }
    int guards = am[NB] == 123.0f && av[NB] == 123.0f;
    for (int i = N; i < N + GUARD; i++) guards &= p8[i] == 7.0f && m8[i] == 0xa5 && v8[i] == 0x5a;
    check(e_first < 1e-3 && d8 < 1e-7 && am[NB - 1] > 0 && av[NB - 1] > 0 && guards, "adamw8bit_zero_state_tail",
          "n = %d (tail block of %d): first step from zero state off lr*sign(g) by %.1e lr, 8-bit vs fp32 max diff "
          "%.1e, tail absmax %.3g / %.3g, past-the-end untouched %d", N, N % ADAM8_BLOCK, e_first, d8, am[NB - 1],
          av[NB - 1], guards);

    // a second step: the tail block's moments were stored and are read back
    make_grads(g, u, N, 51, 2);
    h.step = 2;
    cpu_adamw_fp32(p32, g, m, v, N, h);
    cpu_adamw_8bit(p8, g, m8, v8, am, av, g_code_s, g_code_u, N, h);
    double rel_tail = 0, rel_head = 0;
    for (int i = 0; i < N; i++) {
        double d = fabs((double)p8[i] - p32[i]) / (fabs((double)p32[i] - p0[i]) + 1e-12);
        if (i >= N - N % ADAM8_BLOCK) rel_tail = fmax(rel_tail, d); else rel_head = fmax(rel_head, d);
    }
    check(rel_tail < 0.05 && rel_head < 0.05, "adamw8bit_tail_second_step",
          "after 2 steps max |p8 - p32| / |p32 - p0|: full blocks %.2e, tail block %.2e", rel_head, rel_tail);
}

static void test_thread_independence(void) {
    const size_t n = 300000 + 77, nb = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    real *p[2], *g = fc_calloc(n, sizeof(real)), *u = fc_calloc(n, sizeof(real)), *e[2];
    uint8_t *m8[2], *v8[2];
    float *am[2], *av[2], *m[2], *v[2];
    AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
                   .grad_scale = 0.7f};
    int threads[2] = {1, 2}, team[2];
    for (int r = 0; r < 2; r++) {
        team[r] = set_threads(threads[r]);
        p[r] = fc_calloc(n, sizeof(real)), e[r] = fc_calloc(n, sizeof(real));
        m8[r] = fc_calloc(n, 1), v8[r] = fc_calloc(n, 1);
        am[r] = fc_calloc(nb, sizeof(float)), av[r] = fc_calloc(nb, sizeof(float));
        m[r] = fc_calloc(n, sizeof(float)), v[r] = fc_calloc(n, sizeof(float));
        init_params(p[r], n, 61);
        init_params(e[r], n, 62);
        for (int t = 1; t <= 5; t++) {
            make_grads(g, u, n, 61, t);
            g[1000 * t] = NAN;
            h.step = t;
            cpu_adamw_8bit(p[r], g, m8[r], v8[r], am[r], av[r], g_code_s, g_code_u, n, h);
            cpu_adamw_fp32(p[r], g, m[r], v[r], n, h);
            cpu_ema_update(e[r], p[r], 0.99f, n);
        }
    }
    int same8 = !memcmp(m8[0], m8[1], n) && !memcmp(v8[0], v8[1], n) && !memcmp(am[0], am[1], nb * sizeof(float)) &&
                !memcmp(av[0], av[1], nb * sizeof(float));
    int same32 = !memcmp(m[0], m[1], n * sizeof(float)) && !memcmp(v[0], v[1], n * sizeof(float));
    int samep = !memcmp(p[0], p[1], n * sizeof(real)), samee = !memcmp(e[0], e[1], n * sizeof(real));
    check(same8 && same32 && samep && samee && team[0] == 1 && team[1] == 2, "optimizer_1_thread_equals_2_threads",
          "%zu elements, 5 steps of 8-bit then fp32 AdamW and EMA on teams of %d and %d threads: 8-bit states %d, "
          "fp32 moments %d, params %d, EMA %d identical", n, team[0], team[1], same8, same32, samep, samee);

    // sum of squares over several chunk groups, with non-finite elements
    const size_t ns = 3000001;
    real *x = fc_calloc(ns, sizeof(real));
    philox_fill_normal(x, ns, 0, 1, 63, 0, RNG_TEST, 0);
    x[17] = NAN, x[4096] = INFINITY, x[ns - 1] = -INFINITY;
    double s[3];
    size_t nf[3];
    int teams_ok = 1;
    for (int r = 0; r < 3; r++) {
        teams_ok &= set_threads(r + 1) == r + 1;
        s[r] = cpu_sum_squares(x, ns, &nf[r]);
    }
    check(!memcmp(&s[0], &s[1], sizeof(double)) && !memcmp(&s[0], &s[2], sizeof(double)) && nf[0] == nf[1] &&
          nf[0] == nf[2] && teams_ok, "sum_squares_thread_independent",
          "%zu elements: 1, 2, 3 threads (teams as asked %d) give %.17g, %.17g, %.17g", ns, teams_ok, s[0], s[1],
          s[2]);
    set_threads(fc_default_threads());

    // the order the code promises (cpu_optim.c: chunks of 4096 summed in order; inside a chunk,
    // element i into accumulator i mod 4, then (s0 + s1) + (s2 + s3)), one element at a time: the
    // same bytes as the vector lanes give. A single chunk shows its own rounding (in a long sum a
    // chunk's last bit is lost in the total's), and accumulators of unlike size (the even elements
    // 2^20 times the odd ones, those spread over 2^0..2^4) make a change of order show in it.
    real *w = fc_calloc(4096, sizeof(real));
    for (size_t i = 0; i < 4096; i++) w[i] = x[i] * (real)ldexp(1.0, i & 1 ? (int)(i % 5) : 20);
    const size_t sizes[4] = {4096, 4093, 37, ns};
    int same_order = 1;
    char got[160] = "";
    for (int t = 0; t < 4; t++) {
        const real *src = sizes[t] == ns ? x : w;
        double order = 0;
        for (size_t c0 = 0; c0 < sizes[t]; c0 += 4096) {
            double acc[4] = {0, 0, 0, 0};
            for (size_t i = c0; i < sizes[t] && i < c0 + 4096; i++)
                if (isfinite(src[i])) acc[i & 3] += (double)src[i] * src[i];
            order += (acc[0] + acc[1]) + (acc[2] + acc[3]);
        }
        size_t nb;
        double sum = cpu_sum_squares(src, sizes[t], &nb);
        same_order &= !memcmp(&order, &sum, sizeof(double));
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%zu: %s", t ? ", " : "", sizes[t],
                 memcmp(&order, &sum, sizeof(double)) ? "differs" : "same");
    }
    free(w);
    check(same_order, "sum_squares_order", "sizes (the last with a NaN and two infinities) %s", got);

    // against a long double sum, and the count of non-finite elements
    long double ref = 0;
    size_t ref_bad = 0;
    for (size_t i = 0; i < ns; i++) {
        if (isfinite(x[i])) ref += (long double)x[i] * x[i];
        else ref_bad++;
    }
    size_t bad_small = 99;
    real tiny[3] = {3, NAN, 4};
    double s_small = cpu_sum_squares(tiny, 3, &bad_small), s_empty = cpu_sum_squares(x, 0, &bad_small);
    double rel = fabs(s[0] - (double)ref) / (double)ref;
    check(rel < 1e-13 && nf[0] == ref_bad && nf[0] == 3 && s_small == 25 && s_empty == 0 && bad_small == 0,
          "sum_squares_reference", "rel. diff from a long double sum %.2e, non-finite counted %zu of %zu; "
          "{3, NaN, 4} -> %g; n = 0 -> %g", rel, nf[0], ref_bad, s_small, s_empty);
    free(x);
    for (int r = 0; r < 2; r++) {
        free(p[r]), free(e[r]), free(m8[r]), free(v8[r]);
        free(am[r]), free(av[r]), free(m[r]), free(v[r]);
    }
    free(g), free(u);
}

static void test_ema(void) {
    enum { N = 1000 };
    real e[N], p[N];
    double ref[N];
    philox_fill_normal(e, N, 0, 1, 71, 0, RNG_TEST, 0);
    for (int i = 0; i < N; i++) ref[i] = e[i];
    float decay = 0.999f;
    double err = 0;
    for (int t = 1; t <= 3; t++) {
        philox_fill_normal(p, N, 0, 1, 71, t, RNG_TEST, 0);
        cpu_ema_update(e, p, decay, N);
        for (int i = 0; i < N; i++) {
            ref[i] = (double)decay * ref[i] + (1.0 - (double)decay) * p[i];
            err = fmax(err, fabs(e[i] - ref[i]) / (fabs(ref[i]) + 1e-6));
        }
    }
    check(err < 3e-7, "ema_update", "3 updates, decay %g: max rel. diff from double %.2e", decay, err);
}

// AdamW with the EMA in the same pass (AdamHyper.ema, what training runs) gives the bytes of AdamW
// followed by ema_update, for both optimizers, over NaN and Inf gradients (the EMA still moves
// towards the unchanged parameter) and a partial last 8-bit block.
static void test_fused_ema(void) {
    const size_t n = 5 * ADAM8_BLOCK + 77, nb = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    real *g = fc_calloc(n, sizeof(real)), *u = fc_calloc(n, sizeof(real));
    for (int is8 = 0; is8 < 2; is8++) {
        real *p[2], *e[2];
        uint8_t *m8[2], *v8[2];
        float *am[2], *av[2], *m[2], *v[2];
        for (int r = 0; r < 2; r++) {  // r = 0: separate passes; r = 1: fused
            p[r] = fc_calloc(n, sizeof(real)), e[r] = fc_calloc(n, sizeof(real));
            m8[r] = fc_calloc(n, 1), v8[r] = fc_calloc(n, 1);
            am[r] = fc_calloc(nb, sizeof(float)), av[r] = fc_calloc(nb, sizeof(float));
            m[r] = fc_calloc(n, sizeof(float)), v[r] = fc_calloc(n, sizeof(float));
            init_params(p[r], n, 81), init_params(e[r], n, 82);
            for (int t = 1; t <= 3; t++) {
                make_grads(g, u, n, 81, t);
                g[7 * t] = NAN, g[n - t] = INFINITY;
                float decay = t == 1 ? 0.5f : 0.999f;
                AdamHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
                               .step = t, .grad_scale = 0.7f, .ema = r ? e[r] : NULL, .ema_decay = decay};
                if (is8) cpu_adamw_8bit(p[r], g, m8[r], v8[r], am[r], av[r], g_code_s, g_code_u, n, h);
                else cpu_adamw_fp32(p[r], g, m[r], v[r], n, h);
                if (!r) cpu_ema_update(e[r], p[r], decay, n);
            }
        }
        int samep = !memcmp(p[0], p[1], n * sizeof(real)), samee = !memcmp(e[0], e[1], n * sizeof(real));
        int moved = memcmp(e[1], p[1], n * sizeof(real)) != 0;
        check(samep && samee && moved, is8 ? "adamw8bit_fused_ema" : "adamw_fused_ema",
              "%zu elements, 3 steps with NaN/Inf gradients: parameters %s, EMA %s as AdamW then ema_update", n,
              samep ? "identical" : "DIFFER", samee ? "identical" : "DIFFER");
        for (int r = 0; r < 2; r++) {
            free(p[r]), free(e[r]), free(m8[r]), free(v8[r]);
            free(am[r]), free(av[r]), free(m[r]), free(v[r]);
        }
    }
    free(g), free(u);
}

// The AVX2 form of the 8-bit step (cpu_optim.c) against its scalar reference, byte for byte: 6
// steps on a tensor with a tail block, a block of zero state, non-finite gradients, a gradient whose
// square overflows float (skipped: ADAM_GRAD_USABLE) beside one just under it (a second moment of
// 3e35, the block's absmax), and the EMA.
static void test_adam8_vector_equals_scalar(void) {
    const size_t n = 4 * ADAM8_BLOCK + 8 * 13 + 5, nb = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    real *p[2], *e[2], *g = fc_calloc(n, sizeof(real)), *u = fc_calloc(n, sizeof(real));
    uint8_t *m8[2], *v8[2];
    float *am[2], *av[2];
    for (int r = 0; r < 2; r++) {
        p[r] = fc_calloc(n, sizeof(real)), e[r] = fc_calloc(n, sizeof(real));
        m8[r] = fc_calloc(n, 1), v8[r] = fc_calloc(n, 1);
        am[r] = fc_calloc(nb, sizeof(float)), av[r] = fc_calloc(nb, sizeof(float));
        init_params(p[r], n, 71), init_params(e[r], n, 72);
    }
    int first_diff = -1, huge_v = 0;
    for (int t = 1; t <= 6 && first_diff < 0; t++) {
        make_grads(g, u, n, 71, t);
        for (size_t i = ADAM8_BLOCK; i < 2 * ADAM8_BLOCK; i++) g[i] = 0;  // block 1 stays zero state
        g[3 * t] = NAN, g[7 * t + 1] = t % 2 ? INFINITY : -INFINITY, g[n - 1 - t] = NAN;
        if (t == 2) g[2 * ADAM8_BLOCK + 9] = 3e37f, g[2 * ADAM8_BLOCK + 10] = -2.2e19f;  // times 0.8: over, under 1.8e19
        AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step = t,
                       .grad_scale = 0.8f, .ema_decay = 0.99f};
        for (int r = 0; r < 2; r++) {
            cpu_adamw_8bit_vector(r);  // r = 0: scalar, r = 1: vector (where the CPU has AVX2)
            h.ema = e[r];
            cpu_adamw_8bit(p[r], g, m8[r], v8[r], am[r], av[r], g_code_s, g_code_u, n, h);
        }
        if (memcmp(p[0], p[1], n * sizeof(real)) || memcmp(e[0], e[1], n * sizeof(real)) || memcmp(m8[0], m8[1], n) ||
            memcmp(v8[0], v8[1], n) || memcmp(am[0], am[1], nb * sizeof(float)) || memcmp(av[0], av[1], nb * sizeof(float)))
            first_diff = t;
        if (t == 2) huge_v = isfinite(av[0][2]) && av[0][2] > 1e35f;
    }
    cpu_adamw_8bit_vector(1);
    check(first_diff < 0 && huge_v, "adamw8bit_vector_equals_scalar",
          "%zu elements (a tail of %zu), 6 steps with NaN, +-inf and overflowing gradients: %s (block 2's absmax_v "
          "finite and over 1e35 after step 2: %d)", n, n % ADAM8_BLOCK,
          first_diff < 0 ? "params, EMA, codes and absmaxes identical" : "differ", huge_v);
    if (first_diff >= 0) printf("  first difference after step %d\n", first_diff);
    for (int r = 0; r < 2; r++) free(p[r]), free(e[r]), free(m8[r]), free(v8[r]), free(am[r]), free(av[r]);
    free(g), free(u);
}

// Several tensors' steps as one call (cpu_adamw_8bit_jobs) against a call each: the same bytes, at 1
// and 2 threads. Five tensors of unlike sizes (one under a block, partial last blocks, one empty),
// each with its own weight decay and EMA (one without), gradients with NaN and infinity.
static void test_adam8_jobs_equal_calls(void) {
    enum { JOBS = 5 };
    const size_t n[JOBS] = {3 * ADAM8_BLOCK + 17, 100, 0, 2 * ADAM8_BLOCK, ADAM8_BLOCK + 1};
    size_t total = 0, off[JOBS], boff[JOBS], nbt = 0;
    for (int j = 0; j < JOBS; j++) off[j] = total, boff[j] = nbt, total += n[j], nbt += (n[j] + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    real *g = fc_calloc(total, sizeof(real)), *u = fc_calloc(total, sizeof(real)), *p[3], *e[3];
    uint8_t *m8[3], *v8[3];
    float *am[3], *av[3];
    for (int r = 0; r < 3; r++) {
        p[r] = fc_calloc(total, sizeof(real)), e[r] = fc_calloc(total, sizeof(real));
        m8[r] = fc_calloc(total, 1), v8[r] = fc_calloc(total, 1);
        am[r] = fc_calloc(nbt, sizeof(float)), av[r] = fc_calloc(nbt, sizeof(float));
        init_params(p[r], total, 81), init_params(e[r], total, 82);
    }
    int same = 1, teams[2];
    for (int t = 1; t <= 4; t++) {
        make_grads(g, u, total, 81, t);
        g[5 * t] = NAN, g[total - 1 - t] = INFINITY;
        for (int r = 0; r < 3; r++) {  // r = 0: a call each; 1 and 2: one call, on 1 and 2 threads
            if (r) teams[r - 1] = set_threads(r);
            Adam8Job jobs[JOBS];
            for (int j = 0; j < JOBS; j++) {
                AdamHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = t,
                               .weight_decay = 0.01f * j, .grad_scale = 0.9f, .ema = j == 3 ? NULL : e[r] + off[j],
                               .ema_decay = 0.99f};
                jobs[j] = (Adam8Job){p[r] + off[j], g + off[j], m8[r] + off[j], v8[r] + off[j], am[r] + boff[j],
                                     av[r] + boff[j], n[j], h};
                if (!r)
                    cpu_adamw_8bit(jobs[j].param, jobs[j].grad, jobs[j].m8, jobs[j].v8, jobs[j].absmax_m,
                                   jobs[j].absmax_v, g_code_s, g_code_u, n[j], h);
            }
            if (r) cpu_adamw_8bit_jobs(jobs, JOBS, g_code_s, g_code_u);
        }
        for (int r = 1; r < 3; r++)
            same &= !memcmp(p[0], p[r], total * sizeof(real)) && !memcmp(e[0], e[r], total * sizeof(real)) &&
                    !memcmp(m8[0], m8[r], total) && !memcmp(v8[0], v8[r], total) &&
                    !memcmp(am[0], am[r], nbt * sizeof(float)) && !memcmp(av[0], av[r], nbt * sizeof(float));
    }
    set_threads(fc_default_threads());
    check(same && teams[0] == 1 && teams[1] == 2, "adamw8bit_jobs_equal_calls",
          "5 tensors (%zu elements, one empty, one under a block, partial last blocks), 4 steps with NaN and +inf "
          "gradients: one call on %d and on %d threads %s a call a tensor", total, teams[0], teams[1],
          same ? "gives the bytes of" : "differs from");
    for (int r = 0; r < 3; r++) free(p[r]), free(e[r]), free(m8[r]), free(v8[r]), free(am[r]), free(av[r]);
    free(g), free(u);
}

int main(void) {
    set_threads(fc_default_threads());
    quant8_signed_code(g_code_s), quant8_table(g_code_s);
    quant8_unsigned_code(g_code_u), quant8_table(g_code_u);
    double t0 = now();
    test_code_maps();
    test_adamw_fp32();
    test_adamw_8bit_tracks_fp32();
    test_nonfinite_gradients();
    test_tail_and_zero_state();
    test_adam8_vector_equals_scalar();
    test_adam8_jobs_equal_calls();
    test_thread_independence();
    test_ema();
    test_fused_ema();
    printf("test_optim: %.2f s\n", now() - t0);
    return g_failed ? 1 : 0;
}
