// preview.h: previews of a training run (config key sample_every). Every sample_every steps the
// model, with its EMA weights standing in (train.h, TrainHooks), samples its own plan's windows from
// a fixed set of windows of footage and the image RUN/samples/step-XXXXXXXX.png shows them: for
// each window a row of the frames the model was given and the frames it made, above a row of the real
// frames, the slots in time order.
//
// A run on latents (prepare --vae) shows them decoded: the windows' latents read, sampled in latent
// space, each frame decoded by the autoencoder train --vae gives (the very file the data was made with).
//
// The windows: up to PREVIEW_WINDOWS (and at most batch_size, the batch the model samples at once),
// each the first window of one clip (clip_window.h) of preview_data, or of the run's own --data when
// preview_data is none; the clips evenly spaced over the dataset, a damaged one replaced by the next.
// On the built-in moving shapes, the clips of step 0, which no training step draws. The choice is a
// pure function of the data and the config, written to RUN/samples/windows.tsv by the first preview
// of a process (rewritten, with a line, when the data changed). The sampling: the model's sample_steps, noise level 0.1 on the context
// frames, guidance 1, the model's sample_temperature, the run's seed: the same run gives the same previews.
#ifndef FRAMECHAIN_PREVIEW_H
#define FRAMECHAIN_PREVIEW_H

#include <stddef.h>

#include "base/config.h"
#include "model/autoencoder.h"
#include "model/model.h"

#define PREVIEW_WINDOWS 4

typedef struct Preview Preview;

// The previews of run for config c: windows chosen and read; nothing written yet (the run folder is
// not locked yet). train_data: the run's --data (NULL: the built-in shapes). NULL with one line in err
// when the data cannot serve c's plan (a folder that is no dataset, frames of another size, clips
// shorter than the plan): train stops before anything is written. ae, vae: for data of latents, the
// autoencoder and its file (checked against the dataset's record by its SHA-256), kept for the decoding
// (the caller frees it after preview_close); NULL for frames (refused with latents, and the reverse).
// The host memory the previews of config c take that its memory plan's previews line does not count
// (the figure, its PNG's encoding; with factor > 1, an autoencoder's, the real windows decoded; with
// with_windows, the windows preview_open holds, which train measures as its own before the plan).
double preview_plan_bytes(const Config *c, int factor, int with_windows);
Preview *preview_open(const Config *c, const char *run, const char *train_data, Autoencoder *ae, const char *vae,
                      char *err, size_t errlen);

// The preview of `step` (TrainHooks.preview): m holds the EMA weights, at c's batch size. The first
// also makes RUN/samples and writes windows.tsv. An image (or the record) that cannot be written is
// skipped with one line on stderr (-1; else 0); the run goes on.
int preview_take(void *preview, Model *m, int step);

// 1 when the image of `step` is not in RUN/samples (TrainHooks.missing).
int preview_missing(void *preview, int step);

// "4 windows of out/data (clips 0, 12, 24, 36)", for train's start-up line.
const char *preview_describe(const Preview *p);

void preview_close(Preview *p);

#endif
