// generate.c: a chain's frames written to a video or a folder of PNGs (see generate.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "video/video.h"
#include "chain/sampler.h"
#include "chain/generate.h"

// ----------------------------------------------------------------------------
// a video

static int is_video_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    const char *ext[] = {".mp4", ".m4v", ".mov", ".mkv", ".avi", ".gif"};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

// Every frame into the writer opened on tmp, then the writer closed. Returns 0, or -1 with err.
static int encode_video(const char *tmp, const real *frames, int N, int S, double fps, char *err, size_t errlen) {
    VideoWriter *vw = video_writer_open(tmp, S, S, fps, err, errlen);
    if (!vw) return -1;
    uint8_t *rgb = fc_malloc((size_t)S * S * 3);
    int rc = 0;
    for (int f = 0; f < N && rc == 0; f++) {
        frame_to_rgb(rgb, frames + (size_t)f * 3 * S * S, S);
        rc = video_writer_add(vw, rgb, err, errlen);
    }
    char close_err[512];
    if (video_writer_close(vw, close_err, sizeof close_err) && rc == 0) rc = fc_errf(err, errlen, "%s", close_err);
    free(rgb);
    return rc;
}

static int write_video(const char *out, const real *frames, int N, int S, double fps, char *err, size_t errlen) {
    // the temporary name keeps the extension: it picks the container
    char tmp[4200];
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    snprintf(tmp, sizeof tmp, "%.*s.partial-%d-%s", (int)(base - out), out, (int)getpid(), base);
    int rc = encode_video(tmp, frames, N, S, fps, err, errlen);
    if (rc == 0 && rename(tmp, out))
        rc = fc_errf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

// ----------------------------------------------------------------------------
// a folder of PNGs

static void png_name(char *name, size_t size, const char *dir, int f) {
    snprintf(name, size, "%s/frame-%06d.png", dir, f);
}

// Every frame as a PNG in the folder tmp. Returns 0, or -1 with err.
static int write_pngs(const char *tmp, const real *frames, int N, int S, char *err, size_t errlen) {
    uint8_t *rgb = fc_malloc((size_t)S * S * 3);
    int rc = 0;
    for (int f = 0; f < N && rc == 0; f++) {
        char name[4300];
        png_name(name, sizeof name, tmp, f);
        frame_to_rgb(rgb, frames + (size_t)f * 3 * S * S, S);
        if (image_write_png(name, S, S, rgb)) rc = fc_errf(err, errlen, "%s: cannot write: %s", name, strerror(errno));
    }
    free(rgb);
    return rc;
}

static int write_png_folder(const char *out, const real *frames, int N, int S, char *err, size_t errlen) {
    struct stat sb;
    if (!stat(out, &sb))
        return fc_errf(err, errlen, "%s: already exists; give a new folder name for the PNG frames (or a .mp4/.gif "
                       "path)", out);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.partial-%d", out, (int)getpid());
    if (mkdir(tmp, 0777)) return fc_errf(err, errlen, "%s: cannot create the folder: %s", tmp, strerror(errno));
    int rc = write_pngs(tmp, frames, N, S, err, errlen);
    if (rc == 0 && rename(tmp, out))
        rc = fc_errf(err, errlen, "%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
    if (rc) {  // leave nothing half-written
        for (int f = 0; f < N; f++) {
            char name[4300];
            png_name(name, sizeof name, tmp, f);
            unlink(name);
        }
        rmdir(tmp);
    }
    return rc;
}

// ----------------------------------------------------------------------------

int generate_write_frames(const char *out, const real *frames, int N, int S, double fps, char *err, size_t errlen) {
    return is_video_path(out) ? write_video(out, frames, N, S, fps, err, errlen)
                              : write_png_folder(out, frames, N, S, err, errlen);
}
