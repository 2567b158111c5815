// bench_ops.c: where a training step's time goes, op by op, on one backend: each op of one block
// of a config, timed alone at that config's shapes (median of several runs after a warm-up), then
// scaled by how often a step runs it. Beside each time, the rate it stands for: the GEMMs and
// attention in model FLOPs per second (as MFU counts them: attention's backward twice its
// forward), every other op in GB/s of the least traffic it could make (each input read once, each
// output written once, a gradient added into read and written), so that the ops far from the
// card's peak or bandwidth show. After the table, outside its sum: what a step runs once over all of
// the parameters (the gradient norm, the 8-bit AdamW step with the EMA). A benchmark, not a test: it
// asserts nothing.
//
// usage (from the repository root): build/bench_ops [--device cpu|cuda|cuda-fp32] [--config PATH] [--reps N]
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend/registry.h"
#include "base/config.h"
#include "model/memplan.h"
#include "base/philox.h"
#include "backend/quant8.h"

static const Backend *g_be;
static int g_reps = 7;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Every buffer taken from the backend, given back at the end (the sanitizer build runs this program
// in make test, and a leak there is a failure).
static void *g_bufs[64];
static int g_nbufs;
static void *buf(size_t bytes) {
    if (g_nbufs == (int)(sizeof g_bufs / sizeof g_bufs[0])) fc_die("bench_ops: more than 64 buffers");
    return g_bufs[g_nbufs++] = g_be->alloc(bytes);
}
static void free_bufs(void) {
    while (g_nbufs > 0) g_be->free(g_bufs[--g_nbufs]);
}

// A random buffer of n values in backend memory (normal, std 0.5: softmax and norms stay tame).
static real *rnd(size_t n) {
    real *h = fc_malloc(sizeof(real) * (n ? n : 1)), *d = buf(sizeof(real) * (n ? n : 1));
    philox_fill_normal(h, n, 0, (real)0.5, 1, (uint32_t)n, RNG_TEST, 0);
    g_be->upload(d, h, sizeof(real) * n);
    free(h);
    return d;
}

// The same as an operand (backend.h: bf16 on cuda), n values.
static Operand *rnd_op(size_t n) {
    real *h = fc_malloc(sizeof(real) * (n ? n : 1));
    Operand *d = buf(g_be->operand_bytes * (n ? n : 1));
    philox_fill_normal(h, n, 0, (real)0.5, 1, (uint32_t)n, RNG_TEST, 1);
    g_be->operand_upload(d, h, n);
    free(h);
    return d;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *name;
    double ms, per_step;  // median ms of one call; calls per training step
    double flops, bytes;  // of one call: model FLOPs (GEMMs, attention) or the least traffic (the others)
} Row;
static Row g_rows[64];
static int g_nrows;

// Time `call` (a statement) g_reps times after one warm-up: the median, as a row run `count` times a
// step that does `flops` model FLOPs or moves at least `bytes` bytes.
#define TIME(label, count, flops, bytes, call)                                       \
    do {                                                                             \
        double t_[64];                                                               \
        call;                                                                        \
        for (int r_ = 0; r_ < g_reps; r_++) {                                        \
            g_be->sync();                                                            \
            double t0_ = now();                                                      \
            call;                                                                    \
            g_be->sync();                                                            \
            t_[r_] = 1e3 * (now() - t0_);                                            \
        }                                                                            \
        qsort(t_, g_reps, sizeof(double), cmp_double);                               \
        g_rows[g_nrows++] = (Row){label, t_[g_reps / 2], (count), (flops), (bytes)}; \
    } while (0)

// The rate of a row: model TFLOP/s, or GB/s of its least traffic.
static void print_rate(const Row *r) {
    if (r->flops > 0) printf(" %8.3g TFLOP/s", r->flops / r->ms / 1e9);
    else if (r->bytes > 0) printf(" %8.3g GB/s", r->bytes / r->ms / 1e6);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // each op's line as it is measured: a run cut short keeps them
    const char *device = "auto", *path = "configs/starter.conf";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else fc_die("usage: bench_ops [--device cpu|cuda|cuda-fp32] [--config PATH] [--reps N] (not %s)", argv[i]);
    }
    if (g_reps < 1 || g_reps > 64) fc_die("--reps: 1 to 64");
    fc_set_threads(fc_default_threads());
    g_be = backend_select(device);
    Config c;
    config_defaults(&c);
    config_load(&c, path);
    config_validate(&c, path);
    int B = c.batch_size, F = c.slots, n = c.frame_size / c.patch, N = n * n, S = B * F, T = S * N;
    int D = c.width, H = c.heads, RD = c.mlp_ratio * D, L = c.depth;
    long ms = 9L * D;
    printf("bench_ops: %s, %s: %d tokens, width %d, %d heads, depth %d\n", path, g_be->describe(), T, D, H, L);

    real *x = rnd((size_t)T * RD), *y = rnd((size_t)T * RD), *dy = rnd((size_t)T * RD), *dx = rnd((size_t)T * RD);
    real *w = rnd((size_t)RD * D), *dw = rnd((size_t)RD * D), *b = rnd(RD), *db = rnd(RD);
    real *qkv = rnd((size_t)T * 3 * D), *dqkv = rnd((size_t)T * 3 * D);
    real *datt = rnd((size_t)T * D), *lse = rnd((size_t)T * H), *mod = rnd((size_t)S * ms), *dmod = rnd((size_t)S * ms);
    real *mean = rnd(T), *rstd = rnd(T), *qw = rnd(D / H), *kw = rnd(D / H), *qr = rnd((size_t)T * 2 * H);
    // GEMM and attention inputs
    Operand *xo = rnd_op((size_t)T * RD), *yo = rnd_op((size_t)T * RD), *atto = rnd_op((size_t)T * D);
    Operand *qkvo = rnd_op((size_t)T * 3 * D);
    g_be->register_weights(w, (size_t)RD * D);  // the model's weights live in a registered allocation

    // ---- the ops of one block (two attention sub-layers, the MLP), each as often as a step runs it ----
    // Sizes for the rates: t = T tokens, f = 4 bytes (real), o = an operand's bytes (weights in
    // compute take the operand's format too: the bf16 mirror on cuda).
    double t = T, f = sizeof(real), o = g_be->operand_bytes, d = D, rd = RD;
#define GEMM(K, N) (2 * t * (double)(K) * (N))
    TIME("linear fwd qkv", 2 * L, GEMM(D, 3 * D), 0, g_be->linear_fwd(y, xo, w, b, T, D, 3 * D));
    TIME("linear bwd qkv", 2 * L, 2 * GEMM(D, 3 * D), 0,
         g_be->linear_bwd(dx, GRAD_SET, dw, db, GRAD_SET, dy, xo, w, T, D, 3 * D));
    TIME("linear fwd proj", 2 * L, GEMM(D, D), 0, g_be->linear_fwd(y, xo, w, b, T, D, D));
    TIME("linear bwd proj", 2 * L, 2 * GEMM(D, D), 0,
         g_be->linear_bwd(dx, GRAD_SET, dw, db, GRAD_SET, dy, xo, w, T, D, D));
    TIME("linear+gelu fwd fc1", L, GEMM(D, RD), 0, g_be->linear_gelu_fwd(y, yo, xo, w, b, T, D, RD));
    TIME("linear bwd fc1", L, 2 * GEMM(D, RD), 0,
         g_be->linear_bwd(dx, GRAD_SET, dw, db, GRAD_SET, dy, xo, w, T, D, RD));
    TIME("linear fwd fc2", L, GEMM(RD, D), 0, g_be->linear_fwd(y, xo, w, b, T, RD, D));
    int row_fc2 = g_nrows;
    TIME("linear+gelu bwd fc2", L, 2 * GEMM(RD, D), 0,
         g_be->linear_gelu_bwd(dx, dw, db, GRAD_SET, dy, xo, w, y, T, RD, D));
    AttnLayout sp = attn_layout_tokens(B, F, N, 0), tm = attn_layout_tokens(B, F, N, 1);
    double attn_sp = 4 * t * N * d, attn_tm = 4 * t * F * d;  // scores and weighted sums, forward
    TIME("attention fwd spatial", L, attn_sp, 0, g_be->attn_fwd(atto, lse, qkvo, sp, D, H));
    TIME("attention bwd spatial", L, 2 * attn_sp, 0, g_be->attn_bwd(dqkv, datt, atto, qkvo, lse, sp, D, H));
    TIME("attention fwd temporal", L, attn_tm, 0, g_be->attn_fwd(atto, lse, qkvo, tm, D, H));
    TIME("attention bwd temporal", L, 2 * attn_tm, 0, g_be->attn_bwd(dqkv, datt, atto, qkvo, lse, tm, D, H));
    // x read, y written; dy and x read, dx added into (read and written)
    TIME("ln_mod fwd", 3 * L, 0, t * d * (f + o) + 2 * t * f,
         g_be->ln_mod_fwd(yo, mean, rstd, x, mod, mod + D, ms, S, N, D));
    TIME("ln_mod bwd", 3 * L, 0, 4 * t * d * f + 2 * t * f,
         g_be->ln_mod_bwd(dx, dmod, dmod + D, dy, x, mean, rstd, mod + D, ms, S, N, D));
    // qkv read, q k v written; dout and q k read, dqkv written
    TIME("qk_norm fwd", 2 * L, 0, 3 * t * d * (f + o) + 2 * t * H * f,
         g_be->qk_norm_fwd(yo, qr, qkv, qw, kw, T, D, H));
    TIME("qk_norm bwd", 2 * L, 0, 8 * t * d * f + 2 * t * H * f,
         g_be->qk_norm_bwd(dqkv, dw, db, GRAD_SET, dy, qkv, qr, qw, kw, T, D, H));
    // x and h read, out written; dout and h read, dh written
    TIME("gated_add fwd", 3 * L, 0, 3 * t * d * f, g_be->gated_add_fwd(y, x, dx, mod, ms, S, N, D));
    TIME("gated_add bwd", 3 * L, 0, 3 * t * d * f, g_be->gated_add_bwd(NULL, dx, dmod, dy, x, mod, ms, S, N, D));
    // The backward zeroes once a step only the gradients that ops add into (the residual stream's
    // (T, D) and a few small ones): every other activation gradient is overwritten by its one
    // producer (before, about 9 x (T, 3D) were zeroed a block).
    TIME("zero (T, D) residual grad", 1, 0, t * d * f, g_be->zero(datt, sizeof(real) * T * D));

    // Outside the step's table: fc2's backward against the GEMM and then the GELU kernel timed apart
    // (FRAMECHAIN_CUDA_ROUTES=dgelu_epilogue=1 fuses them in cuBLASLt's epilogue, which picks a slower
    // GEMM kernel on an H200).
    int nstep = g_nrows;
    TIME("fc2: linear bwd", 0, 2 * GEMM(RD, D), 0,
         g_be->linear_bwd(dx, GRAD_SET, dw, db, GRAD_SET, dy, xo, w, T, RD, D));
    TIME("fc2: gelu bwd", 0, 0, 3 * t * rd * f, g_be->gelu_bwd(dx, dx, y, (size_t)T * RD));
#undef GEMM

    // Also outside the table: what a step runs once over all of the model's parameters, the
    // gradient norm and the 8-bit AdamW step with the EMA in its pass (and on cuda the weights' bf16
    // mirror: the parameters are registered). Traffic: the gradient read; the parameters, both
    // moments and the EMA read and written, the mirror written.
    size_t np = memory_plan(&c, B, PLAN_CPU).params, nb = (np + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    real *par = rnd(np), *grad = rnd(np), *ema = rnd(np);
    uint8_t *m8 = buf(np), *v8 = buf(np);
    float *amax = buf(sizeof(float) * 2 * nb), *codes = buf(sizeof(float) * 2 * QUANT8_TABLE);
    float host_codes[2][QUANT8_TABLE];
    quant8_signed_code(host_codes[0]), quant8_table(host_codes[0]);
    quant8_unsigned_code(host_codes[1]), quant8_table(host_codes[1]);
    g_be->upload(codes, host_codes, sizeof host_codes);
    g_be->zero(m8, np), g_be->zero(v8, np), g_be->zero(amax, sizeof(float) * 2 * nb);
    g_be->register_weights(par, np);
    AdamHyper hyper = {1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1.0f, ema, 0.999f};
    size_t bad;
    double p_ = (double)np;
    TIME("grad norm", 0, 0, p_ * f, g_be->sum_squares(grad, np, &bad));
    TIME("adamw 8-bit + EMA", 0, 0, p_ * (4 * f + f + 4 + (g_be->operand_bytes < f ? o : 0)),
         g_be->adamw_8bit(par, grad, m8, v8, amax, amax + nb, codes, codes + QUANT8_TABLE, np, hyper));
    g_be->unregister_weights(par);

    double total = 0;
    for (int i = 0; i < nstep; i++) total += g_rows[i].ms * g_rows[i].per_step;
    double flops = model_step_flops(&c, B);
    printf("%-24s %10s %8s %12s %7s %15s\n", "op", "ms/call", "x/step", "ms/step", "share", "rate");
    for (int i = 0; i < nstep; i++) {
        Row *r = &g_rows[i];
        printf("%-24s %10.3f %8.0f %12.2f %6.1f%%", r->name, r->ms, r->per_step, r->ms * r->per_step,
               100 * r->ms * r->per_step / total);
        print_rate(r);
        printf("\n");
    }
    printf("%-24s %10s %8s %12.2f  (%.3g TFLOP of model FLOPs: %.1f TFLOP/s if a step were only these ops)\n",
           "sum", "", "", total, flops / 1e12, flops / total / 1e9);
    printf("note: the optimizer, the EMA, embeddings and activation recompute are not in the sum\n");
    printf("once a step over the %zu parameters, outside the sum (ms):", np);
    for (int i = nstep + 2; i < g_nrows; i++) {
        printf(" %s %.3f", g_rows[i].name, g_rows[i].ms);
        print_rate(&g_rows[i]);
        printf(i + 1 < g_nrows ? ";" : "\n");
    }
    printf("fc2's backward as the step runs it (ms/call; the dgelu_epilogue route fuses the GELU) against the GEMM "
           "and the GELU kernel timed apart: %.3f against %.3f + %.3f\n",
           g_rows[row_fc2].ms, g_rows[nstep].ms, g_rows[nstep + 1].ms);
    printf("rates: the GEMMs and attention in model TFLOP/s; the others in GB/s of the least traffic they could "
           "make\n");
    g_be->unregister_weights(w);
    free_bufs();
    return 0;
}
