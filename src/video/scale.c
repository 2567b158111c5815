// scale.c: the square resampler (see scale.h): crop the centred display square, convert it to RGB24
// at the target size with swscale, and turn it upright.
#include "video/scale.h"

#include <math.h>
#include <string.h>

#include <libavutil/imgutils.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

#include "base/common.h"

// What one picture asks of swscale: the crop, and how to convert it.
typedef struct {
    int cw, ch;     // the crop's size in source pixels
    int x0, y0;     // its top left corner
    int flags;      // SWS_* scaling flags
    int cs, full;   // the YUV matrix (SWS_CS_*) and whether the samples use the full range
    int yuv;        // whether the source is YUV at all
    int grey;       // whether it is Y alone (with alpha or not): a range, no matrix
} ScalePlan;

void scaler_free(Scaler *sc) {
    sws_freeContext(sc->sws);
    sws_freeContext(sc->flat_sws);
    av_free(sc->out);
    av_free(sc->flat);
    memset(sc, 0, sizeof *sc);
}

static int is_jpeg_range_format(enum AVPixelFormat f) {
    return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
           f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

// The crop: the square of the shorter display side, in source pixels cw x ch, centred.
static void plan_crop(const AVPixFmtDescriptor *d, int w, int h, AVRational sar, ScalePlan *p) {
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
    p->cw = cw < 1 ? 1 : cw > w ? w : cw;
    p->ch = ch < 1 ? 1 : ch > h ? h : ch;
    // The corner, moved left/up to a whole chroma sample (or byte, for 1-bit formats) so the planes
    // stay in register; that is at most a pixel or so off centre.
    int ax = 1 << d->log2_chroma_w, ay = 1 << d->log2_chroma_h;
    if (d->flags & AV_PIX_FMT_FLAG_BITSTREAM) ax = 8;
    p->x0 = (w - p->cw) / 2 / ax * ax;
    p->y0 = (h - p->ch) / 2 / ay * ay;
}

// The YUV matrix of an AVColorSpace; unspecified: what players assume, BT.709 for HD and BT.601 below.
static int yuv_matrix(int colorspace, int w, int h) {
    switch (colorspace) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M: return SWS_CS_ITU601;
    default: return (w >= 1280 || h >= 720) ? SWS_CS_ITU709 : SWS_CS_ITU601;
    }
}

// How the crop becomes size x size RGB: area averaging to shrink, bicubic to enlarge.
static void plan_conversion(const AVPixFmtDescriptor *d, enum AVPixelFormat fmt, int w, int h, int colorspace,
                            int color_range, int size, ScalePlan *p) {
    p->flags = (p->cw > size || p->ch > size) ? SWS_AREA : SWS_BICUBIC;
    p->flags |= SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP;
    int luma = !(d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL));  // YUV, or grey (Y alone)
    p->yuv = luma && d->nb_components >= 3;
    p->grey = luma && d->nb_components <= 2;
    p->full = p->grey ? color_range != AVCOL_RANGE_MPEG : color_range == AVCOL_RANGE_JPEG || is_jpeg_range_format(fmt);
    p->cs = yuv_matrix(colorspace, w, h);
    if (!p->yuv) p->cs = p->grey ? SWS_CS_DEFAULT : 0;
    if (!p->yuv && !p->grey) p->full = 0;
}

// The planes' pointers moved to the crop's corner, each by its own subsampling and pixel step.
static void crop_planes(const AVPixFmtDescriptor *d, uint8_t *const data[4], const int stride[4], const ScalePlan *p,
                        const uint8_t *src[4]) {
    int seen[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) src[i] = data[i];
    for (int c = 0; c < d->nb_components; c++) {
        const AVComponentDescriptor *cd = &d->comp[c];
        int pl = cd->plane;
        if (pl < 0 || pl > 3 || seen[pl] || !src[pl]) continue;
        seen[pl] = 1;
        int chroma = (c == 1 || c == 2) && !(d->flags & AV_PIX_FMT_FLAG_RGB);
        int sx = chroma ? d->log2_chroma_w : 0, sy = chroma ? d->log2_chroma_h : 0;
        ptrdiff_t off = (ptrdiff_t)(p->y0 >> sy) * stride[pl];
        if (d->flags & AV_PIX_FMT_FLAG_BITSTREAM)
            off += (ptrdiff_t)(p->x0 >> sx) * cd->step / 8;
        else
            off += (ptrdiff_t)(p->x0 >> sx) * cd->step;
        src[pl] += off;
    }
}

// A swscale context for the plan, made again only when the plan differs from the last one's.
static int scaler_fit_context(Scaler *sc, const AVPixFmtDescriptor *d, enum AVPixelFormat fmt, const ScalePlan *p,
                              int size, char *why, size_t whylen) {
    if (sc->sws && sc->cw == p->cw && sc->ch == p->ch && sc->fmt == (int)fmt && sc->size == size &&
        sc->flags == p->flags && sc->cs == p->cs && sc->full == p->full)
        return 0;
    sws_freeContext(sc->sws);
    sc->sws = sws_getContext(p->cw, p->ch, fmt, size, size, AV_PIX_FMT_RGB24, p->flags, NULL, NULL, NULL);
    if (!sc->sws)
        return fc_errf(why, whylen, "cannot convert %s %dx%d to %dx%d RGB", d->name, p->cw, p->ch, size, size);
    if (p->yuv || p->grey)
        sws_setColorspaceDetails(sc->sws, sws_getCoefficients(p->cs), p->full, sws_getCoefficients(SWS_CS_DEFAULT), 1,
                                 0, 1 << 16, 1 << 16);
    sc->cw = p->cw;
    sc->ch = p->ch;
    sc->fmt = fmt;
    sc->flags = p->flags;
    sc->cs = p->cs;
    sc->full = p->full;
    sc->size = size;
    return 0;
}

// A crop with alpha made RGB24 over black in sc->flat, at its own size: swscale to RGBA, then each
// colour times alpha / 255, rounded. Before the resampling, so that averaging never mixes the colour
// stored under a transparent pixel (often garbage, or a keying colour) into a visible one. 0, or -1.
static int flatten_alpha(Scaler *sc, const AVPixFmtDescriptor *d, enum AVPixelFormat fmt, const uint8_t *const src[4],
                         const int stride[4], const ScalePlan *p, char *why, size_t whylen) {
    if (!sc->flat_sws || sc->flat_w != p->cw || sc->flat_h != p->ch || sc->flat_fmt != (int)fmt ||
        sc->flat_cs != p->cs || sc->flat_full != p->full) {
        sws_freeContext(sc->flat_sws);
        av_free(sc->flat);
        sc->flat_stride = FFALIGN(p->cw * 4, 64) + 64;
        sc->flat = av_malloc((size_t)sc->flat_stride * (p->ch + 2));
        sc->flat_sws = sws_getContext(p->cw, p->ch, fmt, p->cw, p->ch, AV_PIX_FMT_RGBA,
                                      SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_FULL_CHR_H_INP, NULL,
                                      NULL, NULL);
        sc->flat_w = sc->flat_sws && sc->flat ? p->cw : 0;  // a failure is made again next time
        if (!sc->flat_w) return fc_errf(why, whylen, "cannot convert %s %dx%d to RGBA", d->name, p->cw, p->ch);
        if (p->yuv || p->grey)
            sws_setColorspaceDetails(sc->flat_sws, sws_getCoefficients(p->cs), p->full,
                                     sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
        sc->flat_h = p->ch, sc->flat_fmt = fmt, sc->flat_cs = p->cs, sc->flat_full = p->full;
    }
    uint8_t *dst[4] = {sc->flat, NULL, NULL, NULL};
    int dstride[4] = {sc->flat_stride, 0, 0, 0};
    if (sws_scale(sc->flat_sws, src, stride, 0, p->ch, dst, dstride) != p->ch)
        return fc_errf(why, whylen, "converting %s %dx%d to RGBA failed", d->name, p->cw, p->ch);
    for (int y = 0; y < p->ch; y++) {
        uint8_t *row = sc->flat + (size_t)y * sc->flat_stride;
        for (int x = 0; x < p->cw; x++) {  // in place: pixel x's RGB lands at or before its RGBA
            unsigned r = row[4 * x], g = row[4 * x + 1], b = row[4 * x + 2], a = row[4 * x + 3];
            row[3 * x] = (uint8_t)((r * a + 127) / 255);
            row[3 * x + 1] = (uint8_t)((g * a + 127) / 255);
            row[3 * x + 2] = (uint8_t)((b * a + 127) / 255);
        }
    }
    return 0;
}

// The output rows, with room to spare after each row and after the last one.
static int scaler_fit_output(Scaler *sc, int size, char *why, size_t whylen) {
    if (sc->out_size == size) return 0;
    av_free(sc->out);
    sc->out_stride = FFALIGN(size * 3, 64) + 64;
    sc->out = av_malloc((size_t)sc->out_stride * (size + 2));
    sc->out_size = sc->out ? size : 0;
    return sc->out ? 0 : fc_errf(why, whylen, "out of memory");
}

// Copy the scaled square into rgb, mirrored left to right first when asked, then turned clockwise by
// rot degrees (0, 90, 180, 270).
static void copy_rotated(const uint8_t *src, int stride, int size, int rot, int mirror, uint8_t *rgb) {
    for (int y = 0; y < size; y++) {
        uint8_t *o = rgb + (size_t)y * size * 3;
        if (rot == 0 && !mirror) {
            memcpy(o, src + (size_t)y * stride, (size_t)size * 3);
            continue;
        }
        for (int x = 0; x < size; x++) {
            int sy, sx;
            if (rot == 0) {
                sy = y;
                sx = x;
            } else if (rot == 90) {
                sy = size - 1 - x;
                sx = y;
            } else if (rot == 180) {
                sy = size - 1 - y;
                sx = size - 1 - x;
            } else {
                sy = x;
                sx = size - 1 - y;
            }
            if (mirror) sx = size - 1 - sx;
            const uint8_t *p = src + (size_t)sy * stride + (size_t)sx * 3;
            o[3 * x] = p[0];
            o[3 * x + 1] = p[1];
            o[3 * x + 2] = p[2];
        }
    }
}

int scale_square(Scaler *sc, uint8_t *const data[4], const int stride[4], int w, int h, enum AVPixelFormat fmt,
                 AVRational sar, int colorspace, int color_range, int rot, int mirror, int size, uint8_t *rgb,
                 char *why, size_t whylen) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fmt);
    if (!d || (d->flags & AV_PIX_FMT_FLAG_HWACCEL) || !sws_isSupportedInput(fmt))
        return fc_errf(why, whylen, "unsupported pixel format %s", d ? d->name : "(none)");
    if (w < 1 || h < 1) return fc_errf(why, whylen, "bad picture size %dx%d", w, h);
    ScalePlan plan;
    plan_crop(d, w, h, sar, &plan);
    plan_conversion(d, fmt, w, h, colorspace, color_range, size, &plan);
    const uint8_t *src[4];
    int sstride[4] = {stride[0], stride[1], stride[2], stride[3]};
    crop_planes(d, data, stride, &plan, src);
    if (d->flags & AV_PIX_FMT_FLAG_ALPHA) {  // over black first; the crop is then RGB24 of the same size
        if (flatten_alpha(sc, d, fmt, src, stride, &plan, why, whylen) < 0) return -1;
        fmt = AV_PIX_FMT_RGB24;
        d = av_pix_fmt_desc_get(fmt);
        src[0] = sc->flat, src[1] = src[2] = src[3] = NULL;
        sstride[0] = sc->flat_stride, sstride[1] = sstride[2] = sstride[3] = 0;
        plan.yuv = plan.grey = plan.cs = plan.full = 0;
    }
    if (scaler_fit_context(sc, d, fmt, &plan, size, why, whylen) < 0) return -1;
    if (scaler_fit_output(sc, size, why, whylen) < 0) return -1;
    uint8_t *dst[4] = {sc->out, NULL, NULL, NULL};
    int dstride[4] = {sc->out_stride, 0, 0, 0};
    if (sws_scale(sc->sws, src, sstride, 0, plan.ch, dst, dstride) != size)
        return fc_errf(why, whylen, "scaling %s %dx%d failed", d->name, plan.cw, plan.ch);
    copy_rotated(sc->out, sc->out_stride, size, rot, mirror, rgb);
    return 0;
}
