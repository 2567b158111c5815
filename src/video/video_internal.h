// video_internal.h: private to video_read.c, video_write.c and image.c (not an API: see video.h).
// What the three share: one-line errors, FFmpeg's silence, file paths as URLs, and the square
// resampler (defined in video_read.c).
#ifndef FRAMECHAIN_VIDEO_INTERNAL_H
#define FRAMECHAIN_VIDEO_INTERNAL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavutil/error.h>
#include <libavutil/pixfmt.h>
#include <libavutil/rational.h>

static inline void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    // One line: FFmpeg's messages never carry newlines, but a file name might.
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

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
    if (S_ISREG(st.st_mode) && st.st_size == 0) return "empty file";
    return NULL;
}

// The square resampler shared by video frames and images.
typedef struct {
    struct SwsContext *sws;
    int cw, ch, fmt, size, flags, cs, full;  // what sws was made for
    uint8_t *out;                            // size rows of out_stride bytes, padded
    int out_stride, out_size;
} Scaler;

void scaler_free(Scaler *sc);
// Crop the centred display square of a picture and resample it to size x size RGB24, turned by rot
// (see scale_square in video_read.c). 0, or -1 with why.
int scale_square(Scaler *sc, uint8_t *const data[4], const int stride[4], int w, int h, enum AVPixelFormat fmt,
                 AVRational sar, int colorspace, int full_range, int rot, int size, uint8_t *rgb, char *why,
                 size_t whylen);

#endif
