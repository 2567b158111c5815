// test_autoencoder.c: the tiny autoencoder (src/model/autoencoder.c) against an independent PyTorch
// implementation (tools/autoencoder_reference.py --make DIR, random weights at a reduced width): the
// encoder's latents and the decoder's frames within 1e-4 of PyTorch's (relative to the largest
// value) from F32 and from F16 weights, and from the original .pth pair converted by
// tools/taesd_to_safetensors.py, on the CPU; BF16 weights read as the same numbers as F32 ones; the
// files the loader must refuse, refused in one line naming the tensor; the sizes the encoder cannot
// take refused.
// usage: test_autoencoder DIR (with DIR/converted.safetensors made by taesd_to_safetensors.py)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "formats/safetensors.h"
#include "model/autoencoder.h"
#include "check.h"

static StFile g_io;

// Tensor `name` of io.safetensors as floats (F32), its element count in *n.
static const float *io_tensor(const char *name, size_t *n, long shape[4]) {
    const StEntry *e = st_find(&g_io, name);
    if (!e || strcmp(e->dtype, "F32") || e->ndim != 4) {
        fprintf(stderr, "test_autoencoder: io.safetensors has no F32 tensor %s of 4 dimensions\n", name);
        exit(1);
    }
    *n = (size_t)(e->end - e->begin) / 4;
    for (int i = 0; i < 4; i++) shape[i] = e->shape[i];
    return st_data(&g_io, e);
}

// max |a - b| / max |b|
static double rel_error(const real *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]);
        if (!(e <= d)) d = e;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? d / m : d;
}

// file's encoder and decoder against io.safetensors: the inputs `in`.frames and `in`.latents (in "":
// frames and latents), the outputs tag.encoded and tag.decoded.
static void t_against_pytorch(const char *dir, const char *file, const char *tag, const char *in) {
    char path[4096], err[1024], name[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    Autoencoder *ae = autoencoder_load(path, backend_cpu(), err, sizeof err);
    check(ae != NULL, "autoencoder_load", "%s: %s", file, ae ? autoencoder_describe(ae) : err);
    if (!ae) return;
    size_t nf, nl, ne, nd;
    long sf[4], sl[4], se[4], sd[4];
    snprintf(name, sizeof name, "%s%sframes", in, *in ? "." : "");
    const float *frames = io_tensor(name, &nf, sf);
    snprintf(name, sizeof name, "%s%slatents", in, *in ? "." : "");
    const float *latents = io_tensor(name, &nl, sl);
    snprintf(name, sizeof name, "%s.encoded", tag);
    const float *encoded = io_tensor(name, &ne, se);
    snprintf(name, sizeof name, "%s.decoded", tag);
    const float *decoded = io_tensor(name, &nd, sd);
    real *x = malloc(sizeof(real) * nf), *z = malloc(sizeof(real) * nl), *got_z = calloc(ne, sizeof(real));
    real *got_x = calloc(nd, sizeof(real));
    for (size_t i = 0; i < nf; i++) x[i] = frames[i];
    for (size_t i = 0; i < nl; i++) z[i] = latents[i];
    int rc = autoencoder_encode(ae, x, (int)sf[0], (int)sf[2], (int)sf[3], got_z, err, sizeof err);
    double e = rc ? INFINITY : rel_error(got_z, encoded, ne);
    check(rc == 0 && e <= 1e-4, "autoencoder_encode_pytorch", "%s weights, %ld frames %ldx%ld -> (%ld, %ld, %ld): "
          "max error %.2e of the largest latent (tol 1e-4)%s%s", tag, sf[0], sf[2], sf[3], se[1], se[2], se[3], e,
          rc ? ": " : "", rc ? err : "");
    rc = autoencoder_decode(ae, z, (int)sl[0], (int)sl[2], (int)sl[3], got_x, err, sizeof err);
    e = rc ? INFINITY : rel_error(got_x, decoded, nd);
    check(rc == 0 && e <= 1e-4, "autoencoder_decode_pytorch", "%s weights, latents (%ld, %ld, %ld) -> %ldx%ld frames: "
          "max error %.2e of the largest value (tol 1e-4)%s%s", tag, sl[1], sl[2], sl[3], sd[2], sd[3], e,
          rc ? ": " : "", rc ? err : "");
    if (!strcmp(file, "taesd.safetensors")) {  // sizes the encoder cannot take
        rc = autoencoder_encode(ae, x, 1, 12, 16, got_z, err, sizeof err);
        check(rc && strstr(err, "multiples of 8"), "autoencoder_encode_refuses_size", "16x12: %s", rc ? err : "accepted");
    }
    free(x), free(z), free(got_z), free(got_x);
    free_autoencoder(ae);
}

static void t_refused(const char *dir, const char *file, const char *want) {
    char path[4096], err[1024] = "";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    Autoencoder *ae = autoencoder_load(path, backend_cpu(), err, sizeof err);
    int one_line = !strchr(err, '\n');
    check(!ae && one_line && strstr(err, want), "autoencoder_refused", "%s: %s", file, ae ? "loaded" : err);
    free_autoencoder(ae);
}

// BF16 weights: every F32 tensor of taesd.safetensors cut to its top 16 bits (a BF16 value exactly), written
// once as BF16 and once as F32. The two files hold the same numbers, so the encoder must give the same
// latents from either: a BF16 value read wrongly moves them.
static void t_bf16_reads_as_f32(const char *dir) {
    char path[4096], bf16_path[4096], f32_path[4096], err[1024];
    snprintf(path, sizeof path, "%s/taesd.safetensors", dir);
    snprintf(bf16_path, sizeof bf16_path, "%s/taesd_bf16_cut.safetensors", dir);
    snprintf(f32_path, sizeof f32_path, "%s/taesd_f32_cut.safetensors", dir);
    StFile f;
    if (st_read(path, &f, err, sizeof err)) {
        check(0, "autoencoder_bf16_weights", "%s", err);
        return;
    }
    StTensor *as_bf16 = calloc((size_t)f.n, sizeof *as_bf16), *as_f32 = calloc((size_t)f.n, sizeof *as_f32);
    int n = 0;
    for (int t = 0; t < f.n; t++) {
        const StEntry *e = &f.entries[t];
        if (strcmp(e->dtype, "F32")) continue;
        size_t count = (size_t)(e->end - e->begin) / 4;
        const uint8_t *data = st_data(&f, e);
        uint16_t *hi = malloc(2 * (count ? count : 1));
        float *cut = malloc(4 * (count ? count : 1));
        for (size_t i = 0; i < count; i++) {
            uint32_t u;
            memcpy(&u, data + 4 * i, 4);
            hi[i] = (uint16_t)(u >> 16);
            u &= 0xffff0000u;
            memcpy(&cut[i], &u, 4);
        }
        StTensor base = {e->name, "BF16", e->ndim, {0}, hi};
        for (int d = 0; d < e->ndim; d++) base.shape[d] = e->shape[d];
        as_bf16[n] = base;
        as_f32[n] = base, as_f32[n].dtype = "F32", as_f32[n].data = cut;
        n++;
    }
    int wrote = !st_write(bf16_path, as_bf16, n, NULL, 0, err, sizeof err) &&
                !st_write(f32_path, as_f32, n, NULL, 0, err, sizeof err);
    Autoencoder *bf = wrote ? autoencoder_load(bf16_path, backend_cpu(), err, sizeof err) : NULL;
    Autoencoder *fp = bf ? autoencoder_load(f32_path, backend_cpu(), err, sizeof err) : NULL;
    double e = INFINITY;
    size_t nf, ne;
    long sf[4], se[4];
    if (bf && fp) {
        const float *frames = io_tensor("frames", &nf, sf);
        io_tensor("f32.encoded", &ne, se);
        real *x = malloc(sizeof(real) * nf), *z_bf = calloc(ne, sizeof(real)), *z_fp = calloc(ne, sizeof(real));
        for (size_t i = 0; i < nf; i++) x[i] = frames[i];
        int rc = autoencoder_encode(bf, x, (int)sf[0], (int)sf[2], (int)sf[3], z_bf, err, sizeof err) ||
                 autoencoder_encode(fp, x, (int)sf[0], (int)sf[2], (int)sf[3], z_fp, err, sizeof err);
        float *ref = malloc(sizeof(float) * ne);
        for (size_t i = 0; i < ne; i++) ref[i] = (float)z_fp[i];
        if (!rc) e = rel_error(z_bf, ref, ne);
        free(x), free(z_bf), free(z_fp), free(ref);
    }
    check(e <= 1e-6, "autoencoder_bf16_weights", "%d tensors cut to BF16, written as BF16 and as F32: latents "
          "differ by %.2e of the largest (tol 1e-6)%s%s", n, e, isfinite(e) ? "" : ": ", isfinite(e) ? "" : err);
    free_autoencoder(bf), free_autoencoder(fp);
    for (int t = 0; t < n; t++) free((void *)as_bf16[t].data), free((void *)as_f32[t].data);
    free(as_bf16), free(as_f32);
    st_free(&f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_autoencoder DIR (made by tools/autoencoder_reference.py --make DIR)\n");
        return 2;
    }
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/io.safetensors", argv[1]);
    if (st_read(path, &g_io, err, sizeof err)) {
        fprintf(stderr, "test_autoencoder: %s\n", err);
        return 1;
    }
    t_against_pytorch(argv[1], "taesd.safetensors", "f32", "");
    t_against_pytorch(argv[1], "taesd_f16.safetensors", "f16", "");
    t_against_pytorch(argv[1], "converted.safetensors", "f32", "");  // the .pth pair through taesd_to_safetensors.py
    t_against_pytorch(argv[1], "kl.safetensors", "kl", "kl");
    t_against_pytorch(argv[1], "kl16.safetensors", "kl16", "kl16");
    t_against_pytorch(argv[1], "kl_original.safetensors", "kl", "kl");  // the same weights, the original names
    t_against_pytorch(argv[1], "kl_legacy.safetensors", "kl", "kl");    // diffusers' older attention names
    t_against_pytorch(argv[1], "taef2.safetensors", "taef2", "taef2");  // GroupNorm pools, 32 latent channels
    t_against_pytorch(argv[1], "taef2_converted.safetensors", "taef2", "taef2");  // its .pth pair converted
    t_against_pytorch(argv[1], "taef2_anywhere.safetensors", "taef2_anywhere", "taef2");  // pools at full resolution
    t_bf16_reads_as_f32(argv[1]);
    t_refused(argv[1], "bad_missing.safetensors", "tensor decoder.layers.7.conv.2.weight (16, 16, 3, 3) is missing");
    t_refused(argv[1], "bad_shape.safetensors", "tensor encoder.layers.6.weight is F32 (16, 15, 3, 3), expected");
    t_refused(argv[1], "bad_kl_missing.safetensors", "tensor decoder.mid_block.attentions.0.to_k.weight (64, 64, 1, 1) is missing");
    t_refused(argv[1], "bad_kl_half_quant.safetensors",
              "tensor post_quant_conv.weight is missing, where quant_conv.weight is there");
    t_refused(argv[1], "bad_kl_both_names.safetensors",
              "holds the tensors of two autoencoders, an AutoencoderKL (encoder.conv_in.*) and an AutoencoderKL under "
              "first_stage_model.*");
    // each named by the half the file has (the tiny one was named by an encoder it did not have)
    t_refused(argv[1], "bad_mixed_halves.safetensors",
              "holds the tensors of two autoencoders, a tiny autoencoder (decoder.layers.*) and an AutoencoderKL "
              "(encoder.conv_in.*)");
    t_refused(argv[1], "bad_unknown.safetensors", "no autoencoder this version reads");
    t_refused(argv[1], "bad_taef2_missing.safetensors", "tensor decoder.layers.3.pool.1.bias (64) is missing");
    t_refused(argv[1], "no_such_file.safetensors", "no_such_file");
    st_free(&g_io);
    return g_failed != 0;
}
