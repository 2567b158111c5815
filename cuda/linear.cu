// linear.cu: the linear layer of the CUDA backend. y = x @ w^T + b forward, and the three gradients
// backward, each overwritten or added into: dx and dw through cuBLAS, db by the deterministic
// column sum of colsum.cu (on bf16 GEMMs, the same pass rounds dy for them); and the MLP's
// linears with the GELU fused into them. Two kinds of GEMM, one per backend: "cuda-fp32" uses SGEMM
// (fp32, no TF32); "cuda" reads bf16 operands on the tensor cores and accumulates into fp32
// outputs: x, an operand (backend.h), is bf16 already; the weights come from their bf16 mirror
// (bf16.cu) and dy is rounded by the pass that sums it for the bias gradient. Neither lets cuBLAS
// use atomics, so the bytes are the same on every run on one GPU.
//
// The bf16 forward is one cublasLtMatmul: y = x @ w^T with the bias added in the GEMM's epilogue
// (CUBLASLT_EPILOGUE_BIAS, beta = 0), so y is written once and never read. The fp32 forward, and a
// bf16 shape cuBLASLt has no kernel for, first broadcast the bias into y with a kernel and then
// run a GEMM with beta = 1 (M*N more fp32 writes and reads). cuBLASLt stays deterministic: the
// algorithm for a shape is chosen once by the heuristic (a function of the shape, the operands'
// alignments, the GPU and the fixed workspace size) and kept, cuBLASLt's split-K reductions are
// ordered (in place behind counters, or in the workspace and then reduced in a separate step, never
// by atomics), and everything runs on the one default stream with a workspace of its own.
//
// The fp8_fwd route (off by default, cuda_common.cuh) runs the bf16 forward's GEMM on E4M3 copies of
// its two bf16 operands, each with one power-of-two scale (fp8.cu), on the fp8 tensor cores of sm_89
// and sm_90 (twice the bf16 rate), the bias in the epilogue as before; the fp8_dgrad route the
// backward's dx GEMM on the weight in E4M3 and the output gradient in E5M2, and the fp8_wgrad route
// its dw GEMM on x in E4M3 and the output gradient in E5M2.
//
// cuBLAS is column-major. A row-major (R, C) matrix with leading dimension C is, to cuBLAS, the
// column-major (C, R) matrix: its transpose. Every call below is written in those terms.
#include <string.h>

#include "cuda_common.cuh"

static_assert(sizeof(real) == sizeof(float), "the CUDA backend is built with real = float");


// y (M, N) = b (N) broadcast over the rows, before the GEMM adds x @ w^T with beta = 1.
// One thread per element of y (grid-stride); consecutive threads write consecutive columns.
__global__ void linear_bias_broadcast_kernel(float *__restrict__ y, const float *__restrict__ b, size_t M,
                                             size_t N) {
    GRID_STRIDE_LOOP(i, M * N) y[i] = b[i % N];
}

// db (N) = or += (pmode) column sums of dy (M, N), and dy16 (M, N) = dy in bf16 unless NULL, and
// then, unless NULL, amax the maxima of |dy16| over the pass's blocks (colsum.cu: float with
// compensation, deterministic).
static void linear_bias_grad(real *db, GradMode pmode, __nv_bfloat16 *dy16, float *amax, const real *dy, int M,
                             int N) {
    fc_cuda_colsum(db, 0, pmode == GRAD_ADD, dy16, amax, dy, NULL, 1, M, N, "linear_bwd");
}

// cuBLAS takes alpha and beta from host memory; set it on every call, as the handle is shared.
static cublasHandle_t linear_handle(void) {
    cublasHandle_t h = fc_cublas();
    cublasCheck(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return h;
}

// One GEMM C (m, n) = op(A) op(B) + beta C, column-major, in cuBLAS's terms. fp32: SGEMM on A and B.
// bf16: A16 and B16, the bf16 versions of A and B, on the tensor cores, accumulating in fp32 into C.
typedef struct {
    int bf16;
} GemmKind;

static void gemm(GemmKind kind, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *A,
                 const __nv_bfloat16 *A16, int lda, const float *B, const __nv_bfloat16 *B16, int ldb, float beta,
                 float *C, int ldc) {
    const float one = 1.0f;
    if (!kind.bf16) {
        cublasCheck(cublasSgemm(linear_handle(), ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc));
        return;
    }
    cublasHandle_t h = fc_cublas_bf16();
    cublasCheck(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    cublasCheck(cublasGemmEx(h, ta, tb, m, n, k, &one, A16, CUDA_R_16BF, lda, B16, CUDA_R_16BF, ldb, &beta, C,
                             CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The bf16 version of a weight (from its mirror) and of an activation gradient (into scratch
// `which`); NULL for fp32 GEMMs. An operand is either an fp32 or a bf16 matrix, by the table.
static const __nv_bfloat16 *weight16(GemmKind kind, const real *w, size_t n) {
    return kind.bf16 ? fc_bf16_weights(w, n) : NULL;
}
static const __nv_bfloat16 *act16(GemmKind kind, const real *x, size_t n, int which) {
    return kind.bf16 ? fc_bf16_operand(x, n, which) : NULL;
}
static const float *operand32(GemmKind kind, const Operand *x) { return kind.bf16 ? NULL : (const float *)x; }
static const __nv_bfloat16 *operand16(GemmKind kind, const Operand *x) {
    return kind.bf16 ? (const __nv_bfloat16 *)x : NULL;
}

// ----------------------------------------------------------------------------
// bf16 GEMMs through cuBLASLt with a fused epilogue: D (m, n) = op(A) (m, k) @ B (k, n), column-major,
// fp32 D, and one of
//   BIAS           D += bias (m), broadcast along the columns (the linear forward)
//   DGELU          D = D * GELU'(aux) (the MLP's second linear backward: dx straight into d pre)
// cuBLASLt's GELU is the tanh form of docs/network.md, computed in fp32 in the epilogue. The forward
// has no GELU epilogue: GELU_AUX stores its aux matrix (the pre-activation) in D's type, other aux
// types being for 8-bit GEMMs only, and the MLP wants a bf16 GELU output (the next GEMM's operand)
// beside an fp32 pre-activation (DGELU's aux for an fp32 gradient). The GELU kernel runs after it.

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)  // counted (fc_cuda_alloc); src/model/memplan.c's workspace line
#define LT_PLANS 64                            // the networks have a handful of shapes
// cuBLASLt's alignment preferences cover A, B, C and D but not the bias, and fused-bias kernels may
// read it in 16-byte pieces (an under-aligned bias has been seen to fault): a bias off 16 bytes is
// first copied to SCRATCH_LINEAR (256-byte aligned).
#define LT_BIAS_ALIGN 16
// The GELU epilogues' aux matrix (D's shape, leading dimension m) needs m % 8 == 0; it is used only
// on 16 bytes or more (its alignment is part of the plan's key, as the heuristic reads it).
#define LT_AUX_ALIGN 16

// One configuration's plan, made once: the descriptors and the heuristic's best algorithm, or
// lt = 0 when cuBLASLt has no kernel for it (the heuristic returned none, or cublasLtMatmul said
// NOT_SUPPORTED): that configuration then always takes the cuBLAS path. The operands' alignments
// are part of the key, as the heuristic picks kernels that rely on them.
typedef struct {
    int used, fp8, ta, m, n, k;  // fp8: LT_FP8_FWD, _DGRAD or _WGRAD, else 0 (bf16 A and B); op(A) is
                                 // CUBLAS_OP_T or _N; B is never transposed
    uint32_t epilogue;
    unsigned align_a, align_b, align_d, align_bias, align_aux;  // bytes, up to 256 (0: not used)
    int lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} LtPlan;

static LtPlan g_lt_plans[LT_PLANS];
static int g_lt_next;  // the slot the next new plan takes (round robin once all are in use)
static void *g_lt_workspace;

// The largest power of two up to 256 that divides the address.
static unsigned lt_align(const void *p) {
    unsigned a = 256;
    while (a > 1 && (uintptr_t)p % a) a /= 2;
    return a;
}

static int lt_has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS; }
static int lt_has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU; }

static void lt_plan_release(LtPlan *p) {
    if (!p->used) return;
    if (p->desc) cublasCheck(cublasLtMatmulDescDestroy(p->desc));
    if (p->la) cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    if (p->lb) cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    if (p->ld) cublasCheck(cublasLtMatrixLayoutDestroy(p->ld));
    memset(p, 0, sizeof *p);
}

// The fp8 routes' plans: the forward's (E4M3 A and B) and the backward's dx and dw (E4M3 A, E5M2 B).
enum { LT_FP8_FWD = 1, LT_FP8_DGRAD = 2, LT_FP8_WGRAD = 3 };
// Their scales (fp8.cu), in device memory: for each kind, A's (the weight's) quantise and dequantise
// factors, then B's. Made once; every fp8 plan reads its dequantise factors from here.
static float *g_fp8_scales;
static float *fp8_scales(int kind) {
    if (!g_fp8_scales) g_fp8_scales = (float *)fc_cuda_alloc(12 * sizeof(float));
    return g_fp8_scales + 4 * (kind - 1);
}

// The first refusal of an fp8 plan by cuBLASLt since the start (backend_cuda_fp8_refusal): which
// call answered what, for which plan; said once on stderr (for the three routes together: one card,
// one cuBLASLt), after which each refused shape takes the bf16 path quietly.
static char g_fp8_refusal[256];
static void fp8_refused(const LtPlan *p, const char *call, cublasStatus_t st, int found) {
    if (!p->fp8 || g_fp8_refusal[0]) return;
    static const char *routes[] = {"", "fp8_fwd", "fp8_dgrad", "fp8_wgrad"};
    snprintf(g_fp8_refusal, sizeof g_fp8_refusal, "%s: %s answered %s%s (E4M3 x %s into fp32, m %d n %d k %d%s)",
             routes[p->fp8], call, fc_cublas_status_name(st), found ? "" : ", no algorithm",
             p->fp8 == LT_FP8_FWD ? "E4M3" : "E5M2", p->m, p->n, p->k, lt_has_bias(p->epilogue) ? ", bf16 bias" : "");
    fc_warn("CUDA: the %s route is on, but cuBLASLt refused its GEMM (%s %s%s): such GEMMs run in bf16",
            routes[p->fp8], call, fc_cublas_status_name(st), found ? "" : ", no algorithm");
}
extern "C" const char *backend_cuda_fp8_refusal(void) { return g_fp8_refusal; }

// The pointers of one matmul that live in the descriptor: the bias (fp32, bf16 on fp8 plans) and the
// aux matrix.
static void lt_set_pointers(const LtPlan *p, const void *bias, const float *aux) {
    if (lt_has_bias(p->epilogue))
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (lt_has_aux(p->epilogue))
        cublasCheck(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
}

// A new plan for `key`: the descriptors, then one heuristic query with the operands' alignments and
// the bias and aux pointers the matmul will see (the heuristic reads their alignment from the descriptor).
static LtPlan *lt_plan_new(const LtPlan *key, const void *bias, const float *aux) {
    LtPlan *p = &g_lt_plans[g_lt_next];
    g_lt_next = (g_lt_next + 1) % LT_PLANS;
    lt_plan_release(p);
    *p = *key;
    p->used = 1;
    if (!g_lt_workspace) g_lt_workspace = fc_cuda_alloc(LT_WORKSPACE_BYTES);
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t ta = p->ta, tb = CUBLAS_OP_N;
    const uint32_t epilogue = p->epilogue;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (lt_has_bias(epilogue)) {
        // The bias has D's type (fp32) with bf16 A and B, bf16 with fp8 ones (cuBLASLt's fp8 kernels
        // with an fp32 D take no other); said explicitly rather than left to the default.
        const int32_t bias_type = p->fp8 ? CUDA_R_16BF : CUDA_R_32F;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof bias_type));
    }
    if (lt_has_aux(epilogue)) {  // aux: D's shape and type (fp32), leading dimension m
        const int64_t aux_ld = p->m;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                   sizeof aux_ld));
    }
    if (p->fp8) {  // D = (2^-eA A)(2^-eB B) + bias: the operands' dequantise factors (fp8.cu)
        const float *sa = fp8_scales(p->fp8) + 1, *sb = fp8_scales(p->fp8) + 3;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb));
    }
    lt_set_pointers(p, bias, aux);
    // A: (k, m) read transposed or (m, k); B: (k, n); C and D: (m, n); all column-major, packed.
    int a_rows = p->ta == CUBLAS_OP_T ? p->k : p->m, a_cols = p->ta == CUBLAS_OP_T ? p->m : p->k;
    const cudaDataType a_type = p->fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const cudaDataType b_type = p->fp8 == LT_FP8_DGRAD || p->fp8 == LT_FP8_WGRAD ? CUDA_R_8F_E5M2 : a_type;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, a_type, (uint64_t)a_rows, (uint64_t)a_cols, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, b_type, (uint64_t)p->k, (uint64_t)p->n, p->k));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, (uint64_t)p->m, (uint64_t)p->n, p->m));

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = LT_WORKSPACE_BYTES;
    const uint32_t aa = p->align_a, ab = p->align_b, ad = p->align_d;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(fc_cublaslt(), p->desc, p->la, p->lb, p->ld, p->ld, pref, 1,
                                                       &result, &found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    // No kernel for it: NOT_SUPPORTED, or INVALID_VALUE for a combination it does not take. The GELU
    // epilogues are newer and less common, and fp8 has no kernels before sm_89, so any refusal of
    // theirs means the bf16 or cuBLAS path.
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE && !lt_has_aux(epilogue) && !p->fp8)
        fc_cublas_check(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    p->lt = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p->lt) p->algo = result.algo;
    else fp8_refused(p, "cublasLtMatmulAlgoGetHeuristic", st == CUBLAS_STATUS_SUCCESS ? result.state : st, found);
    return p;
}

// The plan for one configuration (fp8 or bf16 A and B, op(A), the shape, the epilogue, the operands'
// alignments): the one made before, or a new one (its heuristic query made with these pointers).
// NULL where that configuration takes the other path. stage: the bias must first be copied to
// 16 bytes (the alignment the plan is made for is then the scratch's).
static LtPlan *lt_plan_get(int fp8, int ta, int m, int n, int k, uint32_t epilogue, const void *A, const void *B,
                           const float *D, const void *bias, const float *aux, int stage) {
    LtPlan key;
    memset(&key, 0, sizeof key);
    key.fp8 = fp8, key.ta = ta, key.m = m, key.n = n, key.k = k, key.epilogue = epilogue;
    key.align_a = lt_align(A), key.align_b = lt_align(B), key.align_d = lt_align(D);
    key.align_bias = lt_has_bias(epilogue) ? (stage ? 256 : lt_align(bias)) : 0;  // scratch starts on 256 bytes
    key.align_aux = lt_has_aux(epilogue) ? lt_align(aux) : 0;
    for (int i = 0; i < LT_PLANS; i++) {
        LtPlan *q = &g_lt_plans[i];
        if (q->used && q->fp8 == fp8 && q->ta == ta && q->m == m && q->n == n && q->k == k &&
            q->epilogue == epilogue && q->align_a == key.align_a && q->align_b == key.align_b &&
            q->align_d == key.align_d && q->align_bias == key.align_bias && q->align_aux == key.align_aux)
            return q->lt ? q : NULL;
    }
    LtPlan *p = lt_plan_new(&key, bias, aux);
    return p->lt ? p : NULL;
}

// D = op(A) @ B + beta D (+ the epilogue) with plan p (beta 0: D is not read); 0, with nothing
// written, where cublasLtMatmul refuses it after all (remembered: that configuration takes the
// other path).
static int lt_run(LtPlan *p, const void *A, const void *B, float *D, const void *bias, float *aux, float beta) {
    lt_set_pointers(p, bias, aux);
    const float one = 1.0f;
    cublasStatus_t st = cublasLtMatmul(fc_cublaslt(), p->desc, &one, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld,
                                       &p->algo, g_lt_workspace, LT_WORKSPACE_BYTES, 0);
    // An aux epilogue or fp8 configuration the heuristic offered may still be refused as an invalid
    // combination of types.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
        (st == CUBLAS_STATUS_INVALID_VALUE && (lt_has_aux(p->epilogue) || p->fp8))) {
        fp8_refused(p, "cublasLtMatmul", st, 1);
        return p->lt = 0;
    }
    fc_cublas_check(st, "cublasLtMatmul", __FILE__, __LINE__);
    return 1;
}

// D (m, n) = op(A) @ B with `epilogue` through cublasLtMatmul, bf16 A and B (beta 0: D is not read);
// 0, with nothing written, where this configuration takes the cuBLAS path instead. bias (m) and
// aux (m, n) as the epilogue needs them.
static int lt_matmul(int ta, int m, int n, int k, uint32_t epilogue, const __nv_bfloat16 *A, const __nv_bfloat16 *B,
                     float *D, const float *bias, float *aux) {
    if (lt_has_aux(epilogue) && (m % 8 || lt_align(aux) < LT_AUX_ALIGN)) return 0;
    int stage = lt_has_bias(epilogue) && lt_align(bias) < LT_BIAS_ALIGN;
    if (stage) {  // before the plan: a new one's heuristic query reads the copy's alignment
        float *copy = (float *)fc_cuda_scratch(SCRATCH_LINEAR, sizeof(float) * (size_t)m);
        cudaCheck(cudaMemcpyAsync(copy, bias, sizeof(float) * (size_t)m, cudaMemcpyDeviceToDevice, 0));
        bias = copy;
    }
    LtPlan *p = lt_plan_get(0, ta, m, n, k, epilogue, A, B, D, bias, aux, stage);
    return p && lt_run(p, A, B, D, bias, aux, 0.0f);
}

// One operand of an fp8 GEMM: the bf16 matrix x (rows, cols), its fp8 bytes written as they are or
// transposed (cols, rows), in E4M3 or E5M2; scaled: its scale is in the GEMM's slot already (dy's,
// from the bias pass: linear_bwd), so only the conversion runs.
typedef struct {
    const __nv_bfloat16 *x;
    int rows, cols, transposed, e5m2, scaled;
} Fp8Source;
static void fp8_convert(__nv_fp8_storage_t *dst, float *scale, Fp8Source s) {
    if (s.scaled) fc_fp8_cast(dst, scale, s.x, s.rows, s.cols, s.transposed, s.e5m2);
    else if (s.transposed) fc_fp8_quantize_transposed(dst, scale, s.x, s.rows, s.cols, s.e5m2);
    else fc_fp8_quantize(dst, scale, s.x, (size_t)s.rows * s.cols, s.e5m2);
}

// The largest operand copies the fp8 GEMMs taken since the last reset asked for: A's (a weight, or
// x transposed for dw) and B's (x, or dy), and the largest of dy's maxima from the bias pass, in
// bytes (backend_cuda_fp8_scratch_seen).
static size_t g_fp8_seen_a, g_fp8_seen_b, g_fp8_seen_dy;

// The bytes of dy's maxima from the bias pass (SCRATCH_FP8_DY) for dy (M, N), M and N multiples of
// 16: a bound on fc_cuda_colsum_blocks(1, M, N) (32 columns by 256 rows a block) from M N alone, so
// that the memory plan can count it from the largest output (route_scratch).
static size_t fp8_dy_amax_bytes(size_t mn) { return sizeof(float) * (mn / 256); }

// The fp8 routes' GEMM: D (m, n) = op(A) @ B + beta D (+ bias, m, in the epilogue), column-major, A
// read transposed and B as it is (the only layout cuBLASLt's fp8 kernels take, with leading
// dimensions of multiples of 16 bytes), A and B the fp8 bytes of a and b, each with one scale
// (fp8.cu), fp32 accumulation. m, n and k multiples of 16 (as Transformer Engine asks of its fp8
// GEMMs; every block's linear of the configs has 64 tokens a frame). 0, with nothing written,
// elsewhere or where cuBLASLt has no kernel for it (no fp8 tensor cores before sm_89): the bf16
// GEMM then. calls: the route's counter.
static int fp8_gemm(int kind, int m, int n, int k, Fp8Source a, Fp8Source b, real *D, const real *bias, float beta,
                    long *calls) {
    if (m % 16 || n % 16 || k % 16 || m <= 0 || n <= 0 || k <= 0) return 0;
    __nv_fp8_storage_t *a8 = (__nv_fp8_storage_t *)fc_cuda_scratch(SCRATCH_FP8_W, (size_t)a.rows * a.cols);
    __nv_fp8_storage_t *b8 = (__nv_fp8_storage_t *)fc_cuda_scratch(SCRATCH_FP8_A, (size_t)b.rows * b.cols);
    __nv_bfloat16 *b16 = bias ? (__nv_bfloat16 *)fc_cuda_scratch(SCRATCH_LINEAR, sizeof(__nv_bfloat16) * m) : NULL;
    uint32_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    LtPlan *p = lt_plan_get(kind, CUBLAS_OP_T, m, n, k, epilogue, a8, b8, D, b16, NULL, 0);
    if (!p) return 0;
    float *scales = fp8_scales(kind);
    fp8_convert(a8, scales, a);
    fp8_convert(b8, scales + 2, b);
    if (bias) fc_fp8_bias(b16, bias, m);
    if (!lt_run(p, a8, b8, D, b16, NULL, beta)) return 0;
    (*calls)++;
    if ((size_t)a.rows * a.cols > g_fp8_seen_a) g_fp8_seen_a = (size_t)a.rows * a.cols;
    if ((size_t)b.rows * b.cols > g_fp8_seen_b) g_fp8_seen_b = (size_t)b.rows * b.cols;
    return 1;
}

// The fp8 routes' scratch (backend.h: route_scratch) for linears whose largest input, output and
// weight hold in, out and weight values: one byte a value of the largest A (a weight for y and dx,
// x transposed for dw) and of the largest B (x for y, dy for dx and dw), and the maximum's partials.
static size_t route_scratch(size_t in, size_t out, size_t weight) {
    size_t a = 0, b = 0;
    if (fc_routes.fp8_fwd) a = weight > a ? weight : a, b = in > b ? in : b;
    if (fc_routes.fp8_dgrad) a = weight > a ? weight : a, b = out > b ? out : b;
    if (fc_routes.fp8_wgrad) a = in > a ? in : a, b = out > b ? out : b;
    size_t dy = fc_routes.fp8_dgrad || fc_routes.fp8_wgrad ? fp8_dy_amax_bytes(out) : 0;
    return a + b ? a + b + fc_fp8_max_scratch_bytes() + dy : 0;
}

extern "C" size_t backend_cuda_fp8_scratch_seen(int reset) {
    size_t ops = g_fp8_seen_a + g_fp8_seen_b;
    size_t seen = ops ? ops + fc_fp8_max_scratch_bytes() + g_fp8_seen_dy : 0;
    if (reset) g_fp8_seen_a = g_fp8_seen_b = g_fp8_seen_dy = 0;
    return seen;
}

// The bias gradient's pass over dy (linear_bias_grad, dy16 its bf16 copy), which for the fp8 routes'
// dx (dgrad) and dw (wgrad) GEMMs also takes dy's maximum: one E5M2 scale for both, in their slots,
// and no pass of their own over dy for it (the same maximum, so the same scale and bytes). 1 where
// it made the scale; 0 where neither route takes the shape (M, K, N multiples of 16).
static int fp8_bias_pass(real *db, GradMode pmode, __nv_bfloat16 *dy16, const real *dy, int M, int K, int N,
                         int dgrad, int wgrad) {
    if (!(dgrad || wgrad) || M % 16 || N % 16 || K % 16) {
        linear_bias_grad(db, pmode, dy16, NULL, dy, M, N);
        return 0;
    }
    int blocks = fc_cuda_colsum_blocks(1, M, N);
    size_t bytes = fp8_dy_amax_bytes((size_t)M * N);
    if (sizeof(float) * blocks > bytes) fc_die("CUDA linear_bwd: dy's maxima (%d blocks) beyond their bound", blocks);
    float *amax = (float *)fc_cuda_scratch(SCRATCH_FP8_DY, bytes);
    linear_bias_grad(db, pmode, dy16, amax, dy, M, N);
    if (dgrad) fc_fp8_scale_from(fp8_scales(LT_FP8_DGRAD) + 2, amax, blocks, 1);
    if (wgrad) fc_fp8_scale_from(fp8_scales(LT_FP8_WGRAD) + 2, amax, blocks, 1);
    if (bytes > g_fp8_seen_dy) g_fp8_seen_dy = bytes;
    fc_route_calls.fp8_dy_scale++;
    return 1;
}

// ----------------------------------------------------------------------------
// the ops

// y (M, N) = x @ w^T + b; with gelu_out (an operand), also gelu_out = GELU(y) (the MLP's first
// linear), by the GELU kernel. bf16: one cublasLtMatmul, y^T (N, M) = w (N, K) @ x^T (K, M) with the
// bias in the epilogue; otherwise, and where cuBLASLt has no kernel: a bias kernel, then a GEMM
// with beta = 1.
static void linear_fwd(GemmKind kind, real *y, Operand *gelu_out, const Operand *x, const real *w, const real *b,
                       int M, int K, int N) {
    if (M <= 0 || N <= 0) return;
    const __nv_bfloat16 *w16 = NULL, *x16 = operand16(kind, x);
    if (K > 0) {
        w16 = weight16(kind, w, (size_t)N * K);
        // the fp8_fwd route: y^T (N, M) = w (N, K) @ x^T (K, M), both E4M3
        if (kind.bf16 && fc_routes.fp8_fwd &&
            fp8_gemm(LT_FP8_FWD, N, M, K, Fp8Source{w16, N, K, 0, 0, 0}, Fp8Source{x16, M, K, 0, 0, 0}, y, b, 0.0f,
                     &fc_route_calls.fp8_fwd)) {
            if (gelu_out) fc_gelu_fwd(gelu_out, y, (size_t)M * N, kind.bf16);
            return;
        }
        if (kind.bf16 && lt_matmul(CUBLAS_OP_T, N, M, K, b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, w16,
                                   x16, y, b, NULL)) {
            if (gelu_out) fc_gelu_fwd(gelu_out, y, (size_t)M * N, kind.bf16);
            return;
        }
    }
    if (b) {
        linear_bias_broadcast_kernel<<<flat_grid((size_t)M * N), FLAT_THREADS>>>(y, b, (size_t)M, (size_t)N);
        kernelCheck();
    }
    if (K <= 0) {  // an empty product: y is the bias, or zero
        if (!b) cudaCheck(cudaMemset(y, 0, sizeof(real) * (size_t)M * N));
    } else {
        // y^T (N, M) = w (N, K) @ x^T (K, M): w is column-major (K, N), so op T; x is column-major (K, M), op N.
        gemm(kind, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, w, w16, K, operand32(kind, x), x16, K, b ? 1.0f : 0.0f, y, N);
    }
    if (gelu_out) fc_gelu_fwd(gelu_out, y, (size_t)M * N, kind.bf16);
}

// dx = or += dy @ w, dw += dy^T @ x, db += column sums of dy; with gelu_pre (the MLP's second linear,
// x = GELU(gelu_pre)), dx = (dy @ w) * GELU'(gelu_pre) (dx_mode GRAD_SET). bf16: the bias gradient's
// pass over dy also rounds it for the GEMMs. With gelu_pre: the GEMM, then GELU's backward in place;
// on the dgelu_epilogue route one cublasLtMatmul with the DGELU epilogue where cuBLASLt has a kernel
// for it (slower on an H200: cuBLASLt picks a slower GEMM kernel for it).
static void linear_bwd(GemmKind kind, real *dx, GradMode dx_mode, real *dw, real *db, GradMode pmode,
                       const real *dy, const Operand *x, const real *w, const real *gelu_pre, int M, int K, int N) {
    if (M <= 0 || K <= 0) dx = NULL;  // dx is empty
    if (dx && dx_mode == GRAD_SET && N <= 0) cudaCheck(cudaMemset(dx, 0, sizeof(real) * (size_t)M * K));  // dy @ w = 0
    if (M <= 0 && pmode == GRAD_SET && N > 0) {  // sums over no rows: zero
        if (dw && K > 0) cudaCheck(cudaMemset(dw, 0, sizeof(real) * (size_t)N * K));
        if (db) cudaCheck(cudaMemset(db, 0, sizeof(real) * (size_t)N));
    }
    if (M <= 0 || N <= 0) return;  // dy is empty: nothing to add
    const __nv_bfloat16 *dy16 = NULL;
    int dy_scaled = 0;  // dy's E5M2 scale already in the fp8 dx and dw GEMMs' slots
    if ((dx || dw) && K > 0 && kind.bf16) {
        if (db) {  // the bias gradient's pass over dy also rounds it for the GEMMs
            __nv_bfloat16 *out =
                (__nv_bfloat16 *)fc_cuda_scratch(SCRATCH_BF16_B, sizeof(__nv_bfloat16) * (size_t)M * N);
            dy_scaled = fp8_bias_pass(db, pmode, out, dy, M, K, N, dx && fc_routes.fp8_dgrad, dw && fc_routes.fp8_wgrad);
            dy16 = out, db = NULL;
        } else {
            dy16 = act16(kind, dy, (size_t)M * N, SCRATCH_BF16_B);
        }
    }
    if (dx) {
        // dx^T (K, M) = or += w^T (K, N) @ dy^T (N, M): w is column-major (K, N), dy column-major (N, M), both
        // op N. Overwriting (beta 0) never reads dx.
        const __nv_bfloat16 *w16 = weight16(kind, w, (size_t)N * K);
        // the fp8_dgrad route: dx^T (K, M) = or += w^T (K, N) @ dy^T (N, M), w transposed into E4M3,
        // dy in E5M2 (two bits of mantissa, the range of gradients)
        if (kind.bf16 && fc_routes.fp8_dgrad &&
            fp8_gemm(LT_FP8_DGRAD, K, M, N, Fp8Source{w16, N, K, 1, 0, 0}, Fp8Source{dy16, M, N, 0, 1, dy_scaled}, dx, NULL,
                     dx_mode == GRAD_ADD ? 1.0f : 0.0f, &fc_route_calls.fp8_dgrad)) {
            if (gelu_pre) fc_gelu_bwd(dx, dx, gelu_pre, (size_t)M * K);
        } else if (!(kind.bf16 && gelu_pre && fc_routes.dgelu_epilogue &&
              lt_matmul(CUBLAS_OP_N, K, M, N, CUBLASLT_EPILOGUE_DGELU, w16, dy16, dx, NULL, (float *)gelu_pre))) {
            gemm(kind, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, w, w16, K, dy, dy16, N, dx_mode == GRAD_ADD ? 1.0f : 0.0f,
                 dx, K);
            if (gelu_pre) fc_gelu_bwd(dx, dx, gelu_pre, (size_t)M * K);
        }
    }
    // dw^T (K, N) = or += x^T (K, M) @ dy (M, N): x is column-major (K, M), op N; dy column-major (N, M), op T.
    // Overwriting (beta 0) never reads dw. The fp8_wgrad route: x and dy transposed into E4M3 and E5M2.
    if (dw && K > 0 &&
        !(kind.bf16 && fc_routes.fp8_wgrad &&
          fp8_gemm(LT_FP8_WGRAD, K, N, M, Fp8Source{operand16(kind, x), M, K, 1, 0, 0}, Fp8Source{dy16, M, N, 1, 1, dy_scaled}, dw,
                   NULL, pmode == GRAD_ADD ? 1.0f : 0.0f, &fc_route_calls.fp8_wgrad)))
        gemm(kind, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, operand32(kind, x), operand16(kind, x), K, dy, dy16, N,
             pmode == GRAD_ADD ? 1.0f : 0.0f, dw, K);
    if (db) linear_bias_grad(db, pmode, NULL, NULL, dy, M, N);
}

template <int BF16>
static void table_linear_fwd(real *y, const Operand *x, const real *w, const real *b, int M, int K, int N) {
    linear_fwd(GemmKind{BF16}, y, NULL, x, w, b, M, K, N);
}
template <int BF16>
static void table_linear_bwd(real *dx, GradMode dx_mode, real *dw, real *db, GradMode pmode, const real *dy,
                             const Operand *x, const real *w, int M, int K, int N) {
    linear_bwd(GemmKind{BF16}, dx, dx_mode, dw, db, pmode, dy, x, w, NULL, M, K, N);
}
template <int BF16>
static void table_linear_gelu_fwd(real *pre, Operand *y, const Operand *x, const real *w, const real *b, int M,
                                  int K, int N) {
    linear_fwd(GemmKind{BF16}, pre, y, x, w, b, M, K, N);
}
template <int BF16>
static void table_linear_gelu_bwd(real *dpre, real *dw, real *db, GradMode pmode, const real *dy, const Operand *x,
                                  const real *w, const real *pre, int M, int K, int N) {
    linear_bwd(GemmKind{BF16}, dpre, GRAD_SET, dw, db, pmode, dy, x, w, pre, M, K, N);
}

void cuda_register_linear(Backend *be, int bf16) {
    be->linear_fwd = bf16 ? table_linear_fwd<1> : table_linear_fwd<0>;
    be->linear_bwd = bf16 ? table_linear_bwd<1> : table_linear_bwd<0>;
    be->linear_gelu_fwd = bf16 ? table_linear_gelu_fwd<1> : table_linear_gelu_fwd<0>;
    be->linear_gelu_bwd = bf16 ? table_linear_gelu_bwd<1> : table_linear_gelu_bwd<0>;
    be->route_scratch = bf16 ? route_scratch : NULL;  // the fp8 routes run on the bf16 table only
}
