// registry.c: choosing a backend by name and listing what this build has.
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"

// Whether this machine has an NVIDIA driver at all (Linux, or WSL's /dev/dxg): asked before the CUDA
// library is opened. FRAMECHAIN_TEST_ASSUME_NVIDIA_DRIVER=1 answers yes (tests/cli/test_cli.sh: the
// library loads and answers without a driver, as CUDA does).
static int gpu_driver_present(void) {
    return !access("/proc/driver/nvidia/version", F_OK) || !access("/dev/nvidiactl", F_OK) ||
           !access("/dev/dxg", F_OK) || fc_test_hook("ASSUME_NVIDIA_DRIVER") == 1;
}

#ifdef FC_CUDA_LIB
// ----------------------------------------------------------------------------
// The CUDA backend is a shared library of its own (Makefile: libframechain_cuda.so, built from
// cuda/), opened the first time a command needs it: the CUDA runtime and cuBLAS take about 0.4 s and
// 200 MB to load, which a run on the CPU, and every command on a machine without an NVIDIA driver,
// should not pay. Programs linked with the CUDA objects themselves (the tests, the CUDA emulation)
// get those definitions, which take precedence over these weak ones at link time.

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

static void *g_cuda_lib;
static char g_cuda_why[PATH_MAX + 512];
static int g_cuda_device;  // backend_cuda_set_device's index, passed on when the library opens

// The library: FC_CUDA_LIB (the build's absolute path), else libframechain_cuda.so beside the
// program. NULL with the reason in *why when neither opens.
static void *cuda_lib(const char **why) {
    if (!g_cuda_lib && !g_cuda_why[0]) {
        g_cuda_lib = dlopen(FC_CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!g_cuda_lib) {
            char first[PATH_MAX + 256], exe[PATH_MAX], path[PATH_MAX + 32];
            snprintf(first, sizeof first, "%s", dlerror());
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            char *slash = n > 0 ? (exe[n] = 0, strrchr(exe, '/')) : NULL;
            if (slash) {
                *slash = 0;
                snprintf(path, sizeof path, "%s/libframechain_cuda.so", exe);
                g_cuda_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            }
            if (!g_cuda_lib)
                snprintf(g_cuda_why, sizeof g_cuda_why, "cannot load the CUDA backend: %s (hint: run make, which "
                         "builds it beside the program)", first);
        }
        void (*set_device)(int) = g_cuda_lib ? (void (*)(int))dlsym(g_cuda_lib, "backend_cuda_set_device") : NULL;
        if (set_device) set_device(g_cuda_device);
    }
    if (!g_cuda_lib && why) *why = g_cuda_why;
    return g_cuda_lib;
}

// The library's definition of `name`, or NULL (and why) when it cannot be had.
static void *cuda_fn(const char *name, const char **why) {
    void *lib = cuda_lib(why), *fn = lib ? dlsym(lib, name) : NULL;
    if (lib && !fn) {
        snprintf(g_cuda_why, sizeof g_cuda_why, "the CUDA backend's library has no %s: rebuild it (make)", name);
        if (why) *why = g_cuda_why;
    }
    return fn;
}

// Without a driver the runtime's own answer would be that the driver is too old: said plainly instead.
__attribute__((weak)) const Backend *backend_cuda_precision(int bf16, const char **why) {
    if (!g_cuda_lib && !gpu_driver_present()) {
        if (why) *why = "no NVIDIA driver on this machine (no /proc/driver/nvidia, /dev/nvidiactl or /dev/dxg)";
        return NULL;
    }
    const Backend *(*fn)(int, const char **) = (const Backend *(*)(int, const char **))cuda_fn(
        "backend_cuda_precision", why);
    return fn ? fn(bf16, why) : NULL;
}
__attribute__((weak)) const Backend *backend_cuda(const char **why) { return backend_cuda_precision(1, why); }
// Remembered, not a reason to open the library: train calls it on every run, the CPU's too.
__attribute__((weak)) void backend_cuda_set_device(int index) {
    g_cuda_device = index;
    void (*fn)(int) = g_cuda_lib ? (void (*)(int))dlsym(g_cuda_lib, "backend_cuda_set_device") : NULL;
    if (fn) fn(index);
}
__attribute__((weak)) int backend_cuda_nccl_start(int rank, int size, void (*share)(void *bytes, size_t n), char *err,
                                                  size_t errlen) {
    const char *why = NULL;
    int (*fn)(int, int, void (*)(void *, size_t), char *, size_t) =
        (int (*)(int, int, void (*)(void *, size_t), char *, size_t))cuda_fn("backend_cuda_nccl_start", &why);
    if (fn) return fn(rank, size, share, err, errlen);
    snprintf(err, errlen, "%s", why);
    return -1;
}
__attribute__((weak)) int backend_cuda_nccl_built(void) {
    int (*fn)(void) = (int (*)(void))cuda_fn("backend_cuda_nccl_built", NULL);
    return fn ? fn() : 0;
}
// The library's `name`, which must be there: the two below run only once NCCL has started.
static void *cuda_need(const char *name) {
    const char *why = NULL;
    void *fn = cuda_fn(name, &why);
    if (!fn) fc_die("%s", why);
    return fn;
}
__attribute__((weak)) void backend_cuda_nccl_sum(float *dev, size_t n) {
    ((void (*)(float *, size_t))cuda_need("backend_cuda_nccl_sum"))(dev, n);
}
__attribute__((weak)) void backend_cuda_nccl_sum_start(float *dev, size_t n) {
    ((void (*)(float *, size_t))cuda_need("backend_cuda_nccl_sum_start"))(dev, n);
}
__attribute__((weak)) void backend_cuda_nccl_sum_finish(void) {
    ((void (*)(void))cuda_need("backend_cuda_nccl_sum_finish"))();
}
__attribute__((weak)) void backend_cuda_nccl_gather(float *dev, const size_t *start) {
    ((void (*)(float *, const size_t *))cuda_need("backend_cuda_nccl_gather"))(dev, start);
}
__attribute__((weak)) void backend_cuda_set_attn_ds_cap(size_t bytes) {
    void (*fn)(size_t) = (void (*)(size_t))cuda_fn("backend_cuda_set_attn_ds_cap", NULL);
    if (fn) fn(bytes);
}
__attribute__((weak)) int backend_cuda_set_route(const char *name, int on) {
    int (*fn)(const char *, int) = (int (*)(const char *, int))cuda_fn("backend_cuda_set_route", NULL);
    return fn ? fn(name, on) : -1;
}
__attribute__((weak)) const char *backend_cuda_routes(void) {
    const char *(*fn)(void) = g_cuda_lib ? (const char *(*)(void))dlsym(g_cuda_lib, "backend_cuda_routes") : NULL;
    return fn ? fn() : "";
}
__attribute__((weak)) long backend_cuda_route_calls(const char *name) {
    long (*fn)(const char *) = (long (*)(const char *))cuda_fn("backend_cuda_route_calls", NULL);
    return fn ? fn(name) : -1;
}
__attribute__((weak)) size_t backend_cuda_fp8_scratch_seen(int reset) {
    size_t (*fn)(int) = (size_t (*)(int))cuda_fn("backend_cuda_fp8_scratch_seen", NULL);
    return fn ? fn(reset) : 0;
}
__attribute__((weak)) const char *backend_cuda_fp8_refusal(void) {
    const char *(*fn)(void) = (const char *(*)(void))cuda_fn("backend_cuda_fp8_refusal", NULL);
    return fn ? fn() : "";
}
__attribute__((weak)) void backend_cuda_fp8_probe(char *out, size_t n) {
    void (*fn)(char *, size_t) = (void (*)(char *, size_t))cuda_fn("backend_cuda_fp8_probe", NULL);
    if (fn) fn(out, n);
    else if (n) snprintf(out, n, "no CUDA backend loaded");
}

#else
// A CPU-only build: these answer. The CUDA emulation (tests/cuda/emu) defines the real ones, which
// take precedence at link time.
__attribute__((weak)) const Backend *backend_cuda_precision(int bf16, const char **why) {
    (void)bf16;
#ifdef FC_NO_CUDA_ASKED
    if (why) *why = "this build has no CUDA backend (it was built with NO_CUDA=1)";
#else
    if (why) *why = "this build has no CUDA backend (nvcc was not found when it was built)";
#endif
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
__attribute__((weak)) int backend_cuda_nccl_built(void) { return 0; }
__attribute__((weak)) void backend_cuda_nccl_sum(float *dev, size_t n) { (void)dev, (void)n; }
__attribute__((weak)) void backend_cuda_nccl_sum_start(float *dev, size_t n) { (void)dev, (void)n; }
__attribute__((weak)) void backend_cuda_nccl_sum_finish(void) {}
__attribute__((weak)) void backend_cuda_nccl_gather(float *dev, const size_t *start) { (void)dev, (void)start; }
__attribute__((weak)) void backend_cuda_set_attn_ds_cap(size_t bytes) { (void)bytes; }
__attribute__((weak)) int backend_cuda_set_route(const char *name, int on) { return (void)name, (void)on, -1; }
__attribute__((weak)) const char *backend_cuda_routes(void) { return ""; }
__attribute__((weak)) long backend_cuda_route_calls(const char *name) { return (void)name, -1; }
__attribute__((weak)) size_t backend_cuda_fp8_scratch_seen(int reset) { return (void)reset, 0; }
__attribute__((weak)) const char *backend_cuda_fp8_refusal(void) { return ""; }
__attribute__((weak)) void backend_cuda_fp8_probe(char *out, size_t n) {
    if (n) snprintf(out, n, "this build has no CUDA backend");
}
#endif

static const char *const DEVICES[] = {"cpu", "cuda", "cuda-fp32", "auto"};

int backend_device_known(const char *name) {
    for (size_t i = 0; i < sizeof DEVICES / sizeof DEVICES[0]; i++)
        if (!strcmp(name, DEVICES[i])) return 1;
    return 0;
}

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
        // a machine with a GPU's driver where the GPU cannot be used (the library not built or moved, a
        // driver too old, no GPU visible): said, not a silent run of a GPU preset on the CPU
        if (!be && gpu_driver_present())
            fc_warn("--device auto: this machine has an NVIDIA driver, but the CUDA backend cannot be used (%s): "
                    "running on the CPU (--device cuda would stop instead)", why);
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
