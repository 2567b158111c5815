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
    void *device;    // where it lives in backend memory (NULL: a host value, `host` set by the table)
} CkptTensor;

typedef struct {
    CkptTensor *t;
    int n, cap;
} CkptTable;

// Every tensor of a checkpoint of (m, ema, o), in file order. *block_size must outlive the table:
// optim.block_size points at it.
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

#endif
