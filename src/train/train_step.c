// train_step.c: one step of the hot loop: the batch, the forward and backward, the sum of the
// gradients over the ranks, the optimizer's update, and the step's metrics line and progress.
#include <errno.h>
#include <math.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/train_internal.h"
#include "base/clock.h"
#include "backend/registry.h"
#include "model/flow.h"
#include "dataset/moving_shapes.h"
#include "dist/dist.h"
#include "train/run_folder.h"

// The clean windows of `step` into x0; returns the seconds that took (the loader's wait).
double trainer_load_batch(Trainer *t, int step, double t0) {
    const Config *c = t->c;
    size_t bytes = sizeof(real) * (size_t)t->m->S * t->m->E;
    double t_data;
    char err[ERR_LEN];
    if (t->loader) {
        const real *batch = loader_get(t->loader, step, &t_data, err, sizeof err);
        if (!batch) {
            trainer_finish_or_die(t->writer);
            fc_die("step %d: %s", step, err);
        }
        memcpy(t->host_x0, batch, bytes);
    } else {
        shapes_batch(t->host_x0, c, t->m->B, t->b0, (uint64_t)c->seed, (uint32_t)step);
        t_data = fc_now_s() - t0;
    }
    if (fc_test_hook("NAN_AT_STEP") == step) t->host_x0[0] = NAN;  // a corrupt sample, for the tests
    flow_corrupt_context(c, t->m->B, t->b0, t->host_x0, (uint64_t)c->seed, (uint32_t)step);
    flow_delta_targets(c, t->m->B, t->host_x0);
    t->be->upload(t->x0, t->host_x0, bytes);
    return t_data;
}

// A loss that is not finite ends the run, naming the checkpoint it leaves. Every rank sees the same
// global loss; the others wait for rank 0 to finish its checkpoint and say so (its exit ends them).
static void die_on_bad_loss(Trainer *t, int step, double loss) {
    if (isfinite(loss)) return;
    if (t->rank > 0) {
        dist_barrier();
        exit(1);
    }
    trainer_finish_or_die(t->writer);  // so that the checkpoint named below is the newest on disk
    int *steps, n = checkpoint_list(t->run, &steps);
    const char *what = isnan(loss) ? "NaN" : "infinite";
    // The weights of the step just before are the ones whose forward gave this loss: a fork from them
    // meets it again at any learning rate. The checkpoint named is an older one that a fork can start
    // from: one that passes resume's checks (a step that blew up can leave values no fork takes).
    char last[4096], from[4 * 4096 + 8], data[4 * 4096 + 16] = "", vae[4 * 4096 + 16] = "";  // a quote: 4 bytes
    int k = 0, unusable = 0;
    while (k < n && steps[k] >= step - 1) k++;
    for (; k < n; k++) {
        char why[1024];
        checkpoint_path(last, sizeof last, t->run, steps[k]);
        if (checkpoint_check(last, NULL, why, sizeof why) == CKPT_OK) break;
        unusable++;
    }
    if (k == n) {
        free(steps);
        fc_die("the loss is %s at step %d: stopping; %s, so there is nothing to go on from: lower lr (or raise "
               "warmup_steps) and train again", what, step,
               unusable ? "the older checkpoints cannot be resumed from (inspect says why)"
               : n ? "the only checkpoint holds the weights of the step just before, which give it at any learning rate"
                   : "no checkpoint was written before it");
    }
    free(steps);
    // the command goes on on the run's own data (a fork without --data trains on the built-in shapes),
    // with its autoencoder (a run on latents refuses to draw previews without it)
    fc_shell_word(from, sizeof from, last);
    if (t->data) {
        memcpy(data, " --data ", 8);
        fc_shell_word(data + 8, sizeof data - 8, t->data);
    }
    if (t->hooks && t->hooks->vae) {
        memcpy(vae, " --vae ", 7);
        fc_shell_word(vae + 7, sizeof vae - 7, t->hooks->vae);
    }
    fc_die("the loss is %s at step %d: stopping; the last good checkpoint, %s, is kept%s; to go on from it with a "
           "lower learning rate: framechain train --from %s --run NEW_RUN%s%s --set lr=%g", what, step, last,
           unusable ? " (the newer ones cannot be resumed from: inspect says why)"
           : k ? " (the newer one holds the weights of the step just before, which give this loss at any learning rate)"
               : "", from, data, vae, t->c->lr / 2);
}

// The sum over the ranks of the gradients [lo, hi), started as soon as the backward has made them
// (model.h: grads_ready; overlap_grads), while the backward of the blocks before them goes on. On a
// GPU without NCCL the part goes through host memory: its download waits for the kernels that made
// it, not for the ones queued after.
void trainer_start_grad_sum(void *ctx, size_t lo, size_t hi) {
    Trainer *t = ctx;
    real *g = t->m->grads_mem + lo;
    size_t n = hi - lo;
#ifndef FC_DOUBLE  // the GPU is float only: NCCL never starts in the double build (tests/grad)
    if (t->nccl) {
        backend_cuda_nccl_sum_start(g, n);
        return;
    }
#endif
    if (t->on_gpu) t->be->download(t->host_grads + lo, g, sizeof(real) * n), g = t->host_grads + lo;
    dist_sum_real_start(g, n);
    dist_sum_progress();  // MPI moves the started sums on only inside its calls: one at each block
}

// The gradients of the global batch on every rank: each rank's are those of the mean over its own
// windows, so the global mean is the sum over ranks / ranks. On a GPU they go through host memory
// unless NCCL sums them. With overlap_grads the sums were started during the backward: wait for them.
static void reduce_gradients(Trainer *t) {
    if (!t->summing) return;
    size_t n = t->m->n_params;
    real *g = t->m->grads_mem;
    int started = t->m->grads_ready != NULL;
    if (t->nccl) {
#ifndef FC_DOUBLE
        if (started) backend_cuda_nccl_sum_finish();
        else backend_cuda_nccl_sum(g, n);
#endif
        t->be->affine_fwd(g, g, n, (real)1 / (real)t->ranks, 0);
        return;
    }
    if (t->on_gpu) {
        if (!started) t->be->download(t->host_grads, g, sizeof(real) * n);
        g = t->host_grads;
    }
    if (started) dist_sum_wait();
    else dist_sum_real(g, n);
    real scale = (real)1 / (real)t->ranks;
    for (size_t i = 0; i < n; i++) g[i] *= scale;
    if (t->on_gpu) t->be->upload(t->m->grads_mem, g, sizeof(real) * n);
}

// For the tests: FRAMECHAIN_TEST_GRADS_AT_STEP=s writes step s's gradients, as the optimizer gets
// them (after the sum over ranks), to RUN/grads-s.bin (n_params host reals), from rank 0.
static void dump_gradients(Trainer *t, int step) {
    if (t->rank > 0 || fc_test_hook("GRADS_AT_STEP") != step) return;
    size_t bytes = sizeof(real) * t->m->n_params;
    real *g = fc_malloc(bytes);
    t->be->download(g, t->m->grads_mem, bytes);
    char path[4200];
    snprintf(path, sizeof path, "%s/grads-%d.bin", t->run, step);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(g, 1, bytes, f) != bytes || fclose(f)) fc_die("%s: cannot write", path);
    free(g);
}

// ZeRO-1: every rank's part of src (backend memory, (hi - lo) values of the flat parameters from this
// rank's lo; the part of m->params_mem itself after an update, or the EMA) gathered into m->params_mem
// on every rank.
void trainer_gather_parts(Trainer *t, const real *src) {
    size_t lo = t->o->lo, n = t->o->hi - lo;
    real *own = t->m->params_mem + lo;
    if (!t->on_gpu || t->nccl) {  // the CPU backend's memory is the host's; NCCL's the device's
        if (src != own) t->be->copy(own, src, sizeof(real) * n);
#ifndef FC_DOUBLE
        if (t->nccl) backend_cuda_nccl_gather(t->m->params_mem, t->part_start);
        else
#endif
            dist_allgather_real(t->m->params_mem, t->part_start);
        return;
    }
    t->be->download(t->host_grads + lo, src, sizeof(real) * n);
    dist_allgather_real(t->host_grads, t->part_start);
    t->be->upload(t->m->params_mem, t->host_grads, sizeof(real) * t->m->n_params);
}

// Forward, backward and the optimizer step on the batch in x0.
void trainer_update_weights(Trainer *t, int step, StepReport *r) {
    const Config *c = t->c;
    char err[ERR_LEN];
    flow_prepare_batch(t->m, t->x0, t->b0, (uint64_t)c->seed, (uint32_t)step);
    model_forward(t->m);
    r->loss = model_loss(t->m);
    if (t->ranks > 1) {  // the mean over the global batch: every rank has as many windows
        dist_sum_double(&r->loss, 1);
        r->loss /= t->ranks;
    }
    die_on_bad_loss(t, step, r->loss);
    model_backward(t->m);  // overwrites every parameter's gradient: no zeroing pass
    reduce_gradients(t);
    dump_gradients(t, step);
    // The optimizer step and the EMA update write what the last checkpoint may still be copying.
    if (t->writer && ckpt_writer_wait_copy(t->writer, &t->ckpt_blocked_ms, err, sizeof err)) fc_die("%s", err);
    r->lr = lr_schedule(c, step);
    // The EMA warms up: early on it averages over about step/10 steps, so that a short run's EMA is
    // not mostly the zero-initialised weights it started from. It is updated in the optimizer's
    // pass over the parameters (the same bytes as a separate ema_update, one read of them less).
    double decay = fmin(c->ema_decay, (1.0 + step) / (10.0 + step));
    r->info = optimizer_step(t->o, t->m, c, step, r->lr, t->ema, decay);
    if (t->shard) trainer_gather_parts(t, t->m->params_mem + t->o->lo);  // each rank updated its part
    t->st.step = step;
    t->st.smooth_loss = step == 1 ? r->loss : 0.98 * t->st.smooth_loss + 0.02 * r->loss;
}

void trainer_write_metrics(Trainer *t, int step, const StepReport *r) {
    struct stat st;  // the file's length before the line (each line is flushed: none is in the buffer)
    off_t before = fstat(fileno(t->metrics), &st) ? -1 : st.st_size;
    fprintf(t->metrics,
            "{\"step\":%d,\"loss\":%.7g,\"smooth_loss\":%.7g,\"lr\":%.6g,\"grad_norm\":%.6g,\"nonfinite_grads\":%zu,"
            "\"data_wait_ms\":%.3f,\"step_ms\":%.3f,\"ckpt_blocked_ms\":%.3f}\n",
            step, r->loss, t->st.smooth_loss, r->lr, r->info.grad_norm, r->info.nonfinite, 1e3 * r->t_data,
            1e3 * r->t_step, t->ckpt_blocked_ms);
    // A line that cannot be written stops the run, as a checkpoint that cannot: a full disk is
    // not a reason to go on without a record of the steps.
    if (fflush(t->metrics) || ferror(t->metrics)) {
        int e = errno;
        // the part of the line that reached the file goes, and exit's flush writes none of the rest:
        // the file ends at its last whole line, not in half a record the next start calls torn
        __fpurge(t->metrics);
        if (before >= 0 && ftruncate(fileno(t->metrics), before)) fc_warn("%s/metrics.jsonl: cannot cut back its "
                                                                          "torn last line: %s", t->run, strerror(errno));
        trainer_finish_or_die(t->writer);
        fc_die("%s/metrics.jsonl: cannot write the line of step %d: %s; stopping (the checkpoints are whole: %s, "
               "then run the same command to go on)", t->run, step, strerror(e), fc_write_fix(e));
    }
    t->ckpt_blocked_ms = 0;
}

// On a terminal every step; otherwise the last step and one line per 10 seconds.
void trainer_print_progress(Trainer *t, int step, double loss, int last) {
    const Config *c = t->c;
    double now = fc_now_s(), rate = (step - t->first + 1) / (now - t->t_start);
    if (!t->tty && !last && now - t->t_last_line <= 10) return;
    char eta[32];
    fc_format_duration(eta, sizeof eta, (c->steps - step) / rate);
    char preview[64] = "";
    if (t->previews)  // the previews' share of the time since this process started training
        snprintf(preview, sizeof preview, "  previews %.1f s (%.1f%%)", t->preview_s,
                 100 * t->preview_s / (now - t->t_start));
    if (t->tty)  // rewritten in place, cut to the terminal's width; a message ends it first (common.h)
        fc_progress(stdout, "step %d/%d  loss %.4f  smooth %.4f  %.2f steps/s  ETA %s%s", step, c->steps, loss,
                    t->st.smooth_loss, rate, eta, preview);
    else
        printf("step %d/%d  loss %.4f  smooth %.4f  %.2f steps/s  ETA %s%s\n", step, c->steps, loss,
               t->st.smooth_loss, rate, eta, preview);
    fflush(stdout);
    t->t_last_line = now;
}
