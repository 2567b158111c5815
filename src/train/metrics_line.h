// metrics_line.h: one line of a run's metrics.jsonl (the line train.c's write_metrics writes a step)
// read back: for plot's training figure, inspect of a run folder, train's cut-back of the file on a
// resume and its check of where a run that cannot resume went before.
#ifndef FRAMECHAIN_METRICS_LINE_H
#define FRAMECHAIN_METRICS_LINE_H

#include <stddef.h>

// A flat JSON object of numbers (nan and inf as printf writes them are numbers that are not finite;
// other keys may hold strings, true, false or null) with a "step" that is a whole number in 0..INT_MAX.
// The values of keys[0..nkeys) into out (NAN when absent); 0, or -1 with why (one line, no path).
int metrics_line_read(const char *line, const char *const *keys, int nkeys, double *out, char *why, size_t whylen);

// One line of the file as getline read it (len bytes) judged as a step's record: metrics_line_read, and
// a NUL byte in it (a power cut's zero-filled block) makes it none. A line that reads but lacks its
// newline, the file's last, counts: its object is whole (a line cut anywhere before its closing '}'
// does not read), so only the newline was lost and its step was logged. The one rule of train's
// cut-back of the file, train's check of how far a run went, inspect of a run folder and plot.
int metrics_line_record(const char *line, size_t len, const char *const *keys, int nkeys, double *out, char *why,
                        size_t whylen);

#endif
