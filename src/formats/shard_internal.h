// shard_internal.h: private to shard_read.c, shard_write.c and dataset_read.c (not an API: see
// shards.h). What they share: one-line errors, the per-clip metadata fields, and a shard's checked
// header and clip decoding (both defined in shard_read.c).
#ifndef FRAMECHAIN_SHARD_INTERNAL_H
#define FRAMECHAIN_SHARD_INTERNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/common.h"
#include "formats/safetensors.h"

#define SHOWN(s) ST_SHOWN(s)  // safetensors.h

// A clip's source as one field of manifest.tsv, into out (room for 4 strlen(s) + 1: a byte becomes at
// most four): tab, newline, carriage return and backslash as \t \n \r \\, other control bytes as \xNN.
// The writer's manifest and the reader's dataset_clip_origins alike.
static inline void manifest_escape(char *out, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        const char *esc = ch == '\t' ? "\\t" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\\' ? "\\\\" : NULL;
        if (esc) out += sprintf(out, "%s", esc);
        else if (ch < 0x20 || ch == 0x7F) out += sprintf(out, "\\x%02x", ch);
        else *out++ = (char)ch;
    }
    *out = 0;
}


// ---------------------------------------------------------------------------------------------
// a shard's header

typedef struct {
    uint64_t offset;  // of the stored bytes within the file
    uint64_t stored;  // stored bytes
    uint32_t crc;     // of the raw bytes (frames)
    uint32_t *unit_crc;  // latents: of each of the 2F units (malloc'ed)
    uint8_t zlib;
} ClipRec;

typedef struct {
    int N, F, clips;
    int C;        // latent channels; 0: RGB frames
    size_t unit;  // latents: the bytes of a (C, N, N) F16 unit
    size_t raw;   // F * N * N * 3, or latents' F * 2 * unit
    ClipRec *clip;
} ShardInfo;

// The fields "clip.<k>.<field>" of a shard's __metadata__, in the order of the HAVE_ bits.
enum { HAVE_ENCODING = 1, HAVE_CRC = 2, HAVE_SOURCE = 4, HAVE_FIRST = 8, HAVE_FPS = 16, HAVE_ALL = 31 };
static const char *const CLIP_FIELDS[] = {"encoding", "crc32", "source", "first_frame", "fps"};

// Check a shard's metadata and tensors (its layout was checked by the safetensors reader) and fill
// si. `name` (the path) starts every error.
int shard_info(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen);
void shard_info_free(ShardInfo *si);

// Latents: the first unit of units [0, n) of `bytes` whose CRC-32 is not crc[unit], or -1 when all match.
int first_bad_unit(const uint8_t *bytes, int n, size_t unit, const uint32_t *crc);

// ---------------------------------------------------------------------------------------------
// decoding a clip

// Where a clip's stored bytes are: in memory, or in a file from `offset`.
typedef struct {
    const uint8_t *mem;
    int fd;
    uint64_t offset;
} Src;

// Decode `stored` bytes of src (a zlib stream, or the raw frames) that must give exactly raw bytes;
// into out, or (out NULL) through a small window. *crc = CRC-32 of the raw bytes (the caller compares
// it). 0; DATASET_CLIP_DAMAGED (shards.h) with why when the stored bytes cannot give a clip (corrupt
// zlib data, a wrong length); -1 with why on a read error or when memory runs out.
int decode_clip(const Src *src, uint64_t stored, int zlib, uint8_t *out, size_t raw, uint32_t *crc, char *why,
                size_t whylen);

#endif
