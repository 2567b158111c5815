// video_write.c: writing videos with FFmpeg's libraries (VideoWriter): H.264 (or MPEG-4 part 2) in
// MP4, MOV, Matroska or AVI, and GIF with a median-cut palette per frame.
// See video.h for the contract. Nothing here exits or prints: every failure is one line in err.
#include "video/video.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

#include "base/common.h"
#include "video/video_internal.h"

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

// The writer fails for good: its sticky error names the file, and goes into err. -1.
static int writer_fail(VideoWriter *w, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int writer_fail(VideoWriter *w, char *err, size_t errlen, const char *fmt, ...) {
    w->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    sticky_verrf(w->msg, sizeof w->msg, w->path, err, errlen, fmt, ap);
    va_end(ap);
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

// The container a file name asks for, by its extension.
typedef struct {
    const char *muxer;  // FFmpeg's name for it; NULL for an extension we do not write
    int gif, mp4, avi;  // GIF; MP4 or MOV (faststart); AVI (no B-frames)
} OutputKind;

static OutputKind output_kind(const char *ext) {
    OutputKind k = {NULL, 0, 0, 0};
    if (!strcasecmp(ext, ".mp4") || !strcasecmp(ext, ".m4v")) k.muxer = "mp4", k.mp4 = 1;
    else if (!strcasecmp(ext, ".mov")) k.muxer = "mov", k.mp4 = 1;
    else if (!strcasecmp(ext, ".mkv")) k.muxer = "matroska";
    else if (!strcasecmp(ext, ".avi")) k.muxer = "avi", k.avi = 1;
    else if (!strcasecmp(ext, ".gif")) k.muxer = "gif", k.gif = 1;
    return k;
}

int video_index_bytes_per_frame(const char *path) {
    OutputKind k = output_kind(path_ext(path));
    return k.mp4 ? 80 : k.avi ? 24 : 0;
}

// The request, checked before anything is made: a path with a known extension, a frame size and
// a frame rate in range. 0 with its kind, or -1 with why.
static int writer_check_request(const char *path, int width, int height, double fps, OutputKind *kind, char *err,
                                size_t errlen) {
    if (!path || !*path) return fc_errf(err, errlen, "video writer: empty path");
    const char *ext = path_ext(path);
    *kind = output_kind(ext);
    if (!kind->muxer)
        return fc_errf(err, errlen, "%s: unknown video extension '%s' (use .mp4, .mkv, .avi or .gif)", path, ext);
    if (width < 1 || height < 1 || width > 16384 || height > 16384 ||
        (kind->gif && (width > 65535 || height > 65535)))
        return fc_errf(err, errlen, "%s: frame size %dx%d is out of range", path, width, height);
    if (!(fps > 0 && fps <= VIDEO_MAX_FPS))
        return fc_errf(err, errlen, "%s: frame rate %g is out of range (0, %d]", path, fps, VIDEO_MAX_FPS);
    if (kind->gif && fps > VIDEO_GIF_MAX_FPS)
        return fc_errf(err, errlen, "%s: frame rate %g: a GIF's frame delays are whole hundredths of a second, at "
                       "least 2, so at most %d frames a second", path, fps, VIDEO_GIF_MAX_FPS);
    return 0;
}

// GIF for .gif; else libx264 where this FFmpeg has it (and the tests do not forbid it), MPEG-4 part 2
// where not.
static const AVCodec *find_encoder(int gif) {
    if (gif) return avcodec_find_encoder(AV_CODEC_ID_GIF);
    const AVCodec *codec = NULL;
    if (fc_test_hook("NO_X264") <= 0) codec = avcodec_find_encoder_by_name("libx264");
    return codec ? codec : avcodec_find_encoder(AV_CODEC_ID_MPEG4);
}

// The muxer, the encoder's context and what frames and packets pass through. 0 with the encoder in
// *codec, or -1 with why.
static int writer_alloc_parts(VideoWriter *w, const OutputKind *kind, const AVCodec **codec, char *err,
                              size_t errlen) {
    int ret = avformat_alloc_output_context2(&w->oc, NULL, kind->muxer, NULL);
    if (ret < 0 || !w->oc) return fc_errf(err, errlen, "%s: this FFmpeg cannot write %s files", w->path, kind->muxer);
    // the same frames, the same file: Matroska's writer otherwise draws random segment and track IDs
    w->oc->flags |= AVFMT_FLAG_BITEXACT;
    *codec = find_encoder(kind->gif);
    if (!*codec)
        return fc_errf(err, errlen, "%s: this FFmpeg has no %s encoder", w->path,
                       kind->gif ? "GIF" : "H.264 or MPEG-4");
    w->enc = avcodec_alloc_context3(*codec);
    w->frame = av_frame_alloc();
    w->rgbf = av_frame_alloc();
    w->pkt = av_packet_alloc();
    w->st = avformat_new_stream(w->oc, NULL);
    if (kind->gif) w->gq = calloc(1, sizeof *w->gq);
    if (!w->enc || !w->frame || !w->rgbf || !w->pkt || !w->st || (kind->gif && !w->gq))
        return fc_errf(err, errlen, "%s: out of memory", w->path);
    return 0;
}

// The encoder's settings: frame size and rate, pixel format, and quality.
static void writer_configure_encoder(VideoWriter *w, const AVCodec *codec, const OutputKind *kind, double fps) {
    int x264 = !strcmp(codec->name, "libx264");
    // The MPEG-4 part 2 standard caps the time base denominator at 65535.
    AVRational rate = av_d2q(fps, 65535);
    AVCodecContext *e = w->enc;
    e->width = w->w;
    e->height = w->h;
    e->time_base = av_inv_q(rate);
    e->framerate = rate;
    e->sample_aspect_ratio = (AVRational){1, 1};
    if (kind->gif) {
        e->pix_fmt = AV_PIX_FMT_PAL8;
    } else {
        // 4:2:0 needs even sides; libx264 takes 4:4:4 for odd ones, MPEG-4 part 2 rounds up inside.
        e->pix_fmt = (x264 && ((w->w | w->h) & 1)) ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
        e->color_range = AVCOL_RANGE_MPEG;
        e->colorspace = AVCOL_SPC_SMPTE170M;
        e->gop_size = (int)fmin(250, fmax(1, lrint(fps * 2)));
        if (kind->avi) e->max_b_frames = 0;  // AVI has no presentation times to reorder by
        if (x264) {
            av_opt_set(e->priv_data, "preset", "medium", 0);
            av_opt_set(e->priv_data, "crf", "18", 0);
        } else {
            e->flags |= AV_CODEC_FLAG_QSCALE;
            e->global_quality = FF_QP2LAMBDA * 2;
        }
    }
    if (w->oc->oformat->flags & AVFMT_GLOBALHEADER) e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
}

// The encoder opened, the stream described from it, and the two frames' buffers. 0, or -1 with why.
static int writer_open_encoder(VideoWriter *w, const AVCodec *codec, double fps, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    AVCodecContext *e = w->enc;
    int ret = avcodec_open2(e, codec, NULL);
    if (ret < 0)
        return fc_errf(err, errlen, "%s: cannot open the %s encoder for %dx%d at %g fps: %s", w->path, codec->name,
                       w->w, w->h, fps, averr(ret, eb, sizeof eb));
    ret = avcodec_parameters_from_context(w->st->codecpar, e);
    w->st->time_base = e->time_base;
    w->st->avg_frame_rate = e->framerate;
    w->st->r_frame_rate = e->framerate;
    w->frame->format = e->pix_fmt;
    w->frame->width = w->w;
    w->frame->height = w->h;
    w->rgbf->format = AV_PIX_FMT_RGB24;
    w->rgbf->width = w->w;
    w->rgbf->height = w->h;
    if (ret < 0 || av_frame_get_buffer(w->frame, 0) < 0 || av_frame_get_buffer(w->rgbf, 0) < 0)
        return fc_errf(err, errlen, "%s: out of memory", w->path);
    return 0;
}

// RGB to the encoder's YUV, BT.601 limited range as the stream says (GIF needs none). 0, or -1 with why.
static int writer_open_converter(VideoWriter *w, char *err, size_t errlen) {
    if (w->gif) return 0;
    w->sws = sws_getContext(w->w, w->h, AV_PIX_FMT_RGB24, w->w, w->h, w->enc->pix_fmt,
                            SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, NULL, NULL, NULL);
    if (!w->sws) return fc_errf(err, errlen, "%s: cannot set up the RGB to YUV conversion", w->path);
    const int *coef = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(w->sws, coef, 1, coef, 0, 0, 1 << 16, 1 << 16);
    return 0;
}

// The output file, created as a local file only. 0, or -1 with why.
static int writer_create_file(VideoWriter *w, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    // The mp4 muxer's faststart pass opens the file again by oc->url, through oc->io_open, which
    // honours the same whitelist.
    av_freep(&w->oc->url);
    char *url = file_url(w->path);
    w->oc->url = url ? av_strdup(url) : NULL;
    w->oc->protocol_whitelist = av_strdup("file");
    AVDictionary *io = NULL;
    av_dict_set(&io, "protocol_whitelist", "file", 0);
    int ret = (url && w->oc->url && w->oc->protocol_whitelist)
                  ? avio_open2(&w->oc->pb, url, AVIO_FLAG_WRITE, NULL, &io)
                  : AVERROR(ENOMEM);
    av_dict_free(&io);
    free(url);
    if (ret < 0) return fc_errf(err, errlen, "%s: cannot create: %s", w->path, averr(ret, eb, sizeof eb));
    return 0;
}

// The container's header, with the comment tag (NULL: none). 0, or -1 with why.
static int writer_write_header(VideoWriter *w, const OutputKind *kind, const char *comment, char *err,
                               size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (comment && av_dict_set(&w->oc->metadata, "comment", comment, 0) < 0)
        return fc_errf(err, errlen, "%s: out of memory", w->path);
    AVDictionary *mo = NULL;
    if (kind->mp4) av_dict_set(&mo, "movflags", "+faststart", 0);
    int ret = avformat_write_header(w->oc, &mo);
    av_dict_free(&mo);
    if (ret < 0)
        return fc_errf(err, errlen, "%s: cannot write the %s header: %s", w->path, kind->muxer,
                       averr(ret, eb, sizeof eb));
    w->header = 1;
    return 0;
}

VideoWriter *video_writer_open(const char *path, int width, int height, double fps, const char *comment, char *err,
                               size_t errlen) {
    quiet_ffmpeg();
    OutputKind kind = {NULL, 0, 0, 0};
    if (writer_check_request(path, width, height, fps, &kind, err, errlen) < 0) return NULL;
    VideoWriter *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        fc_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    w->w = width;
    w->h = height;
    w->gif = kind.gif;
    const AVCodec *codec = NULL;
    if (writer_alloc_parts(w, &kind, &codec, err, errlen) < 0) {
        writer_free(w);
        return NULL;
    }
    writer_configure_encoder(w, codec, &kind, fps);
    if (writer_open_encoder(w, codec, fps, err, errlen) < 0 || writer_open_converter(w, err, errlen) < 0 ||
        writer_create_file(w, err, errlen) < 0 || writer_write_header(w, &kind, comment, err, errlen) < 0) {
        writer_free(w);
        return NULL;
    }
    return w;
}

const char *video_writer_codec(const VideoWriter *w) { return w && w->enc ? w->enc->codec->name : ""; }

int video_writer_add(VideoWriter *w, const uint8_t *rgb, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (!w) return fc_errf(err, errlen, "video writer: none");
    if (w->failed) return fc_errf(err, errlen, "%s", w->msg);
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
    if (failed) fc_errf(err, errlen, "%s", w->msg);
    writer_free(w);
    return failed ? -1 : 0;
}
