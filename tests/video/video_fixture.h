// video_fixture.h: what the video layer's tests (test_video.c, test_image.c) share: stb_image_write
// for their own PNGs and JPEGs, a scratch folder and paths in it, the marker picture whose centre a
// centre crop must keep, and their main.
#ifndef FRAMECHAIN_VIDEO_FIXTURE_H
#define FRAMECHAIN_VIDEO_FIXTURE_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "video/video.h"
#include "base/clock.h"

// stb_image_write, for the test's own PNGs and JPEGs. Its JPEG bit writer shifts bits out of a signed
// int (undefined behaviour that compilers wrap, harmless here), which stops the sanitizer build; so
// its functions carry no_sanitize("undefined"): every standard header it uses is included first, then
// `static` is a macro that adds the attribute while the header is read.
#include <assert.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#ifdef __clang__
#pragma GCC diagnostic ignored "-Wunknown-warning-option"
#endif
#pragma GCC diagnostic ignored "-Wattributes"
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define STBIW_ASSERT(x) assert(x)
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define static static __attribute__((no_sanitize("undefined")))
#include <stb/stb_image_write.h>
#undef static
#pragma GCC diagnostic pop

static char g_dir[256];  // the scratch folder (run_in_scratch)

static inline void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "FAIL watchdog: the test ran past its time limit (a hang)\n";
    ssize_t r = write(1, msg, sizeof msg - 1);
    (void)r;
    _exit(1);
}

static inline const char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static inline int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static inline int write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

// The largest difference of a square RGB frame from the colour (r, g, b), in levels.
static inline int max_dev(const uint8_t *rgb, int size, int r, int g, int b) {
    int worst = 0;
    for (int i = 0; i < size * size; i++) {
        int d0 = abs(rgb[3 * i] - r), d1 = abs(rgb[3 * i + 1] - g), d2 = abs(rgb[3 * i + 2] - b);
        int d = d0 > d1 ? d0 : d1;
        d = d > d2 ? d : d2;
        if (d > worst) worst = d;
    }
    return worst;
}

// An RGB picture w x h: grey, blue in the left quarter, green in the right quarter (or top/bottom for a
// tall one), a red square of side m in the centre.
static inline void marker_frame(int i, int w, int h, uint8_t *rgb) {
    (void)i;
    int m = (w < h ? w : h) / 6;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + 3 * ((size_t)y * w + x);
            int pos = w >= h ? x : y, len = w >= h ? w : h;
            p[0] = p[1] = p[2] = 110;
            if (pos < len / 4) p[0] = 20, p[1] = 20, p[2] = 220;
            if (pos >= len - len / 4) p[0] = 20, p[1] = 220, p[2] = 20;
            if (abs(2 * x - (w - 1)) < m && abs(2 * y - (h - 1)) < m) p[0] = 230, p[1] = 20, p[2] = 20;
        }
}

// Where the red marker is in a square frame, and how many blue or green pixels are left.
static inline void marker_stats(const uint8_t *rgb, int size, double *cx, double *cy, int *red, int *stray) {
    double sx = 0, sy = 0;
    *red = *stray = 0;
    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++) {
            const uint8_t *p = rgb + 3 * ((size_t)y * size + x);
            if (p[0] > 170 && p[1] < 80 && p[2] < 80) {
                sx += x;
                sy += y;
                (*red)++;
            }
            if ((p[2] > 160 && p[0] < 80) || (p[1] > 160 && p[0] < 80)) (*stray)++;
        }
    *cx = *red ? sx / *red : -1;
    *cy = *red ? sy / *red : -1;
}

static inline void check_marker(const char *cname, const char *what, const uint8_t *rgb, int size) {
    double cx, cy;
    int red, stray;
    marker_stats(rgb, size, &cx, &cy, &red, &stray);
    double c = (size - 1) / 2.0;
    check(red > 0 && fabs(cx - c) <= 1.0 && fabs(cy - c) <= 1.0 && stray == 0, cname,
          "%s: marker centre (%.2f, %.2f), frame centre %.1f; %d marker pixels, %d blue/green pixels left (want 0)",
          what, cx, cy, c, red, stray);
}

static inline int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

// A test's main: a watchdog that ends a hang, then `tests` in a fresh scratch folder
// (TMPDIR/fc_test_<name>_XXXXXX), removed after them unless KEEP_TEST_FILES is set. The time is
// shown, not asserted: a loaded machine must not fail the suite.
static inline int run_in_scratch(const char *name, void (*tests)(void)) {
    signal(SIGALRM, on_alarm);
    alarm(180);
    snprintf(g_dir, sizeof g_dir, "%s/fc_test_%s_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    if (!mkdtemp(g_dir)) {
        printf("FAIL %s_tmpdir: %s: %s\n", name, g_dir, strerror(errno));
        return 1;
    }
    double t0 = fc_now_s();
    tests();
    printf("test_%s: %.1f s\n", name, fc_now_s() - t0);
    if (!getenv("KEEP_TEST_FILES")) nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return g_failed ? 1 : 0;
}

#endif
