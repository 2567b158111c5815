// safetensors_write.c: the crash-safe safetensors writer (st_write, st_write_bytes): the JSON header,
// then everything through a temporary file, fsync and rename, with the tests' fault-injection hooks
// (fc_test_hook). Layout: 8-byte little-endian header length, a JSON header (padded with spaces to a
// multiple of 8), then the tensors' bytes, contiguous from 0.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "formats/safetensors_internal.h"

// Byte size of t in *out; 0 when ndim is out of range, a dimension is negative or the size overflows.
static int tensor_bytes(const StTensor *t, size_t *out) {
    size_t n = st_dtype_size(t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(n, (size_t)t->shape[i], &n)) return 0;
    *out = n;
    return 1;
}

// A growing text buffer for the JSON header.
typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_put(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 64;
        b->s = realloc(b->s, b->cap);
        if (!b->s) fc_die("out of host memory writing a safetensors header");
    }
}

static void buf_put_json_string(Buf *b, const char *s) {
    buf_put(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') buf_put(b, "\\%c", ch);
        else if (ch < 0x20) buf_put(b, "\\u%04x", ch);
        else buf_put(b, "%c", ch);
    }
    buf_put(b, "\"");
}

// A failed system call on path: "PATH: WHAT: strerror(errno)".
static int fail_errno(char *err, size_t errlen, const char *path, const char *what) {
    return fc_errf(err, errlen, "%s: %s: %s", path, what, strerror(errno));
}

// The temporary file being written. The tests inject faults through it: FRAMECHAIN_TEST_FAIL_WRITE_AFTER
// makes the disk full after that many bytes of the file (as a real disk would: a short write, then ENOSPC).
typedef struct {
    int fd;
    size_t written;
    long fail_after;  // -1: never
} Out;

static int write_all(Out *o, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        size_t chunk = n;
        if (o->fail_after >= 0) {
            if (o->written >= (size_t)o->fail_after) {
                errno = ENOSPC;
                return -1;
            }
            if (chunk > (size_t)o->fail_after - o->written) chunk = (size_t)o->fail_after - o->written;
        }
        ssize_t w = write(o->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w, o->written += (size_t)w;
    }
    return 0;
}

// A name and where it stands, sorted by name, then place.
typedef struct {
    const char *s;
    int i;
} Named;

static int named_cmp(const void *a, const void *b) {
    const Named *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static const char *tensor_name(const void *v, int i) { return ((const StTensor *)v)[i].name; }
static const char *meta_key(const void *v, int i) { return ((const StMeta *)v)[i].key; }

// The smallest i whose name(items, i) equals an earlier one's, or -1: sorted, not each against every
// earlier one (a shard's tens of thousands of metadata keys made that quadratic: a minute a shard).
static int first_repeat(int n, const char *(*name)(const void *, int), const void *items) {
    if (n < 2) return -1;
    Named *v = fc_malloc(sizeof *v * (size_t)n);
    for (int i = 0; i < n; i++) v[i] = (Named){name(items, i), i};
    qsort(v, (size_t)n, sizeof *v, named_cmp);
    int first = -1;
    for (int k = 1; k < n; k++)
        if (!strcmp(v[k].s, v[k - 1].s) && (first < 0 || v[k].i < first)) first = v[k].i;
    free(v);
    return first;
}

// Refuse what the reader would refuse, before anything touches the disk. Of several faults, the one
// at the first entry is named (a name is at fault where an earlier entry has it too).
static int check_write_args(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta,
                            char *err, size_t errlen) {
    int bad = n;  // the first tensor at fault in itself (its line in err), n: none
    for (int i = 0; i < n && bad == n; i++) {
        const StTensor *t = &tensors[i];
        size_t bytes;
        bad = i;
        if (!t->name || !st_valid_utf8(t->name))
            snprintf(err, errlen, "%s: tensor %d: the name is not valid UTF-8", path, i);
        else if (!strcmp(t->name, "__metadata__"))
            snprintf(err, errlen, "%s: a tensor may not be called '__metadata__'", path);
        else if (!t->dtype || !st_dtype_size(t->dtype))
            snprintf(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, SHOWN(t->name),
                     t->dtype ? SHOWN(t->dtype) : "(null)");
        else if (tensor_bytes(t, &bytes))
            bad = n;
        else {
            int d = 0;
            while (d < t->ndim && d < ST_MAX_DIMS && t->shape[d] >= 0) d++;
            if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
                snprintf(err, errlen, "%s: tensor '%s': %d dimensions (0 to %d)", path, SHOWN(t->name), t->ndim,
                         ST_MAX_DIMS);
            else if (d < t->ndim)
                snprintf(err, errlen, "%s: tensor '%s': negative dimension %ld", path, SHOWN(t->name), t->shape[d]);
            else
                snprintf(err, errlen, "%s: tensor '%s': the shape is too large", path, SHOWN(t->name));
        }
    }
    // the first repeated name of the valid ones before `bad`: refused as the entry-by-entry check would
    int dup = first_repeat(bad, tensor_name, tensors);
    if (dup >= 0) {
        snprintf(err, errlen, "%s: duplicate tensor name '%s'", path, SHOWN(tensors[dup].name));
        return -1;
    }
    if (bad < n) return -1;
    bad = nmeta;
    for (int i = 0; i < nmeta && bad == nmeta; i++)
        if (!meta[i].key || !meta[i].value || !st_valid_utf8(meta[i].key) || !st_valid_utf8(meta[i].value)) {
            snprintf(err, errlen, "%s: metadata entry %d is not valid UTF-8", path, i);
            bad = i;
        }
    dup = first_repeat(bad, meta_key, meta);
    if (dup >= 0) {
        snprintf(err, errlen, "%s: duplicate metadata key '%s'", path, SHOWN(meta[dup].key));
        return -1;
    }
    return bad < nmeta ? -1 : 0;
}

// Pieces of a file to write, in order.
typedef struct {
    const void *p;
    size_t n;
} Chunk;

// Write the chunks into a temporary file next to `path`, fsync it, rename it over `path` and fsync
// the folder. A failure names `path` (the temporary file is gone by then). FRAMECHAIN_TEST_WRITE_DELAY_MS pauses before chunk `delay_at` (-1: never).
// The test hooks FRAMECHAIN_TEST_FAIL_FOLDER_FSYNC_OF=NAME: the folder's fsync after writing a file
// called NAME fails with EIO; FRAMECHAIN_TEST_FAIL_WRITE_OF=NAME: writing a file called NAME finds
// the disk full.
static int named_by(const char *hook, const char *path) {
    const char *name = getenv(hook), *base = strrchr(path, '/');
    return name && *name && !strcmp(base ? base + 1 : path, name);
}

static int folder_fsync_fails(const char *path) {
    if (!named_by("FRAMECHAIN_TEST_FAIL_FOLDER_FSYNC_OF", path)) return 0;
    errno = EIO;
    return 1;
}

// The chunks written into a new temporary file beside `path` (its name into tmp, 4096 bytes), synced
// and closed. On failure nothing is left. 0, or -1 with err naming `path`.
static int write_temp(const char *path, const Chunk *chunks, int nchunks, int delay_at, char *tmp, char *err,
                      size_t errlen) {
    if (fc_temp_name(tmp, 4096, path, ".tmp-")) {
        snprintf(err, errlen, "%.200s...: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return fail_errno(err, errlen, path, "cannot create");
    Out o = {fd, 0, named_by("FRAMECHAIN_TEST_FAIL_WRITE_OF", path) ? 0 : fc_test_hook("FAIL_WRITE_AFTER")};
    long delay_ms = fc_test_hook("WRITE_DELAY_MS");  // the tests' kill -9 must be able to land mid-write
    for (int i = 0; i < nchunks; i++) {
        if (i == delay_at && delay_ms > 0) usleep((useconds_t)(delay_ms * 1000));
        if (write_all(&o, chunks[i].p, chunks[i].n)) {
            fail_errno(err, errlen, path, "write failed");
            close(fd);
            unlink(tmp);
            return -1;
        }
    }
    if (fsync(fd)) {
        fail_errno(err, errlen, path, "fsync failed");
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd)) {
        fail_errno(err, errlen, path, "close failed");
        unlink(tmp);
        return -1;
    }
    return 0;
}

// tmp (write_temp's) renamed onto path and the folder synced. place: -1 renamed over whatever is at
// path; 0 or 1, a user's output (fc_place_output with that overwrite). On a failed rename tmp goes.
static int place_temp(const char *tmp, const char *path, int place, char *err, size_t errlen) {
    if (place < 0 ? rename(tmp, path) : fc_place_output(tmp, path, place)) {
        if (errno == EEXIST) fc_output_error(err, errlen, path);
        else fail_errno(err, errlen, path, "rename failed");
        unlink(tmp);
        return -1;
    }
    // make the rename itself durable (a failure here leaves the new file in place: the caller decides);
    // a folder this process may write into but not read (mode 0300) cannot be opened to sync: left as
    // it is, as every other output's folder is (the file was in place and the command said it failed)
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    if (folder_fsync_fails(path) || (fc_fsync_dir(dirname(dir)) && errno != EACCES && errno != EPERM)) {
        fail_errno(err, errlen, path, "fsync of the folder failed");
        return -1;
    }
    return 0;
}

static int write_atomic_guarded(const char *path, const Chunk *chunks, int nchunks, int delay_at, int place,
                                const StGuard *guard, char *err, size_t errlen) {
    char tmp[4096];
    if (write_temp(path, chunks, nchunks, delay_at, tmp, err, errlen)) return -1;
    if (guard && guard->check(guard->ctx, err, errlen)) {  // the last look before the name is taken
        unlink(tmp);
        return -1;
    }
    return place_temp(tmp, path, place, err, errlen);
}

static int write_atomic(const char *path, const Chunk *chunks, int nchunks, int delay_at, int place, char *err,
                        size_t errlen) {
    return write_atomic_guarded(path, chunks, nchunks, delay_at, place, NULL, err, errlen);
}

int st_write(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta, char *err,
             size_t errlen) {
    return st_write_guarded(path, tensors, n, meta, nmeta, NULL, err, errlen);
}

int st_write_guarded(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta,
                     const StGuard *guard, char *err, size_t errlen) {
    if (n < 0 || nmeta < 0) {
        snprintf(err, errlen, "%s: negative tensor or metadata count", path);
        return -1;
    }
    if (check_write_args(path, tensors, n, meta, nmeta, err, errlen)) return -1;
    // storage order: by element size, widest first, stable within a size
    int *order = fc_malloc(sizeof(int) * (n ? n : 1));
    int k = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++)
            if (st_dtype_size(tensors[i].dtype) == size) order[k++] = i;

    Buf h = {0};
    buf_put(&h, "{");
    if (nmeta) {
        buf_put(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) buf_put(&h, ",");
            buf_put_json_string(&h, meta[i].key);
            buf_put(&h, ":");
            buf_put_json_string(&h, meta[i].value);
        }
        buf_put(&h, "}");
    }
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[order[i]];
        size_t bytes = 0;
        tensor_bytes(t, &bytes);
        buf_put(&h, "%s", (nmeta || i) ? "," : "");
        buf_put_json_string(&h, t->name);
        buf_put(&h, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++) buf_put(&h, "%s%ld", d ? "," : "", t->shape[d]);
        buf_put(&h, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes);
        offset += bytes;
    }
    buf_put(&h, "}");
    while (h.len % 8) buf_put(&h, " ");

    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    Chunk *chunks = fc_malloc(sizeof(Chunk) * (size_t)(n + 2));
    chunks[0] = (Chunk){len8, 8};
    chunks[1] = (Chunk){h.s, h.len};
    for (int i = 0; i < n; i++) {
        size_t bytes = 0;
        tensor_bytes(&tensors[order[i]], &bytes);
        chunks[2 + i] = (Chunk){tensors[order[i]].data, bytes};
    }
    int rc = write_atomic_guarded(path, chunks, n + 2, n ? 2 + n / 2 : -1, -1, guard, err, errlen);
    free(chunks);
    free(h.s);
    free(order);
    return rc;
}

int st_write_bytes(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    Chunk c = {data, len};
    return write_atomic(path, &c, 1, -1, -1, err, errlen);
}

int st_write_output(const char *path, const void *data, size_t len, int overwrite, char *err, size_t errlen) {
    Chunk c = {data, len};
    return write_atomic(path, &c, 1, 0, overwrite != 0, err, errlen);  // WRITE_DELAY_MS: before its bytes
}

int st_write_outputs(const char *path[2], const void *data[2], const size_t len[2], int overwrite, char *err,
                     size_t errlen) {
    char tmp[2][4096];
    for (int i = 0; i < 2; i++) {
        Chunk c = {data[i], len[i]};
        if (write_temp(path[i], &c, 1, 0, tmp[i], err, errlen)) {
            if (i) unlink(tmp[0]);
            return -1;
        }
    }
    if (place_temp(tmp[0], path[0], overwrite != 0, err, errlen)) {
        unlink(tmp[1]);
        return -1;
    }
    return place_temp(tmp[1], path[1], overwrite != 0, err, errlen);
}
