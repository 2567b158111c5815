// checkpoint.h: training checkpoints. RUN/ckpt-XXXXXXXX.safetensors (the step, 8 digits) holds the
// fp32 master weights (model.*), their EMA (ema.*), the whole optimizer state (optim.*: the 8-bit
// moments with their absmax and code maps, or fp32 moments) and the trainer state with a CRC32 per
// tensor in __metadata__. There is no way to write one without the optimizer state.
#ifndef FRAMECHAIN_CHECKPOINT_H
#define FRAMECHAIN_CHECKPOINT_H

#include "config.h"
#include "model.h"
#include "optim.h"

#define CKPT_FORMAT "framechain-checkpoint"
#define CKPT_VERSION 1

// What the trainer carries across a restart besides the tensors.
typedef struct {
    int step;            // optimizer updates done
    double smooth_loss;  // the progress line's smoothed loss, exactly, so a resumed run prints the same
} TrainState;

typedef enum {
    CKPT_OK = 0,
    CKPT_CORRUPT = 1,  // torn, truncated, a CRC that fails, not a checkpoint: skip it, try an older one
    CKPT_REFUSED = 2,  // whole, but not a continuation of this run (other config, no optimizer state)
} CkptStatus;

// Write the checkpoint of state s crash-safely (temp file, fsync, rename, fsync the folder), then
// delete all but the newest keep_checkpoints. Returns 0, or -1 with one line in err; a failure
// leaves every earlier checkpoint as it was.
int checkpoint_save(const char *run, const Model *m, const real *ema, const Optimizer *o, const Config *c,
                    const TrainState *s, char *err, size_t errlen);

// Load one checkpoint into m, ema and o after checking every CRC and that it continues this run.
CkptStatus checkpoint_load(const char *path, Model *m, real *ema, Optimizer *o, const Config *c, TrainState *s,
                           char *err, size_t errlen);

// For generation: the newest usable checkpoint of RUN (CRCs checked; a bad one is skipped with a
// warning), as a model of batch B on `be` holding the checkpoint's config and its EMA weights.
// NULL with one line in err (no such folder, no checkpoint, none usable); *step is its step.
Model *checkpoint_load_for_generation(const char *run, const Backend *be, int B, int *step, char *err,
                                      size_t errlen);

// The steps of RUN's checkpoints, newest first; returns how many (*steps is malloc'ed).
int checkpoint_list(const char *run, int **steps);

// The path of the checkpoint of `step` in `run`.
void checkpoint_path(char *buf, size_t len, const char *run, int step);

#endif
