// backend.c: choosing a backend by name and listing what this build has.
#include <stddef.h>
#include <string.h>

#include "backend.h"

// Without the CUDA backend's objects (a CPU-only build) these answer; cuda/backend_cuda.cu (or its
// CPU emulation, tests/cuda_emu) defines the real ones, which take precedence at link time.
__attribute__((weak)) const Backend *backend_cuda_precision(int bf16, const char **why) {
    (void)bf16;
    if (why) *why = "this build has no CUDA backend (nvcc was not found when it was built)";
    return NULL;
}
__attribute__((weak)) const Backend *backend_cuda(const char **why) { return backend_cuda_precision(1, why); }
__attribute__((weak)) void backend_cuda_set_attn_ds_cap(size_t bytes) { (void)bytes; }

#define OP(field) {#field, offsetof(Backend, field)}
static const struct {
    const char *name;
    size_t offset;
} OPS[] = {
    OP(describe), OP(alloc), OP(free), OP(upload), OP(download), OP(copy), OP(zero), OP(sync), OP(host_alloc),
    OP(host_free), OP(download_async), OP(download_wait), OP(operand_upload), OP(operand_download),
    OP(memory_peak), OP(register_weights),
    OP(unregister_weights), OP(randn), OP(linear_fwd), OP(linear_bwd), OP(linear_gelu_fwd), OP(linear_gelu_bwd),
    OP(ln_mod_fwd), OP(ln_mod_bwd), OP(gated_add_fwd), OP(gated_add_bwd), OP(qk_norm_fwd), OP(qk_norm_bwd),
    OP(attn_fwd), OP(attn_bwd), OP(gelu_fwd), OP(gelu_bwd), OP(silu_fwd), OP(silu_bwd), OP(patchify_fwd),
    OP(patchify_bwd), OP(unpatchify_fwd), OP(unpatchify_bwd), OP(sinusoid_fwd), OP(sinusoid_bwd),
    OP(add_pos_time_fwd), OP(add_pos_time_bwd), OP(mse_masked_fwd), OP(mse_masked_bwd), OP(flow_mix),
    OP(adamw_fp32), OP(adamw_8bit), OP(sum_squares), OP(ema_update),
};

AttnLayout attn_layout_tokens(int B, int F, int N, int temporal) {
    if (temporal)
        return (AttnLayout){.n_outer = B, .n_inner = N, .len = F, .tok_stride = N, .outer_stride = (long)F * N,
                            .inner_stride = 1};
    return (AttnLayout){.n_outer = B * F, .n_inner = 1, .len = N, .tok_stride = 1, .outer_stride = N,
                        .inner_stride = 0};
}

const char *backend_missing_op(const Backend *be) {
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (!*(void *const *)((const char *)be + OPS[i].offset)) return OPS[i].name;
    return be->operand_bytes ? NULL : "operand_bytes";
}

const Backend *backend_select(const char *name) {
    if (!strcmp(name, "cpu")) return backend_cpu();
    const char *why = NULL;
    if (!strcmp(name, "cuda") || !strcmp(name, "cuda-fp32")) {
        const Backend *be = backend_cuda_precision(!strcmp(name, "cuda"), &why);
        if (!be) fc_die("--device %s: %s", name, why);
        return be;
    }
    if (!strcmp(name, "auto")) {
        const Backend *be = backend_cuda(&why);
        return be ? be : backend_cpu();
    }
    fc_die("--device %s: unknown device (cpu, cuda, cuda-fp32 or auto)", name);
}

void backend_print_versions(FILE *out) {
    fprintf(out, "backends:\n  %s\n", backend_cpu()->describe());
    const char *why = NULL;
    const Backend *cuda = backend_cuda(&why);
    if (cuda) {
        fprintf(out, "  %s\n", cuda->describe());
        fprintf(out, "  %s\n", backend_cuda_precision(0, NULL)->describe());
    }
    else
        fprintf(out, "  cuda: not available: %s\n", why);
}
