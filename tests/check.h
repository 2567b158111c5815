// check.h: the tests' reporting. Every check prints one "PASS name" or "FAIL name: why" line;
// tests/run_tests.sh counts them.
#ifndef FRAMECHAIN_TEST_CHECK_H
#define FRAMECHAIN_TEST_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// The program's FAIL count: one counter for all of its files (test_cuda is several), so weak (each
// file's definition is the same one).
__attribute__((weak)) int g_failed;

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

// The larger of a running worst error w and a new error e, a NaN (or a NaN among the values e came
// from) counting as infinitely bad: fmax(w, NaN) is w, so a NaN gradient would pass a tolerance.
static inline double worse(double w, double e) { return e <= w ? w : e == e ? e : 1.0 / 0.0; }

// The whole file at `path` (malloc'ed, with a NUL after the last byte), its length in *len; NULL
// when it cannot be opened or memory runs out.
static inline uint8_t *test_read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    *len = b && n > 0 ? fread(b, 1, (size_t)n, f) : 0;
    if (b) b[*len] = 0;
    fclose(f);
    return b;
}

#endif
