// lineage.c: train --extend and train --from (see lineage.h).
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "train/lineage.h"
#include "base/common.h"
#include "train/checkpoint.h"

// The checkpoint's config, parsed over the defaults. 0, or -1 with err.
static int read_config(const StFile *f, const char *path, Config *c, char *err, size_t errlen) {
    const char *text = st_meta(f, "config");
    char why[CONFIG_MAX_LINE + 512];
    config_defaults(c);
    if (!text) return fc_errf(err, errlen, "%s: has no config in its metadata", path);
    if (config_parse_text(c, text, strlen(text), path, why, sizeof why))
        return fc_errf(err, errlen, "%s: its config does not parse: %s", path, why);
    return 0;
}

// Metadata values must be UTF-8: a byte outside printable ASCII in a user's path becomes '?'.
static void ascii_only(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 32 || (unsigned char)*s > 126) *s = '?';
}

// A parent as its checkpoints record it: the path cut at 1100 bytes, in printable ASCII.
static void parent_path_shown(const char *path, char *out, size_t len) {
    snprintf(out, len, "%.1100s", path);
    ascii_only(out);
}

int lineage_names_parent(const char *parent, const char *from) {
    char shown[1200];
    parent_path_shown(from, shown, sizeof shown);
    size_t len = strlen(shown);  // "FROM (step N, crc32 X)": FROM exactly, not a longer name that starts with it
    return parent && !strncmp(parent, shown, len) && !strncmp(parent + len, " (step ", 7);
}

// Where "(step N, crc32 X)" starts in a parent's identity "PATH (step N, crc32 X)" (the last
// " (step ": PATH may hold one), or NULL.
static const char *identity_tail(const char *parent) {
    const char *tail = NULL;
    for (const char *at = parent; (at = strstr(at, " (step ")); at++) tail = at;
    return tail;
}

int lineage_is_fork_of(const char *parent, const TrainOrigin *o) {
    if (lineage_names_parent(parent, o->from)) return 1;
    // the same file under another spelling of its path (./runs/a, an absolute path, another working
    // folder): its step and the CRC-32 of its bytes, read from it by this command
    const char *theirs = parent ? identity_tail(parent) : NULL, *ours = identity_tail(o->parent);
    return theirs && ours && !strcmp(theirs, ours);
}

void lineage_append(char *lineage, size_t size, const char *line) {
    size_t need = strlen(line) + 2;
    while (lineage[0] && strlen(lineage) + need > size) {  // drop the oldest line
        char *nl = strchr(lineage, '\n');
        if (nl) memmove(lineage, nl + 1, strlen(nl + 1) + 1);
        else lineage[0] = 0;
    }
    size_t len = strlen(lineage);
    snprintf(lineage + len, size - len, "%s%s", len ? "\n" : "", line);
}

// The header of run's newest whole checkpoint into f (its path in path): 1, or 0 when there is none.
// With err: -1 with one line in err at a newer file this user cannot open (no permission, the
// process's limits: not damage, and what the resume would stop at), where without it is passed over.
static int read_newest(const char *run, StFile *f, char *path, size_t pathlen, char *err, size_t errlen) {
    int *steps, n = checkpoint_list(run, &steps), found = 0, relisted = 0;
    char why[1024];
    for (int i = 0; i < n && !found; i++) {
        checkpoint_path(path, pathlen, run, steps[i]);
        if (err && checkpoint_cannot_open(path, err, errlen)) {
            free(steps);
            return -1;
        }
        found = checkpoint_read_checked(path, f, NULL, why, sizeof why) == 0;
        // gone since the listing: pruned by a train that writes the run (a newer one took its place),
        // not damaged: the folder listed again, a bounded number of times
        if (!found && access(path, F_OK) && errno == ENOENT && relisted < 100) {
            free(steps);
            n = checkpoint_list(run, &steps), i = -1, relisted++;
            continue;
        }
        // a file whose metadata names another step than its name is set aside by the resume: not this one
        const char *at = found ? st_meta(f, "step") : NULL;
        if (found && (!at || atoi(at) != steps[i])) found = 0, st_free(f);
    }
    free(steps);
    return found;
}

// ----------------------------------------------------------------------------
// the data a run trains on

// "crc32 XXXXXXXX" of the file at path into id, or "unreadable": 0 when it was read.
static int file_crc(const char *path, char *id, size_t idlen) {
    // O_NONBLOCK: a FIFO in its place is refused later (dataset_open, the loader), not waited on here
    FILE *f = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat sb;
    if (fd >= 0 && !fstat(fd, &sb) && S_ISREG(sb.st_mode)) f = fdopen(fd, "rb");
    else if (fd >= 0) close(fd);
    unsigned long crc = crc32(0L, Z_NULL, 0);
    uint8_t buf[65536];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) crc = crc32(crc, buf, (uInt)n);
    int ok = f && !ferror(f);
    if (ok) snprintf(id, idlen, "crc32 %08lx", crc);
    else snprintf(id, idlen, "unreadable");  // the reader says why, and stops the run
    if (f) fclose(f);
    return ok ? 0 : -1;
}

void lineage_data_identity(const char *data_dir, const char *exclude, char *id, size_t idlen) {
    if (!data_dir) {
        snprintf(id, idlen, "the built-in moving shapes");
        return;
    }
    char path[4200], crc[32];
    snprintf(path, sizeof path, "%s/dataset.json", data_dir);
    file_crc(path, crc, sizeof crc);
    int len = snprintf(id, idlen, "%s of %.1000s", crc, path);
    if (exclude && exclude[0] && len >= 0 && (size_t)len < idlen) {
        file_crc(exclude, crc, sizeof crc);
        snprintf(id + len, idlen - (size_t)len, "%s%s of %.100s", LINEAGE_EXCLUDE_MARK, crc, exclude);
    }
    ascii_only(id);
}

// The exclude list's "crc32 XXXXXXXX" in an identity ("" when it has none).
static void exclude_part(const char *id, char *out, size_t len) {
    const char *at = strstr(id, LINEAGE_EXCLUDE_MARK);
    snprintf(out, len, "%.14s", at ? at + strlen(LINEAGE_EXCLUDE_MARK) : "");
}

void lineage_data_key(const char *id, char *out, size_t len) {
    if (strncmp(id, "crc32 ", 6)) {  // the built-in shapes: no path to leave out
        snprintf(out, len, "%s", id);
        return;
    }
    char x[16];
    exclude_part(id, x, sizeof x);
    snprintf(out, len, "%.14s%s%s", id, x[0] ? LINEAGE_EXCLUDE_MARK : "", x);
}

int lineage_same_data(const char *a, const char *b) {
    if (!a[0] || !b[0]) return 1;
    char xa[16], xb[16];
    exclude_part(a, xa, sizeof xa), exclude_part(b, xb, sizeof xb);
    if (strcmp(xa, xb)) return 0;
    if (!strncmp(a, "crc32 ", 6) && !strncmp(b, "crc32 ", 6)) return !strncmp(a, b, 14);
    return !strcmp(a, b);
}

// ----------------------------------------------------------------------------
// train --extend

int lineage_extend(Config *c, const char *run, TrainOrigin *o, char *err, size_t errlen) {
    char path[4096];
    StFile f;
    int found = read_newest(run, &f, path, sizeof path, err, errlen), rc = 0;
    o->note[0] = 0;
    if (found < 0) return -1;
    if (!found)
        return fc_errf(err, errlen, "%s: --extend: the run holds no whole checkpoint to extend (train it without "
                       "--extend first)", run);
    Config theirs;
    const char *at = st_meta(&f, "step");
    int step = at ? atoi(at) : 0;
    if (read_config(&f, path, &theirs, err, errlen)) {
        rc = -1;
    } else if (c->steps < theirs.steps) {
        rc = fc_errf(err, errlen, "--extend --steps %d: %s already runs to %d steps (an extension only goes further)",
                     c->steps, run, theirs.steps);
    } else {
        // the schedule the run was trained with: its warmup (which its own --steps may have cut short, as
        // this command's --steps would cut it otherwise) and where its decay ends
        c->warmup_steps = theirs.warmup_steps;
        c->schedule_end = theirs.schedule_end;
        if (c->steps > theirs.steps && !c->schedule_end) c->schedule_end = theirs.steps;
        if (c->steps > theirs.steps)
            snprintf(o->note, sizeof o->note, "extended from %d to %d steps at step %d: the cosine decay still ends at "
                     "step %d, then the learning rate stays %g (lr * lr_min_ratio)", theirs.steps, c->steps, step,
                     c->schedule_end, c->lr * c->lr_min_ratio);
    }
    st_free(&f);
    return rc;
}

// ----------------------------------------------------------------------------
// train --from

int lineage_read_parent(const char *path, Config *parent_cfg, TrainOrigin *o, char *err, size_t errlen) {
    StFile f;
    char why[1024];
    unsigned long crc;
    if (checkpoint_read_checked(path, &f, &crc, why, sizeof why))
        return fc_errf(err, errlen, "--from %s: not a whole checkpoint: %s", path, why);
    const char *at = st_meta(&f, "step");
    int rc = read_config(&f, path, parent_cfg, err, errlen);
    if (!rc && !at) rc = fc_errf(err, errlen, "--from %s: the trainer state is missing from its metadata", path);
    if (!rc) {
        o->from = path;
        o->parent_step = atoi(at);
        char shown[1200];
        parent_path_shown(path, shown, sizeof shown);
        snprintf(o->parent, sizeof o->parent, "%s (step %d, crc32 %08lx)", shown, o->parent_step, crc);
        const char *data = st_meta(&f, "data");
        snprintf(o->parent_data, sizeof o->parent_data, "%s", data ? data : "");
    }
    st_free(&f);
    return rc;
}

int lineage_resume_fork(const char *run, const char *from, Config *parent_cfg, TrainOrigin *o) {
    char path[4096], why[CONFIG_MAX_LINE + 512];
    StFile f;
    if (read_newest(run, &f, path, sizeof path, NULL, 0) != 1) return -1;
    const char *parent = st_meta(&f, "parent");
    int rc = -1;
    if (lineage_names_parent(parent, from) && !read_config(&f, path, parent_cfg, why, sizeof why)) {
        o->from = from;
        o->parent_step = atoi(identity_tail(parent) + 7);  // the last " (step ": the path may hold one
        snprintf(o->parent, sizeof o->parent, "%s", parent);
        o->parent_data[0] = 0;
        rc = 0;
    }
    st_free(&f);
    return rc;
}

int lineage_parent_replaced(const char *run, const TrainOrigin *o, char *recorded, char *now, size_t len) {
    // the newest header that reads (not the whole file: a rerun of a large fork would read it twice; a
    // damaged one the resume then sets aside names the parent all the same)
    int *steps, n = checkpoint_list(run, &steps), found = 0;
    char path[4096], why[1024];
    StFile f;
    for (int i = 0; i < n && !found; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        found = !st_read_header(path, &f, why, sizeof why);
    }
    free(steps);
    if (!found) return 0;
    const char *parent = st_meta(&f, "parent");
    const char *theirs = lineage_names_parent(parent, o->from) ? identity_tail(parent) : NULL;
    const char *ours = identity_tail(o->parent);
    int replaced = theirs && ours && strcmp(theirs, ours);
    if (replaced) snprintf(recorded, len, "%s", theirs + 1), snprintf(now, len, "%s", ours + 1);  // "(step N, crc32 X)"
    st_free(&f);
    return replaced;
}

int lineage_fork_folder(const char *run, const TrainOrigin *o, char *err, size_t errlen) {
    char path[4096];
    StFile f;
    if (read_newest(run, &f, path, sizeof path, NULL, 0) != 1) return 0;
    const char *parent = st_meta(&f, "parent");
    int rc = 0;
    if (!lineage_is_fork_of(parent, o))
        rc = fc_errf(err, errlen, "%s: holds a run that is not a fork of %s (%s); --from starts a new run: give --run "
                     "a new folder", run, o->from, parent ? parent : "its checkpoints name no parent");
    st_free(&f);
    return rc;
}

int lineage_fork(const Config *parent_cfg, const Config *c, TrainOrigin *o, char *err, size_t errlen) {
    int len = snprintf(o->note, sizeof o->note, "forked from %s", o->parent);
    int changed = 0;
    for (const char *const *k = config_keys(); *k; k++) {
        char a[1024], b[1024];
        config_get(parent_cfg, *k, a, sizeof a);
        config_get(c, *k, b, sizeof b);
        if (!strcmp(a, b)) continue;
        if (config_key_shapes_network(*k))
            return fc_errf(err, errlen, "--from %s: it has %s = %s, this config %s = %s; a fork keeps the network "
                           "and what it predicts (train a new run to change them)", o->from, *k, a, *k, b);
        if (len < (int)sizeof o->note)
            len += snprintf(o->note + len, sizeof o->note - len, "%s%s %s -> %s", changed++ ? ", " : "; changed: ",
                            *k, a, b);
    }
    if (!lineage_same_data(o->parent_data, o->data) && len < (int)sizeof o->note) {
        char xa[16], xb[16], base_a[1100], base_b[1100];
        exclude_part(o->parent_data, xa, sizeof xa), exclude_part(o->data, xb, sizeof xb);
        // the identities without their exclude lists: the same dataset, where only the list changed
        const char *ma = strstr(o->parent_data, LINEAGE_EXCLUDE_MARK), *mb = strstr(o->data, LINEAGE_EXCLUDE_MARK);
        snprintf(base_a, sizeof base_a, "%.*s", ma ? (int)(ma - o->parent_data) : (int)strlen(o->parent_data),
                 o->parent_data);
        snprintf(base_b, sizeof base_b, "%.*s", mb ? (int)(mb - o->data) : (int)strlen(o->data), o->data);
        if (lineage_same_data(base_a, base_b))
            len += snprintf(o->note + len, sizeof o->note - len, "%sdata the same, its exclude list %s -> %s",
                            changed++ ? ", " : "; changed: ", xa[0] ? xa : "none", xb[0] ? xb : "none");
        else
            len += snprintf(o->note + len, sizeof o->note - len, "%sdata %s -> %s", changed++ ? ", " : "; changed: ",
                            o->parent_data, o->data);
    }
    if (!changed && len < (int)sizeof o->note) snprintf(o->note + len, sizeof o->note - len, "; no key changed");
    ascii_only(o->note);
    if (c->steps <= o->parent_step)
        return fc_errf(err, errlen, "--from %s: the parent is at step %d, and this run ends at steps = %d: give more "
                       "steps (--steps N)", o->from, o->parent_step, c->steps);
    return 0;
}
