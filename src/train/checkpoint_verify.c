// checkpoint_verify.c: the checks a checkpoint passes before any of it is believed (see
// checkpoint.h): its metadata and their CRC, every tensor's CRC and values, and its tensors against
// the network its own config describes. checkpoint.c writes and loads through these.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/checkpoint_internal.h"
#include "formats/safetensors.h"
#include "base/paths.h"
// A whole number of 0 to max written as digits alone: 0 with *v, else -1 (atoi would take
// "2garbage" as 2 and overflow on "4294967298").
static int parse_whole(const char *s, long long max, long long *v) {
    if (!s || !*s) return -1;
    long long x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || x > (max - (*p - '0')) / 10) return -1;
        x = x * 10 + (*p - '0');
    }
    *v = x;
    return 0;
}

// parse_whole of 0 to INT_MAX, into an int.
static int parse_count(const char *s, int *v) {
    long long x;
    if (parse_whole(s, INT_MAX, &x)) return -1;
    *v = (int)x;
    return 0;
}

// A metadata entry that is a whole number (parse_count), into *v; an absent one leaves *v. 0, or -1
// with a line in err.
static int meta_count(const StFile *f, const char *key, int *v, const char *path, char *err, size_t errlen) {
    const char *text = st_meta(f, key);
    if (text && parse_count(text, v))
        return fc_errf(err, errlen, "%s: its metadata's %s \"%s\" is not a whole number", path, key, ST_SHOWN(text));
    return 0;
}

static int cmp_meta_key(const void *a, const void *b) {
    return strcmp(((const StMeta *)a)->key, ((const StMeta *)b)->key);
}

// The CRC32 of a checkpoint's metadata (CKPT_META_CRC): every entry but the crc32.* ones (each
// tensor's CRC is checked against its bytes, and this one cannot cover itself), in the order of their
// keys, each as KEY NUL VALUE NUL. A flipped bit in the config copy or the step then marks the file as
// damaged, not as another run's checkpoint.
unsigned long ckpt_metadata_crc(const StMeta *meta, int n) {
    StMeta *sorted = fc_malloc(sizeof *sorted * (n > 0 ? n : 1));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(meta[i].key, "crc32.", 6)) sorted[k++] = meta[i];
    qsort(sorted, k, sizeof *sorted, cmp_meta_key);
    unsigned long crc = crc32_z(0L, NULL, 0);
    for (int i = 0; i < k; i++) {
        crc = crc32_z(crc, (const Bytef *)sorted[i].key, strlen(sorted[i].key) + 1);
        crc = crc32_z(crc, (const Bytef *)sorted[i].value, strlen(sorted[i].value) + 1);
    }
    free(sorted);
    return crc;
}

// The seed and the data cursor, which every framechain writes as its config's seed and its step (the
// data a step sees is a function of the two) and nothing reads back: the config copy's seed and the
// step are what a resume and a generation use. Either one that is not those (out of the seed key's
// range, negative, past the step) is damage or a file made by hand, not a checkpoint to believe.
// 0, or -1 with a line naming the key in err.
static int check_seed_and_cursor(const StFile *f, const char *path, int step, char *err, size_t errlen) {
    const char *seed = st_meta(f, "seed"), *cursor = st_meta(f, "data_cursor");
    if (!seed || !cursor)
        return fc_errf(err, errlen, "%s: its metadata has no %s: the trainer state is incomplete", path,
                       seed ? "data_cursor" : "seed");
    long long v;
    if (parse_whole(seed, CONFIG_MAX_SEED, &v))
        return fc_errf(err, errlen, "%s: its metadata's seed \"%s\" is not a whole number of 0 to %lld (the range of the "
                       "config key seed)", path, ST_SHOWN(seed), CONFIG_MAX_SEED);
    const char *text = st_meta(f, "config");
    Config c;
    char why[CONFIG_MAX_LINE + 512];
    config_defaults(&c);
    // a config copy that does not parse is for the checks after this one to name
    if (text && !config_parse_text(&c, text, strlen(text), path, why, sizeof why) && c.seed != v)
        return fc_errf(err, errlen, "%s: its metadata's seed %lld is not its config's (seed = %lld)", path, v, c.seed);
    if (parse_whole(cursor, INT_MAX, &v) || v != step)
        return fc_errf(err, errlen, "%s: its metadata's data_cursor \"%s\" is not its step %d", path, ST_SHOWN(cursor),
                       step);
    return 0;
}

// The metadata as resume reads it: the format, the metadata's CRC (where it has one: checkpoints of
// earlier builds have none), the format version and the trainer state (step, smoothed loss, seed and
// data cursor), each value read strictly.
// CKPT_OK with the step and smoothed loss in *step and *smooth (either may be NULL); CKPT_CORRUPT
// (a damaged file) or CKPT_REFUSED (another version of the format) with one line in err.
CkptStatus ckpt_check_metadata(const StFile *f, const char *path, int *step, double *smooth, char *err,
                               size_t errlen) {
    const char *format = st_meta(f, "format"), *crc = st_meta(f, CKPT_META_CRC);
    if (!format || strcmp(format, CKPT_FORMAT)) {
        fc_errf(err, errlen, "%s: not a framechain checkpoint", path);
        return CKPT_CORRUPT;
    }
    if (crc) {
        StMeta *meta = fc_malloc(sizeof *meta * (f->nmeta > 0 ? f->nmeta : 1));
        for (int i = 0; i < f->nmeta; i++) meta[i] = (StMeta){f->meta_keys[i], f->meta_values[i]};
        char got[16];
        snprintf(got, sizeof got, "%08lx", ckpt_metadata_crc(meta, f->nmeta));
        free(meta);
        if (strcmp(crc, got)) {
            fc_errf(err, errlen, "%s: its metadata (step, config, ...) fails its CRC32 check", path);
            return CKPT_CORRUPT;
        }
    }
    const char *version = st_meta(f, "format_version");
    int v = 0;
    if (meta_count(f, "format_version", &v, path, err, errlen)) return CKPT_CORRUPT;
    if (!version || v != CKPT_VERSION) {
        fc_errf(err, errlen, "%s: checkpoint format version %s; this framechain reads version %d", path,
                version ? version : "(none)", CKPT_VERSION);
        return CKPT_REFUSED;
    }
    int r = 0;  // none: written before revisions were recorded
    if (meta_count(f, "revision", &r, path, err, errlen)) return CKPT_CORRUPT;
    if (r > CKPT_REVISION) {
        fc_errf(err, errlen, "%s: written by a later framechain (revision %d; this one knows up to %d): update "
                "framechain to read it", path, r, CKPT_REVISION);
        return CKPT_REFUSED;
    }
    const char *s = st_meta(f, "step"), *loss = st_meta(f, "smooth_loss");
    if (!s || !loss || !st_meta(f, "config")) {
        fc_errf(err, errlen, "%s: the trainer state is missing from the metadata", path);
        return CKPT_CORRUPT;
    }
    int n;
    if (parse_count(s, &n)) {
        fc_errf(err, errlen, "%s: its metadata's step \"%s\" is not a whole number of steps (0 to %d)", path,
                ST_SHOWN(s), INT_MAX);
        return CKPT_CORRUPT;
    }
    char *end;
    errno = 0;
    double l = strtod(loss, &end);
    if (end == loss || *end || !isfinite(l)) {  // a NaN would stay in the smoothed loss for good
        fc_errf(err, errlen, "%s: its metadata's smooth_loss \"%s\" is not a finite number", path, ST_SHOWN(loss));
        return CKPT_CORRUPT;
    }
    if (l < 0) {  // a mean of squares, smoothed: never below 0
        fc_errf(err, errlen, "%s: its metadata's smooth_loss \"%s\" is negative (a mean of squares never is)", path,
                ST_SHOWN(loss));
        return CKPT_CORRUPT;
    }
    if (check_seed_and_cursor(f, path, n, err, errlen)) return CKPT_CORRUPT;
    if (step) *step = n;
    if (smooth) *smooth = l;
    return CKPT_OK;
}

// One tensor's bytes against the CRC32 its checkpoint's metadata records: 0, or -1 with a line in err.
int ckpt_check_tensor_crc(const StFile *f, const char *name, const void *data, size_t len, const char *path,
                          char *err, size_t errlen) {
    char key[200];
    snprintf(key, sizeof key, "crc32.%s", name);
    const char *want = st_meta(f, key);
    if (!want) return fc_errf(err, errlen, "%s: no CRC32 for tensor %s", path, name);
    if (strtoul(want, NULL, 16) != crc32_z(0L, data, len))
        return fc_errf(err, errlen, "%s: tensor %s fails its CRC32 check", path, name);
    return 0;
}

// The optimizer's tensors that hold magnitudes: second moments and the blocks' absolute maxima, and
// the code map they are read through. A negative one would make a square root of it NaN.
static int never_negative(const char *name) {
    size_t n = strlen(name);
    return !strcmp(name, "optim.code_unsigned") || (n > 2 && !strcmp(name + n - 2, ".v")) ||
           (n > 9 && (!strcmp(name + n - 9, ".v_absmax") || !strcmp(name + n - 9, ".m_absmax")));
}

// One tensor's values are usable: every F32 value finite (weights, EMA and optimizer state alike: a
// step that blew up can leave NaN behind CRCs that check, which would train on as NaN, generate black
// frames, or stop the resumed run at its next step), and the optimizer's magnitudes not negative.
// 0, or -1 with a line in err. data need not be aligned.
int ckpt_check_tensor_values(const char *name, const char *dtype, const void *data, size_t len,
                             const char *path, char *err, size_t errlen) {
    if (strcmp(dtype, "F32")) return 0;
    const char *what = strncmp(name, "optim.", 6) ? "the weights are unusable" : "the optimizer state is unusable";
    int magnitude = never_negative(name);
    const uint8_t *p = data;
    for (size_t k = 0; k < len / 4; k++) {
        float v;
        memcpy(&v, p + 4 * k, 4);  // in a whole file, 4-byte aligned only relative to the file's start
        if (!isfinite(v))
            return fc_errf(err, errlen, "%s: tensor %s holds %s values: %s", path, name, isnan(v) ? "NaN" : "infinite",
                           what);
        if (magnitude && v < 0)
            return fc_errf(err, errlen, "%s: tensor %s holds negative values: %s", path, name, what);
    }
    return 0;
}

// One tensor's bytes (data, of entry e of f) checked: its CRC32 against the metadata, then its values.
int ckpt_check_tensor(const StFile *f, const StEntry *e, const void *data, const char *path, char *err, size_t errlen) {
    size_t len = e->end - e->begin;
    if (ckpt_check_tensor_crc(f, e->name, data, len, path, err, errlen) ||
        ckpt_check_tensor_values(e->name, e->dtype, data, len, path, err, errlen))
        return -1;
    return 0;
}

int ckpt_check_tensors_read(const StFile *f, int fd, void *buf, const char *path, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++)
        if (st_read_entry(fd, f, &f->entries[i], buf, path, err, errlen) ||
            ckpt_check_tensor(f, &f->entries[i], buf, path, err, errlen))
            return -1;
    return 0;
}

static void shape_text(char *buf, size_t len, int ndim, const long *shape) {
    size_t used = (size_t)snprintf(buf, len, "(");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%ld", d ? ", " : "", shape[d]);
    if (used < len) snprintf(buf + used, len - used, ")");
}

// One tensor of the file against the one the network has: CKPT_OK, or CKPT_REFUSED with a line in err.
static CkptStatus match_entry(const StEntry *e, const CkptTensor *t, const char *path, char *err, size_t errlen) {
    if (strcmp(e->dtype, t->dtype) || e->end - e->begin != t->bytes) {
        fc_errf(err, errlen, "%s: tensor %s is %s of %zu bytes, expected %s of %zu", path, t->name, e->dtype,
                e->end - e->begin, t->dtype, t->bytes);
        return CKPT_REFUSED;
    }
    int same = e->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == t->shape[d];
    if (!same) {  // the same bytes in another shape (a transposed weight) would load as other weights
        char theirs[128], ours[128];
        shape_text(theirs, sizeof theirs, e->ndim, e->shape);
        shape_text(ours, sizeof ours, t->ndim, t->shape);
        fc_errf(err, errlen, "%s: tensor %s has shape %s, this network's is %s", path, t->name, theirs, ours);
        return CKPT_REFUSED;
    }
    return CKPT_OK;
}

// A tensor of the file that tab does not have: CKPT_OK when there is none, else CKPT_REFUSED with a
// line in err (a file that holds more than the network is not this network's checkpoint).
static CkptStatus check_no_extra(const StFile *f, const CkptTable *tab, const char *path, char *err, size_t errlen) {
    for (int i = 0; i < f->n; i++) {
        int known = 0;
        for (int j = 0; j < tab->n && !known; j++) known = !strcmp(f->entries[i].name, tab->t[j].name);
        if (!known) {
            fc_errf(err, errlen, "%s: holds a tensor %s, which this network does not have", path,
                    ST_SHOWN(f->entries[i].name));
            return CKPT_REFUSED;
        }
    }
    return CKPT_OK;
}

// Every tensor of tab in f, of its type, size and shape, and nothing else in f (ema_only: only the
// EMA is needed, the other tensors of tab may be missing): CKPT_OK, or CKPT_REFUSED with the first
// tensor that is not in err.
CkptStatus ckpt_check_layout(const StFile *f, const CkptTable *tab, int ema_only, const char *path, char *err,
                             size_t errlen) {
    for (int i = 0; i < tab->n; i++) {
        const CkptTensor *t = &tab->t[i];
        const StEntry *e = st_find(f, t->name);
        if (!e && ema_only && strncmp(t->name, "ema.", 4)) continue;
        if (!e && !strncmp(t->name, "optim.", 6)) {
            fc_errf(err, errlen, "%s: has no optimizer state (%s is missing); resuming without it would not "
                    "continue the run", path, t->name);
            return CKPT_REFUSED;
        }
        if (!e) {
            fc_errf(err, errlen, "%s: tensor %s is missing", path, t->name);
            return CKPT_REFUSED;
        }
        if (match_entry(e, t, path, err, errlen)) return CKPT_REFUSED;
    }
    return check_no_extra(f, tab, path, err, errlen);
}

// The config a checkpoint carries, parsed and checked into c: 0, or -1 with a line in err.
int ckpt_file_config(const StFile *f, const char *path, Config *c, char *err, size_t errlen) {
    const char *text = st_meta(f, "config");
    char why[1024];
    config_defaults(c);
    if (!text) return fc_errf(err, errlen, "%s: the trainer state is missing from the metadata", path);
    if (config_parse_text(c, text, strlen(text), path, why, sizeof why) ||
        config_validate_checked(c, path, why, sizeof why))
        return fc_errf(err, errlen, "%s: its config does not parse: %s", path, why);
    return 0;
}

// The checks that need no run: the metadata, then the tensors against the network of the file's own
// config (a config copy that contradicts the tensors is refused). CKPT_OK, or the status with err.
static CkptStatus check_header(const StFile *f, const char *path, int *step, char *err, size_t errlen) {
    CkptStatus s = ckpt_check_metadata(f, path, step, NULL, err, errlen);
    if (s) return s;
    Config c;
    if (ckpt_file_config(f, path, &c, err, errlen)) return CKPT_REFUSED;
    CkptTable tab = ckpt_layout_of(&c);
    s = ckpt_check_layout(f, &tab, 0, path, err, errlen);
    free(tab.t);
    return s;
}

int checkpoint_read_checked(const char *path, StFile *f, unsigned long *file_crc, char *why, size_t whylen) {
    if (st_read_header(path, f, why, whylen)) return -1;
    int fd = check_header(f, path, NULL, why, whylen) ? -1 : st_open_data(path, f, why, whylen);
    void *buf = fd >= 0 ? st_entry_buffer(f, path, why, whylen) : NULL;
    // the file's CRC32 as one over all its bytes: the header's, then each tensor's (they tile the rest),
    // which its check has just found equal to the one its metadata records
    unsigned long crc = crc32_z(0L, f->bytes, f->data_start);
    int ok = buf != NULL;
    for (int i = 0; ok && i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        char key[200];
        snprintf(key, sizeof key, "crc32.%s", e->name);
        ok = !st_read_entry(fd, f, e, buf, path, why, whylen) && !ckpt_check_tensor(f, e, buf, path, why, whylen);
        if (ok) crc = crc32_combine(crc, strtoul(st_meta(f, key), NULL, 16), (z_off_t)(e->end - e->begin));
    }
    if (ok && st_data_unchanged(fd, f, path, why, whylen)) ok = 0;  // grew (or shrank) while it was read
    free(buf);
    if (fd >= 0) close(fd);
    if (!ok) {
        st_free(f);
        return -1;
    }
    if (file_crc) *file_crc = crc;
    return 0;
}

int checkpoint_header_crc(const char *path, uint32_t *crc, char *err, size_t errlen) {
    StFile f;
    if (st_read_header(path, &f, err, errlen)) return -1;
    *crc = (uint32_t)crc32(0L, f.bytes, (uInt)f.data_start);
    st_free(&f);
    return 0;
}

CkptStatus checkpoint_check(const char *path, int *step, char *why, size_t whylen) {
    StFile f;
    if (st_read_header(path, &f, why, whylen)) return CKPT_CORRUPT;
    CkptStatus s = check_header(&f, path, step, why, whylen);
    int fd = s ? -1 : st_open_data(path, &f, why, whylen);
    void *buf = fd >= 0 ? st_entry_buffer(&f, path, why, whylen) : NULL;
    if (!s && (!buf || ckpt_check_tensors_read(&f, fd, buf, path, why, whylen))) s = CKPT_CORRUPT;
    free(buf);
    if (fd >= 0) close(fd);
    st_free(&f);
    return s;
}
