// dataset_read.c: opening a clip dataset (see shards.h): dataset.json read for exactly its shape with
// the strict JSON reader (json.c), every listed shard's header checked against it (shard_read.c), and
// reading a clip by its index in the dataset.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/common.h"
#include "base/half.h"
#include "base/paths.h"
#include "formats/json.h"
#include "formats/safetensors.h"
#include "formats/shard_internal.h"
#include "formats/shards.h"

typedef struct {
    char *file;
    int clips;
    uint64_t bytes;
    int first;            // the dataset index of its clip.0
    int has_header_crc;   // 0: a dataset prepared before dataset.json recorded it
    uint32_t header_crc;  // CRC-32 of the file's first 8 + header length bytes
} DShard;

typedef struct {
    uint64_t offset, stored;
    uint32_t crc;
    uint32_t *unit_crc;  // latents: the 2F units' CRCs
    int shard, k;
    uint8_t zlib;
} DClip;

struct Dataset {
    char *dir;
    int N, F, nclips, nshards;
    int C;               // latent channels; 0: RGB frames
    size_t unit;         // latents: the bytes of one (C, N, N) F16 unit
    LatentIdentity lat;  // latents: the autoencoder
    uint32_t json_crc;   // CRC-32 of dataset.json's bytes: which dataset this is (exclude lists name it)
    size_t raw;
    DShard *shards;
    DClip *clips;
};

// ---------------------------------------------------------------------------------------------
// dataset.json: its values, read with the strict reader (every error names the file and the line)

// A string of at most cap - 1 bytes into buf (the reader's copy is dropped).
static int read_text(JsonReader *r, char *buf, size_t cap, const char *what) {
    char expected[96], *s;
    snprintf(expected, sizeof expected, "%s (a string)", what);
    size_t mark = r->used;
    if (json_string(r, &s, expected)) return -1;
    size_t len = strlen(s);
    r->used = mark;
    if (len >= cap) return json_fail(r, "%s is longer than %zu bytes", what, cap - 1);
    memcpy(buf, s, len + 1);
    return 0;
}

// An integer in 0..max, the value of `key`.
static int read_uint(JsonReader *r, uint64_t max, uint64_t *v, const char *key) {
    json_skip_ws(r);
    if (!json_at_number(r)) return json_fail(r, "'%s' must be an integer, got %s", key, json_what_is(r));
    size_t start;
    int kind = json_uint(r, max, v, &start);
    if (kind == JSON_UINT_NEGATIVE) return json_fail(r, "'%s' must be a non-negative integer", key);
    if (kind == JSON_UINT_FRACTION) return json_fail(r, "'%s' must be an integer", key);
    if (kind == JSON_UINT_TOO_LARGE) return json_fail(r, "'%s' is larger than %llu", key, (unsigned long long)max);
    return kind;  // JSON_UINT_OK, or -1 after a syntax error
}

// The key of an object's member and its ':'; *k = its index in keys[0..n-1]. `where` completes the
// message about an unknown key.
static int read_key(JsonReader *r, const char *const *keys, int n, int *seen, int *k, const char *where) {
    char key[64];
    if (read_text(r, key, sizeof key, "a key") || json_expect(r, ':', "':'")) return -1;
    for (*k = 0; *k < n && strcmp(key, keys[*k]); ++*k) continue;
    if (*k == n) return json_fail(r, "unknown key '%s'%s", SHOWN(key), where);
    if (seen[*k]++) return json_fail(r, "duplicate key '%s'", key);
    return 0;
}

// A shard's file name: a plain name in the folder ([A-Za-z0-9._-], not starting with '.') ending in .safetensors.
static int plain_name(const char *s) {
    size_t n = strlen(s);
    if (n <= 12 || s[0] == '.' || strcmp(s + n - 12, ".safetensors")) return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static int read_shard_file(JsonReader *r, DShard *s) {
    char file[256];
    if (read_text(r, file, sizeof file, "'file'")) return -1;
    if (!plain_name(file))
        return json_fail(r, "shard file '%s' is not a plain name ending in .safetensors", SHOWN(file));
    s->file = strdup(file);
    return s->file ? 0 : json_fail(r, "out of memory");
}

// A shard's "header_crc32": 8 lowercase hex digits, as the writer prints them.
static int read_header_crc(JsonReader *r, DShard *s) {
    char hex[16];
    if (read_text(r, hex, sizeof hex, "'header_crc32'")) return -1;
    if (strlen(hex) != 8 || strspn(hex, "0123456789abcdef") != 8)
        return json_fail(r, "'header_crc32' must be 8 lowercase hex digits, got '%s'", SHOWN(hex));
    s->header_crc = (uint32_t)strtoul(hex, NULL, 16), s->has_header_crc = 1;
    return 0;
}

// One entry of "shards": {"file": ..., "clips": ..., "bytes": ..., "header_crc32": ...}; the last is
// optional (datasets prepared before it was written have none).
static int read_shard_entry(JsonReader *r, DShard *s) {
    static const char *const keys[] = {"file", "clips", "bytes", "header_crc32"};
    int seen[4] = {0}, k;
    uint64_t clips;
    if (json_expect(r, '{', "'{' (a shard)")) return -1;
    int more = json_first_item(r, '}');
    while (more > 0) {
        if (read_key(r, keys, 4, seen, &k, " in a shard (only file, clips, bytes, header_crc32)")) return -1;
        if (k == 0 && read_shard_file(r, s)) return -1;
        if (k == 1) {
            if (read_uint(r, SHARD_MAX_CLIPS, &clips, "clips")) return -1;
            if (clips < 1) return json_fail(r, "a shard of 0 clips");
            s->clips = (int)clips;
        }
        if (k == 2 && read_uint(r, (uint64_t)1 << 62, &s->bytes, "bytes")) return -1;
        if (k == 3 && read_header_crc(r, s)) return -1;
        more = json_next_item(r, '}', "',' or '}'");
    }
    if (more < 0) return -1;
    for (k = 0; k < 3; k++)
        if (!seen[k]) return json_fail(r, "a shard without '%s'", keys[k]);
    return 0;
}

// "shards": [...], appended to d->shards.
static int read_shard_list(JsonReader *r, Dataset *d) {
    int cap = 0;
    if (json_expect(r, '[', "'[' (the list of shards)")) return -1;
    int more = json_first_item(r, ']');
    while (more > 0) {
        if (d->nshards == 1000000) return json_fail(r, "more than 1000000 shards");
        if (d->nshards == cap) {
            cap = cap ? 2 * cap : 16;
            DShard *s = realloc(d->shards, sizeof(DShard) * (size_t)cap);
            if (!s) return json_fail(r, "out of memory");
            d->shards = s;
        }
        DShard *s = &d->shards[d->nshards++];
        memset(s, 0, sizeof *s);
        if (read_shard_entry(r, s)) return -1;
        more = json_next_item(r, ']', "',' or ']'");
    }
    return more;
}

// "autoencoder": {...} of a latent dataset (shards.h), every member required, into d->lat.
static int read_autoencoder(JsonReader *r, Dataset *d) {
    static const char *const keys[] = {"sha256", "family", "factor", "image_size", "scale", "shift"};
    enum { NK = 6 };
    int seen[NK] = {0}, k;
    uint64_t v;
    LatentIdentity *id = &d->lat;
    if (json_expect(r, '{', "'{' (the autoencoder)")) return -1;
    int more = json_first_item(r, '}');
    while (more > 0) {
        if (read_key(r, keys, NK, seen, &k, " in 'autoencoder' (sha256, family, factor, image_size, scale, shift)"))
            return -1;
        if (k == 0) {
            if (read_text(r, id->sha256, sizeof id->sha256, "'sha256'")) return -1;
            if (strlen(id->sha256) != 64 || strspn(id->sha256, "0123456789abcdef") != 64)
                return json_fail(r, "'sha256' must be 64 lowercase hex digits");
        } else if (k == 1) {
            if (read_text(r, id->family, sizeof id->family, "'family'")) return -1;
            if (strcmp(id->family, "AutoencoderKL") && strcmp(id->family, "AutoencoderTiny"))
                return json_fail(r, "'family' '%s' is neither AutoencoderKL nor AutoencoderTiny", SHOWN(id->family));
        } else if (k == 2 || k == 3) {
            if (read_uint(r, k == 2 ? 64 : SHARD_MAX_FRAME_SIZE * 64, &v, keys[k])) return -1;
            if (v < 1) return json_fail(r, "'%s' must be at least 1", keys[k]);
            *(k == 2 ? &id->factor : &id->image_size) = (int)v;
        } else {
            double x;
            if (json_double(r, &x, k == 4 ? "'scale' (a number)" : "'shift' (a number)")) return -1;
            if (k == 4 && !(x != 0)) return json_fail(r, "'scale' must not be 0");
            *(k == 4 ? &id->scale : &id->shift) = x;
        }
        more = json_next_item(r, '}', "',' or '}'");
    }
    if (more < 0) return -1;
    for (k = 0; k < NK; k++)
        if (!seen[k]) return json_fail(r, "'autoencoder' without '%s'", keys[k]);
    return 0;
}

// What the top-level object says, before it is checked as a whole.
enum { KEY_FORMAT, KEY_VERSION, KEY_FRAME_SIZE, KEY_CLIP_FRAMES, KEY_CLIPS, KEY_SHARDS, KEY_CHANNELS, KEY_AUTOENCODER,
       NKEYS };
#define NKEYS_FRAMES KEY_CHANNELS  // the keys a dataset of frames has: the ones before "channels"
static const char *const DATASET_KEYS[NKEYS] = {"format", "format_version", "frame_size", "clip_frames", "clips",
                                                "shards", "channels", "autoencoder"};
typedef struct {
    int seen[NKEYS];
    char format[64];
    uint64_t version, N, F, clips, C;
} DatasetJson;

static int read_dataset_member(JsonReader *r, Dataset *d, DatasetJson *dj) {
    int k;
    if (read_key(r, DATASET_KEYS, NKEYS, dj->seen, &k, "")) return -1;
    const char *key = DATASET_KEYS[k];
    switch (k) {
    case KEY_FORMAT: return read_text(r, dj->format, sizeof dj->format, "'format'");
    case KEY_VERSION: return read_uint(r, 1000000, &dj->version, key);
    case KEY_FRAME_SIZE: return read_uint(r, SHARD_MAX_FRAME_SIZE, &dj->N, key);
    case KEY_CLIP_FRAMES: return read_uint(r, SHARD_MAX_CLIP_FRAMES, &dj->F, key);
    case KEY_CLIPS: return read_uint(r, INT_MAX, &dj->clips, key);
    case KEY_CHANNELS: return read_uint(r, SHARD_MAX_CHANNELS, &dj->C, key);
    case KEY_AUTOENCODER: return read_autoencoder(r, d);
    default: return read_shard_list(r, d);
    }
}

// The whole text: one object, nothing but whitespace after it.
static int read_dataset_json(JsonReader *r, Dataset *d, DatasetJson *dj) {
    if (json_expect(r, '{', "'{'")) return -1;
    int more = json_first_item(r, '}');
    while (more > 0) {
        if (read_dataset_member(r, d, dj)) return -1;
        more = json_next_item(r, '}', "',' or '}'");
    }
    if (more < 0) return -1;
    json_skip_ws(r);
    if (r->i < r->n) return json_fail(r, "%s after the dataset's object", json_what_is(r));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// dataset.json: its meaning

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const DShard *)a)->file, ((const DShard *)b)->file);
}

static int check_unique_shards(const Dataset *d, const char *path, char *err, size_t errlen) {
    DShard *sorted = malloc(sizeof(DShard) * (size_t)d->nshards);
    if (!sorted) return fc_errf(err, errlen, "%s: out of memory", path);
    memcpy(sorted, d->shards, sizeof(DShard) * (size_t)d->nshards);
    qsort(sorted, (size_t)d->nshards, sizeof(DShard), cmp_names);
    int rc = 0;
    for (int i = 1; i < d->nshards && !rc; i++)
        if (!strcmp(sorted[i - 1].file, sorted[i].file))
            rc = fc_errf(err, errlen, "%s: shard %s is listed twice", path, sorted[i].file);
    free(sorted);
    return rc;
}

// The values read make one valid dataset: d gets its frame size and clip length.
static int check_dataset_json(const DatasetJson *dj, Dataset *d, const char *path, char *err, size_t errlen) {
    for (int k = 0; k < NKEYS_FRAMES; k++)
        if (!dj->seen[k]) return fc_errf(err, errlen, "%s: no '%s'", path, DATASET_KEYS[k]);
    if (strcmp(dj->format, "framechain-dataset"))
        return fc_errf(err, errlen, "%s: format '%s' is not a framechain dataset", path, SHOWN(dj->format));
    if (dj->version != 1 && dj->version != 2)
        return fc_errf(err, errlen, "%s: format_version %llu is not supported (this program reads 1 and 2)", path,
                       (unsigned long long)dj->version);
    int latent = dj->version == 2;
    for (int k = NKEYS_FRAMES; k < NKEYS; k++)
        if (dj->seen[k] != latent)
            return fc_errf(err, errlen, latent ? "%s: no '%s' (a dataset of latents, format_version 2, has one)"
                                               : "%s: '%s' belongs to a dataset of latents (format_version 2), not 1",
                           path, DATASET_KEYS[k]);
    if (dj->N < 1 || dj->F < 1) return fc_errf(err, errlen, "%s: frame_size and clip_frames must be at least 1", path);
    if (latent && dj->C < 1) return fc_errf(err, errlen, "%s: 'channels' must be at least 1", path);
    d->N = (int)dj->N, d->F = (int)dj->F, d->raw = (size_t)dj->F * dj->N * dj->N * 3;
    if (latent) {
        d->C = d->lat.channels = (int)dj->C;
        d->unit = (size_t)dj->C * dj->N * dj->N * 2, d->raw = (size_t)dj->F * 2 * d->unit;
        if ((uint64_t)d->lat.image_size != dj->N * (uint64_t)d->lat.factor)
            return fc_errf(err, errlen, "%s: the autoencoder's image_size %d is not frame_size %d times its factor %d",
                           path, d->lat.image_size, d->N, d->lat.factor);
    }
    if (d->raw > SHARD_MAX_CLIP_BYTES)
        return fc_errf(err, errlen, "%s: clips of %d frames of %dx%d would be %zu bytes, more than the %zu allowed",
                       path, d->F, d->N, d->N, d->raw, SHARD_MAX_CLIP_BYTES);
    if (!d->nshards) return fc_errf(err, errlen, "%s: the list of shards is empty", path);
    uint64_t sum = 0;
    for (int i = 0; i < d->nshards; i++) sum += (uint64_t)d->shards[i].clips;
    if (sum != dj->clips)
        return fc_errf(err, errlen, "%s: 'clips' says %llu, but the shards hold %llu", path,
                       (unsigned long long)dj->clips, (unsigned long long)sum);
    return check_unique_shards(d, path, err, errlen);
}

// Read dataset.json's text (`size` bytes, malloc'ed, *text) at `path` in `dir`.
static int read_json_file(const char *dir, const char *path, char **text, size_t *size, char *err, size_t errlen) {
    struct stat st;
    int fd = fc_open_regular(path, &st, err, errlen);  // a FIFO is refused, not waited on
    if (fd < 0) {
        if (errno == ENOENT && !stat(dir, &st) && S_ISDIR(st.st_mode))
            return fc_errf(err, errlen, "%s: no dataset.json: not a dataset, or its prepare did not finish", dir);
        if (errno == ENOENT && stat(dir, &st)) return fc_errf(err, errlen, "%s: no such folder", dir);
        return -1;
    }
    if ((size_t)st.st_size > DATASET_JSON_MAX) {
        close(fd);
        return fc_errf(err, errlen, "%s: more than the %zu bytes a dataset.json may have", path, DATASET_JSON_MAX);
    }
    *size = (size_t)st.st_size;
    *text = malloc(*size + 1);
    int bad = !*text || fc_pread_all(fd, *text, *size, 0);
    close(fd);
    if (bad) {
        fc_errf(err, errlen, "%s: %s", path, *text ? "read error" : "out of memory");
        free(*text);
        *text = NULL;
        return -1;
    }
    return 0;
}

// Read and check dataset.json into d (its shards, frame size and clip length); *clips = the total it says.
static int load_dataset_json(Dataset *d, const char *path, uint64_t *clips, char *err, size_t errlen) {
    char *text = NULL;
    size_t size = 0;
    if (read_json_file(d->dir, path, &text, &size, err, errlen)) return -1;
    JsonReader r = {.s = (const uint8_t *)text, .n = size, .arena = malloc(size + 1), .cap = size + 1, .err = err,
                    .errlen = errlen, .path = path, .end_name = "the end of the file", .plain_escapes = 1};
    if (!r.arena) {
        free(text);
        return fc_errf(err, errlen, "%s: out of memory", path);
    }
    DatasetJson dj = {0};
    int bad = read_dataset_json(&r, d, &dj) || check_dataset_json(&dj, d, path, err, errlen);
    d->json_crc = (uint32_t)crc32_z(0L, (const Bytef *)text, size);
    free(r.arena);
    free(text);
    *clips = dj.clips;
    return bad ? -1 : 0;
}

// ---------------------------------------------------------------------------------------------
// the dataset

char **dataset_clip_origins(const Dataset *d, char *err, size_t errlen) {
    int n = d->nclips, open_shard = -1;
    char **o = fc_calloc((size_t)(n ? n : 1), sizeof(char *));
    StFile f;
    for (int i = 0; i < n; i++) {
        const DClip *c = &d->clips[i];
        if (c->shard != open_shard) {  // the clips come shard by shard: each header read once
            if (open_shard >= 0) st_free(&f), open_shard = -1;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", d->dir, d->shards[c->shard].file);
            if (st_read_header(path, &f, err, errlen)) {
                dataset_clip_origins_free(o, n);
                return NULL;
            }
            open_shard = c->shard;
        }
        char key[64];
        snprintf(key, sizeof key, "clip.%d.source", c->k);
        const char *src = st_meta(&f, key);
        snprintf(key, sizeof key, "clip.%d.first_frame", c->k);
        const char *first = st_meta(&f, key);
        src = src ? src : "";
        o[i] = fc_malloc(4 * strlen(src) + 32);
        manifest_escape(o[i], src);
        sprintf(o[i] + strlen(o[i]), "\t%ld", first ? atol(first) : -1L);
    }
    if (open_shard >= 0) st_free(&f);
    return o;
}

void dataset_clip_origins_free(char **origins, int n) {
    if (!origins) return;
    for (int i = 0; i < n; i++) free(origins[i]);
    free(origins);
}

void dataset_close(Dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->nshards; i++) free(d->shards[i].file);
    for (int i = 0; i < d->nclips; i++) free(d->clips[i].unit_crc);
    free(d->shards);
    free(d->clips);
    free(d->dir);
    free(d);
}

// The header of shard s, checked against what dataset.json says of it: si filled (si->clip to free).
static int load_shard_header(const Dataset *d, int s, ShardInfo *si, char *err, size_t errlen) {
    const DShard *sh = &d->shards[s];
    char spath[4096];
    snprintf(spath, sizeof spath, "%s/%s", d->dir, sh->file);
    StFile f;
    if (st_read_header(spath, &f, err, errlen)) return -1;
    int rc = shard_info(&f, spath, si, err, errlen);
    if (rc) {
        st_free(&f);
        return -1;
    }
    uint32_t header_crc = (uint32_t)crc32_z(0L, f.bytes, f.data_start);
    if ((uint64_t)f.size != sh->bytes)
        rc = fc_errf(err, errlen, "%s: %llu bytes, but dataset.json says %llu", spath, (unsigned long long)f.size,
                     (unsigned long long)sh->bytes);
    else if (si->N != d->N || si->F != d->F)
        rc = fc_errf(err, errlen, "%s: clips of %d frames of %dx%d, but dataset.json says %d frames of %dx%d", spath,
                     si->F, si->N, si->N, d->F, d->N, d->N);
    else if (si->C != d->C) {
        char theirs[32], ours[32];
        snprintf(theirs, sizeof theirs, si->C ? "latents of %d channels" : "RGB frames", si->C);
        snprintf(ours, sizeof ours, d->C ? "latents of %d channels" : "RGB frames", d->C);
        rc = fc_errf(err, errlen, "%s: %s, but dataset.json says %s", spath, theirs, ours);
    }
    else if (si->clips != sh->clips)
        rc = fc_errf(err, errlen, "%s: %d clips, but dataset.json says %d", spath, si->clips, sh->clips);
    else if (sh->has_header_crc && header_crc != sh->header_crc)
        rc = fc_errf(err, errlen, "%s: not the shard dataset.json lists (its header's CRC-32 is %08x, not %08x): a shard "
                     "copied over another, renamed, or from another dataset; prepare the dataset again from its "
                     "sources", spath, (unsigned)header_crc, (unsigned)sh->header_crc);
    st_free(&f);
    if (rc) shard_info_free(si);
    return rc;
}

// Every shard's header, its clips appended to the clip table.
static int load_shards(Dataset *d, char *err, size_t errlen) {
    int ccap = 0;
    for (int s = 0; s < d->nshards; s++) {
        ShardInfo si;
        if (load_shard_header(d, s, &si, err, errlen)) return -1;
        if (d->nclips + si.clips > ccap) {
            while (ccap < d->nclips + si.clips) ccap = ccap ? 2 * ccap : 1024;
            DClip *c = realloc(d->clips, sizeof(DClip) * (size_t)ccap);
            if (!c) fc_die("out of host memory for the dataset's clip table");
            d->clips = c;
        }
        d->shards[s].first = d->nclips;
        for (int k = 0; k < si.clips; k++) {
            ClipRec *r = &si.clip[k];
            d->clips[d->nclips++] = (DClip){r->offset, r->stored, r->crc, r->unit_crc, s, k, r->zlib};
            r->unit_crc = NULL;  // the dataset's now
        }
        shard_info_free(&si);
    }
    return 0;
}

Dataset *dataset_open(const char *dir, char *err, size_t errlen) {
    char path[4096];
    if (strlen(dir) > 3000) {
        fc_errf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    Dataset *d = fc_calloc(1, sizeof *d);
    d->dir = strdup(dir);
    if (!d->dir) fc_die("out of host memory");
    uint64_t clips = 0;
    if (load_dataset_json(d, path, &clips, err, errlen) || load_shards(d, err, errlen)) {
        dataset_close(d);
        return NULL;
    }
    if ((uint64_t)d->nclips != clips) {  // cannot happen: each shard was checked against its entry
        fc_errf(err, errlen, "%s: %d clips found, %llu listed", path, d->nclips, (unsigned long long)clips);
        dataset_close(d);
        return NULL;
    }
    return d;
}

int dataset_clips(const Dataset *d) { return d->nclips; }
int dataset_frame_size(const Dataset *d) { return d->N; }
int dataset_clip_frames(const Dataset *d) { return d->F; }
int dataset_shards(const Dataset *d) { return d->nshards; }
size_t dataset_clip_bytes(const Dataset *d) { return d->raw; }
int dataset_channels(const Dataset *d) { return d->C ? d->C : 3; }
const LatentIdentity *dataset_latent(const Dataset *d) { return d->C ? &d->lat : NULL; }
const char *dataset_dir(const Dataset *d) { return d->dir; }
uint32_t dataset_json_crc(const Dataset *d) { return d->json_crc; }

int dataset_clip_location(const Dataset *d, int clip, ClipLocation *out) {
    if (clip < 0 || clip >= d->nclips) return -1;
    const DClip *c = &d->clips[clip];
    *out = (ClipLocation){d->shards[c->shard].file, c->k, c->zlib, c->offset, c->stored, c->crc};
    return 0;
}

// Open clip `clip`'s shard (path filled), checked to be the size it had when the dataset was opened: the
// descriptor, or -1 with one line.
static int open_clip_shard(const Dataset *d, int clip, char *path, size_t pathlen, char *err, size_t errlen) {
    if (clip < 0 || clip >= d->nclips)
        return fc_errf(err, errlen, "%s: clip %d does not exist (the dataset has %d)", d->dir, clip, d->nclips);
    const DShard *s = &d->shards[d->clips[clip].shard];
    snprintf(path, pathlen, "%s/%s", d->dir, s->file);
    struct stat st;
    int fd = fc_open_regular(path, &st, err, errlen);
    if (fd < 0) return -1;
    if ((uint64_t)st.st_size != s->bytes) {
        close(fd);
        return fc_errf(err, errlen, "%s: the file changed since the dataset was opened (%lld bytes, not %llu)", path,
                    (long long)st.st_size, (unsigned long long)s->bytes);
    }
    return fd;
}

int dataset_read_clip(const Dataset *d, int clip, uint8_t *out, char *err, size_t errlen) {
    char path[4096], why[512];
    int fd = open_clip_shard(d, clip, path, sizeof path, err, errlen);
    if (fd < 0) return -1;
    const DClip *c = &d->clips[clip];
    Src src = {.mem = NULL, .fd = fd, .offset = c->offset};
    uint32_t crc = 0;
    int rc = decode_clip(&src, c->stored, c->zlib, out, d->raw, &crc, why, sizeof why);
    close(fd);
    if (rc) {
        fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): %s", path, c->k, clip, why);
        return rc;  // -1, or DATASET_CLIP_DAMAGED
    }
    int bad = d->C ? first_bad_unit(out, 2 * d->F, d->unit, c->unit_crc) : -1;
    if (bad >= 0) {
        fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): frame %d%s: CRC32 mismatch", path, c->k, clip,
                bad / 2, bad % 2 ? " (mirrored)" : "");
        return DATASET_CLIP_DAMAGED;
    }
    if (!d->C && crc != c->crc) {
        fc_errf(err, errlen,
                "%s: clip.%d (clip %d of the dataset): CRC32 mismatch: the data gives %08x, the header says %08x", path,
                c->k, clip, crc, c->crc);
        return DATASET_CLIP_DAMAGED;
    }
    return 0;
}

int dataset_read_latent_frames(const Dataset *d, int clip, int n, const int *frames, int mirror, float *out,
                               char *err, size_t errlen) {
    if (!d->C) return fc_errf(err, errlen, "%s: a dataset of frames, not latents", d->dir);
    char path[4096];
    int fd = open_clip_shard(d, clip, path, sizeof path, err, errlen);
    if (fd < 0) return -1;
    const DClip *c = &d->clips[clip];
    size_t values = d->unit / 2;
    uint16_t *buf = malloc(d->unit);
    int rc = buf ? 0 : fc_errf(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < n && !rc; i++) {
        int f = frames[i], u = 2 * f + (mirror != 0);
        if (f < 0 || f >= d->F) {
            rc = fc_errf(err, errlen, "%s: clip.%d: frame %d does not exist (clips have %d)", path, c->k, f, d->F);
        } else if (fc_pread_all(fd, buf, d->unit, c->offset + (uint64_t)u * d->unit)) {
            rc = fc_errf(err, errlen, "%s: clip.%d: read error: %s", path, c->k, strerror(errno));
        } else if ((uint32_t)crc32_z(0, (const uint8_t *)buf, d->unit) != c->unit_crc[u]) {
            fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): frame %d%s: CRC32 mismatch", path, c->k, clip,
                    f, mirror ? " (mirrored)" : "");
            rc = DATASET_CLIP_DAMAGED;
        } else {
            const uint8_t *b = (const uint8_t *)buf;
            // prepare never stores inf or NaN (it refuses latents beyond F16's range): a file whose CRC
            // matches them was written by something else, and would make the loss NaN
            long at = half_first_nonfinite(b, values);
            if (at >= 0) {
                fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): frame %d%s: value %ld is %s, not a latent",
                        path, c->k, clip, f, mirror ? " (mirrored)" : "", at, b[2 * at] | (b[2 * at + 1] & 3) ? "NaN" : "inf");
                rc = DATASET_CLIP_DAMAGED;
            }
            for (size_t e = 0; e < values; e++)
                out[(size_t)i * values + e] = half_to_float((uint16_t)(b[2 * e] | b[2 * e + 1] << 8));
        }
    }
    free(buf);
    close(fd);
    return rc;
}

struct ClipOriginReader {
    const Dataset *d;
    int shard;  // whose header f holds; -1: none
    StFile f;
};

ClipOriginReader *clip_origin_reader(const Dataset *d) {
    ClipOriginReader *r = fc_calloc(1, sizeof *r);
    r->d = d, r->shard = -1;
    return r;
}

void clip_origin_reader_free(ClipOriginReader *r) {
    if (!r) return;
    if (r->shard >= 0) st_free(&r->f);
    free(r);
}

int clip_origin_read(ClipOriginReader *r, int clip, char *source, size_t len, long *first_frame, char *err,
                     size_t errlen) {
    const Dataset *d = r->d;
    if (clip < 0 || clip >= d->nclips)
        return fc_errf(err, errlen, "%s: clip %d does not exist (the dataset has %d)", d->dir, clip, d->nclips);
    const DClip *c = &d->clips[clip];
    if (c->shard != r->shard) {
        if (r->shard >= 0) st_free(&r->f), r->shard = -1;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->dir, d->shards[c->shard].file);
        if (st_read_header(path, &r->f, err, errlen)) return -1;
        r->shard = c->shard;
    }
    char key[64];
    snprintf(key, sizeof key, "clip.%d.source", c->k);
    const char *src = st_meta(&r->f, key);
    snprintf(key, sizeof key, "clip.%d.first_frame", c->k);
    const char *first = st_meta(&r->f, key);
    snprintf(source, len, "%s", src ? src : "");
    *first_frame = first ? atol(first) : -1;
    return 0;
}

int dataset_clip_origin(const Dataset *d, int clip, char *source, size_t len, long *first_frame, char *err,
                        size_t errlen) {
    ClipOriginReader *r = clip_origin_reader(d);
    int rc = clip_origin_read(r, clip, source, len, first_frame, err, errlen);
    clip_origin_reader_free(r);
    return rc;
}
