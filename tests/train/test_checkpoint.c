// test_checkpoint.c: a checkpoint written with other 8-bit code maps than this build's; pruning keeps
// the newest whole checkpoints, never files that only have their names; checkpoints past step 10^8
// are listed; the model generation loads predicts what the saved one did, in its smaller layout; a
// resume refuses a config that changes the run's arithmetic (seed, lr, ...) and takes one that only
// changes its bookkeeping; checkpoint_check refuses a file that grew while it was read; a resume
// reads the file a tensor at a time (its peak memory) and refuses one changed between its passes;
// train --from takes its parent's identity a tensor at a time, its CRC the file's read whole, and
// refuses a parent that grew while it was read.
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "model/tiny_model.h"
#include "backend/cpu/cpu_backend.h"
#include "base/config.h"
#include "base/philox.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/checkpoint_internal.h"
#include "train/lineage.h"
#include "model/memplan.h"

// A test's temporary folder and what is in it, where the test made it (mkdtemp).
static void remove_test_dir(const char *dir, int made) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (made && system(cmd) != 0) fprintf(stderr, "test_checkpoint: could not remove %s\n", dir);
}

// A checkpoint written with other 8-bit code maps (a version with another map, say) is re-encoded
// on load against this build's maps: every moment becomes the index of our code nearest the value
// its code stood for, and our encoder tables (values and rounding thresholds) stay whole on the
// backend. Here "ours" are the standard maps with every value strictly inside (-1, 1) halved, so
// that most codes move to another index.
static void test_checkpoint_other_code_maps(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.depth = 2;
    const Backend *be = backend_cpu();
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);  // gradients of one batch
    Optimizer *o = build_optimizer(m, &c);
    for (int t = 1; t <= 2; t++) optimizer_step(o, m, &c, t, 1e-3, NULL, 0);
    char dir[] = "/tmp/fc_test_codes_XXXXXX", err[256] = "";
    int made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 2, .smooth_loss = loss}, back = {0};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;

    Model *m2 = build_model(&c, be, c.batch_size);
    Optimizer *o2 = build_optimizer(m2, &c);
    for (int which = 0; which < 2; which++) {
        float *tab = which ? o2->host_code_v : o2->host_code_m;
        for (int k = 0; k < 256; k++)
            if (fabsf(tab[k]) < 1.0f) tab[k] *= 0.5f;
        quant8_table(tab);
        be->upload(which ? o2->code_v : o2->code_m, tab, sizeof(float) * QUANT8_TABLE);
    }
    real *ema2 = be->alloc(sizeof(real) * m2->n_params);
    char path[512];
    checkpoint_path(path, sizeof path, dir, 2);
    int loaded = saved && checkpoint_load(path, m2, ema2, o2, &c, CKPT_CONTINUE, &back, err, sizeof err) == CKPT_OK;
    size_t n8 = 0, wrong = 0, moved = 0;
    int tables_whole = 1;
    for (int i = 0; loaded && i < o->n; i++) {
        const OptTensor *t = &o->t[i], *t2 = &o2->t[i];
        if (!t->is8bit) continue;
        for (int which = 0; which < 2; which++) {
            const uint8_t *q = which ? t->v8 : t->m8, *q2 = which ? t2->v8 : t2->m8;
            const float *theirs = which ? o->host_code_v : o->host_code_m;
            const float *ours = which ? o2->host_code_v : o2->host_code_m;
            for (size_t k = 0; k < t->numel; k++, n8++) {
                wrong += q2[k] != quant8_encode(ours, theirs[q[k]]);
                moved += q2[k] != q[k];
            }
        }
    }
    for (int which = 0; which < 2; which++)
        tables_whole &= !memcmp(which ? o2->code_v : o2->code_m, which ? o2->host_code_v : o2->host_code_m,
                                sizeof(float) * QUANT8_TABLE);
    check(loaded && n8 > 0 && wrong == 0 && moved > n8 / 2 && tables_whole && back.step == 2,
          "checkpoint_other_code_maps",
          "saved %d loaded %d (%s); %zu 8-bit moments, %zu not the nearest of our codes to theirs, %zu changed "
          "index; our encoder tables on the backend whole: %d", saved, loaded, err, n8, wrong, moved, tables_whole);
    remove_test_dir(dir, made);
    be->free(ema2);
    free_optimizer(o), free_optimizer(o2);
    free_model(m), free_model(m2);
}

static int exists(const char *dir, const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

// keep_checkpoints = 2 with three files named like newer checkpoints that are not (1000 random bytes,
// and a copy of a real checkpoint with one byte flipped): the newest whole ones are kept, the others
// set aside as .unusable, nothing whole deleted but what is older than the two kept.
static void test_prune_keeps_whole_checkpoints(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.keep_checkpoints = 2;
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_prune_XXXXXX", err[256] = "";
    int made = mkdtemp(dir) != NULL, saved = made;
    for (int step = 5; saved && step <= 10; step += 5) {
        TrainState st = {.step = step, .smooth_loss = loss};
        saved = checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    }
    // 98 and 99: junk; 97: the checkpoint of step 10 with one byte of its data flipped
    char path[600];
    uint64_t rng = 7;
    for (int step = 97; saved && step <= 99; step++) {
        size_t len = 1000;
        uint8_t *bytes;
        if (step == 97) {
            checkpoint_path(path, sizeof path, dir, 10);
            bytes = test_read_file(path, &len);
            if (bytes && len > 100) bytes[len - 100] ^= 0x10;
        } else {
            bytes = malloc(len);
            for (size_t k = 0; k < len; k++) bytes[k] = (uint8_t)(philox_u32(rng, (uint32_t)step, 0, k) >> 24);
        }
        checkpoint_path(path, sizeof path, dir, step);
        FILE *f = fopen(path, "wb");
        saved = f && bytes && fwrite(bytes, 1, len, f) == len;
        if (f) fclose(f);
        free(bytes);
    }
    TrainState st = {.step = 15, .smooth_loss = loss};
    int pruned = saved && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    int k15 = exists(dir, "ckpt-00000015.safetensors"), k10 = exists(dir, "ckpt-00000010.safetensors");
    int k5 = exists(dir, "ckpt-00000005.safetensors"), aside = 0, left = 0;
    for (int step = 97; step <= 99; step++) {
        char name[64];
        snprintf(name, sizeof name, "ckpt-%08d.safetensors", step);
        left += exists(dir, name);
        snprintf(name, sizeof name, "ckpt-%08d.safetensors.unusable", step);
        aside += exists(dir, name);
    }
    int *steps, n = checkpoint_list(dir, &steps);
    free(steps);
    check(pruned && k15 && k10 && !k5 && aside == 3 && left == 0 && n == 2, "prune_keeps_whole_checkpoints",
          "saved %d (%s); kept 15: %d, 10: %d, deleted 5: %d; of the 3 unusable files %d set aside, %d still "
          "listed; %d checkpoints listed (keep_checkpoints = 2)", pruned, err, k15, k10, !k5, aside, left, n);
    remove_test_dir(dir, made);
    free_optimizer(o);
    free_model(m);
}

// A state that holds a NaN (a step that blew up) is not written, and so never takes the place of the
// good checkpoint keep_checkpoints = 1 keeps: the save fails with a line that names the tensor.
static void test_nonfinite_state_not_written(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.keep_checkpoints = 1;
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_nonfinite_XXXXXX", err[1024] = "";
    int made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 5, .smooth_loss = loss};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    m->params_mem[7] = NAN;
    st.step = 10;
    int refused = saved && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) != 0;
    int named = strstr(err, "holds NaN values") && strstr(err, "not written");
    int k5 = exists(dir, "ckpt-00000005.safetensors"), k10 = exists(dir, "ckpt-00000010.safetensors");
    int *steps, n = checkpoint_list(dir, &steps);
    free(steps);
    check(saved && refused && named && k5 && !k10 && n == 1, "nonfinite_state_not_written",
          "saved step 5 %d; step 10 with a NaN weight refused %d, its line naming it %d ('%.160s'); step 5 kept %d, "
          "step 10 absent %d, %d listed", saved, refused, named, err, k5, !k10, n);
    remove_test_dir(dir, made);
    free_optimizer(o);
    free_model(m);
}

// Generation loads a checkpoint's EMA into a model whose blocks share one block's activations (it
// runs forward only): on the same inputs it predicts the same bytes as the model that was saved
// (here its EMA is its weights), in less activation memory.
static void test_generation_model_same_outputs(void) {
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);  // forward from the random init: m->a.pred
    Config c = m->cfg;
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_gen_XXXXXX", err[256] = "", ae[320];
    int made = mkdtemp(dir) != NULL, step = -1;
    TrainState st = {.step = 1, .smooth_loss = loss};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    Model *g = saved ? checkpoint_load_for_generation(dir, backend_cpu(), m->B, &step, ae, err, sizeof err) : NULL;
    int same = 0;
    size_t n = (size_t)m->S * m->E;
    if (g) {
        memcpy(g->inputs_mem, m->inputs_mem, m->inputs_bytes);
        model_forward(g);
        same = !memcmp(g->a.pred, m->a.pred, sizeof(real) * n);
    }
    check(g && same && step == 1 && g->acts_bytes < m->acts_bytes, "checkpoint_generation_model",
          "loaded %d (%s): prediction %s; activations %zu bytes, the trained model's %zu", g != NULL, err,
          same ? "the same bytes" : "differs", g ? g->acts_bytes : 0, m->acts_bytes);
    remove_test_dir(dir, made);
    if (g) free_model(g);
    free_optimizer(o), free_model(m);
}

// The memory plan's checkpoint staging line is the bytes the writer stages (checkpoint.c's table),
// with 8-bit moments and with fp32 ones, at two sizes, and at a width whose tensors end in a part of
// an 8-bit block (its absmax counted as a whole block's).
static void test_plan_counts_staging(void) {
    const char *configs[] = {"configs/tiny/starter.conf", "configs/small/extrapolate.conf",
                             "configs/tiny/starter.conf"};
    for (int i = 0; i < 6; i++) {
        Config c;
        config_defaults(&c);
        config_load(&c, configs[i / 2]);
        if (i >= 4) c.width = 72;  // 72 x 72 = 5184 values: 20.25 blocks of ADAM8_BLOCK
        c.optimizer = i % 2 ? OPT_ADAMW : OPT_ADAMW8BIT;
        Model *m = build_model(&c, backend_cpu(), 1);
        Optimizer *o = build_optimizer(m, &c);
        int32_t block_size = ADAM8_BLOCK;
        CkptTable tab = ckpt_build_table(m, m->params_mem, o, &block_size);
        size_t staged = ckpt_stage(&tab, NULL);
        MemPlan p = memory_plan(&c, 1, PLAN_CPU);
        char name[64];
        snprintf(name, sizeof name, "memory_plan_counts_ckpt_staging_%d", i);
        check((double)staged == p.staging, name, "%s, width %d, %s: %zu bytes staged, %.0f planned", configs[i / 2],
              c.width, i % 2 ? "adamw" : "adamw8bit", staged, p.staging);
        free(tab.t), free_optimizer(o), free_model(m);
    }
}

// Names past step 99,999,999 (checkpoint_path's %08d then writes 9 or 10 digits) are listed, in
// order of their steps; names checkpoint_path never makes are not.
static void test_list_long_step_names(void) {
    char dir[] = "/tmp/fc_test_names_XXXXXX", path[256];
    int made = mkdtemp(dir) != NULL;
    const int steps_made[] = {99999900, 100000000, 2000000000, 100000100};
    for (int i = 0; made && i < 4; i++) {
        checkpoint_path(path, sizeof path, dir, steps_made[i]);
        FILE *f = fopen(path, "wb");
        if (f) fclose(f);
    }
    const char *others[] = {"ckpt-0100000000.safetensors", "ckpt-99999999999.safetensors", "ckpt-3000000000.safetensors",
                            "ckpt-1234567.safetensors"};
    for (int i = 0; made && i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, others[i]);
        FILE *f = fopen(path, "wb");
        if (f) fclose(f);
    }
    int *steps = NULL, n = made ? checkpoint_list(dir, &steps) : 0;
    check(n == 4 && steps[0] == 2000000000 && steps[1] == 100000100 && steps[2] == 100000000 && steps[3] == 99999900,
          "checkpoint_list_long_step_names", "%d listed (4 made by checkpoint_path, 4 other names): %d %d %d %d", n,
          n > 0 ? steps[0] : -1, n > 1 ? steps[1] : -1, n > 2 ? steps[2] : -1, n > 3 ? steps[3] : -1);
    free(steps);
    remove_test_dir(dir, made);
}

// The config a checkpoint carries is whole however long its paths: with preview_data and exclude
// near their longest it passes 8 KiB, and a resume reads the keys after them too.
static void test_config_with_long_paths(void) {
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Config c = m->cfg;
    memset(c.preview_data, 'p', sizeof c.preview_data - 1), c.preview_data[sizeof c.preview_data - 1] = 0;
    memset(c.exclude, 'x', sizeof c.exclude - 1), c.exclude[sizeof c.exclude - 1] = 0;
    c.preview_data[0] = c.exclude[0] = '/';
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_cfgtext_XXXXXX", err[256] = "", path[256];
    int made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 3, .smooth_loss = loss};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    StFile f = {0};
    checkpoint_path(path, sizeof path, dir, 3);
    int read = saved && st_read(path, &f, err, sizeof err) == 0;
    const char *text = read ? st_meta(&f, "config") : NULL;
    Config back;
    config_defaults(&back);
    int parsed = text && config_parse_text(&back, text, strlen(text), "checkpoint", err, sizeof err) == 0;
    check(parsed && strlen(text) > 8192 && !strcmp(back.exclude, c.exclude) && !strcmp(back.preview_data, c.preview_data) &&
              back.keep_checkpoints == c.keep_checkpoints,
          "checkpoint_config_long_paths", "the stored config: %zu bytes, %s; exclude %zu of %zu characters back",
          text ? strlen(text) : 0, parsed ? "parsed" : err, parsed ? strlen(back.exclude) : 0, strlen(c.exclude));
    if (read) st_free(&f);
    remove_test_dir(dir, made);
    free_optimizer(o);
    free_model(m);
}

// A checkpoint as written passes every check a resume makes of the file by itself (checkpoint_check:
// its metadata's CRC and values, its tensors against the network of its own config), with 8-bit and
// with fp32 moments; and it carries the metadata's CRC.
static void test_written_checkpoint_checks(void) {
    for (int i = 0; i < 2; i++) {
        real loss;
        Model *m = tiny_step(2, 0, 0, &loss);
        Config c = m->cfg;
        c.optimizer = i ? OPT_ADAMW : OPT_ADAMW8BIT;
        Optimizer *o = build_optimizer(m, &c);
        char dir[] = "/tmp/fc_test_check_XXXXXX", err[512] = "", path[256];
        int made = mkdtemp(dir) != NULL, step = -1;
        TrainState st = {.step = 7, .smooth_loss = loss};
        int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
        checkpoint_path(path, sizeof path, dir, 7);
        CkptStatus s = saved ? checkpoint_check(path, &step, err, sizeof err) : CKPT_CORRUPT;
        StFile f = {0};
        int has_crc = saved && st_read(path, &f, err, sizeof err) == 0 && st_meta(&f, CKPT_META_CRC) != NULL;
        st_free(&f);
        char name[64];
        snprintf(name, sizeof name, "written_checkpoint_checks_%s", i ? "adamw" : "adamw8bit");
        check(s == CKPT_OK && step == 7 && has_crc, name, "saved %d, check %d (%s), step %d, %s present: %d", saved,
              (int)s, s ? err : "ok", step, CKPT_META_CRC, has_crc);
        remove_test_dir(dir, made);
        free_optimizer(o);
        free_model(m);
    }
}

// 16 bytes appended to the file at path, through the system call (not the hooks below).
static void append_16_bytes(const char *path) {
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_APPEND | O_CLOEXEC);
    static const char more[16] = "appended";
    if (fd < 0 || write(fd, more, sizeof more) != (ssize_t)sizeof more)
        fprintf(stderr, "test_checkpoint: could not append to %s\n", path);
    if (fd >= 0) close(fd);
}

// A file that grows while checkpoint_check reads it: this program's own open() (it takes the place of
// libc's for the library's calls) appends bytes to grow_path at its second open, the one after
// st_read_header has read the header and the file's size, before the tensors are read. Nothing else
// can provoke that race deterministically. Unarmed (grow_path NULL) it is libc's open.
static const char *grow_path;
static int grow_opens;
static const char *read_prefix;  // read-only opens of checkpoints under it are counted
static int read_opens;
int open(const char *path, int flags, ...) {
    size_t len = strlen(path);  // a checkpoint, not the folder (opened to fsync it)
    if (read_prefix && (flags & O_ACCMODE) == O_RDONLY && !strncmp(path, read_prefix, strlen(read_prefix)) &&
        len > 12 && !strcmp(path + len - 12, ".safetensors"))
        read_opens++;
    int mode = 0;
    int has_mode = flags & O_CREAT;
#ifdef __O_TMPFILE
    has_mode |= (flags & __O_TMPFILE) == __O_TMPFILE;
#endif
    if (has_mode) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, int);
        va_end(ap);
    }
    if (grow_path && !strcmp(path, grow_path) && ++grow_opens == 2) append_16_bytes(path);
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

// checkpoint_check on a file that grew between its header's read and its tensors': CKPT_CORRUPT with
// "the file changed while it was read" (the header was checked against the old size), never a
// checkpoint counted as whole while it is being rewritten (pruning relies on that).
static void test_check_file_changed(void) {
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Config c = m->cfg;
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_changed_XXXXXX", err[512] = "", path[256];
    int made = mkdtemp(dir) != NULL, step = -1;
    TrainState st = {.step = 4, .smooth_loss = loss};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    checkpoint_path(path, sizeof path, dir, 4);
    off_t size0 = -1, size1 = -1;
    struct stat sb;
    if (saved && !stat(path, &sb)) size0 = sb.st_size;
    grow_path = path, grow_opens = 0;
    CkptStatus s = saved ? checkpoint_check(path, &step, err, sizeof err) : CKPT_OK;
    int opens = grow_opens;
    grow_path = NULL;
    if (saved && !stat(path, &sb)) size1 = sb.st_size;
    check(saved && s == CKPT_CORRUPT && strstr(err, "the file changed while it was read") && opens == 2 &&
              size1 == size0 + 16,
          "checkpoint_check_file_changed", "16 bytes appended (%lld -> %lld) between the header's read and the "
          "tensors' (%d opens): status %d, %s", (long long)size0, (long long)size1, opens, (int)s, s ? err : "whole");
    remove_test_dir(dir, made);
    free_optimizer(o);
    free_model(m);
}

// A file changed between checkpoint_load's two passes: this program's pread (in place of libc's for
// the library's calls) flips the file's last byte (a tensor the load uploads) at the first read
// after the check pass, which read every tensor whole; or (grow_at) appends 16 bytes to it at that
// read. Unarmed (flip_at and grow_at 0) it is libc's pread.
static const char *flip_path;
static int preads, flip_at, grow_at;
ssize_t pread(int fd, void *buf, size_t n, off_t offset) {
    if (flip_at && ++preads == flip_at) {
        int w = (int)syscall(SYS_openat, AT_FDCWD, flip_path, O_RDWR | O_CLOEXEC);
        struct stat sb;
        uint8_t b = 0;
        if (w < 0 || fstat(w, &sb) || syscall(SYS_pread64, w, &b, 1, sb.st_size - 1) != 1 || (b ^= 0x5a, 0) ||
            syscall(SYS_pwrite64, w, &b, 1, sb.st_size - 1) != 1)
            fprintf(stderr, "test_checkpoint: could not change %s\n", flip_path);
        if (w >= 0) close(w);
    }
    if (grow_at && ++preads == grow_at) append_16_bytes(flip_path);
    return (ssize_t)syscall(SYS_pread64, fd, buf, n, offset);
}

// checkpoint_load on a file whose tensors all check, changed once they were checked: CKPT_CORRUPT
// with "the file changed while it was read" (the resume sets it aside), never bytes other than the
// checked ones uploaded as a checkpoint that loaded.
static void test_load_file_changed(void) {
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Config c = m->cfg;
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_changed2_XXXXXX", err[512] = "", path[256];
    int made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 4, .smooth_loss = loss}, back = {0};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    checkpoint_path(path, sizeof path, dir, 4);
    StFile f;
    int n = saved && !st_read_header(path, &f, err, sizeof err) ? f.n : -1;
    if (n >= 0) st_free(&f);
    real *ema = backend_cpu()->alloc(sizeof(real) * m->n_params);
    CkptStatus first = CKPT_CORRUPT, s = CKPT_OK;
    if (n > 0) first = checkpoint_load(path, m, ema, o, &c, CKPT_CONTINUE, &back, err, sizeof err);
    flip_path = path, preads = 0, flip_at = 2 + n + 1;  // the header's two reads, the check pass, then one
    if (first == CKPT_OK) s = checkpoint_load(path, m, ema, o, &c, CKPT_CONTINUE, &back, err, sizeof err);
    int flipped = preads >= flip_at;
    flip_at = 0;
    check(first == CKPT_OK && flipped && s == CKPT_CORRUPT && strstr(err, "the file changed while it was read"),
          "checkpoint_load_file_changed", "%d tensors; loaded whole first: %d; its last byte flipped after the check "
          "pass: %d; then status %d, %s", n, first == CKPT_OK, flipped, (int)s, s ? err : "loaded");
    remove_test_dir(dir, made);
    backend_cpu()->free(ema);
    free_optimizer(o);
    free_model(m);
}

static long peak_rss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss;
}

// A checkpoint of width 256 and depth 4 at step 1 into a new folder under /tmp (dir, made: whether
// mkdtemp made it), its path into path: its size in bytes, 0 when it could not be written. A file of
// 65 MB, a largest tensor of 1 MB.
static long long save_wide_checkpoint(Config *c, char *dir, int *made, char *path, size_t pathlen) {
    config_defaults(c);
    config_load(c, "configs/tiny/starter.conf");
    c->width = 256, c->depth = 4, c->batch_size = 1;
    Model *m = build_model(c, backend_cpu(), 1);
    model_init(m, 1, 0);
    Optimizer *o = build_optimizer(m, c);
    char err[512] = "";
    *made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 1, .smooth_loss = 1};
    int saved = *made && checkpoint_save(dir, m, m->params_mem, o, c, &st, err, sizeof err) == 0;
    checkpoint_path(path, pathlen, dir, 1);
    free_optimizer(o);
    free_model(m);
    struct stat sb;
    return saved && !stat(path, &sb) ? (long long)sb.st_size : 0;
}

// A resume reads the checkpoint a tensor at a time: while checkpoint_load runs, the process's peak
// resident memory grows by about its largest tensor, not by the file's size. Measured in a child
// process (its peak starts at what it holds when forked), whose model, EMA and optimizer state are
// written through before the load, so that only the load's own memory counts.
static void test_resume_peak_memory(void) {
    Config c;
    const Backend *be = backend_cpu();
    char dir[] = "/tmp/fc_test_peak_XXXXXX", path[256];
    int made;
    long long size = save_wide_checkpoint(&c, dir, &made, path, sizeof path);
    struct { int status; long grew_kb; char err[400]; } r = {-1, -1, ""};
    int fds[2] = {-1, -1};
    pid_t pid = size && !pipe(fds) ? fork() : -1;
    if (pid == 0) {
        close(fds[0]);
        Model *m2 = build_model(&c, be, 1);
        Optimizer *o2 = build_optimizer(m2, &c);
        real *ema = be->alloc(sizeof(real) * m2->n_params);
        int32_t block_size = 0;
        CkptTable tab = ckpt_build_table(m2, ema, o2, &block_size);
        for (int i = 0; i < tab.n; i++)  // (the CPU backend's memory is the host's)
            if (tab.t[i].device) memset(tab.t[i].device, 0, tab.t[i].part_bytes);
        free(tab.t);
        TrainState back;
        long before = peak_rss_kb();
        r.status = (int)checkpoint_load(path, m2, ema, o2, &c, CKPT_CONTINUE, &back, r.err, sizeof r.err);
        r.grew_kb = peak_rss_kb() - before;
        _exit(write(fds[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    if (fds[1] >= 0) close(fds[1]);
    if (pid > 0 && read(fds[0], &r, sizeof r) != (ssize_t)sizeof r) r.status = -1;
    if (pid > 0) waitpid(pid, NULL, 0);
    if (fds[0] >= 0) close(fds[0]);
    check(r.status == CKPT_OK && r.grew_kb >= 0 && r.grew_kb * 1024LL < size / 4, "resume_reads_tensor_by_tensor",
          "a checkpoint of %.1f MB loaded (status %d%s%s): the peak resident memory grew by %.1f MB during the load "
          "(want under a quarter of the file)", size / 1e6, r.status, r.status ? ", " : "", r.status ? r.err : "",
          r.grew_kb / 1024.0);
    remove_test_dir(dir, made);
}

// train --from takes its parent's identity (its step and the CRC32 of its bytes) and config reading
// the file a tensor at a time: the peak resident memory of a child process that does grows by about
// its largest tensor, not by the file's size, and the CRC is the one of the file read whole (what
// the lineage of earlier forks records).
static void test_fork_parent_streamed(void) {
    Config c;
    char dir[] = "/tmp/fc_test_parent_XXXXXX", path[256];
    int made;
    long long size = save_wide_checkpoint(&c, dir, &made, path, sizeof path);
    struct { int rc; long grew_kb; char err[400]; } r = {-1, -1, ""};
    int fds[2] = {-1, -1};
    pid_t pid = size && !pipe(fds) ? fork() : -1;
    if (pid == 0) {
        close(fds[0]);
        static TrainOrigin o;
        Config parent;
        long before = peak_rss_kb();
        r.rc = lineage_read_parent(path, &parent, &o, r.err, sizeof r.err);
        r.grew_kb = peak_rss_kb() - before;
        _exit(write(fds[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    if (fds[1] >= 0) close(fds[1]);
    if (pid > 0 && read(fds[0], &r, sizeof r) != (ssize_t)sizeof r) r.rc = -1;
    if (pid > 0) waitpid(pid, NULL, 0);
    if (fds[0] >= 0) close(fds[0]);
    check(r.rc == 0 && r.grew_kb >= 0 && r.grew_kb * 1024LL < size / 4, "fork_parent_read_tensor_by_tensor",
          "the parent identity of a checkpoint of %.1f MB taken (rc %d%s%s): the peak resident memory grew by %.1f MB "
          "(want under a quarter of the file)", size / 1e6, r.rc, r.rc ? ", " : "", r.rc ? r.err : "",
          r.grew_kb / 1024.0);

    static TrainOrigin o;
    Config parent;
    char err[512] = "", want[64] = "(none)";
    size_t len;
    uint8_t *bytes = size ? test_read_file(path, &len) : NULL;
    if (bytes) snprintf(want, sizeof want, " (step 1, crc32 %08lx)", crc32_z(0L, bytes, len));
    free(bytes);
    int rc = size ? lineage_read_parent(path, &parent, &o, err, sizeof err) : -1;
    size_t n = strlen(o.parent), k = strlen(want);
    check(rc == 0 && n > k && !strcmp(o.parent + n - k, want) && o.parent_step == 1 && parent.width == 256,
          "fork_parent_identity_whole_file_crc", "identity \"%s\" (rc %d%s%s), want it to end \"%s\" (the file read "
          "whole); its config's width %d", o.parent, rc, rc ? ", " : "", rc ? err : "", want, parent.width);

    // 16 bytes appended while its first tensor is read (after the header's two reads): every tensor
    // still checks, the bytes read are no longer the file
    flip_path = path, preads = 0, grow_at = 3;
    rc = size ? lineage_read_parent(path, &parent, &o, err, sizeof err) : 0;
    int grew = preads >= grow_at;
    grow_at = 0;
    check(grew && rc && strstr(err, "not a whole checkpoint") && strstr(err, "the file changed while it was read"),
          "fork_parent_file_changed", "16 bytes appended while its tensors were read (%d): rc %d, %s", grew, rc,
          rc ? err : "its identity taken");
    remove_test_dir(dir, made);
}

// Resuming (CKPT_CONTINUE) with a config other than the checkpoint's: a key that changes the run's
// arithmetic (seed: every data draw and noise; lr; noise_aug_max; plan) is refused with its line, so
// that a resumed run repeats the uninterrupted one bit for bit; a key that only changes bookkeeping
// (checkpoint_every, sample_steps, keep_checkpoints: checkpoint.c's may_differ) is taken.
static void test_resume_keys(void) {
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Config c = m->cfg;
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_resume_keys_XXXXXX", err[1024] = "", path[256];
    int made = mkdtemp(dir) != NULL;
    TrainState st = {.step = 3, .smooth_loss = loss}, back = {0};
    int saved = made && checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    checkpoint_path(path, sizeof path, dir, 3);
    real *ema = backend_cpu()->alloc(sizeof(real) * m->n_params);
    const struct { const char *kv, *want; } cases[] = {  // want NULL: accepted
        {"seed=12345", "but this run has seed = 12345"},
        {"lr=0.000123", "but this run has lr = "},
        {"noise_aug_max=0.25", "but this run has noise_aug_max = "},
        {"plan=anchor:0 context:4 target:8", "but this run has plan = "},
        {"checkpoint_every=7", NULL},
        {"sample_steps=3", NULL},
        {"keep_checkpoints=5", NULL},
    };
    int n = (int)(sizeof cases / sizeof cases[0]), right = 0;
    char why[1200] = "";
    for (int i = 0; saved && i < n; i++) {
        Config c2 = c;
        char key[64], before[256], after[256];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(cases[i].kv, '=') - cases[i].kv), cases[i].kv);
        config_get(&c2, key, before, sizeof before);
        config_set(&c2, cases[i].kv, "test");
        config_get(&c2, key, after, sizeof after);
        err[0] = 0;
        CkptStatus s = checkpoint_load(path, m, ema, o, &c2, CKPT_CONTINUE, &back, err, sizeof err);
        // the value must really differ from the checkpoint's, or the case tests nothing
        int ok = strcmp(before, after) && (cases[i].want ? s == CKPT_REFUSED && strstr(err, cases[i].want)
                                                          : s == CKPT_OK && back.step == 3);
        right += ok;
        if (!ok && strlen(why) < 600)
            snprintf(why + strlen(why), sizeof why - strlen(why), "; %s (was %s): status %d %s", cases[i].kv, before,
                     (int)s, s ? err : "accepted");
    }
    check(saved && right == n, "resume_refuses_other_keys",
          "%d of %d right: seed, lr, noise_aug_max and plan changed on resume refused with their line; "
          "checkpoint_every, sample_steps and keep_checkpoints taken%s%s", right, n, saved ? "" : err, why);
    remove_test_dir(dir, made);
    backend_cpu()->free(ema);
    free_optimizer(o);
    free_model(m);
}

// Pruning reads back an older checkpoint once a process, not at every checkpoint: 70 checkpoints
// written by this process with keep_checkpoints = 80 are never opened to be read (a record of 64
// steps, wiped when full, had every kept one read again from the 65th checkpoint on).
static void test_prune_reads_once(void) {
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    c.keep_checkpoints = 80;
    real loss;
    Model *m = tiny_step(2, 0, 0, &loss);
    Optimizer *o = build_optimizer(m, &c);
    char dir[] = "/tmp/fc_test_reads_XXXXXX", err[256] = "";
    int made = mkdtemp(dir) != NULL, saved = made, steps_saved = 0;
    read_prefix = dir, read_opens = 0;
    for (int step = 1; saved && step <= 70; step++, steps_saved++) {
        TrainState st = {.step = step, .smooth_loss = loss};
        saved = checkpoint_save(dir, m, m->params_mem, o, &c, &st, err, sizeof err) == 0;
    }
    read_prefix = NULL;
    check(saved && steps_saved == 70 && read_opens == 0, "prune_reads_back_once",
          "%d checkpoints written, keep_checkpoints = 80: %d of them opened to be read back (want 0)%s%s",
          steps_saved, read_opens, saved ? "" : ": ", saved ? "" : err);
    remove_test_dir(dir, made);
    free_optimizer(o);
    free_model(m);
}

int main(void) {
    fc_set_threads(fc_default_threads());
    test_config_with_long_paths();
    test_list_long_step_names();
    test_checkpoint_other_code_maps();
    test_prune_keeps_whole_checkpoints();
    test_prune_reads_once();
    test_nonfinite_state_not_written();
    test_generation_model_same_outputs();
    test_plan_counts_staging();
    test_written_checkpoint_checks();
    test_resume_keys();
    test_check_file_changed();
    test_load_file_changed();
    test_resume_peak_memory();
    test_fork_parent_streamed();
    return g_failed ? 1 : 0;
}
