// safetensors.c: the safetensors writer and a strict reader. Layout: 8-byte little-endian header
// length, a JSON header (padded with spaces to a multiple of 8), then the tensors' bytes,
// contiguous from 0. The reader has its own small JSON parser for exactly the subset the format
// uses (an object of objects of strings and integer arrays), without recursion.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "safetensors.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4}, {"F16", 2},
    {"BF16", 2}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
};

size_t st_dtype_size(const char *d) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (!strcmp(DTYPES[i].name, d)) return DTYPES[i].size;
    return 0;
}

// Length of the valid UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF)
// at s, of which n > 0 bytes are available; 0 when it is not one.
static size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

static int valid_utf8(const char *s) {
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    while (n) {
        size_t k = utf8_seq(p, n);
        if (!k) return 0;
        p += k, n -= k;
    }
    return 1;
}

const char *st_shown(const char *s, char *buf, size_t len) {
    size_t n = strlen(s), k = n < len - 4 ? n : len - 4;
    while (k < n && k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;  // cut between characters
    for (size_t i = 0; i < k; i++) buf[i] = ((uint8_t)s[i] < 0x20 || s[i] == 0x7F) ? '?' : s[i];
    strcpy(buf + k, k < n ? "..." : "");
    return buf;
}
#define SHOWN(s) ST_SHOWN(s)

// ---------------------------------------------------------------------------------------------
// writer

// Byte size of t in *out; 0 when ndim is out of range, a dimension is negative or the size overflows.
static int tensor_bytes(const StTensor *t, size_t *out) {
    size_t n = st_dtype_size(t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, (size_t)t->shape[i], &n)) return 0;
    *out = n;
    return 1;
}

// A growing text buffer for the JSON header.
typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_put(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 64;
        b->s = realloc(b->s, b->cap);
        if (!b->s) fc_die("out of host memory writing a safetensors header");
    }
}

static void buf_put_json_string(Buf *b, const char *s) {
    buf_put(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') buf_put(b, "\\%c", ch);
        else if (ch < 0x20) buf_put(b, "\\u%04x", ch);
        else buf_put(b, "%c", ch);
    }
    buf_put(b, "\"");
}

static int fail(char *err, size_t errlen, const char *path, const char *what) {
    snprintf(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

// The temporary file being written. The tests inject faults through it: FRAMECHAIN_TEST_FAIL_WRITE_AFTER
// makes the disk full after that many bytes of the file (as a real disk would: a short write, then ENOSPC).
typedef struct {
    int fd;
    size_t written;
    long fail_after;  // -1: never
} Out;

static int write_all(Out *o, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        size_t chunk = n;
        if (o->fail_after >= 0) {
            if (o->written >= (size_t)o->fail_after) {
                errno = ENOSPC;
                return -1;
            }
            if (chunk > (size_t)o->fail_after - o->written) chunk = (size_t)o->fail_after - o->written;
        }
        ssize_t w = write(o->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w, o->written += (size_t)w;
    }
    return 0;
}

// Refuse what the reader would refuse, before anything touches the disk.
static int check_write_args(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta,
                            char *err, size_t errlen) {
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[i];
        size_t bytes;
        if (!t->name || !valid_utf8(t->name)) {
            snprintf(err, errlen, "%s: tensor %d: the name is not valid UTF-8", path, i);
            return -1;
        }
        if (!strcmp(t->name, "__metadata__")) {
            snprintf(err, errlen, "%s: a tensor may not be called '__metadata__'", path);
            return -1;
        }
        if (!t->dtype || !st_dtype_size(t->dtype)) {
            snprintf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, SHOWN(t->name),
                     t->dtype ? SHOWN(t->dtype) : "(null)");
            return -1;
        }
        if (!tensor_bytes(t, &bytes)) {
            int d = 0;
            while (d < t->ndim && d < ST_MAX_DIMS && t->shape[d] >= 0) d++;
            if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
                snprintf(err, errlen, "%s: tensor '%s': %d dimensions (0 to %d)", path, SHOWN(t->name), t->ndim,
                         ST_MAX_DIMS);
            else if (d < t->ndim)
                snprintf(err, errlen, "%s: tensor '%s': negative dimension %ld", path, SHOWN(t->name), t->shape[d]);
            else
                snprintf(err, errlen, "%s: tensor '%s': the shape is too large", path, SHOWN(t->name));
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(t->name, tensors[j].name)) {
                snprintf(err, errlen, "%s: duplicate tensor name '%s'", path, SHOWN(t->name));
                return -1;
            }
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value || !valid_utf8(meta[i].key) || !valid_utf8(meta[i].value)) {
            snprintf(err, errlen, "%s: metadata entry %d is not valid UTF-8", path, i);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(meta[i].key, meta[j].key)) {
                snprintf(err, errlen, "%s: duplicate metadata key '%s'", path, SHOWN(meta[i].key));
                return -1;
            }
    }
    return 0;
}

// Pieces of a file to write, in order.
typedef struct {
    const void *p;
    size_t n;
} Chunk;

// Write the chunks into a temporary file next to `path`, fsync it, rename it over `path` and fsync
// the folder. FRAMECHAIN_TEST_WRITE_DELAY_MS pauses before chunk `delay_at` (-1: never).
static int write_atomic(const char *path, const Chunk *chunks, int nchunks, int delay_at, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%.200s...: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail(err, errlen, tmp, "cannot create");
    Out o = {fd, 0, fc_test_hook("FAIL_WRITE_AFTER")};
    long delay_ms = fc_test_hook("WRITE_DELAY_MS");  // the tests' kill -9 must be able to land mid-write
    for (int i = 0; i < nchunks; i++) {
        if (i == delay_at && delay_ms > 0) usleep((useconds_t)(delay_ms * 1000));
        if (write_all(&o, chunks[i].p, chunks[i].n)) {
            fail(err, errlen, tmp, "write failed");
            close(fd);
            unlink(tmp);
            return -1;
        }
    }
    if (fsync(fd)) {
        fail(err, errlen, tmp, "fsync failed");
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd)) {
        fail(err, errlen, tmp, "close failed");
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path)) {
        fail(err, errlen, path, "rename failed");
        unlink(tmp);
        return -1;
    }
    // make the rename itself durable
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd)) {
        fail(err, errlen, path, "fsync of the folder failed");
        if (dfd >= 0) close(dfd);
        return -1;
    }
    close(dfd);
    return 0;
}

int st_write(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta, char *err,
             size_t errlen) {
    if (n < 0 || nmeta < 0) {
        snprintf(err, errlen, "%s: negative tensor or metadata count", path);
        return -1;
    }
    if (check_write_args(path, tensors, n, meta, nmeta, err, errlen)) return -1;
    // storage order: by element size, widest first, stable within a size
    int *order = fc_malloc(sizeof(int) * (n ? n : 1));
    int k = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++)
            if (st_dtype_size(tensors[i].dtype) == size) order[k++] = i;

    Buf h = {0};
    buf_put(&h, "{");
    if (nmeta) {
        buf_put(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) buf_put(&h, ",");
            buf_put_json_string(&h, meta[i].key);
            buf_put(&h, ":");
            buf_put_json_string(&h, meta[i].value);
        }
        buf_put(&h, "}");
    }
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[order[i]];
        size_t bytes = 0;
        tensor_bytes(t, &bytes);
        buf_put(&h, "%s", (nmeta || i) ? "," : "");
        buf_put_json_string(&h, t->name);
        buf_put(&h, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++) buf_put(&h, "%s%ld", d ? "," : "", t->shape[d]);
        buf_put(&h, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes);
        offset += bytes;
    }
    buf_put(&h, "}");
    while (h.len % 8) buf_put(&h, " ");

    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    Chunk *chunks = fc_malloc(sizeof(Chunk) * (size_t)(n + 2));
    chunks[0] = (Chunk){len8, 8};
    chunks[1] = (Chunk){h.s, h.len};
    for (int i = 0; i < n; i++) {
        size_t bytes = 0;
        tensor_bytes(&tensors[order[i]], &bytes);
        chunks[2 + i] = (Chunk){tensors[order[i]].data, bytes};
    }
    int rc = write_atomic(path, chunks, n + 2, n ? 2 + n / 2 : -1, err, errlen);
    free(chunks);
    free(h.s);
    free(order);
    return rc;
}

int st_write_bytes(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    Chunk c = {data, len};
    return write_atomic(path, &c, 1, -1, err, errlen);
}

int st_valid_utf8(const char *s) { return s && valid_utf8(s); }

// ---------------------------------------------------------------------------------------------
// reader

// The JSON header being parsed. Decoded strings go to `arena`: a string never decodes to more
// bytes than it takes in the header (quotes included, so its terminating NUL fits too), hence an
// arena as large as the header always has room.
typedef struct {
    const uint8_t *s;
    size_t n, i;  // header length, position
    char *arena;
    size_t used, cap;
    char *err;
    size_t errlen;
    char tok[32];  // what_is' answer
} Parser;

static int perr(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(Parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->err && p->errlen) vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(Parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int at(const Parser *p, char c) { return p->i < p->n && p->s[p->i] == (uint8_t)c; }

static int literal_at(const Parser *p, const char *lit) {
    size_t k = strlen(lit);
    return p->n - p->i >= k && !memcmp(p->s + p->i, lit, k);
}

// What the next token is, for error messages.
static const char *what_is(Parser *p) {
    if (p->i >= p->n) return "the end of the header";
    uint8_t c = p->s[p->i];
    if (c == '"') return "a string";
    if (c == '{') return "an object";
    if (c == '[') return "an array";
    if (c == '-' || (c >= '0' && c <= '9')) return "a number";
    if (literal_at(p, "true")) return "true";
    if (literal_at(p, "false")) return "false";
    if (literal_at(p, "null")) return "null";
    if (c > 0x20 && c < 0x7F) snprintf(p->tok, sizeof p->tok, "'%c'", c);
    else snprintf(p->tok, sizeof p->tok, "byte 0x%02x", c);
    return p->tok;
}

// A syntax error at the current position.
static int syntax(Parser *p, const char *expected) {
    size_t where = p->i;
    return perr(p, "bad header JSON at byte %zu: expected %s, got %s", where, expected, what_is(p));
}

static int expect(Parser *p, char c, const char *expected) {
    skip_ws(p);
    if (!at(p, c)) return syntax(p, expected);
    p->i++;
    return 0;
}

static int hex4(const uint8_t *s, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

static int arena_put(Parser *p, uint8_t c) {
    if (p->used >= p->cap) return perr(p, "internal error: header string arena full");
    p->arena[p->used++] = (char)c;
    return 0;
}

// Parse a JSON string at the position (after skipping whitespace) into the arena; *out points at it.
static int parse_string(Parser *p, char **out, const char *expected) {
    skip_ws(p);
    if (!at(p, '"')) return syntax(p, expected);
    size_t start = p->i++, first = p->used;
    for (;;) {
        if (p->i >= p->n) {
            p->i = start;
            return perr(p, "bad header JSON at byte %zu: unterminated string", start);
        }
        uint8_t c = p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20)
            return perr(p, "bad header JSON at byte %zu: control character 0x%02x inside a string (it must be escaped)",
                        p->i, c);
        if (c != '\\') {
            size_t k = utf8_seq(p->s + p->i, p->n - p->i);
            if (!k) return perr(p, "bad header JSON at byte %zu: invalid UTF-8 in a string", p->i);
            for (size_t j = 0; j < k; j++)
                if (arena_put(p, p->s[p->i + j])) return -1;
            p->i += k;
            continue;
        }
        size_t esc = p->i;
        if (p->i + 1 >= p->n) return perr(p, "bad header JSON at byte %zu: unterminated string", start);
        uint8_t e = p->s[p->i + 1];
        p->i += 2;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *m = e ? strchr(from, e) : NULL;
        if (m) {
            if (arena_put(p, (uint8_t)to[m - from])) return -1;
            continue;
        }
        if (e != 'u') {
            if (e > 0x20 && e < 0x7F)
                return perr(p, "bad header JSON at byte %zu: invalid escape '\\%c' in a string", esc, e);
            return perr(p, "bad header JSON at byte %zu: invalid escape in a string", esc);
        }
        unsigned cp, lo;
        if (p->n - p->i < 4 || hex4(p->s + p->i, &cp))
            return perr(p, "bad header JSON at byte %zu: \\u needs 4 hex digits", esc);
        p->i += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return perr(p, "bad header JSON at byte %zu: unpaired low surrogate \\u%04X", esc, cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // must be followed by its low half
            if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || hex4(p->s + p->i + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return perr(p, "bad header JSON at byte %zu: unpaired high surrogate \\u%04X", esc, cp);
            p->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return perr(p, "bad header JSON at byte %zu: \\u0000 inside a string", esc);
        uint8_t u[4];
        int k;
        if (cp < 0x80) u[0] = (uint8_t)cp, k = 1;
        else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), k = 2;
        else if (cp < 0x10000)
            u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)),
            u[2] = (uint8_t)(0x80 | (cp & 0x3F)), k = 3;
        else
            u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F)),
            u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F)), k = 4;
        for (int j = 0; j < k; j++)
            if (arena_put(p, u[j])) return -1;
    }
    if (arena_put(p, 0)) return -1;
    *out = p->arena + first;
    return 0;
}

// Parse a JSON number that must be a non-negative integer below 2^63. Returns 0, 1 with `why`
// filled when it is a well-formed number of the wrong kind, or -1 on a syntax error.
static int parse_uint(Parser *p, uint64_t *v, char *why, size_t whylen) {
    skip_ws(p);
    size_t start = p->i;
    int neg = 0, frac = 0;
    if (at(p, '-')) neg = 1, p->i++;
    if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')) {
        p->i = start;
        return syntax(p, "a non-negative integer");
    }
    size_t digits = p->i;
    if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
        return perr(p, "bad header JSON at byte %zu: number with a leading zero", start);
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    size_t digits_end = p->i;
    if (at(p, '.')) {
        frac = 1, p->i++;
        if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'))
            return perr(p, "bad header JSON at byte %zu: malformed number", start);
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (at(p, 'e') || at(p, 'E')) {
        frac = 1, p->i++;
        if (at(p, '+') || at(p, '-')) p->i++;
        if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'))
            return perr(p, "bad header JSON at byte %zu: malformed number", start);
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    int len = (int)(p->i - start < 24 ? p->i - start : 24);
    const char *more = p->i - start > 24 ? "..." : "";
    if (neg) {
        snprintf(why, whylen, "%.*s%s is negative", len, (const char *)p->s + start, more);
        return 1;
    }
    if (frac) {
        snprintf(why, whylen, "%.*s%s is not an integer", len, (const char *)p->s + start, more);
        return 1;
    }
    uint64_t x = 0;
    for (size_t k = digits; k < digits_end; k++) {
        if (x > (UINT64_C(1) << 63) / 10) x = UINT64_MAX;  // saturate: too large either way
        else x = x * 10 + (p->s[k] - '0');
    }
    if (x >= UINT64_C(1) << 63) {
        snprintf(why, whylen, "%.*s%s is too large", len, (const char *)p->s + start, more);
        return 1;
    }
    *v = x;
    return 0;
}

// Parse an array of at most `max` non-negative integers into v; *count gets how many. The errors
// name `what` (e.g. "tensor 'x': shape").
static int parse_uint_array(Parser *p, uint64_t *v, int max, int *count, const char *what) {
    skip_ws(p);
    if (!at(p, '[')) return perr(p, "%s must be an array of integers, got %s", what, what_is(p));
    p->i++;
    *count = 0;
    skip_ws(p);
    if (at(p, ']')) {
        p->i++;
        return 0;
    }
    for (;;) {
        char why[80];
        uint64_t x = 0;
        if (*count == max) return perr(p, "%s has more than %d entries", what, max);
        skip_ws(p);
        if (!(at(p, '-') || (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')))
            return perr(p, "%s must hold integers, got %s", what, what_is(p));
        int rc = parse_uint(p, &x, why, sizeof why);
        if (rc < 0) return -1;
        if (rc > 0) return perr(p, "%s: %s", what, why);
        v[(*count)++] = x;
        skip_ws(p);
        if (at(p, ']')) {
            p->i++;
            return 0;
        }
        if (expect(p, ',', "',' or ']' in an array")) return -1;
    }
}

static void shape_text(const StEntry *e, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < e->ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%ld", d ? ", " : "", e->shape[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

// Parse the object describing tensor e (whose name is set): exactly dtype, shape and data_offsets.
static int parse_tensor(Parser *p, StEntry *e) {
    const char *name = SHOWN(e->name);
    skip_ws(p);
    if (!at(p, '{')) return perr(p, "tensor '%s': expected an object, got %s", name, what_is(p));
    p->i++;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    uint64_t v[ST_MAX_DIMS];
    int count;
    char what[128];
    skip_ws(p);
    if (at(p, '}')) p->i++;
    else
        for (;;) {
            size_t mark = p->used;  // field names and the dtype are not kept
            char *field, *dtype;
            if (parse_string(p, &field, "a field name")) return -1;
            if (expect(p, ':', "':' after a field name")) return -1;
            if (!strcmp(field, "dtype")) {
                if (have_dtype++) return perr(p, "tensor '%s': duplicate field 'dtype'", name);
                skip_ws(p);
                if (!at(p, '"')) return perr(p, "tensor '%s': dtype must be a string, got %s", name, what_is(p));
                if (parse_string(p, &dtype, "a string")) return -1;
                if (!st_dtype_size(dtype)) return perr(p, "tensor '%s': unknown dtype '%s'", name, SHOWN(dtype));
                snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
            } else if (!strcmp(field, "shape")) {
                if (have_shape++) return perr(p, "tensor '%s': duplicate field 'shape'", name);
                snprintf(what, sizeof what, "tensor '%s': shape", name);
                if (parse_uint_array(p, v, ST_MAX_DIMS, &count, what)) return -1;
                e->ndim = count;
                for (int d = 0; d < count; d++) e->shape[d] = (long)v[d];  // below 2^63: fits
            } else if (!strcmp(field, "data_offsets")) {
                if (have_offsets++) return perr(p, "tensor '%s': duplicate field 'data_offsets'", name);
                snprintf(what, sizeof what, "tensor '%s': data_offsets", name);
                if (parse_uint_array(p, v, 2, &count, what)) return -1;
                if (count != 2) return perr(p, "%s must be [begin, end], not %d numbers", what, count);
                if (v[0] > v[1])
                    return perr(p, "%s [%llu, %llu]: begin is after end", what, (unsigned long long)v[0],
                                (unsigned long long)v[1]);
                e->begin = (size_t)v[0], e->end = (size_t)v[1];
            } else {
                return perr(p, "tensor '%s': unknown field '%s' (only dtype, shape and data_offsets)", name,
                            SHOWN(field));
            }
            p->used = mark;
            skip_ws(p);
            if (at(p, '}')) {
                p->i++;
                break;
            }
            if (expect(p, ',', "',' or '}' after a field")) return -1;
        }
    if (!have_dtype || !have_shape || !have_offsets)
        return perr(p, "tensor '%s': missing field '%s'", name,
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    size_t bytes = st_dtype_size(e->dtype);
    char shape[200];
    shape_text(e, shape, sizeof shape);
    for (int d = 0; d < e->ndim; d++)
        if (__builtin_mul_overflow(bytes, (size_t)e->shape[d], &bytes))
            return perr(p, "tensor '%s': shape %s is too large", name, shape);
    if (e->end - e->begin != bytes)
        return perr(p, "tensor '%s': data_offsets [%zu, %zu] span %zu bytes, but %s shape %s needs %zu", name, e->begin,
                    e->end, e->end - e->begin, e->dtype, shape, bytes);
    return 0;
}

// Grow an array of `size`-byte elements to hold at least need; 0 or -1 when out of memory.
static int grow(void **a, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) c = c > INT_MAX / 2 ? INT_MAX : c * 2;
    void *b = realloc(*a, (size_t)c * size);
    if (!b) return -1;
    *a = b, *cap = c;
    return 0;
}

static int parse_metadata(Parser *p, StFile *f, int *cap) {
    skip_ws(p);
    if (!at(p, '{')) return perr(p, "__metadata__ must be an object of strings, got %s", what_is(p));
    p->i++;
    skip_ws(p);
    if (at(p, '}')) {
        p->i++;
        return 0;
    }
    for (;;) {
        char *key, *value;
        if (parse_string(p, &key, "a metadata key")) return -1;
        if (expect(p, ':', "':' after a metadata key")) return -1;
        skip_ws(p);
        if (!at(p, '"'))
            return perr(p, "__metadata__ '%s': the value must be a string, got %s", SHOWN(key), what_is(p));
        if (parse_string(p, &value, "a string")) return -1;
        int c1 = *cap, c2 = *cap;
        if (grow((void **)&f->meta_keys, &c1, f->nmeta + 1, sizeof(char *)) ||
            grow((void **)&f->meta_values, &c2, f->nmeta + 1, sizeof(char *)))
            return perr(p, "out of memory reading the metadata");
        *cap = c1;
        f->meta_keys[f->nmeta] = key, f->meta_values[f->nmeta] = value, f->nmeta++;
        skip_ws(p);
        if (at(p, '}')) {
            p->i++;
            return 0;
        }
        if (expect(p, ',', "',' or '}' after a metadata value")) return -1;
    }
}

typedef struct {
    const char *name;
    int idx;
} Named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const Named *)a)->name, ((const Named *)b)->name);
}

static int cmp_entry(const void *a, const void *b) {
    const StEntry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);  // ties are zero-size tensors (or overlaps): keep the order fixed
}

// Sort v by name; the first name that occurs twice, or NULL.
static const char *first_duplicate(Named *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_named);
    for (int i = 1; i < n; i++)
        if (!strcmp(v[i - 1].name, v[i].name)) return v[i].name;
    return NULL;
}

static int parse_header(Parser *p, StFile *f) {
    if (!at(p, '{')) return perr(p, "the header does not start with '{'");
    p->i++;
    int cap = 0, mcap = 0, have_meta = 0;
    skip_ws(p);
    if (at(p, '}')) p->i++;
    else
        for (;;) {
            char *key;
            size_t mark = p->used;
            if (parse_string(p, &key, "a tensor name")) return -1;
            if (expect(p, ':', "':' after a tensor name")) return -1;
            if (!strcmp(key, "__metadata__")) {
                p->used = mark;
                if (have_meta++) return perr(p, "duplicate key '__metadata__'");
                if (parse_metadata(p, f, &mcap)) return -1;
            } else {
                if (grow((void **)&f->entries, &cap, f->n + 1, sizeof(StEntry)))
                    return perr(p, "out of memory reading the header");
                StEntry *e = &f->entries[f->n++];
                memset(e, 0, sizeof *e);
                e->name = key;
                if (parse_tensor(p, e)) return -1;
            }
            skip_ws(p);
            if (at(p, '}')) {
                p->i++;
                break;
            }
            if (expect(p, ',', "',' or '}' after a tensor")) return -1;
        }
    while (p->i < p->n && p->s[p->i] == ' ') p->i++;  // the padding
    if (p->i < p->n)
        return perr(p, "bad header JSON at byte %zu: %s after the header's object (only spaces may follow it)", p->i,
                    what_is(p));
    return 0;
}

// Check what the JSON cannot say: unique names, and tensors that tile the data section.
static int check_layout(Parser *p, StFile *f) {
    int most = f->n > f->nmeta ? f->n : f->nmeta;
    Named *v = malloc(sizeof(Named) * (size_t)(most ? most : 1));
    if (!v) return perr(p, "out of memory reading the header");
    for (int i = 0; i < f->nmeta; i++) v[i] = (Named){f->meta_keys[i], i};
    const char *dup = first_duplicate(v, f->nmeta);
    if (dup) {
        free(v);
        return perr(p, "__metadata__: duplicate key '%s'", SHOWN(dup));
    }
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    dup = first_duplicate(v, f->n);
    if (dup) {
        free(v);
        return perr(p, "duplicate tensor name '%s'", SHOWN(dup));
    }
    if (f->n > 1) qsort(f->entries, (size_t)f->n, sizeof(StEntry), cmp_entry);  // entries is NULL when n is 0
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    qsort(v, (size_t)f->n, sizeof *v, cmp_named);
    f->by_name = malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
    if (!f->by_name) {
        free(v);
        return perr(p, "out of memory reading the header");
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = v[i].idx;
    free(v);

    size_t data_size = f->size - f->data_start, cur = 0;
    const StEntry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        if (e->begin > cur)
            return perr(p, "gap of %zu bytes in the data section before tensor '%s' (bytes %zu..%zu)", e->begin - cur,
                        SHOWN(e->name), e->begin, e->end);
        if (e->begin < cur)
            return perr(p, "tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)", SHOWN(e->name),
                        e->begin, e->end, SHOWN(prev->name), prev->begin, prev->end);
        if (e->end > data_size)
            return perr(p, "tensor '%s' (bytes %zu..%zu) goes beyond the data section, which has %zu bytes",
                        SHOWN(e->name), e->begin, e->end, data_size);
        cur = e->end, prev = e;
    }
    if (cur < data_size)
        return perr(p, "%zu bytes in the data section after the last tensor (the tensors cover %zu of %zu)",
                    data_size - cur, cur, data_size);
    return 0;
}

// Parse `bytes` (`have` of them, malloc'ed) into f, which takes them over whatever happens. They are
// the first `have` bytes of a file of `file_size` bytes: the whole file, or (have < file_size) at
// least its header, which is then checked against the file's size without its data.
static int parse_prefix(StFile *f, uint8_t *bytes, size_t have, size_t file_size, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->bytes = bytes, f->size = file_size;
    size_t len = file_size;
    Parser p = {.err = err, .errlen = errlen};
    if (len < 8) {
        perr(&p, "the file has %zu bytes, fewer than the 8 of the header length", len);
        goto fail;
    }
    if (have < 8 || have > len) {
        perr(&p, "internal error: %zu bytes of a file of %zu given", have, len);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)bytes[i] << (8 * i);
    if (n < 2) {
        perr(&p, "header length %llu is too small (at least 2, for '{}')", (unsigned long long)n);
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        perr(&p, "header length %llu exceeds the limit of %zu bytes", (unsigned long long)n, ST_MAX_HEADER);
        goto fail;
    }
    if (n > len - 8) {
        perr(&p, "header length %llu goes beyond the end of the file (%zu bytes)", (unsigned long long)n, len);
        goto fail;
    }
    if (n > have - 8) {
        perr(&p, "only %zu of the header's %llu bytes were read", have - 8, (unsigned long long)n);
        goto fail;
    }
    f->data_start = 8 + (size_t)n;
    p.s = bytes + 8, p.n = (size_t)n, p.cap = (size_t)n;
    p.arena = f->strings = malloc((size_t)n);
    if (!f->strings) {
        perr(&p, "out of memory for a header of %llu bytes", (unsigned long long)n);
        goto fail;
    }
    if (parse_header(&p, f) || check_layout(&p, f)) goto fail;
    return 0;
fail:
    st_free(f);
    return -1;
}

static int parse_owned(StFile *f, uint8_t *bytes, size_t len, char *err, size_t errlen) {
    return parse_prefix(f, bytes, len, len, err, errlen);
}

int st_parse(StFile *f, const uint8_t *bytes, size_t len, char *err, size_t errlen) {
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) {
        memset(f, 0, sizeof *f);
        if (err && errlen) snprintf(err, errlen, "out of memory for a file of %zu bytes", len);
        return -1;
    }
    if (len) memcpy(copy, bytes, len);
    return parse_owned(f, copy, len, err, errlen);
}

int st_read(const char *path, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    FILE *in = fopen(path, "rb");
    if (!in) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(in), &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        fclose(in);
        return -1;
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *bytes = malloc(size ? size : 1);
    if (!bytes) {
        snprintf(err, errlen, "%s: out of memory for a file of %zu bytes", path, size);
        fclose(in);
        return -1;
    }
    while (got < size) {
        size_t k = fread(bytes + got, 1, size - got, in);
        if (!k) break;
        got += k;
    }
    int bad = ferror(in) || got != size || fgetc(in) != EOF;  // a file that changed size while read
    fclose(in);
    if (bad) {
        snprintf(err, errlen, "%s: read error (or the file changed while it was read)", path);
        free(bytes);
        return -1;
    }
    char why[512];
    if (parse_owned(f, bytes, size, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    return 0;
}

int st_parse_header(StFile *f, const uint8_t *head, size_t head_len, uint64_t file_size, char *err,
                    size_t errlen) {
    memset(f, 0, sizeof *f);
    if (file_size > SIZE_MAX || head_len > file_size) {
        if (err && errlen)
            snprintf(err, errlen, "internal error: %zu bytes of a file of %llu given", head_len,
                     (unsigned long long)file_size);
        return -1;
    }
    uint8_t *copy = malloc(head_len ? head_len : 1);
    if (!copy) {
        if (err && errlen) snprintf(err, errlen, "out of memory for a header of %zu bytes", head_len);
        return -1;
    }
    if (head_len) memcpy(copy, head, head_len);
    return parse_prefix(f, copy, head_len, (size_t)file_size, err, errlen);
}

// pread exactly n bytes at offset; 0, or -1 (errno set; EIO for a file that ends early).
static int pread_all(int fd, void *buf, size_t n, off_t offset) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, offset);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        p += r, n -= (size_t)r, offset += r;
    }
    return 0;
}

int st_read_header(const char *path, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size, want = size < 8 ? size : 8;
    uint8_t len8[8] = {0};
    if (pread_all(fd, len8, want, 0)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
    // a header length outside the rules is refused by the parser from these 8 bytes alone
    if (size >= 8 && n >= 2 && n <= ST_MAX_HEADER && n <= size - 8) want = 8 + (size_t)n;
    uint8_t *head = malloc(want ? want : 1);
    if (!head) {
        snprintf(err, errlen, "%s: out of memory for a header of %zu bytes", path, want);
        close(fd);
        return -1;
    }
    if (pread_all(fd, head, want, 0)) {
        snprintf(err, errlen, "%s: read error (or the file changed while it was read): %s", path, strerror(errno));
        free(head);
        close(fd);
        return -1;
    }
    close(fd);
    char why[512];
    if (parse_prefix(f, head, want, size, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    return 0;
}

const StEntry *st_find(const StFile *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const StEntry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (!c) return e;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const void *st_data(const StFile *f, const StEntry *e) { return f->bytes + f->data_start + e->begin; }

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
    return NULL;
}

void st_free(StFile *f) {
    free(f->bytes);
    free(f->entries);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->by_name);
    free(f->strings);
    memset(f, 0, sizeof *f);
}
