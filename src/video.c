// video.c: reading and writing videos with FFmpeg's libraries, still images with stb_image.
// See video.h for the contract. Nothing here exits or prints: every failure is one line in err.
#include "video.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "common.h"

// stb_image and stb_image_write, private to this file (static functions, PNG and JPEG only).
// GCC reports static functions declared but never defined at the end of the file, after a pop, so
// that one warning stays off for the whole file.
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"  // older GCCs do not know every name below
#ifdef __clang__
#pragma GCC diagnostic ignored "-Wunknown-warning-option"
#endif
#pragma GCC diagnostic ignored "-Wuse-after-free"  // a false alarm on stb_image_write's realloc
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_FAILURE_USERMSG
#include <stb/stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

// Images larger than this many pixels are refused before decoding (300 MB as RGB): a damaged header
// must not make us allocate gigabytes.
#define IMAGE_MAX_PIXELS (100L * 1000 * 1000)
// A decoder that swallows this many packets in a row without giving a picture is stuck.
#define MAX_PACKETS_WITHOUT_PICTURE 1000
// av_read_frame answering EAGAIN this many times in a row is treated as a read error.
#define MAX_EAGAIN 1000

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    // One line: FFmpeg's messages never carry newlines, but a file name might.
    for (char *p = err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
}

static const char *averr(int code, char *buf, size_t len) {
    if (av_strerror(code, buf, len) < 0) snprintf(buf, len, "error %d", code);
    return buf;
}

// FFmpeg logs to stderr by default; our messages are one line each, so its own go quiet.
static void quiet_ffmpeg(void) {
    static int done;
    if (!done) {
        av_log_set_level(AV_LOG_QUIET);
        done = 1;
    }
}

// "file:" in front keeps a path with a colon in it from being taken as a protocol or URL.
static char *file_url(const char *path) {
    size_t n = strlen(path);
    char *u = malloc(n + 6);
    if (u) {
        memcpy(u, "file:", 5);
        memcpy(u + 5, path, n + 1);
    }
    return u;
}

// Why a path cannot be read as a file: NULL when it can be tried.
static const char *path_problem(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return strerror(errno);
    if (S_ISDIR(st.st_mode)) return "is a directory";
    if (S_ISREG(st.st_mode) && st.st_size == 0) return "empty file";
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// The square resampler shared by video frames and images.

typedef struct {
    struct SwsContext *sws;
    int cw, ch, fmt, size, flags, cs, full;  // what sws was made for
    uint8_t *out;                            // size rows of out_stride bytes, padded
    int out_stride, out_size;
} Scaler;

static void scaler_free(Scaler *sc) {
    sws_freeContext(sc->sws);
    av_free(sc->out);
    memset(sc, 0, sizeof *sc);
}

static int is_jpeg_range_format(enum AVPixelFormat f) {
    return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
           f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

// Copy the scaled square into rgb, turned clockwise by rot degrees (0, 90, 180, 270).
static void copy_rotated(const uint8_t *src, int stride, int size, int rot, uint8_t *rgb) {
    for (int y = 0; y < size; y++) {
        uint8_t *o = rgb + (size_t)y * size * 3;
        if (rot == 0) {
            memcpy(o, src + (size_t)y * stride, (size_t)size * 3);
            continue;
        }
        for (int x = 0; x < size; x++) {
            int sy, sx;
            if (rot == 90) {
                sy = size - 1 - x;
                sx = y;
            } else if (rot == 180) {
                sy = size - 1 - y;
                sx = size - 1 - x;
            } else {
                sy = x;
                sx = size - 1 - y;
            }
            const uint8_t *p = src + (size_t)sy * stride + (size_t)sx * 3;
            o[3 * x] = p[0];
            o[3 * x + 1] = p[1];
            o[3 * x + 2] = p[2];
        }
    }
}

// Crop the centred display square of a w x h picture (planes data/stride in pixel format fmt, sample
// aspect ratio sar) and resample it to size x size RGB24 in rgb, turned by rot. colorspace is an
// AVColorSpace, full_range whether YUV samples use the full 0..255 range. 0, or -1 with why.
static int scale_square(Scaler *sc, uint8_t *const data[4], const int stride[4], int w, int h,
                        enum AVPixelFormat fmt, AVRational sar, int colorspace, int full_range, int rot,
                        int size, uint8_t *rgb, char *why, size_t whylen) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fmt);
    if (!d || (d->flags & AV_PIX_FMT_FLAG_HWACCEL) || !sws_isSupportedInput(fmt)) {
        set_err(why, whylen, "unsupported pixel format %s", d ? d->name : "(none)");
        return -1;
    }
    if (w < 1 || h < 1) {
        set_err(why, whylen, "bad picture size %dx%d", w, h);
        return -1;
    }
    // The crop: the square of the shorter display side, in source pixels cw x ch.
    double ar = (sar.num > 0 && sar.den > 0) ? av_q2d(sar) : 1.0;
    if (ar < 1e-3 || ar > 1e3) ar = 1.0;
    int cw, ch;
    if (w * ar >= h) {
        ch = h;
        cw = (int)lrint(h / ar);
    } else {
        cw = w;
        ch = (int)lrint(w * ar);
    }
    cw = cw < 1 ? 1 : cw > w ? w : cw;
    ch = ch < 1 ? 1 : ch > h ? h : ch;
    // The crop's corner, moved left/up to a whole chroma sample (or byte, for 1-bit formats) so the
    // planes stay in register; that is at most a pixel or so off centre.
    int ax = 1 << d->log2_chroma_w, ay = 1 << d->log2_chroma_h;
    if (d->flags & AV_PIX_FMT_FLAG_BITSTREAM) ax = 8;
    int x0 = (w - cw) / 2 / ax * ax, y0 = (h - ch) / 2 / ay * ay;
    const uint8_t *src[4] = {data[0], data[1], data[2], data[3]};
    int seen[4] = {0, 0, 0, 0};
    for (int c = 0; c < d->nb_components; c++) {
        const AVComponentDescriptor *cd = &d->comp[c];
        int p = cd->plane;
        if (p < 0 || p > 3 || seen[p] || !src[p]) continue;
        seen[p] = 1;
        int chroma = (c == 1 || c == 2) && !(d->flags & AV_PIX_FMT_FLAG_RGB);
        int sx = chroma ? d->log2_chroma_w : 0, sy = chroma ? d->log2_chroma_h : 0;
        ptrdiff_t off = (ptrdiff_t)(y0 >> sy) * stride[p];
        if (d->flags & AV_PIX_FMT_FLAG_BITSTREAM)
            off += (ptrdiff_t)(x0 >> sx) * cd->step / 8;
        else
            off += (ptrdiff_t)(x0 >> sx) * cd->step;
        src[p] += off;
    }

    int flags = (cw > size || ch > size) ? SWS_AREA : SWS_BICUBIC;
    flags |= SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP;
    int yuv = d->nb_components >= 3 && !(d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL));
    int full = full_range || is_jpeg_range_format(fmt);
    int cs;
    switch (colorspace) {
    case AVCOL_SPC_BT709: cs = SWS_CS_ITU709; break;
    case AVCOL_SPC_FCC: cs = SWS_CS_FCC; break;
    case AVCOL_SPC_SMPTE240M: cs = SWS_CS_SMPTE240M; break;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: cs = SWS_CS_BT2020; break;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M: cs = SWS_CS_ITU601; break;
    default:  // unspecified: what players assume, BT.709 for HD and BT.601 below
        cs = (w >= 1280 || h >= 720) ? SWS_CS_ITU709 : SWS_CS_ITU601;
        break;
    }
    if (!yuv) cs = full = 0;

    if (!sc->sws || sc->cw != cw || sc->ch != ch || sc->fmt != (int)fmt || sc->size != size ||
        sc->flags != flags || sc->cs != cs || sc->full != full) {
        sws_freeContext(sc->sws);
        sc->sws = sws_getContext(cw, ch, fmt, size, size, AV_PIX_FMT_RGB24, flags, NULL, NULL, NULL);
        if (!sc->sws) {
            set_err(why, whylen, "cannot convert %s %dx%d to %dx%d RGB", d->name, cw, ch, size, size);
            return -1;
        }
        if (yuv)
            sws_setColorspaceDetails(sc->sws, sws_getCoefficients(cs), full, sws_getCoefficients(SWS_CS_DEFAULT), 1,
                                     0, 1 << 16, 1 << 16);
        sc->cw = cw;
        sc->ch = ch;
        sc->fmt = fmt;
        sc->flags = flags;
        sc->cs = cs;
        sc->full = full;
        sc->size = size;
    }
    if (sc->out_size != size) {
        av_free(sc->out);
        sc->out_stride = FFALIGN(size * 3, 64) + 64;
        sc->out = av_malloc((size_t)sc->out_stride * (size + 2));
        sc->out_size = sc->out ? size : 0;
        if (!sc->out) {
            set_err(why, whylen, "out of memory");
            return -1;
        }
    }
    uint8_t *dst[4] = {sc->out, NULL, NULL, NULL};
    int dstride[4] = {sc->out_stride, 0, 0, 0};
    int got = sws_scale(sc->sws, src, stride, 0, ch, dst, dstride);
    if (got != size) {
        set_err(why, whylen, "scaling %s %dx%d failed", d->name, cw, ch);
        return -1;
    }
    copy_rotated(sc->out, sc->out_stride, size, rot, rgb);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Reading videos.

enum { RD_RUNNING, RD_DRAINING, RD_END, RD_FAILED };

struct VideoReader {
    char *path;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
    AVRational tb;
    int width, height, rotation;
    double fps;
    long count_estimate;
    int state;
    long frames;         // returned so far
    int64_t start_pts;   // the stream's origin in tb units
    int have_start;
    double last_time;
    int stalled;         // video packets sent since the last picture
    Scaler sc;
    char msg[512];       // the sticky error
};

static int g_decoder_threads = 1;

void video_set_decoder_threads(int n) { g_decoder_threads = n < 0 ? 1 : n; }

static int stream_rotation(const AVStream *st) {
    const int32_t *m = NULL;
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(60, 30, 100)
    const AVPacketSideData *sd = av_packet_side_data_get(st->codecpar->coded_side_data,
                                                         st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    if (sd && sd->size >= 9 * sizeof(int32_t)) m = (const int32_t *)sd->data;
#else
    size_t n = 0;
    const uint8_t *p = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &n);
    if (p && n >= 9 * sizeof(int32_t)) m = (const int32_t *)p;
#endif
    if (!m) return 0;
    double a = -av_display_rotation_get(m);  // counterclockwise -> clockwise
    if (!isfinite(a)) return 0;
    a = fmod(a, 360.0);
    if (a < 0) a += 360.0;
    return ((int)lrint(a / 90.0) % 4) * 90;
}

static void reader_free(VideoReader *v) {
    if (!v) return;
    avcodec_free_context(&v->dec);
    avformat_close_input(&v->fmt);
    av_packet_free(&v->pkt);
    av_frame_free(&v->frame);
    scaler_free(&v->sc);
    free(v->path);
    free(v);
}

VideoReader *video_open(const char *path, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    quiet_ffmpeg();
    if (!path || !*path) {
        set_err(err, errlen, "video: empty path");
        return NULL;
    }
    const char *why = path_problem(path);
    if (why) {
        set_err(err, errlen, "%s: cannot open: %s", path, why);
        return NULL;
    }
    VideoReader *v = calloc(1, sizeof *v);
    char *url = file_url(path);
    if (!v || !url || !(v->path = strdup(path))) {
        free(v);
        free(url);
        set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "protocol_whitelist", "file", 0);
    int ret = avformat_open_input(&v->fmt, url, NULL, &opts);
    av_dict_free(&opts);
    free(url);
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot open: %s", path,
                ret == AVERROR_INVALIDDATA ? "unknown format or damaged file" : averr(ret, eb, sizeof eb));
        reader_free(v);
        return NULL;
    }
    ret = avformat_find_stream_info(v->fmt, NULL);
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot read the streams: %s", path, averr(ret, eb, sizeof eb));
        reader_free(v);
        return NULL;
    }
    // The video stream: FFmpeg's choice unless that is a cover picture, else the first real one.
    int idx = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (idx >= 0 && (v->fmt->streams[idx]->disposition & AV_DISPOSITION_ATTACHED_PIC)) idx = -1;
    for (unsigned i = 0; idx < 0 && i < v->fmt->nb_streams; i++) {
        const AVStream *s = v->fmt->streams[i];
        if (s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(s->disposition & AV_DISPOSITION_ATTACHED_PIC))
            idx = (int)i;
    }
    if (idx < 0) {
        set_err(err, errlen, "%s: not a video (no video stream)", path);
        reader_free(v);
        return NULL;
    }
    AVStream *st = v->fmt->streams[idx];
    v->stream = idx;
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)  // the demuxer may skip what we do not read
        if ((int)i != idx) v->fmt->streams[i]->discard = AVDISCARD_ALL;
    v->tb = st->time_base;
    const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec) {
        set_err(err, errlen, "%s: unsupported codec %s (this FFmpeg has no decoder for it)", path,
                avcodec_get_name(st->codecpar->codec_id));
        reader_free(v);
        return NULL;
    }
    v->dec = avcodec_alloc_context3(codec);
    v->pkt = av_packet_alloc();
    v->frame = av_frame_alloc();
    if (!v->dec || !v->pkt || !v->frame) {
        set_err(err, errlen, "%s: out of memory", path);
        reader_free(v);
        return NULL;
    }
    ret = avcodec_parameters_to_context(v->dec, st->codecpar);
    if (ret >= 0) {
        v->dec->pkt_timebase = st->time_base;
        v->dec->thread_count = g_decoder_threads;
        // Damage the decoder notices is an error, not a concealed picture in the training data.
        v->dec->err_recognition |= AV_EF_EXPLODE;
        ret = avcodec_open2(v->dec, codec, NULL);
    }
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot open the %s decoder: %s", path, avcodec_get_name(st->codecpar->codec_id),
                averr(ret, eb, sizeof eb));
        reader_free(v);
        return NULL;
    }
    v->width = st->codecpar->width;
    v->height = st->codecpar->height;
    if (v->width <= 0 || v->height <= 0) {
        set_err(err, errlen, "%s: the video stream has no frame size", path);
        reader_free(v);
        return NULL;
    }
    AVRational r = st->avg_frame_rate;
    if (r.num <= 0 || r.den <= 0) r = st->r_frame_rate;
    v->fps = (r.num > 0 && r.den > 0) ? av_q2d(r) : 0;
    if (!(v->fps > 0 && v->fps <= 1000)) v->fps = 25;
    double est = -1;
    if (st->nb_frames > 0)
        est = (double)st->nb_frames;
    else if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
        est = st->duration * av_q2d(st->time_base) * v->fps;
    else if (v->fmt->duration != AV_NOPTS_VALUE && v->fmt->duration > 0)
        est = v->fmt->duration / (double)AV_TIME_BASE * v->fps;
    v->count_estimate = (est >= 0 && est < 1e12) ? (long)llround(est) : -1;
    v->rotation = stream_rotation(st);
    if (st->start_time != AV_NOPTS_VALUE) {
        v->start_pts = st->start_time;
        v->have_start = 1;
    }
    v->state = RD_RUNNING;
    return v;
}

int video_width(const VideoReader *v) { return v ? v->width : 0; }
int video_height(const VideoReader *v) { return v ? v->height : 0; }
double video_fps(const VideoReader *v) { return v ? v->fps : 25; }
long video_frame_count_estimate(const VideoReader *v) { return v ? v->count_estimate : -1; }
int video_rotation(const VideoReader *v) { return v ? v->rotation : 0; }
long video_frames_read(const VideoReader *v) { return v ? v->frames : 0; }

static int reader_fail(VideoReader *v, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int reader_fail(VideoReader *v, char *err, size_t errlen, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(v->msg, sizeof v->msg, "%s: %s", v->path, what);
    v->state = RD_FAILED;
    av_frame_unref(v->frame);
    set_err(err, errlen, "%s", v->msg);
    return -1;
}

static double frame_time(VideoReader *v, const AVFrame *f) {
    int64_t ts = f->best_effort_timestamp;
    if (ts == AV_NOPTS_VALUE) ts = f->pts;
    double t;
    if (ts != AV_NOPTS_VALUE) {
        if (!v->have_start) {
            v->start_pts = ts;
            v->have_start = 1;
        }
        t = ((double)ts - (double)v->start_pts) * av_q2d(v->tb);  // in double: damaged files have wild values
        if (!(t >= 0)) t = 0;
    } else {
        t = v->frames ? v->last_time + 1.0 / v->fps : 0;
    }
    if (v->frames > 0 && !(t > v->last_time)) t = v->last_time + 1.0 / v->fps;
    return t;
}

int video_next_frame(VideoReader *v, int size, uint8_t *rgb, double *time_s, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (!v) {
        set_err(err, errlen, "video: no reader");
        return -1;
    }
    if (v->state == RD_END) return 0;
    if (v->state == RD_FAILED) {
        set_err(err, errlen, "%s", v->msg);
        return -1;
    }
    if (size < 1 || size > VIDEO_MAX_SIZE || !rgb) {
        set_err(err, errlen, "%s: frame size %d is not in 1..%d", v->path, size, VIDEO_MAX_SIZE);
        return -1;
    }
    int eagain = 0;
    for (;;) {
        int ret = avcodec_receive_frame(v->dec, v->frame);
        if (ret == 0) {
            AVFrame *f = v->frame;
            char why[256];
            AVRational sar = av_guess_sample_aspect_ratio(v->fmt, v->fmt->streams[v->stream], f);
            if (scale_square(&v->sc, f->data, f->linesize, f->width, f->height, (enum AVPixelFormat)f->format, sar,
                             f->colorspace, f->color_range == AVCOL_RANGE_JPEG, v->rotation, size, rgb, why,
                             sizeof why) < 0)
                return reader_fail(v, err, errlen, "frame %ld: %s", v->frames, why);
            double t = frame_time(v, f);
            av_frame_unref(f);
            v->last_time = t;
            v->frames++;
            v->stalled = 0;
            if (time_s) *time_s = t;
            return 1;
        }
        if (ret == AVERROR_EOF || (ret == AVERROR(EAGAIN) && v->state == RD_DRAINING)) {
            v->state = RD_END;
            return 0;
        }
        if (ret != AVERROR(EAGAIN))
            return reader_fail(v, err, errlen, "decoding error after %ld frames (%.3f s): %s", v->frames,
                               v->last_time, averr(ret, eb, sizeof eb));
        // The decoder wants input.
        ret = av_read_frame(v->fmt, v->pkt);
        if (ret == AVERROR(EAGAIN)) {
            if (++eagain > MAX_EAGAIN)
                return reader_fail(v, err, errlen, "read error after %ld frames: the file keeps answering EAGAIN",
                                   v->frames);
            continue;
        }
        eagain = 0;
        if (ret == AVERROR_EOF) {
            avcodec_send_packet(v->dec, NULL);  // drain the pictures still inside the decoder
            v->state = RD_DRAINING;
            continue;
        }
        if (ret < 0)
            return reader_fail(v, err, errlen, "read error after %ld frames (%.3f s): %s", v->frames, v->last_time,
                               averr(ret, eb, sizeof eb));
        if (v->pkt->stream_index != v->stream) {
            av_packet_unref(v->pkt);
            continue;
        }
        ret = avcodec_send_packet(v->dec, v->pkt);
        av_packet_unref(v->pkt);
        if (ret < 0 && ret != AVERROR(EAGAIN))
            return reader_fail(v, err, errlen, "decoding error after %ld frames (%.3f s): %s", v->frames,
                               v->last_time, averr(ret, eb, sizeof eb));
        if (++v->stalled > MAX_PACKETS_WITHOUT_PICTURE)
            return reader_fail(v, err, errlen, "no picture decoded from %d packets after frame %ld",
                               MAX_PACKETS_WITHOUT_PICTURE, v->frames);
    }
}

void video_close(VideoReader *v) { reader_free(v); }

// ---------------------------------------------------------------------------------------------
// Still images.

int is_image_path(const char *path) {
    if (!path) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) return 0;
    return !strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg");
}

// stb_image 2.27 (Debian 12's libstb-dev) does not check that a JPEG Huffman table holds at most 256
// codes and writes past its tables when one claims more (fixed upstream in 2.28). Every DHT segment
// stb could reach is checked here first: the segments before the first scan in order, then every
// FF C4 after it (entropy-coded data of a sound file never holds one). 1 when all are sane.
static int jpeg_huffman_tables_sane(const uint8_t *b, size_t n) {
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return 1;  // not a JPEG: stb's other loaders decide
    size_t i = 2;
    int in_scans = 0;
    while (i + 1 < n) {
        if (b[i] != 0xFF || b[i + 1] == 0xFF) {  // data, junk or fill bytes
            i++;
            continue;
        }
        uint8_t m = b[i + 1];
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {  // stuffing, TEM, RSTn, SOI: no length
            i += 2;
            continue;
        }
        size_t len = i + 3 < n ? (size_t)b[i + 2] << 8 | b[i + 3] : 0;
        if (m == 0xC4) {
            // Tables while the segment lasts, as stb reads them (bytes past the end of the file read as 0).
            size_t p = i + 4, end = i + 2 + len;
            while (p < end && p < n) {
                unsigned total = 0;
                for (size_t k = 1; k <= 16; k++) total += p + k < n ? b[p + k] : 0;
                if (total > 256) return 0;
                p += 17 + total;
            }
        }
        if (m == 0xDA) in_scans = 1;
        // Before the first scan a segment is skipped by its length, as stb does; from there on every
        // byte is looked at.
        i += in_scans ? 2 : 2 + len;
    }
    return 1;
}

// The whole file in memory (so the check above and stb see the same bytes). NULL with why.
static uint8_t *read_file_bytes(const char *path, size_t max, size_t *n, const char **why) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = strerror(errno);
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            if (cap >= max) {
                *why = "file too large for an image";
                break;
            }
            if (ncap > max) ncap = max;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                *why = "out of memory";
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                *why = strerror(errno);
                break;
            }
            fclose(f);
            *n = len;
            return buf;
        }
    }
    fclose(f);
    free(buf);
    return NULL;
}

int image_load_square(const char *path, int size, uint8_t *rgb, char *err, size_t errlen) {
    quiet_ffmpeg();
    if (!path || !*path) {
        set_err(err, errlen, "image: empty path");
        return -1;
    }
    if (size < 1 || size > VIDEO_MAX_SIZE || !rgb) {
        set_err(err, errlen, "%s: frame size %d is not in 1..%d", path, size, VIDEO_MAX_SIZE);
        return -1;
    }
    const char *why = path_problem(path);
    size_t nbytes = 0;
    uint8_t *bytes = why ? NULL : read_file_bytes(path, (size_t)1 << 30, &nbytes, &why);
    if (!bytes) {
        set_err(err, errlen, "%s: cannot open: %s", path, why);
        return -1;
    }
    if (!jpeg_huffman_tables_sane(bytes, nbytes)) {
        set_err(err, errlen, "%s: cannot decode the image: corrupt JPEG (a Huffman table with over 256 codes)", path);
        free(bytes);
        return -1;
    }
    int w = 0, h = 0, n = 0;
    if (nbytes > INT_MAX || !stbi_info_from_memory(bytes, (int)nbytes, &w, &h, &n)) {
        set_err(err, errlen, "%s: not a PNG or JPEG image (%s)", path,
                nbytes > INT_MAX ? "too large" : stbi_failure_reason());
        free(bytes);
        return -1;
    }
    if (w < 1 || h < 1 || (long)w * h > IMAGE_MAX_PIXELS) {
        set_err(err, errlen, "%s: image size %dx%d is out of range (at most %ld pixels)", path, w, h,
                (long)IMAGE_MAX_PIXELS);
        free(bytes);
        return -1;
    }
    uint8_t *px = stbi_load_from_memory(bytes, (int)nbytes, &w, &h, &n, 3);
    free(bytes);
    if (!px) {
        set_err(err, errlen, "%s: cannot decode the image: %s", path, stbi_failure_reason());
        return -1;
    }
    // Into a padded buffer: swscale's vector code may read a little past the end of a row.
    AVFrame *f = av_frame_alloc();
    int ret = -1;
    if (f) {
        f->format = AV_PIX_FMT_RGB24;
        f->width = w;
        f->height = h;
        if (av_frame_get_buffer(f, 0) >= 0) ret = 0;
    }
    if (ret < 0) {
        set_err(err, errlen, "%s: out of memory for a %dx%d image", path, w, h);
    } else {
        for (int y = 0; y < h; y++) memcpy(f->data[0] + (size_t)y * f->linesize[0], px + (size_t)y * w * 3, (size_t)w * 3);
        Scaler sc = {0};
        char msg[256];
        ret = scale_square(&sc, f->data, f->linesize, w, h, AV_PIX_FMT_RGB24, (AVRational){1, 1}, AVCOL_SPC_RGB, 1, 0,
                           size, rgb, msg, sizeof msg);
        if (ret < 0) set_err(err, errlen, "%s: %s", path, msg);
        scaler_free(&sc);
    }
    av_frame_free(&f);
    stbi_image_free(px);
    return ret;
}

int image_write_png(const char *path, int w, int h, const uint8_t *rgb) {
    if (!path || !rgb || w < 1 || h < 1 || (long)w * 3 > 0x7fffffffL / (h > 0 ? h : 1)) {
        errno = EINVAL;
        return -1;
    }
    errno = 0;
    return stbi_write_png(path, w, h, 3, rgb, w * 3) ? 0 : -1;
}

// ---------------------------------------------------------------------------------------------
// GIF palettes: median cut on a 5-bit-per-channel histogram, one palette per frame.

#define GQ_BINS 32768

typedef struct {
    uint32_t n[GQ_BINS];
    uint64_t sum[GQ_BINS][3];
    uint16_t keys[GQ_BINS], tmp[GQ_BINS];
    uint8_t map[GQ_BINS];
} GifQuant;

typedef struct {
    int lo, hi;     // keys[lo..hi)
    uint64_t n;     // pixels
    int axis, extent;
} QBox;

static int key_chan(int key, int axis) { return (key >> (10 - 5 * axis)) & 31; }

static void qbox_measure(const GifQuant *q, QBox *b) {
    int mn[3] = {31, 31, 31}, mx[3] = {0, 0, 0};
    b->n = 0;
    for (int i = b->lo; i < b->hi; i++) {
        int k = q->keys[i];
        b->n += q->n[k];
        for (int a = 0; a < 3; a++) {
            int c = key_chan(k, a);
            if (c < mn[a]) mn[a] = c;
            if (c > mx[a]) mx[a] = c;
        }
    }
    b->axis = 0;
    b->extent = -1;
    for (int a = 0; a < 3; a++)
        if (mx[a] - mn[a] > b->extent) {
            b->extent = mx[a] - mn[a];
            b->axis = a;
        }
}

// rgb (w x h, tightly packed) to palette indices (rows of idx_stride) and a palette of 0xAARRGGBB.
static void gif_quantize(GifQuant *q, const uint8_t *rgb, int w, int h, uint8_t *idx, int idx_stride,
                         uint32_t pal[256]) {
    memset(q->n, 0, sizeof q->n);
    memset(q->sum, 0, sizeof q->sum);
    size_t np = (size_t)w * h;
    for (size_t i = 0; i < np; i++) {
        const uint8_t *p = rgb + 3 * i;
        int k = (p[0] >> 3) << 10 | (p[1] >> 3) << 5 | (p[2] >> 3);
        q->n[k]++;
        q->sum[k][0] += p[0];
        q->sum[k][1] += p[1];
        q->sum[k][2] += p[2];
    }
    int nk = 0;
    for (int k = 0; k < GQ_BINS; k++)
        if (q->n[k]) q->keys[nk++] = (uint16_t)k;
    QBox box[256];
    int nb = 1;
    box[0].lo = 0;
    box[0].hi = nk;
    qbox_measure(q, &box[0]);
    while (nb < 256) {
        // Split the box where a cut gains most: the widest extent, weighted by its pixels.
        int best = -1;
        double best_score = 0;
        for (int i = 0; i < nb; i++) {
            if (box[i].hi - box[i].lo < 2 || box[i].extent <= 0) continue;
            double s = (double)box[i].extent * box[i].extent * (double)box[i].n;
            if (s > best_score) {
                best_score = s;
                best = i;
            }
        }
        if (best < 0) break;
        QBox *b = &box[best];
        // Counting sort of the box's keys along its axis.
        int count[33] = {0};
        for (int i = b->lo; i < b->hi; i++) count[key_chan(q->keys[i], b->axis) + 1]++;
        for (int c = 0; c < 32; c++) count[c + 1] += count[c];
        for (int i = b->lo; i < b->hi; i++) q->tmp[b->lo + count[key_chan(q->keys[i], b->axis)]++] = q->keys[i];
        memcpy(q->keys + b->lo, q->tmp + b->lo, (size_t)(b->hi - b->lo) * sizeof q->keys[0]);
        // The cut at the pixel median, keeping both halves non-empty.
        uint64_t acc = 0;
        int m = b->lo + 1;
        for (int i = b->lo; i < b->hi - 1; i++) {
            acc += q->n[q->keys[i]];
            m = i + 1;
            if (2 * acc >= b->n) break;
        }
        QBox nbx = {m, b->hi, 0, 0, 0};
        b->hi = m;
        qbox_measure(q, b);
        qbox_measure(q, &nbx);
        box[nb++] = nbx;
    }
    for (int i = 0; i < 256; i++) pal[i] = 0xff000000u;
    for (int i = 0; i < nb; i++) {
        uint64_t s[3] = {0, 0, 0}, n = 0;
        for (int j = box[i].lo; j < box[i].hi; j++) {
            int k = q->keys[j];
            n += q->n[k];
            for (int a = 0; a < 3; a++) s[a] += q->sum[k][a];
            q->map[k] = (uint8_t)i;
        }
        uint32_t c[3];
        for (int a = 0; a < 3; a++) c[a] = n ? (uint32_t)((s[a] + n / 2) / n) : 0;
        pal[i] = 0xff000000u | c[0] << 16 | c[1] << 8 | c[2];
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const uint8_t *p = rgb + 3 * ((size_t)y * w + x);
            idx[(size_t)y * idx_stride + x] = q->map[(p[0] >> 3) << 10 | (p[1] >> 3) << 5 | (p[2] >> 3)];
        }
}

// ---------------------------------------------------------------------------------------------
// Writing videos.

struct VideoWriter {
    char *path;
    AVFormatContext *oc;
    AVCodecContext *enc;
    AVStream *st;
    AVFrame *frame;   // in the encoder's pixel format
    AVFrame *rgbf;    // the caller's frame, copied into padded rows
    AVPacket *pkt;
    struct SwsContext *sws;
    GifQuant *gq;
    int w, h, gif, header, failed;
    int64_t pts;
    char msg[512];
};

static int writer_fail(VideoWriter *w, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int writer_fail(VideoWriter *w, char *err, size_t errlen, const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!w->failed) snprintf(w->msg, sizeof w->msg, "%s: %s", w->path, what);
    w->failed = 1;
    set_err(err, errlen, "%s", w->msg);
    return -1;
}

static void writer_free(VideoWriter *w) {
    if (!w) return;
    if (w->oc && w->oc->pb) avio_closep(&w->oc->pb);
    avformat_free_context(w->oc);
    avcodec_free_context(&w->enc);
    av_frame_free(&w->frame);
    av_frame_free(&w->rgbf);
    av_packet_free(&w->pkt);
    sws_freeContext(w->sws);
    free(w->gq);
    free(w->path);
    free(w);
}

// Move every packet the encoder has ready into the file. 0, or an AVERROR.
static int writer_drain(VideoWriter *w) {
    for (;;) {
        int ret = avcodec_receive_packet(w->enc, w->pkt);
        if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return 0;
        if (ret < 0) return ret;
        av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
        w->pkt->stream_index = w->st->index;
        ret = av_interleaved_write_frame(w->oc, w->pkt);  // takes the packet's reference
        if (ret < 0) return ret;
    }
}

static const char *path_ext(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot : "";
}

VideoWriter *video_writer_open(const char *path, int width, int height, double fps, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    quiet_ffmpeg();
    if (!path || !*path) {
        set_err(err, errlen, "video writer: empty path");
        return NULL;
    }
    const char *ext = path_ext(path);
    const char *muxer = NULL;
    int gif = 0, mp4 = 0, avi = 0;
    if (!strcasecmp(ext, ".mp4") || !strcasecmp(ext, ".m4v")) muxer = "mp4", mp4 = 1;
    else if (!strcasecmp(ext, ".mov")) muxer = "mov", mp4 = 1;
    else if (!strcasecmp(ext, ".mkv")) muxer = "matroska";
    else if (!strcasecmp(ext, ".avi")) muxer = "avi", avi = 1;
    else if (!strcasecmp(ext, ".gif")) muxer = "gif", gif = 1;
    if (!muxer) {
        set_err(err, errlen, "%s: unknown video extension '%s' (use .mp4, .mkv, .avi or .gif)", path, ext);
        return NULL;
    }
    if (width < 1 || height < 1 || width > 16384 || height > 16384 || (gif && (width > 65535 || height > 65535))) {
        set_err(err, errlen, "%s: frame size %dx%d is out of range", path, width, height);
        return NULL;
    }
    if (!(fps > 0 && fps <= 1000)) {
        set_err(err, errlen, "%s: frame rate %g is out of range (0, 1000]", path, fps);
        return NULL;
    }
    VideoWriter *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    w->w = width;
    w->h = height;
    w->gif = gif;
    int ret = avformat_alloc_output_context2(&w->oc, NULL, muxer, NULL);
    if (ret < 0 || !w->oc) {
        set_err(err, errlen, "%s: this FFmpeg cannot write %s files", path, muxer);
        writer_free(w);
        return NULL;
    }
    const AVCodec *codec = NULL;
    if (gif) {
        codec = avcodec_find_encoder(AV_CODEC_ID_GIF);
    } else {
        if (fc_test_hook("NO_X264") <= 0) codec = avcodec_find_encoder_by_name("libx264");
        if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    }
    if (!codec) {
        set_err(err, errlen, "%s: this FFmpeg has no %s encoder", path, gif ? "GIF" : "H.264 or MPEG-4");
        writer_free(w);
        return NULL;
    }
    int x264 = !strcmp(codec->name, "libx264");
    w->enc = avcodec_alloc_context3(codec);
    w->frame = av_frame_alloc();
    w->rgbf = av_frame_alloc();
    w->pkt = av_packet_alloc();
    w->st = avformat_new_stream(w->oc, NULL);
    if (gif) w->gq = calloc(1, sizeof *w->gq);
    if (!w->enc || !w->frame || !w->rgbf || !w->pkt || !w->st || (gif && !w->gq)) {
        set_err(err, errlen, "%s: out of memory", path);
        writer_free(w);
        return NULL;
    }
    // The MPEG-4 part 2 standard caps the time base denominator at 65535.
    AVRational rate = av_d2q(fps, 65535);
    AVCodecContext *e = w->enc;
    e->width = width;
    e->height = height;
    e->time_base = av_inv_q(rate);
    e->framerate = rate;
    e->sample_aspect_ratio = (AVRational){1, 1};
    if (gif) {
        e->pix_fmt = AV_PIX_FMT_PAL8;
    } else {
        // 4:2:0 needs even sides; libx264 takes 4:4:4 for odd ones, MPEG-4 part 2 rounds up inside.
        e->pix_fmt = (x264 && ((width | height) & 1)) ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
        e->color_range = AVCOL_RANGE_MPEG;
        e->colorspace = AVCOL_SPC_SMPTE170M;
        e->gop_size = (int)fmin(250, fmax(1, lrint(fps * 2)));
        if (avi) e->max_b_frames = 0;  // AVI has no presentation times to reorder by
        if (x264) {
            av_opt_set(e->priv_data, "preset", "medium", 0);
            av_opt_set(e->priv_data, "crf", "18", 0);
        } else {
            e->flags |= AV_CODEC_FLAG_QSCALE;
            e->global_quality = FF_QP2LAMBDA * 2;
        }
    }
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER) e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    ret = avcodec_open2(e, codec, NULL);
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot open the %s encoder for %dx%d at %g fps: %s", path, codec->name, width,
                height, fps, averr(ret, eb, sizeof eb));
        writer_free(w);
        return NULL;
    }
    ret = avcodec_parameters_from_context(w->st->codecpar, e);
    w->st->time_base = e->time_base;
    w->st->avg_frame_rate = rate;
    w->st->r_frame_rate = rate;
    w->frame->format = e->pix_fmt;
    w->frame->width = width;
    w->frame->height = height;
    w->rgbf->format = AV_PIX_FMT_RGB24;
    w->rgbf->width = width;
    w->rgbf->height = height;
    if (ret < 0 || av_frame_get_buffer(w->frame, 0) < 0 || av_frame_get_buffer(w->rgbf, 0) < 0) {
        set_err(err, errlen, "%s: out of memory", path);
        writer_free(w);
        return NULL;
    }
    if (!gif) {
        w->sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, e->pix_fmt,
                                SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
        if (!w->sws) {
            set_err(err, errlen, "%s: cannot set up the RGB to YUV conversion", path);
            writer_free(w);
            return NULL;
        }
        const int *coef = sws_getCoefficients(SWS_CS_ITU601);
        sws_setColorspaceDetails(w->sws, coef, 1, coef, 0, 0, 1 << 16, 1 << 16);
    }
    // The mp4 muxer's faststart pass opens the file again by oc->url, through oc->io_open, which
    // honours the same whitelist.
    av_freep(&w->oc->url);
    char *url = file_url(path);
    w->oc->url = url ? av_strdup(url) : NULL;
    w->oc->protocol_whitelist = av_strdup("file");
    AVDictionary *io = NULL;
    av_dict_set(&io, "protocol_whitelist", "file", 0);
    ret = (url && w->oc->url && w->oc->protocol_whitelist) ? avio_open2(&w->oc->pb, url, AVIO_FLAG_WRITE, NULL, &io)
                                                          : AVERROR(ENOMEM);
    av_dict_free(&io);
    free(url);
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot create: %s", path, averr(ret, eb, sizeof eb));
        writer_free(w);
        return NULL;
    }
    AVDictionary *mo = NULL;
    if (mp4) av_dict_set(&mo, "movflags", "+faststart", 0);
    ret = avformat_write_header(w->oc, &mo);
    av_dict_free(&mo);
    if (ret < 0) {
        set_err(err, errlen, "%s: cannot write the %s header: %s", path, muxer, averr(ret, eb, sizeof eb));
        writer_free(w);
        return NULL;
    }
    w->header = 1;
    return w;
}

const char *video_writer_codec(const VideoWriter *w) { return w && w->enc ? w->enc->codec->name : ""; }

int video_writer_add(VideoWriter *w, const uint8_t *rgb, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (!w) {
        set_err(err, errlen, "video writer: none");
        return -1;
    }
    if (w->failed) {
        set_err(err, errlen, "%s", w->msg);
        return -1;
    }
    if (!rgb) return writer_fail(w, err, errlen, "no frame given");
    int ret = av_frame_make_writable(w->frame);
    if (ret < 0) return writer_fail(w, err, errlen, "out of memory");
    if (w->gif) {
        gif_quantize(w->gq, rgb, w->w, w->h, w->frame->data[0], w->frame->linesize[0], (uint32_t *)w->frame->data[1]);
    } else {
        for (int y = 0; y < w->h; y++)
            memcpy(w->rgbf->data[0] + (size_t)y * w->rgbf->linesize[0], rgb + (size_t)y * w->w * 3, (size_t)w->w * 3);
        if (sws_scale(w->sws, (const uint8_t *const *)w->rgbf->data, w->rgbf->linesize, 0, w->h, w->frame->data,
                      w->frame->linesize) != w->h)
            return writer_fail(w, err, errlen, "RGB to YUV conversion failed at frame %lld", (long long)w->pts);
    }
    w->frame->pts = w->pts++;
    ret = avcodec_send_frame(w->enc, w->frame);
    if (ret >= 0) ret = writer_drain(w);
    if (ret < 0)
        return writer_fail(w, err, errlen, "encoding or writing frame %lld failed: %s", (long long)(w->pts - 1),
                           averr(ret, eb, sizeof eb));
    return 0;
}

int video_writer_close(VideoWriter *w, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (!w) return 0;
    int ret = 0;
    if (!w->failed && w->header) {
        ret = avcodec_send_frame(w->enc, NULL);
        if (ret >= 0) ret = writer_drain(w);
        if (ret >= 0) ret = av_write_trailer(w->oc);
        if (ret < 0) writer_fail(w, err, errlen, "finishing the file failed: %s", averr(ret, eb, sizeof eb));
    }
    if (w->oc && w->oc->pb) {
        int r = avio_closep(&w->oc->pb);
        if (r < 0 && !w->failed) writer_fail(w, err, errlen, "closing the file failed: %s", averr(r, eb, sizeof eb));
    }
    int failed = w->failed;
    if (failed) set_err(err, errlen, "%s", w->msg);
    writer_free(w);
    return failed ? -1 : 0;
}
