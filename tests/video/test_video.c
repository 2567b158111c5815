// test_video.c: the video layer (src/video/) against real footage (Debian's opencv-doc), clips it
// writes itself, broken files, the centre crop, uncommon pixel formats, colour ranges
// and matrices, a display matrix that turns or mirrors, timestamps that repeat (made with the ffmpeg
// program).
// One PASS/FAIL line per check, with the measured figure; exit status 1 when any check failed.
#include "video_fixture.h"

#define OPENCV_DATA "/usr/share/doc/opencv-doc/examples/data"
#define CLIP_N 40
#define CLIP_S 96
#define CLIP_FPS 25.0

// ---- reading a whole video ----

typedef struct {
    int opened, ret, frames, increasing, sticky;
    int w, h;
    double fps, t_first, t_last, seconds;
    long estimate;
    double min_mean, max_mean, min_std;  // over frames, of the RGB values
    double avg_mean;                     // the mean of the frames' means
    int flat;                            // frames with a standard deviation under 2 levels
    char err[512];
} ReadAll;

// Decode every frame of path at size; keep frame i in keep[i] (size*size*3 each) for i < keep_n.
static ReadAll read_all(const char *path, int size, uint8_t *keep, int keep_n) {
    ReadAll r;
    memset(&r, 0, sizeof r);
    r.min_mean = 1e9;
    r.min_std = 1e9;
    r.increasing = 1;
    VideoReader *v = video_open(path, r.err, sizeof r.err);
    if (!v) return r;
    r.opened = 1;
    r.w = video_width(v);
    r.h = video_height(v);
    r.fps = video_fps(v);
    r.estimate = video_frame_count_estimate(v);
    size_t fb = (size_t)size * size * 3;
    uint8_t *rgb = malloc(fb);
    double t0 = fc_now_s(), t, prev = -1;
    while ((r.ret = video_next_frame(v, size, rgb, &t, r.err, sizeof r.err)) == 1) {
        if (r.frames == 0) r.t_first = t;
        if (r.frames > 0 && !(t > prev)) r.increasing = 0;
        prev = r.t_last = t;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < fb; i++) {
            s += rgb[i];
            s2 += (double)rgb[i] * rgb[i];
        }
        double mean = s / fb, sd = sqrt(fmax(0, s2 / fb - mean * mean));
        if (mean < r.min_mean) r.min_mean = mean;
        if (mean > r.max_mean) r.max_mean = mean;
        if (sd < r.min_std) r.min_std = sd;
        r.flat += sd < 2;
        r.avg_mean += mean;
        if (r.frames < keep_n) memcpy(keep + (size_t)r.frames * fb, rgb, fb);
        r.frames++;
    }
    r.seconds = fc_now_s() - t0;
    if (r.frames) r.avg_mean /= r.frames;
    // After the end or an error, the reader keeps saying so.
    char e2[512] = "";
    int again = video_next_frame(v, size, rgb, &t, e2, sizeof e2);
    r.sticky = again == r.ret && (r.ret == 0 || strcmp(e2, r.err) == 0);
    free(rgb);
    video_close(v);
    return r;
}

// Frames per second of video_next_frame alone over a whole file; *n: the frames.
static double decode_speed(const char *path, int size, int *n) {
    char err[512];
    *n = 0;
    VideoReader *v = video_open(path, err, sizeof err);
    if (!v) return 0;
    uint8_t *rgb = malloc((size_t)size * size * 3);
    double t, t0 = fc_now_s();
    while (video_next_frame(v, size, rgb, &t, err, sizeof err) == 1) (*n)++;
    double dt = fc_now_s() - t0;
    free(rgb);
    video_close(v);
    return dt > 0 ? *n / dt : 0;
}

// ---- the synthetic clip ----

static void clip_frame(int i, int w, int h, uint8_t *rgb) {
    int bx = 8 + i, by = 20 + i / 2;  // a box moving right and down
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + 3 * ((size_t)y * w + x);
            p[0] = (uint8_t)lrint(128 + 90 * sin((x + 2.0 * i) / 15.0));
            p[1] = (uint8_t)(40 + y * 170 / (h - 1));
            p[2] = (uint8_t)(60 + (x + y + i) % 64);
            if (x >= bx && x < bx + 24 && y >= by && y < by + 24) {
                p[0] = 240;
                p[1] = 40;
                p[2] = 30;
            }
        }
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0) return 99;
    return 10 * log10(255.0 * 255.0 / (se / n));
}

static int write_clip(const char *path, int w, int h, int n, void (*make)(int, int, int, uint8_t *), char *err,
                      size_t errlen, char *codec, size_t codeclen) {
    VideoWriter *vw = video_writer_open(path, w, h, CLIP_FPS, NULL, err, errlen);
    if (!vw) return -1;
    snprintf(codec, codeclen, "%s", video_writer_codec(vw));
    uint8_t *rgb = malloc((size_t)w * h * 3);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        make(i, w, h, rgb);
        rc = video_writer_add(vw, rgb, err, errlen);
    }
    free(rgb);
    if (video_writer_close(vw, rc == 0 ? err : NULL, errlen) < 0) rc = -1;
    return rc;
}

static void test_roundtrip(const char *name, double min_psnr, int force_mpeg4) {
    char err[512] = "", codec[32] = "";
    const char *path = tmp_path(name);
    if (force_mpeg4) setenv("FRAMECHAIN_TEST_NO_X264", "1", 1);
    int rc = write_clip(path, CLIP_S, CLIP_S, CLIP_N, clip_frame, err, sizeof err, codec, sizeof codec);
    if (force_mpeg4) unsetenv("FRAMECHAIN_TEST_NO_X264");
    char cname[96];
    snprintf(cname, sizeof cname, "video_write_%s", name);
    struct stat st;
    long long bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    check(rc == 0 && bytes > 0, cname, "%s, %d frames %dx%d, %lld bytes%s%s", codec, CLIP_N, CLIP_S, CLIP_S, bytes,
          rc ? ": " : "", rc ? err : "");
    if (force_mpeg4) {
        snprintf(cname, sizeof cname, "video_write_%s_fallback", name);
        check(!strcmp(codec, "mpeg4"), cname, "without libx264 the writer uses %s (want mpeg4)", codec);
    }
    if (rc) return;
    size_t fb = (size_t)CLIP_S * CLIP_S * 3;
    uint8_t *got = malloc(fb * (CLIP_N + 1)), *want = malloc(fb);
    ReadAll r = read_all(path, CLIP_S, got, CLIP_N + 1);
    snprintf(cname, sizeof cname, "video_read_%s", name);
    check(r.opened && r.ret == 0 && r.frames == CLIP_N && r.w == CLIP_S && r.h == CLIP_S &&
              fabs(r.fps - CLIP_FPS) < 0.01,
          cname, "%d frames (want %d), %dx%d, %.3f fps, estimate %ld, end %d %s", r.frames, CLIP_N, r.w, r.h, r.fps,
          r.estimate, r.ret, r.err);
    double worst = 99, sum = 0, terr = 0;
    int n = r.frames < CLIP_N ? r.frames : CLIP_N;
    for (int i = 0; i < n; i++) {
        clip_frame(i, CLIP_S, CLIP_S, want);
        double p = psnr(want, got + (size_t)i * fb, fb);
        sum += p;
        if (p < worst) worst = p;
    }
    snprintf(cname, sizeof cname, "video_psnr_%s", name);
    check(n == CLIP_N && worst > min_psnr, cname, "PSNR min %.2f dB, mean %.2f dB over %d frames (want > %.0f dB)",
          worst, n ? sum / n : 0, n, min_psnr);
    // Times: frame i at i / fps.
    VideoReader *v = video_open(path, err, sizeof err);
    int k = 0;
    double t;
    if (v) {
        while (video_next_frame(v, 16, want, &t, err, sizeof err) == 1) {
            terr = fmax(terr, fabs(t - k / CLIP_FPS));
            k++;
        }
        video_close(v);
    }
    snprintf(cname, sizeof cname, "video_times_%s", name);
    check(k == CLIP_N && terr < 0.002, cname, "%d frames, largest |t - i/fps| %.4f s", k, terr);
    free(got);
    free(want);
}

// ---- broken files ----

static uint32_t g_rng = 12345;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 17;
    g_rng ^= g_rng << 5;
    return g_rng;
}

static void check_broken(const char *name, const char *path, int full_frames) {
    ReadAll r = read_all(path, 32, NULL, 0);
    char cname[96];
    snprintf(cname, sizeof cname, "video_broken_%s", name);
    int names_file = strstr(r.err, path) != NULL;
    if (!r.opened)
        check(r.err[0] && names_file && !strchr(r.err, '\n'), cname, "open refused: %s", r.err);
    else
        check((r.ret == -1 && r.err[0] && names_file) || (r.ret == 0 && r.frames < full_frames), cname,
              "%d of %d frames, then %s%s%s", r.frames, full_frames, r.ret == 0 ? "end" : "error",
              r.ret ? ": " : "", r.ret ? r.err : "");
    if (r.opened) {
        snprintf(cname, sizeof cname, "video_broken_%s_sticky", name);
        check(r.sticky, cname, "a call after %s returns the same", r.ret == 0 ? "the end" : "the error");
    }
}

static void test_broken(const char *clip_name) {
    size_t n = 0;
    uint8_t *b = test_read_file(tmp_path(clip_name), &n);
    if (!b || n < 8192) {
        check(0, "video_broken_inputs", "the test clip %s is missing or too small (%zu bytes)", clip_name, n);
        free(b);
        return;
    }
    const char *ext = strrchr(clip_name, '.');
    char name[64], file[96];
    snprintf(name, sizeof name, "trunc50%s", ext);
    snprintf(file, sizeof file, "%s", name);
    write_bytes(tmp_path(file), b, n / 2);
    check_broken(name, tmp_path(file), CLIP_N);
    snprintf(name, sizeof name, "trunc10%s", ext);
    snprintf(file, sizeof file, "%s", name);
    write_bytes(tmp_path(file), b, n / 10);
    check_broken(name, tmp_path(file), CLIP_N);
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    for (size_t i = n / 2 - 2048; i < n / 2 + 2048; i++) c[i] = (uint8_t)rnd();
    snprintf(name, sizeof name, "overwritten%s", ext);
    snprintf(file, sizeof file, "%s", name);
    write_bytes(tmp_path(file), c, n);
    check_broken(name, tmp_path(file), CLIP_N);
    free(c);
    free(b);
}

// ---- real footage ----

static void test_opencv(void) {
    const char *vt = OPENCV_DATA "/vtest.avi", *mm = OPENCV_DATA "/Megamind.avi";
    const char *bug = OPENCV_DATA "/Megamind_bugy.avi";
    if (!file_exists(vt) || !file_exists(mm) || !file_exists(bug)) {
        check(0, "video_opencv_footage", "%s is missing: install the Debian package opencv-doc", OPENCV_DATA);
        return;
    }
    ReadAll r = read_all(vt, 64, NULL, 0);
    check(r.opened && r.w == 768 && r.h == 576 && fabs(r.fps - 10) < 1e-6 && r.estimate == 795, "video_vtest_info",
          "%dx%d, %.4f fps, estimate %ld frames %s", r.w, r.h, r.fps, r.estimate, r.err);
    check(r.ret == 0 && r.frames == 795, "video_vtest_frames", "%d frames (want 795), end %d %s", r.frames, r.ret,
          r.err);
    check(r.frames > 0 && r.min_mean > 30 && r.max_mean < 220 && r.min_std > 10 && r.flat == 0, "video_vtest_content",
          "64x64 frames: mean %.1f..%.1f, smallest standard deviation %.1f, %d flat frames", r.min_mean, r.max_mean,
          r.min_std, r.flat);
    check(r.increasing && fabs(r.t_first) < 1e-9 && fabs(r.t_last - 79.4) < 1e-6, "video_vtest_times",
          "increasing %d, first %.3f s, last %.3f s (want 0 and 79.4)", r.increasing, r.t_first, r.t_last);
    int n64, n256;
    double fps64 = decode_speed(vt, 64, &n64), fps256 = decode_speed(vt, 256, &n256);
    check(n64 == 795 && n256 == 795 && fps64 > 50 && fps256 > 20, "video_vtest_speed",
          "768x576 MS-MPEG4v3 decoded and scaled on one thread: %.0f frames/s to 64x64, %.0f frames/s to 256x256",
          fps64, fps256);

    r = read_all(mm, 64, NULL, 0);
    check(r.opened && r.w == 720 && r.h == 528 && fabs(r.fps - 2997.0 / 125) < 1e-6 && r.estimate == 270,
          "video_megamind_info", "%dx%d, %.4f fps, estimate %ld frames %s", r.w, r.h, r.fps, r.estimate, r.err);
    // A dark trailer that starts from black: judge the clip as a whole.
    check(r.ret == 0 && r.frames == 270 && r.increasing && r.avg_mean > 5 && r.avg_mean < 200 &&
              r.flat < r.frames / 10 && r.max_mean > 20,
          "video_megamind_frames",
          "%d frames (want 270), end %d, increasing %d, frame means %.1f..%.1f (average %.1f), %d flat frames, last "
          "%.3f s %s",
          r.frames, r.ret, r.increasing, r.min_mean, r.max_mean, r.avg_mean, r.flat, r.t_last, r.err);

    r = read_all(bug, 64, NULL, 0);
    check(r.opened && (r.ret == 0 || (r.ret == -1 && r.err[0])) && r.frames <= 270 && r.increasing,
          "video_megamind_bugy", "opened %d, %d frames, then %s%s%s; times %.3f..%.3f s increasing %d", r.opened,
          r.frames, r.ret == 0 ? "end" : "error", r.ret ? ": " : "", r.ret ? r.err : "", r.t_first, r.t_last,
          r.increasing);
}

// ---- the centre crop of videos ----

static void test_video_crop(void) {
    const struct { const char *name; int w, h; } clips[2] = {{"wide_192x96.mkv", 192, 96},
                                                             {"tall_96x192.mp4", 96, 192}};
    for (int k = 0; k < 2; k++) {
        char err[512] = "", codec[32] = "", cname[64];
        snprintf(cname, sizeof cname, "video_crop_%s", k ? "tall" : "wide");
        if (write_clip(tmp_path(clips[k].name), clips[k].w, clips[k].h, 5, marker_frame, err, sizeof err, codec,
                       sizeof codec) < 0) {
            check(0, cname, "writing %s: %s", clips[k].name, err);
            continue;
        }
        uint8_t out[48 * 48 * 3];
        ReadAll r = read_all(tmp_path(clips[k].name), 48, out, 1);
        if (r.frames != 5) {
            check(0, cname, "%d frames of 5: %s", r.frames, r.err);
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "%dx%d %s at 48x48", clips[k].w, clips[k].h, codec);
        check_marker(cname, what, out, 48);
    }
    // Enlarging: the 96x96 clip at 128 (bicubic) keeps its mean colour.
    uint8_t *big = malloc(128 * 128 * 3), *src = malloc(CLIP_S * CLIP_S * 3);
    char err[512] = "";
    VideoReader *v = video_open(tmp_path("clip.mkv"), err, sizeof err);
    double t, d = 1e9;
    if (v && video_next_frame(v, 128, big, &t, err, sizeof err) == 1) {
        double a = 0, b = 0;
        clip_frame(0, CLIP_S, CLIP_S, src);
        for (int i = 0; i < 128 * 128 * 3; i++) a += big[i];
        for (int i = 0; i < CLIP_S * CLIP_S * 3; i++) b += src[i];
        d = fabs(a / (128 * 128 * 3) - b / (CLIP_S * CLIP_S * 3));
    }
    check(d < 2, "video_enlarge", "96x96 at 128x128: mean differs by %.2f levels %s", d, err);
    if (v) video_close(v);
    free(big);
    free(src);
}

// ---- pixel formats, rotation and sample aspect ratio (clips made by the ffmpeg program) ----

static int have_ffmpeg(void) { return system("ffmpeg -hide_banner -version >/dev/null 2>&1") == 0; }

static int ffmpeg_make(const char *args, const char *out) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "ffmpeg -hide_banner -nostdin -v error -y %s '%s' >/dev/null 2>&1", args, out);
    return system(cmd) == 0 ? 0 : -1;
}

// Copy an mp4 with the display matrix mat (a b u c d v x y w: 16.16 fixed point, w 2.30) written into
// its (only) track header, which FFmpeg's mov demuxer gives as the stream's display matrix.
static int patch_matrix(const char *in, const char *out, const int32_t mat[9]) {
    size_t n = 0;
    uint8_t *b = test_read_file(in, &n);
    int rc = -1;
    for (size_t i = 4; b && i + 84 <= n; i++) {
        if (memcmp(b + i, "tkhd", 4) || b[i + 4] != 0) continue;  // version 0 only
        // size(4) type(4) version+flags(4) created(4) modified(4) track(4) reserved(4) duration(4)
        // reserved(8) layer(2) group(2) volume(2) reserved(2), then the matrix.
        uint8_t *m = b + i - 4 + 48;
        for (int k = 0; k < 9; k++)
            for (int j = 0; j < 4; j++) m[4 * k + j] = (uint8_t)((uint32_t)mat[k] >> (24 - 8 * j));
        rc = write_bytes(out, b, n);
        break;
    }
    free(b);
    return rc;
}

// Copy an mp4 and write a rotation by `turn` degrees clockwise into its (only) track header matrix.
static int patch_rotation(const char *in, const char *out, int turn) {
    int32_t s = turn == 90 ? 1 : -1;
    const int32_t mat[9] = {0, s * 0x10000, 0, -s * 0x10000, 0, 0, 0, 0, 0x40000000};
    return patch_matrix(in, out, mat);
}

// Solid colour clips in pixel formats other than plain yuv420p, each read back as that colour.
static void test_pixel_formats(void) {
    const struct {
        const char *name, *args;
        int r, g, b, tol;
    } fm[] = {
        {"gray.mkv", "-f lavfi -i color=c=0x808080:s=64x48:r=10:d=0.5 -pix_fmt gray -c:v ffv1", 128, 128, 128, 3},
        // grey samples tagged limited range (16..235): 180 is (180 - 16) * 255 / 219 = 191 (the untagged
        // grey above is full range, as images are)
        {"gray_limited_range.mkv",
         "-f lavfi -i nullsrc=s=64x48:r=10:d=0.5,format=gray,geq=lum=180 -pix_fmt gray -color_range tv -c:v ffv1", 191,
         191, 191, 2},
        {"yuva420p.mkv", "-f lavfi -i color=c=0x3060C0:s=64x48:r=10:d=0.5 -pix_fmt yuva420p -c:v ffv1", 0x30, 0x60,
         0xC0, 4},
        {"yuv420p10.mkv", "-f lavfi -i color=c=0x3060C0:s=64x48:r=10:d=0.5 -pix_fmt yuv420p10le -c:v ffv1", 0x30,
         0x60, 0xC0, 4},
        {"bgra.mkv", "-f lavfi -i color=c=0xC06030:s=64x48:r=10:d=0.5 -pix_fmt bgra -c:v ffv1", 0xC0, 0x60, 0x30, 4},
        {"odd_101x67.mkv", "-f lavfi -i color=c=0xC06030:s=101x67:r=10:d=0.5 -pix_fmt yuv420p -c:v ffv1", 0xC0, 0x60,
         0x30, 4},
        {"yuv444p_bt709.mkv",
         "-f lavfi -i color=c=0xC06030:s=64x48:r=10:d=0.5 -vf scale=out_color_matrix=bt709 -pix_fmt yuv444p "
         "-colorspace bt709 -c:v ffv1",
         0xC0, 0x60, 0x30, 4},
        {"yuvj420p.avi", "-f lavfi -i color=c=0x3060C0:s=64x48:r=10:d=0.5 -pix_fmt yuvj420p -q:v 2 -c:v mjpeg", 0x30,
         0x60, 0xC0, 5},
        // full-range samples in a plain yuv420p stream, told by the stream's colour range alone
        {"yuv420p_full_range.mkv",
         "-f lavfi -i color=c=0x3060C0:s=64x48:r=10:d=0.5 -vf scale=out_range=full -pix_fmt yuv420p -color_range pc "
         "-c:v ffv1",
         0x30, 0x60, 0xC0, 4},
        // HD with no matrix named: BT.709, as players assume (the SD clips above: BT.601)
        {"hd_unnamed_matrix.mkv",
         "-f lavfi -i color=c=0xC06030:s=1280x720:r=10:d=0.5 -vf scale=out_color_matrix=bt709 -pix_fmt yuv420p "
         "-colorspace unknown -c:v ffv1",
         0xC0, 0x60, 0x30, 5},
    };
    for (size_t k = 0; k < sizeof fm / sizeof fm[0]; k++) {
        char cname[64];
        snprintf(cname, sizeof cname, "video_format_%s", fm[k].name);
        const char *p = tmp_path(fm[k].name);
        if (ffmpeg_make(fm[k].args, p) < 0) {
            check(0, cname, "ffmpeg could not make the clip: ffmpeg %s", fm[k].args);
            continue;
        }
        uint8_t rgb[24 * 24 * 3];
        ReadAll r = read_all(p, 24, rgb, 1);
        int dev = r.frames > 0 ? max_dev(rgb, 24, fm[k].r, fm[k].g, fm[k].b) : -1;
        check(r.ret == 0 && r.frames == 5 && dev >= 0 && dev <= fm[k].tol, cname,
              "%d frames, largest deviation from (%d,%d,%d) %d levels (want <= %d) %s", r.frames, fm[k].r, fm[k].g,
              fm[k].b, dev, fm[k].tol, r.err);
    }
}

// Rotation: a red bar along the top of the stored picture; the track header's matrix says "turn 90
// degrees clockwise" (or 270), so the bar must end up down the right (left) side.
static void test_rotation(void) {
    char err[512] = "";
    const char *base = tmp_path("upright.mp4");
    if (ffmpeg_make("-f lavfi -i color=c=0x6E6E6E:s=64x48:r=10:d=0.5,drawbox=x=0:y=0:w=64:h=8:color=0xE61414:t=fill "
                    "-pix_fmt yuv420p -c:v mpeg4 -q:v 2",
                    base) < 0) {
        check(0, "video_rotation", "ffmpeg could not make the clip");
    } else {
        for (int turn = 90; turn <= 270; turn += 180) {
            char name[32], cname[64];
            snprintf(name, sizeof name, "rotated%d.mp4", turn);
            snprintf(cname, sizeof cname, "video_rotation_%d", turn);
            int patched = patch_rotation(base, tmp_path(name), turn);
            uint8_t rgb[32 * 32 * 3];
            VideoReader *v = patched == 0 ? video_open(tmp_path(name), err, sizeof err) : NULL;
            int rot = v ? video_rotation(v) : -1, got = 0;
            double t;
            if (v) got = video_next_frame(v, 32, rgb, &t, err, sizeof err);
            if (v) video_close(v);
            // After the crop (the middle 48x48) and scaling to 32: the bar is 8/48*32 = 5.3 columns wide.
            int bar = 0, rest = 0;
            for (int y = 0; y < 32 && got == 1; y++)
                for (int x = 0; x < 32; x++) {
                    int red = rgb[3 * (y * 32 + x)] > 170 && rgb[3 * (y * 32 + x) + 1] < 80;
                    int col = turn == 90 ? x : 31 - x;
                    if (col >= 27) bar += red;
                    if (col < 20) rest += red;
                }
            check(got == 1 && rot == turn && bar == 32 * 5 && rest == 0, cname,
                  "patched %d, rotation %d, red pixels in the 5 columns on the %s %d of %d, elsewhere %d %s", patched,
                  rot, turn == 90 ? "right" : "left", bar, 32 * 5, rest, err);
        }
    }
}

// The quadrant of a square RGB frame around (x, y): 'R', 'G', 'B' or '-' (grey), by its dominant colour.
static char quadrant_colour(const uint8_t *rgb, int size, int x, int y) {
    const uint8_t *p = rgb + 3 * ((size_t)y * size + x);
    return p[0] > 150 && p[1] < 100 ? 'R' : p[1] > 150 && p[0] < 100 ? 'G' : p[2] > 150 && p[0] < 100 ? 'B' : '-';
}

// The four quadrants' colours, top left, top right, bottom left, bottom right.
static void quadrants(const uint8_t *rgb, int size, char out[5]) {
    int a = size / 4, b = size * 3 / 4;
    out[0] = quadrant_colour(rgb, size, a, a), out[1] = quadrant_colour(rgb, size, b, a);
    out[2] = quadrant_colour(rgb, size, a, b), out[3] = quadrant_colour(rgb, size, b, b), out[4] = 0;
}

// A display matrix that mirrors (a negative determinant: a front camera, ffmpeg -display_hflip,
// an editor's flip) is applied as FFmpeg's command-line tool applies it: a picture of four coloured
// quadrants (red, green / blue, grey) whose track header flips it, alone or with a quarter turn, reads
// as the upright file's frame with each pixel moved as the flip moves it, and shows the quadrants
// where the ffmpeg program (autorotate) shows them. A matrix of two flips is a half turn, no mirror.
static void test_mirror(void) {
    char base[512];  // tmp_path's buffers are reused
    snprintf(base, sizeof base, "%s", tmp_path("quadrants.mp4"));
    if (ffmpeg_make("-f lavfi -i color=c=0x808080:s=48x48:r=10:d=0.5,"
                    "drawbox=x=0:y=0:w=24:h=24:color=0xE01010:t=fill,drawbox=x=24:y=0:w=24:h=24:color=0x10E010:t=fill,"
                    "drawbox=x=0:y=24:w=24:h=24:color=0x1010E0:t=fill -pix_fmt yuv420p -c:v mpeg4 -q:v 2",
                    base) < 0) {
        check(0, "video_mirror", "ffmpeg could not make the clip");
        return;
    }
    enum { S = 32, N = S - 1 };
    const int32_t one = 0x10000, w = 0x40000000;
    // Each case: the matrix (as av_display_rotate_set and av_display_matrix_flip make it), what the
    // reader says of it, and where output pixel (x, y) comes from in the upright frame: (x, y), or
    // (y, x) when transposed, then each coordinate c as N - c where flipped.
    const struct {
        const char *name;
        int32_t mat[9];
        int rot, mirrored;
        int transposed, flip_x, flip_y;
    } cases[] = {
        {"hflip", {-one, 0, 0, 0, one, 0, 0, 0, w}, 0, 1, 0, 1, 0},
        {"vflip", {one, 0, 0, 0, -one, 0, 0, 0, w}, 180, 1, 0, 0, 1},
        {"hflip_vflip", {-one, 0, 0, 0, -one, 0, 0, 0, w}, 180, 0, 0, 1, 1},
        {"turn90", {0, one, 0, -one, 0, 0, 0, 0, w}, 90, 0, 1, 0, 1},
        {"turn90_hflip", {0, one, 0, one, 0, 0, 0, 0, w}, 270, 1, 1, 0, 0},
        {"turn270_hflip", {0, -one, 0, -one, 0, 0, 0, 0, w}, 90, 1, 1, 1, 1},
    };
    char err[512] = "";
    uint8_t plain[S * S * 3], got[S * S * 3];
    ReadAll r0 = read_all(base, S, plain, 1);
    char upright[5] = "?";
    if (r0.frames > 0) quadrants(plain, S, upright);
    if (strcmp(upright, "RGB-")) {
        check(0, "video_mirror", "the upright clip reads as quadrants %s, not RGB- %s", upright, r0.err);
        return;
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[64], cname[64], cmd[1200];
        snprintf(name, sizeof name, "mirror_%s.mp4", cases[k].name);
        snprintf(cname, sizeof cname, "video_mirror_%s", cases[k].name);
        const char *p = tmp_path(name);
        int patched = patch_matrix(base, p, cases[k].mat);
        VideoReader *v = patched == 0 ? video_open(p, err, sizeof err) : NULL;
        int rot = v ? video_rotation(v) : -1, mir = v ? video_mirrored(v) : -1, n = 0;
        double t;
        if (v) n = video_next_frame(v, S, got, &t, err, sizeof err);
        if (v) video_close(v);
        // each pixel against the upright frame's pixel the flip (after it, the turn) brings there
        int moved = 0;
        for (int y = 0; y < S && n == 1; y++)
            for (int x = 0; x < S; x++) {
                int sx = cases[k].transposed ? y : x, sy = cases[k].transposed ? x : y;
                if (cases[k].flip_x) sx = N - sx;
                if (cases[k].flip_y) sy = N - sy;
                moved += memcmp(got + 3 * (y * S + x), plain + 3 * (sy * S + sx), 3) != 0;
            }
        // the ffmpeg program's own reading of the patched file, turned and flipped by its display matrix
        const char *raw = tmp_path("mirror.rgb");
        snprintf(cmd, sizeof cmd, "ffmpeg -hide_banner -nostdin -v error -y -i '%s' -frames:v 1 -f rawvideo "
                 "-pix_fmt rgb24 '%s' >/dev/null 2>&1", p, raw);
        size_t rn = 0;
        uint8_t *cli = system(cmd) == 0 ? test_read_file(raw, &rn) : NULL;
        char ours[5] = "?", theirs[5] = "?";
        if (n == 1) quadrants(got, S, ours);
        if (cli && rn == 48 * 48 * 3) quadrants(cli, 48, theirs);
        free(cli);
        check(patched == 0 && n == 1 && rot == cases[k].rot && mir == cases[k].mirrored && moved == 0 &&
              !strcmp(ours, theirs), cname, "patched %d, rotation %d (want %d), mirrored %d (want %d), %d of %d "
              "pixels not where the flip puts the upright frame's; quadrants %s, the ffmpeg program's %s (upright: "
              "RGB-) %s", patched, rot, cases[k].rot, mir, cases[k].mirrored, moved, S * S, ours, theirs, err);
    }
}

// Sample aspect ratio 2:1: 64x64 stored, 128x64 shown; the square crop keeps the middle 32 columns.
static void test_sample_aspect(void) {
    const char *sp = tmp_path("sar2.mkv");
    if (ffmpeg_make("-f lavfi -i color=c=0x6E6E6E:s=64x64:r=10:d=0.5,"
                    "drawbox=x=0:y=0:w=8:h=64:color=0x1414DC:t=fill,drawbox=x=56:y=0:w=8:h=64:color=0x14DC14:t=fill,"
                    "setsar=2 -pix_fmt yuv444p -c:v ffv1",
                    sp) < 0) {
        check(0, "video_sample_aspect", "ffmpeg could not make the clip");
    } else {
        uint8_t rgb[32 * 32 * 3];
        ReadAll r = read_all(sp, 32, rgb, 1);
        double cx, cy;
        int red, stray;
        marker_stats(rgb, 32, &cx, &cy, &red, &stray);
        int dev = r.frames ? max_dev(rgb, 32, 0x6E, 0x6E, 0x6E) : -1;
        check(r.frames == 5 && stray == 0 && dev >= 0 && dev <= 3, "video_sample_aspect",
              "SAR 2:1 64x64 at 32x32: %d blue/green pixels (want 0), largest deviation from grey %d %s", stray, dev,
              r.err);
    }
}

// A clip whose container rounds its timestamps to milliseconds at 2000 frames a second: each time
// comes twice. The reader's times still increase from frame to frame, a repeated one taking the frame
// before's plus one frame period, so that resampling in time never sees two frames at one instant.
static void test_repeated_timestamps(void) {
    const char *p = tmp_path("ms_rounded.mkv");
    if (ffmpeg_make("-f lavfi -i testsrc=s=32x32:r=2000:d=0.005 -c:v ffv1", p) < 0) {
        check(0, "video_repeated_timestamps", "ffmpeg could not make the clip");
        return;
    }
    char err[512] = "";
    VideoReader *v = video_open(p, err, sizeof err);
    uint8_t rgb[16 * 16 * 3];
    double t, last = -1, period = v ? 1 / video_fps(v) : 0;
    int n = 0, increasing = 1, stepped = 0, rc;
    while (v && (rc = video_next_frame(v, 16, rgb, &t, err, sizeof err)) == 1) {
        if (n && !(t > last)) increasing = 0;
        if (n && fabs(t - last - period) < 1e-9) stepped++;  // a repeated time, moved one period on
        last = t, n++;
    }
    video_close(v);
    check(v && n == 10 && increasing && stepped >= 4, "video_repeated_timestamps",
          "10 frames at 2000 fps stored to the millisecond: %d read, times %s, %d of them one period (%.4f s) after "
          "the frame before%s%s", n, increasing ? "increasing" : "not increasing", stepped, period, err[0] ? ": " : "",
          err);
}

static void test_formats(void) {
    if (!have_ffmpeg()) {
        check(0, "video_pixel_formats", "the ffmpeg program is missing: install the Debian package ffmpeg");
        return;
    }
    test_pixel_formats();
    test_rotation();
    test_mirror();
    test_sample_aspect();
    test_repeated_timestamps();
}

// ---- bad paths and files for the reader and the writer ----

static void test_bad_inputs(void) {
    write_bytes(tmp_path("empty.mp4"), "", 0);
    write_bytes(tmp_path("text.mp4"), "hello, this is a text file and not a video at all\n", 50);
    check_broken("empty.mp4", tmp_path("empty.mp4"), CLIP_N);
    check_broken("text.mp4", tmp_path("text.mp4"), CLIP_N);
    check_broken("nonexistent", tmp_path("no_such_file.mp4"), CLIP_N);
    check_broken("directory", g_dir, CLIP_N);
    // A PNG is a one-frame "video" to FFmpeg; an image without a video stream does not exist, but a
    // WAV file is a real file with no video in it.
    char err[512] = "";
    const char *wav = tmp_path("tone.wav");
    if (have_ffmpeg() && ffmpeg_make("-f lavfi -i sine=d=0.2", wav) == 0) {
        VideoReader *v = video_open(wav, err, sizeof err);
        check(!v && strstr(err, "no video stream"), "video_broken_audio_only", "%s", v ? "opened" : err);
        if (v) video_close(v);
    }
    VideoWriter *w = video_writer_open(tmp_path("clip.webm"), 32, 32, 25, NULL, err, sizeof err);
    check(!w && strstr(err, ".webm"), "video_writer_bad_extension", "%s", w ? "opened" : err);
    if (w) video_writer_close(w, NULL, 0);
    w = video_writer_open(tmp_path("no_dir/clip.mp4"), 32, 32, 25, NULL, err, sizeof err);
    check(!w && strstr(err, "no_dir"), "video_writer_bad_dir", "%s", w ? "opened" : err);
    if (w) video_writer_close(w, NULL, 0);
    w = video_writer_open(tmp_path("zero.mp4"), 32, 32, 0, NULL, err, sizeof err);
    check(!w && err[0], "video_writer_bad_fps", "%s", w ? "opened" : err);
    if (w) video_writer_close(w, NULL, 0);
    // Odd sizes encode (4:4:4 H.264; MPEG-4 part 2 as the fallback) and read back.
    for (int force = 0; force < 2; force++) {
        char codec[32] = "", name[64], cname[64];
        snprintf(name, sizeof name, "odd_45x33_%d.mp4", force);
        snprintf(cname, sizeof cname, "video_writer_odd_size_%s", force ? "fallback" : "default");
        if (force) setenv("FRAMECHAIN_TEST_NO_X264", "1", 1);
        int rc = write_clip(tmp_path(name), 45, 33, 6, clip_frame, err, sizeof err, codec, sizeof codec);
        if (force) unsetenv("FRAMECHAIN_TEST_NO_X264");
        ReadAll r = rc == 0 ? read_all(tmp_path(name), 33, NULL, 0) : (ReadAll){0};
        check(rc == 0 && r.frames == 6 && r.w == 45 && r.h == 33, cname, "%s 45x33: wrote %d, read %d frames %dx%d %s",
              codec, rc, r.frames, r.w, r.h, rc ? err : r.err);
    }
}

// Every failure is one line, newlines in a file name folded into spaces, and a NULL err is allowed.
static void test_error_lines(void) {
    char err[512] = "";
    char path[600];
    snprintf(path, sizeof path, "%s/two\nlines/clip.mp4", g_dir);
    VideoWriter *w = video_writer_open(path, 32, 32, 25, NULL, err, sizeof err);
    check(!w && strstr(err, "two lines/clip.mp4") && !strchr(err, '\n'), "video_error_one_line_writer", "%s",
          w ? "opened" : err);
    if (w) video_writer_close(w, NULL, 0);
    err[0] = 0;
    VideoReader *v = video_open(path, err, sizeof err);
    check(!v && strstr(err, "two lines/clip.mp4") && !strchr(err, '\n'), "video_error_one_line_reader", "%s",
          v ? "opened" : err);
    if (v) video_close(v);
    v = video_open(path, NULL, 0);
    w = video_writer_open(path, 32, 32, 25, NULL, NULL, 0);
    int rc = image_load_square(path, 32, (uint8_t[32 * 32 * 3]){0}, NULL, 0);
    check(!v && !w && rc == -1, "video_error_null_err", "reader %s, writer %s, image %d", v ? "opened" : "refused",
          w ? "opened" : "refused", rc);
    if (v) video_close(v);
    if (w) video_writer_close(w, NULL, 0);
}

static void run_all(void) {
    test_opencv();
    test_roundtrip("clip.mp4", 28, 0);
    test_roundtrip("clip.avi", 28, 0);
    test_roundtrip("clip.mkv", 28, 0);
    test_roundtrip("clip_mpeg4.avi", 28, 1);
    test_roundtrip("clip.gif", 24, 0);
    test_broken("clip.mp4");
    test_broken("clip.avi");
    test_broken("clip.mkv");
    test_bad_inputs();
    test_error_lines();
    test_video_crop();
    test_formats();
}

int main(void) { return run_in_scratch("video", run_all); }
