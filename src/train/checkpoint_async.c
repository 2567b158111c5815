// checkpoint_async.c: the checkpoint writer (see checkpoint.h). The trainer's thread only issues
// the copies into one staging buffer; a background thread waits for them, computes the CRCs and
// writes the file through ckpt_write_staged, the same code as checkpoint_save, so the file and its
// crash safety are those of a synchronous checkpoint.
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "train/checkpoint_internal.h"
#include "base/clock.h"
#include "dist/dist.h"
#include "train/run_folder.h"

struct CkptWriter {
    const Backend *be;
    char run[4096];
    int run_lock;  // the run folder's lock (run_folder_open), checked before each write; -1: none
    Config c;
    FILE *log;
    int synchronous;
    int part_ranks;      // ZeRO-1: the ranks whose parts of the EMA and optimizer state are gathered (0: none)
    int32_t block_size;  // optim.block_size points here
    CkptTable tab;       // every tensor's host side points into staging
    uint8_t *staging;
    size_t staging_bytes;
    int copy_pending;  // the trainer's own: copies issued that it has not waited for yet
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    // ---- under mu ----
    int queued;   // submitted, not yet picked up by the thread
    int writing;  // submitted, not yet written (queued or being written)
    int quit;
    TrainState st;  // of the last submit
    // The last submit's account for its log line, printed once it is written and the trainer has
    // done all its waiting for it (whichever comes second prints).
    double copy_ms, wait_ms, write_s;
    int waited, written, logged;
    int failed;  // a write failed: err says which and why; reported from then on
    char err[8400];
};


// ----------------------------------------------------------------------------
// the account of a checkpoint (all under mu)

static void log_if_done(CkptWriter *w) {
    if (!w->log || w->logged || !w->written || !w->waited || w->failed) return;
    char path[4096];
    checkpoint_path(path, sizeof path, w->run, w->st.step);
    // One line of its own beside the trainer's progress line, which it ends first (from this thread too)
    fc_line(w->log, "checkpoint %s (blocked %.1f ms: copy %.1f + wait %.1f; written in %.2f s %s)", FC_ESCAPED(path),
            w->copy_ms + w->wait_ms, w->copy_ms, w->wait_ms, w->write_s,
            w->synchronous ? "synchronously" : "in the background");
    w->logged = 1;
}

// The trainer waited `ms` for the last submit (the copies, or the write itself): that ends its
// account. Returns 0 when its account was already closed.
static int end_wait(CkptWriter *w, double ms) {
    if (w->waited) return 0;
    w->wait_ms += ms;
    w->waited = 1;
    log_if_done(w);
    return 1;
}

static int report(CkptWriter *w, char *err, size_t errlen) {
    pthread_mutex_lock(&w->mu);
    int failed = w->failed;
    if (failed) snprintf(err, errlen, "%s", w->err);
    pthread_mutex_unlock(&w->mu);
    return failed ? -1 : 0;
}

// Until nothing submitted is left to write; returns the milliseconds that took. Called under mu.
static double wait_written(CkptWriter *w) {
    double t0 = fc_now_s();
    while (w->writing) pthread_cond_wait(&w->cv, &w->mu);
    return 1e3 * (fc_now_s() - t0);
}

// ----------------------------------------------------------------------------
// the background thread

static void *writer_main(void *arg) {
    CkptWriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->queued && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->queued) break;  // a checkpoint still queued at quit is written first
        w->queued = 0;
        TrainState st = w->st;
        pthread_mutex_unlock(&w->mu);

        double t0 = fc_now_s();
        w->be->download_wait();
        char why[8300];
        // the folder renamed away: RUN may now be another run's, whose checkpoints the prune would delete
        int moved = w->run_lock >= 0 && run_folder_still_held(w->run, w->run_lock, why, sizeof why);
        // and again just before the rename and the pruning (-2: moved while the file was written)
        int rc = moved ? -1 : ckpt_write_staged(w->run, w->run_lock, &w->tab, &w->c, &st, why, sizeof why);
        moved |= rc == -2;
        double dt = fc_now_s() - t0;

        pthread_mutex_lock(&w->mu);
        w->write_s = dt, w->written = 1, w->writing = 0;
        if (rc && !w->failed) {
            w->failed = 1;
            if (moved) snprintf(w->err, sizeof w->err, "%s", why);
            else
                snprintf(w->err, sizeof w->err, "checkpoint at step %d failed: %s (the earlier checkpoints are "
                         "untouched)", st.step, why);
        }
        log_if_done(w);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

// ----------------------------------------------------------------------------
// the trainer's side

CkptWriter *ckpt_writer_start(const char *run, const Model *m, const real *ema, const Optimizer *o,
                              const Config *c, int run_lock, FILE *log, int synchronous) {
    CkptWriter *w = fc_calloc(1, sizeof *w);
    w->run_lock = run_lock;
    if (snprintf(w->run, sizeof w->run, "%s", run) >= (int)sizeof w->run) fc_die("%.200s...: path too long", run);
    w->be = m->be, w->c = *c, w->log = log, w->synchronous = synchronous;
    w->block_size = ADAM8_BLOCK;
    w->tab = ckpt_build_table(m, ema, o, &w->block_size);
    w->staging_bytes = ckpt_stage(&w->tab, NULL);
    w->staging = w->be->host_alloc(w->staging_bytes);  // once, for every checkpoint of the run
    ckpt_stage(&w->tab, w->staging);
    w->part_ranks = o->lo != 0 || o->hi != m->n_params ? dist_size() : 0;
    w->waited = w->written = w->logged = 1;  // no checkpoint yet
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    // SIGINT, SIGTERM and SIGHUP are the trainer's (they stop the run after a checkpoint): the
    // writer's thread never takes them.
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) fc_die("cannot start the checkpoint writer's thread: %s", strerror(rc));
    return w;
}

size_t ckpt_writer_staging_bytes(const CkptWriter *w) { return w->staging_bytes; }

int ckpt_writer_submit(CkptWriter *w, const TrainState *s, double *blocked_ms, char *err, size_t errlen) {
    double t0 = fc_now_s();
    // The staging buffer is the previous checkpoint's until it is written.
    pthread_mutex_lock(&w->mu);
    double ms = wait_written(w);
    if (end_wait(w, ms)) ms = 0;  // the previous checkpoint's account, when the trainer never waited for it
    pthread_mutex_unlock(&w->mu);
    if (report(w, err, errlen)) {
        *blocked_ms += 1e3 * (fc_now_s() - t0);
        return -1;
    }
    double t1 = fc_now_s();
    for (int i = 0; i < w->tab.n; i++) {
        const CkptTensor *t = &w->tab.t[i];
        if (t->device) w->be->download_async((uint8_t *)t->host + t->part_offset, t->device, t->part_bytes);
    }
    for (int r = 1; r < w->part_ranks; r++) ckpt_receive_parts(&w->tab, r);  // the other ranks' parts
    double t2 = fc_now_s();
    pthread_mutex_lock(&w->mu);
    w->st = *s;
    w->copy_ms = 1e3 * (t2 - t1), w->wait_ms = ms;
    w->waited = w->written = w->logged = 0;
    w->queued = w->writing = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    w->copy_pending = 1;
    *blocked_ms += 1e3 * (t2 - t0);
    return w->synchronous ? ckpt_writer_finish(w, blocked_ms, err, errlen) : 0;
}

int ckpt_writer_wait_copy(CkptWriter *w, double *blocked_ms, char *err, size_t errlen) {
    if (w->copy_pending) {
        double t0 = fc_now_s();
        w->be->download_wait();
        double ms = 1e3 * (fc_now_s() - t0);
        w->copy_pending = 0;
        *blocked_ms += ms;
        pthread_mutex_lock(&w->mu);
        end_wait(w, ms);
        pthread_mutex_unlock(&w->mu);
    }
    return report(w, err, errlen);
}

int ckpt_writer_finish(CkptWriter *w, double *blocked_ms, char *err, size_t errlen) {
    pthread_mutex_lock(&w->mu);
    double ms = wait_written(w);
    end_wait(w, ms);
    pthread_mutex_unlock(&w->mu);
    w->copy_pending = 0;
    if (blocked_ms) *blocked_ms += ms;
    return report(w, err, errlen);
}

void free_ckpt_writer(CkptWriter *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->be->host_free(w->staging);
    free(w->tab.t);
    free(w);
}
