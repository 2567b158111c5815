// registry.c: choosing a backend by name and listing what this build has.
#include <stddef.h>
#include <string.h>

#include "backend/registry.h"

// Without the CUDA backend's objects (a CPU-only build) these answer; cuda/backend_cuda.cu (or its
// CPU emulation, tests/cuda/emu) defines the real ones, which take precedence at link time.
__attribute__((weak)) const Backend *backend_cuda_precision(int bf16, const char **why) {
    (void)bf16;
    if (why) *why = "this build has no CUDA backend (nvcc was not found when it was built)";
    return NULL;
}
__attribute__((weak)) const Backend *backend_cuda(const char **why) { return backend_cuda_precision(1, why); }
__attribute__((weak)) void backend_cuda_set_device(int index) { (void)index; }
__attribute__((weak)) int backend_cuda_nccl_start(int rank, int size, void (*share)(void *bytes, size_t n), char *err,
                                                  size_t errlen) {
    (void)rank, (void)size, (void)share;
    snprintf(err, errlen, "this build has no CUDA backend");
    return -1;
}
__attribute__((weak)) void backend_cuda_nccl_sum(float *dev, size_t n) { (void)dev, (void)n; }
__attribute__((weak)) void backend_cuda_nccl_gather(float *dev, const size_t *start) { (void)dev, (void)start; }
__attribute__((weak)) void backend_cuda_set_attn_ds_cap(size_t bytes) { (void)bytes; }
__attribute__((weak)) int backend_cuda_set_route(const char *name, int on) { return (void)name, (void)on, -1; }
__attribute__((weak)) const char *backend_cuda_routes(void) { return ""; }

const Backend *backend_select(const char *name) {
    if (!strcmp(name, "cpu")) return backend_cpu();
    const char *why = NULL;
    if (!strcmp(name, "cuda") || !strcmp(name, "cuda-fp32")) {
        const Backend *be = backend_cuda_precision(!strcmp(name, "cuda"), &why);
        if (!be) fc_die("--device %s: %s", name, why);
        return be;
    }
    if (!strcmp(name, "auto")) {
        const Backend *be = backend_cuda(&why);
        return be ? be : backend_cpu();
    }
    fc_die("--device %s: unknown device (cpu, cuda, cuda-fp32 or auto)", name);
}

void backend_print_versions(FILE *out) {
    fprintf(out, "backends:\n  %s\n", backend_cpu()->describe());
    const char *why = NULL;
    const Backend *cuda = backend_cuda(&why);
    if (cuda) {
        fprintf(out, "  %s\n", cuda->describe());
        fprintf(out, "  %s\n", backend_cuda_precision(0, NULL)->describe());
    }
    else
        fprintf(out, "  cuda: not available: %s\n", why);
}
