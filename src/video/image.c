// image.c: still images (PNG and JPEG) through stb_image and stb_image_write, with a guard against
// JPEG Huffman tables that overflow stb_image 2.27. Images are squared by scale.c's resampler.
// See video.h for the contract. Nothing here exits or prints: every failure is one line in err.
#include "video/video.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/pixfmt.h>

#include "base/common.h"
#include "video/scale.h"
#include "video/video_internal.h"

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

int is_image_path(const char *path) {
    if (!path) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) return 0;
    return !strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") ||
           !strcasecmp(dot, ".jfif") || !strcasecmp(dot, ".jpe");  // JPEG's other names (its EXIF read here)
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

// stb_image decodes a JPEG whose entropy-coded data is damaged (bytes zeroed or cut, a header that
// claims more rows than the data holds) into a picture anyway, without a word. FFmpeg's decoder, told
// to stop at damage as every video's is (video_read.c), notices it: the file is decoded there too, as
// a check only (stb's pixels are kept: they are the bytes every earlier result was made from).
// 0 when it decodes whole at w x h, else -1 with why (FFmpeg's reason).
static int jpeg_decodes_whole(const uint8_t *bytes, size_t n, int w, int h, char *why, size_t whylen) {
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_MJPEG);
    if (!codec || n > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE) return 0;  // no second opinion to be had
    AVCodecContext *dec = avcodec_alloc_context3(codec);
    AVPacket *pkt = av_packet_alloc();
    AVFrame *frame = av_frame_alloc();
    int ret = !dec || !pkt || !frame ? AVERROR(ENOMEM) : av_new_packet(pkt, (int)n);
    char eb[128];
    if (ret >= 0) {
        memcpy(pkt->data, bytes, n);
        dec->err_recognition |= AV_EF_EXPLODE;
        dec->thread_count = 1;
        ret = avcodec_open2(dec, codec, NULL);
    }
    if (ret >= 0) ret = avcodec_send_packet(dec, pkt);
    if (ret >= 0) ret = avcodec_receive_frame(dec, frame);
    int rc = 0;
    if (ret < 0)
        rc = fc_errf(why, whylen, "%s", averr(ret, eb, sizeof eb));
    else if ((frame->flags & AV_FRAME_FLAG_CORRUPT) || frame->decode_error_flags)
        rc = fc_errf(why, whylen, "FFmpeg's decoder marks its picture damaged");
    else if (frame->width != w || frame->height != h)
        rc = fc_errf(why, whylen, "its data decodes to %dx%d where its header says %dx%d", frame->width, frame->height,
                     w, h);
    av_frame_free(&frame);
    av_packet_free(&pkt);
    avcodec_free_context(&dec);
    return rc;
}

static unsigned rd16(const uint8_t *p, int le) { return le ? p[0] | p[1] << 8 : p[0] << 8 | p[1]; }
static unsigned long rd32(const uint8_t *p, int le) {
    return le ? (unsigned long)rd16(p + 2, 1) << 16 | rd16(p, 1) : (unsigned long)rd16(p, 0) << 16 | rd16(p + 2, 0);
}

// The Orientation tag (0x0112, a SHORT of 1-8) in IFD0 of an Exif block's TIFF data t[0..n); 0 when
// there is none or the block is damaged. Every read is checked against n.
static int tiff_orientation(const uint8_t *t, size_t n) {
    int le;
    if (n < 8) return 0;
    if (!memcmp(t, "II*\0", 4)) le = 1;
    else if (!memcmp(t, "MM\0*", 4)) le = 0;
    else return 0;
    unsigned long ifd = rd32(t + 4, le);
    if (ifd < 8 || ifd > n - 2) return 0;
    unsigned entries = rd16(t + ifd, le);
    for (unsigned k = 0; k < entries; k++) {
        size_t e = ifd + 2 + (size_t)k * 12;
        if (e + 12 > n) return 0;
        if (rd16(t + e, le) != 0x0112) continue;
        unsigned v = rd16(t + e + 8, le);
        return rd16(t + e + 2, le) == 3 && rd32(t + e + 4, le) == 1 && v >= 1 && v <= 8 ? (int)v : 0;
    }
    return 0;
}

// 1 when a PNG has a tRNS chunk before its image data: transparency by a colour key (a grey or RGB
// image) or by palette entries. stb_image drops such an alpha when asked for 3 channels, and reports
// the image as having none, so it is asked for 4 then, as for a PNG with an alpha channel.
static int png_has_trns(const uint8_t *b, size_t n) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 8 || memcmp(b, sig, 8)) return 0;
    for (size_t at = 8; at + 8 <= n;) {
        uint32_t len = (uint32_t)b[at] << 24 | (uint32_t)b[at + 1] << 16 | (uint32_t)b[at + 2] << 8 | b[at + 3];
        const uint8_t *type = b + at + 4;
        if (!memcmp(type, "tRNS", 4)) return 1;
        if (!memcmp(type, "IDAT", 4) || !memcmp(type, "IEND", 4) || len > n - at - 8) return 0;
        at += (size_t)len + 12;  // length, type, data, CRC
    }
    return 0;
}

// A JPEG's EXIF orientation (1-8; 1, upright, when there is none or its Exif block is damaged): the
// APP1 "Exif" segment among those before the first scan, each walked by its length within the file.
static int jpeg_exif_orientation(const uint8_t *b, size_t n) {
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return 1;
    size_t i = 2;
    while (i + 4 <= n && b[i] == 0xFF) {
        uint8_t m = b[i + 1];
        if (m == 0xFF) {  // a fill byte
            i++;
            continue;
        }
        if (m == 0xDA || m == 0xD9) break;  // the first scan, or the end: no metadata after
        size_t len = (size_t)b[i + 2] << 8 | b[i + 3];
        if (len < 2 || len > n - i - 2) break;
        if (m == 0xE1 && len >= 2 + 6 + 8 && !memcmp(b + i + 4, "Exif\0\0", 6)) {
            int o = tiff_orientation(b + i + 10, len - 8);
            if (o) return o;
        }
        i += 2 + len;
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

static unsigned long be32(const uint8_t *p) {
    return (unsigned long)p[0] << 24 | (unsigned long)p[1] << 16 | (unsigned long)p[2] << 8 | p[3];
}

// What an image's header, in bytes[0..nbytes), says: 0 with its size and channels when stb_image reads it
// and it is within IMAGE_MAX_PIXELS; 1 when it claims more (a damaged header, a decompression bomb);
// 2 when it is no PNG or JPEG stb_image reads. One line in err for 1 and 2.
static int image_header(const char *path, const uint8_t *bytes, size_t nbytes, int *w, int *h, int *n, char *err,
                        size_t errlen) {
    if (nbytes > INT_MAX || !stbi_info_from_memory(bytes, (int)nbytes, w, h, n)) {
        // stb_image refuses a header whose pixels would pass 2^30 bytes as "too large": say so, with
        // the size a PNG's header gives, rather than that it is not an image
        unsigned long pw = 0, ph = 0;
        int png = nbytes >= 24 && !memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) && !memcmp(bytes + 12, "IHDR", 4);
        if (png) pw = be32(bytes + 16), ph = be32(bytes + 20);
        if (png && (double)pw * ph > IMAGE_MAX_PIXELS)
            fc_errf(err, errlen, "%s: a PNG of %lux%lu pixels, too large to read (at most %ld pixels)", path, pw, ph,
                    (long)IMAGE_MAX_PIXELS);
        else if (png && (pw > 1 << 24 || ph > 1 << 24))  // stb's largest side
            fc_errf(err, errlen, "%s: a PNG of %lux%lu pixels, too wide or tall to read (at most %d on a side)", path,
                    pw, ph, 1 << 24);
        else if (nbytes > INT_MAX || !strcmp(stbi_failure_reason(), "too large"))
            fc_errf(err, errlen, "%s: an image too large to read (at most %ld pixels)", path, (long)IMAGE_MAX_PIXELS);
        else
            return fc_errf(err, errlen, "%s: not a PNG or JPEG image (%s)", path, stbi_failure_reason()), 2;
        return 1;
    }
    if (*w < 1 || *h < 1)
        return fc_errf(err, errlen, "%s: not a PNG or JPEG image (its header states %dx%d pixels)", path, *w, *h), 2;
    if ((long)*w * *h > IMAGE_MAX_PIXELS)
        return fc_errf(err, errlen, "%s: an image of %dx%d pixels, too large to read (at most %ld pixels)", path, *w,
                       *h, (long)IMAGE_MAX_PIXELS), 1;
    return 0;
}

// A JPEG's header, after its Exif, ICC and other segments, lies well within this many bytes.
#define IMAGE_HEADER_BYTES (4 << 20)

int image_check_size(const char *path, char *err, size_t errlen) {
    FILE *f = path_problem(path) ? NULL : fopen(path, "rb");
    if (!f) return 0;  // the decoder says why
    uint8_t sig[8], *head = NULL;
    size_t n = fread(sig, 1, sizeof sig, f);
    int still = n == sizeof sig && (!memcmp(sig, "\x89PNG\r\n\x1a\n", 8) || (sig[0] == 0xFF && sig[1] == 0xD8));
    if (still && (head = malloc(IMAGE_HEADER_BYTES))) {
        memcpy(head, sig, n);
        n += fread(head + n, 1, IMAGE_HEADER_BYTES - n, f);
    }
    fclose(f);
    int w, h, comp, rc = 0;
    char why[1024];
    // (stb_image reads a JPEG's Huffman tables before its size: an insane one is left to the decoder)
    if (head && jpeg_huffman_tables_sane(head, n) && image_header(path, head, n, &w, &h, &comp, why, sizeof why) == 1)
        rc = fc_errf(err, errlen, "%s", why);
    free(head);
    return rc;
}

static int load_square(const char *path, int size, int min_side, uint8_t *rgb, int *shown_w, int *shown_h, char *err,
                       size_t errlen);

int image_load_square(const char *path, int size, uint8_t *rgb, char *err, size_t errlen) {
    return load_square(path, size, 0, rgb, NULL, NULL, err, errlen);
}
int image_load_square_min(const char *path, int size, int min_side, uint8_t *rgb, char *err, size_t errlen) {
    return load_square(path, size, min_side, rgb, NULL, NULL, err, errlen);
}
int image_load_square_size(const char *path, int size, uint8_t *rgb, int *w, int *h, char *err, size_t errlen) {
    return load_square(path, size, 0, rgb, w, h, err, errlen);
}

static int load_square(const char *path, int size, int min_side, uint8_t *rgb, int *shown_w, int *shown_h, char *err,
                       size_t errlen) {
    quiet_ffmpeg();
    if (!path || !*path) return fc_errf(err, errlen, "image: empty path");
    if (size < 1 || size > VIDEO_MAX_SIZE || !rgb)
        return fc_errf(err, errlen, "%s: frame size %d is not in 1..%d", path, size, VIDEO_MAX_SIZE);
    const char *why = path_problem(path);
    size_t nbytes = 0;
    uint8_t *bytes = why ? NULL : read_file_bytes(path, (size_t)1 << 30, &nbytes, &why);
    if (!bytes) return fc_errf(err, errlen, "%s: cannot open: %s", path, why);
    if (!jpeg_huffman_tables_sane(bytes, nbytes)) {
        fc_errf(err, errlen, "%s: cannot decode the image: corrupt JPEG (a Huffman table with over 256 codes)", path);
        free(bytes);
        return -1;
    }
    int w = 0, h = 0, n = 0;
    if (image_header(path, bytes, nbytes, &w, &h, &n, err, errlen)) {
        free(bytes);
        return -1;
    }
    if (w < min_side || h < min_side) {
        fc_errf(err, errlen, "%s: the image is %dx%d, smaller than the %dx%d frames it must fill (it would be "
                "upscaled); give one at least %d pixels on its shorter side", path, w, h, min_side, min_side, min_side);
        free(bytes);
        return -1;
    }
    // EXIF orientation 1-8 as a left-right mirror and then a clockwise turn (2, 4, 5, 7 are mirrored)
    static const int turn[9] = {0, 0, 0, 180, 180, 270, 90, 90, 270}, mirrored[9] = {0, 0, 1, 0, 1, 1, 0, 1, 0};
    int orient = jpeg_exif_orientation(bytes, nbytes);
    int sideways = turn[orient] == 90 || turn[orient] == 270;
    if (shown_w) *shown_w = sideways ? h : w;
    if (shown_h) *shown_h = sideways ? w : h;
    int comp = n == 2 || n == 4 || png_has_trns(bytes, nbytes) ? 4 : 3;  // with alpha: composited over black below
    char why_ff[256];
    if (nbytes > 2 && bytes[0] == 0xFF && bytes[1] == 0xD8 && jpeg_decodes_whole(bytes, nbytes, w, h, why_ff, sizeof why_ff)) {
        free(bytes);
        return fc_errf(err, errlen, "%s: cannot decode the image: a damaged JPEG (%s)", path, why_ff);
    }
    // A 16-bit PNG at 16 bits, rounded to 8 below (stb's own 8-bit load keeps the high byte: up to a
    // level darker, 0.3-0.5 on average, than the same picture through FFmpeg or stored at 8 bits)
    int deep = stbi_is_16_bit_from_memory(bytes, (int)nbytes);
    void *px = deep ? (void *)stbi_load_16_from_memory(bytes, (int)nbytes, &w, &h, &n, comp)
                    : (void *)stbi_load_from_memory(bytes, (int)nbytes, &w, &h, &n, comp);
    free(bytes);
    if (!px) return fc_errf(err, errlen, "%s: cannot decode the image: %s", path, stbi_failure_reason());
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
        fc_errf(err, errlen, "%s: out of memory for a %dx%d image", path, w, h);
    } else {
        for (int y = 0; y < h; y++) {
            uint8_t *o = f->data[0] + (size_t)y * f->linesize[0];
            if (deep) {  // round(v * 255 / 65535); with alpha round(c * a * 255 / 65535^2)
                const uint16_t *p = (const uint16_t *)px + (size_t)y * w * comp;
                const uint64_t one = 65535;
                for (int x = 0; x < w; x++)
                    for (int c = 0; c < 3; c++)
                        o[3 * x + c] = comp == 3 ? (uint8_t)((p[3 * x + c] * 255u + 32767) / 65535)
                                                 : (uint8_t)(((uint64_t)p[4 * x + c] * p[4 * x + 3] * 255 + one * one / 2) /
                                                             (one * one));
                continue;
            }
            const uint8_t *p = (const uint8_t *)px + (size_t)y * w * comp;
            if (comp == 3) {
                memcpy(o, p, (size_t)w * 3);
                continue;
            }
            // the colour stored under a transparent pixel is not what anyone sees: over black, c * a / 255
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) o[3 * x + c] = (uint8_t)((p[4 * x + c] * p[4 * x + 3] + 127) / 255);
        }
        Scaler sc = {0};
        char msg[256];
        ret = scale_square(&sc, f->data, f->linesize, w, h, AV_PIX_FMT_RGB24, (AVRational){1, 1}, AVCOL_SPC_RGB, AVCOL_RANGE_JPEG,
                           turn[orient], mirrored[orient], size, rgb, msg, sizeof msg);
        if (ret < 0) fc_errf(err, errlen, "%s: %s", path, msg);
        scaler_free(&sc);
    }
    av_frame_free(&f);
    stbi_image_free(px);
    return ret;
}

// All of buf to fd, retrying short writes and EINTR. 0, or -1 with errno.
static int write_all(int fd, const uint8_t *buf, size_t n) {
    while (n > 0) {
        ssize_t got = write(fd, buf, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) return errno = EIO, -1;
        buf += got, n -= (size_t)got;
    }
    return 0;
}

// stb_image_write reports no failed write (a full disk leaves an empty file behind): the PNG is
// encoded in memory and written here, every write, the fsync and the close checked.
int image_write_png(const char *path, int w, int h, const uint8_t *rgb) {
    if (!path || !rgb || w < 1 || h < 1 || (long)w * 3 > 0x7fffffffL / (h > 0 ? h : 1)) {
        errno = EINVAL;
        return -1;
    }
    int len = 0;
    unsigned char *png = stbi_write_png_to_mem(rgb, w * 3, w, h, 3, &len);
    if (!png) return errno = ENOMEM, -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666), rc = fd < 0 ? -1 : 0;
    if (rc == 0 && (write_all(fd, png, (size_t)len) || fsync(fd))) rc = -1;
    int e = errno;
    if (fd >= 0 && close(fd) && rc == 0) rc = -1, e = errno;
    STBIW_FREE(png);
    if (rc && fd >= 0) unlink(path);  // no half-written PNG left behind
    errno = e;
    return rc;
}
