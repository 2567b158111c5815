// clip_window.h: a plan's window cut whole from a clip: each slot's frame at its offset, counted from the
// clip's first frame that the plan's earliest slot can take. What `framechain score` scores and the
// previews of a training run show: no crop, flip or speed, the same window every time.
#ifndef FRAMECHAIN_CLIP_WINDOW_H
#define FRAMECHAIN_CLIP_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"
#include "base/config.h"
#include "formats/shards.h"

// Whether c's frames and plan fit d's clips (RGB frames, or a latent dataset's latents): 0 with *lo = the
// plan's earliest offset, or -1 with one line naming d and `who` (the run or config the plan is of): another
// frame size or channel count, an offset that is not a whole number of frames, a plan longer than a clip.
int clip_window_fits(const Config *c, const char *who, const Dataset *d, int *lo, char *err, size_t errlen);

// The first window of a clip (F * N * N * 3 bytes as dataset_read_clip gives them) into window
// (F, 3, N, N) values in [-1, 1]: slot f is frame offset[f] - lo.
void clip_first_window(const Config *c, int lo, const uint8_t *clip, real *window);

#endif
