// frame_convert.c: frames as the network sees them ([-1, 1] planes) and as files hold them (RGB24).
// No library: built with or without FFmpeg.
#include <math.h>

#include "video/video.h"

void frame_from_rgb(real *dst, const uint8_t *rgb, int S) {
    size_t plane = (size_t)S * S;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) dst[c * plane + i] = (real)(rgb[3 * i + c] / 127.5 - 1.0);
}

void frame_to_rgb(uint8_t *rgb, const real *src, int S) {
    size_t plane = (size_t)S * S;
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            double v = (src[c * plane + i] + 1.0) * 127.5;
            rgb[3 * i + c] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : lrint(v));
        }
}
