// cli.h: the option parser every command shares. Each command declares its options in a table;
// anything else on its command line is an error. A bad command line (a --set's key or value included)
// ends the program with status 2 and one line naming the command; a bad config file (load_config)
// with status 1.
#ifndef FRAMECHAIN_CLI_H
#define FRAMECHAIN_CLI_H

#include "base/config.h"

#define CLI_MAX_VALUES 1024  // values a repeatable option may be given (a shell loop of --input FILE)
// The longest argument taken: paths are joined with file names into buffers of PATH_MAX (4096), so a
// longer one is refused here rather than cut short there.
#define CLI_MAX_ARG 3800

typedef struct {
    const char *name;  // "--config"
    int takes_value;
    int repeatable;
    const char *value;                   // last value seen
    const char *values[CLI_MAX_VALUES];  // every value, for repeatable options
    int count;
} Opt;

// The command the messages name: "framechain <cmd>", or "framechain" for NULL (the default).
void cli_set_command(const char *cmd);
// The --device the command line names ("auto" where none): what inspect plans for, which runs on no device.
void cli_set_device(const char *device);
const char *cli_device(void);

// "<command>: <message> (see <command> --help)" on stderr, then exit with status 2.
void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// 1 when a looks like an option ("--", "--name", "-x"), which an option's value from the next argument
// may not be; "-3" and "-" are values.
int cli_is_option(const char *a);
// The value of option `name` at argv[*i] from the next argument, *i moved onto it; a usage error when
// there is none or it looks like an option (such a value goes as name=VALUE).
const char *option_value(int argc, char **argv, int *i, const char *name);
// Parse the one option at argv[i] (with its value: "--name=VALUE" or the next argument) into opts;
// returns the index of the last argument taken.
int parse_opt(int argc, char **argv, int i, Opt *opts);
// Parse argv[i..] into opts (ended by a {NULL} entry); positional arguments go to *positional (at
// most one allowed when positional != NULL). Returns 1 when --help was asked for (anywhere before "--",
// even after a bad option).
int parse_opts(int argc, char **argv, int i, Opt *opts, const char **positional);

// The declared option name (dies when it is not declared: a mistake in the command's table).
Opt *opt(Opt *opts, const char *name);
// The value of an option that must be given.
const char *required(Opt *opts, const char *name);

// Numbers from the command line, range-checked; a usage error names the flag otherwise.
long parse_whole(const char *flag, const char *text, long lo, long hi);
long parse_positive(const char *flag, const char *text, long max);
double parse_number(const char *flag, const char *text, double lo, double hi);
// parse_number over the open interval (0, 1): a fraction that leaves out neither none nor all.
double parse_fraction(const char *flag, const char *text);

// Load --config and apply every --set, in order; dies with one clear line on any problem.
Config load_config(Opt *opts);
// Apply every --set KEY=VALUE of opts to c, in order; a bad one is a usage error (status 2).
void apply_sets(Config *c, Opt *opts);
// Every config key with its default, as a config file would hold it.
void print_config_keys(void);

#endif
