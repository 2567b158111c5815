// prepare.c: `framechain prepare`. Every input is decoded (FFmpeg for videos, stb_image for frame
// folders), scaled and centre-cropped to size x size, optionally resampled in time, cut into clips
// and written to shards. A bad input is reported in one line and skipped; the job goes on.
#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "base/common.h"
#include "dataset/frame_folder.h"
#include "dataset/latents.h"
#include "dataset/prepare.h"
#include "dataset/synthetic.h"
#include "formats/shards.h"
#include "video/video.h"
#include "base/clock.h"

// ----------------------------------------------------------------------------
// the sources: expanding the inputs into video files and frame folders

typedef enum { SOURCE_VIDEO, SOURCE_FRAME_FOLDER, SOURCE_SYNTHETIC } SourceKind;

typedef struct {
    char *path;
    SourceKind kind;
    dev_t dev;  // a file or folder: which one it is, however it was named
    ino_t ino;
    int depth;  // a folder looked into: how deep below its input (expand's depth)
} Source;

typedef struct {
    Source *s;
    int n, cap;
    int twice;  // inputs skipped because they were already among the sources
    Source *folders;  // the folders looked into: each once, however many links lead to it (a link to
    int nfolders, capfolders;  // "." in it would be a loop), but again from nearer its input (below)
    int again;  // > 0 while a folder is looked into again: its files already among the sources, silently
} Sources;

static const char *shown(const char *path);  // (below: a path as a progress line prints it)

// A rate for a progress line: whole frames a second, three figures below 100 (a prepare through a
// full-size autoencoder on a CPU makes a fraction of a frame a second, which %.0f would print as 0).
static const char *rate_text(char *buf, size_t len, double frames_per_s) {
    snprintf(buf, len, frames_per_s >= 100 ? "%.0f" : "%.3g", frames_per_s);
    return buf;
}

// An input the user gave twice (or under another name): one line, counted.
static void given_twice(Sources *ss, const char *path, const char *first) {
    printf("  %s: skipped: the same input as %s (given twice, its clips would count twice)\n", shown(path), shown(first));
    ss->twice++;
}

// A folder to look into: 1 the first time (recorded), 2 when reached again nearer its input than
// before (a link deep in a tree to a folder near its top: the first visit, at the depth limit, did not
// look into all of it), else 0 with a line, counted as given twice where the user named it (depth 0),
// not where a link inside a folder leads to it again.
static int folder_first_visit(Sources *ss, const char *path, const struct stat *st, int depth) {
    for (int i = 0; i < ss->nfolders; i++)
        if (ss->folders[i].dev == st->st_dev && ss->folders[i].ino == st->st_ino) {
            if (depth < ss->folders[i].depth) {
                ss->folders[i].depth = depth;
                return 2;
            }
            if (depth == 0)
                given_twice(ss, path, ss->folders[i].path);
            else
                printf("  %s: skipped: the folder %s, already looked into (a link to it, or an input given too)\n",
                       shown(path), shown(ss->folders[i].path));
            return 0;
        }
    if (ss->nfolders == ss->capfolders) {
        ss->capfolders = ss->capfolders ? 2 * ss->capfolders : 16;
        ss->folders = realloc(ss->folders, sizeof(Source) * ss->capfolders);
        if (!ss->folders) fc_die("out of host memory listing the inputs");
    }
    ss->folders[ss->nfolders++] = (Source){strdup(path), SOURCE_VIDEO, st->st_dev, st->st_ino, depth};
    return 1;
}

// Add a source, unless it is one already there (the same spec, or the same file or folder under
// another name, as `--input dir --input dir/clip.avi` gives): its clips would count twice.
static void add_source(Sources *ss, const char *path, SourceKind kind) {
    struct stat st = {0};
    if (kind != SOURCE_SYNTHETIC && stat(path, &st)) st.st_dev = 0, st.st_ino = 0;
    for (int i = 0; i < ss->n; i++) {
        const Source *o = &ss->s[i];
        int same = kind == SOURCE_SYNTHETIC ? o->kind == kind && synthetic_same(o->path, path)
                                            : o->kind != SOURCE_SYNTHETIC && o->ino && o->dev == st.st_dev &&
                                                  o->ino == st.st_ino;
        if (same) {
            if (!ss->again) given_twice(ss, path, o->path);  // (again: a folder looked into anew, its files found before)
            return;
        }
    }
    if (ss->n == ss->cap) {
        ss->cap = ss->cap ? 2 * ss->cap : 64;
        ss->s = realloc(ss->s, sizeof(Source) * ss->cap);
        if (!ss->s) fc_die("out of host memory listing the inputs");
    }
    ss->s[ss->n].path = strdup(path);
    ss->s[ss->n].kind = kind;
    ss->s[ss->n].dev = st.st_dev, ss->s[ss->n].ino = st.st_ino;
    ss->n++;
}

// A path as printed in a progress line (fc_escaped_name): a newline in a file name escaped as in
// manifest.tsv, so that one input's line stays one line; names in any language print as they are. Two
// static buffers in turn: two uses per printf.
static const char *shown(const char *path) {
    static char bufs[2][4096 * 4 + 1];
    static int turn;
    return fc_escaped_name(bufs[turn ^= 1], sizeof bufs[0], path);
}

// Stills that FFmpeg reads as one-frame videos but a frame folder does not take (stb_image reads PNG and
// JPEG only): a folder of them gets one line, not a "fewer than one clip" line per file.
static const char *other_still(const char *path) {
    static const char *const ext[] = {".bmp", ".webp", ".tif", ".tiff", ".tga", ".ppm", ".pgm", ".pbm", ".pnm",
                                      ".exr", ".dpx", ".jxl", ".avif", ".heic", ".heif", ".jp2", ".psd", NULL};
    return has_extension(path, ext) ? strrchr(path, '.') : NULL;
}

#define MAX_DEPTH 8  // folders below an input that are searched

static int expand_folder(Sources *ss, const char *path, int depth);

// An input (depth 0) or an entry of a folder looked into: a synthetic spec, a file (a video, or an
// image read as one), or a folder, each folder looked into once (folder_first_visit). Returns how
// many inputs could not be read at all (an input folder with nothing in it counts).
static int expand(Sources *ss, const char *path, int depth) {
    if (depth == 0 && synthetic_is_spec(path)) {  // shapes:K:N, pan:IMAGE:N (synthetic.h)
        add_source(ss, path, SOURCE_SYNTHETIC);
        return 0;
    }
    struct stat st;
    if (stat(path, &st)) {
        printf("  %s: skipped: %s\n", shown(path), strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        add_source(ss, path, SOURCE_VIDEO);
        return 0;
    }
    int visit = folder_first_visit(ss, path, &st, depth);
    if (!visit) return 0;
    ss->again += visit == 2;
    int bad = expand_folder(ss, path, depth);
    ss->again -= visit == 2;
    return bad;
}

// A folder with PNG or JPEG images and no video file is one clip's frames; otherwise every other file
// is a video and every subfolder is looked into the same way, and its images are not read (one line).
static int expand_folder(Sources *ss, const char *path, int depth) {
    int n, images = 0, stills = 0, videos = 0, bad = 0, said = 0, before = ss->n, twice = ss->twice;
    const char *still_ext = NULL;
    // in plain byte order, the dataset's order of clips as it always was: a dataset prepared again from
    // the same folder holds the same clips in the same places
    char **list = folder_entries(path, &n, 0);
    if (!list) {
        printf("  %s: skipped: cannot read the folder: %s\n", shown(path), strerror(errno));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        images += is_image_path(list[i]);
        videos += is_video_file(list[i]);
        if (other_still(list[i])) stills++, still_ext = other_still(list[i]);
    }
    if (images && !videos) {
        add_source(ss, path, SOURCE_FRAME_FOLDER);
        // what else is in it is not read: say so, so that a file beside the frames is no mystery
        int others = 0;
        struct stat est;
        for (int i = 0; i < n; i++)
            others += !is_image_path(list[i]) && !stat(list[i], &est) && (S_ISDIR(est.st_mode) || S_ISREG(est.st_mode));
        if (others)
            printf("  %s: read as one clip of its %d image%s; the %d other entr%s in it (files, folders) not read\n",
                   shown(path), images, images == 1 ? "" : "s", others, others == 1 ? "y" : "ies");
    } else {
        if (stills && !images && !videos) {
            printf("  %s: skipped: its %d %s image%s not read: frames in a folder must be PNG or JPEG\n", shown(path), stills,
                   still_ext, stills == 1 ? " is" : "s are");
            bad++, said = 1;
        } else if (images + stills) {
            printf("  %s: its %d image%s not read: a folder with videos in it is read for its videos, not as "
                   "frames\n", shown(path), images + stills, images + stills == 1 ? " is" : "s are");
        }
        if (depth < MAX_DEPTH) {
            for (int i = 0; i < n; i++)
                if (!is_image_path(list[i]) && !other_still(list[i])) bad += expand(ss, list[i], depth + 1);
        } else if (n > images + stills) {
            printf("  %s: skipped: deeper than %d folders\n", shown(path), MAX_DEPTH);
            said = 1;
        }
    }
    if (depth == 0 && !said && !bad && ss->n == before && ss->twice == twice) {
        printf("  %s: skipped: no video or frames in it\n", shown(path));
        bad++;
    }
    folder_entries_free(list);
    return bad;
}

// ----------------------------------------------------------------------------
// cutting frames into clips, with optional resampling in time

typedef struct {
    const PrepareOptions *o;
    ShardWriter *w;
    const char *source;
    double fps;           // of the clips written
    size_t frame_bytes;
    uint8_t *clip;        // (clip_frames, size, size, 3) the clip being filled
    int filled;           // frames in `clip`
    // finished clips waiting to be compressed together (one per thread and then some)
    uint8_t **batch;      // (batch_cap) clips
    uint8_t **latents;    // (batch_cap) with --vae: their latents, as the shards store them
    long *batch_first;    // (batch_cap) their first frames
    int batch_n, batch_cap;
    long next_index;      // index (in the resampled sequence) of the next frame that goes into a clip
    long clips;           // clips written from this source
    // resampling: the previous decoded frame, the first frame's time and the next output frame's number
    uint8_t *prev;
    double prev_time, first_time;
    long out_n;
    int have_prev;
    double shift;         // the time taken out of the source by closed gaps
    int gaps_closed;      // forward jumps of the timestamps longer than RESAMPLE_MAX_GAP_S
    int gaps_numbered;    // a frame folder whose names' numbers skip: how often, and the first
    char first_gap[600];
    long skipped_before_key;  // a video begun mid-stream: its pictures before the first key one, left out
    double rate_lo, rate_hi, rate_mid;  // a variable frame rate without --fps (fps; 0: an even rate)
    char err[512];
    int failed;           // a shard write failed: the whole job stops
} Cutter;

// Compress and write the waiting clips (in parallel inside the shard writer).
// With --vae each clip goes through the encoder first.
static void cutter_flush(Cutter *c) {
    for (int i = 0; i < c->batch_n && c->o->ae && !c->failed; i++) {
        char why[400];
        if (latents_encode_clip(c->o->ae, c->batch[i], c->o->clip_frames, c->o->size, c->latents[i], why, sizeof why)) {
            // the clip's frame numbers count from its first
            snprintf(c->err, sizeof c->err, "%s, the clip from frame %ld: %s", c->source, c->batch_first[i], why);
            c->failed = 1;
        }
    }
    uint8_t **clips = c->o->ae ? c->latents : c->batch;
    if (c->batch_n && !c->failed &&
        shard_writer_add_clips(c->w, c->batch_n, (const uint8_t *const *)clips, c->source, c->batch_first, c->fps,
                               c->err, sizeof c->err))
        c->failed = 1;
    c->batch_n = 0;
}

static void cutter_emit(Cutter *c, const uint8_t *frame) {
    memcpy(c->clip + (size_t)c->filled * c->frame_bytes, frame, c->frame_bytes);
    c->filled++;
    c->next_index++;
    if (c->filled < c->o->clip_frames) return;
    memcpy(c->batch[c->batch_n], c->clip, c->frame_bytes * c->o->clip_frames);
    c->batch_first[c->batch_n++] = c->next_index - c->o->clip_frames;
    if (c->batch_n == c->batch_cap) cutter_flush(c);
    c->clips++;
    int keep = c->o->overlap;  // the last `overlap` frames start the next clip
    memmove(c->clip, c->clip + (size_t)(c->o->clip_frames - keep) * c->frame_bytes, (size_t)keep * c->frame_bytes);
    c->filled = keep;
}

// Output times within this of a frame's time count as the frame's: frames timed n / fps (folders of
// frames, synthetic footage, most videos) meet the output times n / fps though the two roundings
// differ in the last bit.
#define RESAMPLE_EPS_S 1e-6
// A forward jump of the timestamps longer than this is a break in the source (recordings joined
// end to end), not a still scene: resampling would fill it with copies of one frame. It is closed:
// the frame after it follows the one before at the output rate.
#define RESAMPLE_MAX_GAP_S 10.0

// One decoded frame at `time` seconds. Without resampling every frame goes in; with it, every output
// time (the first frame's time + n / fps) up to `time` takes the nearer of the previous and this frame.
// An output time midway between the two (within RESAMPLE_EPS_S) takes the previous one (sample and
// hold): left to the last bit of two doubles, 15 -> 30 fps would repeat frames 1, 2 or 3 times.
static void cutter_frame(Cutter *c, const uint8_t *frame, double time) {
    if (fc_stop_signal() && !c->failed) {  // the failure's path: the shards so far go, nothing is left
        snprintf(c->err, sizeof c->err, "stopped by %s", fc_signal_name(fc_stop_signal()));
        c->failed = 1;
    }
    if (c->failed) return;
    if (c->o->fps <= 0) {
        cutter_emit(c, frame);
        return;
    }
    time -= c->shift;
    if (!c->have_prev) {  // output time 0 is the first frame's own: taken now (a still has no later frame)
        c->first_time = time, c->out_n = 1, c->have_prev = 1;
        cutter_emit(c, frame);
    } else {
        if (time - c->prev_time > RESAMPLE_MAX_GAP_S) {
            double closed = time - (c->prev_time + 1.0 / c->o->fps);
            c->shift += closed, time -= closed, c->gaps_closed++;
        }
        for (;; c->out_n++) {
            double next = c->first_time + (double)c->out_n / c->o->fps;
            if (next > time + RESAMPLE_EPS_S) break;
            cutter_emit(c, next - c->prev_time <= time - next + RESAMPLE_EPS_S ? c->prev : frame);
        }
    }
    memcpy(c->prev, frame, c->frame_bytes);
    c->prev_time = time;
}

// ----------------------------------------------------------------------------


// The reasons the video layer gives start with the path; the progress line names it already.
static const char *without_path(const char *why, const char *path) {
    char quoted[4200];  // the path as the error line quotes it (fc_printable_line)
    snprintf(quoted, sizeof quoted, "%s", path);
    fc_printable_line(quoted);
    size_t n = strlen(quoted);
    return !strncmp(why, quoted, n) && !strncmp(why + n, ": ", 2) ? why + n + 2 : why;
}

// The intervals between a video's frames, to tell a variable frame rate.
typedef struct {
    float *d;
    size_t n, cap;
} Intervals;

static void intervals_add(Intervals *iv, double dt) {
    if (iv->n == iv->cap) {
        iv->cap = iv->cap ? 2 * iv->cap : 1024;
        iv->d = realloc(iv->d, sizeof(float) * iv->cap);
        if (!iv->d) fc_die("out of host memory timing the frames");
    }
    iv->d[iv->n++] = (float)dt;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// A frame rate that varies (phone footage slows down in low light): without --fps every frame goes
// in, so the same number of frames spans different times. Variable when the intervals' 5th or 95th
// percentile lies more than 10% (and a millisecond, Matroska's tick) from their median; a dropped frame
// or two is not. Sets c->rate_lo/hi/mid (fps), 0 when the rate is even. Frees the intervals.
static void variable_rate(Cutter *c, Intervals *iv) {
    c->rate_lo = c->rate_hi = c->rate_mid = 0;
    if (iv->n >= 8) {
        qsort(iv->d, iv->n, sizeof(float), cmp_float);
        double mid = iv->d[iv->n / 2], lo = iv->d[iv->n * 5 / 100], hi = iv->d[iv->n - 1 - iv->n * 5 / 100];
        if (mid > 0 && lo > 0 && (hi > 1.1 * mid + 1e-3 || lo < 0.9 * mid - 1e-3))
            c->rate_lo = 1 / hi, c->rate_hi = 1 / lo, c->rate_mid = 1 / mid;
    }
    free(iv->d);
    *iv = (Intervals){0};
}

// Decode one source into the cutter. Returns the frames decoded, -1 when the source could not be
// read at all; *why says what went wrong (also for a source that broke off part-way); *other_size is
// set when a frame folder stopped at a frame of another size, which is no damage.
static long decode_source(const Source *src, Cutter *c, uint8_t *frame, double *src_fps, int *src_side,
                          int *other_size, char *why, size_t len) {
    const PrepareOptions *o = c->o;
    long frames = 0;
    why[0] = 0;
    *other_size = 0;
    *src_side = 0;  // the source's shorter side (0: not known)
    if (src->kind == SOURCE_SYNTHETIC) {  // no clock either: one frame per output frame
        SyntheticSource *syn = synthetic_open(src->path, o->size, why, len);
        if (!syn) return -1;
        *src_fps = c->fps = o->fps > 0 ? o->fps : 25.0;
        *src_side = synthetic_image_side(syn);
        for (; frames < synthetic_frames(syn) && !c->failed; frames++) {
            synthetic_frame(syn, (int)frames, frame);
            cutter_frame(c, frame, frames / c->fps);
        }
        synthetic_close(syn);
        return frames;
    }
    if (src->kind == SOURCE_FRAME_FOLDER) {
        char err[700];
        FrameFolder *ff = frame_folder_open(src->path, err, sizeof err);
        if (!ff) {
            snprintf(why, len, "%s", without_path(err, src->path));
            return -1;
        }
        c->gaps_numbered = frame_folder_gaps(ff, c->first_gap, sizeof c->first_gap);
        double dt = 1.0 / (o->fps > 0 ? o->fps : 25.0);  // a folder of frames has no clock: one frame per output frame
        *src_fps = o->fps > 0 ? o->fps : 25.0;
        c->fps = *src_fps;
        while (!c->failed && frame_folder_next(ff, o->size, frame, why, len) == 1) {
            cutter_frame(c, frame, frames * dt);
            frames++;
        }
        int w, h;
        frame_folder_size(ff, &w, &h);
        *src_side = w < h ? w : h;
        *other_size = frame_folder_stopped_at_other_size(ff);
        frame_folder_close(ff);
        return frames;
    }
    char err[512];
    VideoReader *v = video_open(src->path, err, sizeof err);
    if (!v) {
        snprintf(why, len, "%s", without_path(err, src->path));
        return -1;
    }
    *src_fps = video_fps(v);
    *src_side = video_width(v) < video_height(v) ? video_width(v) : video_height(v);
    c->fps = o->fps > 0 ? o->fps : *src_fps;  // the clips' rate, recorded with each clip
    double t, last = 0, first = 0, tick = video_time_tick(v);
    int r = 0;  // a cutter that failed before the first frame reads none
    Intervals iv = {0};
    while (!c->failed && (r = video_next_frame(v, o->size, frame, &t, err, sizeof err)) == 1) {
        if (frames && o->fps <= 0) intervals_add(&iv, t - last);  // with --fps the clips are evenly timed
        if (!frames) first = t;
        // A clock finer than the frames (Matroska's and WebM's millisecond) rounds each frame's time
        // to its tick: with --fps, a time within a tick of the source's frame grid is put back on it,
        // so that an output time midway between two frames ties exactly (15 -> 30 fps repeats every
        // frame twice) instead of going by the rounding. Frames off the grid (a variable rate) keep
        // their times, and times still increase.
        if (frames && o->fps > 0 && *src_fps > 0 && tick > 0 && tick < 0.5 / *src_fps) {
            double on = first + nearbyint((t - first) * *src_fps) / *src_fps;
            if (fabs(t - on) <= tick && on > last) t = on;
        }
        last = t;
        cutter_frame(c, frame, t);
        frames++;
    }
    variable_rate(c, &iv);
    if (r < 0) snprintf(why, len, "%s", without_path(err, src->path));
    c->skipped_before_key = video_frames_skipped(v);
    video_close(v);
    return frames;
}

int prepare_run(const PrepareOptions *o) {
    double t0 = fc_now_s();
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/dataset.json", o->out);
    struct stat st;
    if (!stat(path, &st)) {
        shard_folder_stale_lock(o->out);
        fc_die("%s already holds a whole dataset (dataset.json; framechain inspect %s checks it): nothing prepared; "
               "to prepare it again, give another --out", o->out, o->out);
    }

    fc_catch_stop_signals();  // a stop takes the failure's path: what was written goes
    Sources ss = {0};
    int unreadable = 0;
    for (int i = 0; i < o->n_inputs; i++) unreadable += expand(&ss, o->inputs[i], 0);
    if (!ss.n) {
        char names[1024] = "";
        for (int i = 0; i < o->n_inputs && i < 3; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", o->inputs[i]);
        fc_die("prepare: none of the inputs holds a file to read: %s%s", names, o->n_inputs > 3 ? ", ..." : "");
    }

    ShardWriter *w;
    size_t latent_bytes = 0;  // a clip's, with --vae
    if (o->ae) {
        LatentIdentity id;
        if (latent_identity(o->ae, o->vae, o->size, &id, err, sizeof err)) fc_die("%s", err);
        int n = o->size / id.factor;
        latent_bytes = (size_t)o->clip_frames * 2 * id.channels * n * n * 2;
        printf("prepare: latents through %s: %s\n  each frame and its mirror encoded once, stored as F16 (%d, %d, %d) "
               "a frame; scale %s, shift %s; sha256 %.16s...\n",
               o->vae, autoencoder_describe(o->ae), id.channels, n, n, FC_NUMBER(id.scale), FC_NUMBER(id.shift),
               id.sha256);
        fflush(stdout);  // before the first clip's encoding, minutes on a CPU: the line is seen in a log too
        w = shard_writer_open_latents(o->out, &id, n, o->clip_frames, o->max_shard_bytes, err, sizeof err);
    } else {
        w = shard_writer_open(o->out, o->size, o->clip_frames, o->max_shard_bytes, err, sizeof err);
    }
    if (!w) fc_die("%s", err);
    size_t frame_bytes = (size_t)o->size * o->size * 3;
    Cutter c = {.o = o, .w = w, .frame_bytes = frame_bytes};
    c.clip = fc_malloc(frame_bytes * o->clip_frames);
    c.batch_cap = o->ae ? 1 : 2 * fc_threads();  // the encoder runs its own threads: one clip at a time
    c.batch = fc_malloc(sizeof(uint8_t *) * c.batch_cap);
    c.latents = fc_calloc((size_t)c.batch_cap, sizeof(uint8_t *));
    c.batch_first = fc_malloc(sizeof(long) * c.batch_cap);
    for (int i = 0; i < c.batch_cap; i++) c.batch[i] = fc_malloc(frame_bytes * o->clip_frames);
    for (int i = 0; i < c.batch_cap && o->ae; i++) c.latents[i] = fc_malloc(latent_bytes);
    c.prev = fc_malloc(frame_bytes);
    uint8_t *frame = fc_malloc(frame_bytes);
    long total_clips = 0, total_frames = 0;
    int used = 0, skipped = 0, short_ones = 0, partial = 0, other_sizes = 0;

    for (int i = 0; i < ss.n && !c.failed; i++) {
        const Source *src = &ss.s[i];
        c.source = src->path, c.filled = 0, c.next_index = 0, c.clips = 0, c.have_prev = 0;
        c.shift = 0, c.gaps_closed = 0, c.rate_mid = 0, c.skipped_before_key = 0, c.gaps_numbered = 0;
        double src_fps = 0, ts = fc_now_s();
        char why[700];
        int side, other_size;
        long frames = decode_source(src, &c, frame, &src_fps, &side, &other_size, why, sizeof why);
        cutter_flush(&c);  // a batch holds the clips of one source
        printf("[%d/%d] %s: ", i + 1, ss.n, shown(src->path));
        if (frames < 0 || (frames == 0 && why[0])) {  // not a frame out of it: unreadable, whatever stopped it
            printf("skipped: %s\n", why);
            skipped++;
        } else if (c.clips == 0 && src->kind == SOURCE_VIDEO && is_image_path(src->path) && frames == 1) {
            printf("skipped: an image is one frame, fewer than one clip of %d (a clip's frames as images: give "
                   "their folder)\n", o->clip_frames);
            short_ones++;
        } else if (c.clips == 0) {
            printf("skipped: %ld frame%s%s, fewer than one clip of %d%s%s\n", c.next_index, c.next_index == 1 ? "" : "s",
                   o->fps > 0 ? " after resampling" : "", o->clip_frames, why[0] ? "; " : "", why);
            if (other_size) other_sizes++;
            else if (why[0]) partial++;
            short_ones++;
        } else {
            char rate[32];
            printf("%ld frames -> %ld clip%s (%s frames/s)%s%s", frames, c.clips, c.clips == 1 ? "" : "s",
                   rate_text(rate, sizeof rate, frames / (fc_now_s() - ts + 1e-9)),
                   why[0] ? "; " : "", why);
            // Enlarged frames hold no detail of their own: say so, so it is no surprise in training
            if (src->kind == SOURCE_SYNTHETIC && side > 0 && side < 2 * o->size)  // (the image fills twice --size)
                printf("; upscaled: its image's shorter side is %d pixels, under %d, the square a pan or zoom at "
                       "--size %d moves over", side, 2 * o->size, o->size);
            else if (src->kind != SOURCE_SYNTHETIC && side > 0 && side < o->size)
                printf("; upscaled: its %sshorter side is %d pixels, under --size %d",
                       src->kind == SOURCE_FRAME_FOLDER ? "frames' " : "", side, o->size);
            if (c.gaps_closed)
                printf("; its timestamps jump forward by more than %.0f s %d time%s: each gap closed, not filled with "
                       "copies of one frame", RESAMPLE_MAX_GAP_S, c.gaps_closed, c.gaps_closed > 1 ? "s" : "");
            if (c.gaps_numbered)
                printf("; its frames' numbers skip %d time%s (%s): the frames missing there are not in its clips, "
                       "which join the frames on either side", c.gaps_numbered, c.gaps_numbered > 1 ? "s" : "",
                       c.first_gap);
            if (c.skipped_before_key)
                printf("; it begins mid-stream: its first %ld picture%s, before a key picture, left out (made from "
                       "pictures before the cut, a flat grey)", c.skipped_before_key, c.skipped_before_key == 1 ? "" : "s");
            if (c.rate_mid > 0)
                printf("; variable frame rate (%.3g to %.3g fps): --fps %.3g gives evenly timed clips", c.rate_lo,
                       c.rate_hi, c.rate_mid);
            printf("\n");
            used++;
            if (other_size) other_sizes++;
            else if (why[0]) partial++;
            total_clips += c.clips;
            total_frames += frames;
        }
        fflush(stdout);
    }
    for (int i = 0; i < c.batch_cap; i++) free(c.batch[i]), free(c.latents[i]);
    free(c.batch), free(c.latents), free(c.batch_first), free(c.clip), free(c.prev), free(frame);
    int twice = ss.twice;
    for (int i = 0; i < ss.n; i++) free(ss.s[i].path);
    for (int i = 0; i < ss.nfolders; i++) free(ss.folders[i].path);
    free(ss.s), free(ss.folders);
    if (c.failed) {
        shard_writer_abort(w);
        int sig = fc_stop_signal();
        if (sig) {
            printf("prepare: stopped by %s: the shards written so far removed, nothing prepared\n", fc_signal_name(sig));
            fflush(stdout);
            return 128 + sig;
        }
        fc_die("prepare stopped: %s", c.err);
    }
    if (!total_clips) {
        shard_writer_abort(w);
        fflush(stdout);  // the inputs' lines before the verdict, where both go to one terminal
        fprintf(stderr, "framechain: prepare: no usable clip came out of %d input%s (%d unreadable, %d shorter than "
                "one clip)\n", ss.n + unreadable, ss.n + unreadable == 1 ? "" : "s", skipped + unreadable, short_ones);
        return 1;
    }
    if (shard_writer_finish(w, err, sizeof err)) fc_die("%s", err);
    double dt = fc_now_s() - t0;
    char rate[32];
    printf("prepare: %s: %ld clip%s of %d frames at %dx%d%s from %d input%s (%d skipped as unreadable, %d shorter than a "
           "clip, %d cut short by damage, %d stopped at a frame of another size, %d given twice); %ld frames in %.1f s, "
           "%s frames/s\n",
           shown(o->out), total_clips, total_clips == 1 ? "" : "s", o->clip_frames, o->size, o->size, o->ae ? " as latents" : "",
           used, used == 1 ? "" : "s", skipped + unreadable, short_ones, partial, other_sizes,
           twice, total_frames, dt, rate_text(rate, sizeof rate, total_frames / dt));
    return 0;
}
