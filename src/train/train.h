// train.h: the training loop of `framechain train`.
#ifndef FRAMECHAIN_TRAIN_H
#define FRAMECHAIN_TRAIN_H

#include "backend/backend.h"
#include "base/config.h"
#include "model/model.h"
#include "train/lineage.h"

// What a command adds to the loop. preview (NULL: none), every c->sample_every steps and at the last
// step, after the step's checkpoint was handed to the writer: the model then holds the EMA weights
// (the weights it trains are put back when it returns, byte for byte, so previews change nothing the
// run computes); it must not write the parameters. Its time is shown in the progress line and summed
// at the end. A preview that cannot be made is the hook's to report (it returns -1, else 0); the run
// goes on, and its summary counts it apart from those written. missing (NULL:
// never asked): whether the preview of `step` is not on disk; a run that resumes from a step whose
// preview was due draws it first when it is (a stop by a signal skips its step's preview).
typedef struct {
    int (*preview)(void *ctx, Model *m, int step);
    void *ctx;
    double resident;  // backend memory the hooks hold for the whole run (the previews' autoencoder): planned
    double resident_loaded;  // the part of it already allocated when the plan is made (the autoencoder's
                             // weights): on the CPU the process's measured memory holds it already
    int (*missing)(void *ctx, int step);
    const char *vae;  // the previews' autoencoder file (train --vae), named in the command a NaN stop prints
    const char *notes;  // lines the command has to say once the run starts (after its data and folder
                        // checks, whose refusals stay one line), or NULL
    double preview_host;  // host memory a preview takes beyond the plan's own line (its figure, the PNG's
                          // encoding, decoded frames): planned
} TrainHooks;

// Train (or resume) the run in folder `run` with config c on backend be, on the prepared dataset in
// folder `data` (NULL: the built-in moving shapes). Returns the exit status:
// 0 when the run reached c->steps, 128 + signal when SIGINT or SIGTERM stopped it after a checkpoint.
// Dies with one line on anything that must not go on (a NaN loss, a failed checkpoint write, a
// checkpoint that does not continue this run).
// vram_budget: bytes a GPU run's memory plan may reach (--vram-budget); not checked on the CPU.
// Checkpoints are written by a background thread (checkpoint.h) while training goes on;
// sync_checkpoints: each one is finished before the next step (--sync-checkpoints, to compare).
// origin: how the command starts the run besides resuming it (lineage.h: --extend, --from); NULL: plain.
// hooks: NULL, or what the command adds (above).
int train_run(const Config *c, const char *run, const char *data, const Backend *be, const TrainOrigin *origin,
              double vram_budget, int sync_checkpoints, const TrainHooks *hooks);

#endif
