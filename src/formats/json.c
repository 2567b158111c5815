// json.c: the strict JSON reader (see json.h): errors, whitespace and tokens, strings, integers.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "formats/json.h"

// ---------------------------------------------------------------------------------------------
// UTF-8

int json_valid_utf8(const char *s) {
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    while (n) {
        size_t k = fc_utf8_len(p, n);
        if (!k) return 0;
        p += k, n -= k;
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// errors

static int line_of(const JsonReader *r, size_t at) {
    int line = 1;
    for (size_t k = 0; k < at && k < r->n; k++) line += r->s[k] == '\n';
    return line;
}

// The one formatter: with a path, every message gets "<path>: line <L>: " in front; without one, a
// syntax error gets "bad <syntax_name> at byte <B>: " and the caller's own messages stay as they are.
static int fail_v(JsonReader *r, int syntax, size_t at, const char *fmt, va_list ap) {
    if (!r->path && !syntax) return fc_verrf(r->err, r->errlen, fmt, ap);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (r->path) return fc_errf(r->err, r->errlen, "%s: line %d: %s", r->path, line_of(r, at), msg);
    return fc_errf(r->err, r->errlen, "bad %s at byte %zu: %s", r->syntax_name, at, msg);
}

int json_fail(JsonReader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(r, 0, r->i, fmt, ap);
    va_end(ap);
    return -1;
}

int json_fail_at(JsonReader *r, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(r, 1, at, fmt, ap);
    va_end(ap);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// whitespace and tokens

void json_skip_ws(JsonReader *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r'))
        r->i++;
}

int json_at(const JsonReader *r, char c) { return r->i < r->n && r->s[r->i] == (uint8_t)c; }

static int digit_at(const JsonReader *r) { return r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9'; }

int json_at_number(const JsonReader *r) { return json_at(r, '-') || digit_at(r); }

static int literal_at(const JsonReader *r, const char *lit) {
    size_t k = strlen(lit);
    return r->n - r->i >= k && !memcmp(r->s + r->i, lit, k);
}

const char *json_what_is(JsonReader *r) {
    if (r->i >= r->n) return r->end_name;
    uint8_t c = r->s[r->i];
    if (c == '"') return "a string";
    if (c == '{') return "an object";
    if (c == '[') return "an array";
    if (json_at_number(r)) return "a number";
    if (literal_at(r, "true")) return "true";
    if (literal_at(r, "false")) return "false";
    if (literal_at(r, "null")) return "null";
    if (c > 0x20 && c < 0x7F) snprintf(r->tok, sizeof r->tok, "'%c'", c);
    else snprintf(r->tok, sizeof r->tok, "byte 0x%02x", c);
    return r->tok;
}

// A syntax error at the position: something else than `expected` is there.
static int unexpected(JsonReader *r, const char *expected) {
    size_t where = r->i;
    return json_fail_at(r, where, "expected %s, got %s", expected, json_what_is(r));
}

int json_expect(JsonReader *r, char c, const char *expected) {
    json_skip_ws(r);
    if (!json_at(r, c)) return unexpected(r, expected);
    r->i++;
    return 0;
}

int json_first_item(JsonReader *r, char close) {
    json_skip_ws(r);
    if (!json_at(r, close)) return 1;
    r->i++;
    return 0;
}

int json_next_item(JsonReader *r, char close, const char *expected) {
    json_skip_ws(r);
    if (json_at(r, close)) {
        r->i++;
        return 0;
    }
    return json_expect(r, ',', expected) ? -1 : 1;
}

// ---------------------------------------------------------------------------------------------
// strings

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

static int arena_put(JsonReader *r, const uint8_t *bytes, size_t k) {
    if (r->cap - r->used < k) return json_fail(r, "internal error: string arena full");
    memcpy(r->arena + r->used, bytes, k);
    r->used += k;
    return 0;
}

// The code point of the \u escape at `esc` (r->i just after its "\u"), a surrogate pair joined.
static int unicode_escape(JsonReader *r, size_t esc, unsigned *out) {
    unsigned cp, lo;
    if (r->n - r->i < 4 || hex4(r->s + r->i, &cp)) return json_fail_at(r, esc, "\\u needs 4 hex digits");
    r->i += 4;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return json_fail_at(r, esc, "unpaired low surrogate \\u%04X", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {  // must be followed by its low half
        if (r->n - r->i < 6 || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u' || hex4(r->s + r->i + 2, &lo) ||
            lo < 0xDC00 || lo > 0xDFFF)
            return json_fail_at(r, esc, "unpaired high surrogate \\u%04X", cp);
        r->i += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return json_fail_at(r, esc, "\\u0000 inside a string");
    *out = cp;
    return 0;
}

static int put_code_point(JsonReader *r, unsigned cp) {
    uint8_t u[4];
    size_t k;
    if (cp < 0x80) u[0] = (uint8_t)cp, k = 1;
    else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp & 0x3F)), k = 3;
    else
        u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F)),
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F)), u[3] = (uint8_t)(0x80 | (cp & 0x3F)), k = 4;
    return arena_put(r, u, k);
}

// The escape at r->i (its backslash) of the string that starts at `start`, decoded into the arena.
static int escape(JsonReader *r, size_t start) {
    size_t esc = r->i;
    if (r->i + 1 >= r->n) return json_fail_at(r, start, "unterminated string");
    uint8_t e = r->s[r->i + 1];
    r->i += 2;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *m = e ? strchr(from, e) : NULL;
    if (r->plain_escapes && (!m || m - from > 2))
        return json_fail_at(r, esc, "unsupported escape in a string (only \\\" \\\\ \\/)");
    if (m) return arena_put(r, (const uint8_t *)&to[m - from], 1);
    if (e != 'u') {
        if (e > 0x20 && e < 0x7F) return json_fail_at(r, esc, "invalid escape '\\%c' in a string", e);
        return json_fail_at(r, esc, "invalid escape in a string");
    }
    unsigned cp = 0;
    if (unicode_escape(r, esc, &cp)) return -1;
    return put_code_point(r, cp);
}

int json_string(JsonReader *r, char **out, const char *expected) {
    json_skip_ws(r);
    if (!json_at(r, '"')) return unexpected(r, expected);
    size_t start = r->i++, first = r->used;
    for (;;) {
        if (r->i >= r->n) {
            r->i = start;
            return json_fail_at(r, start, "unterminated string");
        }
        uint8_t c = r->s[r->i];
        if (c == '"') break;
        if (c < 0x20)
            return json_fail_at(r, r->i, "control character 0x%02x inside a string (it must be escaped)", c);
        if (c == '\\') {
            if (escape(r, start)) return -1;
            continue;
        }
        size_t k = fc_utf8_len(r->s + r->i, r->n - r->i);
        if (!k) return json_fail_at(r, r->i, "invalid UTF-8 in a string");
        if (arena_put(r, r->s + r->i, k)) return -1;
        r->i += k;
    }
    r->i++;
    if (arena_put(r, (const uint8_t *)"", 1)) return -1;
    *out = r->arena + first;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// integers

// Skip the digits at the position; -1 when there are none.
static int digits(JsonReader *r) {
    if (!digit_at(r)) return -1;
    while (digit_at(r)) r->i++;
    return 0;
}

int json_uint(JsonReader *r, uint64_t max, uint64_t *v, size_t *start) {
    json_skip_ws(r);
    size_t at = *start = r->i;
    int neg = json_at(r, '-'), frac = 0;
    r->i += neg;
    if (!digit_at(r)) {
        r->i = at;
        return unexpected(r, "a non-negative integer");
    }
    size_t first = r->i;
    if (r->s[r->i] == '0' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9')
        return json_fail_at(r, at, "number with a leading zero");
    digits(r);
    size_t end = r->i;
    if (json_at(r, '.')) {
        frac = 1, r->i++;
        if (digits(r)) return json_fail_at(r, at, "malformed number");
    }
    if (json_at(r, 'e') || json_at(r, 'E')) {
        frac = 1, r->i++;
        if (json_at(r, '+') || json_at(r, '-')) r->i++;
        if (digits(r)) return json_fail_at(r, at, "malformed number");
    }
    if (neg) return JSON_UINT_NEGATIVE;
    if (frac) return JSON_UINT_FRACTION;
    uint64_t x = 0;
    for (size_t k = first; k < end; k++) {
        unsigned d = (unsigned)(r->s[k] - '0');
        if (x > max / 10 || d > max - x * 10) return JSON_UINT_TOO_LARGE;
        x = x * 10 + d;
    }
    *v = x;
    return JSON_UINT_OK;
}

int json_double(JsonReader *r, double *v, const char *expected) {
    json_skip_ws(r);
    if (!json_at_number(r)) return unexpected(r, expected);
    uint64_t ignored;
    size_t start;
    if (json_uint(r, UINT64_MAX, &ignored, &start) < 0) return -1;
    char text[64];
    size_t len = r->i - start;
    if (len >= sizeof text) return json_fail_at(r, start, "a number of more than %zu characters", sizeof text - 1);
    memcpy(text, r->s + start, len);
    text[len] = 0;
    errno = 0;
    *v = strtod(text, NULL);
    if (errno == ERANGE && fabs(*v) > 1) return json_fail_at(r, start, "number %s is out of range", text);
    return 0;
}
