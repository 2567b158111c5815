// safetensors.h: reading and writing safetensors files (https://huggingface.co/docs/safetensors).
// The writer is crash-safe (temporary file, fsync, rename); the reader is strict: it accepts only
// files whose header is well-formed and whose tensors tile the data section exactly, and says in
// one line what is wrong with any other.
#ifndef FRAMECHAIN_SAFETENSORS_H
#define FRAMECHAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER ((size_t)100 << 20)  // the largest JSON header accepted, in bytes
#define ST_MAX_DIMS 8

typedef struct {
    const char *name;
    const char *dtype;  // "F64", "F32", "I32", "U8", ...
    int ndim;
    long shape[ST_MAX_DIMS];
    const void *data;   // host memory, numel * dtype size bytes, little-endian
} StTensor;

typedef struct {
    const char *key, *value;
} StMeta;

// Write the tensors and metadata to `path`: into a temporary file in the same folder, fsync,
// rename over `path`, fsync the folder. Wider dtypes come first so every tensor stays aligned.
// Names, keys and values must be valid UTF-8; tensor names and metadata keys must be unique and
// no tensor may be called "__metadata__".
// Returns 0, or -1 with a one-line reason in err: the previous file at `path` is then untouched, but
// where only the folder's fsync failed, after the rename (the new file is whole, its name may not
// survive a power cut; the caller that must not leave it removes it).
// Test hooks (common.h): FRAMECHAIN_TEST_FAIL_WRITE_AFTER=N fails the write with ENOSPC after N bytes;
// FRAMECHAIN_TEST_WRITE_DELAY_MS=M pauses M ms half-way through the tensors;
// FRAMECHAIN_TEST_FAIL_FOLDER_FSYNC_OF=NAME fails the folder's fsync after a file called NAME with EIO.
int st_write(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta, char *err,
             size_t errlen);

// st_write with a last check between the whole temporary file and its rename onto path: where
// guard->check returns nonzero (its line in err) the temporary goes and path is untouched. A checkpoint's
// writer asks there whether its run folder is still the one it locked (a folder renamed away meanwhile
// leaves another's at the name). guard may be NULL.
typedef struct {
    int (*check)(void *ctx, char *err, size_t errlen);
    void *ctx;
} StGuard;
int st_write_guarded(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta,
                     const StGuard *guard, char *err, size_t errlen);

// Write `len` bytes to `path` the way st_write writes a file (temporary file in the same folder, fsync,
// rename, fsync of the folder; the same test hooks). For the small text files that go beside
// safetensors files (a dataset's dataset.json and manifest.tsv). Returns 0, or -1 with a one-line reason.
int st_write_bytes(const char *path, const void *data, size_t len, char *err, size_t errlen);
// st_write_bytes for a user's output (score's TSV, an exclude list): without overwrite never over a
// file that appeared since the command checked its path; with it, the replaced file's permissions kept
// (fc_place_output).
int st_write_output(const char *path, const void *data, size_t len, int overwrite, char *err, size_t errlen);
// Two outputs that go together (score's TSV and its exclude list): both written and synced under
// temporary names before either is renamed into place, so that a disk that fills, or a folder that
// cannot be written, leaves both files as they were. (Only a rename of the second that fails, when a
// file appeared at its name meanwhile, leaves the first replaced.) 0, or -1 with one line in err.
int st_write_outputs(const char *path[2], const void *data[2], const size_t len[2], int overwrite, char *err,
                     size_t errlen);

// 1 when s is valid UTF-8 (RFC 3629: no overlong forms, no surrogates), the rule names, keys and
// values must follow; else 0.
int st_valid_utf8(const char *s);

// A string from a file made fit for a one-line error message: at most ~60 bytes, control characters
// shown as '?', cut between UTF-8 characters. ST_SHOWN uses a buffer of its own.
const char *st_shown(const char *s, char *buf, size_t len);
#define ST_SHOWN(s) st_shown((s), (char[64]){0}, 64)

// Size in bytes of one element of `dtype`, 0 when unknown.
size_t st_dtype_size(const char *dtype);

// One tensor of a file that was read.
typedef struct {
    char *name;
    char dtype[8];
    int ndim;
    long shape[ST_MAX_DIMS];
    size_t begin, end;  // byte offsets within the data section
} StEntry;

// A file that was read: its bytes, its tensors in data order (by begin) and its metadata in header order.
typedef struct {
    uint8_t *bytes;     // the whole file
    size_t size;
    size_t data_start;  // 8 + header length: where the data section starts in `bytes`
    int n;
    StEntry *entries;
    int nmeta;
    char **meta_keys, **meta_values;
    // private: the entries' indices sorted by name (for st_find), the metadata's by key (for st_meta:
    // a shard holds five keys a clip, hundreds of thousands), and the decoded strings
    int *by_name, *meta_by_key;
    char *strings;
} StFile;

// Parse a copy of `bytes` into f. Returns 0, or -1 with a one-line reason in err (f is then empty;
// st_free on it is harmless).
int st_parse(StFile *f, const uint8_t *bytes, size_t len, char *err, size_t errlen);
// Read the whole file at `path` and parse it; errors start with the path.
int st_read(const char *path, StFile *f, char *err, size_t errlen);
// Parse only a file's header: `head` holds the first head_len bytes (at least 8 + the header length)
// of a file of file_size bytes. Every rule of st_parse is applied (the tensors tile a data section of
// file_size - 8 - header length bytes exactly) without the data. f->bytes then holds just the first
// f->data_start bytes and f->size is file_size: st_data must not be used on it.
int st_parse_header(StFile *f, const uint8_t *head, size_t head_len, uint64_t file_size, char *err,
                    size_t errlen);
// Whether a file's first n bytes open as a safetensors file does (its header length under 2^48, then
// '{'): a damaged one, not another kind of file, where it fails to read.
int st_looks_like_safetensors(const uint8_t *head, size_t n);
// Read only the 8 + header length bytes of the file at `path` (at most 8 + ST_MAX_HEADER) and
// st_parse_header them against the file's size; errors start with the path.
int st_read_header(const char *path, StFile *f, char *err, size_t errlen);
// The tensors of a file whose header alone was read (st_read_header into f), one at a time:
// st_open_data opens it (fc_open_regular: no FIFO or device) and returns the descriptor, or -1 with a
// line in err, also where it is no longer the size its header was parsed against ("the file changed
// while it was read"); st_entry_buffer allocates the bytes of its largest tensor (NULL with a line in
// err); st_read_entry reads entry e into buf; st_data_unchanged, after the reads, says whether the file
// still has its size (0), else -1 with "the file changed while it was read".
int st_open_data(const char *path, const StFile *f, char *err, size_t errlen);
void *st_entry_buffer(const StFile *f, const char *path, char *err, size_t errlen);
int st_read_entry(int fd, const StFile *f, const StEntry *e, void *buf, const char *path, char *err, size_t errlen);
int st_data_unchanged(int fd, const StFile *f, const char *path, char *err, size_t errlen);
// The tensor called `name`, or NULL.
const StEntry *st_find(const StFile *f, const char *name);
// The first byte of a tensor's data. It is aligned to the dtype's size when the file is laid out
// the way st_write lays it out (header padded to 8, widest dtypes first); otherwise use memcpy.
const void *st_data(const StFile *f, const StEntry *e);
// The metadata value of `key`, or NULL.
const char *st_meta(const StFile *f, const char *key);
// Release everything st_parse or st_read allocated; f is empty afterwards.
void st_free(StFile *f);

#endif
