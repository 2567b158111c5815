// loader.h: training batches from a clip dataset (shards.h), made by background threads ahead of the
// step that needs them.
//
// What window b of step s sees is a pure function of (seed, s, b), so a resumed run needs only the
// step and sees the samples of the uninterrupted one, whatever the thread count or the timing (b is
// the window's index in the step's global batch: a rank that makes windows b0 .. b0 + batch - 1 of
// it draws them as one rank drawing the whole batch would, dist.h):
//   u(j)  = philox_u32(seed, s, RNG_DATA, b * 512 + j)
//   pick(n, j0) = u(j) mod n for the first j = j0, j0 + 1, ... with u(j) < 2^32 - (2^32 mod n)
//                 (rejection: exactly uniform; after 256 rejections, which never happens, the last u mod n)
//   clip  = pick(clips, 0)
//   t0    = -min_offset + pick(clip_frames - (max_offset - min_offset), 256)
//   flip  = philox_u32(seed, s, RNG_AUG, 2^48 + b) >> 31     (1: mirror every frame left to right)
//   speed = 2 when philox_uniform(seed, s, RNG_AUG, 2^49 + b) < fast_fraction and the plan's span at
//           2x fits in a clip, else 1; at 2x, t0 = -2 min_offset + pick(clip_frames - 2 (max - min), 256)
//   shapes: philox_uniform(seed, s, RNG_AUG, 2^50 + b) < mix_shapes: the window is the moving-shapes
//           clip (seed, s, b) from time 100 u(511), at the plan's offsets, instead of footage
//   damaged clip: when the drawn clip fails its check (dataset_read_clip says DATASET_CLIP_DAMAGED),
//           the window shows the next good clip in dataset order (clip + 1, clip + 2, ..., wrapping
//           around) with every other draw above unchanged (all clips have the same length). Which
//           clips are damaged is a property of the dataset's bytes, so the window is still a pure
//           function of (seed, s, b) for a given dataset, and a resumed run sees what the uninterrupted
//           one saw. Each damaged clip is named once on stderr; loader_stop counts the windows.
//   excluded clip: a clip the config's exclude list names (exclude.h) is never shown: a window that
//           draws it shows the next clip in dataset order that is neither excluded nor damaged, by the
//           rule above, with every other draw unchanged. The list is fixed for the run (its CRC is part
//           of the run's data identity, lineage.h), so the window stays a pure function of (seed, s, b).
// and slot f is frame t0 + speed * slot_offset[f] of the clip (offsets are whole numbers of frames and
// may be negative; every slot's frame lies inside the clip). Pixel p becomes (real)(p / 127.5 - 1.0) (in
// double, then rounded).
//   latents (a dataset made by prepare --vae): slot f is the stored F16 latents of that frame, those of
//           the mirrored frame when flip, as floats; a window reads only its own frames, each checked
//           by its CRC. A window whose frames fail their check shows the next clip in dataset order whose
//           frames at the same times are good (the rule of a damaged clip above, decided by the window's
//           own frames: a pure function of the dataset's bytes).
//   crop (crop_zoom > 1, footage windows only), from v(j) = philox_uniform(seed, s, RNG_AUG, 2^51 + 8 b + j):
//           side = N / (1 + (crop_zoom - 1) v(0)), room = N - side, span = speed (max_offset - min_offset),
//           vmax = min(crop_pan, room / span) (0 when span is 0), velocity vx = vmax (2 v(1) - 1),
//           vy = vmax (2 v(2) - 1), start ax = max(0, -vx span) + v(3) (room - |vx| span), ay the same with
//           v(4); slot f's crop has its corner at a + v speed (slot_offset[f] - min_offset), and output pixel
//           (x, y) (x mirrored first when flip) is the bilinear sample at a + ((x, y) + 0.5) (side / N) - 0.5
//           (clamped to the frame) of the values above, in double (top row, bottom row, then between
//           them, each as v0 (1 - w) + v1 w), then rounded.
#ifndef FRAMECHAIN_LOADER_H
#define FRAMECHAIN_LOADER_H

#include <stdint.h>

#include "base/common.h"
#include "backend/backend.h"
#include "base/config.h"
#include "formats/shards.h"

#define LOADER_INDEX_STRIDE 512                  // Philox elements per window in RNG_DATA
#define LOADER_FLIP_BASE ((uint64_t)1 << 48)     // the flips' first element in RNG_AUG
#define LOADER_FAST_BASE ((uint64_t)1 << 49)     // the 2x-speed draws' first element in RNG_AUG
#define LOADER_SHAPES_BASE ((uint64_t)1 << 50)   // the moving-shapes draws' first element in RNG_AUG
#define LOADER_CROP_BASE ((uint64_t)1 << 51)     // the crops' first element in RNG_AUG (8 a window)

typedef struct Loader Loader;

// Start `threads` background threads that fill `prefetch` batch buffers (host memory from
// be->host_alloc, page-locked on the GPU backend; plain host memory when be is NULL) with the
// batches of steps first_step, first_step + 1, ... for c's plan (c->slots, c->slot_offset;
// c->frame_size and c->channels must be the dataset's: 3 for frames, a latent dataset's channels and
// latent side for latents, which take no crop_zoom and no mix_shapes). One more buffer is
// allocated for the batch the trainer holds, so `prefetch` batches are made ahead of it.
// NULL with a one-line reason: a plan whose span does not fit in the dataset's clips, an offset
// that is not a whole number, a frame size or channel count the dataset does not have, an exclude
// list (c->exclude) that cannot be read, names a clip the dataset does not have or excludes them all.
// b0: the global index of this loader's first window (0 for one rank).
Loader *loader_start(const Backend *be, const Dataset *d, const Config *c, int batch, int b0, uint64_t seed,
                     int first_step, int threads, int prefetch, char *err, size_t errlen);
// loader_start with c->exclude already read (exclude_list_read's mask: dataset_clips(d) bytes, copied),
// so that a caller that checked the list first reads it once; NULL: as loader_start, which reads it.
Loader *loader_start_excluding(const Backend *be, const Dataset *d, const Config *c, const uint8_t *excluded,
                               int batch, int b0, uint64_t seed, int first_step, int threads, int prefetch,
                               char *err, size_t errlen);
// Whether config c can train on dataset d: its channels and frame_size are the dataset's (RGB frames:
// 3 and their side; latents: the latent channels and side), and a latent dataset meets no crop_zoom
// or mix_shapes, and the plan's slots span no more frames than its clips hold. 0, or -1 with one line
// naming the dataset and the key.
int loader_check_config(const Dataset *d, const Config *c, char *err, size_t errlen);
// Whether the config asks for windows at 2x speed (fast_fraction > 0) that dataset d's clips are too
// short to hold (the plan's span at twice its offsets): then every window plays at 1x, and why says so
// in one line with the --clip-frames that would hold them. 1 or 0.
int loader_fast_unused(const Dataset *d, const Config *c, char *why, size_t whylen);
// The host memory loader_start(..., batch, ..., threads, prefetch) takes for dataset d and config c:
// its prefetch + 1 batches of windows, each thread's clip, its marks a clip (the memory plan's line).
double loader_plan_bytes(const Dataset *d, const Config *c, int batch, int threads, int prefetch);
// The batch of `step`: (batch, slots, C, N, N) values, in [-1, 1] for frames, channel-planar as shapes_batch
// makes them. Steps are asked for one after another from first_step. Blocks until the batch is
// ready; *wait_s (when not NULL) = the seconds it waited. The batch stays valid until the next
// loader_get or loader_stop. NULL with a one-line reason when a shard cannot be read (gone, changed
// size since opening), when every clip of the dataset is damaged, or when the step is not the next
// one. A damaged clip is not an error: see "damaged clip" above.
const real *loader_get(Loader *l, int step, double *wait_s, char *err, size_t errlen);
// The windows of the batches handed out so far that showed a substitute for a damaged clip;
// *damaged_clips (when not NULL) = the damaged clips found so far.
long loader_substituted(Loader *l, int *damaged_clips);
// The bytes read from the shards so far (every read, prefetched batches included), and *windows (when
// not NULL) the windows made. Frames read whole clips (a thread keeps its last one); latents read only
// a window's own frames, so their bytes a window do not grow with the clips' length.
double loader_bytes_read(Loader *l, long *windows);
// The warning line of damaged clips: `clips` of the dataset in dir skipped, `windows` windows that
// showed a substitute. loader_stop says it for its loader; the ranks of a run say it once for all
// their loaders (train.c).
void loader_warn_damage(const char *dir, int clips, long windows);
// Stop the threads (they finish the window they are on) and free everything; when damaged clips were
// found, loader_warn_damage's line first. NULL is fine.
void loader_stop(Loader *l);
// The same without the line: damaged[i] = 1 for each clip found damaged, else 0 (dataset_clips values),
// *substituted the windows that showed a substitute.
void loader_stop_silent(Loader *l, uint8_t *damaged, long *substituted);

#endif
