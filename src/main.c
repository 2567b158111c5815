// main.c: the command line. framechain [--threads N] [--device D] <command> [options]
// The global options, --help and --version, then the command (src/cmd_*.c) from the table.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/address_space.h"
#include "base/thread_start.h"
#include "base/common.h"
#include "base/commit.h"
#include "backend/registry.h"
#include "dist/dist.h"
#include "cli.h"
#include "commands.h"

// ----------------------------------------------------------------------------
// help text

static const char *USAGE =
    "framechain " FC_VERSION ": train video diffusion models on one GPU and chain them into long videos\n"
    "\n"
    "usage: framechain [--threads N] [--device cpu|cuda|cuda-fp32|auto] <command> [options]\n"
    "\n"
    "commands:\n"
    "  prepare   turn videos or folders of frames into training clips (shards)\n"
    "  train     train one model (starter, extrapolate or interpolate) from a config; resumes by itself\n"
    "  generate  chain the three models into a long video from one first frame\n"
    "  eval      score the chain on held-out clips: PSNR, SSIM against the real frames; drift\n"
    "  inspect   show a config's network and memory, or a checkpoint, run folder or dataset\n"
    "  plot      draw training curves of runs, or an eval TSV per frame, as a PNG\n"
    "  score     each clip of a dataset scored by a run's loss; the worst written as an exclude list\n"
    "  autoencode  an autoencoder's round trip on frames of a video: its PSNR, the decoded frames\n"
    "\n"
    "global options:\n"
    "  --threads N   CPU threads for OpenMP and OpenBLAS (default: all cores)\n"
    "  --device D    cpu, cuda (bf16 GEMMs, fp32 master weights), cuda-fp32 (fp32 throughout) or auto\n"
    "                (default auto: cuda where a GPU is found; where a driver is but the GPU cannot be\n"
    "                used, a warning says why). inspect, plot and prepare without --vae never use it\n"
    "  --version     version, commit and the backends this build has\n"
    "  -h, --help    this text; 'framechain <command> --help' (or 'framechain help <command>') for a command\n";

// ----------------------------------------------------------------------------
// the command table

// Which commands run on the device (--device): inspect and plot read files only, prepare runs an
// autoencoder with --vae alone. The others are handed the CPU, whatever --device says: a script's
// --device cuda still inspects and plots on a machine without a GPU, and on one with a GPU no CUDA
// context is made for them.
enum { DEVICE_NEVER, DEVICE_ALWAYS, DEVICE_WITH_VAE };

static const struct {
    const char *name;
    CommandFn run;
    int device;
} COMMANDS[] = {
    {"prepare", cmd_prepare, DEVICE_WITH_VAE}, {"train", cmd_train, DEVICE_ALWAYS},
    {"generate", cmd_generate, DEVICE_ALWAYS}, {"eval", cmd_eval, DEVICE_ALWAYS},
    {"inspect", cmd_inspect, DEVICE_NEVER}, {"plot", cmd_plot, DEVICE_NEVER},
    {"score", cmd_score, DEVICE_ALWAYS}, {"autoencode", cmd_autoencode, DEVICE_ALWAYS},
};

static int command_index(const char *name) {
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(COMMANDS[i].name, name)) return (int)i;
    return -1;
}

static CommandFn find_command(const char *name) {
    int i = command_index(name);
    return i < 0 ? NULL : COMMANDS[i].run;
}

// ----------------------------------------------------------------------------

// A command's help, as `framechain CMD --help` gives it (for `framechain --help CMD`, `framechain help CMD`).
static int command_help(int argc, char **argv, int i) {
    while (i < argc && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) i++;  // help --help: the usage
    if (i >= argc) return fputs(USAGE, stdout), 0;
    if (i + 1 < argc) usage_error("unexpected argument '%s' after %s %s", argv[i + 1], argv[i - 1], argv[i]);
    CommandFn run = find_command(argv[i]);
    if (!run) usage_error("unknown command '%s'", argv[i]);
    cli_set_command(argv[i]);
    char *help_argv[] = {argv[0], argv[i], "--help", NULL};
    return run(3, help_argv, backend_cpu());
}

// A stack limit (ulimit -s) under what the commands take: one line, where a command crashed without one
// (SIGSEGV: train's frames take about 350 KiB, generate's 150 KiB; a GPU's and MPI's libraries more).
#define MIN_STACK_BYTES ((rlim_t)2 << 20)
static void check_stack_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_STACK, &r) || r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= MIN_STACK_BYTES) return;
    fc_die("the stack is limited to %.0f KiB (ulimit -s %.0f); framechain needs at least %.0f KiB: raise the limit "
           "(ulimit -s %.0f, or 8192 as most systems start)", (double)r.rlim_cur / 1024, (double)r.rlim_cur / 1024,
           (double)MIN_STACK_BYTES / 1024, (double)MIN_STACK_BYTES / 1024);
}

// --threads N, or OMP_NUM_THREADS's count, or all cores.
#define MAX_THREADS 1024
static int thread_count(const Opt *threads) {
    if (threads->count) return (int)parse_positive("--threads", threads->value, MAX_THREADS);
    // the environment's count, held to the same bound (OpenMP's team of 99999 threads crashed at the
    // first parallel region with no word, and a million planned TiBs of scratch)
    const char *env = getenv("OMP_NUM_THREADS");
    if (env) {
        char *end;
        errno = 0;
        long n = strtol(env, &end, 10);
        if (end != env && (errno == ERANGE || n > MAX_THREADS)) {
            fprintf(stderr, "framechain: OMP_NUM_THREADS asks for more than the %d threads a command may run: give a "
                    "smaller value, or --threads N\n", MAX_THREADS);
            exit(1);
        }
    }
    return fc_default_threads();
}

// Before any library starts (OpenBLAS reserves its buffers in its constructor): an address space
// too small for them is one line, not a process that stops responding.
__attribute__((section(".preinit_array"), used)) static void (*const preinit_check)(int, char **, char **) =
    fc_address_space_check_start;

int main(int argc, char **argv) {
    fc_process_start();  // descriptors 0-2 open, SIGXFSZ a write error: before anything is opened
    check_stack_limit();  // every command, its --help too: the help runs in the command's frame
    // parsed as a command's options are: --threads=N too, a repeat refused, a value that is an option refused
    Opt globals[] = {{"--threads", 1}, {"--device", 1}, {NULL}};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return fc_finish_stdout(command_help(argc, argv, i + 1));
        if (!strcmp(a, "--version")) {
            // the global options after it are read (and checked) as before it; nothing else may follow
            for (int j = i + 1; j < argc; j++) {
                if (!strcmp(argv[j], "-h") || !strcmp(argv[j], "--help")) return fc_finish_stdout(command_help(argc, argv, j + 1));
                if (argv[j][0] != '-' || !strcmp(argv[j], "--version"))
                    usage_error("unexpected argument '%s' after --version", argv[j]);
                j = parse_opt(argc, argv, j, globals);
            }
            if (globals[1].count && !backend_device_known(globals[1].value))
                usage_error("--device %s: unknown device (cpu, cuda, cuda-fp32 or auto)", globals[1].value);
            fc_set_threads(thread_count(&globals[0]));
            printf("%s\n", fc_build_name());
            backend_print_versions(stdout);
            printf("ranks:\n  %s\n", dist_build_info());
            return fc_finish_stdout(0);
        }
        i = parse_opt(argc, argv, i, globals);
    }
    // --help after the command wins over a bad global value (--threads 0, --device gpu), as a command's
    // --help wins over its own bad options (cli.h: parse_opts): the help needs neither
    int asks_help = 0;
    for (int j = i; j < argc && strcmp(argv[j], "--"); j++) asks_help |= !strcmp(argv[j], "--help") || !strcmp(argv[j], "-h");
    int threads = asks_help ? 1 : thread_count(&globals[0]);
    const char *device = globals[1].count ? globals[1].value : "auto";
    // A --device it does not know: a bad command line, whatever follows (--device is framechain's option).
    if (!asks_help && !backend_device_known(device))
        usage_error("--device %s: unknown device (cpu, cuda, cuda-fp32 or auto)", device);
    if (i >= argc) usage_error("no command given: prepare, train, generate, eval, inspect, plot, score or autoencode");
    if (!strcmp(argv[i], "help")) return fc_finish_stdout(command_help(argc, argv, i + 1));
    const char *cmd = argv[i];
    // A command that does not exist is a bad command line: said before any device is opened.
    int ci = command_index(cmd);
    if (ci < 0) usage_error("unknown command '%s'", cmd);
    CommandFn run = COMMANDS[ci].run;
    fc_set_threads(threads);
    cli_set_command(cmd);
    // libgomp starts its team at the first parallel region, and where a thread cannot start it ends the
    // process naming no limit: tried here, before the command makes anything
    if (!asks_help) fc_threads_start_check(fc_threads());
    cli_set_device(device);
    // Training started by mpirun (or srun) is one rank of several (dist.h); each rank takes a GPU of
    // its machine by its local rank.
    if (!strcmp(cmd, "train")) {
        dist_start();
        backend_cuda_set_device(dist_local_rank());
    } else {
        dist_refuse_ranks(cmd);
    }
    // A device that cannot be had ends here, before any work; a command's --help needs none, nor does a
    // command that never runs on it (the table above).
    int help = 0, vae = 0, uses = COMMANDS[ci].device;
    for (int j = i + 1; j < argc && strcmp(argv[j], "--"); j++) {  // after "--", a path
        help |= !strcmp(argv[j], "--help") || !strcmp(argv[j], "-h");
        vae |= !strcmp(argv[j], "--vae") || !strncmp(argv[j], "--vae=", 6);  // (the parser takes both forms)
    }
    int on_device = !help && (uses == DEVICE_ALWAYS || (uses == DEVICE_WITH_VAE && vae));
    const Backend *be = on_device ? backend_select(device) : backend_cpu();
    // The command sees its own name as argv[1].
    return fc_finish_stdout(run(argc - (i - 1), argv + (i - 1), be));
}
