// checkpoint.h: training checkpoints. RUN/ckpt-XXXXXXXX.safetensors (the step, 8 digits) holds the
// fp32 master weights (model.*), their EMA (ema.*), the whole optimizer state (optim.*: the 8-bit
// moments with their absmax and code maps, or fp32 moments) and the trainer state with a CRC32 per
// tensor in __metadata__, and one of the metadata itself (CKPT_META_CRC). There is no way to write one
// without the optimizer state.
#ifndef FRAMECHAIN_CHECKPOINT_H
#define FRAMECHAIN_CHECKPOINT_H

#include <stdio.h>

#include "base/config.h"
#include "model/model.h"
#include "model/optim.h"
#include "formats/safetensors.h"

#define CKPT_FORMAT "framechain-checkpoint"
#define CKPT_VERSION 1
// What the file's config and tensors mean, beside the format they are stored in: raised whenever a
// config key's meaning or range changes, so that a later framechain can tell a file written before
// the change from one written after (README, "Upgrading": what each revision changed). Checkpoints
// record it as "revision"; those of earlier builds have none (revision 0). A file of a later
// revision than this framechain's is refused: it may mean what this one cannot know.
#define CKPT_REVISION 1
// The metadata key of the CRC32 (8 hex digits) that covers every other metadata entry but the
// crc32.* ones, sorted by key, each as KEY NUL VALUE NUL. Checkpoints of earlier builds have none.
#define CKPT_META_CRC "crc32.__metadata__"

// What the trainer carries across a restart besides the tensors.
typedef struct {
    int step;            // optimizer updates done
    double smooth_loss;  // the progress line's smoothed loss, exactly, so a resumed run prints the same
    // The run's history (lineage.h), carried from checkpoint to checkpoint: "" for a run trained
    // from step 0 with one config.
    char parent[1200];   // a fork's parent: "PATH (step N, crc32 XXXXXXXX)"
    char data[1200];     // what it trains on (lineage_data_identity): a resume on other data is refused
    char lineage[4096];  // one line per fork or extension, oldest first
    // A run on latents (prepare --vae): the autoencoder they were made with (latent_identity_text), so
    // that generate can refuse another; "" for a run on frames.
    char autoencoder[320];
    // The device its steps were made on, "cpu (fp32)", "cuda (bf16)" or "cuda-fp32 (fp32)": a resume or
    // fork on another is said and recorded in the lineage (train.c); "" in checkpoints of earlier builds.
    char device[64];
} TrainState;

// What a checkpoint loaded into a run must share with the run's config.
typedef enum {
    CKPT_CONTINUE = 0,  // every key but those that change no arithmetic (steps included): a resume
    CKPT_EXTEND = 1,    // the same, but steps and schedule_end may differ (train --extend)
    CKPT_FORK = 2,      // only the keys of the network and of its outputs (train --from)
} CkptLoadMode;

typedef enum {
    CKPT_OK = 0,
    // torn, truncated, a CRC that fails (of a tensor or of the metadata), a value that is not finite (weights,
    // EMA or optimizer state), a metadata value that does not read, not a checkpoint: skip it, try an older one
    CKPT_CORRUPT = 1,
    // whole, but not a continuation of this run (other config, no optimizer state, a tensor missing, of
    // another shape or not the network's, another format version)
    CKPT_REFUSED = 2,
} CkptStatus;

// Write the checkpoint of state s crash-safely (temp file, fsync, rename, fsync the folder), then
// delete all but the newest keep_checkpoints that are whole (a file that is not is set aside, see
// checkpoint_set_aside). Returns 0, or -1 with one line in err; a failure
// leaves every earlier checkpoint as it was.
int checkpoint_save(const char *run, const Model *m, const real *ema, const Optimizer *o, const Config *c,
                    const TrainState *s, char *err, size_t errlen);
// A run resumed from its checkpoint of step `resumed` (read back whole): a kill between a checkpoint's
// rename and the prune after it leaves one more than keep on disk, and each such kill one more. Where
// the folder holds more than keep, they are pruned as checkpoint_save prunes, before the first step,
// so that it never holds more than keep and the one being written.
void checkpoint_prune_extra(const char *run, int keep, int resumed);

// ---- the checkpoint writer (checkpoint_async.c): checkpoints that do not stall training ----
// One staging buffer of host_alloc memory (page-locked on a GPU) for the whole checkpoint, allocated
// once, and one background thread. submit issues the copies of every tensor on the backend's side
// stream and returns; the thread waits for them to land, computes the CRCs and writes the file
// exactly as checkpoint_save does (the same bytes). The saved tensors must not change until the
// copies have landed: the trainer calls ckpt_writer_wait_copy before anything that writes them (the
// optimizer step, the EMA update). A failed write is reported by the next submit, wait_copy or
// finish as "checkpoint at step N failed: ... (the earlier checkpoints are untouched)", or as
// run_folder_still_held's line where the run folder was moved away.
// Only one thread may call these functions.
typedef struct CkptWriter CkptWriter;

// m, ema, o and c must outlive the writer. run_lock: the run folder's lock (run_folder_open), or -1;
// a checkpoint is written only while RUN/.lock is still that file (run_folder_still_held), else the
// write fails with that line. log: where a line per checkpoint goes when it is written (NULL:
// nowhere), with the time the training loop was blocked and the time the write took.
// synchronous: every submit also waits for its write (to compare with the asynchronous writer).
CkptWriter *ckpt_writer_start(const char *run, const Model *m, const real *ema, const Optimizer *o,
                              const Config *c, int run_lock, FILE *log, int synchronous);
// The bytes of the staging buffer.
size_t ckpt_writer_staging_bytes(const CkptWriter *w);
// Start the checkpoint of state s: waits for the previous write if it still runs, then issues the
// copies. Adds the milliseconds the caller was blocked to *blocked_ms. 0, or -1 with one line in
// err when a write failed (this one in synchronous mode, else an earlier one).
int ckpt_writer_submit(CkptWriter *w, const TrainState *s, double *blocked_ms, char *err, size_t errlen);
// Wait until the copies of the last submit have landed (at once when none is pending). Adds the
// wait to *blocked_ms. 0, or -1 with one line in err when an earlier write failed.
int ckpt_writer_wait_copy(CkptWriter *w, double *blocked_ms, char *err, size_t errlen);
// Wait until everything submitted is written. Adds the wait to *blocked_ms (may be NULL). 0, or -1
// with one line in err when a write failed.
int ckpt_writer_finish(CkptWriter *w, double *blocked_ms, char *err, size_t errlen);
// Finishes a pending write, ends the thread and frees the staging buffer; NULL is allowed.
void free_ckpt_writer(CkptWriter *w);

// ---- the other ranks' parts (checkpoint_parts.c) ----
// ZeRO-1 (optim.h): every rank but 0 keeps a part of the EMA and optimizer state; at each checkpoint
// rank 0's writer (whose optimizer is a part too) receives the others' parts into its staging buffer
// inside ckpt_writer_submit, and each other rank calls ckpt_part_sender_send at the same step, so the
// file is the one a one-rank run writes. m, ema and o must outlive the sender.
typedef struct CkptPartSender CkptPartSender;
CkptPartSender *ckpt_part_sender_start(const Model *m, const real *ema, const Optimizer *o);
void ckpt_part_sender_send(CkptPartSender *s);
void free_ckpt_part_sender(CkptPartSender *s);

// Load one checkpoint into m, ema and o after checking every CRC and that it continues this run (as
// `mode` says), reading it a tensor at a time (host memory: its largest tensor). Nothing is loaded
// before every check has passed; but a file that changed after its tensors were checked
// (CKPT_CORRUPT, "the file changed while it was read") may leave them partly loaded: the caller
// loads another checkpoint whole or stops.
CkptStatus checkpoint_load(const char *path, Model *m, real *ema, Optimizer *o, const Config *c, CkptLoadMode mode,
                           TrainState *s, char *err, size_t errlen);

// checkpoint_load's check that `path` continues this run (as `mode` says), from its metadata alone:
// CKPT_OK, CKPT_REFUSED with checkpoint_load's line, or CKPT_CORRUPT (metadata unreadable: a resume
// sets the file aside and decides then). CKPT_OK for an earlier build's file without the metadata's
// CRC, whose config copy only its tensors can vouch for. Lets train refuse a run it cannot continue
// before its plan and its allocations.
// named_step: the step of the file's name (-1: none); metadata of another step is CKPT_CORRUPT, as the
// resume sets such a file aside. st (may be NULL): on CKPT_OK, its step, parent and data as
// checkpoint_load reads them.
CkptStatus checkpoint_precheck(const char *path, int named_step, const Config *c, CkptLoadMode mode, TrainState *st,
                               char *err, size_t errlen);

// 1 with one line in why where `path` cannot be opened for reading for a reason that is not its bytes
// (no permission, the process's file limit): not damage, which a resume would set aside and train
// again the steps since the checkpoint before, but a file to make readable. 0 where it opens, or is gone.
int checkpoint_cannot_open(const char *path, char *why, size_t whylen);

// Whether a config key changes the network's tensors or what its outputs mean: a fork must keep them.
int config_key_shapes_network(const char *key);

// A whole checkpoint's header into f after checkpoint_check's checks, read a tensor at a time (host
// memory: its largest tensor; f as st_read_header leaves it: its metadata and entries, no tensor
// bytes). file_crc (may be NULL): the CRC32 of the file's bytes, what zlib's crc32 of the file read
// whole gives. 0, or -1 with one line in why.
int checkpoint_read_checked(const char *path, StFile *f, unsigned long *file_crc, char *why, size_t whylen);

// What a resume would say of the file by itself, whatever the run: its metadata (format, its CRC,
// version, step, smoothed loss, config), every tensor's CRC and values, and its tensors against the
// network of its own config (names, types, shapes; none missing, none extra). Read a tensor at a
// time. CKPT_OK with the step of its metadata in *step (may be NULL), or CKPT_CORRUPT (a resume sets
// it aside and goes back to the checkpoint before) or CKPT_REFUSED (a resume stops at it) with one
// line in why.
CkptStatus checkpoint_check(const char *path, int *step, char *why, size_t whylen);
// The CRC32 of a checkpoint's header (its length and JSON: every tensor's offsets and CRC, the step,
// the config, the lineage), which tells two files apart as their bytes do: the ranks of a run check
// that they read the same file. 0, or -1 with one line in err.
int checkpoint_header_crc(const char *path, uint32_t *crc, char *err, size_t errlen);
// The step a checkpoint's file name gives: "ckpt-XXXXXXXX.safetensors" exactly (8 digits, or the 9 or
// 10 that checkpoint_path's %08d writes from step 100,000,000 on), no folder; -1 for any other name.
int checkpoint_step_of_name(const char *name);

// For generation: the newest usable checkpoint of RUN (its header and EMA tensors read, their CRCs
// and values checked; a bad one is skipped with a warning), as a model of batch B on `be` holding
// the checkpoint's config and its EMA weights.
// NULL with one line in err (no such folder, no checkpoint, none usable); *step is its step.
// autoencoder (when not NULL, 320 bytes): the checkpoint's TrainState.autoencoder.
Model *checkpoint_load_for_generation(const char *run, const Backend *be, int B, int *step, char *autoencoder, char *err,
                                      size_t errlen);

// Rename a file named like a checkpoint that is not a whole one (why: one line starting with its
// path) to PATH.unusable (PATH.unusable.1, ... where that name is taken), out of every listing, with a
// warning: never deleted, never counted as kept. 0; or -1 with errno, nothing said, where it cannot be
// renamed (a folder this user may not change: the caller says what that means for it).
int checkpoint_set_aside(const char *path, const char *why);

// The steps of RUN's checkpoints, newest first; returns how many (*steps is malloc'ed); 0 where RUN
// does not exist, and the program ends with one line where it exists but cannot be read.
int checkpoint_list(const char *run, int **steps);

// The path of the checkpoint of `step` in `run`.
void checkpoint_path(char *buf, size_t len, const char *run, int step);

#endif
