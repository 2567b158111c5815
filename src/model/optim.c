// optim.c: the optimizer around the backend's AdamW ops (see optim.h).
#include <math.h>
#include <string.h>

#include "model/optim.h"
#include "backend/quant8.h"

static int is_8bit(const Config *c, size_t numel) { return c->optimizer == OPT_ADAMW8BIT && numel >= OPTIM_MIN_8BIT; }

size_t optimizer_part_start(const Model *m, const Config *c, int part, int parts) {
    if (part <= 0) return 0;
    if (part >= parts) return m->n_params;
    size_t target = (size_t)((double)m->n_params * part / parts);
    for (int i = 0; i < m->n_tensors; i++) {  // the first cut at or after target
        size_t off = m->info[i].offset, n = m->info[i].numel;
        if (target >= off + n) continue;
        if (target <= off || !is_8bit(c, n)) return target <= off ? off : off + n;
        size_t k = (target - off + ADAM8_BLOCK - 1) / ADAM8_BLOCK * ADAM8_BLOCK;
        return k < n ? off + k : off + n;
    }
    return m->n_params;
}

Optimizer *build_optimizer(const Model *m, const Config *c) { return build_optimizer_part(m, c, 0, 1); }

Optimizer *build_optimizer_part(const Model *m, const Config *c, int part, int parts) {
    const Backend *be = m->be;
    Optimizer *o = fc_calloc(1, sizeof(Optimizer));
    o->be = be;
    o->n = m->n_tensors;
    o->t = fc_calloc(o->n, sizeof(OptTensor));
    o->lo = optimizer_part_start(m, c, part, parts), o->hi = optimizer_part_start(m, c, part + 1, parts);
    // Two passes over the tensors: sizes, then pointers. Floats first, then the 8-bit codes, so
    // every float stays aligned.
    size_t floats = 2 * QUANT8_TABLE, codes = 0;  // the two code maps' encoder tables
    for (int i = 0; i < o->n; i++) {
        OptTensor *t = &o->t[i];
        size_t off = m->info[i].offset;
        t->numel = m->info[i].numel;
        t->is8bit = is_8bit(c, t->numel);
        t->blocks = t->is8bit ? (t->numel + ADAM8_BLOCK - 1) / ADAM8_BLOCK : 0;
        t->weight_decay = m->info[i].ndim == 2 ? (float)c->weight_decay : 0.0f;
        size_t a = off > o->lo ? off : o->lo, b = off + t->numel < o->hi ? off + t->numel : o->hi;
        t->first = a < b ? a - off : 0, t->count = a < b ? b - a : 0;
        size_t blocks = (t->count + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
        floats += t->is8bit ? 2 * blocks : 2 * t->count;
        codes += t->is8bit ? 2 * t->count : 0;
    }
    o->bytes = floats * sizeof(float) + codes;
    o->mem = be->alloc(o->bytes);  // zero: all moments start at 0 (absmax 0 reads as 0 too)
    float *f = o->mem;
    uint8_t *q = (uint8_t *)(f + floats);
    o->code_m = f, o->code_v = f + QUANT8_TABLE, f += 2 * QUANT8_TABLE;
    for (int i = 0; i < o->n; i++) {
        OptTensor *t = &o->t[i];
        size_t blocks = (t->count + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
        if (t->is8bit) {
            t->absmax_m = f, t->absmax_v = f + blocks, f += 2 * blocks;
            t->m8 = q, t->v8 = q + t->count, q += 2 * t->count;
        } else {
            t->m32 = f, t->v32 = f + t->count, f += 2 * t->count;
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
    // The 8-bit tensors as one call (one pass over all their blocks), the fp32 ones a call each.
    Adam8Job *jobs = fc_malloc(sizeof(Adam8Job) * (o->n > 0 ? o->n : 1));
    int njobs = 0;
    for (int i = 0; i < o->n; i++) {
        OptTensor *ot = &o->t[i];
        if (!ot->count) continue;  // another part's
        size_t at = m->info[i].offset + ot->first;  // the part's first element in the flat parameters
        AdamHyper h = {(float)lr, (float)c->beta1, (float)c->beta2, (float)c->adam_eps, ot->weight_decay, t, scale,
                       ema ? ema + (at - o->lo) : NULL, (float)ema_decay};
        real *p = m->params_mem + at;
        const real *g = m->grads_mem + at;
        if (ot->is8bit)
            jobs[njobs++] = (Adam8Job){p, g, ot->m8, ot->v8, ot->absmax_m, ot->absmax_v, ot->count, h};
        else
            be->adamw_fp32(p, g, ot->m32, ot->v32, ot->count, h);
    }
    be->adamw_8bit_jobs(jobs, njobs, o->code_m, o->code_v);
    free(jobs);
    return info;
}
