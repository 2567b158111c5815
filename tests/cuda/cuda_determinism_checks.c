// cuda_determinism_checks.c: section 2 of test_cuda (see test_cuda.c): attention (each of its ways),
// the q/k norm's backward (both ways), the linear layer's forward and backward and the MLP's fused
// linears, twice on CUDA from the same inputs: the same bytes (no atomics, no order that changes
// between runs); then the optimizer's (cuda_optim_checks.c).
#include "cuda/cuda_harness.h"

// Downloads the CUDA side: into hc on the first run, into hg on the second; 1 when they match.
int det_capture(Buf *b, int rep) {
    g_gpu->download(rep ? b->hg : b->hc, b->g, gbytes(b));
    return !rep || !memcmp(b->hc, b->hg, gbytes(b));
}

// bf16: only what differs from fp32 (the linear layer, attention).
void cuda_determinism_section(int bf16) {
    printf("---- 2%s. determinism: CUDA (%s) twice from the same inputs ----\n", bf16 ? "b" : "", g_gpu->name);
    {  // attention, forward and backward, both layouts; without --quick at the 24 GB preset's size
        int B = g_quick ? 2 : 1, F = 7, N = g_quick ? 64 : 1024, H = g_quick ? 4 : 12, dh = g_quick ? 16 : 128;
        int D = H * dh;
        size_t T = (size_t)B * F * N;
        Buf qkv = bop(bnormal(T * 3 * D, 0, 1)), out = bop(bnormal(T * D, 0, 1)), lse = bnormal(T * H, 0, 1);
        Buf dout = bnormal(T * D, 0, 1), dqkv = bnormal(T * 3 * D, 0, 1);
        static const char *route_name[] = {"", ", attn_gemm route", ", attn_short route"};
        for (int route = 0; route < 3; route++)  // the flash kernels, the attn_gemm route (bf16), attn_short
            for (int tf = route == 2; tf < (route == 1 ? 1 : 2); tf++) {  // attn_gemm: spatial; attn_short: temporal
                if (route == 1 && !bf16) continue;
                AttnLayout lay = attn_layout_tokens(B, F, N, tf);
                int same = 1;
                backend_cuda_set_route("attn_gemm", route == 1), backend_cuda_set_route("attn_short", route == 2);
                for (int rep = 0; rep < 2; rep++) {
                    breset(&out), breset(&lse), breset(&dqkv);
                    g_gpu->attn_fwd(out.g, lse.g, qkv.g, lay, D, H);
                    g_gpu->attn_bwd(dqkv.g, dout.g, out.g, qkv.g, lse.g, lay, D, H);
                    same &= det_capture(&out, rep) & det_capture(&lse, rep) & det_capture(&dqkv, rep);
                }
                backend_cuda_set_route("attn_gemm", 0), backend_cuda_set_route("attn_short", 0);
                check(same, nm("cuda_determinism_attn"), "%s B=%d F=%d N=%d H=%d dh=%d%s: out, lse, dqkv %s",
                      tf ? "temporal" : "spatial", B, F, N, H, dh, route_name[route], SAME(same));
            }
        FREE(&qkv, &out, &lse, &dout, &dqkv);
    }
    for (int route = 0; route < 2 && !bf16; route++) {  // the q/k norm's backward (the same on both tables), both ways
        int T = g_quick ? 300 : 7168, D = g_quick ? 128 : 1536, H = g_quick ? 4 : 12, dh = D / H;
        size_t n = (size_t)T * 3 * D;
        Buf qkv = bnormal(n, 0.2, 1.3), qw = buniform(dh, 0.5, 1.5), kw = buniform(dh, 0.5, 1.5);
        Buf rstd = buniform((size_t)T * 2 * H, 0.5, 1.5), dout = bnormal(n, 0, 1), dqkv = bnormal(n, 0, 1);
        Buf dqw = bnormal(dh, 0, 1), dkw = bnormal(dh, 0, 1);
        int same = 1;
        backend_cuda_set_route("qk_norm_fused", route);
        for (int rep = 0; rep < 2; rep++) {
            breset(&dqkv), breset(&dqw), breset(&dkw);
            g_gpu->qk_norm_bwd(dqkv.g, dqw.g, dkw.g, GRAD_SET, dout.g, qkv.g, rstd.g, qw.g, kw.g, T, D, H);
            same &= det_capture(&dqkv, rep) & det_capture(&dqw, rep) & det_capture(&dkw, rep);
        }
        backend_cuda_set_route("qk_norm_fused", 0);
        check(same, nm("cuda_determinism_qk_norm_bwd"), "T=%d D=%d H=%d%s: dqkv, dqw, dkw %s", T, D, H,
              route ? ", qk_norm_fused route" : "", SAME(same));
        FREE(&qkv, &qw, &kw, &rstd, &dout, &dqkv, &dqw, &dkw);
    }
    {  // linear backward, a long reduction over M for dw and db
        int M = g_quick ? 896 : 7168, K = g_quick ? 256 : 1536, N = 3 * K;
        Buf x = bop(bnormal((size_t)M * K, 0, 1)), w = bnormal((size_t)N * K, 0, 0.1);
        Buf dy = bnormal((size_t)M * N, 0, 1), dx = bnormal((size_t)M * K, 0, 1), dw = bnormal((size_t)N * K, 0, 1);
        Buf db = bnormal(N, 0, 1);
        int same = 1;
        for (int rep = 0; rep < 2; rep++) {
            breset(&dx), breset(&dw), breset(&db);
            g_gpu->linear_bwd(dx.g, GRAD_ADD, dw.g, db.g, GRAD_ADD, dy.g, x.g, w.g, M, K, N);
            same &= det_capture(&dx, rep) & det_capture(&dw, rep) & det_capture(&db, rep);
        }
        check(same, nm("cuda_determinism_linear_bwd"), "M=%d K=%d N=%d: dx, dw, db %s", M, K, N, SAME(same));
        same = 1;
        for (int rep = 0; rep < 2; rep++) {  // the forward, into dy with db as its bias (bf16: cuBLASLt's epilogue)
            breset(&dy);
            g_gpu->linear_fwd(dy.g, x.g, w.g, db.g, M, K, N);
            same &= det_capture(&dy, rep);
        }
        check(same, nm("cuda_determinism_linear_fwd"), "M=%d K=%d N=%d, bias: y %s", M, K, N, SAME(same));
        // the MLP's fused linears (bf16: cuBLASLt's GELU epilogues): x (M, K) -> pre, y (M, N), then
        // back through a (K, N) weight (w's memory) from a gradient (M, K) (dx's)
        Buf y = bop(bnormal((size_t)M * N, 0, 1)), dpre = bnormal((size_t)M * N, 0, 1), dbk = bnormal(K, 0, 1);
        same = 1;
        for (int rep = 0; rep < 2; rep++) {
            breset(&dy), breset(&y), breset(&dpre), breset(&dw), breset(&dbk);
            g_gpu->linear_gelu_fwd(dy.g, y.g, x.g, w.g, db.g, M, K, N);
            g_gpu->linear_gelu_bwd(dpre.g, dw.g, dbk.g, GRAD_SET, dx.g, y.g, w.g, dy.g, M, N, K);
            same &= det_capture(&dy, rep) & det_capture(&y, rep) & det_capture(&dpre, rep) & det_capture(&dw, rep) &
                    det_capture(&dbk, rep);
        }
        check(same, nm("cuda_determinism_linear_gelu"), "M=%d K=%d N=%d: pre, GELU(pre), d pre, dw, db %s", M, K, N,
              SAME(same));
        FREE(&x, &w, &dy, &dx, &dw, &db, &y, &dpre, &dbk);
    }
    if (bf16) return;
    cuda_optim_determinism();
}
