// test_attention.c: the CPU backend's attention (attn_fwd, attn_bwd) against its definition written
// out as loops in double, on the spatial and temporal layouts, at lengths and head sizes on both
// sides of where the short sequences' path takes over (src/backend/cpu/cpu_attention.c); that path
// against the long one byte for byte where it applies; and the bytes at one thread and at two.
// The gradients' consistency with the forward is test_grad's (finite differences).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_backend.h"
#include "base/philox.h"
#include "../check.h"

static real *randn(size_t n, uint64_t seed, double std) {
    real *x = malloc(sizeof(real) * n);
    philox_fill_normal(x, n, 0, (real)std, seed, 0, 0, 0);
    return x;
}

// The largest |a - b| / (1 + |b|) over n values (a NaN is the worst).
static double worst(const real *a, const double *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
        if (!(e <= w)) w = e;
    }
    return w;
}

static long row_of(const AttnLayout *lay, int o, int i, int k) {
    return o * lay->outer_stride + i * lay->inner_stride + k * lay->tok_stride;
}

// The definition, in double: out, lse, and dqkv for the upstream gradient dout.
static void reference(double *out, double *lse, double *dqkv, const real *qkv, const real *dout, AttnLayout lay,
                      int D, int H) {
    int dh = D / H, L = lay.len;
    double scale = 1 / sqrt((double)dh);
    double *P = malloc(sizeof(double) * L * L), *dP = malloc(sizeof(double) * L * L);
    for (int o = 0; o < lay.n_outer; o++)
        for (int i = 0; i < lay.n_inner; i++)
            for (int h = 0; h < H; h++) {
                const real *q[L], *k[L], *v[L], *dO[L];
                for (int j = 0; j < L; j++) {
                    long r = row_of(&lay, o, i, j);
                    q[j] = qkv + r * 3 * D + h * dh, k[j] = q[j] + D, v[j] = q[j] + 2 * D;
                    dO[j] = dout + r * D + h * dh;
                }
                for (int j = 0; j < L; j++) {
                    double mx = -INFINITY, sum = 0;
                    for (int m = 0; m < L; m++) {
                        double s = 0;
                        for (int c = 0; c < dh; c++) s += (double)q[j][c] * k[m][c];
                        P[j * L + m] = s * scale;
                        mx = fmax(mx, s * scale);
                    }
                    for (int m = 0; m < L; m++) sum += P[j * L + m] = exp(P[j * L + m] - mx);
                    for (int m = 0; m < L; m++) P[j * L + m] /= sum;
                    long r = row_of(&lay, o, i, j);
                    lse[r * H + h] = mx + log(sum);
                    for (int c = 0; c < dh; c++) {
                        double acc = 0;
                        for (int m = 0; m < L; m++) acc += P[j * L + m] * v[m][c];
                        out[r * D + h * dh + c] = acc;
                    }
                }
                // dP = dO V^T; dS = P (dP - rowsum(P dP)); dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
                for (int j = 0; j < L; j++) {
                    double rs = 0;
                    for (int m = 0; m < L; m++) {
                        double s = 0;
                        for (int c = 0; c < dh; c++) s += (double)dO[j][c] * v[m][c];
                        dP[j * L + m] = s;
                        rs += P[j * L + m] * s;
                    }
                    for (int m = 0; m < L; m++) dP[j * L + m] = P[j * L + m] * (dP[j * L + m] - rs) * scale;
                }
                for (int j = 0; j < L; j++) {
                    long r = row_of(&lay, o, i, j);
                    double *dq = dqkv + r * 3 * D + h * dh, *dk = dq + D, *dv = dq + 2 * D;
                    for (int c = 0; c < dh; c++) {
                        double aq = 0, ak = 0, av = 0;
                        for (int m = 0; m < L; m++) {
                            aq += dP[j * L + m] * k[m][c];
                            ak += dP[m * L + j] * q[m][c];
                            av += P[m * L + j] * dO[m][c];
                        }
                        dq[c] = aq, dk[c] = ak, dv[c] = av;
                    }
                }
            }
    free(P), free(dP);
}

typedef struct {
    real *out, *lse, *dqkv;
} Result;

static Result run(const Backend *be, int long_path, const real *qkv, const real *dout, AttnLayout lay, int D, int H,
                  size_t T) {
    Result r = {calloc(T * D, sizeof(real)), calloc(T * H, sizeof(real)), calloc(T * 3 * D, sizeof(real))};
    if (long_path) {
        cpu_attn_fwd_long(r.out, r.lse, qkv, lay, D, H);
        cpu_attn_bwd_long(r.dqkv, dout, r.out, qkv, r.lse, lay, D, H);
    } else {
        be->attn_fwd(r.out, r.lse, qkv, lay, D, H);
        be->attn_bwd(r.dqkv, dout, r.out, qkv, r.lse, lay, D, H);
    }
    return r;
}

static int same(const Result *a, const Result *b, size_t T, int D, int H) {
    return !memcmp(a->out, b->out, sizeof(real) * T * D) && !memcmp(a->lse, b->lse, sizeof(real) * T * H) &&
           !memcmp(a->dqkv, b->dqkv, sizeof(real) * T * 3 * D);
}

static void free_result(Result *r) { free(r->out), free(r->lse), free(r->dqkv); }

static void t_attention(const Backend *be, int B, int F, int N, int D, int H, int temporal, double std) {
    AttnLayout lay = attn_layout_tokens(B, F, N, temporal);
    size_t T = (size_t)B * F * N;
    int dh = D / H, L = lay.len, is_short = (long)L * L * dh <= 16384;
    char name[160];
    snprintf(name, sizeof name, "%s B=%d F=%d N=%d H=%d dh=%d (length %d, %s path), qkv std %g",
             temporal ? "temporal" : "spatial", B, F, N, H, dh, L, is_short ? "short" : "long", std);
    real *qkv = randn(T * 3 * D, (uint64_t)(D + 7 * L), std), *dout = randn(T * D, (uint64_t)(D + 7 * L + 1), 1);
    double *out = malloc(sizeof(double) * T * D), *lse = malloc(sizeof(double) * T * H);
    double *dqkv = malloc(sizeof(double) * T * 3 * D);
    reference(out, lse, dqkv, qkv, dout, lay, D, H);

    omp_set_num_threads(2);
    Result two = run(be, 0, qkv, dout, lay, D, H, T);
    double eo = worst(two.out, out, T * D), el = worst(two.lse, lse, T * H), ed = worst(two.dqkv, dqkv, T * 3 * D);
    double tol = 1e-5 * std * std;  // larger inputs, larger scores: float's error grows with them
    check(eo < tol && el < tol && ed < tol, "attention_reference",
          "%s: worst error out %.1e, lse %.1e, dqkv %.1e (tolerance %.0e)", name, eo, el, ed, tol);
    omp_set_num_threads(1);
    Result one = run(be, 0, qkv, dout, lay, D, H, T);
    check(same(&one, &two, T, D, H), "attention_threads", "%s: the same bytes at 1 and 2 threads", name);
    if (is_short) {
        omp_set_num_threads(2);
        Result lng = run(be, 1, qkv, dout, lay, D, H, T);
        check(same(&lng, &two, T, D, H), "attention_short_path", "%s: the same bytes as the long path", name);
        free_result(&lng);
    }
    free_result(&one), free_result(&two);
    free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

// Temporal sequences of L tokens (heads of 16) where the first query meets the last key with a
// score of 120 and every other score is small: exp(120) overflows a float, so a softmax whose
// maximum leaves out the row's last score (the tail after the 8-lane loops, L = 5, 7, 17) gives
// inf or NaN. Both paths (short and long) against the reference in double, every value finite.
static void t_attention_far_last_key(const Backend *be, int L) {
    int B = 1, N = 3, D = 32, H = 2, dh = D / H;
    AttnLayout lay = attn_layout_tokens(B, L, N, 1);
    size_t T = (size_t)B * L * N;
    real *qkv = randn(T * 3 * D, (uint64_t)(1000 + L), 0.5), *dout = randn(T * D, (uint64_t)(2000 + L), 1);
    for (int c = 0; c < dh; c++) qkv[c] = 2, qkv[(size_t)(L - 1) * N * 3 * D + D + c] = 15;  // head 0, position 0
    double *out = malloc(sizeof(double) * T * D), *lse = malloc(sizeof(double) * T * H);
    double *dqkv = malloc(sizeof(double) * T * 3 * D);
    reference(out, lse, dqkv, qkv, dout, lay, D, H);
    for (int long_path = 0; long_path < 2; long_path++) {
        Result r = run(be, long_path, qkv, dout, lay, D, H, T);
        double eo = worst(r.out, out, T * D), el = worst(r.lse, lse, T * H), ed = worst(r.dqkv, dqkv, T * 3 * D);
        int finite = 1;
        for (size_t i = 0; i < T * D; i++) finite &= isfinite(r.out[i]);
        for (size_t i = 0; i < T * H; i++) finite &= isfinite(r.lse[i]);
        check(finite && eo < 1e-4 && el < 1e-4 && ed < 1e-4, "attention_far_last_key",
              "temporal L=%d dh=%d, %s path, one score of 120: %s; worst error out %.1e, lse %.1e, dqkv %.1e "
              "(tolerance 1e-4)", L, dh, long_path ? "long" : "the backend's", finite ? "all finite" : "NOT FINITE",
              eo, el, ed);
        free_result(&r);
    }
    free(qkv), free(dout), free(out), free(lse), free(dqkv);
}

int main(void) {
    const Backend *be = backend_cpu();
    t_attention_far_last_key(be, 5), t_attention_far_last_key(be, 7), t_attention_far_last_key(be, 17);
    // The temporal attention of the configs: 7 frames, heads of 16 (tiny), 32 (small), 64 (medium).
    t_attention(be, 2, 7, 16, 64, 4, 1, 1);
    t_attention(be, 1, 7, 9, 128, 4, 1, 1);
    t_attention(be, 1, 7, 5, 256, 4, 1, 2);
    // Head sizes that are no whole number of tiles, a length of 1, the edge of the short path (16 x
    // 16 x 64 multiply-adds) and just past it.
    t_attention(be, 1, 5, 4, 24, 2, 1, 1);
    t_attention(be, 3, 1, 2, 40, 5, 1, 1);
    t_attention(be, 1, 16, 2, 64, 1, 1, 1);
    t_attention(be, 1, 17, 2, 64, 1, 1, 1);
    // Spatial: 64 patches (32x32 frames in 4x4 patches), 100, and a short spatial sequence.
    t_attention(be, 2, 2, 64, 64, 4, 0, 1);
    t_attention(be, 1, 2, 100, 64, 2, 0, 3);
    t_attention(be, 1, 3, 7, 96, 3, 0, 1);
    return g_failed ? 1 : 0;
}
