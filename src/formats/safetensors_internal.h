// safetensors_internal.h: private to safetensors_json.c, safetensors_read.c and safetensors_write.c
// (the pieces of the safetensors module); nothing else may include it. What they share: the strict
// JSON-subset parser the reader uses for the header, and SHOWN for error messages.
#ifndef FRAMECHAIN_SAFETENSORS_INTERNAL_H
#define FRAMECHAIN_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"

#define SHOWN(s) ST_SHOWN(s)

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

// The parser's pieces the reader builds on (safetensors_json.c). Those returning int return 0, or
// -1 with a one-line message in p->err (perr formats it and returns -1).
int stj_error(Parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void stj_skip_ws(Parser *p);
int stj_at(const Parser *p, char c);
// What the next token is, for error messages.
const char *stj_what_is(Parser *p);
int stj_expect(Parser *p, char c, const char *expected);
// Parse a JSON string at the position (after skipping whitespace) into the arena; *out points at it.
int stj_parse_string(Parser *p, char **out, const char *expected);
// Parse an array of at most `max` non-negative integers into v; *count gets how many. The errors
// name `what` (e.g. "tensor 'x': shape").
int stj_parse_uint_array(Parser *p, uint64_t *v, int max, int *count, const char *what);

#endif
