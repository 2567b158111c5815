// test_synthetic.c: the synthetic footage of synthetic.h: moving-shapes clips are the built-in
// clips' frames; a pan over a ramp image moves its crop 0.5 pixel a frame and bounces inside the
// image for 1000 frames; a zoom over it scales its crop between 1x and 2x the frame, a point half
// the frame from the one that stays where it is moving 0.25 pixel a frame; bad specs are refused with one
// line naming them.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "formats/shard_fixture.h"
#include "base/common.h"
#include "video/video.h"
#include "dataset/moving_shapes.h"
#include "dataset/synthetic.h"

enum { S = 16, W = 2 * S, FRAMES = 1000 };

static void test_shapes(void) {
    char err[512];
    SyntheticSource *s = synthetic_open("shapes:5:40", S, err, sizeof err);
    int same = s && synthetic_frames(s) == 40;
    uint8_t rgb[S * S * 3];
    real planes[3 * S * S];
    for (int f = 0; same && f < 40; f += 13) {
        synthetic_frame(s, f, rgb);
        shapes_frame(planes, 3, S, 1, 0, 5, f);
        for (int i = 0; i < S * S; i++)
            for (int c = 0; c < 3; c++) same &= rgb[3 * i + c] == lrint((planes[c * S * S + i] + 1) * 127.5);
    }
    check(same, "synthetic_shapes", "shapes:5:40: 40 frames, each the built-in clip 5's frame%s%s", s ? "" : ": ",
          s ? "" : err);
    synthetic_close(s);
}

// shapes_at, what draw_shapes --events reads: each shape's centre pixel drawn in its colour (unless a
// later shape covers it), every shape inside the frame, and every reversal of its motion (sampled
// every 1/32 frame) at a wall (within two samples' most travel of r or S - r).
static void test_shapes_at(void) {
    enum { SUB = 32, CLIPS = 12, STEPS = 40 * SUB };
    real planes[3 * W * W];
    int drawn = 1, inside = 1, at_wall = 1, reversals = 0;
    char why[160] = "";
    for (uint32_t clip = 1; clip <= CLIPS; clip++) {
        Shape prev[SHAPES_MAX], cur[SHAPES_MAX];
        double bg[3], vx[SHAPES_MAX] = {0}, vy[SHAPES_MAX] = {0}, travel[SHAPES_MAX] = {0};
        int n = shapes_at(prev, bg, W, 1, 0, clip, 0);
        for (int k = 1; k <= STEPS; k++) {
            double t = (double)k / SUB;
            shapes_at(cur, bg, W, 1, 0, clip, t);
            for (int i = 0; i < n; i++) {
                double dx = cur[i].x - prev[i].x, dy = cur[i].y - prev[i].y;
                if (fabs(dx) + fabs(dy) > travel[i]) travel[i] = fabs(dx) + fabs(dy);  // a sample's most
                inside &= cur[i].x >= cur[i].r && cur[i].x <= W - cur[i].r && cur[i].y >= cur[i].r &&
                          cur[i].y <= W - cur[i].r;
                for (int axis = 0; axis < 2; axis++) {
                    double d = axis ? dy : dx, *v = axis ? &vy[i] : &vx[i], at = axis ? prev[i].y : prev[i].x;
                    if (*v * d < 0) {  // reversed: the wall was met since the sample before the last
                        reversals++;
                        int wall = fabs(at - cur[i].r) <= 2 * travel[i] || fabs(at - (W - cur[i].r)) <= 2 * travel[i];
                        if (!wall && at_wall)
                            snprintf(why, sizeof why, "; clip %u shape %d reversed at %.3f, r %.3f", clip, i, at,
                                     cur[i].r);
                        at_wall &= wall;
                    }
                    if (d != 0) *v = d;
                }
            }
            memcpy(prev, cur, sizeof prev);
        }
        shapes_frame(planes, 3, W, 1, 0, clip, 40.0);
        for (int i = 0; i < n; i++) {
            int px = (int)cur[i].x, py = (int)cur[i].y, covered = 0;
            for (int j = i + 1; j < n; j++)
                covered |= fabs(px + 0.5 - cur[j].x) <= cur[j].r * 1.5 && fabs(py + 0.5 - cur[j].y) <= cur[j].r * 1.5;
            for (int c = 0; c < 3 && !covered; c++)
                drawn &= planes[(c * W + py) * W + px] == (real)cur[i].colour[c];
        }
    }
    check(drawn && inside && at_wall && reversals > CLIPS, "synthetic_shapes_state",
          "%d clips, 40 frames each: centre pixels drawn in the shapes' colours %s, inside the frame %s, %d "
          "reversals of motion, at a wall %s%s", CLIPS, drawn ? "yes" : "NO", inside ? "yes" : "NO", reversals,
          at_wall ? "yes" : "NO", why);
}

// Every pixel of shapes_frame as the shapes of shapes_at say: the background, and over it each shape
// in order whose area holds the pixel's centre (a square: |dx| and |dy| at most r; a disc: within r).
// Over 600 clips: 1 to SHAPES_MAX shapes, each count drawn, and motion in every direction (not only
// along the diagonals: |vx| and |vy| differ by more than 1% for most shapes).
static void test_shapes_drawn(void) {
    enum { CLIPS = 600 };
    real planes[3 * W * W];
    int wrong = 0, counts[SHAPES_MAX + 2] = {0}, skewed = 0, shapes = 0;
    for (uint32_t clip = 1; clip <= CLIPS; clip++) {
        Shape sh[SHAPES_MAX], later[SHAPES_MAX];
        double bg[3], t = 7.3 * (clip % 13);
        int n = shapes_at(sh, bg, W, 3, 1, clip, t);
        counts[n < 0 ? 0 : n > SHAPES_MAX ? SHAPES_MAX + 1 : n]++;
        shapes_at(later, bg, W, 3, 1, clip, t + 1e-3);
        for (int i = 0; i < n && i < SHAPES_MAX; i++) {
            double ax = fabs(later[i].x - sh[i].x), ay = fabs(later[i].y - sh[i].y);
            skewed += fabs(ax - ay) > 0.01 * (ax + ay), shapes++;
        }
        if (clip % 20) continue;  // the pixels of one clip in twenty
        shapes_frame(planes, 3, W, 3, 1, clip, t);
        for (int y = 0; y < W; y++)
            for (int x = 0; x < W; x++) {
                double want[3] = {bg[0], bg[1], bg[2]};
                for (int i = 0; i < n; i++) {
                    double dx = fabs(x + 0.5 - sh[i].x), dy = fabs(y + 0.5 - sh[i].y);
                    if (sh[i].square ? dx <= sh[i].r && dy <= sh[i].r : dx * dx + dy * dy <= sh[i].r * sh[i].r)
                        memcpy(want, sh[i].colour, sizeof want);
                }
                for (int c = 0; c < 3; c++) wrong += planes[(c * W + y) * W + x] != (real)want[c];
            }
    }
    int every_count = 1;
    for (int k = 1; k <= SHAPES_MAX; k++) every_count &= counts[k] > 0;
    check(!wrong && counts[0] == 0 && counts[SHAPES_MAX + 1] == 0 && every_count && 2 * skewed > shapes,
          "synthetic_shapes_drawn",
          "%d clips: %d values off the shapes' areas in the frames drawn; shapes a clip: %d with none, %d, %d and %d "
          "with 1, 2 and 3, %d with more; motion off the diagonals: %d shapes of %d", CLIPS, wrong, counts[0],
          counts[1], counts[2], counts[3], counts[SHAPES_MAX + 1], skewed, shapes);
}

// A world whose red is 8 x column and green 8 x row: where the crop samples reads back from its pixels.
static int write_ramp(const char *path) {
    uint8_t world[W * W * 3];
    for (int y = 0; y < W; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = world + ((size_t)y * W + x) * 3;
            p[0] = (uint8_t)(8 * x), p[1] = (uint8_t)(8 * y), p[2] = 128;
        }
    return image_write_png(path, W, W, world);
}

static void test_pan(const char *dir) {
    char path[600], spec[700], err[512];
    snprintf(path, sizeof path, "%s/ramp.png", dir);
    if (write_ramp(path)) {
        check(0, "synthetic_pan", "cannot write %s", path);
        return;
    }
    snprintf(spec, sizeof spec, "pan:%s:%d", path, FRAMES);
    SyntheticSource *s = synthetic_open(spec, S, err, sizeof err);
    if (!s) {
        check(0, "synthetic_pan", "%s", err);
        return;
    }
    uint8_t rgb[S * S * 3];
    double px = 0, py = 0, longest = 0, total = 0, lo[2] = {1e9, 1e9}, hi[2] = {-1e9, -1e9};
    int inside = 1;
    for (int f = 0; f < FRAMES; f++) {
        synthetic_frame(s, f, rgb);
        double x = rgb[0] / 8.0, y = rgb[1] / 8.0;  // the crop's corner, to 1/16 pixel
        inside &= x >= 0 && x <= S - 1 + 0.07 && y >= 0 && y <= S - 1 + 0.07;
        if (f) {
            double step = hypot(x - px, y - py);
            longest = fmax(longest, step), total += step;
        }
        lo[0] = fmin(lo[0], x), lo[1] = fmin(lo[1], y), hi[0] = fmax(hi[0], x), hi[1] = fmax(hi[1], y);
        px = x, py = y;
    }
    double mean = total / (FRAMES - 1);
    int bounced = (lo[0] < 0.2 && hi[0] > S - 1.2) || (lo[1] < 0.2 && hi[1] > S - 1.2);
    check(inside && longest < 0.5 + 0.15 && mean > 0.4 && bounced, "synthetic_pan",
          "%d frames: the crop moves %.3f pixel a frame on average (at most %.3f), stays inside the image and "
          "bounces (x %.2f..%.2f, y %.2f..%.2f)", FRAMES, mean, longest, lo[0], hi[0], lo[1], hi[1]);
    synthetic_close(s);
}

// On the ramp, bilinear samples (of the image and of its half-size copy alike) are exact: red at
// column x of a frame is 8 (w - 1/2) where w is where that pixel's centre lies in the image, so the
// first and last columns give the crop's scale k and offset. The point of the image that stays
// where it is on the screen: the x at which w_t(x) = w0_t + x k_t is the same for every t.
static void test_zoom(const char *dir) {
    char path[600], spec[700], err[512];
    snprintf(path, sizeof path, "%s/ramp.png", dir);
    snprintf(spec, sizeof spec, "zoom:%s:%d", path, FRAMES);
    SyntheticSource *s = synthetic_open(spec, S, err, sizeof err);
    if (!s) {
        check(0, "synthetic_zoom", "%s", err);
        return;
    }
    uint8_t rgb[S * S * 3];
    static double w0[FRAMES], k[FRAMES];
    double kmin = 1e9, kmax = 0, speed = 0, fy_gap = 0, mw = 0, mk = 0;
    for (int f = 0; f < FRAMES; f++) {
        synthetic_frame(s, f, rgb);
        double w1 = rgb[3 * (S - 1)] / 8.0 + 0.5, h0 = rgb[1] / 8.0 + 0.5;
        double h1 = rgb[3 * (size_t)(S - 1) * S + 1] / 8.0 + 0.5;
        w0[f] = rgb[0] / 8.0 + 0.5, k[f] = (w1 - w0[f]) / (S - 1);
        kmin = fmin(kmin, k[f]), kmax = fmax(kmax, k[f]), mw += w0[f] / FRAMES, mk += k[f] / FRAMES;
        fy_gap = fmax(fy_gap, fabs((h1 - h0) / (S - 1) - k[f]));  // square pixels: the same scale down as across
        // a point half the frame from the one that stays moves S/2 |d ln k| pixels on the screen (over
        // 4 frames: k is read to 1/8 pixel over the frame's width)
        if (f >= 4 && f % 4 == 0) speed += S / 2.0 * fabs(log(k[f] / k[f - 4])) / (FRAMES - 4);
    }
    double cov = 0, var = 0, worst = 0;
    for (int f = 0; f < FRAMES; f++) cov += (w0[f] - mw) * (k[f] - mk), var += (k[f] - mk) * (k[f] - mk);
    double x = -cov / var, P = mw + x * mk;  // the screen column x whose point of the image P never moves
    for (int f = 0; f < FRAMES; f++) worst = worse(worst, fabs(w0[f] + x * k[f] - P));
    int ok = kmin > 1 - 0.03 && kmin < 1.05 && kmax > 1.95 && kmax < 2 + 0.03 && speed < SYNTHETIC_ZOOM_SPEED * 1.05 &&
             speed > SYNTHETIC_ZOOM_SPEED * 0.85 && worst < 0.2 && fy_gap < 0.03;
    check(ok, "synthetic_zoom", "%d frames: the crop %.3f to %.3f times the frame; a point half the frame from the "
          "still one moves %.3f pixel a frame on average; square pixels (%.3f); the image's point at screen column "
          "%.2f stays within %.3f pixel", FRAMES, kmin, kmax, speed, fy_gap, x, worst);
    synthetic_close(s);
}

static void test_refusals(void) {
    const char *bad[][2] = {{"shapes:3", "shapes:K:FRAMES"},
                            {"shapes:3:0", "FRAMES from 1"},
                            {"shapes:x:10", "clip number"},
                            {"pan:/no/such/image.png:10", "/no/such/image.png"},
                            {"pan::10", "pan:IMAGE:FRAMES"},
                            {"zoom::10", "zoom:IMAGE:FRAMES"},
                            {"zoom:/no/such/image.png:10", "/no/such/image.png"},
                            {"zoom:x.png:-3", "zoom:IMAGE:FRAMES"},
                            // one frame past SYNTHETIC_MAX_FRAMES (1000000)
                            {"shapes:3:1000001", "FRAMES from 1"},
                            // a clip number is digits only: strtoul alone would take a sign or a space
                            {"shapes:+3:10", "clip number"},
                            {"shapes: 3:10", "clip number"}};
    int ok = 1;
    char why[600] = "";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        SyntheticSource *s = synthetic_open(bad[i][0], S, err, sizeof err);
        if (s || !strstr(err, bad[i][1]) || strchr(err, '\n')) {
            ok = 0;
            snprintf(why, sizeof why, "%s: %s", bad[i][0], s ? "accepted" : err);
        }
        synthetic_close(s);
    }
    check(ok, "synthetic_refuses_bad_specs", "%zu bad specs, each one line naming it%s%s",
          sizeof bad / sizeof bad[0], ok ? "" : "; ", why);
}

// Every kind at the smallest frame prepare takes (--size 1): a frame of one pixel, its value from
// the source (the pan's and zoom's image is the ramp), the same every time it is asked for.
static void test_one_pixel(const char *dir) {
    char spec[700], err[512], kinds[3][700];
    snprintf(kinds[0], sizeof kinds[0], "shapes:3:%d", FRAMES);
    snprintf(kinds[1], sizeof kinds[1], "pan:%s/ramp.png:%d", dir, FRAMES);
    snprintf(kinds[2], sizeof kinds[2], "zoom:%s/ramp.png:%d", dir, FRAMES);
    int ok = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(spec, sizeof spec, "%s", kinds[i]);
        SyntheticSource *s = synthetic_open(spec, 1, err, sizeof err);
        if (!s) continue;
        uint8_t a[3], b[3];
        int same = 1;
        for (int f = 0; f < FRAMES; f++) {
            synthetic_frame(s, f, a), synthetic_frame(s, f, b);
            same &= !memcmp(a, b, 3);
        }
        ok += same;
        synthetic_close(s);
    }
    check(ok == 3, "synthetic_one_pixel_frames", "%d of 3 kinds (shapes, pan, zoom) made %d frames of 1x1 pixel", ok,
          FRAMES);
}

// synthetic_same, which prepare uses to refuse one input given twice: specs are the same input when they
// make the same frames. A pan's motion is a function of its image's file name, so two hard links of one
// image under different names are two inputs, while one name reached by another path is one; a
// different frame count is another input; a clip number with a leading zero is the same clip.
static void test_same(const char *dir) {
    char a[600], b[600], spec[4][700];
    snprintf(a, sizeof a, "%s/a.png", dir), snprintf(b, sizeof b, "%s/b.png", dir);
    unlink(b);
    if (write_ramp(a) || link(a, b)) {
        check(0, "synthetic_same", "cannot write %s or link it as %s", a, b);
        return;
    }
    snprintf(spec[0], sizeof spec[0], "pan:%s:20", a), snprintf(spec[1], sizeof spec[1], "pan:%s:20", b);
    snprintf(spec[2], sizeof spec[2], "pan:%s/./a.png:20", dir), snprintf(spec[3], sizeof spec[3], "pan:%s:10", a);
    int links = synthetic_same(spec[0], spec[1]), dot = synthetic_same(spec[0], spec[2]);
    int pan_frames = synthetic_same(spec[0], spec[3]);
    int shapes_frames = synthetic_same("shapes:1:40", "shapes:1:20"), zero = synthetic_same("shapes:1:40", "shapes:01:40");
    check(links == 0 && dot == 1 && pan_frames == 0 && shapes_frames == 0 && zero == 1, "synthetic_same",
          "hard links a.png and b.png: %d (0, two names); a.png and ./a.png: %d (1); a pan of 20 and of 10 frames: "
          "%d (0); shapes:1:40 and shapes:1:20: %d (0); shapes:1:40 and shapes:01:40: %d (1)", links, dot, pan_frames,
          shapes_frames, zero);
}

// A zoom's direction (in or out first) is a function of its image's name: over 12 names of the ramp
// both appear. The crop's scale k is read off the ramp as in test_zoom, at frames 0 and 4: log k moves
// 4 x SYNTHETIC_ZOOM_SPEED / (S / 2) = 0.125 in 4 frames, so where frame 0's log k is more than that
// (and the reading's error, under 0.02) from both ends of [0, ln 2], no bounce comes between and k's
// change has the zoom's sign; names whose zoom starts nearer an end are not counted.
static void test_zoom_directions(const char *dir) {
    char ramp[600], name[600], spec[700], err[512];
    snprintf(ramp, sizeof ramp, "%s/ramp.png", dir);
    int in = 0, out = 0, skipped = 0;
    const double step = 4 * SYNTHETIC_ZOOM_SPEED / (S / 2.0), margin = step + 0.02;
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "%s/zoom%d.png", dir, i);
        unlink(name);
        if (link(ramp, name)) continue;
        snprintf(spec, sizeof spec, "zoom:%s:%d", name, FRAMES);
        SyntheticSource *s = synthetic_open(spec, S, err, sizeof err);
        if (!s) continue;
        uint8_t rgb[S * S * 3];
        double k[2];
        for (int j = 0; j < 2; j++) {
            synthetic_frame(s, 4 * j, rgb);
            k[j] = (rgb[3 * (S - 1)] / 8.0 - rgb[0] / 8.0) / (S - 1);
        }
        synthetic_close(s);
        double u = log(k[0]);
        if (u < margin || u > M_LN2 - margin) skipped++;
        else if (k[1] > k[0]) out++;  // a wider crop: zooming out
        else in++;
    }
    check(in > 0 && out > 0 && in + out + skipped == 12, "synthetic_zoom_directions",
          "12 names of one image: %d zoom in first, %d out (both > 0), %d starting too near an end to tell", in, out,
          skipped);
}

static void run_all(void) {
    char dir[512];
    folder(dir, sizeof dir, "synthetic");
    mkdir(dir, 0755);
    test_shapes();
    test_shapes_at();
    test_shapes_drawn();
    test_pan(dir);
    test_zoom(dir);
    test_one_pixel(dir);
    test_refusals();
    test_same(dir);
    test_zoom_directions(dir);
}

int main(void) { return run_in_scratch("synthetic", run_all); }
