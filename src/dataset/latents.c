// latents.c: a clip's frames through an autoencoder's encoder, two images at a time (a frame and its
// mirror), into the F16 layout of a latent shard.
#include <math.h>
#include <string.h>

#include "base/common.h"
#include "base/half.h"
#include "base/sha256.h"
#include "dataset/latents.h"

const char *latent_family_name(const Autoencoder *ae) {
    return autoencoder_family(ae) == AE_KL ? "AutoencoderKL" : "AutoencoderTiny";
}

int latent_identity(const Autoencoder *ae, const char *path, int image_size, LatentIdentity *id, char *err,
                    size_t errlen) {
    memset(id, 0, sizeof *id);
    if (autoencoder_file_sha256(ae, path, id->sha256, err, errlen)) return -1;
    snprintf(id->family, sizeof id->family, "%s", latent_family_name(ae));
    id->channels = autoencoder_latent_channels(ae);
    id->factor = autoencoder_factor(ae);
    id->image_size = image_size;
    autoencoder_scaling(ae, &id->scale, &id->shift);
    return 0;
}

int latent_check_file(Autoencoder *ae, const char *path, const LatentIdentity *want, const char *whose, char *err,
                      size_t errlen) {
    LatentIdentity got;
    if (latent_identity(ae, path, want->image_size, &got, err, errlen)) return -1;
    if (strcmp(got.sha256, want->sha256))
        return fc_errf(err, errlen, "--vae %s: not the autoencoder %s (its sha256 %s, the one recorded %s)", path,
                       whose, got.sha256, want->sha256);
    // the same file, so a record that says another family, factor or channel count was edited: its
    // frame size would not be the decoder's (a preview buffer sized from the record overflowed)
    if (strcmp(got.family, want->family) || got.factor != want->factor ||
        (want->channels && got.channels != want->channels))
        return fc_errf(err, errlen,
                       "--vae %s: its sha256 is that of the autoencoder %s, but it is an %s of %d channels, %dx, "
                       "where the record says %s of %d channels, %dx (the record was edited)",
                       path, whose, got.family, got.channels, got.factor, want->family, want->channels, want->factor);
    autoencoder_set_scaling(ae, want->scale, want->shift);
    return 0;
}

void latent_identity_text(const LatentIdentity *id, char *buf, size_t len) {
    snprintf(buf, len, "%s, %d channels, %dx, frames of %d, scale %s, shift %s, sha256 %s", id->family, id->channels,
             id->factor, id->image_size, FC_NUMBER(id->scale), FC_NUMBER(id->shift), id->sha256);
}

int latent_identity_same(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    LatentIdentity x, y;
    if (latent_identity_parse(a, &x) || latent_identity_parse(b, &y)) return 0;
    return !strcmp(x.family, y.family) && x.channels == y.channels && x.factor == y.factor &&
           x.image_size == y.image_size && x.scale == y.scale && x.shift == y.shift && !strcmp(x.sha256, y.sha256);
}

int latent_identity_parse(const char *text, LatentIdentity *id) {
    memset(id, 0, sizeof *id);
    int used = 0;
    if (sscanf(text, "%31[A-Za-z], %d channels, %dx, frames of %d, scale %lf, shift %lf, sha256 %64[0-9a-f]%n",
               id->family, &id->channels, &id->factor, &id->image_size, &id->scale, &id->shift, id->sha256,
               &used) != 7 ||
        text[used] || strlen(id->sha256) != 64)
        return -1;
    return 0;
}

int latents_encode_clip(Autoencoder *ae, const uint8_t *clip, int F, int S, uint8_t *out, char *err, size_t errlen) {
    int C = autoencoder_latent_channels(ae), n = S / autoencoder_factor(ae);
    size_t plane = (size_t)S * S, unit = (size_t)C * n * n;
    real *pair = fc_malloc(sizeof(real) * 2 * 3 * plane), *lat = fc_malloc(sizeof(real) * 2 * unit);
    int rc = 0;
    for (int f = 0; f < F && !rc; f++) {
        // a frame pair is seconds through a full-size encoder on a CPU, a clip minutes: a stop is
        // heard between frames, not at the clip's end
        if (fc_stop_signal()) {
            rc = fc_errf(err, errlen, "stopped by %s at frame %d", fc_signal_name(fc_stop_signal()), f);
            break;
        }
        const uint8_t *frame = clip + (size_t)f * plane * 3;
        for (int ch = 0; ch < 3; ch++)  // [0]: the frame, [1]: mirrored, both (3, S, S) in [-1, 1] as the loader makes them
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    real v = (real)(frame[((size_t)y * S + x) * 3 + ch] / 127.5 - 1.0);
                    pair[(size_t)ch * plane + (size_t)y * S + x] = v;
                    pair[(3 + (size_t)ch) * plane + (size_t)y * S + (S - 1 - x)] = v;
                }
        rc = autoencoder_encode(ae, pair, 2, S, S, lat, err, errlen);
        double sum = 0, sum2 = 0, lost2 = 0;  // the values, and what F16 takes from them
        for (size_t e = 0; e < 2 * unit && !rc; e++) {
            if (!(fabs((double)lat[e]) <= 65504))
                rc = fc_errf(err, errlen, "frame %d: latent value %g is beyond F16's range (65504): is the "
                             "autoencoder's scale right?", f, (double)lat[e]);
            uint16_t h = half_from_float((float)lat[e]);
            uint8_t *o = out + ((size_t)f * 2 * unit + e) * 2;
            o[0] = (uint8_t)h, o[1] = (uint8_t)(h >> 8);
            double v = lat[e], d = (double)half_to_float(h) - v;
            sum += v, sum2 += v * v, lost2 += d * d;
        }
        // A scale far below the latents' own (their values F16 subnormals) or a shift far beyond their
        // spread (a spacing of F16 near the shift as wide as the spread) keeps little of them: refused,
        // as an overflow is. Latents of about unit spread lose about 0.03% of it.
        double N = (double)(2 * unit), spread = sqrt(fmax(sum2 / N - (sum / N) * (sum / N), 0)),
               lost = sqrt(lost2 / N);
        if (!rc && spread > 0 && lost > 0.01 * spread)
            rc = fc_errf(err, errlen, "frame %d: stored as F16 the latents keep little of their spread (%.3g) for "
                         "their rounding (%.3g, %.1f%% of it): is the autoencoder's scale or shift right "
                         "(--vae-scale, --vae-shift)?", f, spread, lost, 100 * lost / spread);
    }
    free(pair), free(lat);
    return rc;
}
