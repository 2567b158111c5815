// safetensors.c: the safetensors writer. Layout: 8-byte little-endian header length, a JSON
// header (padded with spaces to a multiple of 8), then the tensors' bytes, contiguous from 0.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "safetensors.h"

size_t st_dtype_size(const char *d) {
    static const struct { const char *name; size_t size; } T[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4}, {"F16", 2},
        {"BF16", 2}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(T[i].name, d)) return T[i].size;
    return 0;
}

static size_t numel(const StTensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

// A growing text buffer for the JSON header.
typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
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

static int fail(char *err, size_t errlen, const char *path, const char *what) {
    snprintf(err, errlen, "%s: %s: %s", path, what, strerror(errno));
    return -1;
}

static int write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w, n -= (size_t)w;
    }
    return 0;
}

int st_write(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta, char *err,
             size_t errlen) {
    // storage order: by element size, widest first, stable within a size
    int *order = fc_malloc(sizeof(int) * (n ? n : 1));
    int k = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++)
            if (st_dtype_size(tensors[i].dtype) == size) order[k++] = i;
    if (k != n) {
        free(order);
        snprintf(err, errlen, "%s: a tensor has an unknown dtype", path);
        return -1;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(tensors[i].name, tensors[j].name)) {
                free(order);
                snprintf(err, errlen, "%s: duplicate tensor name '%s'", path, tensors[i].name);
                return -1;
            }

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
        size_t bytes = numel(t) * st_dtype_size(t->dtype);
        buf_put(&h, "%s", (nmeta || i) ? "," : "");
        buf_put_json_string(&h, t->name);
        buf_put(&h, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++) buf_put(&h, "%s%ld", d ? "," : "", t->shape[d]);
        buf_put(&h, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes);
        offset += bytes;
    }
    buf_put(&h, "}");
    while (h.len % 8) buf_put(&h, " ");

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = -1;
    if (fd < 0) {
        rc = fail(err, errlen, tmp, "cannot create");
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    if (write_all(fd, len8, 8) || write_all(fd, h.s, h.len)) {
        rc = fail(err, errlen, tmp, "write failed");
        goto close_out;
    }
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[order[i]];
        if (write_all(fd, t->data, numel(t) * st_dtype_size(t->dtype))) {
            rc = fail(err, errlen, tmp, "write failed");
            goto close_out;
        }
    }
    if (fsync(fd)) {
        rc = fail(err, errlen, tmp, "fsync failed");
        goto close_out;
    }
    if (close(fd)) {
        fd = -1;
        rc = fail(err, errlen, tmp, "close failed");
        goto unlink_out;
    }
    fd = -1;
    if (rename(tmp, path)) {
        rc = fail(err, errlen, path, "rename failed");
        goto unlink_out;
    }
    {  // make the rename itself durable
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd < 0 || fsync(dfd)) {
            rc = fail(err, errlen, path, "fsync of the folder failed");
            if (dfd >= 0) close(dfd);
            goto out;
        }
        close(dfd);
    }
    rc = 0;
    goto out;
close_out:
    close(fd);
unlink_out:
    unlink(tmp);
out:
    free(h.s);
    free(order);
    return rc;
}
