// clock.c: the monotonic clock and the duration format (clock.h).
#include "base/clock.h"

#include <stdio.h>
#include <time.h>

double fc_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fc_format_duration(char *buf, size_t len, double s) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
    else if (s < 60) snprintf(buf, len, "%.0fs", s);
    else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}
