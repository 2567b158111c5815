// autoencoder_tiny.c: the tiny autoencoders (TAESD, TAESDXL, TAESD3, TAEF1, and TAEF2 with its
// GroupNorm pools) in diffusers' AutoencoderTiny layout: their tensors bound, and their encoder and
// decoder as passes over the op table (docs/autoencoders.md draws both).
#include <stdio.h>

#include "model/autoencoder_internal.h"

#define ENC_BLOCKS 10  // 1 + 3 + 3 + 3
#define DEC_BLOCKS 10  // 3 + 3 + 3 + 1

typedef struct {
    AeConv c0, c2, c4;  // conv, ReLU, conv, ReLU, conv; plus the input (the same width); ReLU
    int pool;           // TAEF2: first x + p3(ReLU(GroupNorm_4(p0(x)))), 1x1 convolutions without bias
    AeConv p0, p3;      // (4C, C, 1, 1), (C, 4C, 1, 1)
    AeNorm pn;          // (4C)
} TinyBlock;

#define POOL_GROUPS 4
#define POOL_EPS 1e-5f  // torch.nn.GroupNorm's default

typedef struct {
    int width;
    AeConv enc_in, enc_down[3], enc_out;
    TinyBlock enc_block[ENC_BLOCKS];
    AeConv dec_in, dec_up[3], dec_out;
    TinyBlock dec_block[DEC_BLOCKS];
} TinyNet;

// A block's convolutions, and its pool where the file has one (any of its tensors there binds all three).
static void bind_block(AeBinder *bd, TinyBlock *b, const char *part, int index, int C) {
    char name[96];
    for (int j = 0; j < 3; j++) {
        snprintf(name, sizeof name, "%s.layers.%d.conv.%d", part, index, 2 * j);
        ae_bind_conv(bd, j == 0 ? &b->c0 : j == 1 ? &b->c2 : &b->c4, name, C, C, 3, 1);
    }
    static const char *const pool_tensors[] = {"pool.0.weight", "pool.1.weight", "pool.1.bias", "pool.3.weight"};
    for (int j = 0; j < 4 && !b->pool; j++) {
        snprintf(name, sizeof name, "%s.layers.%d.%s", part, index, pool_tensors[j]);
        b->pool = st_find(bd->f, name) != NULL;
    }
    if (!b->pool) return;
    snprintf(name, sizeof name, "%s.layers.%d.pool.0", part, index);
    ae_bind_conv(bd, &b->p0, name, 4 * C, C, 1, 0);
    snprintf(name, sizeof name, "%s.layers.%d.pool.1", part, index);
    ae_bind_norm(bd, &b->pn, name, 4 * C);
    snprintf(name, sizeof name, "%s.layers.%d.pool.3", part, index);
    ae_bind_conv(bd, &b->p3, name, C, 4 * C, 1, 0);
}

// TAEF2's pool: cur += p3(ReLU(GroupNorm(p0(cur)))); the 4C map lives at the block's resolution (1/8 of
// the frame's side in TAEF2's files; map_values sizes the buffers for wherever a file has one).
static void pool(AeRun *r, const TinyBlock *blk) {
    const Backend *be = r->be;
    int none[4] = {0, 0, 0, 0}, C4 = 4 * r->C;
    real *a = r->t[0], *b = r->t[1];
    be->conv2d_fwd(a, r->cur, blk->p0.w, NULL, r->B, r->C, r->H, r->W, C4, 1, 1, none);
    be->group_norm_fwd(b, a, blk->pn.gamma, blk->pn.beta, r->B, C4, (long)r->H * r->W, POOL_GROUPS, POOL_EPS);
    be->act_fwd(b, b, (size_t)r->B * C4 * r->H * r->W, ACT_RELU);
    be->conv2d_fwd(a, b, blk->p3.w, NULL, r->B, C4, r->H, r->W, r->C, 1, 1, none);
    be->add_fwd(r->cur, r->cur, a, ae_values(r));
}

// cur = ReLU(conv4(ReLU(conv2(ReLU(conv0(cur))))) + cur)
static void block(AeRun *r, const TinyBlock *blk) {
    const Backend *be = r->be;
    int pad[4] = {1, 1, 1, 1};
    if (blk->pool) pool(r, blk);
    size_t n = ae_values(r);
    real *a = r->t[0], *b = r->t[1];
    be->conv2d_fwd(a, r->cur, blk->c0.w, blk->c0.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->act_fwd(a, a, n, ACT_RELU);
    be->conv2d_fwd(b, a, blk->c2.w, blk->c2.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->act_fwd(b, b, n, ACT_RELU);
    be->conv2d_fwd(a, b, blk->c4.w, blk->c4.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->add_fwd(a, a, r->cur, n);
    be->act_fwd(a, a, n, ACT_RELU);
    ae_swap(&r->cur, &r->t[0]);
}

static void encode(Autoencoder *ae, AeRun *r) {
    const TinyNet *t = ae->net;
    r->be->affine_fwd(r->cur, r->cur, ae_values(r), 0.5f, 0.5f);  // the tiny autoencoders read [0, 1]
    ae_conv(r, &t->enc_in, 1, NULL);
    int k = 0;
    for (int stage = 0; stage < 4; stage++) {
        if (stage) ae_conv(r, &t->enc_down[stage - 1], 2, NULL);
        for (int j = 0; j < (stage ? 3 : 1); j++) block(r, &t->enc_block[k++]);
    }
    ae_conv(r, &t->enc_out, 1, NULL);
    if (ae->scale != 1 || ae->shift != 0)  // --vae-scale, --vae-shift (the family's own: 1 and 0, as it is)
        r->be->affine_fwd(r->cur, r->cur, ae_values(r), (real)ae->scale, (real)(-ae->shift * ae->scale));
}

static void decode(Autoencoder *ae, AeRun *r) {
    const TinyNet *t = ae->net;
    if (ae->scale != 1 || ae->shift != 0)
        r->be->affine_fwd(r->cur, r->cur, ae_values(r), (real)(1 / ae->scale), (real)ae->shift);
    r->be->act_fwd(r->cur, r->cur, ae_values(r), ACT_TANH_CLAMP);  // the soft clamp the decoders start with
    ae_conv(r, &t->dec_in, 1, NULL);
    r->be->act_fwd(r->cur, r->cur, ae_values(r), ACT_RELU);
    int k = 0;
    for (int stage = 0; stage < 4; stage++) {
        for (int j = 0; j < (stage < 3 ? 3 : 1); j++) block(r, &t->dec_block[k++]);
        if (stage < 3) {
            ae_upsample(r);
            ae_conv(r, &t->dec_up[stage], 1, NULL);
        }
    }
    ae_conv(r, &t->dec_out, 1, NULL);
    r->be->affine_fwd(r->cur, r->cur, ae_values(r), 2, -1);  // [0, 1] to [-1, 1]
}

// The largest map: the width (or the 3 colours) at full resolution, or a pool's 4 x width at its block's.
static size_t map_values(const Autoencoder *ae, int H, int W) {
    const TinyNet *t = ae->net;
    int C = t->width > 3 ? t->width : 3;
    C = C > ae->latent ? C : ae->latent;
    size_t most = (size_t)C * H * W;
    for (int k = 0; k < ENC_BLOCKS + DEC_BLOCKS; k++) {
        int enc = k < ENC_BLOCKS, j = enc ? k : k - ENC_BLOCKS;
        if (!(enc ? t->enc_block[j] : t->dec_block[j]).pool) continue;
        // the block's stage: encoder blocks 0 | 1-3 | 4-6 | 7-9 at 1, 1/2, 1/4, 1/8 of the side;
        // decoder blocks 0-2 | 3-5 | 6-8 | 9 at 1/8, 1/4, 1/2, 1
        int stage = enc ? (j + 2) / 3 : 3 - j / 3, f = 1 << stage;
        size_t pooled = (size_t)4 * t->width * ((H + f - 1) / f) * ((W + f - 1) / f);
        most = pooled > most ? pooled : most;
    }
    return most;
}

int ae_bind_tiny(Autoencoder *ae, AeBinder *bd) {
    const StEntry *e0 = st_find(bd->f, "encoder.layers.0.weight"), *d0 = st_find(bd->f, "decoder.layers.0.weight");
    const StEntry *w = e0 ? e0 : d0;
    if (w->ndim != 4 || w->shape[0] < 1 || w->shape[0] > 4096 || w->shape[1] < 1 || w->shape[1] > 4096)
        return fc_errf(bd->err, bd->errlen, "%s: tensor %s is not a convolution's weight (C_out, C_in, 3, 3)", bd->path,
                       w->name);
    int C = (int)w->shape[0], L = e0 ? 0 : (int)d0->shape[1];
    if (e0) {
        const StEntry *out = st_find(bd->f, "encoder.layers.14.weight");
        L = out && out->ndim == 4 ? (int)out->shape[0] : 4;  // a missing one is named by ae_bind below
    }
    if (L < 1 || L > 4096) return fc_errf(bd->err, bd->errlen, "%s: %d latent channels", bd->path, L);
    TinyNet *t = fc_calloc(1, sizeof *t);
    ae->net = t, t->width = C;
    ae->family = AE_TAESD, ae->latent = L, ae->factor = 8, ae->has_enc = e0 != NULL, ae->has_dec = d0 != NULL;
    ae->encode = encode, ae->decode = decode, ae->map_values = map_values;
    snprintf(ae->what, sizeof ae->what, "TAESD (tiny autoencoder), width %d", C);
    char name[96];
    if (ae->has_enc) {
        ae_bind_conv(bd, &t->enc_in, "encoder.layers.0", C, 3, 3, 1);
        int index = 1, k = 0;
        for (int stage = 0; stage < 4; stage++) {
            if (stage) {
                snprintf(name, sizeof name, "encoder.layers.%d", index++);
                ae_bind_conv(bd, &t->enc_down[stage - 1], name, C, C, 3, 0);
            }
            for (int j = 0; j < (stage ? 3 : 1); j++) bind_block(bd, &t->enc_block[k++], "encoder", index++, C);
        }
        snprintf(name, sizeof name, "encoder.layers.%d", index);
        ae_bind_conv(bd, &t->enc_out, name, L, C, 3, 1);
    }
    if (ae->has_dec) {
        ae_bind_conv(bd, &t->dec_in, "decoder.layers.0", C, L, 3, 1);
        int index = 2, k = 0;  // 1 is the ReLU
        for (int stage = 0; stage < 4; stage++) {
            for (int j = 0; j < (stage < 3 ? 3 : 1); j++) bind_block(bd, &t->dec_block[k++], "decoder", index++, C);
            if (stage < 3) {
                index++;  // the Upsample
                snprintf(name, sizeof name, "decoder.layers.%d", index++);
                ae_bind_conv(bd, &t->dec_up[stage], name, C, C, 3, 0);
            }
        }
        snprintf(name, sizeof name, "decoder.layers.%d", index);
        ae_bind_conv(bd, &t->dec_out, name, 3, C, 3, 1);
    }
    int pools = 0;
    for (int k = 0; k < ENC_BLOCKS; k++) pools += t->enc_block[k].pool;
    for (int k = 0; k < DEC_BLOCKS; k++) pools += t->dec_block[k].pool;
    if (pools)
        snprintf(ae->what, sizeof ae->what, "TAESD (tiny autoencoder) with %d GroupNorm pools (TAEF2), width %d", pools,
                 C);
    return bd->failed;
}
