// model.c: the video diffusion transformer of docs/network.md, written once against the op
// table (backend.h). No backend-specific code lives here.
#include <math.h>
#include <string.h>

#include "model/model.h"
#include "base/philox.h"

// ----------------------------------------------------------------------------
// parameter layout: one walk over the tensors, in storage order, binds a ParamPtrs to a base
// pointer; the first walk also records names, shapes and init rules.

typedef struct {
    Model *m;
    real *base;
    size_t offset;
    int record;
} Layout;

static void bind(Layout *L, real **field, const char *name, int rows, int cols, InitRule init) {
    size_t numel = (size_t)rows * (cols ? cols : 1);
    if (field) *field = L->base ? L->base + L->offset : NULL;
    if (L->record) {
        Model *m = L->m;
        m->info = realloc(m->info, sizeof(ParamInfo) * (m->n_tensors + 1));
        if (!m->info) FC_OUT_OF_MEMORY("the parameter table");
        ParamInfo *pi = &m->info[m->n_tensors++];
        memset(pi, 0, sizeof *pi);
        snprintf(pi->name, sizeof pi->name, "%s", name);
        pi->ndim = cols ? 2 : 1;
        pi->shape[0] = rows, pi->shape[1] = cols;
        pi->offset = L->offset, pi->numel = numel, pi->init = init;
        pi->fan_out = rows, pi->fan_in = cols;
    }
    L->offset += numel;
}

static void bind_linear(Layout *L, real **w, real **b, const char *prefix, int out, int in, InitRule winit) {
    char name[80];
    snprintf(name, sizeof name, "%s.weight", prefix);
    bind(L, w, name, out, in, winit);
    snprintf(name, sizeof name, "%s.bias", prefix);
    bind(L, b, name, out, 0, INIT_BIAS);
}

static void layout_params(Model *m, ParamPtrs *pp, real *base, int record) {
    Layout L = {m, base, 0, record};
    const Config *c = &m->cfg;
    int D = m->D, Fd = c->freq_dim, dh = m->D / m->H;
    char name[80];
    bind_linear(&L, &pp->patch_w, &pp->patch_b, "patch_embed", D, m->PPCin, INIT_XAVIER);
    bind_linear(&L, &pp->off_w, &pp->off_b, "offset_embed", D, Fd, INIT_XAVIER);
    bind_linear(&L, &pp->t0_w, &pp->t0_b, "t_embed.mlp.0", D, Fd, INIT_NORMAL_002);
    bind_linear(&L, &pp->t2_w, &pp->t2_b, "t_embed.mlp.2", D, D, INIT_NORMAL_002);
    for (int l = 0; l < c->depth; l++) {
        BlockParams *bp = &pp->blocks[l];
        snprintf(name, sizeof name, "blocks.%d.adaLN", l);
        bind_linear(&L, &bp->ada_w, &bp->ada_b, name, 9 * D, D, INIT_ZERO);
        for (int k = 0; k < 2; k++) {
            AttnParams *ap = &bp->attn[k];
            const char *which = k ? "attn_t" : "attn_s";
            snprintf(name, sizeof name, "blocks.%d.%s.qkv", l, which);
            bind_linear(&L, &ap->qkv_w, &ap->qkv_b, name, 3 * D, D, INIT_XAVIER);
            snprintf(name, sizeof name, "blocks.%d.%s.q_norm.weight", l, which);
            bind(&L, &ap->q_norm, name, dh, 0, INIT_NORM);
            snprintf(name, sizeof name, "blocks.%d.%s.k_norm.weight", l, which);
            bind(&L, &ap->k_norm, name, dh, 0, INIT_NORM);
            snprintf(name, sizeof name, "blocks.%d.%s.proj", l, which);
            bind_linear(&L, &ap->proj_w, &ap->proj_b, name, D, D, INIT_XAVIER);
        }
        snprintf(name, sizeof name, "blocks.%d.mlp.fc1", l);
        bind_linear(&L, &bp->fc1_w, &bp->fc1_b, name, m->RD, D, INIT_XAVIER);
        snprintf(name, sizeof name, "blocks.%d.mlp.fc2", l);
        bind_linear(&L, &bp->fc2_w, &bp->fc2_b, name, D, m->RD, INIT_XAVIER);
    }
    bind_linear(&L, &pp->final_ada_w, &pp->final_ada_b, "final.adaLN", 2 * D, D, INIT_ZERO);
    bind_linear(&L, &pp->final_w, &pp->final_b, "final.linear", m->PPC, D, INIT_ZERO);
    m->n_params = L.offset;
}

// ----------------------------------------------------------------------------
// activation layout: a list of (field, bytes) carved out of one allocation, llm.c style. Tensors
// of `real` take sizeof(real) a value, operands operand_bytes (backend.h), rounded up to 16 bytes
// so that every tensor after them stays aligned.

typedef struct {
    void ***field;
    size_t *bytes;
    int n, cap;
    size_t operand_bytes;
} Carve;

static void carve_bytes(Carve *cv, void **field, size_t bytes) {
    if (cv->n == cv->cap) {
        cv->cap = cv->cap ? 2 * cv->cap : 256;
        cv->field = realloc(cv->field, sizeof(*cv->field) * cv->cap);
        cv->bytes = realloc(cv->bytes, sizeof(*cv->bytes) * cv->cap);
        if (!cv->field || !cv->bytes) FC_OUT_OF_MEMORY("the activations' layout");
    }
    cv->field[cv->n] = field, cv->bytes[cv->n] = bytes, cv->n++;
}
static void carve_add(Carve *cv, real **field, size_t count) { carve_bytes(cv, (void **)field, sizeof(real) * count); }
static void carve_operand(Carve *cv, Operand **field, size_t count) {
    carve_bytes(cv, field, (cv->operand_bytes * count + 15) / 16 * 16);
}

static void *carve_alloc(const Backend *be, Carve *cv, size_t *total) {
    size_t sum = 0;
    for (int i = 0; i < cv->n; i++) sum += cv->bytes[i];
    char *mem = be->alloc(sum);
    size_t off = 0;
    for (int i = 0; i < cv->n; i++) *cv->field[i] = mem + off, off += cv->bytes[i];
    *total = sum;
    free(cv->field), free(cv->bytes);
    return mem;
}

// Whether block l re-makes its activations in backward: with recompute, every block but the last
// keep_blocks, which keep all of theirs.
// (keep_blocks = auto not resolved, memplan.h, keeps none.)
static int block_recomputed(const Model *m, int l) {
    int keep = m->cfg.keep_blocks > 0 ? m->cfg.keep_blocks : 0;
    return m->cfg.recompute && l < m->cfg.depth - keep;
}

static void carve_activations(Model *m, Carve *cv) {
    size_t T = m->T, S = m->S, D = m->D, H = m->H, RD = m->RD, PPC = m->PPC, Fd = m->cfg.freq_dim;
    Acts *a = &m->a;
    if (m->Cin != m->cfg.channels) carve_add(cv, &a->xin, S * m->Ein);
    carve_operand(cv, &a->patches, T * m->PPCin);
    carve_add(cv, &a->emb, T * D);
    carve_add(cv, &a->x0, T * D);
    carve_operand(cv, &a->osin, S * Fd);
    carve_add(cv, &a->oe, S * D);
    carve_operand(cv, &a->tsin, S * Fd);
    carve_add(cv, &a->t1, S * D);
    carve_operand(cv, &a->t1s, S * D);
    carve_add(cv, &a->c, S * D);
    carve_operand(cv, &a->sc, S * D);
    for (int l = 0; l < m->cfg.depth; l++) {
        BlockActs *b = &a->blocks[l];
        carve_add(cv, &b->mod, S * 9 * D);
        carve_add(cv, &b->res[2], T * D);
        // With recompute only block 0 and the kept blocks carve the rest; share_block_acts points the
        // other re-made blocks at block 0's. recompute = 2: they also keep their attention outputs
        // and log-sum-exps.
        if (l > 0 && block_recomputed(m, l)) {
            for (int k = 0; k < 2 && m->cfg.recompute == 2; k++) {
                carve_operand(cv, &b->attn[k].att, T * D);
                carve_add(cv, &b->attn[k].lse, T * H);
            }
            continue;
        }
        for (int k = 0; k < 2; k++) {
            AttnActs *at = &b->attn[k];
            carve_operand(cv, &at->ln, T * D);
            carve_add(cv, &at->mean, T);
            carve_add(cv, &at->rstd, T);
            carve_add(cv, &at->qkv, T * 3 * D);
            carve_operand(cv, &at->qkn, T * 3 * D);
            carve_add(cv, &at->qrstd, T * 2 * H);
            carve_operand(cv, &at->att, T * D);
            carve_add(cv, &at->lse, T * H);
            carve_add(cv, &at->proj, T * D);
        }
        carve_operand(cv, &b->mln, T * D);
        carve_add(cv, &b->mmean, T);
        carve_add(cv, &b->mrstd, T);
        carve_add(cv, &b->fc1, T * RD);
        carve_operand(cv, &b->gelu, T * RD);
        carve_add(cv, &b->fc2, T * D);
        for (int k = 0; k < 2; k++) carve_add(cv, &b->res[k], T * D);
    }
    carve_add(cv, &a->fmod, S * 2 * D);
    carve_operand(cv, &a->fln, T * D);
    carve_add(cv, &a->fmean, T);
    carve_add(cv, &a->frstd, T);
    carve_add(cv, &a->fout, T * PPC);
    carve_add(cv, &a->pred, S * m->E);
    carve_add(cv, &a->loss, 1);
}

// Recompute: every re-made block but 0 keeps its own modulation and output (and with recompute = 2
// its attention outputs and log-sum-exps) and works in block 0's buffers for the rest, which hold
// one block's activations at a time (model_backward re-makes them block by block). The last
// keep_blocks blocks own all of theirs.
static void share_block_acts(Model *m) {
    BlockActs *b = m->a.blocks;
    for (int l = 1; l < m->cfg.depth; l++) {
        if (!block_recomputed(m, l)) continue;
        BlockActs keep = b[l];
        b[l] = b[0];
        b[l].mod = keep.mod, b[l].res[2] = keep.res[2];
        for (int k = 0; k < 2 && m->cfg.recompute == 2; k++)
            b[l].attn[k].att = keep.attn[k].att, b[l].attn[k].lse = keep.attn[k].lse;
    }
}

static void carve_grad_scratch(Model *m, Carve *cv) {
    size_t T = m->T, S = m->S, D = m->D, RD = m->RD, PPC = m->PPC;
    Grads *d = &m->d;
    carve_add(cv, &d->dres, T * D);
    carve_add(cv, &d->dbuf_a, T * 3 * D);
    carve_add(cv, &d->dbuf_b, T * (RD > 3 * D ? RD : 3 * D));
    carve_add(cv, &d->dmod, S * 9 * D);
    carve_add(cv, &d->dsc, S * D);
    carve_add(cv, &d->dc, S * D);
    carve_add(cv, &d->dt1s, S * D);
    carve_add(cv, &d->dt1, S * D);
    carve_add(cv, &d->doe, S * D);
    carve_add(cv, &d->dfmod, S * 2 * D);
    carve_add(cv, &d->dfout, T * PPC);
    carve_add(cv, &d->dpatches, T * m->PPCin);
    carve_add(cv, &d->dpred, S * m->E);
    carve_add(cv, &d->dxt, S * m->Ein);
}

// Fixed 2-D sin-cos positions: dims [0, D/2) encode the row, [D/2, D) the column.
static void fill_positions(real *pos, int n, int D) {
    int q = D / 4;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            real *row = pos + ((size_t)i * n + j) * D;
            for (int k = 0; k < q; k++) {
                double u = pow(10000.0, -(double)k / q);
                row[k] = (real)sin(i * u);
                row[q + k] = (real)cos(i * u);
                row[2 * q + k] = (real)sin(j * u);
                row[3 * q + k] = (real)cos(j * u);
            }
        }
}

// ----------------------------------------------------------------------------
// build / free

// The sizes of a model with batch B, from its config alone.
static Model *model_shape(const Config *cfg, const Backend *be, int B) {
    config_validate(cfg, "config");
    int n = cfg->frame_size / cfg->patch;
    // the step's tokens times its widest row, in double before any of it is stored in an int (checked
    // before the model is allocated: nothing is held when it ends the command)
    double tokens = (double)B * cfg->slots * n * n, widest = fmax(fmax((double)cfg->mlp_ratio, 3.0) * cfg->width,
                                                                  (double)cfg->patch * cfg->patch * 3 * cfg->channels);
    if (tokens * widest > 2e9)
        fc_die("config: a step of %d windows x %d slots x %d tokens, times its widest row (%.0f values), is %.3g "
               "values, over the 2e9 one step may hold: lower batch_size, frame_size, width or mlp_ratio, or raise "
               "patch", B, cfg->slots, n * n, widest, tokens * widest);
    Model *m = fc_calloc(1, sizeof(Model));
    m->cfg = *cfg;
    m->be = be;
    m->B = B, m->F = cfg->slots, m->N = n * n, m->S = B * cfg->slots, m->T = m->S * m->N;
    m->D = cfg->width, m->H = cfg->heads, m->RD = cfg->mlp_ratio * cfg->width;
    m->PPC = cfg->patch * cfg->patch * cfg->channels;
    m->E = cfg->channels * cfg->frame_size * cfg->frame_size;
    m->Cin = config_input_channels(cfg);
    m->PPCin = cfg->patch * cfg->patch * m->Cin, m->Ein = m->E * config_input_frames(cfg);
    return m;
}

static size_t carve_total(Carve *cv) {
    size_t sum = 0;
    for (int i = 0; i < cv->n; i++) sum += cv->bytes[i];
    free(cv->field), free(cv->bytes);
    return sum;
}

static void carve_inputs(Model *m, Carve *ci) {
    carve_add(ci, &m->pos, (size_t)m->N * m->D);
    carve_add(ci, &m->in.xt, (size_t)m->S * m->E);
    carve_add(ci, &m->in.t, m->S);
    carve_add(ci, &m->in.offset, m->S);
    carve_add(ci, &m->in.v, (size_t)m->S * m->E);
    carve_add(ci, &m->in.mask, m->S);
    carve_add(ci, &m->in.noise, (size_t)m->S * m->E);
}

// The linears' largest input, output and weight (ModelCounts): the shapes (M, K, N) of the
// linear_fwd and linear_gelu_fwd calls of model_forward below (their backward calls take the same).
static void linear_maxima(const Model *m, ModelCounts *k) {
    const size_t T = m->T, S = m->S, D = m->D, RD = m->RD, Fd = m->cfg.freq_dim;
    const size_t shapes[][3] = {
        {S, D, 9 * D}, {T, D, 3 * D}, {T, D, D}, {T, D, RD}, {T, RD, D},  // a block: adaLN, qkv, proj, fc1, fc2
        {T, m->PPCin, D}, {S, Fd, D}, {S, Fd, D}, {S, D, D},              // patches, offsets, the noise level
        {S, D, 2 * D}, {T, D, m->PPC},                                     // the final adaLN and linear
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t M = shapes[i][0], K = shapes[i][1], N = shapes[i][2];
        if (M * K > k->linear_in) k->linear_in = M * K;
        if (M * N > k->linear_out) k->linear_out = M * N;
        if (N * K > k->linear_weight) k->linear_weight = N * K;
    }
}

ModelCounts model_counts(const Config *cfg, int B, size_t operand_bytes) {
    Model *m = model_shape(cfg, NULL, B);
    m->p.blocks = fc_calloc(cfg->depth, sizeof(BlockParams));
    m->a.blocks = fc_calloc(cfg->depth, sizeof(BlockActs));
    layout_params(m, &m->p, NULL, 1);
    ModelCounts k = {m->n_params, 0, 0, 0, m->n_tensors, m->info, 0, 0, 0};
    linear_maxima(m, &k);
    Carve cv = {.operand_bytes = operand_bytes}, cg = {0}, ci = {0};
    carve_activations(m, &cv);
    carve_grad_scratch(m, &cg);
    carve_inputs(m, &ci);
    k.acts_bytes = carve_total(&cv), k.dscratch_bytes = carve_total(&cg), k.inputs_bytes = carve_total(&ci);
    free(m->p.blocks), free(m->a.blocks), free(m);
    return k;
}

int model_backend_check(const Config *cfg, const Backend *be, char *err, size_t errlen) {
    int dh = cfg->heads > 0 ? cfg->width / cfg->heads : 0;
    if (!be->attn_head_dim_ok || be->attn_head_dim_ok(dh)) return 0;
    char sizes[128] = "";  // the sizes it takes, from the backend itself
    for (int d = 1, n = 0; d <= 1024 && n < (int)sizeof sizes - 8; d++)
        if (be->attn_head_dim_ok(d)) n += snprintf(sizes + n, sizeof sizes - n, "%s%d", n ? ", " : "", d);
    snprintf(err, errlen, "width = %d, heads = %d: heads of %d values, and the %s backend's attention takes heads "
             "of %s (width / heads)", cfg->width, cfg->heads, dh, be->name, sizes);
    return -1;
}

Model *build_model(const Config *cfg, const Backend *be, int B) {
    Model *m = model_shape(cfg, be, B);
    int n = cfg->frame_size / cfg->patch;
    m->p.blocks = fc_calloc(cfg->depth, sizeof(BlockParams));
    m->g.blocks = fc_calloc(cfg->depth, sizeof(BlockParams));
    layout_params(m, &m->p, NULL, 1);  // record names, shapes, the total
    m->params_mem = be->alloc(sizeof(real) * m->n_params);
    m->grads_mem = be->alloc(sizeof(real) * m->n_params);
    layout_params(m, &m->p, m->params_mem, 0);
    layout_params(m, &m->g, m->grads_mem, 0);
    be->register_weights(m->params_mem, m->n_params);

    m->a.blocks = fc_calloc(cfg->depth, sizeof(BlockActs));
    Carve cv = {.operand_bytes = be->operand_bytes};
    carve_activations(m, &cv);
    m->acts_mem = carve_alloc(be, &cv, &m->acts_bytes);
    share_block_acts(m);
    Carve cg = {0};
    carve_grad_scratch(m, &cg);
    m->dscratch_mem = carve_alloc(be, &cg, &m->dscratch_bytes);
    Grads *d = &m->d;  // the two alternating buffers' aliases (model.h)
    d->dfc2 = d->dproj = d->dqkn = d->dln = d->dbuf_a;
    d->dfc1 = d->datt = d->dqkv = d->dbuf_b;
    Carve ci = {0};
    carve_inputs(m, &ci);
    m->inputs_mem = carve_alloc(be, &ci, &m->inputs_bytes);
    if (m->Cin == cfg->channels) m->a.xin = m->in.xt;  // nothing concatenated: the window is the input

    real *pos = fc_malloc(sizeof(real) * m->N * m->D);
    fill_positions(pos, n, m->D);
    be->upload(m->pos, pos, sizeof(real) * m->N * m->D);
    free(pos);
    return m;
}

void free_model(Model *m) {
    if (!m) return;
    m->be->unregister_weights(m->params_mem);
    m->be->free(m->params_mem);
    m->be->free(m->grads_mem);
    m->be->free(m->acts_mem);
    m->be->free(m->dscratch_mem);
    m->be->free(m->inputs_mem);
    free(m->p.blocks);
    free(m->g.blocks);
    free(m->a.blocks);
    free(m->info);
    free(m);
}

size_t model_memory_bytes(const Model *m) {
    return sizeof(real) * 2 * m->n_params + m->acts_bytes + m->dscratch_bytes + m->inputs_bytes;
}

const ParamInfo *model_find_param(const Model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->info[i].name, name)) return &m->info[i];
    return NULL;
}

// ----------------------------------------------------------------------------
// init

void model_init(Model *m, uint64_t seed, int random) {
    real *host = fc_malloc(sizeof(real) * m->n_params);
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        real *w = host + pi->offset;
        InitRule rule = pi->init;
        if (random && (rule == INIT_ZERO || rule == INIT_NORMAL_002)) rule = INIT_XAVIER;
        double bound = sqrt(6.0 / (pi->fan_in + pi->fan_out));
        switch (rule) {
        case INIT_XAVIER:
            philox_fill_uniform(w, pi->numel, (real)-bound, (real)bound, seed, 0, RNG_INIT, pi->offset);
            break;
        case INIT_NORMAL_002: philox_fill_normal(w, pi->numel, 0, (real)0.02, seed, 0, RNG_INIT, pi->offset); break;
        case INIT_ZERO: memset(w, 0, sizeof(real) * pi->numel); break;
        case INIT_BIAS:
            if (random)
                philox_fill_uniform(w, pi->numel, (real)-0.1, (real)0.1, seed, 0, RNG_INIT, pi->offset);
            else
                memset(w, 0, sizeof(real) * pi->numel);
            break;
        case INIT_NORM:
            if (random)
                philox_fill_uniform(w, pi->numel, (real)0.9, (real)1.1, seed, 0, RNG_INIT, pi->offset);
            else
                for (size_t k = 0; k < pi->numel; k++) w[k] = 1;
            break;
        }
    }
    m->be->upload(m->params_mem, host, sizeof(real) * m->n_params);
    free(host);
}

void model_zero_grad(Model *m) { m->be->zero(m->grads_mem, sizeof(real) * m->n_params); }

// ----------------------------------------------------------------------------
// forward

// The network's input (docs/network.md, "Conditioning"): slot s of window b carries its own frame,
// then the window's anchor frame, then its reference slot's frame (config_reference_slot), each as
// it stands in xt (a noise-augmented context frame as noised, a dropped one as noise).
static void assemble_input(Model *m) {
    const Config *c = &m->cfg;
    int parts = config_input_frames(c), anchor = config_anchor_slot(c);
    size_t E = (size_t)m->E, bytes = sizeof(real) * E;
    if (parts == 1) return;
    for (int b = 0; b < m->B; b++)
        for (int f = 0; f < m->F; f++) {
            real *dst = m->a.xin + ((size_t)b * m->F + f) * m->Ein;
            const real *window = m->in.xt + (size_t)b * m->F * E;
            int from[3] = {f, anchor, config_reference_slot(c, f)};
            for (int k = 0; k < parts; k++) m->be->copy(dst + k * E, window + from[k] * E, bytes);
        }
}

static AttnLayout attn_layout(const Model *m, int temporal) { return attn_layout_tokens(m->B, m->F, m->N, temporal); }

// The residual state that enters sub-layer k (0 spatial, 1 temporal, 2 MLP) of block l.
static real *block_input(Model *m, int l, int k) {
    if (k > 0) return m->a.blocks[l].res[k - 1];
    return l > 0 ? m->a.blocks[l - 1].res[2] : m->a.x0;
}

// Block l's forward, from block_input(m, l, 0). `again` re-runs it in backward (recompute): the
// modulation and the output the block keeps are there already and are left alone, and with
// recompute = 2 so are its attention outputs (attention is deterministic: the same bytes).
static void block_forward(Model *m, int l, int again) {
    const Backend *be = m->be;
    const BlockParams *bp = &m->p.blocks[l];
    BlockActs *b = &m->a.blocks[l];
    int S = m->S, N = m->N, T = m->T, D = m->D, H = m->H;
    long ms = 9L * D;
    if (!again) be->linear_fwd(b->mod, m->a.sc, bp->ada_w, bp->ada_b, S, D, 9 * D);
    for (int k = 0; k < 2; k++) {  // spatial, then temporal attention
        const AttnParams *ap = &bp->attn[k];
        AttnActs *at = &b->attn[k];
        const real *shift = b->mod + 3 * k * D, *scale = shift + D, *gate = shift + 2 * D;
        be->ln_mod_fwd(at->ln, at->mean, at->rstd, block_input(m, l, k), shift, scale, ms, S, N, D);
        be->linear_fwd(at->qkv, at->ln, ap->qkv_w, ap->qkv_b, T, D, 3 * D);
        be->qk_norm_fwd(at->qkn, at->qrstd, at->qkv, ap->q_norm, ap->k_norm, T, D, H);
        if (!again || m->cfg.recompute != 2) be->attn_fwd(at->att, at->lse, at->qkn, attn_layout(m, k), D, H);
        be->linear_fwd(at->proj, at->att, ap->proj_w, ap->proj_b, T, D, D);
        be->gated_add_fwd(b->res[k], block_input(m, l, k), at->proj, gate, ms, S, N, D);
    }
    const real *shift = b->mod + 6 * D, *scale = shift + D, *gate = shift + 2 * D;
    be->ln_mod_fwd(b->mln, b->mmean, b->mrstd, block_input(m, l, 2), shift, scale, ms, S, N, D);
    be->linear_gelu_fwd(b->fc1, b->gelu, b->mln, bp->fc1_w, bp->fc1_b, T, D, m->RD);
    be->linear_fwd(b->fc2, b->gelu, bp->fc2_w, bp->fc2_b, T, m->RD, D);
    if (!again) be->gated_add_fwd(b->res[2], block_input(m, l, 2), b->fc2, gate, ms, S, N, D);
}

void model_forward(Model *m) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Acts *a = &m->a;
    ParamPtrs *p = &m->p;
    int S = m->S, N = m->N, T = m->T, D = m->D, Fd = c->freq_dim, sz = c->frame_size;

    // patches, positions and time offsets -> the first residual state
    assemble_input(m);
    be->patchify_fwd(a->patches, a->xin, S, m->Cin, sz, sz, c->patch);
    be->linear_fwd(a->emb, a->patches, p->patch_w, p->patch_b, T, m->PPCin, D);
    be->sinusoid_fwd(a->osin, m->in.offset, 1, S, Fd);
    be->linear_fwd(a->oe, a->osin, p->off_w, p->off_b, S, Fd, D);
    be->add_pos_time_fwd(a->x0, a->emb, m->pos, a->oe, S, N, D);

    // per-slot conditioning from the noise level
    be->sinusoid_fwd(a->tsin, m->in.t, 1000, S, Fd);
    be->linear_fwd(a->t1, a->tsin, p->t0_w, p->t0_b, S, Fd, D);
    be->silu_fwd(a->t1s, a->t1, (size_t)S * D);
    be->linear_fwd(a->c, a->t1s, p->t2_w, p->t2_b, S, D, D);
    be->silu_fwd(a->sc, a->c, (size_t)S * D);

    for (int l = 0; l < c->depth; l++) block_forward(m, l, 0);

    // final modulated layer back to pixels
    real *x = block_input(m, c->depth, 0);
    be->linear_fwd(a->fmod, a->sc, p->final_ada_w, p->final_ada_b, S, D, 2 * D);
    be->ln_mod_fwd(a->fln, a->fmean, a->frstd, x, a->fmod, a->fmod + D, 2L * D, S, N, D);
    be->linear_fwd(a->fout, a->fln, p->final_w, p->final_b, T, D, m->PPC);
    be->unpatchify_fwd(a->pred, a->fout, S, c->channels, sz, sz, c->patch);
}

real model_loss(Model *m) {
    m->be->mse_masked_fwd(m->a.loss, m->a.pred, m->in.v, m->in.mask, m->S, m->E);
    real loss;
    m->be->download(&loss, m->a.loss, sizeof loss);
    return loss;
}

// ----------------------------------------------------------------------------
// backward

static void zero(const Model *m, real *buf, size_t count) { m->be->zero(buf, sizeof(real) * count); }

// The gradients from `from` up to *ready are final: tell m->grads_ready (model.h) and move *ready
// down to `from`.
static void grads_ready(Model *m, size_t *ready, const real *from) {
    size_t lo = (size_t)(from - m->grads_mem);
    if (m->grads_ready && lo < *ready) m->grads_ready(m->grads_ready_ctx, lo, *ready);
    *ready = lo;
}

void model_backward(Model *m) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    Acts *a = &m->a;
    Grads *d = &m->d;
    ParamPtrs *p = &m->p, *g = &m->g;
    int S = m->S, N = m->N, T = m->T, D = m->D, H = m->H, RD = m->RD, Fd = c->freq_dim, sz = c->frame_size;
    long ms = 9L * D;
    size_t ready = m->n_params;  // the gradients from here on are final
    // Only the gradients that ops add into before anything overwrites them start at zero (the
    // residual stream, the final modulation, the loss's, the time offsets', the input's); every
    // other buffer of the scratch has one producer that overwrites it (backend.h).
    zero(m, d->dres, (size_t)T * D);
    zero(m, d->dfmod, (size_t)S * 2 * D);
    zero(m, d->doe, (size_t)S * D);
    zero(m, d->dfout, (size_t)T * m->PPC);
    zero(m, d->dpred, (size_t)S * m->E);
    if (m->want_input_grad) zero(m, d->dxt, (size_t)S * m->Ein);

    // loss -> final layer
    be->mse_masked_bwd(d->dpred, a->pred, m->in.v, m->in.mask, 1, S, m->E);
    be->unpatchify_bwd(d->dfout, d->dpred, S, c->channels, sz, sz, c->patch);
    be->linear_bwd(d->dln, GRAD_SET, g->final_w, g->final_b, GRAD_SET, d->dfout, a->fln, p->final_w, T, D, m->PPC);
    be->ln_mod_bwd(d->dres, d->dfmod, d->dfmod + D, d->dln, block_input(m, c->depth, 0), a->fmean, a->frstd,
                   a->fmod + D, 2L * D, S, N, D);
    // dsc: the final layer's modulation gradient, then every block's adds into it
    be->linear_bwd(d->dsc, GRAD_SET, g->final_ada_w, g->final_ada_b, GRAD_SET, d->dfmod, a->sc, p->final_ada_w, S, D,
                   2 * D);
    grads_ready(m, &ready, g->final_ada_w);

    for (int l = c->depth - 1; l >= 0; l--) {
        BlockParams *bp = &p->blocks[l], *bg = &g->blocks[l];
        BlockActs *b = &a->blocks[l];
        // recompute: the shared buffers still hold the last re-made block's activations (the kept
        // blocks after it have their own); re-make the others'
        if (block_recomputed(m, l) && l + 1 < c->depth && block_recomputed(m, l + 1)) block_forward(m, l, 1);
        zero(m, d->dmod, (size_t)S * 9 * D);

        // MLP. d->dres holds d loss / d res[2]; the residual passes it through unchanged. Each
        // activation gradient below has one producer, which overwrites it (backend.h): nothing is
        // zeroed but dmod, which the adaLN chunks' ops add into.
        be->gated_add_bwd(NULL, d->dfc2, d->dmod + 8 * D, d->dres, b->fc2, b->mod + 8 * D, ms, S, N, D);
        be->linear_gelu_bwd(d->dfc1, bg->fc2_w, bg->fc2_b, GRAD_SET, d->dfc2, b->gelu, bp->fc2_w, b->fc1, T, RD, D);
        be->linear_bwd(d->dln, GRAD_SET, bg->fc1_w, bg->fc1_b, GRAD_SET, d->dfc1, b->mln, bp->fc1_w, T, D, RD);
        be->ln_mod_bwd(d->dres, d->dmod + 6 * D, d->dmod + 7 * D, d->dln, block_input(m, l, 2), b->mmean, b->mrstd,
                       b->mod + 7 * D, ms, S, N, D);

        for (int k = 1; k >= 0; k--) {  // temporal, then spatial attention
            AttnParams *ap = &bp->attn[k], *ag = &bg->attn[k];
            AttnActs *at = &b->attn[k];
            real *dshift = d->dmod + 3 * k * D;
            const real *scale = b->mod + (3 * k + 1) * D, *gate = b->mod + (3 * k + 2) * D;
            be->gated_add_bwd(NULL, d->dproj, dshift + 2 * D, d->dres, at->proj, gate, ms, S, N, D);
            be->linear_bwd(d->datt, GRAD_SET, ag->proj_w, ag->proj_b, GRAD_SET, d->dproj, at->att, ap->proj_w, T, D, D);
            be->attn_bwd(d->dqkn, d->datt, at->att, at->qkn, at->lse, attn_layout(m, k), D, H);
            be->qk_norm_bwd(d->dqkv, ag->q_norm, ag->k_norm, GRAD_SET, d->dqkn, at->qkv, at->qrstd, ap->q_norm,
                            ap->k_norm, T, D, H);
            be->linear_bwd(d->dln, GRAD_SET, ag->qkv_w, ag->qkv_b, GRAD_SET, d->dqkv, at->ln, ap->qkv_w, T, D, 3 * D);
            be->ln_mod_bwd(d->dres, dshift, dshift + D, d->dln, block_input(m, l, k), at->mean, at->rstd, scale, ms,
                           S, N, D);
        }
        be->linear_bwd(d->dsc, GRAD_ADD, bg->ada_w, bg->ada_b, GRAD_SET, d->dmod, a->sc, bp->ada_w, S, D, 9 * D);
        grads_ready(m, &ready, bg->ada_w);  // block l's tensors, from its adaLN on
    }

    // embeddings: d->dres now holds d loss / d x0
    zero(m, d->dln, (size_t)T * D);
    be->add_pos_time_bwd(d->dln, d->doe, d->dres, S, N, D);
    be->linear_bwd(NULL, GRAD_SET, g->off_w, g->off_b, GRAD_SET, d->doe, a->osin, p->off_w, S, Fd, D);
    be->linear_bwd(m->want_input_grad ? d->dpatches : NULL, GRAD_SET, g->patch_w, g->patch_b, GRAD_SET, d->dln,
                   a->patches, p->patch_w, T, m->PPCin, D);
    if (m->want_input_grad) be->patchify_bwd(d->dxt, d->dpatches, S, m->Cin, sz, sz, c->patch);

    // conditioning MLP
    be->silu_bwd(d->dc, d->dsc, a->c, (size_t)S * D);
    be->linear_bwd(d->dt1s, GRAD_SET, g->t2_w, g->t2_b, GRAD_SET, d->dc, a->t1s, p->t2_w, S, D, D);
    be->silu_bwd(d->dt1, d->dt1s, a->t1, (size_t)S * D);
    be->linear_bwd(NULL, GRAD_SET, g->t0_w, g->t0_b, GRAD_SET, d->dt1, a->tsin, p->t0_w, S, Fd, D);
    grads_ready(m, &ready, m->grads_mem);
}
