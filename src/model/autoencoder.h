// autoencoder.h: the per-frame autoencoders users already have, forward only, written once against
// the op table (docs/autoencoders.md). A file's family is read from its tensors' names and shapes,
// never from its name. Families read today:
//   - the tiny autoencoders (TAESD, TAESDXL, TAESD3, TAEF1, TAEF2: the same network, 4, 16 or 32
//     latent channels, TAEF2's with GroupNorm pools) in diffusers' AutoencoderTiny layout ("encoder.layers.1.conv.0.weight", ...); a file
//     may hold the encoder, the decoder or both. They read images in [0, 1] and have no scaling
//     factor: encode and decode take and give frames in [-1, 1] and convert.
// Frames and latents cross this interface in host memory, (B, C, H, W) fp32; the weights and the
// activations live in the backend's memory.
#ifndef FRAMECHAIN_AUTOENCODER_H
#define FRAMECHAIN_AUTOENCODER_H

#include <stddef.h>

#include "backend/backend.h"
#include "formats/safetensors.h"

typedef struct Autoencoder Autoencoder;

enum AeFamily { AE_TAESD = 0, AE_KL = 1 };

// The autoencoder in the safetensors file at path (F32, F16 or BF16 tensors) on backend be. NULL with
// one line in err: a file that cannot be read, no family it matches (what it has instead), a tensor
// that is missing or misshapen (named, with the shape expected), a value that is not finite.
Autoencoder *autoencoder_load(const char *path, const Backend *be, char *err, size_t errlen);
// Whether the tensors of a safetensors header (formats/safetensors.h) name an autoencoder of a family
// this version reads, or a half of one, by their first tensor's name (a TAESD half in the original
// nn.Sequential names, which any Sequential has, is not taken for one): 1 or 0.
int autoencoder_in_file(const StFile *f);
void free_autoencoder(Autoencoder *ae);
// The SHA-256 of the file at path, which must be the one ae's weights were read from, as they were read:
// a file put in its place or written to since (between a load and its identity, a dataset would record
// one file and hold the latents of another) is refused with one line. 0, or -1 with err.
int autoencoder_file_sha256(const Autoencoder *ae, const char *path, char hex[65], char *err, size_t errlen);

int autoencoder_family(const Autoencoder *ae);         // enum AeFamily
int autoencoder_latent_channels(const Autoencoder *ae);
int autoencoder_factor(const Autoencoder *ae);         // frame side / latent side (8 for the families' usual files)
int autoencoder_has_encoder(const Autoencoder *ae);
int autoencoder_has_decoder(const Autoencoder *ae);
// The backend memory a pass of B frames of H x W holds: the weights and the six activation buffers
// (the convolutions' scratch, at most 64 MB, apart).
double autoencoder_memory_bytes(const Autoencoder *ae, int B, int H, int W);
// The most scratch a pass of one H x W frame takes besides: the im2col tile of a convolution, or a
// chunk of the mid-block attention's scores, each at most the backend's tile (conv_tile_bytes: 32 MiB
// on the CPU, 64 MiB on CUDA) and at most what the whole frame needs.
double autoencoder_scratch_bytes(const Autoencoder *ae, int H, int W);
// Whether a pass of one P x P frame fits the address-space limit (ulimit -v, -d) on the CPU, with the
// OpenBLAS buffers its threads have yet to take (address_space.h: a thread that cannot take one at its
// first GEMM spins for ever, deaf to SIGTERM): 0, or -1 with one line naming path, the figures and
// `lower` (what the command can lower, e.g. "--size"). Always 0 on a GPU, whose passes are its own.
int autoencoder_check_address_space(const Autoencoder *ae, const char *path, int P, const char *lower, char *err,
                                    size_t errlen);
// "TAESD: 4 latent channels, 8x, encoder and decoder, width 64, 1.22 M parameters"
const char *autoencoder_describe(const Autoencoder *ae);
// The latents are (the encoder's mean - shift) * scale: the factors the diffusion models of the family
// were trained with (AutoencoderKL: 4 latent channels, SD 1.x/2.x's 0.18215 and 0 unless set; 16,
// SD3's 1.5305 and 0.0609; the tiny autoencoders 1 and 0: their latents are already scaled).
void autoencoder_scaling(const Autoencoder *ae, double *scale, double *shift);
void autoencoder_set_scaling(Autoencoder *ae, double scale, double shift);

// frames (B, 3, H, W) in [-1, 1] -> latents (B, latent channels, H / factor, W / factor); H and W
// multiples of the factor. 0, or -1 with one line (no encoder in the file, a size it cannot take).
int autoencoder_encode(Autoencoder *ae, const real *frames, int B, int H, int W, real *latents, char *err,
                       size_t errlen);
// latents (B, latent channels, h, w) -> frames (B, 3, h factor, w factor), in [-1, 1] up to the
// decoder's own range (not clamped). 0, or -1 with one line (no decoder in the file).
int autoencoder_decode(Autoencoder *ae, const real *latents, int B, int h, int w, real *frames, char *err,
                       size_t errlen);

#endif
