// train.c: the training loop. Every random draw is a function of (seed, step), the optimizer state
// is in every checkpoint, and so a resumed run repeats the uninterrupted one bit for bit.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "train/checkpoint.h"
#include "model/flow.h"
#include "dataset/loader.h"
#include "model/memplan.h"
#include "model/model.h"
#include "model/optim.h"
#include "dataset/moving_shapes.h"
#include "formats/shards.h"
#include "train/train.h"
#include "base/clock.h"
#include "base/paths.h"

static volatile sig_atomic_t g_stop_signal = 0;

static void on_stop_signal(int sig) {
    g_stop_signal = sig;
    signal(sig, SIG_DFL);  // a second Ctrl-C ends at once; the checkpoint files are safe either way
}



// ----------------------------------------------------------------------------
// the run folder

// One trainer per run folder: a second one would race the first's checkpoints.
static int lock_run(const char *run) {
    char path[4096];
    snprintf(path, sizeof path, "%s/.lock", run);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) fc_die("%s: cannot open the run's lock file: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) fc_die("%s: another framechain train is using this run folder", run);
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

// Keep the metrics of steps 1..last only (a killed run may have logged steps past its checkpoint),
// so that the file of a resumed run reads like that of an uninterrupted one.
static FILE *open_metrics(const char *run, int last) {
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
    return f;
}

// ----------------------------------------------------------------------------

// Load the newest checkpoint that checks out; returns its step, or 0 when the folder has none.
static int resume(const char *run, Model *m, real *ema, Optimizer *o, const Config *c, TrainState *st) {
    int *steps, n = checkpoint_list(run, &steps), resumed = 0;
    char path[4096], err[1024];
    for (int i = 0; i < n && !resumed; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        CkptStatus s = checkpoint_load(path, m, ema, o, c, st, err, sizeof err);
        if (s == CKPT_REFUSED) fc_die("%s", err);
        if (s == CKPT_CORRUPT) {
            fc_warn("skipping %s", err);
            continue;
        }
        if (st->step != steps[i]) {
            fc_warn("skipping %s: its metadata says step %d", path, st->step);
            continue;
        }
        printf("resuming %s from step %d (%s)\n", run, st->step, path);
        resumed = 1;
    }
    free(steps);
    if (n && !resumed)
        fc_die("%s: none of its %d checkpoints is usable (see above); move them away to start the run again", run, n);
    return resumed;
}

// Before the run ends, for whatever reason: the checkpoint being written is completed (a failed
// write is the error to report: it came first).
static void finish_or_die(CkptWriter *w) {
    char err[1024];
    if (w && ckpt_writer_finish(w, NULL, err, sizeof err)) fc_die("%s", err);
}

int train_run(const Config *c, const char *run, const char *data, const Backend *be, double vram_budget,
              int sync_checkpoints) {
    // From here on a stop signal lets the current step finish and be checkpointed.
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    // The data first: a --data that cannot serve this config ends here, before any work.
    char err[1024];
    Dataset *dataset = NULL;
    if (data) {
        if (!(dataset = dataset_open(data, err, sizeof err))) fc_die("%s", err);
        if (dataset_frame_size(dataset) != c->frame_size || c->channels != 3)
            fc_die("%s: frames are %dx%d RGB, but the config has frame_size = %d and channels = %d", data,
                   dataset_frame_size(dataset), dataset_frame_size(dataset), c->frame_size, c->channels);
    }
    if (fc_mkdir_p(run, err, sizeof err)) fc_die("%s", err);
    int lock = lock_run(run);
    remove_stale_temps(run);

    // The plan before any allocation: a config that cannot fit is refused with the plan shown.
    int on_gpu = strcmp(be->name, "cpu") != 0;
    MemPlan plan = memory_plan(c, c->batch_size, plan_device(be->name, be->precision));
    memory_plan_print(stdout, &plan, be->name, on_gpu ? vram_budget : 0);
    fflush(stdout);
    if (on_gpu && plan.total > vram_budget)
        fc_die("%s: the memory plan (%.2f GiB) exceeds --vram-budget %.2f GiB: lower batch_size, frame_size, width "
               "or depth (or raise the budget)", run, plan.total / 1073741824.0, vram_budget / 1073741824.0);
    Model *m = build_model(c, be, c->batch_size);
    Optimizer *o = build_optimizer(m, c);
    real *ema = be->alloc(sizeof(real) * m->n_params);       // (n_params) EMA of the weights
    real *x0 = be->alloc(sizeof(real) * (size_t)m->S * m->E);  // (B, F, C, H, W) clean windows of the step
    real *host_x0 = fc_malloc(sizeof(real) * (size_t)m->S * m->E);
    model_init(m, (uint64_t)c->seed, 0);
    be->copy(ema, m->params_mem, sizeof(real) * m->n_params);

    TrainState st = {0, 0};
    resume(run, m, ema, o, c, &st);
    printf("framechain train: %s, %zu parameters, batch %d x %d slots, %s\n", run, m->n_params, m->B, m->F,
           be->describe());
    int status = 0;
    FILE *metrics = NULL;
    Loader *loader = NULL;
    CkptWriter *writer = NULL;
    if (st.step >= c->steps) {
        printf("%s is at step %d of %d: nothing to do\n", run, st.step, c->steps);
        goto done;
    }
    if (data) {
        loader = loader_start(be, dataset, c, m->B, (uint64_t)c->seed, st.step + 1, 2, 4, err, sizeof err);
        if (!loader) fc_die("%s", err);
        printf("data: %s, %d clips of %d frames\n", data, dataset_clips(dataset), dataset_clip_frames(dataset));
    }
    metrics = open_metrics(run, st.step);
    int tty = isatty(STDOUT_FILENO), first = st.step + 1;
    // On a terminal the progress line is rewritten in place: no checkpoint lines beside it.
    writer = ckpt_writer_start(run, m, ema, o, c, tty ? NULL : stdout, sync_checkpoints);
    printf("checkpoint staging: %.3g GiB of %shost memory%s\n", ckpt_writer_staging_bytes(writer) / 1073741824.0,
           on_gpu ? "page-locked " : "", sync_checkpoints ? " (synchronous checkpoints)" : "");
    fflush(stdout);

    // The time the loop waited for checkpoints since the last metrics line: a submit comes after its
    // step's line, so its time is on the next step's.
    double ckpt_blocked_ms = 0;
    double t_start = fc_now_s(), t_last_line = 0, t_timed = 0;
    int t_timed_steps = 0;
    // ---- the hot loop: one optimizer update per iteration ----
    for (int step = first; step <= c->steps; step++) {
        double t0 = fc_now_s(), t_data;
        if (loader) {
            const real *batch = loader_get(loader, step, &t_data, err, sizeof err);
            if (!batch) {
                finish_or_die(writer);
                fc_die("step %d: %s", step, err);
            }
            memcpy(host_x0, batch, sizeof(real) * (size_t)m->S * m->E);
        } else {
            shapes_batch(host_x0, c, m->B, (uint64_t)c->seed, (uint32_t)step);
            t_data = fc_now_s() - t0;
        }
        if (fc_test_hook("NAN_AT_STEP") == step) host_x0[0] = NAN;  // a corrupt sample, for the tests
        be->upload(x0, host_x0, sizeof(real) * (size_t)m->S * m->E);
        flow_prepare_batch(m, x0, (uint64_t)c->seed, (uint32_t)step);
        model_forward(m);
        double loss = model_loss(m);
        if (!isfinite(loss)) {
            finish_or_die(writer);  // so that the checkpoint named below is the newest on disk
            int *steps, n = checkpoint_list(run, &steps);
            char last[64] = "none";
            if (n) snprintf(last, sizeof last, "ckpt-%08d.safetensors (step %d)", steps[0], steps[0]);
            free(steps);
            fc_die("the loss is %s at step %d: stopping (lower lr?); the last good checkpoint, %s, is kept",
                   isnan(loss) ? "NaN" : "infinite", step, last);
        }
        model_backward(m);  // overwrites every parameter's gradient: no zeroing pass
        // The optimizer step and the EMA update write what the last checkpoint may still be copying.
        if (ckpt_writer_wait_copy(writer, &ckpt_blocked_ms, err, sizeof err)) fc_die("%s", err);
        double lr = lr_schedule(c, step);
        // The EMA warms up: early on it averages over about step/10 steps, so that a short run's EMA is
        // not mostly the zero-initialised weights it started from. It is updated in the optimizer's
        // pass over the parameters (the same bytes as a separate ema_update, one read of them less).
        double decay = fmin(c->ema_decay, (1.0 + step) / (10.0 + step));
        OptStepInfo info = optimizer_step(o, m, c, step, lr, ema, decay);
        st.step = step;
        st.smooth_loss = step == 1 ? loss : 0.98 * st.smooth_loss + 0.02 * loss;
        double t_step = fc_now_s() - t0;
        if (step >= first + 2) t_timed += t_step, t_timed_steps++;

        fprintf(metrics,
                "{\"step\":%d,\"loss\":%.7g,\"smooth_loss\":%.7g,\"lr\":%.6g,\"grad_norm\":%.6g,\"nonfinite_grads\":%zu,"
                "\"data_wait_ms\":%.3f,\"step_ms\":%.3f,\"ckpt_blocked_ms\":%.3f}\n",
                step, loss, st.smooth_loss, lr, info.grad_norm, info.nonfinite, 1e3 * t_data, 1e3 * t_step,
                ckpt_blocked_ms);
        fflush(metrics);
        ckpt_blocked_ms = 0;

        int last = step == c->steps, stop = g_stop_signal != 0;
        double now = fc_now_s(), rate = (step - first + 1) / (now - t_start);
        if (tty || last || now - t_last_line > 10) {
            char eta[32];
            fc_format_duration(eta, sizeof eta, (c->steps - step) / rate);
            printf("%sstep %d/%d  loss %.4f  smooth %.4f  %.2f steps/s  ETA %s%s", tty ? "\r" : "", step, c->steps,
                   loss, st.smooth_loss, rate, eta, tty ? "   " : "\n");
            fflush(stdout);
            t_last_line = now;
        }
        if (step % c->checkpoint_every == 0 || last || stop) {
            if (tty) printf("\n");
            if (ckpt_writer_submit(writer, &st, &ckpt_blocked_ms, err, sizeof err)) fc_die("%s", err);
        }
        if (stop) {
            finish_or_die(writer);
            printf("stopped by %s at step %d; the checkpoint is written: run the same command to go on\n",
                   g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", step);
            status = 128 + g_stop_signal;
            goto done;
        }
    }
    finish_or_die(writer);
    printf("done: %s at step %d, smoothed loss %.4f\n", run, st.step, st.smooth_loss);
    if (t_timed_steps > 0) {  // the steady state: the first two steps of a process (set-up, caches) left out
        double ms = 1e3 * t_timed / t_timed_steps, flops = model_step_flops(c, m->B);
        printf("speed: %.2f ms per step over %d steps, %.1f frames/s, %.4g TFLOP per step (model FLOPs), "
               "%.4g TFLOP/s\n", ms, t_timed_steps, 1e3 / ms * m->B * m->F, flops / 1e12, flops / ms / 1e9);
    }
    if (be->memory_peak)
        printf("peak %s memory: %.3f GiB measured (plan %.3f GiB)\n", be->name, be->memory_peak() / 1073741824.0,
               plan.total / 1073741824.0);  // three decimals: a MiB, for the small configs
done:
    free_ckpt_writer(writer);  // before the tensors it copies from
    if (loader) loader_stop(loader);
    if (dataset) dataset_close(dataset);
    if (metrics) fclose(metrics);
    free(host_x0);
    be->free(x0);
    be->free(ema);
    free_optimizer(o);
    free_model(m);
    close(lock);
    return status;
}
