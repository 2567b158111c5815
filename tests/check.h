// check.h: the tests' reporting. Every check prints one "PASS name" or "FAIL name: why" line;
// tests/run_tests.sh counts them.
#ifndef FRAMECHAIN_TEST_CHECK_H
#define FRAMECHAIN_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int g_failed;

static void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s %s: ", ok ? "PASS" : "FAIL", name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    if (!ok) g_failed++;
}

#endif
