// bench_gemm.c: the CPU's fp32 GEMM peak as OpenBLAS reaches it, the yardstick of make bench:
// sgemm on large square matrices with the given thread count, best of several runs, in GFLOP/s.
//
// OpenBLAS picks its kernels for the CPU when it loads, unless the environment names them
// (OPENBLAS_CORETYPE): the line says which it runs, since they can differ twofold on one machine.
//
// usage: build/bench_gemm [--threads N] [--size N] [--reps N]
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int n);
char *openblas_get_corename(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    int threads = 1, n = 2048, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gemm [--threads N] [--size N] [--reps N] (not %s)\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1 || n < 16 || reps < 1) {
        fprintf(stderr, "bench_gemm: --threads, --size and --reps must be positive (size at least 16)\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    size_t nn = (size_t)n * n;
    float *a = malloc(sizeof(float) * nn), *b = malloc(sizeof(float) * nn), *c = malloc(sizeof(float) * nn);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gemm: out of memory for three %dx%d matrices\n", n, n);
        return 1;
    }
    for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f, c[i] = 0;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {  // the first is a warm-up
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now() - t0;
        if (r > 0 && t < best) best = t;
    }
    const char *pinned = getenv("OPENBLAS_CORETYPE");
    printf("sgemm %dx%dx%d, %d thread%s: %.1f GFLOP/s (best of %d; OpenBLAS's %s kernels%s)\n", n, n, n, threads,
           threads == 1 ? "" : "s", 2.0 * n * n * (double)n / best / 1e9, reps, openblas_get_corename(),
           pinned && *pinned ? ", as OPENBLAS_CORETYPE names them" : ", chosen for this CPU");
    free(a), free(b), free(c);
    return 0;
}
