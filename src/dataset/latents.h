// latents.h: frames into the latents a latent dataset stores (prepare --vae, formats/shards.h), and the
// identity of the autoencoder that made them.
#ifndef FRAMECHAIN_LATENTS_H
#define FRAMECHAIN_LATENTS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/shards.h"
#include "model/autoencoder.h"

// The identity of autoencoder ae, read from `path`, for frames of image_size pixels a side: the file's
// SHA-256, family, channels, factor, scaling. 0, or -1 with one line.
int latent_identity(const Autoencoder *ae, const char *path, int image_size, LatentIdentity *id, char *err,
                    size_t errlen);

// The identity as one line of text, as checkpoints record it (LATENT_ID_TEXT bytes hold it):
// "AutoencoderKL, 4 channels, 8x, frames of 512, scale 0.18215, shift 0, sha256 <64 hex digits>".
#define LATENT_ID_TEXT 320
void latent_identity_text(const LatentIdentity *id, char *buf, size_t len);
// The same read back: 0, or -1 when text is not such a line.
int latent_identity_parse(const char *text, LatentIdentity *id);
// Whether two such lines (or two empty ones: frames) name the same latents: their fields compared as
// values, so that a line of a build that wrote the scale in 17 digits matches today's shortest form.
int latent_identity_same(const char *a, const char *b);

// Whether ae, read from `path`, is the autoencoder `want` records (the file's SHA-256 compared); when it is,
// its scaling is set to want's. whose: what recorded it, for the line ("the models were trained with").
// 0, or -1 with one line naming both digests.
int latent_check_file(Autoencoder *ae, const char *path, const LatentIdentity *want, const char *whose, char *err,
                      size_t errlen);

// The family's name as a dataset records it: "AutoencoderKL" or "AutoencoderTiny".
const char *latent_family_name(const Autoencoder *ae);

// A clip of F frames (F, S, S, 3) RGB bytes -> (F, 2, C, S/f, S/f) F16 values (little-endian bytes) in
// out: each frame's latents, then those of the frame mirrored left to right (the encoder's mean,
// deterministic; scaled as the family's diffusion models expect). 0, or -1 with one line (also when a
// stop signal has come: fc_stop_signal, checked before each frame).
int latents_encode_clip(Autoencoder *ae, const uint8_t *clip, int F, int S, uint8_t *out, char *err, size_t errlen);

#endif
