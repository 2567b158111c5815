// checkpoint_internal.h: private to the pieces of the checkpoint module (checkpoint.c,
// checkpoint_verify.c, checkpoint_async.c, checkpoint_parts.c) and their test (tests/train/
// test_checkpoint.c); nothing else may include it. What they share: the table of a checkpoint's
// tensors, the writing of a staged table (so that the synchronous checkpoint_save and the
// background writer produce the same file) and the checks a file passes before it is believed.
#ifndef FRAMECHAIN_CHECKPOINT_INTERNAL_H
#define FRAMECHAIN_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "train/checkpoint.h"
#include "formats/safetensors.h"

typedef struct {
    char name[160];
    const char *dtype;
    int ndim;
    long shape[2];
    size_t bytes;
    void *host;      // staging bytes, filled from the backend (save)
    // The bytes this process holds, at part_offset of the tensor's: all of them, but for the EMA and
    // optimizer state of a rank that keeps a part of them (ZeRO-1, optim.h), where device points at
    // the part (NULL when it holds none of the tensor).
    void *device;
    size_t part_offset, part_bytes;
    int host_value;  // a value of the table itself (optim.block_size): `host` set by it, never staged
} CkptTensor;

typedef struct {
    CkptTensor *t;
    int n, cap;
} CkptTable;

// Every tensor of a checkpoint of (m, ema, o), in file order. *block_size must outlive the table:
// optim.block_size points at it. When o is a part (o->lo, o->hi), so is ema ((o->hi - o->lo) values
// from o->lo), and the EMA and optimizer tensors say which bytes of theirs are held here.
CkptTable ckpt_build_table(const Model *m, const real *ema, const Optimizer *o, int32_t *block_size);

// The tensors a checkpoint of config c holds, as ckpt_build_table names them (types, shapes and sizes;
// no host or device bytes), from the config alone.
CkptTable ckpt_layout_of(const Config *c);

// Points the host side of every backend tensor into `staging`, one after another; returns the bytes
// that takes. staging NULL: only counts.
size_t ckpt_stage(CkptTable *tab, uint8_t *staging);

// The checkpoint of state s from the staged bytes of tab: a CRC32 per tensor, the metadata, the
// crash-safe write (temp file, fsync, rename, fsync the folder), then all but the newest
// keep_checkpoints deleted. 0, or -1 with one line in err; a failure leaves every earlier
// checkpoint as it was. Touches no backend memory (any thread may call it). run_lock (run_folder_open's;
// -1: none): RUN/.lock is checked to be still that file just before the rename and again before the
// pruning, so that neither reaches a folder put at the name while the file was written; where it is
// not, -2 with run_folder_still_held's line in err (nothing renamed, nothing pruned).
int ckpt_write_staged(const char *run, int run_lock, const CkptTable *tab, const Config *c, const TrainState *s,
                      char *err, size_t errlen);

// The bytes of a rank's parts (ZeRO-1), from rank `from` into rank 0's staged table (its own parts
// staged already): the ranks' tables are built alike, so a part is named by its entry's index.
void ckpt_receive_parts(CkptTable *tab, int from);
// The sending side, on every other rank, at the same checkpoint: its parts, downloaded from the
// backend into `scratch` (ckpt_parts_bytes of it).
void ckpt_send_parts(const Backend *be, const CkptTable *tab, uint8_t *scratch);
size_t ckpt_parts_bytes(const CkptTable *tab);

// ---- checkpoint_verify.c: each check returns 0 (CKPT_OK) or, with one line naming the file in err,
// -1 or the status it gives

// The CRC32 of a checkpoint's metadata, every entry but the crc32.* ones, in the order of their keys.
unsigned long ckpt_metadata_crc(const StMeta *meta, int n);
// The metadata as resume reads it (format, metadata CRC, format version, step, smoothed loss, seed
// and data cursor):
// CKPT_CORRUPT for a damaged file, CKPT_REFUSED for another version of the format. step and smooth
// may be NULL.
CkptStatus ckpt_check_metadata(const StFile *f, const char *path, int *step, double *smooth, char *err,
                               size_t errlen);
// One tensor's bytes against the CRC32 the metadata records for it.
int ckpt_check_tensor_crc(const StFile *f, const char *name, const void *data, size_t len, const char *path,
                          char *err, size_t errlen);
// One tensor's values usable: every F32 finite, the optimizer's magnitudes not negative.
int ckpt_check_tensor_values(const char *name, const char *dtype, const void *data, size_t len,
                             const char *path, char *err, size_t errlen);
// Both checks above on one tensor: entry e of f, its bytes at data.
int ckpt_check_tensor(const StFile *f, const StEntry *e, const void *data, const char *path, char *err,
                      size_t errlen);
// Every tensor of a file whose header alone was read, read (st_read_entry) and checked
// (ckpt_check_tensor) in file order through buf (st_entry_buffer), fd from st_open_data.
int ckpt_check_tensors_read(const StFile *f, int fd, void *buf, const char *path, char *err, size_t errlen);
// Every tensor of tab in f, of its type, size and shape, and nothing else in f (ema_only: the tensors
// of tab other than the EMA's may be missing): CKPT_OK or CKPT_REFUSED.
CkptStatus ckpt_check_layout(const StFile *f, const CkptTable *tab, int ema_only, const char *path, char *err,
                             size_t errlen);
// The config a checkpoint carries, parsed and validated into c.
int ckpt_file_config(const StFile *f, const char *path, Config *c, char *err, size_t errlen);

#endif
