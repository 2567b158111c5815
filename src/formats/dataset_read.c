// dataset_read.c: opening a clip dataset (see shards.h): a strict reader for exactly the shape of
// dataset.json, every listed shard's header checked against it (shard_read.c), and reading a clip
// by its index in the dataset.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "formats/safetensors.h"
#include "formats/shard_internal.h"
#include "formats/shards.h"

// ---------------------------------------------------------------------------------------------
// dataset.json: a strict reader for exactly its shape

typedef struct {
    const char *s;
    size_t n, i;
    const char *path;
    char *err;
    size_t errlen;
} Json;

static int jfail(Json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(Json *j, const char *fmt, ...) {
    int line = 1;
    for (size_t k = 0; k < j->i && k < j->n; k++) line += j->s[k] == '\n';
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fc_errf(j->err, j->errlen, "%s: line %d: %s", j->path, line, msg);
}

static void jws(Json *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

// What is at the position, for a message.
static const char *jwhat(Json *j, char *buf, size_t len) {
    if (j->i >= j->n) return "the end of the file";
    unsigned char c = (unsigned char)j->s[j->i];
    if (c > 0x20 && c < 0x7F) snprintf(buf, len, "'%c'", c);
    else snprintf(buf, len, "byte 0x%02x", c);
    return buf;
}
#define JWHAT(j) jwhat((j), (char[16]){0}, 16)

static int jexpect(Json *j, char c, const char *what) {
    jws(j);
    if (j->i >= j->n || j->s[j->i] != c) return jfail(j, "expected %s, got %s", what, JWHAT(j));
    j->i++;
    return 0;
}

// 1 when the next character (after spaces) is c, which is then consumed.
static int jaccept(Json *j, char c) {
    jws(j);
    if (j->i < j->n && j->s[j->i] == c) {
        j->i++;
        return 1;
    }
    return 0;
}

// A string without escapes other than \" \\ \/, at most cap - 1 bytes.
static int jstring(Json *j, char *buf, size_t cap, const char *what) {
    jws(j);
    if (j->i >= j->n || j->s[j->i] != '"') return jfail(j, "expected %s (a string), got %s", what, JWHAT(j));
    size_t k = 0;
    for (j->i++;; j->i++) {
        if (j->i >= j->n) return jfail(j, "unterminated string");
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') break;
        if (c < 0x20) return jfail(j, "control character 0x%02x inside a string", c);
        if (c == '\\') {
            char e = j->i + 1 < j->n ? j->s[j->i + 1] : 0;
            if (e != '"' && e != '\\' && e != '/') return jfail(j, "unsupported escape in a string (only \\\" \\\\ \\/)");
            c = (unsigned char)e;
            j->i++;
        }
        if (k + 1 >= cap) return jfail(j, "%s is longer than %zu bytes", what, cap - 1);
        buf[k++] = (char)c;
    }
    j->i++;
    buf[k] = 0;
    if (!st_valid_utf8(buf)) return jfail(j, "%s is not valid UTF-8", what);
    return 0;
}

static int juint(Json *j, uint64_t max, uint64_t *v, const char *key) {
    jws(j);
    size_t start = j->i;
    if (j->i < j->n && j->s[j->i] == '-') return jfail(j, "'%s' must be a non-negative integer", key);
    if (j->i >= j->n || j->s[j->i] < '0' || j->s[j->i] > '9')
        return jfail(j, "'%s' must be an integer, got %s", key, JWHAT(j));
    uint64_t x = 0;
    int big = 0;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i++] - '0');
        if (x > (max - d) / 10) big = 1;
        else x = x * 10 + d;
    }
    if (j->i < j->n && (j->s[j->i] == '.' || j->s[j->i] == 'e' || j->s[j->i] == 'E'))
        return jfail(j, "'%s' must be an integer", key);
    if (j->i - start > 1 && j->s[start] == '0') return jfail(j, "'%s': a number with a leading zero", key);
    if (big) return jfail(j, "'%s' is larger than %llu", key, (unsigned long long)max);
    *v = x;
    return 0;
}

typedef struct {
    char *file;
    int clips;
    uint64_t bytes;
    int first;  // the dataset index of its clip.0
} DShard;

typedef struct {
    uint64_t offset, stored;
    uint32_t crc;
    int shard, k;
    uint8_t zlib;
} DClip;

struct Dataset {
    char *dir;
    int N, F, nclips, nshards;
    size_t raw;
    DShard *shards;
    DClip *clips;
};

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const DShard *)a)->file, ((const DShard *)b)->file);
}

// A shard's file name: a plain name in the folder ([A-Za-z0-9._-], not starting with '.') ending in .safetensors.
static int plain_name(const char *s) {
    size_t n = strlen(s);
    if (n <= 12 || s[0] == '.' || strcmp(s + n - 12, ".safetensors")) return 0;
    return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static int parse_shard_entry(Json *j, DShard *s) {
    int have_file = 0, have_clips = 0, have_bytes = 0;
    char key[64], file[256];
    uint64_t v;
    if (jexpect(j, '{', "'{' (a shard)")) return -1;
    if (!jaccept(j, '}'))
        for (;;) {
            if (jstring(j, key, sizeof key, "a key")) return -1;
            if (jexpect(j, ':', "':'")) return -1;
            if (!strcmp(key, "file")) {
                if (have_file++) return jfail(j, "duplicate key 'file'");
                if (jstring(j, file, sizeof file, "'file'")) return -1;
                if (!plain_name(file))
                    return jfail(j, "shard file '%s' is not a plain name ending in .safetensors", SHOWN(file));
                s->file = strdup(file);
                if (!s->file) return jfail(j, "out of memory");
            } else if (!strcmp(key, "clips")) {
                if (have_clips++) return jfail(j, "duplicate key 'clips'");
                if (juint(j, SHARD_MAX_CLIPS, &v, "clips")) return -1;
                if (v < 1) return jfail(j, "a shard of 0 clips");
                s->clips = (int)v;
            } else if (!strcmp(key, "bytes")) {
                if (have_bytes++) return jfail(j, "duplicate key 'bytes'");
                if (juint(j, (uint64_t)1 << 62, &s->bytes, "bytes")) return -1;
            } else {
                return jfail(j, "unknown key '%s' in a shard (only file, clips, bytes)", SHOWN(key));
            }
            if (jaccept(j, '}')) break;
            if (jexpect(j, ',', "',' or '}'")) return -1;
        }
    if (!have_file || !have_clips || !have_bytes)
        return jfail(j, "a shard without '%s'", !have_file ? "file" : !have_clips ? "clips" : "bytes");
    return 0;
}

static int parse_dataset_json(Json *j, Dataset *d, uint64_t *clips_said) {
    int seen[6] = {0};
    static const char *const keys[] = {"format", "format_version", "frame_size", "clip_frames", "clips", "shards"};
    char key[64], format[64] = "";
    uint64_t version = 0, N = 0, F = 0, clips = 0;
    int cap = 0;
    if (jexpect(j, '{', "'{'")) return -1;
    if (!jaccept(j, '}'))
        for (;;) {
            if (jstring(j, key, sizeof key, "a key")) return -1;
            if (jexpect(j, ':', "':'")) return -1;
            int k = 0;
            while (k < 6 && strcmp(key, keys[k])) k++;
            if (k == 6) return jfail(j, "unknown key '%s'", SHOWN(key));
            if (seen[k]++) return jfail(j, "duplicate key '%s'", key);
            if (k == 0) {
                if (jstring(j, format, sizeof format, "'format'")) return -1;
            } else if (k == 1) {
                if (juint(j, 1000000, &version, key)) return -1;
            } else if (k == 2) {
                if (juint(j, SHARD_MAX_FRAME_SIZE, &N, key)) return -1;
            } else if (k == 3) {
                if (juint(j, SHARD_MAX_CLIP_FRAMES, &F, key)) return -1;
            } else if (k == 4) {
                if (juint(j, INT_MAX, &clips, key)) return -1;
            } else {
                if (jexpect(j, '[', "'[' (the list of shards)")) return -1;
                if (!jaccept(j, ']'))
                    for (;;) {
                        if (d->nshards == 1000000) return jfail(j, "more than 1000000 shards");
                        if (d->nshards == cap) {
                            cap = cap ? 2 * cap : 16;
                            DShard *s = realloc(d->shards, sizeof(DShard) * (size_t)cap);
                            if (!s) return jfail(j, "out of memory");
                            d->shards = s;
                        }
                        DShard *s = &d->shards[d->nshards++];
                        memset(s, 0, sizeof *s);
                        if (parse_shard_entry(j, s)) return -1;
                        if (jaccept(j, ']')) break;
                        if (jexpect(j, ',', "',' or ']'")) return -1;
                    }
            }
            if (jaccept(j, '}')) break;
            if (jexpect(j, ',', "',' or '}'")) return -1;
        }
    jws(j);
    if (j->i < j->n) return jfail(j, "%s after the dataset's object", JWHAT(j));
    for (int k = 0; k < 6; k++)
        if (!seen[k]) return fc_errf(j->err, j->errlen, "%s: no '%s'", j->path, keys[k]);
    if (strcmp(format, "framechain-dataset"))
        return fc_errf(j->err, j->errlen, "%s: format '%s' is not a framechain dataset", j->path, SHOWN(format));
    if (version != 1)
        return fc_errf(j->err, j->errlen, "%s: format_version %llu is not supported (this program reads 1)", j->path,
                    (unsigned long long)version);
    if (N < 1 || F < 1) return fc_errf(j->err, j->errlen, "%s: frame_size and clip_frames must be at least 1", j->path);
    d->N = (int)N, d->F = (int)F, d->raw = (size_t)F * N * N * 3;
    if (d->raw > SHARD_MAX_CLIP_BYTES)
        return fc_errf(j->err, j->errlen, "%s: clips of %d frames of %dx%d would be %zu bytes, more than the %zu allowed",
                    j->path, d->F, d->N, d->N, d->raw, SHARD_MAX_CLIP_BYTES);
    if (!d->nshards) return fc_errf(j->err, j->errlen, "%s: the list of shards is empty", j->path);
    uint64_t sum = 0;
    for (int i = 0; i < d->nshards; i++) sum += (uint64_t)d->shards[i].clips;
    if (sum != clips)
        return fc_errf(j->err, j->errlen, "%s: 'clips' says %llu, but the shards hold %llu", j->path,
                    (unsigned long long)clips, (unsigned long long)sum);
    DShard *sorted = malloc(sizeof(DShard) * (size_t)d->nshards);
    if (!sorted) return fc_errf(j->err, j->errlen, "%s: out of memory", j->path);
    memcpy(sorted, d->shards, sizeof(DShard) * (size_t)d->nshards);
    qsort(sorted, (size_t)d->nshards, sizeof(DShard), cmp_names);
    for (int i = 1; i < d->nshards; i++)
        if (!strcmp(sorted[i - 1].file, sorted[i].file)) {
            fc_errf(j->err, j->errlen, "%s: shard %s is listed twice", j->path, sorted[i].file);
            free(sorted);
            return -1;
        }
    free(sorted);
    *clips_said = clips;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// the dataset

void dataset_close(Dataset *d) {
    if (!d) return;
    for (int i = 0; i < d->nshards; i++) free(d->shards[i].file);
    free(d->shards);
    free(d->clips);
    free(d->dir);
    free(d);
}

Dataset *dataset_open(const char *dir, char *err, size_t errlen) {
    char path[4096];
    if (strlen(dir) > 3000) {
        fc_errf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        struct stat st;
        if (errno == ENOENT && !stat(dir, &st) && S_ISDIR(st.st_mode))
            fc_errf(err, errlen, "%s: no dataset.json: not a dataset, or its prepare did not finish", dir);
        else if (errno == ENOENT && stat(dir, &st))
            fc_errf(err, errlen, "%s: no such folder", dir);
        else
            fc_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > DATASET_JSON_MAX) {
        fc_errf(err, errlen, "%s: not a regular file of at most %zu bytes", path, DATASET_JSON_MAX);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *text = malloc(size + 1);
    if (!text || fc_pread_all(fd, text, size, 0)) {
        fc_errf(err, errlen, "%s: %s", path, text ? "read error" : "out of memory");
        free(text);
        close(fd);
        return NULL;
    }
    close(fd);
    Dataset *d = fc_calloc(1, sizeof *d);
    d->dir = strdup(dir);
    if (!d->dir) fc_die("out of host memory");
    Json j = {text, size, 0, path, err, errlen};
    uint64_t clips = 0;
    int bad = parse_dataset_json(&j, d, &clips);
    free(text);
    if (bad) {
        dataset_close(d);
        return NULL;
    }
    // every shard's header, against what dataset.json says
    int ccap = 0;
    for (int s = 0; s < d->nshards; s++) {
        DShard *sh = &d->shards[s];
        char spath[4096];
        snprintf(spath, sizeof spath, "%s/%s", dir, sh->file);
        StFile f;
        ShardInfo si;
        if (st_read_header(spath, &f, err, errlen)) goto fail;
        if (shard_info(&f, spath, &si, err, errlen)) {
            st_free(&f);
            goto fail;
        }
        int bad_shard = 1;
        if ((uint64_t)f.size != sh->bytes)
            fc_errf(err, errlen, "%s: %llu bytes, but dataset.json says %llu", spath, (unsigned long long)f.size,
                 (unsigned long long)sh->bytes);
        else if (si.N != d->N || si.F != d->F)
            fc_errf(err, errlen, "%s: clips of %d frames of %dx%d, but dataset.json says %d frames of %dx%d", spath, si.F,
                 si.N, si.N, d->F, d->N, d->N);
        else if (si.clips != sh->clips)
            fc_errf(err, errlen, "%s: %d clips, but dataset.json says %d", spath, si.clips, sh->clips);
        else
            bad_shard = 0;
        st_free(&f);
        if (bad_shard) {
            free(si.clip);
            goto fail;
        }
        if (d->nclips + si.clips > ccap) {
            while (ccap < d->nclips + si.clips) ccap = ccap ? 2 * ccap : 1024;
            DClip *c = realloc(d->clips, sizeof(DClip) * (size_t)ccap);
            if (!c) fc_die("out of host memory for the dataset's clip table");
            d->clips = c;
        }
        sh->first = d->nclips;
        for (int k = 0; k < si.clips; k++) {
            const ClipRec *r = &si.clip[k];
            d->clips[d->nclips++] = (DClip){r->offset, r->stored, r->crc, s, k, r->zlib};
        }
        free(si.clip);
    }
    if ((uint64_t)d->nclips != clips) {  // cannot happen: each shard was checked against its entry
        fc_errf(err, errlen, "%s: %d clips found, %llu listed", path, d->nclips, (unsigned long long)clips);
        goto fail;
    }
    return d;
fail:
    dataset_close(d);
    return NULL;
}

int dataset_clips(const Dataset *d) { return d->nclips; }
int dataset_frame_size(const Dataset *d) { return d->N; }
int dataset_clip_frames(const Dataset *d) { return d->F; }
int dataset_shards(const Dataset *d) { return d->nshards; }
size_t dataset_clip_bytes(const Dataset *d) { return d->raw; }
const char *dataset_dir(const Dataset *d) { return d->dir; }

int dataset_clip_location(const Dataset *d, int clip, ClipLocation *out) {
    if (clip < 0 || clip >= d->nclips) return -1;
    const DClip *c = &d->clips[clip];
    *out = (ClipLocation){d->shards[c->shard].file, c->k, c->zlib, c->offset, c->stored, c->crc};
    return 0;
}

int dataset_read_clip(const Dataset *d, int clip, uint8_t *out, char *err, size_t errlen) {
    if (clip < 0 || clip >= d->nclips)
        return fc_errf(err, errlen, "%s: clip %d does not exist (the dataset has %d)", d->dir, clip, d->nclips);
    const DClip *c = &d->clips[clip];
    const DShard *s = &d->shards[c->shard];
    char path[4096], why[512];
    snprintf(path, sizeof path, "%s/%s", d->dir, s->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fc_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return fc_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size != s->bytes) {
        close(fd);
        return fc_errf(err, errlen, "%s: the file changed since the dataset was opened (%lld bytes, not %llu)", path,
                    (long long)st.st_size, (unsigned long long)s->bytes);
    }
    Src src = {.mem = NULL, .fd = fd, .offset = c->offset};
    uint32_t crc = 0;
    int rc = decode_clip(&src, c->stored, c->zlib, out, d->raw, &crc, why, sizeof why);
    close(fd);
    if (rc) return fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): %s", path, c->k, clip, why);
    if (crc != c->crc)
        return fc_errf(err, errlen, "%s: clip.%d (clip %d of the dataset): CRC32 mismatch: the data gives %08x, the header says %08x",
                    path, c->k, clip, crc, c->crc);
    return 0;
}
