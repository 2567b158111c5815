// run_folder.c: a training run's folder on disk (run_folder.h): made and locked, cut-off writes
// removed, its metrics file cut back to the step it resumes from, and where the run starts.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/run_folder.h"
#include "base/paths.h"
#include "train/checkpoint.h"
#include "train/lineage.h"

// ----------------------------------------------------------------------------
// the folder, its lock and its metrics

// One trainer per run folder: a second one would race the first's checkpoints. The folder's own
// name is made durable here, by an fsync of its parent: the checkpoints' fsyncs of the run folder
// keep the names in it, not the folder, which a power cut could otherwise take with every checkpoint.
static int lock_run(const char *run) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.lock", run);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) fc_die("%s: cannot open the run's lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) fc_die("%s: another framechain train is using this run folder", run);
    if (fc_fsync_parent(run)) fc_die("%s: fsync of the folder it is in failed: %s", run, strerror(errno));
    return fd;
}

// Temporary files left by a writer that was killed: never a checkpoint, always safe to remove.
static void remove_stale_temps(const char *run) {
    DIR *d = opendir(run);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5) || !strstr(e->d_name, ".safetensors.tmp-")) continue;
        snprintf(path, sizeof path, "%s/%s", run, e->d_name);
        if (!unlink(path)) printf("removed %s, a checkpoint write that was cut off\n", path);
    }
    closedir(d);
}

// A run folder this train made: if it stops before anything but the lock is in it (a refusal after
// the folder was made: the memory plan over --vram-budget, collectives = nccl where NCCL cannot
// start), the folder goes with it at exit, so that a refused start leaves nothing on disk. A folder
// that held anything, or that was there before, is never removed.
static char made_run[4096];

static void remove_made_run_if_empty(void) {
    DIR *d = opendir(made_run);
    if (!d) return;
    struct dirent *e;
    int other = 0;
    while ((e = readdir(d)))
        other |= strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, ".lock");
    closedir(d);
    if (other) return;
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/.lock", made_run);
    if (!unlink(lock)) rmdir(made_run);
}

int run_folder_open(const char *run) {
    char err[1024];
    struct stat sb;
    int existed = stat(run, &sb) == 0;
    if (fc_mkdir_p(run, err, sizeof err)) fc_die("%s", err);
    if (!existed && strlen(run) < sizeof made_run) {
        snprintf(made_run, sizeof made_run, "%s", run);
        atexit(remove_made_run_if_empty);
    }
    int lock = lock_run(run);
    remove_stale_temps(run);
    return lock;
}

// A killed run may have logged steps past its checkpoint: they go.
FILE *run_folder_metrics(const char *run, int last) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = fopen(path, "r");
    if (in) {
        FILE *out = fopen(tmp, "w");
        if (!out) fc_die("%s: cannot write: %s", tmp, strerror(errno));
        char line[4096];
        while (fgets(line, sizeof line, in)) {
            int step;
            if (sscanf(line, "{\"step\":%d", &step) == 1 && step <= last && strchr(line, '\n')) fputs(line, out);
        }
        fclose(in);
        if (fflush(out) || fsync(fileno(out)) || fclose(out) || rename(tmp, path))
            fc_die("%s: cannot rewrite: %s", path, strerror(errno));
    }
    FILE *f = fopen(path, "a");
    if (!f) fc_die("%s: cannot open: %s", path, strerror(errno));
    // Its name (created, or renamed over by the rewrite above) made durable before any checkpoint of
    // this process can be: a checkpoint that survives a power cut has its metrics file beside it.
    if (fc_fsync_dir(run)) fc_die("%s: fsync of the run folder failed: %s", run, strerror(errno));
    return f;
}

// ----------------------------------------------------------------------------
// where the run starts: its checkpoints, a fork's parent, or step 0

// Load the newest checkpoint that checks out; returns 1 (its path in `loaded`), or 0 when the folder
// has none.
static int resume(const char *run, Model *m, real *ema, Optimizer *o, const Config *c, CkptLoadMode mode,
                  TrainState *st, char *loaded) {
    int *steps, n = checkpoint_list(run, &steps), resumed = 0;
    char path[4096], err[1024];
    for (int i = 0; i < n && !resumed; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        CkptStatus s = checkpoint_load(path, m, ema, o, c, mode, st, err, sizeof err);
        if (s == CKPT_REFUSED) fc_die("%s", err);
        // A newer file that is not a whole checkpoint of this run is set aside, so that pruning
        // never counts it as one of the checkpoints it keeps.
        if (s == CKPT_CORRUPT) {
            checkpoint_set_aside(path, err);
            continue;
        }
        if (st->step != steps[i]) {
            snprintf(err, sizeof err, "%s: its metadata says step %d", path, st->step);
            checkpoint_set_aside(path, err);
            continue;
        }
        printf("resuming %s from step %d (%s)\n", run, st->step, path);
        snprintf(loaded, 4096, "%s", path);
        resumed = 1;
    }
    free(steps);
    if (n && !resumed)
        fc_die("%s: none of its %d checkpoints is usable (see above); move them away to start the run again", run, n);
    return resumed;
}

int run_folder_start_from(const char *run, Model *m, real *ema, Optimizer *o, const Config *c,
                          const TrainOrigin *origin, TrainState *st, char *loaded, CkptLoadMode *mode) {
    char err[1024];
    *mode = origin->extend ? CKPT_EXTEND : CKPT_CONTINUE;
    loaded[0] = 0;
    int resumed = resume(run, m, ema, o, c, *mode, st, loaded);
    if (resumed && origin->from && strncmp(st->parent, origin->from, strlen(origin->from)))
        fc_die("%s: holds a run that is not a fork of %s (%s); --from starts a new run: give --run a new folder", run,
               origin->from, st->parent[0] ? st->parent : "it has no parent");
    if (resumed && !lineage_same_data(st->data, origin->data))
        fc_die("%s: written on the data of %s, but this run has %s; a checkpoint continues only its own run (train "
               "--from %s/ckpt-%08d.safetensors --run NEW --data ... forks it onto other data)", run, st->data,
               origin->data, run, st->step);
    if (resumed && origin->extend && origin->note[0]) {
        lineage_append(st->lineage, sizeof st->lineage, origin->note);
        printf("%s: %s\n", run, origin->note);
    }
    int fork_start = !resumed && origin->from;
    if (fork_start) {
        CkptStatus s = checkpoint_load(origin->from, m, ema, o, c, CKPT_FORK, st, err, sizeof err);
        if (s) fc_die("%s", err);
        snprintf(loaded, 4096, "%s", origin->from);
        *mode = CKPT_FORK;
    }
    snprintf(st->data, sizeof st->data, "%s", origin->data);  // from now on, what its checkpoints record
    if (!fork_start) return 0;
    snprintf(st->parent, sizeof st->parent, "%s", origin->parent);
    lineage_append(st->lineage, sizeof st->lineage, origin->note);
    printf("forking %s from %s\n", run, origin->note + strlen("forked from "));
    return 1;
}
