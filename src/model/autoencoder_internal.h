// autoencoder_internal.h: what the autoencoder's files share (autoencoder.c: reading a file and the
// passes' plumbing; autoencoder_tiny.c and autoencoder_kl.c: one family each). Not for other layers.
#ifndef FRAMECHAIN_AUTOENCODER_INTERNAL_H
#define FRAMECHAIN_AUTOENCODER_INTERNAL_H

#include <sys/stat.h>

#include "formats/safetensors.h"
#include "model/autoencoder.h"

// ---- layers ----

typedef struct {
    real *w, *b;  // (cout, cin, k, k) and (cout), or b NULL: no bias; backend memory
    int cout, cin, k;
} AeConv;

typedef struct {
    real *gamma, *beta;  // (C) each: a GroupNorm's affine
    int C;
} AeNorm;

// ---- binding: every tensor a family needs, checked against the file before anything is allocated ----

#define AE_MAX_TENSORS 512

typedef struct {
    const StFile *f;
    const char *path;
    const char *prefix;  // put before every name looked up ("" or "first_stage_model.")
    real **slot[AE_MAX_TENSORS];  // where each tensor's backend pointer goes
    const StEntry *entry[AE_MAX_TENSORS];
    size_t offset[AE_MAX_TENSORS], total;
    int n;
    char *err;
    size_t errlen;
    int failed;
} AeBinder;

// Tensor prefix + name of shape (d0, ...; a negative dimension ends it), its pointer to go to *slot.
// Trailing dimensions of 1 are ignored on both sides (a Linear's (C, C) is a 1x1 convolution's (C, C, 1, 1)).
// A missing or misshapen tensor sets bd->failed with one line in bd->err naming it.
void ae_bind(AeBinder *bd, real **slot, const char *name, int d0, int d1, int d2, int d3);
void ae_bind_conv(AeBinder *bd, AeConv *c, const char *name, int cout, int cin, int k, int bias);
void ae_bind_norm(AeBinder *bd, AeNorm *n, const char *name, int C);
// The tensor prefix + name, or NULL.
const StEntry *ae_find(const AeBinder *bd, const char *name);

// ---- the autoencoder ----

typedef struct AeRun AeRun;

struct Autoencoder {
    const Backend *be;
    int family, latent, factor, has_enc, has_dec;
    double scale, shift;  // latents = (the encoder's mean - shift) * scale
    struct stat file;     // the file its weights were read from, as they were read (st_ino 0: none)
    real *params;         // backend memory, every tensor at its offset
    size_t n_params;
    real *buf[6];         // backend memory: the passes' activations
    size_t buf_values;
    void *net;            // the family's layers
    // the family's passes: frames (B, 3, H, W) in [-1, 1] on the backend in r->cur -> latents in r->cur,
    // and back; and its layers freed
    void (*encode)(Autoencoder *ae, AeRun *r);
    void (*decode)(Autoencoder *ae, AeRun *r);
    // the values of the largest map a pass holds, per image, for frames of H x W
    size_t (*map_values)(const Autoencoder *ae, int H, int W);
    char what[256];
};

// The families: bind every tensor of the file's halves (setting width, latent, factor, has_enc, has_dec,
// net, encode, decode and what's family part); 0, or -1 with bd->err.
int ae_bind_tiny(Autoencoder *ae, AeBinder *bd);
int ae_bind_kl(Autoencoder *ae, AeBinder *bd);

// ---- a pass: the current map in cur (C channels of H x W, B images), the other buffers spare ----

struct AeRun {
    const Backend *be;
    real *cur, *t[5];  // t: spare buffers, each as large as cur's
    int B, C, H, W;
};

size_t ae_values(const AeRun *r);
static inline size_t ae_map_values(const Autoencoder *ae, int H, int W) { return ae->map_values(ae, H, W); }
void ae_swap(real **x, real **y);
// cur = conv(cur) at stride s with padding pad (NULL: k / 2 on every side).
void ae_conv(AeRun *r, const AeConv *c, int stride, const int *pad);
// cur = nearest 2x upsampling of cur.
void ae_upsample(AeRun *r);

#endif
