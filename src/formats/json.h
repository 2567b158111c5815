// json.h: the strict JSON reader behind the formats' JSON files (a safetensors header, a dataset's
// dataset.json). It reads a text piece by piece, the caller saying what must come next: no tree is
// built, nothing nests beyond what the caller asks for (so there is no recursion and no depth to
// limit), and an unknown key or a value of the wrong kind is refused by the caller. What it checks
// itself is the JSON (RFC 8259): strings (escapes, surrogate pairs, valid UTF-8, no control
// characters, no \u0000) and numbers (no leading zero, digits after '.' and 'e').
#ifndef FRAMECHAIN_JSON_H
#define FRAMECHAIN_JSON_H

#include <stddef.h>
#include <stdint.h>

// A text being read. Decoded strings go to `arena` (NUL-terminated): a string never decodes to more
// bytes than it takes in the text (quotes included, so its NUL fits too), hence an arena as large as
// the text always has room; a caller that drops strings may set `used` back.
typedef struct {
    const uint8_t *s;
    size_t n, i;  // the text's length, the position
    char *arena;
    size_t used, cap;
    char *err;  // where a failure's one line goes (may be NULL)
    size_t errlen;
    // Where errors say they are. With `path` set, every error starts "<path>: line <L>: ". Otherwise
    // a syntax error starts "bad <syntax_name> at byte <B>: " and the caller's own have no prefix.
    const char *path;
    const char *syntax_name;  // e.g. "header JSON"
    const char *end_name;     // what the end of the text is called, e.g. "the end of the header"
    int plain_escapes;        // 1: strings may hold no escapes but \" \\ and \/
    char tok[32];             // json_what_is' answer
} JsonReader;

// A failure at the position / a syntax error at byte `at`: one line into r->err (see above), -1.
int json_fail(JsonReader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int json_fail_at(JsonReader *r, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void json_skip_ws(JsonReader *r);
// 1 when the byte at the position (no whitespace skipped) is c.
int json_at(const JsonReader *r, char c);
// 1 when a number starts at the position (no whitespace skipped).
int json_at_number(const JsonReader *r);
// What the next token is, for a message: "a string", "an object", "null", "'x'", r->end_name...
const char *json_what_is(JsonReader *r);
// Skip whitespace, then consume c: 0, or -1 with "expected <expected>, got <what is there>".
int json_expect(JsonReader *r, char c, const char *expected);

// Walking the items of an object or an array, after its opening '{' or '[':
//     int more = json_first_item(r, '}');
//     while (more > 0) { ...read one item...; more = json_next_item(r, '}', "',' or '}' after a field"); }
//     if (more < 0) return -1;
// json_first_item: 1 when an item follows, 0 when `close` does (consumed). json_next_item, after an
// item: 1 when ',' follows (consumed), 0 at `close` (consumed), -1 (a syntax error naming `expected`).
int json_first_item(JsonReader *r, char close);
int json_next_item(JsonReader *r, char close, const char *expected);

// Skip whitespace, then read a string into the arena; *out points at it. A syntax error names `expected`
// when no string is there.
int json_string(JsonReader *r, char **out, const char *expected);

// What json_uint found, when the number is well-formed.
typedef enum { JSON_UINT_OK, JSON_UINT_NEGATIVE, JSON_UINT_FRACTION, JSON_UINT_TOO_LARGE } JsonUint;
// Skip whitespace, then read a number that ought to be an integer in 0..max. Returns a
// JsonUint (*v set when JSON_UINT_OK; *start = where the number's text begins, in any case), or -1 with
// a syntax error ("expected a non-negative integer", a leading zero, a malformed number).
int json_uint(JsonReader *r, uint64_t max, uint64_t *v, size_t *start);

// Skip whitespace, then read a number (any JSON number) as a double into *v: 0, or -1 with a syntax
// error naming `expected` (no number there, a malformed one) or "out of range" (beyond a double's).
int json_double(JsonReader *r, double *v, const char *expected);

// 1 when the NUL-terminated s is valid UTF-8 (fc_utf8_len), else 0.
int json_valid_utf8(const char *s);

#endif
