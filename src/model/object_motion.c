// object_motion.c: a frame cut into a flat background and objects, each object's own motion by
// exhaustive search over its pixels, and the reference that moves each object (see object_motion.h).
// Small frames: a few objects of a few hundred pixels, a few hundred candidate shifts each.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/reflect.h"
#include "model/global_motion.h"
#include "model/object_motion.h"

// ----------------------------------------------------------------------------
// cutting the frame

static int like_colour(const real *frame, int C, size_t plane, size_t p, size_t q, double tol) {
    for (int ch = 0; ch < C; ch++)
        if (fabs((double)frame[ch * plane + p] - frame[ch * plane + q]) >= tol) return 0;
    return 1;
}

// Label the 4-connected regions of like colour (neighbours within tol in every channel): label[p]
// 0 .. regions - 1 (all -1 on entry); returns the number of regions. queue: (N * N) scratch.
static int flood_regions(int *label, int *queue, const real *frame, int C, int N, double tol) {
    static const int DY[4] = {-1, 1, 0, 0}, DX[4] = {0, 0, -1, 1};
    int regions = 0;
    for (int seed = 0; seed < N * N; seed++) {
        if (label[seed] != -1) continue;
        int head = 0, tail = 0;
        label[seed] = regions, queue[tail++] = seed;
        while (head < tail) {
            int p = queue[head++], y = p / N, x = p % N;
            for (int k = 0; k < 4; k++) {
                int yy = y + DY[k], xx = x + DX[k], q = yy * N + xx;
                if (yy < 0 || yy >= N || xx < 0 || xx >= N || label[q] != -1) continue;
                if (!like_colour(frame, C, (size_t)N * N, (size_t)p, (size_t)q, tol)) continue;
                label[q] = regions, queue[tail++] = q;
            }
        }
        regions++;
    }
    return regions;
}

void objects_segment(ObjectScene *s, const real *frame, int C, int N, double tol) {
    size_t n = (size_t)N * N;
    s->N = N, s->count = -1;
    s->label = fc_malloc(sizeof(int) * n);
    int *queue = fc_malloc(sizeof(int) * n), *sizes = fc_calloc(n, sizeof(int));
    for (size_t p = 0; p < n; p++) s->label[p] = -1;
    int regions = flood_regions(s->label, queue, frame, C, N, tol);
    int largest = 0;
    for (size_t p = 0; p < n; p++) sizes[s->label[p]]++;
    for (int r = 1; r < regions; r++)
        if (sizes[r] > sizes[largest]) largest = r;
    if (4 * (size_t)sizes[largest] >= n) {  // a flat background: the other regions are objects
        int *object = fc_malloc(sizeof(int) * regions), objects = 0;
        for (int r = 0; r < regions; r++) object[r] = r == largest || sizes[r] < OBJECT_MIN ? -1 : objects++;
        for (int ch = 0; ch < C; ch++) s->background[ch] = 0;
        for (size_t p = 0; p < n; p++)
            if (s->label[p] == largest)
                for (int ch = 0; ch < C; ch++) s->background[ch] += frame[ch * n + p];
        for (int ch = 0; ch < C; ch++) s->background[ch] /= sizes[largest];
        double spread = 0;  // the background's largest standard deviation over the channels
        for (int ch = 0; ch < C; ch++) {
            double var = 0;
            for (size_t p = 0; p < n; p++)
                if (s->label[p] == largest) {
                    double d = frame[ch * n + p] - s->background[ch];
                    var += d * d;
                }
            spread = fmax(spread, sqrt(var / sizes[largest]));
        }
        if (spread >= OBJECT_FLAT) objects = OBJECT_MAX + 1;  // a gradient the regions chained: no flat ground
        // a fragment (a soft edge, a speck) joins an object it touches, else stays as it is
        for (size_t p = 0; p < n; p++) {
            int r = s->label[p];
            queue[p] = r == largest ? -1 : object[r];
            for (int k = 0; queue[p] < 0 && r != largest && k < 9; k++) {
                int yy = (int)(p / N) + k / 3 - 1, xx = (int)(p % N) + k % 3 - 1;
                if (yy >= 0 && yy < N && xx >= 0 && xx < N) queue[p] = object[s->label[yy * N + xx]];
            }
        }
        memcpy(s->label, queue, sizeof(int) * n);
        if (objects <= OBJECT_MAX) {
            s->count = objects;
            memset(s->size, 0, sizeof s->size);
            for (size_t p = 0; p < n; p++)
                if (s->label[p] >= 0) s->size[s->label[p]]++;
        }
        free(object);
    }
    if (s->count < 0)
        for (size_t p = 0; p < n; p++) s->label[p] = -1;
    for (int o = 0; o < OBJECT_MAX; o++) s->dx[o] = s->dy[o] = 0;
    free(queue), free(sizes);
}

void objects_free(ObjectScene *s) {
    free(s->label);
    s->label = NULL;
}

// ----------------------------------------------------------------------------
// each object's shift

// Mean squared difference of to(p) and from(p - d) over the listed pixels.
static double listed_mse(const real *from, const real *to, int C, int N, const int *pix, int count, double dx,
                         double dy) {
    double sum = 0;
    size_t plane = (size_t)N * N;
    for (int ch = 0; ch < C; ch++)
        for (int i = 0; i < count; i++) {
            int y = pix[i] / N, x = pix[i] % N;
            double d = to[ch * plane + pix[i]] - motion_sample(from + ch * plane, N, y - dy, x - dx);
            sum += d * d;
        }
    return sum / ((double)C * count);
}

// The pixels an object's shift is scored on: its own and the background's 8-neighbours of them
// (which pin its edges: a flat object matches itself at many shifts inside it).
static int object_pixels(const ObjectScene *s, int o, int *pix) {
    int N = s->N, count = 0;
    for (int p = 0; p < N * N; p++) {
        int keep = s->label[p] == o;
        for (int k = 0; !keep && s->label[p] < 0 && k < 9; k++) {
            int yy = p / N + k / 3 - 1, xx = p % N + k % 3 - 1;
            keep = yy >= 0 && yy < N && xx >= 0 && xx < N && s->label[yy * N + xx] == o;
        }
        if (keep) pix[count++] = p;
    }
    return count;
}

// An object's shifts, scored in parallel (each one thread's serial sum: the same bytes for any
// thread count).
typedef struct {
    const real *from, *to;
    int C, N, count;
    const int *pix;
} ObjectShifts;

static void score_object(const void *ctx, int n, const double *sx, const double *sy, double *e) {
    const ObjectShifts *a = ctx;
#pragma omp parallel for schedule(dynamic, 1) if (n > 8)
    for (int k = 0; k < n; k++)
        e[k] = isnan(sx[k]) ? NAN : listed_mse(a->from, a->to, a->C, a->N, a->pix, a->count, sx[k], sy[k]);
}

void objects_shift(const ObjectScene *s, const real *from, const real *to, int C, double *dx, double *dy) {
    int N = s->N, radius = N / 4 > 2 ? N / 4 : 2;
    int *pix = fc_malloc(sizeof(int) * N * N);
    for (int o = 0; o < s->count; o++) {
        ObjectShifts a = {from, to, C, N, object_pixels(s, o, pix), pix};
        motion_search(score_object, &a, radius, HUGE_VAL, 0, 0, &dx[o], &dy[o]);
    }
    free(pix);
}

// ----------------------------------------------------------------------------
// the reference: each object moved

// Object o's mask at (fy, fx), bilinear; 0 outside the frame.
static double mask_at(const ObjectScene *s, int o, double fy, double fx) {
    int N = s->N, y0 = (int)floor(fy), x0 = (int)floor(fx);
    double wy = fy - y0, wx = fx - x0, m = 0;
    for (int k = 0; k < 4; k++) {
        int yy = y0 + (k >> 1), xx = x0 + (k & 1);
        double w = ((k >> 1) ? wy : 1 - wy) * ((k & 1) ? wx : 1 - wx);
        if (yy >= 0 && yy < N && xx >= 0 && xx < N && s->label[yy * N + xx] == o) m += w;
    }
    return m;
}

// A shift (*sx, *sy) folded so that a box of pixels (columns x0..x1, rows y0..y1) stays in the N x N
// frame, bouncing off its edges: shifts in [-x0, N - 1 - x1] keep it in (as wide as the frame: shift 0).
static void bounce_shift(int N, int x0, int x1, int y0, int y1, double *sx, double *sy) {
    *sx = -x0 + reflect_fold(*sx + x0, N - 1 - x1 + x0), *sy = -y0 + reflect_fold(*sy + y0, N - 1 - y1 + y0);
}

void objects_carry(real *out, const real *in, const ObjectScene *s, int C, double scale, int bounce) {
    int N = s->N;
    size_t plane = (size_t)N * N;
    memcpy(out, in, sizeof(real) * C * plane);
    if (s->count <= 0) return;
    int order[OBJECT_MAX], moving = 0;
    for (int o = 0; o < s->count; o++)
        if (s->dx[o] != 0 || s->dy[o] != 0) order[moving++] = o;
    for (int i = 1; i < moving; i++)  // largest first: the smaller ones end in front
        for (int j = i; j > 0 && s->size[order[j]] > s->size[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    for (size_t p = 0; p < plane; p++)  // where a moving object stood: the background
        for (int i = 0; i < moving; i++)
            if (s->label[p] == order[i])
                for (int ch = 0; ch < C; ch++) out[ch * plane + p] = (real)s->background[ch];
    for (int i = 0; i < moving; i++) {
        int o = order[i];
        double mean[OBJECT_CHANNELS] = {0}, sx = scale * s->dx[o], sy = scale * s->dy[o];
        int x0 = N, x1 = -1, y0 = N, y1 = -1;  // the box of its pixels, for the bounce
        for (size_t p = 0; p < plane; p++)
            if (s->label[p] == o) {
                int y = (int)(p / N), x = (int)(p % N);
                x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
                for (int ch = 0; ch < C; ch++) mean[ch] += in[ch * plane + p];
            }
        for (int ch = 0; ch < C; ch++) mean[ch] /= s->size[o];
        if (bounce && x1 >= 0) bounce_shift(N, x0, x1, y0, y1, &sx, &sy);
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                double fy = y - sy, fx = x - sx;
                double m = mask_at(s, o, fy, fx);
                if (m <= 0) continue;
                int ny = (int)lrint(fy), nx = (int)lrint(fx);
                ny = ny < 0 ? 0 : ny > N - 1 ? N - 1 : ny, nx = nx < 0 ? 0 : nx > N - 1 ? N - 1 : nx;
                size_t src = (size_t)ny * N + nx, q = (size_t)y * N + x;
                for (int ch = 0; ch < C; ch++) {
                    double v = s->label[src] == o ? in[ch * plane + src] : mean[ch];
                    out[ch * plane + q] = (real)(m * v + (1 - m) * out[ch * plane + q]);
                }
            }
    }
}
