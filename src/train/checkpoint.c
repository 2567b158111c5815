// checkpoint.c: writing and loading training checkpoints (see checkpoint.h); the checks a file
// passes before it is believed are checkpoint_verify.c, the background writer checkpoint_async.c.
#define _GNU_SOURCE  // renameat2
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "train/checkpoint_internal.h"
#include "train/run_folder.h"
#include "backend/quant8.h"
#include "formats/safetensors.h"
#include "base/commit.h"
#include "base/paths.h"

void checkpoint_path(char *buf, size_t len, const char *run, int step) {
    snprintf(buf, len, "%s/ckpt-%08d.safetensors", run, step);
}

int checkpoint_step_of_name(const char *name) {
    size_t len = strlen(name), digits = len - 5 - 12;
    if (strncmp(name, "ckpt-", 5) || len < 5 + 8 + 12 || digits > 10 || strcmp(name + 5 + digits, ".safetensors"))
        return -1;
    long long step = 0;
    for (size_t i = 5; i < 5 + digits; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    if (digits > 8 && (name[5] == '0' || step > INT_MAX)) return -1;  // not a name checkpoint_path makes
    return (int)step;
}

static int cmp_desc(const void *a, const void *b) { return *(const int *)b - *(const int *)a; }

int checkpoint_list(const char *run, int **steps) {
    *steps = NULL;
    DIR *d = opendir(run);
    if (!d) {  // no folder yet: no checkpoints; one that cannot be read must not look empty (a resume from scratch)
        if (errno == ENOENT) return 0;
        char why[8400];
        if (errno == ENOTDIR && fc_path_not_folder(run, why, sizeof why)) fc_die("%s", why);
        fc_die("%s: cannot list its checkpoints: %s", run, strerror(errno));
    }
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step = checkpoint_step_of_name(e->d_name);
        if (step < 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = realloc(*steps, sizeof(int) * cap);
            if (!*steps) fc_die("out of host memory listing %s", run);
        }
        (*steps)[n++] = step;
    }
    closedir(d);
    if (n) qsort(*steps, n, sizeof(int), cmp_desc);
    return n;
}

// ----------------------------------------------------------------------------
// the tensors of a checkpoint: one table used by both save and load

static void add(CkptTable *tab, const char *dtype, int ndim, long d0, long d1, size_t bytes, void *device,
                const char *fmt, const char *name, const char *suffix) {
    if (tab->n == tab->cap) {
        tab->cap = tab->cap ? 2 * tab->cap : 256;
        tab->t = realloc(tab->t, sizeof(CkptTensor) * tab->cap);
        if (!tab->t) fc_die("out of host memory for the checkpoint table");
    }
    CkptTensor *t = &tab->t[tab->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, name, suffix);
    t->dtype = dtype, t->ndim = ndim, t->shape[0] = d0, t->shape[1] = d1, t->bytes = bytes, t->device = device;
    t->part_bytes = bytes;
}

// The last entry added holds only the elements [a, b) of its tensor's n (a, b clamped to it), of
// `elem` bytes each, starting at part (NULL: none held).
static void held_part(CkptTable *tab, size_t a, size_t b, size_t elem, void *part) {
    CkptTensor *t = &tab->t[tab->n - 1];
    t->part_offset = a < b ? a * elem : 0, t->part_bytes = a < b ? (b - a) * elem : 0;
    t->device = a < b ? part : NULL;
}

CkptTable ckpt_build_table(const Model *m, const real *ema, const Optimizer *o, int32_t *block_size) {
    CkptTable tab = {0};
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        size_t bytes = sizeof(real) * pi->numel, off = pi->offset;
        add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, m->params_mem + off, "model.%s%s",
            pi->name, "");
        add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, NULL, "ema.%s%s", pi->name, "");
        size_t a = off > o->lo ? off : o->lo, b = off + pi->numel < o->hi ? off + pi->numel : o->hi;
        held_part(&tab, a - off, b > a ? b - off : 0, sizeof(real), b > a ? (void *)(ema + (a - o->lo)) : NULL);
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *pi = &m->info[i];
        const OptTensor *t = &o->t[i];
        size_t a = t->first, b = t->first + t->count;  // the part held (ADAM8_BLOCK-aligned when 8-bit)
        if (t->is8bit) {
            size_t ba = a / ADAM8_BLOCK, bb = (b + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
            add(&tab, "U8", pi->ndim, pi->shape[0], pi->shape[1], t->numel, NULL, "optim.%s%s", pi->name, ".m8");
            held_part(&tab, a, b, 1, t->m8);
            add(&tab, "U8", pi->ndim, pi->shape[0], pi->shape[1], t->numel, NULL, "optim.%s%s", pi->name, ".v8");
            held_part(&tab, a, b, 1, t->v8);
            add(&tab, "F32", 1, (long)t->blocks, 0, sizeof(float) * t->blocks, NULL, "optim.%s%s", pi->name,
                ".m_absmax");
            held_part(&tab, ba, bb, sizeof(float), t->absmax_m);
            add(&tab, "F32", 1, (long)t->blocks, 0, sizeof(float) * t->blocks, NULL, "optim.%s%s", pi->name,
                ".v_absmax");
            held_part(&tab, ba, bb, sizeof(float), t->absmax_v);
        } else {
            size_t bytes = sizeof(float) * t->numel;
            add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, NULL, "optim.%s%s", pi->name, ".m");
            held_part(&tab, a, b, sizeof(float), t->m32);
            add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, NULL, "optim.%s%s", pi->name, ".v");
            held_part(&tab, a, b, sizeof(float), t->v32);
        }
    }
    add(&tab, "F32", 1, 256, 0, sizeof(float) * 256, o->code_m, "optim.code_signed%s%s", "", "");
    add(&tab, "F32", 1, 256, 0, sizeof(float) * 256, o->code_v, "optim.code_unsigned%s%s", "", "");
    add(&tab, "I32", 1, 1, 0, sizeof(int32_t), NULL, "optim.block_size%s%s", "", "");
    tab.t[tab.n - 1].host = block_size;  // a host value, not in backend memory
    tab.t[tab.n - 1].host_value = 1;
    return tab;
}

// The tensors a checkpoint of config c holds, as ckpt_build_table names them (types, shapes, sizes),
// from the config alone: nothing is allocated, so a config that claims a network of terabytes costs
// nothing to check against the file's own tensors.
CkptTable ckpt_layout_of(const Config *c) {
    ModelCounts k = model_counts(c, 1, sizeof(real));
    CkptTable tab = {0};
    for (int i = 0; i < k.n_tensors; i++) {
        const ParamInfo *pi = &k.info[i];
        size_t bytes = sizeof(real) * pi->numel;
        add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, NULL, "model.%s%s", pi->name, "");
        add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], bytes, NULL, "ema.%s%s", pi->name, "");
    }
    for (int i = 0; i < k.n_tensors; i++) {
        const ParamInfo *pi = &k.info[i];
        if (c->optimizer == OPT_ADAMW8BIT && pi->numel >= OPTIM_MIN_8BIT) {
            size_t blocks = (pi->numel + ADAM8_BLOCK - 1) / ADAM8_BLOCK;
            add(&tab, "U8", pi->ndim, pi->shape[0], pi->shape[1], pi->numel, NULL, "optim.%s%s", pi->name, ".m8");
            add(&tab, "U8", pi->ndim, pi->shape[0], pi->shape[1], pi->numel, NULL, "optim.%s%s", pi->name, ".v8");
            add(&tab, "F32", 1, (long)blocks, 0, sizeof(float) * blocks, NULL, "optim.%s%s", pi->name, ".m_absmax");
            add(&tab, "F32", 1, (long)blocks, 0, sizeof(float) * blocks, NULL, "optim.%s%s", pi->name, ".v_absmax");
        } else {
            add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], sizeof(float) * pi->numel, NULL, "optim.%s%s",
                pi->name, ".m");
            add(&tab, "F32", pi->ndim, pi->shape[0], pi->shape[1], sizeof(float) * pi->numel, NULL, "optim.%s%s",
                pi->name, ".v");
        }
    }
    add(&tab, "F32", 1, 256, 0, sizeof(float) * 256, NULL, "optim.code_signed%s%s", "", "");
    add(&tab, "F32", 1, 256, 0, sizeof(float) * 256, NULL, "optim.code_unsigned%s%s", "", "");
    add(&tab, "I32", 1, 1, 0, sizeof(int32_t), NULL, "optim.block_size%s%s", "", "");
    free(k.info);
    return tab;
}

// ----------------------------------------------------------------------------
// save

// A file that is not a whole checkpoint is never deleted by pruning and never counted as kept: it is
// renamed RUN/ckpt-XXXXXXXX.safetensors.unusable (out of every listing) and named on stderr; why
// starts with the path. An earlier file set aside under that name is never renamed over (that would
// delete it): the next free name is taken, .unusable.1, .unusable.2, ...
int checkpoint_set_aside(const char *path, const char *why) {
    char aside[4200];
    int rc = -1;
    for (int k = 0; k < 10000; k++) {
        if (k) snprintf(aside, sizeof aside, "%s.unusable.%d", path, k);
        else snprintf(aside, sizeof aside, "%s.unusable", path);
#ifdef RENAME_NOREPLACE
        rc = renameat2(AT_FDCWD, path, AT_FDCWD, aside, RENAME_NOREPLACE);
        if (!rc || errno == EEXIST) {
            if (!rc) break;
            continue;
        }
        if (errno != EINVAL && errno != ENOSYS) break;
#endif
        struct stat sb;  // a file system without RENAME_NOREPLACE
        if (!lstat(aside, &sb)) {
            rc = -1, errno = EEXIST;
            continue;
        }
        rc = rename(path, aside);
        break;
    }
    if (rc) return -1;
    fc_warn("%s; renamed to %s", why, aside);
    return 0;
}

int checkpoint_cannot_open(const char *path, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) return close(fd), 0;
    // no permission, or the process's limits: what the user can change; a link in a loop or to a
    // device is the name's own damage, set aside as before
    if (errno != EACCES && errno != EPERM && errno != EMFILE && errno != ENFILE && errno != ENOMEM) return 0;
    fc_errf(why, whylen, "%s: cannot open: %s; not set aside, as its bytes were not read (make it readable and run "
            "the same command again)", path, strerror(errno));
    return 1;
}

// checkpoint_check, for pruning: the writer thread verifies an older checkpoint in the memory of its
// largest tensor, not of the whole file (a second copy of the staging buffer, which the memory plan
// does not hold). 1 when whole and of the step its name says (a copy under another step's name does
// not load: a resume sets it aside, so pruning may not keep it in place of a real one), else 0 with why.
static int checkpoint_whole(const char *path, int step, char *why, size_t whylen) {
    int has = -1;
    if (checkpoint_check(path, &has, why, whylen) != CKPT_OK) return 0;
    if (has == step) return 1;
    fc_errf(why, whylen, "%s: its metadata says step %d", path, has);
    return 0;
}

// The checkpoints this process has written or read back whole (of one run folder at a time): each
// older one is read once, not at every prune, however many keep_checkpoints keeps (a record of a
// fixed size, wiped when full, had every kept file read again at every checkpoint past it). Only the
// writer calls prune, one checkpoint at a time; prune drops the steps no longer on disk.
static struct {
    char run[4096];
    int n, cap, *steps;
} verified;

static void remember_whole(const char *run, int step) {
    if (strcmp(verified.run, run)) snprintf(verified.run, sizeof verified.run, "%s", run), verified.n = 0;
    for (int i = 0; i < verified.n; i++)
        if (verified.steps[i] == step) return;
    if (verified.n == verified.cap) {
        verified.cap = verified.cap ? 2 * verified.cap : 64;
        verified.steps = realloc(verified.steps, sizeof(int) * (size_t)verified.cap);
        if (!verified.steps) fc_die("out of host memory for the list of whole checkpoints");
    }
    verified.steps[verified.n++] = step;
}

// The record holds only the steps of `listed` (n, the folder as prune found it): what was deleted or
// set aside needs no record, so it never grows past keep_checkpoints and a few.
static void forget_gone(const int *listed, int n) {
    int kept = 0;
    for (int i = 0; i < verified.n; i++) {
        int there = 0;
        for (int j = 0; j < n && !there; j++) there = listed[j] == verified.steps[i];
        if (there) verified.steps[kept++] = verified.steps[i];
    }
    verified.n = kept;
}

static int verified_whole(const char *run, int step, const char *path, char *why, size_t whylen) {
    if (!strcmp(verified.run, run))
        for (int i = 0; i < verified.n; i++)
            if (verified.steps[i] == step) return 1;
    if (!checkpoint_whole(path, step, why, whylen)) return 0;
    remember_whole(run, step);
    return 1;
}

// Keep the newest `keep` checkpoints that are whole (the one just written, `written`, counts as whole:
// its bytes came from memory with their CRCs), delete the older ones, and set aside the files that
// are not whole instead of counting them. The folder is fsynced so that the deletions stick.
static void prune(const char *run, int keep, int written) {
    remember_whole(run, written);  // read back at the next prune it would be a second copy in memory
    int *steps, n = checkpoint_list(run, &steps), kept = 0;
    if (!strcmp(verified.run, run)) forget_gone(steps, n);
    for (int i = 0; i < n; i++) {
        char path[4096], why[1024];
        checkpoint_path(path, sizeof path, run, steps[i]);
        if (kept < keep) {
            if (steps[i] == written || verified_whole(run, steps[i], path, why, sizeof why)) kept++;
            else if (checkpoint_cannot_open(path, why, sizeof why)) fc_warn("%s", why);  // left as it is, uncounted
            else if (checkpoint_set_aside(path, why))
                fc_warn("%s; could not rename it aside: %s", why, strerror(errno));  // left, uncounted
        } else if (unlink(path)) {
            int e = errno;
            struct stat sb;
            if (!lstat(path, &sb) && S_ISDIR(sb.st_mode)) {  // not ours to delete, nor to warn of at every prune
                snprintf(why, sizeof why, "%s: a folder under an old checkpoint's name, not a checkpoint", path);
                if (checkpoint_set_aside(path, why)) fc_warn("%s; could not rename it aside: %s", why, strerror(errno));
            } else {
                fc_warn("%s: could not delete an old checkpoint: %s", path, strerror(e));
            }
        }
    }
    free(steps);
    fc_fsync_dir(run);  // a deletion that does not stick leaves an old checkpoint: nothing is lost
}

void checkpoint_prune_extra(const char *run, int keep, int resumed) {
    int *steps, n = checkpoint_list(run, &steps);
    free(steps);
    if (n > keep) prune(run, keep, resumed);
}

size_t ckpt_stage(CkptTable *tab, uint8_t *staging) {
    size_t off = 0;
    for (int i = 0; i < tab->n; i++) {
        CkptTensor *t = &tab->t[i];
        if (t->host_value) continue;
        if (staging) t->host = staging + off;
        off += t->bytes;
    }
    return off;
}

typedef struct {
    const char *run;
    int lock;
    int moved;
} HeldRun;

static int run_still_held(void *ctx, char *err, size_t errlen) {
    HeldRun *h = ctx;
    if (h->lock < 0 || !run_folder_still_held(h->run, h->lock, err, errlen)) return 0;
    h->moved = 1;
    return -1;
}

int ckpt_write_staged(const char *run, int run_lock, const CkptTable *tab, const Config *c, const TrainState *s,
                      char *err, size_t errlen) {
    char path[4096];
    checkpoint_path(path, sizeof path, run, s->step);
    // A state that resume would refuse (NaN or infinite values: a step that blew up) is never written,
    // so that it cannot take a good checkpoint's place among those kept, nor be resumed into.
    for (int i = 0; i < tab->n; i++) {
        const CkptTensor *t = &tab->t[i];
        char why[768];
        if (ckpt_check_tensor_values(t->name, t->dtype, t->host, t->bytes, path, why, sizeof why))
            return fc_errf(err, errlen, "%s; not written: the training diverged (lower lr or set grad_clip, and fork "
                           "the newest checkpoint kept: framechain train --from CKPT --run NEW_RUN --set lr=...)", why);
    }
    StTensor *st = fc_calloc(tab->n, sizeof(StTensor));
    StMeta *meta = fc_calloc(tab->n + 16, sizeof(StMeta));
    char (*crc)[2][180] = fc_calloc(tab->n, sizeof *crc);
    int nm = 0;
    for (int i = 0; i < tab->n; i++) {
        const CkptTensor *t = &tab->t[i];
        st[i] = (StTensor){t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}, t->host};
        snprintf(crc[i][0], sizeof crc[i][0], "crc32.%s", t->name);
        snprintf(crc[i][1], sizeof crc[i][1], "%08lx", crc32_z(0L, t->host, t->bytes));
    }
    char step[32], seed[32], smooth[64], version[16], revision[16], *config_text = NULL;
    size_t config_len = 0;
    snprintf(step, sizeof step, "%d", s->step);
    snprintf(seed, sizeof seed, "%lld", c->seed);
    snprintf(smooth, sizeof smooth, "%a", s->smooth_loss);
    snprintf(version, sizeof version, "%d", CKPT_VERSION);
    snprintf(revision, sizeof revision, "%d", CKPT_REVISION);
    FILE *mf = open_memstream(&config_text, &config_len);  // the whole config, however long its paths
    if (!mf) fc_die("out of host memory for the checkpoint's config");
    config_write(c, mf);
    if (fclose(mf) || !config_text) fc_die("out of host memory for the checkpoint's config");
    meta[nm++] = (StMeta){"format", CKPT_FORMAT};
    meta[nm++] = (StMeta){"format_version", version};
    meta[nm++] = (StMeta){"revision", revision};
    meta[nm++] = (StMeta){"step", step};
    meta[nm++] = (StMeta){"seed", seed};
    meta[nm++] = (StMeta){"data_cursor", step};  // the data a step sees is a function of (seed, step)
    meta[nm++] = (StMeta){"smooth_loss", smooth};
    meta[nm++] = (StMeta){"config", config_text};
    meta[nm++] = (StMeta){"written_by", fc_build_name()};  // read by people (inspect), not by the program
    if (s->parent[0]) meta[nm++] = (StMeta){"parent", s->parent};
    if (s->data[0]) meta[nm++] = (StMeta){"data", s->data};
    if (s->lineage[0]) meta[nm++] = (StMeta){"lineage", s->lineage};
    if (s->autoencoder[0]) meta[nm++] = (StMeta){"autoencoder", s->autoencoder};
    if (s->device[0]) meta[nm++] = (StMeta){"device", s->device};
    for (int i = 0; i < tab->n; i++) meta[nm++] = (StMeta){crc[i][0], crc[i][1]};
    char meta_crc[16];
    snprintf(meta_crc, sizeof meta_crc, "%08lx", ckpt_metadata_crc(meta, nm));
    meta[nm++] = (StMeta){CKPT_META_CRC, meta_crc};

    // the folder checked last before the rename and before the pruning: a checkpoint of gigabytes takes
    // seconds to check and write, long enough for a folder renamed away to leave another's at RUN
    long delay_ms = fc_test_hook("CKPT_STAGE_DELAY_MS");  // the time checking gigabytes takes, for the tests
    if (delay_ms > 0) usleep((useconds_t)(delay_ms * 1000));
    HeldRun held = {run, run_lock, 0};
    StGuard guard = {run_still_held, &held};
    int rc = st_write_guarded(path, st, tab->n, meta, nm, &guard, err, errlen);
    if (rc == 0 && run_still_held(&held, err, errlen) == 0) prune(run, c->keep_checkpoints, s->step);
    free(st), free(meta), free(crc), free(config_text);
    return held.moved ? -2 : rc;
}

int checkpoint_save(const char *run, const Model *m, const real *ema, const Optimizer *o, const Config *c,
                    const TrainState *s, char *err, size_t errlen) {
    int32_t block_size = ADAM8_BLOCK;
    CkptTable tab = ckpt_build_table(m, ema, o, &block_size);
    uint8_t *staging = fc_malloc(ckpt_stage(&tab, NULL));
    ckpt_stage(&tab, staging);
    for (int i = 0; i < tab.n; i++)
        if (tab.t[i].device)
            m->be->download((uint8_t *)tab.t[i].host + tab.t[i].part_offset, tab.t[i].device, tab.t[i].part_bytes);
    int rc = ckpt_write_staged(run, -1, &tab, c, s, err, errlen);
    free(staging), free(tab.t);
    return rc;
}

// ----------------------------------------------------------------------------
// load

// The keys that may differ between a checkpoint and the run that continues it. steps is not one of
// them: it shapes the learning-rate schedule (train --extend changes it on purpose).
static int may_differ(const char *key, CkptLoadMode mode) {
    if (mode == CKPT_FORK) return !config_key_shapes_network(key);
    if (mode == CKPT_EXTEND && (!strcmp(key, "steps") || !strcmp(key, "schedule_end"))) return 1;
    // recompute and keep_blocks change the memory a step takes, not its arithmetic; sample_steps and
    // sample_temperature only what generate does with the weights; exclude is a path: the list's content is checked with the data
    // identity (lineage.h); sample_every and preview_data only what the run shows of itself
    if (!strcmp(key, "exclude") || !strcmp(key, "sample_every") || !strcmp(key, "preview_data") ||
        !strcmp(key, "preview_budget"))
        return 1;
    // shard_optimizer: where the state is kept, not what it is (the same bytes either way);
    // overlap_grads and collectives: when and by what the sums over the ranks are made, not what they sum
    return !strcmp(key, "checkpoint_every") || !strcmp(key, "keep_checkpoints") || !strcmp(key, "shard_optimizer") ||
           !strcmp(key, "overlap_grads") || !strcmp(key, "collectives") ||
           !strcmp(key, "recompute") ||
           !strcmp(key, "keep_blocks") || !strcmp(key, "sample_steps") ||
           !strcmp(key, "sample_temperature");
}

int config_key_shapes_network(const char *key) {
    const char *keys[] = {"frame_size", "channels", "patch", "width", "depth", "heads", "mlp_ratio", "freq_dim",
                          "role", "plan", "cond_concat", "targets", "delta_scale", "delta_reference", "optimizer"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i])) return 1;
    return 0;
}

// The refusal of a resume whose config differs from its checkpoint's in keys other than steps,
// schedule_end and dataset: every such key from `first` on named in one line, with both ways on: the
// --set of each checkpoint's value, which goes on as the run was (the config file changed since it
// started: keys added to the shipped configs), or a fork at the new values (where none shapes the
// network, which a fork keeps).
// " --set key=value" at the end of buf, quoted for a shell where the value needs it (a plan's spaces).
static void append_set(char *buf, size_t len, const char *key, const char *value) {
    char kv[1100], word[4 * 1100 + 3];  // a key and its value (as check_same_run reads it: 1024 bytes)
    snprintf(kv, sizeof kv, "%s=%s", key, value);
    size_t at = strlen(buf);
    snprintf(buf + at, len - at, " --set %s", fc_shell_word(word, sizeof word, kv));
}

static void keys_differ(const Config *theirs, const Config *c, const char *const *first, const char *path,
                        CkptLoadMode mode, char *err, size_t errlen) {
    // whole values, as check_same_run compares them: a plan of 32 slots is over 300 bytes, and one cut
    // short compared equal (no key named) or advised a --set that sets a broken plan
    char was[4096] = "", now[4096] = "", go_on[4096] = "", fork[4096] = "";
    int network = 0;
    for (const char *const *k = first; *k; k++) {
        char a[1024], b[1024];
        config_get(c, *k, a, sizeof a);
        config_get(theirs, *k, b, sizeof b);
        if (may_differ(*k, mode) || !strcmp(a, b) || !strcmp(*k, "steps") || !strcmp(*k, "schedule_end") ||
            !strcmp(*k, "dataset"))
            continue;
        network |= config_key_shapes_network(*k);
        const char *sep = was[0] ? ", " : "";
        snprintf(was + strlen(was), sizeof was - strlen(was), "%s%s = %s", sep, *k, b);
        snprintf(now + strlen(now), sizeof now - strlen(now), "%s%s = %s", sep, *k, a);
        append_set(go_on, sizeof go_on, *k, b);
        append_set(fork, sizeof fork, *k, a);
    }
    if (network)  // a fork keeps these: advising one would end in a refusal
        fc_errf(err, errlen, "%s: written with %s, but this run has %s; a checkpoint continues only its own run (if "
                "the config file changed since the run started, give%s to go on; a new --run trains the new network)",
                path, was, now, go_on);
    else
        fc_errf(err, errlen, "%s: written with %s, but this run has %s; a checkpoint continues only its own run (if "
                "the config file changed since the run started, give%s to go on as it was; train --from %s --run "
                "NEW%s forks it)", path, was, now, go_on, path, fork);
}

// Its config against this run's (only the keys of may_differ may change): CKPT_OK, or CKPT_REFUSED
// with the keys that differ.
static CkptStatus check_same_run(const char *config, const char *path, const Config *c, CkptLoadMode mode, char *err,
                                 size_t errlen) {
    char why[512];
    Config theirs;
    config_defaults(&theirs);
    if (config_parse_text(&theirs, config, strlen(config), path, why, sizeof why)) {
        fc_errf(err, errlen, "%s: its config breaks a rule of this framechain's (an earlier one may have written it): "
                "%s", path, why);
        return CKPT_REFUSED;
    }
    for (const char *const *k = config_keys(); *k; k++) {
        char a[1024], b[1024];
        config_get(c, *k, a, sizeof a);
        config_get(&theirs, *k, b, sizeof b);
        if (may_differ(*k, mode) || !strcmp(a, b)) continue;
        if (mode != CKPT_FORK && strcmp(*k, "steps") && strcmp(*k, "schedule_end") && strcmp(*k, "dataset")) {
            keys_differ(&theirs, c, k, path, mode, err, errlen);
            return CKPT_REFUSED;
        }
        if (mode == CKPT_FORK)
            fc_errf(err, errlen, "%s: written with %s = %s, but this run has %s = %s; a fork keeps the network "
                    "(train a new run to change it)", path, *k, b, *k, a);
        else if (!strcmp(*k, "steps") || !strcmp(*k, "schedule_end"))
            fc_errf(err, errlen, "%s: written with %s = %s, but this run has %s = %s; to train a run past its end "
                    "on purpose: train --extend --steps N", path, *k, b, *k, a);
        else if (!strcmp(*k, "dataset"))  // set by --data, not by a key
            fc_errf(err, errlen, "%s: written on %s, but this run trains on %s; a checkpoint continues only its own "
                    "run (train --from %s --run NEW %s forks it)", path,
                    strcmp(b, "shapes") ? "a dataset (--data)" : "the built-in moving shapes (no --data)",
                    strcmp(a, "shapes") ? "a dataset (--data)" : "the built-in moving shapes (no --data)", path,
                    strcmp(a, "shapes") ? "--data DIR" : "without --data");
        return CKPT_REFUSED;
    }
    return CKPT_OK;
}

// An older checkpoint, written without the metadata's CRC, whose config copy does not parse or does
// not describe its own tensors while this run's network does: a damaged config copy, not another
// run's checkpoint. 1 with a line in err, else 0. A copy that is a config but breaks a rule of this
// framechain's (a range narrowed since an earlier one wrote it) is not damage: the checks after this
// refuse it, naming the key, and the file is not set aside.
static int config_copy_damaged(const StFile *f, const char *path, const Model *m, const real *ema, const Optimizer *o,
                               char *err, size_t errlen) {
    Config theirs;
    char why[1024], ours[1024];
    const char *text = st_meta(f, "config");
    if (st_meta(f, CKPT_META_CRC) || !text) return 0;
    config_defaults(&theirs);
    const char *how = "does not parse";
    int contradicts = config_parse_text_lenient(&theirs, text, strlen(text), "config", why, sizeof why);
    if (!contradicts) {
        char rule[1024];
        config_defaults(&theirs);
        if (config_parse_text(&theirs, text, strlen(text), "config", rule, sizeof rule) ||
            config_validate_checked(&theirs, "config", rule, sizeof rule))
            return 0;
        CkptTable own = ckpt_layout_of(&theirs);
        contradicts = ckpt_check_layout(f, &own, 0, "config", why, sizeof why) != CKPT_OK;
        how = "describes another network than its tensors";
        free(own.t);
    }
    if (!contradicts) return 0;
    int32_t block_size = 0;
    CkptTable tab = ckpt_build_table(m, ema, o, &block_size);
    int fits_ours = ckpt_check_layout(f, &tab, 0, path, ours, sizeof ours) == CKPT_OK;
    free(tab.t);
    if (fits_ours)
        fc_errf(err, errlen, "%s: its config copy %s (%s), while they are this run's network's: its metadata is damaged",
                path, how, why + strlen("config: "));
    return fits_ours;
}

// A checkpoint from a version with other code maps (their_m, their_v): re-encode its 8-bit moments,
// already uploaded, against ours.
static void recode_moments(const Backend *be, Optimizer *o, const float *their_m, const float *their_v) {
    if (!memcmp(their_m, o->host_code_m, 256 * sizeof(float)) && !memcmp(their_v, o->host_code_v, 256 * sizeof(float)))
        return;
    for (int i = 0; i < o->n; i++) {
        OptTensor *t = &o->t[i];
        if (!t->is8bit || !t->count) continue;
        uint8_t *q = fc_malloc(t->count);
        for (int which = 0; which < 2; which++) {
            const float *theirs_code = which ? their_v : their_m;
            const float *ours = which ? o->host_code_v : o->host_code_m;
            be->download(q, which ? t->v8 : t->m8, t->count);
            for (size_t k = 0; k < t->count; k++) q[k] = quant8_encode(ours, theirs_code[q[k]]);
            be->upload(which ? t->v8 : t->m8, q, t->count);
        }
        free(q);
    }
    be->upload(o->code_m, o->host_code_m, sizeof o->host_code_m);
    be->upload(o->code_v, o->host_code_v, sizeof o->host_code_v);
}

CkptStatus checkpoint_precheck(const char *path, int named_step, const Config *c, CkptLoadMode mode, TrainState *st,
                               char *err, size_t errlen) {
    StFile f;
    if (st_read_header(path, &f, err, errlen)) return CKPT_CORRUPT;
    int step;
    CkptStatus s = ckpt_check_metadata(&f, path, &step, NULL, err, errlen);
    if (s == CKPT_OK && named_step >= 0 && step != named_step) s = CKPT_CORRUPT;  // a resume sets it aside
    // An earlier build's file (no metadata CRC) may hold a damaged config copy, which only its tensors
    // tell (config_copy_damaged): left to the resume.
    if (s == CKPT_OK && st_meta(&f, CKPT_META_CRC)) s = check_same_run(st_meta(&f, "config"), path, c, mode, err, errlen);
    if (s == CKPT_OK && st) {  // what checkpoint_load would read of the run's history
        const char *parent = st_meta(&f, "parent"), *data = st_meta(&f, "data");
        st->step = step;
        snprintf(st->parent, sizeof st->parent, "%s", parent ? parent : "");
        snprintf(st->data, sizeof st->data, "%s", data ? data : "");
    }
    st_free(&f);
    return s;
}

#define FAIL(status, ...) \
    do {                                             \
        fc_errf(err, errlen, __VA_ARGS__);           \
        result = (status);                           \
        goto out;                                    \
    } while (0)

// Tensor `name` of f read again into buf (the first pass checked it): its CRC32 checked once more, as
// the file may have been replaced or written since. 0, or -1 with a line in err.
static int read_again(int fd, const StFile *f, const char *name, void *buf, const char *path, char *err,
                      size_t errlen) {
    const StEntry *e = st_find(f, name);  // (there: the layout was checked)
    if (st_read_entry(fd, f, e, buf, path, err, errlen)) return -1;
    if (ckpt_check_tensor_crc(f, name, buf, e->end - e->begin, path, err, errlen))
        return fc_errf(err, errlen, "%s: the file changed while it was read (tensor %s no longer matches its CRC32)",
                       path, name);
    return 0;
}

// The file is read a tensor at a time, through one buffer of its largest tensor's bytes, not whole
// (the 24 GB preset's checkpoint is 8.9 GiB): a first pass checks every tensor, then, once the config
// and the layout are checked too, a second reads again the tensors this process holds, checks each
// one's CRC once more and uploads it.
CkptStatus checkpoint_load(const char *path, Model *m, real *ema, Optimizer *o, const Config *c, CkptLoadMode mode,
                           TrainState *s, char *err, size_t errlen) {
    StFile f;
    if (st_read_header(path, &f, err, errlen)) return CKPT_CORRUPT;
    CkptStatus result = CKPT_OK;
    int32_t block_size = 0;
    CkptTable tab = {0};
    int step = 0, fd = -1;
    double smooth = 0;
    void *buf = NULL;
    float code[2][256];  // the file's 8-bit code maps (signed, unsigned)
    // the metadata (its CRC, the values read strictly), then every tensor's CRC and values, before
    // anything else is believed
    if ((result = ckpt_check_metadata(&f, path, &step, &smooth, err, errlen))) goto out;
    if ((fd = st_open_data(path, &f, err, errlen)) < 0 || !(buf = st_entry_buffer(&f, path, err, errlen)) ||
        ckpt_check_tensors_read(&f, fd, buf, path, err, errlen) ||
        config_copy_damaged(&f, path, m, ema, o, err, errlen)) {
        result = CKPT_CORRUPT;
        goto out;
    }
    if ((result = check_same_run(st_meta(&f, "config"), path, c, mode, err, errlen))) goto out;
    tab = ckpt_build_table(m, ema, o, &block_size);
    if ((result = ckpt_check_layout(&f, &tab, 0, path, err, errlen))) goto out;
    // the table's last three: the code maps and the block size, for the host
    if (read_again(fd, &f, tab.t[tab.n - 3].name, code[0], path, err, errlen) ||
        read_again(fd, &f, tab.t[tab.n - 2].name, code[1], path, err, errlen) ||
        read_again(fd, &f, tab.t[tab.n - 1].name, &block_size, path, err, errlen)) {
        result = CKPT_CORRUPT;
        goto out;
    }
    if (block_size != ADAM8_BLOCK)
        FAIL(CKPT_REFUSED, "%s: 8-bit blocks of %d; this framechain uses %d", path, (int)block_size, ADAM8_BLOCK);
    // This process's part of each tensor (all of it, but for ZeRO-1). A file changed since the first
    // pass leaves the model partly loaded: CKPT_CORRUPT, so that the resume sets it aside and loads an
    // earlier checkpoint whole, or stops.
    for (int i = 0; i < tab.n; i++) {
        if (!tab.t[i].device) continue;
        if (read_again(fd, &f, tab.t[i].name, buf, path, err, errlen)) {
            result = CKPT_CORRUPT;
            goto out;
        }
        m->be->upload(tab.t[i].device, (const uint8_t *)buf + tab.t[i].part_offset, tab.t[i].part_bytes);
    }
    recode_moments(m->be, o, code[0], code[1]);
    s->step = step;
    s->smooth_loss = smooth;
    const char *parent = st_meta(&f, "parent"), *lineage = st_meta(&f, "lineage"), *data = st_meta(&f, "data");
    snprintf(s->parent, sizeof s->parent, "%s", parent ? parent : "");
    snprintf(s->data, sizeof s->data, "%s", data ? data : "");
    snprintf(s->lineage, sizeof s->lineage, "%s", lineage ? lineage : "");
    const char *ae = st_meta(&f, "autoencoder"), *device = st_meta(&f, "device");
    snprintf(s->autoencoder, sizeof s->autoencoder, "%s", ae ? ae : "");
    snprintf(s->device, sizeof s->device, "%s", device ? device : "");
out:
    if (fd >= 0) close(fd);
    free(buf);
    free(tab.t);
    st_free(&f);
    return result;
}

// ----------------------------------------------------------------------------
// load the EMA weights for generation

// One checkpoint's config and EMA weights: a model with batch B on `be`, or NULL with err. Only the
// header and the EMA tensors are read, each checked against its CRC and for finite values: a
// checkpoint of the 24 GB preset is 8.9 GiB, of which generation needs the 3.55 GiB of EMA, one
// tensor in host memory at a time (the weights and the optimizer state are for train to check).
// The EMA of the checkpoint at path, named for step `named` (its metadata must say that step).
// *refused: a whole checkpoint whose network the backend cannot run (no other checkpoint of the run
// would do better: it is the run's shape, not damage).
static Model *load_ema(const char *path, const Backend *be, int B, int named, char *autoencoder, int *refused,
                       char *err, size_t errlen) {
    StFile f;
    if (st_read_header(path, &f, err, errlen)) return NULL;
    const char *ae = st_meta(&f, "autoencoder");
    if (autoencoder) snprintf(autoencoder, 320, "%s", ae ? ae : "");
    Model *m = NULL;
    float *host = NULL;
    int fd = -1;
    // The metadata, then the config against the EMA tensors' shapes and sizes before the network it
    // describes is allocated: a damaged config copy claiming a huge network is one line, not an
    // allocation that fails or takes the machine's memory.
    Config c;
    CkptTable tab = {0};
    int step = -1;
    if (ckpt_check_metadata(&f, path, &step, NULL, err, errlen) || ckpt_file_config(&f, path, &c, err, errlen))
        goto out;
    if (step != named) {  // a copy of another step's file under this name: not the newest weights
        snprintf(err, errlen, "%s: its metadata says step %d", path, step);
        goto out;
    }
    tab = ckpt_layout_of(&c);
    int fits = ckpt_check_layout(&f, &tab, 1, path, err, errlen) == CKPT_OK;
    free(tab.t);
    if (!fits) goto out;
    char why[256];
    if (model_backend_check(&c, be, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        *refused = 1;
        goto out;
    }
    if ((fd = st_open_data(path, &f, err, errlen)) < 0) goto out;
    // Generation runs the model forward only: its blocks can share one block's activations, the
    // layout of recompute (the same bytes out; at depth 4 about a third of the activations' memory,
    // so fewer pages to touch the first time).
    c.recompute = 1, c.keep_blocks = 0;
    m = build_model(&c, be, B);
    size_t largest = 0;
    for (int i = 0; i < m->n_tensors; i++) largest = m->info[i].numel > largest ? m->info[i].numel : largest;
    host = fc_malloc(sizeof(float) * (largest ? largest : 1));
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamInfo *p = &m->info[i];
        char name[128];
        snprintf(name, sizeof name, "ema.%s", p->name);
        const StEntry *e = st_find(&f, name);
        size_t bytes = sizeof(float) * p->numel;
        if (!e || strcmp(e->dtype, "F32") || e->end - e->begin != bytes) {  // (checked above: the same layout)
            snprintf(err, errlen, "%s: tensor %s is %s", path, name, e ? "of the wrong type or size" : "missing");
            goto fail;
        }
        if (st_read_entry(fd, &f, e, host, path, err, errlen) || ckpt_check_tensor(&f, e, host, path, err, errlen))
            goto fail;
        if (sizeof(real) == sizeof(float)) {
            be->upload(m->params_mem + p->offset, host, bytes);
        } else {  // a real of another width: converted through a second buffer
            real *conv = fc_malloc(sizeof(real) * p->numel);
            for (size_t k = 0; k < p->numel; k++) conv[k] = (real)host[k];
            be->upload(m->params_mem + p->offset, conv, sizeof(real) * p->numel);
            free(conv);
        }
    }
    goto out;
fail:
    free_model(m);
    m = NULL;
out:
    if (fd >= 0) close(fd);
    free(host);
    st_free(&f);
    return m;
}

Model *checkpoint_load_for_generation(const char *run, const Backend *be, int B, int *step, char *autoencoder, char *err,
                                      size_t errlen) {
    struct stat sb;
    if (stat(run, &sb) || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, !stat(run, &sb) ? "%s: a file, not a run folder (give the folder of train --run)"
                                               : "%s: no such run folder", run);
        return NULL;
    }
    int *steps, n = checkpoint_list(run, &steps), relisted = 0, refused = 0;
    Model *m = NULL;
    for (int i = 0; i < n && !m; i++) {
        char path[4096];
        checkpoint_path(path, sizeof path, run, steps[i]);
        m = load_ema(path, be, B, steps[i], autoencoder, &refused, err, errlen);
        if (refused) {
            free(steps);
            return NULL;
        }
        // gone since the listing: pruned by a train that writes the run (a newer one took its place),
        // not damaged: the folder listed again, a bounded number of times
        if (!m && access(path, F_OK) && errno == ENOENT && relisted < 100) {
            int *again, k = checkpoint_list(run, &again);
            free(steps);
            steps = again, n = k, i = -1, relisted++;
            continue;
        }
        if (!m) fc_warn("skipping %s", err);
        else *step = steps[i];
    }
    if (!m && n == 1) snprintf(err, errlen, "%s: its one checkpoint cannot be used (see above)", run);
    else if (!m && n) snprintf(err, errlen, "%s: none of its %d checkpoints can be used (see above)", run, n);
    if (!n) snprintf(err, errlen, "%s: holds no checkpoint (ckpt-*.safetensors); train it first", run);
    free(steps);
    return m;
}
