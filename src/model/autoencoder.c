// autoencoder.c: per-frame autoencoders read from safetensors files and run forward against the op
// table (see autoencoder.h; the math is docs/autoencoders.md). The weights are carved out of one
// backend allocation; three activation buffers of the largest map the run needs are reused layer
// after layer.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/autoencoder.h"
#include "formats/safetensors.h"

// ----------------------------------------------------------------------------
// the network's pieces

typedef struct {
    real *w, *b;  // (cout, cin, k, k) and (cout), or b NULL: no bias; backend memory
    int cout, cin, k;
} Conv;

typedef struct {
    Conv c0, c2, c4;  // conv, ReLU, conv, ReLU, conv; plus the input (the same width: no skip conv); ReLU
} TinyBlock;

// The tiny autoencoders' stages: blocks per stage, and which Sequential index each layer has in
// diffusers' EncoderTiny / DecoderTiny.
#define TAESD_ENC_BLOCKS 10  // 1 + 3 + 3 + 3
#define TAESD_DEC_BLOCKS 10  // 3 + 3 + 3 + 1

struct Autoencoder {
    const Backend *be;
    int family, width, latent, has_enc, has_dec;
    real *params;  // backend memory, every tensor at its offset
    size_t n_params;
    Conv enc_in, enc_down[3], enc_out;
    TinyBlock enc_block[TAESD_ENC_BLOCKS];
    Conv dec_in, dec_up[3], dec_out;
    TinyBlock dec_block[TAESD_DEC_BLOCKS];
    real *buf[3];  // backend memory: activations
    size_t buf_values;
    char what[256];
};

// ----------------------------------------------------------------------------
// binding tensors: every one the family needs, checked against the file before anything is allocated

typedef struct {
    const StFile *f;
    const char *path;
    real **slot[160];  // where each tensor's backend pointer goes
    const StEntry *entry[160];
    size_t offset[160], total;
    int n;
    char *err;
    size_t errlen;
    int failed;
} Binder;

// Tensor `name` of the given shape (dims < 0 end it), its pointer to be set into *slot.
static void bind(Binder *bd, real **slot, const char *name, int d0, int d1, int d2, int d3) {
    if (bd->failed) return;
    int want[4] = {d0, d1, d2, d3}, nd = 0;
    while (nd < 4 && want[nd] >= 0) nd++;
    const StEntry *e = st_find(bd->f, name);
    char shape[64] = "(", *p = shape + 1;
    for (int i = 0; i < nd; i++) p += snprintf(p, 12, "%s%d", i ? ", " : "", want[i]);
    snprintf(p, 4, ")");
    if (!e) {
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: tensor %s %s is missing", bd->path, name, shape);
        return;
    }
    int ok = e->ndim == nd && (!strcmp(e->dtype, "F32") || !strcmp(e->dtype, "F16") || !strcmp(e->dtype, "BF16"));
    for (int i = 0; ok && i < nd; i++) ok = e->shape[i] == want[i];
    if (!ok) {
        char got[96] = "(", *q = got + 1;
        for (int i = 0; i < e->ndim && i < 6; i++) q += snprintf(q, 14, "%s%ld", i ? ", " : "", e->shape[i]);
        snprintf(q, 4, ")");
        bd->failed = fc_errf(bd->err, bd->errlen, "%s: tensor %s is %s %s, expected F32, F16 or BF16 %s", bd->path,
                             name, e->dtype, got, shape);
        return;
    }
    if (bd->n == (int)(sizeof bd->slot / sizeof bd->slot[0])) fc_die("autoencoder: more tensors than the binder holds");
    size_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= (size_t)want[i];
    bd->slot[bd->n] = slot, bd->entry[bd->n] = e, bd->offset[bd->n] = bd->total;
    bd->total += numel, bd->n++;
}

static void bind_conv(Binder *bd, Conv *c, const char *prefix, int cout, int cin, int k, int bias) {
    char name[128];
    *c = (Conv){NULL, NULL, cout, cin, k};
    snprintf(name, sizeof name, "%s.weight", prefix);
    bind(bd, &c->w, name, cout, cin, k, k);
    if (bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        bind(bd, &c->b, name, cout, -1, -1, -1);
    }
}

static void bind_block(Binder *bd, TinyBlock *b, const char *part, int index, int C) {
    char prefix[96];
    for (int j = 0; j < 3; j++) {
        snprintf(prefix, sizeof prefix, "%s.layers.%d.conv.%d", part, index, 2 * j);
        bind_conv(bd, j == 0 ? &b->c0 : j == 1 ? &b->c2 : &b->c4, prefix, C, C, 3, 1);
    }
}

// One value of a tensor's data as a double (F32, F16 or BF16, little-endian).
static double element(const StEntry *e, const uint8_t *data, size_t i) {
    if (!strcmp(e->dtype, "F32")) {
        float v;
        memcpy(&v, data + 4 * i, 4);
        return v;
    }
    uint16_t h = (uint16_t)(data[2 * i] | data[2 * i + 1] << 8);
    if (!strcmp(e->dtype, "BF16")) {
        uint32_t u = (uint32_t)h << 16;
        float v;
        memcpy(&v, &u, 4);
        return v;
    }
    int exp = h >> 10 & 31, mant = h & 1023;  // F16
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : ldexp(mant + 1024, exp - 25);
    return h >> 15 ? -v : v;
}

// Allocate the weights and upload every bound tensor. 0, or -1 with err (a value that is not finite).
static int upload_bound(Autoencoder *ae, Binder *bd) {
    ae->n_params = bd->total;
    real *host = fc_malloc(sizeof(real) * (bd->total ? bd->total : 1));
    for (int t = 0; t < bd->n; t++) {
        const StEntry *e = bd->entry[t];
        const uint8_t *data = st_data(bd->f, e);
        size_t numel = (t + 1 < bd->n ? bd->offset[t + 1] : bd->total) - bd->offset[t];
        for (size_t i = 0; i < numel; i++) {
            double v = element(e, data, i);
            if (!isfinite(v)) {
                free(host);
                return fc_errf(bd->err, bd->errlen, "%s: tensor %s holds a value that is not finite (element %zu)",
                               bd->path, e->name, i);
            }
            host[bd->offset[t] + i] = (real)v;
        }
    }
    ae->params = ae->be->alloc(sizeof(real) * (bd->total ? bd->total : 1));
    ae->be->upload(ae->params, host, sizeof(real) * bd->total);
    free(host);
    for (int t = 0; t < bd->n; t++) *bd->slot[t] = ae->params + bd->offset[t];
    return 0;
}

// ----------------------------------------------------------------------------
// the families

// What a file that matches no family read here looks like, for the error line.
static const char *other_family(const StFile *f) {
    if (st_find(f, "encoder.down_blocks.0.resnets.0.conv1.weight") || st_find(f, "decoder.up_blocks.0.resnets.0.conv1.weight"))
        return "an AutoencoderKL in diffusers' layout, which this version does not read yet";
    if (st_find(f, "first_stage_model.decoder.conv_in.weight") || st_find(f, "decoder.conv_in.weight"))
        return "an AutoencoderKL in the original single-file layout, which this version does not read yet";
    if (st_find(f, "1.conv.0.weight"))
        return "a TAESD encoder or decoder as the original .pth layout has it: convert the pair with "
               "tools/taesd_to_safetensors.py ENCODER.pth DECODER.pth OUT.safetensors";
    return NULL;
}

// The tiny autoencoder in diffusers' layout: the width and latent channels from the first and last
// convolutions present, then every tensor of the encoder and the decoder that the file has.
static int bind_taesd(Autoencoder *ae, Binder *bd) {
    const StEntry *e0 = st_find(bd->f, "encoder.layers.0.weight"), *d0 = st_find(bd->f, "decoder.layers.0.weight");
    ae->has_enc = e0 != NULL, ae->has_dec = d0 != NULL;
    const StEntry *w = e0 ? e0 : d0;
    if (w->ndim != 4 || w->shape[0] < 1 || w->shape[0] > 4096 || w->shape[1] < 1 || w->shape[1] > 4096)
        return fc_errf(bd->err, bd->errlen, "%s: tensor %s is not a convolution's weight (C_out, C_in, 3, 3)", bd->path,
                       w->name);
    if (st_find(bd->f, "decoder.layers.2.pool.0.weight") || st_find(bd->f, "decoder.layers.2.pool.1.weight"))
        return fc_errf(bd->err, bd->errlen, "%s: a tiny decoder whose mid-blocks carry a GroupNorm pool (TAEF2, tensor "
                       "decoder.layers.2.pool.*), which this version does not read yet", bd->path);
    int C = (int)w->shape[0], L = e0 ? 0 : (int)d0->shape[1];
    if (e0) {
        const StEntry *out = st_find(bd->f, "encoder.layers.14.weight");
        L = out && out->ndim == 4 ? (int)out->shape[0] : 4;  // a missing one is named by bind below
    }
    if (L < 1 || L > 4096) return fc_errf(bd->err, bd->errlen, "%s: %d latent channels", bd->path, L);
    ae->width = C, ae->latent = L;
    char name[96];
    if (ae->has_enc) {
        bind_conv(bd, &ae->enc_in, "encoder.layers.0", C, 3, 3, 1);
        int index = 1, block = 0;
        for (int stage = 0; stage < 4; stage++) {
            if (stage) {
                snprintf(name, sizeof name, "encoder.layers.%d", index++);
                bind_conv(bd, &ae->enc_down[stage - 1], name, C, C, 3, 0);
            }
            for (int k = 0; k < (stage ? 3 : 1); k++) bind_block(bd, &ae->enc_block[block++], "encoder", index++, C);
        }
        snprintf(name, sizeof name, "encoder.layers.%d", index);
        bind_conv(bd, &ae->enc_out, name, L, C, 3, 1);
    }
    if (ae->has_dec) {
        bind_conv(bd, &ae->dec_in, "decoder.layers.0", C, L, 3, 1);
        int index = 2, block = 0;  // 1 is the ReLU
        for (int stage = 0; stage < 4; stage++) {
            for (int k = 0; k < (stage < 3 ? 3 : 1); k++) bind_block(bd, &ae->dec_block[block++], "decoder", index++, C);
            if (stage < 3) {
                index++;  // the Upsample
                snprintf(name, sizeof name, "decoder.layers.%d", index++);
                bind_conv(bd, &ae->dec_up[stage], name, C, C, 3, 0);
            }
        }
        snprintf(name, sizeof name, "decoder.layers.%d", index);
        bind_conv(bd, &ae->dec_out, name, 3, C, 3, 1);
    }
    return bd->failed;
}

Autoencoder *autoencoder_load(const char *path, const Backend *be, char *err, size_t errlen) {
    StFile f;
    if (st_read(path, &f, err, errlen)) return NULL;
    Autoencoder *ae = fc_calloc(1, sizeof *ae);
    ae->be = be;
    Binder *bd = fc_calloc(1, sizeof *bd);
    *bd = (Binder){.f = &f, .path = path, .err = err, .errlen = errlen};
    int rc;
    if (st_find(&f, "encoder.layers.0.weight") || st_find(&f, "decoder.layers.0.weight")) {
        ae->family = AE_TAESD;
        rc = bind_taesd(ae, bd);
    } else {
        const char *other = other_family(&f);
        rc = other ? fc_errf(err, errlen, "%s: %s", path, other)
                   : fc_errf(err, errlen, "%s: no autoencoder this version reads (neither encoder.layers.0.weight nor "
                             "decoder.layers.0.weight of the tiny autoencoders; its first tensor: %s)", path,
                             f.n ? ST_SHOWN(f.entries[0].name) : "none");
    }
    if (rc == 0) rc = upload_bound(ae, bd);
    free(bd);
    st_free(&f);
    if (rc) {
        free_autoencoder(ae);
        return NULL;
    }
    snprintf(ae->what, sizeof ae->what, "TAESD: %d latent channels, 8x, %s, width %d, %.2f M parameters", ae->latent,
             ae->has_enc && ae->has_dec ? "encoder and decoder" : ae->has_enc ? "encoder only" : "decoder only",
             ae->width, ae->n_params / 1e6);
    return ae;
}

void free_autoencoder(Autoencoder *ae) {
    if (!ae) return;
    if (ae->params) ae->be->free(ae->params);
    for (int i = 0; i < 3; i++)
        if (ae->buf[i]) ae->be->free(ae->buf[i]);
    free(ae);
}

int autoencoder_family(const Autoencoder *ae) { return ae->family; }
int autoencoder_latent_channels(const Autoencoder *ae) { return ae->latent; }
int autoencoder_factor(const Autoencoder *ae) { return 8; }
int autoencoder_has_encoder(const Autoencoder *ae) { return ae->has_enc; }
int autoencoder_has_decoder(const Autoencoder *ae) { return ae->has_dec; }
size_t autoencoder_params(const Autoencoder *ae) { return ae->n_params; }
const char *autoencoder_describe(const Autoencoder *ae) { return ae->what; }

// ----------------------------------------------------------------------------
// the forward passes

// The activations of one pass: the current map in cur (C channels of H x W, B images), a and b spare.
typedef struct {
    const Backend *be;
    real *cur, *a, *b;
    int B, C, H, W;
} Run;

static void swap(real **x, real **y) {
    real *t = *x;
    *x = *y, *y = t;
}

// cur = conv(cur), 3x3 with padding 1 (or 1x1), at stride s.
static void run_conv(Run *r, const Conv *c, int stride) {
    int p = c->k / 2, pad[4] = {p, p, p, p};
    r->be->conv2d_fwd(r->a, r->cur, c->w, c->b, r->B, c->cin, r->H, r->W, c->cout, c->k, stride, pad);
    r->H = (r->H + 2 * p - c->k) / stride + 1, r->W = (r->W + 2 * p - c->k) / stride + 1, r->C = c->cout;
    swap(&r->cur, &r->a);
}

static size_t run_values(const Run *r) { return (size_t)r->B * r->C * r->H * r->W; }

// cur = ReLU(conv4(ReLU(conv2(ReLU(conv0(cur))))) + cur): the tiny autoencoders' block (same width in and out).
static void run_block(Run *r, const TinyBlock *blk) {
    const Backend *be = r->be;
    int pad[4] = {1, 1, 1, 1};
    size_t n = run_values(r);
    be->conv2d_fwd(r->a, r->cur, blk->c0.w, blk->c0.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->act_fwd(r->a, r->a, n, ACT_RELU);
    be->conv2d_fwd(r->b, r->a, blk->c2.w, blk->c2.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->act_fwd(r->b, r->b, n, ACT_RELU);
    be->conv2d_fwd(r->a, r->b, blk->c4.w, blk->c4.b, r->B, r->C, r->H, r->W, r->C, 3, 1, pad);
    be->add_fwd(r->a, r->a, r->cur, n);
    be->act_fwd(r->a, r->a, n, ACT_RELU);
    swap(&r->cur, &r->a);
}

static void run_upsample(Run *r) {
    r->be->upsample2x_fwd(r->a, r->cur, r->B, r->C, r->H, r->W);
    r->H *= 2, r->W *= 2;
    swap(&r->cur, &r->a);
}

// Three buffers of at least `values` each.
static Run run_start(Autoencoder *ae, size_t values, int B, int C, int H, int W) {
    if (values > ae->buf_values) {
        for (int i = 0; i < 3; i++) {
            if (ae->buf[i]) ae->be->free(ae->buf[i]);
            ae->buf[i] = ae->be->alloc(sizeof(real) * values);
        }
        ae->buf_values = values;
    }
    return (Run){ae->be, ae->buf[0], ae->buf[1], ae->buf[2], B, C, H, W};
}

int autoencoder_encode(Autoencoder *ae, const real *frames, int B, int H, int W, real *latents, char *err,
                       size_t errlen) {
    if (!ae->has_enc) return fc_errf(err, errlen, "the autoencoder has no encoder (its file holds a decoder only)");
    if (H % 8 || W % 8 || H < 8 || W < 8)
        return fc_errf(err, errlen, "frames of %dx%d: the encoder takes sides that are multiples of 8", W, H);
    int C = ae->width > 3 ? ae->width : 3;
    Run r = run_start(ae, (size_t)B * C * H * W, B, 3, H, W);
    size_t n = (size_t)B * 3 * H * W;
    real *x01 = fc_malloc(sizeof(real) * n);
    for (size_t i = 0; i < n; i++) x01[i] = (real)((frames[i] + 1.0) * 0.5);  // the tiny autoencoders read [0, 1]
    ae->be->upload(r.cur, x01, sizeof(real) * n);
    free(x01);
    run_conv(&r, &ae->enc_in, 1);
    int block = 0;
    for (int stage = 0; stage < 4; stage++) {
        if (stage) run_conv(&r, &ae->enc_down[stage - 1], 2);
        for (int k = 0; k < (stage ? 3 : 1); k++) run_block(&r, &ae->enc_block[block++]);
    }
    run_conv(&r, &ae->enc_out, 1);
    ae->be->download(latents, r.cur, sizeof(real) * run_values(&r));
    return 0;
}

int autoencoder_decode(Autoencoder *ae, const real *latents, int B, int h, int w, real *frames, char *err,
                       size_t errlen) {
    if (!ae->has_dec) return fc_errf(err, errlen, "the autoencoder has no decoder (its file holds an encoder only)");
    if (h < 1 || w < 1) return fc_errf(err, errlen, "latents of %dx%d", w, h);
    int C = ae->width > ae->latent ? ae->width : ae->latent;
    Run r = run_start(ae, (size_t)B * C * h * w * 64, B, ae->latent, h, w);
    ae->be->upload(r.cur, latents, sizeof(real) * run_values(&r));
    ae->be->act_fwd(r.cur, r.cur, run_values(&r), ACT_TANH_CLAMP);  // the soft clamp the decoders start with
    run_conv(&r, &ae->dec_in, 1);
    ae->be->act_fwd(r.cur, r.cur, run_values(&r), ACT_RELU);
    int block = 0;
    for (int stage = 0; stage < 4; stage++) {
        for (int k = 0; k < (stage < 3 ? 3 : 1); k++) run_block(&r, &ae->dec_block[block++]);
        if (stage < 3) {
            run_upsample(&r);
            run_conv(&r, &ae->dec_up[stage], 1);
        }
    }
    run_conv(&r, &ae->dec_out, 1);
    size_t n = run_values(&r);
    ae->be->download(frames, r.cur, sizeof(real) * n);
    for (size_t i = 0; i < n; i++) frames[i] = (real)(frames[i] * 2.0 - 1.0);  // [0, 1] to [-1, 1]
    return 0;
}
