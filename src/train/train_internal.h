// train_internal.h: what the phases of a run (train.c) and its step (train_step.c) share: the
// Trainer, which holds the run's inputs, what they build, and the loop's clocks. Not for other layers.
#pragma once
#include <stdio.h>

#include "train/train.h"
#include "backend/backend.h"
#include "dataset/loader.h"
#include "model/memplan.h"
#include "model/model.h"
#include "model/optim.h"
#include "train/checkpoint.h"

// The lines the phases die with quote a path or two (4096 bytes each at most) beside why: a line cut
// short loses the why.
#define ERR_LEN 8400

// What the phases share: the run's inputs, what they build, and the loop's clocks.
typedef struct {
    const Config *c;
    const char *run, *data;
    const Backend *be;
    int on_gpu, sync_checkpoints;
    int rank, ranks, b0;  // this rank, of ranks; b0: the global index of its first window (dist.h)
    int shard;            // ZeRO-1 (shard_optimizer on several ranks): o and ema are this rank's part
    int nccl;             // GPU ranks: the sums and the all-gather by NCCL on device memory (else MPI, host)
    int summing;          // the gradients go through the sum over the ranks (several ranks, or the test hook)
    char collectives[300];  // how they are summed, for the log (choose_collectives)
    size_t *part_start;   // (ranks + 1) where each rank's part of the flat parameters begins
    CkptPartSender *sender;  // ZeRO-1, ranks but 0: their parts to rank 0's checkpoint writer
    int preview_ranks;    // ZeRO-1 with previews: every rank takes part (the EMA is gathered for them)
    Dataset *dataset;
    uint8_t *excluded;  // (dataset clips) the exclude list as read once at the start, for the loader; NULL: none
    int lock;  // the run folder's lock file (rank 0; -1 on the others)
    MemPlan plan;
    Model *m;
    Optimizer *o;
    real *ema;      // (n_params) EMA of the weights; ZeRO-1: (hi - lo), this rank's part
    real *x0;       // (B, F, C, H, W) clean windows of the step
    real *host_x0;  // the same, on the host
    real *host_grads;  // (n_params) host: the gradients (and ZeRO-1's weights) on their way through MPI (GPU ranks)
    TrainState st;
    Loader *loader;
    FILE *metrics;
    CkptWriter *writer;
    int tty;    // stdout is a terminal: the progress line is rewritten in place
    int first;  // the first step this process runs
    // The time the loop waited for checkpoints since the last metrics line: a submit comes after its
    // step's line, so its time is on the next step's.
    double ckpt_blocked_ms;
    double t_start, t_last_line, t_timed;
    double comm_timed;  // of t_timed: the time in the ranks' collectives (dist_comm_seconds)
    int t_timed_steps;
    const TrainHooks *hooks;
    real *params_aside;  // (n_params) host: the trained weights while the EMA stands in for a preview
    double preview_s;    // time the previews took, in all
    int previews;
    int previews_skipped;  // of them: the hook could not make them (said as they were)
} Trainer;

// What one optimizer update measured, for its metrics line.
typedef struct {
    double loss, lr, t_data, t_step;
    OptStepInfo info;
} StepReport;

// ---- train.c
// Before the run ends, for whatever reason: the checkpoint being written is completed (a failed
// write is the error to report: it came first).
void trainer_finish_or_die(CkptWriter *w);

// ---- train_step.c: one step of the hot loop
// The clean windows of `step` into x0; returns the seconds that took (the loader's wait).
double trainer_load_batch(Trainer *t, int step, double t0);
// Forward, backward and the optimizer step on the batch in x0; a loss that is not finite ends the run.
void trainer_update_weights(Trainer *t, int step, StepReport *r);
// The step's line of metrics.jsonl; one that cannot be written ends the run.
void trainer_write_metrics(Trainer *t, int step, const StepReport *r);
// On a terminal every step; otherwise the last step and one line per 10 seconds.
void trainer_print_progress(Trainer *t, int step, double loss, int last);
// ZeRO-1: every rank's part of src gathered into m->params_mem on every rank.
void trainer_gather_parts(Trainer *t, const real *src);
// model.h's grads_ready: the sum over the ranks of the gradients [lo, hi) started (overlap_grads).
void trainer_start_grad_sum(void *ctx, size_t lo, size_t hi);
