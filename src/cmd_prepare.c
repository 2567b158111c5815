// cmd_prepare.c: `framechain prepare`: videos or folders of frames into training clips (dataset/prepare.h).
#include <stdio.h>

#include "model/autoencoder.h"

#include "dataset/prepare.h"
#include "dataset/synthetic.h"
#include "formats/shards.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_PREPARE =
    "usage: framechain prepare --input PATH [--input PATH ...] --out DIR --size N --clip-frames N\n"
    "                          [--fps F] [--overlap K] [--shard-mb M]\n"
    "                          [--vae FILE [--vae-scale S] [--vae-shift Z]]\n"
    "\n"
    "Decode every input (a video file in any format FFmpeg reads, a folder of videos, or a folder of\n"
    "PNG/JPEG frames taken as one clip), scale (area filter) and centre-crop the frames to N x N RGB,\n"
    "optionally resample to F frames per second, cut them into clips of --clip-frames frames (K frames\n"
    "shared by consecutive clips with --overlap) and write them to DIR as shards of at most M MiB\n"
    "(default 256; a shard's clips are held in memory until it is written, so at most half the\n"
    "machine's memory) with a CRC per clip, zlib-compressed where that pays, plus manifest.tsv (each clip's\n"
    "source and first frame) and dataset.json, written last. An unreadable, damaged or too short input\n"
    "is reported in one line and skipped; the exit status is 1 only when no clip came out.\n"
    "\n"
    "Synthetic footage, whose truth is known to any length (for eval), is an input too:\n"
    "  shapes:K:N     the built-in moving-shapes clip K (the one --first-frame shapes:K starts), N frames\n"
    "  pan:IMAGE:N    a camera panning 0.5 pixel a frame over IMAGE (scaled to twice the frame size),\n"
    "                 bouncing off its edges, N frames\n"
    "  zoom:IMAGE:N   a camera zooming in and out over the same square, the crop from the frame size\n"
    "                 to twice it and back, a point half the frame from the still one moving 0.25 pixel\n"
    "                 a frame, N frames\n"
    "\n"
    "--vae FILE stores latents instead of frames: every frame, and the same frame mirrored (the loader\n"
    "flips windows, and a flipped latent is not the latent of the flipped frame), goes once through the\n"
    "encoder of the autoencoder in FILE (the families autoencode reads: docs/autoencoders.md), its mean\n"
    "kept and scaled as the family's diffusion models expect, stored as F16. dataset.json records the\n"
    "file's SHA-256, family, channels, factor and scaling; a config trains on it with channels = the\n"
    "latent channels and frame_size = N / factor. N must be a multiple of the factor. On a GPU\n"
    "(--device cuda) the encoder runs there. The latents are (mean - Z) S: by default the family's\n"
    "factors (4 channels: SD 1.x/2.x's S = 0.18215; SDXL's VAE has the same shapes and wants\n"
    "--vae-scale 0.13025; 16 channels: SD3's S = 1.5305 and Z = 0.0609, and FLUX.1's VAE, of the same\n"
    "shapes, wants --vae-scale 0.3611 --vae-shift 0.1159; the tiny autoencoders 1 and 0).\n";

int cmd_prepare(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--input", 1, 1}, {"--out", 1}, {"--size", 1}, {"--clip-frames", 1}, {"--fps", 1},
                  {"--overlap", 1}, {"--shard-mb", 1}, {"--vae", 1}, {"--vae-scale", 1}, {"--vae-shift", 1},
                  {NULL}};
    fc_memory_hint("lower --shard-mb (a shard's clips are held in memory until it is written) or --size");
    if (parse_opts(argc, argv, 2, opts, NULL)) return fputs(HELP_PREPARE, stdout), 0;
    PrepareOptions o = {0};
    required(opts, "--input");
    o.inputs = opt(opts, "--input")->values, o.n_inputs = opt(opts, "--input")->count;
    char err[4096];
    for (int i = 0; i < o.n_inputs; i++)  // a mistyped spec is the command line's, not a damaged input
        if (synthetic_is_spec(o.inputs[i]) && synthetic_check_spec(o.inputs[i], err, sizeof err))
            usage_error("--input %s", err);
    o.out = required(opts, "--out");
    o.size = (int)parse_positive("--size", required(opts, "--size"), 4096);
    o.clip_frames = (int)parse_positive("--clip-frames", required(opts, "--clip-frames"), SHARD_MAX_CLIP_FRAMES);
    // a clip of frames is one tensor of a shard: its bytes within the shard's limit (latents are smaller)
    if (!opt(opts, "--vae")->count && (double)o.clip_frames * o.size * o.size * 3 > (double)SHARD_MAX_CLIP_BYTES)
        usage_error("--clip-frames %d at --size %d: a clip of %.2f GiB, over the %.0f GiB a clip may hold; give fewer "
                    "frames a clip (at most %d at this size)", o.clip_frames, o.size,
                    (double)o.clip_frames * o.size * o.size * 3 / 1073741824.0, (double)SHARD_MAX_CLIP_BYTES / 1073741824.0,
                    (int)(SHARD_MAX_CLIP_BYTES / ((size_t)o.size * o.size * 3)));
    if (opt(opts, "--fps")->count) o.fps = parse_number("--fps", opt(opts, "--fps")->value, 0.01, 1000);
    if (opt(opts, "--overlap")->count)
        o.overlap = (int)parse_whole("--overlap", opt(opts, "--overlap")->value, 0, o.clip_frames - 1);
    o.max_shard_bytes = (size_t)256 << 20;
    if (opt(opts, "--shard-mb")->count)
        o.max_shard_bytes = (size_t)parse_positive("--shard-mb", opt(opts, "--shard-mb")->value, 1 << 20) << 20;
    size_t machine = fc_machine_memory(0);  // a shard's clips wait in memory until it is written
    if (machine && o.max_shard_bytes > machine / 2)
        usage_error("--shard-mb %zu: a shard's clips are held in memory until it is written, and this machine has "
                    "%.1f GiB: give at most %zu", o.max_shard_bytes >> 20, machine / 1073741824.0, (machine / 2) >> 20);
    if (opt(opts, "--vae")->count) {
        o.vae = opt(opts, "--vae")->value;
        if (!(o.ae = autoencoder_load(o.vae, be, err, sizeof err))) fc_die("%s", err);
        if (!autoencoder_has_encoder(o.ae))
            fc_die("%s: %s: prepare --vae needs the encoder, and this file has none", o.vae, autoencoder_describe(o.ae));
        // the dataset records this file's bytes as its autoencoder: previews, generate and eval then need
        // this very file, which without a decoder cannot turn a latent back into frames
        if (!autoencoder_has_decoder(o.ae))
            fc_die("%s: %s: a dataset of its latents could never be decoded (train's previews, generate and eval "
                   "take the file it was prepared with, and need its decoder): give the whole autoencoder, encoder "
                   "and decoder in one file", o.vae, autoencoder_describe(o.ae));
        double scale, shift;
        autoencoder_scaling(o.ae, &scale, &shift);
        if (opt(opts, "--vae-scale")->count) scale = parse_number("--vae-scale", opt(opts, "--vae-scale")->value, 1e-6, 1e6);
        if (opt(opts, "--vae-shift")->count) shift = parse_number("--vae-shift", opt(opts, "--vae-shift")->value, -1e6, 1e6);
        autoencoder_set_scaling(o.ae, scale, shift);
        if (o.size % autoencoder_factor(o.ae))
            usage_error("--size %d: %s takes sides that are multiples of %d", o.size, o.vae, autoencoder_factor(o.ae));
        if (autoencoder_check_address_space(o.ae, o.vae, o.size, "--size", err, sizeof err)) fc_die("%s", err);
    } else if (opt(opts, "--vae-scale")->count || opt(opts, "--vae-shift")->count)
        usage_error("--vae-scale and --vae-shift go with --vae");
    int rc = prepare_run(&o);
    if (!rc) fc_stdout_is_report();  // the dataset is whole: a rerun would refuse it as there
    free_autoencoder(o.ae);
    return rc;
}
