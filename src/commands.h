// commands.h: the commands main.c dispatches to, one file each (src/cmd_*.c). Each gets its own
// name as argv[1], its options from argv[2] on, and the backend --device chose; it returns the exit
// status.
#ifndef FRAMECHAIN_COMMANDS_H
#define FRAMECHAIN_COMMANDS_H

#include "backend/backend.h"

typedef int (*CommandFn)(int argc, char **argv, const Backend *be);

int cmd_prepare(int argc, char **argv, const Backend *be);
int cmd_train(int argc, char **argv, const Backend *be);
int cmd_generate(int argc, char **argv, const Backend *be);
int cmd_eval(int argc, char **argv, const Backend *be);
int cmd_inspect(int argc, char **argv, const Backend *be);
int cmd_plot(int argc, char **argv, const Backend *be);
int cmd_score(int argc, char **argv, const Backend *be);
int cmd_autoencode(int argc, char **argv, const Backend *be);

#endif
