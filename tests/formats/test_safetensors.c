// test_safetensors.c: the safetensors writer and strict reader (a round trip, then malformed files
// built in memory, each of which must be refused with a line naming the problem; failed writes
// leave nothing behind), the JSON reader's own edges (integer bounds, plain escapes, error lines,
// UTF-8) and the non-dying config reader.
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "base/config.h"
#include "base/paths.h"
#include "formats/json.h"
#include "formats/safetensors.h"

static char g_dir[256];

// Files in `dir` whose name contains ".tmp-" (what a failed write must not leave behind).
static int temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static void write_text_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f)) abort();
}

// ---- the round trip ----

static void test_roundtrip(void) {
    uint8_t mask[5] = {1, 0, 255, 7, 9};
    float w[6] = {1.5f, -2.25f, 3, 0, -0.0f, 1e-30f};
    int32_t idx[3] = {-1, 0, 2147483647};
    float scalar = 42;
    uint8_t flags[3] = {1, 1, 0};
    // U8 first and an odd byte count: the writer must still put the wider tensors first
    StTensor t[] = {
        {"mask", "U8", 1, {5}, mask},      {"w", "F32", 2, {2, 3}, w},   {"idx", "I32", 1, {3}, idx},
        {"scalar", "F32", 0, {0}, &scalar}, {"empty", "F32", 2, {0, 4}, w}, {"flags", "U8", 2, {1, 3}, flags},
    };
    int n = sizeof t / sizeof t[0];
    StMeta meta[] = {
        {"quote\"and\\backslash", "line\nbreak\ttab\rcr\x01\x1f ctl"},
        {"unicode", "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93 \xf0\x9d\x84\x9e"},
        {"empty", ""},
    };
    int nmeta = sizeof meta / sizeof meta[0];
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/round.safetensors", g_dir);
    int rc = st_write(path, t, n, meta, nmeta, err, sizeof err);
    check(rc == 0, "st_write", "%s", rc ? err : "6 tensors (F32, I32, U8, a scalar, an empty one), 3 metadata entries");

    StFile f;
    rc = st_read(path, &f, err, sizeof err);
    check(rc == 0 && f.n == n, "st_read_what_st_write_wrote", "%s", rc ? err : "accepted");
    if (rc || f.n != n) return;
    int same = f.n == n, bytes_checked = 0;
    char why[256] = "";
    for (int i = 0; i < n && same; i++) {
        const StEntry *e = st_find(&f, t[i].name);
        size_t bytes = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) bytes *= (size_t)t[i].shape[d];
        if (!e || strcmp(e->dtype, t[i].dtype) || e->ndim != t[i].ndim || e->end - e->begin != bytes) {
            snprintf(why, sizeof why, "tensor %s: missing or a different dtype, rank or size", t[i].name);
            same = 0;
            break;
        }
        for (int d = 0; d < e->ndim; d++) same &= e->shape[d] == t[i].shape[d];
        if (bytes && memcmp(st_data(&f, e), t[i].data, bytes)) same = 0;
        if (!same) snprintf(why, sizeof why, "tensor %s: different shape or bytes", t[i].name);
        bytes_checked += (int)bytes;
    }
    check(same, "st_read_tensors_match", "%s", same ? "every name, dtype, shape and data byte" : why);
    if (same) printf("  (%d data bytes compared)\n", bytes_checked);
    int meta_ok = f.nmeta == nmeta;
    for (int i = 0; i < nmeta && meta_ok; i++) {
        const char *v = st_meta(&f, meta[i].key);
        meta_ok = v && !strcmp(v, meta[i].value) && !strcmp(f.meta_keys[i], meta[i].key);
    }
    check(meta_ok, "st_read_metadata_match", "%d entries with quotes, backslashes, control characters and UTF-8",
          f.nmeta);
    check(!st_find(&f, "nope") && !st_meta(&f, "nope"), "st_find_unknown_is_null", "NULL for an unknown name");

    // data order: wider dtypes first, every tensor aligned to its element size in the file and in memory
    int order_ok = 1, aligned = 1;
    for (int i = 0; i < f.n; i++) {
        size_t size = st_dtype_size(f.entries[i].dtype);
        if (i && size > st_dtype_size(f.entries[i - 1].dtype)) order_ok = 0;
        if ((f.data_start + f.entries[i].begin) % size || (uintptr_t)st_data(&f, &f.entries[i]) % size) aligned = 0;
    }
    int u8_last = !strcmp(f.entries[f.n - 1].dtype, "U8") && !strcmp(f.entries[f.n - 2].dtype, "U8");
    check(order_ok && u8_last, "st_write_wider_first", "data order %s %s %s %s %s %s", f.entries[0].name,
          f.entries[1].name, f.entries[2].name, f.entries[3].name, f.entries[4].name, f.entries[5].name);
    check(aligned, "st_write_aligned", "header %zu bytes; every offset a multiple of its dtype size",
          f.data_start - 8);

    // the raw bytes parse to the same thing, and the file is exactly header + data
    size_t len;
    uint8_t *raw = test_read_file(path, &len);
    StFile g;
    rc = st_parse(&g, raw, len, err, sizeof err);
    int eq = rc == 0 && g.n == f.n && g.size == f.size && !memcmp(g.bytes, f.bytes, f.size);
    check(eq, "st_parse_file_bytes", "%s", rc ? err : "same entries and bytes as st_read");
    size_t total = 0;
    for (int i = 0; i < f.n; i++) total += f.entries[i].end - f.entries[i].begin;
    check(f.data_start % 8 == 0 && f.data_start + total == len, "st_write_layout", "8 + %zu + %zu == %zu",
          f.data_start - 8, total, len);
    free(raw);
    st_free(&g);
    st_free(&f);
    st_free(&f);  // harmless twice
}

// ---- malformed files, built in memory ----

// An in-memory file: 8-byte length `hlen` (the header's own length when hlen is -1), the header, the data.
static uint8_t *build(const char *header, long long hlen, size_t ndata, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + ndata;
    uint8_t *b = fc_malloc(*len);
    uint64_t n = hlen < 0 ? h : (uint64_t)hlen;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < ndata; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

// bytes (len of them) must be refused with a one-line message containing `want`.
static void reject_bytes(const char *name, const uint8_t *bytes, size_t len, const char *want) {
    StFile f;
    char err[512] = "";
    int rc = st_parse(&f, bytes, len, err, sizeof err);
    int ok = rc == -1 && strstr(err, want) && !strchr(err, '\n') && f.n == 0 && !f.bytes;
    char label[96];
    snprintf(label, sizeof label, "st_rejects_%s", name);
    if (rc == 0) check(0, label, "accepted (wanted an error with '%s')", want);
    else if (!ok) check(0, label, "message '%s' lacks '%s' or is not one line", err, want);
    else check(1, label, "%s", err);
    st_free(&f);
}

static void reject(const char *name, const char *header, size_t ndata, const char *want) {
    size_t len;
    uint8_t *b = build(header, -1, ndata, &len);
    reject_bytes(name, b, len, want);
    free(b);
}

static void accept(const char *name, const char *header, size_t ndata, const char *find) {
    size_t len;
    uint8_t *b = build(header, -1, ndata, &len);
    StFile f;
    char err[512] = "", label[96];
    int rc = st_parse(&f, b, len, err, sizeof err);
    snprintf(label, sizeof label, "st_accepts_%s", name);
    if (rc) check(0, label, "%s", err);
    else if (find && !st_find(&f, find)) check(0, label, "no tensor '%s' among %d", find, f.n);
    else check(1, label, "%d tensors, %d metadata entries, %zu data bytes", f.n, f.nmeta, f.size - f.data_start);
    st_free(&f);
    free(b);
}

#define A_OK "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define B_OK "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}"
#define META_OK "\"__metadata__\":{\"k\":\"v\"}"

#define GOOD "{" META_OK "," A_OK "," B_OK "}   "

// Well-formed files, then cut ones and ones whose header length is wrong.
static void test_lengths(void) {
    accept("valid", GOOD, 11, "b");
    accept("empty_header", "{}", 0, NULL);
    accept("zero_size_tensors",
           "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}," A_OK
           ",\"y\":{\"dtype\":\"BOOL\",\"shape\":[5,0],\"data_offsets\":[8,8]}}",
           8, "y");
    // an empty tensor whose other dimension alone would overflow a size (the spec counts elements first)
    accept("zero_size_huge_dimension",
           "{\"e\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,0],\"data_offsets\":[0,0]}," A_OK "}", 8, "e");
    // fp8 tensors (a single-file checkpoint's UNet beside the autoencoder read from it): sized, not refused
    accept("fp8_dtypes",
           "{\"f\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
           "\"g\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8, "g");
    accept("escapes_and_surrogates",
           "{\"\\u00e9\\ud834\\udd1e\\n\\\"/\\/\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
           "\xc3\xa9\xf0\x9d\x84\x9e\n\"//");
    accept("json_whitespace", "{ \"a\" :\t{ \"shape\" : [ 2 ] ,\r\n\"data_offsets\":[0 , 8], \"dtype\":\"F32\" } }", 8,
           "a");

    // truncated at several points
    size_t len;
    uint8_t *b = build(GOOD, -1, 11, &len);
    size_t hlen = len - 8 - 11;
    size_t cuts[] = {0, 3, 7, 8, 8 + hlen / 2, 8 + hlen, len - 1};
    const char *cut_want[] = {"fewer than the 8", "fewer than the 8", "fewer than the 8", "beyond the end of the file",
                              "beyond the end of the file", "goes beyond the data section",
                              "goes beyond the data section"};
    for (int i = 0; i < 7; i++) {
        char name[64];
        snprintf(name, sizeof name, "truncated_to_%zu_of_%zu", cuts[i], len);
        reject_bytes(name, b, cuts[i], cut_want[i]);
    }
    free(b);
    // header lengths
    b = build(GOOD, (long long)ST_MAX_HEADER + 1, 11, &len);
    reject_bytes("header_length_over_limit", b, len, "exceeds the limit");
    free(b);
    b = build(GOOD, (long long)hlen + 12, 11, &len);
    reject_bytes("header_length_beyond_file", b, len, "beyond the end of the file");
    free(b);
    b = build(GOOD, 1, 11, &len);
    reject_bytes("header_length_1", b, len, "too small");
    free(b);
    // another kind of file: a JPEG's first bytes, a config's text
    static const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00};
    reject_bytes("a_jpeg", jpeg, sizeof jpeg, "not a safetensors file");
    static const char conf[] = "# the tiny starter\nrole = starter\n";
    reject_bytes("a_config", (const uint8_t *)conf, sizeof conf - 1, "not a safetensors file");
    b = build(GOOD, -1, 11, &len);
    b[7] = 0x80;  // 2^63 and more
    reject_bytes("header_length_huge", b, len, "exceeds the limit");
    free(b);

    // the header alone: st_parse_header given fewer bytes than the header's length refuses them (it
    // must not read past what it was given); st_read_header reads a file that is only a header
    b = build(GOOD, -1, 11, &len);
    StFile f;
    char err[512] = "";
    int rc = st_parse_header(&f, b, 8 + hlen - 4, len, err, sizeof err);
    check(rc == -1 && strstr(err, "only") && strstr(err, "bytes were read"), "st_header_cut_short",
          "%zu of the header's %zu bytes given: %s", hlen - 4, hlen, rc ? err : "accepted");
    st_free(&f);
    rc = st_parse_header(&f, b, 8 + hlen, len, err, sizeof err);
    int whole = rc == 0 && f.n == 2 && st_find(&f, "b") && f.size == len;
    check(whole, "st_header_whole", "the whole header and no data bytes: %s", rc ? err : "2 tensors, the file's size");
    st_free(&f);
    free(b);
    char path[300];
    snprintf(path, sizeof path, "%s/header_only.safetensors", g_dir);
    b = build("{\"__metadata__\":{\"k\":\"v\"}}", -1, 0, &len);
    rc = st_write_bytes(path, b, len, err, sizeof err);
    if (!rc) rc = st_read_header(path, &f, err, sizeof err);
    check(rc == 0 && f.n == 0 && st_meta(&f, "k") && !strcmp(st_meta(&f, "k"), "v"), "st_read_header_only",
          "a file of %zu bytes that is only its header: %s", len, rc ? err : "read, its metadata found");
    st_free(&f);
    free(b);
    // another kind of file read by its header alone: said as st_read says it (not its first 8 bytes taken
    // for a length), a PyTorch .pth (a zip archive) as an image
    static const uint8_t pth[] = {'P', 'K', 3, 4, 0, 0, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    snprintf(path, sizeof path, "%s/weights.pth", g_dir);
    rc = st_write_bytes(path, pth, sizeof pth, err, sizeof err);
    if (!rc) rc = st_read_header(path, &f, err, sizeof err) == 0 ? -2 : 0;
    check(rc == 0 && strstr(err, "weights.pth: not a safetensors file"), "st_read_header_other_kind", "%s",
          rc == -2 ? "accepted" : err);
    st_free(&f);
}

// Text that is no JSON, or not the JSON of a header.
static void test_bad_json(void) {
    // bad JSON
    reject("json_missing_colon", "{\"a\" {}}", 0, "expected ':'");
    reject("json_unterminated_string", "{\"a", 0, "unterminated string");
    reject("json_trailing_comma", "{" A_OK ",}", 8, "expected a tensor name");
    reject("json_not_an_object", "[1,2]", 0, "does not start with '{'");
    reject("json_leading_space", " {}", 0, "does not start with '{'");
    reject("json_unclosed", "{" A_OK, 8, "expected ',' or '}'");
    reject("json_garbage_after", "{" A_OK "}x", 8, "only spaces may follow");
    reject("json_newline_after", "{" A_OK "}\n", 8, "only spaces may follow");
    reject("json_second_object", "{" A_OK "} {}", 8, "only spaces may follow");
    reject("json_control_char", "{\"a\tb\":{}}", 0, "control character 0x09");
    reject("json_bad_escape", "{\"a\\x\":{}}", 0, "invalid escape '\\x'");
    reject("json_short_unicode_escape", "{\"a\\u12\":{}}", 0, "4 hex digits");
    reject("json_lone_high_surrogate", "{\"\\ud800x\":{}}", 0, "unpaired high surrogate");
    reject("json_lone_low_surrogate", "{\"\\udc00\":{}}", 0, "unpaired low surrogate");
    reject("json_nul_escape", "{\"a\\u0000b\":{}}", 0, "\\u0000");
    reject("json_invalid_utf8", "{\"a\xff\":{}}", 0, "invalid UTF-8");
    reject("json_overlong_utf8", "{\"a\xc0\xaf\":{}}", 0, "invalid UTF-8");
    reject("json_utf8_surrogate", "{\"a\xed\xa0\x80\":{}}", 0, "invalid UTF-8");
    reject("json_utf8_beyond_10ffff", "{\"a\xf4\x90\x80\x80\":{}}", 0, "invalid UTF-8");
    reject("json_high_surrogate_then_non_low", "{\"\\ud800\\ue000\":{}}", 0, "unpaired high surrogate");
    // a high surrogate followed by an escape below the low range (\u0041, 'A') pairs with nothing
    reject("json_high_surrogate_then_ascii", "{\"\\ud800\\u0041\":{}}", 0, "unpaired high surrogate");
    // 0x1f, the last control character: below 0x20 all must be escaped, not only those below 0x1f
    reject("json_control_char_1f", "{\"a\x1f" "b\":{}}", 0, "control character 0x1f");
    reject("json_true", "{\"a\":{\"dtype\":true}}", 0, "dtype must be a string, got true");
    reject("json_null_tensor", "{\"a\":null}", 0, "tensor 'a': expected an object, got null");
    reject("json_nested_array", "{\"a\":{\"shape\":[[2]]}}", 0, "shape must hold integers, got an array");
    reject("json_leading_zero", "{\"a\":{\"shape\":[02]}}", 0, "leading zero");
    reject("json_bad_number", "{\"a\":{\"shape\":[2.]}}", 0, "malformed number");
    reject("json_bare_minus", "{\"a\":{\"shape\":[-]}}", 0, "expected a non-negative integer");
    reject("json_number_key", "{1:{}}", 0, "expected a tensor name, got a number");
}

// A header of one tensor 'a' whose object holds the fields given as JSON text (NULL: left out), in this order.
typedef struct {
    const char *name, *dtype, *shape, *offsets;
    size_t ndata;
    const char *want;
} TensorCase;

static void reject_tensor(const TensorCase *c) {
    const char *fields[3] = {"dtype", "shape", "data_offsets"}, *values[3] = {c->dtype, c->shape, c->offsets};
    char header[512];
    size_t used = (size_t)snprintf(header, sizeof header, "{\"a\":{");
    const char *sep = "";
    for (int k = 0; k < 3; k++)
        if (values[k]) {
            used += (size_t)snprintf(header + used, sizeof header - used, "%s\"%s\":%s", sep, fields[k], values[k]);
            sep = ",";
        }
    snprintf(header + used, sizeof header - used, "}}");
    reject(c->name, header, c->ndata, c->want);
}

static void test_bad_tensors(void) {
    // duplicates
    reject("duplicate_tensor", "{" A_OK ",\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}", 11,
           "duplicate tensor name 'a'");
    reject("duplicate_metadata_key", "{\"__metadata__\":{\"k\":\"v\",\"j\":\"w\",\"k\":\"w\"}," A_OK "}", 8,
           "__metadata__: duplicate key 'k'");
    reject("duplicate_metadata", "{" META_OK "," A_OK "," META_OK "}", 8, "duplicate key '__metadata__'");
    reject("duplicate_field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
           "tensor 'a': duplicate field 'dtype'");

    // tensor entries
    reject("extra_field", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
           "tensor 'a': unknown field 'x'");
    static const TensorCase cases[] = {
        {"unknown_dtype", "\"F4\"", "[2]", "[0,2]", 2, "tensor 'a': unknown dtype 'F4'"},
        {"lowercase_dtype", "\"f32\"", "[2]", "[0,8]", 8, "unknown dtype 'f32'"},
        {"shape_size_mismatch", "\"F32\"", "[3]", "[0,8]", 8,
         "tensor 'a': data_offsets [0, 8] span 8 bytes, but F32 shape [3] needs 12"},
        {"span_larger_than_shape", "\"F32\"", "[1]", "[0,8]", 8,
         "tensor 'a': data_offsets [0, 8] span 8 bytes, but F32 shape [1] needs 4"},
        {"missing_field", "\"F32\"", NULL, "[0,8]", 8, "tensor 'a': missing field 'shape'"},
        {"empty_entry", NULL, NULL, NULL, 0, "tensor 'a': missing field 'dtype'"},
        {"negative_dimension", "\"F32\"", "[-2]", "[0,8]", 8, "tensor 'a': shape: -2 is negative"},
        {"negative_offset", "\"F32\"", "[2]", "[-0,8]", 8, "data_offsets: -0 is negative"},
        {"float_dimension", "\"F32\"", "[2.0]", "[0,8]", 8, "tensor 'a': shape: 2.0 is not an integer"},
        {"exponent_offset", "\"F32\"", "[2]", "[0,8e0]", 8, "data_offsets: 8e0 is not an integer"},
        {"huge_number", "\"F32\"", "[99999999999999999999999]", "[0,8]", 8, "is too large"},
        {"size_overflow", "\"F32\"", "[4611686018427387904,4]", "[0,8]", 8,
         "tensor 'a': shape [4611686018427387904, 4] is too large"},
        {"nine_dimensions", "\"F32\"", "[1,1,1,1,1,1,1,1,2]", "[0,8]", 8, "shape has more than 8 entries"},
        {"three_offsets", "\"F32\"", "[2]", "[0,8,8]", 8, "data_offsets has more than 2 entries"},
        {"one_offset", "\"F32\"", "[0]", "[0]", 0, "data_offsets must be [begin, end]"},
        {"begin_after_end", "\"F32\"", "[2]", "[8,0]", 8, "begin is after end"},
        {"shape_not_array", "\"F32\"", "2", "[0,8]", 8, "shape must be an array of integers, got a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) reject_tensor(&cases[i]);
}

// Headers that are fine as JSON but do not tile the data section, or hold bad metadata.
static void test_bad_layout(void) {
    // the tiling of the data section
    reject("gap", "{" A_OK ",\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[9,12]}}", 12,
           "gap of 1 bytes in the data section before tensor 'b'");
    reject("gap_at_start", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
           "gap of 4 bytes in the data section before tensor 'a'");
    reject("overlap", "{" A_OK ",\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[7,10]}}", 10,
           "tensor 'b' (bytes 7..10) overlaps tensor 'a' (bytes 0..8)");
    reject("data_shorter", "{" A_OK "," B_OK "}", 10, "tensor 'b' (bytes 8..11) goes beyond the data section");
    reject("data_longer", "{" A_OK "," B_OK "}", 12, "1 bytes in the data section after the last tensor");
    reject("data_without_tensors", "{}", 4, "4 bytes in the data section after the last tensor");

    // metadata
    reject("metadata_number", "{\"__metadata__\":{\"k\":1}," A_OK "}", 8,
           "__metadata__ 'k': the value must be a string");
    reject("metadata_object", "{\"__metadata__\":{\"k\":{}}}", 0, "the value must be a string, got an object");
    reject("metadata_not_object", "{\"__metadata__\":\"x\"}", 0, "__metadata__ must be an object of strings");
    reject("metadata_null", "{\"__metadata__\":{\"k\":null}}", 0, "got null");

    // a name with a newline is shown without it, so the message stays one line
    reject("name_with_newline_one_line", "{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
           "tensor 'a?b': unknown dtype 'X'");
}

// ---- the JSON reader itself ----

// A reader over text (NUL-terminated) whose errors go to err and name `path` when given.
static JsonReader json_reader(const char *text, char *arena, size_t cap, char *err, size_t errlen, const char *path) {
    return (JsonReader){.s = (const uint8_t *)text, .n = strlen(text), .arena = arena, .cap = cap, .err = err,
                        .errlen = errlen, .path = path, .syntax_name = "JSON", .end_name = "the end"};
}

// What the header tests do not reach: integers at exactly their bound, dataset.json's plain escapes, the
// line an error names, and UTF-8 at the edges of RFC 3629.
static void test_json_reader(void) {
    char arena[256], err[512] = "";
    struct {
        const char *text;
        uint64_t max, want;
        int kind;
    } ints[] = {
        {"255", 255, 255, JSON_UINT_OK},
        {"256", 255, 0, JSON_UINT_TOO_LARGE},
        {"18446744073709551615", UINT64_MAX, UINT64_MAX, JSON_UINT_OK},
        {"18446744073709551616", UINT64_MAX, 0, JSON_UINT_TOO_LARGE},
        {"0", 0, 0, JSON_UINT_OK},
    };
    int right = 0;
    for (int i = 0; i < 5; i++) {
        JsonReader r = json_reader(ints[i].text, arena, sizeof arena, err, sizeof err, NULL);
        uint64_t v = 12345;
        size_t start;
        int kind = json_uint(&r, ints[i].max, &v, &start);
        right += kind == ints[i].kind && (kind != JSON_UINT_OK || v == ints[i].want);
    }
    check(right == 5, "json_uint_bounds", "%d of 5: 255 and 2^64-1 at their bound read, 256 and 2^64 refused as too "
          "large, 0 with bound 0 read", right);

    char *out = NULL;
    JsonReader r = json_reader("\"a\\/c\"", arena, sizeof arena, err, sizeof err, NULL);
    r.plain_escapes = 1;
    int slash = !json_string(&r, &out, "a string") && !strcmp(out, "a/c");
    const char *others[] = {"\"a\\bc\"", "\"a\\fc\"", "\"a\\nc\"", "\"a\\u0041\""};
    int refused = 0;
    for (int i = 0; i < 4; i++) {
        r = json_reader(others[i], arena, sizeof arena, err, sizeof err, NULL);
        r.plain_escapes = 1;
        refused += json_string(&r, &out, "a string") == -1 && strstr(err, "unsupported escape") != NULL;
    }
    check(slash && refused == 4, "json_plain_escapes", "\\/ read as '/': %s; \\b \\f \\n \\u refused: %d of 4",
          slash ? "yes" : "no", refused);

    // a raw newline inside a string on line 2: the error is at that newline, still on line 2
    r = json_reader("{\n\"a\nb\": 1}", arena, sizeof arena, err, sizeof err, "t.json");
    int rc = json_expect(&r, '{', "'{'") || json_string(&r, &out, "a key");
    check(rc && strstr(err, "t.json: line 2: control character 0x0a"), "json_error_line", "%s", err);

    // a number too small for a double underflows to 0 and is read as 0 (a value, nearly exact); one too
    // large for it overflows and is refused (no double is near it)
    double tiny = 1, neg_tiny = 1, huge = 0;
    r = json_reader("1e-400", arena, sizeof arena, err, sizeof err, NULL);
    int tiny_rc = json_double(&r, &tiny, "a number");
    r = json_reader("-1e-400", arena, sizeof arena, err, sizeof err, NULL);
    int neg_tiny_rc = json_double(&r, &neg_tiny, "a number");
    r = json_reader("1e400", arena, sizeof arena, err, sizeof err, NULL);
    int huge_rc = json_double(&r, &huge, "a number");
    check(tiny_rc == 0 && tiny == 0 && neg_tiny_rc == 0 && neg_tiny == 0 && huge_rc == -1 &&
              strstr(err, "out of range"), "json_double_underflow",
          "1e-400 read as %g (rc %d, 0), -1e-400 as %g (rc %d, 0); 1e400: rc %d (-1), %s", tiny, tiny_rc, neg_tiny,
          neg_tiny_rc, huge_rc, err);

    static const struct {
        const char *bytes;
        size_t want;
    } utf8[] = {
        {"\xf4\x8f\xbf\xbf", 4}, {"\xf4\x90\x80\x80", 0},  // U+10FFFF; U+110000, beyond Unicode
        {"\xf0\x90\x80\x80", 4}, {"\xf0\x8f\xbf\xbf", 0},  // U+10000; U+FFFF in 4 bytes (overlong)
        {"\xe0\xa0\x80", 3},     {"\xe0\x9f\xbf", 0},      // U+0800; U+07FF in 3 bytes (overlong)
        {"\xed\x9f\xbf", 3},     {"\xed\xa0\x80", 0},      // U+D7FF; U+D800, a surrogate
        {"\xc2\x80", 2},         {"\xc1\xbf", 0},          // U+0080; U+007F in 2 bytes (overlong)
    };
    int agree = 0;
    for (int i = 0; i < 10; i++)
        agree += fc_utf8_len((const uint8_t *)utf8[i].bytes, strlen(utf8[i].bytes)) == utf8[i].want;
    check(agree == 10, "json_utf8_edges", "%d of 10 sequences at the edges of RFC 3629 measured right", agree);
}

// ---- failed writes ----

static void test_write_failures(void) {
    float x[4] = {1, 2, 3, 4};
    StTensor t = {"x", "F32", 1, {4}, x};
    char path[512], err[512];

    snprintf(path, sizeof path, "%s/no/such/folder/a.safetensors", g_dir);
    int rc = st_write(path, &t, 1, NULL, 0, err, sizeof err);
    check(rc == -1 && !strchr(err, '\n') && strstr(err, "No such file"), "st_write_missing_folder", "%s", err);

    // a folder without write permission (root ignores permissions, so then /proc, which no one can write)
    char ro[512];
    snprintf(ro, sizeof ro, "%s/readonly", g_dir);
    mkdir(ro, 0555);
    chmod(ro, 0555);
    const char *folder = geteuid() == 0 ? "/proc" : ro;
    snprintf(path, sizeof path, "%s/a.safetensors", folder);
    rc = st_write(path, &t, 1, NULL, 0, err, sizeof err);
    check(rc == -1 && !strchr(err, '\n') && temp_files(folder) == 0, "st_write_unwritable_folder", "%s: %s", folder,
          err);
    chmod(ro, 0755);

    // an existing file survives a write that fails half-way (the file size limit makes write() fail)
    snprintf(path, sizeof path, "%s/keep.safetensors", g_dir);
    rc = st_write(path, &t, 1, NULL, 0, err, sizeof err);
    size_t len0, len1;
    uint8_t *before = test_read_file(path, &len0);
    size_t big_n = 1 << 18;
    float *big = fc_calloc(big_n, sizeof(float));
    StTensor tb = {"big", "F32", 1, {(long)big_n}, big};
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 65536;
    signal(SIGXFSZ, SIG_IGN);
    fflush(stdout);
    setrlimit(RLIMIT_FSIZE, &lim);
    rc = st_write(path, &tb, 1, NULL, 0, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    uint8_t *after = test_read_file(path, &len1);
    int same = before && after && len0 == len1 && !memcmp(before, after, len0);
    check(rc == -1 && !strchr(err, '\n') && same && temp_files(g_dir) == 0, "st_write_failure_keeps_old_file",
          "%s; the old %zu bytes unchanged, no temporary file left", err, len0);
    free(after);
    free(big);

    // the tests' full-disk hook: ENOSPC after 100 bytes, the old file kept
    setenv("FRAMECHAIN_TEST_FAIL_WRITE_AFTER", "100", 1);
    StTensor t2 = {"y", "F32", 1, {4}, x};
    StTensor two[2] = {t, t2};
    rc = st_write(path, two, 2, NULL, 0, err, sizeof err);
    unsetenv("FRAMECHAIN_TEST_FAIL_WRITE_AFTER");
    after = test_read_file(path, &len1);
    same = before && after && len0 == len1 && !memcmp(before, after, len0);
    check(rc == -1 && strstr(err, "No space left") && same && temp_files(g_dir) == 0, "st_write_full_disk_hook",
          "%s; the old file unchanged, no temporary file left", err);
    free(after);

    // the name taken by a folder: the rename fails, and the temporary file goes with it
    char taken[600];
    snprintf(taken, sizeof taken, "%s/taken.safetensors", g_dir);
    mkdir(taken, 0755);
    snprintf(path, sizeof path, "%s/taken.safetensors/inside", g_dir);
    write_text_file(path, "x");
    rc = st_write(taken, &t, 1, NULL, 0, err, sizeof err);
    check(rc == -1 && !strchr(err, '\n') && strstr(err, "rename failed") && temp_files(g_dir) == 0,
          "st_write_rename_failure_leaves_no_temp", "%s; %d temporary files left", err, temp_files(g_dir));
    snprintf(path, sizeof path, "%s/keep.safetensors", g_dir);

    // arguments the reader would refuse are refused before the disk is touched
    StTensor dup[2] = {t, t};
    StTensor meta_named = {"__metadata__", "F32", 1, {4}, x};
    StTensor bad_utf8 = {"a\xff", "F32", 1, {4}, x};
    StTensor bad_dtype = {"x", "F17", 1, {4}, x};
    StTensor neg = {"x", "F32", 1, {-4}, x};
    StTensor deep = {"x", "F32", 9, {1}, x};
    StMeta dup_meta[2] = {{"k", "1"}, {"k", "2"}}, bad_meta = {"k", "\xc3"};
    struct {
        const char *name, *want;
        const StTensor *t;
        int n;
        const StMeta *m;
        int nm;
    } cases[] = {
        {"duplicate_name", "duplicate tensor name 'x'", dup, 2, NULL, 0},
        {"metadata_name", "may not be called '__metadata__'", &meta_named, 1, NULL, 0},
        {"invalid_utf8_name", "not valid UTF-8", &bad_utf8, 1, NULL, 0},
        {"unknown_dtype", "unknown dtype 'F17'", &bad_dtype, 1, NULL, 0},
        {"negative_dimension", "negative dimension -4", &neg, 1, NULL, 0},
        {"nine_dimensions", "9 dimensions (0 to 8)", &deep, 1, NULL, 0},
        {"duplicate_metadata_key", "duplicate metadata key 'k'", &t, 1, dup_meta, 2},
        {"invalid_utf8_metadata", "not valid UTF-8", &t, 1, &bad_meta, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char label[96];
        rc = st_write(path, cases[i].t, cases[i].n, cases[i].m, cases[i].nm, err, sizeof err);
        after = test_read_file(path, &len1);
        same = after && len0 == len1 && !memcmp(before, after, len0);
        snprintf(label, sizeof label, "st_write_refuses_%s", cases[i].name);
        check(rc == -1 && strstr(err, cases[i].want) && same, label, "%s", err);
        free(after);
    }
    free(before);
}

// Duplicate names among many (checked sorted, not each against every earlier one): still refused with
// the name of the first entry that repeats an earlier one, and a fault of an earlier entry named first.
static void test_duplicates_among_many(void) {
    enum { N = 5000 };
    float x[4] = {1, 2, 3, 4};
    StTensor t = {"x", "F32", 1, {4}, x};
    static StMeta meta[N];
    static char keys[N][16];
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/many.safetensors", g_dir);
    for (int i = 0; i < N; i++) snprintf(keys[i], sizeof keys[i], "clip-%d", i), meta[i] = (StMeta){keys[i], "v"};
    int rc = st_write(path, &t, 1, meta, N, err, sizeof err);
    check(rc == 0, "st_write_many_distinct_keys", "%s", rc ? err : "5000 distinct metadata keys written");
    meta[4000].key = keys[5], meta[3000].key = keys[1700];  // 'clip-1700' repeats first (entry 3000)
    rc = st_write(path, &t, 1, meta, N, err, sizeof err);
    check(rc == -1 && !strchr(err, '\n') && strstr(err, "many.safetensors: duplicate metadata key 'clip-1700'"),
          "st_write_refuses_first_duplicate_key_among_many", "%s", err);
    meta[2000].value = NULL;  // an earlier entry at fault is named instead
    rc = st_write(path, &t, 1, meta, N, err, sizeof err);
    check(rc == -1 && strstr(err, "metadata entry 2000 is not valid UTF-8"), "st_write_names_the_earlier_fault",
          "%s", err);
    meta[2000].value = "v", meta[1000].key = keys[999];  // adjacent repeats too
    rc = st_write(path, &t, 1, meta, N, err, sizeof err);
    check(rc == -1 && strstr(err, "duplicate metadata key 'clip-999'"), "st_write_refuses_adjacent_duplicate_key",
          "%s", err);

    StTensor ts[4] = {{"a", "F32", 1, {4}, x}, {"b", "F32", 1, {4}, x}, {"a", "F32", 1, {4}, x},
                      {"c", "F17", 1, {4}, x}};
    rc = st_write(path, ts, 4, NULL, 0, err, sizeof err);
    check(rc == -1 && strstr(err, "duplicate tensor name 'a'"), "st_write_duplicate_before_later_fault", "%s", err);
    ts[1].dtype = "F17";
    rc = st_write(path, ts, 4, NULL, 0, err, sizeof err);
    check(rc == -1 && strstr(err, "tensor 'b': unknown dtype 'F17'"), "st_write_fault_before_later_duplicate", "%s",
          err);
    check(temp_files(g_dir) == 0, "st_write_duplicates_leave_no_temp", "%d temporary files", temp_files(g_dir));
}

// st_meta among many keys (a shard holds five a clip; it searches a sorted index): every key written
// gives its own value, in any order of writing, and keys that are not there (one past the last, a
// prefix of one, the empty key) give NULL.
static void test_meta_lookup_many(void) {
    enum { N = 5000 };
    float x[4] = {1, 2, 3, 4};
    StTensor t = {"x", "F32", 1, {4}, x};
    static StMeta meta[N];
    static char keys[N][32], values[N][16];
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/lookup.safetensors", g_dir);
    for (int i = 0; i < N; i++) {
        int k = (int)((i * 7919L) % N);  // written out of order
        snprintf(keys[i], sizeof keys[i], "clip.%d.source", k), snprintf(values[i], sizeof values[i], "v%d", k);
        meta[i] = (StMeta){keys[i], values[i]};
    }
    int rc = st_write(path, &t, 1, meta, N, err, sizeof err);
    StFile f = {0};
    int read = rc == 0 && st_read(path, &f, err, sizeof err) == 0, right = 0;
    for (int i = 0; read && i < N; i++) {
        const char *v = st_meta(&f, keys[i]);
        right += v && !strcmp(v, values[i]);
    }
    int absent = read && !st_meta(&f, "clip.5000.source") && !st_meta(&f, "clip.1.sourc") && !st_meta(&f, "") &&
                 !st_meta(&f, "zzz");
    check(read && right == N && absent, "st_meta_among_many_keys", "%s%d of %d keys give their value; absent keys "
          "NULL: %d", read ? "" : err, right, N, absent);
    st_free(&f);
}

// A legal name of 250 bytes, where "NAME.tmp-PID" would pass NAME_MAX (255): written (through a
// shorter temporary name in the same folder), and the temporary of such a write that was killed is
// found and removed by the next write's cleanup (fc_remove_stale_temps).
static void test_long_name(void) {
    float x[4] = {1, 2, 3, 4};
    StTensor t = {"x", "F32", 1, {4}, x};
    char name[251], path[600], err[512];
    memset(name, 'n', 250), name[250] = 0;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    struct stat sb;
    int rc = st_write(path, &t, 1, NULL, 0, err, sizeof err);
    check(rc == 0 && !stat(path, &sb) && temp_files(g_dir) == 0, "st_write_250_byte_name", "%s",
          rc ? err : "written, no temporary file left");

    pid_t pid = fork();
    if (pid == 0) {
        setenv("FRAMECHAIN_TEST_WRITE_DELAY_MS", "20000", 1);  // killed while it waits, mid-write
        st_write(path, &t, 1, NULL, 0, err, sizeof err);
        _exit(0);
    }
    for (int i = 0; i < 500 && temp_files(g_dir) == 0; i++) usleep(10000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int left = temp_files(g_dir), removed = fc_remove_stale_temps(path);
    check(left == 1 && removed == 1 && temp_files(g_dir) == 0, "stale_temp_of_250_byte_name_removed",
          "a killed write left %d temporary file(s); the cleanup removed %d, %d left", left, removed, temp_files(g_dir));
    unlink(path);
}

// ---- the config reader without exiting ----

static void test_config_text(void) {
    Config c, d;
    char err[512];
    config_defaults(&c);
    // CRLF, comments, a blank line, no final newline
    const char *good = "# a comment\r\nframe_size = 64\r\npatch=8   # trailing comment\nwidth = 192\n\n"
                       "  plan = anchor:0 context:0.1, target:2\nseed = 7\noptimizer = adamw\nlr = 1e-3";
    int rc = config_parse_text(&c, good, strlen(good), "good.conf", err, sizeof err);
    int ok = rc == 0 && c.frame_size == 64 && c.patch == 8 && c.slots == 3 && c.slot_kind[1] == SLOT_CONTEXT &&
             c.slot_offset[1] == 0.1f && c.seed == 7 && c.optimizer == OPT_ADAMW && c.lr == 1e-3;
    check(ok, "config_parse_text_valid", "%s", rc ? err : "CRLF, comments, no final newline: every value set");
    rc = config_validate_checked(&c, "good.conf", err, sizeof err);
    check(rc == 0, "config_validate_checked_valid", "%s", rc ? err : "valid");

    // config_write and back: equal
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    config_write(&c, mem);
    fclose(mem);
    config_defaults(&d);
    rc = config_parse_text(&d, text, len, "written", err, sizeof err);
    check(rc == 0 && config_equal(&c, &d) && strstr(text, "context:0.1 "), "config_write_parse_equal", "%s",
          rc ? err : "config_equal after config_write and config_parse_text (0.1 written as 0.1)");
    free(text);
    d.slot_offset[2] = 3;
    check(!config_equal(&c, &d), "config_equal_sees_plan", "a changed slot offset differs");
    d = c, d.lr_min_ratio = 0.2;
    check(!config_equal(&c, &d), "config_equal_sees_doubles", "a changed lr_min_ratio differs");

    struct {
        const char *name, *text;
        size_t len;
        const char *want;
    } bad[] = {
        {"unknown_key", "frame_size = 32\nwidht = 64\n", 0, "t.conf:2: unknown key 'widht'"},
        {"missing_equals", "depth 3\n", 0, "t.conf:1: expected 'key = value', got 'depth 3'"},
        {"bad_number", "\n\nwidth = sixty\n", 0, "t.conf:3: width = sixty: not an integer"},
        {"bad_double", "lr = 0.1x\n", 0, "t.conf:1: lr = 0.1x: not a number"},
        {"out_of_range", "depth = 0", 0, "t.conf:1: depth = 0: 0 is out of range [1, 256]"},
        {"no_value", "depth =   # nothing\n", 0, "t.conf:1: depth has no value"},
        {"bad_enum", "optimizer = sgd\n", 0, "t.conf:1: optimizer = sgd: expected one of: adamw8bit, adamw"},
        {"bad_plan", "plan = anchor:0 context:1\n", 0, "t.conf:1: plan = anchor:0 context:1: the plan has no target"},
        {"plan_offset_range", "plan = target:1e30\n", 0, "slot offset 1e+30 is out of range"},
        {"nul_byte", "depth = 3\nwid\0th = 64\n", 22, "t.conf:2: NUL byte in the line"},
        {"nul_in_comment", "depth = 3 # \0\n", 14, "t.conf:1: NUL byte in the line"},
        {"duplicate_key", "depth = 3\nwidth = 64\n depth=4\n", 0, "t.conf:3: depth is set a second time (first on line 1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char label[96];
        config_defaults(&c);
        d = c;
        size_t n = bad[i].len ? bad[i].len : strlen(bad[i].text);
        rc = config_parse_text(&c, bad[i].text, n, "t.conf", err, sizeof err);
        snprintf(label, sizeof label, "config_parse_text_rejects_%s", bad[i].name);
        if (rc == 0) check(0, label, "accepted (wanted '%s')", bad[i].want);
        else check(strstr(err, bad[i].want) && config_equal(&c, &d), label, "%s", err);
    }
    // a line longer than the limit
    size_t n = CONFIG_MAX_LINE + 10;
    char *longline = fc_malloc(n);
    memset(longline, ' ', n);
    memcpy(longline, "seed = 1", 8);
    rc = config_parse_text(&c, longline, n, "t.conf", err, sizeof err);
    check(rc == -1 && strstr(err, "t.conf:1: line longer than 4096 characters"), "config_parse_text_rejects_long_line",
          "%s", err);
    free(longline);

    config_defaults(&c);
    rc = config_set_checked(&c, "depht=3", "--set", err, sizeof err);
    check(rc == -1 && strstr(err, "--set depht=3: unknown key 'depht'"), "config_set_checked_unknown", "%s", err);
    rc = config_set_checked(&c, "depth=0", "--set", err, sizeof err);
    check(rc == -1 && strstr(err, "--set depth=0: 0 is out of range"), "config_set_checked_range", "%s", err);
    rc = config_set_checked(&c, "depth 3", "--set", err, sizeof err);
    check(rc == -1 && strstr(err, "--set depth 3: expected key=value"), "config_set_checked_no_equals", "%s", err);
    rc = config_set_checked(&c, " depth = 5 ", "--set", err, sizeof err);
    check(rc == 0 && c.depth == 5, "config_set_checked_applies", "%s", rc ? err : "depth = 5");
    c.frame_size = 30;
    rc = config_validate_checked(&c, "odd.conf", err, sizeof err);
    check(rc == -1 && strstr(err, "odd.conf: frame_size 30 is not a multiple of patch 4"),
          "config_validate_checked_bad", "%s", err);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/fc_st_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) fc_die("test_safetensors: cannot create a temporary folder");
    test_roundtrip();
    test_lengths();
    test_bad_json();
    test_bad_tensors();
    test_bad_layout();
    test_json_reader();
    test_write_failures();
    test_duplicates_among_many();
    test_meta_lookup_many();
    test_long_name();
    test_config_text();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "test_safetensors: could not remove %s\n", g_dir);
    return g_failed ? 1 : 0;
}
