// config.h: run configuration. A config file holds `key = value` lines (a '#' at a line's start or
// after a space starts a comment); `--set key=value` overrides a key. Unknown keys and bad values end
// the program with one line naming the file, the line and the key. The *_checked functions and
// config_parse_text do the same work without ending the program: they return -1 with that line in
// `err`.
#ifndef FRAMECHAIN_CONFIG_H
#define FRAMECHAIN_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#define MAX_SLOTS 32
#define CONFIG_MAX_LINE 4096  // the longest line of a config file, in characters
#define CONFIG_MAX_BYTES (1 << 20)  // the largest config file: keys, values and comments fit many times over
#define CONFIG_MAX_PATH 1024  // the longest path a key (exclude) holds, with its NUL
#define CONFIG_MAX_STEPS 2000000000  // the steps of a run at most (the key steps, train --steps)
#define CONFIG_MAX_SEED 9000000000000000000LL  // the key seed at most (a checkpoint's metadata is read against it)

enum SlotKind { SLOT_ANCHOR = 0, SLOT_CONTEXT = 1, SLOT_TARGET = 2 };

// keep_blocks = auto: the trainer picks the number for its device and budget (memplan.h).
#define KEEP_BLOCKS_AUTO (-1)

typedef struct {
    // ---- network (docs/network.md) ----
    int frame_size;  // S: frames are S x S
    int channels;    // C
    int patch;       // P
    int width;       // D
    int depth;       // L
    int heads;       // NH
    int mlp_ratio;   // R
    int freq_dim;    // Fd
    // ---- role and frame plan: the window's slots ----
    int role;                       // enum Role: which part of the chain this model plays
    int slots;                      // F
    int slot_kind[MAX_SLOTS];       // enum SlotKind
    float slot_offset[MAX_SLOTS];   // time offset of each slot, in frames
    // ---- training ----
    int batch_size;      // B
    int recompute;       // 1: keep each block's output and modulation only, re-run its forward in backward;
                         // 2: keep its attention outputs and log-sum-exps too, the re-run skips attention
    int keep_blocks;     // with recompute: the last keep_blocks blocks keep everything and are not re-run;
                         // KEEP_BLOCKS_AUTO: as many as the memory budget allows (memory_plan_resolve)
    long long seed;
    double t_logit_mean;  // target t = sigmoid(mean + std * z)
    double t_logit_std;
    double noise_aug_max;  // context slots are noised to a level t drawn uniformly in [0, noise_aug_max]
    // ---- conditioning (docs/network.md, "Conditioning") ----
    int cond_concat;       // enum CondConcat: given frames concatenated to every slot's input channels
    int targets;           // enum Targets: target slots hold frames, or deltas from their reference slot
    double delta_scale;    // targets = deltas: the difference is multiplied by this (to about unit variance)
    int delta_reference;   // enum DeltaReference: the reference slot's frame as it is, or moved (global motion)
    int reference_zoom;    // 1: the global motion of delta_reference moved (objects) includes a zoom
    int object_bounce;     // 1: delta_reference objects: an object carried to the frame's edge bounces off it
    double reference_fill; // > 0: a moved reference's strip that comes into view fades from the repeated edge into
                           // the frame wrapped around, over about this many pixels; 0: the edge repeated
    int reference_fill_from;  // enum FillFrom: what reference_fill wraps around: the reference's own frame, or
                              // the anchor, moved by the motion since the anchor
    double anchor_snap;    // targets = deltas: reference pixels within this of the anchor's become the anchor's
    int sample_steps;      // Euler steps per window that generate and eval use without --steps
    double sample_temperature;  // the targets' starting noise that generate and eval use without --temperature
    double cond_drop;      // probability that a window's given frames are dropped (noise at t = 1), for guidance
    double ref_noise;      // std of the pixel noise put on context frames in training, before the deltas
    // ---- optimisation ----
    int steps;              // total optimizer steps of the run
    double lr;              // peak learning rate
    int warmup_steps;       // linear warmup from 0 to lr
    double lr_min_ratio;    // cosine decay ends at lr * lr_min_ratio
    int schedule_end;       // the step where the cosine decay ends (0: steps); lr * lr_min_ratio after it
    double weight_decay;    // decoupled, on the 2-D weights only
    double beta1, beta2, adam_eps;
    double grad_clip;       // clip the global gradient norm to this (0: off)
    double ema_decay;       // EMA of the weights, for generation
    int optimizer;          // enum Optimizer
    // ---- checkpoints ----
    int checkpoint_every;   // steps between checkpoints
    int keep_checkpoints;   // how many of the newest checkpoints stay on disk
    int shard_optimizer;    // on several ranks: each keeps the optimizer state and EMA of its part (ZeRO-1)
    int overlap_grads;      // on several ranks: each block's gradients summed while the backward goes on
    int collectives;        // enum Collectives: what GPU ranks sum and gather with
    // ---- previews (report/preview.h) ----
    int sample_every;       // steps between previews of the EMA model's samples (0: none)
    double preview_budget;  // the largest share of the training time previews may take; a preview past it waits
    char preview_data[CONFIG_MAX_PATH];  // a dataset folder the previews' windows come from; "": the run's own
    // ---- data ----
    int dataset;            // enum DataSource: the config key "dataset"
    double mix_shapes;      // training on shards: this fraction of the windows are moving shapes instead
    double fast_fraction;   // this fraction of the windows play their clip at 2x speed (every other frame)
    double crop_zoom;       // footage windows: a crop zoomed by a factor in [1, crop_zoom] (1: whole frames)
    double crop_pan;        // the crop's velocity on each axis in [-crop_pan, crop_pan] pixels a frame
    char exclude[CONFIG_MAX_PATH];  // a list of clips the loader never draws (loader.h); "": none (written "none")
} Config;

enum Role { ROLE_STARTER = 0, ROLE_EXTRAPOLATE = 1, ROLE_INTERPOLATE = 2 };
enum Optimizer { OPT_ADAMW8BIT = 0, OPT_ADAMW = 1 };
enum Collectives { COLL_AUTO = 0, COLL_MPI = 1, COLL_NCCL = 2 };
enum DataSource { DATA_SHAPES = 0, DATA_SHARDS = 1 };  // the built-in moving shapes, or prepared shards
// What every slot's input carries besides its own frame: nothing, the anchor, or the anchor and the
// slot's reference (config_reference_slot), each as C more channels.
enum CondConcat { CONCAT_NONE = 0, CONCAT_ANCHOR = 1, CONCAT_ANCHOR_NEAREST = 2 };
enum Targets { TARGETS_FRAMES = 0, TARGETS_DELTAS = 1 };
enum DeltaReference { DELTA_REF_NEAREST = 0, DELTA_REF_MOVED = 1, DELTA_REF_LOCAL = 2, DELTA_REF_OBJECTS = 3 };
enum FillFrom { FILL_FROM_FRAME = 0, FILL_FROM_ANCHOR = 1 };

// "starter", "extrapolate", "interpolate".
const char *config_role_name(int role);

// Defaults (the tiny test network with the starter plan).
void config_defaults(Config *c);
// Read `path` into c (over what is there). Dies with "path:line: ..." on any error.
void config_load(Config *c, const char *path);
// Parse `len` bytes of config text (no final newline needed) into c, over what is there. Returns 0,
// or -1 with "origin:line: ..." in err; c is then unchanged. A NUL byte in a line is an error.
int config_parse_text(Config *c, const char *text, size_t len, const char *origin, char *err, size_t errlen);
// config_parse_text without the keys' ranges: whether text is a config at all (every line a known
// key with a value of its type), whatever ranges the framechain that wrote it had. Never use what
// it parses into a Config: it may break the checks everything else relies on.
// The keys a config text does not set (they take their defaults: for a checkpoint of an earlier
// build, the keys added since), as "key = default" lines into buf (len bytes; "" when it sets every
// key). The count, or -1 when the text does not parse (ranges unchecked, as for an older file).
int config_unset_keys(const char *text, size_t len, char *buf, size_t buflen);
int config_parse_text_lenient(Config *c, const char *text, size_t len, const char *origin, char *err, size_t errlen);
// config_set, returning 0, or -1 with its message in err (c is then unchanged): one key's value
// checked by itself; the keys against each other are config_validate_checked's.
int config_set_checked(Config *c, const char *keyvalue, const char *origin, char *err, size_t errlen);
// config_validate, returning 0, or -1 with its message in err.
int config_validate_checked(const Config *c, const char *origin, char *err, size_t errlen);
// Apply one "key=value" override; `origin` names it in errors (e.g. "--set").
void config_set(Config *c, const char *keyvalue, const char *origin);
// Check the keys against each other; dies naming the key on a bad combination.
void config_validate(const Config *c, const char *origin);
// Write the config as `key = value` lines (the same syntax config_load reads).
void config_write(const Config *c, FILE *out);
// Value of one key as text (for checkpoint metadata); returns 0 when the key is unknown.
int config_get(const Config *c, const char *key, char *buf, size_t len);
// Every key name, NULL-terminated.
const char *const *config_keys(void);
// The plan's anchor slot.
int config_anchor_slot(const Config *c);
// Slot f's reference: f itself when it is given (anchor or context); for a target slot, the given
// slot nearest in time offset (on a tie, the one earlier in the plan).
int config_reference_slot(const Config *c, int f);
// Frames a slot's input carries (1 + the concatenated given frames) and input channels (C times that).
int config_input_frames(const Config *c);
static inline int config_input_channels(const Config *c) { return c->channels * config_input_frames(c); }
// 1 when a and b have the same value for every key (the plan: its first `slots` slots), else 0.
int config_equal(const Config *a, const Config *b);

#endif
