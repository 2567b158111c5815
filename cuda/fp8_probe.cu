// fp8_probe.cu: which fp8 GEMMs this card's cuBLASLt takes. The fp8 routes (linear.cu) ask for one
// configuration: E4M3 A transposed, E4M3 or E5M2 B, fp32 C and D, a scale pointer for each operand,
// a bf16 bias in the epilogue. Where cuBLASLt refuses it, the routes' GEMMs run in bf16 and the
// reason is one status; this asks for that configuration and its neighbours (a bf16 D, no scale
// pointers, fast accumulation, no bias, no alignment preferences) on one small problem, so that
// one run on a card shows which change would make the routes run there. A diagnosis for tests and
// bench logs (backend_cuda_fp8_probe), never on the training path.
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"

enum { PROBE_DIM = 64 };  // m = n = k: a multiple of 16, every pointer on 256 bytes

typedef struct {
    const char *name;
    cudaDataType_t b_type, d_type, c_type;
    int scales, fast_accum, bias, align_prefs;
} Fp8Variant;

// One variant: the heuristic's answer, and the matmul's where the heuristic offered an algorithm.
static void probe_one(const Fp8Variant *v, void *a, void *b, void *d, void *bias, float *scales, void *ws,
                      size_t ws_bytes, char *out, size_t n) {
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const char *stage = "cublasLtMatmulDescCreate";
    const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint32_t epilogue = v->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const int32_t bias_type = CUDA_R_16BF;
    const int8_t fast = 1;
    const float *sa = scales, *sb = scales + 1;
    const uint64_t ws64 = ws_bytes;
    const uint32_t align = 256;
    // each setting in turn, stopping at the first that cuBLASLt does not take (its name then reported)
#define PROBE_STEP(label, call)        \
    if (st == CUBLAS_STATUS_SUCCESS) { \
        st = (call);                   \
        stage = label;                 \
    }
#define DESC_SET(attr, value) \
    PROBE_STEP(#attr, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_##attr, &value, sizeof value))
#define PREF_SET(attr, value) \
    PROBE_STEP(#attr, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_##attr, &value, sizeof value))
#define LAYOUT(label, layout, type) \
    PROBE_STEP(label, cublasLtMatrixLayoutCreate(&layout, type, PROBE_DIM, PROBE_DIM, PROBE_DIM))
    DESC_SET(TRANSA, ta);
    DESC_SET(TRANSB, tb);
    DESC_SET(EPILOGUE, epilogue);
    if (v->bias) {
        DESC_SET(BIAS_DATA_TYPE, bias_type);
        DESC_SET(BIAS_POINTER, bias);
    }
    if (v->scales) {
        DESC_SET(A_SCALE_POINTER, sa);
        DESC_SET(B_SCALE_POINTER, sb);
    }
    if (v->fast_accum) DESC_SET(FAST_ACCUM, fast);
    LAYOUT("the A layout", la, CUDA_R_8F_E4M3);
    LAYOUT("the B layout", lb, v->b_type);
    LAYOUT("the C layout", lc, v->c_type);
    LAYOUT("the D layout", ld, v->d_type);
    PROBE_STEP("the preference", cublasLtMatmulPreferenceCreate(&pref));
    PREF_SET(MAX_WORKSPACE_BYTES, ws64);
    if (v->align_prefs) {
        PREF_SET(MIN_ALIGNMENT_A_BYTES, align);
        PREF_SET(MIN_ALIGNMENT_B_BYTES, align);
        PREF_SET(MIN_ALIGNMENT_C_BYTES, align);
        PREF_SET(MIN_ALIGNMENT_D_BYTES, align);
    }
#undef LAYOUT
#undef PREF_SET
#undef DESC_SET
#undef PROBE_STEP
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(out, n, "%s: %s at %s", v->name, fc_cublas_status_name(st), stage);
    } else {
        cublasLtMatmulHeuristicResult_t result;
        memset(&result, 0, sizeof result);
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(fc_cublaslt(), desc, la, lb, lc, ld, pref, 1, &result, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
            snprintf(out, n, "%s: heuristic %s, %d found", v->name,
                     fc_cublas_status_name(st != CUBLAS_STATUS_SUCCESS ? st : result.state), found);
        } else {
            const float one = 1.0f, zero = 0.0f;
            st = cublasLtMatmul(fc_cublaslt(), desc, &one, a, la, b, lb, &zero, d, lc, d, ld, &result.algo, ws,
                                ws_bytes, 0);
            snprintf(out, n, "%s: matmul %s", v->name, fc_cublas_status_name(st));
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
}

// "name: answer; ..." for each variant, into out (n bytes). Its own small allocations, freed after.
extern "C" void backend_cuda_fp8_probe(char *out, size_t n) {
    static const Fp8Variant variants[] = {
        // the routes' own: E4M3 x E4M3 (fp8_fwd) or x E5M2 (fp8_dgrad, fp8_wgrad) into fp32, scaled
        {"fwd as the route", CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F, 1, 0, 0, 1},
        {"fwd+bias as the route", CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F, 1, 0, 1, 1},
        {"bwd as the route", CUDA_R_8F_E5M2, CUDA_R_32F, CUDA_R_32F, 1, 0, 0, 1},
        // their neighbours
        {"fwd, bf16 C and D", CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, 1, 0, 0, 1},
        {"fwd, no scale pointers", CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F, 0, 0, 0, 1},
        {"fwd, fast accumulation", CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F, 1, 1, 0, 1},
        {"fwd, no alignment preferences", CUDA_R_8F_E4M3, CUDA_R_32F, CUDA_R_32F, 1, 0, 0, 0},
    };
    const size_t elems = (size_t)PROBE_DIM * PROBE_DIM, ws_bytes = (size_t)4 << 20;
    void *a = NULL, *b = NULL, *d = NULL, *bias = NULL, *ws = NULL;
    float *scales = NULL;
    const float ones[2] = {1.0f, 1.0f};
    cudaCheck(cudaMalloc(&a, elems));
    cudaCheck(cudaMalloc(&b, elems));
    cudaCheck(cudaMalloc(&d, elems * sizeof(float)));
    cudaCheck(cudaMalloc(&bias, PROBE_DIM * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMalloc((void **)&scales, sizeof ones));
    cudaCheck(cudaMalloc(&ws, ws_bytes));
    cudaCheck(cudaMemset(a, 0, elems));
    cudaCheck(cudaMemset(b, 0, elems));
    cudaCheck(cudaMemset(bias, 0, PROBE_DIM * sizeof(__nv_bfloat16)));
    cudaCheck(cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice));
    size_t used = 0;
    if (n == 0) return;
    out[0] = 0;
    for (size_t i = 0; i < sizeof variants / sizeof variants[0] && used + 1 < n; i++) {
        char one[160];
        probe_one(&variants[i], a, b, d, bias, scales, ws, ws_bytes, one, sizeof one);
        int w = snprintf(out + used, n - used, "%s%s", i ? "; " : "", one);
        used += w > 0 ? (size_t)w : 0;
    }
    cudaCheck(cudaDeviceSynchronize());
    cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(bias), cudaFree(scales), cudaFree(ws);
}
