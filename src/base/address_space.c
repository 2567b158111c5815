// address_space.c: the address space a process may take (see address_space.h).
#define _GNU_SOURCE  // sched_getaffinity
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/address_space.h"

#define MiB 1048576.0
// What a small run takes beside OpenBLAS's buffers (the tiny config: 25-56 MiB, measured by bisecting
// ulimit -v, and more where threads start in another order), and each thread's stack and malloc arena
// at least (a thread's larger stack counts as its size: big_stacks).
#define RUN_MARGIN (128 * MiB)
#define THREAD_MARGIN (8 * MiB)

// The two limits that bound anonymous mappings, each against what it counts: RLIMIT_AS (ulimit -v)
// every mapping (VmSize), RLIMIT_DATA (ulimit -d) the private writable ones (VmData).
static const struct {
    int resource;
    const char *field, *ulimit;
} LIMITS[2] = {{RLIMIT_AS, "VmSize:", "ulimit -v"}, {RLIMIT_DATA, "VmData:", "ulimit -d"}};

// A field of /proc/self/status in bytes (0 if unknown), read with open/read only: this runs before the
// C library's stdio has been used.
static double status_bytes(const char *field) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *at = strstr(buf, field);
    return at ? (double)strtoull(at + strlen(field), NULL, 10) * 1024 : 0;
}

static const char *env_value(char **envp, const char *name) {
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=') return *envp + n + 1;
    return NULL;
}

double fc_address_space_advice_kib(double bytes) {
    long mib = (long)(bytes / MiB) + 1 + 16;
    return (double)mib * 1024;
}

int fc_address_space_room(double need, double *limit, double *used, const char **ulimit) {
    for (int i = 0; i < 2; i++) {
        struct rlimit r;
        if (getrlimit(LIMITS[i].resource, &r) || r.rlim_cur == RLIM_INFINITY) continue;
        double u = status_bytes(LIMITS[i].field);
        if (u + need > (double)r.rlim_cur) {
            *limit = (double)r.rlim_cur, *used = u, *ulimit = LIMITS[i].ulimit;
            return 0;
        }
    }
    return 1;
}

static int start_buffers;  // OpenBLAS's buffers at its start, as the check before it counted them

// The stack each of libgomp's threads maps: OMP_STACKSIZE, else GOMP_STACKSIZE, read as libgomp reads
// them (a number of KiB, or with a suffix B, K, M or G; spaces around it); else the C library's
// default for a thread, the stack limit (ulimit -s), or 2 MiB where it is unlimited.
static double thread_stack;
static const char *thread_stack_source = "ulimit -s";

static double parse_stack_size(const char *s) {
    if (!s) return 0;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s) return 0;
    for (const char *d = s; d < end; d++)
        if (*d < '0' || *d > '9') return 0;  // digits only, as libgomp takes them
    while (*end == ' ' || *end == '\t') end++;
    double unit = 1024;
    switch (*end) {
    case 'b': case 'B': unit = 1, end++; break;
    case 'k': case 'K': unit = 1024, end++; break;
    case 'm': case 'M': unit = MiB, end++; break;
    case 'g': case 'G': unit = 1024 * MiB, end++; break;
    }
    while (*end == ' ' || *end == '\t') end++;
    return *end || v <= 0 ? 0 : v * unit;
}

static void find_thread_stack(char **envp) {
    static const char *names[] = {"OMP_STACKSIZE", "GOMP_STACKSIZE"};
    for (int i = 0; i < 2; i++) {
        double v = parse_stack_size(env_value(envp, names[i]));
        if (v > 0) {
            thread_stack = v, thread_stack_source = names[i];
            return;
        }
    }
    struct rlimit r;
    thread_stack = !getrlimit(RLIMIT_STACK, &r) && r.rlim_cur != RLIM_INFINITY ? (double)r.rlim_cur : 2 * MiB;
    thread_stack_source = "ulimit -s";
}

// The stacks over the margin: libgomp's threads beside the main one, and where the stack limit sets
// their size, also the checkpoint writer's (a thread of the C library's default stack)
static int big_stacks(int threads) {
    if (thread_stack <= THREAD_MARGIN) return 0;
    return strcmp(thread_stack_source, "ulimit -s") ? threads - 1 : threads;
}

const char *fc_thread_stack_clause(char *buf, size_t n) {
    buf[0] = 0;
    if (thread_stack > THREAD_MARGIN && n)
        snprintf(buf, n, " and their stacks of %.0f MiB (%s)", thread_stack / MiB, thread_stack_source);
    return buf;
}

double fc_thread_stack_bytes(const char **source) {
    if (source) *source = thread_stack_source;
    return thread_stack;
}

// Measured: a run's threads take OpenBLAS's buffers from its start ones, one more than they are.
static int buffers_for(int threads, int at_start) { return threads + 1 > at_start ? threads + 1 : at_start; }

double fc_address_space_to_come(int threads) {
    return (buffers_for(threads, start_buffers) - start_buffers) * FC_BLAS_BUFFER_BYTES + RUN_MARGIN +
           threads * THREAD_MARGIN + big_stacks(threads) * (thread_stack - THREAD_MARGIN);
}

static int positive(const char *s) {
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 0 && v < 100000 ? (int)v : 0;
}

void fc_address_space_check_start(int argc, char **argv, char **envp) {
    cpu_set_t set;
    int procs = !sched_getaffinity(0, sizeof set, &set) ? CPU_COUNT(&set) : 0;
    if (procs < 1) procs = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (procs < 1) procs = 1;
    // OpenBLAS's threads at its start: its own variables, else OMP_NUM_THREADS, at most the cores
    int blas = positive(env_value(envp, "OPENBLAS_NUM_THREADS"));
    if (!blas) blas = positive(env_value(envp, "GOTO_NUM_THREADS"));
    if (!blas) blas = positive(env_value(envp, "OMP_NUM_THREADS"));
    if (!blas || blas > procs) blas = procs;
    start_buffers = blas;
    find_thread_stack(envp);
    // framechain's threads: --threads N among the options before the command, each of which takes a
    // value (main checks them), else fc_default_threads()'s choice
    int threads = 0;
    for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (!strncmp(argv[i], "--threads=", 10)) threads = positive(argv[i] + 10);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = positive(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) i++;
    }
    if (!threads) threads = positive(env_value(envp, "OMP_NUM_THREADS"));
    if (!threads) threads = procs;
    double start = blas * FC_BLAS_BUFFER_BYTES, need = start + fc_address_space_to_come(threads), limit, used;
    const char *ulimit;
    // Under a limit, one malloc arena: each thread's own arena reserves 64 MiB of address space, and how
    // many threads make one depends on their timing (a run measured to fit hung when the machine was busy)
    if (fc_address_space_room(1e300, &limit, &used, &ulimit) == 0) mallopt(M_ARENA_MAX, 1);
    if (fc_address_space_room(need, &limit, &used, &ulimit)) return;
    // fewer threads help only where the run's buffers, not OpenBLAS's start ones, are over the limit
    int fewer = used + start + fc_address_space_to_come(1) <= limit;
    // a stack over the margin is named, and what sets it: it may be what does not fit
    char stack[160] = "";
    if (thread_stack > THREAD_MARGIN)
        snprintf(stack, sizeof stack, ", and each thread's stack is %.0f MiB (%s: a smaller one helps too)",
                 thread_stack / MiB, thread_stack_source);
    char line[900];
    int n = snprintf(line, sizeof line,
                     "framechain: the address space is limited to %.0f MiB (%s %.0f); with %d thread%s framechain "
                     "needs at least %.0f MiB, as OpenBLAS reserves 128 MiB a thread and stops responding where it "
                     "cannot%s: raise the limit (%s %.0f, or unlimited)%s\n",
                     limit / MiB, ulimit, limit / 1024, threads, threads == 1 ? "" : "s", (used + need) / MiB, stack,
                     ulimit, fc_address_space_advice_kib(used + need),
                     fewer ? " or run fewer threads (--threads)"
                           : " or start OpenBLAS with fewer threads (OPENBLAS_NUM_THREADS: at its start it takes "
                             "a buffer for each core)");
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) _exit(1);
    _exit(1);
}
