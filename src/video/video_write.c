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
