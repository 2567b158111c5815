// cli.c: the option parser the commands share (see cli.h).
#include <ctype.h>
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

static char g_device[32] = "auto";

void cli_set_device(const char *device) { snprintf(g_device, sizeof g_device, "%s", device ? device : "auto"); }

const char *cli_device(void) { return g_device; }

void usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (!fc_messages_quiet()) {
        char line[8192];
        vsnprintf(line, sizeof line, fmt, ap);
        // a message that already names the help (an unknown key's) is not told it twice
        int named = strstr(line, "--help lists") != NULL;
        fprintf(stderr, "%s: %s%s%s%s%s\n", g_command, fc_message_origin_text(), line, named ? "" : " (see ",
                named ? "" : g_command, named ? "" : " --help)");
    }
    va_end(ap);
    fc_exit(2);
}

// ----------------------------------------------------------------------------
// options

int cli_is_option(const char *a) { return a[0] == '-' && (a[1] == '-' || isalpha((unsigned char)a[1])); }

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
    // main.c's options, which a command does not know: say where they go
    if (!o && (!strcmp(name, "--threads") || !strcmp(name, "--device")))
        usage_error("%s is framechain's option: give it before the command (framechain %s %s%s ...)", name, name,
                    name[2] == 't' ? "N" : "D", g_command + strlen("framechain"));
    if (!o) usage_error("unknown option '%s'", name);
    return o;
}

const char *option_value(int argc, char **argv, int *i, const char *name) {
    if (*i + 1 >= argc) usage_error("option %s needs a value", name);
    const char *next = argv[*i + 1];
    // a forgotten value would take the next option as a path ("--out --quiet"); negative numbers
    // ("-3") are not options, and reach their range check
    if (cli_is_option(next))
        usage_error("option %s needs a value (the next argument, %s, %s; write %s=%s for such a value)", name, next,
                    strcmp(next, "--") ? "is an option" : "ends the options", name, next);
    return argv[++*i];
}

int parse_opt(int argc, char **argv, int i, Opt *opts) {
    const char *a = argv[i];
    char name[64];
    Opt *o = find_opt(opts, a, name, sizeof name);
    const char *eq = strchr(a, '='), *value = NULL;
    if (o->takes_value) {
        value = eq ? eq + 1 : option_value(argc, argv, &i, name);
        if (!value[0]) usage_error("option %s needs a value (it was given an empty one)", name);
        if (strlen(value) > CLI_MAX_ARG)
            usage_error("option %s: a value of %zu characters ('%.40s...'): paths and values are limited to %d", name,
                        strlen(value), value, CLI_MAX_ARG);
    } else if (eq) {
        usage_error("option %s takes no value", name);
    }
    if (o->count && !o->repeatable) usage_error("option %s given twice", name);
    if (o->count >= CLI_MAX_VALUES) usage_error("option %s given more than %d times", name, CLI_MAX_VALUES);
    o->values[o->count++] = value;
    o->value = value ? value : "1";
    return i;
}

// -h or --help among argv[i..] (up to "--"), but not as the value of an option (the option's error
// then): help asked for is given whatever else is wrong on the line.
static int help_asked(int argc, char **argv, int i, const Opt *opts) {
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (a[0] != '-' || strchr(a, '=')) continue;
        for (const Opt *p = opts; p && p->name; p++)
            if (!strcmp(p->name, a) && p->takes_value) i++;
    }
    return 0;
}

int parse_opts(int argc, char **argv, int i, Opt *opts, const char **positional) {
    if (help_asked(argc, argv, i, opts)) return 1;
    int options_end = 0;  // after "--" every argument is a path, even one that starts with '-'
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!options_end && !strcmp(a, "--")) {
            options_end = 1;
            continue;
        }
        if (strlen(a) > CLI_MAX_ARG)
            usage_error("an argument of %zu characters ('%.40s...'): paths and values are limited to %d", strlen(a), a,
                        CLI_MAX_ARG);
        if (options_end || a[0] != '-' || a[1] == 0) {
            if (!positional) usage_error("unexpected argument '%s'", a);
            if (*positional) usage_error("unexpected second argument '%s'", a);
            *positional = a;
            continue;
        }
        i = parse_opt(argc, argv, i, opts);
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
    // strtol skips leading blanks; trailing ones are refused (*end), so leading ones are too
    if (isspace((unsigned char)text[0]) || end == text || *end || errno || v < lo || v > hi)
        usage_error("%s %s: expected a whole number from %ld to %ld", flag, text, lo, hi);
    return v;
}

long parse_positive(const char *flag, const char *text, long max) { return parse_whole(flag, text, 1, max); }

// text as a decimal number into *v: 0, or -1 (strtod also reads hexadecimal, 0x10 as 16, and words,
// infinity: neither is taken; nor a value past a double's range)
static int decimal(const char *text, double *v) {
    char *end;
    errno = 0;
    *v = strtod(text, &end) + 0.0;  // -0 as 0
    return end == text || *end || errno || strspn(text, "0123456789.eE+-") != strlen(text) ? -1 : 0;
}

double parse_number(const char *flag, const char *text, double lo, double hi) {
    double v;
    if (decimal(text, &v) || !(v >= lo && v <= hi))
        usage_error("%s %s: expected a number from %g to %g", flag, text, lo, hi);
    return v;
}

double parse_fraction(const char *flag, const char *text) {
    double v;
    if (decimal(text, &v) || !(v > 0 && v < 1))
        usage_error("%s %s: a fraction between 0 and 1, both excluded", flag, text);
    return v;
}

// ----------------------------------------------------------------------------
// the config

void print_config_keys(void) {
    Config c;
    config_defaults(&c);
    config_write(&c, stdout);
}

void apply_sets(Config *c, Opt *opts) {
    Opt *set = opt(opts, "--set");
    char err[CONFIG_MAX_LINE + 512];
    for (int i = 0; i < set->count; i++) {  // KEY=VALUE, in order: a key given again overrides (scripts build on a base)
        const char *kv = set->values[i], *eq = strchr(kv, '=');
        if (!eq || eq == kv) usage_error("--set %s: expected KEY=VALUE", kv);
        // a key or value of the command line: a bad command line (a config file's stays a runtime error)
        if (config_set_checked(c, kv, "--set", err, sizeof err)) usage_error("%s", err);
    }
}

Config load_config(Opt *opts) {
    Config c;
    config_defaults(&c);
    const char *path = required(opts, "--config");
    config_load(&c, path);
    apply_sets(&c, opts);
    Opt *set = opt(opts, "--set");
    char origin[4200];  // a value out of line may be the file's or a --set's
    snprintf(origin, sizeof origin, "%s%s", path, set->count ? " with its --set" : "");
    config_validate(&c, origin);
    return c;
}
