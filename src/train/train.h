// train.h: the training loop of `framechain train`.
#ifndef FRAMECHAIN_TRAIN_H
#define FRAMECHAIN_TRAIN_H

#include "backend/backend.h"
#include "base/config.h"
#include "train/lineage.h"

// Train (or resume) the run in folder `run` with config c on backend be, on the prepared dataset in
// folder `data` (NULL: the built-in moving shapes). Returns the exit status:
// 0 when the run reached c->steps, 128 + signal when SIGINT or SIGTERM stopped it after a checkpoint.
// Dies with one line on anything that must not go on (a NaN loss, a failed checkpoint write, a
// checkpoint that does not continue this run).
// vram_budget: bytes a GPU run's memory plan may reach (--vram-budget); not checked on the CPU.
// Checkpoints are written by a background thread (checkpoint.h) while training goes on;
// sync_checkpoints: each one is finished before the next step (--sync-checkpoints, to compare).
// origin: how the command starts the run besides resuming it (lineage.h: --extend, --from); NULL: plain.
int train_run(const Config *c, const char *run, const char *data, const Backend *be, const TrainOrigin *origin,
              double vram_budget, int sync_checkpoints);

#endif
