// shards.h: a dataset of video clips, as `framechain prepare` writes it and `framechain train --data`
// reads it.
//
// A dataset folder holds shards shard-00000.safetensors, shard-00001.safetensors, ..., a
// human-readable manifest.tsv and, written last, dataset.json, which lists the shards and is what
// makes the dataset exist. Every file is written crash-safely (temporary file, fsync, rename, fsync
// of the folder), so a prepare killed at any moment leaves either no dataset.json or one that names
// only whole shards.
//
// A shard is a safetensors file (the strict reader, its fuzzing and tools/safetensors_io.py serve it):
//   - one U8 tensor per clip, "clip.<k>" (k = 0.. within the shard): the raw frames, shape
//     (F, N, N, 3) (frames, rows, columns, RGB), or, when zlib (compress2, level 6) makes them at
//     least 10% smaller, the zlib stream as a 1-D tensor;
//   - __metadata__: "format" = "framechain-shard", "format_version" = "1", "frame_size" = N,
//     "clip_frames" = F, "clips" = the count, and per clip "clip.<k>.encoding" = "raw" | "zlib",
//     "clip.<k>.crc32" (CRC-32 of the raw bytes, 8 lowercase hex digits), "clip.<k>.source" (the
//     input path), "clip.<k>.first_frame" (its first frame's index in the source, after any fps
//     resampling), "clip.<k>.fps" (0: unknown). No other key.
// dataset.json: {"format": "framechain-dataset", "format_version": 1, "frame_size": N,
//   "clip_frames": F, "clips": total, "shards": [{"file": "shard-00000.safetensors", "clips": n,
//   "bytes": size, "header_crc32": the CRC-32 of the shard's first 8 + header length bytes, 8
//   lowercase hex digits}, ...]}. The header holds every clip's CRC, so the header's CRC names the
//   shard's whole content: a shard copied over another of the same size is refused when the dataset
//   opens. header_crc32 is optional (datasets prepared before it have none; then only inspect's
//   check of manifest.tsv finds such a copy).
// manifest.tsv: a header line, then one line per clip: shard, clip (k), source, first_frame,
//   frames, fps (tab, newline, carriage return and backslash in a source written as \t \n \r \\).
//
// A latent dataset (`prepare --vae`: frames encoded once by an autoencoder, the video models train on
// the latents) has the same files with these differences:
//   - shards: "format_version" = "2", "content" = "latents", "channels" = C (latent channels),
//     "frame_size" = n (the latents' side); each "clip.<k>" is an F16 tensor (F, 2, C, n, n), stored
//     raw: [f][0] the latents of frame f, [f][1] those of frame f mirrored left to right (a flipped
//     latent is not the latent of the flipped frame), so a window reads only its own frames and
//     flips; instead of "clip.<k>.crc32", "clip.<k>.frame_crc32" holds the CRC-32 of each of the 2F
//     (C, n, n) units in that order, 8 lowercase hex digits each, so each unit read is checked alone.
//     F16 rather than BF16: the scaled latents lie within a few units of 0, where F16's 10 fraction
//     bits keep 8 times BF16's precision and its range (65504) is ample.
//   - dataset.json: "format_version": 2, "channels": C, and "autoencoder": {"sha256": the file's
//     SHA-256, "family": "AutoencoderKL" | "AutoencoderTiny", "factor": frame side / latent side,
//     "image_size": the frames' side in pixels, "scale": s, "shift": z} (latents = (encoder mean - z) s).
//   - manifest.tsv: unchanged.
//
// Shards are capped by their clip bytes (max_shard_bytes, 256 MiB by default; a single larger clip
// gets a shard of its own), so that neither the writer nor any reader needs more memory than that.
#ifndef FRAMECHAIN_SHARDS_H
#define FRAMECHAIN_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

#define SHARD_DEFAULT_BYTES ((size_t)256 << 20)  // clip bytes per shard when max_shard_bytes is 0
#define SHARD_MAX_FRAME_SIZE 8192                 // N at most
#define SHARD_MAX_CHANNELS 1024                   // latent channels at most
#define SHARD_MAX_CLIP_FRAMES 65536               // F at most
#define SHARD_MAX_CLIP_BYTES ((size_t)1 << 31)    // F * N * N * 3 at most
#define SHARD_MAX_CLIPS 1000000                   // clips in one shard at most
#define DATASET_JSON_MAX ((size_t)64 << 20)       // the largest dataset.json read

// The autoencoder a latent dataset was made with.
typedef struct {
    char sha256[65];      // of its file, lowercase hex
    char family[32];      // "AutoencoderKL" or "AutoencoderTiny"
    int channels;         // latent channels
    int factor;           // frame side / latent side
    int image_size;       // the frames' side in pixels (latent side * factor)
    double scale, shift;  // latents = (the encoder's mean - shift) * scale
} LatentIdentity;

// ---- writing (used by prepare) ----
typedef struct ShardWriter ShardWriter;
// Start a dataset in `dir` (created when missing). Refused when dir already holds a dataset.json.
// Stale temporary files of an earlier, killed writer (shard-*.tmp-*, dataset.json.tmp-*,
// manifest.tsv.tmp-*) are removed. max_shard_bytes = 0: SHARD_DEFAULT_BYTES.
ShardWriter *shard_writer_open(const char *dir, int frame_size, int clip_frames, size_t max_shard_bytes, char *err,
                               size_t errlen);
// The same for a latent dataset: latent_size is n (the latents' side), id->channels C; every clip
// added is F*2*C*n*n F16 values (little-endian bytes), as the format above lays them out.
ShardWriter *shard_writer_open_latents(const char *dir, const LatentIdentity *id, int latent_size, int clip_frames,
                                       size_t max_shard_bytes, char *err, size_t errlen);
// Add one clip: F*N*N*3 bytes (a latent dataset's: see above), frame by frame, row by row, RGB. `source` is stored as given when it
// is valid UTF-8 (each invalid byte becomes U+FFFD otherwise); first_frame >= 0; fps >= 0 (0:
// unknown). Writes a shard when the current one is full. After a failure every later call fails.
int shard_writer_add(ShardWriter *w, const uint8_t *clip, const char *source, long first_frame, double fps, char *err,
                     size_t errlen);
// The same for n clips of one source, compressed in parallel (OpenMP), added in order.
int shard_writer_add_clips(ShardWriter *w, int n, const uint8_t *const *clips, const char *source,
                           const long *first_frames, double fps, char *err, size_t errlen);
// Write the last shard, manifest.tsv, then dataset.json; frees w (whatever happens). Fails when no
// clip was added (no dataset.json is written then). A failure removes what the writer wrote, as
// shard_writer_abort does.
int shard_writer_finish(ShardWriter *w, char *err, size_t errlen);
// A folder's .prepare.lock that no writer holds (a prepare killed after its dataset.json was in
// place): removed with a line; 1 when it was.
int shard_folder_stale_lock(const char *dir);
// Free w; writes no dataset.json and removes the shards written so far, and the folder where the
// writer made it and it is left empty. NULL is fine.
void shard_writer_abort(ShardWriter *w);

// ---- reading ----
typedef struct Dataset Dataset;  // one prepared folder's clips (config.h's enum DataSource: where a run's data is)
// Read dir/dataset.json, then every shard's header (not its data), strictly: every shard must hold
// the clips and bytes dataset.json says, with the same frame size and clip length. NULL with a
// one-line reason naming the file on any problem (a FIFO or folder named like one of its files is
// refused as not a regular file, never waited on).
Dataset *dataset_open(const char *dir, char *err, size_t errlen);
int dataset_clips(const Dataset *d);
int dataset_frame_size(const Dataset *d);
int dataset_clip_frames(const Dataset *d);
int dataset_shards(const Dataset *d);
size_t dataset_clip_bytes(const Dataset *d);  // F * N * N * 3 (latents: F * 2 * C * n * n * 2)
int dataset_channels(const Dataset *d);       // 3 (RGB frames), or the latent channels
// The autoencoder of a latent dataset; NULL for a dataset of frames.
const LatentIdentity *dataset_latent(const Dataset *d);
const char *dataset_dir(const Dataset *d);    // the folder it was opened from
uint32_t dataset_json_crc(const Dataset *d);  // CRC-32 of its dataset.json: which dataset, wherever it lies
// Read clip `clip` (0 .. dataset_clips - 1; the shards' clips in order) into out (F*N*N*3 bytes):
// pread its stored bytes, inflate them when they are zlib (exactly F*N*N*3 bytes must come out),
// check the CRC. Returns 0; DATASET_CLIP_DAMAGED when the clip's own bytes are bad (a CRC mismatch,
// corrupt zlib data: that clip alone is lost, the others read fine); -1 for anything else (the shard
// cannot be opened or read, or its size changed since dataset_open). Either way one line naming the
// shard, the clip and the problem. Thread-safe (each call opens the shard file).
#define DATASET_CLIP_DAMAGED (-2)
int dataset_read_clip(const Dataset *d, int clip, uint8_t *out, char *err, size_t errlen);
// Latent datasets: frames[0..n-1] of clip `clip` (each a frame index within the clip), mirrored or
// not, into out (n, C, n, n) as floats: one pread a frame, each unit checked against its CRC. Returns
// 0, DATASET_CLIP_DAMAGED (a unit's CRC fails, or it holds inf or NaN: the clip's other frames may
// still read fine) or -1, with one line naming the shard, the clip and the frame. Thread-safe.
int dataset_read_latent_frames(const Dataset *d, int clip, int n, const int *frames, int mirror, float *out,
                               char *err, size_t errlen);
// Where clip `clip` came from, as its shard's metadata records it: its source (the input path, cut to
// fit) and *first_frame. Reads the shard's header again (for reports, not for training). 0, or -1
// with one line.
int dataset_clip_origin(const Dataset *d, int clip, char *source, size_t len, long *first_frame, char *err,
                        size_t errlen);
// dataset_clip_origin for many clips: the header of the shard last asked about is kept, so that clips
// asked for shard by shard (a report of the bad clips of a damaged shard) read each header once, not
// once a clip. The same answers as dataset_clip_origin; free with clip_origin_reader_free.
typedef struct ClipOriginReader ClipOriginReader;
ClipOriginReader *clip_origin_reader(const Dataset *d);
int clip_origin_read(ClipOriginReader *r, int clip, char *source, size_t len, long *first_frame, char *err,
                     size_t errlen);
void clip_origin_reader_free(ClipOriginReader *r);
// Every clip's "source<TAB>first_frame" as its shard's metadata records them, the source escaped as
// manifest.tsv writes it (tab, newline, carriage return and backslash as \t \n \r \\, other control
// bytes as \xNN): n = dataset_clips strings, each shard's header read once. NULL with one line in err
// when a header cannot be read; free with dataset_clip_origins_free.
char **dataset_clip_origins(const Dataset *d, char *err, size_t errlen);
void dataset_clip_origins_free(char **origins, int n);
void dataset_close(Dataset *d);

// Where a clip is stored (for tests and tools).
typedef struct {
    const char *shard;  // the shard's file name within the folder
    int index;          // k of its tensor "clip.<k>"
    int zlib;           // 1: a zlib stream, 0: raw frames
    uint64_t offset;    // of its stored bytes within the shard file
    uint64_t stored;    // how many bytes are stored
    uint32_t crc32;     // of the raw bytes
} ClipLocation;
int dataset_clip_location(const Dataset *d, int clip, ClipLocation *out);

// Every clip of a shard file that was read (st_read or st_parse; name starts the errors) inflated in
// bounded memory and checked against its CRC32s; each(k, why, ctx) for clip.k, why NULL when it
// checks (a non-zero return stops). The number of bad clips, or -1 with err when the shard's
// metadata is not a shard's.
typedef int (*ShardClipFn)(int k, const char *why, void *ctx);
int shard_check_clips(const StFile *f, const char *name, ShardClipFn each, void *ctx, char *err, size_t errlen);

// Validate a whole shard held in memory (for the fuzzer and tests): the safetensors layout, the
// metadata, every clip inflated (in bounded memory) and CRC-checked. Returns 0, or -1 with a
// one-line reason.
int shard_check_bytes(const uint8_t *bytes, size_t len, char *err, size_t errlen);

#endif
