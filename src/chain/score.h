// score.h: each clip of a dataset scored by a trained model's loss on it (`framechain score`), to
// find the clips a run learns least from (noise, frozen or shuffled footage) and leave them out.
//
// The score of a clip under a run is the training objective (flow.h: the masked MSE of the predicted
// velocity over the plan's target slots, against frame or delta targets as the run trains) at fixed
// draws, so that scores are comparable between clips and repeatable:
//   - the run's EMA weights of its newest usable checkpoint, as generate loads them;
//   - the clip's first window: t0 = -min_offset of the plan, no flip, no crop, speed 1, no ref_noise;
//   - K noise levels, t_k = sigmoid(t_logit_mean + t_logit_std z_k), z_k the standard normal's
//     (k + 0.5) / K quantile, from the scored run's config (the same t_k for the reference run), every
//     target slot at t_k, the anchor and context slots clean (no noise augmentation, no cond_drop);
//   - the noise e of level k: philox_fill_normal(SCORE_SEED, k, RNG_NOISE) over one window's
//     (F, C, N, N) values, the same for every clip;
//   - the loss is the mean over the K levels.
// With a reference run, the score is the run's loss minus the reference's (the reducible loss);
// without one, the run's loss.
//
// Two clips the loss cannot see are found from the clip's frames alone, over all of them:
//   - motion: the mean absolute change from one frame to the next (8-bit values);
//   - order: motion divided by the mean absolute change over 4 frames. Footage moves farther in 4
//     frames than in 1 (vtest.avi and Megamind.avi at 32x32: 0.29 to 0.39); frames out of time
//     order, or noise, change about as much in 1 as in 4 (two shuffled clips: 0.75, 0.95; noise: 1.0).
// A clip with motion under SCORE_FROZEN_MOTION is noted "frozen" (a stalled stream: its deltas are
// zero, its loss low); one with order above SCORE_UNORDERED_ORDER and motion of at least
// SCORE_UNORDERED_MOTION is noted "unordered" (shuffled frames, noise, or a still scene's sensor
// noise). Noted clips sort first, by score among themselves: they are what a pruning list should
// take before the clips that are only hard.
#ifndef FRAMECHAIN_SCORE_H
#define FRAMECHAIN_SCORE_H

#include <stddef.h>

#include "backend/backend.h"
#include "formats/shards.h"

#define SCORE_SEED 0x5C0BE5ULL  // the noise draws' seed (never a training seed's business)
#define SCORE_DEFAULT_LEVELS 4
#define SCORE_MAX_LEVELS 64
#define SCORE_DEFAULT_BATCH 16
#define SCORE_FROZEN_MOTION 0.1     // 8-bit values a frame: under it, a clip is "frozen"
#define SCORE_UNORDERED_ORDER 0.6   // motion over 1 frame / over 4: above it (with enough motion), "unordered"
#define SCORE_UNORDERED_MOTION 1.0  // the least motion (8-bit values a frame) a clip is called unordered with

enum ScoreNote { SCORE_NOTE_NONE = 0, SCORE_NOTE_FROZEN = 1, SCORE_NOTE_UNORDERED = 2 };

typedef struct {
    int clip;         // dataset clip index
    int damaged;      // 1: the clip fails its check (DATASET_CLIP_DAMAGED): no loss
    double loss;      // under the run
    double ref_loss;  // under the reference (NAN without one)
    double score;     // loss, or loss - ref_loss
    double motion;    // mean absolute change from frame to frame, 8-bit values (NAN when damaged)
    double order;     // motion / the mean absolute change over 4 frames (NAN: fewer than 5 frames, or none)
    int note;         // enum ScoreNote
} ClipScore;

typedef struct {
    const char *run, *reference;  // reference: NULL for none
    int levels;                   // K
    int batch;                    // windows a forward pass
} ScoreOptions;

// Score every clip of d (sorted: noted clips first, then the others, each by score descending, ties by
// clip index; damaged clips last). *scores:
// dataset_clips(d) entries, malloc'ed. 0, or -1 with one line: a run without a usable checkpoint, a
// model whose frame size, channels or plan span does not fit d, a reference of another plan or targets
// than the run (checked before any scoring), a read failure.
int score_clips(const ScoreOptions *o, const Dataset *d, const Backend *be, ClipScore **scores, char *err,
                size_t errlen);

// The scores as TSV at path (crash-safe: a temporary file, then rename): a header, then one line a
// clip: shard, clip (k in the shard), dataset clip index, source, first frame, loss (and with a
// reference ref_loss and score), motion, order, note ("frozen", "unordered"; "damaged": no numbers). 0, or -1 with one line.
// overwrite: as st_write_output's.
int score_write_tsv(const Dataset *d, const ClipScore *s, int n, int with_reference, const char *path, int overwrite,
                    char *err, size_t errlen);
// score_write_tsv's text, malloc'ed (its length in *len), for a caller that writes it beside another
// file (st_write_outputs); NULL with one line in err.
char *score_tsv_text(const Dataset *d, const ClipScore *s, int n, int with_reference, size_t *len, char *err,
                     size_t errlen);

#endif
