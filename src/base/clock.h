// clock.h: the one clock of the program, and durations as people read them.
#ifndef FRAMECHAIN_CLOCK_H
#define FRAMECHAIN_CLOCK_H

#include <stddef.h>

// Seconds on the monotonic clock: for intervals only (it does not jump when the date is set).
double fc_now_s(void);
// "42s", "3m07s", "5h12m"; "?" for a negative, NaN or absurd (over three years) duration, such as
// an ETA taken before any step was timed.
void fc_format_duration(char *buf, size_t len, double seconds);

#endif
