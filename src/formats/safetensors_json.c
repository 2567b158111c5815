// safetensors_json.c: the strict JSON-subset parser behind the safetensors reader (safetensors_read.c),
// for exactly the subset the format uses (an object of objects of strings and integer arrays),
// without recursion; and the UTF-8 validation it shares with the writer (st_valid_utf8).
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors_internal.h"

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

int st_valid_utf8(const char *s) { return s && valid_utf8(s); }

// ---------------------------------------------------------------------------------------------
// parser (the Parser type is in safetensors_internal.h)

int stj_error(Parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->err && p->errlen) vsnprintf(p->err, p->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

void stj_skip_ws(Parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

int stj_at(const Parser *p, char c) { return p->i < p->n && p->s[p->i] == (uint8_t)c; }

static int literal_at(const Parser *p, const char *lit) {
    size_t k = strlen(lit);
    return p->n - p->i >= k && !memcmp(p->s + p->i, lit, k);
}

// What the next token is, for error messages.
const char *stj_what_is(Parser *p) {
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
    return stj_error(p, "bad header JSON at byte %zu: expected %s, got %s", where, expected, stj_what_is(p));
}

int stj_expect(Parser *p, char c, const char *expected) {
    stj_skip_ws(p);
    if (!stj_at(p, c)) return syntax(p, expected);
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
    if (p->used >= p->cap) return stj_error(p, "internal error: header string arena full");
    p->arena[p->used++] = (char)c;
    return 0;
}

// Parse a JSON string at the position (after skipping whitespace) into the arena; *out points at it.
int stj_parse_string(Parser *p, char **out, const char *expected) {
    stj_skip_ws(p);
    if (!stj_at(p, '"')) return syntax(p, expected);
    size_t start = p->i++, first = p->used;
    for (;;) {
        if (p->i >= p->n) {
            p->i = start;
            return stj_error(p, "bad header JSON at byte %zu: unterminated string", start);
        }
        uint8_t c = p->s[p->i];
        if (c == '"') {
            p->i++;
            break;
        }
        if (c < 0x20)
            return stj_error(p, "bad header JSON at byte %zu: control character 0x%02x inside a string (it must be escaped)",
                        p->i, c);
        if (c != '\\') {
            size_t k = utf8_seq(p->s + p->i, p->n - p->i);
            if (!k) return stj_error(p, "bad header JSON at byte %zu: invalid UTF-8 in a string", p->i);
            for (size_t j = 0; j < k; j++)
                if (arena_put(p, p->s[p->i + j])) return -1;
            p->i += k;
            continue;
        }
        size_t esc = p->i;
        if (p->i + 1 >= p->n) return stj_error(p, "bad header JSON at byte %zu: unterminated string", start);
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
                return stj_error(p, "bad header JSON at byte %zu: invalid escape '\\%c' in a string", esc, e);
            return stj_error(p, "bad header JSON at byte %zu: invalid escape in a string", esc);
        }
        unsigned cp, lo;
        if (p->n - p->i < 4 || hex4(p->s + p->i, &cp))
            return stj_error(p, "bad header JSON at byte %zu: \\u needs 4 hex digits", esc);
        p->i += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return stj_error(p, "bad header JSON at byte %zu: unpaired low surrogate \\u%04X", esc, cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {  // must be followed by its low half
            if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' || hex4(p->s + p->i + 2, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return stj_error(p, "bad header JSON at byte %zu: unpaired high surrogate \\u%04X", esc, cp);
            p->i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return stj_error(p, "bad header JSON at byte %zu: \\u0000 inside a string", esc);
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
    stj_skip_ws(p);
    size_t start = p->i;
    int neg = 0, frac = 0;
    if (stj_at(p, '-')) neg = 1, p->i++;
    if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')) {
        p->i = start;
        return syntax(p, "a non-negative integer");
    }
    size_t digits = p->i;
    if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
        return stj_error(p, "bad header JSON at byte %zu: number with a leading zero", start);
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    size_t digits_end = p->i;
    if (stj_at(p, '.')) {
        frac = 1, p->i++;
        if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'))
            return stj_error(p, "bad header JSON at byte %zu: malformed number", start);
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (stj_at(p, 'e') || stj_at(p, 'E')) {
        frac = 1, p->i++;
        if (stj_at(p, '+') || stj_at(p, '-')) p->i++;
        if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9'))
            return stj_error(p, "bad header JSON at byte %zu: malformed number", start);
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
int stj_parse_uint_array(Parser *p, uint64_t *v, int max, int *count, const char *what) {
    stj_skip_ws(p);
    if (!stj_at(p, '[')) return stj_error(p, "%s must be an array of integers, got %s", what, stj_what_is(p));
    p->i++;
    *count = 0;
    stj_skip_ws(p);
    if (stj_at(p, ']')) {
        p->i++;
        return 0;
    }
    for (;;) {
        char why[80];
        uint64_t x = 0;
        if (*count == max) return stj_error(p, "%s has more than %d entries", what, max);
        stj_skip_ws(p);
        if (!(stj_at(p, '-') || (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')))
            return stj_error(p, "%s must hold integers, got %s", what, stj_what_is(p));
        int rc = parse_uint(p, &x, why, sizeof why);
        if (rc < 0) return -1;
        if (rc > 0) return stj_error(p, "%s: %s", what, why);
        v[(*count)++] = x;
        stj_skip_ws(p);
        if (stj_at(p, ']')) {
            p->i++;
            return 0;
        }
        if (stj_expect(p, ',', "',' or ']' in an array")) return -1;
    }
}
