// run_folder.c: a training run's folder on disk (run_folder.h): made and locked, cut-off writes
// removed, its metrics file cut back to the step it resumes from, and where the run starts.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "train/run_folder.h"
#include "base/paths.h"
#include "train/checkpoint.h"
#include "train/lineage.h"
#include "train/metrics_line.h"

// ----------------------------------------------------------------------------
// the folder, its lock and its metrics

// The line for a run folder whose lock another train holds.
#define RUN_BUSY "%s: another framechain train is using this run folder"

// One trainer per run folder: a second one would race the first's checkpoints. The folder's own
// name is made durable here, by an fsync of its parent: the checkpoints' fsyncs of the run folder
// keep the names in it, not the folder, which a power cut could otherwise take with every checkpoint.
// *created: 1 where this call made the lock file.
static int lock_run(const char *run, int *created) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.lock", run);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
    *created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = open(path, O_RDWR | O_CREAT, 0666);
    if (fd < 0) fc_die("%s: cannot open the run's lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) fc_die(RUN_BUSY, run);
    if (fc_fsync_parent(run)) fc_die("%s: fsync of the folder it is in failed: %s", run, strerror(errno));
    return fd;
}

int run_folder_still_held(const char *run, int lock, char *err, size_t errlen) {
    char path[4200], now[4200] = "";
    struct stat held, named;
    snprintf(path, sizeof path, "%s/.lock", run);
    if (fstat(lock, &held) || (!stat(path, &named) && named.st_dev == held.st_dev && named.st_ino == held.st_ino))
        return 0;
    // where the lock file is now, as the kernel names the open file (" (deleted)" where it was removed)
    snprintf(path, sizeof path, "/proc/self/fd/%d", lock);
    ssize_t n = readlink(path, now, sizeof now - 1);
    now[n > 0 ? n : 0] = 0;
    size_t len = strlen(now);
    if (len > 10 && !strcmp(now + len - 10, " (deleted)"))  // removed, the folder where it was
        return fc_errf(err, errlen, "%s/.lock: the run's lock file was removed while this train ran: stopping (without "
                       "it a second train could start in the folder); the checkpoints written are in %s, and the "
                       "same command goes on from them", run, run);
    int moved = len > 6 && !strcmp(now + len - 6, "/.lock");
    if (moved) now[len - 6] = 0;
    return fc_errf(err, errlen, "%s: the run folder was moved or replaced while this train ran: stopping; its "
                   "checkpoints are in the folder it was moved to%s%s (train --run with that folder goes on), and "
                   "nothing more of this train's goes into the folder now at its old name", run, moved ? ", " : "",
                   moved ? now : "");
}

// A temporary file NAME.tmp-PID (how a preview is written) of a process that no longer runs.
static int dead_writers_temp(const char *name) {
    const char *tag = strstr(name, ".tmp-");
    if (!tag) return 0;
    for (const char *next; (next = strstr(tag + 1, ".tmp-"));) tag = next;
    char *end;
    long pid = strtol(tag + 5, &end, 10);
    if (end == tag + 5 || *end || pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) && errno == ESRCH;
}

// Temporary files left by a writer that was killed: never a checkpoint, always safe to remove. The
// checkpoints' are this run's (the lock says no other trainer runs); a preview's in RUN/samples is
// removed once the process that wrote it is gone.
static void remove_stale_temps(const char *run) {
    DIR *d = opendir(run);
    if (!d) return;
    struct dirent *e;
    char path[4096], samples[4096];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "ckpt-", 5) || !strstr(e->d_name, ".safetensors.tmp-")) continue;
        snprintf(path, sizeof path, "%s/%s", run, e->d_name);
        if (!unlink(path)) printf("removed %s, a checkpoint write that was cut off\n", FC_ESCAPED(path));
    }
    closedir(d);
    snprintf(samples, sizeof samples, "%s/samples", run);
    if (!(d = opendir(samples))) return;
    while ((e = readdir(d))) {
        if (!dead_writers_temp(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", samples, e->d_name);
        if (!unlink(path)) printf("removed %s, a preview write that was cut off\n", FC_ESCAPED(path));
    }
    closedir(d);
}

// A run folder this train made: if it stops before anything but the lock is in it (a refusal after
// the folder was made: the memory plan over --vram-budget, collectives = nccl where NCCL cannot
// start, a dataset whose every clip fails its check at step 1), the folder goes with it at exit, so
// that a refused start leaves nothing on disk. A folder that held anything, or that was there before,
// is never removed. metrics.jsonl where this train made it and no line ever reached it goes too,
// whatever the folder (each line is flushed as it is written, so empty at exit means none), unless a
// checkpoint is there (a fork writes its first before its first step: a checkpoint has its metrics
// file beside it), and only the file this train made (its inode: another train may have started in
// the folder once this one's lock went).
static char made_run[4096], made_top[4096], made_metrics[4200], metrics_run[4096];  // made_top: the
// outermost folder this train made for made_run (made_run itself, or a parent made with it)
// 0: no folder made; 1: made_run made by this train, its lock not yet taken (a .lock in it may be
// another train's: never unlinked); 2: its lock taken. made_run and made_top are whole before it
// leaves 0 (a signal handler reads them).
static volatile sig_atomic_t made_state;
static struct stat made_metrics_id;

// What dir holds, read with the getdents64 system call, which a signal handler may make (opendir
// allocates): *checkpoint 1 where a name starts with "ckpt-", *other 1 where a name is not ".", ".."
// or ".lock". -1 where the folder cannot be read (then it may hold anything).
static int scan_folder(const char *dir, int *checkpoint, int *other) {
    struct entry {  // the kernel's struct linux_dirent64
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
    };
    *checkpoint = *other = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    _Alignas(8) char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long at = 0; at < n;) {
            const struct entry *e = (const struct entry *)(buf + at);
            *checkpoint |= !strncmp(e->name, "ckpt-", 5);
            *other |= strcmp(e->name, ".") && strcmp(e->name, "..") && strcmp(e->name, ".lock");
            at += e->reclen;
        }
    close(fd);
    return n < 0 ? -1 : 0;
}

// At exit, or from a stop signal's handler during the set-up: async-signal-safe calls only (stat,
// open, getdents64, unlink, rmdir), and no fc_die.
static void remove_what_a_refused_start_made(void) {
    struct stat st;
    int checkpoint, other;
    int ours = made_metrics[0] && !stat(made_metrics, &st) && S_ISREG(st.st_mode) && st.st_size == 0 &&
               st.st_dev == made_metrics_id.st_dev && st.st_ino == made_metrics_id.st_ino;
    if (ours && !scan_folder(metrics_run, &checkpoint, &other) && !checkpoint) unlink(made_metrics);
    if (!made_state) return;
    // a folder made unreadable to its maker (umask 777: its lock could not be made either) is still
    // taken back where it is empty: rmdir removes nothing else
    if (scan_folder(made_run, &checkpoint, &other)) {
        if (made_state == 1 && errno == EACCES) fc_rmdir_made(made_run, made_top);
        return;
    }
    if (other) return;
    if (made_state == 2) {
        char lock[4200];
        size_t n = strlen(made_run);
        memcpy(lock, made_run, n), memcpy(lock + n, "/.lock", 7);  // made_run is under 4096 bytes
        if (unlink(lock)) return;
    }
    fc_rmdir_made(made_run, made_top);  // and the parents made for it, where empty (rmdir leaves one that is not)
}

// A stop signal during the set-up (before the loop catches them: train_run) ends train at once, as
// its default does, but first takes back what this start made, as a refused start's exit does: the
// set-up of a large model takes minutes on a GPU, and a Ctrl-C then left a folder holding its lock.
static const int SETUP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
#define N_SETUP_SIGNALS (int)(sizeof SETUP_SIGNALS / sizeof SETUP_SIGNALS[0])
static struct sigaction setup_before[N_SETUP_SIGNALS];

static void on_stop_in_setup(int sig) {
    remove_what_a_refused_start_made();
    for (int i = 0; i < N_SETUP_SIGNALS; i++)
        if (SETUP_SIGNALS[i] == sig) sigaction(sig, &setup_before[i], NULL);
    raise(sig);
}

// Only where a signal has its default disposition (an ignored SIGHUP is nohup's; a handler is
// someone's), once. Where train made no folder the handler ends it as the default would.
static void catch_stop_in_setup(void) {
    static int done;
    if (done++) return;
    for (int i = 0; i < N_SETUP_SIGNALS; i++) {
        if (sigaction(SETUP_SIGNALS[i], NULL, &setup_before[i]) || setup_before[i].sa_handler != SIG_DFL) continue;
        struct sigaction sa = {0};
        sa.sa_handler = on_stop_in_setup;
        sigemptyset(&sa.sa_mask);
        for (int k = 0; k < N_SETUP_SIGNALS; k++) sigaddset(&sa.sa_mask, SETUP_SIGNALS[k]);  // one cleanup at a time
        sigaction(SETUP_SIGNALS[i], &sa, NULL);
    }
}

// A dataset folder given as the run folder (--run D --data D, or the folder a prepare is writing)
// would get checkpoints among its shards, and the prepare would take the run's files for its own:
// -1 with the line that refuses it.
static int dataset_folder(const char *run, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/dataset.json", run);
    if (!access(path, F_OK))
        return fc_errf(err, errlen, "%s: holds dataset.json: a dataset folder, not a run folder (give --run a folder "
                       "of its own)", run);
    snprintf(path, sizeof path, "%s/.prepare.lock", run);
    int lock = !access(path, F_OK), shards = 0;
    DIR *d = lock ? NULL : opendir(run);
    for (struct dirent *e; d && !shards && (e = readdir(d));)
        shards = !strncmp(e->d_name, "shard-", 6) && strstr(e->d_name, ".safetensors");
    if (d) closedir(d);
    if (!lock && !shards) return 0;
    return fc_errf(err, errlen, "%s: holds %s: a dataset a prepare is writing (or one whose prepare was cut off), not "
                   "a run folder (give --run a folder of its own)", run, lock ? ".prepare.lock" : "shard files");
}

int run_folder_open(const char *run) {
    char err[4400];
    if (dataset_folder(run, err, sizeof err)) fc_die("%s", err);
    // Made by this process only where its own mkdir made it: two trains started at once on a new
    // folder both found it missing, and the one the lock then refused removed the other's lock file
    // and folder at its exit.
    // a stop signal from here on takes back what this start made (before: the folder and its lock)
    catch_stop_in_setup();
    char *top = fc_missing_top(run);
    int fits = strlen(run) < sizeof made_run;
    if (fits) {  // (before the folder is made: a signal then finds them whole)
        snprintf(made_run, sizeof made_run, "%s", run);
        snprintf(made_top, sizeof made_top, "%s", top && strlen(top) <= strlen(run) ? top : run);
    }
    int made = mkdir(run, 0777) == 0, failed = 0;
    if (!made && errno == ENOENT) {  // its parents first, then the folder itself
        char parent[4096];
        fc_folder_of(parent, sizeof parent, run);
        failed = fc_mkdir_p(parent, err, sizeof err);
        made = !failed && mkdir(run, 0777) == 0;
    }
    if (made && fits) made_state = 1;
    if (!made && (failed || fc_mkdir_p(run, err, sizeof err))) {
        if (top) fc_rmdir_made(run, top);  // the parents made for it (a name too long made them, then failed)
        fc_die("%s", err);
    }
    free(top);
    static int registered;  // before the lock: a lock file that cannot be made (no inode left) takes the folder back
    if (!registered++) atexit(remove_what_a_refused_start_made);
    int created;
    int lock = lock_run(run, &created);  // dies where another train holds it: nothing of that one's is touched
    if (made_state) made_state = 2;
    // a prepare that started into it meanwhile (each makes its lock file first, then looks for the other's)
    if (dataset_folder(run, err, sizeof err)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/.lock", run);
        if (created) unlink(path);
        fc_die("%s", err);
    }
    remove_stale_temps(run);
    return lock;
}

// RUN/metrics.jsonl opened for reading: NULL where there is none; a FIFO or anything else that is not
// a regular file is refused in one line (an open of a FIFO would wait for a writer for good).
static FILE *open_metrics(const char *path) {
    char err[4300];
    FILE *f = fc_fopen_regular(path, err, sizeof err);
    if (!f && errno == ENOENT) return NULL;
    if (!f) fc_die("%s", err);
    return f;
}

// A killed run may have logged steps past its checkpoint: they go. Kept: exactly the lines that are a
// step's record (metrics_line_record) at or below LAST, each with its newline. A line that is no record
// (junk, a line torn by a power cut) names no step and goes too, said in one line: how many, the first.
FILE *run_folder_metrics(const char *run, int last) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = open_metrics(path);
    if (in) {
        FILE *out = fopen(tmp, "w");
        if (!out) fc_die("%s: cannot write: %s", tmp, strerror(errno));
        static const char *const keys[] = {"step"};
        double step;
        char *line = NULL, why[256], first_why[256] = "";
        size_t cap = 0;
        ssize_t len;
        long lineno = 0, unread = 0, first_unread = 0;
        while ((len = getline(&line, &cap, in)) >= 0) {
            lineno++;
            if (strspn(line, " \t\r\n") == (size_t)len) continue;  // a blank line
            if (metrics_line_record(line, len, keys, 1, &step, why, sizeof why)) {
                if (!unread++) first_unread = lineno, snprintf(first_why, sizeof first_why, "%s", why);
                continue;
            }
            if (step > last) continue;
            fwrite(line, 1, len, out);
            if (line[len - 1] != '\n') fputc('\n', out);  // the last line, whole but for its newline
        }
        int read_error = fc_getline_error(in);
        free(line);
        struct stat was;  // the rewrite keeps the file's permissions (a chmod 600 is not widened to the umask's)
        if (!fstat(fileno(in), &was)) fchmod(fileno(out), was.st_mode & 07777);
        fclose(in);
        if (read_error) {  // the file stays as it is: a cut-back of what could be read would lose the rest
            fclose(out);
            unlink(tmp);
            fc_die("%s: cannot read: %s", path, strerror(read_error));
        }
        if (fc_commit_file(out, tmp, path))  // the partial copy goes: on a full disk it holds space the rerun needs
            fc_die("%s: cannot rewrite: %s; stopping (the checkpoints are whole: %s, then run the same command to "
                   "go on)", path, strerror(errno), fc_write_fix(errno));
        if (unread)
            fc_warn("%s: %ld line%s that %s no step's record (junk, or torn by a power cut) left out of its cut-back "
                    "to step %d: the first, line %ld: %s", path, unread, unread == 1 ? "" : "s",
                    unread == 1 ? "is" : "are", last, first_unread, first_why);
    }
    FILE *f = fopen(path, "a");
    if (!f) fc_die("%s: cannot open: %s", path, strerror(errno));
    if (!in && strlen(run) < sizeof metrics_run && !fstat(fileno(f), &made_metrics_id)) {
        snprintf(made_metrics, sizeof made_metrics, "%s", path);
        snprintf(metrics_run, sizeof metrics_run, "%s", run);
    }
    // Its name (created, or renamed over by the rewrite above) made durable before any checkpoint of
    // this process can be: a checkpoint that survives a power cut has its metrics file beside it.
    if (fc_fsync_dir(run)) fc_die("%s: fsync of the run folder failed: %s", run, strerror(errno));
    return f;
}

// ----------------------------------------------------------------------------
// where the run starts: its checkpoints, a fork's parent, or step 0

// The checkpoints of RUN set aside as damaged (checkpoint_set_aside: ckpt-*.safetensors.unusable*).
int run_folder_set_aside(const char *run) {
    DIR *d = opendir(run);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += !strncmp(e->d_name, "ckpt-", 5) && strstr(e->d_name, ".safetensors.unusable") != NULL;
    closedir(d);
    return n;
}

// The highest step of RUN/metrics.jsonl's lines that are a step's record (metrics_line_record), and
// into *below the highest of those at or below at_most; 0 when it has none. A last line torn by a
// power cut ({"step":12 of a step 1234) or text put in by hand names no step: counted, it could name
// one the run never reached.
static long metrics_last_step(const char *run, long at_most, long *below) {
    *below = 0;
    char path[4096], why[256];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = open_metrics(path);
    if (!f) return 0;
    static const char *const keys[] = {"step"};
    double step;
    char *line = NULL;
    size_t cap = 0;
    long last = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0)
        if (!metrics_line_record(line, len, keys, 1, &step, why, sizeof why)) {
            if (step > last) last = (long)step;
            if (step > *below && step <= at_most) *below = (long)step;
        }
    int read_error = fc_getline_error(f);
    free(line);
    fclose(f);
    if (read_error) fc_die("%s: cannot read: %s", path, strerror(read_error));
    return last;
}

long run_folder_metrics_last_step(const char *run) {
    long below;
    return metrics_last_step(run, 0, &below);
}

void run_folder_restart_point(const char *parent, int parent_step, char *out, size_t len) {
    if (parent) snprintf(out, len, "its parent %.1100s (step %d)", parent, parent_step);
    else snprintf(out, len, "step 0");
}

// The parent one file's metadata names: its parent key, else its lineage's last "forked from" line (the
// newest fork's), each "PATH (step N, crc32 X)". 1 with PATH and N, 0 where it names none, -1 where its
// metadata does not read.
static int file_names_parent(const char *path, char *parent, size_t len, int *step) {
    StFile f;
    char why[1024];
    if (st_read_header(path, &f, why, sizeof why)) return -1;
    const char *named = st_meta(&f, "parent"), *lineage = st_meta(&f, "lineage");
    const char *end = named ? strstr(named, " (step ") : NULL;
    for (const char *line = end ? NULL : lineage; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *at = strstr(line, " (step "), *nl = strchr(line, '\n');
        if (!strncmp(line, "forked from ", 12) && at && (!nl || at < nl)) end = at, named = line + 12;
    }
    if (end) {
        snprintf(parent, len, "%.*s", (int)(end - named), named);
        *step = atoi(end + 7);
    }
    st_free(&f);
    return end != NULL;
}

int run_folder_named_parent(const char *run, char *parent, size_t len, int *step) {
    int *steps, n = checkpoint_list(run, &steps), found = -1;
    char path[4096];
    for (int i = 0; i < n && found < 1; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        int r = file_names_parent(path, parent, len, step);
        found = r > found ? r : found;
    }
    free(steps);
    DIR *d = found < 1 ? opendir(run) : NULL;
    for (struct dirent *e; d && found < 1 && (e = readdir(d));) {
        if (strncmp(e->d_name, "ckpt-", 5) || !strstr(e->d_name, ".safetensors.unusable")) continue;
        snprintf(path, sizeof path, "%s/%s", run, e->d_name);
        int r = file_names_parent(path, parent, len, step);
        found = r > found ? r : found;
    }
    if (d) closedir(d);
    return found;
}

// A run that starts from step 0 or, a fork, from its parent (origin->from, at origin->parent_step) in
// a folder where no checkpoint can be resumed from: the folder must not hold a run trained before,
// which a start from scratch would throw away without a word (its metrics.jsonl cut back to the
// start). What says it was: checkpoints set aside as damaged, or metrics lines past the start + 2
// checkpoint_every (a step after the second checkpoint is logged only once the first is on disk: a
// power cut before it leaves fewer lines) or, a fork's, lines at or below its parent's step (another
// run's) past 2 checkpoint_every; damaged: how many this start found. 0, or -1 with one line
// in err saying what to do.
static int trained_before(const char *run, const TrainOrigin *origin, const Config *c, int damaged, char *err,
                          size_t errlen) {
    int start = origin->from ? origin->parent_step : 0;
    int aside = run_folder_set_aside(run);
    aside = aside > damaged ? aside : damaged;  // (a file that could not be renamed aside counts too)
    long other;
    long last = metrics_last_step(run, start, &other);
    // a fork's steps come after its parent's: lines up to it are another run's, which the start from
    // the parent drops as a start from step 0 would (a run killed before its first checkpoint)
    if (!origin->from) other = 0;
    if (!aside && last <= start + 2LL * c->checkpoint_every && other <= 2LL * c->checkpoint_every) return 0;
    char held[160] = "", from[1300];
    if (aside)
        snprintf(held, sizeof held, "%d damaged checkpoint%s set aside as ckpt-*.unusable%s", aside,
                 aside == 1 ? "" : "s", last > start || other ? ", " : "");
    if (last > start || other)
        snprintf(held + strlen(held), sizeof held - strlen(held), "metrics.jsonl up to step %ld", last);
    run_folder_restart_point(origin->from, start, from, sizeof from);
    return fc_errf(err, errlen, "%s: no checkpoint here can be resumed from, but the run was trained before (%s): "
                   "starting it again from %s would lose it; fork a checkpoint you trust into a new run (train --from "
                   "CKPT --run NEW), or, to start from %s here on purpose, move the .unusable files and metrics.jsonl "
                   "out of %s", run, held, from, origin->from ? "its parent" : from, run);
}

// A newer file than the one the run resumes from, not a whole checkpoint of it, renamed aside; where it
// cannot be (a folder this user may not change), the run stops before its first step: it would write
// that step's checkpoint under the same name and fail there, after the steps to it, at every rerun.
static void set_aside_or_die(const char *path, const char *why) {
    if (!checkpoint_set_aside(path, why)) return;
    fc_die("%s; cannot rename it aside: %s, and the run would fail writing its checkpoint of that step over it: move "
           "it out of its folder (or run as a user who may rename it there) and run the same command again", why,
           strerror(errno));
}

// Load the newest checkpoint that checks out; returns 1 (its path in `loaded`), or 0 when the folder
// has none. A folder whose checkpoints are all damaged ends the program (trained_before: a fork's
// would start again from its parent).
static int resume(const char *run, Model *m, real *ema, Optimizer *o, const Config *c, const TrainOrigin *origin,
                  CkptLoadMode mode, TrainState *st, char *loaded) {
    int *steps, n = checkpoint_list(run, &steps), resumed = 0;
    char path[4096], err[4096];
    for (int i = 0; i < n && !resumed; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        CkptStatus s = checkpoint_load(path, m, ema, o, c, mode, st, err, sizeof err);
        // a file named for another step than its metadata's is set aside below, whatever its config says
        char why[1024];
        if (s == CKPT_REFUSED && checkpoint_precheck(path, steps[i], c, mode, NULL, why, sizeof why) != CKPT_CORRUPT)
            fc_die("%s", err);
        if (s == CKPT_REFUSED) {
            snprintf(err, sizeof err, "%s: its metadata names another step than its file name", path);
            set_aside_or_die(path, err);
            continue;
        }
        // A newer file that is not a whole checkpoint of this run is set aside, so that pruning
        // never counts it as one of the checkpoints it keeps.
        if (s == CKPT_CORRUPT) {
            if (checkpoint_cannot_open(path, err, sizeof err)) fc_die("%s", err);
            set_aside_or_die(path, err);
            continue;
        }
        if (st->step != steps[i]) {
            snprintf(err, sizeof err, "%s: its metadata says step %d", path, st->step);
            set_aside_or_die(path, err);
            continue;
        }
        printf("resuming %s from step %d (%s)\n", FC_ESCAPED(run), st->step, FC_ESCAPED(path));
        snprintf(loaded, 4096, "%s", path);
        resumed = 1;
    }
    free(steps);
    if (n && !resumed && trained_before(run, origin, c, n, err, sizeof err)) fc_die("%s", err);  // (it does: n > 0)
    return resumed;
}

// A checkpoint of run at path (its metadata in st) continues this command's run beyond its config: it
// was trained on the same data and, for train --from, it is a fork of that parent. 0, or -1 with one
// line in err.
static int continues_this_run(const char *run, const char *path, const TrainState *st, const TrainOrigin *origin,
                              char *err, size_t errlen) {
    if (origin->from && !lineage_is_fork_of(st->parent, origin))
        return fc_errf(err, errlen, "%s: holds a run that is not a fork of %s (%s); --from starts a new run: give "
                       "--run a new folder", run, origin->from, st->parent[0] ? st->parent : "it has no parent");
    if (!lineage_same_data(st->data, origin->data))
        return fc_errf(err, errlen, "%s: written on the data of %s, but this run has %s; a checkpoint continues only "
                       "its own run (train --from %s --run NEW --data ... forks it onto other data)", run, st->data,
                       origin->data, path);
    return 0;
}

int run_folder_busy(const char *run, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", run);
    int fd = open(path, O_RDONLY | O_CLOEXEC), busy = 0;
    if (fd < 0) return 0;
    if (flock(fd, LOCK_EX | LOCK_NB)) busy = errno == EWOULDBLOCK;
    close(fd);  // (releases the lock where it was taken)
    return busy ? fc_errf(err, errlen, RUN_BUSY, run) : 0;
}

int run_folder_precheck(const char *run, const Config *c, const TrainOrigin *origin, char *err, size_t errlen) {
    // another train at work in the folder is said first: its checkpoints, which the checks below read,
    // are its own run's and change as they are read
    if (run_folder_busy(run, err, errlen)) return -1;
    int *steps, n = checkpoint_list(run, &steps);
    char path[4096];
    CkptStatus s = CKPT_CORRUPT;
    TrainState st;
    for (int i = 0; i < n && s == CKPT_CORRUPT; i++) {  // newest first, as resume reads them
        checkpoint_path(path, sizeof path, run, steps[i]);
        s = checkpoint_precheck(path, steps[i], c, origin->extend ? CKPT_EXTEND : CKPT_CONTINUE, &st, err, errlen);
        if (s == CKPT_CORRUPT && checkpoint_cannot_open(path, err, errlen)) {  // the resume would stop there
            free(steps);
            return -1;
        }
    }
    free(steps);
    // a folder with no checkpoint left that was trained before: refused as the start would refuse it
    if (!n && trained_before(run, origin, c, 0, err, errlen)) return -1;
    if (s == CKPT_OK) return continues_this_run(run, path, &st, origin, err, errlen);
    if (s == CKPT_CORRUPT && origin->from)  // no checkpoint of its own: a fork starts from its parent
        s = checkpoint_precheck(origin->from, -1, c, CKPT_FORK, NULL, err, errlen);
    return s == CKPT_REFUSED ? -1 : 0;
}

int run_folder_start_from(const char *run, Model *m, real *ema, Optimizer *o, const Config *c,
                          const TrainOrigin *origin, TrainState *st, char *loaded, CkptLoadMode *mode) {
    char err[4096];
    *mode = origin->extend ? CKPT_EXTEND : CKPT_CONTINUE;
    loaded[0] = 0;
    int resumed = resume(run, m, ema, o, c, origin, *mode, st, loaded);
    // (run_folder_precheck said so before anything was printed, from the file a resume reads where its
    // tensors check)
    if (resumed && continues_this_run(run, loaded, st, origin, err, sizeof err)) fc_die("%s", err);
    if (resumed && !st->data[0] && origin->data[0]) {  // an earlier build's checkpoint, before the data record
        char note[600];
        snprintf(note, sizeof note, "data recorded from step %d on (its earlier checkpoints have none): %.500s",
                 st->step, origin->data);
        fc_warn("%s: its checkpoints do not record the data they were trained on (an earlier framechain wrote "
                "them): resuming on %s unchecked", run, origin->data);
        lineage_append(st->lineage, sizeof st->lineage, note);
    }
    if (resumed && origin->extend && origin->note[0]) {
        lineage_append(st->lineage, sizeof st->lineage, origin->note);
        printf("%s: %s\n", FC_ESCAPED(run), FC_ESCAPED(origin->note));
    }
    // (said by run_folder_precheck where the folder lists no checkpoint; here, where the resume set
    // every one aside)
    if (!resumed && trained_before(run, origin, c, 0, err, sizeof err)) fc_die("%s", err);
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
    printf("forking %s from %s\n", FC_ESCAPED(run), FC_ESCAPED(origin->note + strlen("forked from ")));
    return 1;
}

void run_folder_explain_orphan(const char *run, const char *from, char *err, size_t errlen) {
    int *steps, n = checkpoint_list(run, &steps), aside = run_folder_set_aside(run), whole = 0;
    char path[4096], why[1024], newest[1024] = "";
    for (int i = 0; i < n && !whole; i++) {  // newest first, as the resume would take them
        int step = -1;
        checkpoint_path(path, sizeof path, run, steps[i]);
        CkptStatus s = checkpoint_check(path, &step, why, sizeof why);
        whole = s == CKPT_OK && step == steps[i];
        if (s == CKPT_OK && !whole) snprintf(why, sizeof why, "%s: its metadata says step %d", path, step);
        if (!i) snprintf(newest, sizeof newest, "%s", why);
    }
    free(steps);
    if (whole) {  // a run of its own, which is not this parent's fork
        StFile f;
        int read = !st_read_header(path, &f, why, sizeof why);
        const char *parent = read ? st_meta(&f, "parent") : NULL;
        if (read && !lineage_names_parent(parent, from))
            fc_errf(err, errlen, "%s: holds a run that is not a fork of %s (%s); --from starts a new run: give --run a "
                    "new folder", run, from, parent ? parent : "its checkpoints name no parent");
        if (read) st_free(&f);
        return;
    }
    if (!n && !aside) return;  // nothing of its own: the parent's line says it all
    // the damaged files' metadata may still say whose fork they are: another parent's, or none
    char named[1200] = "", as_recorded[1300];
    int named_step = 0, names = run_folder_named_parent(run, named, sizeof named, &named_step);
    snprintf(as_recorded, sizeof as_recorded, "%s (step %d)", named, named_step);
    if (names == 1 && !lineage_names_parent(as_recorded, from)) {
        fc_errf(err, errlen, "%s: holds a run that is not a fork of %s (its damaged checkpoints name %s): --from starts "
                "a new run: give --run a new folder", run, from, as_recorded);
        return;
    }
    if (names == 0) {
        fc_errf(err, errlen, "%s: holds a run that is not a fork of %s (its damaged checkpoints name no parent): --from "
                "starts a new run: give --run a new folder", run, from);
        return;
    }
    char parent_why[1024], held[1200] = "";
    snprintf(parent_why, sizeof parent_why, "%s", err);
    if (n)
        snprintf(held, sizeof held, "%d damaged checkpoint%s, the newest %s%s", n, n == 1 ? "" : "s", newest,
                 aside ? "; " : "");
    if (aside)
        snprintf(held + strlen(held), sizeof held - strlen(held), "%d set aside as damaged before, ckpt-*.unusable",
                 aside);
    fc_errf(err, errlen, "%s: none of this fork's checkpoints can be resumed from (%s), and its parent cannot be read "
            "(%s): nothing to go on from; put the parent's file back (train then says how to start the fork again "
            "from it) or fork a checkpoint you trust into a new run (train --from CKPT --run NEW)", run, held,
            parent_why);
}

// ----------------------------------------------------------------------------
// the disk a run folder needs

// How many checkpoints the folder holds at most: held ones and writes more, pruned to keep after each write
// (so keep and the one being written where the run writes enough to fill it).
static int disk_peak_count(int keep, int held_n, int writes) {
    return held_n + writes < keep + 1 ? held_n + writes : keep + 1;
}

int run_folder_checkpoint_writes(int first, int last, int every) {
    if (first > last) return 0;
    return last / every - (first - 1) / every + (last % every != 0);
}

void run_folder_disk_needs(char *buf, size_t len, double ckpt_bytes, int keep, int held_n, int writes) {
    const char *u1, *u2;
    int peak_n = disk_peak_count(keep, held_n, writes);
    double one = fc_bytes_in_unit(ckpt_bytes, &u1), all = fc_bytes_in_unit(peak_n * ckpt_bytes, &u2);
    char why[160];
    if (peak_n == keep + 1)
        snprintf(why, sizeof why, "keep_checkpoints %d and the one being written", keep);
    else if (held_n)
        snprintf(why, sizeof why, "the %d it holds and the %d this run writes; keep_checkpoints %d", held_n, writes,
                 keep);
    else
        snprintf(why, sizeof why, "the %d this run writes; keep_checkpoints %d", writes, keep);
    snprintf(buf, len, "a checkpoint is %.2f %s; the run folder holds up to %d of them (%s): %.2f %s", one, u1, peak_n,
             why, all, u2);
}

int run_folder_disk_plan(const char *run, double ckpt_bytes, int keep, int writes, char *err, size_t errlen) {
    int *steps = NULL, n = checkpoint_list(run, &steps);
    double held = 0;
    for (int i = 0; i < n; i++) {
        char path[4200];
        struct stat sb;
        checkpoint_path(path, sizeof path, run, steps[i]);
        if (!stat(path, &sb)) held += (double)sb.st_size;
    }
    free(steps);
    // the checkpoints this run writes beside those held; where they fill the folder past keep, prune drops
    // the oldest after each write: keep on disk and the next one beside them. What the folder holds already
    // counts, but the next checkpoint needs its whole size free.
    int peak_n = disk_peak_count(keep, n, writes);
    double more = n + writes <= keep + 1 ? writes * ckpt_bytes : (keep + 1) * ckpt_bytes - held;
    if (more < ckpt_bytes) more = ckpt_bytes;
    double free_bytes = fc_disk_free(run);
    char needs[256];
    run_folder_disk_needs(needs, sizeof needs, ckpt_bytes, keep, n, writes);
    const char *u1, *u2, *u3, *u4;
    double v1 = fc_bytes_in_unit(ckpt_bytes, &u1), v3 = fc_bytes_in_unit(free_bytes > 0 ? free_bytes : 0, &u3);
    if (free_bytes < 0) {  // a file system that does not say: the writes will tell
        printf("disk: %s\n", needs);
        return 0;
    }
    printf("disk: %s; %.2f %s free there\n", needs, v3, u3);
    if (free_bytes < ckpt_bytes)
        return fc_errf(err, errlen, "%s: %.2f %s free on its file system, less than one checkpoint (%.2f %s): no "
                       "checkpoint of this run could be written; free space there, or give --run a folder on another "
                       "disk", run, v3, u3, v1, u1);
    if (free_bytes < more) {
        double vm = fc_bytes_in_unit(more, &u2), vh = fc_bytes_in_unit(held, &u4);
        char held_text[64] = "";
        if (held > 0) snprintf(held_text, sizeof held_text, ", less the %.2f %s it holds", vh, u4);
        fc_warn("%s: %.2f %s free on its file system, less than the %.2f %s more its checkpoints will take (%d of "
                "%.2f %s%s): a checkpoint write will fail with the disk full and stop the run (the earlier checkpoints "
                "kept); free space%s", run, v3, u3, vm, u2, peak_n, v1, u1, held_text,
                keep > 1 && peak_n == keep + 1 ? ", or lower keep_checkpoints" : "");
    }
    return 0;
}
