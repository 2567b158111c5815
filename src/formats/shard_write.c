// shard_write.c: writing a clip dataset (see shards.h): the ShardWriter, which compresses clips,
// fills shards up to their size cap and writes each crash-safely, then manifest.tsv and, last,
// dataset.json. The reading side is in shard_read.c and dataset_read.c.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/common.h"
#include "formats/safetensors.h"
#include "formats/shard_internal.h"
#include "formats/shards.h"
#include "base/paths.h"

#define ZLIB_LEVEL 1  // level 6 saves under 1% more on video frames and costs a third more time
#define META_PER_SHARD ((size_t)16 << 20)  // header bytes (about) after which a shard is written

// A number as text (fps, an autoencoder's factors): an integer as such, else the shortest form that
// reads back as the same double.
static void shortest_text(double fps, char *buf, size_t len) {
    if (fps == floor(fps) && fps < 1e15) {
        snprintf(buf, len, "%.0f", fps);
        return;
    }
    snprintf(buf, len, "%s", FC_NUMBER(fps));
}

// ---------------------------------------------------------------------------------------------
// writer

typedef struct {
    uint8_t *data;  // the stored bytes
    size_t stored;
    int zlib;
    uint32_t crc;
    uint32_t *unit_crc;  // latents: the CRC of each of the 2F units (NULL for frames)
    char *source;
    long first;
    double fps;
} Pending;

typedef struct {
    char file[40];
    int clips;
    uint64_t bytes;
    uint32_t header_crc;  // CRC-32 of its first 8 + header length bytes (dataset.json's header_crc32)
} Written;

struct ShardWriter {
    char *dir;
    int N, F;
    size_t raw, max_bytes;
    int latent;          // 1: a latent dataset (shards.h)
    LatentIdentity lat;  // its autoencoder
    size_t unit;         // latents: the bytes of one (C, n, n) unit
    Pending *cur;  // the clips of the shard being filled
    int ncur, capcur;
    size_t cur_bytes, cur_meta;
    Written *done;  // the shards written
    int ndone, capdone;
    char *manifest;
    size_t mlen, mcap;
    long total;
    int failed;
    char *made_top;     // the outermost folder of dir the writer created (NULL: dir was there)
    int wrote_manifest; // 1: manifest.tsv is the writer's
    int lock;           // dir/.prepare.lock, held (flock) while the writer lives: one writer a folder
};

// The writer of this process that has not ended, whose shards go at exit where the command ends by a
// path that does not abort it (fc_die: out of memory in an encoder pass): an error leaves no half
// dataset, nor the folder it made. One a process (prepare's).
static ShardWriter *g_open_writer;

static void remove_open_writer(void);

// One writer a folder: two prepares into one folder would take each other's shards for orphans and
// write over each other's. The lock is released (and its file removed) when the writer ends.
static int lock_folder(const char *dir, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.prepare.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return fc_errf(err, errlen, "%s: cannot open the prepare's lock file: %s", path, strerror(errno)), -1;
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        close(fd);
        return fc_errf(err, errlen, "%s: another framechain prepare is writing into this folder", dir), -1;
    }
    return fd;
}

int shard_folder_stale_lock(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.prepare.lock", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC), removed = 0;
    if (fd < 0) return 0;
    if (!flock(fd, LOCK_EX | LOCK_NB)) {  // no writer holds it: the lock of one that was cut off
        removed = !unlink(path);
        if (removed) printf("removed %s, the lock of a prepare that was cut off\n", path);
    }
    close(fd);
    return removed;
}

static void unlock_folder(ShardWriter *w) {
    if (w->lock < 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/.prepare.lock", w->dir);
    unlink(path);  // before the lock goes: a writer that then opens the name makes a new file, and finds
    close(w->lock);  // this one's dataset.json (or nothing of it)
    w->lock = -1;
}

static void manifest_put(ShardWriter *w, const char *s, size_t n) {
    if (w->mlen + n + 1 > w->mcap) {
        size_t cap = w->mcap ? w->mcap : 4096;
        while (cap < w->mlen + n + 1) cap *= 2;
        char *m = realloc(w->manifest, cap);
        if (!m) FC_OUT_OF_MEMORY("the dataset manifest");
        w->manifest = m, w->mcap = cap;
    }
    memcpy(w->manifest + w->mlen, s, n);
    w->mlen += n;
    w->manifest[w->mlen] = 0;
}

static void shard_name(int i, char *buf, size_t len) { snprintf(buf, len, "shard-%05d.safetensors", i); }

// A name shard_name makes: "shard-", five digits or more, ".safetensors".
static int shard_file_name(const char *n) {
    if (strncmp(n, "shard-", 6)) return 0;
    size_t digits = strspn(n + 6, "0123456789");
    return digits >= 5 && !strcmp(n + 6 + digits, ".safetensors");
}

// Whether the file at path begins as this writer begins a shard: the header's length, then its
// metadata first with the format first (safetensors_write keeps the order it is given).
static int written_by_prepare(const char *path) {
    static const char start[] = "{\"__metadata__\":{\"format\":\"framechain-shard\"";
    char buf[8 + sizeof start - 1], why[64];
    int fd = fc_open_regular(path, NULL, why, sizeof why);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n == (ssize_t)sizeof buf && !memcmp(buf + 8, start, sizeof start - 1);
}

// s as valid UTF-8: each byte that does not start a valid sequence becomes U+FFFD. malloc'ed.
static char *utf8_fixed(const char *s) {
    size_t n = strlen(s);
    char *o = fc_malloc(3 * n + 1);
    if (st_valid_utf8(s)) return memcpy(o, s, n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (size_t len = 1; len <= 4 && i + len <= n && !k; len++) {
            char t[5];
            memcpy(t, s + i, len);
            t[len] = 0;
            if (st_valid_utf8(t)) k = len;
        }
        if (k) memcpy(o + j, s + i, k), i += k, j += k;
        else memcpy(o + j, "\xEF\xBF\xBD", 3), i++, j += 3;
    }
    o[j] = 0;
    return o;
}

// A training run's folder (its lock, checkpoints or metrics): shards written among them would be read
// as a dataset while the run's files stay, and the train would refuse the folder from then on. -1 with
// the line that refuses it.
static int run_folder(const char *dir, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", dir);
    const char *held = !access(path, F_OK) ? ".lock" : NULL;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (!held && !access(path, F_OK)) held = "metrics.jsonl";
    DIR *d = held ? NULL : opendir(dir);
    for (struct dirent *e; d && !held && (e = readdir(d));)
        if (!strncmp(e->d_name, "ckpt-", 5) && strstr(e->d_name, ".safetensors")) held = "checkpoints";
    if (d) closedir(d);
    if (!held) return 0;
    return fc_errf(err, errlen, "%s: holds %s: a training run's folder, not a dataset folder (give --out a folder of "
                   "its own)", dir, held);
}

// The checks and the folder of both kinds of dataset: raw = a clip's bytes.
static ShardWriter *writer_open(const char *dir, int frame_size, int clip_frames, size_t raw, size_t max_shard_bytes,
                                char *err, size_t errlen) {
    if (frame_size < 1 || frame_size > SHARD_MAX_FRAME_SIZE) {
        fc_errf(err, errlen, "%s: frame size %d is not in 1..%d", dir, frame_size, SHARD_MAX_FRAME_SIZE);
        return NULL;
    }
    if (clip_frames < 1 || clip_frames > SHARD_MAX_CLIP_FRAMES) {
        fc_errf(err, errlen, "%s: clip length %d frames is not in 1..%d", dir, clip_frames, SHARD_MAX_CLIP_FRAMES);
        return NULL;
    }
    if (raw > SHARD_MAX_CLIP_BYTES) {
        fc_errf(err, errlen, "%s: clips of %d frames of %dx%d would be %zu bytes, more than the %zu allowed", dir,
             clip_frames, frame_size, frame_size, raw, SHARD_MAX_CLIP_BYTES);
        return NULL;
    }
    if (strlen(dir) > 3000) {
        fc_errf(err, errlen, "%.200s...: path too long", dir);
        return NULL;
    }
    char path[4096];
    struct stat st;
    char *made_top = fc_missing_top(dir);
    if (fc_mkdir_p(dir, err, errlen)) {
        if (made_top) fc_rmdir_made(dir, made_top);  // the parents it made before the part that failed
        free(made_top);
        return NULL;
    }
    if (run_folder(dir, err, errlen)) {  // (refused as it was found: a folder made just now holds nothing)
        free(made_top);
        return NULL;
    }
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    if (!stat(path, &st)) {  // dir was there before: made_top is NULL
        fc_errf(err, errlen, "%s already holds a dataset (dataset.json); remove it or choose another folder", dir);
        return NULL;
    }
    if (access(dir, W_OK)) {
        fc_errf(err, errlen, "%s: cannot write there: %s", dir, strerror(errno));
        if (made_top) fc_rmdir_made(dir, made_top);
        free(made_top);
        return NULL;
    }
    int lock = lock_folder(dir, err, errlen);
    if (lock < 0) {  // (a lock file that cannot be made: the folders made for it go; another's lock keeps them)
        if (made_top) fc_rmdir_made(dir, made_top);
        free(made_top);
        return NULL;
    }
    // another prepare finished here while this one looked, or a train started in it (each makes its lock
    // file first, then looks for the other's)
    int taken = !stat(path, &st) ? fc_errf(err, errlen, "%s already holds a dataset (dataset.json); remove it or "
                                           "choose another folder", dir)
                                 : run_folder(dir, err, errlen);
    if (taken) {
        snprintf(path, sizeof path, "%s/.prepare.lock", dir);
        unlink(path), close(lock), free(made_top);
        return NULL;
    }
    // What a writer that was killed left: temporary files, and whole shards that no dataset.json lists
    // (written before the kill; this writer's would replace some of them and leave the rest lying about).
    // A shard that cannot be removed (another user's, in a folder with the sticky bit) would fail this
    // writer's rename onto its name once the input is decoded, or lie beside the new dataset unlisted:
    // refused now, in one line naming it.
    DIR *dd = opendir(dir);
    int orphans = 0, stuck = 0;
    if (dd) {
        for (struct dirent *e; (e = readdir(dd)) && !stuck;) {
            const char *n = e->d_name;
            int temp = (!strncmp(n, "shard-", 6) && strstr(n, ".safetensors.tmp-")) ||
                       !strncmp(n, "dataset.json.tmp-", 17) || !strncmp(n, "manifest.tsv.tmp-", 17);
            int orphan = shard_file_name(n);
            if (!temp && !orphan) continue;
            snprintf(path, sizeof path, "%s/%s", dir, n);
            // a file of that name that is not prepare's (a user's, another tool's) is never removed; one
            // whose name this writer may take is refused, as it would be written over
            if (orphan && !written_by_prepare(path)) {
                stuck = fc_errf(err, errlen, "%s: a file named as prepare names its shards, which is not one of "
                                "them; move it, or choose another folder", path);
                break;
            }
            if (!unlink(path)) orphans += orphan;
            else if (orphan && errno != ENOENT)
                stuck = fc_errf(err, errlen, "%s: a shard of an earlier prepare that was cut off (no dataset.json lists "
                                "it), which cannot be removed: %s; remove it, or choose another folder", path,
                                strerror(errno));
        }
        closedir(dd);
    }
    if (stuck) {
        snprintf(path, sizeof path, "%s/.prepare.lock", dir);
        unlink(path), close(lock);
        if (made_top) fc_rmdir_made(dir, made_top);
        free(made_top);
        return NULL;
    }
    if (orphans)
        printf("%s: removed %d shard%s of an earlier prepare that was cut off (no dataset.json listed them)\n", dir,
               orphans, orphans == 1 ? "" : "s");
    ShardWriter *w = fc_calloc(1, sizeof *w);
    w->dir = strdup(dir);
    if (!w->dir) FC_OUT_OF_MEMORY("the dataset folder's name");
    w->N = frame_size, w->F = clip_frames, w->raw = raw, w->made_top = made_top, w->lock = lock;
    w->max_bytes = max_shard_bytes ? max_shard_bytes : SHARD_DEFAULT_BYTES;
    static const char head[] = "shard\tclip\tsource\tfirst_frame\tframes\tfps\n";
    manifest_put(w, head, sizeof head - 1);
    static int registered;
    if (!registered++) atexit(remove_open_writer);
    g_open_writer = w;
    return w;
}

ShardWriter *shard_writer_open(const char *dir, int frame_size, int clip_frames, size_t max_shard_bytes, char *err,
                               size_t errlen) {
    size_t raw = frame_size > 0 && clip_frames > 0 ? (size_t)clip_frames * frame_size * frame_size * 3 : 0;
    return writer_open(dir, frame_size, clip_frames, raw, max_shard_bytes, err, errlen);
}

ShardWriter *shard_writer_open_latents(const char *dir, const LatentIdentity *id, int latent_size, int clip_frames,
                                       size_t max_shard_bytes, char *err, size_t errlen) {
    if (id->channels < 1 || id->channels > SHARD_MAX_CHANNELS) {
        fc_errf(err, errlen, "%s: %d latent channels is not in 1..%d", dir, id->channels, SHARD_MAX_CHANNELS);
        return NULL;
    }
    size_t unit = latent_size > 0 ? (size_t)id->channels * latent_size * latent_size * 2 : 0;
    size_t raw = clip_frames > 0 ? (size_t)clip_frames * 2 * unit : 0;
    ShardWriter *w = writer_open(dir, latent_size, clip_frames, raw, max_shard_bytes, err, errlen);
    if (!w) return NULL;
    w->latent = 1, w->lat = *id, w->unit = unit;
    return w;
}

static void free_pending(ShardWriter *w) {
    for (int i = 0; i < w->ncur; i++) free(w->cur[i].data), free(w->cur[i].source), free(w->cur[i].unit_crc);
    w->ncur = 0, w->cur_bytes = 0, w->cur_meta = 0;
}

// Write the clips held as the next shard.
static int flush_shard(ShardWriter *w, char *err, size_t errlen) {
    int n = w->ncur;
    if (!n) return 0;
    typedef struct {
        char name[32], keys[5][48], crc[12], first[24], fps[40];
        char *frame_crcs;  // latents: 16 F hex digits
    } Text;
    Text *tx = fc_calloc((size_t)n, sizeof(Text));
    StTensor *t = fc_calloc((size_t)n, sizeof(StTensor));
    StMeta *m = fc_calloc((size_t)5 * n + 7, sizeof(StMeta));
    char N[16], F[16], count[16], C[16];
    snprintf(N, sizeof N, "%d", w->N);
    snprintf(F, sizeof F, "%d", w->F);
    snprintf(count, sizeof count, "%d", n);
    snprintf(C, sizeof C, "%d", w->lat.channels);
    int nm = 0;
    m[nm++] = (StMeta){"format", "framechain-shard"};
    m[nm++] = (StMeta){"format_version", w->latent ? "2" : "1"};
    if (w->latent) m[nm++] = (StMeta){"content", "latents"}, m[nm++] = (StMeta){"channels", C};
    m[nm++] = (StMeta){"frame_size", N};
    m[nm++] = (StMeta){"clip_frames", F};
    m[nm++] = (StMeta){"clips", count};
    for (int k = 0; k < n; k++) {
        const Pending *p = &w->cur[k];
        Text *x = &tx[k];
        snprintf(x->name, sizeof x->name, "clip.%d", k);
        for (int j = 0; j < 5; j++)
            snprintf(x->keys[j], sizeof x->keys[j], "clip.%d.%s", k, j == 1 && w->latent ? "frame_crc32" : CLIP_FIELDS[j]);
        snprintf(x->crc, sizeof x->crc, "%08x", p->crc);
        snprintf(x->first, sizeof x->first, "%ld", p->first);
        shortest_text(p->fps, x->fps, sizeof x->fps);
        if (w->latent) {
            x->frame_crcs = fc_malloc((size_t)16 * w->F + 1);
            for (int u = 0; u < 2 * w->F; u++) snprintf(x->frame_crcs + 8 * u, 9, "%08x", p->unit_crc[u]);
        }
        m[nm++] = (StMeta){x->keys[0], p->zlib ? "zlib" : "raw"};
        m[nm++] = (StMeta){x->keys[1], w->latent ? x->frame_crcs : x->crc};
        m[nm++] = (StMeta){x->keys[2], p->source};
        m[nm++] = (StMeta){x->keys[3], x->first};
        m[nm++] = (StMeta){x->keys[4], x->fps};
        t[k].name = x->name, t[k].dtype = w->latent ? "F16" : "U8", t[k].data = p->data;
        if (w->latent) {
            t[k].ndim = 5, t[k].shape[0] = w->F, t[k].shape[1] = 2, t[k].shape[2] = w->lat.channels;
            t[k].shape[3] = t[k].shape[4] = w->N;
        } else if (p->zlib) {
            t[k].ndim = 1, t[k].shape[0] = (long)p->stored;
        } else {
            t[k].ndim = 4, t[k].shape[0] = w->F, t[k].shape[1] = w->N, t[k].shape[2] = w->N, t[k].shape[3] = 3;
        }
    }
    char file[40], path[4096];
    shard_name(w->ndone, file, sizeof file);
    snprintf(path, sizeof path, "%s/%s", w->dir, file);
    int rc = st_write(path, t, n, m, nm, err, errlen);
    // the header as the readers will see it, read back: its CRC-32 goes into dataset.json, so that a
    // shard copied over another (the same size, the same count of clips) is not taken for it
    StFile back;
    uint32_t header_crc = 0;
    if (!rc && !(rc = st_read_header(path, &back, err, errlen))) {
        header_crc = (uint32_t)crc32_z(0L, back.bytes, back.data_start);
        st_free(&back);
    }
    struct stat st;
    if (!rc && stat(path, &st))
        rc = fc_errf(err, errlen, "%s: cannot stat what was written: %s", path, strerror(errno));
    for (int k = 0; k < n; k++) free(tx[k].frame_crcs);
    free(tx), free(t), free(m);
    if (rc) return -1;
    if (w->ndone == w->capdone) {
        w->capdone = w->capdone ? 2 * w->capdone : 16;
        w->done = realloc(w->done, sizeof(Written) * (size_t)w->capdone);
        if (!w->done) fc_die("out of host memory");
    }
    Written *d = &w->done[w->ndone++];
    snprintf(d->file, sizeof d->file, "%s", file);
    d->clips = n, d->bytes = (uint64_t)st.st_size, d->header_crc = header_crc;
    free_pending(w);
    return 0;
}

// Compress (where that saves 10% or more) and checksum one clip into p; latents are stored raw, with
// a CRC a unit. Touches nothing shared, so several clips can be encoded at once.
static void encode_clip(const ShardWriter *w, const uint8_t *clip, Pending *p) {
    if (w->latent) {
        memset(p, 0, sizeof *p);
        p->stored = w->raw;
        p->data = fc_malloc(w->raw);
        memcpy(p->data, clip, w->raw);
        p->unit_crc = fc_malloc(sizeof(uint32_t) * 2 * (size_t)w->F);
        for (int u = 0; u < 2 * w->F; u++) p->unit_crc[u] = (uint32_t)crc32_z(0, clip + (size_t)u * w->unit, w->unit);
        return;
    }
    size_t bound = compressBound((uLong)w->raw);
    uint8_t *zbuf = fc_malloc(bound);
    uLongf zlen = (uLongf)bound;
    int zr = compress2(zbuf, &zlen, clip, (uLong)w->raw, ZLIB_LEVEL);
    if (zr == Z_MEM_ERROR) FC_OUT_OF_MEMORY("zlib's state to compress a clip");
    memset(p, 0, sizeof *p);
    p->zlib = zr == Z_OK && (size_t)zlen * 10 <= w->raw * 9;  // at least 10% smaller
    p->stored = p->zlib ? (size_t)zlen : w->raw;
    if (p->zlib) {
        p->data = realloc(zbuf, p->stored);
        if (!p->data) fc_die("out of host memory");
    } else {
        free(zbuf);
        p->data = fc_malloc(p->stored);
        memcpy(p->data, clip, p->stored);
    }
    p->crc = (uint32_t)crc32_z(0, clip, w->raw);
}

static int check_add(ShardWriter *w, const uint8_t *clip, const char *source, long first_frame, double fps, char *err,
                     size_t errlen) {
    if (w->failed) return fc_errf(err, errlen, "%s: the dataset writer stopped at an earlier error", w->dir);
    if (!clip || !source) return fc_errf(err, errlen, "%s: shard_writer_add without a clip or a source", w->dir);
    if (first_frame < 0 || (uint64_t)first_frame > (uint64_t)1 << 62)
        return fc_errf(err, errlen, "%s: first frame %ld of %s is out of range", w->dir, first_frame, source);
    if (!isfinite(fps) || fps < 0 || fps > 1e6)
        return fc_errf(err, errlen, "%s: fps %g of %s is not in [0, 1e6]", w->dir, fps, source);
    if (w->total >= INT_MAX) return fc_errf(err, errlen, "%s: a dataset holds at most %d clips", w->dir, INT_MAX);
    return 0;
}

// Append an encoded clip to the shard being filled (flushing that shard first when it is full).
static int append_clip(ShardWriter *w, Pending p, const char *source, long first_frame, double fps, char *err,
                       size_t errlen) {
    p.source = utf8_fixed(source);
    p.first = first_frame, p.fps = fps;
    size_t meta = 6 * strlen(p.source) + 256;  // JSON escapes make at most 6 bytes of one
    if (w->latent) meta += (size_t)16 * 2 * w->F;  // its frame_crc32 list: 8 hex digits, quotes, comma a unit
    if (w->ncur && (w->cur_bytes + p.stored > w->max_bytes || w->ncur >= SHARD_MAX_CLIPS ||
                    w->cur_meta + meta > META_PER_SHARD)) {
        if (flush_shard(w, err, errlen)) {
            w->failed = 1;
            free(p.data), free(p.source), free(p.unit_crc);
            return -1;
        }
    }
    if (w->ncur == w->capcur) {
        w->capcur = w->capcur ? 2 * w->capcur : 64;
        w->cur = realloc(w->cur, sizeof(Pending) * (size_t)w->capcur);
        if (!w->cur) fc_die("out of host memory");
    }
    // the manifest line: shard, clip, source, first_frame, frames, fps
    char file[40], line[256], fpsb[40];
    shard_name(w->ndone, file, sizeof file);
    snprintf(line, sizeof line, "%s\t%d\t", file, w->ncur);
    manifest_put(w, line, strlen(line));
    char *escaped = fc_malloc(4 * strlen(p.source) + 1);
    manifest_escape(escaped, p.source);
    manifest_put(w, escaped, strlen(escaped));
    free(escaped);
    shortest_text(fps, fpsb, sizeof fpsb);
    snprintf(line, sizeof line, "\t%ld\t%d\t%s\n", first_frame, w->F, fpsb);
    manifest_put(w, line, strlen(line));
    w->cur[w->ncur++] = p;
    w->cur_bytes += p.stored, w->cur_meta += meta;
    w->total++;
    return 0;
}

int shard_writer_add(ShardWriter *w, const uint8_t *clip, const char *source, long first_frame, double fps, char *err,
                     size_t errlen) {
    if (check_add(w, clip, source, first_frame, fps, err, errlen)) return -1;
    Pending p;
    encode_clip(w, clip, &p);
    return append_clip(w, p, source, first_frame, fps, err, errlen);
}

int shard_writer_add_clips(ShardWriter *w, int n, const uint8_t *const *clips, const char *source,
                           const long *first_frames, double fps, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (check_add(w, clips[i], source, first_frames[i], fps, err, errlen)) return -1;
    Pending *p = fc_calloc((size_t)(n ? n : 1), sizeof(Pending));
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) encode_clip(w, clips[i], &p[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0)
            rc = append_clip(w, p[i], source, first_frames[i], fps, err, errlen);
        else
            free(p[i].data), free(p[i].unit_crc);
    }
    free(p);
    return rc;
}

static void writer_remove_written(ShardWriter *w);

static void remove_open_writer(void) {
    if (!g_open_writer) return;
    writer_remove_written(g_open_writer);
    unlock_folder(g_open_writer);
}

static void writer_free(ShardWriter *w) {
    if (g_open_writer == w) g_open_writer = NULL;
    unlock_folder(w);
    free(w->made_top);
    free_pending(w);
    free(w->cur);
    free(w->done);
    free(w->manifest);
    free(w->dir);
    free(w);
}

// A writer that ends without its dataset.json takes back what it wrote: the shards and the manifest
// (no dataset lists them), and the folder if it made it and nothing else is in it. A dataset.json
// there is its own, renamed into place by a write that then failed (the folder's fsync: the rename
// may not be durable), and goes first: it must never name shards that are gone. (The folder had
// none when the writer opened it: shard_writer_open refuses one that has.)
static void writer_remove_written(ShardWriter *w) {
    char path[4096];
    snprintf(path, sizeof path, "%s/dataset.json", w->dir);
    unlink(path);
    for (int i = 0; i < w->ndone; i++) {
        snprintf(path, sizeof path, "%s/%s", w->dir, w->done[i].file);
        unlink(path);
    }
    if (w->wrote_manifest) {
        snprintf(path, sizeof path, "%s/manifest.tsv", w->dir);
        unlink(path);
    }
    if (!w->made_top) return;
    unlock_folder(w);  // its file would keep the folder from being removed
    fc_rmdir_made(w->dir, w->made_top);  // the folders the writer made, inner to outer
}

void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    writer_remove_written(w);
    writer_free(w);
}

int shard_writer_finish(ShardWriter *w, char *err, size_t errlen) {
    int rc = -1;
    char path[4096];
    if (w->failed) {
        fc_errf(err, errlen, "%s: the dataset writer stopped at an earlier error: no dataset.json written", w->dir);
        goto out;
    }
    if (!w->total) {
        fc_errf(err, errlen, "%s: no clips were added: no dataset.json written", w->dir);
        goto out;
    }
    if (flush_shard(w, err, errlen)) goto out;
    snprintf(path, sizeof path, "%s/manifest.tsv", w->dir);
    if (st_write_bytes(path, w->manifest, w->mlen, err, errlen)) goto out;
    w->wrote_manifest = 1;
    {
        size_t cap = 1024 + (size_t)w->ndone * 192;
        char *j = fc_malloc(cap);
        size_t n = (size_t)snprintf(j, cap,
                                    "{\"format\": \"framechain-dataset\", \"format_version\": %d, \"frame_size\": %d, "
                                    "\"clip_frames\": %d, \"clips\": %ld,\n",
                                    w->latent ? 2 : 1, w->N, w->F, w->total);
        if (w->latent) {
            char scale[40], shift[40];
            shortest_text(w->lat.scale, scale, sizeof scale);
            shortest_text(w->lat.shift, shift, sizeof shift);
            n += (size_t)snprintf(j + n, cap - n,
                                  " \"channels\": %d,\n \"autoencoder\": {\"sha256\": \"%s\", \"family\": \"%s\", "
                                  "\"factor\": %d, \"image_size\": %d, \"scale\": %s, \"shift\": %s},\n",
                                  w->lat.channels, w->lat.sha256, w->lat.family, w->lat.factor, w->lat.image_size, scale,
                                  shift);
        }
        n += (size_t)snprintf(j + n, cap - n, " \"shards\": [\n");
        for (int i = 0; i < w->ndone; i++)
            n += (size_t)snprintf(j + n, cap - n,
                                  "  {\"file\": \"%s\", \"clips\": %d, \"bytes\": %llu, \"header_crc32\": \"%08x\"}%s\n",
                                  w->done[i].file, w->done[i].clips, (unsigned long long)w->done[i].bytes,
                                  (unsigned)w->done[i].header_crc, i + 1 < w->ndone ? "," : "");
        n += (size_t)snprintf(j + n, cap - n, " ]}\n");
        snprintf(path, sizeof path, "%s/dataset.json", w->dir);
        rc = st_write_bytes(path, j, n, err, errlen);
        free(j);
    }
out:
    if (rc) writer_remove_written(w);
    writer_free(w);
    return rc;
}
