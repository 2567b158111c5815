// video_read.c: reading videos with FFmpeg's libraries (VideoReader), and the square resampler that
// video frames and still images (image.c) share.
// See video.h for the contract. Nothing here exits or prints: every failure is one line in err.
#include "video/video.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "video/video_internal.h"

// A decoder that swallows this many packets in a row without giving a picture is stuck.
#define MAX_PACKETS_WITHOUT_PICTURE 1000
// av_read_frame answering EAGAIN this many times in a row is treated as a read error.
#define MAX_EAGAIN 1000

// FFmpeg logs to stderr by default; our messages are one line each, so its own go quiet.
void quiet_ffmpeg(void) {
    static int done;
    if (!done) {
        av_log_set_level(AV_LOG_QUIET);
        done = 1;
    }
}

// ---------------------------------------------------------------------------------------------
// The square resampler shared by video frames and images.

void scaler_free(Scaler *sc) {
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
int scale_square(Scaler *sc, uint8_t *const data[4], const int stride[4], int w, int h,
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
