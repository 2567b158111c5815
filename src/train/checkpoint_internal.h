// checkpoint_internal.h: private to checkpoint.c and checkpoint_async.c (the pieces of the
// checkpoint module); nothing else may include it. What they share: the table of a checkpoint's
// tensors and the writing of a staged table, so that the synchronous checkpoint_save and the
// background writer produce the same file.
#ifndef FRAMECHAIN_CHECKPOINT_INTERNAL_H
#define FRAMECHAIN_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "train/checkpoint.h"

typedef struct {
    char name[160];
    const char *dtype;
    int ndim;
    long shape[2];
    size_t bytes;
    void *host;      // staging bytes (save: filled from the backend; load: filled from the file)
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

// Points the host side of every backend tensor into `staging`, one after another; returns the bytes
// that takes. staging NULL: only counts.
size_t ckpt_stage(CkptTable *tab, uint8_t *staging);

// The checkpoint of state s from the staged bytes of tab: a CRC32 per tensor, the metadata, the
// crash-safe write (temp file, fsync, rename, fsync the folder), then all but the newest
// keep_checkpoints deleted. 0, or -1 with one line in err; a failure leaves every earlier
// checkpoint as it was. Touches no backend memory (any thread may call it).
int ckpt_write_staged(const char *run, const CkptTable *tab, const Config *c, const TrainState *s, char *err,
                      size_t errlen);

// The bytes of a rank's parts (ZeRO-1), from rank `from` into rank 0's staged table (its own parts
// staged already): the ranks' tables are built alike, so a part is named by its entry's index.
void ckpt_receive_parts(CkptTable *tab, int from);
// The sending side, on every other rank, at the same checkpoint: its parts, downloaded from the
// backend into `scratch` (ckpt_parts_bytes of it).
void ckpt_send_parts(const Backend *be, const CkptTable *tab, uint8_t *scratch);
size_t ckpt_parts_bytes(const CkptTable *tab);

#endif
