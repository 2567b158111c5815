// shards.c: the clip dataset (see shards.h): the shard writer, a strict reader of dataset.json and
// the shards' headers, and clip decoding in bounded memory.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "safetensors.h"
#include "shards.h"

#define ZLIB_LEVEL 6
#define IO_CHUNK ((size_t)256 << 10)  // bytes read from a shard file per pread while inflating
#define CHECK_WINDOW ((size_t)64 << 10)  // inflated bytes held at once by shard_check_bytes
#define META_PER_SHARD ((size_t)16 << 20)  // header bytes (about) after which a shard is written

static int errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// A string from a file for an error message: at most ~60 bytes, control characters shown as '?',
// so that the message stays one line.
static const char *shown(const char *s, char *buf, size_t len) {
    size_t n = strlen(s), k = n < len - 4 ? n : len - 4;
    while (k < n && k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;  // cut between characters
    for (size_t i = 0; i < k; i++) buf[i] = ((uint8_t)s[i] < 0x20 || s[i] == 0x7F) ? '?' : s[i];
    strcpy(buf + k, k < n ? "..." : "");
    return buf;
}
#define SHOWN(s) shown((s), (char[64]){0}, 64)

// A non-negative decimal integer with no sign, space or leading zero, at most max.
static int parse_count(const char *s, uint64_t max, uint64_t *out) {
    if (!s || !*s || (s[0] == '0' && s[1])) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

// Exactly 8 lowercase hex digits.
static int parse_crc(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') v = v << 4 | (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v << 4 | (uint32_t)(c - 'a' + 10);
        else return -1;
    }
    if (s[8]) return -1;
    *out = v;
    return 0;
}

// A decimal number (digits, '.', an exponent), finite, in [0, 1e6].
static int parse_fps(const char *s, double *out) {
    size_t n = strlen(s);
    if (n == 0 || n > 40 || strspn(s, "0123456789.eE+-") != n || !(s[0] >= '0' && s[0] <= '9')) return -1;
    char *end;
    double v = strtod(s, &end);  // an underflow (ERANGE) reads as a tiny or zero rate: fine
    if (*end || !isfinite(v) || v < 0 || v > 1e6) return -1;
    *out = v;
    return 0;
}

// fps as text: an integer as such, else the shortest form that reads back as the same double.
static void fps_text(double fps, char *buf, size_t len) {
    if (fps == floor(fps) && fps < 1e15) {
        snprintf(buf, len, "%.0f", fps);
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, fps);
        if (strtod(buf, NULL) == fps) return;
    }
}

// "clip.<k>" at the start of s with 0 <= k < clips (no leading zeros); *rest = what follows.
static int clip_key(const char *s, int clips, int *k, const char **rest) {
    if (strncmp(s, "clip.", 5)) return -1;
    const char *p = s + 5;
    if (!(*p >= '0' && *p <= '9') || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v >= clips) return -1;
    }
    *k = (int)v, *rest = p;
    return 0;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t offset) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        p += r, n -= (size_t)r, offset += (uint64_t)r;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// a shard's header

typedef struct {
    uint64_t offset;  // of the stored bytes within the file
    uint64_t stored;  // stored bytes
    uint32_t crc;     // of the raw bytes
    uint8_t zlib;
} ClipRec;

typedef struct {
    int N, F, clips;
    size_t raw;  // F * N * N * 3
    ClipRec *clip;
} ShardInfo;

enum { HAVE_ENCODING = 1, HAVE_CRC = 2, HAVE_SOURCE = 4, HAVE_FIRST = 8, HAVE_FPS = 16, HAVE_ALL = 31 };
static const char *const CLIP_FIELDS[] = {"encoding", "crc32", "source", "first_frame", "fps"};

static int meta_count(const StFile *f, const char *name, const char *key, uint64_t lo, uint64_t hi, uint64_t *v,
                      char *err, size_t errlen) {
    const char *s = st_meta(f, key);
    if (!s) return errf(err, errlen, "%s: no '%s' in __metadata__", name, key);
    if (parse_count(s, hi, v) || *v < lo)
        return errf(err, errlen, "%s: %s '%s' is not an integer in %llu..%llu", name, key, SHOWN(s),
                    (unsigned long long)lo, (unsigned long long)hi);
    return 0;
}

// Check a shard's metadata and tensors (its layout was checked by the safetensors reader) and fill
// si. `name` (the path) starts every error.
static int shard_info(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen) {
    memset(si, 0, sizeof *si);
    const char *format = st_meta(f, "format"), *version = st_meta(f, "format_version");
    if (!format) return errf(err, errlen, "%s: not a framechain shard (no 'format' in __metadata__)", name);
    if (strcmp(format, "framechain-shard"))
        return errf(err, errlen, "%s: format '%s' is not a framechain shard", name, SHOWN(format));
    if (!version) return errf(err, errlen, "%s: no 'format_version' in __metadata__", name);
    if (strcmp(version, "1"))
        return errf(err, errlen, "%s: format_version '%s' is not supported (this program reads 1)", name,
                    SHOWN(version));
    uint64_t N, F, clips;
    if (meta_count(f, name, "frame_size", 1, SHARD_MAX_FRAME_SIZE, &N, err, errlen) ||
        meta_count(f, name, "clip_frames", 1, SHARD_MAX_CLIP_FRAMES, &F, err, errlen) ||
        meta_count(f, name, "clips", 1, SHARD_MAX_CLIPS, &clips, err, errlen))
        return -1;
    size_t raw = (size_t)F * N * N * 3;  // below 2^64: 65536 * 8192^2 * 3
    if (raw > SHARD_MAX_CLIP_BYTES)
        return errf(err, errlen, "%s: clips of %llu frames of %llux%llu would be %zu bytes, more than the %zu allowed",
                    name, (unsigned long long)F, (unsigned long long)N, (unsigned long long)N, raw,
                    SHARD_MAX_CLIP_BYTES);
    if ((uint64_t)f->n != clips)
        return errf(err, errlen, "%s: the metadata says %llu clips, but the file holds %d tensors", name,
                    (unsigned long long)clips, f->n);
    si->N = (int)N, si->F = (int)F, si->clips = (int)clips, si->raw = raw;
    si->clip = calloc(clips, sizeof(ClipRec));
    uint8_t *have = calloc(clips, 1);
    if (!si->clip || !have) {
        free(have);
        free(si->clip);
        si->clip = NULL;
        return errf(err, errlen, "%s: out of memory for %llu clips", name, (unsigned long long)clips);
    }
    int rc = -1;
    for (int i = 0; i < f->nmeta; i++) {
        const char *key = f->meta_keys[i], *val = f->meta_values[i], *rest;
        int k;
        if (!strcmp(key, "format") || !strcmp(key, "format_version") || !strcmp(key, "frame_size") ||
            !strcmp(key, "clip_frames") || !strcmp(key, "clips"))
            continue;
        if (clip_key(key, si->clips, &k, &rest) || rest[0] != '.') {
            errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
            goto out;
        }
        const char *field = rest + 1;
        uint64_t first;
        double fps;
        if (!strcmp(field, "encoding")) {
            if (strcmp(val, "raw") && strcmp(val, "zlib")) {
                errf(err, errlen, "%s: %s '%s' is neither raw nor zlib", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            si->clip[k].zlib = val[0] == 'z';
            have[k] |= HAVE_ENCODING;
        } else if (!strcmp(field, "crc32")) {
            if (parse_crc(val, &si->clip[k].crc)) {
                errf(err, errlen, "%s: %s '%s' is not 8 lowercase hex digits", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_CRC;
        } else if (!strcmp(field, "source")) {
            have[k] |= HAVE_SOURCE;
        } else if (!strcmp(field, "first_frame")) {
            if (parse_count(val, (uint64_t)1 << 62, &first)) {
                errf(err, errlen, "%s: %s '%s' is not a non-negative integer", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_FIRST;
        } else if (!strcmp(field, "fps")) {
            if (parse_fps(val, &fps)) {
                errf(err, errlen, "%s: %s '%s' is not a number in [0, 1e6]", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_FPS;
        } else {
            errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
            goto out;
        }
    }
    for (int k = 0; k < si->clips; k++)
        if (have[k] != HAVE_ALL) {
            int b = 0;
            while (have[k] >> b & 1) b++;
            errf(err, errlen, "%s: no 'clip.%d.%s' in __metadata__", name, k, CLIP_FIELDS[b]);
            goto out;
        }
    // the tensors: exactly clip.0 .. clip.<clips-1> (the reader made the names unique, and there are `clips`)
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        const char *rest;
        int k;
        if (clip_key(e->name, si->clips, &k, &rest) || *rest) {
            errf(err, errlen, "%s: tensor '%s' is not one of clip.0 .. clip.%d", name, SHOWN(e->name), si->clips - 1);
            goto out;
        }
        if (strcmp(e->dtype, "U8")) {
            errf(err, errlen, "%s: clip.%d has dtype %s, not U8", name, k, e->dtype);
            goto out;
        }
        ClipRec *c = &si->clip[k];
        c->offset = f->data_start + e->begin, c->stored = e->end - e->begin;
        if (c->zlib) {
            if (e->ndim != 1 || c->stored == 0 || c->stored >= raw) {
                errf(err, errlen, "%s: clip.%d is zlib: a 1-D tensor of 1 to %zu bytes is expected, not %d-D of %llu bytes",
                     name, k, raw - 1, e->ndim, (unsigned long long)c->stored);
                goto out;
            }
        } else if (e->ndim != 4 || e->shape[0] != si->F || e->shape[1] != si->N || e->shape[2] != si->N ||
                   e->shape[3] != 3) {
            char shape[160] = "";
            size_t used = 0;
            for (int d = 0; d < e->ndim && used < sizeof shape; d++)
                used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%ld", d ? ", " : "", e->shape[d]);
            errf(err, errlen, "%s: clip.%d is raw: shape [%d, %d, %d, 3] is expected, not [%s]", name, k, si->F, si->N,
                 si->N, shape);
            goto out;
        }
    }
    rc = 0;
out:
    free(have);
    if (rc) {
        free(si->clip);
        si->clip = NULL;
    }
    return rc;
}

// ---------------------------------------------------------------------------------------------
// decoding a clip

// Where a clip's stored bytes are: in memory, or in a file from `offset`.
typedef struct {
    const uint8_t *mem;
    int fd;
    uint64_t offset;
} Src;

// Decode `stored` bytes of src (a zlib stream, or the raw frames) that must give exactly raw bytes;
// into out, or (out NULL) through a small window. *crc = CRC-32 of the raw bytes. 0, or -1 with why.
static int decode_clip(const Src *src, uint64_t stored, int zlib, uint8_t *out, size_t raw, uint32_t *crc,
                       char *why, size_t whylen) {
    uint32_t c = 0;
    if (!zlib) {
        if (stored != raw) return errf(why, whylen, "%llu bytes stored for %zu", (unsigned long long)stored, raw);
        if (out) {
            if (src->mem) memcpy(out, src->mem, raw);
            else if (pread_all(src->fd, out, raw, src->offset))
                return errf(why, whylen, "read error: %s", strerror(errno));
            *crc = (uint32_t)crc32_z(0, out, raw);
            return 0;
        }
        if (src->mem) {
            *crc = (uint32_t)crc32_z(0, src->mem, raw);
            return 0;
        }
        uint8_t *buf = malloc(IO_CHUNK);
        if (!buf) return errf(why, whylen, "out of memory");
        for (size_t done = 0; done < raw;) {
            size_t n = raw - done < IO_CHUNK ? raw - done : IO_CHUNK;
            if (pread_all(src->fd, buf, n, src->offset + done)) {
                free(buf);
                return errf(why, whylen, "read error: %s", strerror(errno));
            }
            c = (uint32_t)crc32_z(c, buf, n);
            done += n;
        }
        free(buf);
        *crc = c;
        return 0;
    }
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit(&zs) != Z_OK) return errf(why, whylen, "zlib: cannot start inflating (out of memory?)");
    uint8_t *inbuf = src->mem ? NULL : malloc(IO_CHUNK);
    uint8_t *window = out ? NULL : malloc(CHECK_WINDOW);
    int rc = -1;
    if ((!src->mem && !inbuf) || (!out && !window)) {
        errf(why, whylen, "out of memory");
        goto done;
    }
    uint64_t fed = 0;  // stored bytes handed to zlib so far
    size_t produced = 0;
    uint8_t extra;  // where a byte beyond the expected ones would go
    for (;;) {
        if (zs.avail_in == 0 && fed < stored) {
            uint64_t n = stored - fed;
            if (src->mem) {
                if (n > (1u << 30)) n = 1u << 30;
                zs.next_in = (Bytef *)(src->mem + fed);
            } else {
                if (n > IO_CHUNK) n = IO_CHUNK;
                if (pread_all(src->fd, inbuf, (size_t)n, src->offset + fed)) {
                    errf(why, whylen, "read error: %s", strerror(errno));
                    goto done;
                }
                zs.next_in = inbuf;
            }
            zs.avail_in = (uInt)n;
            fed += n;
        }
        uint8_t *dst;
        size_t space;
        if (produced < raw) {
            space = raw - produced;
            if (out) dst = out + produced;
            else {
                size_t at = produced % CHECK_WINDOW;
                dst = window + at;
                if (space > CHECK_WINDOW - at) space = CHECK_WINDOW - at;
            }
            if (space > (1u << 30)) space = 1u << 30;
        } else {
            dst = &extra, space = 1;
        }
        uInt in_before = zs.avail_in;
        zs.next_out = dst, zs.avail_out = (uInt)space;
        int r = inflate(&zs, Z_NO_FLUSH);
        size_t got = space - zs.avail_out;
        if (produced >= raw && got) {
            errf(why, whylen, "the zlib stream inflates to more than the %zu bytes of a clip", raw);
            goto done;
        }
        c = (uint32_t)crc32_z(c, dst, got);
        produced += got;
        if (r == Z_STREAM_END) {
            uint64_t left = zs.avail_in + (stored - fed);
            if (produced < raw)
                errf(why, whylen, "the zlib stream inflates to %zu bytes, not the %zu of a clip", produced, raw);
            else if (left)
                errf(why, whylen, "%llu bytes follow the end of the zlib stream", (unsigned long long)left);
            else
                rc = 0;
            goto done;
        }
        if (r == Z_NEED_DICT || r == Z_DATA_ERROR || r == Z_STREAM_ERROR) {
            errf(why, whylen, "corrupt zlib data after %zu inflated bytes (%s)", produced,
                 r == Z_NEED_DICT ? "it asks for a preset dictionary" : zs.msg ? zs.msg : "bad stream");
            goto done;
        }
        if (r == Z_MEM_ERROR) {
            errf(why, whylen, "zlib: out of memory");
            goto done;
        }
        if (got == 0 && zs.avail_in == in_before && zs.avail_in == 0 && fed >= stored) {  // no progress, no input left
            errf(why, whylen, "the zlib stream is cut short after %zu of %zu bytes", produced, raw);
            goto done;
        }
    }
done:
    inflateEnd(&zs);
    free(inbuf);
    free(window);
    if (!rc) *crc = c;
    return rc;
}

int shard_check_bytes(const uint8_t *bytes, size_t len, char *err, size_t errlen) {
    StFile f;
    char why[512];
    if (st_parse(&f, bytes, len, why, sizeof why)) return errf(err, errlen, "shard: %s", why);
    ShardInfo si;
    if (shard_info(&f, "shard", &si, err, errlen)) {
        st_free(&f);
        return -1;
    }
    int rc = 0;
    for (int k = 0; k < si.clips && !rc; k++) {
        const ClipRec *c = &si.clip[k];
        Src src = {.mem = f.bytes + c->offset, .fd = -1};
        uint32_t crc;
        if (decode_clip(&src, c->stored, c->zlib, NULL, si.raw, &crc, why, sizeof why))
            rc = errf(err, errlen, "shard: clip.%d: %s", k, why);
        else if (crc != c->crc)
            rc = errf(err, errlen, "shard: clip.%d: CRC32 mismatch: the data gives %08x, the metadata says %08x", k, crc,
                      c->crc);
    }
    free(si.clip);
    st_free(&f);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// writer

typedef struct {
    uint8_t *data;  // the stored bytes
    size_t stored;
    int zlib;
    uint32_t crc;
    char *source;
    long first;
    double fps;
} Pending;

typedef struct {
    char file[40];
    int clips;
    uint64_t bytes;
} Written;

struct ShardWriter {
    char *dir;
    int N, F;
    size_t raw, max_bytes;
    Pending *cur;  // the clips of the shard being filled
    int ncur, capcur;
    size_t cur_bytes, cur_meta;
    Written *done;  // the shards written
    int ndone, capdone;
    char *manifest;
    size_t mlen, mcap;
    long total;
    int failed;
    uint8_t *zbuf;
    size_t zcap;
};

static void manifest_put(ShardWriter *w, const char *s, size_t n) {
    if (w->mlen + n + 1 > w->mcap) {
        size_t cap = w->mcap ? w->mcap : 4096;
        while (cap < w->mlen + n + 1) cap *= 2;
        char *m = realloc(w->manifest, cap);
        if (!m) fc_die("out of host memory for the dataset manifest (%zu bytes)", cap);
        w->manifest = m, w->mcap = cap;
    }
    memcpy(w->manifest + w->mlen, s, n);
    w->mlen += n;
    w->manifest[w->mlen] = 0;
}

static void shard_name(int i, char *buf, size_t len) { snprintf(buf, len, "shard-%05d.safetensors", i); }

// s as valid UTF-8: each byte that does not start a valid sequence becomes U+FFFD. malloc'ed.
static char *utf8_fixed(const char *s) {
    size_t n = strlen(s);
    char *o = fc_malloc(3 * n + 1);
    if (st_valid_utf8(s)) return memcpy(o, s, n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (size_t len = 1; len <= 4 && i + len <= n && !k; len++) {
            char t[5];
            memcpy(t, s + i, len);
            t[len] = 0;
            if (st_valid_utf8(t)) k = len;
        }
        if (k) memcpy(o + j, s + i, k), i += k, j += k;
        else memcpy(o + j, "\xEF\xBF\xBD", 3), i++, j += 3;
    }
    o[j] = 0;
    return o;
}

static int mkdirs(const char *dir, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return errf(err, errlen, "%.200s...: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST) return errf(err, errlen, "%s: cannot create: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return errf(err, errlen, "%s: not a folder", dir);
    return 0;
}

ShardWriter *shard_writer_open(const char *dir, int frame_size, int clip_frames, size_t max_shard_bytes, char *err,
                               size_t errlen) {
    if (frame_size < 1 || frame_size > SHARD_MAX_FRAME_SIZE) {
        errf(err, errlen, "%s: frame size %d is not in 1..%d", dir, frame_size, SHARD_MAX_FRAME_SIZE);
        return NULL;
    }
    if (clip_frames < 1 || clip_frames > SHARD_MAX_CLIP_FRAMES) {
        errf(err, errlen, "%s: clip length %d frames is not in 1..%d", dir, clip_frames, SHARD_MAX_CLIP_FRAMES);
        return NULL;
    }
    size_t raw = (size_t)clip_frames * frame_size * frame_size * 3;
    if (raw > SHARD_MAX_CLIP_BYTES) {
        errf(err, errlen, "%s: clips of %d frames of %dx%d would be %zu bytes, more than the %zu allowed", dir,
             clip_frames, frame_size, frame_size, raw, SHARD_MAX_CLIP_BYTES);
        return NULL;
    }
    if (strlen(dir) > 3000) {
        errf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    if (mkdirs(dir, err, errlen)) return NULL;
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    if (!stat(path, &st)) {
        errf(err, errlen, "%s already holds a dataset (dataset.json); remove it or choose another folder", dir);
        return NULL;
    }
    if (access(dir, W_OK)) {
        errf(err, errlen, "%s: cannot write there: %s", dir, strerror(errno));
        return NULL;
    }
    DIR *dd = opendir(dir);  // temporary files of a writer that was killed
    if (dd) {
        for (struct dirent *e; (e = readdir(dd));) {
            const char *n = e->d_name;
            if ((!strncmp(n, "shard-", 6) && strstr(n, ".safetensors.tmp-")) || !strncmp(n, "dataset.json.tmp-", 17) ||
                !strncmp(n, "manifest.tsv.tmp-", 17)) {
                snprintf(path, sizeof path, "%s/%s", dir, n);
                unlink(path);
            }
        }
        closedir(dd);
    }
    ShardWriter *w = fc_calloc(1, sizeof *w);
    w->dir = strdup(dir);
    if (!w->dir) fc_die("out of host memory");
    w->N = frame_size, w->F = clip_frames, w->raw = raw;
    w->max_bytes = max_shard_bytes ? max_shard_bytes : SHARD_DEFAULT_BYTES;
    static const char head[] = "shard\tclip\tsource\tfirst_frame\tframes\tfps\n";
    manifest_put(w, head, sizeof head - 1);
    return w;
}

static void free_pending(ShardWriter *w) {
    for (int i = 0; i < w->ncur; i++) free(w->cur[i].data), free(w->cur[i].source);
    w->ncur = 0, w->cur_bytes = 0, w->cur_meta = 0;
}

// Write the clips held as the next shard.
static int flush_shard(ShardWriter *w, char *err, size_t errlen) {
    int n = w->ncur;
    if (!n) return 0;
    typedef struct {
        char name[32], keys[5][48], crc[12], first[24], fps[40];
    } Text;
    Text *tx = fc_calloc((size_t)n, sizeof(Text));
    StTensor *t = fc_calloc((size_t)n, sizeof(StTensor));
    StMeta *m = fc_calloc((size_t)5 * n + 5, sizeof(StMeta));
    char N[16], F[16], count[16];
    snprintf(N, sizeof N, "%d", w->N);
    snprintf(F, sizeof F, "%d", w->F);
    snprintf(count, sizeof count, "%d", n);
    int nm = 0;
    m[nm++] = (StMeta){"format", "framechain-shard"};
    m[nm++] = (StMeta){"format_version", "1"};
    m[nm++] = (StMeta){"frame_size", N};
    m[nm++] = (StMeta){"clip_frames", F};
    m[nm++] = (StMeta){"clips", count};
    for (int k = 0; k < n; k++) {
        const Pending *p = &w->cur[k];
        Text *x = &tx[k];
        snprintf(x->name, sizeof x->name, "clip.%d", k);
        for (int j = 0; j < 5; j++) snprintf(x->keys[j], sizeof x->keys[j], "clip.%d.%s", k, CLIP_FIELDS[j]);
        snprintf(x->crc, sizeof x->crc, "%08x", p->crc);
        snprintf(x->first, sizeof x->first, "%ld", p->first);
        fps_text(p->fps, x->fps, sizeof x->fps);
        m[nm++] = (StMeta){x->keys[0], p->zlib ? "zlib" : "raw"};
        m[nm++] = (StMeta){x->keys[1], x->crc};
        m[nm++] = (StMeta){x->keys[2], p->source};
        m[nm++] = (StMeta){x->keys[3], x->first};
        m[nm++] = (StMeta){x->keys[4], x->fps};
        t[k].name = x->name, t[k].dtype = "U8", t[k].data = p->data;
        if (p->zlib) t[k].ndim = 1, t[k].shape[0] = (long)p->stored;
        else t[k].ndim = 4, t[k].shape[0] = w->F, t[k].shape[1] = w->N, t[k].shape[2] = w->N, t[k].shape[3] = 3;
    }
    char file[40], path[4096];
    shard_name(w->ndone, file, sizeof file);
    snprintf(path, sizeof path, "%s/%s", w->dir, file);
    int rc = st_write(path, t, n, m, nm, err, errlen);
    struct stat st;
    if (!rc && stat(path, &st)) rc = errf(err, errlen, "%s: cannot stat what was written: %s", path, strerror(errno));
    free(tx), free(t), free(m);
    if (rc) return -1;
    if (w->ndone == w->capdone) {
        w->capdone = w->capdone ? 2 * w->capdone : 16;
        w->done = realloc(w->done, sizeof(Written) * (size_t)w->capdone);
        if (!w->done) fc_die("out of host memory");
    }
    Written *d = &w->done[w->ndone++];
    snprintf(d->file, sizeof d->file, "%s", file);
    d->clips = n, d->bytes = (uint64_t)st.st_size;
    free_pending(w);
    return 0;
}

int shard_writer_add(ShardWriter *w, const uint8_t *clip, const char *source, long first_frame, double fps, char *err,
                     size_t errlen) {
    if (w->failed) return errf(err, errlen, "%s: the dataset writer stopped at an earlier error", w->dir);
    if (!clip || !source) return errf(err, errlen, "%s: shard_writer_add without a clip or a source", w->dir);
    if (first_frame < 0 || (uint64_t)first_frame > (uint64_t)1 << 62)
        return errf(err, errlen, "%s: first frame %ld of %s is out of range", w->dir, first_frame, source);
    if (!isfinite(fps) || fps < 0 || fps > 1e6)
        return errf(err, errlen, "%s: fps %g of %s is not in [0, 1e6]", w->dir, fps, source);
    if (w->total >= INT_MAX) return errf(err, errlen, "%s: a dataset holds at most %d clips", w->dir, INT_MAX);
    size_t bound = compressBound((uLong)w->raw);
    if (w->zcap < bound) {
        free(w->zbuf);
        w->zbuf = fc_malloc(bound);
        w->zcap = bound;
    }
    uLongf zlen = (uLongf)bound;
    int zr = compress2(w->zbuf, &zlen, clip, (uLong)w->raw, ZLIB_LEVEL);
    if (zr == Z_MEM_ERROR) fc_die("out of host memory compressing a clip");
    int zlib = zr == Z_OK && (size_t)zlen * 10 <= w->raw * 9;  // at least 10% smaller
    Pending p = {0};
    p.zlib = zlib;
    p.stored = zlib ? (size_t)zlen : w->raw;
    p.data = fc_malloc(p.stored);
    memcpy(p.data, zlib ? w->zbuf : clip, p.stored);
    p.crc = (uint32_t)crc32_z(0, clip, w->raw);
    p.source = utf8_fixed(source);
    p.first = first_frame, p.fps = fps;
    size_t meta = 6 * strlen(p.source) + 256;  // JSON escapes make at most 6 bytes of one
    if (w->ncur && (w->cur_bytes + p.stored > w->max_bytes || w->ncur >= SHARD_MAX_CLIPS ||
                    w->cur_meta + meta > META_PER_SHARD)) {
        if (flush_shard(w, err, errlen)) {
            w->failed = 1;
            free(p.data), free(p.source);
            return -1;
        }
    }
    if (w->ncur == w->capcur) {
        w->capcur = w->capcur ? 2 * w->capcur : 64;
        w->cur = realloc(w->cur, sizeof(Pending) * (size_t)w->capcur);
        if (!w->cur) fc_die("out of host memory");
    }
    // the manifest line: shard, clip, source, first_frame, frames, fps
    char file[40], line[256], fpsb[40];
    shard_name(w->ndone, file, sizeof file);
    snprintf(line, sizeof line, "%s\t%d\t", file, w->ncur);
    manifest_put(w, line, strlen(line));
    for (const char *s = p.source; *s; s++) {
        char e[8];
        unsigned char ch = (unsigned char)*s;
        if (ch == '\t') strcpy(e, "\\t");
        else if (ch == '\n') strcpy(e, "\\n");
        else if (ch == '\r') strcpy(e, "\\r");
        else if (ch == '\\') strcpy(e, "\\\\");
        else if (ch < 0x20 || ch == 0x7F) snprintf(e, sizeof e, "\\x%02x", ch);
        else e[0] = (char)ch, e[1] = 0;
        manifest_put(w, e, strlen(e));
    }
    fps_text(fps, fpsb, sizeof fpsb);
    snprintf(line, sizeof line, "\t%ld\t%d\t%s\n", first_frame, w->F, fpsb);
    manifest_put(w, line, strlen(line));
    w->cur[w->ncur++] = p;
    w->cur_bytes += p.stored, w->cur_meta += meta;
    w->total++;
    return 0;
}

static void writer_free(ShardWriter *w) {
    free_pending(w);
    free(w->cur);
    free(w->done);
    free(w->manifest);
    free(w->zbuf);
    free(w->dir);
    free(w);
}

void shard_writer_abort(ShardWriter *w) {
    if (w) writer_free(w);
}

int shard_writer_finish(ShardWriter *w, char *err, size_t errlen) {
    int rc = -1;
    char path[4096];
    if (w->failed) {
        errf(err, errlen, "%s: the dataset writer stopped at an earlier error: no dataset.json written", w->dir);
        goto out;
    }
    if (!w->total) {
        errf(err, errlen, "%s: no clips were added: no dataset.json written", w->dir);
        goto out;
    }
    if (flush_shard(w, err, errlen)) goto out;
    snprintf(path, sizeof path, "%s/manifest.tsv", w->dir);
    if (st_write_bytes(path, w->manifest, w->mlen, err, errlen)) goto out;
    {
        size_t cap = 256 + (size_t)w->ndone * 128;
        char *j = fc_malloc(cap);
        size_t n = (size_t)snprintf(j, cap,
                                    "{\"format\": \"framechain-dataset\", \"format_version\": 1, \"frame_size\": %d, "
                                    "\"clip_frames\": %d, \"clips\": %ld,\n \"shards\": [\n",
                                    w->N, w->F, w->total);
        for (int i = 0; i < w->ndone; i++)
            n += (size_t)snprintf(j + n, cap - n, "  {\"file\": \"%s\", \"clips\": %d, \"bytes\": %llu}%s\n",
                                  w->done[i].file, w->done[i].clips, (unsigned long long)w->done[i].bytes,
                                  i + 1 < w->ndone ? "," : "");
        n += (size_t)snprintf(j + n, cap - n, " ]}\n");
        snprintf(path, sizeof path, "%s/dataset.json", w->dir);
        rc = st_write_bytes(path, j, n, err, errlen);
        free(j);
    }
out:
    writer_free(w);
    return rc;
}

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
    return errf(j->err, j->errlen, "%s: line %d: %s", j->path, line, msg);
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

struct ClipDataset {
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
        if (!seen[k]) return errf(j->err, j->errlen, "%s: no '%s'", j->path, keys[k]);
    if (strcmp(format, "framechain-dataset"))
        return errf(j->err, j->errlen, "%s: format '%s' is not a framechain dataset", j->path, SHOWN(format));
    if (version != 1)
        return errf(j->err, j->errlen, "%s: format_version %llu is not supported (this program reads 1)", j->path,
                    (unsigned long long)version);
    if (N < 1 || F < 1) return errf(j->err, j->errlen, "%s: frame_size and clip_frames must be at least 1", j->path);
    d->N = (int)N, d->F = (int)F, d->raw = (size_t)F * N * N * 3;
    if (d->raw > SHARD_MAX_CLIP_BYTES)
        return errf(j->err, j->errlen, "%s: clips of %d frames of %dx%d would be %zu bytes, more than the %zu allowed",
                    j->path, d->F, d->N, d->N, d->raw, SHARD_MAX_CLIP_BYTES);
    if (!d->nshards) return errf(j->err, j->errlen, "%s: the list of shards is empty", j->path);
    uint64_t sum = 0;
    for (int i = 0; i < d->nshards; i++) sum += (uint64_t)d->shards[i].clips;
    if (sum != clips)
        return errf(j->err, j->errlen, "%s: 'clips' says %llu, but the shards hold %llu", j->path,
                    (unsigned long long)clips, (unsigned long long)sum);
    DShard *sorted = malloc(sizeof(DShard) * (size_t)d->nshards);
    if (!sorted) return errf(j->err, j->errlen, "%s: out of memory", j->path);
    memcpy(sorted, d->shards, sizeof(DShard) * (size_t)d->nshards);
    qsort(sorted, (size_t)d->nshards, sizeof(DShard), cmp_names);
    for (int i = 1; i < d->nshards; i++)
        if (!strcmp(sorted[i - 1].file, sorted[i].file)) {
            errf(j->err, j->errlen, "%s: shard %s is listed twice", j->path, sorted[i].file);
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
        errf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        struct stat st;
        if (errno == ENOENT && !stat(dir, &st) && S_ISDIR(st.st_mode))
            errf(err, errlen, "%s: no dataset.json: not a dataset, or its prepare did not finish", dir);
        else if (errno == ENOENT && stat(dir, &st))
            errf(err, errlen, "%s: no such folder", dir);
        else
            errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size > DATASET_JSON_MAX) {
        errf(err, errlen, "%s: not a regular file of at most %zu bytes", path, DATASET_JSON_MAX);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *text = malloc(size + 1);
    if (!text || pread_all(fd, text, size, 0)) {
        errf(err, errlen, "%s: %s", path, text ? "read error" : "out of memory");
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
            errf(err, errlen, "%s: %llu bytes, but dataset.json says %llu", spath, (unsigned long long)f.size,
                 (unsigned long long)sh->bytes);
        else if (si.N != d->N || si.F != d->F)
            errf(err, errlen, "%s: clips of %d frames of %dx%d, but dataset.json says %d frames of %dx%d", spath, si.F,
                 si.N, si.N, d->F, d->N, d->N);
        else if (si.clips != sh->clips)
            errf(err, errlen, "%s: %d clips, but dataset.json says %d", spath, si.clips, sh->clips);
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
        errf(err, errlen, "%s: %d clips found, %llu listed", path, d->nclips, (unsigned long long)clips);
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
        return errf(err, errlen, "%s: clip %d does not exist (the dataset has %d)", d->dir, clip, d->nclips);
    const DClip *c = &d->clips[clip];
    const DShard *s = &d->shards[c->shard];
    char path[4096], why[512];
    snprintf(path, sizeof path, "%s/%s", d->dir, s->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        close(fd);
        return errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size != s->bytes) {
        close(fd);
        return errf(err, errlen, "%s: the file changed since the dataset was opened (%lld bytes, not %llu)", path,
                    (long long)st.st_size, (unsigned long long)s->bytes);
    }
    Src src = {.mem = NULL, .fd = fd, .offset = c->offset};
    uint32_t crc = 0;
    int rc = decode_clip(&src, c->stored, c->zlib, out, d->raw, &crc, why, sizeof why);
    close(fd);
    if (rc) return errf(err, errlen, "%s: clip.%d (clip %d of the dataset): %s", path, c->k, clip, why);
    if (crc != c->crc)
        return errf(err, errlen, "%s: clip.%d (clip %d of the dataset): CRC32 mismatch: the data gives %08x, the header says %08x",
                    path, c->k, clip, crc, c->crc);
    return 0;
}
