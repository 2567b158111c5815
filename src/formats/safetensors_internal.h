// safetensors_internal.h: private to safetensors_json.c, safetensors_read.c and safetensors_write.c
// (the pieces of the safetensors module); nothing else may include it. What they share: SHOWN for
// error messages, and reading the header's JSON.
#ifndef FRAMECHAIN_SAFETENSORS_INTERNAL_H
#define FRAMECHAIN_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/json.h"
#include "formats/safetensors.h"

#define SHOWN(s) ST_SHOWN(s)

// Read the header's JSON (r is set on it, with f->strings as its arena) into f's entries and metadata,
// in the header's order (safetensors_json.c). 0, or -1 with the reason in r->err. Whether names are
// unique and the tensors tile the data section is left to the caller.
int st_parse_header_json(JsonReader *r, StFile *f);

#endif
