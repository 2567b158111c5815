// config.c: the config file reader, --set overrides and validation. The core returns errors
// instead of ending the program, so that checkpoints can be checked and the reader fuzzed;
// config_load, config_set and config_validate wrap it for the command line.
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/config.h"

// KEY_INT_AUTO: an int key that also takes `auto`, stored as -1. KEY_PATH: a file name (char
// [CONFIG_MAX_PATH]), `none` stored as "".
typedef enum { KEY_INT, KEY_INT_AUTO, KEY_LL, KEY_DOUBLE, KEY_PLAN, KEY_ENUM, KEY_PATH } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    double min, max;
    const char *help;
    const char *const *choices;  // KEY_ENUM: the names of the values 0, 1, ..., NULL-terminated
} KeyDef;

static const char *const OPTIMIZERS[] = {"adamw8bit", "adamw", NULL};
static const char *const COLLECTIVES[] = {"auto", "mpi", "nccl", NULL};
static const char *const ROLES[] = {"starter", "extrapolate", "interpolate", NULL};
static const char *const DATA_SOURCES[] = {"shapes", "shards", NULL};
static const char *const CONCATS[] = {"none", "anchor", "anchor+nearest", NULL};
static const char *const TARGET_KINDS[] = {"frames", "deltas", NULL};
static const char *const DELTA_REFERENCES[] = {"nearest", "moved", "local", "objects", NULL};
static const char *const FILL_FROM[] = {"frame", "anchor", NULL};

#define OFF(field) offsetof(Config, field)
static const KeyDef KEYS[] = {
    {"frame_size", KEY_INT, OFF(frame_size), 4, 4096, "frames are frame_size x frame_size pixels"},
    {"channels", KEY_INT, OFF(channels), 1, 64, "channels per frame (3 for RGB; a latent dataset's latent channels)"},
    {"patch", KEY_INT, OFF(patch), 1, 64, "patch side in pixels"},
    {"width", KEY_INT, OFF(width), 4, 16384, "transformer width D"},
    {"depth", KEY_INT, OFF(depth), 1, 256, "number of blocks"},
    {"heads", KEY_INT, OFF(heads), 1, 256, "attention heads"},
    {"mlp_ratio", KEY_INT, OFF(mlp_ratio), 1, 16, "MLP hidden width / D"},
    {"freq_dim", KEY_INT, OFF(freq_dim), 2, 4096, "sinusoid size for the t and offset embeddings"},
    {"role", KEY_ENUM, OFF(role), 0, 0, "starter, extrapolate or interpolate: the model's part in the chain", ROLES},
    {"plan", KEY_PLAN, OFF(slots), 0, 0, "slots of the window: kind:offset ..., kind = anchor|context|target"},
    {"batch_size", KEY_INT, OFF(batch_size), 1, 65536, "windows per step"},
    {"recompute", KEY_INT, OFF(recompute), 0, 2,
     "1: keep only each block's output and modulation and re-run the block in backward (less memory, same "
     "gradients); 2: keep its attention outputs too, so that the re-run skips attention (faster, a little more memory)"},
    {"keep_blocks", KEY_INT_AUTO, OFF(keep_blocks), 0, 256,
     "with recompute, the last keep_blocks blocks keep all their activations and are not re-run: the memory "
     "left on the card buys back time (0 to depth, or auto: as many as keep the GPU's plan 2 GiB under "
     "--vram-budget; inspect --config prints the plan)"},
    {"seed", KEY_LL, OFF(seed), 0, (double)CONFIG_MAX_SEED, "seed of every random draw"},
    {"t_logit_mean", KEY_DOUBLE, OFF(t_logit_mean), -10, 10, "mean of the logit-normal t of target slots"},
    {"t_logit_std", KEY_DOUBLE, OFF(t_logit_std), 0, 10, "std of the logit-normal t of target slots"},
    {"noise_aug_max", KEY_DOUBLE, OFF(noise_aug_max), 0, 0.95,
     "context slots are noised to a t drawn uniformly in [0, this] (SNR ((1-t)/t)^2)"},
    {"cond_concat", KEY_ENUM, OFF(cond_concat), 0, 0,
     "none, anchor or anchor+nearest: given frames concatenated to every slot's input channels", CONCATS},
    {"targets", KEY_ENUM, OFF(targets), 0, 0,
     "frames, or deltas: each target as its difference from the nearest given frame, times delta_scale", TARGET_KINDS},
    {"delta_scale", KEY_DOUBLE, OFF(delta_scale), 0.01, 1000,
     "targets = deltas: the differences are multiplied by this"},
    {"delta_reference", KEY_ENUM, OFF(delta_reference), 0, 0,
     "targets = deltas: the difference from the nearest given frame (nearest), or from that frame moved along "
     "the global motion of the given frames, extrapolated to the target's time (moved), or each 8x8-pixel tile "
     "of it carried along its own motion where that differs from the global one (local), or over a flat "
     "background each object moved along its own motion, elsewhere moved's (objects)", DELTA_REFERENCES},
    {"reference_zoom", KEY_INT, OFF(reference_zoom), 0, 1,
     "delta_reference moved or objects: the global motion of the given frames is a translation and a zoom (1), "
     "the zoom found where it halves what the translation alone leaves, or a translation alone (0)"},
    {"reference_fill", KEY_DOUBLE, OFF(reference_fill), 0, 1000,
     "a reference moved as a whole frame (moved's, and local's and objects' where they take it): what the shift "
     "brings into view at the frame's edge: the edge "
     "pixels repeated (0), or within about this many pixels of the edge the repeated edge fading into the "
     "frame wrapped around (what leaves at one edge comes in at the other), which keeps a long pan's colours; "
     "nearest, which shifts nothing, ignores it"},
    {"reference_fill_from", KEY_ENUM, OFF(reference_fill_from), 0, 0,
     "reference_fill > 0: the frame it fades into past the edge: the reference's own frame wrapped around "
     "(frame), or the anchor, a given frame, moved by the motion since the anchor and wrapped around (anchor), "
     "so that a long pan keeps bringing the given frame's colours and texture into view", FILL_FROM},
    {"object_bounce", KEY_INT, OFF(object_bounce), 0, 1,
     "delta_reference objects: an object carried to the frame's edge bounces back off it (1), as things in a box "
     "do, or goes on out of the frame (0); the other references ignore it"},
    {"anchor_snap", KEY_DOUBLE, OFF(anchor_snap), 0, 0.5,
     "targets = deltas: a reference pixel within this of the anchor's (every channel) takes the anchor's value, "
     "so a made frame's small errors do not carry on along the chain"},
    {"sample_steps", KEY_INT, OFF(sample_steps), 1, 100000,
     "Euler steps per window when generate or eval is not given --steps (the model's own default)"},
    {"sample_temperature", KEY_DOUBLE, OFF(sample_temperature), 0, 10,
     "standard deviation of the targets' starting noise when generate or eval is not given --temperature "
     "(1: the trained prior; lower: nearer the mean, less speckle and less motion)"},
    {"cond_drop", KEY_DOUBLE, OFF(cond_drop), 0, 1,
     "probability that a window's given frames are dropped to noise (trains the unconditional half of guidance)"},
    {"ref_noise", KEY_DOUBLE, OFF(ref_noise), 0, 0.5,
     "std of pixel noise on context frames in training (deltas taken from them): learn to clean made frames"},
    {"steps", KEY_INT, OFF(steps), 1, CONFIG_MAX_STEPS, "optimizer steps of the whole run"},
    {"lr", KEY_DOUBLE, OFF(lr), 0, 1, "peak learning rate"},
    {"warmup_steps", KEY_INT, OFF(warmup_steps), 0, 2e9, "linear learning-rate warmup"},
    {"lr_min_ratio", KEY_DOUBLE, OFF(lr_min_ratio), 0, 1, "the cosine decay ends at lr * lr_min_ratio"},
    {"schedule_end", KEY_INT, OFF(schedule_end), 0, 2e9,
     "the step where the cosine decay ends (0: at steps); after it the rate stays lr * lr_min_ratio (train "
     "--extend sets it to the old end)"},
    {"weight_decay", KEY_DOUBLE, OFF(weight_decay), 0, 10, "decoupled weight decay of the 2-D weights"},
    {"beta1", KEY_DOUBLE, OFF(beta1), 0, 0.99999, "AdamW first-moment decay"},
    // at most the largest value under 1 that stays under 1 in float (0.99999999 rounds to 1: the bias
    // correction 1 - beta2^t would be 0)
    {"beta2", KEY_DOUBLE, OFF(beta2), 0, 0.9999999, "AdamW second-moment decay"},
    {"adam_eps", KEY_DOUBLE, OFF(adam_eps), 1e-30, 1, "AdamW epsilon"},
    {"grad_clip", KEY_DOUBLE, OFF(grad_clip), 0, 1e9, "clip the gradient norm to this (0: off)"},
    {"ema_decay", KEY_DOUBLE, OFF(ema_decay), 0, 1, "decay of the weights' EMA (used for generation); step t uses min(this, (1+t)/(10+t))"},
    {"optimizer", KEY_ENUM, OFF(optimizer), 0, 0, "adamw8bit (8-bit moments) or adamw (fp32 moments)", OPTIMIZERS},
    {"checkpoint_every", KEY_INT, OFF(checkpoint_every), 1, 2e9, "steps between checkpoints"},
    {"keep_checkpoints", KEY_INT, OFF(keep_checkpoints), 1, 1000000, "the newest checkpoints kept on disk"},
    {"shard_optimizer", KEY_INT, OFF(shard_optimizer), 0, 1,
     "on several ranks (mpirun): 1: each rank keeps and updates the 8-bit AdamW state and the EMA of its part of the "
     "weights only, then the ranks gather the updated weights (ZeRO-1: less memory a rank, the same bytes); 0: every "
     "rank keeps all of it"},
    {"overlap_grads", KEY_INT, OFF(overlap_grads), 0, 1,
     "on several ranks (mpirun): 1: each block's gradients are summed over the ranks as soon as its backward has "
     "made them, while the blocks before it compute theirs; 0: one sum after the whole backward"},
    {"collectives", KEY_ENUM, OFF(collectives), 0, 0,
     "on several GPU ranks: auto: NCCL on device memory where the build has it, else MPI through host memory; mpi: "
     "MPI through host memory always (ranks that share a GPU, which NCCL refuses); nccl: NCCL or stop", COLLECTIVES},
    {"sample_every", KEY_INT, OFF(sample_every), 0, 2e9,
     "steps between previews: the EMA model samples its windows of held-out footage into RUN/samples/ (0: none)"},
    {"preview_budget", KEY_DOUBLE, OFF(preview_budget), 0.001, 1,
     "with sample_every: the largest share of the training time previews may take; a preview due while they have "
     "taken more is put off (with a line) until they fit again"},
    {"preview_data", KEY_PATH, OFF(preview_data), 0, 0,
     "with sample_every: a dataset folder (framechain prepare) the previews' windows come from, footage the run "
     "does not train on; none: the run's own --data (or, on the built-in shapes, clips no step draws)"},
    {"dataset", KEY_ENUM, OFF(dataset), 0, 0, "shapes (built in) or shards (set by train --data DIR)", DATA_SOURCES},
    {"mix_shapes", KEY_DOUBLE, OFF(mix_shapes), 0, 1, "training on shards: this fraction of windows are moving shapes"},
    {"fast_fraction", KEY_DOUBLE, OFF(fast_fraction), 0, 1, "training on shards: this fraction of windows play their clip at 2x speed (where the clips "
     "hold the plan's span at twice its offsets)"},
    {"crop_zoom", KEY_DOUBLE, OFF(crop_zoom), 1, 4,
     "training on shards: each window of footage is a crop of its clip zoomed by a factor drawn in [1, this] and "
     "scaled back to frame_size (1: whole frames)"},
    {"crop_pan", KEY_DOUBLE, OFF(crop_pan), 0, 4,
     "with crop_zoom > 1: the crop moves at a velocity drawn in [-this, this] pixels a frame on each axis, as far "
     "as the frame has room (a synthetic camera pan over real footage)"},
    {"exclude", KEY_PATH, OFF(exclude), 0, 0,
     "training on shards: a file of clips never drawn, one 'shard-NNNNN.safetensors K' a line (score "
     "--exclude-out writes one), or none"},
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

static const char *KIND_NAMES[] = {"anchor", "context", "target"};

const char *config_role_name(int role) { return role >= 0 && role <= ROLE_INTERPOLATE ? ROLES[role] : "?"; }

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    c->frame_size = 32, c->channels = 3, c->patch = 4, c->width = 64, c->depth = 2, c->heads = 4;
    c->mlp_ratio = 4, c->freq_dim = 64;
    c->slots = 7;
    for (int i = 0; i < 7; i++) c->slot_kind[i] = i ? SLOT_TARGET : SLOT_ANCHOR, c->slot_offset[i] = (float)i;
    c->batch_size = 2, c->seed = 1, c->t_logit_mean = 0.0, c->t_logit_std = 1.0;
    c->steps = 1000, c->lr = 3e-4, c->warmup_steps = 100, c->lr_min_ratio = 0.1, c->weight_decay = 0.01;
    c->beta1 = 0.9, c->beta2 = 0.999, c->adam_eps = 1e-8, c->grad_clip = 1.0, c->ema_decay = 0.999;
    c->optimizer = OPT_ADAMW8BIT, c->checkpoint_every = 100, c->keep_checkpoints = 3, c->dataset = DATA_SHAPES;
    c->shard_optimizer = 1, c->overlap_grads = 1;
    c->delta_scale = 4.0, c->crop_zoom = 1.0, c->sample_steps = 20, c->preview_budget = 0.05;
    c->sample_temperature = 1.0;
}

int config_anchor_slot(const Config *c) {
    for (int i = 0; i < c->slots; i++)
        if (c->slot_kind[i] == SLOT_ANCHOR) return i;
    return 0;
}

int config_reference_slot(const Config *c, int f) {
    if (c->slot_kind[f] != SLOT_TARGET) return f;
    int best = -1;
    for (int i = 0; i < c->slots; i++) {
        if (c->slot_kind[i] == SLOT_TARGET) continue;
        if (best < 0 || fabsf(c->slot_offset[i] - c->slot_offset[f]) < fabsf(c->slot_offset[best] - c->slot_offset[f]))
            best = i;
    }
    return best < 0 ? f : best;
}

int config_input_frames(const Config *c) { return 1 + c->cond_concat; }

static const KeyDef *find_key_n(const char *name, size_t len) {
    for (int i = 0; i < NKEYS; i++)
        if (strlen(KEYS[i].name) == len && !memcmp(KEYS[i].name, name, len)) return &KEYS[i];
    return NULL;
}

static const KeyDef *find_key(const char *name) { return find_key_n(name, strlen(name)); }

// "did you mean 'KEY'?; " for the key nearest to an unknown name (edit distance, a swap of two
// neighbours counted as one) when it is at most 2 away; else for the one key the name begins with
// or begins ("lrate": 'lr'; "warmup": 'warmup_steps'), at least 2 characters shared; else "": a
// typo's fix said at once.
static const char *key_hint(const char *name, size_t len, char *buf, size_t buflen) {
    enum { MAXLEN = 40 };  // past the longest key by more than 2: no key is near
    buf[0] = 0;
    if (len > MAXLEN) return buf;
    int best = 3;
    for (int k = 0; k < NKEYS; k++) {
        const char *key = KEYS[k].name;
        size_t kl = strlen(key);
        if (kl > MAXLEN) continue;
        int d[MAXLEN + 1][MAXLEN + 1];
        for (size_t i = 0; i <= len; i++) d[i][0] = (int)i;
        for (size_t j = 0; j <= kl; j++) d[0][j] = (int)j;
        for (size_t i = 1; i <= len; i++)
            for (size_t j = 1; j <= kl; j++) {
                int v = d[i - 1][j - 1] + (name[i - 1] != key[j - 1]);
                if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
                if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
                if (i > 1 && j > 1 && name[i - 1] == key[j - 2] && name[i - 2] == key[j - 1] && d[i - 2][j - 2] + 1 < v)
                    v = d[i - 2][j - 2] + 1;
                d[i][j] = v;
            }
        // not a name that shares nothing with the key ("ab" for "lr")
        if (d[len][kl] < best && (size_t)d[len][kl] < len) {
            best = d[len][kl];
            snprintf(buf, buflen, "did you mean '%s'?; ", key);
        }
    }
    if (buf[0]) return buf;
    const char *only = NULL;
    int count = 0;
    for (int k = 0; k < NKEYS; k++) {
        size_t kl = strlen(KEYS[k].name), shared = kl < len ? kl : len;
        if (shared >= 2 && !memcmp(KEYS[k].name, name, shared)) only = KEYS[k].name, count++;
    }
    if (count == 1) snprintf(buf, buflen, "did you mean '%s'?; ", only);
    return buf;
}

// The largest |slot offset|: beyond it a float cannot hold the offset (and no window spans more).
#define MAX_SLOT_OFFSET 1e6

// Parse "anchor:0 target:1 ..." into the plan fields; returns 0, or -1 with the reason in `why`.
static int parse_plan(Config *c, const char *text, char *why, size_t whylen) {
    int n = 0;
    const char *p = text;
    while (*p) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (!*p) break;
        const char *colon = strchr(p, ':');
        if (!colon) return fc_errf(why, whylen, "expected kind:offset entries, e.g. 'anchor:0 target:1'");
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if ((size_t)(colon - p) == strlen(KIND_NAMES[k]) && !strncmp(p, KIND_NAMES[k], colon - p)) kind = k;
        if (kind < 0) {
            int len = colon - p > 64 ? 64 : (int)(colon - p);  // keep the message one short line
            return fc_errf(why, whylen, "unknown slot kind '%.*s' (anchor, context or target)", len, p);
        }
        char *end;
        errno = 0;
        double off = strtod(colon + 1, &end);
        size_t digits = strspn(colon + 1, "0123456789.eE+-");  // decimal only: strtod also reads 0x10
        if (end == colon + 1 || errno || !isfinite(off) || colon + 1 + digits < end)
            return fc_errf(why, whylen, "slot offset is not a number");
        if (fabs(off) > MAX_SLOT_OFFSET)
            return fc_errf(why, whylen, "slot offset %g is out of range [%g, %g]", off, -MAX_SLOT_OFFSET, MAX_SLOT_OFFSET);
        if (n == MAX_SLOTS) return fc_errf(why, whylen, "more than %d slots", MAX_SLOTS);
        c->slot_kind[n] = kind, c->slot_offset[n] = (float)off, n++;
        p = end;
        if (*p && !isspace((unsigned char)*p) && *p != ',') return fc_errf(why, whylen, "expected a space between slots");
    }
    if (n == 0) return fc_errf(why, whylen, "the plan has no slots");
    int targets = 0;
    for (int i = 0; i < n; i++) targets += c->slot_kind[i] == SLOT_TARGET;
    if (!targets) return fc_errf(why, whylen, "the plan has no target slot");
    c->slots = n;
    return 0;
}

// Set while config_parse_text_lenient runs on this thread: the keys' ranges go unchecked.
static _Thread_local int g_ranges_unchecked;

// Set one key from text; returns 0, or -1 with the reason in `why`.
static int set_key(Config *c, const KeyDef *k, const char *value, char *why, size_t whylen) {
    char *end;
    errno = 0;
    if (k->type == KEY_PLAN) return parse_plan(c, value, why, whylen);
    if (k->type == KEY_PATH) {
        // printable ASCII without '#': it goes back through config_write (where '#' starts a comment)
        // and into checkpoint metadata as it is
        size_t n = strlen(value);
        if (n >= CONFIG_MAX_PATH)
            return fc_errf(why, whylen, "a path of %zu characters (at most %d)", n, CONFIG_MAX_PATH - 1);
        for (size_t i = 0; i < n; i++)
            if (value[i] < 32 || value[i] > 126 || value[i] == '#')
                return fc_errf(why, whylen, "a path of printable ASCII without '#' is needed here");
        char *path = (char *)c + k->offset;
        if (!strcmp(value, "none")) path[0] = 0;
        else memcpy(path, value, n + 1);
        return 0;
    }
    if (k->type == KEY_ENUM) {
        for (int i = 0; k->choices[i]; i++)
            if (!strcmp(k->choices[i], value)) {
                *(int *)((char *)c + k->offset) = i;
                return 0;
            }
        size_t used = 0;
        for (int i = 0; k->choices[i] && used < whylen; i++)
            used += (size_t)snprintf(why + used, whylen - used, "%s%s", i ? ", " : "expected one of: ", k->choices[i]);
        return -1;
    }
    if (k->type == KEY_DOUBLE) {
        double v = strtod(value, &end);
        // an underflow gives 0 or a subnormal, which is the value meant (and what config_write gives back)
        if (errno == ERANGE && fabs(v) < 1) errno = 0;
        if (end != value && !*end && errno == ERANGE)  // past what a double holds
            return fc_errf(why, whylen, "%s is out of range [%.10g, %.10g]", value, k->min, k->max);
        if (end == value || *end || errno || !isfinite(v)) return fc_errf(why, whylen, "not a number");
        // decimal only, as on the command line (cli.c): strtod also reads 0x1p-10, and "lr = 0x1" is a typo
        if (strspn(value, "0123456789.eE+-") != strlen(value)) return fc_errf(why, whylen, "not a decimal number");
        v += 0.0;  // -0 (or an underflow of a negative) as 0: printed back as "0", not "-0"
        if (!g_ranges_unchecked && (v < k->min || v > k->max))
            return fc_errf(why, whylen, "%.10g is out of range [%.10g, %.10g]", v, k->min, k->max);
        *(double *)((char *)c + k->offset) = v;
        return 0;
    }
    if (k->type == KEY_INT_AUTO && !strcmp(value, "auto")) {
        *(int *)((char *)c + k->offset) = -1;
        return 0;
    }
    long long v = strtoll(value, &end, 10);
    if (end != value && !*end && errno == ERANGE)  // an integer past what 64 bits hold
        return fc_errf(why, whylen, "%s is out of range [%.0f, %.0f]", value, k->min, k->max);
    if (end == value || *end || errno) return fc_errf(why, whylen, k->type == KEY_INT_AUTO ? "not an integer or auto"
                                                                                       : "not an integer");
    // compared as integers: a 64-bit value next to the bound rounds to it as a double
    if (!g_ranges_unchecked && (v < (long long)k->min || v > (long long)k->max))
        return fc_errf(why, whylen, "%lld is out of range [%.0f, %.0f]", v, k->min, k->max);
    if (k->type == KEY_INT || k->type == KEY_INT_AUTO)
        *(int *)((char *)c + k->offset) = (int)v;
    else
        *(long long *)((char *)c + k->offset) = v;
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

// config_parse_text, and the line of each key the text sets in seen (0: not set), when not NULL.
static int parse_text(Config *c, const char *text, size_t len, const char *origin, long seen[NKEYS], char *err,
                      size_t errlen) {
    Config t = *c;  // c changes only when the whole text is good
    char line[CONFIG_MAX_LINE + 1], why[256];
    size_t pos = 0;
    long lineno = 0, first[NKEYS] = {0};  // the line where each key was set: a second one is a mistake
    while (pos < len) {
        lineno++;
        const char *start = text + pos;
        // a line ends at LF, CRLF, or a CR alone (an old Mac editor's files, where the first '#' line
        // would otherwise have taken the whole file as one comment)
        size_t n = 0;
        while (n < len - pos && start[n] != '\n' && start[n] != '\r') n++;
        size_t end = n;
        if (end < len - pos) end += start[end] == '\r' && end + 1 < len - pos && start[end + 1] == '\n' ? 2 : 1;
        pos += end;
        if (n > CONFIG_MAX_LINE)
            return fc_errf(err, errlen, "%s:%ld: line longer than %d characters", origin, lineno, CONFIG_MAX_LINE);
        if (memchr(start, 0, n)) return fc_errf(err, errlen, "%s:%ld: NUL byte in the line", origin, lineno);
        memcpy(line, start, n);
        line[n] = 0;
        if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3)) memmove(line, line + 3, n - 2);  // a UTF-8 BOM (Notepad)
        // a comment starts at a '#' that begins the line or follows a space or tab: one inside a value
        // (a path) stays in it, where the key's own check refuses it, rather than cutting the value short
        char *hash = line;
        while ((hash = strchr(hash, '#')) && hash > line && hash[-1] != ' ' && hash[-1] != '\t') hash++;
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) return fc_errf(err, errlen, "%s:%ld: expected 'key = value', got '%s'", origin, lineno, s);
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        const KeyDef *k = find_key(key);
        char hint[64];
        if (!k)
            return fc_errf(err, errlen, "%s:%ld: unknown key '%s' (%sframechain train --help lists the keys)", origin,
                           lineno, key, key_hint(key, strlen(key), hint, sizeof hint));
        if (!*value) return fc_errf(err, errlen, "%s:%ld: %s has no value", origin, lineno, key);
        if (first[k - KEYS])
            return fc_errf(err, errlen, "%s:%ld: %s is set a second time (first on line %ld); which one was meant?",
                           origin, lineno, key, first[k - KEYS]);
        first[k - KEYS] = lineno;
        if (set_key(&t, k, value, why, sizeof why))
            return fc_errf(err, errlen, "%s:%ld: %s = %s: %s", origin, lineno, key, value, why);
    }
    *c = t;
    if (seen) memcpy(seen, first, sizeof first);
    return 0;
}

int config_parse_text(Config *c, const char *text, size_t len, const char *origin, char *err, size_t errlen) {
    return parse_text(c, text, len, origin, NULL, err, errlen);
}

int config_unset_keys(const char *text, size_t len, char *buf, size_t buflen) {
    Config c;
    config_defaults(&c);
    long seen[NKEYS];
    char err[512];
    g_ranges_unchecked = 1;
    int rc = parse_text(&c, text, len, "config", seen, err, sizeof err);
    g_ranges_unchecked = 0;
    if (buflen) buf[0] = 0;
    if (rc) return -1;
    Config d;
    config_defaults(&d);
    int n = 0;
    size_t used = 0;
    for (int k = 0; k < NKEYS; k++) {
        if (seen[k]) continue;
        char value[CONFIG_MAX_LINE];
        config_get(&d, KEYS[k].name, value, sizeof value);
        if (used < buflen) used += (size_t)snprintf(buf + used, buflen - used, "  %s = %s\n", KEYS[k].name, value);
        n++;
    }
    return n;
}

int config_parse_text_lenient(Config *c, const char *text, size_t len, const char *origin, char *err, size_t errlen) {
    g_ranges_unchecked = 1;
    int rc = parse_text(c, text, len, origin, NULL, err, errlen);
    g_ranges_unchecked = 0;
    return rc;
}

int config_set_checked(Config *c, const char *keyvalue, const char *origin, char *err, size_t errlen) {
    const char *eq = strchr(keyvalue, '=');
    if (!eq) return fc_errf(err, errlen, "%s %s: expected key=value", origin, keyvalue);
    const char *key = keyvalue, *kend = eq;
    while (key < kend && isspace((unsigned char)*key)) key++;
    while (kend > key && isspace((unsigned char)kend[-1])) kend--;
    const KeyDef *k = find_key_n(key, (size_t)(kend - key));
    char hint[64];
    if (!k)
        return fc_errf(err, errlen, "%s %s: unknown key '%.*s' (%sframechain train --help lists the keys)", origin,
                       keyvalue, (int)(kend - key), key, key_hint(key, (size_t)(kend - key), hint, sizeof hint));
    char *value = malloc(strlen(eq + 1) + 1), why[256];  // trimmed, as in a file
    if (!value) return fc_errf(err, errlen, "%s %s: out of host memory", origin, keyvalue);
    strcpy(value, eq + 1);
    Config t = *c;
    char *v = trim(value);
    // an empty value is a mistake (a script's unset variable), never "none": that is said as none
    int rc = !*v ? fc_errf(why, sizeof why, "has no value%s%s%s", k->type == KEY_PATH ? " (" : "",
                           k->type == KEY_PATH ? k->name : "", k->type == KEY_PATH ? "=none: no file)" : "")
                 : set_key(&t, k, v, why, sizeof why);
    free(value);
    if (rc) return fc_errf(err, errlen, "%s %s: %s", origin, keyvalue, why);
    *c = t;
    return 0;
}

int config_validate_checked(const Config *c, const char *origin, char *err, size_t errlen) {
    if (c->frame_size % c->patch)
        return fc_errf(err, errlen, "%s: frame_size %d is not a multiple of patch %d", origin, c->frame_size, c->patch);
    if (c->width % c->heads)
        return fc_errf(err, errlen, "%s: width %d is not a multiple of heads %d", origin, c->width, c->heads);
    if (c->width % 4)
        return fc_errf(err, errlen, "%s: width %d is not a multiple of 4 (the 2-D positions need it)", origin, c->width);
    int ppc = c->patch * c->patch * c->channels;
    if (c->width < ppc)
        return fc_errf(err, errlen, "%s: width %d is less than a patch's %d values (patch %d x %d x %d channels): the network "
                    "could not carry a patch's noise, and its samples would stay noisy; raise width or lower patch",
                    origin, c->width, ppc, c->patch, c->patch, c->channels);
    if (c->freq_dim % 2) return fc_errf(err, errlen, "%s: freq_dim %d is not even", origin, c->freq_dim);
    int anchors = 0, targets = 0;
    for (int i = 0; i < c->slots; i++) {
        anchors += c->slot_kind[i] == SLOT_ANCHOR;
        targets += c->slot_kind[i] == SLOT_TARGET;
        for (int j = 0; j < i; j++)
            if (c->slot_offset[j] == c->slot_offset[i] && c->slot_kind[i] != SLOT_ANCHOR &&
                c->slot_kind[j] != SLOT_ANCHOR)
                return fc_errf(err, errlen, "%s: plan: two slots at offset %g", origin, c->slot_offset[i]);
    }
    if (anchors != 1)
        return fc_errf(err, errlen, "%s: plan: %d anchor slots, expected exactly one (the first frame)", origin, anchors);
    if (!targets) return fc_errf(err, errlen, "%s: plan: no target slot (nothing to generate)", origin);
    if (c->keep_blocks != KEEP_BLOCKS_AUTO && c->keep_blocks > c->depth)
        return fc_errf(err, errlen, "%s: keep_blocks %d is more than depth %d", origin, c->keep_blocks, c->depth);
    if (c->delta_reference != DELTA_REF_NEAREST && c->targets != TARGETS_DELTAS)
        return fc_errf(err, errlen, "%s: delta_reference %s needs targets = deltas (frame targets have no reference)",
                       origin, DELTA_REFERENCES[c->delta_reference]);
    if (c->reference_zoom && c->delta_reference != DELTA_REF_MOVED && c->delta_reference != DELTA_REF_OBJECTS)
        return fc_errf(err, errlen, "%s: reference_zoom 1 needs delta_reference moved or objects (not %s)", origin,
                       DELTA_REFERENCES[c->delta_reference]);
    if (c->anchor_snap > 0 && c->targets != TARGETS_DELTAS)
        return fc_errf(err, errlen, "%s: anchor_snap %g needs targets = deltas (frame targets have no reference)",
                       origin, c->anchor_snap);
    if (c->crop_pan > 0 && c->crop_zoom == 1)
        return fc_errf(err, errlen, "%s: crop_pan %g needs crop_zoom > 1 (a whole frame has no room to pan in)", origin,
                       c->crop_pan);
    if (c->warmup_steps > c->steps)
        return fc_errf(err, errlen, "%s: warmup_steps %d is more than steps %d", origin, c->warmup_steps, c->steps);
    if (c->schedule_end && c->schedule_end < c->warmup_steps)
        return fc_errf(err, errlen, "%s: schedule_end %d is before the end of warmup_steps %d", origin,
                       c->schedule_end, c->warmup_steps);
    return 0;
}

void config_load(Config *c, const char *path) {
    // Not blocking on a FIFO, and a folder is named as one rather than failing as a "read error".
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat sb;
    if (fd < 0) fc_die("%s: cannot open config: %s", path, strerror(errno));
    if (fstat(fd, &sb)) fc_die("%s: cannot read config: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        fc_die("%s: not a config file (%s); give a file of key = value lines", path,
               S_ISDIR(sb.st_mode) ? "a folder" : "not a regular file");
    // A checkpoint or another binary file given by mistake is named as such, before it is read whole
    // (a checkpoint of the preset is 8.9 GiB); a safetensors file opens with its header's length and '{'
    // (st_looks_like_safetensors, a layer above this one)
    uint8_t head[9];
    if (pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && head[8] == '{' && !head[6] && !head[7])
        fc_die("%s: a safetensors file (a checkpoint?), not a config of key = value lines; framechain inspect %s "
               "shows the config a checkpoint holds", path, path);
    if (sb.st_size > CONFIG_MAX_BYTES)
        fc_die("%s: %lld bytes, too large for a config of key = value lines (at most %d MiB)", path,
               (long long)sb.st_size, CONFIG_MAX_BYTES >> 20);
    FILE *f = fdopen(fd, "rb");
    if (!f) fc_die("%s: cannot open config: %s", path, strerror(errno));
    size_t len = 0, cap = 4096;
    char *text = fc_malloc(cap);
    for (;;) {
        len += fread(text + len, 1, cap - len, f);
        if (len < cap) break;
        text = realloc(text, cap *= 2);
        if (!text) fc_die("%s: out of host memory reading the config", path);
    }
    if (ferror(f)) fc_die("%s: read error: %s", path, strerror(errno));
    fclose(f);
    char err[CONFIG_MAX_LINE + 512];
    long seen[NKEYS];
    if (parse_text(c, text, len, path, seen, err, sizeof err)) fc_die("%s", err);
    free(text);
    // A config file says which model it is: an empty file, or one that forgot its role, would
    // otherwise train a starter on the defaults without a word.
    int keys = 0;
    for (int i = 0; i < NKEYS; i++) keys += seen[i] != 0;
    if (!keys) fc_die("%s: sets no key (empty, or only comments); a config names at least its role", path);
    if (!seen[find_key("role") - KEYS])
        fc_die("%s: has no role = starter | extrapolate | interpolate: say which model of the chain it trains", path);
}

void config_set(Config *c, const char *keyvalue, const char *origin) {
    char err[CONFIG_MAX_LINE + 512];
    if (config_set_checked(c, keyvalue, origin, err, sizeof err)) fc_die("%s", err);
}

void config_validate(const Config *c, const char *origin) {
    char err[512];
    if (config_validate_checked(c, origin, err, sizeof err)) fc_die("%s", err);
}

int config_equal(const Config *a, const Config *b) {
    // every field is a key, so the key table says what to compare
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        const char *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
        switch (k->type) {
        case KEY_INT:
        case KEY_INT_AUTO:
        case KEY_ENUM:
            if (*(const int *)x != *(const int *)y) return 0;
            break;
        case KEY_LL:
            if (*(const long long *)x != *(const long long *)y) return 0;
            break;
        case KEY_DOUBLE:
            if (*(const double *)x != *(const double *)y) return 0;
            break;
        case KEY_PATH:
            if (strcmp(x, y)) return 0;
            break;
        case KEY_PLAN:
            if (a->slots != b->slots) return 0;
            for (int s = 0; s < a->slots; s++)
                if (a->slot_kind[s] != b->slot_kind[s] || a->slot_offset[s] != b->slot_offset[s]) return 0;
            break;
        }
    }
    return 1;
}

// The shortest %g text (6 to 9 digits) that reads back as the same float, so that config_write
// round-trips exactly and 0.1 still reads "0.1".
static void float_text(float v, char *buf, size_t len) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, len, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v) return;
    }
}

static void plan_text(const Config *c, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < c->slots && used < len; i++) {
        char off[32];
        float_text(c->slot_offset[i], off, sizeof off);
        used += (size_t)snprintf(buf + used, len - used, "%s%s:%s", i ? " " : "", KIND_NAMES[c->slot_kind[i]], off);
    }
}

int config_get(const Config *c, const char *key, char *buf, size_t len) {
    const KeyDef *k = find_key(key);
    if (!k) return 0;
    const char *p = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(buf, len, "%d", *(const int *)p); break;
    case KEY_INT_AUTO:
        if (*(const int *)p < 0) snprintf(buf, len, "auto");
        else snprintf(buf, len, "%d", *(const int *)p);
        break;
    case KEY_LL: snprintf(buf, len, "%lld", *(const long long *)p); break;
    case KEY_DOUBLE: {  // the shortest text that reads back as the same double
        double v = *(const double *)p;
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, len, "%.*g", digits, v);
            if (strtod(buf, NULL) == v) break;
        }
        break;
    }
    case KEY_PLAN: plan_text(c, buf, len); break;
    case KEY_ENUM: snprintf(buf, len, "%s", k->choices[*(const int *)p]); break;
    case KEY_PATH: snprintf(buf, len, "%s", *p ? p : "none"); break;
    }
    return 1;
}

void config_write(const Config *c, FILE *out) {
    char buf[1024];
    for (int i = 0; i < NKEYS; i++) {
        config_get(c, KEYS[i].name, buf, sizeof buf);
        fprintf(out, "%-13s = %-24s # %s\n", KEYS[i].name, buf, KEYS[i].help);
    }
}

const char *const *config_keys(void) {
    static const char *names[NKEYS + 1];
    for (int i = 0; i < NKEYS; i++) names[i] = KEYS[i].name;
    names[NKEYS] = NULL;
    return names;
}
