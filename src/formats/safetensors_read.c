// safetensors_read.c: the strict safetensors reader (st_parse, st_parse_header, st_read, st_read_header,
// st_find, st_data, st_meta, st_free) and the helpers it shares with the writer (st_dtype_size,
// st_shown, st_valid_utf8). On top of the header's JSON (safetensors_json.c) it checks what the JSON
// cannot say: unique names, and tensors that tile the data section exactly.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "formats/safetensors_internal.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4}, {"F16", 2},
    {"BF16", 2}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
    {"F8_E4M3", 1}, {"F8_E5M2", 1},  // (a single-file checkpoint's fp8 UNet beside the VAE read from it)
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

int st_valid_utf8(const char *s) { return s && json_valid_utf8(s); }

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

// Names that must be unique: the metadata keys and the tensor names. Then the entries are put in data
// order, by_name indexes them by name (for st_find) and meta_by_key the metadata (for st_meta).
static int check_names(StFile *f, char *err, size_t errlen) {
    int most = f->n > f->nmeta ? f->n : f->nmeta;
    Named *v = malloc(sizeof(Named) * (size_t)(most ? most : 1));
    if (!v) return fc_errf(err, errlen, "out of memory reading the header");
    for (int i = 0; i < f->nmeta; i++) v[i] = (Named){f->meta_keys[i], i};
    const char *dup = first_duplicate(v, f->nmeta);
    if (dup) {
        free(v);
        return fc_errf(err, errlen, "__metadata__: duplicate key '%s'", SHOWN(dup));
    }
    f->meta_by_key = malloc(sizeof(int) * (size_t)(f->nmeta ? f->nmeta : 1));
    if (!f->meta_by_key) {
        free(v);
        return fc_errf(err, errlen, "out of memory reading the header");
    }
    for (int i = 0; i < f->nmeta; i++) f->meta_by_key[i] = v[i].idx;  // v is sorted by key now
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    dup = first_duplicate(v, f->n);
    if (dup) {
        free(v);
        return fc_errf(err, errlen, "duplicate tensor name '%s'", SHOWN(dup));
    }
    if (f->n > 1) qsort(f->entries, (size_t)f->n, sizeof(StEntry), cmp_entry);  // entries is NULL when n is 0
    for (int i = 0; i < f->n; i++) v[i] = (Named){f->entries[i].name, i};
    qsort(v, (size_t)f->n, sizeof *v, cmp_named);
    f->by_name = malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
    if (!f->by_name) {
        free(v);
        return fc_errf(err, errlen, "out of memory reading the header");
    }
    for (int i = 0; i < f->n; i++) f->by_name[i] = v[i].idx;
    free(v);
    return 0;
}

// The entries, in data order, must tile the data section exactly.
static int check_tiling(const StFile *f, char *err, size_t errlen) {
    size_t data_size = f->size - f->data_start, cur = 0;
    const StEntry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        if (e->begin > cur)
            return fc_errf(err, errlen, "gap of %zu bytes in the data section before tensor '%s' (bytes %zu..%zu)",
                           e->begin - cur, SHOWN(e->name), e->begin, e->end);
        if (e->begin < cur)
            return fc_errf(err, errlen, "tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (bytes %zu..%zu)",
                           SHOWN(e->name), e->begin, e->end, SHOWN(prev->name), prev->begin, prev->end);
        if (e->end > data_size)
            return fc_errf(err, errlen,
                           "tensor '%s' (bytes %zu..%zu) goes beyond the data section, which has %zu bytes",
                           SHOWN(e->name), e->begin, e->end, data_size);
        cur = e->end, prev = e;
    }
    if (cur < data_size)
        return fc_errf(err, errlen,
                       "%zu bytes in the data section after the last tensor (the tensors cover %zu of %zu)",
                       data_size - cur, cur, data_size);
    return 0;
}

// The header length in the first 8 of `have` bytes of a file of `len` bytes, checked against both.
static int header_length(const uint8_t *bytes, size_t have, size_t len, size_t *out, char *err, size_t errlen) {
    if (len < 8) return fc_errf(err, errlen, "the file has %zu bytes, fewer than the 8 of the header length", len);
    if (have < 8 || have > len)
        return fc_errf(err, errlen, "internal error: %zu bytes of a file of %zu given", have, len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)bytes[i] << (8 * i);
    // a length no file could have and no JSON after it: another kind of file (an image, a config, a .pth)
    if ((n > ST_MAX_HEADER || n > len - 8) && have > 8 && bytes[8] != '{')
        return fc_errf(err, errlen, "not a safetensors file (no header length and JSON object at its start)");
    if (n < 2)
        return fc_errf(err, errlen, "header length %llu is too small (at least 2, for '{}')", (unsigned long long)n);
    if (n > ST_MAX_HEADER)
        return fc_errf(err, errlen, "header length %llu exceeds the limit of %zu bytes", (unsigned long long)n,
                       ST_MAX_HEADER);
    if (n > len - 8)
        return fc_errf(err, errlen, "header length %llu goes beyond the end of the file (%zu bytes)",
                       (unsigned long long)n, len);
    if (n > have - 8)
        return fc_errf(err, errlen, "only %zu of the header's %llu bytes were read", have - 8, (unsigned long long)n);
    *out = (size_t)n;
    return 0;
}

// Parse `bytes` (`have` of them, malloc'ed) into f, which takes them over whatever happens. They are
// the first `have` bytes of a file of `file_size` bytes: the whole file, or (have < file_size) at
// least its header, which is then checked against the file's size without its data.
static int parse_prefix(StFile *f, uint8_t *bytes, size_t have, size_t file_size, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->bytes = bytes, f->size = file_size;
    size_t n = 0;
    if (header_length(bytes, have, file_size, &n, err, errlen)) goto fail;
    f->data_start = 8 + n;
    f->strings = malloc(n);
    if (!f->strings) {
        fc_errf(err, errlen, "out of memory for a header of %zu bytes", n);
        goto fail;
    }
    JsonReader r = {.s = bytes + 8, .n = n, .arena = f->strings, .cap = n, .err = err, .errlen = errlen,
                    .syntax_name = "header JSON", .end_name = "the end of the header"};
    if (st_parse_header_json(&r, f) || check_names(f, err, errlen) || check_tiling(f, err, errlen)) goto fail;
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
    struct stat st;
    int fd = fc_open_regular(path, &st, err, errlen);  // never blocks on a FIFO named like a checkpoint
    if (fd < 0) return -1;
    FILE *in = fdopen(fd, "rb");
    if (!in) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
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


int st_looks_like_safetensors(const uint8_t *head, size_t n) { return n >= 9 && !head[6] && !head[7] && head[8] == '{'; }

int st_read_header(const char *path, StFile *f, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    struct stat st;
    int fd = fc_open_regular(path, &st, err, errlen);  // never blocks on a FIFO named like a shard
    if (fd < 0) return -1;
    size_t size = (size_t)st.st_size, want = size < 8 ? size : 8;
    uint8_t len8[8] = {0};
    if (fc_pread_all(fd, len8, want, 0)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)len8[i] << (8 * i);
    // a header length outside the rules is refused by the parser from these 8 bytes and the next, which
    // tells another kind of file (a .pth, an image: no '{' there) from a damaged safetensors
    if (size >= 8 && n >= 2 && n <= ST_MAX_HEADER && n <= size - 8) want = 8 + (size_t)n;
    else if (size > 8) want = 9;
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
    int lo = 0, hi = f->nmeta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, i = f->meta_by_key[mid];
        int c = strcmp(key, f->meta_keys[i]);
        if (!c) return f->meta_values[i];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

void st_free(StFile *f) {
    free(f->bytes);
    free(f->entries);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->by_name);
    free(f->meta_by_key);
    free(f->strings);
    memset(f, 0, sizeof *f);
}

// ----------------------------------------------------------------------------
// a tensor at a time, for files too large to read whole (a checkpoint of the 24 GB preset is 8.9 GiB)

int st_open_data(const char *path, const StFile *f, char *err, size_t errlen) {
    struct stat sb;
    int fd = fc_open_regular(path, &sb, err, errlen);
    if (fd >= 0 && (uint64_t)sb.st_size != f->size) {  // the size the header was parsed against
        snprintf(err, errlen, "%s: the file changed while it was read", path);
        close(fd);
        return -1;
    }
    return fd;
}

void *st_entry_buffer(const StFile *f, const char *path, char *err, size_t errlen) {
    size_t largest = 1;
    for (int i = 0; i < f->n; i++)
        if (f->entries[i].end - f->entries[i].begin > largest) largest = f->entries[i].end - f->entries[i].begin;
    void *buf = malloc(largest);
    if (!buf) snprintf(err, errlen, "%s: out of memory for a tensor of %zu bytes", path, largest);
    return buf;
}

int st_read_entry(int fd, const StFile *f, const StEntry *e, void *buf, const char *path, char *err,
                  size_t errlen) {
    if (fc_pread_all(fd, buf, e->end - e->begin, (uint64_t)f->data_start + e->begin))
        return fc_errf(err, errlen, "%s: read error (or the file changed while it was read): %s", path,
                       strerror(errno));
    return 0;
}

int st_data_unchanged(int fd, const StFile *f, const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (!fstat(fd, &sb) && (uint64_t)sb.st_size == f->size) return 0;
    return fc_errf(err, errlen, "%s: the file changed while it was read", path);
}
