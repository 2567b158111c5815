// shard_read.c: reading one shard (see shards.h): a strict check of its header (metadata and
// tensors, on top of the safetensors reader's layout checks), clip decoding in bounded memory with
// the CRC check, and shard_check_bytes. The dataset that lists the shards is read in dataset_read.c.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/half.h"
#include "formats/safetensors.h"
#include "formats/shard_internal.h"
#include "formats/shards.h"

#define IO_CHUNK ((size_t)256 << 10)  // bytes read from a shard file per pread while inflating
#define CHECK_WINDOW ((size_t)64 << 10)  // inflated bytes held at once by shard_check_bytes

// A clip whose stored bytes are bad (not an I/O or memory failure): why filled, DATASET_CLIP_DAMAGED.
static int damaged(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int damaged(char *why, size_t whylen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_verrf(why, whylen, fmt, ap);
    va_end(ap);
    return DATASET_CLIP_DAMAGED;
}

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

// The shard-wide metadata: format, version, frame size, clip length and clip count (against the tensors).
static int shard_counts(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen) {
    const char *format = st_meta(f, "format"), *version = st_meta(f, "format_version");
    if (!format) return fc_errf(err, errlen, "%s: not a framechain shard (no 'format' in __metadata__)", name);
    if (strcmp(format, "framechain-shard"))
        return fc_errf(err, errlen, "%s: format '%s' is not a framechain shard", name, SHOWN(format));
    if (!version) return fc_errf(err, errlen, "%s: no 'format_version' in __metadata__", name);
    if (strcmp(version, "1") && strcmp(version, "2"))
        return fc_errf(err, errlen, "%s: format_version '%s' is not supported (this program reads 1 and 2)", name,
                    SHOWN(version));
    int latent = version[0] == '2';
    const char *content = st_meta(f, "content");
    if (latent && (!content || strcmp(content, "latents")))
        return fc_errf(err, errlen, "%s: format_version 2 needs 'content' = 'latents' in __metadata__", name);
    uint64_t N, F, clips, C = 0;
    if (meta_count(f, name, "frame_size", 1, SHARD_MAX_FRAME_SIZE, &N, err, errlen) ||
        meta_count(f, name, "clip_frames", 1, SHARD_MAX_CLIP_FRAMES, &F, err, errlen) ||
        meta_count(f, name, "clips", 1, SHARD_MAX_CLIPS, &clips, err, errlen) ||
        (latent && meta_count(f, name, "channels", 1, SHARD_MAX_CHANNELS, &C, err, errlen)))
        return -1;
    size_t unit = (size_t)C * N * N * 2;
    size_t raw = latent ? (size_t)F * 2 * unit : (size_t)F * N * N * 3;  // below 2^64: 65536 * 8192^2 * 2048 * 2
    if (raw > SHARD_MAX_CLIP_BYTES)
        return fc_errf(err, errlen,
                       "%s: clips of %llu frames of %llux%llu would be %zu bytes, more than the %zu allowed", name,
                       (unsigned long long)F, (unsigned long long)N, (unsigned long long)N, raw, SHARD_MAX_CLIP_BYTES);
    if ((uint64_t)f->n != clips)
        return fc_errf(err, errlen, "%s: the metadata says %llu clips, but the file holds %d tensors", name,
                    (unsigned long long)clips, f->n);
    si->N = (int)N, si->F = (int)F, si->clips = (int)clips, si->raw = raw, si->C = (int)C, si->unit = latent ? unit : 0;
    return 0;
}

// A latent clip's "frame_crc32": 2F CRCs of 8 lowercase hex digits each, into c->unit_crc.
static int unit_crcs(const char *name, const char *key, const char *val, int F, ClipRec *c, char *err, size_t errlen) {
    size_t n = strlen(val);
    if (n != (size_t)16 * F)
        return fc_errf(err, errlen, "%s: %s holds %zu characters, not the %d of 2 x %d CRCs of 8 hex digits", name,
                       SHOWN(key), n, 16 * F, F);
    free(c->unit_crc);
    c->unit_crc = malloc(sizeof(uint32_t) * 2 * (size_t)F);
    if (!c->unit_crc) return fc_errf(err, errlen, "%s: out of memory", name);
    for (int u = 0; u < 2 * F; u++) {
        char digits[9];
        memcpy(digits, val + 8 * u, 8);
        digits[8] = 0;
        if (parse_crc(digits, &c->unit_crc[u]))
            return fc_errf(err, errlen, "%s: %s: CRC %d '%s' is not 8 lowercase hex digits", name, SHOWN(key), u,
                           SHOWN(digits));
    }
    return 0;
}

// One "clip.<k>.<field>" = val of the metadata: its value checked, and kept in c when needed; *bit = its HAVE_ bit.
static int clip_field(const char *name, const char *key, const char *field, const char *val, const ShardInfo *si,
                      ClipRec *c, int *bit, char *err, size_t errlen) {
    uint64_t first;
    double fps;
    if (!strcmp(field, "encoding")) {
        if (strcmp(val, "raw") && (si->C || strcmp(val, "zlib")))
            return fc_errf(err, errlen, "%s: %s '%s' is %s", name, SHOWN(key), SHOWN(val),
                           si->C ? "not raw (latents are stored raw)" : "neither raw nor zlib");
        c->zlib = val[0] == 'z';
        *bit = HAVE_ENCODING;
    } else if (si->C && !strcmp(field, "frame_crc32")) {
        if (unit_crcs(name, key, val, si->F, c, err, errlen)) return -1;
        *bit = HAVE_CRC;
    } else if (!si->C && !strcmp(field, "crc32")) {
        if (parse_crc(val, &c->crc))
            return fc_errf(err, errlen, "%s: %s '%s' is not 8 lowercase hex digits", name, SHOWN(key), SHOWN(val));
        *bit = HAVE_CRC;
    } else if (!strcmp(field, "source")) {
        *bit = HAVE_SOURCE;
    } else if (!strcmp(field, "first_frame")) {
        if (parse_count(val, (uint64_t)1 << 62, &first))
            return fc_errf(err, errlen, "%s: %s '%s' is not a non-negative integer", name, SHOWN(key), SHOWN(val));
        *bit = HAVE_FIRST;
    } else if (!strcmp(field, "fps")) {
        if (parse_fps(val, &fps))
            return fc_errf(err, errlen, "%s: %s '%s' is not a number in [0, 1e6]", name, SHOWN(key), SHOWN(val));
        *bit = HAVE_FPS;
    } else {
        return fc_errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
    }
    return 0;
}

// The per-clip metadata: every key one of the shard-wide ones or clip.<k>.<field>, and every field of
// every clip there (have: the HAVE_ bits seen per clip, zeroed).
static int shard_clip_metadata(const StFile *f, const char *name, ShardInfo *si, uint8_t *have, char *err,
                               size_t errlen) {
    for (int i = 0; i < f->nmeta; i++) {
        const char *key = f->meta_keys[i], *rest;
        int k, bit = 0;
        if (!strcmp(key, "format") || !strcmp(key, "format_version") || !strcmp(key, "frame_size") ||
            !strcmp(key, "clip_frames") || !strcmp(key, "clips") ||
            (si->C && (!strcmp(key, "content") || !strcmp(key, "channels"))))
            continue;
        if (clip_key(key, si->clips, &k, &rest) || rest[0] != '.')
            return fc_errf(err, errlen, "%s: unknown metadata key '%s'", name, SHOWN(key));
        if (clip_field(name, key, rest + 1, f->meta_values[i], si, &si->clip[k], &bit, err, errlen)) return -1;
        have[k] |= (uint8_t)bit;
    }
    for (int k = 0; k < si->clips; k++)
        if (have[k] != HAVE_ALL) {
            int b = 0;
            while (have[k] >> b & 1) b++;
            return fc_errf(err, errlen, "%s: no 'clip.%d.%s' in __metadata__", name, k,
                           b == 1 && si->C ? "frame_crc32" : CLIP_FIELDS[b]);
        }
    return 0;
}

// The tensors: exactly clip.0 .. clip.<clips-1> (the reader made the names unique, and there are `clips`),
// each U8, 1-D when zlib and (F, N, N, 3) when raw; si->clip gets where each one's bytes are.
static int shard_clip_tensors(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        const char *rest;
        int k;
        if (clip_key(e->name, si->clips, &k, &rest) || *rest)
            return fc_errf(err, errlen, "%s: tensor '%s' is not one of clip.0 .. clip.%d", name, SHOWN(e->name),
                           si->clips - 1);
        ClipRec *c = &si->clip[k];
        c->offset = f->data_start + e->begin, c->stored = e->end - e->begin;
        if (si->C) {
            if (strcmp(e->dtype, "F16")) return fc_errf(err, errlen, "%s: clip.%d has dtype %s, not F16", name, k, e->dtype);
            if (e->ndim != 5 || e->shape[0] != si->F || e->shape[1] != 2 || e->shape[2] != si->C ||
                e->shape[3] != si->N || e->shape[4] != si->N)
                return fc_errf(err, errlen, "%s: clip.%d: latents of shape [%d, 2, %d, %d, %d] are expected", name, k,
                               si->F, si->C, si->N, si->N);
            continue;
        }
        if (strcmp(e->dtype, "U8")) return fc_errf(err, errlen, "%s: clip.%d has dtype %s, not U8", name, k, e->dtype);
        if (c->zlib) {
            if (e->ndim != 1 || c->stored == 0 || c->stored >= si->raw)
                return fc_errf(err, errlen,
                               "%s: clip.%d is zlib: a 1-D tensor of 1 to %zu bytes is expected, "
                               "not %d-D of %llu bytes",
                               name, k, si->raw - 1, e->ndim, (unsigned long long)c->stored);
        } else if (e->ndim != 4 || e->shape[0] != si->F || e->shape[1] != si->N || e->shape[2] != si->N ||
                   e->shape[3] != 3) {
            char shape[160] = "";
            size_t used = 0;
            for (int d = 0; d < e->ndim && used < sizeof shape; d++)
                used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%ld", d ? ", " : "", e->shape[d]);
            return fc_errf(err, errlen, "%s: clip.%d is raw: shape [%d, %d, %d, 3] is expected, not [%s]", name, k,
                           si->F, si->N, si->N, shape);
        }
    }
    return 0;
}

// Check a shard's metadata and tensors (its layout was checked by the safetensors reader) and fill
// si. `name` (the path) starts every error.
int shard_info(const StFile *f, const char *name, ShardInfo *si, char *err, size_t errlen) {
    memset(si, 0, sizeof *si);
    if (shard_counts(f, name, si, err, errlen)) return -1;
    si->clip = calloc((size_t)si->clips, sizeof(ClipRec));
    uint8_t *have = calloc((size_t)si->clips, 1);
    int rc = -1;
    if (!si->clip || !have)
        fc_errf(err, errlen, "%s: out of memory for %llu clips", name, (unsigned long long)si->clips);
    else if (!shard_clip_metadata(f, name, si, have, err, errlen) && !shard_clip_tensors(f, name, si, err, errlen))
        rc = 0;
    free(have);
    if (rc) shard_info_free(si);
    return rc;
}

void shard_info_free(ShardInfo *si) {
    for (int k = 0; si->clip && k < si->clips; k++) free(si->clip[k].unit_crc);
    free(si->clip);
    si->clip = NULL;
}

int first_bad_unit(const uint8_t *bytes, int n, size_t unit, const uint32_t *crc) {
    for (int u = 0; u < n; u++)
        if ((uint32_t)crc32_z(0, bytes + (size_t)u * unit, unit) != crc[u]) return u;
    return -1;
}

// The first of n units of `unit` bytes of F16 values holding inf or NaN, or -1.
static int first_nonfinite_unit(const uint8_t *bytes, int n, size_t unit) {
    for (int u = 0; u < n; u++)
        if (half_first_nonfinite(bytes + (size_t)u * unit, unit / 2) >= 0) return u;
    return -1;
}

// ---------------------------------------------------------------------------------------------
// decoding a clip

// Raw frames: stored must be raw bytes; copied into out, or (out NULL) read through a buffer for the CRC.
static int decode_raw(const Src *src, uint64_t stored, uint8_t *out, size_t raw, uint32_t *crc, char *why,
                      size_t whylen) {
    if (stored != raw) return damaged(why, whylen, "%llu bytes stored for %zu", (unsigned long long)stored, raw);
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
    uint32_t c = 0;
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

// A zlib stream being inflated into exactly `raw` bytes.
typedef struct {
    z_stream zs;
    const Src *src;
    uint64_t stored, fed;  // stored bytes, and those handed to zlib so far
    uint8_t *out;          // where the raw bytes go, or NULL: through `window`
    uint8_t *inbuf, *window;
    size_t raw, produced;
    uint32_t crc;  // of the bytes produced so far
} Inflate;

// Hand zlib the next stored bytes when it has used up the last ones.
static int feed_input(Inflate *in, char *why, size_t whylen) {
    if (in->zs.avail_in || in->fed >= in->stored) return 0;
    uint64_t n = in->stored - in->fed;
    if (in->src->mem) {
        if (n > (1u << 30)) n = 1u << 30;
        in->zs.next_in = (Bytef *)(in->src->mem + in->fed);
    } else {
        if (n > IO_CHUNK) n = IO_CHUNK;
        if (fc_pread_all(in->src->fd, in->inbuf, (size_t)n, in->src->offset + in->fed))
            return fc_errf(why, whylen, "read error: %s", strerror(errno));
        in->zs.next_in = in->inbuf;
    }
    in->zs.avail_in = (uInt)n;
    in->fed += n;
    return 0;
}

// Where zlib's next output goes (*space bytes): the rest of out, the window, or (all raw bytes produced)
// the single byte `extra`, which must stay unwritten.
static uint8_t *output_span(Inflate *in, size_t *space, uint8_t *extra) {
    if (in->produced >= in->raw) {
        *space = 1;
        return extra;
    }
    uint8_t *dst;
    *space = in->raw - in->produced;
    if (in->out) dst = in->out + in->produced;
    else {
        size_t at = in->produced % CHECK_WINDOW;
        dst = in->window + at;
        if (*space > CHECK_WINDOW - at) *space = CHECK_WINDOW - at;
    }
    if (*space > (1u << 30)) *space = 1u << 30;
    return dst;
}

// What zlib's answer r means once its output is counted: 1 to go on, 0 when the stream ended well, -1
// (out of memory) or DATASET_CLIP_DAMAGED.
static int inflate_verdict(Inflate *in, int r, size_t got, uInt in_before, char *why, size_t whylen) {
    if (r == Z_STREAM_END) {
        uint64_t left = in->zs.avail_in + (in->stored - in->fed);
        if (in->produced < in->raw)
            return damaged(why, whylen, "the zlib stream inflates to %zu bytes, not the %zu of a clip", in->produced,
                           in->raw);
        if (left) return damaged(why, whylen, "%llu bytes follow the end of the zlib stream", (unsigned long long)left);
        return 0;
    }
    if (r == Z_NEED_DICT || r == Z_DATA_ERROR || r == Z_STREAM_ERROR)
        return damaged(why, whylen, "corrupt zlib data after %zu inflated bytes (%s)", in->produced,
                       r == Z_NEED_DICT ? "it asks for a preset dictionary" : in->zs.msg ? in->zs.msg : "bad stream");
    if (r == Z_MEM_ERROR) return fc_errf(why, whylen, "zlib: out of memory");
    if (got == 0 && in->zs.avail_in == in_before && in->zs.avail_in == 0 && in->fed >= in->stored)  // no progress
        return damaged(why, whylen, "the zlib stream is cut short after %zu of %zu bytes", in->produced, in->raw);
    return 1;
}

// One round: feed, inflate, count what came out. 1 to go on, 0 when done well, -1 or DATASET_CLIP_DAMAGED
// with why.
static int inflate_step(Inflate *in, char *why, size_t whylen) {
    if (feed_input(in, why, whylen)) return -1;
    uint8_t extra;  // where a byte beyond the expected ones would go
    size_t space;
    uint8_t *dst = output_span(in, &space, &extra);
    uInt in_before = in->zs.avail_in;
    in->zs.next_out = dst, in->zs.avail_out = (uInt)space;
    int r = inflate(&in->zs, Z_NO_FLUSH);
    size_t got = space - in->zs.avail_out;
    if (in->produced >= in->raw && got)
        return damaged(why, whylen, "the zlib stream inflates to more than the %zu bytes of a clip", in->raw);
    in->crc = (uint32_t)crc32_z(in->crc, dst, got);
    in->produced += got;
    return inflate_verdict(in, r, got, in_before, why, whylen);
}

static int decode_zlib(const Src *src, uint64_t stored, uint8_t *out, size_t raw, uint32_t *crc, char *why,
                       size_t whylen) {
    Inflate in = {.src = src, .stored = stored, .out = out, .raw = raw};
    if (inflateInit(&in.zs) != Z_OK) return fc_errf(why, whylen, "zlib: cannot start inflating (out of memory?)");
    in.inbuf = src->mem ? NULL : malloc(IO_CHUNK);
    in.window = out ? NULL : malloc(CHECK_WINDOW);
    int rc = 1;
    if ((!src->mem && !in.inbuf) || (!out && !in.window)) rc = fc_errf(why, whylen, "out of memory");
    while (rc > 0) rc = inflate_step(&in, why, whylen);
    inflateEnd(&in.zs);
    free(in.inbuf);
    free(in.window);
    if (!rc) *crc = in.crc;
    return rc;
}

// Decode `stored` bytes of src (see shard_internal.h).
int decode_clip(const Src *src, uint64_t stored, int zlib, uint8_t *out, size_t raw, uint32_t *crc,
                char *why, size_t whylen) {
    if (zlib) return decode_zlib(src, stored, out, raw, crc, why, whylen);
    return decode_raw(src, stored, out, raw, crc, why, whylen);
}

int shard_check_clips(const StFile *f, const char *name, ShardClipFn each, void *ctx, char *err, size_t errlen) {
    ShardInfo si;
    if (shard_info(f, name, &si, err, errlen)) return -1;
    int bad = 0;
    for (int k = 0; k < si.clips; k++) {
        const ClipRec *c = &si.clip[k];
        Src src = {.mem = f->bytes + c->offset, .fd = -1};
        char why[512] = "";
        uint32_t crc;
        int unit;
        if (si.C) {
            if (c->stored != si.raw)
                snprintf(why, sizeof why, "%llu bytes stored for %zu", (unsigned long long)c->stored, si.raw);
            else if ((unit = first_bad_unit(src.mem, 2 * si.F, si.unit, c->unit_crc)) >= 0)
                snprintf(why, sizeof why, "frame %d%s: CRC32 mismatch", unit / 2, unit % 2 ? " (mirrored)" : "");
            else if ((unit = first_nonfinite_unit(src.mem, 2 * si.F, si.unit)) >= 0)
                snprintf(why, sizeof why, "frame %d%s: holds inf or NaN, not latents", unit / 2,
                         unit % 2 ? " (mirrored)" : "");
        } else if (!decode_clip(&src, c->stored, c->zlib, NULL, si.raw, &crc, why, sizeof why) && crc != c->crc) {
            snprintf(why, sizeof why, "CRC32 mismatch: the data gives %08x, the metadata says %08x", crc, c->crc);
        }
        bad += why[0] != 0;
        if (each && each(k, why[0] ? why : NULL, ctx)) break;
    }
    shard_info_free(&si);
    return bad;
}

// shard_check_bytes stops at the first bad clip, its reason in err.
typedef struct {
    char *err;
    size_t errlen;
} FirstBad;
static int stop_at_bad(int k, const char *why, void *ctx) {
    FirstBad *fb = ctx;
    if (why) fc_errf(fb->err, fb->errlen, "shard: clip.%d: %s", k, why);
    return why != NULL;
}

int shard_check_bytes(const uint8_t *bytes, size_t len, char *err, size_t errlen) {
    StFile f;
    char why[512];
    if (st_parse(&f, bytes, len, why, sizeof why)) return fc_errf(err, errlen, "shard: %s", why);
    FirstBad fb = {err, errlen};
    int bad = shard_check_clips(&f, "shard", stop_at_bad, &fb, err, errlen);
    st_free(&f);
    return bad ? -1 : 0;
}
