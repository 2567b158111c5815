// draw_shapes.c: the built-in moving-shapes clip K (the one `--first-frame shapes:K` and `prepare
// --input shapes:K:N` start from) as numbered PNGs, frame-000000.png on: the truth that tools/strip.sh
// shows under a chain started from shapes:K. With --events, what no motion measured from a clip's
// first frames can know, frame by frame: a shape bouncing off an edge, shapes meeting.
//
// usage: build/draw_shapes K FRAMES SIZE DIR   (DIR must exist)
//        build/draw_shapes --events K0 K1 FROM TO SIZE
//          one line per clip K0..K1: "K bounces B meetings M": B the bounces off an edge in frames
//          FROM-1 .. TO (a shape's direction reversed on the way to a frame of FROM .. TO), M the
//          frames of FROM .. TO where two shapes' bounding circles overlap
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/moving_shapes.h"
#include "video/video.h"

// The clip's shapes at time t (as sampler.c draws shapes:K: seed 1, step 0), their count.
static int shapes_of(Shape *sh, int S, long clip, double t) {
    double bg[3];
    return shapes_at(sh, bg, S, 1, 0, (uint32_t)clip, t);
}

static int sign(double v) { return (v > 1e-12) - (v < -1e-12); }

// Bounces on the way to frame f: a shape whose x or y velocity changes sign between f - 1 and f
// (sampled every 1/32 frame).
static int bounces_before(int S, long clip, long f) {
    enum { SUB = 32 };
    Shape a[SHAPES_MAX], b[SHAPES_MAX];
    int n = shapes_of(a, S, clip, f - 1 - 1.0 / SUB), count = 0, vx[SHAPES_MAX], vy[SHAPES_MAX];
    shapes_of(b, S, clip, f - 1);
    for (int i = 0; i < n; i++) vx[i] = sign(b[i].x - a[i].x), vy[i] = sign(b[i].y - a[i].y);
    for (int k = 1; k <= SUB; k++) {
        memcpy(a, b, sizeof a);
        shapes_of(b, S, clip, f - 1 + (double)k / SUB);
        for (int i = 0; i < n; i++) {
            int sx = sign(b[i].x - a[i].x), sy = sign(b[i].y - a[i].y);
            count += (sx && vx[i] && sx != vx[i]) + (sy && vy[i] && sy != vy[i]);
            if (sx) vx[i] = sx;
            if (sy) vy[i] = sy;
        }
    }
    return count;
}

// Two shapes of frame f whose bounding circles overlap (a square's: its half diagonal).
static int shapes_meet(int S, long clip, long f) {
    Shape sh[SHAPES_MAX];
    int n = shapes_of(sh, S, clip, (double)f);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            double ri = sh[i].r * (sh[i].square ? sqrt(2.0) : 1), rj = sh[j].r * (sh[j].square ? sqrt(2.0) : 1);
            if (hypot(sh[i].x - sh[j].x, sh[i].y - sh[j].y) < ri + rj) return 1;
        }
    return 0;
}

static int events(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s --events K0 K1 FROM TO SIZE\n", argv[0]);
        return 2;
    }
    long k0 = strtol(argv[2], NULL, 10), k1 = strtol(argv[3], NULL, 10), from = strtol(argv[4], NULL, 10),
         to = strtol(argv[5], NULL, 10), S = strtol(argv[6], NULL, 10);
    if (k0 < 0 || k1 < k0 || k1 > 0xffffffffL || from < 1 || to < from || S < 2 || S > 4096) {
        fprintf(stderr, "draw_shapes: --events %s %s %s %s %s out of range\n", argv[2], argv[3], argv[4], argv[5],
                argv[6]);
        return 2;
    }
    for (long k = k0; k <= k1; k++) {
        int bounces = 0, meetings = 0;
        for (long f = from; f <= to; f++) bounces += bounces_before((int)S, k, f), meetings += shapes_meet((int)S, k, f);
        printf("%ld bounces %d meetings %d\n", k, bounces, meetings);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--events")) return events(argc, argv);
    if (argc != 5) {
        fprintf(stderr, "usage: %s K FRAMES SIZE DIR\n", argv[0]);
        return 2;
    }
    long clip = strtol(argv[1], NULL, 10), frames = strtol(argv[2], NULL, 10), S = strtol(argv[3], NULL, 10);
    if (clip < 0 || clip > 0xffffffffL || frames < 1 || S < 2 || S > 4096) {
        fprintf(stderr, "draw_shapes: K %s, FRAMES %s or SIZE %s out of range\n", argv[1], argv[2], argv[3]);
        return 2;
    }
    real *planes = fc_malloc(sizeof(real) * 3 * S * S);
    uint8_t *rgb = fc_malloc((size_t)3 * S * S);
    for (long k = 0; k < frames; k++) {
        shapes_frame(planes, 3, (int)S, 1, 0, (uint32_t)clip, (double)k);  // as sampler.c draws shapes:K
        frame_to_rgb(rgb, planes, (int)S);  // as generate writes a frame
        char path[4096];
        snprintf(path, sizeof path, "%s/frame-%06ld.png", argv[4], k);
        if (image_write_png(path, (int)S, (int)S, rgb)) {
            fprintf(stderr, "draw_shapes: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    free(planes), free(rgb);
    return 0;
}
