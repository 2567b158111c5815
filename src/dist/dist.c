// dist.c: the ranks of a run over MPI (dist.h); one rank where the build has no MPI (FC_MPI unset).
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "base/clock.h"

#ifdef FC_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_local_rank = 0, g_local_size = 1;
static double g_comm_s = 0;
static char g_describe[256] = "one rank";
static char g_rank_origin[320] = "", g_machine_origin[320] = "";  // dist_rank_origin, dist_machine_origin

// The size a launcher asked for, from its environment (OpenMPI's mpirun, Hydra and Slurm's PMI,
// PMIx), or 0 when no launcher started this process.
static int launcher_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    if (getenv("PMIX_RANK")) {  // srun --mpi=pmix names the rank, the task count is Slurm's
        const char *n = getenv("SLURM_NTASKS");
        return n && atoi(n) > 0 ? atoi(n) : 1;
    }
    return 0;
}

// This process's place among them (0 without a launcher).
static int launcher_rank(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return atoi(getenv(vars[i]));
    return 0;
}

void dist_refuse_ranks(const char *command) {
    int n = launcher_size();
    if (n <= 1) return;
    fc_quiet_messages(launcher_rank() > 0);
    fc_die("%s runs as one process, and this is one of %d that a launcher started (mpirun -np %d, srun -n %d): "
           "only train runs on several ranks; run %s without mpirun or srun, or with one process (-np 1)", command,
           n, n, n, command);
}

#ifdef FC_MPI

static int g_started = 0;  // MPI_Init done, MPI_Finalize not yet
static MPI_Comm g_node = MPI_COMM_NULL;  // the ranks on this machine (they share its memory)

static void mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fc_die("rank %d: %s failed: %s", g_rank, what, msg);
}

// MPI counts are ints: the next piece of a buffer with `left` values (or bytes) still to go.
static int piece(size_t left) { return left > ((size_t)1 << 30) ? 1 << 30 : (int)left; }

void dist_start(void) {
    if (g_started || !launcher_size()) return;
    int provided = 0;
    // Only the training thread calls MPI (the loader's and the checkpoint writer's threads never do).
    mpi_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g_started = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &g_node),
              "MPI_Comm_split_type");
    MPI_Comm_rank(g_node, &g_local_rank);
    MPI_Comm_size(g_node, &g_local_size);
    // the machines the run spans: one first rank each
    int hosts = g_local_rank == 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    char host[256] = "?";
    if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    dist_format_origin(g_rank_origin, sizeof g_rank_origin, g_rank, g_size, host, hosts);
    dist_format_origin(g_machine_origin, sizeof g_machine_origin, -1, g_size, host, hosts);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    snprintf(g_describe, sizeof g_describe, "MPI (%s), rank %d of %d", lib, g_rank, g_size);
    if (g_rank > 0 && !freopen("/dev/null", "w", stdout)) fc_die("rank %d: cannot close stdout", g_rank);
}

void dist_end(void) {
    if (!g_started) return;
    fflush(stdout);
    MPI_Comm_free(&g_node);
    MPI_Finalize();
    g_started = 0;
}

const char *dist_build_info(void) {
    static char info[256];
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    snprintf(info, sizeof info, "MPI (%s): mpirun -np N framechain train ... trains on N ranks", lib);
    return info;
}

void dist_sum_real(real *buf, size_t n) {
    if (g_size == 1) return;
    double t0 = fc_now_s();
    MPI_Datatype type = sizeof(real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
    for (size_t at = 0; at < n;) {
        int count = piece(n - at);
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf + at, count, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        at += (size_t)count;
    }
    g_comm_s += fc_now_s() - t0;
}

double dist_local_sum(double v) {
    if (g_local_size == 1) return v;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, g_node), "MPI_Allreduce (this machine's ranks)");
    return v;
}

// The least of v over the ranks on this machine.
static int local_min_int(int v) {
    if (g_local_size == 1) return v;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, g_node), "MPI_Allreduce (this machine's ranks)");
    return v;
}

// 1 where v is the same on every rank of this machine (their least and their greatest agree).
static int local_all_equal(uint64_t v) {
    if (g_local_size == 1) return 1;
    uint64_t lo = v, hi = v;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, g_node), "MPI_Allreduce (this machine's ranks)");
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, g_node), "MPI_Allreduce (this machine's ranks)");
    return lo == hi;
}

// The sums started and not yet waited for (dist_sum_real_start).
static MPI_Request *g_pending;
static int g_n_pending, g_cap_pending;

void dist_sum_real_start(real *buf, size_t n) {
    if (g_size == 1) return;
    double t0 = fc_now_s();
    MPI_Datatype type = sizeof(real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
    for (size_t at = 0; at < n;) {
        int count = piece(n - at);
        if (g_n_pending == g_cap_pending) {
            g_cap_pending = g_cap_pending ? 2 * g_cap_pending : 64;
            g_pending = realloc(g_pending, sizeof(MPI_Request) * g_cap_pending);
            if (!g_pending) fc_die("rank %d: out of host memory for the sums' requests", g_rank);
        }
        mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf + at, count, type, MPI_SUM, MPI_COMM_WORLD, &g_pending[g_n_pending++]),
                  "MPI_Iallreduce");
        at += (size_t)count;
    }
    g_comm_s += fc_now_s() - t0;
}

void dist_sum_progress(void) {
    if (!g_n_pending) return;
    double t0 = fc_now_s();
    int done = 0;
    mpi_check(MPI_Testall(g_n_pending, g_pending, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) g_n_pending = 0;
    g_comm_s += fc_now_s() - t0;
}

void dist_sum_wait(void) {
    if (!g_n_pending) return;
    double t0 = fc_now_s();
    mpi_check(MPI_Waitall(g_n_pending, g_pending, MPI_STATUSES_IGNORE), "MPI_Waitall");
    g_n_pending = 0;
    g_comm_s += fc_now_s() - t0;
}

void dist_sum_double(double *buf, int n) {
    if (g_size == 1) return;
    double t0 = fc_now_s();
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    g_comm_s += fc_now_s() - t0;
}

int dist_max_int(int v) {
    if (g_size == 1) return v;
    double t0 = fc_now_s();
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    g_comm_s += fc_now_s() - t0;
    return v;
}

void dist_broadcast(void *buf, size_t bytes) {
    if (g_size == 1) return;
    double t0 = fc_now_s();
    for (size_t at = 0; at < bytes;) {
        int count = piece(bytes - at);
        mpi_check(MPI_Bcast((char *)buf + at, count, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
        at += (size_t)count;
    }
    g_comm_s += fc_now_s() - t0;
}

void dist_barrier(void) {
    if (g_size > 1) mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void dist_send(const void *buf, size_t bytes, int to) {
    double t0 = fc_now_s();
    for (size_t at = 0; at < bytes;) {
        int count = piece(bytes - at);
        mpi_check(MPI_Send((const char *)buf + at, count, MPI_BYTE, to, 0, MPI_COMM_WORLD), "MPI_Send");
        at += (size_t)count;
    }
    g_comm_s += fc_now_s() - t0;
}

void dist_recv(void *buf, size_t bytes, int from) {
    double t0 = fc_now_s();
    for (size_t at = 0; at < bytes;) {
        int count = piece(bytes - at);
        mpi_check(MPI_Recv((char *)buf + at, count, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        at += (size_t)count;
    }
    g_comm_s += fc_now_s() - t0;
}

void dist_allgather_real(real *buf, const size_t *start) {
    if (g_size == 1) return;
    if (start[g_size] > (size_t)1 << 31)  // MPI's counts are ints
        fc_die("%zu parameters: the all-gather of ZeRO-1 takes at most 2^31 (set shard_optimizer = 0)", start[g_size]);
    double t0 = fc_now_s();
    int *counts = fc_malloc(sizeof(int) * g_size), *displs = fc_malloc(sizeof(int) * g_size);
    for (int r = 0; r < g_size; r++) counts[r] = (int)(start[r + 1] - start[r]), displs[r] = (int)start[r];
    MPI_Datatype type = sizeof(real) == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
    mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, type, MPI_COMM_WORLD),
              "MPI_Allgatherv");
    free(counts), free(displs);
    g_comm_s += fc_now_s() - t0;
}

#else  // a build without MPI: one rank

#ifdef FC_NO_MPI_ASKED  // make NO_MPI=1 (or SAN=1): MPI may well be installed
#define WITHOUT_MPI "built without MPI, by NO_MPI=1"
#define GET_MPI "run make without NO_MPI=1"
#else
#define WITHOUT_MPI "built without MPI"
#define GET_MPI "install it (apt-get install libopenmpi-dev openmpi-bin) and run make again"
#endif

void dist_start(void) {
    int n = launcher_size();
    if (n > 1)
        fc_die("started as one of %d ranks, but this framechain was " WITHOUT_MPI ": " GET_MPI ", or run one "
               "framechain without mpirun", n);
}

void dist_end(void) {}

const char *dist_build_info(void) {
#ifdef FC_NO_MPI_ASKED
    return "one rank only (" WITHOUT_MPI ": make without it, for mpirun)";
#else
    return "one rank only (built without MPI: apt-get install libopenmpi-dev openmpi-bin, then make, for mpirun)";
#endif
}

void dist_sum_real(real *buf, size_t n) { (void)buf, (void)n; }
void dist_sum_double(double *buf, int n) { (void)buf, (void)n; }
void dist_sum_real_start(real *buf, size_t n) { (void)buf, (void)n; }
void dist_sum_progress(void) {}
void dist_sum_wait(void) {}
int dist_max_int(int v) { return v; }
double dist_local_sum(double v) { return v; }
static int local_min_int(int v) { return v; }
static int local_all_equal(uint64_t v) { return (void)v, 1; }
void dist_broadcast(void *buf, size_t bytes) { (void)buf, (void)bytes; }
void dist_barrier(void) {}
void dist_send(const void *buf, size_t bytes, int to) { (void)buf, (void)bytes, (void)to; }
void dist_recv(void *buf, size_t bytes, int from) { (void)buf, (void)bytes, (void)from; }
void dist_allgather_real(real *buf, const size_t *start) { (void)buf, (void)start; }

#endif

// The line of `text` that starts at byte `at`, into out (a line too long for it cut with "...").
static void line_at(const char *text, size_t at, char *out, size_t outlen) {
    const char *end = strchr(text + at, '\n');
    size_t n = end ? (size_t)(end - text) - at : strlen(text + at);
    snprintf(out, outlen, "%.*s%s", (int)(n < outlen - 4 ? n : outlen - 4), text + at, n < outlen - 4 ? "" : "...");
}

int dist_same_text(const char *text, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    if (dist_size() == 1) return 0;
    size_t n = strlen(text) + 1;  // rank 0's length, then its bytes
    dist_broadcast(&n, sizeof n);
    char *first = fc_malloc(n);
    if (dist_rank() == 0) memcpy(first, text, n);
    dist_broadcast(first, n);
    size_t at = 0, line = 0;  // the first byte that differs, and the start of its line
    while (first[at] && text[at] == first[at]) {
        if (text[at] == '\n') line = at + 1;
        at++;
    }
    int differs = text[at] != first[at];
    if (differs && errlen) {
        char here[160], there[160];
        line_at(text, line, here, sizeof here), line_at(first, line, there, sizeof there);
        snprintf(err, errlen, "%s'%s' where rank 0 has '%s'", dist_rank_origin(), here[0] ? here : "(nothing)",
                 there[0] ? there : "(nothing)");
    }
    free(first);
    return dist_max_int(differs) ? -1 : 0;
}

int dist_local_alike(const char *text) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a: a differing command is told apart, not kept secret
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ull;
    return local_all_equal(h);
}

void dist_fail_alike(int failed, const char *err) {
    int first = local_min_int(failed ? g_local_rank : INT_MAX);
    if (first == INT_MAX) return;
    if (failed && first == g_local_rank) fc_die("%s%s", g_machine_origin, err);
    fc_quiet_messages(1);  // the machine's rank that failed first says why
    fc_exit(1);
}

void dist_format_origin(char *out, size_t len, int rank, int ranks, const char *host, int hosts) {
    if (!len) return;
    out[0] = 0;
    if (rank < 0 && hosts > 1) snprintf(out, len, "%s: ", host);
    else if (rank >= 0 && ranks > 1 && hosts > 1) snprintf(out, len, "rank %d (%s): ", rank, host);
    else if (rank >= 0 && ranks > 1) snprintf(out, len, "rank %d: ", rank);
}

const char *dist_rank_origin(void) { return g_rank_origin; }
const char *dist_machine_origin(void) { return g_machine_origin; }
int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
int dist_local_rank(void) { return g_local_rank; }
int dist_local_size(void) { return g_local_size; }
const char *dist_describe(void) { return g_describe; }
double dist_comm_seconds(void) { return g_comm_s; }
