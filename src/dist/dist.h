// dist.h: the ranks of one training run (docs/distributed.md). `mpirun -np N framechain train ...`
// starts N ranks; each trains on its part of the global batch and the gradients are summed over
// them, so the run is the one-rank run with its sums in another order.
//
// MPI is started only when a launcher started the process (mpirun, or srun with PMI/PMIx: its
// environment says so); every other command, and train outside a launcher, runs one rank without
// touching MPI. A build without MPI runs one rank and refuses to be one of several.
// Every collective below is called by every rank in the same order; with one rank each is a no-op.
#ifndef FRAMECHAIN_DIST_H
#define FRAMECHAIN_DIST_H

#include <stddef.h>

#include "base/common.h"

// Start the ranks when a launcher started this process: MPI_Init, then this rank's place. Dies
// with one line when a launcher asked for several ranks and this build has no MPI. On ranks other
// than 0, stdout is closed (the run's lines are rank 0's); stderr stays: an error names its rank.
void dist_start(void);
// End MPI (every rank, after the last collective); nothing without it.
void dist_end(void);
// For every command but train, which runs as one process: where a launcher started this one as one of
// several (mpirun -np N, srun -n N: N copies of the same command, racing on the same files), the first
// of them says so in one line and all exit 1 (the others silently, 0.2 s later). Nothing else.
void dist_refuse_ranks(const char *command);

int dist_rank(void);        // 0 .. dist_size() - 1
int dist_size(void);        // 1 without a launcher
int dist_local_rank(void);  // among the ranks on this machine: the GPU it takes
int dist_local_size(void);  // the ranks on this machine (they share its memory)
// Who says a message, in front of its text: dist_rank_origin() for what one rank meets on its own,
// "rank R: " ("rank R (HOST): " where the run spans several machines; "" for one rank);
// dist_machine_origin() for what a machine's first rank says for all of them, "HOST: " where the run
// spans several machines ("" on one: its lines stay as they are).
const char *dist_rank_origin(void);
const char *dist_machine_origin(void);
// Either of them into out from its parts: rank >= 0 a rank's (of `ranks`), rank < 0 a machine's; host
// this process's machine, hosts the machines the run spans.
void dist_format_origin(char *out, size_t len, int rank, int ranks, const char *host, int hosts);
// "MPI (Open MPI v4.1.4), rank 0 of 2" or "one rank (...)": for train's first lines.
const char *dist_describe(void);
// What this build can do, for --version: "MPI (...)" or "one rank only (built without MPI: ...)".
const char *dist_build_info(void);

// In place, over all ranks: the sum of buf (n values, host memory). The time is counted
// (dist_comm_seconds).
void dist_sum_real(real *buf, size_t n);
void dist_sum_double(double *buf, int n);
// The same sum, started and left to run (MPI_Iallreduce) while the caller computes: buf must not be
// read or written until dist_sum_wait. dist_sum_progress lets the started sums move on (MPI moves
// them only inside its calls); dist_sum_wait ends every started one. The time spent inside these
// calls is counted, so what dist_comm_seconds says is the time the sums were not hidden.
void dist_sum_real_start(real *buf, size_t n);
void dist_sum_progress(void);
void dist_sum_wait(void);
int dist_max_int(int v);
// The sum of v over the ranks on this machine (each gets it): what they hold of its memory together.
double dist_local_sum(double v);
// bytes of buf from rank 0 to every rank.
void dist_broadcast(void *buf, size_t bytes);
// Point to point: bytes to rank `to`, or from rank `from` (the sender's bytes must be as many).
void dist_send(const void *buf, size_t bytes, int to);
void dist_recv(void *buf, size_t bytes, int from);
// ZeRO-1's all-gather, in place: rank r holds values [start[r], start[r + 1]) of buf (n = start[size]
// values, host memory) and every rank ends with all of them.
void dist_allgather_real(real *buf, const size_t *start);
void dist_barrier(void);
// Every rank's text (lines "what = value") against rank 0's: 0 where all ranks hold the same; else
// -1 on every rank, and on a rank that differs err names its first line that differs beside rank 0's
// (err "" on the others). A collective: every rank calls it.
int dist_same_text(const char *text, char *err, size_t errlen);
// 1 where every rank of this machine holds the same text (a hash of it compared), else 0 on all of
// them. A collective of the machine's ranks; one rank: 1.
int dist_local_alike(const char *text);
// A check every rank of a machine makes alike, past the command line and config (the same command on
// the same files: the data folder, the batch against the ranks, the run to extend or fork): where it
// failed on any of them, the machine's first rank that failed says err and exits 1; the others exit 1
// too, silently and 0.2 s later, so that mpirun names the rank that spoke (one line a machine, not one
// a rank; after dist_machine_origin, which names the machine where the run spans several). Returns
// where none failed. A collective of the machine's ranks; one rank: fc_die(err).
void dist_fail_alike(int failed, const char *err);
// Seconds this rank spent in the collectives above, since dist_start.
double dist_comm_seconds(void);

#endif
