// scale.h: the square resampler that video frames (video_read.c) and still images (image.c) share,
// private to the video layer. It makes the square frame video.h describes.
#ifndef FRAMECHAIN_VIDEO_SCALE_H
#define FRAMECHAIN_VIDEO_SCALE_H

#include <stddef.h>
#include <stdint.h>

#include <libavutil/pixfmt.h>
#include <libavutil/rational.h>

// A swscale context and its output rows, kept from one picture to the next while the picture's
// format, crop and target size stay the same (every frame of one video).
typedef struct {
    struct SwsContext *sws;
    int cw, ch, fmt, size, flags, cs, full;  // what sws was made for
    uint8_t *out;                            // size rows of out_stride bytes, padded
    int out_stride, out_size;
    // a picture with alpha: its crop made RGB over black first, at its own size (scale.c flatten_alpha)
    struct SwsContext *flat_sws;
    int flat_w, flat_h, flat_fmt, flat_cs, flat_full, flat_stride;
    uint8_t *flat;
} Scaler;

void scaler_free(Scaler *sc);

// Crop the centred display square of a w x h picture (planes data/stride in pixel format fmt, sample
// aspect ratio sar) and resample it to size x size RGB24 in rgb, mirrored left to right when mirror
// is set, then turned clockwise by rot degrees (0, 90, 180, 270: EXIF orientations 2, 4, 5 and 7, and a
// video's display matrix that flips, are a mirror and a turn). colorspace is an AVColorSpace,
// color_range an AVColorRange: YUV samples use the full range only where it says so (or the format is
// a yuvj one: an untagged video is limited, as the standards' default); grey samples are full unless
// it says limited (AVCOL_RANGE_MPEG: a greyscale video tagged limited), as an untagged grey image or
// video is read by everyone. A format with alpha is composited over
// black (c * a / 255) before it is resampled, so the colour stored under transparent pixels never
// shows. 0, or -1 with why.
int scale_square(Scaler *sc, uint8_t *const data[4], const int stride[4], int w, int h, enum AVPixelFormat fmt,
                 AVRational sar, int colorspace, int color_range, int rot, int mirror, int size, uint8_t *rgb,
                 char *why, size_t whylen);

#endif
