// metrics_line.h: one line of a run's metrics.jsonl (the line train.c's write_metrics writes a step)
// read back: for plot's training figure, inspect of a run folder and train's check of where a run
// that cannot resume went before.
#ifndef FRAMECHAIN_METRICS_LINE_H
#define FRAMECHAIN_METRICS_LINE_H

#include <stddef.h>

// A flat JSON object of numbers (nan and inf as printf writes them are numbers that are not finite;
// other keys may hold strings, true, false or null) with a "step" that is a whole number in 0..INT_MAX.
// The values of keys[0..nkeys) into out (NAN when absent); 0, or -1 with why (one line, no path).
int metrics_line_read(const char *line, const char *const *keys, int nkeys, double *out, char *why, size_t whylen);

#endif
