// shard_read.c: reading one shard (see shards.h): a strict check of its header (metadata and
// tensors, on top of the safetensors reader's layout checks), clip decoding in bounded memory with
// the CRC check, and shard_check_bytes. The dataset that lists the shards is read in dataset_read.c.
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "formats/safetensors.h"
#include "formats/shard_internal.h"
#include "formats/shards.h"

#define IO_CHUNK ((size_t)256 << 10)  // bytes read from a shard file per pread while inflating
#define CHECK_WINDOW ((size_t)64 << 10)  // inflated bytes held at once by shard_check_bytes

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

// ---------------------------------------------------------------------------------------------
// a shard's header

static int meta_count(const StFile *f, const char *name, const char *key, uint64_t lo, uint64_t hi, uint64_t *v,
                      char *err, size_t errlen) {
    const char *s = st_meta(f, key);
    if (!s) return fc_errf(err, errlen, "%s: no '%s' in __metadata__", name, key);
    if (parse_count(s, hi, v) || *v < lo)
        return fc_errf(err, errlen, "%s: %s '%s' is not an integer in %llu..%llu", name, key, SHOWN(s),
                    (unsigned long long)lo, (unsigned long long)hi);
    return 0;
}

// Check a shard's metadata and tensors (its layout was checked by the safetensors reader) and fill
// si. `name` (the path) starts every error.
int shard_info(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen) {
    memset(si, 0, sizeof *si);
    const char *format = st_meta(f, "format"), *version = st_meta(f, "format_version");
    if (!format) return fc_errf(err, errlen, "%s: not a framechain shard (no 'format' in __metadata__)", name);
    if (strcmp(format, "framechain-shard"))
        return fc_errf(err, errlen, "%s: format '%s' is not a framechain shard", name, SHOWN(format));
    if (!version) return fc_errf(err, errlen, "%s: no 'format_version' in __metadata__", name);
    if (strcmp(version, "1"))
        return fc_errf(err, errlen, "%s: format_version '%s' is not supported (this program reads 1)", name,
                    SHOWN(version));
    uint64_t N, F, clips;
    if (meta_count(f, name, "frame_size", 1, SHARD_MAX_FRAME_SIZE, &N, err, errlen) ||
        meta_count(f, name, "clip_frames", 1, SHARD_MAX_CLIP_FRAMES, &F, err, errlen) ||
        meta_count(f, name, "clips", 1, SHARD_MAX_CLIPS, &clips, err, errlen))
        return -1;
    size_t raw = (size_t)F * N * N * 3;  // below 2^64: 65536 * 8192^2 * 3
    if (raw > SHARD_MAX_CLIP_BYTES)
        return fc_errf(err, errlen, "%s: clips of %llu frames of %llux%llu would be %zu bytes, more than the %zu allowed",
                    name, (unsigned long long)F, (unsigned long long)N, (unsigned long long)N, raw,
                    SHARD_MAX_CLIP_BYTES);
    if ((uint64_t)f->n != clips)
        return fc_errf(err, errlen, "%s: the metadata says %llu clips, but the file holds %d tensors", name,
                    (unsigned long long)clips, f->n);
    si->N = (int)N, si->F = (int)F, si->clips = (int)clips, si->raw = raw;
    si->clip = calloc(clips, sizeof(ClipRec));
    uint8_t *have = calloc(clips, 1);
    if (!si->clip || !have) {
        free(have);
        free(si->clip);
        si->clip = NULL;
        return fc_errf(err, errlen, "%s: out of memory for %llu clips", name, (unsigned long long)clips);
    }
    int rc = -1;
    for (int i = 0; i < f->nmeta; i++) {
        const char *key = f->meta_keys[i], *val = f->meta_values[i], *rest;
        int k;
        if (!strcmp(key, "format") || !strcmp(key, "format_version") || !strcmp(key, "frame_size") ||
            !strcmp(key, "clip_frames") || !strcmp(key, "clips"))
            continue;
        if (clip_key(key, si->clips, &k, &rest) || rest[0] != '.') {
            fc_errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
            goto out;
        }
        const char *field = rest + 1;
        uint64_t first;
        double fps;
        if (!strcmp(field, "encoding")) {
            if (strcmp(val, "raw") && strcmp(val, "zlib")) {
                fc_errf(err, errlen, "%s: %s '%s' is neither raw nor zlib", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            si->clip[k].zlib = val[0] == 'z';
            have[k] |= HAVE_ENCODING;
        } else if (!strcmp(field, "crc32")) {
            if (parse_crc(val, &si->clip[k].crc)) {
                fc_errf(err, errlen, "%s: %s '%s' is not 8 lowercase hex digits", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_CRC;
        } else if (!strcmp(field, "source")) {
            have[k] |= HAVE_SOURCE;
        } else if (!strcmp(field, "first_frame")) {
            if (parse_count(val, (uint64_t)1 << 62, &first)) {
                fc_errf(err, errlen, "%s: %s '%s' is not a non-negative integer", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_FIRST;
        } else if (!strcmp(field, "fps")) {
            if (parse_fps(val, &fps)) {
                fc_errf(err, errlen, "%s: %s '%s' is not a number in [0, 1e6]", name, SHOWN(key), SHOWN(val));
                goto out;
            }
            have[k] |= HAVE_FPS;
        } else {
            fc_errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
            goto out;
        }
    }
    for (int k = 0; k < si->clips; k++)
        if (have[k] != HAVE_ALL) {
            int b = 0;
            while (have[k] >> b & 1) b++;
            fc_errf(err, errlen, "%s: no 'clip.%d.%s' in __metadata__", name, k, CLIP_FIELDS[b]);
            goto out;
        }
    // the tensors: exactly clip.0 .. clip.<clips-1> (the reader made the names unique, and there are `clips`)
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        const char *rest;
        int k;
        if (clip_key(e->name, si->clips, &k, &rest) || *rest) {
            fc_errf(err, errlen, "%s: tensor '%s' is not one of clip.0 .. clip.%d", name, SHOWN(e->name), si->clips - 1);
            goto out;
        }
        if (strcmp(e->dtype, "U8")) {
            fc_errf(err, errlen, "%s: clip.%d has dtype %s, not U8", name, k, e->dtype);
            goto out;
        }
        ClipRec *c = &si->clip[k];
        c->offset = f->data_start + e->begin, c->stored = e->end - e->begin;
        if (c->zlib) {
            if (e->ndim != 1 || c->stored == 0 || c->stored >= raw) {
                fc_errf(err, errlen, "%s: clip.%d is zlib: a 1-D tensor of 1 to %zu bytes is expected, not %d-D of %llu bytes",
                     name, k, raw - 1, e->ndim, (unsigned long long)c->stored);
                goto out;
            }
        } else if (e->ndim != 4 || e->shape[0] != si->F || e->shape[1] != si->N || e->shape[2] != si->N ||
                   e->shape[3] != 3) {
            char shape[160] = "";
            size_t used = 0;
            for (int d = 0; d < e->ndim && used < sizeof shape; d++)
                used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%ld", d ? ", " : "", e->shape[d]);
            fc_errf(err, errlen, "%s: clip.%d is raw: shape [%d, %d, %d, 3] is expected, not [%s]", name, k, si->F, si->N,
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

// Decode `stored` bytes of src (a zlib stream, or the raw frames) that must give exactly raw bytes;
// into out, or (out NULL) through a small window. *crc = CRC-32 of the raw bytes. 0, or -1 with why.
int decode_clip(const Src *src, uint64_t stored, int zlib, uint8_t *out, size_t raw, uint32_t *crc,
                char *why, size_t whylen) {
    uint32_t c = 0;
    if (!zlib) {
        if (stored != raw) return fc_errf(why, whylen, "%llu bytes stored for %zu", (unsigned long long)stored, raw);
        if (out) {
            if (src->mem) memcpy(out, src->mem, raw);
            else if (fc_pread_all(src->fd, out, raw, src->offset))
                return fc_errf(why, whylen, "read error: %s", strerror(errno));
            *crc = (uint32_t)crc32_z(0, out, raw);
            return 0;
        }
        if (src->mem) {
            *crc = (uint32_t)crc32_z(0, src->mem, raw);
            return 0;
        }
        uint8_t *buf = malloc(IO_CHUNK);
        if (!buf) return fc_errf(why, whylen, "out of memory");
        for (size_t done = 0; done < raw;) {
            size_t n = raw - done < IO_CHUNK ? raw - done : IO_CHUNK;
            if (fc_pread_all(src->fd, buf, n, src->offset + done)) {
                free(buf);
                return fc_errf(why, whylen, "read error: %s", strerror(errno));
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
    if (inflateInit(&zs) != Z_OK) return fc_errf(why, whylen, "zlib: cannot start inflating (out of memory?)");
    uint8_t *inbuf = src->mem ? NULL : malloc(IO_CHUNK);
    uint8_t *window = out ? NULL : malloc(CHECK_WINDOW);
    int rc = -1;
    if ((!src->mem && !inbuf) || (!out && !window)) {
        fc_errf(why, whylen, "out of memory");
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
                if (fc_pread_all(src->fd, inbuf, (size_t)n, src->offset + fed)) {
                    fc_errf(why, whylen, "read error: %s", strerror(errno));
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
            fc_errf(why, whylen, "the zlib stream inflates to more than the %zu bytes of a clip", raw);
            goto done;
        }
        c = (uint32_t)crc32_z(c, dst, got);
        produced += got;
        if (r == Z_STREAM_END) {
            uint64_t left = zs.avail_in + (stored - fed);
            if (produced < raw)
                fc_errf(why, whylen, "the zlib stream inflates to %zu bytes, not the %zu of a clip", produced, raw);
            else if (left)
                fc_errf(why, whylen, "%llu bytes follow the end of the zlib stream", (unsigned long long)left);
            else
                rc = 0;
            goto done;
        }
        if (r == Z_NEED_DICT || r == Z_DATA_ERROR || r == Z_STREAM_ERROR) {
            fc_errf(why, whylen, "corrupt zlib data after %zu inflated bytes (%s)", produced,
                 r == Z_NEED_DICT ? "it asks for a preset dictionary" : zs.msg ? zs.msg : "bad stream");
            goto done;
        }
        if (r == Z_MEM_ERROR) {
            fc_errf(why, whylen, "zlib: out of memory");
            goto done;
        }
        if (got == 0 && zs.avail_in == in_before && zs.avail_in == 0 && fed >= stored) {  // no progress, no input left
            fc_errf(why, whylen, "the zlib stream is cut short after %zu of %zu bytes", produced, raw);
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
    if (st_parse(&f, bytes, len, why, sizeof why)) return fc_errf(err, errlen, "shard: %s", why);
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
            rc = fc_errf(err, errlen, "shard: clip.%d: %s", k, why);
        else if (crc != c->crc)
            rc = fc_errf(err, errlen, "shard: clip.%d: CRC32 mismatch: the data gives %08x, the metadata says %08x", k, crc,
                      c->crc);
    }
    free(si.clip);
    st_free(&f);
    return rc;
}
