// prepare.h: `framechain prepare`: videos and frame folders in, clip shards out.
#ifndef FRAMECHAIN_PREPARE_H
#define FRAMECHAIN_PREPARE_H

#include <stddef.h>

#include "model/autoencoder.h"

typedef struct {
    const char **inputs;     // video files, folders of videos, folders of PNG/JPEG frames
    int n_inputs;
    const char *out;         // the dataset folder
    int size;                // frames become size x size RGB
    int clip_frames;         // frames per clip
    int overlap;             // frames shared by consecutive clips of one source (0: none)
    double fps;              // resample to this many frames per second (0: keep every frame)
    size_t max_shard_bytes;  // clip bytes per shard, at most
    Autoencoder *ae;         // --vae: store latents (formats/shards.h) made by this encoder; NULL: frames
    const char *vae;         // its file
} PrepareOptions;

// Returns the exit status: 0 when at least one clip came out, 1 when none did.
int prepare_run(const PrepareOptions *o);

#endif
