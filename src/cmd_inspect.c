// cmd_inspect.c: `framechain inspect`: a config's network and memory plan, a checkpoint's contents, or
// a prepared dataset's clips checked.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/common.h"
#include "base/config.h"
#include "base/paths.h"
#include "formats/safetensors.h"
#include "formats/shards.h"
#include "backend/registry.h"
#include "model/autoencoder.h"
#include "model/memplan.h"
#include "report/preview.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/metrics_line.h"
#include "train/run_folder.h"
#include "cli.h"
#include "commands.h"

static const char *HELP_INSPECT =
    "usage: framechain inspect --config FILE [--set key=value ...] [--params] [--ranks N]\n"
    "       framechain inspect CHECKPOINT.safetensors\n"
    "       framechain inspect DATASET\n"
    "       framechain inspect RUN\n"
    "\n"
    "With --config: the network the config describes, its parameter count and the memory one\n"
    "training step takes on the CPU backend and on a GPU (in bf16; framechain --device cuda-fp32 inspect:\n"
    "in fp32); --params lists every tensor (name, shape);\n"
    "--ranks N plans one rank of N (mpirun -np N): batch_size / N windows, and with shard_optimizer its\n"
    "1/N of the optimizer state and EMA (docs/distributed.md).\n"
    "With a checkpoint: its step, config, every tensor (name, dtype, shape) and whether its CRC checks,\n"
    "then what a resume would say of it (the metadata's CRC and values, finite weights and optimizer\n"
    "state, every tensor of its network there in its shape); the exit status is 1 when any check fails;\n"
    "a dataset's shard file: each clip read and checked alike; an autoencoder's file (--vae): its family,\n"
    "widths, latent channels and halves as the commands that run it read them, or why they cannot.\n"
    "With a dataset folder (framechain prepare --out): every clip read and its CRC checked; each clip that\n"
    "fails is named (shard, clip, source video); manifest.tsv checked against what the shards hold (in\n"
    "a dataset prepared before dataset.json recorded each shard's header CRC, a shard copied over\n"
    "another, or two swapped, pass their CRCs); the exit status is 1 when any fails.\n"
    "With a run folder (train --run): its checkpoints' steps and where its metrics end (the lines of\n"
    "metrics.jsonl it cannot read counted, the first named), each newer checkpoint a rerun would set\n"
    "aside and why, then the one the same train command resumes from, as above; the exit status is 1\n"
    "when any of them fails its checks.\n";

// A string from a file (a tensor's name, a metadata value, a clip's source) or a folder's name as
// inspect prints it: fc_printable_line's rule on a copy, so that one written to drive a terminal (an
// escape sequence, the C1 CSI, a right-to-left override) prints as text: a line break or tab a space,
// another control a '?'. Ordinary strings print as they are. At most len bytes of s; four buffers in
// turn: up to four uses per printf.
static const char *shown_n(const char *s, size_t len) {
    static char *bufs[4];
    static size_t caps[4];
    static int turn;
    turn = (turn + 1) % 4;
    len = strnlen(s, len);
    if (caps[turn] < len + 1) {
        free(bufs[turn]);
        bufs[turn] = fc_malloc(len + 1);
        caps[turn] = len + 1;
    }
    memcpy(bufs[turn], s, len);
    bufs[turn][len] = 0;
    fc_printable_line(bufs[turn]);
    return bufs[turn];
}
static const char *shown(const char *s) { return shown_n(s, strlen(s)); }

// A text of several lines (a checkpoint's lineage or config copy), each as shown_n shows it, after
// indent; its line breaks kept, and a last line without one ended.
static void print_lines(const char *indent, const char *text) {
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        printf("%s%s\n", indent, shown_n(line, len));
        line += len + (nl != NULL);
    }
}

// ----------------------------------------------------------------------------
// a checkpoint

// Its trainer state and its config, from the metadata.
static void print_file_meta(const StFile *f) {
    const char *keys[] = {"format", "format_version", "revision", "written_by", "device", "step", "seed", "data_cursor",
                          "smooth_loss"};
    const char *format = st_meta(f, "format");
    int checkpoint = format && !strcmp(format, CKPT_FORMAT);  // only checkpoints record a revision
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = st_meta(f, keys[i]);
        if (!v && checkpoint && !strcmp(keys[i], "revision")) v = "0 (written before revisions were recorded)";
        if (!v) continue;
        if (!strcmp(keys[i], "smooth_loss"))
            printf("%-15s %.6f\n", keys[i], strtod(v, NULL));
        else
            printf("%-15s %s\n", keys[i], shown(v));
    }
    const char *parent = st_meta(f, "parent"), *lineage = st_meta(f, "lineage");
    const char *data = st_meta(f, "data");
    if (data) printf("%-15s %s\n", "data", shown(data));
    const char *ae = st_meta(f, "autoencoder");
    if (ae) printf("%-15s %s\n", "autoencoder", shown(ae));
    if (parent) printf("%-15s %s\n", "parent", shown(parent));
    if (lineage) {  // one line per fork or extension, oldest first
        printf("lineage:\n");
        print_lines("  ", lineage);
    }
    const char *config = st_meta(f, "config");
    if (config) {
        printf("config:\n");
        print_lines("", config);
    }
    char unset[8192];
    int n = config ? config_unset_keys(config, strlen(config), unset, sizeof unset) : 0;
    if (n > 0)  // an earlier build's file: what a resume or generation takes for the keys added since
        printf("keys its config does not set (%d; an earlier framechain wrote it), taken at their defaults:\n%s", n,
               unset);
}

// A shard's clips: why each fails its check (NULL: it checks), by clip number.
typedef struct {
    char **why;
    int n;
} ShardVerdicts;
static int note_clip(int k, const char *why, void *ctx) {
    ShardVerdicts *v = ctx;
    if (k < v->n && why) v->why[k] = memcpy(fc_malloc(strlen(why) + 1), why, strlen(why) + 1);
    return 0;
}

// The CRC32 of each tensor of f (its header read alone) into crc[], a tensor at a time through one
// buffer of the largest's bytes: a checkpoint of the 24 GB preset is 8.9 GiB. 0, or -1 with a line in err.
static int stream_tensor_crcs(const char *path, const StFile *f, unsigned long *crc, char *err, size_t errlen) {
    int fd = st_open_data(path, f, err, errlen);
    if (fd < 0) return -1;
    void *buf = st_entry_buffer(f, path, err, errlen);
    int rc = buf ? 0 : -1;
    for (int i = 0; !rc && i < f->n; i++) {
        const StEntry *e = &f->entries[i];
        if (!(rc = st_read_entry(fd, f, e, buf, path, err, errlen))) crc[i] = crc32_z(0L, buf, (z_size_t)(e->end - e->begin));
    }
    if (!rc) rc = st_data_unchanged(fd, f, path, err, errlen);
    free(buf);
    close(fd);
    return rc;
}

// A checkpoint (or any safetensors file): its trainer state, its config, every tensor and its CRC,
// read a tensor at a time. A dataset's shard: read whole, every clip inflated and checked against its
// CRC32, as the dataset's check does. INSPECT_GONE: the file is no longer there (pruned by a train that
// runs; vanish_ok only).
#define INSPECT_GONE 2
static int inspect_file_or_gone(const char *path, int vanish_ok) {
    StFile f;
    char err[1024];
    unsigned long *crc = NULL;  // (f->n) the tensors' CRC32s, where they were read a tensor at a time
    int failed = st_read_header(path, &f, err, sizeof err);
    if (!failed && st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "framechain-shard")) {
        st_free(&f);
        failed = st_read(path, &f, err, sizeof err);
    } else if (!failed) {
        crc = fc_calloc((size_t)f.n + 1, sizeof *crc);
        if ((failed = stream_tensor_crcs(path, &f, crc, err, sizeof err))) st_free(&f), free(crc);
    }
    if (failed) {
        if (vanish_ok && access(path, F_OK) && errno == ENOENT) return INSPECT_GONE;
        fc_die("%s", err);
    }
    // what a resume would say of it, before anything is printed (it reads the file again)
    char verdict_why[1024];
    const char *fmt = st_meta(&f, "format");
    int step = -1, named = -1;
    CkptStatus verdict = fmt && !strcmp(fmt, CKPT_FORMAT) ? checkpoint_check(path, &step, verdict_why, sizeof verdict_why)
                                                          : CKPT_OK;
    // named as a run's checkpoint of another step: a resume sets it aside, as inspect RUN says
    const char *slash = strrchr(path, '/');
    if (fmt && !strcmp(fmt, CKPT_FORMAT)) named = checkpoint_step_of_name(slash ? slash + 1 : path);
    if (verdict == CKPT_OK && named >= 0 && step != named)
        snprintf(verdict_why, sizeof verdict_why, "%s: its metadata says step %d", path, step), verdict = CKPT_CORRUPT;
    if (verdict != CKPT_OK && vanish_ok && access(path, F_OK) && errno == ENOENT) {
        st_free(&f);
        free(crc);
        return INSPECT_GONE;
    }
    const char *format = st_meta(&f, "format");
    ShardVerdicts shard = {NULL, 0};
    if (format && !strcmp(format, "framechain-shard")) {
        shard.n = f.n, shard.why = fc_calloc((size_t)f.n + 1, sizeof(char *));
        if (shard_check_clips(&f, path, note_clip, &shard, err, sizeof err) < 0) fc_die("%s", err);
    }
    print_file_meta(&f);
    int bad = 0, unchecked = 0;
    size_t bytes = 0;
    printf("tensors:\n");
    for (int i = 0; i < f.n; i++) {
        const StEntry *e = &f.entries[i];
        char shape[128] = "(";
        size_t keylen = strlen(e->name) + 7;  // "crc32." and the name, however long
        char *key = fc_malloc(keylen);
        snprintf(key, keylen, "crc32.%s", e->name);
        const char *want = st_meta(&f, key);
        free(key);
        const char *status = "no CRC";
        int k = -1;
        if (shard.why && sscanf(e->name, "clip.%d", &k) == 1 && k >= 0 && k < shard.n) {
            status = shard.why[k] ? "CRC BAD" : "CRC ok";
            bad += shard.why[k] != NULL;
        } else if (want) {
            unsigned long got = crc ? crc[i] : crc32_z(0L, st_data(&f, e), (z_size_t)(e->end - e->begin));
            status = strtoul(want, NULL, 16) == got ? "CRC ok" : "CRC BAD";
            bad += status[4] == 'B';
        } else {
            unchecked++;
        }
        size_t used = 1;
        for (int d = 0; d < e->ndim && used < sizeof shape; d++)
            used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%ld", d ? ", " : "", e->shape[d]);
        if (used < sizeof shape - 1) strcat(shape, ")");
        const char *clip_why = k >= 0 && shard.why ? shard.why[k] : NULL;
        printf("  %-48s %-4s %-16s %s%s%s\n", shown(e->name), shown(e->dtype), shape, status, clip_why ? ": " : "",
               clip_why ? shown(clip_why) : "");
        bytes += e->end - e->begin;
    }
    printf("%d tensors, %zu bytes of data: %s\n", f.n, bytes,
           bad ? "SOME CRCs FAIL" : unchecked ? "no CRC for some tensors" : "every CRC checks");
    // A checkpoint whose CRCs check may still be one train will not resume from: say so as it would.
    if (!bad && format && !strcmp(format, CKPT_FORMAT)) {
        if (verdict == CKPT_CORRUPT)
            printf("UNUSABLE: %s; a resume sets it aside and goes back to the checkpoint before\n", shown(verdict_why));
        else if (verdict == CKPT_REFUSED)
            printf("NOT RESUMABLE: %s; a resume stops at it\n", shown(verdict_why));
        bad += verdict != CKPT_OK;
    }
    // An autoencoder's file (--vae): what the commands that run it would make of it
    // (any file but framechain's own: diffusers writes "format": "pt" into its autoencoders' files)
    if (!bad && !(format && (!strcmp(format, CKPT_FORMAT) || !strcmp(format, "framechain-shard"))) &&
        autoencoder_in_file(&f)) {
        Autoencoder *ae = autoencoder_load(path, backend_cpu(), err, sizeof err);
        if (ae) printf("autoencoder: %s\n", shown(autoencoder_describe(ae)));
        else printf("NOT USABLE as an autoencoder: %s\n", shown(err));
        bad += ae == NULL;
        free_autoencoder(ae);
    }
    for (int k = 0; k < shard.n; k++) free(shard.why[k]);
    free(shard.why);
    free(crc);
    st_free(&f);
    return bad ? 1 : 0;
}

static int inspect_file(const char *path) { return inspect_file_or_gone(path, 0); }

// ----------------------------------------------------------------------------
// a dataset

// One clip that fails: where it is stored, where it came from (through `origins`, which reads a shard's
// header once for all its bad clips), and why.
static void print_bad_clip(const Dataset *d, ClipOriginReader *origins, int clip, const char *why) {
    ClipLocation loc;
    char source[1024], err[1024];
    long first = -1;
    dataset_clip_location(d, clip, &loc);
    if (clip_origin_read(origins, clip, source, sizeof source, &first, err, sizeof err))
        snprintf(source, sizeof source, "(unknown: %s)", err);
    printf("  BAD %s clip.%d (clip %d of the dataset), from %s at frame %ld: %s\n", shown(loc.shard), loc.index, clip,
           shown(source), first, shown(why));
}

// manifest.tsv against what the shards record: its line k names clip k of the dataset (shard, index
// in it, source, first frame). Each shard's CRCs check its own bytes, but not that it is the shard
// prepare wrote under that name: one copied over another of the same size, or two swapped, hold
// other clips than the manifest lists. Says what it finds; 1 when a line disagrees (or the lines are
// not one a clip), 0 otherwise (also with no manifest: a line says so, nothing reads it but people).
static int check_manifest(const Dataset *d, const char *dir) {
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    FILE *f = fc_fopen_regular(path, err, sizeof err);  // a FIFO is refused, not waited on
    if (!f) {
        printf("manifest.tsv: not checked: %s\n", shown(err));
        return 0;
    }
    char **origin = dataset_clip_origins(d, err, sizeof err);
    if (!origin) {
        fclose(f);
        printf("manifest.tsv: not checked: %s\n", shown(err));
        return 1;
    }
    int n = dataset_clips(d), lines = 0, wrong = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (long lineno = 1; (len = getline(&line, &cap, f)) >= 0; lineno++) {
        if (lineno == 1) continue;  // the header
        line[strcspn(line, "\r\n")] = 0;
        int k = lines++;
        char *tab[4] = {NULL};
        tab[0] = strchr(line, '\t');
        for (int j = 1; j < 4 && tab[j - 1]; j++) tab[j] = strchr(tab[j - 1] + 1, '\t');
        ClipLocation loc;
        int listed = k < n && tab[3] && !dataset_clip_location(d, k, &loc), same = 0;
        if (listed) {
            *tab[0] = *tab[1] = *tab[3] = 0;  // shard, index, "source<TAB>first_frame" (as origin[k] is)
            same = !strcmp(line, loc.shard) && atol(tab[0] + 1) == loc.index && !strcmp(tab[1] + 1, origin[k]);
        }
        if (!same && ++wrong <= 10) {
            if (k >= n) printf("  MANIFEST line %ld: clip %d, but the dataset has %d clips\n", lineno, k, n);
            else if (!listed) printf("  MANIFEST line %ld: not shard, clip, source, first frame, ...\n", lineno);
            else {
                char *at = strrchr(origin[k], '\t');  // the shard's source and first frame, apart
                *at = *tab[2] = 0;
                printf("  MANIFEST line %ld (clip %d of the dataset): %s clip.%s from %s at frame %s", lineno, k,
                       shown(line), shown(tab[0] + 1), shown(tab[1] + 1), shown(tab[2] + 1));  // (shown: 4 a printf)
                printf(", but %s clip.%d holds the clip from %s at frame %s\n", shown(loc.shard), loc.index,
                       shown(origin[k]), shown(at + 1));
            }
        }
    }
    int read_error = fc_getline_error(f);
    free(line);
    fclose(f);
    if (read_error) {  // not its end: the lines after are unread, not missing
        printf("manifest.tsv: not checked past its line %d: cannot read: %s\n", lines + 1, strerror(read_error));
        dataset_clip_origins_free(origin, n);
        return 1;
    }
    int missing = lines < n ? n - lines : 0;
    if (missing) printf("  MANIFEST: %d lines for %d clips: the last %d clips are not listed\n", lines, n, missing);
    dataset_clip_origins_free(origin, n);
    if (wrong || missing)
        printf("manifest.tsv: %d of its %d lines disagree with the shards%s: a shard copied over another or renamed, "
               "or an old manifest; prepare the dataset again from its sources\n", wrong, lines,
               missing ? ", and clips are missing from it" : "");
    else
        printf("manifest.tsv: each of its %d lines names the clip its shard holds\n", lines);
    return wrong || missing ? 1 : 0;
}

// Every clip of a prepared dataset read and checked (CRC, zlib data), and manifest.tsv against the
// shards. 0 when all pass, 1 otherwise.
static int inspect_dataset(const char *dir) {
    char err[1024];
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d) fc_die("%s", err);
    int n = dataset_clips(d), bad = 0;
    const LatentIdentity *lat = dataset_latent(d);
    int N = dataset_frame_size(d);
    if (lat)
        printf("dataset %s: %d clips of %d frames as latents (%d, %d, %d) of %dx%d frames, each frame also mirrored, "
               "in %d shard%s\nautoencoder: %s, %dx, scale %s, shift %s, sha256 %s\n",
               shown(dir), n, dataset_clip_frames(d), lat->channels, N, N, lat->image_size, lat->image_size,
               dataset_shards(d), dataset_shards(d) == 1 ? "" : "s", shown(lat->family), lat->factor,
               FC_NUMBER(lat->scale), FC_NUMBER(lat->shift), shown(lat->sha256));
    else
        printf("dataset %s: %d clips of %d frames of %dx%d in %d shard%s\n", shown(dir), n, dataset_clip_frames(d), N,
               N, dataset_shards(d), dataset_shards(d) == 1 ? "" : "s");
    uint8_t *clip = fc_malloc(dataset_clip_bytes(d));
    ClipOriginReader *origins = clip_origin_reader(d);
    for (int k = 0; k < n; k++) {
        if (!dataset_read_clip(d, k, clip, err, sizeof err)) continue;
        const char *why = strstr(err, "): ");  // the reader's line names the shard and clip: keep its reason
        print_bad_clip(d, origins, k, why ? why + 3 : err);
        bad++;
    }
    clip_origin_reader_free(origins);
    free(clip);
    if (bad)
        printf(lat ? "%d of %d clips FAIL their check: training skips the windows that read a damaged frame, the "
                     "rest of each clip still trains; prepare the dataset again from its sources (framechain prepare "
                     "--vae FILE --input ... --out NEW_FOLDER)\n"
                   : "%d of %d clips FAIL their check: training skips them and eval leaves them out; prepare the "
                     "dataset again from its sources (framechain prepare --input ... --out NEW_FOLDER)\n",
               bad, n);
    else
        printf("%d clips: every CRC checks\n", n);
    int disagree = check_manifest(d, dir);
    dataset_close(d);
    return bad || disagree ? 1 : 0;
}

// ----------------------------------------------------------------------------
// a config

// The network's size and the plans that matter: the CPU's, and the GPU's against the default budget
// (each with keep_blocks = auto resolved for it): in bf16, or in fp32 where the command line names
// --device cuda-fp32 (inspect itself runs on no device).
// With ranks > 1: one rank's (memplan.h, memory_plan_per_rank).
static void print_config_memory(const Config *c, const ModelCounts *k, int ranks) {
    int fp32 = !strcmp(cli_device(), "cuda-fp32");
    PlanDevice gdev = fp32 ? PLAN_GPU_FP32 : PLAN_GPU_BF16;
    const char *gname = fp32 ? "cuda-fp32" : "cuda";
    int n = c->frame_size / c->patch, B = c->batch_size / ranks;
    printf("%-28s %zu in %d tensors\n", "parameters", k->params, k->n_tensors);
    printf("%-28s %d x %d slots x %d tokens = %d\n", ranks > 1 ? "tokens per step and rank" : "tokens per step", B,
           c->slots, n * n, B * c->slots * n * n);
    Config on_cpu = *c, on_gpu = *c;
    double budget = DEFAULT_VRAM_BUDGET_GIB * 1073741824.0;
    memory_plan_resolve(&on_cpu, B, PLAN_CPU, 0);
    if (c->keep_blocks == KEEP_BLOCKS_AUTO && !c->recompute)
        printf("%-28s recompute = 0: every block keeps its activations, on any device\n", "keep_blocks = auto");
    else if (c->keep_blocks == KEEP_BLOCKS_AUTO)
        printf("%-28s %d of %d blocks on --device %s (as many as keep its plan %.0f GiB under the budget), "
               "none on the CPU\n", "keep_blocks = auto",
               memory_plan_resolve(&on_gpu, B, gdev, budget + memory_plan_rank_savings(c, B, gdev, ranks, c->shard_optimizer)),
               c->depth, gname, KEEP_BLOCKS_AUTO_RESERVE_GIB);
    MemPlan cpu = memory_plan(&on_cpu, B, PLAN_CPU), gpu = memory_plan(&on_gpu, B, gdev);
    if (c->sample_every > 0)  // the previews' figure and windows, as train plans them (on footage; not decoded)
        cpu.previews += preview_plan_bytes(c, 1, 1), gpu.previews += preview_plan_bytes(c, 1, 1);
    cpu.program = (double)fc_resident_bytes();  // this process, as train measures its own when it starts
    memory_plan_sum(&cpu);
    memory_plan_per_rank(&cpu, ranks, c->shard_optimizer);
    memory_plan_per_rank(&gpu, ranks, c->shard_optimizer);
    // collectives = mpi sums the GPU ranks' gradients through a host copy (so does auto in a build
    // without NCCL, which train's own plan counts)
    memory_plan_host_grads(&gpu, ranks > 1 && c->collectives == COLL_MPI);
    char what[2][96];
    snprintf(what[0], sizeof what[0], "training on the CPU%s", ranks > 1 ? ", one rank of those" : "");
    snprintf(what[1], sizeof what[1], "training on --device %s, %s%s", gname, fp32 ? "fp32" : "bf16",
             ranks > 1 ? ", one rank of those" : "");
    if (ranks > 1)
        printf("%-28s %d windows of the batch of %d a rank%s\n", "ranks", B, c->batch_size,
               c->shard_optimizer ? "; optimizer state and EMA split over the ranks (ZeRO-1)" : "");
    memory_plan_print(stdout, &cpu, what[0], 0);
    memory_plan_print(stdout, &gpu, what[1], budget);
    // The ranks on one machine share its host memory: train checks their plans' sum against it (rank
    // 0's and the others', which write no checkpoint).
    if (ranks > 1) {
        MemPlan cpu_other = cpu, gpu_other = gpu;
        memory_plan_other_rank(&cpu_other, c->shard_optimizer);
        memory_plan_other_rank(&gpu_other, c->shard_optimizer);
        double GiB = 1073741824.0, machine = (double)fc_machine_memory(0);
        char here[64] = "";
        if (machine > 0) snprintf(here, sizeof here, " (this machine: %.2f GiB)", machine / GiB);
        char label[64];
        snprintf(label, sizeof label, "host memory of %d ranks", ranks);
        printf("%-28s %.2f GiB on one machine training on the CPU, %.2f GiB on %d GPUs (rank 0 stages the whole "
               "checkpoint; each other rank holds %.2f and %.2f GiB)%s\n", label,
               (cpu.total + (ranks - 1) * cpu_other.total) / GiB, (gpu.host + (ranks - 1) * gpu_other.host) / GiB,
               ranks, cpu_other.total / GiB, gpu_other.host / GiB, here);
    }
    // the disk a run folder needs (train says it again with what its file system has free)
    char needs[256];
    run_folder_disk_needs(needs, sizeof needs, cpu.staging, c->keep_checkpoints, 0,
                          run_folder_checkpoint_writes(1, c->steps, c->checkpoint_every));
    printf("%-28s %s\n", "disk", needs);
}

static int inspect_config(const Config *c, int list_params, int ranks) {
    // the layout alone, nothing allocated; shaped for one rank's windows, as train builds each rank's model
    // (the global batch may be too large for one step where a rank's share is not)
    ModelCounts k = model_counts(c, c->batch_size / ranks, sizeof(real));
    config_write(c, stdout);
    printf("\n");
    if (list_params) {
        for (int i = 0; i < k.n_tensors; i++) {
            const ParamInfo *pi = &k.info[i];
            if (pi->ndim == 2)
                printf("%-40s (%d, %d)\n", pi->name, pi->shape[0], pi->shape[1]);
            else
                printf("%-40s (%d)\n", pi->name, pi->shape[0]);
        }
        printf("\n");
    }
    print_config_memory(c, &k, ranks);
    free(k.info);
    return 0;
}

// ----------------------------------------------------------------------------
// a run folder

// Where RUN/metrics.jsonl ends: its last step's record (step and smooth_loss), then the lines that are
// no step's record (a last line torn by a power cut, text appended by hand), counted and the first
// named; they are left out (as train's cut-back of the file on a resume drops them), the run inspected
// all the same. Nothing when it has no line.
static void print_metrics_end(const char *run) {
    char path[4096], err[4200], why[256], first_why[256] = "";
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fc_fopen_regular(path, err, sizeof err);  // a FIFO is refused, not waited on
    if (!f && errno == ENOENT) return;
    if (!f) fc_die("%s", err);
    static const char *const keys[] = {"step", "smooth_loss"};
    double v[2], last[2];
    char *line = NULL;
    size_t cap = 0;
    long lines = 0, records = 0, unread = 0, first_unread = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lines++;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;  // a blank line
        // train's rule (metrics_line_record): a last line that reads but lacks its newline counts
        if (metrics_line_record(line, len, keys, 2, v, why, sizeof why)) {
            if (!unread++) first_unread = lines, snprintf(first_why, sizeof first_why, "%s", why);
            continue;
        }
        records++, last[0] = v[0], last[1] = v[1];
    }
    int read_error = fc_getline_error(f);
    free(line);
    fclose(f);
    if (read_error) fc_die("%s: cannot read: %s", path, strerror(read_error));
    if (records) {
        printf("metrics.jsonl   %ld lines, the last at step %.0f", lines, last[0]);
        if (!isnan(last[1])) printf(", smooth_loss %.6g", last[1]);
        printf("\n");
    }
    if (unread)
        printf("metrics.jsonl   %ld of its %ld lines cannot be read, left out (torn by a crash, or not written by "
               "train; a resume of train drops them from the file): the first is line %ld: %s\n", unread, lines,
               first_unread, shown(first_why));
}

// The run's checkpoints as a rerun of train goes through them, newest first: each one it would set
// aside (named, with why), then the one it resumes from (or stops at), shown as inspect_file shows it.
// The run's checkpoints listed again into *steps (freed and replaced) and *n: 1, or 0 when it holds
// none now or the same ones (*steps left as it was).
static int list_again(const char *run, int **steps, int *n) {
    int *again, m = checkpoint_list(run, &again);
    // the same names again (a link to nothing: listed, never there to read): nothing was pruned
    if (m <= 0 || (m == *n && !memcmp(again, *steps, sizeof(int) * (size_t)m))) return free(again), 0;
    free(*steps);
    *steps = again, *n = m;
    return 1;
}

// Where a rerun of train would start the run again, in train's words: a fork's parent as its
// checkpoints name it (train --from, as the fork was made; step 0 without it), else step 0 (or a fork's parent, where no checkpoint's metadata reads to say).
static void restart_point(const char *run, char *out, size_t len) {
    char parent[1200];
    int step = 0, named = run_folder_named_parent(run, parent, sizeof parent, &step);
    run_folder_restart_point(named == 1 ? parent : NULL, step, out, len);
    if (named == 1)  // train's refusal names the parent where it is given --from, as a fork's command is
        snprintf(out + strlen(out), len - strlen(out), " (given --from; without it, from step 0)");
    if (named < 0)
        snprintf(out + strlen(out), len - strlen(out), " (or, were it a fork, its parent: no checkpoint's metadata "
                 "here reads to say)");
}

static int inspect_run(const char *run, int *steps, int n) {
    printf("run %s: %d checkpoint%s, steps", shown(run), n, n == 1 ? "" : "s");
    for (int i = 0; i < n && i < 8; i++) printf(" %d", steps[i]);
    printf("%s\n", n > 8 ? " ..." : "");
    print_metrics_end(run);
    int aside = run_folder_set_aside(run), damaged = 0, relisted = 0;
    if (aside) printf("set aside       %d damaged checkpoint%s (ckpt-*.unusable)\n", aside, aside == 1 ? "" : "s");
    char path[4096], why[1024];
    for (int i = 0; i < n; i++) {
        checkpoint_path(path, sizeof path, run, steps[i]);
        int step = -1;
        CkptStatus s = checkpoint_check(path, &step, why, sizeof why);
        // A file that went away since the listing was pruned by a train that runs (a newer one took its
        // place): list the folder again, a bounded number of times, rather than call it unusable.
        if (s != CKPT_OK && access(path, F_OK) && errno == ENOENT && relisted < 100 && list_again(run, &steps, &n)) {
            i = -1, relisted++;
            continue;
        }
        if (s == CKPT_OK && step != steps[i])
            snprintf(why, sizeof why, "%s: its metadata says step %d", path, step), s = CKPT_CORRUPT;
        if (s == CKPT_CORRUPT && checkpoint_cannot_open(path, why, sizeof why)) {
            printf("UNREADABLE: %s; a rerun of train stops at it\n", shown(why));
            free(steps);
            return 1;
        }
        if (s == CKPT_CORRUPT) {
            printf("UNUSABLE: %s; a rerun of train sets it aside\n", shown(why));
            damaged++;
            continue;
        }
        printf("%s: %s\n\n", s ? "a rerun of train stops at" : i == 0 ? "the newest" : "a rerun of train resumes from",
               shown(path));
        int rc = inspect_file_or_gone(path, relisted < 100);
        if (rc == INSPECT_GONE) {  // pruned between its check and now: the newest again
            printf("(%s was pruned by the train that writes the run while it was read: the run again)\n", shown(path));
            if (list_again(run, &steps, &n)) {
                i = -1, relisted++;
                continue;
            }
        }
        free(steps);
        return rc || damaged ? 1 : 0;
    }
    free(steps);
    char from[1400];
    restart_point(run, from, sizeof from);
    if (n == 1)
        printf("its one checkpoint cannot be resumed from: a rerun of train sets it aside and refuses to start the run "
               "again from %s\n", from);
    else
        printf("none of its %d checkpoints can be resumed from: a rerun of train sets them aside and refuses to start "
               "the run again from %s\n", n, from);
    return 1;
}

// A dataset (dataset.json), else a run folder (its checkpoints); anything else gets the dataset's line,
// which says what is missing.
static int inspect_folder(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    if (!access(path, F_OK)) return inspect_dataset(dir);
    int *steps = NULL, n = checkpoint_list(dir, &steps);
    if (n > 0) return inspect_run(dir, steps, n);  // it frees steps
    free(steps);
    int aside = run_folder_set_aside(dir);
    if (aside) {
        char from[1400];
        restart_point(dir, from, sizeof from);
        fc_die("%s: a run folder with no checkpoint to resume from: %d damaged one%s set aside as ckpt-*.unusable (a "
               "rerun of train refuses to start the run again from %s)", dir, aside, aside == 1 ? "" : "s", from);
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    long trained = access(path, F_OK) ? -1 : run_folder_metrics_last_step(dir);
    if (trained > 0)  // as train's trained_before judges it: a run killed before its first checkpoint is not lost
        fc_die("%s: a run folder with no checkpoint, its metrics.jsonl up to step %ld: a rerun of train starts it "
               "again from step 0 only where that is within 2 checkpoint_every steps, else refuses (the steps "
               "trained would be lost)", dir, trained);
    if (trained == 0)
        fc_die("%s: a run folder with no checkpoint yet (train writes one every checkpoint_every steps)", dir);
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    int shards = 0;  // shard files without dataset.json: a prepare cut off, which inspect_dataset says
    DIR *d = access(path, F_OK) ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) shards += !strncmp(e->d_name, "shard-", 6);
    if (d) closedir(d);
    if (access(path, F_OK) && !shards)
        fc_die("%s: neither a run folder (no ckpt-*.safetensors, no metrics.jsonl) nor a dataset (no dataset.json, no "
               "shards): give a run folder, a dataset or a checkpoint", dir);
    return inspect_dataset(dir);
}

// ----------------------------------------------------------------------------

int cmd_inspect(int argc, char **argv, const Backend *be) {
    Opt opts[] = {{"--config", 1}, {"--set", 1, 1}, {"--params", 0}, {"--ranks", 1}, {NULL}};
    const char *file = NULL;
    if (parse_opts(argc, argv, 2, opts, &file)) return fputs(HELP_INSPECT, stdout), 0;
    if (file && opt(opts, "--config")->count) usage_error("give either a checkpoint or --config, not both");
    static const char *const config_only[] = {"--set", "--params", "--ranks"};
    for (int i = 0; file && i < 3; i++)  // they shape a config's plan: a file or folder would ignore them
        if (opt(opts, config_only[i])->count) usage_error("%s goes with --config, not with %s", config_only[i], file);
    struct stat st;
    if (file && !stat(file, &st) && S_ISDIR(st.st_mode)) return inspect_folder(file);
    if (file) return inspect_file(file);
    if (!opt(opts, "--config")->count) usage_error("missing a checkpoint or --config");
    Config c = load_config(opts);
    int ranks = opt(opts, "--ranks")->count ? (int)parse_positive("--ranks", opt(opts, "--ranks")->value, 1 << 20) : 1;
    if (c.batch_size % ranks)
        usage_error("--ranks %d: batch_size = %d is not a multiple of it (each rank takes batch_size / N windows)",
                    ranks, c.batch_size);
    return inspect_config(&c, opt(opts, "--params")->count > 0, ranks);
}
