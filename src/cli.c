// cli.c: the option parser the commands share (see cli.h).
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "base/config.h"
#include "cli.h"

static char g_command[64] = "framechain";

void cli_set_command(const char *cmd) {
    if (cmd) snprintf(g_command, sizeof g_command, "framechain %s", cmd);
    else snprintf(g_command, sizeof g_command, "framechain");
}

void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!fc_messages_quiet()) {
        fprintf(stderr, "%s: ", g_command);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, " (see %s --help)\n", g_command);
    }
    va_end(ap);
    fc_exit(2);
}

// ----------------------------------------------------------------------------
// options

// The declared option a (without any "=value") names; a usage error when there is none.
static Opt *find_opt(Opt *opts, const char *a, char *name, size_t size) {
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= size) len = size - 1;
    memcpy(name, a, len);
    name[len] = 0;
    Opt *o = NULL;
    for (Opt *p = opts; p && p->name; p++)
        if (!strcmp(p->name, name)) o = p;
    if (!o) usage_error("unknown option '%s'", name);
    return o;
}

int parse_opts(int argc, char **argv, int i, Opt *opts, const char **positional) {
    int options_end = 0;  // after "--" every argument is a path, even one that starts with '-'
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!options_end && !strcmp(a, "--")) {
            options_end = 1;
            continue;
        }
        if (!options_end && (!strcmp(a, "-h") || !strcmp(a, "--help"))) return 1;
        if (strlen(a) > CLI_MAX_ARG)
            usage_error("an argument of %zu characters ('%.40s...'): paths and values are limited to %d", strlen(a), a,
                        CLI_MAX_ARG);
        if (options_end || a[0] != '-' || a[1] == 0) {
            if (!positional) usage_error("unexpected argument '%s'", a);
            if (*positional) usage_error("unexpected second argument '%s'", a);
            *positional = a;
            continue;
        }
        char name[64];
        Opt *o = find_opt(opts, a, name, sizeof name);
        const char *eq = strchr(a, '='), *value = NULL;
        if (o->takes_value) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else usage_error("option %s needs a value", name);
            if (!value[0]) usage_error("option %s needs a value (it was given an empty one)", name);
            if (strlen(value) > CLI_MAX_ARG)
                usage_error("option %s: a value of %zu characters ('%.40s...'): paths and values are limited to %d",
                            name, strlen(value), value, CLI_MAX_ARG);
        } else if (eq) {
            usage_error("option %s takes no value", name);
        }
        if (o->count && !o->repeatable) usage_error("option %s given twice", name);
        if (o->count >= CLI_MAX_VALUES) usage_error("option %s given more than %d times", name, CLI_MAX_VALUES);
        o->values[o->count++] = value;
        o->value = value ? value : "1";
    }
    return 0;
}

Opt *opt(Opt *opts, const char *name) {
    for (Opt *p = opts; p->name; p++)
        if (!strcmp(p->name, name)) return p;
    fc_die("internal: option %s is not declared", name);
}

const char *required(Opt *opts, const char *name) {
    Opt *o = opt(opts, name);
    if (!o->count) usage_error("missing %s", name);
    return o->value;
}

// ----------------------------------------------------------------------------
// numbers

long parse_whole(const char *flag, const char *text, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < lo || v > hi)
        usage_error("%s %s: expected a whole number from %ld to %ld", flag, text, lo, hi);
    return v;
}

long parse_positive(const char *flag, const char *text, long max) { return parse_whole(flag, text, 1, max); }

double parse_number(const char *flag, const char *text, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    // decimal only: strtod also reads hexadecimal (0x10 as 16) and words (infinity)
    if (end == text || *end || errno || !(v >= lo && v <= hi) || strspn(text, "0123456789.eE+-") != strlen(text))
        usage_error("%s %s: expected a number from %g to %g", flag, text, lo, hi);
    return v;
}

// ----------------------------------------------------------------------------
// the config

void print_config_keys(void) {
    Config c;
    config_defaults(&c);
    config_write(&c, stdout);
}

Config load_config(Opt *opts) {
    Config c;
    config_defaults(&c);
    const char *path = required(opts, "--config");
    config_load(&c, path);
    Opt *set = opt(opts, "--set");
    for (int i = 0; i < set->count; i++) {  // KEY=VALUE, in order: a key given again overrides (scripts build on a base)
        const char *kv = set->values[i], *eq = strchr(kv, '=');
        if (!eq || eq == kv) usage_error("--set %s: expected KEY=VALUE", kv);
        config_set(&c, kv, "--set");
    }
    char origin[4200];  // a value out of line may be the file's or a --set's
    snprintf(origin, sizeof origin, "%s%s", path, set->count ? " with its --set" : "");
    config_validate(&c, origin);
    return c;
}
