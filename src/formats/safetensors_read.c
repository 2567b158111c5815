// safetensors_read.c: the strict safetensors reader (st_parse, st_parse_header, st_read, st_read_header,
// st_find, st_data, st_meta, st_free) and the helpers it shares with the writer (st_dtype_size,
// st_shown). It checks the header's meaning on top of the JSON parser in safetensors_json.c: the
// fields of each tensor, unique names, and tensors that tile the data section exactly.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "formats/safetensors_internal.h"

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

const char *st_shown(const char *s, char *buf, size_t len) {
    size_t n = strlen(s), k = n < len - 4 ? n : len - 4;
    while (k < n && k > 0 && ((uint8_t)s[k] & 0xC0) == 0x80) k--;  // cut between characters
    for (size_t i = 0; i < k; i++) buf[i] = ((uint8_t)s[i] < 0x20 || s[i] == 0x7F) ? '?' : s[i];
    strcpy(buf + k, k < n ? "..." : "");
    return buf;
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
    stj_skip_ws(p);
    if (!stj_at(p, '{')) return stj_error(p, "tensor '%s': expected an object, got %s", name, stj_what_is(p));
    p->i++;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    uint64_t v[ST_MAX_DIMS];
    int count;
    char what[128];
    stj_skip_ws(p);
    if (stj_at(p, '}')) p->i++;
    else
        for (;;) {
            size_t mark = p->used;  // field names and the dtype are not kept
            char *field, *dtype;
            if (stj_parse_string(p, &field, "a field name")) return -1;
            if (stj_expect(p, ':', "':' after a field name")) return -1;
            if (!strcmp(field, "dtype")) {
                if (have_dtype++) return stj_error(p, "tensor '%s': duplicate field 'dtype'", name);
                stj_skip_ws(p);
                if (!stj_at(p, '"')) return stj_error(p, "tensor '%s': dtype must be a string, got %s", name, stj_what_is(p));
                if (stj_parse_string(p, &dtype, "a string")) return -1;
                if (!st_dtype_size(dtype)) return stj_error(p, "tensor '%s': unknown dtype '%s'", name, SHOWN(dtype));
                snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
            } else if (!strcmp(field, "shape")) {
                if (have_shape++) return stj_error(p, "tensor '%s': duplicate field 'shape'", name);
                snprintf(what, sizeof what, "tensor '%s': shape", name);
                if (stj_parse_uint_array(p, v, ST_MAX_DIMS, &count, what)) return -1;
                e->ndim = count;
                for (int d = 0; d < count; d++) e->shape[d] = (long)v[d];  // below 2^63: fits
            } else if (!strcmp(field, "data_offsets")) {
                if (have_offsets++) return stj_error(p, "tensor '%s': duplicate field 'data_offsets'", name);
                snprintf(what, sizeof what, "tensor '%s': data_offsets", name);
                if (stj_parse_uint_array(p, v, 2, &count, what)) return -1;
                if (count != 2) return stj_error(p, "%s must be [begin, end], not %d numbers", what, count);
                if (v[0] > v[1])
                    return stj_error(p, "%s [%llu, %llu]: begin is after end", what, (unsigned long long)v[0],
                                (unsigned long long)v[1]);
                e->begin = (size_t)v[0], e->end = (size_t)v[1];
            } else {
                return stj_error(p, "tensor '%s': unknown field '%s' (only dtype, shape and data_offsets)", name,
                            SHOWN(field));
            }
            p->used = mark;
            stj_skip_ws(p);
            if (stj_at(p, '}')) {
                p->i++;
                break;
            }
            if (stj_expect(p, ',', "',' or '}' after a field")) return -1;
        }
    if (!have_dtype || !have_shape || !have_offsets)
        return stj_error(p, "tensor '%s': missing field '%s'", name,
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    size_t bytes = st_dtype_size(e->dtype);
    char shape[200];
    shape_text(e, shape, sizeof shape);
    for (int d = 0; d < e->ndim; d++)
        if (__builtin_mul_overflow(bytes, (size_t)e->shape[d], &bytes))
            return stj_error(p, "tensor '%s': shape %s is too large", name, shape);
    if (e->end - e->begin != bytes)
        return stj_error(p, "tensor '%s': data_offsets [%zu, %zu] span %zu bytes, but %s shape %s needs %zu", name, e->begin,
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
    stj_skip_ws(p);
    if (!stj_at(p, '{')) return stj_error(p, "__metadata__ must be an object of strings, got %s", stj_what_is(p));
    p->i++;
    stj_skip_ws(p);
    if (stj_at(p, '}')) {
        p->i++;
        return 0;
    }
    for (;;) {
        char *key, *value;
        if (stj_parse_string(p, &key, "a metadata key")) return -1;
        if (stj_expect(p, ':', "':' after a metadata key")) return -1;
        stj_skip_ws(p);
        if (!stj_at(p, '"'))
            return stj_error(p, "__metadata__ '%s': the value must be a string, got %s", SHOWN(key), stj_what_is(p));
        if (stj_parse_string(p, &value, "a string")) return -1;
        int c1 = *cap, c2 = *cap;
        if (grow((void **)&f->meta_keys, &c1, f->nmeta + 1, sizeof(char *)) ||
            grow((void **)&f->meta_values, &c2, f->nmeta + 1, sizeof(char *)))
            return stj_error(p, "out of memory reading the metadata");
        *cap = c1;
        f->meta_keys[f->nmeta] = key, f->meta_values[f->nmeta] = value, f->nmeta++;
        stj_skip_ws(p);
        if (stj_at(p, '}')) {
            p->i++;
            return 0;
        }
        if (stj_expect(p, ',', "',' or '}' after a metadata value")) return -1;
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
    if (!stj_at(p, '{')) return stj_error(p, "the header does not start with '{'");
    p->i++;
    int cap = 0, mcap = 0, have_meta = 0;
    stj_skip_ws(p);
    if (stj_at(p, '}')) p->i++;
    else
        for (;;) {
            char *key;
            size_t mark = p->used;
            if (stj_parse_string(p, &key, "a tensor name")) return -1;
            if (stj_expect(p, ':', "':' after a tensor name")) return -1;
            if (!strcmp(key, "__metadata__")) {
                p->used = mark;
                if (have_meta++) return stj_error(p, "duplicate key '__metadata__'");
                if (parse_metadata(p, f, &mcap)) return -1;
            } else {
                if (grow((void **)&f->entries, &cap, f->n + 1, sizeof(StEntry)))
                    return stj_error(p, "out of memory reading the header");
                StEntry *e = &f->entries[f->n++];
                memset(e, 0, sizeof *e);
                e->name = key;
                if (parse_tensor(p, e)) return -1;
            }
            stj_skip_ws(p);
            if (stj_at(p, '}')) {
                p->i++;
                break;
            }
            if (stj_expect(p, ',', "',' or '}' after a tensor")) return -1;
        }
    while (p->i < p->n && p->s[p->i] == ' ') p->i++;  // the padding
    if (p->i < p->n)
        return stj_error(p, "bad header JSON at byte %zu: %s after the header's object (only spaces may follow it)", p->i,
                    stj_what_is(p));
    return 0;
}

// Check what the JSON cannot say: unique names, and tensors that tile the data section.
static int check_layout(Parser *p, StFile *f) {
    int most = f->n > f->nmeta ? f->n : f->nmeta;
    Named *v = malloc(sizeof(Named) * (size_t)(most ? most : 1));
    if (!v) return stj_error(p, "out of memory reading the header");
    for (int i = 0; i < f->nmeta; i++) v[i] = (Named){f->meta_keys[i], i};
    const char *dup = first_duplicate(v, f->nmeta);
    if (dup) {
        free(v);
        return stj_error(p, "__metadata__: duplicate key '%s'", SHOWN(dup));
    }
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    dup = first_duplicate(v, f->n);
    if (dup) {
        free(v);
        return stj_error(p, "duplicate tensor name '%s'", SHOWN(dup));
    }
    if (f->n > 1) qsort(f->entries, (size_t)f->n, sizeof(StEntry), cmp_entry);  // entries is NULL when n is 0
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    qsort(v, (size_t)f->n, sizeof *v, cmp_named);
    f->by_name = malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
    if (!f->by_name) {
        free(v);
        return stj_error(p, "out of memory reading the header");
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = v[i].idx;
    free(v);

    size_t data_size = f->size - f->data_start, cur = 0;
    const StEntry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        if (e->begin > cur)
            return stj_error(p, "gap of %zu bytes in the data section before tensor '%s' (bytes %zu..%zu)", e->begin - cur,
                        SHOWN(e->name), e->begin, e->end);
        if (e->begin < cur)
            return stj_error(p, "tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)", SHOWN(e->name),
                        e->begin, e->end, SHOWN(prev->name), prev->begin, prev->end);
        if (e->end > data_size)
            return stj_error(p, "tensor '%s' (bytes %zu..%zu) goes beyond the data section, which has %zu bytes",
                        SHOWN(e->name), e->begin, e->end, data_size);
        cur = e->end, prev = e;
    }
    if (cur < data_size)
        return stj_error(p, "%zu bytes in the data section after the last tensor (the tensors cover %zu of %zu)",
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
        stj_error(&p, "the file has %zu bytes, fewer than the 8 of the header length", len);
        goto fail;
    }
    if (have < 8 || have > len) {
        stj_error(&p, "internal error: %zu bytes of a file of %zu given", have, len);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)bytes[i] << (8 * i);
    if (n < 2) {
        stj_error(&p, "header length %llu is too small (at least 2, for '{}')", (unsigned long long)n);
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        stj_error(&p, "header length %llu exceeds the limit of %zu bytes", (unsigned long long)n, ST_MAX_HEADER);
        goto fail;
    }
    if (n > len - 8) {
        stj_error(&p, "header length %llu goes beyond the end of the file (%zu bytes)", (unsigned long long)n, len);
        goto fail;
    }
    if (n > have - 8) {
        stj_error(&p, "only %zu of the header's %llu bytes were read", have - 8, (unsigned long long)n);
        goto fail;
    }
    f->data_start = 8 + (size_t)n;
    p.s = bytes + 8, p.n = (size_t)n, p.cap = (size_t)n;
    p.arena = f->strings = malloc((size_t)n);
    if (!f->strings) {
        stj_error(&p, "out of memory for a header of %llu bytes", (unsigned long long)n);
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
    if (fc_pread_all(fd, len8, want, 0)) {
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
    if (fc_pread_all(fd, head, want, 0)) {
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
