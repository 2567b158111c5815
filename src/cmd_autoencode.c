// cmd_autoencode.c: `framechain autoencode`: an autoencoder's round trip on a user's own footage
// (model/autoencoder.h), so that it can be judged before a dataset is prepared with it.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <limits.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/common.h"
#include "base/commit.h"
#include "chain/generate.h"
#include "chain/metrics.h"
#include "chain/sampler.h"
#include "model/autoencoder.h"
#include "video/video.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_AUTOENCODE =
    "usage: framechain autoencode --vae FILE --input VIDEO [--size N] [--frames K]\n"
    "                             [--out VIDEO [--fps F] [--overwrite]]\n"
    "\n"
    "Encode the first K frames of VIDEO (centre-cropped and scaled to N x N, as prepare does) with the\n"
    "autoencoder in FILE, decode them again, and print the round trip's PSNR against the frames; the\n"
    "last line is the mean PSNR in dB. The file's family is read from its tensors: AutoencoderKL (Stable\n"
    "Diffusion 1.x/2.x, SDXL, SD3, FLUX.1) in diffusers' layout or the original single file's, and the\n"
    "tiny autoencoders (TAESD, TAESDXL, TAESD3, TAEF1, TAEF2) in diffusers' AutoencoderTiny layout\n"
    "(tools/taesd_to_safetensors.py converts the original pair, .pth or .safetensors). No weights ship\n"
    "with framechain: docs/autoencoders.md says where to get them.\n"
    "\n"
    "  --vae FILE     a .safetensors file of an autoencoder (F32, F16 or BF16)\n"
    "  --input VIDEO  a video, a folder of PNG or JPEG frames (read as prepare reads one: in natural\n"
    "                 order of their names, stopping at a frame of another size), or a PNG or JPEG (one\n"
    "                 frame); at least N x N\n"
    "  --size N       the frames' side, a multiple of the autoencoder's factor (default 256)\n"
    "  --frames K     how many frames (default 8; a still image, .png, .jpg, .bmp, .tiff, ...: 1)\n"
    "  --out VIDEO    also write the decoded frames (.mp4/.mkv/.avi, .gif, or a folder of PNGs), as\n"
    "                 generate writes its output (temporary name, renamed when whole)\n"
    "  --fps F        the frame rate of a video --out (default: the input video's; 12 for images)\n"
    "  --overwrite    replace an existing --out\n"
    "SIGINT, SIGTERM or SIGHUP, or an error, removes the partial --out; a signal exits with 128 + the\n"
    "signal.\n";

// An error once the output is open: it goes first, then the one line.
static void die_discarding(GenerateOutput *out, const char *err) {
    if (out) generate_output_discard(out);
    fc_die("%s", err);
}

int cmd_autoencode(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--vae", 1}, {"--input", 1}, {"--size", 1}, {"--frames", 1}, {"--out", 1}, {"--fps", 1},
                  {"--overwrite", 0}, {NULL}};
    fc_memory_hint("lower --size");
    if (parse_opts(argc, argv, 2, opts, NULL)) {
        fputs(HELP_AUTOENCODE, stdout);
        return 0;
    }
    // caught from the start (a script's background job starts with SIGINT ignored: one sent while the
    // autoencoder loads would be lost); the frame being made is the last, the partial output is removed
    fc_catch_stop_signals();
    fc_test_hold("START_DELAY_MS", "the start");
    const char *vae = required(opts, "--vae"), *input = required(opts, "--input");
    int S = opt(opts, "--size")->count ? (int)parse_positive("--size", opt(opts, "--size")->value, 8192) : 256;
    // an image is one frame: its default; more of it is refused below, by name
    struct stat st;
    int folder = stat(input, &st) == 0 && S_ISDIR(st.st_mode);
    int still = generate_is_still_path(input) && !folder;  // PNG, JPEG and the stills FFmpeg reads (BMP, TIFF, ...)
    int K = opt(opts, "--frames")->count ? (int)parse_positive("--frames", opt(opts, "--frames")->value, 100000)
                                         : still ? 1 : 8;
    if (K > 1 && still)
        usage_error("--frames %d: %s is an image, one frame (leave --frames out, or give a video or a folder of frames)", K, input);
    const char *out_path = opt(opts, "--out")->count ? opt(opts, "--out")->value : NULL;
    int overwrite = opt(opts, "--overwrite")->count > 0;
    if (overwrite && !out_path) usage_error("--overwrite: it goes with --out VIDEO (autoencode writes no other file)");
    double fps = opt(opts, "--fps")->count ? parse_number("--fps", opt(opts, "--fps")->value, 0.1, 1000) : 0;
    if (fps && !out_path)
        usage_error("--fps %g: it goes with --out VIDEO, a video name (.mp4, .gif, ...): autoencode writes no video "
                    "without --out", fps);
    if (fps && !generate_is_video_path(out_path))  // as generate says it: a warning, the frames still written
        fc_warn("--fps %g: %s is a folder of PNGs, which has no frame rate (a video name, .mp4 or another, has one)",
                fps, out_path);
    const char *ext = out_path ? strrchr(out_path, '.') : NULL;
    int gif = ext && !strcasecmp(ext, ".gif");
    if (gif && fps > VIDEO_GIF_MAX_FPS)
        usage_error("--fps %g: a GIF's frame delays are whole hundredths of a second, at least 2, so at most %d frames "
                    "a second (or write an .mp4)", fps, VIDEO_GIF_MAX_FPS);
    char err[4096];
    if (out_path && generate_check_output(out_path, input, vae, overwrite, err, sizeof err)) fc_die("%s", err);
    Autoencoder *ae = autoencoder_load(vae, be, err, sizeof err);
    if (!ae) fc_die("%s", err);
    if (!autoencoder_has_encoder(ae) || !autoencoder_has_decoder(ae))
        fc_die("%s: %s: a round trip needs both the encoder and the decoder", vae, autoencoder_describe(ae));
    // the file's own factor (8 for the tiny ones and SD's, 4 or 2 for smaller AutoencoderKLs), as prepare
    // says it
    if (S % autoencoder_factor(ae))
        usage_error("--size %d: %s takes sides that are multiples of %d", S, vae, autoencoder_factor(ae));
    if (autoencoder_check_address_space(ae, vae, S, "--size", err, sizeof err)) fc_die("%s", err);
    size_t E = (size_t)3 * S * S;
    int L = autoencoder_latent_channels(ae), h = S / autoencoder_factor(ae);
    real *frame = fc_malloc(sizeof(real) * E), *latent = fc_malloc(sizeof(real) * L * h * h),
         *back = fc_malloc(sizeof(real) * E);
    // the first frame read before anything is printed or opened: a missing, small or damaged input is
    // refused there
    FirstFrames *frames = first_frames_open(input, S, K, err, sizeof err);
    if (!frames || first_frames_next(frames, frame, err, sizeof err)) fc_die("%s", err);
    printf("autoencode: %s\n", autoencoder_describe(ae));
    printf("autoencode: %d frame%s of %dx%d from %s on %s, latents (%d, %d, %d)\n", K, K == 1 ? "" : "s", S, S, input,
           be->name, L, h, h);
    fflush(stdout);
    // the video's comment tag: what made it (paths as printable UTF-8)
    char comment[3 * PATH_MAX];
    snprintf(comment, sizeof comment, "%s autoencode: vae %s, input %s, %d frame%s of %dx%d on %s", fc_build_name(),
             vae, input, K, K == 1 ? "" : "s", S, S, be->name);
    fc_printable_line(comment);
    // the input's own rate unless --fps says otherwise (12, generate's, where the input has none); a
    // GIF holds at most VIDEO_GIF_MAX_FPS
    if (!fps) fps = first_frames_fps(frames) > 0 ? first_frames_fps(frames) : 12;
    // a GIF holds at most VIDEO_GIF_MAX_FPS, another video VIDEO_MAX_FPS (a high-speed camera's input
    // was written at 25 without a word)
    int most = gif ? VIDEO_GIF_MAX_FPS : VIDEO_MAX_FPS;
    if (out_path && generate_is_video_path(out_path) && fps > most) {
        printf("autoencode: %s at %d frames a second, the most a%s holds (the input has %g)\n", out_path, most,
               gif ? " GIF" : " video", fps);
        fps = most;
    }
    GenerateOutput *out = out_path ? generate_output_open(out_path, S, fps, overwrite, comment, err, sizeof err) : NULL;
    if (out_path && !out) fc_die("%s", err);
    uint8_t *rgb_in = fc_malloc(E), *rgb_out = fc_malloc(E);
    double sum = 0, lo = 1e9, hi = -1e9, t_enc = 0, t_dec = 0;
    int k = 0;
    // one frame at a time, read, encoded, decoded and written before the next is read: the memory
    // taken is one frame's whatever K (a clip shorter than K fails at its end, the output removed)
    for (; k < K && !fc_stop_signal(); k++) {
        if (k > 0 && first_frames_next(frames, frame, err, sizeof err)) die_discarding(out, err);
        double t0 = fc_now_s();
        if (autoencoder_encode(ae, frame, 1, S, S, latent, err, sizeof err)) die_discarding(out, err);
        double t1 = fc_now_s();
        if (autoencoder_decode(ae, latent, 1, h, h, back, err, sizeof err)) die_discarding(out, err);
        t_enc += t1 - t0, t_dec += fc_now_s() - t1;
        frame_to_rgb(rgb_in, frame, S);
        frame_to_rgb(rgb_out, back, S);
        double p = frame_psnr(rgb_in, rgb_out, S);
        sum += p, lo = p < lo ? p : lo, hi = p > hi ? p : hi;
        if (out && generate_output_add(out, back, err, sizeof err)) {
            die_discarding(out, err);
        }
    }
    int stopped = fc_stop_signal();
    if (stopped) {
        if (out) generate_output_discard(out);
        printf("autoencode: stopped by %s after %d of %d frames%s\n", fc_signal_name(stopped), k, K,
               out ? "; the partial output removed" : "");
    } else {
        if (out && generate_output_finish(out, err, sizeof err)) fc_die("%s", err);
        if (out) fc_stdout_is_report();  // a rerun would find the decoded frames there
        printf("autoencode: encode %.1f ms a frame, decode %.1f ms a frame%s%s\n", 1e3 * t_enc / K, 1e3 * t_dec / K,
               out_path ? "; decoded frames in " : "", out_path ? out_path : "");
        printf("round trip: mean PSNR %.2f dB over %d frame%s (min %.2f, max %.2f)\n", sum / K, K, K == 1 ? "" : "s", lo, hi);
    }
    fc_release_stop_signals();
    first_frames_close(frames);
    free(frame), free(latent), free(back), free(rgb_in), free(rgb_out);
    free_autoencoder(ae);
    return stopped ? 128 + stopped : 0;
}
