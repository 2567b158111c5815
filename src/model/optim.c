// optim.c: the optimizer around the backend's AdamW ops (see optim.h).
#include <math.h>
#include <string.h>

#include "model/optim.h"
#include "backend/quant8.h"

Optimizer *build_optimizer(const Model *m, const Config *c) {
    const Backend *be = m->be;
    Optimizer *o = fc_calloc(1, sizeof(Optimizer));
    o->be = be;
    o->n = m->n_tensors;
    o->t = fc_calloc(o->n, sizeof(OptTensor));
    // Two passes over the tensors: sizes, then pointers. Floats first, then the 8-bit codes, so
    // every float stays aligned.
    size_t floats = 2 * QUANT8_TABLE, codes = 0;  // the two code maps' encoder tables
    for (int i = 0; i < o->n; i++) {
        OptTensor *t = &o->t[i];
        t->numel = m->info[i].numel;
        t->is8bit = c->optimizer == OPT_ADAMW8BIT && t->numel >= OPTIM_MIN_8BIT;
        t->blocks = t->is8bit ? (t->numel + ADAM8_BLOCK - 1) / ADAM8_BLOCK : 0;
        t->weight_decay = m->info[i].ndim == 2 ? (float)c->weight_decay : 0.0f;
        floats += t->is8bit ? 2 * t->blocks : 2 * t->numel;
        codes += t->is8bit ? 2 * t->numel : 0;
    }
    o->bytes = floats * sizeof(float) + codes;
    o->mem = be->alloc(o->bytes);  // zero: all moments start at 0 (absmax 0 reads as 0 too)
    float *f = o->mem;
    uint8_t *q = (uint8_t *)(f + floats);
    o->code_m = f, o->code_v = f + QUANT8_TABLE, f += 2 * QUANT8_TABLE;
    for (int i = 0; i < o->n; i++) {
        OptTensor *t = &o->t[i];
        if (t->is8bit) {
            t->absmax_m = f, t->absmax_v = f + t->blocks, f += 2 * t->blocks;
            t->m8 = q, t->v8 = q + t->numel, q += 2 * t->numel;
        } else {
            t->m32 = f, t->v32 = f + t->numel, f += 2 * t->numel;
        }
    }
    quant8_signed_code(o->host_code_m), quant8_table(o->host_code_m);
    quant8_unsigned_code(o->host_code_v), quant8_table(o->host_code_v);
    be->upload(o->code_m, o->host_code_m, sizeof o->host_code_m);
    be->upload(o->code_v, o->host_code_v, sizeof o->host_code_v);
    return o;
}

void free_optimizer(Optimizer *o) {
    if (!o) return;
    o->be->free(o->mem);
    free(o->t);
    free(o);
}

double lr_schedule(const Config *c, int t) {
    if (t <= c->warmup_steps) return c->lr * t / (c->warmup_steps > 0 ? c->warmup_steps : 1);
    double span = (c->schedule_end ? c->schedule_end : c->steps) - c->warmup_steps;
    double p = span > 0 ? (t - c->warmup_steps) / span : 1.0;
    if (p > 1) p = 1;
    return c->lr * (c->lr_min_ratio + (1 - c->lr_min_ratio) * 0.5 * (1 + cos(3.141592653589793 * p)));
}

OptStepInfo optimizer_step(Optimizer *o, Model *m, const Config *c, int t, double lr, real *ema, double ema_decay) {
    const Backend *be = o->be;
    OptStepInfo info = {0};
    // One sum over the whole gradient allocation (the tensors lie back to back in it): one result
    // brought back to the host a step, where a sum per tensor made the GPU wait idle for ~200 round
    // trips. Its order depends only on the layout, so the norm is the same on every run.
    size_t bad = 0;
    double sq = be->sum_squares(m->grads_mem, m->n_params, &bad);
    info.nonfinite = bad;
    info.grad_norm = sqrt(sq);
    info.lr = lr;
    float scale = 1.0f;
    if (c->grad_clip > 0 && info.grad_norm > c->grad_clip) scale = (float)(c->grad_clip / info.grad_norm);
    for (int i = 0; i < o->n; i++) {
        OptTensor *ot = &o->t[i];
        AdamHyper h = {(float)lr, (float)c->beta1, (float)c->beta2, (float)c->adam_eps, ot->weight_decay, t, scale,
                       ema ? ema + m->info[i].offset : NULL, (float)ema_decay};
        real *p = m->params_mem + m->info[i].offset;
        const real *g = m->grads_mem + m->info[i].offset;
        if (ot->is8bit)
            be->adamw_8bit(p, g, ot->m8, ot->v8, ot->absmax_m, ot->absmax_v, o->code_m, o->code_v, ot->numel, h);
        else
            be->adamw_fp32(p, g, ot->m32, ot->v32, ot->numel, h);
    }
    return info;
}
