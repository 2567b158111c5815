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
#ifndef FRAMECHAIN_SCORE_H
#define FRAMECHAIN_SCORE_H

#include <stddef.h>

#include "backend/backend.h"
#include "formats/shards.h"

#define SCORE_SEED 0x5C0BE5ULL  // the noise draws' seed (never a training seed's business)
#define SCORE_DEFAULT_LEVELS 4
#define SCORE_MAX_LEVELS 64
#define SCORE_DEFAULT_BATCH 16

typedef struct {
    int clip;         // dataset clip index
    int damaged;      // 1: the clip fails its check (DATASET_CLIP_DAMAGED): no loss
    double loss;      // under the run
    double ref_loss;  // under the reference (NAN without one)
    double score;     // loss, or loss - ref_loss
} ClipScore;

typedef struct {
    const char *run, *reference;  // reference: NULL for none
    int levels;                   // K
    int batch;                    // windows a forward pass
} ScoreOptions;

// Score every clip of d (sorted: score descending, ties by clip index, damaged clips last). *scores:
// dataset_clips(d) entries, malloc'ed. 0, or -1 with one line: a run without a usable checkpoint, a
// model whose frame size, channels or plan span does not fit d, a read failure.
int score_clips(const ScoreOptions *o, const Dataset *d, const Backend *be, ClipScore **scores, char *err,
                size_t errlen);

// The scores as TSV at path (crash-safe: a temporary file, then rename): a header, then one line a
// clip: shard, clip (k in the shard), dataset clip index, source, first frame, loss (and with a
// reference ref_loss and score), note ("damaged": no numbers). 0, or -1 with one line.
int score_write_tsv(const Dataset *d, const ClipScore *s, int n, int with_reference, const char *path, char *err,
                    size_t errlen);

#endif
