// autoencoder_kl.c: AutoencoderKL (Stable Diffusion 1.x/2.x, SDXL, SD3, FLUX.1) in diffusers' layout or
// the original single file's: the configuration read from the tensors' shapes, every tensor bound,
// and the encoder (the posterior's mean) and the decoder as passes over the op table
// (docs/autoencoders.md draws both).
#include <stdio.h>
#include <string.h>

#include "model/autoencoder_internal.h"

#define KL_MAX_BLOCKS 8  // resolution stages
#define KL_MAX_LAYERS 4  // resnets a stage (the decoder's: layers_per_block + 1)
#define KL_GROUPS 32     // GroupNorm groups, every family
#define KL_EPS 1e-6

typedef struct {
    AeNorm norm1, norm2;
    AeConv conv1, conv2, shortcut;  // shortcut.w NULL: the input as it is
} Resnet;

typedef struct {
    AeNorm norm;
    AeConv q, k, v, out;  // 1x1 convolutions (a Linear's weights are the same numbers)
} Attention;

typedef struct {
    Resnet res1, res2;
    Attention attn;
} Mid;

typedef struct {
    int blocks, layers, ch[KL_MAX_BLOCKS];  // ch: the encoder's stages, widest last
    int ldm;                                // the original single file's names
    AeConv enc_in, enc_down[KL_MAX_BLOCKS], enc_out, quant;  // quant.w NULL: none
    Resnet enc_res[KL_MAX_BLOCKS][KL_MAX_LAYERS];
    Mid enc_mid;
    AeNorm enc_norm_out;
    AeConv dec_in, dec_up[KL_MAX_BLOCKS], dec_out, post_quant;
    Resnet dec_res[KL_MAX_BLOCKS][KL_MAX_LAYERS + 1];
    Mid dec_mid;
    AeNorm dec_norm_out;
} KlNet;

// ----------------------------------------------------------------------------
// names: diffusers' (encoder.down_blocks.I.resnets.J...) or the original's (encoder.down.I.block.J...)

// A resnet's name: the encoder's stage i (down) or the decoder's stage i in the order it runs (up; the
// original file numbers those from the deepest: n - 1 - i).
static void resnet_name(const KlNet *k, char *out, size_t len, int dec, int i, int j) {
    if (k->ldm) snprintf(out, len, dec ? "decoder.up.%d.block.%d" : "encoder.down.%d.block.%d", dec ? k->blocks - 1 - i : i, j);
    else snprintf(out, len, dec ? "decoder.up_blocks.%d.resnets.%d" : "encoder.down_blocks.%d.resnets.%d", i, j);
}

static void sample_name(const KlNet *k, char *out, size_t len, int dec, int i) {
    if (k->ldm) snprintf(out, len, dec ? "decoder.up.%d.upsample.conv" : "encoder.down.%d.downsample.conv", dec ? k->blocks - 1 - i : i);
    else snprintf(out, len, dec ? "decoder.up_blocks.%d.upsamplers.0.conv" : "encoder.down_blocks.%d.downsamplers.0.conv", i);
}

static void bind_resnet(AeBinder *bd, const KlNet *k, Resnet *r, const char *name, int cin, int cout) {
    char n[160];
    snprintf(n, sizeof n, "%s.norm1", name), ae_bind_norm(bd, &r->norm1, n, cin);
    snprintf(n, sizeof n, "%s.conv1", name), ae_bind_conv(bd, &r->conv1, n, cout, cin, 3, 1);
    snprintf(n, sizeof n, "%s.norm2", name), ae_bind_norm(bd, &r->norm2, n, cout);
    snprintf(n, sizeof n, "%s.conv2", name), ae_bind_conv(bd, &r->conv2, n, cout, cout, 3, 1);
    r->shortcut = (AeConv){0};
    if (cin != cout) snprintf(n, sizeof n, "%s.%s", name, k->ldm ? "nin_shortcut" : "conv_shortcut"), ae_bind_conv(bd, &r->shortcut, n, cout, cin, 1, 1);
}

static void bind_mid(AeBinder *bd, const KlNet *k, Mid *m, const char *part, int C) {
    char n[160], base[96];
    snprintf(n, sizeof n, k->ldm ? "%s.mid.block_1" : "%s.mid_block.resnets.0", part), bind_resnet(bd, k, &m->res1, n, C, C);
    snprintf(n, sizeof n, k->ldm ? "%s.mid.block_2" : "%s.mid_block.resnets.1", part), bind_resnet(bd, k, &m->res2, n, C, C);
    snprintf(base, sizeof base, k->ldm ? "%s.mid.attn_1" : "%s.mid_block.attentions.0", part);
    // diffusers' names, its older ones (query, key, value, proj_attn), or the original's
    snprintf(n, sizeof n, "%s.to_q.weight", base);
    int legacy = !k->ldm && !ae_find(bd, n);
    const char *names[5] = {"group_norm", "to_q", "to_k", "to_v", "to_out.0"};
    if (k->ldm) names[0] = "norm", names[1] = "q", names[2] = "k", names[3] = "v", names[4] = "proj_out";
    if (legacy) names[0] = "group_norm", names[1] = "query", names[2] = "key", names[3] = "value", names[4] = "proj_attn";
    snprintf(n, sizeof n, "%s.%s", base, names[0]), ae_bind_norm(bd, &m->attn.norm, n, C);
    AeConv *c[4] = {&m->attn.q, &m->attn.k, &m->attn.v, &m->attn.out};
    for (int i = 0; i < 4; i++) snprintf(n, sizeof n, "%s.%s", base, names[i + 1]), ae_bind_conv(bd, c[i], n, C, C, 1, 1);
}

// ----------------------------------------------------------------------------
// the passes

// t[slot] = SiLU(GroupNorm(x)) of the run's shape (x may be t[slot]).
static void norm_silu(AeRun *r, real *y, const real *x, const AeNorm *n) {
    r->be->group_norm_fwd(y, x, n->gamma, n->beta, r->B, r->C, (long)r->H * r->W, KL_GROUPS, (real)KL_EPS);
    r->be->act_fwd(y, y, ae_values(r), ACT_SILU);
}

static void conv_into(AeRun *r, real *y, const real *x, const AeConv *c) {
    int p = c->k / 2, pad[4] = {p, p, p, p};
    r->be->conv2d_fwd(y, x, c->w, c->b, r->B, c->cin, r->H, r->W, c->cout, c->k, 1, pad);
}

// cur = shortcut(cur) + conv2(SiLU(GN2(conv1(SiLU(GN1(cur))))))
static void resnet(AeRun *r, const Resnet *n) {
    real *a = r->t[0], *b = r->t[1];
    norm_silu(r, a, r->cur, &n->norm1);
    conv_into(r, b, a, &n->conv1);
    r->C = n->conv1.cout;  // conv_into reads its channels from the convolution
    norm_silu(r, a, b, &n->norm2);
    conv_into(r, b, a, &n->conv2);
    if (n->shortcut.w) conv_into(r, a, r->cur, &n->shortcut);
    r->be->add_fwd(b, b, n->shortcut.w ? a : r->cur, ae_values(r));
    ae_swap(&r->cur, &r->t[1]);
}

// cur = cur + out(attention(q, k, v of GroupNorm(cur)))
static void attention(AeRun *r, const Attention *at) {
    real *x = r->t[0], *q = r->t[1], *k = r->t[2], *v = r->t[3], *o = r->t[4];
    r->be->group_norm_fwd(x, r->cur, at->norm.gamma, at->norm.beta, r->B, r->C, (long)r->H * r->W, KL_GROUPS,
                          (real)KL_EPS);
    conv_into(r, q, x, &at->q), conv_into(r, k, x, &at->k), conv_into(r, v, x, &at->v);
    r->be->image_attn_fwd(o, q, k, v, r->B, r->C, (long)r->H * r->W);
    conv_into(r, x, o, &at->out);
    r->be->add_fwd(x, x, r->cur, ae_values(r));
    ae_swap(&r->cur, &r->t[0]);
}

static void mid(AeRun *r, const Mid *m) {
    resnet(r, &m->res1);
    attention(r, &m->attn);
    resnet(r, &m->res2);
}

static void encode(Autoencoder *ae, AeRun *r) {
    const KlNet *k = ae->net;
    ae_conv(r, &k->enc_in, 1, NULL);
    const int down_pad[4] = {0, 0, 1, 1};  // the right and bottom edges padded by one, then stride 2 without padding
    for (int i = 0; i < k->blocks; i++) {
        for (int j = 0; j < k->layers; j++) resnet(r, &k->enc_res[i][j]);
        if (i < k->blocks - 1) ae_conv(r, &k->enc_down[i], 2, down_pad);
    }
    mid(r, &k->enc_mid);
    norm_silu(r, r->cur, r->cur, &k->enc_norm_out);
    ae_conv(r, &k->enc_out, 1, NULL);
    if (k->quant.w) ae_conv(r, &k->quant, 1, NULL);
    // the posterior's mean: the first half of each image's channels
    size_t half = (size_t)ae->latent * r->H * r->W;
    for (int b = 0; b < r->B; b++) r->be->copy(r->t[0] + b * half, r->cur + b * 2 * half, sizeof(real) * half);
    ae_swap(&r->cur, &r->t[0]);
    r->C = ae->latent;
    r->be->affine_fwd(r->cur, r->cur, ae_values(r), (real)ae->scale, (real)(-ae->shift * ae->scale));
}

static void decode(Autoencoder *ae, AeRun *r) {
    const KlNet *k = ae->net;
    r->be->affine_fwd(r->cur, r->cur, ae_values(r), (real)(1 / ae->scale), (real)ae->shift);
    if (k->post_quant.w) ae_conv(r, &k->post_quant, 1, NULL);
    ae_conv(r, &k->dec_in, 1, NULL);
    mid(r, &k->dec_mid);
    for (int i = 0; i < k->blocks; i++) {
        for (int j = 0; j <= k->layers; j++) resnet(r, &k->dec_res[i][j]);
        if (i < k->blocks - 1) {
            ae_upsample(r);
            ae_conv(r, &k->dec_up[i], 1, NULL);
        }
    }
    norm_silu(r, r->cur, r->cur, &k->dec_norm_out);
    ae_conv(r, &k->dec_out, 1, NULL);
}

// The largest map of either pass, per image, for frames of H x W: each stage's width at its
// resolution, and the decoder's maps just upsampled (still the width of the deeper stage).
static size_t map_values(const Autoencoder *ae, int H, int W) {
    const KlNet *k = ae->net;
    size_t most = (size_t)3 * H * W, n = (size_t)2 * ae->latent * (H >> (k->blocks - 1)) * (W >> (k->blocks - 1));
    most = n > most ? n : most;
    for (int i = 0; i < k->blocks; i++) {
        size_t at = (size_t)(H >> i) * (W >> i), here = (size_t)k->ch[i] * at;
        size_t up = i > 0 ? (size_t)k->ch[i] * (size_t)(H >> (i - 1)) * (W >> (i - 1)) : 0;  // ch[i] upsampled
        most = here > most ? here : most;
        most = up > most ? up : most;
    }
    return most;
}

// ----------------------------------------------------------------------------
// binding

// The stages' widths from the encoder's first resnets (or the decoder's, deepest first), and the
// resnets a stage. 0, or -1 with err.
static int read_config(KlNet *k, AeBinder *bd, int has_enc) {
    char n[160];
    int dec = !has_enc;
    for (k->blocks = 0; k->blocks < KL_MAX_BLOCKS; k->blocks++) {
        resnet_name(k, n, sizeof n, 0, k->blocks, 0);  // counted on the encoder's names...
        if (dec) {  // ...or on the decoder's, numbered as the file numbers them
            if (k->ldm) snprintf(n, sizeof n, "decoder.up.%d.block.0", k->blocks);
            else snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.0", k->blocks);
        }
        strcat(n, ".conv1.weight");
        if (!ae_find(bd, n)) break;
    }
    if (k->blocks < 1) return fc_errf(bd->err, bd->errlen, "%s: an AutoencoderKL without a resnet (no %s)", bd->path, n);
    for (int i = 0; i < k->blocks; i++) {
        int file_i = dec && !k->ldm ? k->blocks - 1 - i : i;  // the encoder's stage i is the decoder's (diffusers) n-1-i
        if (dec) {
            if (k->ldm) snprintf(n, sizeof n, "decoder.up.%d.block.0.conv1.weight", file_i);
            else snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.0.conv1.weight", file_i);
        } else {
            resnet_name(k, n, sizeof n, 0, i, 0);
            strcat(n, ".conv1.weight");
        }
        const StEntry *e = ae_find(bd, n);
        if (e->ndim != 4 || e->shape[0] < 1 || e->shape[0] > 8192 || e->shape[0] % KL_GROUPS)
            return fc_errf(bd->err, bd->errlen, "%s: tensor %s: %ld output channels, not a positive multiple of the %d "
                           "groups of GroupNorm", bd->path, e->name, e->ndim ? e->shape[0] : 0, KL_GROUPS);
        k->ch[i] = (int)e->shape[0];
    }
    for (k->layers = 0; k->layers < KL_MAX_LAYERS + 1; k->layers++) {
        if (dec) {
            if (k->ldm) snprintf(n, sizeof n, "decoder.up.0.block.%d.conv1.weight", k->layers);
            else snprintf(n, sizeof n, "decoder.up_blocks.0.resnets.%d.conv1.weight", k->layers);
        } else {
            resnet_name(k, n, sizeof n, 0, 0, k->layers);
            strcat(n, ".conv1.weight");
        }
        if (!ae_find(bd, n)) break;
    }
    if (dec) k->layers--;  // the decoder's stages have one resnet more
    if (k->layers < 1 || k->layers > KL_MAX_LAYERS)
        return fc_errf(bd->err, bd->errlen, "%s: %d resnets a stage (1 to %d read)", bd->path, k->layers, KL_MAX_LAYERS);
    return 0;
}

int ae_bind_kl(Autoencoder *ae, AeBinder *bd) {
    if (st_find(bd->f, "first_stage_model.encoder.conv_in.weight") || st_find(bd->f, "first_stage_model.decoder.conv_in.weight"))
        bd->prefix = "first_stage_model.";
    KlNet *k = fc_calloc(1, sizeof *k);
    ae->net = k;
    k->ldm = ae_find(bd, "encoder.down.0.block.0.conv1.weight") || ae_find(bd, "decoder.up.0.block.0.conv1.weight");
    const StEntry *ein = ae_find(bd, "encoder.conv_in.weight"), *din = ae_find(bd, "decoder.conv_in.weight");
    ae->has_enc = ein != NULL, ae->has_dec = din != NULL;
    if (read_config(k, bd, ae->has_enc)) return -1;
    int n = k->blocks, top = k->ch[n - 1], L;
    if (ae->has_enc) {
        const StEntry *out = ae_find(bd, "encoder.conv_out.weight");
        L = out && out->ndim == 4 ? (int)(out->shape[0] / 2) : 4;  // a missing one is named by ae_bind below
    } else {
        L = din->ndim == 4 ? (int)din->shape[1] : 0;
    }
    if (L < 1 || L > 4096) return fc_errf(bd->err, bd->errlen, "%s: %d latent channels", bd->path, L);
    ae->family = AE_KL, ae->latent = L, ae->factor = 1 << (n - 1);
    ae->encode = encode, ae->decode = decode, ae->map_values = map_values;
    ae->scale = L == 4 ? 0.18215 : L == 16 ? 1.5305 : 1, ae->shift = L == 16 ? 0.0609 : 0;
    char name[160];
    // The quant convs come as a pair or not at all (SD3's and FLUX's autoencoders have neither): a
    // file of both halves with one of them is damaged, and its latents would be silently wrong.
    int has_quant = ae_find(bd, "quant_conv.weight") != NULL, has_post = ae_find(bd, "post_quant_conv.weight") != NULL;
    if (ae->has_enc && ae->has_dec && has_quant != has_post && !bd->failed)
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: tensor %s%s is missing, where %s%s is there (an autoencoder has "
                             "both quant convs or neither)", bd->path, bd->prefix,
                             has_quant ? "post_quant_conv.weight" : "quant_conv.weight", bd->prefix,
                             has_quant ? "quant_conv.weight" : "post_quant_conv.weight");
    if (ae->has_enc) {
        ae_bind_conv(bd, &k->enc_in, "encoder.conv_in", k->ch[0], 3, 3, 1);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < k->layers; j++) {
                resnet_name(k, name, sizeof name, 0, i, j);
                bind_resnet(bd, k, &k->enc_res[i][j], name, j == 0 ? k->ch[i > 0 ? i - 1 : 0] : k->ch[i], k->ch[i]);
            }
            if (i < n - 1) sample_name(k, name, sizeof name, 0, i), ae_bind_conv(bd, &k->enc_down[i], name, k->ch[i], k->ch[i], 3, 1);
        }
        bind_mid(bd, k, &k->enc_mid, "encoder", top);
        ae_bind_norm(bd, &k->enc_norm_out, k->ldm ? "encoder.norm_out" : "encoder.conv_norm_out", top);
        ae_bind_conv(bd, &k->enc_out, "encoder.conv_out", 2 * L, top, 3, 1);
        if (ae_find(bd, "quant_conv.weight")) ae_bind_conv(bd, &k->quant, "quant_conv", 2 * L, 2 * L, 1, 1);
    }
    if (ae->has_dec) {
        if (ae_find(bd, "post_quant_conv.weight")) ae_bind_conv(bd, &k->post_quant, "post_quant_conv", L, L, 1, 1);
        ae_bind_conv(bd, &k->dec_in, "decoder.conv_in", top, L, 3, 1);
        bind_mid(bd, k, &k->dec_mid, "decoder", top);
        int prev = top;
        for (int i = 0; i < n; i++) {
            int c = k->ch[n - 1 - i];
            for (int j = 0; j <= k->layers; j++) {
                resnet_name(k, name, sizeof name, 1, i, j);
                bind_resnet(bd, k, &k->dec_res[i][j], name, j == 0 ? prev : c, c);
            }
            prev = c;
            if (i < n - 1) sample_name(k, name, sizeof name, 1, i), ae_bind_conv(bd, &k->dec_up[i], name, c, c, 3, 1);
        }
        ae_bind_norm(bd, &k->dec_norm_out, k->ldm ? "decoder.norm_out" : "decoder.conv_norm_out", k->ch[0]);
        ae_bind_conv(bd, &k->dec_out, "decoder.conv_out", 3, k->ch[0], 3, 1);
    }
    char widths[96] = "";
    for (int i = 0; i < n; i++) snprintf(widths + strlen(widths), sizeof widths - strlen(widths), "%s%d", i ? "/" : "", k->ch[i]);
    int quant = ae_find(bd, "quant_conv.weight") || ae_find(bd, "post_quant_conv.weight");
    snprintf(ae->what, sizeof ae->what, "AutoencoderKL (%s layout%s), widths %s, %d resnet%s a stage, %s", k->ldm ? "original" : "diffusers",
             *bd->prefix ? ", first_stage_model." : "", widths, k->layers, k->layers == 1 ? "" : "s",
             quant ? "quant convs" : "no quant convs");
    return bd->failed;
}
