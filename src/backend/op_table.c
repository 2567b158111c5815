// op_table.c: the names of the op table's fields, to find an incomplete table (op_table.h).
#include "backend/op_table.h"

#include <stddef.h>

#define OP(field) {#field, offsetof(Backend, field), 0}
#define OPTIONAL(field) {#field, offsetof(Backend, field), 1}  // NULL allowed: backend.h says what it means
static const struct {
    const char *name;
    size_t offset;
    int optional;
} OPS[] = {
    OP(describe), OP(alloc), OP(free), OP(upload), OP(download), OP(copy), OP(zero), OP(sync), OP(host_alloc),
    OP(host_free), OP(download_async), OP(download_wait), OP(operand_upload), OP(operand_download),
    OP(memory_peak), OP(register_weights),
    OP(unregister_weights), OP(randn), OP(linear_fwd), OP(linear_bwd), OP(linear_gelu_fwd), OP(linear_gelu_bwd),
    OP(ln_mod_fwd), OP(ln_mod_bwd), OP(gated_add_fwd), OP(gated_add_bwd), OP(qk_norm_fwd), OP(qk_norm_bwd),
    OP(attn_fwd), OP(attn_bwd), OP(gelu_fwd), OP(gelu_bwd), OP(silu_fwd), OP(silu_bwd), OP(patchify_fwd),
    OP(patchify_bwd), OP(unpatchify_fwd), OP(unpatchify_bwd), OP(sinusoid_fwd), OP(sinusoid_bwd),
    OP(add_pos_time_fwd), OP(add_pos_time_bwd), OP(mse_masked_fwd), OP(mse_masked_bwd), OP(flow_mix),
    OP(conv2d_fwd), OP(group_norm_fwd), OP(act_fwd), OP(upsample2x_fwd), OP(affine_fwd), OP(add_fwd), OP(image_attn_fwd),
    OP(conv_tile_bytes), OP(adamw_fp32), OP(adamw_8bit), OP(adamw_8bit_jobs), OP(sum_squares), OP(ema_update),
    OPTIONAL(route_scratch), OPTIONAL(attn_head_dim_ok),
};

const char *backend_missing_op(const Backend *be) {
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (!OPS[i].optional && !*(void *const *)((const char *)be + OPS[i].offset)) return OPS[i].name;
    return be->operand_bytes ? NULL : "operand_bytes";
}

const char *backend_op(int i, size_t *offset, int *optional) {
    if (i < 0 || (size_t)i >= sizeof OPS / sizeof OPS[0]) return NULL;
    *offset = OPS[i].offset, *optional = OPS[i].optional;
    return OPS[i].name;
}
