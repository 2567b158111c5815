// config.c: the config file reader, --set overrides and validation.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "common.h"
#include "config.h"

typedef enum { KEY_INT, KEY_LL, KEY_DOUBLE, KEY_PLAN, KEY_ENUM } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    double min, max;
    const char *help;
    const char *const *choices;  // KEY_ENUM: the names of the values 0, 1, ..., NULL-terminated
} KeyDef;

static const char *const OPTIMIZERS[] = {"adamw8bit", "adamw", NULL};
static const char *const DATASETS[] = {"shapes", NULL};

#define OFF(field) offsetof(Config, field)
static const KeyDef KEYS[] = {
    {"frame_size", KEY_INT, OFF(frame_size), 4, 4096, "frames are frame_size x frame_size pixels"},
    {"channels", KEY_INT, OFF(channels), 1, 64, "channels per frame (3 for RGB)"},
    {"patch", KEY_INT, OFF(patch), 1, 64, "patch side in pixels"},
    {"width", KEY_INT, OFF(width), 4, 16384, "transformer width D"},
    {"depth", KEY_INT, OFF(depth), 1, 256, "number of blocks"},
    {"heads", KEY_INT, OFF(heads), 1, 256, "attention heads"},
    {"mlp_ratio", KEY_INT, OFF(mlp_ratio), 1, 16, "MLP hidden width / D"},
    {"freq_dim", KEY_INT, OFF(freq_dim), 2, 4096, "sinusoid size for the t and offset embeddings"},
    {"plan", KEY_PLAN, OFF(slots), 0, 0, "slots of the window: kind:offset ..., kind = anchor|context|target"},
    {"batch_size", KEY_INT, OFF(batch_size), 1, 65536, "windows per step"},
    {"seed", KEY_LL, OFF(seed), 0, 9.0e18, "seed of every random draw"},
    {"t_logit_mean", KEY_DOUBLE, OFF(t_logit_mean), -10, 10, "mean of the logit-normal t of target slots"},
    {"t_logit_std", KEY_DOUBLE, OFF(t_logit_std), 0, 10, "std of the logit-normal t of target slots"},
    {"steps", KEY_INT, OFF(steps), 1, 2e9, "optimizer steps of the whole run"},
    {"lr", KEY_DOUBLE, OFF(lr), 0, 1, "peak learning rate"},
    {"warmup_steps", KEY_INT, OFF(warmup_steps), 0, 2e9, "linear learning-rate warmup"},
    {"lr_min_ratio", KEY_DOUBLE, OFF(lr_min_ratio), 0, 1, "the cosine decay ends at lr * lr_min_ratio"},
    {"weight_decay", KEY_DOUBLE, OFF(weight_decay), 0, 10, "decoupled weight decay of the 2-D weights"},
    {"beta1", KEY_DOUBLE, OFF(beta1), 0, 0.99999, "AdamW first-moment decay"},
    {"beta2", KEY_DOUBLE, OFF(beta2), 0, 0.99999999, "AdamW second-moment decay"},
    {"adam_eps", KEY_DOUBLE, OFF(adam_eps), 1e-30, 1, "AdamW epsilon"},
    {"grad_clip", KEY_DOUBLE, OFF(grad_clip), 0, 1e9, "clip the gradient norm to this (0: off)"},
    {"ema_decay", KEY_DOUBLE, OFF(ema_decay), 0, 1, "decay of the weights' EMA, used for generation"},
    {"optimizer", KEY_ENUM, OFF(optimizer), 0, 0, "adamw8bit (8-bit moments) or adamw (fp32 moments)", OPTIMIZERS},
    {"checkpoint_every", KEY_INT, OFF(checkpoint_every), 1, 2e9, "steps between checkpoints"},
    {"keep_checkpoints", KEY_INT, OFF(keep_checkpoints), 1, 1000000, "the newest checkpoints kept on disk"},
    {"dataset", KEY_ENUM, OFF(dataset), 0, 0, "shapes (the built-in moving-shapes generator)", DATASETS},
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

static const char *KIND_NAMES[] = {"anchor", "context", "target"};

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
}

static const KeyDef *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].name, name)) return &KEYS[i];
    return NULL;
}

// Parse "anchor:0 target:1 ..." into the plan fields; returns an error message or NULL.
static const char *parse_plan(Config *c, const char *text) {
    static char err[160];
    int n = 0;
    const char *p = text;
    while (*p) {
        while (isspace((unsigned char)*p) || *p == ',') p++;
        if (!*p) break;
        const char *colon = strchr(p, ':');
        if (!colon) return "expected kind:offset entries, e.g. 'anchor:0 target:1'";
        int kind = -1;
        for (int k = 0; k < 3; k++)
            if ((size_t)(colon - p) == strlen(KIND_NAMES[k]) && !strncmp(p, KIND_NAMES[k], colon - p)) kind = k;
        if (kind < 0) {
            snprintf(err, sizeof err, "unknown slot kind '%.*s' (anchor, context or target)", (int)(colon - p), p);
            return err;
        }
        char *end;
        errno = 0;
        double off = strtod(colon + 1, &end);
        if (end == colon + 1 || errno || !isfinite(off)) return "slot offset is not a number";
        if (n == MAX_SLOTS) {
            snprintf(err, sizeof err, "more than %d slots", MAX_SLOTS);
            return err;
        }
        c->slot_kind[n] = kind, c->slot_offset[n] = (float)off, n++;
        p = end;
        if (*p && !isspace((unsigned char)*p) && *p != ',') return "expected a space between slots";
    }
    if (n == 0) return "the plan has no slots";
    int targets = 0;
    for (int i = 0; i < n; i++) targets += c->slot_kind[i] == SLOT_TARGET;
    if (!targets) return "the plan has no target slot";
    c->slots = n;
    return NULL;
}

// Set one key from text; returns an error message or NULL.
static const char *set_key(Config *c, const KeyDef *k, const char *value) {
    static char err[200];
    char *end;
    errno = 0;
    if (k->type == KEY_PLAN) return parse_plan(c, value);
    if (k->type == KEY_ENUM) {
        size_t used = 0;
        for (int i = 0; k->choices[i]; i++) {
            if (!strcmp(k->choices[i], value)) {
                *(int *)((char *)c + k->offset) = i;
                return NULL;
            }
            used += (size_t)snprintf(err + used, sizeof err - used, "%s%s", i ? ", " : "expected one of: ", k->choices[i]);
            if (used >= sizeof err) break;
        }
        return err;
    }
    if (k->type == KEY_DOUBLE) {
        double v = strtod(value, &end);
        if (end == value || *end || errno || !isfinite(v)) return "not a number";
        if (v < k->min || v > k->max) {
            snprintf(err, sizeof err, "%g is out of range [%g, %g]", v, k->min, k->max);
            return err;
        }
        *(double *)((char *)c + k->offset) = v;
        return NULL;
    }
    long long v = strtoll(value, &end, 10);
    if (end == value || *end || errno) return "not an integer";
    if (v < k->min || v > k->max) {
        snprintf(err, sizeof err, "%lld is out of range [%.0f, %.0f]", v, k->min, k->max);
        return err;
    }
    if (k->type == KEY_INT)
        *(int *)((char *)c + k->offset) = (int)v;
    else
        *(long long *)((char *)c + k->offset) = v;
    return NULL;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

void config_load(Config *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) fc_die("%s: cannot open config: %s", path, strerror(errno));
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) fc_die("%s:%d: line longer than %zu characters", path, lineno, sizeof line);
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) fc_die("%s:%d: expected 'key = value', got '%s'", path, lineno, s);
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        const KeyDef *k = find_key(key);
        if (!k) fc_die("%s:%d: unknown key '%s' (framechain train --help lists the keys)", path, lineno, key);
        if (!*value) fc_die("%s:%d: %s has no value", path, lineno, key);
        const char *err = set_key(c, k, value);
        if (err) fc_die("%s:%d: %s = %s: %s", path, lineno, key, value, err);
    }
    if (ferror(f)) fc_die("%s: read error", path);
    fclose(f);
}

void config_set(Config *c, const char *keyvalue, const char *origin) {
    const char *eq = strchr(keyvalue, '=');
    if (!eq) fc_die("%s %s: expected key=value", origin, keyvalue);
    char key[128];
    size_t klen = (size_t)(eq - keyvalue);
    if (klen >= sizeof key) klen = sizeof key - 1;
    memcpy(key, keyvalue, klen);
    key[klen] = 0;
    const KeyDef *k = find_key(trim(key));
    if (!k) fc_die("%s %s: unknown key '%s'", origin, keyvalue, key);
    const char *err = set_key(c, k, eq + 1);
    if (err) fc_die("%s %s: %s", origin, keyvalue, err);
}

void config_validate(const Config *c, const char *origin) {
    if (c->frame_size % c->patch)
        fc_die("%s: frame_size %d is not a multiple of patch %d", origin, c->frame_size, c->patch);
    if (c->width % c->heads)
        fc_die("%s: width %d is not a multiple of heads %d", origin, c->width, c->heads);
    if (c->width % 4) fc_die("%s: width %d is not a multiple of 4 (the 2-D positions need it)", origin, c->width);
    if (c->freq_dim % 2) fc_die("%s: freq_dim %d is not even", origin, c->freq_dim);
    if (c->warmup_steps > c->steps) fc_die("%s: warmup_steps %d is more than steps %d", origin, c->warmup_steps, c->steps);
}

static void plan_text(const Config *c, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < c->slots && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s:%g", i ? " " : "", KIND_NAMES[c->slot_kind[i]],
                                 (double)c->slot_offset[i]);
}

int config_get(const Config *c, const char *key, char *buf, size_t len) {
    const KeyDef *k = find_key(key);
    if (!k) return 0;
    const char *p = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_INT: snprintf(buf, len, "%d", *(const int *)p); break;
    case KEY_LL: snprintf(buf, len, "%lld", *(const long long *)p); break;
    case KEY_DOUBLE: snprintf(buf, len, "%.17g", *(const double *)p); break;
    case KEY_PLAN: plan_text(c, buf, len); break;
    case KEY_ENUM: snprintf(buf, len, "%s", k->choices[*(const int *)p]); break;
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
