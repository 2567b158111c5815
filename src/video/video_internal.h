// video_internal.h: private to video_read.c, video_write.c and image.c (not an API: see video.h).
// What the three share: FFmpeg's silence, its error codes in words, file paths as URLs, and the
// sticky error of a reader or writer. The square resampler they share is in scale.h.
#ifndef FRAMECHAIN_VIDEO_INTERNAL_H
#define FRAMECHAIN_VIDEO_INTERNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavutil/error.h>

#include "base/common.h"

static inline const char *averr(int code, char *buf, size_t len) {
    if (av_strerror(code, buf, len) < 0) snprintf(buf, len, "error %d", code);
    return buf;
}

// FFmpeg logs to stderr by default; our messages are one line each, so its own go quiet. Defined
// once, in video_read.c, so that one flag serves all three files.
void quiet_ffmpeg(void);

// "file:" in front keeps a path with a colon in it from being taken as a protocol or URL.
static inline char *file_url(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(n + 6);
    if (u) {
        memcpy(u, "file:", 5);
        memcpy(u + 5, path, n + 1);
    }
    return u;
}

// Why a path cannot be read as a file: NULL when it can be tried.
static inline const char *path_problem(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return strerror(errno);
    if (S_ISDIR(st.st_mode)) return "is a directory";
    if (!S_ISREG(st.st_mode)) return "not a regular file (a FIFO, socket or device would be waited on)";
    if (st.st_size == 0) return "empty file";
    return NULL;
}

// A reader's or writer's failure, kept in its msg as "PATH: what": only the first is kept (what
// follows is its consequence), and that line goes into err. -1.
static inline int sticky_verrf(char *msg, size_t msglen, const char *path, char *err, size_t errlen,
                               const char *fmt, va_list ap) {
    if (!msg[0]) {
        char what[400];
        fc_verrf(what, sizeof what, fmt, ap);
        fc_errf(msg, msglen, "%s: %s", path, what);
    }
    return fc_errf(err, errlen, "%s", msg);
}

#endif
