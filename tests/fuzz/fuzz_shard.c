// fuzz_shard.c: libFuzzer target for the shard checker (shard_check_bytes). Any input may be refused
// (with one non-empty line); an accepted one must be a valid shard, of frames (format_version 1) or of
// latents (2), checked here independently of shards.c (the safetensors reader for the layout, zlib's
// one-shot uncompress2 and crc32 for the clips, each latent unit's CRC): abort() on any violation.
// Byte-level mutations rarely get past the CRCs, so half of the mutations are made on the shard's
// structure instead (a custom mutator): a metadata value, a clip's stored bytes with its CRC made to
// match, a clip re-encoded (raw <-> zlib), two clips' names swapped, a size changed.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

#include "formats/safetensors.h"
#include "formats/shards.h"

// A decimal integer made of digits only (no sign, no leading zero), at most max; -1 otherwise.
static long long number(const char *s, long long max) {
    if (!s || !*s || strlen(s) > 18 || (s[0] == '0' && s[1])) return -1;
    long long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
    }
    return v <= max ? v : -1;
}

// The five metadata values of clip k, fields[j] into v[j]: every one must be there.
static void clip_fields(const StFile *f, long long k, const char *const fields[5], const char *v[5]) {
    char key[64];
    for (int j = 0; j < 5; j++) {
        snprintf(key, sizeof key, "clip.%lld.%s", k, fields[j]);
        if (!(v[j] = st_meta(f, key))) abort();
    }
}

// An accepted shard of latents: content, channels, the clips' F16 tensors (F, 2, C, N, N) stored raw,
// and each of the 2F units matching its CRC in frame_crc32.
static void check_latent_shard(const StFile *f) {
    const char *content = st_meta(f, "content");
    if (!content || strcmp(content, "latents")) abort();
    long long N = number(st_meta(f, "frame_size"), SHARD_MAX_FRAME_SIZE);
    long long F = number(st_meta(f, "clip_frames"), SHARD_MAX_CLIP_FRAMES);
    long long C = number(st_meta(f, "channels"), SHARD_MAX_CHANNELS);
    long long clips = number(st_meta(f, "clips"), SHARD_MAX_CLIPS);
    if (N < 1 || F < 1 || C < 1 || clips < 1 || clips != f->n) abort();
    size_t unit = (size_t)(C * N * N * 2), raw = (size_t)F * 2 * unit;
    if (raw > SHARD_MAX_CLIP_BYTES) abort();
    if (f->nmeta != 7 + 5 * clips) abort();
    for (long long k = 0; k < clips; k++) {
        char key[64];
        const char *v[5];
        static const char *const fields[] = {"encoding", "frame_crc32", "source", "first_frame", "fps"};
        clip_fields(f, k, fields, v);
        snprintf(key, sizeof key, "clip.%lld", k);
        const StEntry *e = st_find(f, key);
        if (!e || strcmp(e->dtype, "F16") || strcmp(v[0], "raw") || e->ndim != 5 || e->shape[0] != F ||
            e->shape[1] != 2 || e->shape[2] != C || e->shape[3] != N || e->shape[4] != N || e->end - e->begin != raw)
            abort();
        if (strlen(v[1]) != (size_t)(16 * F) || strspn(v[1], "0123456789abcdef") != (size_t)(16 * F)) abort();
        const uint8_t *p = st_data(f, e);
        for (long long u = 0; u < 2 * F; u++) {
            char crc[16];
            snprintf(crc, sizeof crc, "%08lx", crc32(0, p + u * unit, (uInt)unit));
            if (memcmp(crc, v[1] + 8 * u, 8)) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024] = "";
    if (shard_check_bytes(data, size, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n') || strncmp(err, "shard: ", 7)) abort();
        return 0;
    }
    StFile f;
    if (st_parse(&f, data, size, err, sizeof err)) abort();  // a shard is a safetensors file
    const char *format = st_meta(&f, "format"), *version = st_meta(&f, "format_version");
    if (!format || strcmp(format, "framechain-shard") || !version) abort();
    if (!strcmp(version, "2")) {
        check_latent_shard(&f);
        st_free(&f);
        return 0;
    }
    if (strcmp(version, "1")) abort();
    long long N = number(st_meta(&f, "frame_size"), SHARD_MAX_FRAME_SIZE);
    long long F = number(st_meta(&f, "clip_frames"), SHARD_MAX_CLIP_FRAMES);
    long long clips = number(st_meta(&f, "clips"), SHARD_MAX_CLIPS);
    if (N < 1 || F < 1 || clips < 1 || clips != f.n) abort();
    size_t raw = (size_t)(F * N * N * 3);
    if (raw > SHARD_MAX_CLIP_BYTES) abort();
    if (f.nmeta != 5 + 5 * clips) abort();  // exactly the keys of the format (they are unique)
    for (long long k = 0; k < clips; k++) {
        char key[64];
        const char *v[5];
        static const char *const fields[] = {"encoding", "crc32", "source", "first_frame", "fps"};
        clip_fields(&f, k, fields, v);
        snprintf(key, sizeof key, "clip.%lld", k);
        const StEntry *e = st_find(&f, key);
        if (!e || strcmp(e->dtype, "U8")) abort();
        int zlib = !strcmp(v[0], "zlib");
        if (!zlib && strcmp(v[0], "raw")) abort();
        if (strlen(v[1]) != 8 || strspn(v[1], "0123456789abcdef") != 8) abort();
        if (number(v[3], (long long)1 << 62) < 0) abort();
        char *end;
        double fps = strtod(v[4], &end);
        if (*end || !(fps >= 0 && fps <= 1e6)) abort();
        size_t stored = e->end - e->begin;
        const uint8_t *p = st_data(&f, e);
        uint8_t *out = malloc(raw);
        if (!out) abort();
        if (zlib) {
            if (e->ndim != 1 || stored == 0 || stored >= raw) abort();
            uLongf got = (uLongf)raw;
            uLong used = (uLong)stored;
            if (uncompress2(out, &got, p, &used) != Z_OK || got != raw || used != stored) abort();
        } else {
            if (e->ndim != 4 || e->shape[0] != F || e->shape[1] != N || e->shape[2] != N || e->shape[3] != 3) abort();
            if (stored != raw) abort();
            memcpy(out, p, raw);
        }
        char crc[16];
        snprintf(crc, sizeof crc, "%08lx", crc32(0, out, (uInt)raw));
        if (strcmp(crc, v[1])) abort();
        free(out);
    }
    st_free(&f);
    return 0;
}

// ---- the structure-aware mutator ----

typedef struct {
    char *name;
    char dtype[8];
    int ndim;
    long shape[ST_MAX_DIMS];
    uint8_t *data;
    size_t len, cap;
} Tensor;

typedef struct {
    char *key, *value;
} Meta;

typedef struct {
    char *s;
    size_t len, cap;
} Text;

static void put(Text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        t->cap = 2 * (t->len + n + 1);
        t->s = realloc(t->s, t->cap);
        if (!t->s) abort();
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
}

static void put_str(Text *t, const char *s) {
    put(t, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') snprintf(e, sizeof e, "\\%c", c);
        else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c);
        else e[0] = (char)c, e[1] = 0;
        put(t, e, strlen(e));
    }
    put(t, "\"", 1);
}

// The safetensors bytes of these tensors (in this order) and metadata into out; 0 when over max.
static size_t serialize(const Tensor *t, int nt, const Meta *m, int nm, uint8_t *out, size_t max) {
    Text h = {0};
    char num[96];
    put(&h, "{", 1);
    if (nm) {
        put(&h, "\"__metadata__\":{", 16);
        for (int i = 0; i < nm; i++) {
            if (i) put(&h, ",", 1);
            put_str(&h, m[i].key);
            put(&h, ":", 1);
            put_str(&h, m[i].value);
        }
        put(&h, "}", 1);
    }
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        if (nm || i) put(&h, ",", 1);
        put_str(&h, t[i].name);
        put(&h, ":{\"dtype\":", 10);
        put_str(&h, t[i].dtype);
        put(&h, ",\"shape\":[", 10);
        for (int d = 0; d < t[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%ld", d ? "," : "", t[i].shape[d]);
            put(&h, num, strlen(num));
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].len);
        put(&h, num, strlen(num));
        off += t[i].len;
    }
    put(&h, "}", 1);
    while (h.len % 8) put(&h, " ", 1);
    size_t total = 8 + h.len + off;
    if (total > max) {
        free(h.s);
        return 0;
    }
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    memcpy(out + 8, h.s, h.len);
    size_t at = 8 + h.len;
    for (int i = 0; i < nt; i++) memcpy(out + at, t[i].data, t[i].len), at += t[i].len;
    free(h.s);
    return total;
}

static Meta *find_meta(Meta *m, int nm, const char *key) {
    for (int i = 0; i < nm; i++)
        if (!strcmp(m[i].key, key)) return &m[i];
    return NULL;
}

static void set_meta(Meta *m, int nm, const char *key, const char *value) {
    Meta *x = find_meta(m, nm, key);
    if (!x) return;
    free(x->value);
    x->value = strdup(value);
}

static long meta_long(Meta *m, int nm, const char *key) {
    Meta *x = find_meta(m, nm, key);
    return x ? strtol(x->value, NULL, 10) : 0;
}

// The CRC-32 of the clip t would inflate to (or of its bytes when raw), into its metadata.
static void fix_crc(Tensor *t, Meta *m, int nm, size_t raw) {
    char key[300], hex[16];
    snprintf(key, sizeof key, "%s.encoding", t->name);
    Meta *enc = find_meta(m, nm, key);
    uLong crc;
    if (enc && !strcmp(enc->value, "zlib") && raw) {
        uint8_t *out = malloc(raw);
        uLongf got = (uLongf)raw;
        uLong used = (uLong)t->len;
        uncompress2(out, &got, t->data, &used);
        crc = crc32(0, out, (uInt)got);
        free(out);
    } else {
        crc = crc32(0, t->data, (uInt)t->len);
    }
    snprintf(hex, sizeof hex, "%08lx", crc);
    snprintf(key, sizeof key, "%s.crc32", t->name);
    set_meta(m, nm, key, hex);
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    uint32_t r = seed * 2654435761u + 12345;
    if ((r >> 31) == 0) return LLVMFuzzerMutate(data, size, max_size);
    StFile f;
    if (st_parse(&f, data, size, NULL, 0) || f.n == 0) {
        if (f.bytes) st_free(&f);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    int nt = f.n, nm = f.nmeta;
    Tensor *t = calloc((size_t)nt, sizeof(Tensor));
    Meta *m = calloc((size_t)nm + 1, sizeof(Meta));
    for (int i = 0; i < nt; i++) {
        const StEntry *e = &f.entries[i];
        t[i].name = strdup(e->name);
        memcpy(t[i].dtype, e->dtype, sizeof t[i].dtype);
        t[i].ndim = e->ndim;
        memcpy(t[i].shape, e->shape, sizeof t[i].shape);
        t[i].len = e->end - e->begin;
        t[i].cap = t[i].len + 256;
        t[i].data = malloc(t[i].cap);
        memcpy(t[i].data, st_data(&f, e), t[i].len);
    }
    for (int i = 0; i < nm; i++) m[i].key = strdup(f.meta_keys[i]), m[i].value = strdup(f.meta_values[i]);
    st_free(&f);
    long N = meta_long(m, nm, "frame_size"), F = meta_long(m, nm, "clip_frames");
    size_t raw = N > 0 && F > 0 && N <= 256 && F <= 256 && F * N * N * 3 <= (1 << 22) ? (size_t)(F * N * N * 3) : 0;
    r = r * 1103515245u + 12345;
    Tensor *x = &t[(r >> 8) % (uint32_t)nt];
    char key[300];
    snprintf(key, sizeof key, "%s.encoding", x->name);
    Meta *enc = find_meta(m, nm, key);
    switch ((r >> 4) % 6) {
    case 0: {  // a metadata value, mutated as bytes
        if (!nm) break;
        Meta *v = &m[(r >> 12) % (uint32_t)nm];
        size_t len = strlen(v->value), cap = len + 32;
        char *b = malloc(cap + 1);
        memcpy(b, v->value, len);
        size_t n = LLVMFuzzerMutate((uint8_t *)b, len, cap);
        b[n] = 0;
        free(v->value);
        v->value = b;
        break;
    }
    case 1:
    case 2: {  // a clip's bytes, with a CRC that matches what they decode to
        size_t n = LLVMFuzzerMutate(x->data, x->len, (r >> 20) % 4 ? x->len : x->cap);
        if (x->ndim == 1) x->shape[0] = (long)n;
        x->len = n;
        fix_crc(x, m, nm, raw);
        break;
    }
    case 3: {  // re-encoded: raw <-> zlib (any level)
        if (!enc || !raw) break;
        if (!strcmp(enc->value, "raw") && x->len == raw) {
            uLongf zlen = compressBound((uLong)raw);
            uint8_t *z = malloc(zlen);
            compress2(z, &zlen, x->data, (uLong)raw, (int)((r >> 12) % 10));
            free(x->data);
            x->data = z, x->len = zlen, x->cap = compressBound((uLong)raw);
            x->ndim = 1, x->shape[0] = (long)zlen;
            free(enc->value);
            enc->value = strdup("zlib");
        } else if (!strcmp(enc->value, "zlib")) {
            uint8_t *o = calloc(raw + 256, 1);
            uLongf got = (uLongf)raw;
            uLong used = (uLong)x->len;
            uncompress2(o, &got, x->data, &used);
            free(x->data);
            x->data = o, x->len = raw, x->cap = raw + 256;
            x->ndim = 4, x->shape[0] = F, x->shape[1] = N, x->shape[2] = N, x->shape[3] = 3;
            free(enc->value);
            enc->value = strdup("raw");
        }
        fix_crc(x, m, nm, raw);
        break;
    }
    case 4: {  // two clips swap names (and so their metadata no longer fits)
        Tensor *y = &t[(r >> 16) % (uint32_t)nt];
        char *tmp = x->name;
        x->name = y->name, y->name = tmp;
        break;
    }
    default: {  // a size: frame_size, clip_frames or clips, a little off
        static const char *keys[] = {"frame_size", "clip_frames", "clips"};
        const char *k = keys[(r >> 12) % 3];
        long v = meta_long(m, nm, k);
        if (v < 0 || v > 1000000000) v = 1;
        static const long delta[] = {-1, 1, 0};
        char b[32];
        long nv = (r >> 20) % 4 == 3 ? v * 2 : v + delta[(r >> 20) % 3];
        snprintf(b, sizeof b, "%ld", nv);
        set_meta(m, nm, k, b);
        break;
    }
    }
    size_t out = serialize(t, nt, m, nm, data, max_size);
    for (int i = 0; i < nt; i++) free(t[i].name), free(t[i].data);
    for (int i = 0; i < nm; i++) free(m[i].key), free(m[i].value);
    free(t);
    free(m);
    return out ? out : LLVMFuzzerMutate(data, size, max_size);
}
