// train.c: the training loop. Every random draw is a function of (seed, step), the optimizer state
// is in every checkpoint, and so a resumed run repeats the uninterrupted one bit for bit.
// On several ranks (dist.h) each makes its part of the step's windows and the gradients are summed
// over them; rank 0 owns the run folder (the lock, the metrics, the checkpoints, the previews) and
// the others hold the same weights and optimizer state, computing the same update.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/train_internal.h"
#include "base/address_space.h"
#include "base/clock.h"
#include "backend/registry.h"
#include "formats/shards.h"
#include "model/flow.h"
#include "model/memplan.h"
#include "model/model.h"
#include "model/optim.h"
#include "dataset/loader.h"
#include "dataset/exclude.h"
#include "dataset/latents.h"
#include "dataset/moving_shapes.h"
#include "dist/dist.h"
#include "train/checkpoint.h"
#include "train/lineage.h"
#include "train/run_folder.h"

// Before the run ends, for whatever reason: the checkpoint being written is completed (a failed
// write is the error to report: it came first).
void trainer_finish_or_die(CkptWriter *w) {
    char err[ERR_LEN];
    if (w && ckpt_writer_finish(w, NULL, err, sizeof err)) fc_die("%s", err);
}

// ----------------------------------------------------------------------------
// the phases of a run, in the order train_run calls them


// The data first: a --data that cannot serve this config ends the run before any work (-1 with err).
static int open_data(Trainer *t, char *err, size_t errlen) {
    const Config *c = t->c;
    if (!t->data) {  // keys that vary footage, given to a run on the built-in shapes: said, not silently dropped
        const char *set[3];
        int n = 0;
        if (c->mix_shapes > 0) set[n++] = "mix_shapes";
        if (c->fast_fraction > 0) set[n++] = "fast_fraction";
        if (c->crop_zoom > 1) set[n++] = "crop_zoom";
        if (t->rank == 0 && n)
            fc_warn("%s%s%s%s%s: not used: %s the footage of train --data, and this run trains on the built-in "
                    "moving shapes", set[0], n == 3 ? ", " : n == 2 ? " and " : "", n > 1 ? set[1] : "",
                    n == 3 ? " and " : "", n == 3 ? set[2] : "", n > 1 ? "they vary" : "it varies");
        return 0;
    }
    if (!(t->dataset = dataset_open(t->data, err, errlen))) return -1;
    if (t->c->exclude[0]) {  // a bad list ends the run here; the loader takes the mask read now
        t->excluded = fc_malloc((size_t)dataset_clips(t->dataset));
        int n = exclude_list_read(t->dataset, t->c->exclude, t->excluded, err, errlen);
        if (n < 0) return -1;
        printf("exclude: %s, %d of %d clips never drawn\n", FC_ESCAPED(t->c->exclude), n, dataset_clips(t->dataset));
    }
    if (loader_check_config(t->dataset, t->c, err, errlen)) return -1;
    char why[1024];
    if (t->rank == 0 && loader_fast_unused(t->dataset, t->c, why, sizeof why)) fc_warn("%s", why);
    return 0;
}

static void open_run_folder(Trainer *t) {
    t->lock = -1;
    if (t->rank > 0) return;  // the folder is rank 0's
    t->lock = run_folder_open(t->run);
    fc_test_hold("SETUP_DELAY_MS", "the set-up");  // the tests' stop signal must be able to land in the set-up
}

// The data loader's threads and the batches it makes ahead (loader.h)
#define LOADER_THREADS 2
#define LOADER_PREFETCH 4

static int previews_on(const Trainer *t) { return t->hooks && t->hooks->preview && t->c->sample_every > 0; }

// The plan before any allocation: a config that cannot fit is refused with the plan shown.
static void check_memory_plan(Trainer *t, double vram_budget) {
    const Backend *be = t->be;
    t->plan = memory_plan(t->c, t->c->batch_size / t->ranks, plan_device(be->name, be->precision));
    t->plan.routes = memory_plan_routes(t->c, t->c->batch_size / t->ranks, be);
    if (t->hooks && t->hooks->resident > 0) t->plan.autoencoder = t->hooks->resident;
    // rank 0 takes the previews; with ZeRO-1 the others set their weights aside for them too
    // (memory_plan_other_rank keeps that part of the line)
    if (!(previews_on(t) || (t->rank > 0 && t->c->sample_every > 0))) t->plan.previews = 0;
    else if (t->rank == 0) t->plan.previews += t->hooks->preview_host;
    if (t->dataset)
        t->plan.loader = loader_plan_bytes(t->dataset, t->c, t->c->batch_size / t->ranks, LOADER_THREADS, LOADER_PREFETCH);
    // On the CPU the process's own memory (code, libraries, the dataset's index, the previews'
    // autoencoder's weights, loaded by then) is the plan's too: the peak measured at the end is the
    // whole resident set. The autoencoder's line keeps what is still to come.
    if (t->plan.cpu) t->plan.program = (double)fc_resident_bytes();
    if (t->plan.cpu && t->plan.autoencoder > 0 && t->hooks) t->plan.autoencoder -= t->hooks->resident_loaded;
    if (t->ranks > 1)
        printf("per rank: %d windows of the batch of %d%s\n", t->c->batch_size / t->ranks, t->c->batch_size,
               t->shard ? "; the optimizer state and EMA a 1/N part of them (ZeRO-1)" : "");
    memory_plan_per_rank(&t->plan, t->ranks, t->shard);
    if (t->rank > 0) memory_plan_other_rank(&t->plan, t->shard);
    // GPU ranks that will sum through host memory: collectives = mpi, or a build without NCCL
    memory_plan_host_grads(&t->plan, t->summing && (t->c->collectives == COLL_MPI || !backend_cuda_nccl_built()));
    memory_plan_sum(&t->plan);
    // rank 0's plan (the others' lines go nowhere): where the run spans several machines, its machine's
    // name in front
    fputs(dist_machine_origin(), stdout);
    memory_plan_print(stdout, &t->plan, be->name, t->on_gpu ? vram_budget : 0);
    fflush(stdout);
    if (t->on_gpu && t->plan.total > vram_budget)
        fc_die("%s: the memory plan (%.2f GiB) exceeds --vram-budget %.2f GiB: lower batch_size, frame_size, width "
               "or depth (or raise the budget)", t->run, t->plan.total / 1073741824.0, vram_budget / 1073741824.0);
    // The host's part (on the CPU all of it): refused where the machine could never hold it, a warning
    // where it cannot now without swapping (what the process already holds is counted as held). The
    // ranks on one machine share its memory: their plans are summed, and one of them says so (naming
    // the machine where the run spans several).
    const double GiB = 1073741824.0;
    int local = dist_local_size(), speaker = dist_local_rank() == 0;
    double host = t->plan.cpu ? t->plan.total : t->plan.host, held = t->plan.program;
    host = dist_local_sum(host), held = dist_local_sum(held);
    char whose[64] = "";
    if (local > 1) snprintf(whose, sizeof whose, " (its %d ranks together)", local);
    if (local > 1 && t->rank == 0)
        printf("%shost memory of the %d ranks on this machine: %.3f GiB together\n", dist_machine_origin(), local,
               host / GiB);
    double machine = (double)fc_machine_memory(0), available = (double)fc_machine_memory(1);
    if (machine > 0 && host > machine) {
        if (!speaker) {  // this machine's first rank says it; its exit ends the run
            dist_barrier();
            exit(1);
        }
        fc_die("%s%s: the memory plan's %.2f GiB of host memory%s exceed this machine's %.2f GiB: lower batch_size, "
               "frame_size, width or depth%s", dist_machine_origin(), t->run, host / GiB, whose, machine / GiB,
               local > 1 ? ", or run fewer ranks on it"
               : t->plan.cpu ? "" : " (the checkpoint's staging buffer alone is weights, EMA and optimizer state)");
    }
    // Under ulimit -v (or -d) this process's plan and what OpenBLAS will add for its threads
    // (address_space.h) must fit what the limit leaves: a run that met it at a thread's first GEMM
    // would stop responding, not fail. The limit is each process's: its own plan, not the machine's sum.
    double own = (t->plan.cpu ? t->plan.total : t->plan.host) - t->plan.program, limit, used;
    double need = own + fc_address_space_to_come(fc_threads());
    const char *ulimit;
    if (!fc_address_space_room(need, &limit, &used, &ulimit))
        fc_die("%s%s: the memory plan's %.2f GiB of host memory and OpenBLAS's buffers for %d thread%s%s need %.2f "
               "GiB more address space, and the limit leaves %.2f GiB: raise it (%s %.0f or more) or lower batch_size, "
               "frame_size, width or depth", dist_rank_origin(), t->run, own / GiB, fc_threads(),
               fc_threads() == 1 ? "" : "s", fc_thread_stack_clause((char[96]){0}, 96), need / GiB, (limit - used) / GiB,
               ulimit, fc_address_space_advice_kib(used + need));
    if (speaker && available > 0 && host - held > available)
        fc_warn("%s%s: the memory plan's %.2f GiB of host memory%s are more than the %.2f GiB this machine has "
                "available now: the run may swap, or be killed when memory runs out", dist_machine_origin(), t->run,
                (host - held) / GiB, whose, available / GiB);
}

// The model, its optimizer and EMA, and the batch buffers; the weights as a fresh run starts them.
static void build_training_state(Trainer *t) {
    const Config *c = t->c;
    const Backend *be = t->be;
    t->m = build_model(c, be, c->batch_size / t->ranks);
    t->o = t->shard ? build_optimizer_part(t->m, c, t->rank, t->ranks) : build_optimizer(t->m, c);
    if (t->shard) {
        t->part_start = fc_malloc(sizeof(size_t) * (t->ranks + 1));
        for (int r = 0; r <= t->ranks; r++) t->part_start[r] = optimizer_part_start(t->m, c, r, t->ranks);
    }
    size_t batch_values = (size_t)t->m->S * t->m->E;
    t->ema = be->alloc(sizeof(real) * (t->o->hi - t->o->lo));
    t->x0 = be->alloc(sizeof(real) * batch_values);
    t->host_x0 = fc_malloc(sizeof(real) * batch_values);
    model_init(t->m, (uint64_t)c->seed, 0);
    be->copy(t->ema, t->m->params_mem + t->o->lo, sizeof(real) * (t->o->hi - t->o->lo));
}

// Rank 0 chose where the run starts (its checkpoint, a fork's parent or step 0, the file `loaded` read
// in `mode`): every other rank reads the same file into its own model, EMA and optimizer (or its part
// of them), so that all start from the same bytes; the run state is rank 0's. The same file, not one
// at the same path: a rank whose path leads to another (a copy of its own of the run folder, stale, or
// another run's checkpoint of that step) would train from other weights, silently.
static void share_start(Trainer *t, char *loaded, CkptLoadMode mode, int *fork_unwritten) {
    if (t->ranks == 1) return;
    int m = (int)mode;
    uint32_t want = 0, got = 0;
    char err[ERR_LEN];
    if (t->rank == 0 && loaded[0] && checkpoint_header_crc(loaded, &want, err, sizeof err)) fc_die("%s", err);
    dist_broadcast(loaded, 4096);
    dist_broadcast(&m, sizeof m);
    dist_broadcast(&want, sizeof want);
    if (t->rank > 0 && loaded[0]) {
        TrainState st;
        if (checkpoint_load(loaded, t->m, t->ema, t->o, t->c, (CkptLoadMode)m, &st, err, sizeof err))
            fc_die("%s%s (every rank reads the checkpoint rank 0 starts from: the run folder must be on a "
                   "filesystem all of them see)", dist_rank_origin(), err);
        if (checkpoint_header_crc(loaded, &got, err, sizeof err)) fc_die("%s%s", dist_rank_origin(), err);
        if (got != want)
            fc_die("%s%s: not the file rank 0 starts from (its header's crc32 %08x, rank 0's %08x): every rank reads "
                   "the checkpoint rank 0 starts from, so the run folder (and a fork's parent) must be one all of them "
                   "see, not a copy of their own", dist_rank_origin(), loaded, got, want);
    }
    dist_broadcast(&t->st, sizeof t->st);
    dist_broadcast(fork_unwritten, sizeof *fork_unwritten);
}

// The loader, the metrics file and the checkpoint writer: what only a run with steps to do needs.

// How the ranks' gradients are summed: NCCL started where the build has it (a run with steps to do;
// the memory plan counted the host copy the others sum through: host_sums_planned).
static void choose_collectives(Trainer *t) {
    const Config *c = t->c;
    snprintf(t->collectives, sizeof t->collectives, "MPI");
    if (!t->summing || !t->on_gpu) return;
    // NCCL where the build has it (collectives = auto or nccl); else through host memory
    char why[256] = "collectives = mpi";
    t->nccl = c->collectives != COLL_MPI && !backend_cuda_nccl_start(t->rank, t->ranks, dist_broadcast, why, sizeof why);
    if (!t->nccl && c->collectives == COLL_NCCL)
        fc_die("collectives = nccl, but NCCL cannot sum the gradients here: %s (collectives = auto or mpi "
               "sums them through host memory and MPI)", why);
    snprintf(t->collectives, sizeof t->collectives, t->nccl ? "%s" : "MPI through host memory (%s)", why);
}

static void start_services(Trainer *t, int fork_start) {
    const Config *c = t->c;
    char err[ERR_LEN];
    if (t->data) {
        t->loader = loader_start_excluding(t->be, t->dataset, c, t->excluded, t->m->B, t->b0, (uint64_t)c->seed,
                                           t->st.step + 1, LOADER_THREADS, LOADER_PREFETCH, err, sizeof err);
        if (!t->loader) fc_die("%s", err);
        free(t->excluded), t->excluded = NULL;  // the loader holds its copy
        char *shown_data = fc_escaped_name(fc_malloc(4 * strlen(t->data) + 1), 4 * strlen(t->data) + 1, t->data);
        printf("data: %s, %d clips of %d frames\n", shown_data, dataset_clips(t->dataset),
               dataset_clip_frames(t->dataset));
        free(shown_data);
    }
    choose_collectives(t);
    if (t->summing) {
        const char *how = t->collectives;
        if (t->on_gpu && !t->nccl) t->host_grads = fc_malloc(sizeof(real) * t->m->n_params);  // (in the plan)
        if (c->overlap_grads) t->m->grads_ready = trainer_start_grad_sum, t->m->grads_ready_ctx = t;
        printf("ranks: %d, %d windows of the batch of %d each; gradients summed by %s, %s%s\n", t->ranks, t->m->B,
               c->batch_size, how, c->overlap_grads ? "block by block during the backward" : "after the backward",
               t->shard ? "; optimizer state and EMA split over the ranks (ZeRO-1)" : "");
        // OpenMPI's mpirun sends SIGKILL 1 s after the SIGTERM it passes on, unless told to wait: a step
        // and its checkpoint that take longer end as kill -9 does (docs/distributed.md)
        if (getenv("OMPI_COMM_WORLD_SIZE") && !getenv("OMPI_MCA_odls_base_sigkill_timeout"))
            printf("signals: mpirun sends SIGKILL 1 s after a SIGTERM, before a step longer than that can write its "
                   "checkpoint; give it time: mpirun --mca odls_base_sigkill_timeout 60 ...\n");
    }
    t->first = t->st.step + 1;
    // ZeRO-1: the previews and checkpoints need every rank's part of the EMA and optimizer state
    t->preview_ranks = t->shard && dist_max_int(previews_on(t));
    if (t->preview_ranks && t->rank > 0) t->params_aside = fc_malloc(sizeof(real) * t->m->n_params);
    if (t->shard && t->rank > 0) t->sender = ckpt_part_sender_start(t->m, t->ema, t->o);
    // what kills left beyond keep_checkpoints goes first, so that the disk plan counts the folder as kept
    if (t->rank == 0 && !fork_start && t->st.step > 0) checkpoint_prune_extra(t->run, c->keep_checkpoints, t->st.step);
    // The disk of rank 0's run folder: a run that could write no checkpoint ends before its first step
    int writes = run_folder_checkpoint_writes(t->first, c->steps, c->checkpoint_every) + (fork_start != 0);
    int no_room = t->rank == 0 &&
                  run_folder_disk_plan(t->run, t->plan.staging, c->keep_checkpoints, writes, err, sizeof err);
    if (dist_max_int(no_room)) {
        if (t->rank > 0) {  // rank 0 says it; its exit ends the run
            dist_barrier();
            exit(1);
        }
        fc_die("%s", err);
    }
    if (t->rank > 0) return;  // the run folder's services are rank 0's
    // a fork that starts from its parent has no step of its own yet (its first checkpoint comes before
    // its first step): lines at or below the parent's step are another run's, killed before its first
    // checkpoint (run_folder_start_from refuses a folder that held more)
    t->metrics = run_folder_metrics(t->run, fork_start ? 0 : t->st.step);
    // mpirun hands its ranks a terminal of its own even when its output goes to a file: lines, then.
    t->tty = isatty(STDOUT_FILENO) && t->ranks == 1;
    // On a terminal the progress line is rewritten in place: no checkpoint lines beside it.
    t->writer = ckpt_writer_start(t->run, t->m, t->ema, t->o, c, t->lock, t->tty ? NULL : stdout,
                                   t->sync_checkpoints);
    printf("checkpoint staging: %.3g GiB of %shost memory%s\n", ckpt_writer_staging_bytes(t->writer) / 1073741824.0,
           t->on_gpu ? "page-locked " : "", t->sync_checkpoints ? " (synchronous checkpoints)" : "");
    if (previews_on(t)) {
        size_t bytes = sizeof(real) * t->m->n_params;
        t->params_aside = fc_malloc(bytes);
        printf("previews every %d steps: %.3g GiB of host memory hold the weights while the EMA samples\n",
               c->sample_every, bytes / 1073741824.0);
    }
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// the hot loop and the end of the run

// A checkpoint of step s, once written, promises the run up to s: so the metrics lines of steps 1..s
// are made durable first (one fdatasync per checkpoint; a power cut may still take later lines).
static void submit_checkpoint(Trainer *t) {
    char err[ERR_LEN];
    if (fflush(t->metrics) || fdatasync(fileno(t->metrics))) {
        int e = errno;
        trainer_finish_or_die(t->writer);
        fc_die("%s/metrics.jsonl: cannot write it to disk before the checkpoint of step %d: %s; stopping (the earlier "
               "checkpoints are whole: run the same command to go on)", t->run, t->st.step, strerror(e));
    }
    if (ckpt_writer_submit(t->writer, &t->st, &t->ckpt_blocked_ms, err, sizeof err)) fc_die("%s", err);
}

// A preview of the model at `step` with the EMA weights standing in for the trained ones, which are
// set aside on the host and put back byte for byte (the GPU's bf16 mirror of them is rebuilt from the
// same values). The checkpoint being copied reads the weights: its copy is waited for first.
// A preview due while the previews so far have taken more than preview_budget of the time trained is
// put off, with a line, to the next step it is due at which they fit again: their cost stays bounded
// whatever the machine (a slow link to the GPU, a large model), at the price of fewer images. The last
// step's is never put off (there is no step after it): a run ends with a picture of what it made.
// With ZeRO-1 every rank takes part: rank 0 decides, the EMA's parts are gathered into every rank's
// weights for the preview (rank 0 samples) and each rank puts its own weights back.
static void take_preview(Trainer *t, int step, int last) {
    const Backend *be = t->be;
    char err[ERR_LEN];
    double t0 = fc_now_s(), waited = 0;
    int go = 1;
    if (t->rank == 0 && !last && t->preview_s > t->c->preview_budget * (t0 - t->t_start)) {
        fc_line(stdout, "preview of step %d put off: the previews have taken %.1f s, %.1f%% of the time trained "
                "(preview_budget %g)", step, t->preview_s, 100 * t->preview_s / (t0 - t->t_start),
                t->c->preview_budget);
        go = 0;
    }
    if (t->preview_ranks) dist_broadcast(&go, sizeof go);
    if (!go) return;
    if (t->writer && ckpt_writer_wait_copy(t->writer, &waited, err, sizeof err)) fc_die("%s", err);
    // RUN/samples of a folder renamed away would be another run's by now (as its checkpoints would)
    if (t->rank == 0 && run_folder_still_held(t->run, t->lock, err, sizeof err)) {
        trainer_finish_or_die(t->writer);
        fc_die("%s", err);
    }
    size_t bytes = sizeof(real) * t->m->n_params;
    be->download(t->params_aside, t->m->params_mem, bytes);
    if (t->shard) trainer_gather_parts(t, t->ema);
    else be->copy(t->m->params_mem, t->ema, bytes);
    if (t->rank == 0 && t->hooks->preview(t->hooks->ctx, t->m, step)) t->previews_skipped++;
    be->upload(t->m->params_mem, t->params_aside, bytes);
    t->preview_s += fc_now_s() - t0;
    t->previews++;
}

// The preview of the step the run resumes from, where it was due and is not on disk: a stop by a
// signal checkpoints its step but skips its preview (so that the run ends at once).
static void take_missed_preview(Trainer *t) {
    int s = t->first - 1, here = t->rank == 0 ? previews_on(t) : t->preview_ranks;
    if (!here || s < 1 || s % t->c->sample_every) return;
    int missing = t->rank == 0 && t->hooks->missing && t->hooks->missing(t->hooks->ctx, s);
    if (t->preview_ranks) dist_broadcast(&missing, sizeof missing);
    if (missing) take_preview(t, s, 0);
}

// A checkpoint of the step just made: rank 0 writes it; with ZeRO-1 the others send it their parts.
static void checkpoint_now(Trainer *t) {
    if (t->rank == 0) submit_checkpoint(t);
    else if (t->sender) ckpt_part_sender_send(t->sender);
}

// The hot loop: one optimizer update per iteration. Returns 0 at c->steps, 128 + signal when a stop
// signal ended it after a checkpoint.
static int run_steps(Trainer *t) {
    const Config *c = t->c;
    // From here on a stop signal lets the current step finish and be checkpointed.
    fc_catch_stop_signals();  // a second Ctrl-C ends at once; the checkpoint files are safe either way
    t->t_start = fc_now_s();
    take_missed_preview(t);
    for (int step = t->first; step <= c->steps; step++) {
        StepReport r;
        double t0 = fc_now_s(), comm0 = dist_comm_seconds();
        r.t_data = trainer_load_batch(t, step, t0);
        trainer_update_weights(t, step, &r);
        r.t_step = fc_now_s() - t0;
        if (step >= t->first + 2)
            t->t_timed += r.t_step, t->comm_timed += dist_comm_seconds() - comm0, t->t_timed_steps++;
        // Every rank stops at the same step: a signal any of them has seen counts for all.
        int sig = t->ranks > 1 ? dist_max_int(fc_stop_signal()) : fc_stop_signal();
        int last = step == c->steps, stop = sig != 0;
        if (t->rank == 0) {
            trainer_write_metrics(t, step, &r);
            trainer_print_progress(t, step, r.loss, last);
        }
        if (step % c->checkpoint_every == 0 || last || stop) {
            fc_progress_end();
            checkpoint_now(t);
        }
        int previews_here = t->rank == 0 ? previews_on(t) : t->preview_ranks;
        if (previews_here && !stop && (step % c->sample_every == 0 || last)) take_preview(t, step, last);
        if (stop) {
            trainer_finish_or_die(t->writer);
            dist_barrier();  // the checkpoint is on disk before any rank ends
            printf("stopped by %s at step %d; the checkpoint is written: run the same command to go on\n",
                   fc_signal_name(sig), step);
            return 128 + sig;
        }
    }
    return 0;
}

// The run reached c->steps: the last checkpoint written, then its speed and memory.
static void finish_run(Trainer *t) {
    const Config *c = t->c;
    trainer_finish_or_die(t->writer);
    dist_barrier();  // no rank ends before the last checkpoint is on disk
    printf("done: %s at step %d, smoothed loss %.4f\n", FC_ESCAPED(t->run), t->st.step, t->st.smooth_loss);
    if (t->t_timed_steps > 0) {  // the steady state: the first two steps of a process (set-up, caches) left out
        double ms = 1e3 * t->t_timed / t->t_timed_steps, flops = model_step_flops(c, c->batch_size);
        printf("speed: %.2f ms per step over %d steps, %.1f frames/s, %.4g TFLOP per step (model FLOPs), "
               "%.4g TFLOP/s\n", ms, t->t_timed_steps, 1e3 / ms * c->batch_size * t->m->F, flops / 1e12,
               flops / ms / 1e9);
    }
    if (t->ranks > 1 && t->t_timed_steps > 0) {  // rank 0's time in the collectives, over the same steps
        double comm_ms = 1e3 * t->comm_timed / t->t_timed_steps, ms = 1e3 * t->t_timed / t->t_timed_steps;
        printf("communication: %.2f ms per step on rank 0 (%.1f%% of its step, waiting for the other ranks "
               "included), %.3g MiB of gradients summed a step\n", comm_ms, 100 * comm_ms / ms,
               sizeof(real) * t->m->n_params / 1048576.0);
    }
    long windows = 0;
    double bytes = t->loader ? loader_bytes_read(t->loader, &windows) : 0;
    if (windows)
        printf("data: %.2f MiB read from the shards for %ld windows, %.1f KiB a window\n", bytes / 1048576, windows,
               bytes / 1024 / windows);
    char skipped[64] = "";  // (each said when it was skipped)
    if (t->previews_skipped) snprintf(skipped, sizeof skipped, " written, %d skipped,", t->previews_skipped);
    if (t->previews)
        printf("previews: %d%s in %.2f s, %.1f%% of the time this process trained (%s/samples)\n",
               t->previews - t->previews_skipped, skipped, t->preview_s, 100 * t->preview_s / (fc_now_s() - t->t_start),
               FC_ESCAPED(t->run));
    // rank 0's peak against its plan (the machine named where the run spans several); three decimals: a
    // MiB, for the small configs; the ratio for any size
    if (t->be->memory_peak) {
        double peak = (double)t->be->memory_peak();
        printf("%speak %s memory: %.3f GiB measured (plan %.3f GiB; the measure %.3fx the plan)\n",
               dist_machine_origin(), t->be->name, peak / 1073741824.0, t->plan.total / 1073741824.0,
               peak / t->plan.total);
    }
}

// The loader's line on damaged clips is the run's: on several ranks, the clips any rank found and the
// windows of every rank that showed a substitute, said once by rank 0 (one rank's line for the same
// windows). A collective: every rank ends its run here.
static void stop_loader(Trainer *t) {
    if (t->ranks == 1) {
        loader_stop(t->loader);
        return;
    }
    int n = dataset_clips(t->dataset), clips = 0;
    uint8_t *mask = fc_malloc((size_t)n);
    double *found = fc_malloc(sizeof(double) * ((size_t)n + 1));  // per clip, then the windows
    long substituted = 0;
    loader_stop_silent(t->loader, mask, &substituted);
    for (int i = 0; i < n; i++) found[i] = mask[i];
    found[n] = (double)substituted;
    dist_sum_double(found, n + 1);
    for (int i = 0; i < n; i++) clips += found[i] > 0;
    if (t->rank == 0) loader_warn_damage(dataset_dir(t->dataset), clips, (long)found[n]);
    free(mask), free(found);
}

static void release(Trainer *t) {
    free_ckpt_writer(t->writer);  // before the tensors it copies from
    free_ckpt_part_sender(t->sender);
    free(t->part_start);
    if (t->loader) stop_loader(t);
    if (t->dataset) dataset_close(t->dataset);
    free(t->excluded);
    if (t->metrics) fclose(t->metrics);
    free(t->host_x0);
    free(t->host_grads);
    free(t->params_aside);
    t->be->free(t->x0);
    t->be->free(t->ema);
    free_optimizer(t->o);
    free_model(t->m);
    if (t->lock >= 0) close(t->lock);
}

// A fork onto data of another space than its parent's (the latents of another autoencoder, or of one
// at another scaling; frames onto latents, or back) is allowed, as a fork onto other data is, but its
// weights learnt the parent's space: said in a warning and recorded in its lineage.
static void fork_space_change(Trainer *t, const char *parent_autoencoder) {
    if (latent_identity_same(parent_autoencoder, t->st.autoencoder)) return;
    char was[LATENT_ID_TEXT + 32], now[LATENT_ID_TEXT + 32], line[2 * LATENT_ID_TEXT + 128];
    snprintf(was, sizeof was, "%s%s", parent_autoencoder[0] ? "the latents of " : "frames", parent_autoencoder);
    snprintf(now, sizeof now, "%s%s", t->st.autoencoder[0] ? "the latents of " : "frames", t->st.autoencoder);
    snprintf(line, sizeof line, "space changed at the fork: %s -> %s", was, now);
    lineage_append(t->st.lineage, sizeof t->st.lineage, line);
    if (t->rank == 0)
        fc_warn("%s: a fork from a run trained on %s onto %s: its weights learnt another space than the data's "
                "(recorded in its lineage; a new run starts in the data's space from scratch)", t->run, was, now);
}

// The device a run's steps are made on, recorded in each checkpoint: a resume or a fork on another
// (a GPU run resumed on the CPU, cuda against cuda-fp32) goes on, its steps from here of other
// arithmetic; said, and recorded in its lineage, so that the run's history says where its steps were
// made. Checkpoints of earlier builds record none: nothing to compare.
static void device_change(Trainer *t, int from_checkpoint) {
    char now[sizeof t->st.device];
    snprintf(now, sizeof now, "%s (%s)", t->be->name, t->be->precision);
    if (from_checkpoint && t->st.device[0] && strcmp(t->st.device, now) && t->st.step < t->c->steps) {
        char line[200];
        snprintf(line, sizeof line, "device changed at step %d: %s -> %s", t->st.step, t->st.device, now);
        lineage_append(t->st.lineage, sizeof t->st.lineage, line);
        if (t->rank == 0)
            printf("%s: its steps to %d were made on %s, the next on %s (recorded in its lineage)\n", FC_ESCAPED(t->run),
                   t->st.step, t->st.device, now);
    }
    snprintf(t->st.device, sizeof t->st.device, "%s", now);
}

int train_run(const Config *c, const char *run, const char *data, const Backend *be, const TrainOrigin *origin,
              double vram_budget, int sync_checkpoints, const TrainHooks *hooks) {
    // Start-up has nothing to save: until the loop can checkpoint, a stop signal ends train at once
    // (a large model's set-up takes minutes, and a signal held through it was a signal ignored).
    fc_release_stop_signals();
    Trainer t = {.c = c, .run = run, .data = data, .be = be, .sync_checkpoints = sync_checkpoints, .hooks = hooks};
    t.on_gpu = strcmp(be->name, "cpu") != 0;
    char why[256];
    if (model_backend_check(c, be, why, sizeof why)) fc_die("%s", why);  // before the run folder is touched
    t.rank = dist_rank(), t.ranks = dist_size();
    // the batch against the ranks and the data folder: every rank of a machine meets the same, said once
    char err[ERR_LEN];
    int failed = c->batch_size % t.ranks != 0;
    if (failed)
        snprintf(err, sizeof err, "batch_size = %d: %d ranks cannot share it evenly; give a batch_size that is a "
                 "multiple of %d (--set batch_size=%d) or run %s ranks", c->batch_size, t.ranks, t.ranks,
                 (c->batch_size / t.ranks + 1) * t.ranks, c->batch_size < t.ranks ? "fewer" : "another number of");
    if (t.ranks > 1 && !failed) printf("%s\n", dist_describe());
    if (!failed) failed = open_data(&t, err, sizeof err);
    dist_fail_alike(failed, err);
    t.b0 = t.rank * (c->batch_size / t.ranks);
    t.shard = t.ranks > 1 && c->shard_optimizer;
    open_run_folder(&t);
    // FRAMECHAIN_TEST_COLLECTIVES_ALONE=1: one rank sums its gradients over itself, so that the path of
    // several GPU ranks (NCCL's calls, streams and events) runs on a machine with one GPU; the same
    // bytes as without (tools/gpu_check.sh)
    t.summing = t.ranks > 1 || fc_test_hook("COLLECTIVES_ALONE") == 1;
    check_memory_plan(&t, vram_budget);
    build_training_state(&t);
    TrainOrigin plain = {0};
    int fork_unwritten = 0;
    char loaded[4096] = "";
    CkptLoadMode mode = CKPT_CONTINUE;
    if (t.rank == 0) fork_unwritten = run_folder_start_from(run, t.m, t.ema, t.o, c, origin ? origin : &plain, &t.st, loaded, &mode);
    share_start(&t, loaded, mode, &fork_unwritten);
    char trained_on[sizeof t.st.autoencoder];  // the checkpoint's: a fork's parent's
    snprintf(trained_on, sizeof trained_on, "%s", t.st.autoencoder);
    t.st.autoencoder[0] = 0;  // what its checkpoints record from now on: the latents' autoencoder, if any
    if (t.dataset && dataset_latent(t.dataset))
        latent_identity_text(dataset_latent(t.dataset), t.st.autoencoder, sizeof t.st.autoencoder);
    if (fork_unwritten) fork_space_change(&t, trained_on);
    device_change(&t, loaded[0] != 0);
    printf("framechain train: %s, %zu parameters, batch %d x %d slots, %s\n", FC_ESCAPED(run), t.m->n_params, t.m->B, t.m->F,
           be->describe());
    if (hooks && hooks->notes && t.rank == 0) fputs(hooks->notes, stdout);
    int status = 0;
    if (t.st.step >= c->steps) {
        printf("%s is at step %d of %d: nothing to do (train --extend --steps N goes on past the end)\n", FC_ESCAPED(run),
               t.st.step, c->steps);
    } else {
        start_services(&t, fork_unwritten);
        // A fork's first checkpoint, before any step: from now on it resumes on its own, whatever
        // becomes of its parent's file.
        if (fork_unwritten) checkpoint_now(&t);
        status = run_steps(&t);
        if (status == 0) finish_run(&t);
    }
    release(&t);
    return status;
}
