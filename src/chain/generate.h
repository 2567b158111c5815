// generate.h: writing a chain's frames out, as `framechain generate` does: a video (.mp4/.mkv/.avi,
// .gif) or a new folder of numbered PNGs, through a temporary name renamed into place when whole.
// The sampling itself is sampler.h's.
#ifndef FRAMECHAIN_GENERATE_H
#define FRAMECHAIN_GENERATE_H

#include <stddef.h>

#include "base/common.h"

// Write frames 0..N-1 of frames ((N, 3, S, S) values in [-1, 1]) to out: a video when its extension
// names one (.mp4, .m4v, .mov, .mkv, .avi, .gif; fps frames a second), else a folder of
// frame-NNNNNN.png that must not exist yet. Nothing half-written is left behind. Returns 0, or -1
// with one line in err.
int generate_write_frames(const char *out, const real *frames, int N, int S, double fps, char *err, size_t errlen);

#endif
