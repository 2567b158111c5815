// cuda_harness.h: what the CUDA backend's tests (test_cuda.c, cuda_step_checks.c) share: buffers
// that live on both backends with a random guard after them, their comparison (max|cuda - cpu| /
// max|cpu|) and the check lines it prints, the mode under test (fp32 or bf16, its tolerances).
#ifndef FRAMECHAIN_TEST_CUDA_HARNESS_H
#define FRAMECHAIN_TEST_CUDA_HARNESS_H

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "backend/attn_scratch.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/op_table.h"
#include "base/config.h"
#include "cuda/backend_cuda.h"
#include "model/flow.h"
#include "model/memplan.h"
#include "model/model.h"
#include "model/optim.h"
#include "base/philox.h"
#include "backend/quant8.h"

_Static_assert(sizeof(real) == sizeof(float), "test_cuda compares fp32 builds (the optimizer state is float)");


#define TOL 1e-5        // every op, fp32
#define TOL_NET 1e-4    // the whole network
#define TOL_BF16 2e-2   // an op on bf16 operands
#define TOL_BF16_PEAKED 3e-2  // attention's backward on bf16 operands with a peaked softmax (test_cuda.c)
#define TOL_NET_BF16 5e-2  // gradients of the whole network on bf16 operands
#define TOL_FP8_STEP 3e-1  // a whole training step with the forward's GEMMs on E4M3 operands (fp8_fwd)
#define GUARD 67        // random elements after every buffer that no op may touch
#define TINY "configs/tiny/starter.conf"
#define SMALL "configs/small/starter.conf"

// Shared by the test's files, defined in test_cuda.c.
extern const Backend *g_cpu, *g_gpu;
extern uint64_t g_seed;
extern uint32_t g_draw;   // the Philox step of the next random buffer
extern int g_quick;
extern double g_tol, g_tol_net;  // of the mode under test
extern const char *g_mode;       // appended to check names: "" or "_bf16"

// A check name with the mode's suffix (a ring of buffers: several may be in use in one call).
static inline const char *nm(const char *name) {
    static char ring[4][96];
    static int k;
    k = (k + 1) % 4;
    snprintf(ring[k], sizeof ring[k], "%s%s", name, g_mode);
    return ring[k];
}

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ============================================================================
// buffers on both backends, and their comparison

typedef struct {
    size_t n, es;          // elements the op sees, bytes per element (host, CPU); GUARD more follow
    int op;                // an operand (backend.h, bop): the CUDA side holds its operand format
    void *init, *hc, *hg;  // host: the starting values; the last CPU and CUDA contents downloaded
    void *c, *g;           // the CPU backend's buffer, the CUDA backend's
} Buf;

#define R(b) ((real *)(b).init)
static inline size_t bbytes(const Buf *b) { return (b->n + GUARD) * b->es; }
static inline size_t gbytes(const Buf *b) { return (b->n + GUARD) * (b->op ? g_gpu->operand_bytes : b->es); }

// The CUDA side from host values (an operand: converted to its format).
static inline void gput(Buf *b, const void *host) {
    if (b->op) g_gpu->operand_upload(b->g, host, b->n + GUARD);
    else g_gpu->upload(b->g, host, bbytes(b));
}

static inline void breset(Buf *b) {  // both sides back to init
    g_cpu->upload(b->c, b->init, bbytes(b));
    gput(b, b->init);
}

static inline Buf balloc(size_t n, size_t es) {
    Buf b = {n, es, 0, NULL, NULL, NULL, NULL, NULL};
    size_t bytes = bbytes(&b);
    b.init = fc_malloc(bytes), b.hc = fc_malloc(bytes), b.hg = fc_malloc(bytes);
    b.c = g_cpu->alloc(bytes), b.g = g_gpu->alloc(bytes);
    return b;
}

// n random values, normal (mean a, std b) or uniform in [a, b), then the guard; the same on both sides.
static inline Buf brand(size_t n, double a, double b, int uniform) {
    Buf r = balloc(n, sizeof(real));
    if (uniform) philox_fill_uniform(r.init, n + GUARD, (real)a, (real)b, g_seed, g_draw++, RNG_TEST, 0);
    else philox_fill_normal(r.init, n + GUARD, (real)a, (real)b, g_seed, g_draw++, RNG_TEST, 0);
    breset(&r);
    return r;
}
static inline Buf bnormal(size_t n, double mean, double std) { return brand(n, mean, std, 0); }
static inline Buf buniform(size_t n, double lo, double hi) { return brand(n, lo, hi, 1); }

static inline Buf bcodes(size_t n) {  // 8-bit codes: n zero bytes (the fresh state), then a random guard
    Buf b = balloc(n, 1);
    for (size_t i = 0; i < n + GUARD; i++) ((uint8_t *)b.init)[i] = i < n ? 0 : philox_u32(g_seed, g_draw, RNG_TEST, i);
    g_draw++, breset(&b);
    return b;
}

static inline void bget(Buf *b) {
    g_cpu->download(b->hc, b->c, bbytes(b));
    if (b->op) g_gpu->operand_download(b->hg, b->g, b->n + GUARD);
    else g_gpu->download(b->hg, b->g, bbytes(b));
}

// b (real values) as an operand: the values are first rounded to the CUDA side's operand format,
// so that both sides start from the same numbers, which that side then holds in its format.
static inline Buf bop(Buf b) {
    g_gpu->free(b.g);
    b.op = 1;
    b.g = g_gpu->alloc(gbytes(&b));
    g_gpu->operand_upload(b.g, b.init, b.n + GUARD);
    g_gpu->operand_download(b.init, b.g, b.n + GUARD);
    breset(&b);
    return b;
}

// Both sides take the CPU's contents (the saved forward results a backward reads; a resync); an
// operand's rounded to the CUDA side's format on both.
static inline void bshare(Buf *b) {
    g_cpu->download(b->hc, b->c, bbytes(b));
    gput(b, b->hc);
    if (!b->op) return;
    g_gpu->operand_download(b->hc, b->g, b->n + GUARD);
    g_cpu->upload(b->c, b->hc, bbytes(b));
}

static inline void bfree(Buf *b) {
    g_cpu->free(b->c), g_gpu->free(b->g);
    free(b->init), free(b->hc), free(b->hg);
}
#define FREE(...) for (Buf *l_[] = {__VA_ARGS__}, **p_ = l_; p_ < l_ + sizeof l_ / sizeof *l_; p_++) bfree(*p_)

// max_i |got_i - ref_i| / max(max_i |ref_i|, 1e-6). The same Inf, or NaN on both sides, counts as
// equal; a non-finite value on one side only gives Inf.
static inline double rel_err(const real *got, const real *ref, size_t n) {
    double diff = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i]) && isnan(got[i])) continue;
        if (!isfinite(got[i]) || !isfinite(ref[i])) {
            if (got[i] == ref[i]) continue;
            return INFINITY;
        }
        diff = fmax(diff, fabs((double)got[i] - ref[i]));
        mag = fmax(mag, fabs((double)ref[i]));
    }
    return diff / fmax(mag, 1e-6);
}

// After bget: whether either side changed the guard.
static inline int guard_changed(const Buf *b) {
    char *init = (char *)b->init + b->n * b->es, *hc = (char *)b->hc + b->n * b->es, *hg = (char *)b->hg + b->n * b->es;
    return memcmp(hg, init, GUARD * b->es) || memcmp(hc, init, GUARD * b->es);
}

// Downloads both sides; the error of the n elements, Inf with *guard = 1 when a guard changed.
static inline double berr(Buf *b, int *guard) {
    bget(b);
    if (guard_changed(b)) return *guard = 1, INFINITY;
    return rel_err(b->hg, b->hc, b->n);
}

// 8-bit codes that differ between a and b (n); the largest index difference so far in *maxd.
static inline size_t codes_differ(const uint8_t *a, const uint8_t *b, size_t n, int *maxd) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d) diff++, *maxd = d > *maxd ? d : *maxd;
    }
    return diff;
}

// One check line `name`: the case (g_what), then, for each (label, Buf *) pair up to a NULL label, the
// error of that output, CUDA against CPU. A NULL Buf is a gradient passed as NULL ("dx=NULL").
static char g_what[256];
#define WHAT(...) snprintf(g_what, sizeof g_what, __VA_ARGS__)

static inline void compare(const char *name, ...) {
    char msg[2048];
    int len = snprintf(msg, sizeof msg, "%s rel err", g_what), guard = 0;
    double worst = 0;
    va_list ap;
    va_start(ap, name);
    for (const char *label; (label = va_arg(ap, const char *)) && len < 1800;) {
        Buf *b = va_arg(ap, Buf *);
        double e = b ? berr(b, &guard) : 0;
        if (!b) len += snprintf(msg + len, sizeof msg - len, " %s=NULL", label);
        else if (*label) len += snprintf(msg + len, sizeof msg - len, " %s %.1e", label, e);
        else len += snprintf(msg + len, sizeof msg - len, " %.1e", e);
        if (!(e <= worst)) worst = e;
    }
    va_end(ap);
    check(worst <= g_tol && !guard, nm(name), "%s (tol %.0e)%s", msg, g_tol,
          guard ? "; WROTE OUTSIDE ITS OUTPUT (guard)" : "");
}

// Runs `call` on each backend: in it `be` is the backend and P(b) (PU(b): bytes) the buffer of its side.
#define BOTH(call) \
    for (int side_ = 0; side_ < 2; side_++) { const Backend *be = side_ ? g_gpu : g_cpu; (void)be; call; }
#define P(b) ((real *)(side_ ? (b).g : (b).c))
// An operand buffer from its element k (the sides' formats differ in size).
#define PO(b, k) ((void *)((char *)(side_ ? (b).g : (b).c) + (size_t)(k) * (side_ ? g_gpu : g_cpu)->operand_bytes))
#define PU(b) ((uint8_t *)(side_ ? (b).g : (b).c))

// A host copy of n elements of backend memory.
static inline real *fetch(const Backend *be, const real *p, size_t n) {
    real *h = fc_malloc(sizeof(real) * (n ? n : 1));
    be->download(h, p, sizeof(real) * n);
    return h;
}


#define SAME(same) ((same) ? "identical" : "DIFFER")

// Shared by test_cuda.c and cuda_optim_checks.c: gradients of step t (heavy tails, NaN and Inf), the
// AdamW hyper-parameters of step t, the 8-bit state of one tensor on both sides, and section 2's
// capture (the CUDA side into hc on the first run, into hg on the second; 1 when they match).
void make_grads(Buf *g, int t);
AdamHyper hyper(int t);
typedef struct {
    Buf p, g, m8, v8, am, av, cm, cv;
    Buf ema;  // the weights' EMA, updated in the same pass on odd steps
    size_t n, nb;
} Adam8;
Adam8 adam8_new(size_t n);
void adam8_free(Adam8 *a);
int det_capture(Buf *b, int rep);
// cuda_determinism_checks.c: section 2 (bf16: the ops that differ from fp32), with det_capture.
void cuda_determinism_section(int bf16);

// cuda_optim_checks.c: the optimizer's ops at tolerance 0 (section 1) and their determinism (section 2).
void cuda_optim_cases(void);
void cuda_optim_determinism(void);

// cuda_conv_checks.c: the autoencoders' ops (section 1, both tables).
void cuda_conv_cases(void);

// cuda_linear_checks.c: the linear family (section 1): the fp32 table's cases; the bf16 table's, with
// cuBLASLt's use and fallback, the weights' mirror and dy's rounding. `big`: the 24 GB preset's shapes too.
void cuda_linear_cases(int big);
void cuda_linear_bf16_cases(int big);

// cuda_fp8_checks.c: the fp8_fwd route's linear forward (section 1, the "cuda" table).
void cuda_fp8_cases(void);

// cuda_step_checks.c: section 3 (one whole training step on both backends) and
// the timings of section 4.
void cuda_test_train_step(void);
void cuda_time_config(const char *path, const char *label);

#endif
