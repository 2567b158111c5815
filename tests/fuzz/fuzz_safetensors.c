// fuzz_safetensors.c: libFuzzer target for the strict safetensors reader. Any input may be
// refused (with one non-empty line); an accepted one must satisfy the format's invariants,
// checked here independently of the reader: abort() on any violation.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"

static volatile uint8_t g_sink;

// Valid UTF-8 (decoded, so this is a second implementation next to the reader's).
static int utf8_ok(const char *s) {
    const uint8_t *p = (const uint8_t *)s;
    while (*p) {
        uint32_t cp;
        int more;
        if (*p < 0x80) cp = *p, more = 0;
        else if ((*p & 0xE0) == 0xC0) cp = *p & 0x1F, more = 1;
        else if ((*p & 0xF0) == 0xE0) cp = *p & 0x0F, more = 2;
        else if ((*p & 0xF8) == 0xF0) cp = *p & 0x07, more = 3;
        else return 0;
        p++;
        for (int k = 0; k < more; k++, p++) {
            if ((*p & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (*p & 0x3F);
        }
        static const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    StFile f;
    char err[512] = "";
    if (st_parse(&f, data, size, err, sizeof err)) {
        if (!err[0] || strchr(err, '\n') || f.bytes || f.n || f.entries || f.nmeta) abort();
        st_free(&f);
        return 0;
    }
    // the file as given, with a header length in the rules
    if (size < 8 || f.size != size || memcmp(f.bytes, data, size)) abort();
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)data[i] << (8 * i);
    if (n < 2 || n > ST_MAX_HEADER || f.data_start != 8 + n || f.data_start > size || data[8] != '{') abort();
    // every entry inside the data section, sizes consistent, tiling it in data order
    size_t data_size = size - f.data_start, cur = 0;
    for (int i = 0; i < f.n; i++) {
        const StEntry *e = &f.entries[i];
        size_t bytes = st_dtype_size(e->dtype);
        if (!e->name || !utf8_ok(e->name) || !bytes || e->ndim < 0 || e->ndim > ST_MAX_DIMS) abort();
        for (int d = 0; d < e->ndim; d++)
            if (e->shape[d] < 0 || __builtin_mul_overflow(bytes, (size_t)e->shape[d], &bytes)) abort();
        if (e->begin > e->end || e->end > data_size || e->end - e->begin != bytes || e->begin != cur) abort();
        cur = e->end;
        if (st_find(&f, e->name) != e) abort();  // also: names are unique
        const uint8_t *p = st_data(&f, e);
        if (p < f.bytes + f.data_start || p + bytes > f.bytes + size) abort();
        for (size_t k = 0; k < bytes; k++) g_sink ^= p[k];  // let the sanitizer see every byte
    }
    if (cur != data_size) abort();
    for (int i = 0; i < f.nmeta; i++) {
        if (!f.meta_keys[i] || !f.meta_values[i] || !utf8_ok(f.meta_keys[i]) || !utf8_ok(f.meta_values[i])) abort();
        if (st_meta(&f, f.meta_keys[i]) != f.meta_values[i]) abort();  // also: keys are unique
        if (st_find(&f, f.meta_keys[i]) && !strcmp(f.meta_keys[i], "__metadata__")) abort();
    }
    if (st_find(&f, "__metadata__")) abort();
    st_free(&f);
    return 0;
}
