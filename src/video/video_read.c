// video_read.c: reading videos with FFmpeg's libraries (VideoReader), each frame squared by scale.c.
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

#include "base/common.h"
#include "video/scale.h"
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
    int width, height, rotation, mirrored;  // the display matrix's turn after a left-right mirror
    double fps;
    long count_estimate;
    long stated_frames;  // the length the header states (video.h: a cut-short file); 0: none stated
    double stated_s;
    int state;
    long frames;         // returned so far
    int64_t start_pts;   // the stream's origin in tb units
    int have_start;
    double last_time;
    int stalled;         // video packets sent since the last picture
    int packets;         // video packets sent to the decoder
    int before_key;      // 1 while the pictures of an HEVC stream that began mid-stream are not yet whole
    long skipped;        // pictures left out for it (video_frames_skipped)
    Scaler sc;
    char msg[512];       // the sticky error
};

static int g_decoder_threads = 1;

void video_set_decoder_threads(int n) { g_decoder_threads = n < 0 ? 1 : n; }

// The stream's display matrix as a left-right mirror (*mirror) and then a clockwise turn (*rot: 0, 90,
// 180, 270), as FFmpeg's command-line tool applies it: the turn rounded to a quarter, and a mirror
// where the matrix flips (a negative determinant: a phone's front camera, an editor's flip). A flip
// turns the angle av_display_rotation_get reads by half a turn from the turn that follows the mirror:
// a plain left-right flip reads 180, a vertical flip 0 (that is, the mirror and then a half turn).
static void stream_orientation(const AVStream *st, int *rot, int *mirror) {
    *rot = *mirror = 0;
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
    if (!m) return;
    double a = -av_display_rotation_get(m);  // counterclockwise -> clockwise
    if (!isfinite(a)) return;
    a = fmod(a, 360.0);
    if (a < 0) a += 360.0;
    int turn = ((int)lrint(a / 90.0) % 4) * 90;
    // the 2x2 part's determinant, in doubles: products of 16.16 values overflow 32 bits
    double det = (double)m[0] * m[4] - (double)m[1] * m[3];
    *mirror = det < 0;
    *rot = *mirror ? (turn + 180) % 360 : turn;
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

// A reader for path with nothing opened yet, or NULL with why.
static VideoReader *reader_new(const char *path, char *err, size_t errlen) {
    if (!path || !*path) {
        fc_errf(err, errlen, "video: empty path");
        return NULL;
    }
    const char *why = path_problem(path);
    if (why) {
        fc_errf(err, errlen, "%s: cannot open: %s", path, why);
        return NULL;
    }
    if (image_check_size(path, err, errlen)) return NULL;  // a still's header claiming a vast frame
    VideoReader *v = calloc(1, sizeof *v);
    if (!v || !(v->path = strdup(path))) {
        free(v);
        fc_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    return v;
}

// The container, opened (as a local file only) and its streams probed. 0, or -1 with why.
static int reader_open_input(VideoReader *v, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    char *url = file_url(v->path);
    if (!url) return fc_errf(err, errlen, "%s: out of memory", v->path);
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "protocol_whitelist", "file", 0);
    int ret = avformat_open_input(&v->fmt, url, NULL, &opts);
    av_dict_free(&opts);
    free(url);
    // FFmpeg's codes say little here ("Device or resource busy" for an absurd frame size): what the
    // file system says is passed on, a file that ends inside its header is called cut short, and the
    // rest is an unknown format or a damaged file, FFmpeg's word in brackets.
    if (ret == AVERROR(ENOENT) || ret == AVERROR(EACCES) || ret == AVERROR(EISDIR) || ret == AVERROR(EIO))
        return fc_errf(err, errlen, "%s: cannot open: %s", v->path, averr(ret, eb, sizeof eb));
    if (ret == AVERROR_EOF)
        return fc_errf(err, errlen, "%s: cannot open: the file ends before its header or index (an MP4's moov) is "
                       "whole: cut short", v->path);
    if (ret == AVERROR_INVALIDDATA)
        return fc_errf(err, errlen, "%s: cannot open: unknown format or damaged file", v->path);
    if (ret < 0)
        return fc_errf(err, errlen, "%s: cannot open: unknown format or damaged file (%s)", v->path,
                       averr(ret, eb, sizeof eb));
    ret = avformat_find_stream_info(v->fmt, NULL);
    if (ret < 0) return fc_errf(err, errlen, "%s: cannot read the streams: %s", v->path, averr(ret, eb, sizeof eb));
    return 0;
}

// The video stream: FFmpeg's choice unless that is a cover picture, else the first real one. The
// demuxer may then skip every other stream. 0, or -1 with why.
static int reader_pick_stream(VideoReader *v, char *err, size_t errlen) {
    int idx = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (idx >= 0 && (v->fmt->streams[idx]->disposition & AV_DISPOSITION_ATTACHED_PIC)) idx = -1;
    for (unsigned i = 0; idx < 0 && i < v->fmt->nb_streams; i++) {
        const AVStream *s = v->fmt->streams[i];
        if (s->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && !(s->disposition & AV_DISPOSITION_ATTACHED_PIC))
            idx = (int)i;
    }
    if (idx < 0) return fc_errf(err, errlen, "%s: not a video (no video stream)", v->path);
    v->stream = idx;
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)
        if ((int)i != idx) v->fmt->streams[i]->discard = AVDISCARD_ALL;
    v->tb = v->fmt->streams[idx]->time_base;
    return 0;
}

// The decoder for the chosen stream, with the packet and frame it works on. 0, or -1 with why.
static int reader_open_decoder(VideoReader *v, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    const AVStream *st = v->fmt->streams[v->stream];
    const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
    // VP8 and VP9 carry transparency beside the picture (a WebM track tagged alpha_mode 1), which
    // FFmpeg's own decoders drop: the colour under transparent pixels would show. libvpx's decode it.
    const AVDictionaryEntry *alpha = av_dict_get(st->metadata, "alpha_mode", NULL, 0);
    enum AVCodecID id = st->codecpar->codec_id;
    if (alpha && !strcmp(alpha->value, "1") && (id == AV_CODEC_ID_VP8 || id == AV_CODEC_ID_VP9)) {
        const AVCodec *vpx = avcodec_find_decoder_by_name(id == AV_CODEC_ID_VP9 ? "libvpx-vp9" : "libvpx");
        if (!vpx)
            return fc_errf(err, errlen, "%s: a %s video with transparency, which this FFmpeg cannot decode (no libvpx "
                           "decoder: its own drops the transparency)", v->path, avcodec_get_name(id));
        codec = vpx;
    }
    if (!codec)
        return fc_errf(err, errlen, "%s: unsupported codec %s (this FFmpeg has no decoder for it)", v->path,
                       avcodec_get_name(st->codecpar->codec_id));
    v->dec = avcodec_alloc_context3(codec);
    v->pkt = av_packet_alloc();
    v->frame = av_frame_alloc();
    if (!v->dec || !v->pkt || !v->frame) return fc_errf(err, errlen, "%s: out of memory", v->path);
    int ret = avcodec_parameters_to_context(v->dec, st->codecpar);
    if (ret >= 0) {
        v->dec->pkt_timebase = st->time_base;
        v->dec->thread_count = g_decoder_threads;
        // Damage the decoder notices is an error, not a concealed picture in the training data. Not
        // for TIFF, whose decoder under it refuses every tag it does not know, such as the
        // ResolutionUnit FFmpeg's own TIFFs carry (a cut TIFF still fails: it has no picture).
        if (codec->id != AV_CODEC_ID_TIFF) v->dec->err_recognition |= AV_EF_EXPLODE;
        ret = avcodec_open2(v->dec, codec, NULL);
    }
    if (ret < 0)
        return fc_errf(err, errlen, "%s: cannot open the %s decoder: %s", v->path,
                       avcodec_get_name(st->codecpar->codec_id), averr(ret, eb, sizeof eb));
    return 0;
}

// The stream's frame rate: the average (a high-speed camera's thousands too, up to the 1e6 a shard
// records), else the base rate up to 1000 (above, it is a container's clock, a Matroska's 1 kHz or
// MPEG's 90 kHz, not frames), else 25 when neither is believable.
static double stream_fps(const AVStream *st) {
    AVRational a = st->avg_frame_rate, r = st->r_frame_rate;
    double avg = (a.num > 0 && a.den > 0) ? av_q2d(a) : 0, base = (r.num > 0 && r.den > 0) ? av_q2d(r) : 0;
    if (avg > 0 && avg <= 1e6) return avg;
    return base > 0 && base <= VIDEO_MAX_FPS ? base : 25;
}

// How many frames the stream holds, by its count or its duration or the file's; -1 when unknown.
static long frame_count_estimate(const AVFormatContext *fmt, const AVStream *st, double fps) {
    double est = -1;
    if (st->nb_frames > 0)
        est = (double)st->nb_frames;
    else if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
        est = st->duration * av_q2d(st->time_base) * fps;
    else if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
        est = fmt->duration / (double)AV_TIME_BASE * fps;
    return (est >= 0 && est < 1e12) ? (long)llround(est) : -1;
}

// Whether the file holds streams besides the video (audio, subtitles; a cover picture is no stream of
// its own): then the header's duration is the longest stream's, not the video's.
static int other_streams(const VideoReader *v) {
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)
        if ((int)i != v->stream && !(v->fmt->streams[i]->disposition & AV_DISPOSITION_ATTACHED_PIC)) return 1;
    return 0;
}

// The length the container states for the stream: its frame count, else its duration in seconds:
// the stream's DURATION tag (Matroska, WebM: per track, so a longer audio track is no matter), else
// the header's duration where the video is the file's only stream (OGG, FLV and ASF state the whole
// file's: a longer audio track was taken for a cut video). A duration FFmpeg estimated is no
// statement: one from the bitrate is a guess, one from the last timestamps (MPEG-TS) moves with the
// cut. A frame count above what the stream's own duration holds is an MP4 cut with an edit list
// (ffmpeg -ss T -c copy): its count includes the samples before the cut, which the list leaves out.
static void stated_length(VideoReader *v, const AVStream *st) {
    int h, m;
    double sec;
    const AVDictionaryEntry *tag = av_dict_get(st->metadata, "DURATION", NULL, 0);
    if (st->nb_frames > 0) {
        v->stated_frames = (long)st->nb_frames;
        // (an MP4's track duration is its header's, after the edit list; other demuxers may estimate one)
        int mp4 = strstr(v->fmt->iformat->name, "mp4") != NULL;
        double held = mp4 && st->duration != AV_NOPTS_VALUE && st->duration > 0 ? st->duration * av_q2d(st->time_base) * v->fps : -1;
        if (held > 0 && held + 1 < v->stated_frames) v->stated_frames = (long)ceil(held);
    } else if (tag && sscanf(tag->value, "%d:%d:%lf", &h, &m, &sec) == 3 && h >= 0 && m >= 0 && sec >= 0) {
        v->stated_s = h * 3600.0 + m * 60.0 + sec;
    } else if (v->fmt->duration_estimation_method == AVFMT_DURATION_FROM_STREAM && v->fmt->duration > 0 &&
               v->fmt->duration != AV_NOPTS_VALUE && !other_streams(v)) {
        v->stated_s = v->fmt->duration / (double)AV_TIME_BASE;
    }
    if (!(v->stated_s < 1e9)) v->stated_s = 0;
}

// What video.h tells about the stream before a frame is read: size, rate, length, orientation, and
// where its time starts. 0, or -1 with why.
static int reader_describe(VideoReader *v, char *err, size_t errlen) {
    const AVStream *st = v->fmt->streams[v->stream];
    v->width = st->codecpar->width;
    v->height = st->codecpar->height;
    if (v->width <= 0 || v->height <= 0)
        return fc_errf(err, errlen, "%s: the video stream has no frame size", v->path);
    v->fps = stream_fps(st);
    v->count_estimate = frame_count_estimate(v->fmt, st, v->fps);
    stream_orientation(st, &v->rotation, &v->mirrored);
    stated_length(v, st);
    if (st->start_time != AV_NOPTS_VALUE) {
        v->start_pts = st->start_time;
        v->have_start = 1;
    }
    return 0;
}

VideoReader *video_open(const char *path, char *err, size_t errlen) {
    quiet_ffmpeg();
    VideoReader *v = reader_new(path, err, errlen);
    if (!v) return NULL;
    if (reader_open_input(v, err, errlen) < 0 || reader_pick_stream(v, err, errlen) < 0 ||
        reader_open_decoder(v, err, errlen) < 0 || reader_describe(v, err, errlen) < 0) {
        reader_free(v);
        return NULL;
    }
    v->state = RD_RUNNING;
    return v;
}

int video_width(const VideoReader *v) { return v ? v->width : 0; }
int video_height(const VideoReader *v) { return v ? v->height : 0; }
double video_fps(const VideoReader *v) { return v ? v->fps : 25; }
double video_time_tick(const VideoReader *v) { return v && v->tb.num > 0 && v->tb.den > 0 ? av_q2d(v->tb) : 0; }
long video_frame_count_estimate(const VideoReader *v) { return v ? v->count_estimate : -1; }
int video_rotation(const VideoReader *v) { return v ? v->rotation : 0; }
int video_mirrored(const VideoReader *v) { return v ? v->mirrored : 0; }
long video_frames_read(const VideoReader *v) { return v ? v->frames : 0; }
long video_frames_skipped(const VideoReader *v) { return v ? v->skipped : 0; }

// The reader stops for good: its sticky error names the file, and goes into err. -1.
static int reader_fail(VideoReader *v, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int reader_fail(VideoReader *v, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sticky_verrf(v->msg, sizeof v->msg, v->path, err, errlen, fmt, ap);
    va_end(ap);
    v->state = RD_FAILED;
    av_frame_unref(v->frame);
    return -1;
}

// An MPEG transport stream states no length, but it is whole packets of 188 bytes (192 in M2TS, 204
// with error correction), each from a sync byte 0x47 on (M2TS: after a 4-byte time stamp). A file cut inside a packet
// ends in a torn one: a sync byte on the packets' grid with fewer bytes after it than a packet holds.
// Junk before the first packet moves the grid; padding after the last whole packet has no sync byte
// on it: neither is taken for a cut. (A cut on a packet's edge cannot be told from an end.) 1 when the
// file at path ends in a torn packet (*bytes: its size), else 0.
static int ts_ends_torn(const char *path, long long *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t head[4096];
    size_t got = fread(head, 1, sizeof head, f);
    int torn = 0;
    if (!fseeko(f, 0, SEEK_END) && (*bytes = ftello(f)) > 0) {
        static const int sizes[] = {188, 192, 204};
        for (int k = 0; k < 3 && !torn; k++) {
            size_t P = (size_t)sizes[k], s0 = 0;
            while (s0 + 2 * P < got && !(head[s0] == 0x47 && head[s0 + P] == 0x47 && head[s0 + 2 * P] == 0x47)) s0++;
            if (s0 + 2 * P >= got || s0 >= P) continue;  // not packets of this size
            // an M2TS packet is a 4-byte time stamp, then the 188 bytes from the sync byte on
            long long h = P == 192 ? 4 : 0, r = (*bytes - (long long)s0 + h) % (long long)P;
            uint8_t b = 0;
            torn = r > h && !fseeko(f, *bytes - r + h, SEEK_SET) && fread(&b, 1, 1, f) == 1 && b == 0x47;
            break;  // the packets' size found: its grid decides
        }
    }
    fclose(f);
    return torn;
}

// At the end of the stream: a file that ends well short (under 95%, and 3 frames or more) of the length
// its header states was cut short (a copy or download broken off). Some demuxers (Matroska, WebM)
// take the cut for the end, so this is the only sign of it. 0, or -1 with why.
#define CUT_SHORT_FRACTION 0.95
static int reader_check_length(VideoReader *v, char *err, size_t errlen) {
    double covered = v->frames ? v->last_time + 1.0 / v->fps : 0;
    long decoded = v->frames + v->skipped;  // (the pictures left out before a key one are in the count too)
    if (v->stated_frames > 0 && decoded < CUT_SHORT_FRACTION * v->stated_frames && v->stated_frames - decoded >= 3)
        return reader_fail(v, err, errlen, "ended after %ld of the %ld frames its header states: the file looks cut "
                           "short", decoded, v->stated_frames);
    // three frames or more missing, counted in frames with a millionth of one to spare: 1.2 s - 0.9 s at
    // 10 fps comes out just under 0.3 s in double
    if (v->stated_s > 0 && covered < CUT_SHORT_FRACTION * v->stated_s && (v->stated_s - covered) * v->fps >= 3 - 1e-6)
        return reader_fail(v, err, errlen, "ended after %ld frames (%.3f s) of the %.3f s its header states: the "
                           "file looks cut short", v->frames, covered, v->stated_s);
    // a transport stream (which states no length) that ends in a torn packet
    long long bytes = 0;
    if (!strcmp(v->fmt->iformat->name, "mpegts") && ts_ends_torn(v->path, &bytes))
        return reader_fail(v, err, errlen, "ended after %ld frames in a torn transport-stream packet (its last "
                           "packet cut off at %lld bytes): the file looks cut short", v->frames, bytes);
    return 0;
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

// A key picture (FFmpeg 6.1 moved the mark from key_frame into flags, and 8 removed key_frame).
static int frame_is_key(const AVFrame *f) {
#if LIBAVUTIL_VERSION_INT >= AV_VERSION_INT(58, 7, 100)
    return (f->flags & AV_FRAME_FLAG_KEY) != 0;
#else
    return f->key_frame;
#endif
}

int video_next_frame(VideoReader *v, int size, uint8_t *rgb, double *time_s, char *err, size_t errlen) {
    char eb[AV_ERROR_MAX_STRING_SIZE];
    if (!v) return fc_errf(err, errlen, "video: no reader");
    if (v->state == RD_END) return 0;
    if (v->state == RD_FAILED) return fc_errf(err, errlen, "%s", v->msg);
    if (size < 1 || size > VIDEO_MAX_SIZE || !rgb)
        return fc_errf(err, errlen, "%s: frame size %d is not in 1..%d", v->path, size, VIDEO_MAX_SIZE);
    int eagain = 0;
    for (;;) {
        int ret = avcodec_receive_frame(v->dec, v->frame);
        if (ret == 0 && v->before_key && !frame_is_key(v->frame) && v->frame->pict_type != AV_PICTURE_TYPE_I) {
            av_frame_unref(v->frame);  // a picture made from references the file does not hold
            v->skipped++;
            continue;
        }
        if (ret == 0) {
            v->before_key = 0;
            AVFrame *f = v->frame;
            char why[256];
            AVRational sar = av_guess_sample_aspect_ratio(v->fmt, v->fmt->streams[v->stream], f);
            if (scale_square(&v->sc, f->data, f->linesize, f->width, f->height, (enum AVPixelFormat)f->format, sar,
                             f->colorspace, f->color_range, v->rotation, v->mirrored, size, rgb, why,
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
            if (reader_check_length(v, err, errlen)) return -1;
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
        // An HEVC stream cut mid-stream (a recording started at any point, a cut without re-encoding)
        // begins with pictures whose references came before the cut: the decoder makes them anyway, a flat
        // grey, and flags nothing (H.264's and MPEG-2's decoders leave such pictures out themselves). Its
        // pictures before the first key picture are left out, and said.
        if (!v->packets++)
            v->before_key = !(v->pkt->flags & AV_PKT_FLAG_KEY) && v->dec->codec_id == AV_CODEC_ID_HEVC;
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
