// exclude.h: lists of clips a run never trains on (config key exclude; `framechain score
// --exclude-out` writes them).
//
// The format: one clip a line, "SHARD K": the shard's file name within the dataset folder and the
// clip's index k within it (its tensor "clip.<k>"), as manifest.tsv and score's TSV name it; blank
// lines and lines starting with '#' are skipped. A clip named twice counts once. A line naming a shard
// or a clip the dataset does not have is an error, so a list made for another dataset is refused
// rather than half applied.
#ifndef FRAMECHAIN_EXCLUDE_H
#define FRAMECHAIN_EXCLUDE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/shards.h"

#define EXCLUDE_MAX_BYTES ((size_t)256 << 20)  // the largest list read

// Read the list at `path` against d: mask[i] = 1 for every clip i it names, 0 for the others (mask:
// dataset_clips(d) bytes). Returns how many clips it excludes, or -1 with one line naming the file
// (and the line) and what is wrong: unreadable, a malformed line, a clip d does not have, every clip
// of d excluded.
int exclude_list_read(const Dataset *d, const char *path, uint8_t *mask, char *err, size_t errlen);

// Whether the list at `path` can be read (a regular file, not too large), before anything else is said of
// it: 0, or -1 with one line naming the file. A run's data identity records the list's CRC32, which an
// unreadable list has not.
int exclude_list_check_file(const char *path, char *err, size_t errlen);

// Write the list of clips[0 .. n-1] (dataset clip indices) to `path` crash-safely (a temporary file,
// fsync, rename), after a header comment naming the dataset; overwrite as st_write_output's. 0, or -1 with
// one line.
int exclude_list_write(const Dataset *d, const char *path, const int *clips, int n, int overwrite, char *err,
                       size_t errlen);
// exclude_list_write's text, malloc'ed (its length in *len); NULL with one line in err.
char *exclude_list_text(const Dataset *d, const int *clips, int n, size_t *len, char *err, size_t errlen);

#endif
