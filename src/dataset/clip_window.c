// clip_window.c: a plan's window cut whole from a clip (see clip_window.h).
#include <math.h>

#include "dataset/clip_window.h"

int clip_window_fits(const Config *c, const char *who, const Dataset *d, int *lo, char *err, size_t errlen) {
    int N = dataset_frame_size(d), CF = dataset_clip_frames(d), C = dataset_channels(d), hi = 0;
    if (c->channels != C || c->frame_size != N) {
        // where the sides alone differ, the size to prepare the footage at (through the autoencoder's factor)
        const LatentIdentity *lat = dataset_latent(d);
        char fix[160] = "";
        if (c->channels == C)
            snprintf(fix, sizeof fix, " (prepare the footage with --size %d%s)", c->frame_size * (lat ? lat->factor : 1),
                     lat ? " and the same --vae" : "");
        return fc_errf(err, errlen, "%s: %s are %dx%d%s, but %s makes %dx%d frames of %d channels%s", dataset_dir(d),
                       lat ? "latents" : "frames", N, N, lat ? "" : " RGB", who, c->frame_size, c->frame_size,
                       c->channels, fix);
    }
    *lo = 0;
    for (int f = 0; f < c->slots; f++) {
        float o = c->slot_offset[f];
        if (o != floorf(o) || fabsf(o) > 1e6f)
            return fc_errf(err, errlen, "%s: plan slot %d has offset %g, not a whole number of frames", who, f,
                           (double)o);
        if (!f || (int)o < *lo) *lo = (int)o;
        if (!f || (int)o > hi) hi = (int)o;
    }
    if (hi - *lo + 1 > CF)
        return fc_errf(err, errlen, "%s: the plan of %s spans %d frames, more than its clips have (clip_frames %d)",
                       dataset_dir(d), who, hi - *lo + 1, CF);
    return 0;
}

void clip_first_window(const Config *c, int lo, const uint8_t *clip, real *window) {
    int N = c->frame_size;
    size_t plane = (size_t)N * N;
    for (int f = 0; f < c->slots; f++) {
        const uint8_t *frame = clip + (size_t)((int)c->slot_offset[f] - lo) * plane * 3;
        real *o = window + (size_t)f * 3 * plane;
        for (size_t p = 0; p < plane; p++)
            for (int ch = 0; ch < 3; ch++) o[ch * plane + p] = (real)(frame[3 * p + ch] / 127.5 - 1.0);
    }
}
