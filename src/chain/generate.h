// generate.h: where `framechain generate` writes its frames: a video (.mp4/.mkv/.avi, .gif) or a new
// folder of numbered PNGs, written frame by frame as the chain makes them under a temporary name in
// the same folder, flushed to disk and renamed into place when whole. The sampling itself is
// sampler.h's.
#ifndef FRAMECHAIN_GENERATE_H
#define FRAMECHAIN_GENERATE_H

#include <stddef.h>

#include "base/common.h"

// Everything about the path out that can be known before sampling: its folder exists and is a
// folder we may write in; out does not exist, or overwrite is given and out is what would be written
// again (a file for a video, a folder of nothing but frame-NNNNNN.png for PNGs); out is not the input
// (a file, or a folder of frames), under any name (device and inode compared), nor a folder holding it,
// overwrite or not; nor the autoencoder file vae (--vae, NULL: none), which the command reads too; nor
// a video name with a '/' at its end (a.gif/: a folder or a file?). input may be a name that is no
// file (shapes:N). Returns 0, or -1 with one line in err naming out.
int generate_check_output(const char *out, const char *input, const char *vae, int overwrite, char *err,
                          size_t errlen);
// Whether out names a video (.mp4, .m4v, .mov, .mkv, .avi, .gif): else generate writes a folder of PNGs.
int generate_is_video_path(const char *out);
// Whether path names a still image (.png, .jpg, .bmp, .tiff, ...): one frame, never a folder of them.
int generate_is_still_path(const char *path);

typedef struct GenerateOutput GenerateOutput;

// Start writing frames of S x S to out (checked as above): a video when its extension names one (.mp4,
// .m4v, .mov, .mkv, .avi, .gif; fps frames a second), opened here so that the container and encoder
// are known to work, with comment (NULL: none) as its comment tag (video_writer_open); else a folder of
// frame-NNNNNN.png, which has no place for it. NULL with one line in err naming out.
GenerateOutput *generate_output_open(const char *out, int S, double fps, int overwrite, const char *comment, char *err,
                                     size_t errlen);
// The next frame ((3, S, S) values in [-1, 1]), written out now. 0, or -1 with one line in err.
int generate_output_add(GenerateOutput *g, const real *frame, char *err, size_t errlen);
// Close what was written, flush it to disk and rename it into place (replacing the old out only with
// overwrite). Frees g; on failure nothing is left of it. 0, or -1 with one line in err naming out.
int generate_output_finish(GenerateOutput *g, char *err, size_t errlen);
// Remove what was written and free g (a failure before the end).
void generate_output_discard(GenerateOutput *g);

#endif
