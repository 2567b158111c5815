// safetensors_json.c: reading a safetensors header's JSON (with the strict reader, json.c) into a
// file's entries and metadata: exactly an object of tensor objects (dtype, shape, data_offsets) and at
// most one "__metadata__" object of strings. What the JSON cannot say (unique names, tensors that
// tile the data section) is checked in safetensors_read.c.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors_internal.h"

#define ST_MAX_INT ((UINT64_C(1) << 63) - 1)  // the largest integer a header may hold

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

// A well-formed number that is no valid entry of the array `what`: its text (cut) and why.
static int refuse_number(JsonReader *r, const char *what, size_t start, int kind) {
    size_t len = r->i - start;
    const char *why = kind == JSON_UINT_NEGATIVE ? "is negative" : kind == JSON_UINT_FRACTION ? "is not an integer"
                                                                                               : "is too large";
    return json_fail(r, "%s: %.*s%s %s", what, (int)(len < 24 ? len : 24), (const char *)r->s + start,
                     len > 24 ? "..." : "", why);
}

// Read an array of at most `max` non-negative integers below 2^63 into v; *count gets how many. The
// errors name `what` (e.g. "tensor 'x': shape").
static int uint_array(JsonReader *r, uint64_t *v, int max, int *count, const char *what) {
    json_skip_ws(r);
    if (!json_at(r, '[')) return json_fail(r, "%s must be an array of integers, got %s", what, json_what_is(r));
    r->i++;
    *count = 0;
    int more = json_first_item(r, ']');
    while (more > 0) {
        if (*count == max) return json_fail(r, "%s has more than %d entries", what, max);
        json_skip_ws(r);
        if (!json_at_number(r)) return json_fail(r, "%s must hold integers, got %s", what, json_what_is(r));
        size_t start;
        int kind = json_uint(r, ST_MAX_INT, &v[*count], &start);
        if (kind < 0) return -1;
        if (kind != JSON_UINT_OK) return refuse_number(r, what, start, kind);
        ++*count;
        more = json_next_item(r, ']', "',' or ']' in an array");
    }
    return more;
}

// ---------------------------------------------------------------------------------------------
// a tensor's object

static void shape_text(const StEntry *e, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < e->ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%ld", d ? ", " : "", e->shape[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

static int tensor_dtype(JsonReader *r, StEntry *e, const char *name) {
    char *dtype;
    json_skip_ws(r);
    if (!json_at(r, '"')) return json_fail(r, "tensor '%s': dtype must be a string, got %s", name, json_what_is(r));
    if (json_string(r, &dtype, "a string")) return -1;
    if (!st_dtype_size(dtype)) return json_fail(r, "tensor '%s': unknown dtype '%s'", name, SHOWN(dtype));
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    return 0;
}

static int tensor_shape(JsonReader *r, StEntry *e, const char *name) {
    uint64_t v[ST_MAX_DIMS];
    char what[128];
    snprintf(what, sizeof what, "tensor '%s': shape", name);
    if (uint_array(r, v, ST_MAX_DIMS, &e->ndim, what)) return -1;
    for (int d = 0; d < e->ndim; d++) e->shape[d] = (long)v[d];  // below 2^63: fits
    return 0;
}

static int tensor_offsets(JsonReader *r, StEntry *e, const char *name) {
    uint64_t v[2];
    int count;
    char what[128];
    snprintf(what, sizeof what, "tensor '%s': data_offsets", name);
    if (uint_array(r, v, 2, &count, what)) return -1;
    if (count != 2) return json_fail(r, "%s must be [begin, end], not %d numbers", what, count);
    if (v[0] > v[1])
        return json_fail(r, "%s [%llu, %llu]: begin is after end", what, (unsigned long long)v[0],
                         (unsigned long long)v[1]);
    e->begin = (size_t)v[0], e->end = (size_t)v[1];
    return 0;
}

// The fields of a tensor's object, each read by its own function.
static const struct {
    const char *name;
    int (*read)(JsonReader *r, StEntry *e, const char *tensor);
} TENSOR_FIELDS[3] = {{"dtype", tensor_dtype}, {"shape", tensor_shape}, {"data_offsets", tensor_offsets}};

// The fields were all there: the shape must fit in size_t bytes and take exactly the data_offsets' span.
static int check_tensor_size(JsonReader *r, const StEntry *e, const char *name) {
    size_t bytes = st_dtype_size(e->dtype);
    char shape[200];
    shape_text(e, shape, sizeof shape);
    int empty = 0;  // a dimension of 0: no bytes, however large the others (the spec counts elements first)
    for (int d = 0; d < e->ndim; d++) empty |= e->shape[d] == 0;
    for (int d = 0; d < e->ndim && !empty; d++)
        if (__builtin_mul_overflow(bytes, (size_t)e->shape[d], &bytes))
            return json_fail(r, "tensor '%s': shape %s is too large", name, shape);
    if (empty) bytes = 0;
    if (e->end - e->begin != bytes)
        return json_fail(r, "tensor '%s': data_offsets [%zu, %zu] span %zu bytes, but %s shape %s needs %zu", name,
                         e->begin, e->end, e->end - e->begin, e->dtype, shape, bytes);
    return 0;
}

// Read the object describing tensor e (whose name is set): exactly dtype, shape and data_offsets.
static int parse_tensor(JsonReader *r, StEntry *e) {
    const char *name = SHOWN(e->name);
    json_skip_ws(r);
    if (!json_at(r, '{')) return json_fail(r, "tensor '%s': expected an object, got %s", name, json_what_is(r));
    r->i++;
    int seen[3] = {0};
    int more = json_first_item(r, '}');
    while (more > 0) {
        size_t mark = r->used;  // field names and the dtype are not kept
        char *field;
        if (json_string(r, &field, "a field name") || json_expect(r, ':', "':' after a field name")) return -1;
        int k = 0;
        while (k < 3 && strcmp(field, TENSOR_FIELDS[k].name)) k++;
        if (k == 3)
            return json_fail(r, "tensor '%s': unknown field '%s' (only dtype, shape and data_offsets)", name,
                             SHOWN(field));
        if (seen[k]++) return json_fail(r, "tensor '%s': duplicate field '%s'", name, TENSOR_FIELDS[k].name);
        if (TENSOR_FIELDS[k].read(r, e, name)) return -1;
        r->used = mark;
        more = json_next_item(r, '}', "',' or '}' after a field");
    }
    if (more < 0) return -1;
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return json_fail(r, "tensor '%s': missing field '%s'", name, TENSOR_FIELDS[k].name);
    return check_tensor_size(r, e, name);
}

// ---------------------------------------------------------------------------------------------
// the metadata and the whole header

static int parse_metadata(JsonReader *r, StFile *f, int *cap) {
    json_skip_ws(r);
    if (!json_at(r, '{')) return json_fail(r, "__metadata__ must be an object of strings, got %s", json_what_is(r));
    r->i++;
    int more = json_first_item(r, '}');
    while (more > 0) {
        char *key, *value;
        if (json_string(r, &key, "a metadata key") || json_expect(r, ':', "':' after a metadata key")) return -1;
        json_skip_ws(r);
        if (!json_at(r, '"'))
            return json_fail(r, "__metadata__ '%s': the value must be a string, got %s", SHOWN(key), json_what_is(r));
        if (json_string(r, &value, "a string")) return -1;
        int c1 = *cap, c2 = *cap;
        if (grow((void **)&f->meta_keys, &c1, f->nmeta + 1, sizeof(char *)) ||
            grow((void **)&f->meta_values, &c2, f->nmeta + 1, sizeof(char *)))
            return json_fail(r, "out of memory reading the metadata");
        *cap = c1;
        f->meta_keys[f->nmeta] = key, f->meta_values[f->nmeta] = value, f->nmeta++;
        more = json_next_item(r, '}', "',' or '}' after a metadata value");
    }
    return more;
}

// One "name": value of the header's object: the metadata, or a tensor.
static int parse_header_member(JsonReader *r, StFile *f, int *cap, int *mcap, int *have_meta) {
    char *key;
    size_t mark = r->used;
    if (json_string(r, &key, "a tensor name") || json_expect(r, ':', "':' after a tensor name")) return -1;
    if (!strcmp(key, "__metadata__")) {
        r->used = mark;
        if ((*have_meta)++) return json_fail(r, "duplicate key '__metadata__'");
        return parse_metadata(r, f, mcap);
    }
    if (grow((void **)&f->entries, cap, f->n + 1, sizeof(StEntry)))
        return json_fail(r, "out of memory reading the header");
    StEntry *e = &f->entries[f->n++];
    memset(e, 0, sizeof *e);
    e->name = key;
    return parse_tensor(r, e);
}

int st_parse_header_json(JsonReader *r, StFile *f) {
    if (!json_at(r, '{')) return json_fail(r, "the header does not start with '{'");
    r->i++;
    int cap = 0, mcap = 0, have_meta = 0;
    int more = json_first_item(r, '}');
    while (more > 0) {
        if (parse_header_member(r, f, &cap, &mcap, &have_meta)) return -1;
        more = json_next_item(r, '}', "',' or '}' after a tensor");
    }
    if (more < 0) return -1;
    while (r->i < r->n && r->s[r->i] == ' ') r->i++;  // the padding
    if (r->i < r->n)
        return json_fail_at(r, r->i, "%s after the header's object (only spaces may follow it)", json_what_is(r));
    return 0;
}
