// video_none.c: video.h for a build without the FFmpeg libraries (NO_FFMPEG=1, or when the Makefile
// does not find them, e.g. on a GPU server kept for training only). Every reader and writer fails
// with one line saying so; training on the built-in shapes, checkpoints and inspect still work.
#include <strings.h>
#include <string.h>

#include "base/common.h"
#include "video/video.h"

static const char NO_FFMPEG[] = "this build has no FFmpeg (install libavformat-dev libavcodec-dev libswscale-dev "
                                "libavutil-dev libstb-dev and rebuild)";

VideoReader *video_open(const char *path, char *err, size_t errlen) {
    fc_errf(err, errlen, "%s: %s", path, NO_FFMPEG);
    return NULL;
}
int video_width(const VideoReader *v) { return v ? 0 : 0; }
int video_height(const VideoReader *v) { return v ? 0 : 0; }
double video_fps(const VideoReader *v) { return v ? 25 : 25; }
double video_time_tick(const VideoReader *v) { return v ? 0 : 0; }
long video_frame_count_estimate(const VideoReader *v) { return v ? -1 : -1; }
int video_rotation(const VideoReader *v) { return v ? 0 : 0; }
int video_mirrored(const VideoReader *v) { return v ? 0 : 0; }
int video_next_frame(VideoReader *v, int size, uint8_t *rgb, double *time_s, char *err, size_t errlen) {
    return fc_errf(err, errlen, "%s", NO_FFMPEG);
}
long video_frames_read(const VideoReader *v) { return v ? 0 : 0; }
long video_frames_skipped(const VideoReader *v) { return v ? 0 : 0; }
void video_close(VideoReader *v) { (void)v; }
void video_set_decoder_threads(int n) { (void)n; }

int image_load_square(const char *path, int size, uint8_t *rgb, char *err, size_t errlen) {
    return image_load_square_min(path, size, 0, rgb, err, errlen);
}
int image_load_square_min(const char *path, int size, int min_side, uint8_t *rgb, char *err, size_t errlen) {
    return fc_errf(err, errlen, "%s: %s", path, NO_FFMPEG);
}
int image_load_square_size(const char *path, int size, uint8_t *rgb, int *w, int *h, char *err, size_t errlen) {
    return image_load_square_min(path, size, 0, rgb, err, errlen);
}
int image_check_size(const char *path, char *err, size_t errlen) { return 0; }
int is_image_path(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") ||
                   !strcasecmp(dot, ".jfif") || !strcasecmp(dot, ".jpe"));
}
int image_write_png(const char *path, int w, int h, const uint8_t *rgb) { return -1; }

VideoWriter *video_writer_open(const char *path, int width, int height, double fps, const char *comment, char *err,
                               size_t errlen) {
    fc_errf(err, errlen, "%s: %s", path, NO_FFMPEG);
    return NULL;
}
int video_index_bytes_per_frame(const char *path) { return 0; }
const char *video_writer_codec(const VideoWriter *w) { return "none"; }
int video_writer_add(VideoWriter *w, const uint8_t *rgb, char *err, size_t errlen) {
    return fc_errf(err, errlen, "%s", NO_FFMPEG);
}
int video_writer_close(VideoWriter *w, char *err, size_t errlen) {
    return fc_errf(err, errlen, "%s", NO_FFMPEG);
}
