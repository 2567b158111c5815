// cmd_train.c: `framechain train`: one model of the chain from a config (train/train.h), resumed,
// extended or forked (train/lineage.h).
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "base/config.h"
#include "base/sha256.h"
#include "dataset/exclude.h"
#include "formats/shards.h"
#include "model/autoencoder.h"
#include "model/memplan.h"
#include "dist/dist.h"
#include "train/run_folder.h"
#include "train/train.h"
#include "report/preview.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_TRAIN =
    "usage: framechain train --config FILE --run DIR [--data DIR] [--steps N] [--set key=value ...]\n"
    "                        [--vram-budget GIB] [--sync-checkpoints] [--vae FILE]\n"
    "       framechain train --config FILE --run DIR --extend --steps N [...]\n"
    "       framechain train --from RUN/ckpt-XXXXXXXX.safetensors --run NEW [--config FILE] [--data DIR]\n"
    "                        [--steps N] [--set key=value ...]\n"
    "\n"
    "Train one model of the chain. The config names the network, the frame plan (the role) and the\n"
    "optimisation; --set overrides any key (a key given twice: the last). Checkpoints (weights, EMA and\n"
    "the 8-bit AdamW state) are written to RUN crash-safely; running the same command again resumes from\n"
    "the newest good one.\n"
    "A checkpoint continues only its own run: another config (steps and lr included) is refused.\n"
    "--data DIR is a dataset made by 'framechain prepare'; without it, the built-in moving-shapes set.\n"
    "--steps N is the run's end (over any --set steps); a longer warmup_steps is cut to N, with a line.\n"
    "\n"
    "  --extend      go on past the run's end, to --steps N: the steps up to the old end keep their\n"
    "                learning rates (the cosine decay ends where it ended), the new ones run at its final\n"
    "                rate, lr * lr_min_ratio; recorded in the run's lineage\n"
    "  --from CKPT   a new run in --run NEW from that checkpoint's weights, EMA and optimizer state, its\n"
    "                step count going on from the checkpoint's: the parent's config (or --config FILE)\n"
    "                with --set, --data and --steps over it; keys of the network are refused; the\n"
    "                parent and the keys changed are recorded in the lineage ('framechain inspect' shows\n"
    "                it); rerun the same command to resume the fork\n"
    "\n"
    "  --vae FILE    a run on latents (prepare --vae): the autoencoder the data was made with (checked by\n"
    "                its SHA-256), which decodes the previews (sample_every); it stays on the device for\n"
    "                the run, and the memory plan counts it\n"
    "\n"
    "SIGINT, SIGTERM or SIGHUP (the terminal closed) writes a checkpoint and exits with 128 + the\n"
    "signal number.\n"
    "'mpirun -np N framechain train ...' trains the same run on N ranks (a build with MPI: framechain\n"
    "--version says): each takes batch_size / N windows of every step's batch, the same windows whatever\n"
    "N is, and a GPU of its machine; rank 0 writes the run folder, whose checkpoints resume on any N.\n"
    "A checkpoint is copied into page-locked host memory and written by a background thread while\n"
    "training goes on; --sync-checkpoints waits for each write instead (the same files; the log's\n"
    "'blocked' figure compares the two).\n"
    "The memory plan is printed before the first step; on a GPU a plan above --vram-budget (default\n"
    "24 GiB) is refused, and the measured peak is printed at the end.\n"
    "\n"
    "config keys:\n";

// The run's config: --config's (a fork without it: its parent's) with --set over it, then --steps N
// over any --set steps, a longer warmup_steps cut to N (*cut_warmup: the warmup cut, said when the run
// starts); checked once all of it is in, so that --steps, not the file's steps, is what warmup_steps
// and the other keys are held to.
static Config train_config(Opt *opts, const Config *parent, int *cut_warmup) {
    Config c;
    char origin[4200];
    int sets = opt(opts, "--set")->count;
    if (!parent || opt(opts, "--config")->count) {
        config_defaults(&c);
        const char *path = required(opts, "--config");
        config_load(&c, path);
        snprintf(origin, sizeof origin, "%s%s", path, sets ? " with its --set" : "");
    } else {
        c = *parent;
        snprintf(origin, sizeof origin, "%s", sets ? "--set" : "its parent's config");
    }
    apply_sets(&c, opts);  // a bad --set steps too, though --steps stands over it
    *cut_warmup = 0;
    if (opt(opts, "--steps")->count) {
        // the steps key's own range: every checkpoint's config is read back against it
        c.steps = (int)parse_positive("--steps", opt(opts, "--steps")->value, CONFIG_MAX_STEPS);
        if (c.warmup_steps > c.steps) *cut_warmup = c.warmup_steps, c.warmup_steps = c.steps;
    }
    config_validate(&c, origin);
    return c;
}

// The value of the last --set KEY=... (the one that stands), or NULL where no --set names KEY.
static const char *set_value(Opt *opts, const char *key) {
    Opt *set = opt(opts, "--set");
    const char *found = NULL;
    size_t n = strlen(key);
    for (int i = 0; i < set->count; i++) {
        const char *kv = set->values[i];
        while (isspace((unsigned char)*kv)) kv++;
        if (strncmp(kv, key, n)) continue;  // (kv is at least n long past here)
        const char *after = kv + n;
        while (isspace((unsigned char)*after)) after++;
        if (*after == '=') found = after + 1;
    }
    return found;
}

// The autoencoder by its content, the identity latent datasets record (its SHA-256), not by its path:
// each machine may hold its copy elsewhere. Where a rank's file is not rank 0's (or one has none), that
// rank says so, naming both files; a rank that cannot read its own says why. Every rank then ends.
static void check_ranks_same_vae(const char *vae) {
    if (dist_size() == 1) return;  // nothing to compare: the autoencoder's loading says what is wrong with it
    char id[80] = "none", err[1024] = "", hex[65];
    if (vae && sha256_file(vae, hex, err, sizeof err)) snprintf(id, sizeof id, "unreadable");
    else if (vae) snprintf(id, sizeof id, "sha256 %s", hex);
    char differs[256];
    if (!dist_same_text(id, differs, sizeof differs)) return;  // (unreadable on every rank: rank 0 says why)
    struct {
        char path[4096], id[80];
    } first = {"", ""};  // rank 0's
    if (dist_rank() == 0) snprintf(first.path, sizeof first.path, "%s", vae ? vae : ""), memcpy(first.id, id, sizeof id);
    dist_broadcast(&first, sizeof first);
    const char *same = "every rank of a run is started with the same command, config and files";
    if (err[0] && dist_rank() == 0) fc_die("%s%s", dist_rank_origin(), err);
    if (err[0] && !first.path[0]) fc_die("%s%s (%s; rank 0 has no --vae)", dist_rank_origin(), err, same);
    if (err[0]) fc_die("%s%s (%s; rank 0 reads its --vae %s)", dist_rank_origin(), err, same, first.path);
    if (!differs[0] || !strcmp(first.id, "unreadable")) fc_exit(1);  // another rank says what differs
    if (!vae) fc_die("%sno --vae, where rank 0 has --vae %s (%s)", dist_rank_origin(), first.path, same);
    if (!first.path[0]) fc_die("%s--vae %s, where rank 0 has none (%s)", dist_rank_origin(), vae, same);
    fc_die("%s--vae %s is another autoencoder than rank 0's --vae %s (%s against %s): %s; each machine's copy of "
           "the autoencoder holds the same bytes", dist_rank_origin(), vae, first.path, id, first.id, same);
}

// Every rank runs the same command on the same files and device: a rank with another config, run
// folder, data, autoencoder or device (mpirun -np 1 A --device cpu : -np 1 A --device cuda, or
// --device auto finding a GPU on one machine only: other arithmetic in each rank's gradients) would
// train another run than the one rank 0 records in its checkpoints. The rank that differs says where;
// every rank ends before anything is written.
static void check_ranks_agree(const Config *c, const char *run, const char *data_identity, const char *vae,
                              const char *from, int extend, const Backend *be) {
    if (dist_size() == 1) return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) fc_die("out of memory");
    char data_key[200];  // the dataset's and exclude list's CRCs: each machine may hold its copy elsewhere
    lineage_data_key(data_identity, data_key, sizeof data_key);
    fprintf(f, "--device = %s (%s)\n--run = %s\n--data = %s\n--from = %s\n--extend = %d\n", be->name, be->precision, run,
            data_key, from ? from : "", extend);
    char value[CONFIG_MAX_LINE];
    for (const char *const *key = config_keys(); *key; key++)  // the exclude list by its CRC, above
        if (strcmp(*key, "exclude") && config_get(c, *key, value, sizeof value)) fprintf(f, "%s = %s\n", *key, value);
    fclose(f);
    char err[512];
    int differ = dist_same_text(text, err, sizeof err);
    free(text);
    if (differ && err[0]) fc_die("%s (every rank of a run is started with the same command, config and files)", err);
    if (differ) fc_exit(1);  // another rank said what differs
    check_ranks_same_vae(vae);
}

// The working folder and the arguments, one a line (malloc'ed): what a rank's reading of its command
// line and config depends on.
static char *command_text(int argc, char **argv) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) fc_die("out of host memory");
    char cwd[4096];
    fprintf(f, "%s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
    for (int i = 0; i < argc; i++) fprintf(f, "%s\n", argv[i]);
    if (fclose(f) || !text) fc_die("out of host memory");
    return text;
}

int cmd_train(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--config", 1}, {"--data", 1}, {"--run", 1}, {"--steps", 1}, {"--set", 1, 1}, {"--vram-budget", 1},
                  {"--sync-checkpoints", 0}, {"--extend", 0}, {"--from", 1}, {"--vae", 1},
                  {NULL}};
    // The command line and the config read alike on every rank of a machine: its first rank says what
    // is wrong with them, the others only exit (mpirun -np 8 on one machine: one line, not eight; on
    // several machines it names its own). Ranks started with other command lines (mpirun's
    // "-np 1 A : -np 1 B", another -wdir) each say their own, named.
    char *command = command_text(argc, argv);
    int alike = dist_local_alike(command);
    free(command);
    fc_quiet_messages(alike && dist_local_rank() > 0);
    fc_message_origin(alike ? dist_machine_origin() : dist_rank_origin());
    if (parse_opts(argc, argv, 2, opts, NULL)) {
        fputs(HELP_TRAIN, stdout);
        print_config_keys();
        return 0;
    }
    TrainOrigin origin = {0};
    origin.extend = opt(opts, "--extend")->count > 0;
    const char *from = opt(opts, "--from")->count ? opt(opts, "--from")->value : NULL;
    if (origin.extend && from) usage_error("give either --extend or --from, not both");
    if (origin.extend && !opt(opts, "--steps")->count) usage_error("--extend needs --steps N, the run's new end");
    const char *run = required(opts, "--run");
    // a value on the command line is checked before any file is read, as every command's is
    double budget = opt(opts, "--vram-budget")->count
                        ? parse_number("--vram-budget", opt(opts, "--vram-budget")->value, 0.01, 1e6)
                        : DEFAULT_VRAM_BUDGET_GIB;
    char err[4096], now[256];
    Config parent;
    if (from && lineage_read_parent(from, &parent, &origin, err, sizeof err)) {
        // the fork resumes on its own, whatever became of its parent's file; where it cannot, what is
        // wrong with its own checkpoints is said, not only the parent's file
        if (lineage_resume_fork(run, from, &parent, &origin)) {
            run_folder_explain_orphan(run, from, err, sizeof err);
            fc_die("%s", err);
        }
        printf("%s: its parent %s cannot be read; the fork resumes from its own checkpoints, whose config stands "
               "in for the parent's\n", FC_ESCAPED(run), FC_ESCAPED(from));
    } else if (from && lineage_parent_replaced(run, &origin, err, now, sizeof now)) {
        // the file at that path is another checkpoint now (the parent's folder trained again): the fork
        // goes on as it was made, never from the other file's config
        if (lineage_resume_fork(run, from, &parent, &origin)) fc_die("%s: cannot read its own newest checkpoint", run);
        printf("%s: %s is %s now, not the checkpoint the fork was made from %s; the fork resumes from its own "
               "checkpoints, whose config stands in for the parent's\n", FC_ESCAPED(run), FC_ESCAPED(from), FC_ESCAPED(now), FC_ESCAPED(err));
    }
    // keys the command line sets another way: said at once, not left to a rule they break later
    if (set_value(opts, "dataset"))
        usage_error("--set dataset=%s: the data is chosen by --data DIR (a dataset) or its absence (the built-in "
                    "moving shapes)", set_value(opts, "dataset"));
    // --steps N stands over any --set steps (scripts build on a base), said when the run starts
    char overridden[256] = "";
    if (opt(opts, "--steps")->count && set_value(opts, "steps"))
        snprintf(overridden, sizeof overridden, "%.100s", set_value(opts, "steps"));
    int cut_warmup;  // said when the run starts, not before a refusal's one line
    Config c = train_config(opts, from ? &parent : NULL, &cut_warmup);
    const char *data = opt(opts, "--data")->count ? opt(opts, "--data")->value : NULL;
    c.dataset = data ? DATA_SHARDS : DATA_SHAPES;  // so a checkpoint made on other data is refused
    if (c.exclude[0] && !data) {
        // a value on the command line is a bad command line (status 2); one in a file, the file's (status 1)
        if (set_value(opts, "exclude"))
            usage_error("exclude = %s: an exclude list needs --data (it names clips of a dataset)", c.exclude);
        const char *file = opt(opts, "--config")->count ? opt(opts, "--config")->value : from;
        fc_die("%s: exclude = %s: an exclude list needs --data (it names clips of a dataset)",
               file ? FC_ESCAPED(file) : "the config", c.exclude);
    }
    // the list read before the run's data identity records its CRC32 (an unreadable one would be told as
    // other data than the run's)
    if (c.exclude[0] && exclude_list_check_file(c.exclude, err, sizeof err)) fc_die("exclude = %s", err);
    fc_quiet_messages(0);  // from here a rank may meet what the others do not (its device, its memory)
    fc_message_origin(NULL);
    lineage_data_identity(data, c.exclude, origin.data, sizeof origin.data);
    // A rank whose machine lacks its copy of the data says why before the ranks compare what they read
    // (the comparison would name the rank that differs, not what is wrong: "unreadable").
    if (dist_size() > 1) {  // a collective: every rank calls it, with --data or without (the comparison says which)
        Dataset *d = data ? dataset_open(data, err, sizeof err) : NULL;
        dist_fail_alike(data && !d, err);
        dataset_close(d);
    }
    check_ranks_agree(&c, run, origin.data, opt(opts, "--vae")->count ? opt(opts, "--vae")->value : NULL, from,
                      origin.extend, be);
    // another train using the folder first: its pruning changes the checkpoints the reads below list
    if (dist_rank() == 0 && run_folder_busy(run, err, sizeof err)) fc_die("%s", err);
    // the run to extend or fork, which every rank of a machine reads alike: said once a machine
    int refused = origin.extend && lineage_extend(&c, run, &origin, err, sizeof err);
    if (!refused && from)
        refused = lineage_fork_folder(run, &origin, err, sizeof err) ||
                  lineage_fork(&parent, &c, &origin, err, sizeof err);
    // a refusal some ranks meet and others not: they do not see one run folder
    if (dist_size() > 1 && dist_max_int(refused) && -dist_max_int(-refused) == 0 && refused) {
        char said[sizeof err];
        snprintf(said, sizeof said, "%s%s (other ranks found the run otherwise: every rank reads the run folder, "
                 "which must be on a filesystem all of them see)", dist_rank_origin(), err);
        snprintf(err, sizeof err, "%s", said);
    }
    dist_fail_alike(refused, err);
    // a run this config cannot continue is refused now, before the plan and the lines about it
    if (dist_rank() == 0 && run_folder_precheck(run, &c, &origin, err, sizeof err)) fc_die("%s", err);
    const char *vae = opt(opts, "--vae")->count ? opt(opts, "--vae")->value : NULL;
    Autoencoder *ae = NULL;
    if (vae && c.sample_every <= 0) usage_error("--vae %s: it decodes the previews, and sample_every is 0", vae);
    // said, not passed over unread (a config file may keep it while a resume turns the previews off)
    if (c.preview_data[0] && c.sample_every <= 0 && dist_rank() == 0)  // (rank 0's line: it takes the previews)
        fc_warn("preview_data = %s: not read: it is the footage of the previews, and sample_every is 0 (none)",
                c.preview_data);
    // it decodes the previews, which rank 0 takes: the other ranks neither load it nor hold it on their GPUs
    if (vae && dist_rank() == 0 && !(ae = autoencoder_load(vae, be, err, sizeof err))) fc_die("%s", err);
    int P = ae ? c.frame_size * autoencoder_factor(ae) : 0;
    // its weights, one frame's activations and its convolutions' scratch
    double resident = ae ? autoencoder_memory_bytes(ae, 1, P, P) + autoencoder_scratch_bytes(ae, P, P) : 0;
    if (c.keep_blocks == KEEP_BLOCKS_AUTO) {  // what the autoencoder and the routes hold is not the blocks' to keep
        int B = c.batch_size / dist_size();  // a rank's, whose ZeRO-1 parts leave room for more
        PlanDevice dev = plan_device(be->name, be->precision);
        double room = budget * 1073741824.0 - resident - memory_plan_routes(&c, B, be) +
                      memory_plan_rank_savings(&c, B, dev, dist_size(), c.shard_optimizer);
        int kept = memory_plan_resolve(&c, B, dev, room);
        if (!c.recompute)  // nothing is recomputed: every block keeps its activations whatever keep_blocks says
            printf("keep_blocks = auto: recompute = 0, so every block keeps its activations on %s\n", be->name);
        else
            printf("keep_blocks = auto: %d of %d blocks keep their activations on %s\n", kept, c.depth, be->name);
    }
    TrainHooks hooks = {.resident = resident, .resident_loaded = ae ? autoencoder_memory_bytes(ae, 0, P, P) : 0,
                        .vae = ae ? vae : NULL};
    Preview *preview = NULL;
    // Before the run starts: preview_data that cannot serve ends it here. Rank 0 takes the previews.
    if (c.sample_every > 0 && dist_rank() == 0) {
        if (!(preview = preview_open(&c, run, data, ae, vae, err, sizeof err))) fc_die("%s", err);
        printf("previews: %s, into %s/samples/%s%s\n", preview_describe(preview), FC_ESCAPED(run), ae ? ", decoded by " : "",
               ae ? FC_ESCAPED(vae) : "");
        // resident for the run, its scratch counted
        hooks = (TrainHooks){.preview = preview_take, .ctx = preview, .resident = resident,
                             .resident_loaded = hooks.resident_loaded, .missing = preview_missing, .vae = hooks.vae};
        // (on the CPU the windows preview_open holds are in the program train measures; on a GPU, not)
        hooks.preview_host = preview_plan_bytes(&c, ae ? autoencoder_factor(ae) : 1, strcmp(be->name, "cpu") != 0);
    }
    char notes[512] = "";  // said once the run starts: not before a refusal's one line
    if (overridden[0])
        snprintf(notes, sizeof notes, "--steps %d stands over --set steps=%s\n", c.steps, overridden);
    if (cut_warmup && !origin.extend)  // (an extended run keeps the warmup its checkpoint has)
        snprintf(notes + strlen(notes), sizeof notes - strlen(notes), "--steps %d: warmup_steps %d cut to %d, the "
                 "whole run\n", c.steps, cut_warmup, c.steps);
    hooks.notes = notes;
    fc_stdout_is_report();  // the run is on disk: every checkpoint whole whatever becomes of the progress lines
    int status = train_run(&c, run, data, be, &origin, budget * 1073741824.0,
                           opt(opts, "--sync-checkpoints")->count > 0, &hooks);
    preview_close(preview);
    free_autoencoder(ae);
    dist_end();
    return status;
}
