// loader.c: background threads that turn dataset clips into training batches (see loader.h).
//
// A batch is cut into groups: the windows of one step that show the same clip. A group is one unit
// of work, so each clip a batch needs is read and inflated once (a thread also keeps the last clip it
// read). Every window is a pure function of (seed, step, window), written to its own place in the
// batch buffer, so neither the thread count nor the timing can change a batch. A damaged clip (its
// CRC or zlib data bad) is skipped: its windows show the next good clip in dataset order, which
// depends on the dataset alone, never on which thread found the damage first.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataset/loader.h"
#include "dataset/exclude.h"
#include "base/philox.h"
#include "dataset/moving_shapes.h"
#include "base/clock.h"
#include "dist/dist.h"

#define LOADER_MAX_THREADS 256
#define LOADER_MAX_PREFETCH 256
#define LOADER_NAMED_DAMAGE 10  // damaged clips named one warning line each; the rest only counted

enum { BATCH_FREE, BATCH_FILLING, BATCH_READY, BATCH_HELD };

// A window's crop (loader.h): its side and, in pixels of the clip's frames, the corner at the plan's
// first offset and the corner's velocity a clip frame.
typedef struct {
    double side, ax, ay, vx, vy;
} Crop;

typedef struct {
    real *buf;  // (B, F, C, N, N)
    int step, state;
    int *clip, *t0;  // per window; clip -1: a moving-shapes window
    uint8_t *flip, *speed;
    Crop *crop;         // per window, when the loader crops
    int *order;         // the windows sorted by clip
    int *group;         // group g is order[group[g] .. group[g + 1] - 1]
    uint64_t *keys;     // scratch for the sort
    int ngroups, next;  // groups handed out so far
    int done;           // groups finished
    int failed, failed_group;
    int substituted;  // windows that drew a damaged clip and show the next good one
    char err[1024];
} Batch;

struct Loader {
    const Backend *be;  // allocates the batch buffers (NULL: plain host memory)
    const Dataset *d;
    int B, F, N, C, nclips, starts, first;  // C: 3, or a latent dataset's channels
    int b0;  // the global index of window 0: a rank's part of the step's batch (loader.h)
    int latent;                              // 1: windows read their own latent frames (no clip cache)
    int starts2, first2;  // the same at 2x speed (starts2 < 1: no clip is long enough for it)
    double mix_shapes, fast_fraction;
    double crop_zoom, crop_pan;  // crop_zoom 1: whole frames
    int off[MAX_SLOTS], lo, span;  // the plan's offsets, the smallest, and the frames from it to the largest
    uint64_t seed;
    size_t raw, window;  // bytes of a clip; values of a window (F * C * N * N)
    real lut[256];
    Batch *bat;
    int nbat;
    pthread_t *th;
    struct Worker *workers;  // one per thread: its clip cache
    int nth;
    pthread_mutex_t mu;
    pthread_cond_t work, ready;
    int next_sched;  // the next step to give a free buffer
    int next_get;    // the step loader_get expects
    int held;        // the buffer the trainer holds, -1: none
    int stop;
    uint8_t *excluded;  // per clip: 1 when the config's exclude list names it (never changes)
    uint8_t *damaged;  // per clip: 1 once a read found its bytes bad
    int ndamaged;      // clips found damaged
    long substituted;  // windows of the batches handed out that showed a substitute clip
    double bytes_read;  // from the shards, by every thread (under mu)
    long windows_made;
};

// ----------------------------------------------------------------------------
// the windows of a step

// Uniform in 0 .. n-1 (n >= 1) from the RNG_DATA elements base, base + 1, ... (rejection sampling).
static uint32_t pick(uint64_t seed, uint32_t step, uint64_t base, uint32_t n) {
    uint64_t limit = ((uint64_t)1 << 32) - ((uint64_t)1 << 32) % n;
    uint32_t u = 0;
    for (int j = 0; j < 256; j++) {
        u = philox_u32(seed, step, RNG_DATA, base + (uint64_t)j);
        if (u < limit) break;
    }
    return u % n;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The crop of global window g at `step` (loader.h), its clip played at `speed`.
static void draw_crop(const Loader *l, uint32_t step, uint64_t g, int speed, Crop *c) {
    double v[5];
    for (int j = 0; j < 5; j++) v[j] = philox_uniform(l->seed, step, RNG_AUG, LOADER_CROP_BASE + 8 * g + j);
    int span = speed * l->span;
    c->side = l->N / (1 + (l->crop_zoom - 1) * v[0]);
    double room = l->N - c->side;
    double vmax = span > 0 ? fmin(l->crop_pan, room / span) : 0;
    c->vx = vmax * (2 * v[1] - 1), c->vy = vmax * (2 * v[2] - 1);
    c->ax = fmax(0, -c->vx * span) + v[3] * (room - fabs(c->vx) * span);
    c->ay = fmax(0, -c->vy * span) + v[4] * (room - fabs(c->vy) * span);
}

// Give buffer b the windows of `step` and cut them into groups (under the lock).
static void schedule(Loader *l, Batch *b, int step) {
    b->step = step, b->state = BATCH_FILLING, b->next = 0, b->done = 0, b->failed = 0, b->err[0] = 0;
    b->substituted = 0;
    for (int w = 0; w < l->B; w++) {
        uint64_t g = (uint64_t)l->b0 + (uint64_t)w;  // every draw is the global window's
        uint64_t base = g * LOADER_INDEX_STRIDE;
        uint32_t s32 = (uint32_t)step;
        double u_fast = philox_uniform(l->seed, s32, RNG_AUG, LOADER_FAST_BASE + g);
        double u_shapes = philox_uniform(l->seed, s32, RNG_AUG, LOADER_SHAPES_BASE + g);
        b->speed[w] = u_fast < l->fast_fraction && l->starts2 >= 1 ? 2 : 1;
        b->clip[w] = u_shapes < l->mix_shapes ? -1 : (int)pick(l->seed, s32, base, (uint32_t)l->nclips);
        b->t0[w] = b->speed[w] == 2 ? l->first2 + (int)pick(l->seed, s32, base + 256, (uint32_t)l->starts2)
                                    : l->first + (int)pick(l->seed, s32, base + 256, (uint32_t)l->starts);
        b->flip[w] = (uint8_t)(philox_u32(l->seed, s32, RNG_AUG, LOADER_FLIP_BASE + g) >> 31);
        if (l->crop_zoom > 1) draw_crop(l, s32, g, b->speed[w], &b->crop[w]);
        b->keys[w] = (uint64_t)(uint32_t)(b->clip[w] + 1) << 32 | (uint32_t)w;  // shapes windows first
    }
    qsort(b->keys, (size_t)l->B, sizeof(uint64_t), cmp_u64);
    b->ngroups = 0;
    for (int i = 0; i < l->B; i++) {
        b->order[i] = (int)(uint32_t)b->keys[i];
        if (i == 0 || b->keys[i] >> 32 != b->keys[i - 1] >> 32) b->group[b->ngroups++] = i;
    }
    b->group[b->ngroups] = l->B;
}

// Frame `frame` (N x N RGB bytes) through crop c, `rel` clip frames after the plan's first offset,
// into o (3, N, N): the bilinear sample of loader.h.
static void crop_frame(const Loader *l, const uint8_t *frame, const Crop *c, int rel, int flip, real *o) {
    int N = l->N;
    size_t plane = (size_t)N * N;
    double cx = c->ax + c->vx * rel, cy = c->ay + c->vy * rel, step = c->side / N;  // source pixels an output one
    for (int y = 0; y < N; y++) {
        double sy = fmin(fmax(cy + (y + 0.5) * step - 0.5, 0), N - 1);
        int y0 = (int)sy, y1 = y0 + 1 < N ? y0 + 1 : y0;
        double fy = sy - y0;
        for (int x = 0; x < N; x++) {
            double sx = fmin(fmax(cx + ((flip ? N - 1 - x : x) + 0.5) * step - 0.5, 0), N - 1);
            int x0 = (int)sx, x1 = x0 + 1 < N ? x0 + 1 : x0;
            double fx = sx - x0;
            const uint8_t *p00 = frame + ((size_t)y0 * N + x0) * 3, *p01 = frame + ((size_t)y0 * N + x1) * 3;
            const uint8_t *p10 = frame + ((size_t)y1 * N + x0) * 3, *p11 = frame + ((size_t)y1 * N + x1) * 3;
            for (int ch = 0; ch < 3; ch++) {
                double top = l->lut[p00[ch]] * (1 - fx) + l->lut[p01[ch]] * fx;
                double bottom = l->lut[p10[ch]] * (1 - fx) + l->lut[p11[ch]] * fx;
                o[ch * plane + (size_t)y * N + x] = (real)(top * (1 - fy) + bottom * fy);
            }
        }
    }
}

// Window w of batch b from its clip's frames, or drawn by the moving shapes (clip -1).
static void make_window(const Loader *l, const Batch *b, int w, const uint8_t *clip) {
    int N = l->N;
    size_t plane = (size_t)N * N;
    real *out = b->buf + (size_t)w * l->window;
    if (b->clip[w] < 0) {
        uint64_t g = (uint64_t)l->b0 + (uint64_t)w;
        double start = 100 * philox_uniform(l->seed, (uint32_t)b->step, RNG_DATA, g * LOADER_INDEX_STRIDE + 511);
        for (int f = 0; f < l->F; f++)
            shapes_frame(out + (size_t)f * 3 * plane, 3, N, l->seed, (uint32_t)b->step, (uint32_t)g, start + l->off[f]);
        return;
    }
    for (int f = 0; f < l->F; f++) {
        const uint8_t *frame = clip + (size_t)(b->t0[w] + b->speed[w] * l->off[f]) * plane * 3;
        real *o = out + (size_t)f * 3 * plane;
        if (l->crop_zoom > 1) {
            crop_frame(l, frame, &b->crop[w], b->speed[w] * (l->off[f] - l->lo), b->flip[w], o);
            continue;
        }
        for (int y = 0; y < N; y++) {
            const uint8_t *row = frame + (size_t)y * N * 3;
            real *r = o + (size_t)y * N, *g = r + plane, *bl = g + plane;
            if (!b->flip[w])
                for (int x = 0; x < N; x++)
                    r[x] = l->lut[row[3 * x]], g[x] = l->lut[row[3 * x + 1]], bl[x] = l->lut[row[3 * x + 2]];
            else
                for (int x = 0, xs = N - 1; x < N; x++, xs--)
                    r[x] = l->lut[row[3 * xs]], g[x] = l->lut[row[3 * xs + 1]], bl[x] = l->lut[row[3 * xs + 2]];
        }
    }
}

// ----------------------------------------------------------------------------
// the worker threads

typedef struct Worker {
    Loader *l;
    uint8_t *cache;  // the last clip this thread read (frames); a window's latents as floats (latents)
    int cached;      // its index, -1: none
} Worker;

static int is_damaged(Loader *l, int clip) {
    pthread_mutex_lock(&l->mu);
    int bad = l->damaged[clip];
    pthread_mutex_unlock(&l->mu);
    return bad;
}

// Clip `clip` failed its check (why: the reader's line, naming the shard and the clip): remembered, and
// named once on stderr (the first LOADER_NAMED_DAMAGE of them; the rest counted at loader_stop). On
// several ranks each rank whose windows meet it says so: the line names the rank (and its machine).
static void note_damaged(Loader *l, int clip, const char *why) {
    pthread_mutex_lock(&l->mu);
    if (!l->damaged[clip]) {
        l->damaged[clip] = 1;
        if (++l->ndamaged <= LOADER_NAMED_DAMAGE)
            fc_warn("%s%s; skipped: its windows show the next good clip (re-prepare the dataset)", dist_rank_origin(),
                    why);
        else if (l->ndamaged == LOADER_NAMED_DAMAGE + 1)
            fc_warn("%s%s: more damaged clips: counted, not named (framechain inspect %s lists them)",
                    dist_rank_origin(), dataset_dir(l->d), dataset_dir(l->d));
    }
    pthread_mutex_unlock(&l->mu);
}

// The clip a group of windows shows, in wk->cache: `clip`, or when it is excluded or damaged the next
// good one in dataset order (clip + 1, clip + 2, ..., wrapping; loader.h); *used = its index. 0, or -1
// with err: a read failure other than a damaged clip, or every clip damaged or excluded.
static int read_good_clip(Worker *wk, int clip, int *used, char *err, size_t errlen) {
    Loader *l = wk->l;
    for (int i = 0; i < l->nclips; i++) {
        int k = (int)(((int64_t)clip + i) % l->nclips);
        if (l->excluded[k] || is_damaged(l, k)) continue;
        *used = k;
        if (wk->cached == k) return 0;
        wk->cached = -1;
        int rc = dataset_read_clip(l->d, k, wk->cache, err, errlen);
        ClipLocation loc;
        if (!dataset_clip_location(l->d, k, &loc)) {
            pthread_mutex_lock(&l->mu);
            l->bytes_read += (double)loc.stored;
            pthread_mutex_unlock(&l->mu);
        }
        if (rc == 0) {
            wk->cached = k;
            return 0;
        }
        if (rc != DATASET_CLIP_DAMAGED) return -1;
        note_damaged(l, k, err);
    }
    return fc_errf(err, errlen, "%s: every one of its %d clips fails its check (CRC or zlib data) or is excluded: "
                   "re-prepare it", dataset_dir(l->d), l->nclips);
}

// Latents: window w of batch b read from its own frames of its clip, or, where the clip is excluded or
// those frames fail their check, of the next clip in dataset order whose are good (loader.h; whether a
// window's frames are good depends on the dataset's bytes alone, so the window stays a pure function of
// (seed, step, window)). *used = the clip shown. 0, or -1 with err.
static int latent_window(Worker *wk, const Batch *b, int w, int *used, char *err, size_t errlen) {
    Loader *l = wk->l;
    int frames[MAX_SLOTS];
    for (int f = 0; f < l->F; f++) frames[f] = b->t0[w] + b->speed[w] * l->off[f];
    float *vals = (float *)wk->cache;
    for (int i = 0; i < l->nclips; i++) {
        int k = (int)(((int64_t)b->clip[w] + i) % l->nclips);
        if (l->excluded[k]) continue;
        int rc = dataset_read_latent_frames(l->d, k, l->F, frames, b->flip[w], vals, err, errlen);
        pthread_mutex_lock(&l->mu);
        l->bytes_read += (double)dataset_clip_bytes(l->d) / (2.0 * dataset_clip_frames(l->d)) * l->F;
        pthread_mutex_unlock(&l->mu);
        if (rc == 0) {
            real *out = b->buf + (size_t)w * l->window;
            for (size_t e = 0; e < l->window; e++) out[e] = (real)vals[e];
            *used = k;
            return 0;
        }
        if (rc != DATASET_CLIP_DAMAGED) return -1;
        note_damaged(l, k, err);
    }
    return fc_errf(err, errlen, "%s: the frames of this window fail their check (CRC) or are excluded in every clip: "
                   "re-prepare it", dataset_dir(l->d));
}

static void *worker_main(void *arg) {
    Worker *wk = arg;
    Loader *l = wk->l;
    char err[1024];
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        Batch *b = NULL;
        for (int i = 0; i < l->nbat; i++) {  // the earliest step with a group left
            Batch *x = &l->bat[i];
            if (x->state == BATCH_FILLING && x->next < x->ngroups && (!b || x->step < b->step)) b = x;
        }
        if (!b) {
            Batch *free_one = NULL;
            for (int i = 0; i < l->nbat && !free_one; i++)
                if (l->bat[i].state == BATCH_FREE) free_one = &l->bat[i];
            if (free_one) {
                schedule(l, free_one, l->next_sched++);
                pthread_cond_broadcast(&l->work);
            } else {
                pthread_cond_wait(&l->work, &l->mu);
            }
            continue;
        }
        int g = b->next++;
        pthread_mutex_unlock(&l->mu);

        int rc = 0, first = b->order[b->group[g]], clip = b->clip[first], used = clip, substituted = 0;
        if (l->latent) {
            for (int i = b->group[g]; i < b->group[g + 1] && !rc; i++) {
                rc = latent_window(wk, b, b->order[i], &used, err, sizeof err);
                substituted += !rc && used != clip && !l->excluded[clip];
            }
        } else {
            if (clip >= 0) rc = read_good_clip(wk, clip, &used, err, sizeof err);
            if (!rc)
                for (int i = b->group[g]; i < b->group[g + 1]; i++) make_window(l, b, b->order[i], wk->cache);
            if (!rc && used != clip && !l->excluded[clip]) substituted = b->group[g + 1] - b->group[g];
        }

        pthread_mutex_lock(&l->mu);
        b->substituted += substituted;
        if (!rc) l->windows_made += b->group[g + 1] - b->group[g];
        if (rc && (!b->failed || g < b->failed_group)) {
            b->failed = 1, b->failed_group = g;
            snprintf(b->err, sizeof b->err, "%s", err);
        }
        if (++b->done == b->ngroups) {
            b->state = BATCH_READY;
            pthread_cond_broadcast(&l->ready);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void free_loader(Loader *l) {
    for (int i = 0; i < l->nbat; i++) {
        Batch *b = &l->bat[i];
        if (l->be && b->buf) l->be->host_free(b->buf); else free(b->buf);
        free(b->clip), free(b->t0), free(b->flip), free(b->speed), free(b->crop);
        free(b->order), free(b->group), free(b->keys);
    }
    free(l->bat);
    free(l->th);
    free(l->damaged), free(l->excluded);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->ready);
    free(l);
}

// ----------------------------------------------------------------------------
// starting and stopping

// The slot offsets of c's plan as whole frames, and the span they cover.
typedef struct {
    int off[MAX_SLOTS];
    int lo, hi;  // the smallest and largest offset
} SlotSpan;

// The plan's offsets (c->slots of them, checked before): whole frames whose span fits in a clip.
static int slot_span(const Dataset *d, const Config *c, SlotSpan *s, char *err, size_t errlen) {
    int CF = dataset_clip_frames(d);
    s->lo = s->hi = 0;
    for (int f = 0; f < c->slots; f++) {
        float o = c->slot_offset[f];
        if (!(o == floorf(o)) || fabsf(o) > 1e6f)
            return fc_errf(err, errlen,
                           "plan slot %d: offset %g is not a whole number of frames (a dataset has whole frames)", f,
                           (double)o);
        s->off[f] = (int)o;
        if (!f || s->off[f] < s->lo) s->lo = s->off[f];
        if (!f || s->off[f] > s->hi) s->hi = s->off[f];
    }
    int span = s->hi - s->lo + 1;
    if (span > CF)
        return fc_errf(err, errlen,
                       "%s: the plan spans %d frames (offsets %d to %d), more than the dataset's clips have "
                       "(clip_frames %d): prepare it with --clip-frames %d or more",
                       dataset_dir(d), span, s->lo, s->hi, CF, span);
    return 0;
}

int loader_check_config(const Dataset *d, const Config *c, char *err, size_t errlen) {
    int N = dataset_frame_size(d);
    const LatentIdentity *lat = dataset_latent(d);
    if (!lat && c->channels != 3)
        return fc_errf(err, errlen, "%s: the dataset's frames are RGB (3 channels), but the config has channels = %d",
                       dataset_dir(d), c->channels);
    if (lat && c->channels != lat->channels)
        return fc_errf(err, errlen, "%s: the dataset holds latents of %d channels (%s), but the config has channels = %d",
                       dataset_dir(d), lat->channels, lat->family, c->channels);
    if (!lat && c->frame_size != N)
        return fc_errf(err, errlen,
                       "%s: the config's frame_size %d is not the dataset's %d (prepare it with --size %d)",
                       dataset_dir(d), c->frame_size, N, c->frame_size);
    if (lat && c->frame_size != N)
        return fc_errf(err, errlen,
                       "%s: the config's frame_size %d is not the dataset's latent side %d (frames of %d through an "
                       "autoencoder of factor %d; prepare it with --size %d)",
                       dataset_dir(d), c->frame_size, N, lat->image_size, lat->factor, c->frame_size * lat->factor);
    if (lat && (c->crop_zoom > 1 || c->mix_shapes > 0))
        return fc_errf(err, errlen, "%s: the dataset holds latents, but the config has %s: both work on frames (set it "
                       "to %s)", dataset_dir(d), c->crop_zoom > 1 ? "crop_zoom > 1" : "mix_shapes > 0",
                       c->crop_zoom > 1 ? "crop_zoom = 1" : "mix_shapes = 0");
    if (c->slots < 1 || c->slots > MAX_SLOTS)
        return fc_errf(err, errlen, "the plan has %d slots (1 to %d)", c->slots, MAX_SLOTS);
    SlotSpan span;  // a plan longer than the clips: said with the rest, before any rank starts its loader
    return slot_span(d, c, &span, err, errlen);
}

int loader_fast_unused(const Dataset *d, const Config *c, char *why, size_t whylen) {
    SlotSpan s;
    char err[512];
    if (c->fast_fraction <= 0 || slot_span(d, c, &s, err, sizeof err)) return 0;
    int span = s.hi - s.lo + 1, span2 = 2 * (s.hi - s.lo) + 1, have = dataset_clip_frames(d);
    if (have >= span2) return 0;
    snprintf(why, whylen, "fast_fraction %g: not used: the plan spans %d frames, %d at 2x speed, and the clips of %s "
             "have %d: every window plays at 1x (prepare the footage with --clip-frames %d or more for it)",
             c->fast_fraction, span, span2, dataset_dir(d), have, span2);
    return 1;
}

// The arguments and the config against the dataset: 0, or -1 with the first that does not fit.
static int check_request(const Dataset *d, const Config *c, int batch, int first_step, int threads, int prefetch,
                         char *err, size_t errlen) {
        if (batch < 1 || threads < 1 || threads > LOADER_MAX_THREADS || prefetch < 1 || prefetch > LOADER_MAX_PREFETCH ||
        first_step < 0)
        return fc_errf(err, errlen, "loader: batch %d, threads %d, prefetch %d, first step %d: out of range", batch,
                       threads, prefetch, first_step);
    return loader_check_config(d, c, err, errlen);
}

// The loader with its prefetch + 1 batch buffers; no thread yet.
static Loader *new_loader(const Backend *be, const Dataset *d, const Config *c, int batch, int b0, uint64_t seed,
                          int first_step, int prefetch, const SlotSpan *s) {
    int N = dataset_frame_size(d);
    Loader *l = fc_calloc(1, sizeof *l);
    l->be = be, l->d = d, l->B = batch, l->b0 = b0, l->F = c->slots, l->N = N, l->nclips = dataset_clips(d);
    l->C = dataset_channels(d), l->latent = dataset_latent(d) != NULL;
    l->starts = dataset_clip_frames(d) - (s->hi - s->lo), l->first = -s->lo, l->seed = seed;
    l->starts2 = dataset_clip_frames(d) - 2 * (s->hi - s->lo), l->first2 = -2 * s->lo;
    l->mix_shapes = c->mix_shapes, l->fast_fraction = c->fast_fraction;
    l->crop_zoom = c->crop_zoom, l->crop_pan = c->crop_pan;
    memcpy(l->off, s->off, sizeof s->off);
    l->lo = s->lo, l->span = s->hi - s->lo;
    l->raw = dataset_clip_bytes(d);
    l->window = (size_t)l->F * l->C * N * N;
    for (int p = 0; p < 256; p++) l->lut[p] = (real)(p / 127.5 - 1.0);
    l->nbat = prefetch + 1;
    l->bat = fc_calloc((size_t)l->nbat, sizeof(Batch));
    for (int i = 0; i < l->nbat; i++) {
        Batch *b = &l->bat[i];
        b->buf = l->be ? l->be->host_alloc(sizeof(real) * l->window * (size_t)batch)
                       : fc_malloc(sizeof(real) * l->window * (size_t)batch);
        b->clip = fc_malloc(sizeof(int) * (size_t)batch);
        b->t0 = fc_malloc(sizeof(int) * (size_t)batch);
        b->flip = fc_malloc((size_t)batch), b->speed = fc_malloc((size_t)batch);
        b->crop = fc_calloc((size_t)batch, sizeof(Crop));
        b->order = fc_malloc(sizeof(int) * (size_t)batch);
        b->group = fc_malloc(sizeof(int) * ((size_t)batch + 1));
        b->keys = fc_malloc(sizeof(uint64_t) * (size_t)batch);
        b->state = BATCH_FREE;
    }
    l->next_sched = l->next_get = first_step;
    l->held = -1;
    l->damaged = fc_calloc((size_t)l->nclips, 1);
    l->excluded = fc_calloc((size_t)l->nclips, 1);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    return l;
}

// Ends the threads started so far (each finishes the window it is on) and frees their clip caches.
static void stop_workers(Loader *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nth; i++) pthread_join(l->th[i], NULL);
    for (int i = 0; i < l->nth; i++) free(l->workers[i].cache);
    free(l->workers);
    l->workers = NULL, l->nth = 0;
}

// 0, or -1 with err when a thread cannot be started (those started are stopped again).
static int start_workers(Loader *l, int threads, char *err, size_t errlen) {
    l->th = fc_calloc((size_t)threads, sizeof(pthread_t));
    l->workers = fc_calloc((size_t)threads, sizeof(Worker));
    for (int i = 0; i < threads; i++) {
        Worker *wk = &l->workers[i];
        *wk = (Worker){l, fc_malloc(l->latent ? sizeof(float) * l->window : l->raw), -1};
        int rc = pthread_create(&l->th[i], NULL, worker_main, wk);
        if (rc) {
            fc_errf(err, errlen, "loader: cannot start thread %d of %d: %s", i + 1, threads, strerror(rc));
            free(wk->cache);
            stop_workers(l);
            return -1;
        }
        l->nth++;
    }
    return 0;
}

double loader_plan_bytes(const Dataset *d, const Config *c, int batch, int threads, int prefetch) {
    double window = (double)c->slots * dataset_channels(d) * dataset_frame_size(d) * dataset_frame_size(d);
    double clip = dataset_latent(d) ? sizeof(float) * window : (double)dataset_clip_bytes(d);  // a thread's cache
    double per_window = sizeof(int) * 4 + 2 + sizeof(Crop) + sizeof(uint64_t);  // a batch's bookkeeping
    return (prefetch + 1.0) * batch * (sizeof(real) * window + per_window) + threads * clip +
           2.0 * dataset_clips(d);  // the damaged and excluded marks
}

Loader *loader_start(const Backend *be, const Dataset *d, const Config *c, int batch, int b0, uint64_t seed,
                     int first_step, int threads, int prefetch, char *err, size_t errlen) {
    return loader_start_excluding(be, d, c, NULL, batch, b0, seed, first_step, threads, prefetch, err, errlen);
}

Loader *loader_start_excluding(const Backend *be, const Dataset *d, const Config *c, const uint8_t *excluded,
                               int batch, int b0, uint64_t seed, int first_step, int threads, int prefetch,
                               char *err, size_t errlen) {
    SlotSpan span;
    if (check_request(d, c, batch, first_step, threads, prefetch, err, errlen) ||
        slot_span(d, c, &span, err, errlen))
        return NULL;
    int N = dataset_frame_size(d);
    double bytes = (double)sizeof(real) * c->slots * dataset_channels(d) * N * N * batch * (prefetch + 1);
    if (bytes > 64.0 * (1 << 30)) {
        fc_errf(err, errlen, "loader: %d batches of %d windows would take %.0f GiB", prefetch + 1, batch,
                bytes / (1 << 30));
        return NULL;
    }
    Loader *l = new_loader(be, d, c, batch, b0, seed, first_step, prefetch, &span);
    if (excluded) memcpy(l->excluded, excluded, (size_t)l->nclips);
    if ((!excluded && c->exclude[0] && exclude_list_read(d, c->exclude, l->excluded, err, errlen) < 0) ||
        start_workers(l, threads, err, errlen)) {
        free_loader(l);
        return NULL;
    }
    return l;
}

// ----------------------------------------------------------------------------
// the trainer's side

const real *loader_get(Loader *l, int step, double *wait_s, char *err, size_t errlen) {
    if (wait_s) *wait_s = 0;
    pthread_mutex_lock(&l->mu);
    if (step != l->next_get) {
        int next = l->next_get;
        pthread_mutex_unlock(&l->mu);
        snprintf(err, errlen, "loader: step %d was asked for, but the next one is %d (steps come one after another)",
                 step, next);
        return NULL;
    }
    if (l->held >= 0) {  // the trainer is done with the previous batch
        l->bat[l->held].state = BATCH_FREE;
        l->held = -1;
        pthread_cond_broadcast(&l->work);
    }
    double t0 = fc_now_s();
    Batch *b;
    for (;;) {
        b = NULL;
        for (int i = 0; i < l->nbat && !b; i++)
            if (l->bat[i].state != BATCH_FREE && l->bat[i].step == step) b = &l->bat[i];
        if (b && b->state == BATCH_READY) break;
        pthread_cond_wait(&l->ready, &l->mu);
    }
    if (wait_s) *wait_s = fc_now_s() - t0;
    l->next_get++;
    if (b->failed) {
        snprintf(err, errlen, "%s", b->err);
        b->state = BATCH_FREE;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    b->state = BATCH_HELD;
    l->held = (int)(b - l->bat);
    l->substituted += b->substituted;
    pthread_mutex_unlock(&l->mu);
    return b->buf;
}

double loader_bytes_read(Loader *l, long *windows) {
    pthread_mutex_lock(&l->mu);
    double b = l->bytes_read;
    if (windows) *windows = l->windows_made;
    pthread_mutex_unlock(&l->mu);
    return b;
}

long loader_substituted(Loader *l, int *damaged_clips) {
    pthread_mutex_lock(&l->mu);
    long n = l->substituted;
    if (damaged_clips) *damaged_clips = l->ndamaged;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void loader_warn_damage(const char *dir, int clips, long windows) {
    if (clips)
        fc_warn("%s: %d damaged clip%s skipped: %ld window%s showed the next good clip instead; framechain "
                "inspect %s lists the damaged clips (re-prepare them)", dir, clips, clips == 1 ? "" : "s", windows,
                windows == 1 ? "" : "s", dir);
}

void loader_stop_silent(Loader *l, uint8_t *damaged, long *substituted) {
    stop_workers(l);
    memcpy(damaged, l->damaged, (size_t)dataset_clips(l->d));
    *substituted = l->substituted;
    free_loader(l);
}

void loader_stop(Loader *l) {
    if (!l) return;
    stop_workers(l);
    loader_warn_damage(dataset_dir(l->d), l->ndamaged, l->substituted);
    free_loader(l);
}
