// cpu_optim.c: the CPU backend's optimizer ops: AdamW with fp32 moments and with 8-bit block-wise
// quantised moments (bitsandbytes-style dynamic codes, quant8.h), the sum of squares behind the
// gradient norm, and the EMA of the weights. Contracts in backend.h.
//
// AdamW and the EMA compute in float, as torch does: cuda/optim.cu repeats this math operation for
// operation, and in double it would run at 1/64 of the float rate on the GeForce cards framechain
// targets (a 0.95 B model's optimizer step: some 1e11 double operations, most of a second on an
// RTX 3090). The sum of squares stays in double: two operations an element.
//
// Every loop runs over independent elements or blocks, and every reduction is split into fixed
// chunks combined in order, so the results are the same bytes for any number of threads.
#include "backend/cpu/cpu_optim.h"

#include <float.h>
#include <math.h>

#include "backend/adam_const.h"
#include "backend/cpu/exp_poly.h"
#include "backend/quant8.h"

// The step for one element whose gradient g (already scaled) is finite; updates *m, *v and returns
// the new parameter. torch.optim.AdamW: p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v / bc2) + eps),
// with p (1 - lr wd) as p - p (lr wd): 1 - 1e-6 rounded to float would be off by up to 3e-8, a 3%
// error in the decay itself. cuda/optim.cu does the same operations in the same order.
static inline float adam_elem(const AdamConst *c, float p, float g, float *m, float *v) {
    *m = c->b1 * *m + c->one_m_b1 * g;
    *v = c->b2 * *v + c->one_m_b2 * g * g;
    return (p - p * c->lr_wd) - c->step_size * *m / (sqrtf(*v / c->bc2) + c->eps);
}

// The EMA's step for one element (cpu_ema_update's formula): d ema + w p.
static inline float ema_elem(float d, float w, float ema, float p) { return d * ema + w * p; }

// Below this many elements an element-wise op runs on the calling thread: the start and join of a
// parallel region (a few microseconds) cost more than the work (the biases and norm weights, tens
// to thousands of values each). Element-wise: the same bytes either way.
#define OPTIM_PARALLEL_MIN 8192

void cpu_adamw_fp32(real *param, const real *grad, float *m, float *v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    real *ema = h.ema;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float gs = grad[i] * c.scale;
        // a NaN, infinite or overflowing gradient leaves p, m and v as they are (ADAM_GRAD_USABLE)
        if (ADAM_GRAD_USABLE(gs)) param[i] = adam_elem(&c, param[i], gs, &m[i], &v[i]);
        if (ema) ema[i] = ema_elem(c.ema_d, c.ema_w, ema[i], param[i]);
    }
}

// Elements j0 .. len-1 of a block (from i0) of 8-bit AdamW: dequantise, step, moments into mb and vb,
// their maxima into *max_m and *max_v (NaN skipped). A gradient not ADAM_GRAD_USABLE leaves p unchanged and the
// moments at their dequantised values; a zero absmax (the zero-filled state) dequantises to 0.
static inline void adam8_elems(const AdamConst *c, real *param, const real *grad, const uint8_t *m8, const uint8_t *v8,
                               float am, float av, const float *code_m, const float *code_v, real *ema, size_t i0,
                               size_t j0, size_t len, float *mb, float *vb, float *max_m, float *max_v) {
    for (size_t j = j0; j < len; j++) {
        size_t i = i0 + j;
        float mi = code_m[m8[i]] * am, vi = code_v[v8[i]] * av;
        float gs = grad[i] * c->scale;
        if (ADAM_GRAD_USABLE(gs)) param[i] = adam_elem(c, param[i], gs, &mi, &vi);
        if (ema) ema[i] = ema_elem(c->ema_d, c->ema_w, ema[i], param[i]);
        mb[j] = mi, vb[j] = vi;
        if (fabsf(mi) > *max_m) *max_m = fabsf(mi);
        if (vi > *max_v) *max_v = vi;
    }
}

// The block's requantisation of elements j0 .. len-1 against the new absmaxes.
static inline void adam8_encode(uint8_t *m8, uint8_t *v8, const float *mb, const float *vb, float max_m, float max_v,
                                const float *code_m, const float *code_v, size_t j0, size_t len) {
    for (size_t j = j0; j < len; j++) {
        m8[j] = max_m > 0.0f ? quant8_encode_table(code_m, mb[j] / max_m) : 0;
        v8[j] = max_v > 0.0f ? quant8_encode_table(code_v, vb[j] / max_v) : 0;
    }
}

// One block of 8-bit AdamW (len <= ADAM8_BLOCK elements from i0): dequantise, step, requantise.
// The scalar form is the reference; adam8_block_avx2 below gives the same bytes.
static void adam8_block_scalar(const AdamConst *c, real *param, const real *grad, uint8_t *m8, uint8_t *v8,
                               float *absmax_m, float *absmax_v, const float *code_m, const float *code_v, real *ema,
                               size_t b, size_t i0, size_t len) {
    // The block's moments between the dequantisation and the requantisation: the floats fp32
    // AdamW would hold. A zero absmax (the zero-filled state) dequantises every code to 0.
    float mb[ADAM8_BLOCK], vb[ADAM8_BLOCK];
    float max_m = 0.0f, max_v = 0.0f;
    adam8_elems(c, param, grad, m8, v8, absmax_m[b], absmax_v[b], code_m, code_v, ema, i0, 0, len, mb, vb, &max_m,
                &max_v);
    absmax_m[b] = max_m, absmax_v[b] = max_v;
    adam8_encode(m8 + i0, v8 + i0, mb, vb, max_m, max_v, code_m, code_v, 0, len);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FC_DOUBLE)
#include <immintrin.h>
#define ADAM8_AVX2 1

// quant8_encode_table for 8 floats at once: the index byte and the threshold by gathers. A byte is
// gathered as the aligned 4 bytes around it (never past the table's end) and shifted down.
__attribute__((target("avx2"))) static __m128i quant8_encode8(const float *table, __m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(255));
    e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(QUANT8_INDEX_EXP0)),
                         _mm256_set1_epi32(QUANT8_INDEX_EXP0 + QUANT8_INDEX_ROWS - 1));
    __m256i row = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_srli_epi32(u, 31), _mm256_set1_epi32(QUANT8_INDEX_ROWS)),
                                   _mm256_sub_epi32(e, _mm256_set1_epi32(QUANT8_INDEX_EXP0)));
    __m256i idx = _mm256_add_epi32(_mm256_slli_epi32(row, 8),
                                   _mm256_and_si256(_mm256_srli_epi32(u, 15), _mm256_set1_epi32(255)));
    const int *index = (const int *)(table + QUANT8_ENCODER);
    __m256i word = _mm256_i32gather_epi32(index, _mm256_andnot_si256(_mm256_set1_epi32(3), idx), 1);
    __m256i code = _mm256_and_si256(
        _mm256_srlv_epi32(word, _mm256_slli_epi32(_mm256_and_si256(idx, _mm256_set1_epi32(3)), 3)),
        _mm256_set1_epi32(255));
    __m256 up = _mm256_i32gather_ps(table + 256, code, 4);
    code = _mm256_sub_epi32(code, _mm256_castps_si256(_mm256_cmp_ps(x, up, _CMP_GE_OQ)));  // true: -1
    code = _mm256_min_epi32(code, _mm256_set1_epi32(255));
    code = _mm256_and_si256(code, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_ORD_Q)));  // NaN: 0
    __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    return _mm_packus_epi16(w16, w16);  // the 8 codes in the low 8 bytes
}

// adam8_block_scalar, 8 elements a step: the same operations in the same order on each element (no
// FMA: the avx2 target has none), maxima that skip NaN as the scalar comparisons do (max_ps returns
// its second operand when either is NaN), the tail by the scalar formula.
__attribute__((target("avx2"))) static void adam8_block_avx2(const AdamConst *c, real *param, const real *grad,
                                                             uint8_t *m8, uint8_t *v8, float *absmax_m,
                                                             float *absmax_v, const float *code_m,
                                                             const float *code_v, real *ema, size_t b, size_t i0,
                                                             size_t len) {
    float mb[ADAM8_BLOCK], vb[ADAM8_BLOCK];
    float am = absmax_m[b], av = absmax_v[b];
    const __m256 vam = _mm256_set1_ps(am), vav = _mm256_set1_ps(av), scale = _mm256_set1_ps(c->scale);
    const __m256 b1 = _mm256_set1_ps(c->b1), b2 = _mm256_set1_ps(c->b2), omb1 = _mm256_set1_ps(c->one_m_b1),
                 omb2 = _mm256_set1_ps(c->one_m_b2), lr_wd = _mm256_set1_ps(c->lr_wd),
                 step = _mm256_set1_ps(c->step_size), bc2 = _mm256_set1_ps(c->bc2), eps = _mm256_set1_ps(c->eps),
                 ema_d = _mm256_set1_ps(c->ema_d), ema_w = _mm256_set1_ps(c->ema_w);
    const __m256 sign = _mm256_set1_ps(-0.0f), grad_max = _mm256_set1_ps(ADAM_GRAD_MAX);
    __m256 vmax_m = _mm256_setzero_ps(), vmax_v = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 8 <= len; j += 8) {
        size_t i = i0 + j;
        __m256 mi = _mm256_mul_ps(_mm256_i32gather_ps(code_m, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(m8 + i))), 4), vam);
        __m256 vi = _mm256_mul_ps(_mm256_i32gather_ps(code_v, _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)(v8 + i))), 4), vav);
        __m256 g = _mm256_loadu_ps(grad + i), p = _mm256_loadu_ps(param + i);
        __m256 gs = _mm256_mul_ps(g, scale);
        __m256 usable = _mm256_cmp_ps(_mm256_andnot_ps(sign, gs), grad_max, _CMP_LE_OQ);  // ADAM_GRAD_USABLE
        __m256 mn = _mm256_add_ps(_mm256_mul_ps(b1, mi), _mm256_mul_ps(omb1, gs));
        __m256 vn = _mm256_add_ps(_mm256_mul_ps(b2, vi), _mm256_mul_ps(_mm256_mul_ps(omb2, gs), gs));
        __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vn, bc2)), eps);
        __m256 pn = _mm256_sub_ps(_mm256_sub_ps(p, _mm256_mul_ps(p, lr_wd)), _mm256_div_ps(_mm256_mul_ps(step, mn), den));
        mi = _mm256_blendv_ps(mi, mn, usable), vi = _mm256_blendv_ps(vi, vn, usable), p = _mm256_blendv_ps(p, pn, usable);
        _mm256_storeu_ps(param + i, p);
        if (ema) {
            __m256 e = _mm256_loadu_ps(ema + i);
            _mm256_storeu_ps(ema + i, _mm256_add_ps(_mm256_mul_ps(ema_d, e), _mm256_mul_ps(ema_w, p)));
        }
        _mm256_storeu_ps(mb + j, mi), _mm256_storeu_ps(vb + j, vi);
        vmax_m = _mm256_max_ps(_mm256_andnot_ps(sign, mi), vmax_m);
        vmax_v = _mm256_max_ps(vi, vmax_v);
    }
    float lanes_m[8], lanes_v[8], max_m = 0.0f, max_v = 0.0f;
    _mm256_storeu_ps(lanes_m, vmax_m), _mm256_storeu_ps(lanes_v, vmax_v);
    for (int l = 0; l < 8; l++) {
        if (lanes_m[l] > max_m) max_m = lanes_m[l];
        if (lanes_v[l] > max_v) max_v = lanes_v[l];
    }
    adam8_elems(c, param, grad, m8, v8, am, av, code_m, code_v, ema, i0, j, len, mb, vb, &max_m, &max_v);
    absmax_m[b] = max_m, absmax_v[b] = max_v;
    const __m256 vmm = _mm256_set1_ps(max_m), vmv = _mm256_set1_ps(max_v);
    for (j = 0; j + 8 <= len; j += 8) {
        __m128i qm = max_m > 0.0f ? quant8_encode8(code_m, _mm256_div_ps(_mm256_loadu_ps(mb + j), vmm)) : _mm_setzero_si128();
        __m128i qv = max_v > 0.0f ? quant8_encode8(code_v, _mm256_div_ps(_mm256_loadu_ps(vb + j), vmv)) : _mm_setzero_si128();
        _mm_storel_epi64((void *)(m8 + i0 + j), qm);
        _mm_storel_epi64((void *)(v8 + i0 + j), qv);
    }
    adam8_encode(m8 + i0, v8 + i0, mb, vb, max_m, max_v, code_m, code_v, j, len);
}
#endif

// 1: the AVX2 form of the 8-bit step where the CPU has it (the default); 0: the scalar reference.
static int g_adam8_vector = 1;
void cpu_adamw_8bit_vector(int on) { g_adam8_vector = on; }

// Block b (len elements from i0) of one tensor's 8-bit step, in the AVX2 form where avx2 is set.
static inline void adam8_block(int avx2, const AdamConst *c, real *param, const real *grad, uint8_t *m8, uint8_t *v8,
                               float *absmax_m, float *absmax_v, const float *code_m, const float *code_v, real *ema,
                               size_t b, size_t i0, size_t len) {
#ifdef ADAM8_AVX2
    if (avx2) {
        adam8_block_avx2(c, param, grad, m8, v8, absmax_m, absmax_v, code_m, code_v, ema, b, i0, len);
        return;
    }
#endif
    (void)avx2;
    adam8_block_scalar(c, param, grad, m8, v8, absmax_m, absmax_v, code_m, code_v, ema, b, i0, len);
}

static int adam8_use_avx2(void) {
#ifdef ADAM8_AVX2
    return g_adam8_vector && __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

void cpu_adamw_8bit(real *param, const real *grad, uint8_t *m8, uint8_t *v8, float *absmax_m, float *absmax_v,
                    const float *code_m, const float *code_v, size_t n, AdamHyper h) {
    AdamConst c = adam_const(h);
    size_t nblocks = (n + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
    int avx2 = adam8_use_avx2();
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        size_t i0 = b * ADAM8_BLOCK, len = n - i0 < ADAM8_BLOCK ? n - i0 : ADAM8_BLOCK;
        adam8_block(avx2, &c, param, grad, m8, v8, absmax_m, absmax_v, code_m, code_v, h.ema, b, i0, len);
    }
}

// The jobs' blocks numbered one after another (first[j]: job j's first), shared out as one loop: a
// step's many small tensors in one parallel region, their blocks split evenly between the threads.
// Each block's arithmetic is adamw_8bit's, so the bytes are.
void cpu_adamw_8bit_jobs(const Adam8Job *jobs, int njobs, const float *code_m, const float *code_v) {
    if (njobs <= 0) return;
    size_t *first = fc_malloc(sizeof(size_t) * (njobs + 1));
    AdamConst *c = fc_malloc(sizeof(AdamConst) * njobs);
    first[0] = 0;
    for (int j = 0; j < njobs; j++)
        first[j + 1] = first[j] + (jobs[j].n + ADAM8_BLOCK - 1) / ADAM8_BLOCK, c[j] = adam_const(jobs[j].h);
    size_t total = first[njobs];
    int avx2 = adam8_use_avx2();
#pragma omp parallel for schedule(static)
    for (size_t g = 0; g < total; g++) {
        int lo = 0, hi = njobs - 1;  // the job whose blocks hold g: first[lo] <= g < first[lo + 1]
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (first[mid] <= g) lo = mid;
            else hi = mid - 1;
        }
        const Adam8Job *a = &jobs[lo];
        size_t b = g - first[lo], i0 = b * ADAM8_BLOCK, len = a->n - i0 < ADAM8_BLOCK ? a->n - i0 : ADAM8_BLOCK;
        adam8_block(avx2, &c[lo], a->param, a->grad, a->m8, a->v8, a->absmax_m, a->absmax_v, code_m, code_v,
                    a->h.ema, b, i0, len);
    }
    free(first), free(c);
}

// Chunks of the sum of squares, and how many chunks one parallel pass sums (their partial sums live
// on the stack, then are added in chunk order).
enum { SS_CHUNK = 4096, SS_GROUP = 256 };

// One chunk's sum of squares in double, in four accumulators in a fixed pattern (element j into
// accumulator j mod 4: no serial add chain, still a fixed order), the non-finite values counted and
// left out. The four accumulators are one vector's lanes; a left-out value adds +0, which leaves a
// sum of squares (never -0) as it is.
CPU_VECTOR_CLONES static double chunk_squares(const real *x, size_t n, size_t *nonfinite) {
    double s[4] = {0, 0, 0, 0};
    size_t nb = 0, j = 0;
    for (; j + 4 <= n; j += 4)
        for (int l = 0; l < 4; l++) {
            double xi = x[j + l];
            int finite = fabs(xi) <= DBL_MAX;  // false for NaN and the infinities
            s[l] += finite ? xi * xi : 0.0;
            nb += !finite;
        }
    for (; j < n; j++) {
        double xi = x[j];
        if (isfinite(xi))
            s[j & 3] += xi * xi;
        else
            nb++;
    }
    *nonfinite = nb;
    return (s[0] + s[1]) + (s[2] + s[3]);
}

double cpu_sum_squares(const real *x, size_t n, size_t *nonfinite) {
    size_t nchunks = (n + SS_CHUNK - 1) / SS_CHUNK, bad = 0;
    double total = 0.0;
    for (size_t g0 = 0; g0 < nchunks; g0 += SS_GROUP) {
        int count = nchunks - g0 < SS_GROUP ? (int)(nchunks - g0) : SS_GROUP;
        double part[SS_GROUP];
        size_t part_bad[SS_GROUP];
#pragma omp parallel for schedule(static)
        for (int k = 0; k < count; k++) {
            size_t i0 = (g0 + k) * SS_CHUNK, i1 = i0 + SS_CHUNK < n ? i0 + SS_CHUNK : n;
            part[k] = chunk_squares(x + i0, i1 - i0, &part_bad[k]);
        }
        for (int k = 0; k < count; k++) total += part[k], bad += part_bad[k];
    }
    if (nonfinite) *nonfinite = bad;
    return total;
}

void cpu_ema_update(real *ema, const real *param, float decay, size_t n) {
    float d = decay, w = (float)(1.0 - (double)decay);
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) ema[i] = ema_elem(d, w, ema[i], param[i]);
}
