// run_folder.h: a training run's folder on disk. One trainer holds it at a time (a lock); a write
// cut off by a crash leaves only a temporary file, removed at the next start; the metrics file is
// cut back to the checkpoint the run resumes from, so that a resumed run's reads like an
// uninterrupted one's; and the run starts from its newest whole checkpoint, a fork's parent or
// step 0. Rank 0's alone (train.c).
#ifndef FRAMECHAIN_RUN_FOLDER_H
#define FRAMECHAIN_RUN_FOLDER_H

#include <stdio.h>

#include "base/config.h"
#include "model/model.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include "train/lineage.h"

// Make the folder where it is missing (removed again at exit if nothing but the lock ends up in it:
// a start refused after this leaves nothing on disk), take its lock (dies when another trainer
// holds it), make the folder's name durable and remove cut-off checkpoint writes. Returns the
// lock's file descriptor, held until the process ends.
int run_folder_open(const char *run);
// Whether RUN/.lock is still the file that `lock` (run_folder_open's) holds: a run folder renamed
// while the train runs leaves the name RUN free for another folder, perhaps another train's, which
// this train's checkpoints and their pruning must never reach. 0, or -1 with one line in err.
// Checked before each checkpoint is written.
int run_folder_still_held(const char *run, int lock, char *err, size_t errlen);
// The highest step RUN/metrics.jsonl records (lines torn or put in by hand aside); 0 where none.
long run_folder_metrics_last_step(const char *run);
// metrics.jsonl opened for appending, its lines of steps after `last` dropped first (a FIFO in its
// place is refused; a rewrite that fails leaves no temporary file).
FILE *run_folder_metrics(const char *run, int last);
// How this command starts the run: from its own newest checkpoint (extended or not), from a fork's
// parent, or from step 0. Returns 1 when the fork's first checkpoint is still to be written.
// loaded (4096 bytes): the checkpoint the weights came from ("" for step 0), read in *mode.
// A run folder with no checkpoint it can resume from that was trained before (checkpoints set aside
// as .unusable, metrics lines past the start) is refused in one line, never started again from scratch
// (step 0, or a fork's parent).
int run_folder_start_from(const char *run, Model *m, real *ema, Optimizer *o, const Config *c,
                          const TrainOrigin *origin, TrainState *st, char *loaded, CkptLoadMode *mode);

// Whether another train holds RUN's lock now (the lock is not taken: run_folder_open takes it): -1
// with the line that says so, else 0. Said before anything reads the run's checkpoints, which that
// train writes and prunes as they are read.
int run_folder_busy(const char *run, char *err, size_t errlen);

// What run_folder_start_from would refuse of this run, from the checkpoints' metadata alone: the
// newest checkpoint whose metadata reads against c, the data this command trains on and, for train
// --from, the parent (or, where the run has none, the fork's parent against c); a folder that lists no
// checkpoint but was trained before. 0, or -1 with the same line the start would die with. Reads only;
// before the plan and allocations.
int run_folder_precheck(const char *run, const Config *c, const TrainOrigin *origin, char *err, size_t errlen);

// train --from PARENT where PARENT cannot be read (err: that line) and no whole checkpoint of RUN names it
// (lineage_resume_fork): where RUN holds checkpoints, err becomes one line about them instead (none of
// them can be resumed from, damaged or set aside as damaged: the newest named and why; or a whole one
// of another run); where it holds none, the parent's line stands. Reads only.
void run_folder_explain_orphan(const char *run, const char *from, char *err, size_t errlen);

// How many of RUN's checkpoints were set aside as damaged (ckpt-*.safetensors.unusable*).
int run_folder_set_aside(const char *run);

// Where a run with no checkpoint to resume from would start again, as train's refusal names it (out:
// "its parent PATH (step N)" for a fork of parent PATH, "step 0" where parent is NULL).
void run_folder_restart_point(const char *parent, int parent_step, char *out, size_t len);
// The parent a fork's checkpoints name, damaged and set-aside ones included (their parent metadata,
// else their lineage's last "forked from" line): 1 with its path as recorded (into parent) and step;
// 0 where their metadata names none (not a fork); -1 where no file's metadata reads. Reads only.
int run_folder_named_parent(const char *run, char *parent, size_t len, int *step);

// The disk the run's checkpoints need (ckpt_bytes each, at least: their tensors): keep_checkpoints of
// them and the next one written beside them, or fewer where the folder's and the writes more this run
// makes (checkpoint_every's, the last step's) come to fewer, said in one line with what the run folder's
// file system has free. 0, with a warning where it has room for the next checkpoint but not for all it will hold;
// -1 with err where it has no room for even one (no checkpoint of the run could be written). Rank 0's,
// before the first step.
int run_folder_disk_plan(const char *run, double ckpt_bytes, int keep, int writes, char *err, size_t errlen);
// The sentence of what the run's checkpoints take (ckpt_bytes each; held_n in the folder and writes more,
// at most keep of them and the one being written), as train and inspect --config say it.
void run_folder_disk_needs(char *buf, size_t len, double ckpt_bytes, int keep, int held_n, int writes);
// The checkpoints a run writes from step first to last: checkpoint_every's and the last step's.
int run_folder_checkpoint_writes(int first, int last, int every);

#endif
